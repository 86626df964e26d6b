//! Fixed rate over many virtual hosts, against the in-process origin.

use std::time::Duration;

use holdfast_bench_tools::load::hosts::{self, HostSchedule, HostsSettings};
use holdfast_bench_tools::load::rate::RateConfig;

use crate::support::{keys, TestOrigin};

#[tokio::test]
async fn hosts_mode_sends_the_rate_and_bursts_to_the_bursty_hosts() {
    let origin = TestOrigin::start().await;
    let schedule = HostSchedule::new(&HostsSettings {
        pattern: "app{}.bench".to_owned(),
        steady: 4,
        bursty: 2,
        idle: Duration::from_millis(300),
        burst: Duration::from_millis(200),
    })
    .expect("valid schedule");
    let config = RateConfig {
        target: origin.target("/tiny"),
        rate: 400.0,
        duration: Duration::from_secs(1),
        connections: 4,
        warmup: Duration::ZERO,
        connects_in_flight: 256,
        hosts: None,
    };
    let report = hosts::run(config, schedule).await;

    assert_eq!((report.rate.requests, report.rate.ok), (400, 400), "{report:?}");
    assert_eq!(origin.stats().connections, 4, "keep-alive: one origin connection each");
    // Bursts at 0.3-0.5 s and 0.8-1.0 s: 160 requests, about half to the bursty hosts.
    assert_eq!(report.bursts, 2);
    assert!((50..110).contains(&report.bursty_requests), "{report:?}");
    let json = serde_json::to_value(&report).expect("JSON");
    assert_eq!(json["mode"], "hosts");
    for key in ["bursts", "bursty_hosts", "bursty_requests", "latency_us", "steady_hosts"] {
        assert!(keys(&json).contains(&key), "{key} missing");
    }
}
