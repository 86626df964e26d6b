//! Moving bodies between the two sockets of an exchange: the request body up, the
//! response body down, and the bytes of an upgraded connection both ways.
//!
//! A body is read in its sender's framing and written in framing holdfast chooses
//! (`http1::body::Relay`): nothing of the sender's framing is copied.
//!
//! Waits on the client are paced ([`Pace`]): a client that moves a body too slowly on
//! average is cut off, however often it sends a byte.

use std::io;
use std::time::Duration;

use crate::net::Stream;
use tokio::time::Instant;

use super::backlog::{charge, while_serving, Backlog, ServeH1};
use super::error::ClientBodyError;
use super::pace::{Pace, PaceConfig};
use crate::http1::body::{Parts, Piece, Relay};
use crate::http1::chunked::InvalidChunk;
use crate::http1::encode::{BodyOut, CONTINUE, LAST_CHUNK};
use crate::http1::head::HeadScan;
use crate::http1::request::FramingViolation;
use crate::http1::response::{self, Early};
use crate::http1::Framing;
use crate::net::{self, Deadline, InBuf, WaitError};
use crate::spool::{Full, Spool};

/// How far a request body got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upload {
    /// Sent to its last byte.
    Complete,
    /// The origin answered (or closed) before the body was all sent: the response
    /// comes first, and neither connection can carry another request afterwards.
    Interrupted,
}

/// Why a request body could not be sent.
#[derive(Debug)]
pub enum UploadError {
    /// Reading it from the client failed, or it was malformed.
    Client(ClientBodyError),
    /// The client did not keep its body moving (see [`Pace`]).
    ClientStalled,
    /// The body grew past the limit of this many bytes.
    TooLarge(u64),
    /// Writing it to the origin failed; the origin may have received part of it.
    Upstream(WaitError),
    /// Request buffering could hold no more of it.
    Spool(Full),
}

/// The limits a request body moves under.
#[derive(Debug, Clone, Copy)]
pub struct UploadLimits {
    /// Longest wait for the origin to take more of the body.
    pub upstream_stall: Duration,
    /// Longest single wait for the client.
    pub client_stall: Duration,
    pub pace: PaceConfig,
    /// Payload bytes the body may have.
    pub max_body: Option<u64>,
    /// Bytes a chunked body's trailer section may have: the client's head limit.
    pub max_trailer_bytes: usize,
}

/// One read from the client, within what `pace` allows.
async fn read_client(
    client: &mut Stream,
    buf: &mut InBuf,
    pace: &mut Pace,
) -> Result<usize, WaitError> {
    let mut deadline = Deadline::after(pace.allowance());
    let read = buf.fill(client, &mut deadline).await;
    charge(pace, &deadline);
    read
}

/// A client's request body on its way to an HTTP/1.1 origin: taken out of the client's
/// framing, within the route's limit, and put into the framing holdfast writes.
struct RequestBody {
    relay: Relay,
    max_body: Option<u64>,
}

impl RequestBody {
    fn new(framing: Framing, limits: &UploadLimits) -> RequestBody {
        let relay = Relay::new(framing, framing == Framing::Chunked, limits.max_trailer_bytes);
        RequestBody { relay, max_body: limits.max_body }
    }

    /// The body's next piece in `buf`, framed for the origin into `parts` (with
    /// `size_line` for a chunk's size); the caller consumes `piece.used` of `buf` once
    /// the parts are written.
    fn next<'a>(
        &'a mut self,
        buf: &'a mut InBuf,
        size_line: &'a mut [u8; 18],
        parts: &mut Parts<'a>,
    ) -> Result<Piece, UploadError> {
        let piece = self.relay.decode(buf.data_mut()).map_err(invalid)?;
        if let Some(max) = self.max_body.filter(|max| self.relay.payload() > *max) {
            return Err(UploadError::TooLarge(max));
        }
        let payload = buf.data().get(..piece.payload).unwrap_or_default();
        self.relay.frame(payload, piece.done, size_line, parts);
        Ok(piece)
    }
}

/// Sends the client's request body (`framing`) to the origin: what is buffered first,
/// then as it arrives, in framing holdfast writes. A client waiting on
/// `Expect: 100-continue` gets its interim response before holdfast waits for the
/// body. Interim responses from the origin meanwhile (`100 Continue`, `103 Early
/// Hints`) are read and dropped; a final response, or the origin closing, ends the
/// upload early.
pub async fn upload(
    client: &mut Stream,
    buf: &mut InBuf,
    upstream: &mut Stream,
    origin_buf: &mut InBuf,
    framing: Framing,
    expect_continue: &mut bool,
    limits: &UploadLimits,
) -> Result<Upload, UploadError> {
    let mut body = RequestBody::new(framing, limits);
    let mut pace = Pace::new(limits.pace, limits.client_stall);
    let mut early = HeadScan::default();
    loop {
        if !buf.is_empty() {
            let mut size_line = [0; 18];
            let mut parts = Parts::new();
            let piece = body.next(buf, &mut size_line, &mut parts)?;
            let sent =
                write_watching(upstream, origin_buf, &mut early, parts.as_slice(), limits).await?;
            buf.consume(piece.used);
            pace.moved(piece.used as u64);
            if sent == Upload::Interrupted {
                return Ok(Upload::Interrupted);
            }
        }
        if body.relay.is_done() {
            return Ok(Upload::Complete);
        }
        answer_continue(client, expect_continue, limits.client_stall).await?;
        let readable = {
            let read = read_client(client, buf, &mut pace);
            tokio::select! {
                biased;
                ready = upstream.readable() => Err(ready),
                read = read => Ok(read),
            }
        };
        match readable {
            Ok(read) => read_some(read)?,
            Err(ready) => {
                ready.map_err(|e| UploadError::Upstream(WaitError::Io(e)))?;
                if early_answer(upstream, origin_buf, &mut early).await? {
                    return Ok(Upload::Interrupted);
                }
            }
        }
    }
}

/// Reads what the origin sent while the request body was still going up, dropping
/// complete interim responses; true when it is a final answer (or the origin closed),
/// which ends the upload.
async fn early_answer(
    upstream: &mut Stream,
    buf: &mut InBuf,
    scan: &mut HeadScan,
) -> Result<bool, UploadError> {
    // The socket said it is readable: a read takes what is there without waiting.
    match buf.fill(upstream, &mut Deadline::after(Duration::ZERO)).await {
        Ok(0) => return Ok(true),
        Ok(_) | Err(WaitError::TimedOut) => {}
        Err(WaitError::Io(e)) => return Err(UploadError::Upstream(WaitError::Io(e))),
    }
    loop {
        match response::early(scan, buf.data()) {
            Ok(Early::Interim(len)) => {
                buf.consume(len);
                *scan = HeadScan::default();
            }
            Ok(Early::Unknown) if !buf.is_full() => return Ok(false),
            // Let reading the response head say what is wrong with it.
            Ok(_) | Err(_) => return Ok(true),
        }
    }
}

/// Reads the client's whole request body (`framing`) into `spool`, in the framing
/// holdfast writes to an HTTP/1.1 origin (as [`upload`] would write it), before
/// anything goes to the origin: request buffering, so a slow upload holds no upstream
/// connection.
pub async fn buffer_request(
    client: &mut Stream,
    buf: &mut InBuf,
    framing: Framing,
    expect_continue: &mut bool,
    limits: &UploadLimits,
    spool: &mut Spool,
) -> Result<(), UploadError> {
    let mut body = RequestBody::new(framing, limits);
    let mut pace = Pace::new(limits.pace, limits.client_stall);
    // Bounded by the body: each round takes bytes from the client, or ends.
    loop {
        if !buf.is_empty() {
            let mut size_line = [0; 18];
            let mut parts = Parts::new();
            let piece = body.next(buf, &mut size_line, &mut parts)?;
            spool.push(parts.as_slice()).await.map_err(UploadError::Spool)?;
            buf.consume(piece.used);
            pace.moved(piece.used as u64);
        }
        if body.relay.is_done() {
            return Ok(());
        }
        answer_continue(client, expect_continue, limits.client_stall).await?;
        read_some(read_client(client, buf, &mut pace).await)?;
    }
}

/// Writes what `spool` holds to the origin, within `stall` for each wait.
pub async fn send_spooled(
    upstream: &Stream,
    spool: &mut Spool,
    stall: Duration,
) -> Result<(), (u64, WaitError)> {
    let mut sent = 0u64;
    // Bounded by the spool's bytes: each round writes some or fails.
    while !spool.is_empty() {
        let front = spool.front().map_err(|e| (sent, WaitError::Io(e)))?;
        let n = front.len();
        net::write_all(upstream, &[front], stall)
            .await
            .map_err(|(n, e)| (sent.saturating_add(n), e))?;
        spool.consume(n);
        sent = sent.saturating_add(n as u64);
    }
    Ok(())
}

/// Reads a request body of `len` bytes into memory, so the request can be sent again
/// if a pooled connection fails under it (see `retry::should_keep_body`).
pub async fn read_kept(
    client: &mut Stream,
    buf: &mut InBuf,
    len: u64,
    expect_continue: &mut bool,
    limits: &UploadLimits,
) -> Result<Vec<u8>, UploadError> {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let mut kept = Vec::with_capacity(len.min(retry_cap()));
    let mut pace = Pace::new(limits.pace, limits.client_stall);
    loop {
        let take = len.saturating_sub(kept.len()).min(buf.len());
        kept.extend_from_slice(buf.data().get(..take).unwrap_or_default());
        buf.consume(take);
        pace.moved(take as u64);
        if kept.len() == len {
            return Ok(kept);
        }
        answer_continue(client, expect_continue, limits.client_stall).await?;
        read_some(read_client(client, buf, &mut pace).await)?;
    }
}

/// The most memory a kept body reserves up front.
fn retry_cap() -> usize {
    usize::try_from(super::retry::KEEP_BODY_MAX_BYTES).unwrap_or(usize::MAX)
}

/// Sends `100 Continue` to a client that waits for it, once.
async fn answer_continue(
    client: &Stream,
    expect_continue: &mut bool,
    stall: Duration,
) -> Result<(), UploadError> {
    if std::mem::take(expect_continue) {
        net::write_all(client, &[CONTINUE], stall)
            .await
            .map_err(|(_, e)| UploadError::Client(ClientBodyError::Io(e.into_io())))?;
    }
    Ok(())
}

fn read_some(read: Result<usize, WaitError>) -> Result<(), UploadError> {
    match read {
        Ok(0) => Err(UploadError::Client(ClientBodyError::Closed)),
        Ok(_) => Ok(()),
        Err(WaitError::TimedOut) => Err(UploadError::ClientStalled),
        Err(WaitError::Io(e)) => Err(UploadError::Client(ClientBodyError::Io(e))),
    }
}

fn invalid(_: InvalidChunk) -> UploadError {
    UploadError::Client(ClientBodyError::Invalid(FramingViolation::InvalidChunk))
}

/// Writes `parts` to the origin. While the write waits for room, what the origin sends
/// is read: interim responses are dropped, a final one ends the upload.
async fn write_watching(
    upstream: &mut Stream,
    origin_buf: &mut InBuf,
    early: &mut HeadScan,
    parts: &[&[u8]],
    limits: &UploadLimits,
) -> Result<Upload, UploadError> {
    let total = parts.iter().fold(0usize, |n, p| n.saturating_add(p.len()));
    let mut written = 0usize;
    let deadline = net::later(Instant::now(), limits.upstream_stall);
    while written < total {
        match net::try_write_from(upstream, parts, written) {
            Ok(n) => written = written.saturating_add(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let room = tokio::select! {
                    biased;
                    ready = upstream.readable() => Err(ready),
                    room = tokio::time::timeout_at(deadline, upstream.writable()) => Ok(room),
                };
                match room {
                    Ok(Ok(Ok(()))) => {}
                    Ok(Ok(Err(e))) => return Err(UploadError::Upstream(WaitError::Io(e))),
                    Ok(Err(_)) => return Err(UploadError::Upstream(WaitError::TimedOut)),
                    Err(ready) => {
                        ready.map_err(|e| UploadError::Upstream(WaitError::Io(e)))?;
                        if early_answer(upstream, origin_buf, early).await? {
                            return Ok(Upload::Interrupted);
                        }
                    }
                }
            }
            Err(e) => return Err(UploadError::Upstream(WaitError::Io(e))),
        }
    }
    Ok(Upload::Complete)
}

/// A response body that reached the client in full.
#[derive(Debug)]
pub struct Downloaded {
    /// Bytes written to the client after the head (framing included).
    pub bytes: u64,
    /// The origin sent bytes past the end of the body: the connection is not fit for
    /// another request.
    pub extra: bool,
}

/// Why a response body did not reach the client in full.
#[derive(Debug)]
pub enum DownloadError {
    /// Writing to the client failed (it left, or did not keep up, see [`Pace`]).
    /// `remaining`: body bytes the origin still has to send, when known.
    Client { error: WaitError, bytes: u64, remaining: Option<u64> },
    /// The origin's body failed: closed early, reset, stalled or malformed.
    Upstream { error: io::Error, bytes: u64 },
}

/// How a download waits for the origin's next bytes, and how it ends. (Waits on the
/// client are its [`Backlog`]'s.)
#[derive(Debug, Clone, Copy)]
pub struct DownloadLimits {
    /// Longest wait for the origin's next bytes.
    pub upstream_stall: Duration,
    /// The client's connection closes after this response: its last write may wait
    /// for the close and leave with the FIN ([`net::write_last_by`]).
    pub then_close: bool,
}

/// Sends the client its response: `head`, then the body the origin frames with
/// `framing`, framed towards the client as `out` says, through `to` (which holds what
/// the client does not take at once, when response buffering is on). Returns once the
/// origin's body has ended: bytes may still wait for the client then
/// ([`Backlog::is_behind`]).
#[allow(clippy::too_many_arguments)]
pub async fn download(
    upstream: &mut Stream,
    buf: &mut InBuf,
    client: &Stream,
    head: &[u8],
    framing: Framing,
    out: BodyOut,
    limits: &DownloadLimits,
    to: &mut Backlog,
) -> Result<Downloaded, DownloadError> {
    // The origin's trailer section is bounded as its head is. An HTTP/1.0 client gets a
    // chunked body decoded, ended by the close, and so cannot be sent trailers: they
    // are read, checked and dropped.
    let mut body = Relay::new(framing, out.is_chunked(framing), response::MAX_HEAD_BYTES);
    // The head goes out with the first body bytes.
    let mut head = Some(head);
    loop {
        if !buf.is_empty() || head.is_some() {
            let piece = body.decode(buf.data_mut()).map_err(|_| DownloadError::Upstream {
                error: invalid_data(),
                bytes: to.bytes(),
            })?;
            let mut size_line = [0; 18];
            let mut parts = Parts::new();
            let head_len = head.map_or(0, <[u8]>::len);
            if let Some(head) = head.take() {
                parts.push(head);
            }
            let payload = buf.data().get(..piece.payload).unwrap_or_default();
            body.frame(payload, piece.done, &mut size_line, &mut parts);
            let last = piece.done && limits.then_close;
            let sent = to.send(client, &parts, head_len, last).await;
            buf.consume(piece.used);
            if let Err(error) = sent {
                let remaining = body.remaining();
                return Err(DownloadError::Client { error, bytes: to.bytes(), remaining });
            }
            if body.is_done() {
                return Ok(Downloaded { bytes: to.bytes(), extra: !buf.is_empty() });
            }
        }
        let read = match next_from_origin(upstream, buf, client, limits, to).await {
            Ok(read) => read,
            Err(error) => {
                let remaining = body.remaining();
                return Err(DownloadError::Client { error, bytes: to.bytes(), remaining });
            }
        };
        match read {
            Ok(0) if framing == Framing::UntilClose => {
                if body.is_chunked_out() {
                    let mut parts = Parts::new();
                    parts.push(LAST_CHUNK);
                    parts.push(b"\r\n");
                    let sent = to.send(client, &parts, 0, false).await;
                    sent.map_err(|error| DownloadError::Client {
                        error,
                        bytes: to.bytes(),
                        remaining: None,
                    })?;
                }
                return Ok(Downloaded { bytes: to.bytes(), extra: false });
            }
            Ok(0) => {
                let error = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the origin closed the connection before the body ended",
                );
                return Err(DownloadError::Upstream { error, bytes: to.bytes() });
            }
            Ok(_) => {}
            Err(e) => {
                return Err(DownloadError::Upstream { error: e.into_io(), bytes: to.bytes() })
            }
        }
    }
}

/// One read of the origin's next bytes, within `limits.upstream_stall`; meanwhile the
/// client is given what waits for it. The outer error is the client's.
async fn next_from_origin(
    upstream: &mut Stream,
    buf: &mut InBuf,
    client: &Stream,
    limits: &DownloadLimits,
    to: &mut Backlog,
) -> Result<Result<usize, WaitError>, WaitError> {
    let mut deadline = Deadline::after(limits.upstream_stall);
    let next = buf.fill(upstream, &mut deadline);
    while_serving(next, &mut ServeH1 { to, client }).await
}

fn invalid_data() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "invalid chunked body from the origin")
}

/// Copies bytes both ways between an upgraded client connection and its upstream
/// connection until either side ends; bytes already read on either side go first.
pub async fn tunnel(
    client: &mut Stream,
    client_buf: &mut InBuf,
    mut upstream: Stream,
    origin_buf: &mut InBuf,
    stall: Duration,
) -> io::Result<()> {
    if !origin_buf.is_empty() {
        net::write_all(client, &[origin_buf.data()], stall).await.map_err(|(_, e)| e.into_io())?;
        origin_buf.consume(origin_buf.len());
    }
    if !client_buf.is_empty() {
        net::write_all(&upstream, &[client_buf.data()], stall)
            .await
            .map_err(|(_, e)| e.into_io())?;
        client_buf.consume(client_buf.len());
    }
    client_buf.release();
    origin_buf.release();
    tokio::io::copy_bidirectional(client, &mut upstream).await.map(|_| ())
}
