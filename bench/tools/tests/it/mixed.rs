//! Keep-alive and closing workers side by side against the in-process origin.

use std::time::Duration;

use holdfast_bench_tools::load::mixed::{self, MixedConfig};

use crate::support::{keys, wait_until, TestOrigin, ERROR_KINDS, LATENCY_KEYS};

#[tokio::test]
async fn closing_workers_open_an_origin_connection_per_request() {
    let origin = TestOrigin::start().await;
    let report = mixed::run(MixedConfig {
        target: origin.target("/tiny"),
        keepalive_workers: 2,
        closing_workers: 2,
        duration: Duration::from_secs(1),
        interval: Duration::from_millis(500),
    })
    .await;

    assert_eq!(report.errors, 0, "{report:?}");
    assert!(report.ok > 10, "{report:?}");
    // Two keep-alive connections, plus one per closing request.
    assert!(report.connects > 2 + 5, "{report:?}");
    assert_eq!(origin.stats().connections, report.connects);
    assert_eq!(origin.stats().requests, report.requests);
    wait_until("every connection is closed", || origin.stats().open == 0).await;

    let timeline_ok: u64 = report.timeline.iter().map(|entry| entry.ok).sum();
    assert_eq!(timeline_ok, report.ok);
    let ends: Vec<f64> = report.timeline.iter().map(|entry| entry.t_s).collect();
    assert_eq!(ends, [0.5, 1.0]);

    let json = serde_json::to_value(&report).expect("JSON");
    assert_eq!(
        keys(&json),
        [
            "connects",
            "duration_s",
            "errors",
            "errors_by_kind",
            "latency_us",
            "mode",
            "ok",
            "requests",
            "rps",
            "timeline",
        ]
    );
    assert_eq!(json["mode"], "mixed");
    assert_eq!(keys(&json["latency_us"]), LATENCY_KEYS);
    assert_eq!(keys(&json["errors_by_kind"]), ERROR_KINDS);
    assert_eq!(keys(&json["timeline"][0]), ["errors", "ok", "t_s"]);
}

#[tokio::test]
async fn refused_connects_are_classified_and_paced() {
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr")
    };
    let target =
        holdfast_bench_tools::load::target::Target::parse(&format!("http://{closed_port}/tiny"))
            .expect("target");
    let report = mixed::run(MixedConfig {
        target,
        keepalive_workers: 1,
        closing_workers: 1,
        duration: Duration::from_millis(100),
        interval: Duration::from_secs(1),
    })
    .await;
    assert_eq!(report.ok, 0);
    assert_eq!(report.errors, report.errors_by_kind.connect_refused);
    // The 1 ms pause after each error bounds the attempts: 2 workers, 100 ms.
    assert!(report.errors > 0 && report.errors <= 250, "{report:?}");
}
