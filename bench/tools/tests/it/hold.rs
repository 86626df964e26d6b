//! Many idle connections held open against the in-process origin.

use holdfast_bench_tools::load::hold::{self, HoldConfig};

use crate::support::{keys, wait_until, TestOrigin, ERROR_KINDS};

#[tokio::test]
async fn held_connections_stay_open_at_the_origin_until_released() {
    let origin = TestOrigin::start().await;
    let mut holding = None;
    let config = HoldConfig {
        target: origin.target("/tiny"),
        connections: 20,
        connects_in_flight: 8,
        silent: false,
    };
    let release = async {
        wait_until("the origin sees 20 open connections", || origin.stats().open == 20).await;
    };
    let report = hold::run(
        config,
        |event| holding = Some(serde_json::to_value(event).expect("JSON")),
        release,
    )
    .await;

    let holding = holding.expect("the holding event came before the release");
    assert_eq!(holding["event"], "holding");
    assert_eq!((holding["connections"].as_u64(), holding["failed"].as_u64()), (Some(20), Some(0)));
    assert_eq!(origin.stats().connections, 20);
    assert_eq!(origin.stats().requests, 20, "every connection was proxied once");
    assert_eq!((report.failed, report.closed_by_peer), (0, 0));
    wait_until("the origin sees them closed", || origin.stats().open == 0).await;

    let json = serde_json::to_value(&report).expect("JSON");
    assert_eq!(
        keys(&json),
        [
            "closed_by_peer",
            "connections",
            "errors_by_kind",
            "establish_s",
            "failed",
            "mode",
            "silent"
        ]
    );
    assert_eq!((json["mode"].as_str(), json["silent"].as_bool()), (Some("hold"), Some(false)));
    assert_eq!(keys(&json["errors_by_kind"]), ERROR_KINDS);
}

#[tokio::test]
async fn silent_connections_send_nothing() {
    let origin = TestOrigin::start().await;
    let config = HoldConfig {
        target: origin.target("/tiny"),
        connections: 20,
        connects_in_flight: 8,
        silent: true,
    };
    let release = async {
        wait_until("the origin sees 20 open connections", || origin.stats().open == 20).await;
    };
    let report = hold::run(config, |_| {}, release).await;

    assert_eq!(origin.stats().connections, 20);
    assert_eq!(origin.stats().requests, 0, "no connection sent a request");
    assert_eq!((report.failed, report.closed_by_peer, report.silent), (0, 0, true));
    wait_until("the origin sees them closed", || origin.stats().open == 0).await;
}

#[tokio::test]
async fn silent_connections_the_peer_closed_are_counted() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    // Accepts 3 connections and closes them at once, as a server with a short timeout for
    // a request head would.
    let closer = tokio::spawn(async move {
        for _ in 0..3 {
            let (stream, _) = listener.accept().await.expect("accept");
            drop(stream);
        }
        listener
    });
    let config = HoldConfig {
        target: holdfast_bench_tools::load::target::Target::parse(&format!("http://{addr}/"))
            .expect("target"),
        connections: 3,
        connects_in_flight: 3,
        silent: true,
    };
    let release = async {
        let _listener = closer.await.expect("accept task");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let report = hold::run(config, |_| {}, release).await;
    assert_eq!((report.failed, report.closed_by_peer), (0, 3));
}
