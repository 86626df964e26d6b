//! Stopping holdfast: requests in flight finish, idle upstream connections are closed.

use std::time::Duration;

use http::StatusCode;

use crate::support::{config_for, wait_until, within, Origin, Proxy, DEADLINE};

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
