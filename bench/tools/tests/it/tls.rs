//! The origin over TLS and `handshakes` against it: the counts on both sides agree, full
//! and resumed apart, and a client that does not trust the certificate fails as `tls`.

use std::time::Duration;

use holdfast_bench_tools::load::handshakes::{self, HandshakesConfig};
use holdfast_bench_tools::tls;

use crate::support::{keys, wait_until, TestCerts, TestOrigin, ERROR_KINDS, LATENCY_KEYS};

fn config(origin: &TestOrigin, certs: &TestCerts, resume: bool) -> HandshakesConfig {
    HandshakesConfig {
        target: origin.https_target("/tiny"),
        tls: tls::client_config(&certs.ca).expect("client TLS settings"),
        resume,
        connections: 2,
        duration: Duration::from_millis(300),
    }
}

#[tokio::test]
async fn every_request_is_a_full_handshake_without_resumption() {
    let certs = TestCerts::make();
    let origin = TestOrigin::start_tls(&certs).await;
    let report = handshakes::run(config(&origin, &certs, false)).await;

    assert_eq!(report.errors, 0, "{report:?}");
    assert!(report.ok >= 4, "{report:?}");
    assert_eq!((report.handshakes_full, report.handshakes_resumed), (report.ok, 0));
    wait_until("every connection is closed", || origin.stats().open == 0).await;
    let stats = origin.stats();
    let tls = stats.tls.expect("TLS counts");
    assert_eq!((tls.full, tls.resumed, tls.failed), (report.ok, 0, 0), "{stats:?}");
    assert_eq!(tls.tls13, report.ok, "rustls on both sides picks TLS 1.3");
    assert_eq!((stats.connections, stats.requests), (report.ok, report.ok));

    let json = serde_json::to_value(&report).expect("JSON");
    assert_eq!(
        keys(&json),
        [
            "duration_s",
            "errors",
            "errors_by_kind",
            "handshakes_full",
            "handshakes_resumed",
            "latency_us",
            "mode",
            "non_2xx",
            "ok",
            "requests",
            "rps",
            "socket_errors",
        ]
    );
    assert_eq!(json["mode"], "handshakes");
    assert_eq!(keys(&json["latency_us"]), LATENCY_KEYS);
    assert_eq!(keys(&json["errors_by_kind"]), ERROR_KINDS);
}

#[tokio::test]
async fn with_resumption_only_each_workers_first_handshake_is_full() {
    let certs = TestCerts::make();
    let origin = TestOrigin::start_tls(&certs).await;
    let report = handshakes::run(config(&origin, &certs, true)).await;

    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(report.handshakes_full, 2, "one per worker: {report:?}");
    assert_eq!(report.handshakes_resumed, report.ok - 2, "{report:?}");
    assert!(report.handshakes_resumed >= 2, "{report:?}");
    let tls = origin.stats().tls.expect("TLS counts");
    assert_eq!((tls.full, tls.resumed), (2, report.handshakes_resumed));
}

#[tokio::test]
async fn a_certificate_the_client_does_not_trust_fails_as_tls() {
    let certs = TestCerts::make();
    let other_ca = TestCerts::make();
    let origin = TestOrigin::start_tls(&certs).await;
    let mut config = config(&origin, &other_ca, false);
    config.duration = Duration::from_millis(100);
    let report = handshakes::run(config).await;

    assert_eq!(report.ok, 0, "{report:?}");
    assert!(report.errors > 0, "{report:?}");
    assert_eq!(report.errors, report.errors_by_kind.tls, "{report:?}");
    assert_eq!(report.socket_errors, report.errors);
    wait_until("the origin counted the failed handshakes", || {
        origin.stats().tls.is_some_and(|tls| tls.failed > 0 && tls.full == 0)
    })
    .await;
}

#[tokio::test]
async fn stats_in_tls_mode_add_the_handshake_counts() {
    let certs = TestCerts::make();
    let origin = TestOrigin::start_tls(&certs).await;
    let mut config = config(&origin, &certs, false);
    config.target = origin.https_target("/__origin/stats");
    config.connections = 1;
    config.duration = Duration::from_millis(1);
    let report = handshakes::run(config).await;
    assert_eq!(report.ok, 1, "{report:?}");

    let json = serde_json::to_value(origin.stats()).expect("JSON");
    assert_eq!(
        keys(&json),
        ["accept_errors", "connections", "in_progress", "open", "requests", "tls"]
    );
    assert_eq!(keys(&json["tls"]), ["failed", "full", "resumed", "tls13"]);
    assert_eq!(json["requests"], 0, "the stats route is not counted");
}
