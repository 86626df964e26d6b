//! Response buffering: a client that reads slower than its origin sends does not hold
//! the upstream connection. holdfast reads the response into memory and a temporary
//! file, the connection goes back to the pool as soon as the origin is done, and the
//! client gets every byte at its own pace. Responses that must stream (event streams,
//! `X-Accel-Buffering: no`, a route with buffering off) still hold their connection.

use std::net::SocketAddr;
use std::time::Duration;

use holdfast::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{config_with_admin, wait_until, within, Origin, Proxy, DEADLINE};

/// Bigger than every socket buffer between the origin and the client together, so a
/// client that does not read leaves most of it with holdfast or the origin.
const LARGE: usize = 32 * 1024 * 1024;

/// A client connection that takes little into its receive buffer: it reads only when
/// the test says.
async fn reluctant_client(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket.connect(addr).await.expect("connect to holdfast")
}

/// Sends `GET path` on `stream`.
async fn get(stream: &mut TcpStream, path: &str) {
    let head = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("send the request");
}

/// Reads a response with a Content-Length body to its end: (status, body length).
async fn read_response(stream: &mut TcpStream) -> (u16, usize) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    // Bounded by the head's size: at most 64 KiB.
    while !head.ends_with(b"\r\n\r\n") {
        assert!(head.len() < 64 * 1024, "response head too long");
        stream.read_exact(&mut byte).await.expect("the response head");
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let status: u16 = text[9..12].parse().expect("a status code");
    let length: usize = text
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(str::to_string))
        .map(|v| v.trim().parse().expect("a length"))
        .expect("a Content-Length");
    let mut body = vec![0u8; 256 * 1024];
    let mut got = 0usize;
    // Bounded by the length announced.
    while got < length {
        let n = stream.read(&mut body).await.expect("the body");
        assert!(n > 0, "the body ended after {got} of {length} bytes");
        assert!(body[..n].iter().all(|b| *b == b'x'), "the body's bytes changed");
        got += n;
    }
    assert_eq!(got, length, "bytes past the body");
    (status, got)
}

fn config(extra: &str, origin: &Origin) -> Config {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nupstream = \"app\"\n\n\
         [admin]\naddress = \"127.0.0.1:0\"\n\n\
         [upstream.app]\nservers = [\"{}\"]\n\n{extra}\n",
        origin.addr()
    );
    Config::parse(&text, std::path::Path::new("buffering.toml")).expect("a valid config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_does_not_hold_the_upstream_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_with_admin(&origin)).await;
    let mut slow = reluctant_client(proxy.addr()).await;
    get(&mut slow, &format!("/bytes/{LARGE}")).await;
    // The origin is done long before the client reads a byte: its connection is idle
    // in the pool while the client still has almost all of the response to take.
    wait_until("the upstream connection is back in the pool", DEADLINE, || proxy.pool().idle == 1)
        .await;
    // Another client's request takes that connection.
    let reply = proxy.client().await.get("/bytes/100").await;
    assert_eq!(reply.status, 200);
    assert_eq!(origin.accepted(), 1, "the second request reused the released connection");
    // The slow client gets every byte.
    let (status, got) = within("the slow client reads it all", read_response(&mut slow)).await;
    assert_eq!((status, got), (200, LARGE));
    let metrics = proxy.metrics().await;
    assert!(metrics.count("holdfast_spooled_exchanges_total", &[]) >= 1);
    assert!(metrics.count("holdfast_spool_files_total", &[]) >= 1, "32 MiB went to a file");
    assert_eq!(metrics.count("holdfast_spool_bytes", &[("kept", "file")]), 0, "all given back");
    let (status, body) = crate::support::admin_get(proxy.admin(), "/status").await;
    assert_eq!(status, 200);
    let status: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(status["buffering"]["file_in_use"], 0, "{body}");
    assert!(status["buffering"]["file_total"].as_u64().is_some_and(|n| n > 0), "{body}");
    let backend = &status["upstreams"][0]["servers"][0];
    assert_eq!(backend["clients"]["claims"], 0, "no request holds a claim now: {body}");
}

/// The number of connections the origin accepted once a second request was served
/// while a first client, asking for `path`, read nothing.
async fn connections_while_a_client_stalls(config: Config, origin: &Origin, path: &str) -> usize {
    let proxy = Proxy::start(config).await;
    let mut slow = reluctant_client(proxy.addr()).await;
    get(&mut slow, path).await;
    wait_until("the origin has the first request", DEADLINE, || origin.requests().len() == 1).await;
    let reply = proxy.client().await.get("/bytes/100").await;
    assert_eq!(reply.status, 200);
    let accepted = origin.accepted();
    let (status, got) = within("the slow client reads it all", read_response(&mut slow)).await;
    assert_eq!((status, got), (200, LARGE));
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_that_must_stream_keep_their_connection() {
    // An event stream, and an origin that asks with X-Accel-Buffering: no.
    for query in ["content_type=text%2Fevent-stream", "x_accel=no"] {
        let origin = Origin::start().await;
        let path = format!("/bytes/{LARGE}?{query}");
        let accepted = connections_while_a_client_stalls(config("", &origin), &origin, &path);
        assert_eq!(accepted.await, 2, "{query}: the stalled response kept its connection");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffering_is_off_where_a_route_or_the_config_says() {
    let origin = Origin::start().await;
    let route = "[[route]]\npath = \"/bytes\"\nupstream = \"app\"\nbuffer_responses = false\n";
    let path = format!("/bytes/{LARGE}");
    let accepted = connections_while_a_client_stalls(config(route, &origin), &origin, &path);
    assert_eq!(accepted.await, 2, "the route turns buffering off");
    let origin = Origin::start().await;
    let off = "[buffering]\nresponses = false\n";
    let accepted = connections_while_a_client_stalls(config(off, &origin), &origin, &path);
    assert_eq!(accepted.await, 2, "[buffering] turns it off everywhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_takes_nothing_of_a_held_response_is_cut_off() {
    let origin = Origin::start().await;
    let timeouts = "[timeouts]\nclient_buffered = \"1s\"\n";
    let proxy = Proxy::start(config(timeouts, &origin)).await;
    let mut slow = reluctant_client(proxy.addr()).await;
    get(&mut slow, &format!("/bytes/{LARGE}")).await;
    wait_until("the upstream connection is back in the pool", DEADLINE, || proxy.pool().idle == 1)
        .await;
    // The spool holds most of the response while the client reads nothing; after the
    // client's second of grace, holdfast gives up on it and the spool is gone.
    let spooled = || async {
        let metrics = proxy.metrics().await;
        metrics.count("holdfast_spool_bytes", &[("kept", "file")])
    };
    assert!(spooled().await > 0, "the response waits in a file");
    within("the held response is given up", async {
        // Bounded by `within`; each round scrapes once.
        while spooled().await > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // What the client reads now ends early: its connection was closed.
    let mut total = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    within("the client's connection ends", async {
        // Bounded: the kernel holds at most a few MB for it, then the end.
        loop {
            match slow.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    assert!(total < LARGE, "the client was cut off before its response ended ({total} bytes)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_and_closing_responses_reach_a_slow_reader_whole() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_with_admin(&origin)).await;
    // Chunked from the origin: re-chunked through the spool.
    let mut slow = reluctant_client(proxy.addr()).await;
    let head = format!("GET /stream/{LARGE} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    slow.write_all(head.as_bytes()).await.expect("send");
    wait_until("the upstream connection is back in the pool", DEADLINE, || proxy.pool().idle == 1)
        .await;
    let mut all = Vec::new();
    within("the slow client reads to the close", slow.read_to_end(&mut all)).await.expect("read");
    let text_end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    let head = String::from_utf8_lossy(&all[..text_end]).to_ascii_lowercase();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let (body, _) = crate::support::client::decode_chunked(&all[text_end..])
        .expect("valid chunked framing")
        .expect("a whole chunked body");
    assert_eq!(body.len(), LARGE);
    assert!(body.iter().all(|b| *b == b'x'));
}

/// A route with request buffering, in front of `origin`.
fn buffering_requests(origin: &Origin, extra: &str) -> Config {
    let route =
        format!("[[route]]\npath = \"/\"\nupstream = \"app\"\nbuffer_requests = true\n{extra}");
    config(&route, origin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_upload_reaches_the_origin_only_once_it_is_whole() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(buffering_requests(&origin, "")).await;
    let mut client = crate::support::RawClient::connect(proxy.addr()).await;
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let head =
        format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", body.len());
    client.send(head).await;
    client.send(&body[..600_000]).await;
    // Most of the body is in holdfast: the origin has seen nothing yet.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(origin.accepted(), 0, "no upstream connection while the upload is slow");
    client.send(&body[600_000..]).await;
    let reply = within("the response", client.response()).await;
    assert_eq!(reply.status, 200, "{}", reply.body_text());
    assert_eq!(reply.header("x-received-bytes"), Some("1000000"));
    let fnv = crate::support::Fnv::of(&body);
    assert_eq!(reply.header("x-received-fnv"), Some(fnv.as_str()));
    // A chunked upload with trailers, buffered the same way.
    let mut client = crate::support::RawClient::connect(proxy.addr()).await;
    client
        .send(
            "POST /chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        )
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(origin.count_path("/chunked"), 0);
    client.send("6\r\n world\r\n0\r\nX-Check: 1\r\n\r\n").await;
    let reply = within("the chunked response", client.response()).await;
    assert_eq!(reply.status, 200, "{}", reply.body_text());
    assert_eq!(reply.header("x-received-bytes"), Some("11"));
    assert_eq!(reply.header("x-received-trailers"), Some("x-check"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_request_buffering_the_upload_streams_to_the_origin() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config("", &origin)).await;
    let mut client = crate::support::RawClient::connect(proxy.addr()).await;
    client.send("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n12345").await;
    wait_until("the origin has the request", DEADLINE, || origin.count_path("/upload") == 1).await;
    client.send("67890").await;
    let reply = within("the response", client.response()).await;
    assert_eq!(reply.header("x-received-bytes"), Some("10"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_larger_than_request_buffering_holds_gets_413() {
    let origin = Origin::start().await;
    let bounds = "\n[buffering]\nmemory_per_exchange = 1024\nfile_per_exchange = 10240\n";
    let proxy = Proxy::start(buffering_requests(&origin, bounds)).await;
    let mut client = crate::support::RawClient::connect(proxy.addr()).await;
    client.send("POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n").await;
    client.send(vec![b'b'; 20_000]).await;
    let reply = within("the refusal", client.response()).await;
    assert_eq!(reply.status, 413, "{}", reply.body_text());
    assert!(
        reply.body_text().contains("request buffering holds (11264 bytes)"),
        "{}",
        reply.body_text()
    );
    assert_eq!(origin.accepted(), 0, "nothing reached the origin");
}

/// An h2c listener in front of `servers`, with `rest` added to the config.
fn h2c(servers: &[String], rest: &str) -> Config {
    crate::support::http2::h2_config("h2c = true", servers, "", rest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_http2_client_does_not_hold_an_http1_upstream_connection() {
    use crate::support::http2::{read_all, H2Client};
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c(&[origin.addr().to_string()], "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    // The stream's window (64 KiB) is all holdfast may send until the client reads.
    let response = client.start_get(&format!("/bytes/{LARGE}")).await;
    assert_eq!(response.status(), 200);
    wait_until("the upstream connection is back in the pool", DEADLINE, || proxy.pool().idle == 1)
        .await;
    let other = H2Client::connect(proxy.addr()).await.get("/bytes/100").await;
    assert_eq!(other.status, 200);
    assert_eq!(origin.accepted(), 1, "the released connection served the other client");
    let mut body = response.into_body();
    let bytes = within("the stalled client reads it all", read_all(&mut body)).await;
    assert_eq!(bytes.expect("the whole body").len(), LARGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_does_not_hold_an_http2_origins_stream() {
    use crate::support::http2::{read_all, H2Client, H2Origin};
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c(&[format!("h2c://{}", origin.addr())], "")).await;
    // An HTTP/2 client that grants no window: the origin still sends its whole response
    // (holdfast takes it, and gives the origin its window back).
    let client = H2Client::connect(proxy.addr()).await;
    let response = client.start_get(&format!("/bytes/{LARGE}")).await;
    wait_until("the origin sent its whole response", DEADLINE, || origin.answered() == 1).await;
    let bytes = within("the client reads it all", read_all(&mut response.into_body())).await;
    assert_eq!(bytes.expect("the whole body").len(), LARGE);
    // An HTTP/1.1 client that reads nothing, the same.
    let mut slow = reluctant_client(proxy.addr()).await;
    get(&mut slow, &format!("/bytes/{LARGE}")).await;
    wait_until("the origin sent its second response", DEADLINE, || origin.answered() == 2).await;
    let (status, got) = within("the slow client reads it all", read_response(&mut slow)).await;
    assert_eq!((status, got), (200, LARGE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_takes_nothing_of_a_held_response_loses_the_stream() {
    use crate::support::http2::{read_all, H2Client};
    let origin = Origin::start().await;
    let timeouts = "[timeouts]\nclient_buffered = \"1s\"\n";
    let proxy = Proxy::start(h2c(&[origin.addr().to_string()], timeouts)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let response = client.start_get(&format!("/bytes/{LARGE}")).await;
    wait_until("the upstream connection is back in the pool", DEADLINE, || proxy.pool().idle == 1)
        .await;
    // Its second of grace passes with no window granted: the stream is reset.
    let metrics =
        || async { proxy.metrics().await.count("holdfast_spool_bytes", &[("kept", "file")]) };
    within("the held response is given up", async {
        // Bounded by `within`; each round scrapes once.
        while metrics().await > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let read = within("the stream ends", read_all(&mut response.into_body())).await;
    match read {
        Err(e) => assert_eq!(e.reason(), Some(h2::Reason::CANCEL), "{e}"),
        Ok(bytes) => panic!("the whole response arrived ({} bytes)", bytes.len()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_clients_buffered_upload_reaches_the_origin_only_once_it_is_whole() {
    use crate::support::http2::{read_all, H2Client};
    let origin = Origin::start().await;
    let route = "[[route]]\npath = \"/\"\nupstream = \"app\"\nbuffer_requests = true\n";
    let proxy = Proxy::start(h2c(&[origin.addr().to_string()], route)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let (response, mut body) = client.start_post("/upload").await;
    body.send_data(bytes::Bytes::from(vec![b'u'; 100_000]), false).expect("first part");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(origin.accepted(), 0, "no upstream connection while the upload is slow");
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-check", http::HeaderValue::from_static("1"));
    body.send_data(bytes::Bytes::from(vec![b'u'; 20_000]), false).expect("second part");
    body.send_trailers(trailers).expect("trailers");
    let response = within("the response", response).await.expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-received-bytes"], "120000");
    assert_eq!(response.headers()["x-received-trailers"], "x-check");
    let _ = read_all(&mut response.into_body()).await;
    assert_eq!(origin.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_slowly_keeps_its_held_response() {
    // Its socket turns writable only when a third of holdfast's send buffer is free,
    // seconds apart at this pace: the tries between (`backlog::PROGRESS_TICK`) see it
    // take bytes, so its short head start (4 s here) does not run out.
    let origin = Origin::start().await;
    let timeouts = "[timeouts]\nclient_buffered = \"4s\"\n";
    let proxy = Proxy::start(config(timeouts, &origin)).await;
    let mut slow = reluctant_client(proxy.addr()).await;
    get(&mut slow, &format!("/bytes/{LARGE}")).await;
    wait_until("the upstream connection is back in the pool", DEADLINE, || proxy.pool().idle == 1)
        .await;
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 4096];
    // Bounded: 16 reads, half a second apart.
    for _ in 0..16 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n = within("a slow read", slow.read(&mut chunk)).await.expect("the response");
        assert!(n > 0, "the connection was cut off");
        got.extend_from_slice(&chunk[..n]);
    }
    let head = got.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    let mut body = got.len() - head;
    let mut buf = vec![0u8; 256 * 1024];
    within("the rest", async {
        // Bounded by the length announced.
        while body < LARGE {
            let n = slow.read(&mut buf).await.expect("the rest");
            assert!(n > 0, "cut off after {body} of {LARGE} body bytes");
            body += n;
        }
    })
    .await;
    assert_eq!(body, LARGE);
}
