//! Routes, bodies and counters of the benchmark origin.

use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_bench_tools::origin::{serve_many, Listeners, StatsSnapshot};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

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
    assert_eq!(
        crate::support::keys(&json),
        ["accept_errors", "connections", "in_progress", "open", "requests"]
    );
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

#[tokio::test]
async fn bytes_route_streams_the_length_asked_for() {
    let origin = TestOrigin::start().await;
    let response = raw_get(origin.addr, "/bytes?n=200001").await;
    assert!(response.head.starts_with("HTTP/1.1 200"), "{}", response.head);
    assert_eq!(response.header("content-length"), Some("200001"));
    assert_eq!(response.body.len(), 200_001);
    assert!(response.body.iter().all(|&b| b == b'c'));
    assert_eq!(raw_get(origin.addr, "/bytes").await.body.len(), 0, "no n: empty");
}

#[tokio::test]
async fn a_worker_stays_busy_while_its_client_does_not_read() {
    let origin = TestOrigin::start_with_workers(1).await;
    // 64 MiB: more than loopback's socket buffers hold, so the response cannot be
    // handed to the kernel while nobody reads it.
    let mut stalled = TcpStream::connect(origin.addr).await.expect("connect");
    let request = format!("GET /bytes?n=67108864 HTTP/1.1\r\nHost: {}\r\n\r\n", origin.addr);
    stalled.write_all(request.as_bytes()).await.expect("write");
    wait_until("the large response holds the worker", || {
        origin.stats().workers.is_some_and(|w| w.busy == 1)
    })
    .await;
    assert_eq!(origin.stats().in_progress, 1);

    let waiting = tokio::spawn(raw_get(origin.addr, "/tiny"));
    wait_until("the next request waits for the worker", || {
        origin.stats().workers.is_some_and(|w| w.waiting == 1)
    })
    .await;
    assert!(!waiting.is_finished());

    drop(stalled); // the client goes away: its response is dropped and the worker freed
    let response = waiting.await.expect("the waiting request is served");
    assert_eq!(response.body.len(), 100);
    let workers = origin.stats().workers.expect("limited workers are reported");
    assert_eq!((workers.limit, workers.waiting), (1, 0));
    wait_until("no response is in progress", || origin.stats().in_progress == 0).await;
    let json = serde_json::to_value(origin.stats()).expect("JSON");
    assert_eq!(crate::support::keys(&json["workers"]), ["busy", "limit", "waiting"]);
}
