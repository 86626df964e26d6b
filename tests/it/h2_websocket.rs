//! WebSockets over HTTP/2 (RFC 8441): an HTTP/2 client's extended CONNECT through
//! holdfast to a WebSocket origin on HTTP/1.1 (tungstenite, upgraded with a key
//! holdfast makes), over h2c and over TLS; how the tunnel ends both ways, and that its
//! upstream connection is never used again; origins that refuse, or answer the key
//! wrongly; plain CONNECT and other protocols; HTTP/2 origins with and without
//! SETTINGS_ENABLE_CONNECT_PROTOCOL; and Python's `h2` package as a second client.
//!
//! The interop test needs `python3` with the `h2` module (`pip install h2`); it skips
//! without it, and fails under CI=true.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use h2::client::SendRequest;
use h2::ext::Protocol;
use h2::{RecvStream, SendStream};
use holdfast::Config;
use holdfast_pool::CloseReason;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::handshake::server::{
    ErrorResponse, Request as WsRequest, Response as WsResponse,
};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::support::http2::{h2_config, read_all, H2Origin};
use crate::support::tls::{run_tool, tls_connect, toml_path, Pki};
use crate::support::{fixture, have_python_module, wait_until, within, Proxy, RawOrigin, DEADLINE};

/// An h2c listener in front of the servers `servers`.
fn h2c_to(servers: &[String]) -> Config {
    h2_config("h2c = true", servers, "", "")
}

/// How the origin saw one WebSocket end.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OriginEnd {
    /// A Close frame came (the closing handshake).
    Closed,
    /// The connection ended (or failed) without one.
    Eof,
}

#[derive(Default)]
struct WsState {
    accepted: AtomicUsize,
    /// The headers of each upgrade request, as the origin got them.
    upgrades: Mutex<Vec<HeaderMap>>,
    ends: Mutex<Vec<OriginEnd>>,
    /// Plain requests' paths.
    plain: Mutex<Vec<String>>,
}

/// An HTTP/1.1 origin on `127.0.0.1:0`. A request for `/ws...` makes its connection a
/// WebSocket served by tungstenite (`accept_hdr_async`): it echoes text and binary
/// messages until the client closes; on `/ws/bye` it says `bye` and closes first. It
/// answers `Sec-WebSocket-Protocol: chat` when the client offers `chat`. Other requests
/// get `200 plain PATH`, and the connection waits for the next.
struct WsOrigin {
    addr: SocketAddr,
    state: Arc<WsState>,
    accept: JoinHandle<()>,
}

impl Drop for WsOrigin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl WsOrigin {
    async fn start() -> WsOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the WebSocket origin");
        let addr = listener.local_addr().expect("its address");
        let state = Arc::new(WsState::default());
        let accept = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    state.accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve_ws_origin(tcp, Arc::clone(&state)));
                }
            })
        };
        WsOrigin { addr, state, accept }
    }

    fn server(&self) -> String {
        self.addr.to_string()
    }

    fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    fn upgrades(&self) -> Vec<HeaderMap> {
        self.state.upgrades.lock().unwrap().clone()
    }

    fn ends(&self) -> Vec<OriginEnd> {
        self.state.ends.lock().unwrap().clone()
    }

    fn plain(&self) -> Vec<String> {
        self.state.plain.lock().unwrap().clone()
    }
}

/// The first line of what `tcp` has received, left unread.
async fn peek_first_line(tcp: &TcpStream) -> Option<String> {
    let mut buf = [0u8; 512];
    // Bounded: each round sees more bytes, or the buffer fills.
    loop {
        let n = tcp.peek(&mut buf).await.ok().filter(|n| *n > 0)?;
        if let Some(end) = buf[..n].windows(2).position(|w| w == b"\r\n") {
            return Some(String::from_utf8_lossy(&buf[..end]).into_owned());
        }
        if n == buf.len() {
            return None;
        }
        // The rest of the line is on its way.
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// Serves one connection: requests for `/ws...` upgrade it (it is then the
/// WebSocket's), others are answered and the next request awaited.
async fn serve_ws_origin(mut tcp: TcpStream, state: Arc<WsState>) {
    // Each round answers one plain request; bounded by the connection.
    loop {
        let Some(line) = peek_first_line(&tcp).await else { return };
        let path = line.split(' ').nth(1).unwrap_or("/").to_string();
        if path.starts_with("/ws") {
            return serve_websocket(tcp, &path, &state).await;
        }
        match answer_plain(tcp, &path, &state).await {
            Some(kept) => tcp = kept,
            None => return,
        }
    }
}

/// Upgrades `tcp` with tungstenite and serves the WebSocket on `path`.
#[allow(clippy::result_large_err)] // tungstenite's callback type, not ours
async fn serve_websocket<S>(tcp: S, path: &str, state: &Arc<WsState>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let seen = Arc::clone(state);
    let callback =
        move |req: &WsRequest, mut resp: WsResponse| -> Result<WsResponse, ErrorResponse> {
            seen.upgrades.lock().unwrap().push(req.headers().clone());
            let offered = req.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok());
            if offered.is_some_and(|v| v.split(',').any(|p| p.trim() == "chat")) {
                resp.headers_mut().insert("sec-websocket-protocol", "chat".parse().unwrap());
            }
            Ok(resp)
        };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(tcp, callback).await else { return };
    if path == "/ws/bye" {
        let _ = ws.send(Message::text("bye")).await;
        let _ = ws.close(None).await;
    }
    let mut end = OriginEnd::Eof;
    // Each round takes one message; bounded by the connection.
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(m @ (Message::Text(_) | Message::Binary(_))) => {
                if ws.send(m).await.is_err() {
                    break;
                }
            }
            // tungstenite answers the Close itself; the stream ends after it.
            Ok(Message::Close(_)) => end = OriginEnd::Closed,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    state.ends.lock().unwrap().push(end);
}

/// Reads the request head for `path` on `tcp` and answers `200 plain PATH`; the
/// connection, kept for the next request, unless it failed.
async fn answer_plain(tcp: TcpStream, path: &str, state: &WsState) -> Option<TcpStream> {
    let mut reader = BufReader::new(tcp);
    // Each round reads one line of the head; bounded by the head.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
    }
    // holdfast sends the next request only after this answer: nothing else was read.
    assert!(reader.buffer().is_empty(), "a request pipelined to the test origin");
    let mut tcp = reader.into_inner();
    state.plain.lock().unwrap().push(path.to_string());
    let body = format!("plain {path}\n");
    let response = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
    tcp.write_all(response.as_bytes()).await.ok()?;
    Some(tcp)
}

/// An HTTP/2 stream as a byte stream, for tungstenite on either end: DATA frames in
/// (their window given back as they are read), DATA frames out (as the peer's window
/// allows), END_STREAM on shutdown.
struct H2Duplex {
    send: SendStream<Bytes>,
    recv: RecvStream,
    unread: Bytes,
    ended: bool,
}

impl H2Duplex {
    fn new(send: SendStream<Bytes>, recv: RecvStream) -> H2Duplex {
        H2Duplex { send, recv, unread: Bytes::new(), ended: false }
    }
}

impl AsyncRead for H2Duplex {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // Each round takes one DATA frame; empty ones are skipped, not taken for the end.
        while this.unread.is_empty() {
            match ready!(this.recv.poll_data(cx)) {
                None => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                Some(Ok(data)) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    this.unread = data;
                }
            }
        }
        let n = this.unread.len().min(buf.remaining());
        buf.put_slice(&this.unread.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H2Duplex {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let send = &mut self.send;
        send.reserve_capacity(buf.len());
        // Each round either writes or waits for window.
        loop {
            let room = send.capacity();
            if room > 0 {
                let n = room.min(buf.len());
                let data = Bytes::copy_from_slice(&buf[..n]);
                send.send_data(data, false).map_err(io::Error::other)?;
                return Poll::Ready(Ok(n));
            }
            match ready!(send.poll_capacity(cx)) {
                None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                Some(Ok(_)) => {}
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !std::mem::replace(&mut self.ended, true) {
            self.send.send_data(Bytes::new(), true).map_err(io::Error::other)?;
        }
        Poll::Ready(Ok(()))
    }
}

/// The HTTP/2 session on `io`, once the server's SETTINGS said it takes extended
/// CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL = 1).
async fn h2_session<IO>(io: IO) -> SendRequest<Bytes>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = within("h2 handshake", h2::client::handshake(io)).await.expect("handshake");
    tokio::spawn(conn);
    let advertised = || send.is_extended_connect_protocol_enabled();
    wait_until("holdfast advertises SETTINGS_ENABLE_CONNECT_PROTOCOL", DEADLINE, advertised).await;
    send
}

/// An h2c session with holdfast at `addr` (see [`h2_session`]).
async fn h2c(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = within("connect", TcpStream::connect(addr)).await.expect("connect");
    h2_session(tcp).await
}

/// Sends an extended CONNECT for `protocol` on `path` (`:authority` `holdfast.test`)
/// with `headers`; its response head, and the stream.
async fn extended_connect(
    send: &SendRequest<Bytes>,
    scheme: &str,
    protocol: &'static str,
    path: &str,
    headers: &[(&str, &str)],
) -> (http::response::Parts, SendStream<Bytes>, RecvStream) {
    within("an extended CONNECT's response", async {
        let mut req = Request::builder()
            .method(Method::CONNECT)
            .uri(format!("{scheme}://holdfast.test{path}"))
            .header("sec-websocket-version", "13");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let mut req = req.body(()).expect("a request");
        req.extensions_mut().insert(Protocol::from_static(protocol));
        let mut send = send.clone().ready().await.expect("room for a stream");
        let (response, stream) = send.send_request(req, false).expect("the request goes");
        let (parts, body) = response.await.expect("a response head").into_parts();
        (parts, stream, body)
    })
    .await
}

/// Opens a WebSocket on `path`; the response head, and the WebSocket on the stream.
async fn open_websocket(
    send: &SendRequest<Bytes>,
    scheme: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (http::response::Parts, WebSocketStream<H2Duplex>) {
    let (parts, stream, body) = extended_connect(send, scheme, "websocket", path, headers).await;
    let duplex = H2Duplex::new(stream, body);
    (parts, WebSocketStream::from_raw_socket(duplex, Role::Client, None).await)
}

/// Sends `msg` and asserts it comes back.
async fn assert_echoes(ws: &mut WebSocketStream<H2Duplex>, msg: Message) {
    within("a WebSocket send", ws.send(msg.clone())).await.expect("send");
    let echoed = within("a WebSocket echo", ws.next()).await.expect("a message").expect("ok");
    assert_eq!(echoed, msg);
}

/// Reads what is left of `ws` to its end, which must be clean: the closing handshake,
/// then END_STREAM (a reset would be an error here).
async fn assert_ends_cleanly(ws: &mut WebSocketStream<H2Duplex>) {
    within("the WebSocket's end", async {
        // Bounded by what the origin sends after the close.
        while let Some(msg) = ws.next().await {
            let msg = msg.expect("no error before the WebSocket's end");
            assert!(msg.is_close() || msg.is_text(), "{msg:?}");
        }
    })
    .await;
}

/// Asserts the key the origin got is 16 bytes in base64 (RFC 6455, 4.1).
fn assert_valid_key(key: &str) {
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    assert_eq!(key.len(), 24, "{key}");
    assert!(key.ends_with("==") && !key.ends_with("==="), "{key}");
    assert!(key.trim_end_matches('=').chars().all(|c| ALPHABET.contains(c)), "{key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_over_h2c_reaches_an_http1_origin_and_its_connection_is_not_reused() {
    let origin = WsOrigin::start().await;
    let proxy = Proxy::start(h2c_to(&[origin.server()])).await;
    let send = h2c(proxy.addr()).await;
    let offer = [("sec-websocket-protocol", "superchat, chat"), ("x-app", "demo")];
    let (head, mut ws) = open_websocket(&send, "http", "/ws/echo", &offer).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.headers["sec-websocket-protocol"], "chat");
    for name in ["sec-websocket-accept", "upgrade", "connection", "content-length"] {
        assert!(head.headers.get(name).is_none(), "{name} in {:?}", head.headers);
    }
    for text in ["hello", "second message"] {
        assert_echoes(&mut ws, Message::text(text)).await;
    }
    // More than a flow-control window (64 KiB by default) each way.
    assert_echoes(&mut ws, Message::binary(vec![7u8; 300_000])).await;

    // What the origin got: an HTTP/1.1 upgrade with a key of holdfast's.
    let upgrades = origin.upgrades();
    assert_eq!(upgrades.len(), 1);
    let seen = &upgrades[0];
    let field = |name: &str| seen.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(field("upgrade").eq_ignore_ascii_case("websocket"), "{seen:?}");
    assert!(field("connection").to_ascii_lowercase().contains("upgrade"), "{seen:?}");
    assert_eq!(field("sec-websocket-version"), "13");
    assert_eq!(field("sec-websocket-protocol"), "superchat, chat");
    assert_eq!(field("host"), "holdfast.test");
    assert_eq!(field("x-app"), "demo");
    assert_eq!(field("x-forwarded-for"), "127.0.0.1");
    assert_valid_key(field("sec-websocket-key"));

    // The client closes: the origin gets the Close, answers it and closes; the client
    // gets the answer, then END_STREAM.
    within("a WebSocket close", ws.close(None)).await.expect("close");
    assert_ends_cleanly(&mut ws).await;
    wait_until("the origin saw the close", DEADLINE, || !origin.ends().is_empty()).await;
    assert_eq!(origin.ends(), [OriginEnd::Closed]);
    assert_eq!(proxy.pool().closed(CloseReason::Upgraded), 1);

    // The upgraded connection never went back to the pool: a plain request on the
    // same HTTP/2 connection needs a new one.
    let mut plain = send.clone().ready().await.expect("room for a stream");
    let req = Request::get("http://holdfast.test/plain").body(()).unwrap();
    let (response, _) = plain.send_request(req, true).expect("a plain request");
    let (parts, mut body) = within("a plain response", response).await.expect("ok").into_parts();
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(read_all(&mut body).await.expect("a body"), b"plain /plain\n");
    assert_eq!(origin.accepted(), 2);
    assert_eq!(origin.plain(), ["/plain"]);

    // A second WebSocket gets a key of its own.
    let (_, mut again) = open_websocket(&send, "http", "/ws/echo", &[]).await;
    assert_echoes(&mut again, Message::text("again")).await;
    let keys: Vec<_> = origin.upgrades().iter().map(|h| h["sec-websocket-key"].clone()).collect();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_over_tls_with_alpn_h2() {
    let pki = Pki::new("h2-websocket-tls");
    let (_, files) = pki.localhost("server", "server");
    let origin = WsOrigin::start().await;
    let tls = format!("\n[listener.tls]\n{}", files.toml());
    let proxy = Proxy::start(h2_config(&tls, &[origin.server()], "", "")).await;
    let config = pki.ca.client_config_alpn(&[b"h2"]);
    let tls = tls_connect(proxy.addr(), &config, "localhost").await.expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let send = h2_session(tls).await;
    let (head, mut ws) = open_websocket(&send, "https", "/ws/tls", &[]).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.headers.get("sec-websocket-protocol").is_none());
    assert_echoes(&mut ws, Message::text("over TLS")).await;
    within("a WebSocket close", ws.close(None)).await.expect("close");
    assert_ends_cleanly(&mut ws).await;
    let seen = &origin.upgrades()[0];
    assert_eq!(seen["x-forwarded-proto"], "https");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_to_a_tls_origin_that_alpn_finds_speaks_http1() {
    // `https://` servers are `protocol = "auto"`: the first connection's ALPN tells.
    // The first WebSocket goes out before it has, the second after.
    let pki = Pki::new("h2-websocket-auto");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    let acceptor = tokio_rustls::TlsAcceptor::from(leaf.server_config(&[b"http/1.1"]));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("its address");
    let state = Arc::new(WsState::default());
    let serving = Arc::clone(&state);
    let origin = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            serving.accepted.fetch_add(1, Ordering::SeqCst);
            let (acceptor, state) = (acceptor.clone(), Arc::clone(&serving));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                serve_websocket(tls, "/ws/echo", &state).await;
            });
        }
    });
    let group = format!("[upstream.app.tls]\nca = {}", toml_path(&pki.ca_file));
    let proxy =
        Proxy::start(h2_config("h2c = true", &[format!("https://{addr}")], &group, "")).await;
    let send = h2c(proxy.addr()).await;
    for text in ["first", "second"] {
        let (head, mut ws) = open_websocket(&send, "http", "/ws/tls-origin", &[]).await;
        assert_eq!(head.status, StatusCode::OK);
        assert_echoes(&mut ws, Message::text(text)).await;
        within("a WebSocket close", ws.close(None)).await.expect("close");
        assert_ends_cleanly(&mut ws).await;
    }
    assert_eq!(state.upgrades.lock().unwrap().len(), 2);
    assert_eq!(state.accepted.load(Ordering::SeqCst), 2);
    origin.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_closing_first_ends_the_clients_stream() {
    let origin = WsOrigin::start().await;
    let proxy = Proxy::start(h2c_to(&[origin.server()])).await;
    let send = h2c(proxy.addr()).await;
    let (_, mut ws) = open_websocket(&send, "http", "/ws/bye", &[]).await;
    let first = within("the origin's message", ws.next()).await.expect("a message").expect("ok");
    assert_eq!(first, Message::text("bye"));
    // The origin's Close, answered by the client, then the origin's EOF as END_STREAM.
    assert_ends_cleanly(&mut ws).await;
    wait_until("the origin's WebSocket ended", DEADLINE, || !origin.ends().is_empty()).await;
    assert_eq!(origin.ends(), [OriginEnd::Closed]);
    // The client ends its side too: the stream is closed both ways, the connection
    // carries on.
    within("END_STREAM", ws.get_mut().shutdown()).await.expect("END_STREAM");
    let (head, mut again) = open_websocket(&send, "http", "/ws/echo", &[]).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_echoes(&mut again, Message::text("still here")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_the_origin_sends_with_its_101_reach_the_client() {
    // An origin whose first frame leaves in the same write as its 101: holdfast reads
    // it with the head, and must pass it on before anything else.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("its address");
    let origin = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("a connection");
        let mut tcp = BufReader::new(tcp);
        let mut key = String::new();
        // Each round reads one line of the head; bounded by the head.
        loop {
            let mut line = String::new();
            tcp.read_line(&mut line).await.expect("the head");
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("sec-websocket-key") {
                    key = value.trim().to_string();
                }
            }
            if line == "\r\n" {
                break;
            }
        }
        let accept = derive_accept_key(key.as_bytes());
        let mut answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\
             connection: upgrade\r\nsec-websocket-accept: {accept}\r\n\r\n"
        )
        .into_bytes();
        // A text frame, `first`, and a Close (unmasked: the server's).
        answer.extend_from_slice(b"\x81\x05first\x88\x00");
        tcp.get_mut().write_all(&answer).await.expect("the answer");
        // Closed once the client's END_STREAM has become holdfast's FIN.
        let mut rest = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut tcp, &mut rest).await;
        rest
    });
    let proxy = Proxy::start(h2c_to(&[addr.to_string()])).await;
    let send = h2c(proxy.addr()).await;
    let (head, mut stream, mut body) = extended_connect(&send, "http", "websocket", "/", &[]).await;
    assert_eq!(head.status, StatusCode::OK);
    let mut got = Vec::new();
    // Each round takes one DATA frame; bounded by the 9 bytes expected.
    while got.len() < 9 {
        let data = within("the origin's frames", body.data()).await.expect("data").expect("ok");
        let _ = body.flow_control().release_capacity(data.len());
        got.extend_from_slice(&data);
    }
    assert_eq!(got, b"\x81\x05first\x88\x00");
    stream.send_data(Bytes::new(), true).expect("END_STREAM");
    let rest = within("the origin's EOF", origin).await.expect("the origin task");
    assert_eq!(rest, b"", "nothing but the FIN reached the origin");
    assert_eq!(read_all(&mut body).await.expect("END_STREAM"), b"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_stream_from_the_client_half_closes_toward_the_origin() {
    let origin = WsOrigin::start().await;
    let proxy = Proxy::start(h2c_to(&[origin.server()])).await;
    let send = h2c(proxy.addr()).await;
    let (_, mut stream, mut body) =
        extended_connect(&send, "http", "websocket", "/ws/eof", &[]).await;
    // END_STREAM with no Close frame: the origin reads EOF (holdfast shut down its
    // sending side), closes, and its EOF ends the client's stream.
    stream.send_data(Bytes::new(), true).expect("END_STREAM");
    let rest = within("the stream's end", read_all(&mut body)).await;
    assert_eq!(rest.expect("END_STREAM, not a reset"), b"");
    wait_until("the origin's WebSocket ended", DEADLINE, || !origin.ends().is_empty()).await;
    assert_eq!(origin.ends(), [OriginEnd::Eof]);
    assert_eq!(proxy.pool().closed(CloseReason::Upgraded), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reset_closes_the_origin_connection() {
    let origin = WsOrigin::start().await;
    let proxy = Proxy::start(h2c_to(&[origin.server()])).await;
    let send = h2c(proxy.addr()).await;
    let (_, mut ws) = open_websocket(&send, "http", "/ws/reset", &[]).await;
    assert_echoes(&mut ws, Message::text("before the reset")).await;
    ws.get_mut().send.send_reset(h2::Reason::CANCEL);
    wait_until("the origin's WebSocket ended", DEADLINE, || !origin.ends().is_empty()).await;
    assert_eq!(origin.ends(), [OriginEnd::Eof]);
    // The connection the WebSocket had is gone, not pooled.
    let stats = proxy.pool();
    assert_eq!((stats.closed(CloseReason::Upgraded), stats.idle), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_refuses_the_upgrade_is_relayed_as_a_response() {
    let origin =
        RawOrigin::start(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 10\r\n\r\nforbidden\n").await;
    let proxy = Proxy::start(h2c_to(&[origin.addr().to_string()])).await;
    let send = h2c(proxy.addr()).await;
    let (head, _stream, mut body) = extended_connect(&send, "http", "websocket", "/ws", &[]).await;
    assert_eq!(head.status, StatusCode::FORBIDDEN);
    assert_eq!(read_all(&mut body).await.expect("the body"), b"forbidden\n");
    assert_eq!(proxy.pool().closed(CloseReason::Upgraded), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_answers_200_without_switching_is_a_502() {
    // To an HTTP/2 client a 2xx would mean the WebSocket is open.
    let origin = RawOrigin::start(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nhi\n").await;
    let proxy = Proxy::start(h2c_to(&[origin.addr().to_string()])).await;
    let send = h2c(proxy.addr()).await;
    let (head, _stream, mut body) = extended_connect(&send, "http", "websocket", "/ws", &[]).await;
    let text = String::from_utf8(read_all(&mut body).await.expect("the body")).unwrap();
    assert_eq!(head.status, StatusCode::BAD_GATEWAY, "{text}");
    assert!(text.contains("answered 200 to a WebSocket upgrade"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_sec_websocket_accept_is_a_502() {
    // The accept of RFC 6455's example key, not of holdfast's.
    let wrong: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\
        connection: upgrade\r\nsec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    let missing: &[u8] =
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n";
    for response in [wrong, missing] {
        let origin = RawOrigin::start(response).await;
        let proxy = Proxy::start(h2c_to(&[origin.addr().to_string()])).await;
        let send = h2c(proxy.addr()).await;
        let (head, _stream, mut body) =
            extended_connect(&send, "http", "websocket", "/ws", &[]).await;
        let text = String::from_utf8(read_all(&mut body).await.expect("the body")).unwrap();
        assert_eq!(head.status, StatusCode::BAD_GATEWAY, "{text}");
        assert!(text.contains("Sec-WebSocket-Accept"), "{text}");
        assert_eq!(proxy.pool().closed(CloseReason::Upgraded), 0);
        assert_eq!(proxy.pool().idle, 0, "a connection that switched is never pooled");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_connect_is_405_and_other_protocols_are_501() {
    let origin = WsOrigin::start().await;
    let proxy = Proxy::start(h2c_to(&[origin.server()])).await;
    let send = h2c(proxy.addr()).await;
    // A plain CONNECT: `:authority` only.
    let req = Request::builder().method(Method::CONNECT).uri("holdfast.test:443").body(()).unwrap();
    let mut ready = send.clone().ready().await.expect("room for a stream");
    let (response, _stream) = ready.send_request(req, false).expect("the request goes");
    let (head, _) = within("a response", response).await.expect("a response").into_parts();
    assert_eq!(head.status, StatusCode::METHOD_NOT_ALLOWED);
    let (head, _stream, mut body) =
        extended_connect(&send, "http", "connect-udp", "/udp", &[]).await;
    assert_eq!(head.status, StatusCode::NOT_IMPLEMENTED);
    let text = String::from_utf8(read_all(&mut body).await.expect("the body")).unwrap();
    assert!(text.contains("websocket"), "{text}");
    // The protocol's name is case-insensitive.
    let (head, mut ws) = open_websocket(&send, "http", "/ws/case", &[]).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_echoes(&mut ws, Message::text("websocket")).await;
    let (head, stream, body) = extended_connect(&send, "http", "WebSocket", "/ws/case", &[]).await;
    assert_eq!(head.status, StatusCode::OK);
    let mut ws =
        WebSocketStream::from_raw_socket(H2Duplex::new(stream, body), Role::Client, None).await;
    assert_echoes(&mut ws, Message::text("WebSocket")).await;
    assert_eq!(origin.upgrades().len(), 2, "the refused ones never reached the origin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_origin_without_extended_connect_gets_501() {
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c_to(&[format!("h2c://{}", origin.addr())])).await;
    let send = h2c(proxy.addr()).await;
    let (head, _stream, mut body) = extended_connect(&send, "http", "websocket", "/ws", &[]).await;
    let text = String::from_utf8(read_all(&mut body).await.expect("the body")).unwrap();
    assert_eq!(head.status, StatusCode::NOT_IMPLEMENTED, "{text}");
    assert!(text.contains("does not accept WebSockets over HTTP/2"), "{text}");
    assert_eq!(origin.request_count(), 0);
}

/// What an [`ExtendedOrigin`] got.
#[derive(Default)]
struct ExtendedSeen {
    requests: Mutex<Vec<(Method, Option<String>, HeaderMap)>>,
    ends: Mutex<Vec<OriginEnd>>,
}

/// An h2c origin that sends SETTINGS_ENABLE_CONNECT_PROTOCOL and serves WebSockets on
/// extended CONNECT streams (tungstenite over the stream), echoing until the client
/// closes.
async fn extended_origin() -> (SocketAddr, Arc<ExtendedSeen>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the h2 origin");
    let addr = listener.local_addr().expect("its address");
    let seen = Arc::new(ExtendedSeen::default());
    let state = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                let mut builder = h2::server::Builder::new();
                builder.enable_connect_protocol();
                let Ok(mut conn) = builder.handshake::<_, Bytes>(tcp).await else { return };
                // Each round takes one stream (and drives the connection); bounded by
                // the connection.
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let protocol =
                        req.extensions().get::<Protocol>().map(|p| p.as_str().to_owned());
                    let entry = (req.method().clone(), protocol, req.headers().clone());
                    state.requests.lock().unwrap().push(entry);
                    let state = Arc::clone(&state);
                    tokio::spawn(async move {
                        let resp = Response::builder()
                            .header("sec-websocket-protocol", "chat")
                            .body(())
                            .unwrap();
                        let Ok(send) = respond.send_response(resp, false) else { return };
                        let duplex = H2Duplex::new(send, req.into_body());
                        let mut ws =
                            WebSocketStream::from_raw_socket(duplex, Role::Server, None).await;
                        let mut end = OriginEnd::Eof;
                        // Each round takes one message; bounded by the stream.
                        while let Some(Ok(msg)) = ws.next().await {
                            if msg.is_close() {
                                end = OriginEnd::Closed;
                            } else if (msg.is_text() || msg.is_binary())
                                && ws.send(msg).await.is_err()
                            {
                                break;
                            }
                        }
                        let _ = ws.get_mut().shutdown().await;
                        state.ends.lock().unwrap().push(end);
                    });
                }
            });
        }
    });
    (addr, seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_origin_with_extended_connect_gets_the_websocket_as_a_stream() {
    let (addr, seen, task) = extended_origin().await;
    let proxy = Proxy::start(h2c_to(&[format!("h2c://{addr}")])).await;
    let send = h2c(proxy.addr()).await;
    let offer = [("sec-websocket-protocol", "chat")];
    let (head, mut ws) = open_websocket(&send, "http", "/ws/h2", &offer).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.headers["sec-websocket-protocol"], "chat");
    assert_echoes(&mut ws, Message::text("through two HTTP/2 hops")).await;
    assert_echoes(&mut ws, Message::binary(vec![1u8; 200_000])).await;
    within("a WebSocket close", ws.close(None)).await.expect("close");
    assert_ends_cleanly(&mut ws).await;
    wait_until("the origin's WebSocket ended", DEADLINE, || !seen.ends.lock().unwrap().is_empty())
        .await;
    assert_eq!(*seen.ends.lock().unwrap(), [OriginEnd::Closed]);
    let requests = seen.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    let (method, protocol, headers) = &requests[0];
    assert_eq!(method, Method::CONNECT);
    assert_eq!(protocol.as_deref(), Some("websocket"));
    assert!(headers.get("sec-websocket-key").is_none(), "{headers:?}");
    assert_eq!(headers["sec-websocket-version"], "13");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_h2_client_opens_a_websocket_over_h2c() {
    if !have_python_module("h2.connection", "h2") {
        return;
    }
    let origin = WsOrigin::start().await;
    let proxy = Proxy::start(h2c_to(&[origin.server()])).await;
    let script = fixture("h2_websocket_client.py");
    let port = proxy.addr().port().to_string();
    let out = run_tool("python3", &[&script, "127.0.0.1", &port, "/ws/python"], b"").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for step in ["settings", "status 200", "echo", "close", "end_stream"] {
        assert!(stdout.lines().any(|l| l == format!("ok {step}")), "step {step}:\n{report}");
    }
    assert!(out.status.success(), "{report}");
    wait_until("the origin's WebSocket ended", DEADLINE, || !origin.ends().is_empty()).await;
    assert_eq!(origin.ends(), [OriginEnd::Closed]);
    assert_valid_key(origin.upgrades()[0]["sec-websocket-key"].to_str().unwrap());
}
