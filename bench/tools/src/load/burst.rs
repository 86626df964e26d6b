//! Puts many requests in flight at once, each on its own new connection, so a proxy must
//! open that many upstream connections together (which then sit idle in its pool).
//!
//! Connects are bounded in flight; requests are not: with a slow URL (`/slow?ms=2000`) they
//! all overlap. Every connection stays open until all responses are in, then all close.
//! Bounded: everything must finish within `deadline` of the start.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::exchange::{self, Connection, ErrorKind, ExchangeError};
use super::tally::{ErrorCounts, Tally};
use super::target::Target;
use crate::histogram::LatencySummary;

/// Connects in flight at once by default.
pub const DEFAULT_CONNECTS_IN_FLIGHT: usize = 512;
/// All requests of a burst must be answered within this by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct BurstConfig {
    pub target: Target,
    pub connections: usize,
    pub connects_in_flight: usize,
    pub deadline: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct BurstReport {
    pub mode: &'static str,
    pub connections: usize,
    pub ok: u64,
    pub errors: u64,
    pub errors_by_kind: ErrorCounts,
    /// From the start until the last response (or the deadline).
    pub duration_s: f64,
    /// Connect plus request, per connection.
    pub latency_us: LatencySummary,
    #[serde(skip)]
    pub first_errors: Vec<(ErrorKind, String)>,
}

/// The result of one connection of the burst: the connection stays open if it still works.
struct Sent {
    outcome: Result<(), ExchangeError>,
    connection: Option<Connection>,
    latency: Duration,
}

pub async fn run(config: BurstConfig) -> BurstReport {
    let start = Instant::now();
    let deadline = start + config.deadline;
    let limit = super::connect_limit(config.connects_in_flight);
    let mut requests = JoinSet::new();
    for _ in 0..config.connections {
        let (target, limit) = (config.target.clone(), Arc::clone(&limit));
        requests.spawn(send_on_new_connection(target, limit, deadline));
    }
    let tally = Tally::new();
    let mut open = Vec::with_capacity(config.connections);
    while let Some(joined) = requests.join_next().await {
        let sent = joined.expect("burst tasks do not panic");
        tally.record(&sent.outcome, sent.latency);
        open.extend(sent.connection);
    }
    let duration_s = start.elapsed().as_secs_f64();
    super::close_all(open).await;
    let errors = tally.error_counts();
    BurstReport {
        mode: "burst",
        connections: config.connections,
        ok: tally.ok(),
        errors: errors.total(),
        errors_by_kind: errors,
        duration_s,
        latency_us: tally.latency(),
        first_errors: tally.first_errors(),
    }
}

/// Connects (holding a permit of `limit` only while connecting), then sends one GET.
async fn send_on_new_connection(target: Target, limit: Arc<Semaphore>, deadline: Instant) -> Sent {
    let started = Instant::now();
    let connected = tokio::time::timeout_at(deadline, async {
        let _permit = limit.acquire_owned().await.expect("the semaphore is never closed");
        exchange::connect(target.addr).await
    })
    .await
    .unwrap_or(Err(ExchangeError::Timeout));
    let mut connection = match connected {
        Ok(connection) => connection,
        Err(error) => {
            return Sent { outcome: Err(error), connection: None, latency: started.elapsed() }
        }
    };
    let outcome = exchange::by_deadline(deadline, connection.send(target.request(false))).await;
    let still_works = !outcome.as_ref().is_err_and(ExchangeError::ends_connection);
    Sent { outcome, connection: still_works.then_some(connection), latency: started.elapsed() }
}
