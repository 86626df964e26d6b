//! Stopping holdfast: requests in flight finish, idle upstream connections are closed.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::support::{
    config_for, wait_until, within, ChildProxy, HttpClient, Origin, Proxy, RawClient, RawError,
    TempDir, DEADLINE,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_request_in_flight_finish() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.client().await;
    let request = tokio::spawn(async move { client.get("/slow/300").await });
    wait_until("the origin has the request", DEADLINE, || origin.request_count() == 1).await;
    proxy.shutdown(Duration::from_secs(5)).await;
    let reply = within("the request in flight", request).await.expect("request task");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text(), "slow\n");
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

/// Polls until a connect to `addr` is refused; panics if it still connects after
/// `deadline`.
async fn wait_refused(addr: SocketAddr, deadline: Duration) {
    let start = Instant::now();
    // Bounded by `deadline`; each round waits 10 ms.
    while TcpStream::connect(addr).await.is_ok() {
        assert!(start.elapsed() < deadline, "{addr} still accepts {deadline:?} after SIGTERM");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_request_in_flight_closes_upstream_and_exits_0() {
    // Through the real binary: the signal handling lives in the CLI.
    let origin = Origin::start().await;
    let mut proxy = ChildProxy::quick(origin.addr()).await;
    // Two requests at once open two upstream connections; afterwards one carries the
    // slow request and the other stays idle in the pool.
    let mut a = HttpClient::connect(proxy.addr()).await;
    let mut b = HttpClient::connect(proxy.addr()).await;
    let (ra, rb) = tokio::join!(a.get("/slow/100?a"), b.get("/slow/100?b"));
    assert_eq!((ra.status, rb.status), (StatusCode::OK, StatusCode::OK));
    assert_eq!(origin.accepted(), 2);
    let request = tokio::spawn(async move { a.get("/slow/2000").await });
    wait_until("the origin has the slow request", DEADLINE, || origin.request_count() == 3).await;

    proxy.terminate();
    wait_refused(proxy.addr(), Duration::from_millis(1500)).await;
    assert!(!request.is_finished(), "the listener closed only after the slow request ended");
    let reply = within("the request in flight", request).await.expect("request task");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text(), "slow\n");
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
    client.send("GET /slow/8000 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    wait_until("the origin has the slow request", DEADLINE, || origin.request_count() == 1).await;

    let signalled = Instant::now();
    proxy.terminate();
    let status = proxy.wait_exit(DEADLINE).await;
    let waited = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "{}", proxy.stderr());
    // It waited for the drain timeout, and not for the 8 s request.
    assert!(waited >= Duration::from_millis(900), "exited after {waited:?}");
    assert!(waited < Duration::from_secs(5), "exited after {waited:?}");
    assert!(proxy.stderr().contains("unfinished=1"), "{}", proxy.stderr());
    // The request still in flight is cut off when the process exits.
    match client.try_response(false).await {
        Err(RawError::Closed { partial }) => assert!(partial.is_empty(), "{partial:?}"),
        other => panic!("expected the connection closed without a response, got {other:?}"),
    }
}
