//! Pool limits that retire upstream connections: idle timeout and requests per connection.

use std::time::Duration;

use holdfast_pool::CloseReason;
use http::StatusCode;

use crate::support::{config_for, wait_until, Origin, Proxy, DEADLINE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_closes_an_idle_upstream_connection() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.upstreams[0].pool.idle_timeout = Duration::from_millis(200);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/first").await.status, StatusCode::OK);
    // No request comes to notice: the background eviction has to close it.
    wait_until("the origin sees the idle connection closed", DEADLINE, || origin.closed() == 1)
        .await;
    assert_eq!(client.get("/second").await.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 2);
    let pool = proxy.pool();
    assert_eq!(pool.closed(CloseReason::IdleTimeout), 1);
    assert_eq!(pool.closed_total(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_requests_retires_a_connection_after_its_quota() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.upstreams[0].pool.max_requests = 5;
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    for i in 0..20 {
        assert_eq!(client.get(&format!("/quota/{i}")).await.status, StatusCode::OK);
    }
    // 20 requests, 5 per connection: 4 connections, each retired after its fifth, the
    // last one included (it is spent, so it is not kept idle).
    assert_eq!(origin.accepted(), 4);
    wait_until("the origin sees all 4 connections closed", DEADLINE, || origin.closed() == 4).await;
    let pool = proxy.pool();
    assert_eq!((pool.opened, pool.reused, pool.idle, pool.active), (4, 16, 0, 0));
    assert_eq!(pool.closed(CloseReason::MaxRequests), 4);
    assert_eq!(pool.closed_total(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_lifetime_retires_an_idle_connection_that_has_lived_too_long() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.upstreams[0].pool.max_lifetime = Duration::from_millis(200);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/first").await.status, StatusCode::OK);
    wait_until("the origin sees the old connection closed", DEADLINE, || origin.closed() == 1)
        .await;
    assert_eq!(client.get("/second").await.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 2);
    let pool = proxy.pool();
    assert_eq!(pool.closed(CloseReason::MaxLifetime), 1);
    assert_eq!(pool.closed_total(), 1);
}
