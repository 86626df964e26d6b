//! Upstream connections bounded by need: the idle bound under closing clients, the
//! per-backend connection limit with its wait queue, and limits the origin advertises.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::CloseReason;
use http::StatusCode;
use tokio::task::JoinHandle;

use crate::support::client::RawResponse;
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
    // Regression (the HAProxy lesson): clients that closed every connection piled up
    // upstream connections, one per request.
    const CONCURRENCY: usize = 32;
    const PER_CLIENT: usize = 100;
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let peak_established = Arc::new(AtomicUsize::new(0));
    let load_done = Arc::new(AtomicBool::new(false));
    // Samples for as long as the load runs, however long that is on this machine, and
    // once more after it.
    let sampler = {
        let (peak, done) = (Arc::clone(&peak_established), Arc::clone(&load_done));
        let port = origin.addr().port();
        // Runs on the blocking pool, so sleeping between samples blocks no runtime worker.
        #[allow(clippy::disallowed_methods)]
        let sample = move || {
            // Ends when the load does; one `ss` run per round.
            loop {
                let last = done.load(Ordering::SeqCst);
                peak.fetch_max(established_to(port), Ordering::SeqCst);
                if last {
                    return;
                }
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
    load_done.store(true, Ordering::SeqCst);
    within_for("the ss sampler", DEADLINE, sampler).await.unwrap();
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
    let proxy = Proxy::start(limited_config(&origin, 16, 60_000)).await;
    let addr = proxy.addr();
    // Held at the origin until all six are in: two on the connections, four waiting.
    let requests: Vec<_> = (0..6)
        .map(|i| {
            tokio::spawn(async move { closing_request(addr, &format!("/hold/six?n={i}")).await })
        })
        .collect();
    wait_until("two requests are in and four wait", DEADLINE, || {
        let pool = proxy.pool();
        (origin.request_count(), pool.active, pool.waiting) == (2, 2, 4)
    })
    .await;
    origin.release("six");
    for r in requests {
        assert_eq!(within_for("a queued request", DEADLINE, r).await.unwrap(), 200);
    }
    // Six requests, two connections: the other four waited for one.
    assert_eq!(origin.accepted(), 2);
    let pool = proxy.pool();
    assert_eq!((pool.opened, pool.waiting, pool.queue_full, pool.queue_timeouts), (2, 0, 0, 0));
}

/// Two requests held at `origin` until it releases `name`, on the two connections
/// [`limited_config`] allows; returns when both connections are busy.
async fn take_both_connections(proxy: &Proxy, name: &str) -> Vec<JoinHandle<u16>> {
    let addr = proxy.addr();
    let busy = (0..2)
        .map(|i| {
            let path = format!("/hold/{name}?b={i}");
            tokio::spawn(async move { closing_request(addr, &path).await })
        })
        .collect();
    wait_until("both connections are busy", DEADLINE, || proxy.pool().active == 2).await;
    busy
}

/// Sends `GET path` with `Connection: close` and returns the whole response.
fn queued_request(addr: std::net::SocketAddr, path: &'static str) -> JoinHandle<RawResponse> {
    tokio::spawn(async move {
        let mut client = RawClient::connect(addr).await;
        client.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")).await;
        client.response().await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_and_queue_timeout_answer_503_not_a_connect_error() {
    // A queue of one whose requests wait as long as the test needs, so the refusal below
    // meets a full queue however slowly it comes.
    let origin = Origin::start().await;
    let proxy = Proxy::start(limited_config(&origin, 1, 60_000)).await;
    let addr = proxy.addr();
    let busy = take_both_connections(&proxy, "busy").await;
    let queued = queued_request(addr, "/queued");
    wait_until("a request is queued", DEADLINE, || proxy.pool().waiting == 1).await;
    // The queue holds one: the next is refused at once.
    let mut refused = RawClient::connect(addr).await;
    refused.send("GET /refused HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await;
    let refused = refused.response().await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE.as_u16());
    assert!(refused.body_text().contains("already queued"), "{}", refused.body_text());
    assert!(refused.body_text().contains(&origin.addr().to_string()), "{}", refused.body_text());
    // Once a connection is free, the queued one gets it.
    origin.release("busy");
    for b in busy {
        assert_eq!(within_for("a held request", DEADLINE, b).await.unwrap(), 200);
    }
    let served = within_for("the queued request", DEADLINE, queued).await.unwrap();
    assert_eq!(served.status, 200, "{}", served.body_text());
    assert_eq!(origin.accepted(), 2);
    assert!(!origin.paths().iter().any(|p| p == "/refused"));
    let pool = proxy.pool();
    assert_eq!((pool.queue_full, pool.queue_timeouts, pool.waiting), (1, 0, 0));

    // A queue timeout of 300 ms, and connections that stay busy until the test ends: the
    // queued request gives up after the timeout.
    let origin = Origin::start().await;
    let proxy = Proxy::start(limited_config(&origin, 1, 300)).await;
    let busy = take_both_connections(&proxy, "busy").await;
    let queued = queued_request(proxy.addr(), "/queued");
    let timed_out = within_for("the queued request", DEADLINE, queued).await.unwrap();
    assert_eq!(timed_out.status, StatusCode::SERVICE_UNAVAILABLE.as_u16());
    assert!(timed_out.body_text().contains("stayed busy"), "{}", timed_out.body_text());
    origin.release("busy");
    for b in busy {
        assert_eq!(within_for("a held request", DEADLINE, b).await.unwrap(), 200);
    }
    assert_eq!(origin.accepted(), 2);
    assert!(!origin.paths().iter().any(|p| p == "/queued"));
    let pool = proxy.pool();
    assert_eq!((pool.queue_full, pool.queue_timeouts, pool.waiting), (0, 1, 0));
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
    // The test origin only advertises its timeout and never closes an idle connection,
    // and holdfast's own limit is a minute: a close within the deadline can only be
    // holdfast applying the advertised 1 s, less its margin (0.5 s).
    // The close is counted after the socket is closed, so the origin may see it first:
    // wait for both.
    wait_until("holdfast retires the connection", DEADLINE, || {
        proxy.pool().closed(CloseReason::IdleTimeout) == 1
    })
    .await;
    wait_until("the origin sees the close", DEADLINE, || origin.closed() == 1).await;
    // Not before that: the connection went idle after `started`.
    let idled = started.elapsed();
    assert!(idled >= Duration::from_millis(500), "retired after {idled:?}");
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
