//! The field report's scale: hundreds of keep-alive clients at once in front of one
//! Node.js origin serving 50 kB. Reuse must hold at any concurrency: about one upstream
//! connection per client over the whole run, none closed and reopened because of a cap
//! below demand, and, in a namespace with 1,000 local ports and no TIME_WAIT reuse, not
//! one error.

use std::sync::Arc;
use std::time::Duration;

use holdfast::BackendStats;
use holdfast_pool::{CloseReason, PoolStatsSnapshot};

use crate::support::netns::Namespace;
use crate::support::node::NodeOrigin;
use crate::support::{config_to, within_for, Load, Proxy};

/// Requests each client sends on average over a run.
const REQUESTS_PER_CLIENT: usize = 12;
/// Upstream connections opened may exceed the clients by this factor: a connection the
/// origin closes (Node's 5 s keep-alive timeout) is replaced, nothing else should be.
const OPENED_PER_CLIENT: f64 = 1.1;

/// What a run through holdfast observed.
#[derive(Debug)]
struct Run {
    ok: usize,
    failures: Vec<String>,
    /// TCP connections the origin accepted.
    accepted: u64,
    /// Connections the pool closed, while the load ran, because they were above demand
    /// or the budget.
    churned: u64,
    opened: u64,
}

/// Each of `clients` clients on its own keep-alive connection, `REQUESTS_PER_CLIENT`
/// requests each on average, through holdfast with its defaults to a Node origin.
async fn run_at(clients: usize) -> Run {
    let origin = NodeOrigin::start("bulk_origin.js", &[]).await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let load = Load::start(proxy.addr(), clients, "app", "/bulk");
    let total = clients * REQUESTS_PER_CLIENT;
    load.advance(total, Duration::from_secs(90)).await;
    // While the load still runs: once it stops, connections opened in a race (a request
    // found none idle just as another came back) are rightly closed as surplus.
    let churned = churned(&single(&proxy.server().stats()).pool);
    let tally = load.stop().await;
    let stats = origin.stats().await;
    let pool = single(&proxy.server().stats()).pool.clone();
    Run {
        ok: tally.ok,
        failures: tally.failures,
        accepted: stats.counter("accepted") - 1, // the stats request's own connection
        churned,
        opened: pool.opened,
    }
}

fn churned(pool: &PoolStatsSnapshot) -> u64 {
    pool.closed(CloseReason::AboveDemand) + pool.closed(CloseReason::BudgetSpent)
}

fn single(stats: &[BackendStats]) -> &BackendStats {
    assert_eq!(stats.len(), 1, "one backend expected");
    &stats[0]
}

/// Raises this process's open-file limit as holdfast does at start, and fails (never
/// skips) when it stays below what `clients` need: the load's socket, holdfast's client
/// and upstream sockets per client.
fn files_for(clients: usize) {
    holdfast::raise_open_file_limit();
    let limit = holdfast::Resources::read().open_files.unwrap_or(u64::MAX);
    let needed = (clients * 3 + 200) as u64;
    assert!(limit >= needed, "{clients} clients need {needed} open files; the limit is {limit}");
}

fn assert_reuse_held(clients: usize, run: &Run) {
    assert!(
        run.failures.is_empty(),
        "{} failures, first: {:?}",
        run.failures.len(),
        run.failures.first()
    );
    assert!(run.ok >= clients * REQUESTS_PER_CLIENT, "{run:?}");
    let most = (clients as f64 * OPENED_PER_CLIENT) as u64;
    assert!(
        run.accepted <= most,
        "{clients} clients made the origin accept {} connections (at most {most})",
        run.accepted
    );
    assert_eq!(run.opened, run.accepted, "holdfast's count of opened connections: {run:?}");
    assert_eq!(run.churned, 0, "connections closed above demand or budget: {run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_clients_keep_about_five_hundred_upstream_connections() {
    files_for(500);
    let run = within_for("c=500", Duration::from_secs(120), run_at(500)).await;
    assert_reuse_held(500, &run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_keep_about_a_thousand_upstream_connections() {
    files_for(1000);
    let run = within_for("c=1000", Duration::from_secs(150), run_at(1000)).await;
    assert_reuse_held(1000, &run);
}

/// The namespace's local ports: 1,000, shared by the load's own connections to holdfast
/// and holdfast's to the origin.
const PORT_RANGE: (u16, u16) = (40_000, 40_999);

#[test]
fn five_hundred_clients_fit_in_a_thousand_local_ports_without_errors() {
    let Some(ns) = Namespace::create_or_skip() else { return };
    ns.sysctl("net.ipv4.ip_local_port_range", &format!("{} {}", PORT_RANGE.0, PORT_RANGE.1));
    // No TIME_WAIT reuse on loopback, as on a real network.
    ns.sysctl("net.ipv4.tcp_tw_reuse", "0");
    files_for(500);
    let ns = Arc::new(ns);
    let inside = Arc::clone(&ns);
    let thread = std::thread::spawn(move || {
        inside.enter();
        // Built after `setns`: its threads, and the node child, live in the namespace.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(within_for("c=500 in 1,000 ports", Duration::from_secs(120), run_at(500)))
    });
    let run = match thread.join() {
        Ok(run) => run,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    assert_reuse_held(500, &run);
}
