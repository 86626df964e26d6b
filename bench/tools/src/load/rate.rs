//! Open-loop load at a fixed rate: request `n` is due at `start + n / rate` and goes out on
//! connection `n % connections`, whatever happened to earlier requests.
//!
//! Each connection is HTTP/1.1 keep-alive without pipelining: a connection still busy when a
//! request falls due sends it as soon as the previous response is in, and that request's
//! latency counts from its *due* time, so a proxy that stalls shows up in every request that
//! queued behind the stall (no coordinated omission, as in wrk2). A request whose connection
//! was idle when it fell due counts from when it was actually sent: the gap between the two is
//! our own timer's lateness (tokio timers tick in whole milliseconds), not the proxy's, and is
//! reported separately as `max_send_lag_us`.
//!
//! Each connection is a [`RawSlot`], the minimal HTTP/1.1 client of [`super::raw`], not a
//! hyper client connection: the requests are serialized up front and the worker's own task
//! writes each one and reads its response, with no driver task between. In the benchmark
//! bench-load shares a core with the origin, and with hyper's cost per request it fell
//! behind its schedule by milliseconds, as much as the tails it measures.
//!
//! Bounded: nothing is sent for due times past `warmup + duration`, and everything stops
//! [`DRAIN`] after that; requests due in the window but never sent by then are `unsent`.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::exchange::{ErrorKind, ExchangeError};
use super::hosts::HostSchedule;
use super::raw::{self, RawSlot};
use super::tally::{ErrorCounts, Tally};
use super::target::Target;
use crate::histogram::LatencySummary;

/// How long requests due before the end may take to finish after it.
pub const DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct RateConfig {
    pub target: Target,
    /// Requests per second over all connections.
    pub rate: f64,
    /// How long requests are recorded, after the warm-up.
    pub duration: Duration,
    pub connections: usize,
    /// Requests due in this first stretch go out as usual but are not recorded.
    pub warmup: Duration,
    /// Connects in flight at once while opening the connections up front.
    pub connects_in_flight: usize,
    /// Each request's `Host` from this schedule (`bench-load hosts`); None: the URL's.
    pub hosts: Option<Arc<HostSchedule>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RateReport {
    pub mode: &'static str,
    /// Recorded requests that finished: `ok + non_2xx + socket_errors`.
    pub requests: u64,
    pub ok: u64,
    pub non_2xx: u64,
    /// Connect failures, broken connections and requests cut off by the drain deadline.
    pub socket_errors: u64,
    /// Due in the recorded window but never sent before the drain deadline.
    pub unsent: u64,
    /// TCP connections opened over the whole run (warm-up included).
    pub connects: u64,
    /// Largest delay between due time and send on an idle connection: this generator's own
    /// timer and CPU lateness. Milliseconds here mean the generator is saturated.
    pub max_send_lag_us: u64,
    /// The recorded window: `duration`, or longer if the last requests finished later.
    pub duration_s: f64,
    pub rps: f64,
    pub target_rate: f64,
    pub latency_us: LatencySummary,
    pub errors_by_kind: ErrorCounts,
    #[serde(skip)]
    pub first_errors: Vec<(ErrorKind, String)>,
}

/// When each request is due, and which of them are recorded.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    start: Instant,
    rate: f64,
    connections: u64,
    /// Requests due before this offset are warm-up.
    recorded_from: Duration,
    /// Requests due at or after this offset are not sent.
    end: Duration,
}

impl Schedule {
    fn due_offset(&self, n: u64) -> Duration {
        Duration::from_secs_f64(n as f64 / self.rate)
    }

    fn is_recorded(&self, n: u64) -> bool {
        self.due_offset(n) >= self.recorded_from
    }

    /// Requests of connection `worker` from `n` on (stepping by `connections`) that are due
    /// in the recorded window.
    fn recorded_from_n(&self, mut n: u64) -> u64 {
        let mut count = 0;
        while self.due_offset(n) < self.end {
            count += u64::from(self.is_recorded(n));
            n += self.connections;
        }
        count
    }
}

pub async fn run(config: RateConfig) -> RateReport {
    let tally = Arc::new(Tally::new());
    let slots = open_slots(&config, &tally).await;
    let schedule = Schedule {
        start: Instant::now(),
        rate: config.rate,
        connections: slots.len() as u64,
        recorded_from: config.warmup,
        end: config.warmup + config.duration,
    };
    let drain_deadline = schedule.start + schedule.end + DRAIN;
    let mut workers = JoinSet::new();
    let plain: Arc<[u8]> = config.target.get_bytes().into();
    for (worker, slot) in slots.into_iter().enumerate() {
        let requests = Requests::new(&config, Arc::clone(&plain));
        workers.spawn(send_due_requests(
            schedule,
            worker as u64,
            slot,
            requests,
            Arc::clone(&tally),
            drain_deadline,
        ));
    }
    let mut total = WorkerResult::default();
    while let Some(joined) = workers.join_next().await {
        let result = joined.expect("rate workers do not panic");
        total.unsent += result.unsent;
        total.max_send_lag = total.max_send_lag.max(result.max_send_lag);
    }
    let recorded_for = (Instant::now() - schedule.start).saturating_sub(config.warmup);
    report(&config, &tally, total, recorded_for.max(config.duration))
}

/// Opens every connection before the clock starts, so the first recorded requests do not
/// pay for connects. A connection that fails to open is opened again by its first request.
async fn open_slots(config: &RateConfig, tally: &Arc<Tally>) -> Vec<RawSlot> {
    let limit = super::connect_limit(config.connects_in_flight);
    let mut connecting = JoinSet::new();
    for index in 0..config.connections.max(1) {
        let (addr, limit) = (config.target.addr, Arc::clone(&limit));
        connecting.spawn(async move {
            let _permit = limit.acquire_owned().await.expect("the semaphore is never closed");
            (index, raw::connect(addr).await.ok())
        });
    }
    let mut slots: Vec<Option<RawSlot>> = (0..config.connections.max(1)).map(|_| None).collect();
    while let Some(joined) = connecting.join_next().await {
        let (index, connection) = joined.expect("connect tasks do not panic");
        tally.add_connects(u64::from(connection.is_some()));
        slots[index] = Some(RawSlot::new(config.target.addr, connection));
    }
    slots.into_iter().map(|slot| slot.expect("every index was filled")).collect()
}

/// What one connection's worker reports besides the shared tally.
#[derive(Debug, Default, Clone, Copy)]
struct WorkerResult {
    /// Recorded requests never sent (the drain deadline came first).
    unsent: u64,
    /// See [`RateReport::max_send_lag_us`]; recorded requests only.
    max_send_lag: Duration,
}

/// One worker's requests as they go on the wire: the target's GET, serialized once for all
/// workers, or with the host schedule's `Host` put together per request in a buffer the
/// worker reuses.
#[derive(Debug)]
struct Requests {
    plain: Arc<[u8]>,
    target: Target,
    hosts: Option<Arc<HostSchedule>>,
    scratch: Vec<u8>,
}

impl Requests {
    /// The requests of `config`; `plain` is its target's serialized GET.
    fn new(config: &RateConfig, plain: Arc<[u8]>) -> Self {
        Self {
            scratch: Vec::with_capacity(plain.len().saturating_mul(2)),
            plain,
            target: config.target.clone(),
            hosts: config.hosts.clone(),
        }
    }

    /// Request `n`, due at `due_offset` from the start.
    fn nth(&mut self, n: u64, due_offset: Duration) -> &[u8] {
        let Some(hosts) = &self.hosts else {
            return &self.plain;
        };
        self.scratch.clear();
        self.target.write_get(hosts.host_for(n, due_offset).as_bytes(), &mut self.scratch);
        &self.scratch
    }
}

/// Sends the requests of connection `worker` (`worker`, `worker + connections`, ...) at their
/// due times.
async fn send_due_requests(
    schedule: Schedule,
    worker: u64,
    mut slot: RawSlot,
    mut requests: Requests,
    tally: Arc<Tally>,
    drain_deadline: Instant,
) -> WorkerResult {
    let mut result = WorkerResult::default();
    let mut n = worker;
    loop {
        let due_offset = schedule.due_offset(n);
        if due_offset >= schedule.end {
            break;
        }
        let due = schedule.start + due_offset;
        let was_idle = Instant::now() <= due;
        tokio::time::sleep_until(due).await;
        let sent = Instant::now();
        let outcome = slot.send(requests.nth(n, due_offset), drain_deadline).await;
        if schedule.is_recorded(n) {
            let latency_from = if was_idle { sent } else { due };
            tally.record(&outcome, latency_from.elapsed());
            if was_idle {
                result.max_send_lag = result.max_send_lag.max(sent - due);
            }
        }
        n += schedule.connections;
        if matches!(outcome, Err(ExchangeError::Timeout)) {
            result.unsent = schedule.recorded_from_n(n);
            break;
        }
    }
    tally.add_connects(slot.connects());
    slot.close().await;
    result
}

fn report(
    config: &RateConfig,
    tally: &Tally,
    workers: WorkerResult,
    recorded_for: Duration,
) -> RateReport {
    let errors = tally.error_counts();
    let requests = tally.ok() + errors.total();
    let duration_s = recorded_for.as_secs_f64();
    RateReport {
        mode: "rate",
        requests,
        ok: tally.ok(),
        non_2xx: errors.non_2xx(),
        socket_errors: errors.socket_errors(),
        unsent: workers.unsent,
        connects: tally.connects(),
        max_send_lag_us: u64::try_from(workers.max_send_lag.as_micros()).unwrap_or(u64::MAX),
        duration_s,
        rps: requests as f64 / duration_s.max(f64::EPSILON),
        target_rate: config.rate,
        latency_us: tally.latency(),
        errors_by_kind: errors,
        first_errors: tally.first_errors(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::hosts::HostsSettings;

    #[test]
    fn requests_carry_the_urls_host_or_the_scheduled_one() {
        let config = RateConfig {
            target: Target::parse("http://127.0.0.1:8080/tiny").expect("valid"),
            rate: 1.0,
            duration: Duration::from_secs(1),
            connections: 1,
            warmup: Duration::ZERO,
            connects_in_flight: 1,
            hosts: None,
        };
        let mut plain = Requests::new(&config, config.target.get_bytes().into());
        let expected: &[u8] = b"GET /tiny HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";
        assert_eq!(plain.nth(7, Duration::ZERO), expected);

        let schedule = Arc::new(
            HostSchedule::new(&HostsSettings {
                pattern: "app{}.bench".to_owned(),
                steady: 3,
                bursty: 0,
                idle: Duration::from_secs(1),
                burst: Duration::from_secs(1),
            })
            .expect("valid schedule"),
        );
        let hosts = RateConfig { hosts: Some(Arc::clone(&schedule)), ..config };
        let mut scheduled = Requests::new(&hosts, hosts.target.get_bytes().into());
        for n in 0..20 {
            let host = schedule.pick(n, Duration::ZERO).1.to_str().expect("ASCII");
            let expected = format!("GET /tiny HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(scheduled.nth(n, Duration::ZERO), expected.as_bytes(), "{n}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_spreads_requests_evenly_and_skips_warmup() {
        let schedule = Schedule {
            start: Instant::now(),
            rate: 100.0,
            connections: 4,
            recorded_from: Duration::from_millis(500),
            end: Duration::from_millis(1_500),
        };
        assert_eq!(schedule.due_offset(50), Duration::from_millis(500));
        assert!(!schedule.is_recorded(49));
        assert!(schedule.is_recorded(50));
        // Due in [0.5 s, 1.5 s): n = 50..150, a quarter of them on each connection.
        let per_connection: u64 = (0..4).map(|worker| schedule.recorded_from_n(worker)).sum();
        assert_eq!(per_connection, 100);
    }
}
