//! Passive and active health: servers killed and restarted under load, 5xx bursts,
//! failing health checks, and the 502 when every server of a group is down.

use std::net::SocketAddr;
use std::time::Duration;

use holdfast_pool::CloseReason;
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::support::{
    group_config, wait_until, Load, Origin, OriginOptions, Proxy, RawClient, DEADLINE,
};

/// Passive health with short times, so tests see ejection and re-admission quickly.
const QUICK_PASSIVE: &str = r#"
        [upstream.app.health]
        ejection = "300ms"
        max_ejection = "300ms"
        slow_start = "200ms"
"#;

/// An address where nothing listens (connects are refused).
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_and_restarted_under_load_costs_no_idempotent_request() {
    let (a, b, c) = (Origin::start().await, Origin::start().await, Origin::start().await);
    let proxy = Proxy::start(group_config(&[a.addr(), b.addr(), c.addr()], QUICK_PASSIVE)).await;
    let load = Load::start(proxy.addr(), 6, "app.test", "/");
    load.advance(200, DEADLINE).await;
    let b_addr = b.addr();
    b.kill();
    // Requests the dying server had already read still get recorded; count from when
    // its last connection is gone.
    wait_until("the killed server's connections drop", DEADLINE, || b.closed() == b.accepted())
        .await;
    let b_before = b.request_count();
    load.advance(300, DEADLINE).await;
    // B is out: the other two take everything.
    assert!(b.request_count() <= b_before, "requests still reach the killed server");

    // Restarted on the same port: after the ejection it is tried again, gradually.
    let b =
        Origin::serve(TcpListener::bind(b_addr).await.expect("rebind"), OriginOptions::default());
    wait_until("the restarted server gets traffic again", DEADLINE, || b.request_count() > 20)
        .await;
    let tally = load.stop().await;
    assert!(tally.failures.is_empty(), "{} failed: {:?}", tally.failures.len(), tally.failures);
    let stats = proxy.stats();
    let killed =
        stats.iter().find(|s| s.backend == b_addr).expect("the server is still in its group");
    assert!(
        killed.pool.closed(CloseReason::Ejected) + killed.pool.closed(CloseReason::OriginClosed)
            > 0
    );
}

#[tokio::test]
async fn a_burst_of_5xx_ejects_a_server_and_closes_its_idle_connections() {
    let (good, bad) = (Origin::start().await, Origin::start().await);
    bad.set_health(503);
    let config = group_config(
        &[good.addr(), bad.addr()],
        &format!("balance = \"round_robin\"\n{QUICK_PASSIVE}"),
    );
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    let mut errors = 0;
    for _ in 0..40 {
        if client.get("/health").await.status != 200 {
            errors += 1;
        }
    }
    // Five 503s in a row eject it (the default `max_5xx`); after that everything goes
    // to the good server while it stays out.
    assert_eq!(errors, 5, "the 503s that reached the client");
    assert_eq!(bad.count_path("/health"), 5);
    let bad_stats =
        proxy.stats().into_iter().find(|s| s.backend == bad.addr()).expect("bad server");
    assert_eq!(bad_stats.pool.closed(CloseReason::Ejected), 1, "its idle connection was closed");
    assert_eq!(bad_stats.pool.idle, 0);
}

#[tokio::test]
async fn failing_health_checks_take_a_server_out_before_requests_reach_it_and_passing_ones_bring_it_back(
) {
    let (good, sick) = (Origin::start().await, Origin::start().await);
    let checks = r#"
        [upstream.app.health]
        slow_start = "0s"

        [upstream.app.health_check]
        path = "/health"
        interval = "50ms"
        timeout = "1s"
        unhealthy = 2
        healthy = 2
    "#;
    let proxy = Proxy::start(group_config(&[good.addr(), sick.addr()], checks)).await;
    sick.set_health(500);
    wait_until("two failed checks", DEADLINE, || sick.count_path("/health") >= 3).await;
    let mut client = proxy.client().await;
    for _ in 0..30 {
        assert_eq!(client.get("/").await.status, 200);
    }
    assert_eq!(
        sick.count_path("/") - sick.count_path("/health"),
        0,
        "no request reached the sick server"
    );

    sick.set_health(200);
    wait_until("the server is back", DEADLINE, || {
        sick.requests().iter().any(|r| r.uri.path() == "/") || sick.count_path("/health") > 100
    })
    .await;
    let traffic = async {
        for _ in 0..200 {
            assert_eq!(client.get("/").await.status, 200);
            if sick.requests().iter().any(|r| r.uri.path() == "/") {
                return true;
            }
        }
        false
    };
    assert!(traffic.await, "the healed server got no request");
    // Checks went over pooled connections: a handful, not one per check.
    assert!(
        sick.accepted() <= 3,
        "{} connections for {} checks",
        sick.accepted(),
        sick.count_path("/health")
    );
}

#[tokio::test]
async fn when_every_server_is_ejected_requests_go_to_them_anyway_and_the_first_back_serves() {
    let (dead1, dead2) = (closed_port().await, closed_port().await);
    let passive = r#"
        [upstream.app.health]
        max_connect_failures = 1
        ejection = "30s"
    "#;
    let proxy = Proxy::start(group_config(&[dead1, dead2], passive)).await;
    let mut client = RawClient::connect(proxy.addr()).await;
    // The first request tries both servers (a failed connect goes to the next one).
    client.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let first = client.response().await;
    assert_eq!(first.status, 502);
    assert!(first.body_text().contains("connection refused"), "{}", first.body_text());
    let health: Vec<_> = proxy.stats().iter().map(|s| s.health).collect();
    assert_eq!(health, ["ejected", "ejected"], "both servers are out for 30 s");
    // Both are out, so the group is in panic: requests still go to them.
    client.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let next = client.response().await;
    assert_eq!(next.status, 502);
    assert!(next.body_text().contains("connection refused"), "{}", next.body_text());
    // One comes back long before its ejection ends: it serves the very next request.
    let back =
        Origin::serve(TcpListener::bind(dead1).await.expect("rebind"), OriginOptions::default());
    for _ in 0..2 {
        client.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert_eq!(client.response().await.status, 200);
    }
    assert_eq!(back.request_count(), 2);
}

#[tokio::test]
async fn when_a_group_has_no_server_the_client_gets_502_naming_the_group_and_why() {
    let text = r#"
[[listener]]
address = "127.0.0.1:0"
upstream = "app"

[upstream.app]
servers = ["no-such-host.invalid:80"]
"#;
    let config = holdfast::Config::parse(text, std::path::Path::new("empty.toml")).expect("valid");
    let proxy = Proxy::start(config).await;
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let reply = client.response().await;
    assert_eq!(reply.status, 502);
    let body = reply.body_text();
    assert!(body.contains("upstream app: the group has no servers"), "{body}");
    assert!(body.contains("no-such-host.invalid:80 does not resolve"), "{body}");
}

/// Kills `origin`, keeps it down for `down`, and starts it again on the same port;
/// returns the new origin and when it listened again.
async fn restart_after(origin: Origin, down: Duration) -> (Origin, Instant) {
    let addr = origin.addr();
    origin.kill();
    drop(origin);
    tokio::time::sleep(down).await;
    let listener = TcpListener::bind(addr).await.expect("rebind");
    (Origin::serve(listener, OriginOptions::default()), Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_server_restarted_twice_under_load_serves_again_at_once() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(group_config(&[origin.addr()], "")).await;
    let load = Load::start(proxy.addr(), 2, "app.test", "/");
    load.advance(100, DEADLINE).await;
    let mut origin = origin;
    for round in 0..2 {
        let (back, listening) = restart_after(origin, Duration::from_millis(1500)).await;
        let served = || back.request_count() > 0;
        wait_until("a request reaches the restarted server", DEADLINE, served).await;
        let after = listening.elapsed();
        assert!(
            after < Duration::from_millis(500),
            "restart {round}: first request after {after:?}"
        );
        origin = back;
        load.advance(100, DEADLINE).await;
    }
    let tally = load.stop().await;
    // Only the outages failed, each with a 502 naming the refused connect.
    assert!(!tally.failures.is_empty(), "the outages went unnoticed");
    let stats = proxy.stats();
    assert_eq!((stats[0].ejections, stats[0].health), (0, "healthy"), "never ejected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_servers_one_flapping_the_other_takes_all_traffic_and_the_flapper_is_back_within_half_a_second(
) {
    let (steady, flapping) = (Origin::start().await, Origin::start().await);
    // Default ejections (5 s, then 10 s, 20 s), which only a probe can cut short; no
    // slow start, so that the server is back at its full share at once and a request
    // finds it down again in the next round.
    let no_slow_start = "[upstream.app.health]\nslow_start = \"0s\"";
    let proxy = Proxy::start(group_config(&[steady.addr(), flapping.addr()], no_slow_start)).await;
    let load = Load::start(proxy.addr(), 4, "app.test", "/");
    load.advance(200, DEADLINE).await;
    let mut flapping = flapping;
    let addr = flapping.addr();
    let health = |proxy: &Proxy| proxy.stats().iter().find(|s| s.backend == addr).unwrap().health;
    for round in 0..3 {
        flapping.kill();
        wait_until("the killed server is ejected", DEADLINE, || health(&proxy) == "ejected").await;
        let (back, listening) = restart_after(flapping, Duration::from_millis(300)).await;
        // A probe connects within its longest wait: the ejection ends long before its
        // time.
        wait_until("the probe ends the ejection", DEADLINE, || health(&proxy) != "ejected").await;
        let after = listening.elapsed();
        assert!(
            after < Duration::from_millis(500),
            "round {round}: back in service after {after:?}"
        );
        flapping = back;
        wait_until("the flapping server serves again", DEADLINE, || flapping.request_count() > 0)
            .await;
        load.advance(200, DEADLINE).await;
    }
    let tally = load.stop().await;
    assert!(tally.failures.is_empty(), "{} failed: {:?}", tally.failures.len(), tally.failures);
    assert!(steady.request_count() > 0 && flapping.request_count() > 0);
}
