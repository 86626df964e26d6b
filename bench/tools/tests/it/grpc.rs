//! `bench-load grpc` against the origin's gRPC echo (h2c mode), both real, on 127.0.0.1:
//! unary calls and bidirectional streams, every echo and status checked by the client
//! and every call counted by the origin.

use std::time::Duration;

use holdfast_bench_tools::load::grpc::{self, GrpcConfig};
use holdfast_bench_tools::origin::H2cOptions;

use crate::support::TestOrigin;

fn config(origin: &TestOrigin, path: &str, messages: u32) -> GrpcConfig {
    GrpcConfig {
        target: origin.target(path),
        connections: 2,
        streams: 4,
        messages,
        payload_bytes: 100,
        duration: Duration::from_millis(300),
    }
}

#[tokio::test]
async fn unary_calls_are_echoed_and_end_with_status_ok() {
    let origin = TestOrigin::start_h2c(H2cOptions::default()).await;
    let report = grpc::run(config(&origin, "/holdfast.bench.Echo/Unary", 1)).await;

    assert_eq!(report.errors, 0, "{:?}", report.first_errors);
    assert_eq!(report.kind, "unary");
    assert!(report.ok > 0);
    assert_eq!(report.requests, report.ok);
    assert_eq!(report.messages, report.ok, "one message per unary call");
    assert_eq!(report.connects, 2);
    let stats = origin.stats();
    assert_eq!(stats.requests, report.ok, "the origin answered every call");
    let h2 = stats.h2.expect("h2 counts");
    assert_eq!((h2.connections, h2.requests), (2, report.ok));
}

#[tokio::test]
async fn streaming_calls_echo_every_message_in_lockstep() {
    let origin = TestOrigin::start_h2c(H2cOptions::default()).await;
    let report = grpc::run(config(&origin, "/holdfast.bench.Echo/Stream", 100)).await;

    assert_eq!(report.errors, 0, "{:?}", report.first_errors);
    assert_eq!(report.kind, "streaming");
    assert!(report.ok > 0);
    assert_eq!(report.messages, 100 * report.ok, "every message of every call came back");
    assert_eq!(origin.stats().requests, report.ok, "one origin request per call");
    assert!(report.latency_us.max > 0);
}

#[tokio::test]
async fn a_server_that_does_not_speak_http2_fails_every_call() {
    // the cleartext origin speaks HTTP/1.1 only: the HTTP/2 handshake fails
    let origin = TestOrigin::start().await;
    let mut config = config(&origin, "/holdfast.bench.Echo/Unary", 1);
    config.connections = 1;
    config.duration = Duration::from_millis(50);
    let report = grpc::run(config).await;

    assert_eq!(report.ok, 0);
    assert!(report.errors > 0, "{report:?}");
    assert_eq!(report.errors, report.socket_errors, "{:?}", report.errors_by_kind);
}
