//! Moving bodies between the two sockets of an exchange: the request body up, the
//! response body down, and the bytes of an upgraded connection both ways.
//!
//! A body is read in its sender's framing and written in framing holdfast chooses
//! ([`Relay`]): a length-delimited body goes on as it is; a chunked one is decoded and
//! chunked again by holdfast (extensions dropped, trailers checked and filtered), or
//! decoded for an HTTP/1.0 client; a close-delimited response is chunked for an
//! HTTP/1.1 client. Nothing of the sender's framing is copied.
//!
//! Waits on the client are paced ([`Pace`]): a client that moves a body too slowly on
//! average is cut off, however often it sends a byte.

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use super::error::ClientBodyError;
use super::pace::{Pace, PaceConfig};
use crate::http1::chunked::{Chunked, InvalidChunk};
use crate::http1::encode::{self, BodyOut, CONTINUE, LAST_CHUNK};
use crate::http1::head::HeadScan;
use crate::http1::request::FramingViolation;
use crate::http1::response::{self, Early};
use crate::http1::Framing;
use crate::net::{self, Deadline, InBuf, WaitError};

/// Trailer bytes accepted at the end of a chunked body.
const MAX_TRAILER_BYTES: usize = 32 * 1024;

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
}

/// A body's framing on the way in, and how far it has got.
#[derive(Debug)]
enum Input {
    /// This many bytes to go.
    Length(u64),
    Chunked(Box<Chunked>),
    UntilClose,
}

/// One body on its way through holdfast: taken out of its sender's framing and put
/// into the framing its receiver gets.
#[derive(Debug)]
pub struct Relay {
    input: Input,
    /// The receiver gets chunk framing.
    chunked_out: bool,
    /// Payload bytes so far.
    payload: u64,
}

/// What one [`Relay::decode`] found at the start of a buffer.
#[derive(Debug, Clone, Copy)]
struct Piece {
    /// Bytes of the buffer that belonged to the body.
    used: usize,
    /// Payload bytes, now at the start of the buffer.
    payload: usize,
    /// The body ended within `used`.
    done: bool,
}

/// The slices one write sends: at most a head, a chunk (size line, data, CRLF) and the
/// last chunk (its line, trailers, the empty line).
struct Parts<'a> {
    parts: [&'a [u8]; 7],
    len: usize,
}

impl<'a> Parts<'a> {
    fn new() -> Parts<'a> {
        Parts { parts: [&[]; 7], len: 0 }
    }

    fn push(&mut self, part: &'a [u8]) {
        if let Some(slot) = self.parts.get_mut(self.len) {
            *slot = part;
            self.len = self.len.saturating_add(1);
        }
    }

    fn as_slice(&self) -> &[&'a [u8]] {
        self.parts.get(..self.len).unwrap_or_default()
    }

    fn bytes(&self) -> u64 {
        self.as_slice().iter().fold(0u64, |n, p| n.saturating_add(p.len() as u64))
    }
}

impl Relay {
    fn new(framing: Framing, chunked_out: bool) -> Relay {
        let input = match framing {
            Framing::Length(n) => Input::Length(n),
            Framing::Chunked => Input::Chunked(Box::new(Chunked::new(MAX_TRAILER_BYTES))),
            Framing::UntilClose => Input::UntilClose,
            Framing::Empty => Input::Length(0),
        };
        Relay { input, chunked_out, payload: 0 }
    }

    fn is_done(&self) -> bool {
        match &self.input {
            Input::Length(n) => *n == 0,
            Input::Chunked(chunked) => chunked.is_done(),
            Input::UntilClose => false,
        }
    }

    /// Body bytes still to come, when the framing says.
    fn remaining(&self) -> Option<u64> {
        match self.input {
            Input::Length(n) => Some(n),
            Input::Chunked(_) | Input::UntilClose => None,
        }
    }

    /// Takes the payload out of the framing at the start of `data`, moving it to the
    /// front; bytes after the end of the body are left alone.
    fn decode(&mut self, data: &mut [u8]) -> Result<Piece, InvalidChunk> {
        let piece = match &mut self.input {
            Input::Length(remaining) => {
                let n = usize::try_from(*remaining).unwrap_or(usize::MAX).min(data.len());
                *remaining = remaining.saturating_sub(n as u64);
                Piece { used: n, payload: n, done: *remaining == 0 }
            }
            Input::Chunked(chunked) => {
                let d = chunked.decode_in_place(data)?;
                Piece { used: d.used, payload: d.payload, done: d.done }
            }
            Input::UntilClose => Piece { used: data.len(), payload: data.len(), done: false },
        };
        self.payload = self.payload.saturating_add(piece.payload as u64);
        Ok(piece)
    }

    /// Adds to `parts` what to write for a piece with this `payload` that `ended` the
    /// body: the payload, in chunk framing when the receiver gets it, then the last
    /// chunk and the trailers that may pass.
    fn frame<'a>(
        &'a self,
        payload: &'a [u8],
        ended: bool,
        size_line: &'a mut [u8; 18],
        parts: &mut Parts<'a>,
    ) {
        if !payload.is_empty() {
            if self.chunked_out {
                parts.push(encode::chunk_size_line(payload.len(), size_line));
                parts.push(payload);
                parts.push(b"\r\n");
            } else {
                parts.push(payload);
            }
        }
        if ended && self.chunked_out {
            let trailers = match &self.input {
                Input::Chunked(chunked) => chunked.trailers(),
                _ => &[],
            };
            parts.push(LAST_CHUNK);
            parts.push(trailers);
            parts.push(b"\r\n");
        }
    }
}

/// Charges `pace` with the time a wait on the client under `deadline` took.
fn charge(pace: &mut Pace, deadline: &Deadline<'_>) {
    if let Some(began) = deadline.first_wait() {
        pace.waited(began.elapsed());
    }
}

/// One read from the client, within what `pace` allows.
async fn read_client(
    client: &mut TcpStream,
    buf: &mut InBuf,
    pace: &mut Pace,
) -> Result<usize, WaitError> {
    let mut deadline = Deadline::after(pace.allowance());
    let read = buf.fill(client, &mut deadline).await;
    charge(pace, &deadline);
    read
}

/// Sends the client's request body (`framing`) to the origin: what is buffered first,
/// then as it arrives, in framing holdfast writes. A client waiting on
/// `Expect: 100-continue` gets its interim response before holdfast waits for the
/// body. Interim responses from the origin meanwhile (`100 Continue`, `103 Early
/// Hints`) are read and dropped; a final response, or the origin closing, ends the
/// upload early.
pub async fn upload(
    client: &mut TcpStream,
    buf: &mut InBuf,
    upstream: &mut TcpStream,
    upstream_buf: &mut InBuf,
    framing: Framing,
    expect_continue: &mut bool,
    limits: &UploadLimits,
) -> Result<Upload, UploadError> {
    let mut body = Relay::new(framing, framing == Framing::Chunked);
    let mut pace = Pace::new(limits.pace, limits.client_stall);
    let mut early = HeadScan::default();
    loop {
        if !buf.is_empty() {
            let piece = body.decode(buf.data_mut()).map_err(invalid)?;
            if limits.max_body.is_some_and(|max| body.payload > max) {
                return Err(UploadError::TooLarge(limits.max_body.unwrap_or_default()));
            }
            let mut size_line = [0; 18];
            let mut parts = Parts::new();
            let payload = buf.data().get(..piece.payload).unwrap_or_default();
            body.frame(payload, piece.done, &mut size_line, &mut parts);
            let sent = write_watching(upstream, upstream_buf, &mut early, parts.as_slice(), limits)
                .await?;
            buf.consume(piece.used);
            pace.moved(piece.used as u64);
            if sent == Upload::Interrupted {
                return Ok(Upload::Interrupted);
            }
        }
        if body.is_done() {
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
                if early_answer(upstream, upstream_buf, &mut early).await? {
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
    upstream: &mut TcpStream,
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

/// Reads a request body of `len` bytes into memory, so the request can be sent again
/// if a pooled connection fails under it (see `retry::should_keep_body`).
pub async fn read_kept(
    client: &mut TcpStream,
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
    client: &TcpStream,
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
    upstream: &mut TcpStream,
    upstream_buf: &mut InBuf,
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
                        if early_answer(upstream, upstream_buf, early).await? {
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

/// The client side of a download: the head goes out with the first body bytes.
struct ToClient<'a> {
    stream: &'a TcpStream,
    head: Option<&'a [u8]>,
    bytes: u64,
    pace: Pace,
}

impl ToClient<'_> {
    async fn send(&mut self, body: &Parts<'_>) -> Result<(), WaitError> {
        let mut all = Parts::new();
        if let Some(head) = self.head {
            all.push(head);
        }
        for part in body.as_slice() {
            all.push(part);
        }
        let mut deadline = Deadline::after(self.pace.allowance());
        let written = net::write_all_by(self.stream, all.as_slice(), &mut deadline).await;
        charge(&mut self.pace, &deadline);
        written.map_err(|(_, e)| e)?;
        self.head = None;
        let n = body.bytes();
        self.bytes = self.bytes.saturating_add(n);
        self.pace.moved(n);
        Ok(())
    }
}

/// How a download waits: for the origin's next bytes, and on the client.
#[derive(Debug, Clone, Copy)]
pub struct DownloadLimits {
    /// Longest wait for the origin's next bytes.
    pub upstream_stall: Duration,
    /// Longest single wait for the client to take more.
    pub client_stall: Duration,
    pub pace: PaceConfig,
}

/// Sends the client its response: `head`, then the body the origin frames with
/// `framing`, framed towards the client as `out` says.
pub async fn download(
    upstream: &mut TcpStream,
    buf: &mut InBuf,
    client: &TcpStream,
    head: &[u8],
    framing: Framing,
    out: BodyOut,
    limits: &DownloadLimits,
) -> Result<Downloaded, DownloadError> {
    let pace = Pace::new(limits.pace, limits.client_stall);
    let mut to = ToClient { stream: client, head: Some(head), bytes: 0, pace };
    let mut body = Relay::new(framing, out.is_chunked(framing));
    loop {
        if !buf.is_empty() || to.head.is_some() {
            let piece = body
                .decode(buf.data_mut())
                .map_err(|_| DownloadError::Upstream { error: invalid_data(), bytes: to.bytes })?;
            let mut size_line = [0; 18];
            let mut parts = Parts::new();
            let payload = buf.data().get(..piece.payload).unwrap_or_default();
            body.frame(payload, piece.done, &mut size_line, &mut parts);
            let sent = to.send(&parts).await;
            buf.consume(piece.used);
            if let Err(error) = sent {
                let remaining = body.remaining();
                return Err(DownloadError::Client { error, bytes: to.bytes, remaining });
            }
            if body.is_done() {
                return Ok(Downloaded { bytes: to.bytes, extra: !buf.is_empty() });
            }
        }
        match buf.fill(upstream, &mut Deadline::after(limits.upstream_stall)).await {
            Ok(0) if framing == Framing::UntilClose => {
                if body.chunked_out {
                    let mut parts = Parts::new();
                    parts.push(LAST_CHUNK);
                    parts.push(b"\r\n");
                    let sent = to.send(&parts).await;
                    sent.map_err(|error| DownloadError::Client {
                        error,
                        bytes: to.bytes,
                        remaining: None,
                    })?;
                }
                return Ok(Downloaded { bytes: to.bytes, extra: false });
            }
            Ok(0) => {
                let error = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the origin closed the connection before the body ended",
                );
                return Err(DownloadError::Upstream { error, bytes: to.bytes });
            }
            Ok(_) => {}
            Err(e) => return Err(DownloadError::Upstream { error: e.into_io(), bytes: to.bytes }),
        }
    }
}

fn invalid_data() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "invalid chunked body from the origin")
}

/// Copies bytes both ways between an upgraded client connection and its upstream
/// connection until either side ends; bytes already read on either side go first.
pub async fn tunnel(
    client: &mut TcpStream,
    client_buf: &mut InBuf,
    mut upstream: TcpStream,
    upstream_buf: &mut InBuf,
    stall: Duration,
) -> io::Result<()> {
    if !upstream_buf.is_empty() {
        net::write_all(client, &[upstream_buf.data()], stall)
            .await
            .map_err(|(_, e)| e.into_io())?;
        upstream_buf.consume(upstream_buf.len());
    }
    if !client_buf.is_empty() {
        net::write_all(&upstream, &[client_buf.data()], stall)
            .await
            .map_err(|(_, e)| e.into_io())?;
        client_buf.consume(client_buf.len());
    }
    client_buf.release();
    upstream_buf.release();
    tokio::io::copy_bidirectional(client, &mut upstream).await.map(|_| ())
}
