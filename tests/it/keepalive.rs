//! Upstream connection reuse: the reason holdfast exists.

use std::time::Duration;

use holdfast_pool::CloseReason;
use http::StatusCode;

use crate::support::{
    config_for, config_to, wait_until, within, Origin, OriginOptions, Proxy, RawOrigin, DEADLINE,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_sequential_requests_use_one_upstream_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.client().await;
    for i in 0..10_000 {
        let reply = client.get(&format!("/seq/{i}")).await;
        assert_eq!(reply.status, StatusCode::OK, "request {i}");
    }
    assert_eq!(origin.accepted(), 1);
    assert_eq!(origin.request_count(), 10_000);
    let pool = proxy.pool();
    assert_eq!((pool.opened, pool.reused), (1, 9_999));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_keepalive_clients_need_at_most_one_upstream_connection_each() {
    const CLIENTS: usize = 64;
    const REQUESTS: usize = 200;
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    // On a loaded machine some connection may sit idle for seconds; this test is about
    // reuse, not about the idle timeout.
    config.upstreams[0].pool.idle_timeout = Duration::from_secs(60);
    let proxy = Proxy::start(config).await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let mut client = proxy.client().await;
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for i in 0..REQUESTS {
                if client.get(&format!("/c{c}/{i}")).await.status == StatusCode::OK {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for task in tasks {
        ok += within("a client's requests", task).await.expect("client task");
    }
    assert_eq!(ok, CLIENTS * REQUESTS);
    assert_eq!(origin.request_count(), CLIENTS * REQUESTS);
    let accepted = origin.accepted();
    assert!((1..=CLIENTS).contains(&accepted), "origin accepted {accepted} connections");
    // Every connection went back to the pool: none leaked as active.
    wait_until("every upstream connection is idle", DEADLINE, || proxy.pool().active == 0).await;
    let pool = proxy.pool();
    assert_eq!(pool.opened, accepted as u64);
    // Each connection is idle, unless it was beyond the peak of requests in flight at
    // once: then it was closed as surplus. Nothing else closed any.
    assert_eq!(pool.idle + pool.closed(CloseReason::AboveDemand), accepted as u64);
    assert_eq!(pool.closed_total(), pool.closed(CloseReason::AboveDemand));
    assert!(pool.idle <= CLIENTS as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sending_connection_close_still_reuse_the_upstream_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    for i in 0..200 {
        let mut client = proxy.raw().await;
        client
            .send(format!("GET /close-client/{i} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
            .await;
        let resp = client.response().await;
        assert_eq!(resp.status, 200, "request {i}");
        // The client asked for close, so holdfast closes the client connection...
        client.expect_closed().await;
    }
    // ...but not the upstream one.
    assert_eq!(origin.accepted(), 1);
    assert_eq!(origin.closed(), 0);
    assert!(origin.requests().iter().all(|r| r.header("connection").is_none()));
    let pool = proxy.pool();
    assert_eq!((pool.opened, pool.reused), (1, 199));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_connection_close_response_retires_the_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.client().await;
    let reply = client.get("/close").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text(), "bye\n");
    assert_eq!(client.get("/after").await.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 2);
    wait_until("the origin sees the first connection closed", DEADLINE, || origin.closed() == 1)
        .await;
    assert_eq!(proxy.pool().closed(CloseReason::OriginClosed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_the_origin_closed_while_idle_is_replaced_without_an_error() {
    let origin = Origin::start_with(OriginOptions {
        idle_close: Some(Duration::from_millis(100)),
        ..OriginOptions::default()
    })
    .await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/first").await.status, StatusCode::OK);
    wait_until("the origin closes the idle connection", DEADLINE, || origin.closed() == 1).await;
    let reply = client.get("/second").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(origin.accepted(), 2);
    assert_eq!(origin.paths(), ["/first", "/second"]);
    assert_eq!(proxy.pool().closed(CloseReason::OriginClosed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_leaving_mid_response_does_not_leave_its_remainder_on_a_pooled_connection() {
    let origin = Origin::start().await;
    // Streamed (response buffering off): the remainder is the connection's still when the
    // client leaves. (Buffered, holdfast reads it all and pools the connection clean:
    // `buffering::a_slow_reader_does_not_hold_the_upstream_connection`.)
    let mut config = config_for(&origin);
    config.buffering.responses = false;
    let proxy = Proxy::start(config).await;
    let mut leaver = proxy.raw().await;
    leaver.send("GET /bytes/20000000 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    // The first bytes prove the response started; then the client goes away.
    let start = leaver.read_exact(12).await;
    assert_eq!(start, b"HTTP/1.1 200");
    drop(leaver);
    wait_until("the abandoned upstream connection is closed", DEADLINE, || {
        proxy.pool().closed(CloseReason::Error) == 1
    })
    .await;
    let mut client = proxy.client().await;
    let reply = client.get("/bytes/5").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(&reply.body[..], b"xxxxx");
    assert_eq!(origin.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_leaving_with_a_small_remainder_unread_keeps_the_upstream_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut leaver = proxy.raw().await;
    // 8 KiB: the first half now, the rest 300 ms later, long after the client left.
    leaver.send("GET /trickle/8192/300 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let start = leaver.read_exact(12).await;
    assert_eq!(start, b"HTTP/1.1 200");
    drop(leaver);
    // holdfast reads the remainder itself and pools the connection again.
    wait_until("the drained connection is back in the pool", DEADLINE, || proxy.pool().idle == 1)
        .await;
    let mut client = proxy.client().await;
    let reply = client.get("/bytes/5").await;
    assert_eq!(&reply.body[..], b"xxxxx");
    assert_eq!(origin.accepted(), 1);
    assert_eq!(proxy.pool().closed_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connection_that_received_stray_bytes_is_not_reused() {
    // Every response is followed, once the connection idles, by bytes no request asked for.
    let later = Some((Duration::from_millis(50), &b"STRAY"[..]));
    let response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let origin = RawOrigin::start_with_later(response, later).await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/first").await.status, StatusCode::OK);
    wait_until("the pool drops the connection with stray bytes", DEADLINE, || {
        proxy.pool().closed(CloseReason::OriginClosed) == 1
    })
    .await;
    let reply = client.get("/second").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(origin.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_followed_by_stray_bytes_is_not_reused() {
    // The stray bytes arrive with the response, in the same read.
    let origin = RawOrigin::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokSTRAY").await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.client().await;
    let first = client.get("/first").await;
    assert_eq!((first.status, first.text().as_str()), (StatusCode::OK, "ok"));
    let reply = client.get("/second").await;
    assert_eq!((reply.status, reply.text().as_str()), (StatusCode::OK, "ok"));
    assert_eq!(origin.accepted(), 2);
    wait_until("both connections are closed as not fit for reuse", DEADLINE, || {
        proxy.pool().closed(CloseReason::Error) == 2
    })
    .await;
}
