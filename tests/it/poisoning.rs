//! Origins that misframe responses or send bytes nobody asked for (a [`RawOrigin`]
//! sends what no library would): the client gets
//! framing holdfast wrote, and a pooled connection with unread bytes is never reused,
//! so one client's response never reaches another (response queue poisoning).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{
    config_to, group_config, wait_until, within_for, Proxy, RawAnswer, RawOrigin, DEADLINE,
};

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_response_after_a_real_one_never_reaches_the_next_request() {
    // 30 ms after each real response, a whole second response nobody asked for.
    let stray = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray";
    let origin = RawOrigin::start_with_later(OK, Some((Duration::from_millis(30), stray))).await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.raw().await;
    for i in 0..3 {
        client.send(format!("GET /{i} HTTP/1.1\r\nHost: a\r\n\r\n")).await;
        let resp = client.response().await;
        assert_eq!((resp.status, resp.body_text().as_str()), (200, "ok"), "request {i}");
        // The next request comes as soon as the stray bytes are there, long before any
        // idle timeout: the pooled connection is probed all the same.
        wait_until("the stray response is sent", DEADLINE, || origin.late() == i + 1).await;
    }
    assert_eq!(origin.accepted(), 3, "no connection with a stray response was reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_body_after_a_response_to_head_never_reaches_the_next_request() {
    // A response to HEAD has no body; this origin sends one anyway, 30 ms later, shaped
    // like a response.
    let origin = RawOrigin::scripted(|line| match line.starts_with("HEAD") {
        true => RawAnswer {
            later: Some((
                Duration::from_millis(30),
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON",
            )),
            ..RawAnswer::of(b"HTTP/1.1 200 OK\r\nContent-Length: 44\r\n\r\n")
        },
        false => RawAnswer::of(OK),
    })
    .await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.raw().await;
    client.send("HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let head = client.head_response().await;
    assert_eq!(head.header("content-length"), Some("44"));
    wait_until("the late body is sent", DEADLINE, || origin.late() == 1).await;
    client.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!((resp.status, resp.body_text().as_str()), (200, "ok"));
    assert_eq!(origin.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_connection_header_naming_content_length_does_not_strip_the_framing() {
    // Regression: the origin's `Connection: content-length` removed the response's framing while
    // the client connection stayed open.
    let origin = RawOrigin::start(
        b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 2\r\n\r\nok",
    )
    .await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.raw().await;
    for i in 0..2 {
        client.send(format!("GET /{i} HTTP/1.1\r\nHost: a\r\n\r\n")).await;
        let resp = client.response().await;
        assert_eq!(resp.header("content-length"), Some("2"), "{:?}", resp.headers);
        assert_eq!(resp.body_text(), "ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_content_response_loses_its_content_length() {
    // Regression: a 204 kept its Content-Length (RFC 9110, 8.6: a 204 must not have one).
    let origin = RawOrigin::start(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n").await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.raw().await;
    for i in 0..2 {
        client.send(format!("DELETE /{i} HTTP/1.1\r\nHost: a\r\n\r\n")).await;
        let resp = client.response().await;
        assert_eq!(resp.status, 204);
        assert_eq!(resp.header("content-length"), None, "{:?}", resp.headers);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_answered_with_101_does_not_pool_the_connection() {
    // Regression: a check returned its connection to the pool after a switch of protocols.
    let origin = RawOrigin::start(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n",
    )
    .await;
    let extra =
        "[upstream.app.health_check]\npath = \"/ws\"\ninterval = \"50ms\"\nexpect_status = 101\n";
    let proxy = Proxy::start(group_config(&[origin.addr()], extra)).await;
    wait_until("three checks, each on its own connection", DEADLINE, || origin.accepted() >= 3)
        .await;
    assert_eq!(proxy.pool().idle, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_hints_during_an_upload_do_not_stop_it() {
    // Regression: an upstream 103 during an upload stopped the upload until the response timeout.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hinted = Arc::new(AtomicBool::new(false));
    let hint_sent = Arc::clone(&hinted);
    let origin = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut chunk).await.unwrap();
            got.extend_from_slice(&chunk[..n]);
        }
        stream.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n").await.unwrap();
        hint_sent.store(true, Ordering::SeqCst);
        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let mut body = got.len() - head_end;
        while body < 100_000 {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "holdfast stopped the upload");
            body += n;
        }
        stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone").await.unwrap();
    });
    let mut config = config_to(addr);
    config.timeouts.response_header = Duration::from_secs(5);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client.send("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n").await;
    client.send(vec![b'x'; 1000]).await;
    wait_until("the origin sent its early hints", DEADLINE, || hinted.load(Ordering::SeqCst)).await;
    client.send(vec![b'x'; 99_000]).await;
    let resp = within_for("the final response", Duration::from_secs(3), client.response()).await;
    assert_eq!((resp.status, resp.body_text().as_str()), (200, "done"));
    origin.await.unwrap();
}
