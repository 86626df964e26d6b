//! Upstream connections bounded by need: the idle bound under closing clients, the
//! per-backend connection limit with its wait queue, and limits the origin advertises.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::CloseReason;
use http::StatusCode;

use crate::support::{config_for, wait_until, within_for, Origin, Proxy, RawClient, DEADLINE};

/// Established TCP connections to `port` on this host, as `ss` counts them.
fn established_to(port: u16) -> usize {
    let out = Command::new("ss")
        .args(["-Htan", "state", "established", &format!("( dport = :{port} )")])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

async fn closing_request(proxy: std::net::SocketAddr, path: &str) -> u16 {
    let mut client = RawClient::connect(proxy).await;
    client.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")).await;
    client.response().await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_clients_at_concurrency_32_keep_upstream_connections_bounded() {
    // #4 (the HAProxy lesson): clients that close every connection must not pile up
    // upstream connections.
    const CONCURRENCY: usize = 32;
    const PER_CLIENT: usize = 100;
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let peak_established = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let peak = Arc::clone(&peak_established);
        let port = origin.addr().port();
        // Runs on the blocking pool, so sleeping between samples blocks no runtime worker.
        #[allow(clippy::disallowed_methods)]
        let sample = move || {
            for _ in 0..40 {
                peak.fetch_max(established_to(port), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(25));
            }
        };
        tokio::task::spawn_blocking(sample)
    };
    let addr = proxy.addr();
    let clients: Vec<_> = (0..CONCURRENCY)
        .map(|c| {
            tokio::spawn(async move {
                let mut ok = 0;
                for i in 0..PER_CLIENT {
                    ok += usize::from(closing_request(addr, &format!("/c{c}/{i}")).await == 200);
                }
                ok
            })
        })
        .collect();
    let mut ok = 0;
    for c in clients {
        ok += within_for("closing clients", Duration::from_secs(60), c).await.unwrap();
    }
    sampler.await.unwrap();
    assert_eq!(ok, CONCURRENCY * PER_CLIENT);
    // "At most about the concurrency": on a loaded machine a connection is now and then
    // retired and replaced, so allow a quarter more, still far from one per request.
    const ABOUT: usize = CONCURRENCY + CONCURRENCY / 4;
    let accepted = origin.accepted();
    assert!(accepted <= ABOUT, "origin accepted {accepted} connections");
    let seen = peak_established.load(Ordering::SeqCst);
    // Both ends of each upstream connection live on this host; ss shows the
    // holdfast side (destination port = the origin's).
    assert!((1..=ABOUT).contains(&seen), "ss saw {seen} upstream connections");
    assert!(established_to(origin.addr().port()) <= ABOUT);
    assert!(proxy.pool().idle <= CONCURRENCY as u64);
}

fn limited_config(origin: &Origin, queue_size: usize, queue_timeout_ms: u64) -> holdfast::Config {
    let mut config = config_for(origin);
    let pool = &mut config.upstreams[0].pool;
    pool.max_connections = 2;
    pool.queue_size = queue_size;
    pool.queue_timeout = Duration::from_millis(queue_timeout_ms);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_max_connections_wait_and_then_succeed() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(limited_config(&origin, 16, 5_000)).await;
    let addr = proxy.addr();
    let requests: Vec<_> = (0..6)
        .map(|i| {
            tokio::spawn(async move { closing_request(addr, &format!("/slow/200?n={i}")).await })
        })
        .collect();
    for r in requests {
        assert_eq!(within_for("a queued request", DEADLINE, r).await.unwrap(), 200);
    }
    // Six slow requests, two connections: the other four waited for one.
    assert_eq!(origin.accepted(), 2);
    let pool = proxy.pool();
    assert_eq!((pool.opened, pool.waiting, pool.queue_full, pool.queue_timeouts), (2, 0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_and_queue_timeout_answer_503_not_a_connect_error() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(limited_config(&origin, 1, 300)).await;
    let addr = proxy.addr();
    // Two requests hold both connections for 2 s; a third waits in the queue.
    let busy: Vec<_> = (0..2)
        .map(|i| {
            tokio::spawn(async move { closing_request(addr, &format!("/slow/2000?b={i}")).await })
        })
        .collect();
    wait_until("both connections are busy", DEADLINE, || proxy.pool().active == 2).await;
    let queued = tokio::spawn(async move {
        let mut client = RawClient::connect(addr).await;
        client.send("GET /queued HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await;
        client.response().await
    });
    wait_until("a request is queued", DEADLINE, || proxy.pool().waiting == 1).await;
    // The queue holds one: the next is refused at once.
    let mut refused = RawClient::connect(addr).await;
    refused.send("GET /refused HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await;
    let refused = refused.response().await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE.as_u16());
    assert!(refused.body_text().contains("already queued"), "{}", refused.body_text());
    assert!(refused.body_text().contains(&origin.addr().to_string()), "{}", refused.body_text());
    // The queued one gives up after the queue timeout, long before the slow ones end.
    let timed_out = within_for("the queued request", DEADLINE, queued).await.unwrap();
    assert_eq!(timed_out.status, StatusCode::SERVICE_UNAVAILABLE.as_u16());
    assert!(timed_out.body_text().contains("stayed busy"), "{}", timed_out.body_text());
    for b in busy {
        assert_eq!(within_for("a slow request", DEADLINE, b).await.unwrap(), 200);
    }
    assert_eq!(origin.accepted(), 2);
    assert!(!origin.paths().iter().any(|p| p == "/queued" || p == "/refused"));
    let pool = proxy.pool();
    assert_eq!((pool.queue_full, pool.queue_timeouts, pool.waiting), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertised_keep_alive_timeout_retires_the_connection_before_the_origin_would() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    // holdfast's own limit is far longer; the origin's `timeout=1` must win.
    config.upstreams[0].pool.idle_timeout = Duration::from_secs(60);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    let started = tokio::time::Instant::now();
    assert_eq!(client.get("/keepalive/timeout=1").await.status, StatusCode::OK);
    wait_until("holdfast retires the connection", DEADLINE, || origin.closed() == 1).await;
    // Closed by holdfast, at 0.5 s plus one eviction tick, before the origin's 1 s.
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_eq!(proxy.pool().closed(CloseReason::IdleTimeout), 1);
    assert_eq!(client.get("/after").await.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertised_max_zero_closes_the_connection_after_the_response() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/keepalive/timeout=5,max=1").await.status, StatusCode::OK);
    assert_eq!(client.get("/keepalive/timeout=5,max=0").await.status, StatusCode::OK);
    wait_until("the spent connection is closed", DEADLINE, || origin.closed() == 1).await;
    assert_eq!(client.get("/next").await.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 2);
    assert_eq!(proxy.pool().closed(CloseReason::MaxRequests), 1);
}
