//! Hot reload: pools kept across a reload under load, removed servers draining, new
//! listeners, and an invalid file rejected with the old config kept.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::{wait_until, Load, Origin, Proxy, RawClient, ReservedPort, TempDir, DEADLINE};

/// A config with one listener in front of `app`, plus `extra` (more groups, routes).
fn config(app: &[SocketAddr], extra: &str) -> String {
    let servers: Vec<String> = app.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[admin]\naddress = \"127.0.0.1:0\"\n\n[[listener]]\naddress = \"127.0.0.1:0\"\nupstream = \"app\"\n\n\
         [upstream.app]\nservers = [{}]\n{extra}\n",
        servers.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_keeps_warm_pools_and_fails_no_request() {
    let (a, b, c) = (Origin::start().await, Origin::start().await, Origin::start().await);
    let dir = TempDir::new("reload-load");
    let path = dir.write("holdfast.toml", &config(&[a.addr(), b.addr()], ""));
    let proxy = Proxy::start_file(&path).await;
    let load = Load::start(proxy.addr(), 8, "app.test", "/");
    load.advance(300, DEADLINE).await;
    let before = a.accepted() + b.accepted();

    // Same servers plus one, a changed balancing policy, and a new route.
    let route = "\n[[route]]\nhost = \"app.test\"\nupstream = \"app\"\n";
    let text = config(
        &[a.addr(), b.addr(), c.addr()],
        &format!("balance = \"least_outstanding\"\n{route}"),
    );
    dir.write("holdfast.toml", &text);
    let report = proxy.reload().await.expect("the new config is valid");
    let expected = format!(
        "2 changes\nupstream app: added server {}; changed balance p2c -> least_outstanding\n\
         route app.test/: added (upstream app)",
        c.addr()
    );
    assert_eq!(report, expected);
    load.advance(150, DEADLINE).await;
    for _ in 0..2 {
        let report = proxy.reload().await.expect("the new config is valid");
        assert_eq!(report, "no changes");
        load.advance(150, DEADLINE).await;
    }
    let tally = load.stop().await;
    assert!(tally.failures.is_empty(), "{:?}", tally.failures);
    // The servers that stayed kept their connections: no reconnect storm.
    let after = a.accepted() + b.accepted();
    assert!(after <= before + 2, "{before} connections before the reloads, {after} after");
    assert!(tally.served_by(c.addr()) > 0, "the added server gets requests");
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.sum("holdfast_config_reloads_total", &[("result", "ok")]), 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_server_finishes_its_requests_then_closes_its_connections() {
    let (stays, leaves) = (Origin::start().await, Origin::start().await);
    let dir = TempDir::new("reload-drain");
    let slow = format!(
        "\n[[route]]\npath = \"/slow\"\nupstream = \"old\"\n\n[upstream.old]\nservers = [\"{}\"]\n",
        leaves.addr()
    );
    let path = dir.write("holdfast.toml", &config(&[stays.addr()], &slow));
    let proxy = Proxy::start_file(&path).await;
    // Warm a pooled connection to the leaving server, then start a slow request on it.
    let mut warm = RawClient::connect(proxy.addr()).await;
    warm.send("GET /slow/1 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(warm.response().await.status, 200);
    let mut slow_client = RawClient::connect(proxy.addr()).await;
    slow_client.send("GET /slow/700 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    wait_until("the slow request reaches its server", DEADLINE, || leaves.request_count() == 2)
        .await;

    dir.write("holdfast.toml", &config(&[stays.addr()], ""));
    let report = proxy.reload().await.expect("valid");
    assert_eq!(
        report,
        "2 changes\nupstream old: removed (its servers drain)\nroute /slow: removed"
    );
    // The request in flight finishes on the removed server.
    let resp = slow_client.response().await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-origin"), Some(leaves.addr().to_string().as_str()));
    // Then every connection to it closes, and new requests for /slow go to the default.
    wait_until("the removed server's connections close", DEADLINE, || {
        leaves.closed() == leaves.accepted()
    })
    .await;
    warm.send("GET /slow/1 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let resp = warm.response().await;
    assert_eq!(resp.header("x-origin"), Some(stays.addr().to_string().as_str()));
    assert_eq!(leaves.request_count(), 2);
    assert!(proxy.stats().iter().all(|s| s.backend != leaves.addr()), "gone from the stats");
}

#[tokio::test]
async fn an_invalid_config_is_rejected_with_its_line_and_the_old_one_keeps_serving() {
    let app = Origin::start().await;
    let dir = TempDir::new("reload-invalid");
    let path = dir.write("holdfast.toml", &config(&[app.addr()], ""));
    let proxy = Proxy::start_file(&path).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/").await.status, 200);

    let broken = config(&[app.addr()], "balance = \"fastest\"\n");
    dir.write("holdfast.toml", &broken);
    let error = proxy.reload().await.expect_err("an unknown policy").to_string();
    assert!(error.contains("holdfast.toml:"), "{error}");
    assert!(error.contains("upstream.app.balance"), "{error}");
    assert_eq!(client.get("/").await.status, 200, "the old config still serves");
    assert_eq!(app.accepted(), 1, "and its pool is untouched");
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.sum("holdfast_config_reloads_total", &[("result", "failed")]), 1.0);
}

#[tokio::test]
async fn a_reload_adds_and_removes_listeners() {
    let app = Origin::start().await;
    let dir = TempDir::new("reload-listeners");
    let path = dir.write("holdfast.toml", &config(&[app.addr()], ""));
    let proxy = Proxy::start_file(&path).await;
    let mut old_client = RawClient::connect(proxy.addr()).await;
    old_client.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(old_client.response().await.status, 200);
    // Reserved, so that nothing else takes the port before holdfast listens on it.
    let reserved = ReservedPort::new();
    let spare = reserved.addr();
    let text = config(&[app.addr()], "").replace(
        "[[listener]]\naddress = \"127.0.0.1:0\"",
        &format!("[[listener]]\naddress = \"{spare}\""),
    );
    dir.write("holdfast.toml", &text);
    proxy.reload().await.expect("valid");
    let mut client = RawClient::connect(spare).await;
    client.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200, "the new listener serves");
    // An idle keep-alive client of the removed listener is closed, not left on the old
    // routes.
    old_client.expect_closed().await;
    wait_until("the old listener stops accepting", DEADLINE, || {
        std::net::TcpStream::connect_timeout(&proxy.addr(), Duration::from_millis(200)).is_err()
    })
    .await;
}
