//! The wire of an exchange whose client is an HTTP/2 stream: the request body comes
//! from the stream's DATA frames, the response goes out as HEADERS, DATA and trailers.
//! To an HTTP/1.1 origin it writes the head `prepare` wrote and the body in holdfast's
//! framing, and reads the response as `h1` does; to an HTTP/2 origin it sends the
//! request as a stream, the body both ways at once (gRPC streams in both directions).
//! A stream that is a WebSocket (extended CONNECT) takes the paths in [`connect`], its
//! bytes moved by [`tunnel`]. It decides nothing: `exchange` does, from what
//! this reports.

mod connect;
mod tunnel;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use holdfast_h2::error::ErrorCode;
use http::{HeaderMap, Method, StatusCode};
use tokio::time::Instant;

use super::backlog;
use super::backlog::while_serving;
use super::body_copy::BodyCopy;
use super::error::{ClientBodyError, ProxyErrorKind};
use super::h1::{self, HeadOut};
use super::pace::Pace;
use super::retry::SendOutcome;
use super::stream_backlog::{self, Behind, Ending, ServeH2, StreamBacklog};
use super::transfer::{DownloadError, Downloaded, Upload};
use super::wire::{Attempt, H2OriginWire, ResponseStart, Wire};
use super::{pace_config, Outbound};
use crate::http1::body::Relay;
use crate::http1::encode::{self, BodyOut, ConnectionOut};
use crate::http1::response;
use crate::http1::Framing;
use crate::http2::convert;
use crate::http2::encode::OriginHead;
use crate::http2::fields::Fields;
use crate::http2::flow;
use crate::http2::halves::{RecvHalf, SendHalf};
use crate::http2::origin::{Error as H2Error, OriginResponse, RecvStream, SendRequest, SendStream};
use crate::http2::response as h2_response;
use crate::http2::session::{RequestBody, Responder, ResponseBody};
use crate::message::ResponseHead;
use crate::net::{self, Deadline, InBuf, Timer, WaitError};
use crate::spool::{Full, Spool};
use crate::upstream::{Lease, OriginConn};

/// One client stream's exchange.
pub(crate) struct H2Wire {
    respond: Responder,
    /// The request body, as the client streams it.
    body: RequestBody,
    timer: Timer,
    /// What was read from an HTTP/1.1 origin connection and not yet passed on.
    origin_buf: InBuf,
    /// The response head as the client gets it.
    head: H2Head,
    /// To an HTTP/2 origin: the request body still streaming when the response came.
    upload: Option<SendStream>,
    /// To an HTTP/2 origin: its response body.
    origin_body: Option<RecvStream>,
    /// The client reset the stream or did not take the response.
    client_failed: bool,
    /// A response the origin is done with and the client is not (response
    /// buffering). Boxed: only streams whose client fell behind have one.
    behind: Option<Box<Behind>>,
    /// The request body, read whole before it is sent (request buffering).
    request_body: Option<Box<Spool>>,
    /// The trailers of a body read whole beforehand ([`Wire::read_kept`]), sent after
    /// it to an HTTP/2 origin.
    kept_trailers: Option<HeaderMap>,
    /// How far the client's body was read, across tries.
    read: BodyRead,
    /// A piece of the client's body read and not yet wholly sent on when the
    /// origin's response head came first: it goes before the rest.
    in_hand: Option<InHand>,
    /// The trailers that ended the client's body, kept with its copy: a stream the
    /// origin refused sends them again after it.
    trailers_sent: Option<HeaderMap>,
    /// The stream is a WebSocket (extended CONNECT, see [`connect`]). Boxed: rare.
    websocket: Option<Box<connect::WebSocket>>,
}

/// How far a client's body was read.
#[derive(Default)]
struct BodyRead {
    /// Bytes, for the route's limit: counted once, however often a refused stream
    /// sends them again.
    bytes: u64,
    /// To its end (its last DATA frame or its trailers), whether or not all of it went
    /// on to the origin.
    ended: bool,
}

/// A piece of a client's body on its way to the origin.
struct InHand {
    data: Bytes,
    /// It ends the body.
    last: bool,
}

/// A response head for an HTTP/2 client.
#[derive(Default)]
struct H2Head {
    status: u16,
    headers: Fields,
}

impl HeadOut for H2Head {
    fn head(
        &mut self,
        resp: &response::Response<'_, '_>,
        _body: BodyOut,
        _conn: ConnectionOut,
        extra: &[u8],
    ) {
        self.status = resp.status;
        self.headers = crate::http2::encode::client_response(resp, extra);
    }
}

impl H2Wire {
    pub(crate) fn new(respond: Responder, body: RequestBody) -> Self {
        H2Wire {
            respond,
            body,
            timer: Timer::new(),
            origin_buf: InBuf::new(net::ORIGIN_BUF),
            head: H2Head::default(),
            upload: None,
            origin_body: None,
            client_failed: false,
            behind: None,
            request_body: None,
            kept_trailers: None,
            read: BodyRead::default(),
            in_hand: None,
            trailers_sent: None,
            websocket: None,
        }
    }

    /// Sends `100 Continue` once to a client that waits for it before its body.
    fn answer_continue(&mut self, out: &mut Outbound) {
        if std::mem::take(&mut out.progress.expect_continue) {
            let _ = self.respond.send_informational(StatusCode::CONTINUE.as_u16());
        }
    }

    /// Starts the response: its head, ending the stream when there is no body.
    fn start_response(
        &mut self,
        status: u16,
        headers: Fields,
        end: bool,
    ) -> io::Result<ResponseBody> {
        self.respond.send_response(status, &headers, end)
    }
}

impl Drop for H2Wire {
    fn drop(&mut self) {
        self.origin_buf.release();
    }
}

/// Resolves when the client resets the stream (or its connection is gone).
async fn client_reset(respond: &mut Responder) {
    std::future::poll_fn(|cx| respond.poll_reset(cx).map(|_| ())).await
}

/// The attempt of a stream its client reset: nobody waits for the response.
fn abandoned() -> Attempt {
    Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Closed))
}

/// Why the client's body stopped: its own failure or delay.
fn client_failed(e: io::Error) -> Attempt {
    if e.kind() == io::ErrorKind::TimedOut {
        Attempt::Failed(ProxyErrorKind::ClientTimeout)
    } else {
        Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Io(e)))
    }
}

/// Counts `n` more body bytes against the route's limit.
fn count_body(total: &mut u64, n: usize, max: Option<u64>) -> Result<(), Attempt> {
    *total = total.saturating_add(n as u64);
    match max {
        Some(max) if *total > max => Err(Attempt::Failed(ProxyErrorKind::BodyTooLarge(max))),
        _ => Ok(()),
    }
}

impl Wire for H2Wire {
    async fn client_gone(&mut self) {
        client_reset(&mut self.respond).await;
    }

    async fn buffer_request(&mut self, out: &mut Outbound) -> Result<(), Attempt> {
        self.answer_continue(out);
        let stall = out.route.timeouts.read;
        let chunked = out.request.framing.for_http1() == Framing::Chunked;
        let mut spool = Box::new(out.route.site.spools.spool_for(out.request.framing.length()));
        let full = |e: Full| Attempt::Failed(e.into());
        let mut total = 0u64;
        // The body as `upload_h1` would write it to an HTTP/1.1 origin: chunked when the
        // client declared no length, with its trailers.
        while let Some(data) = flow::next(&mut self.body, stall).await.map_err(client_failed)? {
            count_body(&mut total, data.len(), out.route.max_body)?;
            if !data.is_empty() {
                let mut size_line = [0u8; 18];
                let framed: [&[u8]; 3] = match chunked {
                    true => encode::chunk(&data, &mut size_line),
                    false => [&data, b"", b""],
                };
                spool.push(&framed).await.map_err(full)?;
            }
            flow::release(&mut self.body, data.len());
        }
        if chunked {
            let trailers = flow::trailers(&mut self.body, stall).await.map_err(client_failed)?;
            let end = convert::h1_chunked_end(trailers.as_ref());
            spool.push(&[&end]).await.map_err(full)?;
        }
        spool.settle().await;
        out.progress.body_consumed = true;
        self.request_body = Some(spool);
        Ok(())
    }

    async fn read_kept(&mut self, out: &mut Outbound, len: u64) -> Result<Vec<u8>, Attempt> {
        self.answer_continue(out);
        let stall = out.route.timeouts.read;
        let want = usize::try_from(len).unwrap_or(usize::MAX);
        let mut kept = Vec::with_capacity(want.min(64 * 1024));
        while let Some(data) = flow::next(&mut self.body, stall).await.map_err(client_failed)? {
            kept.extend_from_slice(&data);
            flow::release(&mut self.body, data.len());
        }
        if kept.len() != want {
            return Err(Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Closed)));
        }
        // HTTP/2 allows trailers after a body of declared length; they are kept with
        // it for an HTTP/2 origin (an HTTP/1.1 origin gets the length, and no trailer
        // section to put them in).
        let trailers = flow::trailers(&mut self.body, stall).await.map_err(client_failed)?;
        self.kept_trailers = trailers.map(convert::passable_trailers).filter(|t| !t.is_empty());
        Ok(kept)
    }

    async fn attempt(
        &mut self,
        out: &mut Outbound,
        conn: &mut OriginConn,
        head: &[u8],
        kept: Option<&[u8]>,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let limit = out.route.timeouts.response_header;
        let stream = &mut conn.stream;
        h1::send_head(stream, head, kept, limit).await?;
        let sent_at = if let Some(mut body) = self.request_body.take() {
            h1::send_buffered(stream, &mut body, limit).await?;
            Instant::now()
        } else if out.progress.body_consumed {
            out.record.started()
        } else {
            self.answer_continue(out);
            self.upload_h1(out, stream).await?;
            out.progress.body_consumed = true;
            Instant::now()
        };
        let mut deadline = Deadline::on(&mut self.timer, net::later(sent_at, limit));
        let head = h1::read_response_head(
            out,
            Upload::Complete,
            stream,
            &mut self.origin_buf,
            &mut deadline,
            &mut self.head,
        );
        // A client that resets the stream meanwhile ends the exchange: the origin
        // connection closes instead of finishing work nobody waits for.
        let start = tokio::select! {
            biased;
            start = head => start?,
            () = client_reset(&mut self.respond) => return Err(abandoned()),
        };
        self.check_switch(&start)?;
        Ok((Upload::Complete, start))
    }

    fn forget_origin(&mut self) {
        self.origin_buf.consume(self.origin_buf.len());
    }

    async fn relay(
        &mut self,
        out: &Outbound,
        conn: &mut OriginConn,
        start: &ResponseStart,
    ) -> Result<Downloaded, DownloadError> {
        let relayed = self.relay_h1(out, conn, start).await;
        self.note(&relayed);
        relayed
    }

    fn origin_has_extra(&self) -> bool {
        !self.origin_buf.is_empty()
    }

    fn is_behind(&self) -> bool {
        self.behind.is_some()
    }

    async fn finish(&mut self, out: &Outbound) -> Result<u64, DownloadError> {
        let Some(behind) = self.behind.take() else { return Ok(0) };
        let Behind { mut client, mut to, ending } = *behind;
        to.origin_done(out.route.timeouts.client_buffered).await;
        let finished = match to.catch_up(&mut client).await {
            Ok(()) => stream_backlog::end(&mut client, ending),
            Err(e) => Err(e),
        };
        finished.map(|()| to.bytes()).map_err(|e| {
            // A client that took nothing of a response held for it gives up the stream;
            // one that does so to many streams loses its connection.
            client.send_reset(ErrorCode::Cancel);
            self.client_failed = true;
            DownloadError::Client { error: WaitError::Io(e), bytes: to.bytes(), remaining: None }
        })
    }

    async fn switch(&mut self, _out: &Outbound) -> bool {
        // Only a WebSocket asks an origin to switch protocols (`Upgrade` is not HTTP/2).
        self.answer_switch()
    }

    async fn tunnel(&mut self, conn: OriginConn, stall: Duration) {
        self.tunnel_h1(conn, stall).await;
    }

    fn drain_later(&self, lease: Lease, remaining: u64) {
        h1::drain_later(lease, remaining);
    }

    async fn answer_local(
        &mut self,
        out: &Outbound,
        status: u16,
        text: &str,
        extra: &[u8],
        _keep: bool,
    ) -> bool {
        let mut headers = convert::local_headers(extra, text.len());
        convert::add_lines(&mut headers, out.hsts(|| false));
        let head_only = text.is_empty() || out.request.method == Method::HEAD;
        let Ok(mut stream) = self.start_response(status, headers, head_only) else {
            self.client_failed = true;
            return false;
        };
        if head_only {
            return true;
        }
        let stall = out.route.timeouts.read;
        let sent = flow::send(&mut stream, convert::text_body(text), true, stall).await.is_ok();
        self.client_failed |= !sent;
        sent
    }
}

impl H2Wire {
    /// Relays an HTTP/1.1 origin's response (head, then body) to the client.
    async fn relay_h1(
        &mut self,
        out: &Outbound,
        conn: &mut OriginConn,
        start: &ResponseStart,
    ) -> Result<Downloaded, DownloadError> {
        let site = &out.route.site;
        let stall = out.route.timeouts.read;
        let headers = std::mem::take(&mut self.head.headers);
        let empty = matches!(start.framing, Framing::Empty | Framing::Length(0));
        let mut client = self.start_response(start.status, headers, empty).map_err(|e| {
            DownloadError::Client { error: WaitError::Io(e), bytes: 0, remaining: None }
        })?;
        if empty {
            return Ok(Downloaded { bytes: 0, extra: !self.origin_buf.is_empty() });
        }
        let spools = start.buffer.then(|| Arc::clone(&site.spools));
        let pace = Pace::new(pace_config(site), stall);
        let mut to = StreamBacklog::new(pace, stall, spools).expecting(start.framing.length());
        // The origin's trailer section is bounded as its head is (RFC 9112, 7.1.2).
        let mut relay = Relay::new(start.framing, false, response::MAX_HEAD_BYTES);
        loop {
            if !self.origin_buf.is_empty() {
                // A malformed body, or a trailer section past the bound, ends the
                // stream with an error, as a failed origin does.
                let piece = relay.decode(self.origin_buf.data_mut()).map_err(|e| {
                    client.send_reset(ErrorCode::InternalError);
                    let error = io::Error::other(e.to_string());
                    DownloadError::Upstream { error, bytes: to.bytes() }
                })?;
                let payload = self.origin_buf.data().get(..piece.payload).unwrap_or_default();
                let data = Bytes::copy_from_slice(payload);
                self.origin_buf.consume(piece.used);
                let to_client = |e, to: &StreamBacklog| DownloadError::Client {
                    error: WaitError::Io(e),
                    bytes: to.bytes(),
                    remaining: relay.remaining(),
                };
                if piece.done {
                    // A chunked body's trailers (gRPC's `grpc-status`, say) end the
                    // stream in a HEADERS frame of their own (RFC 9113, 8.1); without
                    // any, the last DATA frame ends it.
                    let trailers = convert::trailers_from_h1(relay.trailers());
                    let ending = match trailers.is_empty() {
                        true => Ending::Data,
                        false => Ending::Trailers(trailers),
                    };
                    let sent = to.send_last(&mut client, data, ending).await;
                    let waiting = sent.map_err(|e| to_client(e, &to))?;
                    let extra = !self.origin_buf.is_empty();
                    return Ok(self.done_or_behind(client, to, waiting, extra));
                }
                to.send(&mut client, data).await.map_err(|e| to_client(e, &to))?;
                // A partial chunk line stays in the buffer until more arrives.
                if piece.used > 0 && !self.origin_buf.is_empty() {
                    continue;
                }
            }
            let read = next_from_h1(&mut self.origin_buf, conn, &mut client, &mut to, stall).await;
            let read = read.map_err(|e| DownloadError::Client {
                error: WaitError::Io(e),
                bytes: to.bytes(),
                remaining: relay.remaining(),
            })?;
            match read {
                Ok(0) if start.framing == Framing::UntilClose => {
                    let sent = to.send_last(&mut client, Bytes::new(), Ending::Data).await;
                    let waiting = sent.map_err(|e| DownloadError::Client {
                        error: WaitError::Io(e),
                        bytes: to.bytes(),
                        remaining: None,
                    })?;
                    return Ok(self.done_or_behind(client, to, waiting, false));
                }
                Ok(0) => {
                    let error = io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the origin closed the connection before the body ended",
                    );
                    client.send_reset(ErrorCode::InternalError);
                    return Err(DownloadError::Upstream { error, bytes: to.bytes() });
                }
                Ok(_) => {}
                Err(e) => {
                    client.send_reset(ErrorCode::InternalError);
                    return Err(DownloadError::Upstream { error: e.into_io(), bytes: to.bytes() });
                }
            }
        }
    }

    /// A download whose origin is done: finished, or with bytes and the stream's end
    /// (`waiting`) kept for [`Wire::finish`].
    fn done_or_behind(
        &mut self,
        client: ResponseBody,
        to: StreamBacklog,
        waiting: Option<Ending>,
        extra: bool,
    ) -> Downloaded {
        let bytes = to.bytes();
        if let Some(ending) = waiting {
            self.behind = Some(Box::new(Behind { client, to, ending }));
        }
        Downloaded { bytes, extra }
    }

    /// Remembers whether the client failed to take a response.
    fn note(&mut self, relayed: &Result<Downloaded, DownloadError>) {
        self.client_failed |= matches!(relayed, Err(DownloadError::Client { .. }));
    }

    /// Whether the client reset the stream or failed to take the response: a client
    /// that does so to many streams is cut off.
    pub(crate) fn client_failed(&self) -> bool {
        self.client_failed
    }

    /// Writes the client's body to an HTTP/1.1 origin in holdfast's framing (chunked
    /// when the client declared no length, with its trailers), within the route's
    /// body limit.
    async fn upload_h1(&mut self, out: &Outbound, stream: &mut net::Stream) -> Result<(), Attempt> {
        let timeouts = &out.route.timeouts;
        let (client_stall, origin_stall) = (timeouts.read, timeouts.response_header);
        let chunked = out.request.framing.for_http1() == Framing::Chunked;
        let origin_failed = |(_, e): (u64, WaitError)| h1::origin_write_failed(e, origin_stall);
        let mut total = 0u64;
        while let Some(data) =
            flow::next(&mut self.body, client_stall).await.map_err(client_failed)?
        {
            count_body(&mut total, data.len(), out.route.max_body)?;
            if data.is_empty() {
                continue;
            }
            let written = h1::write_payload(stream, &data, chunked, origin_stall).await;
            written.map_err(origin_failed)?;
            flow::release(&mut self.body, data.len());
        }
        // The client's trailers go in the chunked body's trailer section (RFC 9112,
        // 7.1.2). A body sent with the client's Content-Length has no trailer section:
        // its trailers, if it sends any, are not read and go nowhere.
        if chunked {
            let trailers =
                flow::trailers(&mut self.body, client_stall).await.map_err(client_failed)?;
            let end = convert::h1_chunked_end(trailers.as_ref());
            net::write_all(stream, &[&end], origin_stall).await.map_err(origin_failed)?;
        }
        Ok(())
    }
}

/// What an upload that failed with `error` means, asked of the stream itself: the
/// origin's response, if it sent one before it stopped taking the body (RST_STREAM
/// after a complete response, RFC 9113, 8.1); [`Attempt::Refused`], if the origin
/// refused the stream, wherever its body was; else a stream that may have reached it.
pub(super) async fn upload_failed(
    response: impl std::future::Future<Output = Result<OriginResponse, H2Error>>,
    limit: Duration,
    error: io::Error,
) -> Result<OriginResponse, Attempt> {
    match tokio::time::timeout(limit, response).await {
        Ok(Ok(answered)) => Ok(answered),
        Ok(Err(e)) if flow::refused(&e) => Err(stream_failed(e)),
        Ok(Err(_)) | Err(_) => Err(Attempt::Closed { outcome: SendOutcome::MaybeReceived, error }),
    }
}

/// Sends on a new stream the body that went on a refused one, from its start: what
/// `copy` holds, then, once the body had ended (`ended`), the `trailers` that ended
/// it or the end of the stream.
pub(super) async fn send_again(
    upload: &mut SendStream,
    copy: &BodyCopy,
    trailers: Option<&HeaderMap>,
    ended: bool,
    stall: Duration,
) -> io::Result<()> {
    let mut chunks = copy.chunks().peekable();
    while let Some(chunk) = chunks.next() {
        let last = ended && trailers.is_none() && chunks.peek().is_none();
        flow::send(upload, chunk, last, stall).await?;
    }
    match trailers {
        _ if !ended => Ok(()),
        Some(trailers) => upload.send_trailers(trailers.clone()).map_err(H2Error::into_io),
        None if copy.len() == 0 => upload.send_data(Bytes::new(), true).map_err(H2Error::into_io),
        None => Ok(()),
    }
}

/// Sends a body read whole beforehand, and the trailers that ended it, ending the
/// stream.
async fn send_kept(
    upload: &mut SendStream,
    kept: &[u8],
    trailers: Option<&HeaderMap>,
    stall: Duration,
) -> io::Result<()> {
    flow::send(upload, Bytes::copy_from_slice(kept), trailers.is_none(), stall).await?;
    match trailers {
        Some(trailers) => upload.send_trailers(trailers.clone()).map_err(H2Error::into_io),
        None => Ok(()),
    }
}

/// What finished first while a request body streamed to an HTTP/2 origin.
enum First {
    Pumped(Result<(), Attempt>),
    Answered(Result<OriginResponse, H2Error>),
}

/// Where [`pump`] keeps what it sends, so a refused stream can send it again.
struct Keep<'a> {
    copy: &'a mut BodyCopy,
    trailers: &'a mut Option<HeaderMap>,
}

/// Streams the client's body to an HTTP/2 origin until it ends (trailers included),
/// within the route's body limit; `read` says how far the client's body was read.
/// With `keep`, what goes is copied first.
///
/// The pump may be dropped midway, when the response head comes first: what it read
/// and had not sent yet waits in `in_hand`, and a pump started again sends it first.
async fn pump(
    body: &mut RequestBody,
    to: &mut SendStream,
    read: &mut BodyRead,
    in_hand: &mut Option<InHand>,
    max: Option<u64>,
    stall: Duration,
    mut keep: Option<Keep<'_>>,
) -> Result<(), Attempt> {
    let closed = |error| Attempt::Closed { outcome: SendOutcome::MaybeReceived, error };
    // Each round sends one piece; bounded by the body.
    loop {
        if let Some(piece) = in_hand.as_mut() {
            flow::send_from(to, &mut piece.data, piece.last, stall).await.map_err(closed)?;
            let last = piece.last;
            *in_hand = None;
            if last {
                return Ok(());
            }
        }
        let Some(data) = flow::next(body, stall).await.map_err(client_failed)? else { break };
        count_body(&mut read.bytes, data.len(), max)?;
        if let Some(keep) = keep.as_mut() {
            keep.copy.push(&data);
        }
        // The window goes back as the bytes are taken into `in_hand`: they are
        // holdfast's to send from here.
        flow::release(body, data.len());
        // The client's last DATA frame ends the origin's stream too, instead of an
        // empty frame after it.
        let last = body.is_end_stream();
        read.ended = last;
        *in_hand = Some(InHand { data, last });
    }
    // Trailers go on in a HEADERS frame that ends the stream (RFC 9113, 8.1), less
    // the fields that may not be trailers.
    let trailers = flow::trailers(body, stall).await.map_err(client_failed)?;
    read.ended = true;
    let end = match trailers.map(convert::passable_trailers) {
        Some(trailers) if !trailers.is_empty() => {
            if let Some(keep) = keep.as_mut() {
                *keep.trailers = Some(trailers.clone());
            }
            to.send_trailers(trailers)
        }
        Some(_) | None => to.send_data(Bytes::new(), true),
    };
    end.map_err(|e| closed(e.into_io()))
}

impl H2OriginWire for H2Wire {
    async fn attempt_h2(
        &mut self,
        out: &mut Outbound,
        mut send: SendRequest,
        head: &OriginHead,
        kept: Option<&[u8]>,
        copy: &mut BodyCopy,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        if self.websocket.is_some() {
            // Boxed, as every rare path.
            return Box::pin(self.websocket_attempt(out, send, head)).await;
        }
        // A try after a refused one sends what was read from the copy, and all of it
        // once the client's body ended.
        self.in_hand = None;
        out.progress.body_consumed |= self.read.ended;
        let streaming = !out.progress.body_consumed;
        // After a refused try, what went on it goes first.
        let again = kept.is_none() && (copy.len() > 0 || self.trailers_sent.is_some());
        let end = kept.is_none() && !streaming && !again;
        let (response, mut upload) = send.send_request(head, end).map_err(stream_not_opened)?;
        let stall = out.route.timeouts.read;
        let limit = out.route.timeouts.response_header;
        let mut response = std::pin::pin!(response);
        let sent = match kept {
            Some(kept) => send_kept(&mut upload, kept, self.kept_trailers.as_ref(), stall).await,
            None if again => {
                let trailers = self.trailers_sent.as_ref();
                send_again(&mut upload, copy, trailers, !streaming, stall).await
            }
            None => Ok(()),
        };
        if let Err(error) = sent {
            let answered = upload_failed(response, limit, error).await?;
            return self.start_h2(out, answered, None);
        }
        if streaming {
            self.answer_continue(out);
            let max = out.route.max_body;
            let first = {
                let keep = Keep { copy: &mut *copy, trailers: &mut self.trailers_sent };
                let (body, read, in_hand) = (&mut self.body, &mut self.read, &mut self.in_hand);
                let pump = pump(body, &mut upload, read, in_hand, max, stall, Some(keep));
                tokio::select! {
                    biased;
                    answered = &mut response => First::Answered(answered),
                    done = pump => First::Pumped(done),
                }
            };
            match first {
                First::Pumped(Ok(())) => {}
                First::Pumped(Err(Attempt::Closed { error, .. })) => {
                    let answered = upload_failed(response, limit, error).await?;
                    return self.start_h2(out, answered, None);
                }
                First::Pumped(Err(failed)) => return Err(failed),
                // The response came first: the body goes on streaming while it is
                // relayed. Or the origin refused the stream mid-body.
                First::Answered(answered) => {
                    let answered = answered.map_err(stream_failed)?;
                    return self.start_h2(out, answered, Some(upload));
                }
            }
            out.progress.body_consumed = true;
        }
        // A client that resets the stream meanwhile ends the exchange: the origin's
        // stream is reset too (CANCEL) when the response future drops.
        let waited = tokio::select! {
            biased;
            waited = tokio::time::timeout(limit, response) => waited,
            () = client_reset(&mut self.respond) => return Err(abandoned()),
        };
        match waited {
            Err(_) => Err(Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit))),
            Ok(Err(e)) => Err(stream_failed(e)),
            Ok(Ok(answered)) => self.start_h2(out, answered, None),
        }
    }

    async fn relay_h2(
        &mut self,
        out: &Outbound,
        start: &ResponseStart,
    ) -> Result<Downloaded, DownloadError> {
        if self.websocket.is_some() {
            if let Some(tunnelled) = Box::pin(self.websocket_relay(out, start)).await {
                return tunnelled;
            }
        }
        let stall = out.route.timeouts.read;
        let Some(mut origin) = self.origin_body.take() else {
            return Ok(Downloaded { bytes: 0, extra: false });
        };
        let headers = std::mem::take(&mut self.head.headers);
        let end = origin.is_end_stream();
        let mut client = self.start_response(start.status, headers, end).map_err(|e| {
            DownloadError::Client { error: WaitError::Io(e), bytes: 0, remaining: None }
        })?;
        let site = &out.route.site;
        let spools = start.buffer.then(|| Arc::clone(&site.spools));
        let pace = Pace::new(pace_config(site), stall);
        let mut to = StreamBacklog::new(pace, stall, spools).expecting(start.framing.length());
        let download = relay_stream(&mut origin, &mut client, &mut to, end, stall);
        let upload = async {
            if let Some(mut upload) = self.upload.take() {
                let max = out.route.max_body;
                let (body, read, in_hand) = (&mut self.body, &mut self.read, &mut self.in_hand);
                if pump(body, &mut upload, read, in_hand, max, stall, None).await.is_err() {
                    upload.send_reset(ErrorCode::Cancel);
                }
            }
        };
        let (downloaded, ()) = tokio::join!(download, upload);
        let downloaded = downloaded.map(|waiting| self.done_or_behind(client, to, waiting, false));
        self.note(&downloaded);
        downloaded
    }
}

impl H2Wire {
    /// Keeps an HTTP/2 origin's response for [`H2OriginWire::relay_h2`] and says how it
    /// starts.
    fn start_h2(
        &mut self,
        out: &Outbound,
        answered: OriginResponse,
        upload: Option<SendStream>,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let OriginResponse { status, fields: mut headers, body } = answered;
        let start = read_h2_head(out, status, &headers, body.is_end_stream(), |_, start| start)?;
        // An HTTP/2 head goes on to an HTTP/2 client as it came (its only field not
        // passed on, `content-length`, is one the framing keeps as it is), with HSTS.
        let has_hsts = headers.contains("strict-transport-security");
        convert::add_lines(&mut headers, out.hsts(|| has_hsts));
        self.head = H2Head { status: start.status, headers };
        self.origin_body = Some(body);
        self.upload = upload;
        Ok((Upload::Complete, start))
    }
}

/// Reads an HTTP/2 origin's response head (`status`, `fields`; `ended`: its HEADERS ended the
/// stream) into the response model, checked as any response head is, and gives it to
/// `then` with how the response starts ([`start_from`]).
pub(super) fn read_h2_head<T>(
    out: &Outbound,
    status: u16,
    fields: &Fields,
    ended: bool,
    then: impl FnOnce(&ResponseHead<'_, '_>, ResponseStart) -> T,
) -> Result<T, Attempt> {
    let fields = fields.headers();
    let head_request = out.request.method == Method::HEAD;
    let head = h2_response::decode(status, &fields, ended, head_request)
        .map_err(|e| Attempt::Failed(ProxyErrorKind::BadResponse(e)))?;
    let start = start_from(out, &head);
    Ok(then(&head, start))
}

/// How an origin's response starts over HTTP/2, for the exchange and the client: from
/// its head in the response model.
pub(super) fn start_from(out: &Outbound, head: &ResponseHead<'_, '_>) -> ResponseStart {
    let body_out = BodyOut::choose(head.framing, out.request.version);
    let keep = out.request.keep_alive && body_out != BodyOut::CloseDelimited;
    let value = |name: &str| {
        head.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value)
    };
    let buffer = out.route.buffering.responses
        && !backlog::must_stream(value("content-type"), value("x-accel-buffering"));
    ResponseStart {
        status: head.status,
        framing: head.framing,
        body_out,
        reusable: true,
        declares_length: head.declares_length,
        limits: holdfast_pool::OriginLimits::default(),
        connection: ConnectionOut::for_client(keep, out.request.version),
        buffer,
    }
}

/// `send_request` failed: no stream was opened, so not a byte of the request reached
/// the origin, and it may go again whatever its method (on another connection).
pub(super) fn stream_not_opened(e: H2Error) -> Attempt {
    match stream_failed(e) {
        Attempt::Closed { error, .. } => Attempt::Closed { outcome: SendOutcome::Unsent, error },
        other => other,
    }
}

/// What a stream that failed before its response means for the attempt: a refused one
/// ([`flow::refused`]) never reached the origin, wherever its body was; others may
/// have, and are `retry`'s to judge.
pub(super) fn stream_failed(e: H2Error) -> Attempt {
    let goaway = e.is_go_away();
    if flow::refused(&e) {
        Attempt::Refused { goaway, error: e.into_io() }
    } else {
        Attempt::Closed { outcome: SendOutcome::MaybeReceived, error: e.into_io() }
    }
}

/// Relays an HTTP/2 origin's response body and trailers to an HTTP/2 client, through
/// `to`; the stream's end when it waits behind bytes the client has not taken.
async fn relay_stream(
    origin: &mut RecvStream,
    client: &mut ResponseBody,
    to: &mut StreamBacklog,
    ended: bool,
    stall: Duration,
) -> Result<Option<Ending>, DownloadError> {
    if ended {
        return Ok(None);
    }
    let to_client = |e, to: &StreamBacklog| DownloadError::Client {
        error: WaitError::Io(e),
        bytes: to.bytes(),
        remaining: None,
    };
    loop {
        let next = next_from_h2(origin, client, to, stall).await.map_err(|e| to_client(e, to))?;
        let data = match next {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(error) => {
                client.send_reset(ErrorCode::InternalError);
                return Err(DownloadError::Upstream { error, bytes: to.bytes() });
            }
        };
        let n = data.len();
        // The origin's last DATA frame ends the client's stream too, instead of an
        // empty frame after it. Its window goes back once holdfast has the bytes:
        // sent on, or held for the client.
        if origin.is_end_stream() {
            let waiting = to.send_last(client, data, Ending::Data).await;
            flow::release(origin, n);
            return waiting.map_err(|e| to_client(e, to));
        }
        to.send(client, data).await.map_err(|e| to_client(e, to))?;
        flow::release(origin, n);
    }
    let trailers = match flow::trailers(origin, stall).await {
        Ok(t) => t,
        Err(error) => {
            client.send_reset(ErrorCode::InternalError);
            return Err(DownloadError::Upstream { error, bytes: to.bytes() });
        }
    };
    // Trailers go on in a HEADERS frame that ends the stream (RFC 9113, 8.1), less
    // the fields that may not be trailers.
    let ending = match trailers.map(convert::passable_trailers) {
        Some(t) if !t.is_empty() => Ending::Trailers(t),
        Some(_) | None => Ending::Data,
    };
    to.send_last(client, Bytes::new(), ending).await.map_err(|e| to_client(e, to))
}

/// The next bytes of an HTTP/1.1 origin's response into `buf`, within `stall`; the
/// client's stream is given what waits for it meanwhile. The outer error is the
/// client's.
async fn next_from_h1(
    buf: &mut InBuf,
    conn: &mut OriginConn,
    client: &mut ResponseBody,
    to: &mut StreamBacklog,
    stall: Duration,
) -> io::Result<Result<usize, WaitError>> {
    let mut deadline = Deadline::after(stall);
    let next = buf.fill(&mut conn.stream, &mut deadline);
    while_serving(next, &mut ServeH2 { to, client }).await
}

/// The next DATA frame's bytes from an HTTP/2 origin's `body`, within `stall` (`None`
/// at its end); the client's stream is given what waits for it meanwhile. The outer
/// error is the client's.
async fn next_from_h2(
    body: &mut RecvStream,
    client: &mut ResponseBody,
    to: &mut StreamBacklog,
    stall: Duration,
) -> io::Result<io::Result<Option<Bytes>>> {
    let mut deadline = Deadline::after(stall);
    let next = flow::next_by(body, &mut deadline);
    while_serving(next, &mut ServeH2 { to, client }).await
}
