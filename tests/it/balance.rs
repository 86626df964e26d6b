//! Load balancing across the servers of a group: even spread, a slow server getting
//! less, ties going to a server with an idle connection, and pools that grow with the
//! number of servers.

use std::time::Duration;

use holdfast::Config;

use crate::support::{group_config, Load, Origin, OriginOptions, Proxy};

/// A listener in front of one group of `origins` balanced by `policy`.
fn group(origins: &[&Origin], policy: &str) -> Config {
    let servers: Vec<_> = origins.iter().map(|o| o.addr()).collect();
    group_config(&servers, &format!("balance = \"{policy}\""))
}

#[tokio::test]
async fn round_robin_takes_servers_in_turn() {
    let origins = [Origin::start().await, Origin::start().await, Origin::start().await];
    let proxy = Proxy::start(group(&origins.iter().collect::<Vec<_>>(), "round_robin")).await;
    let mut client = proxy.client().await;
    for _ in 0..90 {
        assert_eq!(client.get("/").await.status, 200);
    }
    for o in &origins {
        assert_eq!(o.request_count(), 30, "{} got an unequal share", o.addr());
    }
}

#[tokio::test]
async fn power_of_two_choices_spreads_load_evenly_over_equal_servers() {
    let origins = [Origin::start().await, Origin::start().await, Origin::start().await];
    let proxy = Proxy::start(group(&origins.iter().collect::<Vec<_>>(), "p2c")).await;
    let load = Load::start(proxy.addr(), 8, "app.test", "/");
    load.advance(800, Duration::from_secs(30)).await;
    let tally = load.stop().await;
    assert!(tally.failures.is_empty(), "{:?}", tally.failures);
    for o in &origins {
        let share = tally.share(o.addr());
        assert!((0.2..0.47).contains(&share), "{} got {share:.2} of {}", o.addr(), tally.ok);
    }
}

/// Two fast servers and one that takes 40 ms per request, under 8 concurrent clients:
/// round robin would give the slow one a third of the requests.
async fn slow_server_share(policy: &str) -> f64 {
    let fast = [Origin::start().await, Origin::start().await];
    let slow = Origin::start_with(OriginOptions {
        delay: Some(Duration::from_millis(40)),
        ..OriginOptions::default()
    })
    .await;
    let proxy = Proxy::start(group(&[&fast[0], &fast[1], &slow], policy)).await;
    let load = Load::start(proxy.addr(), 8, "app.test", "/");
    load.advance(800, Duration::from_secs(30)).await;
    let tally = load.stop().await;
    assert!(tally.failures.is_empty(), "{:?}", tally.failures);
    for o in &fast {
        assert!(tally.share(o.addr()) > 0.3, "{policy}: {} got {:?}", o.addr(), tally.by_origin);
    }
    tally.share(slow.addr())
}

#[tokio::test]
async fn power_of_two_choices_sends_a_slow_server_less() {
    let share = slow_server_share("p2c").await;
    assert!(share < 0.12, "the slow server got {share:.3} of the requests");
}

#[tokio::test]
async fn least_outstanding_sends_a_slow_server_less() {
    let share = slow_server_share("least_outstanding").await;
    assert!(share < 0.12, "the slow server got {share:.3} of the requests");
}

#[tokio::test]
async fn ties_go_to_a_server_with_an_idle_connection() {
    // One request at a time: every server has nothing outstanding, so each pick is a
    // tie, and the server whose pooled connection is idle wins it.
    let origins = [Origin::start().await, Origin::start().await, Origin::start().await];
    let proxy = Proxy::start(group(&origins.iter().collect::<Vec<_>>(), "least_outstanding")).await;
    let mut client = proxy.client().await;
    for _ in 0..30 {
        assert_eq!(client.get("/").await.status, 200);
    }
    let accepted: usize = origins.iter().map(Origin::accepted).sum();
    assert_eq!(accepted, 1, "one connection serves sequential requests");
    let busiest = origins.iter().map(Origin::request_count).max();
    assert_eq!(busiest, Some(30));
}

#[tokio::test]
async fn each_server_gets_a_pool_sized_by_its_own_share_of_demand() {
    // Four servers, sixteen clients: about four connections each, sixteen in all; no
    // per-group number caps them and none needs tuning.
    let origins = [
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
    ];
    let proxy = Proxy::start(group(&origins.iter().collect::<Vec<_>>(), "round_robin")).await;
    let load = Load::start(proxy.addr(), 16, "app.test", "/");
    load.advance(800, Duration::from_secs(30)).await;
    let tally = load.stop().await;
    assert!(tally.failures.is_empty(), "{:?}", tally.failures);
    let stats = proxy.stats();
    assert_eq!(stats.len(), 4);
    for s in &stats {
        assert!((1..=10).contains(&s.pool.opened), "{}: opened {}", s.backend, s.pool.opened);
        assert!(s.pool.reused > 50, "{}: reused {}", s.backend, s.pool.reused);
    }
    let opened: u64 = stats.iter().map(|s| s.pool.opened).sum();
    assert!(opened <= 24, "{opened} connections for 16 clients");
}
