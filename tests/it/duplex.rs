//! An HTTP/1.1 client's exchange with an HTTP/2 origin is full duplex: the response
//! head may come while the body still goes up, and its body streams to the client
//! while the client's body streams to the origin. A client that sends each part of a
//! 4 MiB upload only once the origin's echo of the part before has come back gets
//! through, chunked (with trailers both ways) or with a Content-Length; an origin that
//! answers 413 after a little of a large body gets its answer to the client, and the
//! client's connection closes cleanly after it. What held before still holds:
//! `Expect: 100-continue`, `client_max_body` (413), a stalled client (408).
//!
//! The echo origin ([`EchoOrigin`]) is written on the `h2` crate's server here: it
//! answers every request's HEADERS at once and sends each DATA frame back as it reads
//! it, which the shared test origin never does.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::support::http2::{h2_config, H2Origin};
use crate::support::incoming::Incoming;
use crate::support::{within, Fnv, Proxy, RawClient, DEADLINE};

/// The size of each upload: far more than any window or socket buffer on the way.
const UPLOAD: usize = 4 << 20;

/// The part a client sends before it waits for the echo of it.
const PART: usize = 64 * 1024;

/// What the echo origin had of one request body when it was done with it.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    bytes: u64,
    fnv: String,
    /// The names of the request's trailers, comma-separated.
    trailers: String,
}

#[derive(Default)]
struct EchoState {
    received: Mutex<Vec<Received>>,
    errors: Mutex<Vec<String>>,
}

/// An h2c origin on `127.0.0.1:0`; stops accepting when dropped. Its routes:
/// - `/echo`: answers 200 at once (no length), sends every DATA frame of the body back
///   as it reads it, and ends with the trailers `x-received-bytes`, `x-received-fnv`
///   and `x-request-trailers` (the names of the request's trailers).
/// - `/reject`: reads 16 KiB of the body (or all of it, if less), answers 413 with
///   `too large\n`, and drops the body: `h2` resets the stream's sending side with
///   NO_ERROR (RFC 9113, 8.1).
/// - `/reject-hold`: as `/reject`, but keeps the body open, unread, for 30 s: the
///   stream is never reset.
struct EchoOrigin {
    addr: SocketAddr,
    state: Arc<EchoState>,
    accept: JoinHandle<()>,
}

impl Drop for EchoOrigin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl EchoOrigin {
    async fn start() -> EchoOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the echo origin");
        let addr = listener.local_addr().expect("echo origin address");
        let state = Arc::new(EchoState::default());
        let accept = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let state = Arc::clone(&state);
                    tokio::spawn(async move {
                        let _ = tcp.set_nodelay(true);
                        let mut conn = match h2::server::handshake(tcp).await {
                            Ok(conn) => conn,
                            Err(e) => return state.errors.lock().unwrap().push(e.to_string()),
                        };
                        // Ends with the connection; each round takes one stream.
                        while let Some(Ok((req, respond))) = conn.accept().await {
                            let state = Arc::clone(&state);
                            tokio::spawn(async move {
                                if let Err(e) = answer(req, respond, &state).await {
                                    state.errors.lock().unwrap().push(format!("stream: {e}"));
                                }
                            });
                        }
                    });
                }
            })
        };
        EchoOrigin { addr, state, accept }
    }

    fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    fn errors(&self) -> Vec<String> {
        self.state.errors.lock().unwrap().clone()
    }
}

/// Answers one request as its route says.
async fn answer(
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    state: &EchoState,
) -> Result<(), h2::Error> {
    let path = req.uri().path().to_string();
    let mut body = req.into_body();
    let mut received =
        Received { path: path.clone(), bytes: 0, fnv: String::new(), trailers: String::new() };
    let mut fnv = Fnv::default();
    if path.starts_with("/reject") {
        // Bounded by the body; each round takes one DATA frame.
        while received.bytes < 16 * 1024 {
            let Some(chunk) = body.data().await else { break };
            let chunk = chunk?;
            received.bytes += chunk.len() as u64;
            fnv.update(&chunk);
        }
        received.fnv = fnv.hex();
        state.received.lock().unwrap().push(received);
        let head = Response::builder()
            .status(StatusCode::PAYLOAD_TOO_LARGE)
            .header("content-length", "10")
            .body(())
            .expect("a response");
        let mut send = respond.send_response(head, false)?;
        send.send_data(Bytes::from_static(b"too large\n"), true)?;
        if path == "/reject-hold" {
            // Neither read nor reset: holdfast must stop sending on its own.
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        drop(body);
        return Ok(());
    }
    let head = Response::builder().status(StatusCode::OK).body(()).expect("a response");
    let mut send = respond.send_response(head, false)?;
    // Bounded by the body; each round echoes one DATA frame.
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let n = chunk.len();
        received.bytes += n as u64;
        fnv.update(&chunk);
        send_all(&mut send, chunk).await?;
        // The window goes back once the echo went: the client has to read it for more
        // of its body to come.
        body.flow_control().release_capacity(n)?;
    }
    let request_trailers = body.trailers().await?;
    received.fnv = fnv.hex();
    received.trailers = request_trailers
        .map(|t| t.keys().map(|k| k.as_str().to_string()).collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    let mut trailers = HeaderMap::new();
    let value = |s: &str| HeaderValue::from_str(s).expect("a header value");
    trailers.insert("x-received-bytes", value(&received.bytes.to_string()));
    trailers.insert("x-received-fnv", value(&received.fnv));
    trailers.insert("x-request-trailers", value(&received.trailers));
    state.received.lock().unwrap().push(received);
    send.send_trailers(trailers)
}

/// Sends `data` as the peer's window allows.
async fn send_all(send: &mut SendStream<Bytes>, mut data: Bytes) -> Result<(), h2::Error> {
    // Bounded by the data; each round sends what the window allows.
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(h2::Reason::CANCEL)),
        };
        let piece = data.split_to(granted.min(data.len()));
        send.send_data(piece, false)?;
    }
    Ok(())
}

/// holdfast in front of `origin` (h2c), with `rest` (top-level tables) added.
async fn proxy_for(origin: SocketAddr, rest: &str) -> Proxy {
    Proxy::start(h2_config("", &[format!("h2c://{origin}")], "", rest)).await
}

/// `len` bytes that repeat only every 251.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// How a test's client frames its upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Chunked,
    Length,
}

/// The request head for a `len`-byte POST to `path`.
fn post_head(path: &str, framing: Framing, len: usize, expect: bool) -> String {
    let framing = match framing {
        Framing::Chunked => "Transfer-Encoding: chunked".to_string(),
        Framing::Length => format!("Content-Length: {len}"),
    };
    let expect = if expect { "Expect: 100-continue\r\n" } else { "" };
    format!("POST {path} HTTP/1.1\r\nHost: duplex.test\r\n{framing}\r\n{expect}\r\n")
}

/// `part` framed as the body says.
fn framed(part: &[u8], framing: Framing) -> Vec<u8> {
    match framing {
        Framing::Length => part.to_vec(),
        Framing::Chunked => {
            let mut out = format!("{:x}\r\n", part.len()).into_bytes();
            out.extend_from_slice(part);
            out.extend_from_slice(b"\r\n");
            out
        }
    }
}

/// Writes `bytes`, within the test deadline.
async fn write(wr: &mut OwnedWriteHalf, bytes: &[u8]) {
    within("a write to holdfast", wr.write_all(bytes)).await.expect("write to holdfast");
}

/// Uploads 4 MiB to the echo route in parts, each sent only once the echo of all
/// before it came back: possible only if holdfast relays the response while the body
/// still goes up.
async fn echo_in_step(framing: Framing, expect: bool) {
    let what = format!("{framing:?}, expect {expect}");
    let origin = EchoOrigin::start().await;
    let proxy = proxy_for(origin.addr, "").await;
    let tcp = within("connect", TcpStream::connect(proxy.addr())).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (rd, mut wr) = tcp.into_split();
    let mut incoming = Incoming::new(rd);
    let body = pattern(UPLOAD);
    write(&mut wr, post_head("/echo", framing, UPLOAD, expect).as_bytes()).await;
    if expect {
        // Nothing of the body went, and the origin answers at once: 100 Continue comes
        // first (the reader takes interim responses only before the final head, which
        // may follow in the same read).
        incoming.until("100 Continue", |r| !r.interim.is_empty()).await;
        assert_eq!(incoming.interim, [100], "{what}");
    }
    let mut sent = 0;
    for (i, part) in body.chunks(PART).enumerate() {
        write(&mut wr, &framed(part, framing)).await;
        sent += part.len();
        let echoed = format!("{what}: the echo of part {i} (up to byte {sent})");
        incoming.until(&echoed, |r| r.body.len() >= sent).await;
        if i == 0 {
            assert_eq!(incoming.status, Some(200), "{what}");
        }
    }
    if framing == Framing::Chunked {
        let ending = format!("0\r\nx-checksum: {}\r\n\r\n", Fnv::of(&body));
        write(&mut wr, ending.as_bytes()).await;
    }
    incoming.until_ended().await;
    assert!(incoming.body == body, "{what}: the echo differs from the upload");
    assert_eq!(incoming.interim.len(), usize::from(expect), "{what}: {:?}", incoming.interim);
    // The origin's trailers reach the client in the chunked ending.
    let len = UPLOAD.to_string();
    assert_eq!(incoming.trailer("x-received-bytes"), Some(len.as_str()), "{what}");
    assert_eq!(incoming.trailer("x-received-fnv"), Some(Fnv::of(&body).as_str()), "{what}");
    let request_trailers = if framing == Framing::Chunked { "x-checksum" } else { "" };
    assert_eq!(incoming.trailer("x-request-trailers"), Some(request_trailers), "{what}");
    // The head went before the body was all read: it said the connection closes.
    assert_eq!(incoming.header("connection"), Some("close"), "{what}");
    incoming.assert_closed().await;
    let received = origin.received();
    assert_eq!(received.len(), 1, "{what}: {received:?}");
    assert_eq!((received[0].bytes, received[0].fnv.as_str()), (UPLOAD as u64, &*Fnv::of(&body)));
    assert!(origin.errors().is_empty(), "{what}: {:?}", origin.errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_upload_streams_while_its_echo_comes_back() {
    echo_in_step(Framing::Chunked, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_with_a_length_streams_while_its_echo_comes_back() {
    echo_in_step(Framing::Length, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_waits_for_100_continue_streams_while_its_echo_comes_back() {
    echo_in_step(Framing::Chunked, true).await;
    echo_in_step(Framing::Length, true).await;
}

/// POSTs a 64 MiB body to `path`, writing it as fast as holdfast takes it: the client
/// gets the origin's 413, then the connection closes cleanly.
async fn rejected_early(path: &str, framing: Framing) {
    const LARGE: usize = 64 << 20;
    let what = format!("{path}, {framing:?}");
    let origin = EchoOrigin::start().await;
    let proxy = proxy_for(origin.addr, "").await;
    let tcp = within("connect", TcpStream::connect(proxy.addr())).await.expect("connect");
    let (rd, mut wr) = tcp.into_split();
    let mut incoming = Incoming::new(rd);
    write(&mut wr, post_head(path, framing, LARGE, false).as_bytes()).await;
    // The body goes on being written until holdfast stops taking it.
    let writer = tokio::spawn(async move {
        let part = framed(&pattern(PART), framing);
        for _ in 0..LARGE / PART {
            if wr.write_all(&part).await.is_err() {
                return;
            }
        }
        let _ = wr.write_all(b"0\r\n\r\n").await;
    });
    incoming.until_ended().await;
    assert_eq!(incoming.status, Some(413), "{what}");
    assert_eq!(incoming.body, b"too large\n", "{what}");
    assert_eq!(incoming.header("connection"), Some("close"), "{what}");
    incoming.assert_closed().await;
    writer.abort();
    let received = origin.received();
    assert_eq!(received.len(), 1, "{what}: {received:?}");
    assert!((16 * 1024..LARGE as u64).contains(&received[0].bytes), "{what}: {received:?}");
    assert_eq!(received[0].path, path, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_413_that_resets_the_upload_reaches_the_client_and_the_connection_closes() {
    rejected_early("/reject", Framing::Length).await;
    rejected_early("/reject", Framing::Chunked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_413_that_leaves_the_upload_open_reaches_the_client_and_the_connection_closes() {
    // The origin stops reading and never resets the stream: the body waits for a
    // window that does not come, and must not hold the response back.
    rejected_early("/reject-hold", Framing::Length).await;
    rejected_early("/reject-hold", Framing::Chunked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_sending_while_its_echo_streams_is_cut_off_and_the_origin_told() {
    let origin = EchoOrigin::start().await;
    let proxy = proxy_for(origin.addr, "[timeouts]\nread = \"300ms\"\n").await;
    let tcp = within("connect", TcpStream::connect(proxy.addr())).await.expect("connect");
    let (rd, mut wr) = tcp.into_split();
    let mut incoming = Incoming::new(rd);
    write(&mut wr, post_head("/echo", Framing::Length, UPLOAD, false).as_bytes()).await;
    write(&mut wr, &pattern(PART)).await;
    incoming.until("the echo of the first part", |r| r.body.len() >= PART).await;
    // Nothing more comes: after `read`, the response is cut off (it cannot be whole
    // for a request that is not), the connection closes, and the origin's stream is
    // reset instead of waiting for the rest.
    incoming.until_gone().await;
    assert!(!incoming.ended, "a response to half a request ended as if whole");
    assert_eq!(incoming.body.len(), PART);
    crate::support::wait_until("the origin hears of it", DEADLINE, || !origin.errors().is_empty())
        .await;
    assert!(origin.received().is_empty(), "{:?}", origin.received());
    // The client failed, not the origin: nothing is counted against the backend.
    let metrics = proxy.metrics().await;
    let origin_body = [("reason", "origin_body")];
    let counted = metrics.count_or_zero("holdfast_backend_errors_total", &origin_body);
    assert_eq!(counted, 0, "{}", metrics.text);
    drop(wr);
}

// What held before full duplex, against an origin that reads the body before it
// answers (the shared HTTP/2 test origin).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_to_an_h2_origin_gets_the_interim_response_first() {
    let origin = H2Origin::start().await;
    let proxy = proxy_for(origin.addr(), "").await;
    let mut client = RawClient::connect(proxy.addr()).await;
    client
        .send(
            "POST /expect HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\
             Expect: 100-continue\r\n\r\n",
        )
        .await;
    assert_eq!(client.response().await.status, 100);
    client.send("hello world").await;
    let last = client.response().await;
    assert_eq!(last.status, 200, "{}", last.body_text());
    assert_eq!(last.header("x-received-bytes"), Some("11"));
    assert_eq!(last.header("x-received-fnv"), Some(Fnv::of(b"hello world").as_str()));
    // The whole body went before the answer: the connection carries another request.
    assert_eq!(last.header("connection"), None);
    client.send("GET /again HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    assert_eq!(origin.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_client_max_body_to_an_h2_origin_gets_413() {
    let origin = H2Origin::start().await;
    let proxy = proxy_for(origin.addr(), "[limits]\nclient_max_body = \"1k\"\n").await;
    for framing in [Framing::Chunked, Framing::Length] {
        let mut client = RawClient::connect(proxy.addr()).await;
        let len = 2048;
        // A length over the limit is refused before anything goes; a chunked body once
        // it grows past it.
        let mut request = post_head("/too-big", framing, len, false).into_bytes();
        request.extend(framed(&pattern(len), framing));
        client.send(&request).await;
        let resp = client.response_then_close().await.expect("a 413");
        assert_eq!(resp.status, 413, "{framing:?}: {}", resp.body_text());
        assert!(resp.body_text().contains("client_max_body"), "{}", resp.body_text());
    }
    assert_eq!(origin.answered(), 0, "the origin answered a body over the limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_sending_its_body_to_an_h2_origin_gets_408() {
    let origin = H2Origin::start().await;
    let proxy = proxy_for(origin.addr(), "[timeouts]\nread = \"300ms\"\n").await;
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send("POST /stalled HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nhalf").await;
    let resp = client.response_then_close().await.expect("a 408");
    assert_eq!(resp.status, 408, "{}", resp.body_text());
    assert_eq!(origin.answered(), 0);
}
