//! `floor --listen ADDR --upstream ADDR`: the smallest HTTP/1.1 relay that still does a
//! proxy's job, for benchmarks only (not part of the product; it lives in bench/tools and
//! never in src/).
//!
//! Its one job: relay each client request to the origin over a kept upstream connection
//! and the response back, with as little work as still frames every message right. Run
//! against the same origin and load as holdfast, its CPU time per request is a lower bound
//! on what relaying HTTP/1.1 in user space costs on the machine: the system calls and the
//! kernel's TCP work, with next to nothing of a proxy's own on top.
//!
//! - One thread (a current-thread runtime and a `LocalSet`), one task per client
//!   connection. Idle upstream connections wait in one LIFO stack: a request takes the
//!   newest (or connects when there is none), and its response puts it back. No idle
//!   timeout and no limit but a cap on how many are kept idle.
//! - Requests: the head (parsed with httparse) goes upstream byte for byte without its
//!   `Connection` and `Keep-Alive` lines, so the upstream connection stays alive whatever
//!   the client asked; a `Content-Length` body follows as it came. No Host rewrite, no
//!   forwarding headers.
//! - Responses: framed by `Content-Length` (no body after HEAD, 204 and 304), head and body
//!   relayed through a fixed 64 KiB buffer, each read written out before the next, so a
//!   response is never held whole. A small response goes out in one write.
//! - A client that asked to close (`Connection: close`, or HTTP/1.0 without keep-alive)
//!   gets `Connection: close` in the response head and is closed after it; the upstream
//!   connection is kept all the same.
//!
//! What it does not do: a request with `Transfer-Encoding` is answered 501 (the benchmarks
//! send GETs without bodies); a response without `Content-Length` (chunked or
//! close-delimited) or with a 1xx status is answered 502, as is any upstream failure before
//! the response head went out (bench-origin always sends `Content-Length`); after that, the
//! client connection is just closed. The upstream connection of a failed exchange is
//! dropped; nothing is retried. No timeouts, no logging, no metrics.

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use holdfast_bench_tools::runtime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::LocalSet;

/// Storage of a client connection's read buffer: request heads, and bodies passing
/// through (holdfast's client buffer is the same size).
const REQUEST_BUF: usize = 8 * 1024;
/// Storage of the buffer responses pass through: one read takes up to this much (as
/// holdfast's buffer for upstream responses).
const RESPONSE_BUF: usize = 64 * 1024;
/// Header lines a head may have; more answers 431 (a request) or 502 (a response).
const MAX_HEADERS: usize = 64;
/// Idle upstream connections kept; one past that is closed instead.
const MAX_IDLE_UPSTREAM: usize = 4096;
/// Buffer sets of finished client connections kept for the next ones, so a new connection
/// neither allocates nor zeroes its buffers.
const MAX_CACHED_BUFFERS: usize = 256;
/// Pause after a failed accept (out of descriptors, say), so the loop does not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const HEAD_TOO_LARGE: &[u8] =
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const NOT_IMPLEMENTED: &[u8] =
    b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const BAD_GATEWAY: &[u8] =
    b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// Added to the response head of a client's last request.
const CLOSE_LINE: &[u8] = b"Connection: close\r\n";
/// Added to the response head for an HTTP/1.0 client that asked to keep the connection.
const KEEP_ALIVE_LINE: &[u8] = b"Connection: keep-alive\r\n";

#[derive(Debug, Parser)]
#[command(
    name = "floor",
    about = "Minimal HTTP/1.1 relay with pooled upstream connections: a CPU floor for \
             HTTP/1.1 proxying (benchmark only)"
)]
struct Args {
    /// Address to accept HTTP/1.1 clients on.
    #[arg(long)]
    listen: SocketAddr,
    /// The origin to relay every request to.
    #[arg(long)]
    upstream: SocketAddr,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = runtime::build(NonZeroUsize::MIN)
        .context("building the tokio runtime")
        .and_then(|runtime| LocalSet::new().block_on(&runtime, run(args)));
    runtime::exit_code("floor", result)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    runtime::print_listening(&[addr])?;

    let shared = Rc::new(Shared {
        upstream: args.upstream,
        idle: RefCell::new(Vec::new()),
        buffers: RefCell::new(Vec::new()),
    });
    loop {
        match listener.accept().await {
            Ok((socket, _)) => {
                // Responses go out whole; they must not wait for Nagle. Failing only
                // costs latency.
                let _ = socket.set_nodelay(true);
                tokio::task::spawn_local(serve_client(socket, Rc::clone(&shared)));
            }
            Err(_) => tokio::time::sleep(ACCEPT_PAUSE).await,
        }
    }
}

/// What every client connection shares: the origin's address, its idle connections and
/// the buffers of finished client connections. Single-threaded, and no borrow is held
/// across an `.await`.
struct Shared {
    upstream: SocketAddr,
    /// Idle upstream connections, newest last.
    idle: RefCell<Vec<TcpStream>>,
    buffers: RefCell<Vec<Buffers>>,
}

impl Shared {
    /// The newest idle upstream connection, or a new one.
    async fn checkout(&self) -> io::Result<TcpStream> {
        let pooled = self.idle.borrow_mut().pop();
        match pooled {
            Some(upstream) => Ok(upstream),
            None => connect(self.upstream).await,
        }
    }

    /// Keeps an upstream connection whose last response ended cleanly.
    fn release(&self, upstream: TcpStream) {
        let mut idle = self.idle.borrow_mut();
        if idle.len() < MAX_IDLE_UPSTREAM {
            idle.push(upstream);
        }
    }

    fn take_buffers(&self) -> Buffers {
        let cached = self.buffers.borrow_mut().pop();
        cached.unwrap_or_else(Buffers::new)
    }

    fn give_back(&self, buffers: Buffers) {
        let mut cached = self.buffers.borrow_mut();
        if cached.len() < MAX_CACHED_BUFFERS {
            cached.push(buffers);
        }
    }
}

async fn connect(upstream: SocketAddr) -> io::Result<TcpStream> {
    let socket = TcpStream::connect(upstream).await?;
    let _ = socket.set_nodelay(true);
    Ok(socket)
}

/// A client connection's buffers.
struct Buffers {
    /// What the client sent and was not relayed yet, from the start.
    request: Box<[u8]>,
    /// Responses on their way through.
    response: Box<[u8]>,
    /// A head with lines dropped or added.
    head: Vec<u8>,
}

impl Buffers {
    fn new() -> Self {
        Self {
            request: vec![0; REQUEST_BUF].into_boxed_slice(),
            response: vec![0; RESPONSE_BUF].into_boxed_slice(),
            head: Vec::with_capacity(1024),
        }
    }
}

/// One client connection and the bytes it sent that were not relayed yet.
struct Client {
    stream: TcpStream,
    buffers: Buffers,
    /// Bytes of `buffers.request` holding what the client sent.
    filled: usize,
}

/// Whether a client connection carries another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Request,
    Close,
}

/// Serves one client connection, request after request, until it closes or one of its
/// exchanges ends it.
async fn serve_client(stream: TcpStream, shared: Rc<Shared>) {
    let mut client = Client { stream, buffers: shared.take_buffers(), filled: 0 };
    while exchange(&mut client, &shared).await == Next::Request {}
    shared.give_back(client.buffers);
}

/// One request and its response.
async fn exchange(client: &mut Client, shared: &Shared) -> Next {
    let request = match read_request_head(client).await {
        Ok(Some(request)) => request,
        Ok(None) => return Next::Close,
        Err(refusal) => {
            let _ = client.stream.write_all(refusal).await;
            return Next::Close;
        }
    };
    let Ok(mut upstream) = shared.checkout().await else {
        let _ = client.stream.write_all(BAD_GATEWAY).await;
        return Next::Close;
    };
    if send_request(client, &mut upstream, &request).await.is_err() {
        let _ = client.stream.write_all(BAD_GATEWAY).await;
        return Next::Close;
    }
    match relay_response(client, &mut upstream, &request).await {
        Ok(reusable) => {
            if reusable {
                shared.release(upstream);
            }
        }
        Err(Failed::BeforeHead) => {
            let _ = client.stream.write_all(BAD_GATEWAY).await;
            return Next::Close;
        }
        Err(Failed::AfterHead) => return Next::Close,
    }
    if request.close {
        Next::Close
    } else {
        Next::Request
    }
}

/// Reads until the buffer holds a whole request head. `Ok(None)`: the client closed (or
/// failed) first; `Err`: the answer refusing the request.
async fn read_request_head(client: &mut Client) -> Result<Option<RequestHead>, &'static [u8]> {
    loop {
        let received = client.buffers.request.get(..client.filled).unwrap_or_default();
        if !received.is_empty() {
            match parse_request(received) {
                Parsed::Complete(request) => return Ok(Some(request)),
                Parsed::Refused(refusal) => return Err(refusal),
                Parsed::Partial if client.filled >= client.buffers.request.len() => {
                    return Err(HEAD_TOO_LARGE)
                }
                Parsed::Partial => {}
            }
        }
        let free = client.buffers.request.get_mut(client.filled..).unwrap_or_default();
        match client.stream.read(free).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => client.filled = client.filled.saturating_add(n),
        }
    }
}

/// Sends the request head and its body upstream, leaving in the client's buffer only what
/// the client sent after it (a pipelined request).
async fn send_request(
    client: &mut Client,
    upstream: &mut TcpStream,
    request: &RequestHead,
) -> io::Result<()> {
    let Client { stream, buffers, filled } = client;
    let received = buffers.request.get(..*filled).unwrap_or_default();
    let after_head = received.len().saturating_sub(request.len);
    let body_here = usize::try_from(request.body).unwrap_or(usize::MAX).min(after_head);
    let consumed = request.len.saturating_add(body_here);
    if request.has_hop_lines {
        let head = received.get(..request.len).unwrap_or_default();
        let body = received.get(request.len..consumed).unwrap_or_default();
        copy_head(head, &mut buffers.head, b"");
        write_both(upstream, &buffers.head, body).await?;
    } else {
        upstream.write_all(received.get(..consumed).unwrap_or_default()).await?;
    }
    buffers.request.copy_within(consumed..*filled, 0);
    *filled = filled.saturating_sub(consumed);

    // The rest of the body, if it did not all come with the head (then nothing else is
    // buffered).
    let mut remaining = request.body.saturating_sub(body_here as u64);
    while remaining > 0 {
        let want = usize::try_from(remaining).unwrap_or(usize::MAX).min(buffers.request.len());
        let into = buffers.request.get_mut(..want).unwrap_or_default();
        let n = stream.read(into).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        upstream.write_all(into.get(..n).unwrap_or_default()).await?;
        remaining = remaining.saturating_sub(n as u64);
    }
    Ok(())
}

/// How a response relay failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    /// Nothing went to the client: it can still be answered 502.
    BeforeHead,
    /// Part of the response went to the client, or the client is gone.
    AfterHead,
}

/// Relays the response to `request` from `upstream` to the client; returns whether the
/// upstream connection can carry another request.
async fn relay_response(
    client: &mut Client,
    upstream: &mut TcpStream,
    request: &RequestHead,
) -> Result<bool, Failed> {
    let Client { stream, buffers, .. } = client;
    let mut filled = 0usize;
    let response = loop {
        let free = buffers.response.get_mut(filled..).unwrap_or_default();
        if free.is_empty() {
            return Err(Failed::BeforeHead);
        }
        match upstream.read(free).await {
            Ok(0) | Err(_) => return Err(Failed::BeforeHead),
            Ok(n) => filled = filled.saturating_add(n),
        }
        let received = buffers.response.get(..filled).unwrap_or_default();
        match parse_response(received, request.is_head) {
            Parsed::Complete(response) => break response,
            Parsed::Partial => {}
            Parsed::Refused(_) => return Err(Failed::BeforeHead),
        }
    };

    let received = buffers.response.get(..filled).unwrap_or_default();
    let after_head = received.len().saturating_sub(response.len);
    let body_here = usize::try_from(response.body).unwrap_or(usize::MAX).min(after_head);
    // More than the response: the origin and this relay disagree on where it ends.
    let overran = after_head > body_here;
    let added: &[u8] = if request.close {
        CLOSE_LINE
    } else if request.http10_keep_alive {
        KEEP_ALIVE_LINE
    } else {
        b""
    };
    let end = response.len.saturating_add(body_here);
    let sent = if response.has_hop_lines || !added.is_empty() {
        let head = received.get(..response.len).unwrap_or_default();
        copy_head(head, &mut buffers.head, added);
        write_both(stream, &buffers.head, received.get(response.len..end).unwrap_or_default()).await
    } else {
        stream.write_all(received.get(..end).unwrap_or_default()).await
    };
    sent.map_err(|_| Failed::AfterHead)?;

    let mut remaining = response.body.saturating_sub(body_here as u64);
    while remaining > 0 {
        let want = usize::try_from(remaining).unwrap_or(usize::MAX).min(buffers.response.len());
        let into = buffers.response.get_mut(..want).unwrap_or_default();
        let n = upstream.read(into).await.map_err(|_| Failed::AfterHead)?;
        if n == 0 {
            return Err(Failed::AfterHead);
        }
        stream.write_all(into.get(..n).unwrap_or_default()).await.map_err(|_| Failed::AfterHead)?;
        remaining = remaining.saturating_sub(n as u64);
    }
    Ok(response.keeps_upstream && !overran)
}

/// Writes `first`, then `second`, with as few system calls as the socket allows (one,
/// usually).
async fn write_both(stream: &mut TcpStream, mut first: &[u8], mut second: &[u8]) -> io::Result<()> {
    while !first.is_empty() {
        let n = stream.write_vectored(&[IoSlice::new(first), IoSlice::new(second)]).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        if n < first.len() {
            first = first.get(n..).unwrap_or_default();
        } else {
            second = second.get(n.saturating_sub(first.len())..).unwrap_or_default();
            first = &[];
        }
    }
    stream.write_all(second).await
}

/// The outcome of parsing a head from the bytes received so far.
#[derive(Debug, PartialEq, Eq)]
enum Parsed<T> {
    Complete(T),
    /// Not a whole head yet.
    Partial,
    /// The answer that refuses it.
    Refused(&'static [u8]),
}

/// What relaying a request needs from its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RequestHead {
    /// Bytes of the head, its empty line included.
    len: usize,
    /// Bytes of its body (`Content-Length`, 0 without).
    body: u64,
    /// A HEAD request: its response has no body whatever it says.
    is_head: bool,
    /// The client's last request on this connection.
    close: bool,
    /// An HTTP/1.0 client that asked to keep the connection: the response must say so.
    http10_keep_alive: bool,
    /// It has `Connection` or `Keep-Alive` lines, which do not go upstream.
    has_hop_lines: bool,
}

fn parse_request(received: &[u8]) -> Parsed<RequestHead> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(received) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::Refused(HEAD_TOO_LARGE),
        Err(_) => return Parsed::Refused(BAD_REQUEST),
    };
    let Ok(fields) = scan_headers(request.headers) else {
        return Parsed::Refused(BAD_REQUEST);
    };
    if fields.transfer_encoding {
        return Parsed::Refused(NOT_IMPLEMENTED);
    }
    // RFC 9112 section 9.3: HTTP/1.1 stays open unless "close"; HTTP/1.0 closes unless
    // "keep-alive".
    let http11 = request.version == Some(1);
    let keep_alive = if http11 { !fields.close } else { fields.keep_alive && !fields.close };
    Parsed::Complete(RequestHead {
        len,
        body: fields.content_length.unwrap_or(0),
        is_head: request.method == Some("HEAD"),
        close: !keep_alive,
        http10_keep_alive: !http11 && keep_alive,
        has_hop_lines: fields.hop_lines,
    })
}

/// What relaying a response needs from its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ResponseHead {
    /// Bytes of the head, its empty line included.
    len: usize,
    /// Bytes of its body.
    body: u64,
    /// The origin keeps the connection open after it.
    keeps_upstream: bool,
    /// It has `Connection` or `Keep-Alive` lines, which do not go to the client.
    has_hop_lines: bool,
}

/// Parses a response head; refuses what this relay cannot frame (see the module doc).
fn parse_response(received: &[u8], to_head_request: bool) -> Parsed<ResponseHead> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(received) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Refused(BAD_GATEWAY),
    };
    let Ok(fields) = scan_headers(response.headers) else {
        return Parsed::Refused(BAD_GATEWAY);
    };
    let status = response.code.unwrap_or(0);
    if status < 200 {
        return Parsed::Refused(BAD_GATEWAY);
    }
    // RFC 9112 section 6.3: no body after HEAD, 204 and 304, whatever the headers say.
    let body = if to_head_request || status == 204 || status == 304 {
        0
    } else if fields.transfer_encoding {
        return Parsed::Refused(BAD_GATEWAY);
    } else {
        match fields.content_length {
            Some(length) => length,
            None => return Parsed::Refused(BAD_GATEWAY),
        }
    };
    let http11 = response.version == Some(1);
    let keeps_upstream = if http11 { !fields.close } else { fields.keep_alive && !fields.close };
    Parsed::Complete(ResponseHead { len, body, keeps_upstream, has_hop_lines: fields.hop_lines })
}

/// The header fields framing and connection handling depend on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Fields {
    content_length: Option<u64>,
    transfer_encoding: bool,
    /// A `Connection` header with the "close" option.
    close: bool,
    /// A `Connection` header with the "keep-alive" option.
    keep_alive: bool,
    /// A `Connection` or `Keep-Alive` line.
    hop_lines: bool,
}

/// Reads the fields of a head's headers. Err: a `Content-Length` that is not a number, or
/// two that differ (RFC 9112 section 6.3, rule 5).
fn scan_headers(headers: &[httparse::Header<'_>]) -> Result<Fields, ()> {
    let mut fields = Fields::default();
    for header in headers {
        let name = header.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let length = parse_length(header.value).ok_or(())?;
            if fields.content_length.is_some_and(|seen| seen != length) {
                return Err(());
            }
            fields.content_length = Some(length);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            fields.transfer_encoding = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            fields.hop_lines = true;
            for option in header.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                fields.close |= option.eq_ignore_ascii_case(b"close");
                fields.keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"keep-alive") {
            fields.hop_lines = true;
        }
    }
    Ok(fields)
}

/// A `Content-Length` value: ASCII digits only (no sign, no list).
fn parse_length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Whether a header line with this name is hop-by-hop and stays on its side of the relay.
fn is_hop_line(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"connection") || name.eq_ignore_ascii_case(b"keep-alive")
}

/// Copies a whole head (start line, header lines, empty line) into `out` byte for byte,
/// without its `Connection` and `Keep-Alive` lines and with `added` (whole lines) just
/// before the empty line. The head was parsed by httparse, so every header is one line
/// with its name right before the first colon.
fn copy_head(head: &[u8], out: &mut Vec<u8>, added: &[u8]) {
    out.clear();
    let mut lines = head.split_inclusive(|&b| b == b'\n');
    if let Some(start_line) = lines.next() {
        out.extend_from_slice(start_line);
    }
    for line in lines {
        if line == b"\r\n" || line == b"\n" {
            out.extend_from_slice(added);
            out.extend_from_slice(line);
            return;
        }
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if !is_hop_line(name) {
            out.extend_from_slice(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete<T>(parsed: Parsed<T>) -> T {
        match parsed {
            Parsed::Complete(head) => head,
            Parsed::Partial => panic!("partial"),
            Parsed::Refused(answer) => panic!("refused: {}", String::from_utf8_lossy(answer)),
        }
    }

    #[test]
    fn hop_by_hop_lines_are_dropped_and_the_rest_copied_byte_for_byte() {
        let head = b"GET /tiny HTTP/1.1\r\nHost: a\r\nconnection: close\r\nX-A:  b \r\n\
                     Keep-Alive: timeout=5\r\n\r\n";
        let mut out = Vec::new();
        copy_head(head, &mut out, b"");
        assert_eq!(out, b"GET /tiny HTTP/1.1\r\nHost: a\r\nX-A:  b \r\n\r\n");
        copy_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", &mut out, CLOSE_LINE);
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n");
    }

    #[test]
    fn requests_say_whether_the_client_stays() {
        let keep = complete(parse_request(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!keep.close && !keep.has_hop_lines && keep.body == 0);
        let close = complete(parse_request(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n"));
        assert!(close.close && close.has_hop_lines);
        let old = complete(parse_request(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(old.close && !old.http10_keep_alive);
        let old_kept = complete(parse_request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!old_kept.close && old_kept.http10_keep_alive);
        let body = complete(parse_request(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"));
        assert_eq!((body.len, body.body), (38, 5));
    }

    #[test]
    fn requests_it_cannot_frame_are_refused() {
        assert_eq!(parse_request(b"GET / HTTP/1.1\r\nHost: a\r\n"), Parsed::Partial);
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse_request(chunked), Parsed::Refused(NOT_IMPLEMENTED));
        let two = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(parse_request(two), Parsed::Refused(BAD_REQUEST));
        let signed = b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n";
        assert_eq!(parse_request(signed), Parsed::Refused(BAD_REQUEST));
    }

    #[test]
    fn responses_are_framed_by_content_length_only() {
        let ok = complete(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n", false));
        assert_eq!((ok.body, ok.keeps_upstream, ok.has_hop_lines), (100, true, false));
        let to_head =
            complete(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n", true));
        assert_eq!(to_head.body, 0);
        let closing = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        assert!(!complete(parse_response(closing, false)).keeps_upstream);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse_response(chunked, false), Parsed::Refused(BAD_GATEWAY));
        let delimited = b"HTTP/1.1 200 OK\r\n\r\n";
        assert_eq!(parse_response(delimited, false), Parsed::Refused(BAD_GATEWAY));
        let early = b"HTTP/1.1 100 Continue\r\n\r\n";
        assert_eq!(parse_response(early, false), Parsed::Refused(BAD_GATEWAY));
    }
}
