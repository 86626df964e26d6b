//! Stopping holdfast: requests in flight finish, idle upstream connections are closed.

use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use crate::support::{
    config_for, wait_refused, wait_until, within, ChildProxy, HttpClient, Origin, Proxy, RawClient,
    RawError, TempDir, DEADLINE,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_request_in_flight_finish() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let addr = proxy.addr();
    let mut client = proxy.client().await;
    let request = tokio::spawn(async move { client.get("/hold/it").await });
    wait_until("the origin has the request", DEADLINE, || origin.request_count() == 1).await;
    let shutdown = tokio::spawn(proxy.shutdown(Duration::from_secs(5)));
    // Shutting down (no more clients), with the request still held at the origin.
    wait_refused(addr, DEADLINE).await;
    assert!(!request.is_finished() && !shutdown.is_finished());
    origin.release("it");
    let reply = within("the request in flight", request).await.expect("request task");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text(), "held\n");
    within("shutdown", shutdown).await.expect("shutdown task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_upstream_connections() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    // Long enough that only shutdown can close the connection within the test.
    config.upstreams[0].pool.idle_timeout = Duration::from_secs(60);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/").await.status, StatusCode::OK);
    drop(client);
    wait_until("the upstream connection is idle", DEADLINE, || proxy.pool().idle == 1).await;
    proxy.shutdown(Duration::from_secs(2)).await;
    wait_until("the origin sees its connection closed", Duration::from_secs(5), || {
        origin.closed() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_clients() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let addr = proxy.addr();
    proxy.shutdown(Duration::from_secs(1)).await;
    let refused = within("connect after shutdown", tokio::net::TcpStream::connect(addr)).await;
    assert!(refused.is_err(), "holdfast still accepts after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_request_in_flight_closes_upstream_and_exits_0() {
    // Through the real binary: the signal handling lives in the CLI.
    let origin = Origin::start().await;
    let mut proxy = ChildProxy::quick(origin.addr()).await;
    // Two requests at once (both held at the origin until both are there) open two
    // upstream connections; afterwards one carries the request in flight and the other
    // stays idle in the pool.
    let mut a = HttpClient::connect(proxy.addr()).await;
    let mut b = HttpClient::connect(proxy.addr()).await;
    let both_there = async {
        wait_until("both requests reach the origin", DEADLINE, || origin.request_count() == 2)
            .await;
        origin.release("first");
    };
    let (ra, rb, ()) = tokio::join!(a.get("/hold/first?a"), b.get("/hold/first?b"), both_there);
    assert_eq!((ra.status, rb.status), (StatusCode::OK, StatusCode::OK));
    assert_eq!(origin.accepted(), 2);
    // Held at the origin until the test lets it go: in flight for as long as needed.
    let request = tokio::spawn(async move { a.get("/hold/last").await });
    wait_until("the origin has the held request", DEADLINE, || origin.request_count() == 3).await;

    proxy.terminate();
    // The listener closes while the request is still in flight, and holdfast waits.
    wait_refused(proxy.addr(), DEADLINE).await;
    assert!(!request.is_finished(), "the request in flight was cut off");
    assert!(proxy.try_exit().is_none(), "exited with a request in flight: {}", proxy.stderr());
    origin.release("last");
    let reply = within("the request in flight", request).await.expect("request task");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text(), "held\n");
    // Within the 30 s default drain: it only waited for the one request.
    let status = proxy.wait_exit(DEADLINE).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.stderr());
    wait_until("the origin sees both connections closed", DEADLINE, || origin.closed() == 2).await;
    assert_eq!(origin.accepted(), 2);
    assert!(proxy.stderr().contains("unfinished=0"), "{}", proxy.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_timeout_bounds_the_wait_for_a_slow_request() {
    let origin = Origin::start().await;
    let upstream = origin.addr();
    let dir = TempDir::new("drain");
    let mut proxy = ChildProxy::launch(|listen| {
        let path = dir.write(
            "holdfast.toml",
            &format!(
                "threads = 2\n\n[[listener]]\naddress = \"{listen}\"\nupstream = \"app\"\n\n\
                 [upstream.app]\nservers = [\"{upstream}\"]\n\n\
                 [timeouts]\ndrain = \"1s\"\n"
            ),
        );
        vec!["--config".to_string(), path.display().to_string()]
    })
    .await;
    let mut client = RawClient::connect(proxy.addr()).await;
    // Held at the origin for the whole test: only the drain timeout can end the wait.
    client.send("GET /hold/forever HTTP/1.1\r\nHost: a\r\n\r\n").await;
    wait_until("the origin has the held request", DEADLINE, || origin.request_count() == 1).await;

    let signalled = Instant::now();
    proxy.terminate();
    // It exits although the request never ends...
    let status = proxy.wait_exit(DEADLINE).await;
    let waited = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "{}", proxy.stderr());
    // ...and not before the drain timeout (a lower bound: holdfast starts counting only
    // once it has the signal).
    assert!(waited >= Duration::from_millis(900), "exited after {waited:?}");
    assert!(proxy.stderr().contains("unfinished=1"), "{}", proxy.stderr());
    // The request still in flight is cut off when the process exits.
    match client.try_response(false).await {
        Err(RawError::Closed { partial }) => assert!(partial.is_empty(), "{partial:?}"),
        other => panic!("expected the connection closed without a response, got {other:?}"),
    }
}
