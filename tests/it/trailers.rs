//! Trailers through holdfast in every pairing of client and origin protocol, both ways:
//! an HTTP/1.1 chunked trailer section and an HTTP/2 trailing HEADERS frame are written
//! on the wire by one side, and the other side is checked for each name and value
//! (gRPC's `grpc-status` and `grpc-message` among them). Fields that may not be
//! trailers (RFC 9110, 6.5.1) are dropped on the way; trailer sections past the head
//! limits are refused; a body the client gets with a Content-Length has no place for
//! trailers.
//!
//! The HTTP/1.1 sides here are hand-written ([`H1Origin`], [`H1Exchange`]), so the
//! trailer section is exactly what goes over TCP; the HTTP/2 sides use the `h2` crate
//! ([`TrailerH2Origin`], `H2Client`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use h2::RecvStream;
use holdfast::Config;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::http2::{h2_config, H2Client};
use crate::support::{within, Proxy, DEADLINE};

/// What the response trailers of every origin here are, as the client should get
/// them: a gRPC status with its message (percent-encoded, as gRPC sends it) and a
/// field of the application's own.
const RESPONSE_TRAILERS: [(&str, &str); 3] =
    [("grpc-status", "5"), ("grpc-message", "not%20found"), ("x-checksum", "c0ffee")];

/// Response trailer fields that may not be trailers (RFC 9110, 6.5.1), sent besides the
/// good ones and expected nowhere.
const FORBIDDEN_RESPONSE_TRAILERS: [(&str, &str); 3] =
    [("content-type", "text/html"), ("set-cookie", "session=1"), ("content-length", "99")];

/// What the request trailers of every client here are, as the origin should get them.
const REQUEST_TRAILERS: [(&str, &str); 2] = [("x-request-sum", "42"), ("grpc-timeout", "1S")];

/// Request trailer fields that may not be trailers, expected nowhere.
const FORBIDDEN_REQUEST_TRAILERS: [(&str, &str); 3] =
    [("host", "evil.test"), ("authorization", "Bearer stolen"), ("content-length", "0")];

/// Fields as they arrived: (name, value) pairs in order, names lowercased.
type Fields = Vec<(String, String)>;

/// `fields` as the lines of an HTTP/1.1 trailer section (names as given).
fn h1_lines(fields: &[(&str, &str)]) -> String {
    fields.iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect()
}

/// `fields` as an HTTP/2 header map.
fn h2_map(fields: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in fields {
        let name = http::header::HeaderName::from_bytes(name.as_bytes()).expect("a field name");
        map.append(name, HeaderValue::from_str(value).expect("a field value"));
    }
    map
}

/// An HTTP/2 header map as (name, value) pairs, in order.
fn pairs(map: &HeaderMap) -> Fields {
    map.iter()
        .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect()
}

/// `fields` as owned (name, value) pairs, for comparing with what arrived.
fn owned(fields: &[(&str, &str)]) -> Fields {
    fields.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

/// An HTTP/1.1 message as read off the wire: its head, its body decoded, and its
/// trailer fields (names lowercased, values trimmed), in order.
#[derive(Debug, Clone, Default)]
struct H1Message {
    head: String,
    body: Vec<u8>,
    trailers: Fields,
}

impl H1Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.split("\r\n").skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Reads one HTTP/1.1 message from `stream` (bytes already read in `buf`, which keeps
/// what follows it): a head, then a chunked body with its trailer section, a body of
/// `Content-Length`, or none. `None` when the peer closes before a message starts.
async fn read_h1(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Option<H1Message> {
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if !fill(stream, buf, deadline).await {
            assert!(buf.is_empty(), "closed inside a head: {:?}", String::from_utf8_lossy(buf));
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    buf.drain(..head_end);
    let mut message = H1Message { head, ..H1Message::default() };
    if message.header("transfer-encoding").is_some_and(|te| te.ends_with("chunked")) {
        loop {
            if let Some((body, trailers, used)) = decode_chunked(buf) {
                message.body = body;
                message.trailers = trailers;
                buf.drain(..used);
                return Some(message);
            }
            assert!(fill(stream, buf, deadline).await, "closed inside a chunked body");
        }
    }
    let length = message.header("content-length").map_or(0, |n| n.parse().expect("a length"));
    while buf.len() < length {
        assert!(fill(stream, buf, deadline).await, "closed inside a body of {length} bytes");
    }
    message.body = buf.drain(..length).collect();
    Some(message)
}

/// Reads more of `stream` into `buf`; false once the peer has closed.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
        Err(_) => panic!("no more bytes by the deadline; have {:?}", String::from_utf8_lossy(buf)),
        Ok(Ok(0)) | Ok(Err(_)) => false,
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// A complete chunked body at the start of `buf`: its payload, its trailer fields and
/// the bytes it took; `None` while it is incomplete.
fn decode_chunked(buf: &[u8]) -> Option<(Vec<u8>, Fields, usize)> {
    let mut at = 0;
    let mut body = Vec::new();
    // Each round takes one chunk.
    loop {
        let line_end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&buf[at..line_end]).expect("a chunk size line");
        let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
            .unwrap_or_else(|_| panic!("a chunk size, not {line:?}"));
        at = line_end + 2;
        if size == 0 {
            break;
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&buf[at..at + size]);
        assert_eq!(&buf[at + size..at + size + 2], b"\r\n", "a chunk ends in CRLF");
        at += size + 2;
    }
    let mut trailers = Vec::new();
    // Each round takes one trailer line, until the empty one.
    loop {
        let line_end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(&buf[at..line_end]).into_owned();
        at = line_end + 2;
        if line.is_empty() {
            return Some((body, trailers, at));
        }
        let (name, value) = line.split_once(':').expect("a trailer line has a colon");
        trailers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
}

/// A hand-written HTTP/1.1 origin: reads each request (head, body, trailer section),
/// records it, and answers with `response` as it is, on keep-alive connections.
struct H1Origin {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<H1Message>>>,
    accept: JoinHandle<()>,
}

impl Drop for H1Origin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl H1Origin {
    async fn start(response: String) -> H1Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the origin");
        let addr = listener.local_addr().expect("origin address");
        let requests: Arc<Mutex<Vec<H1Message>>> = Arc::default();
        let record = Arc::clone(&requests);
        let accept = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (record, response) = (Arc::clone(&record), response.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    // Ends when holdfast closes the connection; each round is a request.
                    loop {
                        let deadline = Instant::now() + DEADLINE * 6;
                        let Some(request) = read_h1(&mut stream, &mut buf, deadline).await else {
                            return;
                        };
                        record.lock().unwrap().push(request);
                        if stream.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        H1Origin { addr, requests, accept }
    }

    fn requests(&self) -> Vec<H1Message> {
        self.requests.lock().unwrap().clone()
    }
}

/// An HTTP/1.1 client connection to holdfast, written by hand.
struct H1Exchange {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl H1Exchange {
    async fn connect(addr: SocketAddr) -> H1Exchange {
        let stream =
            within("connect to holdfast", TcpStream::connect(addr)).await.expect("connect");
        H1Exchange { stream, buf: Vec::new() }
    }

    /// Writes `request` and reads the response.
    async fn send(&mut self, request: &str) -> H1Message {
        within("write a request", self.stream.write_all(request.as_bytes()))
            .await
            .expect("write a request");
        let deadline = Instant::now() + DEADLINE;
        read_h1(&mut self.stream, &mut self.buf, deadline).await.expect("a response")
    }
}

/// A chunked POST whose trailer section holds [`REQUEST_TRAILERS`] and
/// [`FORBIDDEN_REQUEST_TRAILERS`].
fn chunked_post_with_trailers() -> String {
    format!(
        "POST /call HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\
         Trailer: x-request-sum\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n{}{}\r\n",
        h1_lines(&REQUEST_TRAILERS),
        h1_lines(&FORBIDDEN_REQUEST_TRAILERS)
    )
}

/// A chunked response whose trailer section holds [`RESPONSE_TRAILERS`] and
/// [`FORBIDDEN_RESPONSE_TRAILERS`], names in mixed case as HTTP/1.1 allows.
fn chunked_response_with_trailers() -> String {
    let mixed: Vec<(String, &str)> = RESPONSE_TRAILERS
        .iter()
        .map(|(n, v)| (n.replacen('g', "G", 1).replacen('x', "X", 1), *v))
        .collect();
    let mixed: Vec<(&str, &str)> = mixed.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/grpc\r\nTransfer-Encoding: chunked\r\n\
         Trailer: grpc-status, grpc-message, x-checksum\r\n\r\n\
         7\r\nanswer \r\n4\r\nbody\r\n0\r\n{}{}\r\n",
        h1_lines(&mixed),
        h1_lines(&FORBIDDEN_RESPONSE_TRAILERS)
    )
}

/// One request as a [`TrailerH2Origin`] received it.
#[derive(Debug, Clone)]
struct H2Seen {
    headers: HeaderMap,
    body: Vec<u8>,
    trailers: Option<HeaderMap>,
}

/// What a [`TrailerH2Origin`] answers: its body, with a `content-length` or without,
/// then its trailers.
#[derive(Clone)]
struct H2Answer {
    body: &'static [u8],
    with_length: bool,
    trailers: HeaderMap,
}

/// An h2c origin (the `h2` crate) that records each request with its trailers and
/// answers every stream with the same [`H2Answer`].
struct TrailerH2Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<H2Seen>>>,
    accept: JoinHandle<()>,
}

impl Drop for TrailerH2Origin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl TrailerH2Origin {
    async fn start(answer: H2Answer) -> TrailerH2Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the h2 origin");
        let addr = listener.local_addr().expect("h2 origin address");
        let seen: Arc<Mutex<Vec<H2Seen>>> = Arc::default();
        let record = Arc::clone(&seen);
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (record, answer) = (Arc::clone(&record), answer.clone());
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else { return };
                    // Ends with the connection; each round takes one stream.
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        let (record, answer) = (Arc::clone(&record), answer.clone());
                        tokio::spawn(async move {
                            let (parts, body) = request.into_parts();
                            let Ok((data, trailers)) = read_h2_body(body).await else { return };
                            let seen = H2Seen { headers: parts.headers, body: data, trailers };
                            record.lock().unwrap().push(seen);
                            let _ = answer_h2(respond, &answer);
                        });
                    }
                });
            }
        });
        TrailerH2Origin { addr, seen, accept }
    }

    fn seen(&self) -> Vec<H2Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads an HTTP/2 body to its end: its bytes and its trailers.
async fn read_h2_body(mut body: RecvStream) -> Result<(Vec<u8>, Option<HeaderMap>), h2::Error> {
    let mut data = Vec::new();
    // Bounded by the body; each round takes one DATA frame.
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        data.extend_from_slice(&chunk);
        body.flow_control().release_capacity(chunk.len())?;
    }
    Ok((data, body.trailers().await?))
}

/// Sends `answer` on a stream: HEADERS, one DATA frame, and the trailers in a HEADERS
/// frame that ends the stream. The bodies here are far below any window.
fn answer_h2(
    mut respond: h2::server::SendResponse<Bytes>,
    answer: &H2Answer,
) -> Result<(), h2::Error> {
    let mut response = Response::builder().status(200).header("content-type", "application/grpc");
    if answer.with_length {
        response = response.header("content-length", answer.body.len());
    }
    let response = response.body(()).expect("a response");
    let mut send = respond.send_response(response, false)?;
    send.send_data(Bytes::from_static(answer.body), false)?;
    send.send_trailers(answer.trailers.clone())
}

/// The answer of the HTTP/2 origins here: a body without a length, then
/// [`RESPONSE_TRAILERS`] and [`FORBIDDEN_RESPONSE_TRAILERS`] (which the `h2` crate
/// sends as they are: none is connection-specific).
fn h2_answer(with_length: bool) -> H2Answer {
    let mut trailers = h2_map(&RESPONSE_TRAILERS);
    for (name, value) in h2_map(&FORBIDDEN_RESPONSE_TRAILERS) {
        trailers.append(name.expect("a name per field"), value);
    }
    H2Answer { body: b"answer body", with_length, trailers }
}

/// holdfast with a listener that takes HTTP/1.1 and h2c, in front of `server` (an
/// address, or an `h2c://` URL for an HTTP/2 origin); `rest` as in `h2_config`.
fn proxy_config(server: String, rest: &str) -> Config {
    h2_config("h2c = true", &[server], "", rest)
}

/// [`REQUEST_TRAILERS`] and [`FORBIDDEN_REQUEST_TRAILERS`] as an HTTP/2 client sends
/// them.
fn h2_request_trailers() -> HeaderMap {
    let mut trailers = h2_map(&REQUEST_TRAILERS);
    for (name, value) in h2_map(&FORBIDDEN_REQUEST_TRAILERS) {
        trailers.append(name.expect("a name per field"), value);
    }
    trailers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_client_and_h1_origin_trailers_pass_both_ways() {
    let origin = H1Origin::start(chunked_response_with_trailers()).await;
    let proxy = Proxy::start(proxy_config(origin.addr.to_string(), "")).await;
    let mut client = H1Exchange::connect(proxy.addr()).await;
    // Twice on one connection: the trailer sections end each message where it ends.
    for i in 0..2 {
        let response = client.send(&chunked_post_with_trailers()).await;
        assert!(response.head.starts_with("HTTP/1.1 200"), "{i}: {}", response.head);
        assert_eq!(response.header("transfer-encoding"), Some("chunked"), "{i}");
        assert_eq!(
            response.header("trailer"),
            Some("grpc-status, grpc-message, x-checksum"),
            "{i}"
        );
        assert_eq!(response.body, b"answer body", "{i}");
        assert_eq!(response.trailers, owned(&RESPONSE_TRAILERS), "{i}");
    }
    let requests = origin.requests();
    assert_eq!(requests.len(), 2);
    for request in requests {
        assert_eq!(request.body, b"hello world");
        assert_eq!(request.trailers, owned(&REQUEST_TRAILERS), "{}", request.head);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_client_and_h2_origin_trailers_pass_both_ways() {
    let origin = TrailerH2Origin::start(h2_answer(false)).await;
    let proxy = Proxy::start(proxy_config(format!("h2c://{}", origin.addr), "")).await;
    let mut client = H1Exchange::connect(proxy.addr()).await;
    for i in 0..2 {
        let response = client.send(&chunked_post_with_trailers()).await;
        assert!(response.head.starts_with("HTTP/1.1 200"), "{i}: {}", response.head);
        // The origin's body has no length, so the client gets it chunked, and the
        // trailers in the chunked ending.
        assert_eq!(response.header("transfer-encoding"), Some("chunked"), "{i}");
        assert_eq!(response.body, b"answer body", "{i}");
        assert_eq!(response.trailers, owned(&RESPONSE_TRAILERS), "{i}");
    }
    let seen = origin.seen();
    assert_eq!(seen.len(), 2);
    for request in seen {
        assert_eq!(request.body, b"hello world");
        let trailers = request.trailers.as_ref().expect("request trailers at the origin");
        assert_eq!(pairs(trailers), owned(&REQUEST_TRAILERS));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_client_and_h1_origin_trailers_pass_both_ways() {
    // Regression: an HTTP/1.1 origin's trailers (a gRPC status) never reached HTTP/2
    // clients.
    let origin = H1Origin::start(chunked_response_with_trailers()).await;
    let proxy = Proxy::start(proxy_config(origin.addr.to_string(), "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    for i in 0..2 {
        let reply = client
            .request_for(
                DEADLINE,
                Method::POST,
                "/call",
                &[("te", "trailers"), ("content-type", "application/grpc")],
                Bytes::from_static(b"hello world"),
                Some(h2_request_trailers()),
            )
            .await
            .expect("a response");
        assert_eq!(reply.status, StatusCode::OK, "{i}");
        assert_eq!(reply.text(), "answer body", "{i}");
        assert_eq!(reply.header("trailer"), Some("grpc-status, grpc-message, x-checksum"));
        let trailers = reply.trailers.as_ref().expect("response trailers");
        assert_eq!(pairs(trailers), owned(&RESPONSE_TRAILERS), "{i}");
    }
    let requests = origin.requests();
    assert_eq!(requests.len(), 2);
    for request in requests {
        assert_eq!(request.header("transfer-encoding"), Some("chunked"), "{}", request.head);
        assert_eq!(request.body, b"hello world");
        assert_eq!(request.trailers, owned(&REQUEST_TRAILERS), "{}", request.head);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_client_and_h2_origin_trailers_pass_both_ways() {
    let origin = TrailerH2Origin::start(h2_answer(false)).await;
    let proxy = Proxy::start(proxy_config(format!("h2c://{}", origin.addr), "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    for i in 0..2 {
        let reply = client
            .request_for(
                DEADLINE,
                Method::POST,
                "/call",
                &[("te", "trailers"), ("content-type", "application/grpc")],
                Bytes::from_static(b"hello world"),
                Some(h2_request_trailers()),
            )
            .await
            .expect("a response");
        assert_eq!(reply.status, StatusCode::OK, "{i}");
        assert_eq!(reply.text(), "answer body", "{i}");
        let trailers = reply.trailers.as_ref().expect("response trailers");
        assert_eq!(pairs(trailers), owned(&RESPONSE_TRAILERS), "{i}");
    }
    let seen = origin.seen();
    assert_eq!(seen.len(), 2);
    for request in seen {
        // `te: trailers` goes on to an HTTP/2 origin, as gRPC servers require.
        assert_eq!(request.headers.get("te").map(|v| v.as_bytes()), Some(&b"trailers"[..]));
        assert_eq!(request.body, b"hello world");
        let trailers = request.trailers.as_ref().expect("request trailers at the origin");
        assert_eq!(pairs(trailers), owned(&REQUEST_TRAILERS));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_client_trailers_after_a_declared_length_reach_an_h2_origin() {
    // A body of declared length is read whole before it is sent (so a refused stream
    // can go again); its trailers go with it.
    let origin = TrailerH2Origin::start(h2_answer(false)).await;
    let proxy = Proxy::start(proxy_config(format!("h2c://{}", origin.addr), "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    let reply = client
        .request_for(
            DEADLINE,
            Method::POST,
            "/call",
            &[("content-length", "11")],
            Bytes::from_static(b"hello world"),
            Some(h2_request_trailers()),
        )
        .await
        .expect("a response");
    assert_eq!(reply.status, StatusCode::OK);
    let seen = origin.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, b"hello world");
    let trailers = seen[0].trailers.as_ref().expect("request trailers at the origin");
    assert_eq!(pairs(trailers), owned(&REQUEST_TRAILERS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h1_client_given_the_origins_content_length_gets_no_trailers() {
    // An HTTP/1.1 body with a Content-Length has no trailer section: the h2 origin's
    // trailers are dropped, and the body and connection are as they should be.
    let origin = TrailerH2Origin::start(h2_answer(true)).await;
    let proxy = Proxy::start(proxy_config(format!("h2c://{}", origin.addr), "")).await;
    let mut client = H1Exchange::connect(proxy.addr()).await;
    for i in 0..2 {
        let response = client.send("GET /call HTTP/1.1\r\nHost: app.test\r\n\r\n").await;
        assert!(response.head.starts_with("HTTP/1.1 200"), "{i}: {}", response.head);
        assert_eq!(response.header("content-length"), Some("11"), "{i}");
        assert_eq!(response.header("transfer-encoding"), None, "{i}");
        assert_eq!(response.body, b"answer body", "{i}");
    }
    // The connection is still in step: the next response starts where the last ended.
    assert_eq!(origin.seen().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_past_the_head_limit_are_refused() {
    // A client's trailer section is bounded as its head is.
    let origin = H1Origin::start(chunked_response_with_trailers()).await;
    let limits = "[limits]\nmax_request_header_bytes = 2048\n";
    let proxy = Proxy::start(proxy_config(origin.addr.to_string(), limits)).await;
    let mut client = H1Exchange::connect(proxy.addr()).await;
    let fits = format!(
        "POST /fits HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n\
         1\r\na\r\n0\r\nx-big: {}\r\n\r\n",
        "b".repeat(1500)
    );
    let response = client.send(&fits).await;
    assert!(response.head.starts_with("HTTP/1.1 200"), "{}", response.head);
    assert_eq!(origin.requests()[0].trailers, [("x-big".to_string(), "b".repeat(1500))]);
    let over = fits.replace("/fits", "/over").replace(&"b".repeat(1500), &"b".repeat(3000));
    let response = client.send(&over).await;
    assert!(response.head.starts_with("HTTP/1.1 400"), "{}", response.head);
    assert!(
        origin.requests().iter().all(|r| !r.head.starts_with("POST /over")),
        "the origin got the whole request with the oversized trailers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_trailers_past_the_head_limit_reach_no_h2_client() {
    // An origin's trailer section is bounded as its head is (64 KiB): past it the
    // stream is reset, and nothing of the oversized section is passed on.
    let big = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n{}\r\n",
        (0..100).map(|i| format!("x-big-{i}: {}\r\n", "b".repeat(1000))).collect::<String>()
    );
    let origin = H1Origin::start(big).await;
    let proxy = Proxy::start(proxy_config(origin.addr.to_string(), "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    // Twice: the stream fails, not the client's connection.
    for i in 0..2 {
        let reply = client.request(Method::GET, "/big", &[], Bytes::new()).await;
        let error = reply.expect_err("the stream is reset, not ended with trailers");
        assert_eq!(error.reason(), Some(h2::Reason::INTERNAL_ERROR), "{i}: {error}");
    }
    assert_eq!(origin.requests().len(), 2);
}
