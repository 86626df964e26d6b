//! What a client gets when the upstream side fails: 502 and 504 that name the backend, and
//! a cut response when the body stalls.

use std::net::SocketAddr;
use std::time::Duration;

use holdfast_pool::CloseReason;
use http::StatusCode;
use tokio::net::TcpStream;

use crate::support::{
    config_for, config_to, within_for, ClosedPort, Origin, Proxy, RawClient, RawError, RawOrigin,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_refusing_connections_gives_502_naming_it() {
    // A port held bound and not listening refuses connections.
    let port = ClosedPort::new();
    let gone = port.addr();
    let proxy = Proxy::start(config_to(gone)).await;
    let mut client = proxy.client().await;
    let reply = client.get("/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let text = reply.text();
    assert!(text.contains(&gone.to_string()), "body: {text}");
    assert!(text.contains("refused"), "body: {text}");
    // The client connection stays usable after a 502.
    assert_eq!(client.get("/").await.status, StatusCode::BAD_GATEWAY);
    assert_eq!(proxy.pool().opened, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_response_head_gives_504_naming_the_backend() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.timeouts.response_header = Duration::from_millis(300);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    let reply = client.get("/slow/3000").await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT);
    let text = reply.text();
    assert!(text.contains(&origin.addr().to_string()), "body: {text}");
    // The connection still carries the unanswered request: it must not be reused.
    assert_eq!(proxy.pool().closed(CloseReason::Error), 1);
    assert_eq!(client.get("/fast").await.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_still_moving_is_not_cut_by_the_response_header_timeout() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.timeouts.response_header = Duration::from_millis(500);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client
        .send("POST /slow-upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await;
    // A slow client: twenty chunks over about a second (twice the timeout), each gap a
    // tenth of it.
    for _ in 0..20 {
        client.send("4\r\nabcd\r\n").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.send("0\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 200, "{}", resp.body_text());
    assert_eq!(resp.header("x-received-bytes"), Some("80"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_that_stops_moving_gets_408_after_the_client_body_head_start() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.timeouts.client_body = Duration::from_millis(300);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client
        .send("POST /stalled-upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabcd")
        .await;
    // 96 bytes never come: the client's fault, so 408 rather than a gateway error.
    let resp = within_for("the 408", Duration::from_secs(3), client.response()).await;
    assert_eq!(resp.status, 408, "{}", resp.body_text());
    assert!(origin.completed().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_response_body_is_cut_after_the_read_timeout() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.timeouts.read = Duration::from_millis(300);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    // Half the body now, the rest after 5 s: far past the read timeout.
    client.send("GET /trickle/8192/5000 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let cut = within_for("the stalled response is cut", Duration::from_secs(3), async {
        client.try_response(false).await
    })
    .await;
    match cut {
        // The head and the first half arrived; then the connection was closed.
        Err(RawError::Closed { partial }) => assert_eq!(partial.len(), 4096),
        other => panic!("expected the connection closed mid-body, got {other:?}"),
    }
    assert_eq!(proxy.pool().closed(CloseReason::Error), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_upstream_response_gives_502() {
    let origin = RawOrigin::start(b"this is not http\r\n\r\n").await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.client().await;
    let reply = client.get("/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert!(reply.text().contains(&origin.addr().to_string()), "body: {}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_gives_504_naming_the_backend() {
    // A listener that never accepts, with the smallest backlog: once its queue is full,
    // the kernel drops further SYNs and connects to it hang.
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("bind");
    socket.listen(0).expect("listen");
    let addr = socket.local_addr().expect("addr").as_socket().expect("inet addr");
    let mut fillers = Vec::new();
    // Bounded: a backlog of 0 holds one or two connections.
    for _ in 0..8 {
        match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => fillers.push(stream),
            Ok(Err(e)) => panic!("filling the backlog: {e}"),
            Err(_) => break,
        }
    }
    let mut config = config_to(addr);
    config.timeouts.connect = Duration::from_millis(300);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    let reply = client.get("/").await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{}", reply.text());
    let text = reply.text();
    assert!(text.contains(&addr.to_string()), "body: {text}");
    assert!(text.contains("timed out"), "body: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_with_both_content_length_and_transfer_encoding_gives_502() {
    let origin = RawOrigin::start(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.raw().await;
    client.send("GET /ambiguous HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 502);
    assert!(
        resp.body_text().contains("both Content-Length and Transfer-Encoding"),
        "{}",
        resp.body_text()
    );
}

/// An origin that refuses every upload on its head alone (413) and never reads the
/// body, behind holdfast, and a client that has announced ten megabytes and sent a few
/// bytes of them: only the early answer can end its request. The origin and proxy are
/// returned to live as long as the client.
async fn upload_refused_early() -> (RawOrigin, Proxy, RawClient) {
    let origin = RawOrigin::start(
        b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbig!",
    )
    .await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.raw().await;
    client.send("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 10485760\r\n\r\nsome").await;
    (origin, proxy, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_response_to_an_upload_reaches_the_client_and_then_closes_its_connection() {
    let (_origin, _proxy, mut client) = upload_refused_early().await;
    let resp = client.response_then_close().await.expect("the origin's answer");
    assert_eq!((resp.status, resp.body_text().as_str()), (413, "big!"));
    assert_eq!(resp.header("connection"), Some("close"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_answer_survives_a_client_that_keeps_sending_its_body() {
    let (_origin, _proxy, mut client) = upload_refused_early().await;
    // The answer has come back and holdfast is done sending; the client, not reading yet,
    // goes on sending. Had holdfast closed at once, these bytes would meet a reset, and
    // the reset would destroy the answer before the client read it.
    client.wait_peer_shutdown().await;
    for _ in 0..4 {
        client.send(vec![b'x'; 16 * 1024]).await;
    }
    let resp = client.response_then_close().await.expect("the origin's answer");
    assert_eq!((resp.status, resp.body_text().as_str()), (413, "big!"));
}
