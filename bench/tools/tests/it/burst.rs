//! Many requests in flight on new connections against the in-process origin.

use std::time::Duration;

use holdfast_bench_tools::load::burst::{self, BurstConfig};

use crate::support::{keys, wait_until, TestOrigin, ERROR_KINDS};

#[tokio::test]
async fn burst_opens_one_origin_connection_per_request_all_at_once() {
    let origin = TestOrigin::start().await;
    let report = burst::run(BurstConfig {
        target: origin.target("/slow?ms=200"),
        connections: 50,
        connects_in_flight: 16,
        deadline: Duration::from_secs(10),
    })
    .await;

    assert_eq!((report.ok, report.errors), (50, 0), "{report:?}");
    assert_eq!(origin.stats().connections, 50);
    // Serially this would take 10 s; overlapped it takes one delay plus connects.
    assert!(report.duration_s < 5.0, "{report:?}");
    wait_until("every connection is closed", || origin.stats().open == 0).await;

    let json = serde_json::to_value(&report).expect("JSON");
    assert_eq!(
        keys(&json),
        ["connections", "duration_s", "errors", "errors_by_kind", "latency_us", "mode", "ok"]
    );
    assert_eq!(json["mode"], "burst");
    assert_eq!(keys(&json["errors_by_kind"]), ERROR_KINDS);
}

#[tokio::test]
async fn burst_requests_still_open_at_the_deadline_are_timeouts() {
    let origin = TestOrigin::start().await;
    let report = burst::run(BurstConfig {
        target: origin.target("/slow?ms=5000"),
        connections: 5,
        connects_in_flight: 512,
        deadline: Duration::from_millis(200),
    })
    .await;
    assert_eq!((report.ok, report.errors_by_kind.timeout), (0, 5), "{report:?}");
}

#[tokio::test]
async fn burst_through_the_gate_is_answered_once_every_request_arrived() {
    let origin = TestOrigin::start().await;
    let report = burst::run(BurstConfig {
        target: origin.target("/gate?n=40&ms=20000"),
        connections: 40,
        connects_in_flight: 8,
        deadline: Duration::from_secs(30),
    })
    .await;
    assert_eq!((report.ok, report.errors), (40, 0), "{report:?}");
    // Released by the 40th arrival, not by the 20 s wait.
    assert!(report.duration_s < 10.0, "{report:?}");
    assert_eq!(origin.stats().requests, 40);
}
