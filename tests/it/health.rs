//! Passive and active health: servers killed and restarted under load, 5xx bursts,
//! failing health checks, and the 502 when every server of a group is down.

use std::time::Duration;

use holdfast_pool::CloseReason;
use tokio::net::TcpListener;

use crate::support::{
    group_config, wait_until, ClosedPort, Load, Origin, OriginOptions, Proxy, RawClient, DEADLINE,
};

/// Passive health with short times, so tests see ejection and re-admission quickly.
const QUICK_PASSIVE: &str = r#"
        [upstream.app.health]
        ejection = "300ms"
        max_ejection = "300ms"
        slow_start = "200ms"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_and_restarted_under_load_costs_no_idempotent_request() {
    let (a, b, c) = (Origin::start().await, Origin::start().await, Origin::start().await);
    // Round robin: the subject is health, and each server's turn comes every third
    // request. Under p2c the killed server's turn depends on latencies, which a loaded
    // machine makes noisy: one slow answer just before the kill could keep it unpicked
    // (never ejected) and, once restarted, unpicked until that answer decayed.
    let config = format!("balance = \"round_robin\"\n{QUICK_PASSIVE}");
    let proxy = Proxy::start(group_config(&[a.addr(), b.addr(), c.addr()], &config)).await;
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
    // Killing it closes its connections whatever health does: what shows the ejection is
    // health's own count, which only connect failures past the limit raise.
    assert!(killed.ejections >= 1, "the killed server was never ejected: {killed:?}");
}

#[tokio::test]
async fn a_burst_of_5xx_ejects_a_server_and_closes_its_idle_connections() {
    let (good, bad) = (Origin::start().await, Origin::start().await);
    bad.set_health(503);
    // An ejection that outlasts the test. With `QUICK_PASSIVE`'s 300 ms, a loaded machine
    // could take longer than that over the requests after the ejection: the server came
    // back in slow start, took more 503s, and the counts below depended on scheduling.
    let passive = "[upstream.app.health]\nejection = \"1h\"\nmax_ejection = \"1h\"\n";
    let config =
        group_config(&[good.addr(), bad.addr()], &format!("balance = \"round_robin\"\n{passive}"));
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    let mut errors = 0;
    for _ in 0..40 {
        if client.get("/health").await.status != 200 {
            errors += 1;
        }
    }
    // Five 503s in a row eject it (the default `max_5xx`). The fifth is counted when its
    // head arrives, before it is passed on, so the next request (one client, one request
    // at a time) already finds the server out, and everything after goes to the good one.
    // `max_5xx`'s default (README, "Passive health").
    let max_5xx = 5;
    assert_eq!(errors, max_5xx, "the 503s that reached the client");
    assert_eq!(bad.count_path("/health"), max_5xx);
    let bad_stats =
        proxy.stats().into_iter().find(|s| s.backend == bad.addr()).expect("bad server");
    assert_eq!((bad_stats.health, bad_stats.ejections), ("ejected", 1));
    // The connection that carried the fifth 503 was closed instead of going back idle.
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
    let sick_addr = sick.addr();
    let health = || proxy.stats().iter().find(|s| s.backend == sick_addr).unwrap().health;
    sick.set_health(500);
    // Waits on holdfast's verdict, not on the origin's count of checks: checks that
    // passed before the switch count there too, and a check arrives before holdfast
    // reads its answer.
    wait_until("two failed checks take it out", DEADLINE, || health() == "failing_checks").await;
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
    wait_until("two passing checks bring it back", DEADLINE, || health() == "healthy").await;
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
    // Held for the whole test: nothing else can listen there, or take the port before
    // the first server comes back on it.
    let (port1, port2) = (ClosedPort::new(), ClosedPort::new());
    let (dead1, dead2) = (port1.addr(), port2.addr());
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
    let back = Origin::serve(port1.listen(), OriginOptions::default());
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

/// Kills `origin`, keeps it down for `down` (the outage under test), and starts it
/// again on the same port.
async fn restart_after(origin: Origin, down: Duration) -> Origin {
    let addr = origin.addr();
    origin.kill();
    drop(origin);
    tokio::time::sleep(down).await;
    let listener = TcpListener::bind(addr).await.expect("rebind");
    Origin::serve(listener, OriginOptions::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_server_restarted_twice_under_load_serves_again_at_once() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(group_config(&[origin.addr()], "")).await;
    let load = Load::start(proxy.addr(), 2, "app.test", "/");
    load.advance(100, DEADLINE).await;
    let mut origin = origin;
    for round in 0..2 {
        let back = restart_after(origin, Duration::from_millis(1500)).await;
        // At once: the first request sent after it listens again is served by it, while
        // the load goes on; nothing holds a lone server out of service.
        let mut client = proxy.client().await;
        let first = client.get(&format!("/first-after-restart/{round}")).await;
        assert_eq!(first.status, 200, "restart {round}: {}", first.text());
        let served = || back.request_count() > 0;
        wait_until("the load reaches the restarted server", DEADLINE, served).await;
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
async fn of_two_servers_one_flapping_the_other_takes_all_traffic_and_the_flapper_is_back_before_its_ejection_ends(
) {
    let (steady, flapping) = (Origin::start().await, Origin::start().await);
    // Ejections far longer than the wait for the server to be back (`DEADLINE`), so that
    // only a probe can end one in time; no slow start, so that the server is back at its
    // full share at once and a request finds it down again in the next round.
    let passive = "[upstream.app.health]\nslow_start = \"0s\"\nejection = \"1h\"\n\
                   max_ejection = \"1h\"";
    let proxy = Proxy::start(group_config(&[steady.addr(), flapping.addr()], passive)).await;
    let load = Load::start(proxy.addr(), 4, "app.test", "/");
    load.advance(200, DEADLINE).await;
    let mut flapping = flapping;
    let addr = flapping.addr();
    let health = |proxy: &Proxy| proxy.stats().iter().find(|s| s.backend == addr).unwrap().health;
    for round in 0..3 {
        flapping.kill();
        wait_until("the killed server is ejected", DEADLINE, || health(&proxy) == "ejected").await;
        let back = restart_after(flapping, Duration::from_millis(300)).await;
        // A probe connects within its longest wait: the hour-long ejection ends now.
        let what = format!("round {round}: a probe ends the ejection");
        wait_until(&what, DEADLINE, || health(&proxy) != "ejected").await;
        flapping = back;
        wait_until("the flapping server serves again", DEADLINE, || flapping.request_count() > 0)
            .await;
        load.advance(200, DEADLINE).await;
    }
    let tally = load.stop().await;
    assert!(tally.failures.is_empty(), "{} failed: {:?}", tally.failures.len(), tally.failures);
    assert!(steady.request_count() > 0 && flapping.request_count() > 0);
}
