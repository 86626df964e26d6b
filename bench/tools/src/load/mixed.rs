//! Closed-loop load from two kinds of worker at once: keep-alive workers that reuse one
//! connection, and closing workers that open a new connection for every request (sent with
//! `Connection: close`). Shows whether connection churn on some clients hurts the rest.
//!
//! Each worker sends its next request when the previous one finished. After a failure it
//! pauses [`ERROR_PAUSE`] so a broken path cannot spin. Bounded: no request starts after
//! `duration`, and each takes at most [`REQUEST_TIMEOUT`].

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::exchange::{self, ErrorKind, ExchangeError, KeepAliveSlot};
use super::tally::{ErrorCounts, Tally};
use super::target::Target;
use super::timeline::{Timeline, TimelineEntry};
use crate::histogram::LatencySummary;

/// A request (connect included) that takes longer is a `timeout`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed request before the worker tries again.
pub const ERROR_PAUSE: Duration = Duration::from_millis(1);

#[derive(Debug, Clone)]
pub struct MixedConfig {
    pub target: Target,
    pub keepalive_workers: usize,
    pub closing_workers: usize,
    pub duration: Duration,
    /// Width of one timeline entry (the last one may be shorter).
    pub interval: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct MixedReport {
    pub mode: &'static str,
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub errors_by_kind: ErrorCounts,
    /// TCP connections opened (closing workers open one per request).
    pub connects: u64,
    /// From the start until the last worker finished its last request.
    pub duration_s: f64,
    pub rps: f64,
    pub latency_us: LatencySummary,
    pub timeline: Vec<TimelineEntry>,
    #[serde(skip)]
    pub first_errors: Vec<(ErrorKind, String)>,
}

/// What every worker of one run shares.
struct MixedRun {
    target: Target,
    end: Instant,
    tally: Tally,
    timeline: Timeline,
}

impl MixedRun {
    /// Counts one finished request that started at `started`; pauses after a failure.
    async fn finish(&self, started: Instant, outcome: &Result<(), ExchangeError>) {
        let now = Instant::now();
        self.tally.record(outcome, now - started);
        self.timeline.record(now, outcome.is_ok());
        if outcome.is_err() {
            tokio::time::sleep(ERROR_PAUSE).await;
        }
    }
}

pub async fn run(config: MixedConfig) -> MixedReport {
    let start = Instant::now();
    let run = Arc::new(MixedRun {
        target: config.target.clone(),
        end: start + config.duration,
        tally: Tally::new(),
        timeline: Timeline::new(start, config.interval, config.duration),
    });
    let mut workers = JoinSet::new();
    for _ in 0..config.keepalive_workers {
        workers.spawn(run_keepalive_worker(Arc::clone(&run)));
    }
    for _ in 0..config.closing_workers {
        workers.spawn(run_closing_worker(Arc::clone(&run)));
    }
    while let Some(joined) = workers.join_next().await {
        joined.expect("mixed workers do not panic");
    }
    report(&run, start.elapsed())
}

async fn run_keepalive_worker(run: Arc<MixedRun>) {
    let mut slot = KeepAliveSlot::new(run.target.addr, None);
    while Instant::now() < run.end {
        let started = Instant::now();
        let outcome = slot.send(run.target.request(false), started + REQUEST_TIMEOUT).await;
        run.finish(started, &outcome).await;
    }
    run.tally.add_connects(slot.connects());
    slot.close().await;
}

async fn run_closing_worker(run: Arc<MixedRun>) {
    while Instant::now() < run.end {
        let started = Instant::now();
        let outcome =
            exchange::by_deadline(started + REQUEST_TIMEOUT, send_on_new_connection(&run)).await;
        run.finish(started, &outcome).await;
    }
}

/// One request with `Connection: close` on a connection of its own. The origin closes after
/// the response; dropping our side lets the driver finish and the socket go.
async fn send_on_new_connection(run: &MixedRun) -> Result<(), ExchangeError> {
    let mut connection = exchange::connect(run.target.addr).await?;
    run.tally.add_connects(1);
    connection.send(run.target.request(true)).await
}

fn report(run: &MixedRun, elapsed: Duration) -> MixedReport {
    let errors = run.tally.error_counts();
    let requests = run.tally.ok() + errors.total();
    let duration_s = elapsed.as_secs_f64();
    MixedReport {
        mode: "mixed",
        requests,
        ok: run.tally.ok(),
        errors: errors.total(),
        errors_by_kind: errors,
        connects: run.tally.connects(),
        duration_s,
        rps: requests as f64 / duration_s.max(f64::EPSILON),
        latency_us: run.tally.latency(),
        timeline: run.timeline.entries(),
        first_errors: run.tally.first_errors(),
    }
}
