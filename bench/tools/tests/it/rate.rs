//! Open-loop fixed rate against the in-process origin.

use std::time::Duration;

use holdfast_bench_tools::load::rate::{self, RateConfig};

use crate::support::{keys, TestOrigin, ERROR_KINDS, LATENCY_KEYS};

fn config(target: holdfast_bench_tools::load::target::Target, rate: f64) -> RateConfig {
    RateConfig {
        target,
        rate,
        duration: Duration::from_secs(1),
        connections: 4,
        warmup: Duration::ZERO,
        connects_in_flight: 256,
        hosts: None,
    }
}

#[tokio::test]
async fn rate_mode_sends_the_target_rate_over_its_connections() {
    let origin = TestOrigin::start().await;
    let report = rate::run(config(origin.target("/tiny"), 200.0)).await;

    assert_eq!((report.requests, report.ok), (200, 200), "{report:?}");
    assert_eq!((report.non_2xx, report.socket_errors, report.unsent), (0, 0, 0));
    assert!(report.latency_us.p50 > 0 && report.latency_us.max >= report.latency_us.p999);
    assert_eq!(report.connects, 4);
    assert_eq!(origin.stats().connections, 4, "keep-alive: one origin connection each");
    assert_eq!(origin.stats().requests, 200);

    let json = serde_json::to_value(&report).expect("JSON");
    assert_eq!(
        keys(&json),
        [
            "connects",
            "duration_s",
            "errors_by_kind",
            "latency_us",
            "max_send_lag_us",
            "mode",
            "non_2xx",
            "ok",
            "requests",
            "rps",
            "socket_errors",
            "target_rate",
            "unsent",
        ]
    );
    assert_eq!(json["mode"], "rate");
    assert_eq!(json["target_rate"], 200.0);
    assert_eq!(keys(&json["latency_us"]), LATENCY_KEYS);
    assert_eq!(keys(&json["errors_by_kind"]), ERROR_KINDS);
}

#[tokio::test]
async fn warmup_requests_are_sent_but_not_recorded() {
    let origin = TestOrigin::start().await;
    let config = RateConfig {
        duration: Duration::from_millis(300),
        warmup: Duration::from_millis(200),
        ..config(origin.target("/tiny"), 100.0)
    };
    let report = rate::run(config).await;
    assert_eq!(report.requests, 30, "{report:?}");
    assert_eq!(origin.stats().requests, 50);
}

#[tokio::test]
async fn refused_connects_are_socket_errors_not_a_crash() {
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr")
    };
    let target =
        holdfast_bench_tools::load::target::Target::parse(&format!("http://{closed_port}/tiny"))
            .expect("target");
    let config = RateConfig { duration: Duration::from_millis(200), ..config(target, 50.0) };
    let report = rate::run(config).await;
    assert_eq!((report.ok, report.socket_errors), (0, 10), "{report:?}");
    assert_eq!(report.errors_by_kind.connect_refused, 10);
}
