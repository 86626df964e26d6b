//! Checks the framing of every request a client sends, before hyper parses it.
//!
//! hyper resolves an ambiguous request (both `Content-Length` and
//! `Transfer-Encoding`) by dropping `Content-Length`, which is safe for hyper but hides
//! a request smuggling attempt from the proxy. [`FramingGuard`] wraps the client socket
//! and reads the same bytes hyper reads: it finds each request head, checks its
//! framing headers, and follows the body framing to the next head. The first bad
//! request poisons the connection from that request on; the proxy answers it with 400
//! and forwards nothing (see [`FramingState::rejection`]).
//!
//! It does not decode bodies or enforce limits hyper already enforces (header size,
//! count, timeouts); when it cannot follow the stream (an upgrade, a head hyper will
//! reject anyway) it stops looking.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Why a request was refused before it was forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FramingViolation {
    ContentLengthWithTransferEncoding = 1,
    ConflictingContentLength = 2,
    InvalidContentLength = 3,
    TransferEncodingNotChunked = 4,
    InvalidChunk = 5,
}

impl FramingViolation {
    fn from_u8(v: u8) -> Option<Self> {
        use FramingViolation::*;
        [ContentLengthWithTransferEncoding, ConflictingContentLength, InvalidContentLength]
            .into_iter()
            .chain([TransferEncodingNotChunked, InvalidChunk])
            .find(|x| *x as u8 == v)
    }

    /// Text for the 400 body and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            FramingViolation::ContentLengthWithTransferEncoding => {
                "request has both Content-Length and Transfer-Encoding"
            }
            FramingViolation::ConflictingContentLength => {
                "request has conflicting Content-Length headers"
            }
            FramingViolation::InvalidContentLength => "request has an invalid Content-Length",
            FramingViolation::TransferEncodingNotChunked => {
                "request Transfer-Encoding does not end in chunked"
            }
            FramingViolation::InvalidChunk => "request has an invalid chunked body",
        }
    }
}

/// What the guard found, shared with the code that serves the connection.
#[derive(Debug)]
pub struct FramingState {
    /// Index of the first refused request; `u64::MAX` while none is.
    poisoned_at: AtomicU64,
    violation: AtomicU8,
    /// Requests the proxy has taken from this connection so far.
    served: AtomicU64,
}

impl FramingState {
    fn new() -> Self {
        FramingState {
            poisoned_at: AtomicU64::new(u64::MAX),
            violation: AtomicU8::new(0),
            served: AtomicU64::new(0),
        }
    }

    /// Called once per request, in order: the violation that refuses it, if any.
    ///
    /// hyper hands requests to the service in the order they arrive, and the guard
    /// sees each head before hyper can parse it, so request N here is head N there.
    pub fn rejection(&self) -> Option<FramingViolation> {
        let index = self.served.fetch_add(1, Ordering::Relaxed);
        if index >= self.poisoned_at.load(Ordering::Acquire) {
            FramingViolation::from_u8(self.violation.load(Ordering::Relaxed))
        } else {
            None
        }
    }

    fn poison(&self, index: u64, violation: FramingViolation) {
        self.violation.store(violation as u8, Ordering::Relaxed);
        self.poisoned_at.store(index, Ordering::Release);
    }
}

/// A client socket whose incoming bytes are checked on their way to hyper.
pub struct FramingGuard<IO> {
    io: IO,
    scanner: Scanner,
}

impl<IO> FramingGuard<IO> {
    pub fn new(io: IO, max_head_bytes: usize) -> (Self, Arc<FramingState>) {
        let state = Arc::new(FramingState::new());
        let scanner = Scanner::new(Arc::clone(&state), max_head_bytes);
        (FramingGuard { io, scanner }, state)
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for FramingGuard<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let res = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = res {
            this.scanner.feed(&buf.filled()[before..]);
        }
        res
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for FramingGuard<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, b)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Where the scanner is in the client's byte stream.
#[derive(Debug, PartialEq, Eq)]
enum Phase {
    /// Collecting a request head.
    Head,
    /// Skipping `n` more bytes of a Content-Length body.
    Body(u64),
    /// Collecting a chunk-size line.
    ChunkSize,
    /// Skipping `n` more bytes of chunk data.
    ChunkData(u64),
    /// Expecting the CRLF after chunk data (`seen` bytes of it so far).
    ChunkEnd { seen: u8 },
    /// Collecting trailer lines after the last chunk.
    Trailers,
    /// Not following the stream any more (upgrade, unparseable, or poisoned).
    Off,
}

/// Follows request framing through a byte stream.
struct Scanner {
    state: Arc<FramingState>,
    phase: Phase,
    /// Bytes of the current head, chunk-size line or trailer section.
    pending: Vec<u8>,
    /// Heads completed so far (the index of the next one).
    heads: u64,
    max_head_bytes: usize,
}

/// A chunk-size line longer than this is not a real client.
const MAX_CHUNK_LINE: usize = 4096;

impl Scanner {
    fn new(state: Arc<FramingState>, max_head_bytes: usize) -> Self {
        Scanner { state, phase: Phase::Head, pending: Vec::new(), heads: 0, max_head_bytes }
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let used = match self.phase {
                Phase::Off => return,
                Phase::Head => self.feed_head(bytes),
                Phase::Body(n) => {
                    let used = skip(n, bytes.len());
                    self.phase =
                        if used as u64 == n { Phase::Head } else { Phase::Body(n - used as u64) };
                    used
                }
                Phase::ChunkSize => self.feed_chunk_size(bytes),
                Phase::ChunkData(n) => {
                    let used = skip(n, bytes.len());
                    self.phase = if used as u64 == n {
                        Phase::ChunkEnd { seen: 0 }
                    } else {
                        Phase::ChunkData(n - used as u64)
                    };
                    used
                }
                Phase::ChunkEnd { seen } => self.feed_chunk_end(bytes[0], seen),
                Phase::Trailers => self.feed_trailers(bytes),
            };
            bytes = &bytes[used..];
        }
    }

    fn feed_head(&mut self, bytes: &[u8]) -> usize {
        let old = self.pending.len();
        self.pending.extend_from_slice(bytes);
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&self.pending) {
            Ok(httparse::Status::Complete(len)) => {
                let next = judge_head(&req);
                self.pending.clear();
                let index = self.heads;
                self.heads += 1;
                self.phase = match next {
                    Ok(phase) => phase,
                    Err(violation) => {
                        self.state.poison(index, violation);
                        Phase::Off
                    }
                };
                len - old
            }
            Ok(httparse::Status::Partial) if self.pending.len() <= self.max_head_bytes => {
                bytes.len()
            }
            // Too large, too many headers or malformed: hyper refuses it (431 or 400)
            // and closes the connection, so there is nothing left to follow.
            _ => {
                self.phase = Phase::Off;
                bytes.len()
            }
        }
    }

    fn feed_chunk_size(&mut self, bytes: &[u8]) -> usize {
        let Some(nl) = bytes.iter().position(|b| *b == b'\n') else {
            self.pending.extend_from_slice(bytes);
            if self.pending.len() > MAX_CHUNK_LINE {
                self.poison_current(FramingViolation::InvalidChunk);
            }
            return bytes.len();
        };
        self.pending.extend_from_slice(&bytes[..nl]);
        let size = parse_chunk_size(&self.pending);
        self.pending.clear();
        self.phase = match size {
            Some(0) => Phase::Trailers,
            Some(n) => Phase::ChunkData(n),
            None => {
                self.poison_current(FramingViolation::InvalidChunk);
                Phase::Off
            }
        };
        nl + 1
    }

    fn feed_chunk_end(&mut self, byte: u8, seen: u8) -> usize {
        self.phase = match (seen, byte) {
            (0, b'\r') => Phase::ChunkEnd { seen: 1 },
            (0, b'\n') | (1, b'\n') => Phase::ChunkSize,
            _ => {
                self.poison_current(FramingViolation::InvalidChunk);
                Phase::Off
            }
        };
        1
    }

    /// Trailer lines end with an empty line; only the boundary matters here.
    fn feed_trailers(&mut self, bytes: &[u8]) -> usize {
        let old = self.pending.len();
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(nl) = self.pending[start..].iter().position(|b| *b == b'\n') {
            let line = &self.pending[start..start + nl];
            let end = start + nl + 1;
            if line.is_empty() || line == b"\r" {
                self.pending.clear();
                self.phase = Phase::Head;
                return end - old;
            }
            start = end;
        }
        if self.pending.len() > self.max_head_bytes {
            self.phase = Phase::Off;
        }
        bytes.len()
    }

    /// A bad body poisons the next request: the current one is already being
    /// forwarded, and hyper fails its body on the same bytes.
    fn poison_current(&mut self, violation: FramingViolation) {
        self.state.poison(self.heads, violation);
        self.phase = Phase::Off;
    }
}

fn skip(remaining: u64, available: usize) -> usize {
    remaining.min(available as u64) as usize
}

/// Decides what follows a complete head, or refuses it.
fn judge_head(req: &httparse::Request<'_, '_>) -> Result<Phase, FramingViolation> {
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding: Option<&[u8]> = None;
    let mut upgrade = false;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let value =
                parse_content_length(h.value).ok_or(FramingViolation::InvalidContentLength)?;
            if content_length.is_some_and(|prev| prev != value) {
                return Err(FramingViolation::ConflictingContentLength);
            }
            content_length = Some(value);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Several lines form one list; the last coding is what counts.
            transfer_encoding = Some(h.value);
        } else if h.name.eq_ignore_ascii_case("upgrade") {
            upgrade = true;
        }
    }
    if req.method.is_some_and(|m| m.eq_ignore_ascii_case("CONNECT")) || upgrade {
        // After a 101 the bytes are not HTTP; hyper checks the rest of such a request.
        return Ok(Phase::Off);
    }
    match (content_length, transfer_encoding) {
        (Some(_), Some(_)) => Err(FramingViolation::ContentLengthWithTransferEncoding),
        (None, Some(te)) if last_coding_is_chunked(te) => Ok(Phase::ChunkSize),
        (None, Some(_)) => Err(FramingViolation::TransferEncodingNotChunked),
        (Some(0), None) | (None, None) => Ok(Phase::Head),
        (Some(n), None) => Ok(Phase::Body(n)),
    }
}

fn parse_content_length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

fn last_coding_is_chunked(value: &[u8]) -> bool {
    let last = value.rsplit(|b| *b == b',').next().unwrap_or(b"");
    last.trim_ascii().eq_ignore_ascii_case(b"chunked")
}

/// Parses `1a;ext=1\r` into 26. Sizes past 2^60 are refused rather than overflowed.
fn parse_chunk_size(line: &[u8]) -> Option<u64> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let hex = line.split(|b| *b == b';').next()?.trim_ascii_end();
    if hex.is_empty() || hex.len() > 15 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

#[cfg(test)]
mod tests;
