//! The test origin: a hyper HTTP/1.1 server on `127.0.0.1:0` that counts the TCP
//! connections it accepts and closes, records every request head, and serves a few routes.
//! Accepting, counting and serving connections is `holdfast_origin`'s job (shared with
//! the demo and the benchmark origin); this file adds the routes and the records.
//!
//! Routes (by first path segment; anything else is the echo route):
//! - `/<anything>`: echo. Reads the whole request body and answers 200 with the request
//!   headers as `name: value` lines. `?pause_ms=N` waits N ms before reading the body.
//! - `/bytes/N`: N bytes of `x` with Content-Length (generated, never allocated).
//! - `/stream/N`: N bytes of `x` with chunked encoding, in 64 KiB chunks.
//! - `/status/N`: status N with an empty body (204, 304, ...).
//! - `/slow/MS`: waits MS ms, then answers 200.
//! - `/hold/NAME`: answers 200 (`held`) once the test calls [`Origin::release`] with
//!   NAME, and at once after that: requests that stay in flight exactly as long as a
//!   test needs, whatever the machine's load.
//! - `/trickle/N/MS`: N bytes with Content-Length, the first half at once and the
//!   second half MS ms later.
//! - `/hop`: a response carrying hop-by-hop headers (`Connection: X-Hop`, `X-Hop`,
//!   `Keep-Alive`) next to an end-to-end `X-End`.
//! - `/close`: answers with `Connection: close`, so the origin closes after it.
//! - `/health`: answers the status set with [`Origin::set_health`] (200 at first).
//! - `/upgrade`: switches protocols. `Upgrade: websocket` gets a WebSocket echo
//!   (messages sent back as received); any other protocol gets a raw byte echo that
//!   first sends `hello from origin\n`.
//!
//! [`RawOrigin`] is for responses hyper would not send: it answers every request head with
//! the same fixed bytes.
//!
//! Any route's response gets `Content-Type` from `?content_type=` (`%2F` for `/`) and
//! `X-Accel-Buffering` from `?x_accel=`, when the query has them.
//!
//! Every response except an upgrade's carries `x-received-bytes` and `x-received-fnv`
//! (FNV-1a) of the request body, and every one carries `x-path` (the request's path and
//! query) and `x-origin` (the origin's address), so tests can match responses to
//! requests and to the origin that served them. The echo route also says which trailers
//! came after a chunked body, in `x-received-trailers` (names, lowercase, comma-separated).
//!
//! [`Origin::malformed`] counts what hyper refused as malformed on the way in, and
//! [`Origin::malformed_errors_since`] says why: a request head it could not parse, or a
//! request body whose framing it could not decode. A body cut short by the peer closing
//! the connection is not malformed: that is how a proxy abandons an upload.
//!
//! [`Origin::kill`] stops it the way a crashed process stops: the listener closes and
//! every open connection is dropped at once.

use std::convert::Infallible;
use std::error::Error as _;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use super::{Fnv, Generated};

type OriginBody = BoxBody<Bytes, Infallible>;

/// How the origin behaves beyond its routes.
#[derive(Debug, Clone, Default)]
pub struct OriginOptions {
    /// Close a keep-alive connection that has been idle this long (hyper's header read
    /// timeout), without telling the peer first: the origin-side keep-alive timeout.
    pub idle_close: Option<Duration>,
    /// Wait this long before answering every request (a slow server).
    pub delay: Option<Duration>,
    /// Answer the requests already received when the peer shuts down its sending side,
    /// instead of taking that for the peer going away (hyper's `half_close`).
    pub half_close: bool,
}

/// One request head as the origin received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub headers: HeaderMap,
}

impl RecordedRequest {
    /// The header's value, if present once and valid text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
struct State {
    addr: String,
    /// The status `/health` answers with; 0 means 200.
    health: AtomicU16,
    /// The names of `/hold/NAME` the test has let be answered.
    released: tokio::sync::watch::Sender<Vec<String>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Paths (with query) of requests whose body the origin read to its end.
    completed: Mutex<Vec<String>>,
    /// hyper's errors for request heads and bodies it could not parse, in order.
    malformed: Mutex<Vec<String>>,
}

/// A running origin; stops accepting when dropped.
pub struct Origin {
    server: holdfast_origin::Origin,
    state: Arc<State>,
}

impl Origin {
    /// Binds `127.0.0.1:0` and serves on it with default options.
    pub async fn start() -> Origin {
        Origin::start_with(OriginOptions::default()).await
    }

    pub async fn start_with(options: OriginOptions) -> Origin {
        let listener = holdfast_origin::bind_loopback().expect("bind origin");
        Origin::serve(listener, options)
    }

    /// Serves on an already bound listener.
    pub fn serve(listener: TcpListener, options: OriginOptions) -> Origin {
        let addr = listener.local_addr().expect("origin local addr");
        let state = Arc::new(State { addr: addr.to_string(), ..State::default() });
        let on_error = {
            let state = Arc::clone(&state);
            move |e: &hyper::Error| {
                if is_parse_error(e) {
                    let error = format!("request head: {}", chain(e));
                    state.malformed.lock().unwrap().push(error);
                }
            }
        };
        let settings = holdfast_origin::Options {
            idle_close: options.idle_close,
            half_close: options.half_close,
            killable: true,
            on_error: Some(Arc::new(on_error)),
        };
        let (service_state, delay) = (Arc::clone(&state), options.delay);
        let server =
            holdfast_origin::Origin::serve(listener, Arc::default(), settings, move |_| {
                let state = Arc::clone(&service_state);
                service_fn(move |req| handle(req, Arc::clone(&state), delay))
            })
            .expect("serve the origin");
        Origin { server, state }
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Stops it like a crashed process: no more accepts, every open connection dropped
    /// (the peer sees a reset or end of stream). The port can be bound again.
    pub fn kill(&self) {
        self.server.kill();
    }

    /// Lets every `/hold/NAME` request be answered: those waiting now, and any that come.
    pub fn release(&self, name: &str) {
        // `send_modify` stores the change even while no request waits.
        self.state.released.send_modify(|names| names.push(name.to_string()));
    }

    /// Makes `/health` answer `status` from now on.
    pub fn set_health(&self, status: u16) {
        self.state.health.store(status, Ordering::SeqCst);
    }

    /// Requests received whose path starts with `prefix`.
    pub fn count_path(&self, prefix: &str) -> usize {
        self.requests().iter().filter(|r| r.uri.path().starts_with(prefix)).count()
    }

    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.server.connections().accepted() as usize
    }

    /// Accepted TCP connections that have since been closed (socket dropped).
    pub fn closed(&self) -> usize {
        self.server.connections().closed() as usize
    }

    /// Every request head received, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Every request head received since the last call, in arrival order; they are
    /// forgotten (so a long run keeps little), and [`Origin::requests`] no longer has them.
    pub fn take_requests(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut *self.state.requests.lock().unwrap())
    }

    /// Request heads received so far.
    pub fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// Paths of the requests received so far, in arrival order.
    pub fn paths(&self) -> Vec<String> {
        self.requests().iter().map(|r| r.uri.to_string()).collect()
    }

    /// Paths of the requests whose body was received in full.
    pub fn completed(&self) -> Vec<String> {
        self.state.completed.lock().unwrap().clone()
    }

    /// How many times hyper refused what arrived as malformed: a connection that ended
    /// with a parse error, or a request body that failed to decode.
    pub fn malformed(&self) -> usize {
        self.state.malformed.lock().unwrap().len()
    }

    /// hyper's error for each malformed arrival after the first `from`, in order.
    pub fn malformed_errors_since(&self, from: usize) -> Vec<String> {
        self.state.malformed.lock().unwrap().get(from..).unwrap_or_default().to_vec()
    }
}

/// Whether a connection's error means the bytes on it were not valid HTTP/1.1.
fn is_parse_error(e: &hyper::Error) -> bool {
    e.is_parse() || e.is_parse_too_large() || e.is_parse_status()
}

/// An error and its sources, `: `-separated.
fn chain(e: &hyper::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    // Bounded by the length of the error's source chain.
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether a request body's error means its framing could not be decoded (a bad chunk
/// size line or trailer), as opposed to the peer closing before it ended.
fn is_body_decode_error(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() {
        return false;
    }
    let mut source = e.source();
    // Bounded by the length of the error's source chain.
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return matches!(io.kind(), io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData);
        }
        source = cause.source();
    }
    false
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
    delay: Option<Duration>,
) -> Result<Response<OriginBody>, io::Error> {
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    state.requests.lock().unwrap().push(RecordedRequest {
        method: req.method().clone(),
        uri: req.uri().clone(),
        version: req.version(),
        headers: req.headers().clone(),
    });
    let req_uri_query = req.uri().query().map(str::to_string);
    let mut segments = req.uri().path().trim_start_matches('/').split('/');
    let route = segments.next().unwrap_or("").to_string();
    let arg = segments.next().unwrap_or("").to_string();
    let arg2 = segments.next().unwrap_or("").to_string();
    if route == "upgrade" {
        return Ok(with_path(upgrade(req), &path));
    }
    if let Some(ms) = query_value(req.uri(), "pause_ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let echo: String = req
        .headers()
        .iter()
        .map(|(name, value)| format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())))
        .collect();
    // Read the whole body, whatever the route; an error here aborts the connection.
    let mut body = req.into_body();
    let mut received = 0u64;
    let mut fnv = Fnv::default();
    let mut trailers: Vec<String> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                if is_body_decode_error(&e) {
                    let error = format!("request body of {path}: {}", chain(&e));
                    state.malformed.lock().unwrap().push(error);
                }
                return Err(io::Error::other(e));
            }
        };
        if let Some(data) = frame.data_ref() {
            received += data.len() as u64;
            fnv.update(data);
        }
        if let Some(fields) = frame.trailers_ref() {
            trailers.extend(fields.keys().map(|name| name.as_str().to_string()));
        }
    }
    state.completed.lock().unwrap().push(path.clone());
    let number = |s: &str| s.parse::<u64>().unwrap_or(0);
    let mut resp = match route.as_str() {
        "bytes" => Response::new(Generated::sized(number(&arg)).boxed()),
        "stream" => Response::new(Generated::chunked(number(&arg)).boxed()),
        "health" => {
            let mut resp = Response::new(Full::new(Bytes::from_static(b"health\n")).boxed());
            let status = state.health.load(Ordering::SeqCst);
            *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            resp
        }
        "status" => {
            let mut resp = Response::new(Empty::new().boxed());
            *resp.status_mut() =
                StatusCode::from_u16(number(&arg) as u16).unwrap_or(StatusCode::OK);
            resp
        }
        "slow" => {
            tokio::time::sleep(Duration::from_millis(number(&arg))).await;
            Response::new(Full::new(Bytes::from_static(b"slow\n")).boxed())
        }
        "hold" => {
            let mut released = state.released.subscribe();
            // Errs only if the origin is gone, and then nobody waits for the answer.
            let _ = released.wait_for(|names| names.contains(&arg)).await;
            Response::new(Full::new(Bytes::from_static(b"held\n")).boxed())
        }
        "trickle" => trickle(number(&arg), Duration::from_millis(number(&arg2))),
        "hop" => {
            let mut resp = Response::new(Full::new(Bytes::from_static(b"hop\n")).boxed());
            let h = resp.headers_mut();
            h.insert(header::CONNECTION, HeaderValue::from_static("X-Hop"));
            h.insert("x-hop", HeaderValue::from_static("1"));
            h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
            h.insert("x-end", HeaderValue::from_static("1"));
            resp
        }
        // `/keepalive/timeout=1,max=5`: answers with that `Keep-Alive` header.
        "keepalive" => {
            let mut resp = Response::new(Full::new(Bytes::from_static(b"ka\n")).boxed());
            let value = HeaderValue::from_str(&arg).expect("a header value in the path");
            resp.headers_mut().insert("keep-alive", value);
            resp
        }
        "close" => {
            let mut resp = Response::new(Full::new(Bytes::from_static(b"bye\n")).boxed());
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            resp
        }
        _ => {
            let mut resp = Response::new(Full::new(Bytes::from(echo)).boxed());
            let names = HeaderValue::try_from(trailers.join(",")).expect("names are header text");
            resp.headers_mut().insert("x-received-trailers", names);
            resp
        }
    };
    let h = resp.headers_mut();
    for (key, name) in
        [("content_type", header::CONTENT_TYPE.as_str()), ("x_accel", "x-accel-buffering")]
    {
        if let Some(value) = query_text(req_uri_query.as_deref(), key) {
            h.insert(name, HeaderValue::try_from(value).expect("a header value in the query"));
        }
    }
    h.insert("x-received-bytes", HeaderValue::from(received));
    h.insert("x-received-fnv", HeaderValue::try_from(fnv.hex()).expect("hex is a valid header"));
    h.insert("x-origin", HeaderValue::try_from(state.addr.as_str()).expect("an address"));
    Ok(with_path(resp, &path))
}

/// `len` bytes announced with Content-Length; the second half follows after `pause`.
fn trickle(len: u64, pause: Duration) -> Response<OriginBody> {
    let first = len / 2;
    let halves = futures_util::stream::unfold(0u8, move |half| async move {
        let (n, next) = match half {
            0 => (first, 1),
            1 => {
                tokio::time::sleep(pause).await;
                (len - first, 2)
            }
            _ => return None,
        };
        let data = Bytes::from(vec![b'x'; n as usize]);
        Some((Ok::<_, Infallible>(Frame::data(data)), next))
    });
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(halves)));
    resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    resp
}

fn with_path(mut resp: Response<OriginBody>, path: &str) -> Response<OriginBody> {
    if let Ok(v) = HeaderValue::try_from(path) {
        resp.headers_mut().insert("x-path", v);
    }
    resp
}

/// The text of `key` in a query, `%2F` read as `/` (enough for media types).
fn query_text(query: Option<&str>, key: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.replace("%2F", "/"))
    })
}

fn query_value(uri: &Uri, key: &str) -> Option<u64> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.parse().ok()).flatten()
    })
}

/// Answers 101 and echoes on the upgraded connection, or 400 if nothing asks to upgrade.
fn upgrade(mut req: Request<Incoming>) -> Response<OriginBody> {
    let Some(protocol) = req.headers().get(header::UPGRADE).cloned() else {
        let mut resp = Response::new(Full::new(Bytes::from_static(b"no upgrade\n")).boxed());
        *resp.status_mut() = StatusCode::BAD_REQUEST;
        return resp;
    };
    let websocket = protocol.as_bytes().eq_ignore_ascii_case(b"websocket");
    let accept = req
        .headers()
        .get("sec-websocket-key")
        .map(|key| derive_accept_key(key.as_bytes()))
        .and_then(|v| HeaderValue::try_from(v).ok());
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let io = TokioIo::new(upgraded);
        if websocket {
            websocket_echo(io).await;
        } else {
            raw_echo(io).await;
        }
    });
    let mut resp = Response::new(Empty::new().boxed());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, protocol);
    if let (true, Some(accept)) = (websocket, accept) {
        h.insert("sec-websocket-accept", accept);
    }
    resp
}

async fn raw_echo<IO: AsyncRead + AsyncWrite + Unpin>(mut io: IO) {
    if io.write_all(b"hello from origin\n").await.is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    // Ends when the peer closes; each round moves at least one byte.
    loop {
        match io.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if io.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn websocket_echo<IO: AsyncRead + AsyncWrite + Unpin>(io: IO) {
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    // Ends when the peer closes; each round handles one message.
    while let Some(Ok(msg)) = ws.next().await {
        if msg.is_close() {
            let _ = ws.close(None).await;
            return;
        }
        if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
            return;
        }
    }
}

/// What a [`RawOrigin`] sends for one request head: a response, maybe more bytes a
/// while after it, and whether it then closes the connection.
#[derive(Debug, Clone, Copy)]
pub struct RawAnswer {
    pub now: &'static [u8],
    pub later: Option<(Duration, &'static [u8])>,
    pub close: bool,
}

impl RawAnswer {
    pub fn of(now: &'static [u8]) -> RawAnswer {
        RawAnswer { now, later: None, close: false }
    }
}

/// How a [`RawOrigin`] answers a request head, given its request line.
type Script = Arc<dyn Fn(&str) -> RawAnswer + Send + Sync>;

/// A hand-written origin: reads request heads (requests must have no body) and answers
/// each as its script says, on as many keep-alive connections as it is given; for
/// responses hyper would not send.
pub struct RawOrigin {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    /// How many of the answers' `later` writes have gone out.
    late: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl Drop for RawOrigin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl RawOrigin {
    /// Answers every request head with `response`.
    pub async fn start(response: &'static [u8]) -> RawOrigin {
        RawOrigin::scripted(move |_| RawAnswer::of(response)).await
    }

    /// Like [`RawOrigin::start`], and the connection is closed after each response,
    /// which ends a body that has no length.
    pub async fn start_closing(response: &'static [u8]) -> RawOrigin {
        RawOrigin::scripted(move |_| RawAnswer { close: true, ..RawAnswer::of(response) }).await
    }

    /// Like [`RawOrigin::start`], and `later.1` is written `later.0` after each
    /// response, while the connection sits idle.
    pub async fn start_with_later(
        response: &'static [u8],
        later: Option<(Duration, &'static [u8])>,
    ) -> RawOrigin {
        RawOrigin::scripted(move |_| RawAnswer { later, ..RawAnswer::of(response) }).await
    }

    /// Answers each request head as `script` says for its request line.
    pub async fn scripted(script: impl Fn(&str) -> RawAnswer + Send + Sync + 'static) -> RawOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind raw origin");
        let addr = listener.local_addr().expect("raw origin addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let late = Arc::new(AtomicUsize::new(0));
        let script: Script = Arc::new(script);
        let (count, written) = (Arc::clone(&accepted), Arc::clone(&late));
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer_heads(stream, Arc::clone(&script), Arc::clone(&written)));
            }
        });
        RawOrigin { addr, accepted, late, accept }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// How many `later` writes have gone out.
    pub fn late(&self) -> usize {
        self.late.load(Ordering::SeqCst)
    }
}

/// Answers each request head read as `script` says; ends when the peer closes, or
/// after an answer that closes.
async fn answer_heads(mut stream: TcpStream, script: Script, late: Arc<AtomicUsize>) {
    let mut pending = Vec::new();
    let mut chunk = [0u8; 4096];
    // Each round reads at least one byte or ends.
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = pending.drain(..end + 4).collect();
            let head = String::from_utf8_lossy(&head);
            let answer = script(head.lines().next().unwrap_or(""));
            if stream.write_all(answer.now).await.is_err() || answer.close {
                return;
            }
            if let Some((delay, bytes)) = answer.later {
                tokio::time::sleep(delay).await;
                if stream.write_all(bytes).await.is_err() {
                    return;
                }
                late.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}
