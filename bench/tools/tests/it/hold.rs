//! Many idle connections held open against the in-process origin.

use holdfast_bench_tools::load::hold::{self, HoldConfig};

use crate::support::{keys, wait_until, TestOrigin, ERROR_KINDS};

#[tokio::test]
async fn held_connections_stay_open_at_the_origin_until_released() {
    let origin = TestOrigin::start().await;
    let mut holding = None;
    let config =
        HoldConfig { target: origin.target("/tiny"), connections: 20, connects_in_flight: 8 };
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
        ["closed_by_peer", "connections", "errors_by_kind", "establish_s", "failed", "mode"]
    );
    assert_eq!(json["mode"], "hold");
    assert_eq!(keys(&json["errors_by_kind"]), ERROR_KINDS);
}
