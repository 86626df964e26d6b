//! HTTP/2 for the tests: an origin that speaks HTTP/2 (h2c, or TLS with ALPN `h2`) and
//! counts the TCP connections and streams it accepts ([`H2Origin`]); a client on the
//! `h2` crate for precise control of streams ([`H2Client`]); and frames written and
//! read by hand, for what no well-behaved client sends ([`RawH2`]).
//!
//! The origin's routes (by first path segment; anything else is the echo route):
//! - `/<anything>`: reads the request body and answers 200 with `h2 origin: PATH\n`.
//! - `/bytes/N`: N bytes of `x`.
//! - `/slow/MS`: waits MS ms, then answers 200.
//! - `/hold/NAME`: answers once the test calls [`H2Origin::release`] with NAME.
//! - `/status/N`: answers status N with a short body.
//! - `/early`: answers 200 `early\n` at once, without reading the request body.
//! - `/trailers`: answers 200 with a body and the trailers `grpc-status: 0` and
//!   `x-trailer: done`.
//!
//! Every response carries `x-path` (path and query), `x-conn` (the number of the
//! connection it came on, from 1), `x-received-bytes` and `x-received-fnv` (FNV-1a of
//! the request body), `x-received-trailers` (names of the request's trailers) and
//! `x-te` (the request's `te` header, `-` when absent).

use std::collections::HashMap;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use rustls::{ClientConfig, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use holdfast::Config;

use super::tls::{parse_config, tls_connect};
use super::{within, within_for, Fnv, DEADLINE};

/// A config: an admin listener; a listener on `127.0.0.1:0` with `listener` written in
/// its table, in front of the group `app` of `servers` with `group` written in its
/// table; then `rest` (top-level tables such as `[limits]`).
pub fn h2_config(listener: &str, servers: &[String], group: &str, rest: &str) -> Config {
    let servers: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    parse_config(&format!(
        "[admin]\naddress = \"127.0.0.1:0\"\n\n[[listener]]\naddress = \"127.0.0.1:0\"\n\
         upstream = \"app\"\n{listener}\n\n[upstream.app]\nservers = [{}]\n{group}\n\n{rest}\n",
        servers.join(", ")
    ))
}

/// The largest DATA chunk either side here sends at once.
const CHUNK: usize = 16 * 1024;

/// How an [`H2Origin`] behaves.
#[derive(Clone, Default)]
pub struct H2OriginOptions {
    /// SETTINGS_MAX_CONCURRENT_STREAMS it announces (h2's default: no limit).
    pub max_concurrent_streams: Option<u32>,
    /// Wait this long before answering every stream.
    pub delay: Option<Duration>,
    /// After accepting this many streams on a connection, shut it down gracefully
    /// (GOAWAY): the streams accepted until then are answered, later ones refused.
    pub goaway_after: Option<usize>,
    /// Reset the first this many streams (over all connections) with REFUSED_STREAM,
    /// each once its request body has arrived.
    pub refuse_first: usize,
    /// Serve TLS with this config (its ALPN should offer `h2`) instead of h2c.
    pub tls: Option<Arc<ServerConfig>>,
}

/// One request as an [`H2Origin`] received it.
#[derive(Debug, Clone)]
pub struct H2Request {
    pub method: Method,
    /// Path and query.
    pub path: String,
    pub headers: HeaderMap,
    /// The number of the connection it came on, from 1.
    pub conn: usize,
}

#[derive(Default)]
struct OriginState {
    addr: String,
    accepted: AtomicUsize,
    closed: AtomicUsize,
    /// Streams accepted, refused ones included.
    streams: AtomicUsize,
    refused: AtomicUsize,
    /// Streams answered to their end.
    answered: AtomicUsize,
    /// Streams open now, and the most ever open at once on one connection.
    open_per_conn: Mutex<HashMap<usize, usize>>,
    peak_per_conn: AtomicUsize,
    goaways: AtomicUsize,
    requests: Mutex<Vec<H2Request>>,
    released: tokio::sync::watch::Sender<Vec<String>>,
    /// Why connections ended with an error, in h2's words.
    errors: Mutex<Vec<String>>,
}

/// An HTTP/2 origin on `127.0.0.1:0`; stops accepting when dropped.
pub struct H2Origin {
    addr: SocketAddr,
    state: Arc<OriginState>,
    accept: JoinHandle<()>,
}

impl Drop for H2Origin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl H2Origin {
    pub async fn start() -> H2Origin {
        H2Origin::start_with(H2OriginOptions::default()).await
    }

    pub async fn start_with(options: H2OriginOptions) -> H2Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the h2 origin");
        let addr = listener.local_addr().expect("h2 origin address");
        let state = Arc::new(OriginState { addr: addr.to_string(), ..OriginState::default() });
        let refuse = Arc::new(AtomicUsize::new(options.refuse_first));
        let accept = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let number = state.accepted.fetch_add(1, Ordering::SeqCst) + 1;
                    let _ = tcp.set_nodelay(true);
                    let (state, options, refuse) =
                        (Arc::clone(&state), options.clone(), Arc::clone(&refuse));
                    tokio::spawn(async move {
                        match options.tls.clone() {
                            None => serve(tcp, number, &state, &options, &refuse).await,
                            Some(config) => {
                                let acceptor = tokio_rustls::TlsAcceptor::from(config);
                                match acceptor.accept(tcp).await {
                                    Ok(tls) => serve(tls, number, &state, &options, &refuse).await,
                                    Err(e) => state.errors.lock().unwrap().push(e.to_string()),
                                }
                            }
                        }
                        state.closed.fetch_add(1, Ordering::SeqCst);
                    });
                }
            })
        };
        H2Origin { addr, state, accept }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Accepted connections that have since ended.
    pub fn closed(&self) -> usize {
        self.state.closed.load(Ordering::SeqCst)
    }

    /// Streams accepted so far, refused ones included.
    pub fn streams(&self) -> usize {
        self.state.streams.load(Ordering::SeqCst)
    }

    /// Streams reset with REFUSED_STREAM ([`H2OriginOptions::refuse_first`]).
    pub fn refused(&self) -> usize {
        self.state.refused.load(Ordering::SeqCst)
    }

    /// Streams answered to their end.
    pub fn answered(&self) -> usize {
        self.state.answered.load(Ordering::SeqCst)
    }

    /// Graceful shutdowns started ([`H2OriginOptions::goaway_after`]).
    pub fn goaways(&self) -> usize {
        self.state.goaways.load(Ordering::SeqCst)
    }

    /// The most streams ever open at once on one connection.
    pub fn peak_streams_per_connection(&self) -> usize {
        self.state.peak_per_conn.load(Ordering::SeqCst)
    }

    /// Every request received (refused streams not included), in arrival order.
    pub fn requests(&self) -> Vec<H2Request> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// Why connections ended with an error.
    pub fn errors(&self) -> Vec<String> {
        self.state.errors.lock().unwrap().clone()
    }

    /// Lets every `/hold/NAME` request be answered: those waiting now, and any that come.
    pub fn release(&self, name: &str) {
        self.state.released.send_modify(|names| names.push(name.to_string()));
    }
}

/// Serves one connection until it ends.
async fn serve<IO: AsyncRead + AsyncWrite + Unpin>(
    io: IO,
    number: usize,
    state: &Arc<OriginState>,
    options: &H2OriginOptions,
    refuse: &AtomicUsize,
) {
    let mut builder = h2::server::Builder::new();
    if let Some(max) = options.max_concurrent_streams {
        builder.max_concurrent_streams(max);
    }
    let mut conn = match builder.handshake::<_, Bytes>(io).await {
        Ok(conn) => conn,
        Err(e) => {
            state.errors.lock().unwrap().push(format!("handshake: {e}"));
            return;
        }
    };
    let mut here = 0usize;
    // Ends when the connection does; each round takes one stream.
    while let Some(next) = conn.accept().await {
        let (req, mut respond) = match next {
            Ok(stream) => stream,
            Err(e) => {
                state.errors.lock().unwrap().push(e.to_string());
                break;
            }
        };
        here += 1;
        state.streams.fetch_add(1, Ordering::SeqCst);
        let refused = refuse.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if refused.is_ok() {
            // Refused once its request has arrived whole, body included: the proxy must
            // have kept the body to send the request again.
            state.refused.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let _ = read_body(&mut req.into_body()).await;
                respond.send_reset(Reason::REFUSED_STREAM);
            });
            continue;
        }
        let (stream_state, delay) = (Arc::clone(state), options.delay);
        tokio::spawn(async move {
            let state = stream_state;
            let open = {
                let mut open = state.open_per_conn.lock().unwrap();
                let n = open.entry(number).or_default();
                *n += 1;
                *n
            };
            state.peak_per_conn.fetch_max(open, Ordering::SeqCst);
            let done = answer(req, respond, number, &state, delay).await;
            *state.open_per_conn.lock().unwrap().entry(number).or_default() -= 1;
            match done {
                Ok(()) => {
                    state.answered.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => state.errors.lock().unwrap().push(format!("stream: {e}")),
            }
        });
        if options.goaway_after == Some(here) {
            state.goaways.fetch_add(1, Ordering::SeqCst);
            conn.graceful_shutdown();
        }
    }
}

/// Reads one request and answers it as its route says.
async fn answer(
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    conn: usize,
    state: &OriginState,
    delay: Option<Duration>,
) -> Result<(), h2::Error> {
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    state.requests.lock().unwrap().push(H2Request {
        method: req.method().clone(),
        path: path.clone(),
        headers: req.headers().clone(),
        conn,
    });
    let te = req.headers().get("te").cloned().unwrap_or(HeaderValue::from_static("-"));
    if path.starts_with("/early") {
        // The whole response at once, the request body unread (gRPC servers answer a
        // failed call so); the body is dropped, so h2 resets the stream's receiving side.
        let resp = Response::builder()
            .header("x-path", path.as_str())
            .header("content-length", "6")
            .body(())
            .expect("a response");
        let mut send = respond.send_response(resp, false)?;
        send.send_data(Bytes::from_static(b"early\n"), true)?;
        return Ok(());
    }
    let mut body = req.into_body();
    let (received, fnv, trailers) = read_body(&mut body).await?;
    let mut segments = path.trim_start_matches('/').split(['/', '?']);
    let route = segments.next().unwrap_or("").to_string();
    let arg = segments.next().unwrap_or("").to_string();
    let number = arg.parse::<u64>().unwrap_or(0);
    let mut status = StatusCode::OK;
    let (data, trailers_out): (Bytes, Option<HeaderMap>) = match route.as_str() {
        "status" => {
            status = StatusCode::from_u16(number as u16).unwrap_or(StatusCode::OK);
            (Bytes::from_static(b"status\n"), None)
        }
        "bytes" => (Bytes::from(vec![b'x'; number as usize]), None),
        "slow" => {
            tokio::time::sleep(Duration::from_millis(number)).await;
            (Bytes::from_static(b"slow\n"), None)
        }
        "hold" => {
            let mut released = state.released.subscribe();
            let _ = released.wait_for(|names| names.contains(&arg)).await;
            (Bytes::from_static(b"held\n"), None)
        }
        "trailers" => {
            let mut t = HeaderMap::new();
            t.insert("grpc-status", HeaderValue::from_static("0"));
            t.insert("x-trailer", HeaderValue::from_static("done"));
            (Bytes::from_static(b"with trailers\n"), Some(t))
        }
        _ => (Bytes::from(format!("h2 origin: {path}\n")), None),
    };
    let names = trailers.map(|t| t.keys().map(|k| k.as_str()).collect::<Vec<_>>().join(","));
    let resp = Response::builder()
        .status(status)
        .header("x-path", path.as_str())
        .header("x-conn", conn)
        .header("x-origin", state.addr.as_str())
        .header("x-received-bytes", received)
        .header("x-received-fnv", fnv.hex())
        .header("x-received-trailers", names.unwrap_or_default())
        .header("x-te", te)
        .header("content-length", data.len())
        .body(())
        .expect("a response");
    let end = data.is_empty() && trailers_out.is_none();
    let mut send = respond.send_response(resp, end)?;
    if !end {
        send_body(&mut send, data, trailers_out.is_none()).await?;
    }
    if let Some(t) = trailers_out {
        send.send_trailers(t)?;
    }
    Ok(())
}

/// Reads a body to its end, giving back flow-control capacity as it goes: its length,
/// fingerprint and trailers.
async fn read_body(body: &mut RecvStream) -> Result<(u64, Fnv, Option<HeaderMap>), h2::Error> {
    let mut received = 0u64;
    let mut fnv = Fnv::default();
    // Bounded by the body; each round takes one DATA frame.
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        received += chunk.len() as u64;
        fnv.update(&chunk);
        body.flow_control().release_capacity(chunk.len())?;
    }
    let trailers = body.trailers().await?;
    Ok((received, fnv, trailers))
}

/// Sends `data` in chunks as flow control allows; the last one ends the stream if `end`.
async fn send_body(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), h2::Error> {
    if data.is_empty() && end {
        return send.send_data(Bytes::new(), true);
    }
    // Bounded by the data; each round sends at least one byte.
    while !data.is_empty() {
        send.reserve_capacity(data.len().min(CHUNK));
        let granted = match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(Reason::CANCEL)),
        };
        if granted == 0 {
            continue;
        }
        let chunk = data.split_to(granted.min(data.len()));
        send.send_data(chunk, end && data.is_empty())?;
    }
    Ok(())
}

/// A response read to its end by [`H2Client`].
#[derive(Debug)]
pub struct H2Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub trailers: Option<HeaderMap>,
}

impl H2Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads `body` to its end, giving its window back as it goes: its bytes, or the
/// error that ended it.
pub async fn read_all(body: &mut h2::RecvStream) -> Result<Vec<u8>, h2::Error> {
    let mut data = Vec::new();
    // Bounded by the body; each round takes one DATA frame.
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        data.extend_from_slice(&chunk);
        body.flow_control().release_capacity(chunk.len())?;
    }
    Ok(data)
}

/// One HTTP/2 client connection (the `h2` crate); clones share it, each request is a
/// stream of its own. The connection closes once every clone is dropped.
#[derive(Clone)]
pub struct H2Client {
    sender: h2::client::SendRequest<Bytes>,
    /// `http` or `https`, for the `:scheme` of requests.
    scheme: &'static str,
}

impl H2Client {
    /// An h2c connection (prior knowledge) to `addr`.
    pub async fn connect(addr: SocketAddr) -> H2Client {
        let tcp = within("h2 client connect", TcpStream::connect(addr)).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        H2Client::handshake(tcp, "http").await.expect("HTTP/2 handshake with holdfast")
    }

    /// A connection over TLS for `name`, which must negotiate `h2` by ALPN (`config`
    /// should offer it).
    pub async fn connect_tls(addr: SocketAddr, config: &Arc<ClientConfig>, name: &str) -> H2Client {
        let tls = tls_connect(addr, config, name).await.expect("TLS handshake with holdfast");
        let alpn = tls.get_ref().1.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned());
        assert_eq!(alpn.as_deref(), Some("h2"), "ALPN chose {alpn:?}, not h2");
        H2Client::handshake(tls, "https").await.expect("HTTP/2 handshake over TLS")
    }

    /// The HTTP/2 handshake on `io`, whose connection then runs on a task of its own.
    pub async fn handshake<IO>(io: IO, scheme: &'static str) -> Result<H2Client, h2::Error>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = within("h2 handshake", h2::client::handshake(io)).await?;
        // Runs until the connection ends: the peer closes it, or every handle to it is
        // dropped and its streams are done.
        tokio::spawn(conn);
        Ok(H2Client { sender, scheme })
    }

    /// `GET path`, read to the end; panics on a stream or connection error.
    pub async fn get(&self, path: &str) -> H2Reply {
        self.request(Method::GET, path, &[], Bytes::new()).await.expect("GET over HTTP/2")
    }

    /// Sends a request (`Host` is `holdfast.test`) with `headers` and `body`, and reads
    /// the whole response, within [`DEADLINE`].
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<H2Reply, h2::Error> {
        self.request_for(DEADLINE, method, path, headers, body, None).await
    }

    /// [`H2Client::request`] with request trailers and a deadline of its own.
    pub async fn request_for(
        &self,
        deadline: Duration,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        trailers: Option<HeaderMap>,
    ) -> Result<H2Reply, h2::Error> {
        let what = format!("{method} {path} over HTTP/2");
        within_for(&what, deadline, async {
            let mut req = Request::builder()
                .method(method)
                .uri(format!("{}://holdfast.test{path}", self.scheme));
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            let req = req.body(()).expect("a valid request");
            let mut sender = self.sender.clone().ready().await?;
            let end = body.is_empty() && trailers.is_none();
            let (response, mut send) = sender.send_request(req, end)?;
            // A server may answer before the request body is in, and then reset the
            // stream to stop the upload (RFC 9113, 8.1): an upload that fails is
            // reported only if no response comes either.
            let mut upload = Ok(());
            if !end {
                upload = send_body(&mut send, body, trailers.is_none()).await;
            }
            if let (Ok(()), Some(trailers)) = (&upload, trailers) {
                upload = send.send_trailers(trailers);
            }
            let response = match (response.await, upload) {
                (Ok(response), _) => response,
                (Err(e), Ok(())) | (Err(_), Err(e)) => return Err(e),
            };
            let (parts, mut body) = response.into_parts();
            let mut data = Vec::new();
            // Bounded by the body; each round takes one DATA frame.
            while let Some(chunk) = body.data().await {
                let chunk = chunk?;
                data.extend_from_slice(&chunk);
                body.flow_control().release_capacity(chunk.len())?;
            }
            let trailers = body.trailers().await?;
            Ok(H2Reply {
                status: parts.status,
                headers: parts.headers,
                body: Bytes::from(data),
                trailers,
            })
        })
        .await
    }

    /// `GET path`, its response head only: the body is left unread, and its window is
    /// given back only as [`read_all`] reads it, so the server can send no more than
    /// the initial window until then.
    pub async fn start_get(&self, path: &str) -> http::Response<h2::RecvStream> {
        within("an HTTP/2 response head", async {
            let req = Request::builder()
                .uri(format!("{}://holdfast.test{path}", self.scheme))
                .body(())
                .expect("a valid request");
            let mut sender = self.sender.clone().ready().await.expect("room for a stream");
            let (response, _) = sender.send_request(req, true).expect("the request goes");
            response.await.expect("a response head")
        })
        .await
    }

    /// `POST path` with its body still to come: the test sends it on the returned
    /// stream, and awaits the response.
    pub async fn start_post(
        &self,
        path: &str,
    ) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        within("an HTTP/2 request", async {
            let req = Request::builder()
                .method(Method::POST)
                .uri(format!("{}://holdfast.test{path}", self.scheme))
                .body(())
                .expect("a valid request");
            let mut sender = self.sender.clone().ready().await.expect("room for a stream");
            sender.send_request(req, false).expect("the request goes")
        })
        .await
    }

    /// Sends `count` requests for `path(i)` at once on this connection; the replies in
    /// request order.
    pub async fn concurrent(
        &self,
        count: usize,
        path: impl Fn(usize) -> String,
    ) -> Vec<Result<H2Reply, h2::Error>> {
        let tasks: Vec<_> = (0..count)
            .map(|i| {
                let (client, path) = (self.clone(), path(i));
                tokio::spawn(
                    async move { client.request(Method::GET, &path, &[], Bytes::new()).await },
                )
            })
            .collect();
        let mut replies = Vec::with_capacity(count);
        for task in tasks {
            replies.push(task.await.expect("request task"));
        }
        replies
    }
}

/// Frame types and flags (RFC 9113 section 6).
pub mod frame {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const CONTINUATION: u8 = 0x9;

    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;

    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
}

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One frame: a 9-byte header and `payload`.
pub fn encode_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a frame fits in 24 bits");
    assert!(len < 1 << 24, "a frame fits in 24 bits");
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer (RFC 7541 section 5.1) with an `n`-bit prefix whose other bits are
/// `first`.
pub fn hpack_int(value: usize, n: u32, first: u8, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    // Bounded: 7 bits per round.
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// A header literal, not indexed, with a name from the static table (`index`).
pub fn hpack_indexed_name(index: usize, value: &[u8], out: &mut Vec<u8>) {
    hpack_int(index, 4, 0x00, out);
    hpack_int(value.len(), 7, 0x00, out);
    out.extend_from_slice(value);
}

/// A header literal, not indexed, with a new name.
pub fn hpack_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    hpack_int(name.len(), 7, 0x00, out);
    out.extend_from_slice(name);
    hpack_int(value.len(), 7, 0x00, out);
    out.extend_from_slice(value);
}

/// The header block of `GET path` over `http` for `holdfast.test`, without Huffman
/// coding or the dynamic table, so it can be sent again as it is on any stream.
pub fn get_block(path: &str) -> Vec<u8> {
    let mut out = vec![0x82, 0x86]; // :method GET, :scheme http
    hpack_indexed_name(4, path.as_bytes(), &mut out); // :path
    hpack_indexed_name(1, b"holdfast.test", &mut out); // :authority
    out
}

/// A frame as read by [`RawH2`].
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// A GOAWAY's last stream id and error code.
    pub fn goaway(&self) -> Option<(u32, u32)> {
        if self.kind != frame::GOAWAY || self.payload.len() < 8 {
            return None;
        }
        let last = u32::from_be_bytes(self.payload[..4].try_into().unwrap()) & 0x7fff_ffff;
        let code = u32::from_be_bytes(self.payload[4..8].try_into().unwrap());
        Some((last, code))
    }

    /// A RST_STREAM's error code.
    pub fn reset_code(&self) -> Option<u32> {
        (self.kind == frame::RST_STREAM && self.payload.len() == 4)
            .then(|| u32::from_be_bytes(self.payload[..4].try_into().unwrap()))
    }

    /// A SETTINGS frame's values.
    pub fn settings(&self) -> Vec<(u16, u32)> {
        if self.kind != frame::SETTINGS {
            return Vec::new();
        }
        self.payload
            .chunks_exact(6)
            .map(|s| {
                (u16::from_be_bytes([s[0], s[1]]), u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
            })
            .collect()
    }

    /// The `:status` of a response HEADERS frame (its first header field, as HPACK
    /// encoders write it), if it can be read without the dynamic table.
    pub fn status(&self) -> Option<u16> {
        if self.kind != frame::HEADERS {
            return None;
        }
        let mut block = self.payload.as_slice();
        if self.flags & frame::PADDED != 0 {
            let pad = usize::from(*block.first()?);
            block = block.get(1..block.len().checked_sub(pad)?)?;
        }
        if self.flags & frame::PRIORITY != 0 {
            block = block.get(5..)?;
        }
        // Dynamic table size updates may come first.
        while block.first().is_some_and(|b| b & 0xe0 == 0x20) {
            block = block.get(1..)?;
        }
        let first = *block.first()?;
        if first & 0x80 != 0 {
            return match first & 0x7f {
                8 => Some(200),
                9 => Some(204),
                10 => Some(206),
                11 => Some(304),
                12 => Some(400),
                13 => Some(404),
                14 => Some(500),
                _ => None,
            };
        }
        // A literal with an indexed name: 6-bit prefix (incremental indexing) or 4-bit.
        let index = if first & 0x40 != 0 { first & 0x3f } else { first & 0x0f };
        if !(8..=14).contains(&index) {
            return None;
        }
        let head = *block.get(1)?;
        let len = usize::from(head & 0x7f);
        let value = block.get(2..2 + len)?;
        let text = if head & 0x80 != 0 { huffman_digits(value)? } else { value.to_vec() };
        std::str::from_utf8(&text).ok()?.parse().ok()
    }
}

/// Decodes a Huffman-coded string of decimal digits (RFC 7541 appendix B: `0`-`2` have
/// 5-bit codes, `3`-`9` 6-bit ones), as a status code is.
fn huffman_digits(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut bits: Vec<bool> = Vec::with_capacity(bytes.len() * 8);
    for b in bytes {
        bits.extend((0..8).rev().map(|i| b >> i & 1 == 1));
    }
    let mut out = Vec::new();
    let mut at = 0;
    // Each round decodes one digit or ends at the padding.
    while at < bits.len() {
        let rest = &bits[at..];
        if rest.len() < 8 && rest.iter().all(|b| *b) {
            break; // padding: the EOS code's first bits
        }
        let code =
            |n: usize| rest.get(..n).map(|b| b.iter().fold(0u8, |v, b| v << 1 | u8::from(*b)));
        match code(5)? {
            0..=2 => {
                out.push(b'0' + code(5)?);
                at += 5;
            }
            _ => match code(6)? {
                0x19..=0x1f => {
                    out.push(b'3' + (code(6)? - 0x19));
                    at += 6;
                }
                _ => return None,
            },
        }
    }
    Some(out)
}

/// How a raw connection's reading ended.
#[derive(Debug)]
pub enum RawEnd {
    /// The peer closed or reset the connection.
    Closed,
    TimedOut,
}

/// An HTTP/2 connection driven frame by frame: it sends the preface and an empty
/// SETTINGS on connect, and acknowledges the peer's SETTINGS and PINGs as it reads.
pub struct RawH2 {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Every frame read so far.
    pub seen: Vec<Frame>,
}

impl RawH2 {
    pub async fn connect(addr: SocketAddr) -> RawH2 {
        let stream = within("raw h2 connect", TcpStream::connect(addr)).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let mut raw = RawH2 { stream, buf: Vec::new(), seen: Vec::new() };
        let mut hello = PREFACE.to_vec();
        hello.extend(encode_frame(frame::SETTINGS, 0, 0, &[]));
        raw.send(&hello).await.expect("write the preface");
        raw
    }

    /// Writes `bytes`; an error if the peer has gone or does not read for [`DEADLINE`].
    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match tokio::time::timeout(DEADLINE, self.stream.write_all(bytes)).await {
            Ok(done) => done,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "the peer stopped reading")),
        }
    }

    /// Writes a request `GET path` on `stream`, ended.
    pub async fn get(&mut self, stream: u32, path: &str) -> io::Result<()> {
        let headers = encode_frame(
            frame::HEADERS,
            frame::END_HEADERS | frame::END_STREAM,
            stream,
            &get_block(path),
        );
        self.send(&headers).await
    }

    /// The next frame, read until `deadline`.
    pub async fn next_frame(&mut self, deadline: Instant) -> Result<Frame, RawEnd> {
        // Each round reads more bytes or returns.
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let stream =
                        u32::from_be_bytes(self.buf[5..9].try_into().unwrap()) & 0x7fff_ffff;
                    let frame = Frame {
                        kind: self.buf[3],
                        flags: self.buf[4],
                        stream,
                        payload: self.buf[9..9 + len].to_vec(),
                    };
                    self.buf.drain(..9 + len);
                    self.acknowledge(&frame).await;
                    self.seen.push(frame.clone());
                    return Ok(frame);
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return Err(RawEnd::TimedOut),
                Ok(Ok(0)) | Ok(Err(_)) => return Err(RawEnd::Closed),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Acknowledges SETTINGS and PING, as a client must.
    async fn acknowledge(&mut self, frame: &Frame) {
        let ack = match frame.kind {
            frame::SETTINGS if frame.flags & frame::ACK == 0 => {
                encode_frame(frame::SETTINGS, frame::ACK, 0, &[])
            }
            frame::PING if frame.flags & frame::ACK == 0 => {
                encode_frame(frame::PING, frame::ACK, 0, &frame.payload)
            }
            _ => return,
        };
        // The peer may have closed already; the next read says so.
        let _ = self.send(&ack).await;
    }

    /// Reads frames until one satisfies `want` (returned), the connection ends, or
    /// `deadline` passes.
    pub async fn until(
        &mut self,
        deadline: Duration,
        mut want: impl FnMut(&Frame) -> bool,
    ) -> Result<Frame, RawEnd> {
        let end = Instant::now() + deadline;
        // Bounded by the deadline; each round reads one frame.
        loop {
            let frame = self.next_frame(end).await?;
            if want(&frame) {
                return Ok(frame);
            }
        }
    }

    /// Reads frames until a GOAWAY or the end of the connection, within `deadline`:
    /// the GOAWAY's last stream id and code, or `None` for a close without one.
    /// Panics if the connection is still open after `deadline`.
    pub async fn goaway_or_close(&mut self, deadline: Duration) -> Option<(u32, u32)> {
        match self.until(deadline, |f| f.kind == frame::GOAWAY).await {
            Ok(goaway) => goaway.goaway(),
            Err(RawEnd::Closed) => None,
            Err(RawEnd::TimedOut) => {
                panic!("no GOAWAY and no close within {deadline:?}; frames: {:?}", self.kinds())
            }
        }
    }

    /// The types of the frames read so far, for messages.
    pub fn kinds(&self) -> Vec<u8> {
        self.seen.iter().map(|f| f.kind).collect()
    }

    /// Frames read so far without waiting for more: reads what has arrived within 1 ms.
    pub async fn drain_ready(&mut self) -> Result<(), RawEnd> {
        let end = Instant::now() + Duration::from_millis(1);
        // Bounded: each round reads one frame that has arrived.
        loop {
            match self.next_frame(end).await {
                Ok(_) => {}
                Err(RawEnd::TimedOut) => return Ok(()),
                Err(RawEnd::Closed) => return Err(RawEnd::Closed),
            }
        }
    }
}

/// Whether the tool `name` runs with `--version` and says `feature` in what it prints
/// (curl's `Features:` line, for example). When it does not, the test skips (see
/// [`super::skip_or_fail`]: under CI=true it fails instead) and this returns false.
#[track_caller]
pub fn have_tool_with(name: &str, feature: &str) -> bool {
    let out = std::process::Command::new(name)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output();
    let ok = match &out {
        Ok(out) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            out.status.success() && text.contains(feature)
        }
        Err(_) => false,
    };
    if !ok {
        super::skip_or_fail(&format!("`{name}` with {feature} is not installed"));
    }
    ok
}
