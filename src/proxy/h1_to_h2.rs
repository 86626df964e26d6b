//! The wire of an exchange between an HTTP/1.1 client and an HTTP/2 origin: the
//! client's body, taken out of its HTTP/1.1 framing, goes out as DATA frames (its
//! trailer section as trailing HEADERS); the origin's response comes back as an
//! HTTP/1.1 head and body in the framing the client gets (trailers in a chunked one).
//!
//! Both directions run at once, in the exchange's one task: the response head may come
//! while the body still goes up, and its body then streams to the client while the
//! client's body goes on to the origin (a streaming echo, an early 413, a long upload
//! with progress), as an HTTP/2 stream allows. A stream the origin refused goes again
//! from a copy of what went (and the trailers, once read), then on from where the
//! client's body stopped.
//!
//! # Races
//! The body's pump is dropped, mid-piece, when the response head comes first: what it
//! had read and not sent waits in [`Body::pending`], and the pump started again for
//! the response's relay sends it first. A response head that comes before the whole
//! body was read from the client says `Connection: close`: the client's connection
//! cannot carry another request unless its body is read to the end, and that is not
//! known yet when the head goes.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;

use super::backlog::{while_serving, Backlog, ServeH1};
use super::body_copy::BodyCopy;
use super::error::{ClientBodyError, ProxyErrorKind};
use super::h1::H1Wire;
use super::h2::{read_h2_head, stream_failed, stream_not_opened, upload_failed};
use super::pace::Pace;
use super::retry::SendOutcome;
use super::transfer::{DownloadError, Downloaded, Upload};
use super::wire::{Attempt, H2OriginWire, ResponseStart};
use super::{pace_config, Outbound};
use crate::http1::body::{Parts, Relay};
use crate::http1::encode::{self, BodyOut, ConnectionOut, CONTINUE};
use crate::http1::request::FramingViolation;
use crate::http1::Framing;
use crate::http2::encode::OriginHead;
use crate::http2::origin::{Error as H2Error, OriginResponse, RecvStream, SendRequest, SendStream};
use crate::http2::{convert, flow};
use crate::net::{self, Deadline, InBuf, Stream, WaitError};
use holdfast_h2::error::ErrorCode;

/// What an exchange with an HTTP/2 origin keeps in its [`H1Wire`] (boxed there: rare).
pub(super) struct H1ToH2 {
    /// The client's body on its way to the origin, kept from one try to the next.
    body: Body,
    /// The origin's response, for [`H2OriginWire::relay_h2`].
    response: Option<RecvStream>,
    /// The stream's sending side, when the body still goes up after the response head
    /// came: [`H2OriginWire::relay_h2`] goes on with it.
    upload: Option<SendStream>,
}

/// The client's body on its way to an HTTP/2 origin.
struct Body {
    /// Where the client's body is in its framing: a stream refused mid-body goes on
    /// from where the client's body stopped.
    relay: Relay,
    /// Read to its end from the client.
    ended: bool,
    /// The client's trailers, once its body was read to its end: a refused stream
    /// sends them again.
    trailers: Option<HeaderMap>,
    /// What goes out next on this try, before more is read from the client.
    pending: Pending,
}

/// Bytes of the body to send on the current stream, and how it ends after them.
#[derive(Default)]
struct Pending {
    pieces: VecDeque<Bytes>,
    /// How the stream ends once the pieces went; `None`: more of the body follows.
    end: Option<End>,
}

/// How a request stream ends.
enum End {
    /// With its last DATA frame.
    Data,
    /// With a HEADERS frame of trailers (RFC 9113, 8.1).
    Trailers(HeaderMap),
}

impl H1ToH2 {
    /// Before the first try: the client's body framed `framing`, its trailer section
    /// bounded by `max_trailer_bytes`.
    fn new(framing: Framing, max_trailer_bytes: usize) -> H1ToH2 {
        let body = Body {
            relay: Relay::new(framing, false, max_trailer_bytes),
            ended: false,
            trailers: None,
            pending: Pending::default(),
        };
        H1ToH2 { body, response: None, upload: None }
    }
}

impl Pending {
    /// A body read whole beforehand: all of it, and the end.
    fn whole(kept: &[u8]) -> Pending {
        let pieces = match kept.is_empty() {
            true => VecDeque::new(),
            false => VecDeque::from([Bytes::copy_from_slice(kept)]),
        };
        Pending { pieces, end: Some(End::Data) }
    }

    /// After a refused try, what went on it, from `copy`; and once the body was read
    /// to its end (`ended`), the `trailers` that ended it, or the end of the stream.
    fn again(copy: &BodyCopy, trailers: Option<&HeaderMap>, ended: bool) -> Pending {
        let end = ended.then(|| trailers.map_or(End::Data, |t| End::Trailers(t.clone())));
        Pending { pieces: copy.chunks().collect(), end }
    }

    /// Whether the front piece is the last, and ends the stream.
    fn is_last_piece(&self) -> bool {
        self.pieces.len() == 1 && matches!(self.end, Some(End::Data))
    }

    /// Nothing to send but the end of the stream: the request's HEADERS can end it.
    fn is_bare_end(&self) -> bool {
        self.pieces.is_empty() && matches!(self.end, Some(End::Data))
    }
}

/// What a [`pump`] works within.
#[derive(Clone, Copy)]
struct PumpLimits {
    /// Longest wait for the client to send more, and for the origin's window.
    stall: Duration,
    /// Payload bytes the body may have (`client_max_body`).
    max_body: Option<u64>,
}

/// What finished first while a request body streamed to an HTTP/2 origin.
enum First {
    Pumped(Result<(), Attempt>),
    Answered(Result<OriginResponse, H2Error>),
}

impl H2OriginWire for H1Wire<'_> {
    async fn attempt_h2(
        &mut self,
        out: &mut Outbound,
        mut send: SendRequest,
        head: &OriginHead,
        kept: Option<&[u8]>,
        copy: &mut BodyCopy,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let stall = out.route.timeouts.read;
        let limit = out.route.timeouts.response_header;
        // The client's trailer section is bounded as its head is (RFC 9112, 7.1.2).
        let max_trailer_bytes = out.route.site.limits.max_header_bytes;
        let framing = out.request.framing;
        let to_h2 =
            self.to_h2.get_or_insert_with(|| Box::new(H1ToH2::new(framing, max_trailer_bytes)));
        let body = &mut to_h2.body;
        body.ended |= out.progress.body_consumed;
        // A body read beforehand goes whole; after a refused try, what went on it goes
        // first, and all of it once the client's body ended.
        body.pending = match kept {
            Some(kept) => Pending::whole(kept),
            None => Pending::again(copy, body.trailers.as_ref(), body.ended),
        };
        let bare = body.pending.is_bare_end();
        let (response, mut upload) = send.send_request(head, bare).map_err(stream_not_opened)?;
        if bare {
            body.pending = Pending::default();
            return self.await_head(out, response).await;
        }
        if !body.ended && std::mem::take(&mut out.progress.expect_continue) {
            // A client that waits for `100 Continue` gets it before the race below: it
            // never follows the final response head. One that sent body bytes already
            // is not waiting.
            if self.client.buf.is_empty() {
                let written = net::write_all(self.client.stream, &[CONTINUE], stall).await;
                written.map_err(|(_, e)| {
                    Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Io(e.into_io())))
                })?;
            }
        }
        let limits = PumpLimits { stall, max_body: out.route.max_body };
        let mut response = pin!(response);
        let first = {
            let (client, buf) = (&*self.client.stream, &mut *self.client.buf);
            let pump = pump(client, buf, &mut to_h2.body, &mut upload, Some(copy), limits);
            // The pump first: a body that can go at once goes before a response that
            // came meanwhile is taken.
            tokio::select! {
                biased;
                pumped = pump => First::Pumped(pumped),
                answered = &mut response => First::Answered(answered),
            }
        };
        out.progress.body_consumed |= to_h2.body.ended;
        let upload_so_far = match out.progress.body_consumed {
            true => Upload::Complete,
            false => Upload::Interrupted,
        };
        match first {
            First::Pumped(Ok(())) => {}
            // The origin stopped taking the body: its response, if it sent one before
            // (RFC 9113, 8.1), stands, and the client's connection closes after it
            // unless the body was read to its end.
            First::Pumped(Err(Attempt::Closed { error, .. })) => {
                let answered = upload_failed(response, limit, error).await?;
                return self.start_h2(out, answered, upload_so_far, None);
            }
            First::Pumped(Err(failed)) => return Err(failed),
            // The response came first (or the origin refused the stream mid-body): the
            // body goes on streaming while the response is relayed.
            First::Answered(answered) => {
                let answered = answered.map_err(stream_failed)?;
                return self.start_h2(out, answered, upload_so_far, Some(upload));
            }
        }
        out.progress.body_consumed = true;
        self.await_head(out, response).await
    }

    async fn relay_h2(
        &mut self,
        out: &Outbound,
        start: &ResponseStart,
    ) -> Result<Downloaded, DownloadError> {
        let site = &out.route.site;
        let stall = out.route.timeouts.read;
        let Some(to_h2) = self.to_h2.as_deref_mut() else {
            return Ok(Downloaded { bytes: 0, extra: false });
        };
        let Some(mut body) = to_h2.response.take() else {
            return Ok(Downloaded { bytes: 0, extra: false });
        };
        let upload = to_h2.upload.take();
        // The head as the client gets it, written when the response started.
        let head = &self.response_head;
        let (framing, body_out) = (start.framing, start.body_out);
        let stream = &*self.client.stream;
        let spools = start.buffer.then(|| Arc::clone(&site.spools));
        let pace = Pace::new(pace_config(site), stall);
        let mut to = Backlog::new(pace, spools).expecting(framing.length());
        let response = ResponseOut { head: head.as_slice(), framing, body_out, stall };
        let downloaded = match upload {
            None => download(stream, &mut to, response, &mut body).await,
            Some(mut upload) => {
                let limits = PumpLimits { stall, max_body: out.route.max_body };
                let buf = &mut *self.client.buf;
                let relayed = {
                    let pumping = pump(stream, buf, &mut to_h2.body, &mut upload, None, limits);
                    both_ways(download(stream, &mut to, response, &mut body), pumping).await
                };
                match relayed {
                    Relayed::Response(downloaded, pumped) => {
                        if pumped.is_none() {
                            // The origin ended its response before the body was all
                            // sent: the rest does not go (the client's connection
                            // closes after the response unless its body was read to
                            // the end).
                            upload.send_reset(ErrorCode::Cancel);
                        }
                        downloaded
                    }
                    Relayed::ClientFailed(kind) => {
                        // The origin hears at once that the request will not end.
                        upload.send_reset(ErrorCode::Cancel);
                        let error = match kind {
                            ProxyErrorKind::ClientTimeout => WaitError::TimedOut,
                            ProxyErrorKind::ClientBody(ClientBodyError::Io(e)) => WaitError::Io(e),
                            kind => WaitError::Io(io::Error::other(kind.to_string())),
                        };
                        Err(DownloadError::Client { error, bytes: to.bytes(), remaining: None })
                    }
                }
            }
        };
        let downloaded = downloaded?;
        if to.is_behind() {
            self.behind = Some(Box::new(to));
        }
        Ok(downloaded)
    }
}

/// How a response relayed while the body still went up ended.
enum Relayed {
    /// The response ended (or failed); the body's pump had ended before, if `Some`.
    Response(Result<Downloaded, DownloadError>, Option<Result<(), Attempt>>),
    /// The client's body failed first (it closed, stalled, grew past the limit):
    /// the exchange ends there, the response cut off, as the client's failure.
    ClientFailed(ProxyErrorKind),
}

/// Runs `download` to its end and `pump` beside it, until the pump ends or the
/// download does. A pump that ends because the origin stopped taking the body leaves
/// the download to go on: the origin's response may be complete without it (RFC 9113,
/// 8.1).
async fn both_ways(
    download: impl std::future::Future<Output = Result<Downloaded, DownloadError>>,
    pump: impl std::future::Future<Output = Result<(), Attempt>>,
) -> Relayed {
    let (mut download, mut pump) = (pin!(download), pin!(pump));
    let mut pumped = None;
    // Two rounds at most: the pump ends, then the download does.
    loop {
        tokio::select! {
            biased;
            done = &mut pump, if pumped.is_none() => match done {
                Err(Attempt::Failed(kind)) => return Relayed::ClientFailed(kind),
                done => pumped = Some(done),
            },
            downloaded = &mut download => return Relayed::Response(downloaded, pumped),
        }
    }
}

/// The response as the client gets it.
struct ResponseOut<'a> {
    /// Its head, in HTTP/1.1.
    head: &'a [u8],
    /// The origin's framing of the body.
    framing: Framing,
    /// The framing the client gets.
    body_out: BodyOut,
    /// Longest wait for the origin's next bytes.
    stall: Duration,
}

/// Writes the response head to the client, then streams the origin's body and
/// trailers after it, through `to`.
async fn download(
    client: &Stream,
    to: &mut Backlog,
    response: ResponseOut<'_>,
    body: &mut RecvStream,
) -> Result<Downloaded, DownloadError> {
    let to_client =
        |error, to: &Backlog| DownloadError::Client { error, bytes: to.bytes(), remaining: None };
    let stall = response.stall;
    let mut head_only = Parts::new();
    head_only.push(response.head);
    let head_len = response.head.len();
    to.send(client, &head_only, head_len, false).await.map_err(|e| to_client(e, to))?;
    if response.framing == Framing::Empty {
        return Ok(Downloaded { bytes: to.bytes(), extra: false });
    }
    let chunked = response.body_out.is_chunked(response.framing);
    loop {
        let next = next_for_h1(body, client, to, stall).await;
        let data = match next.map_err(|e| to_client(e, to))? {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(error) => return Err(DownloadError::Upstream { error, bytes: to.bytes() }),
        };
        if data.is_empty() {
            continue;
        }
        let mut size_line = [0u8; 18];
        let mut parts = Parts::new();
        if chunked {
            for part in encode::chunk(&data, &mut size_line) {
                parts.push(part);
            }
        } else {
            parts.push(&data);
        }
        to.send(client, &parts, 0, false).await.map_err(|e| to_client(e, to))?;
        // Sent on, or held for the client: holdfast has the bytes, and the origin its
        // window back.
        flow::release(body, data.len());
    }
    // Trailers (gRPC's `grpc-status`, say) go in the chunked ending (RFC 9112, 7.1.2).
    // A client that gets the origin's Content-Length, or an HTTP/1.0 client
    // (close-delimited), has no trailer section: trailers are not read, and dropped.
    if chunked {
        let trailers = match flow::trailers(body, stall).await {
            Ok(trailers) => trailers,
            Err(error) => return Err(DownloadError::Upstream { error, bytes: to.bytes() }),
        };
        let end = convert::h1_chunked_end(trailers.as_ref());
        let mut parts = Parts::new();
        parts.push(&end);
        to.send(client, &parts, 0, false).await.map_err(|e| to_client(e, to))?;
    }
    Ok(Downloaded { bytes: to.bytes(), extra: false })
}

/// The next DATA frame's bytes from an HTTP/2 origin's `body`, within `stall` (`None`
/// at its end); an HTTP/1.1 `client` is given what waits for it meanwhile. The outer
/// error is the client's.
async fn next_for_h1(
    body: &mut RecvStream,
    client: &Stream,
    to: &mut Backlog,
    stall: Duration,
) -> Result<io::Result<Option<Bytes>>, WaitError> {
    let mut deadline = Deadline::after(stall);
    let next = flow::next_by(body, &mut deadline);
    while_serving(next, &mut ServeH1 { to, client }).await
}

impl H1Wire<'_> {
    /// Waits for the response head of a request whose body is all sent, within the
    /// route's `response_header` timeout.
    async fn await_head(
        &mut self,
        out: &Outbound,
        response: impl std::future::Future<Output = Result<OriginResponse, H2Error>>,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let limit = out.route.timeouts.response_header;
        // The origin may take long to answer: the client's buffer, unless it holds a
        // pipelined request, goes back meanwhile.
        self.client.buf.release();
        match tokio::time::timeout(limit, response).await {
            Err(_) => Err(Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit))),
            Ok(Err(e)) => Err(stream_failed(e)),
            Ok(Ok(answered)) => self.start_h2(out, answered, Upload::Complete, None),
        }
    }

    /// Reads an HTTP/2 origin's response head into the response model, writes it as
    /// the client gets it, and keeps the body for [`H2OriginWire::relay_h2`], with the
    /// stream's sending side when the body still goes up (`sending`); when the client's
    /// body was not read to its end (an interrupted upload), its connection closes
    /// after the response.
    fn start_h2(
        &mut self,
        out: &Outbound,
        answered: OriginResponse,
        upload: Upload,
        sending: Option<SendStream>,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let OriginResponse { status, fields, body } = answered;
        let has_hsts = fields.contains("strict-transport-security");
        let response_head = &mut self.response_head;
        let start = read_h2_head(out, status, &fields, body.is_end_stream(), |head, mut start| {
            if upload == Upload::Interrupted {
                start.connection = ConnectionOut::for_client(false, out.request.version);
            }
            let hsts = out.hsts(|| has_hsts);
            response_head.clear();
            encode::client_response(head, start.body_out, start.connection, hsts, response_head);
            start
        })?;
        // The state exists: `attempt_h2` made it before the request went.
        if let Some(to_h2) = self.to_h2.as_deref_mut() {
            to_h2.response = Some(body);
            to_h2.upload = sending;
        }
        Ok((upload, start))
    }
}

/// Streams the client's body, out of its HTTP/1.1 framing, to an HTTP/2 origin, within
/// `limits`: what `body` has pending first, then the rest as the client sends it, from
/// where it stopped; with `copy`, what is read is copied first, so a refused stream can
/// send it again. Reads from the client through a shared borrow, so the response can be
/// written to it meanwhile.
///
/// Dropped midway, it leaves what it read and did not send in `body.pending`: a pump
/// started again sends it first.
async fn pump(
    client: &Stream,
    buf: &mut InBuf,
    body: &mut Body,
    upload: &mut SendStream,
    mut copy: Option<&mut BodyCopy>,
    limits: PumpLimits,
) -> Result<(), Attempt> {
    let closed = |error| Attempt::Closed { outcome: SendOutcome::MaybeReceived, error };
    let stall = limits.stall;
    // Each round sends what is pending, then reads more of the body; bounded by the
    // body.
    loop {
        let pending = &mut body.pending;
        while !pending.pieces.is_empty() {
            // The body's last DATA frame ends the stream, when no trailers follow.
            let last = pending.is_last_piece();
            let Some(piece) = pending.pieces.front_mut() else { break };
            if !piece.is_empty() {
                flow::send_from(upload, piece, last, stall).await.map_err(closed)?;
            } else if last {
                upload.send_data(Bytes::new(), true).map_err(|e| closed(e.into_io()))?;
            }
            pending.pieces.pop_front();
            if last {
                pending.end = None;
                return Ok(());
            }
        }
        match pending.end.take() {
            // A chunked body's trailers end the stream in a HEADERS frame of their own
            // (RFC 9113, 8.1).
            Some(End::Trailers(trailers)) => {
                return upload.send_trailers(trailers).map_err(|e| closed(e.into_io()));
            }
            Some(End::Data) => {
                return upload.send_data(Bytes::new(), true).map_err(|e| closed(e.into_io()));
            }
            None if body.ended => return Ok(()),
            None => {}
        }
        if !buf.is_empty() {
            let relay = &mut body.relay;
            let piece = relay.decode(buf.data_mut()).map_err(|_| {
                let invalid = ClientBodyError::Invalid(FramingViolation::InvalidChunk);
                Attempt::Failed(ProxyErrorKind::ClientBody(invalid))
            })?;
            let data = Bytes::copy_from_slice(buf.data().get(..piece.payload).unwrap_or_default());
            buf.consume(piece.used);
            if let Some(max) = limits.max_body.filter(|max| relay.payload() > *max) {
                return Err(Attempt::Failed(ProxyErrorKind::BodyTooLarge(max)));
            }
            if let Some(copy) = copy.as_deref_mut() {
                copy.push(&data);
            }
            if piece.done {
                // Read to its end: a try refused from here on sends it all from the
                // copy, and the trailers kept here.
                body.ended = true;
                let trailers = convert::trailers_from_h1(relay.trailers());
                body.pending.end = Some(match trailers.is_empty() {
                    true => End::Data,
                    false => {
                        body.trailers = Some(trailers.clone());
                        End::Trailers(trailers)
                    }
                });
            }
            if !data.is_empty() {
                body.pending.pieces.push_back(data);
            }
            // A partial chunk line stays in the buffer until more arrives.
            if piece.used > 0 || piece.done {
                continue;
            }
        }
        let mut deadline = Deadline::after(stall);
        match fill_shared(buf, client, &mut deadline).await {
            Ok(0) => {
                return Err(Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Closed)))
            }
            Ok(_) => {}
            Err(WaitError::TimedOut) => return Err(Attempt::Failed(ProxyErrorKind::ClientTimeout)),
            Err(WaitError::Io(e)) => {
                return Err(Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Io(e))))
            }
        }
    }
}

/// One read from `client` into `buf`, waiting within `deadline`, through a shared
/// borrow of the stream (a response may be written to it meanwhile); `Ok(0)` is the
/// end of the stream. Cancel-safe: a read either happened or did not.
async fn fill_shared(
    buf: &mut InBuf,
    client: &Stream,
    deadline: &mut Deadline<'_>,
) -> Result<usize, WaitError> {
    // Bounded by `deadline`: a read that finds nothing clears the readiness waited for.
    loop {
        let ready = poll_fn(|cx| client.poll_read_ready(cx));
        net::wait(ready, deadline).await?.map_err(WaitError::Io)?;
        match buf.try_fill(client) {
            // An empty buffer goes back while the client sends nothing.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => buf.release(),
            read => return read.map_err(WaitError::Io),
        }
    }
}
