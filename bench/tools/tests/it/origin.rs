//! Routes, bodies and counters of the benchmark origin.

use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_bench_tools::origin::{serve_many, Listeners, StatsSnapshot};

use crate::support::{raw_get, wait_until, TestOrigin};

#[tokio::test]
async fn routes_answer_with_static_bodies_of_their_size() {
    let origin = TestOrigin::start().await;
    for (path, size) in [("/tiny", 100), ("/50k", 51_200), ("/anything/else", 100)] {
        let response = raw_get(origin.addr, path).await;
        assert!(response.head.starts_with("HTTP/1.1 200"), "{path}: {}", response.head);
        assert_eq!(response.body.len(), size, "{path}");
        assert_eq!(response.header("content-length"), Some(size.to_string().as_str()));
        assert_eq!(response.header("content-type"), Some("text/plain"));
    }
}

#[tokio::test]
async fn slow_route_answers_after_the_requested_delay() {
    let origin = TestOrigin::start().await;
    let started = Instant::now();
    let response = raw_get(origin.addr, "/slow?ms=200").await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(response.body.len(), 100);
}

#[tokio::test]
async fn stats_count_connections_and_requests_but_not_themselves() {
    let origin = TestOrigin::start().await;
    raw_get(origin.addr, "/tiny").await;
    raw_get(origin.addr, "/50k").await;
    raw_get(origin.addr, "/__origin/stats").await;
    wait_until("closed connections are counted", || origin.stats().open == 0).await;

    let response = raw_get(origin.addr, "/__origin/stats").await;
    let stats: StatsSnapshot = serde_json::from_slice(&response.body).expect("stats JSON");
    assert_eq!(stats.connections, 4);
    assert_eq!(stats.requests, 2);
    assert_eq!(stats.open, 1, "the connection asking is open");
    let json: serde_json::Value = serde_json::from_slice(&response.body).expect("JSON");
    assert_eq!(crate::support::keys(&json), ["accept_errors", "connections", "open", "requests"]);
}

#[tokio::test]
async fn several_listeners_count_apart_and_answer_the_totals() {
    let listeners: Vec<_> = (0..3)
        .map(|_| holdfast_bench_tools::origin::bind("127.0.0.1:0".parse().expect("addr")))
        .collect::<Result<_, _>>()
        .expect("bind");
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().expect("addr")).collect();
    let counts = Arc::new(Listeners::new(addrs.iter().copied()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_many(listeners, Arc::clone(&counts), async {
        let _ = stopped.await;
    }));
    raw_get(addrs[0], "/tiny").await;
    raw_get(addrs[2], "/tiny").await;
    raw_get(addrs[2], "/50k").await;
    wait_until("closed connections are counted", || counts.snapshot().open == 0).await;

    let response = raw_get(addrs[1], "/__origin/stats").await;
    let stats: StatsSnapshot = serde_json::from_slice(&response.body).expect("stats JSON");
    assert_eq!((stats.connections, stats.requests, stats.open), (4, 3, 1));
    let per_listener: Vec<_> = stats
        .listeners
        .expect("per-listener counts")
        .iter()
        .map(|l| (l.address, l.connections, l.requests))
        .collect();
    assert_eq!(per_listener, [(addrs[0], 1, 1), (addrs[1], 1, 0), (addrs[2], 2, 2)]);
    drop(stop);
}
