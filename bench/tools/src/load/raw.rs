//! A minimal HTTP/1.1 keep-alive client for the fixed-rate modes (`rate`, `hosts`): one
//! pre-serialized GET at a time on one TCP connection, its response read and thrown away,
//! at a fraction of the CPU a hyper client connection costs per request.
//!
//! Why not hyper: each hyper client connection runs its driver on a task of its own, so a
//! request wakes two tasks and crosses a channel; in `rate`, where bench-load shares a
//! core with the origin, that cost made it fall behind its own schedule by milliseconds.
//! Here the worker's task writes the request with one `write`, reads the response into a
//! buffer the slot keeps (no allocation per request once it is warm), parses the head
//! with `httparse` and skips the body as its framing says: `Content-Length`, chunked,
//! none (1xx, 204, 304), or until EOF.
//!
//! The peer's bytes are untrusted: anything malformed is an [`ExchangeError`], never a
//! panic, and the connection is dropped. So are bytes after a complete response (we never
//! pipeline, so they cannot belong to a request of ours).

use std::io;
use std::net::{IpAddr, SocketAddr};

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::exchange::{self, ExchangeError, CLOSE_WAIT};

/// What a response buffer starts with: a whole `/tiny` response, and a third of `/50k`.
const INITIAL_BUFFER_BYTES: usize = 16 * 1024;
/// Longest response head, chunk-size line or trailer line accepted: the buffer grows up to
/// this to hold one, and a longer one is a [`ProtocolError::TooLong`].
const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most header fields in one response head.
const MAX_HEADERS: usize = 64;

/// Why a response was not well-formed HTTP/1.1.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("malformed response head: {0}")]
    Head(httparse::Error),
    #[error("status {0} is not a status code")]
    Status(u16),
    #[error("response head or line longer than {MAX_LINE_BYTES} bytes")]
    TooLong,
    #[error("invalid or conflicting Content-Length")]
    ContentLength,
    #[error("malformed chunk size line")]
    ChunkSize,
    #[error("chunk data not followed by CRLF")]
    ChunkEnd,
    #[error("101 Switching Protocols to a plain GET")]
    SwitchingProtocols,
    #[error("{0} bytes after a complete response")]
    TrailingBytes(usize),
}

/// Why reading a response failed.
#[derive(Debug)]
enum ReadError {
    /// EOF or a reset before the first byte of the response (or under the write of the
    /// request): on a connection that was open before the request, the peer had closed it
    /// while it sat idle.
    ClosedBeforeResponse(io::Error),
    /// Anything else: a broken connection mid-response, or malformed bytes.
    Failed(ExchangeError),
}

impl ReadError {
    /// The error to report when there is no retry.
    fn into_exchange_error(self) -> ExchangeError {
        match self {
            Self::ClosedBeforeResponse(error) => ExchangeError::Io(error),
            Self::Failed(error) => error,
        }
    }
}

impl From<ExchangeError> for ReadError {
    fn from(error: ExchangeError) -> Self {
        Self::Failed(error)
    }
}

impl From<ProtocolError> for ReadError {
    fn from(error: ProtocolError) -> Self {
        Self::Failed(ExchangeError::Protocol(error))
    }
}

/// A complete response, body read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Response {
    status: StatusCode,
    /// Another request may go out on the connection: keep-alive, and the body's end was
    /// known without EOF.
    reusable: bool,
}

/// Bytes read from the connection and not yet consumed: `bytes[start..end]`. Kept by the
/// slot across requests and reconnects, so reading allocates only when it grows.
#[derive(Debug)]
struct ReadBuffer {
    bytes: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuffer {
    /// An empty buffer of [`INITIAL_BUFFER_BYTES`].
    fn new() -> Self {
        Self { bytes: vec![0; INITIAL_BUFFER_BYTES], start: 0, end: 0 }
    }

    /// The bytes read and not yet consumed.
    fn unread(&self) -> &[u8] {
        self.bytes.get(self.start..self.end).unwrap_or_default()
    }

    /// Marks the first `count` unread bytes (at most all of them) as consumed.
    fn consume(&mut self, count: usize) {
        self.start = self.start.saturating_add(count).min(self.end);
        if self.start == self.end {
            self.clear();
        }
    }

    /// Forgets every unread byte.
    fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Reads more bytes from `io` after the unread ones; returns how many (0 at EOF).
    async fn fill<R: AsyncRead + Unpin>(&mut self, io: &mut R) -> Result<usize, ExchangeError> {
        if self.end == self.bytes.len() {
            self.make_room()?;
        }
        let free = self.bytes.get_mut(self.end..).unwrap_or_default();
        let read = io.read(free).await.map_err(ExchangeError::Io)?;
        self.end = self.end.saturating_add(read).min(self.bytes.len());
        Ok(read)
    }

    /// Moves the unread bytes to the front, or grows the buffer if they fill it already.
    fn make_room(&mut self) -> Result<(), ProtocolError> {
        if self.start > 0 {
            self.bytes.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        } else if self.bytes.len() < MAX_LINE_BYTES {
            let grown = self.bytes.len().saturating_mul(2).clamp(1, MAX_LINE_BYTES);
            self.bytes.resize(grown, 0);
        } else {
            return Err(ProtocolError::TooLong);
        }
        Ok(())
    }
}

/// How the body of a response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// No body: 1xx, 204, 304.
    Empty,
    Length(u64),
    Chunked,
    /// Neither length nor chunked: the body ends when the peer closes.
    UntilEof,
}

/// A parsed response head.
#[derive(Debug, Clone, Copy)]
struct Head {
    status: StatusCode,
    body: Body,
    keep_alive: bool,
}

/// The header fields of a head that frame the body and say whether the connection stays.
#[derive(Debug, Default)]
struct Fields {
    content_length: Option<u64>,
    /// Some if there is a `Transfer-Encoding`: whether its last coding is `chunked`.
    chunked: Option<bool>,
    close: bool,
    keep_alive: bool,
}

impl Fields {
    /// Collects the fields of `headers` that matter here; the others are ignored.
    fn read(headers: &[httparse::Header<'_>]) -> Result<Self, ProtocolError> {
        let mut fields = Self::default();
        for header in headers {
            let name = header.name;
            if name.eq_ignore_ascii_case("content-length") {
                fields.add_content_length(header.value)?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                fields.chunked = Some(last_coding_is_chunked(header.value));
            } else if name.eq_ignore_ascii_case("connection") {
                fields.add_connection_options(header.value);
            }
        }
        Ok(fields)
    }

    /// A `Content-Length`; repeats must agree.
    fn add_content_length(&mut self, value: &[u8]) -> Result<(), ProtocolError> {
        let length = parse_decimal(value).ok_or(ProtocolError::ContentLength)?;
        match self.content_length {
            Some(earlier) if earlier != length => Err(ProtocolError::ContentLength),
            _ => {
                self.content_length = Some(length);
                Ok(())
            }
        }
    }

    /// The `close` and `keep-alive` options of a `Connection` header.
    fn add_connection_options(&mut self, value: &[u8]) {
        for option in value.split(|&byte| byte == b',').map(<[u8]>::trim_ascii) {
            self.close |= option.eq_ignore_ascii_case(b"close");
            self.keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
        }
    }
}

/// A `Transfer-Encoding` value ends in `chunked` (the only coding that frames a body).
fn last_coding_is_chunked(value: &[u8]) -> bool {
    value
        .rsplit(|&byte| byte == b',')
        .next()
        .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// A non-empty run of decimal digits (surrounding blanks allowed), None if not one or if
/// it does not fit in a u64.
fn parse_decimal(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0_u64, |number, &byte| {
        let digit = char::from(byte).to_digit(10)?;
        number.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// The size of a chunk from its size line (CRLF stripped): hex digits, then optionally
/// blanks and `;` extensions, which are ignored.
fn parse_chunk_size(line: &[u8]) -> Result<u64, ProtocolError> {
    let digits_end = line.iter().position(|byte| !byte.is_ascii_hexdigit()).unwrap_or(line.len());
    let (digits, rest) = line.split_at(digits_end);
    let rest_ok = matches!(rest.trim_ascii_start().first(), None | Some(b';'));
    if digits.is_empty() || !rest_ok {
        return Err(ProtocolError::ChunkSize);
    }
    digits
        .iter()
        .try_fold(0_u64, |size, &byte| {
            let digit = char::from(byte).to_digit(16)?;
            size.checked_mul(16)?.checked_add(u64::from(digit))
        })
        .ok_or(ProtocolError::ChunkSize)
}

/// Parses a head at the start of `bytes`: None if it is not complete yet, else the head and
/// its length in bytes.
fn parse_head(bytes: &[u8]) -> Result<Option<(Head, usize)>, ProtocolError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(bytes).map_err(ProtocolError::Head)? {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(length) => length,
    };
    let code = response.code.unwrap_or_default();
    let status = StatusCode::from_u16(code).map_err(|_| ProtocolError::Status(code))?;
    let fields = Fields::read(response.headers)?;
    let body = body_framing(status, &fields);
    let wants_keep_alive =
        if response.version == Some(0) { fields.keep_alive } else { !fields.close };
    let keep_alive = wants_keep_alive && body != Body::UntilEof;
    Ok(Some((Head { status, body, keep_alive }, length)))
}

/// How the body of a response with `status` and `fields` ends (RFC 9112, section 6.3; we
/// only send GET, so a response to HEAD never comes).
fn body_framing(status: StatusCode, fields: &Fields) -> Body {
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    match (bodiless, fields.chunked, fields.content_length) {
        (true, _, _) => Body::Empty,
        (false, Some(true), _) => Body::Chunked,
        (false, Some(false), _) => Body::UntilEof,
        (false, None, Some(length)) => Body::Length(length),
        (false, None, None) => Body::UntilEof,
    }
}

/// An EOF where more of the response was due.
fn closed_mid_response() -> ExchangeError {
    ExchangeError::Io(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed before the response was complete",
    ))
}

/// Reads one whole response to a GET from `io` (after any interim 1xx responses), using
/// and leaving `buffer` empty. A complete response with bytes after it is an error.
async fn read_response<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<Response, ReadError> {
    wait_for_first_byte(io, buffer).await?;
    let head = read_final_head(io, buffer).await?;
    skip_body(io, buffer, head.body).await?;
    let left_over = buffer.unread().len();
    if left_over > 0 {
        return Err(ProtocolError::TrailingBytes(left_over).into());
    }
    Ok(Response { status: head.status, reusable: head.keep_alive })
}

/// Reads until there is at least one byte of the response, telling EOF or a reset before it
/// ([`ReadError::ClosedBeforeResponse`]) from later failures.
async fn wait_for_first_byte<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<(), ReadError> {
    if !buffer.unread().is_empty() {
        return Ok(());
    }
    match buffer.fill(io).await {
        Ok(0) => Err(ReadError::ClosedBeforeResponse(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before any byte of the response",
        ))),
        Ok(_) => Ok(()),
        Err(ExchangeError::Io(error)) if is_reset(&error) => {
            Err(ReadError::ClosedBeforeResponse(error))
        }
        Err(error) => Err(error.into()),
    }
}

/// The peer reset or closed the connection under a read or a write.
fn is_reset(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

/// Reads heads until one that is not an interim 1xx response.
async fn read_final_head<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<Head, ReadError> {
    loop {
        let head = read_head(io, buffer).await?;
        if head.status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(ProtocolError::SwitchingProtocols.into());
        }
        if !head.status.is_informational() {
            return Ok(head);
        }
    }
}

/// Reads and consumes one head.
async fn read_head<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<Head, ReadError> {
    loop {
        if let Some((head, length)) = parse_head(buffer.unread())? {
            buffer.consume(length);
            return Ok(head);
        }
        fill_or_eof_error(io, buffer).await?;
    }
}

/// Reads more bytes; EOF is an error, as more of the response is due.
async fn fill_or_eof_error<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<(), ReadError> {
    match buffer.fill(io).await? {
        0 => Err(closed_mid_response().into()),
        _ => Ok(()),
    }
}

/// Consumes the body `body` says follows the head.
async fn skip_body<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
    body: Body,
) -> Result<(), ReadError> {
    match body {
        Body::Empty => Ok(()),
        Body::Length(length) => skip_exactly(io, buffer, length).await,
        Body::Chunked => skip_chunked(io, buffer).await,
        Body::UntilEof => skip_until_eof(io, buffer).await,
    }
}

/// Consumes `length` bytes, reading as needed.
async fn skip_exactly<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
    mut length: u64,
) -> Result<(), ReadError> {
    loop {
        let available = buffer.unread().len();
        let taken = usize::try_from(length).map_or(available, |length| length.min(available));
        buffer.consume(taken);
        length = length.saturating_sub(u64::try_from(taken).unwrap_or(u64::MAX));
        if length == 0 {
            return Ok(());
        }
        fill_or_eof_error(io, buffer).await?;
    }
}

/// Consumes a chunked body: chunks until the last (size 0), then the trailer section up to
/// its empty line.
async fn skip_chunked<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<(), ReadError> {
    loop {
        let lf = read_line(io, buffer).await?;
        let size = parse_chunk_size(line_before(buffer, lf))?;
        buffer.consume(lf.saturating_add(1));
        if size == 0 {
            return skip_trailers(io, buffer).await;
        }
        skip_exactly(io, buffer, size).await?;
        let lf = read_line(io, buffer).await?;
        if !line_before(buffer, lf).is_empty() {
            return Err(ProtocolError::ChunkEnd.into());
        }
        buffer.consume(lf.saturating_add(1));
    }
}

/// Consumes trailer fields up to and including the empty line that ends them.
async fn skip_trailers<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<(), ReadError> {
    loop {
        let lf = read_line(io, buffer).await?;
        let is_last = line_before(buffer, lf).is_empty();
        buffer.consume(lf.saturating_add(1));
        if is_last {
            return Ok(());
        }
    }
}

/// Reads until the unread bytes hold a whole line; returns the position of its LF (the
/// line stays unread).
async fn read_line<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<usize, ReadError> {
    loop {
        if let Some(lf) = buffer.unread().iter().position(|&byte| byte == b'\n') {
            return Ok(lf);
        }
        fill_or_eof_error(io, buffer).await?;
    }
}

/// The unread bytes before the LF at `lf`, without the CR before it if any.
fn line_before(buffer: &ReadBuffer, lf: usize) -> &[u8] {
    let line = buffer.unread().get(..lf).unwrap_or_default();
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Reads and drops everything until the peer closes.
async fn skip_until_eof<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut ReadBuffer,
) -> Result<(), ReadError> {
    loop {
        buffer.clear();
        if buffer.fill(io).await? == 0 {
            return Ok(());
        }
    }
}

/// One raw HTTP/1.1 connection.
#[derive(Debug)]
pub struct RawConnection {
    stream: TcpStream,
}

/// Opens a TCP connection to `addr` with TCP_NODELAY for the raw client.
pub async fn connect(addr: SocketAddr) -> Result<RawConnection, ExchangeError> {
    Ok(RawConnection { stream: exchange::connect_tcp(addr).await? })
}

impl RawConnection {
    /// Writes `request` and reads its response into `buffer`.
    async fn exchange(
        &mut self,
        request: &[u8],
        buffer: &mut ReadBuffer,
    ) -> Result<Response, ReadError> {
        if let Err(error) = self.stream.write_all(request).await {
            return Err(if is_reset(&error) {
                ReadError::ClosedBeforeResponse(error)
            } else {
                ReadError::Failed(ExchangeError::Io(error))
            });
        }
        read_response(&mut self.stream, buffer).await
    }
}

/// One keep-alive connection that a `rate` worker sends on again and again, reconnecting
/// when the previous exchange broke it or the peer closed it; [`exchange::KeepAliveSlot`]'s
/// counterpart on the raw client.
#[derive(Debug)]
pub struct RawSlot {
    addr: SocketAddr,
    /// The local address new connections come from; None: the kernel picks.
    source: Option<IpAddr>,
    connection: Option<RawConnection>,
    buffer: ReadBuffer,
    connects: u64,
}

impl RawSlot {
    /// A slot that starts with `connection` (already counted by the caller) or connects lazily.
    pub fn new(addr: SocketAddr, connection: Option<RawConnection>) -> Self {
        Self { addr, source: None, connection, buffer: ReadBuffer::new(), connects: 0 }
    }

    /// The same slot, making its connections from local address `source`.
    pub fn with_source(self, source: Option<IpAddr>) -> Self {
        Self { source, ..self }
    }

    /// TCP connections this slot opened.
    pub fn connects(&self) -> u64 {
        self.connects
    }

    /// Sends `request` (a whole serialized GET) and reads the response before `deadline`.
    ///
    /// A connection the peer closed while idle (EOF or a reset before any byte of the
    /// response, on a connection that was open before this call: reused, or opened up
    /// front) is replaced without an error and the request sent again, once: keep-alive
    /// limits such as nginx's `keepalive_requests` close connections gracefully, and the
    /// request may have gone into the closed socket. Any failure after that point is
    /// returned, and unless it was a non-2xx status the connection is dropped, so the next
    /// call reconnects. So is a connection whose response said it closes.
    pub async fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), ExchangeError> {
        let outcome = exchange::by_deadline(deadline, self.exchange(request)).await;
        if outcome.as_ref().is_err_and(ExchangeError::ends_connection) {
            self.connection = None;
        }
        outcome
    }

    /// Sends on the open connection, or on a new one if there is none or the peer had
    /// closed it; drops the connection after a response that ends it.
    async fn exchange(&mut self, request: &[u8]) -> Result<(), ExchangeError> {
        let response = match self.send_on_open_connection(request).await {
            Some(outcome) => outcome?,
            None => self.send_on_new_connection(request).await?,
        };
        if !response.reusable {
            self.connection = None;
        }
        if response.status.is_success() {
            Ok(())
        } else {
            Err(ExchangeError::Status(response.status))
        }
    }

    /// Sends on the connection the slot has; None if it has none, or if the peer had closed
    /// it while it was idle (then it is dropped).
    async fn send_on_open_connection(
        &mut self,
        request: &[u8],
    ) -> Option<Result<Response, ExchangeError>> {
        let connection = self.connection.as_mut()?;
        match connection.exchange(request, &mut self.buffer).await {
            Ok(response) => Some(Ok(response)),
            Err(ReadError::ClosedBeforeResponse(_)) => {
                self.connection = None;
                None
            }
            Err(error) => Some(Err(error.into_exchange_error())),
        }
    }

    /// Connects (counted) and sends on the new connection.
    async fn send_on_new_connection(&mut self, request: &[u8]) -> Result<Response, ExchangeError> {
        self.buffer.clear();
        let stream = exchange::connect_tcp_from(self.addr, self.source).await?;
        let connection = self.connection.insert(RawConnection { stream });
        self.connects += 1;
        connection.exchange(request, &mut self.buffer).await.map_err(ReadError::into_exchange_error)
    }

    /// Shuts the connection down, if any, waiting briefly for the FIN to go out.
    pub async fn close(self) {
        if let Some(mut connection) = self.connection {
            let _ = tokio::time::timeout(CLOSE_WAIT, connection.stream.shutdown()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use tokio::io::ReadBuf;
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::load::exchange::ErrorKind;

    /// A keep-alive 200 with a 2-byte body.
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    /// A chunked 200: a chunk with an extension, another, the last chunk and two trailers.
    const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;name=value\r\nhello\r\nA\r\n0123456789\r\n0\r\nExpires: never\r\nX-Sum: 1\r\n\r\n";

    /// A reader that hands out one piece per read, then EOF if `eof`, or else an error: a
    /// response reader that reads past the end of a response it should have finished, or
    /// that waits for an EOF nobody sends, fails the test.
    struct Pieces {
        pieces: VecDeque<Vec<u8>>,
        eof: bool,
    }

    impl Pieces {
        fn new<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Self {
            Self { pieces: pieces.into_iter().map(<[u8]>::to_vec).collect(), eof: false }
        }

        fn whole(bytes: &[u8]) -> Self {
            Self::new([bytes])
        }

        fn byte_by_byte(bytes: &[u8]) -> Self {
            Self::new(bytes.chunks(1))
        }

        /// The reader ends with EOF after its pieces.
        fn then_eof(self) -> Self {
            Self { eof: true, ..self }
        }
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            let Some(mut piece) = this.pieces.pop_front() else {
                return Poll::Ready(if this.eof {
                    Ok(())
                } else {
                    Err(io::Error::other("read past the end of the scripted bytes"))
                });
            };
            let count = piece.len().min(out.remaining());
            out.put_slice(&piece[..count]);
            if count < piece.len() {
                piece.drain(..count);
                this.pieces.push_front(piece);
            }
            Poll::Ready(Ok(()))
        }
    }

    /// Reads one response from `pieces` into a fresh buffer.
    async fn read(mut pieces: Pieces) -> Result<Response, ReadError> {
        read_response(&mut pieces, &mut ReadBuffer::new()).await
    }

    /// The response read from `pieces`, which must be one.
    async fn read_ok(pieces: Pieces) -> Response {
        read(pieces).await.unwrap_or_else(|error| panic!("expected a response: {error:?}"))
    }

    /// A response with `status`.
    fn ok(status: u16, reusable: bool) -> Response {
        Response { status: StatusCode::from_u16(status).expect("a status"), reusable }
    }

    /// The reader's error, which must be a failure (not a close before the response).
    async fn failure(pieces: Pieces) -> ExchangeError {
        match read(pieces).await {
            Err(ReadError::Failed(error)) => error,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn content_length_bodies_are_read_to_their_end_and_no_further() {
        assert_eq!(read_ok(Pieces::whole(OK)).await, ok(200, true));
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 51200\r\n\r\n";
        let body = vec![b'b'; 51_200];
        let large = Pieces::new([&head[..], &body[..20_000], &body[20_000..]]);
        assert_eq!(read_ok(large).await, ok(200, true));
    }

    #[tokio::test]
    async fn chunked_bodies_skip_extensions_and_trailers() {
        assert_eq!(read_ok(Pieces::whole(CHUNKED)).await, ok(200, true));
        let bare_lf = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n2 \n..\n0\n\n";
        assert_eq!(read_ok(Pieces::whole(bare_lf)).await, ok(200, true));
    }

    #[tokio::test]
    async fn heads_chunk_lines_and_bodies_may_split_anywhere() {
        for response in [OK, CHUNKED] {
            assert_eq!(read_ok(Pieces::byte_by_byte(response)).await, ok(200, true));
            for at in 1..response.len() {
                let (first, rest) = response.split_at(at);
                assert_eq!(read_ok(Pieces::new([first, rest])).await, ok(200, true), "{at}");
            }
        }
    }

    #[tokio::test]
    async fn interim_responses_are_skipped() {
        let response = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\
            Link: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(read_ok(Pieces::whole(response)).await, ok(200, true));
        assert_eq!(read_ok(Pieces::byte_by_byte(response)).await, ok(200, true));
        let switching = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n";
        let error = failure(Pieces::whole(switching)).await;
        assert!(matches!(error, ExchangeError::Protocol(ProtocolError::SwitchingProtocols)));
    }

    #[tokio::test]
    async fn no_content_and_not_modified_have_no_body_whatever_their_length_says() {
        let no_content = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(read_ok(Pieces::whole(no_content)).await, ok(204, true));
        let not_modified = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n";
        assert_eq!(read_ok(Pieces::whole(not_modified)).await, ok(304, true));
    }

    #[tokio::test]
    async fn connection_close_and_http_1_0_end_the_connection() {
        let close = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: Close\r\n\r\nok";
        assert_eq!(read_ok(Pieces::whole(close)).await, ok(200, false));
        let old = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(read_ok(Pieces::whole(old)).await, ok(200, false));
        let old_kept = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok";
        assert_eq!(read_ok(Pieces::whole(old_kept)).await, ok(200, true));
    }

    #[tokio::test]
    async fn a_body_without_length_or_chunks_ends_at_eof() {
        let head = b"HTTP/1.1 200 OK\r\n\r\n";
        let until_eof = Pieces::new([&head[..], b"some", b" body"]).then_eof();
        assert_eq!(read_ok(until_eof).await, ok(200, false));
        let not_chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n";
        let until_eof = Pieces::new([&not_chunked[..], b"ok, and more"]).then_eof();
        assert_eq!(read_ok(until_eof).await, ok(200, false));
        // Without an EOF the reader waits for one: here the script runs out instead.
        let error = failure(Pieces::new([&head[..], b"body"])).await;
        assert!(matches!(error, ExchangeError::Io(_)), "{error:?}");
    }

    #[tokio::test]
    async fn bytes_after_a_complete_response_are_an_error() {
        let twice = [OK, OK].concat();
        let error = failure(Pieces::whole(&twice)).await;
        assert!(matches!(error, ExchangeError::Protocol(ProtocolError::TrailingBytes(40))));
        assert_eq!(error.kind(), ErrorKind::Io);
    }

    #[tokio::test]
    async fn eof_before_the_response_is_told_from_eof_in_it() {
        let nothing = read(Pieces::new([]).then_eof()).await;
        assert!(matches!(nothing, Err(ReadError::ClosedBeforeResponse(_))), "{nothing:?}");
        for cut in [&OK[..10], &OK[..OK.len() - 1], &CHUNKED[..CHUNKED.len() - 2]] {
            let error = failure(Pieces::whole(cut).then_eof()).await;
            let is_eof =
                matches!(&error, ExchangeError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof);
            assert!(is_eof, "{error:?}");
        }
    }

    #[tokio::test]
    async fn malformed_responses_are_errors_not_panics() {
        let cases: [&[u8]; 10] = [
            b"HTTZ/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;ext\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2x\r\nok\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokay\r\n0\r\n\r\n",
            b"HTTP/1.1 099 Low\r\n\r\n",
        ];
        for case in cases {
            let error = failure(Pieces::whole(case).then_eof()).await;
            assert!(matches!(error, ExchangeError::Protocol(_)), "{case:?}: {error:?}");
        }
        let endless_head = [&b"HTTP/1.1 200 OK\r\nX: "[..], &vec![b'x'; MAX_LINE_BYTES]].concat();
        let error = failure(Pieces::whole(&endless_head)).await;
        assert!(matches!(error, ExchangeError::Protocol(ProtocolError::TooLong)), "{error:?}");
    }

    #[tokio::test]
    async fn the_buffer_grows_for_a_head_longer_than_it() {
        let value = vec![b'v'; INITIAL_BUFFER_BYTES * 2];
        let response =
            [&b"HTTP/1.1 200 OK\r\nX-Big: "[..], &value, b"\r\nContent-Length: 2\r\n\r\nok"]
                .concat();
        let mut buffer = ReadBuffer::new();
        let mut pieces = Pieces::new(response.chunks(1000));
        let response = read_response(&mut pieces, &mut buffer).await.expect("a response");
        assert_eq!(response, ok(200, true));
        assert!(buffer.unread().is_empty());
    }

    /// What the scripted server does on one connection: answers a request with each reply
    /// in turn, then closes the connection, or holds it (reading and dropping whatever
    /// comes, answering nothing) until the client closes.
    struct Script {
        replies: Vec<&'static [u8]>,
        then_close: bool,
    }

    /// A [`Script`] with `replies`.
    fn script(replies: &[&'static [u8]], then_close: bool) -> Script {
        Script { replies: replies.to_vec(), then_close }
    }

    /// Serves `scripts` on 127.0.0.1:0, one accepted connection each, in order. The task
    /// returns the requests it read.
    async fn serve(scripts: Vec<Script>) -> (SocketAddr, JoinHandle<Vec<Vec<u8>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let mut requests = Vec::new();
            for script in scripts {
                let (mut stream, _) = listener.accept().await.expect("accept");
                for reply in script.replies {
                    requests.push(read_request(&mut stream).await);
                    stream.write_all(reply).await.expect("write a reply");
                }
                if !script.then_close {
                    tokio::spawn(drain(stream));
                }
            }
            requests
        });
        (addr, server)
    }

    /// Reads one request head, byte by byte so as not to read into the next one.
    async fn read_request(stream: &mut TcpStream) -> Vec<u8> {
        let mut request = Vec::new();
        let mut byte = [0; 1];
        while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
            request.push(byte[0]);
        }
        request
    }

    /// Reads and drops whatever comes on `stream` until EOF or an error.
    async fn drain(mut stream: TcpStream) {
        let mut sink = [0; 1024];
        while stream.read(&mut sink).await.is_ok_and(|read| read > 0) {}
    }

    /// A deadline no test here should come near.
    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    /// What the slot tests send.
    const REQUEST: &[u8] = b"GET /tiny HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

    #[tokio::test]
    async fn a_503_is_a_status_error_and_the_connection_serves_the_next_request() {
        let unavailable = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
        let (addr, server) = serve(vec![script(&[unavailable, OK], false)]).await;
        let mut slot = RawSlot::new(addr, None);
        let first = slot.send(REQUEST, soon()).await;
        assert!(matches!(first, Err(ExchangeError::Status(StatusCode::SERVICE_UNAVAILABLE))));
        assert_eq!(first.err().map(|error| error.kind()), Some(ErrorKind::Status5xx));
        slot.send(REQUEST, soon()).await.expect("the same connection answers again");
        assert_eq!(slot.connects(), 1);
        let requests = server.await.expect("the server ends");
        assert_eq!(requests, [REQUEST, REQUEST], "the request goes out as given");
    }

    #[tokio::test]
    async fn a_connection_the_peer_closed_while_idle_is_replaced_without_an_error() {
        let (addr, _server) = serve(vec![script(&[OK], true), script(&[OK], false)]).await;
        let mut slot = RawSlot::new(addr, None);
        slot.send(REQUEST, soon()).await.expect("first response");
        slot.send(REQUEST, soon()).await.expect("sent again on a new connection");
        assert_eq!(slot.connects(), 2);
    }

    #[tokio::test]
    async fn a_connection_opened_up_front_and_closed_before_use_is_replaced_too() {
        let (addr, _server) = serve(vec![script(&[], true), script(&[OK], false)]).await;
        let opened = connect(addr).await.expect("connect");
        let mut slot = RawSlot::new(addr, Some(opened));
        slot.send(REQUEST, soon()).await.expect("sent again on a new connection");
        assert_eq!(slot.connects(), 1, "the connection opened up front is the caller's");
    }

    #[tokio::test]
    async fn connection_close_makes_the_next_request_reconnect() {
        let closing = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        // The server holds the first connection open and never answers on it again: only a
        // client that honours `Connection: close` gets the second response.
        let (addr, _server) = serve(vec![script(&[closing], false), script(&[OK], false)]).await;
        let mut slot = RawSlot::new(addr, None);
        slot.send(REQUEST, soon()).await.expect("first response");
        slot.send(REQUEST, Instant::now() + Duration::from_secs(2)).await.expect("reconnected");
        assert_eq!(slot.connects(), 2);
    }

    #[tokio::test]
    async fn extra_bytes_drop_the_connection_with_an_io_error() {
        let twice: &'static [u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\
            HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let (addr, _server) = serve(vec![script(&[twice], false), script(&[OK], false)]).await;
        let mut slot = RawSlot::new(addr, None);
        let error = slot.send(REQUEST, soon()).await.expect_err("two responses to one request");
        assert_eq!(error.kind(), ErrorKind::Io, "{error}");
        slot.send(REQUEST, soon()).await.expect("a new connection");
        assert_eq!(slot.connects(), 2);
    }

    #[tokio::test]
    async fn a_new_connection_closed_before_its_response_is_an_io_error_not_a_retry() {
        let (addr, _server) = serve(vec![script(&[], true)]).await;
        let mut slot = RawSlot::new(addr, None);
        let error = slot.send(REQUEST, soon()).await.expect_err("no response");
        assert_eq!(error.kind(), ErrorKind::Io, "{error}");
        assert_eq!(slot.connects(), 1);
    }

    #[tokio::test]
    async fn no_response_before_the_deadline_is_a_timeout_and_drops_the_connection() {
        let (addr, _server) = serve(vec![script(&[], false)]).await;
        let mut slot = RawSlot::new(addr, None);
        let started = Instant::now();
        let outcome = slot.send(REQUEST, started + Duration::from_millis(100)).await;
        assert!(matches!(outcome, Err(ExchangeError::Timeout)), "{outcome:?}");
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(slot.connection.is_none());
    }

    #[tokio::test]
    async fn close_shuts_the_socket_down() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let slot = RawSlot::new(addr, Some(connect(addr).await.expect("connect")));
        let (mut accepted, _) = listener.accept().await.expect("accept");
        slot.close().await;
        let mut byte = [0; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), accepted.read(&mut byte)).await;
        assert_eq!(read.expect("EOF within 5 s").expect("read"), 0);
    }
}
