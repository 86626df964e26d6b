//! The wire of an exchange whose client is an HTTP/2 stream: the request body comes
//! from the stream's DATA frames, the response goes out as HEADERS, DATA and trailers.
//! To an HTTP/1.1 origin it writes the head `prepare` wrote and the body in holdfast's
//! framing, and reads the response as `h1` does; to an HTTP/2 origin it sends the
//! request as a stream, the body both ways at once (gRPC streams in both directions).
//! It decides nothing: `exchange` and `mux` do, from what this reports.

use std::io;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, Method, Response, StatusCode};
use tokio::time::Instant;

use super::error::{ClientBodyError, ProxyErrorKind};
use super::h1::{self, HeadOut};
use super::retry::{self, SendOutcome};
use super::transfer::{DownloadError, Downloaded, Upload};
use super::wire::{Attempt, MuxWire, ResponseStart, Wire};
use super::Outbound;
use crate::http1::body::Relay;
use crate::http1::encode::{self, BodyOut, ConnectionOut};
use crate::http1::response;
use crate::http1::Framing;
use crate::http2::convert::{self, StreamFacts};
use crate::http2::flow;
use crate::net::{self, Deadline, InBuf, Timer, WaitError};
use crate::upstream::{Lease, OriginConn};

/// One client stream's exchange.
pub(crate) struct H2Wire {
    respond: SendResponse<Bytes>,
    /// The request body, as the client streams it.
    body: RecvStream,
    facts: StreamFacts,
    timer: Timer,
    /// What was read from an HTTP/1.1 origin connection and not yet passed on.
    origin_buf: InBuf,
    /// The response head as the client gets it.
    head: H2Head,
    /// To an HTTP/2 origin: the request body still streaming when the response came.
    upload: Option<SendStream<Bytes>>,
    /// To an HTTP/2 origin: its response body.
    origin_body: Option<RecvStream>,
    /// The client reset the stream or did not take the response.
    client_failed: bool,
    /// A streamed body sent whole to an origin that refused the stream: sent again
    /// from here.
    replay: Option<Vec<u8>>,
}

/// A response head for an HTTP/2 client.
#[derive(Default)]
struct H2Head {
    status: u16,
    headers: HeaderMap,
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
        self.headers = convert::response_from_h1(resp, extra);
    }
}

impl H2Wire {
    pub(crate) fn new(respond: SendResponse<Bytes>, body: RecvStream, facts: StreamFacts) -> Self {
        H2Wire {
            respond,
            body,
            facts,
            timer: Timer::new(),
            origin_buf: InBuf::new(net::ORIGIN_BUF),
            head: H2Head::default(),
            upload: None,
            origin_body: None,
            client_failed: false,
            replay: None,
        }
    }

    /// Sends `100 Continue` once to a client that waits for it before its body.
    fn answer_continue(&mut self, out: &mut Outbound) {
        if std::mem::take(&mut out.progress.expect_continue) {
            let interim = Response::builder().status(StatusCode::CONTINUE).body(());
            if let Ok(interim) = interim {
                let _ = self.respond.send_informational(interim);
            }
        }
    }

    /// Starts the response: its head, ending the stream when there is no body.
    fn start_response(
        &mut self,
        status: u16,
        headers: HeaderMap,
        end: bool,
    ) -> io::Result<SendStream<Bytes>> {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        *response.headers_mut() = headers;
        self.respond.send_response(response, end).map_err(flow::to_io)
    }
}

impl Drop for H2Wire {
    fn drop(&mut self) {
        self.origin_buf.release();
    }
}

/// Resolves when the client resets the stream (or its connection is gone).
async fn client_reset(respond: &mut SendResponse<Bytes>) {
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
    async fn read_kept(&mut self, out: &mut Outbound, len: u64) -> Result<Vec<u8>, Attempt> {
        self.answer_continue(out);
        let stall = out.route.site.timeouts.read;
        let want = usize::try_from(len).unwrap_or(usize::MAX);
        let mut kept = Vec::with_capacity(want.min(64 * 1024));
        while let Some(data) = flow::next(&mut self.body, stall).await.map_err(client_failed)? {
            kept.extend_from_slice(&data);
            flow::release(&mut self.body, data.len());
        }
        if kept.len() != want {
            return Err(Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Closed)));
        }
        Ok(kept)
    }

    async fn attempt(
        &mut self,
        out: &mut Outbound,
        conn: &mut OriginConn,
        head: &[u8],
        kept: Option<&[u8]>,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let limit = out.route.site.timeouts.response_header;
        let stream = &mut conn.stream;
        h1::send_head(stream, head, kept, limit).await?;
        let sent_at = if out.progress.body_consumed {
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

    async fn switch(&mut self, _out: &Outbound) -> bool {
        // An HTTP/2 stream never asks to switch protocols (`Upgrade` is not HTTP/2).
        false
    }

    async fn tunnel(&mut self, _conn: OriginConn, _stall: Duration) {}

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
        let stall = out.route.site.timeouts.read;
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
        let stall = out.route.site.timeouts.read;
        let headers = std::mem::take(&mut self.head.headers);
        let empty = matches!(start.framing, Framing::Empty | Framing::Length(0));
        let mut client = self.start_response(start.status, headers, empty).map_err(|e| {
            DownloadError::Client { error: WaitError::Io(e), bytes: 0, remaining: None }
        })?;
        if empty {
            return Ok(Downloaded { bytes: 0, extra: !self.origin_buf.is_empty() });
        }
        let mut relay = Relay::new(start.framing, false);
        let mut bytes = 0u64;
        loop {
            if !self.origin_buf.is_empty() {
                let piece = relay.decode(self.origin_buf.data_mut()).map_err(|e| {
                    DownloadError::Upstream { error: io::Error::other(e.to_string()), bytes }
                })?;
                let payload = self.origin_buf.data().get(..piece.payload).unwrap_or_default();
                let data = Bytes::copy_from_slice(payload);
                self.origin_buf.consume(piece.used);
                let n = data.len() as u64;
                if n > 0 || piece.done {
                    flow::send(&mut client, data, piece.done, stall).await.map_err(|e| {
                        DownloadError::Client {
                            error: WaitError::Io(e),
                            bytes,
                            remaining: relay.remaining(),
                        }
                    })?;
                }
                bytes = bytes.saturating_add(n);
                if piece.done {
                    return Ok(Downloaded { bytes, extra: !self.origin_buf.is_empty() });
                }
                // A partial chunk line stays in the buffer until more arrives.
                if piece.used > 0 && !self.origin_buf.is_empty() {
                    continue;
                }
            }
            let mut deadline = Deadline::after(stall);
            match self.origin_buf.fill(&mut conn.stream, &mut deadline).await {
                Ok(0) if start.framing == Framing::UntilClose => {
                    let end = flow::send(&mut client, Bytes::new(), true, stall).await;
                    return end.map(|()| Downloaded { bytes, extra: false }).map_err(|e| {
                        DownloadError::Client { error: WaitError::Io(e), bytes, remaining: None }
                    });
                }
                Ok(0) => {
                    let error = io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the origin closed the connection before the body ended",
                    );
                    client.send_reset(h2::Reason::INTERNAL_ERROR);
                    return Err(DownloadError::Upstream { error, bytes });
                }
                Ok(_) => {}
                Err(e) => {
                    client.send_reset(h2::Reason::INTERNAL_ERROR);
                    return Err(DownloadError::Upstream { error: e.into_io(), bytes });
                }
            }
        }
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
        let timeouts = &out.route.site.timeouts;
        let (client_stall, origin_stall) = (timeouts.read, timeouts.response_header);
        let chunked = out.request.framing == Framing::Chunked;
        let origin_failed = |(_, e): (u64, WaitError)| match e {
            WaitError::TimedOut => Attempt::Failed(ProxyErrorKind::HeaderTimeout(origin_stall)),
            WaitError::Io(error) => Attempt::Closed { outcome: SendOutcome::MaybeReceived, error },
        };
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
        if chunked {
            let trailers =
                flow::trailers(&mut self.body, client_stall).await.map_err(client_failed)?;
            let mut end = encode::LAST_CHUNK.to_vec();
            for (name, value) in trailers.iter().flatten() {
                if !convert::is_connection_specific(name.as_str()) {
                    end.extend_from_slice(name.as_str().as_bytes());
                    end.extend_from_slice(b": ");
                    end.extend_from_slice(value.as_bytes());
                    end.extend_from_slice(b"\r\n");
                }
            }
            end.extend_from_slice(b"\r\n");
            net::write_all(stream, &[&end], origin_stall).await.map_err(origin_failed)?;
        }
        Ok(())
    }
}

/// The response of a stream whose upload failed, if the origin sent one before it
/// stopped taking the body.
pub(super) async fn answer_despite(
    response: impl std::future::Future<Output = Result<Response<RecvStream>, h2::Error>>,
    limit: Duration,
) -> Option<Response<RecvStream>> {
    tokio::time::timeout(limit, response).await.ok()?.ok()
}

/// What finished first while a request body streamed to an HTTP/2 origin.
enum First {
    Pumped(Result<(), Attempt>),
    Answered(Result<Response<RecvStream>, h2::Error>),
}

/// Streams the client's body to an HTTP/2 origin until it ends (trailers included),
/// within the route's body limit; `total` counts the bytes sent.
///
/// A copy of what went is kept in `copy` while the body is small (see
/// [`retry::KEEP_BODY_MAX_BYTES`]) and has no trailers, so a stream the origin refuses
/// after the body arrived can go again.
async fn pump(
    body: &mut RecvStream,
    to: &mut SendStream<Bytes>,
    total: &mut u64,
    max: Option<u64>,
    stall: Duration,
    copy: &mut Option<Vec<u8>>,
) -> Result<(), Attempt> {
    while let Some(data) = flow::next(body, stall).await.map_err(client_failed)? {
        count_body(total, data.len(), max)?;
        let n = data.len();
        if let Some(kept) = copy.as_mut() {
            if *total <= retry::KEEP_BODY_MAX_BYTES {
                kept.extend_from_slice(&data);
            } else {
                *copy = None;
            }
        }
        // The client's last DATA frame ends the origin's stream too, instead of an
        // empty frame after it.
        let last = body.is_end_stream();
        flow::send(to, data, last, stall)
            .await
            .map_err(|error| Attempt::Closed { outcome: SendOutcome::MaybeReceived, error })?;
        flow::release(body, n);
        if last {
            return Ok(());
        }
    }
    let end = match flow::trailers(body, stall).await.map_err(client_failed)? {
        Some(trailers) => {
            *copy = None;
            to.send_trailers(trailers)
        }
        None => to.send_data(Bytes::new(), true),
    };
    end.map_err(|e| Attempt::Closed { outcome: SendOutcome::MaybeReceived, error: flow::to_io(e) })
}

impl MuxWire for H2Wire {
    async fn mux_attempt(
        &mut self,
        out: &mut Outbound,
        mut send: SendRequest<Bytes>,
        mut request: http::Request<()>,
        kept: Option<&[u8]>,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        if self.facts.te_trailers {
            request
                .headers_mut()
                .insert(http::header::TE, http::HeaderValue::from_static("trailers"));
        }
        let streaming = !out.progress.body_consumed;
        // A streamed body the origin refused once goes again from its copy.
        let replay = self.replay.take();
        let kept = kept.or(replay.as_deref());
        let end = kept.is_none() && !streaming;
        let (response, mut upload) = match send.send_request(request, end) {
            Ok(sent) => sent,
            Err(e) => return Err(self.refused_keeps(stream_failed(e, false), replay)),
        };
        let stall = out.route.site.timeouts.read;
        if let Some(kept) = kept {
            flow::send(&mut upload, Bytes::copy_from_slice(kept), true, stall)
                .await
                .map_err(|error| Attempt::Closed { outcome: SendOutcome::MaybeReceived, error })?;
        }
        let limit = out.route.site.timeouts.response_header;
        let mut response = std::pin::pin!(response);
        let mut sent_body = false;
        // What a refused stream would be sent again with.
        let mut again = replay;
        if streaming {
            self.answer_continue(out);
            let mut total = 0u64;
            let max = out.route.max_body;
            let mut copy = Some(Vec::new());
            let first = {
                let pump = pump(&mut self.body, &mut upload, &mut total, max, stall, &mut copy);
                tokio::select! {
                    biased;
                    answered = &mut response => First::Answered(answered),
                    done = pump => First::Pumped(done),
                }
            };
            sent_body = total > 0;
            match first {
                First::Pumped(Ok(())) => {
                    // The whole body went, and a copy is at hand: not lost if refused.
                    sent_body = copy.is_none();
                    again = copy;
                }
                // The origin stopped taking the body (RST_STREAM after a complete
                // response, RFC 9113, 8.1): its response, if it sent one, stands.
                First::Pumped(Err(failed @ Attempt::Closed { .. })) => {
                    return match answer_despite(response, limit).await {
                        Some(answered) => Ok(self.start_mux(out, answered, None)),
                        None => Err(failed),
                    };
                }
                First::Pumped(Err(failed)) => return Err(failed),
                // The response came first: the body goes on streaming while it is
                // relayed.
                First::Answered(answered) => {
                    let answered = answered.map_err(|e| stream_failed(e, sent_body))?;
                    return Ok(self.start_mux(out, answered, Some(upload)));
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
            Ok(Err(e)) => Err(self.refused_keeps(stream_failed(e, sent_body), again)),
            Ok(Ok(answered)) => Ok(self.start_mux(out, answered, None)),
        }
    }

    async fn mux_relay(
        &mut self,
        out: &Outbound,
        start: &ResponseStart,
    ) -> Result<Downloaded, DownloadError> {
        let stall = out.route.site.timeouts.read;
        let Some(mut origin) = self.origin_body.take() else {
            return Ok(Downloaded { bytes: 0, extra: false });
        };
        let headers = std::mem::take(&mut self.head.headers);
        let end = origin.is_end_stream();
        let mut client = self.start_response(start.status, headers, end).map_err(|e| {
            DownloadError::Client { error: WaitError::Io(e), bytes: 0, remaining: None }
        })?;
        let download = relay_stream(&mut origin, &mut client, end, stall);
        let upload = async {
            if let Some(mut upload) = self.upload.take() {
                let mut total = 0u64;
                let max = out.route.max_body;
                if pump(&mut self.body, &mut upload, &mut total, max, stall, &mut None)
                    .await
                    .is_err()
                {
                    upload.send_reset(h2::Reason::CANCEL);
                }
            }
        };
        let (downloaded, ()) = tokio::join!(download, upload);
        self.note(&downloaded);
        downloaded
    }
}

impl H2Wire {
    /// Keeps the body to send again when the origin refused the stream.
    fn refused_keeps(&mut self, attempt: Attempt, body: Option<Vec<u8>>) -> Attempt {
        if matches!(attempt, Attempt::Refused { .. }) {
            self.replay = body;
        }
        attempt
    }

    /// Keeps an HTTP/2 origin's response for [`MuxWire::mux_relay`] and says how it
    /// starts.
    fn start_mux(
        &mut self,
        out: &Outbound,
        answered: Response<RecvStream>,
        upload: Option<SendStream<Bytes>>,
    ) -> (Upload, ResponseStart) {
        let (parts, body) = answered.into_parts();
        let start = start_of(out, &parts, body.is_end_stream());
        let mut headers = parts.headers;
        let has_hsts = headers.contains_key(http::header::STRICT_TRANSPORT_SECURITY);
        convert::add_lines(&mut headers, out.hsts(|| has_hsts));
        self.head = H2Head { status: start.status, headers };
        self.origin_body = Some(body);
        self.upload = upload;
        (Upload::Complete, start)
    }
}

/// How an HTTP/2 origin's response starts, for the exchange and an HTTP/1.1 client.
pub(super) fn start_of(
    out: &Outbound,
    parts: &http::response::Parts,
    ended: bool,
) -> ResponseStart {
    let length = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let status = parts.status.as_u16();
    let bodyless = out.request.method == Method::HEAD || status == 204 || status == 304;
    let framing = match length {
        _ if bodyless => Framing::Empty,
        Some(n) => Framing::Length(n),
        None if ended => Framing::Empty,
        None => Framing::Chunked,
    };
    let body_out = BodyOut::choose(framing, out.request.version);
    let keep = out.request.keep_alive && body_out != BodyOut::CloseDelimited;
    ResponseStart {
        status,
        framing,
        body_out,
        reusable: true,
        declares_length: length.is_some(),
        limits: holdfast_pool::OriginLimits::default(),
        connection: ConnectionOut::for_client(keep, out.request.version),
    }
}

/// What a stream that failed before its response means for the attempt: refused ones
/// go again; others are `retry`'s to judge, unless body bytes went already.
pub(super) fn stream_failed(e: h2::Error, sent_body: bool) -> Attempt {
    let refused = flow::refused(&e);
    let goaway = e.is_go_away();
    let error = flow::to_io(e);
    match (refused, sent_body) {
        (true, false) => Attempt::Refused { goaway, error },
        (true, true) => Attempt::Failed(ProxyErrorKind::Closed(error)),
        (false, _) => Attempt::Closed { outcome: SendOutcome::MaybeReceived, error },
    }
}

/// Relays an HTTP/2 origin's response body and trailers to an HTTP/2 client.
async fn relay_stream(
    origin: &mut RecvStream,
    client: &mut SendStream<Bytes>,
    ended: bool,
    stall: Duration,
) -> Result<Downloaded, DownloadError> {
    let mut bytes = 0u64;
    if ended {
        return Ok(Downloaded { bytes, extra: false });
    }
    let to_client =
        |e, bytes| DownloadError::Client { error: WaitError::Io(e), bytes, remaining: None };
    loop {
        let data = match flow::next(origin, stall).await {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(error) => {
                client.send_reset(h2::Reason::INTERNAL_ERROR);
                return Err(DownloadError::Upstream { error, bytes });
            }
        };
        let n = data.len();
        // The origin's last DATA frame ends the client's stream too, instead of an
        // empty frame after it.
        let last = origin.is_end_stream();
        flow::send(client, data, last, stall).await.map_err(|e| to_client(e, bytes))?;
        flow::release(origin, n);
        bytes = bytes.saturating_add(n as u64);
        if last {
            return Ok(Downloaded { bytes, extra: false });
        }
    }
    let trailers = match flow::trailers(origin, stall).await {
        Ok(t) => t,
        Err(error) => {
            client.send_reset(h2::Reason::INTERNAL_ERROR);
            return Err(DownloadError::Upstream { error, bytes });
        }
    };
    let end = match trailers {
        Some(t) => client.send_trailers(t),
        None => client.send_data(Bytes::new(), true),
    };
    end.map_err(|e| to_client(flow::to_io(e), bytes))?;
    Ok(Downloaded { bytes, extra: false })
}
