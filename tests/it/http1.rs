//! HTTP/1.x protocol details: HTTP/1.0 clients, pipelining, bodiless responses, Expect,
//! CONNECT, and how long an idle client connection is kept.

use std::time::Duration;

use http::{Method, Version};

use crate::support::{config_for, within_for, Fnv, Origin, Proxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_clients_without_host_are_answered_over_one_upstream_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    for i in 0..2 {
        let mut client = proxy.raw().await;
        client.send(format!("GET /ten/{i} HTTP/1.0\r\n\r\n")).await;
        let resp = client.response().await;
        assert_eq!(resp.status, 200, "request {i}");
        assert_eq!(resp.header("x-path"), Some(format!("/ten/{i}").as_str()));
        // HTTP/1.0 without keep-alive: one request per client connection.
        client.expect_closed().await;
    }
    assert_eq!(origin.accepted(), 1);
    // Upstream, the request is HTTP/1.1 with a Host, which is what lets it be reused.
    for req in origin.requests() {
        assert_eq!(req.version, Version::HTTP_11);
        assert_eq!(req.header("host"), Some(origin.addr().to_string().as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_client_asking_for_keep_alive_gets_it() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    for i in 0..3 {
        client.send(format!("GET /ka/{i} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")).await;
        let resp = client.response().await;
        assert_eq!(resp.status, 200, "request {i}");
        assert_eq!(resp.header("x-path"), Some(format!("/ka/{i}").as_str()));
        assert!(
            resp.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("keep-alive")),
            "response {i} headers: {:?}",
            resp.headers
        );
    }
    assert_eq!(origin.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    // The slowest first: a proxy answering in completion order would reorder them.
    client
        .send(
            "GET /slow/200 HTTP/1.1\r\nHost: a\r\n\r\n\
             GET /bytes/3 HTTP/1.1\r\nHost: a\r\n\r\n\
             GET /third HTTP/1.1\r\nHost: a\r\n\r\n",
        )
        .await;
    let first = client.response().await;
    let second = client.response().await;
    let third = client.response().await;
    assert_eq!(
        [first.header("x-path"), second.header("x-path"), third.header("x-path")],
        [Some("/slow/200"), Some("/bytes/3"), Some("/third")]
    );
    assert_eq!((first.body_text().as_str(), &second.body[..]), ("slow\n", &b"xxx"[..]));
    assert_eq!(origin.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_204_and_304_responses_have_no_body_and_keep_the_upstream_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client.send("HEAD /bytes/100 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let head = client.head_response().await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("100"));
    client.send("GET /status/204 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 204);
    client.send("GET /status/304 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 304);
    // Had any of them carried body bytes, this response would not parse or would
    // come with the wrong body.
    client.send("GET /bytes/5 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let last = client.response().await;
    assert_eq!((last.status, &last.body[..]), (200, &b"xxxxx"[..]));
    assert_eq!(origin.accepted(), 1);
    assert_eq!(origin.requests()[0].method, Method::HEAD);
    let pool = proxy.pool();
    assert_eq!((pool.opened, pool.reused), (1, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_gets_the_interim_response_before_the_body_is_sent() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client
        .send(
            "POST /expect HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\
             Expect: 100-continue\r\n\r\n",
        )
        .await;
    // No body has been sent: only the interim response can arrive now.
    let interim = client.response().await;
    assert_eq!(interim.status, 100);
    client.send("hello world").await;
    let last = client.response().await;
    assert_eq!(last.status, 200);
    assert_eq!(last.header("x-received-bytes"), Some("11"));
    assert_eq!(last.header("x-received-fnv"), Some(Fnv::of(b"hello world").as_str()));
    assert_eq!(origin.completed(), ["/expect"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_target_reaches_the_origin_in_origin_form() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client.send("GET http://example.test/abs?q=1 HTTP/1.1\r\nHost: example.test\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 200);
    let got = &origin.requests()[0];
    assert_eq!(got.uri.to_string(), "/abs?q=1");
    assert_eq!(got.header("host"), Some("example.test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_is_refused_with_405_and_never_reaches_the_origin() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client.send("CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n").await;
    let resp = client.response_then_close().await.expect("a response before the close");
    assert_eq!(resp.status, 405);
    assert_eq!(origin.accepted(), 0);
}

/// Reads until the peer closes; what came before the close.
async fn until_closed(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    // Bounded by the caller's deadline.
    loop {
        let mut buf = [0u8; 1024];
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_are_closed_each_at_its_own_header_deadline_and_a_late_speaker_is_served() {
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.timeouts.client_header = Duration::from_millis(400);
    let proxy = Proxy::start(config).await;
    let first_at = tokio::time::Instant::now();
    let mut first = TcpStream::connect(proxy.addr()).await.expect("connect");
    let mut speaker = TcpStream::connect(proxy.addr()).await.expect("connect");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let second_at = tokio::time::Instant::now();
    let mut second = TcpStream::connect(proxy.addr()).await.expect("connect");
    // Silent for most of its time, then a whole request: served.
    speaker.write_all(b"GET /late HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
    let answer =
        within_for("the late speaker's answer", Duration::from_secs(5), until_closed(&mut speaker))
            .await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));

    let got = within_for(
        "the first silent client is closed",
        Duration::from_secs(5),
        until_closed(&mut first),
    )
    .await;
    let first_closed = first_at.elapsed();
    assert!(got.is_empty(), "a client that sent nothing gets nothing: {got:?}");
    assert!(first_closed >= Duration::from_millis(400), "closed after {first_closed:?}");
    // The second connection's deadline is its own accept's, not the round that closed
    // the first: it is still open now.
    let got = within_for(
        "the second silent client is closed",
        Duration::from_secs(5),
        until_closed(&mut second),
    )
    .await;
    let second_closed = second_at.elapsed();
    assert!(got.is_empty());
    assert!(second_closed >= Duration::from_millis(400), "closed after {second_closed:?}");
    assert_eq!(origin.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_idle_long_enough_to_park_is_served_again_then_closed_at_its_idle_timeout() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.timeouts.client_idle = Duration::from_millis(2500);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client.send("GET /one HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    // Idle past the second after which a connection parks: it gives back its state
    // for reading requests and builds it again for this one.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    client.send("GET /two HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-path"), Some("/two"));
    // Parked again, twice over, with a pipelined pair in between.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    client
        .send("GET /three HTTP/1.1\r\nHost: a\r\n\r\nGET /four HTTP/1.1\r\nHost: a\r\n\r\n")
        .await;
    assert_eq!(client.response().await.header("x-path"), Some("/three"));
    assert_eq!(client.response().await.header("x-path"), Some("/four"));
    let started = tokio::time::Instant::now();
    // Parked, it has no timer of its own: the listener closes it at `client_idle`.
    within_for("the parked connection closes", Duration::from_secs(8), client.expect_closed())
        .await;
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(2400), "closed after {waited:?}");
    assert_eq!(origin.request_count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_outlives_the_header_timeout_and_closes_after_the_idle_timeout() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.timeouts.client_header = Duration::from_millis(200);
    config.timeouts.client_idle = Duration::from_millis(1500);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client.send("GET /one HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    // Idle for longer than the header timeout: the connection is still there.
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Taken before the request, so before holdfast's idle wait starts: the wait measured
    // from here is at least the idle timeout, however late this task sees the response.
    let started = tokio::time::Instant::now();
    client.send("GET /two HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    // Idle for longer than the idle timeout: closed, without a response.
    client.expect_closed().await;
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1500), "closed after {waited:?}");
}
