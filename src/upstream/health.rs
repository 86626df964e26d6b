//! Decides whether one backend gets traffic, and how much: passive outlier detection from
//! real requests, results of active checks, ejection with exponential back-off, and slow
//! start after an outage.
//!
//! This is a state machine and nothing else: it opens no sockets and runs no timers, and
//! time comes in as an argument. The proxy reports each request's outcome, the active
//! checker (elsewhere) reports each check, and the balancer asks for [`Health::weight`].
//!
//! A backend goes through these states:
//!
//! ```text
//! Healthy --(failure threshold)--> Ejected --(time)--> Recovering --(slow_start)--> Healthy
//!                                     ^                    |
//!                                     +----(failure)-------+
//! any --(failed checks)--> FailingChecks --(passing checks)--> Recovering (or Ejected)
//! ```
//!
//! Healthy is the state almost every request sees, so it costs one relaxed atomic load and
//! takes no lock; everything else is rare and goes through a mutex.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// A backend's share of traffic when nothing is wrong with it (the balancer's scale).
pub use crate::balance::FULL_WEIGHT;

/// The share a backend starts slow start with: enough requests to show at once whether
/// it is still failing, few enough that a backend that is still warming up (caches,
/// JIT, its own connection pools) is not flattened.
const SLOW_START_WEIGHT: u32 = FULL_WEIGHT / 10;

/// Default [`PassiveHealth::max_connect_failures`]: one refused connect can be a restart
/// blip; three in a row is a dead server.
pub const DEFAULT_MAX_CONNECT_FAILURES: u32 = 3;

/// Default [`PassiveHealth::max_5xx`]: higher than for connects, because a 5xx can be one
/// bad request or one broken endpoint on an otherwise working origin; five in a row with
/// no success in between is the origin.
pub const DEFAULT_MAX_5XX: u32 = 5;

/// Default [`PassiveHealth::ejection`]: longer than a typical process restart, short
/// enough that a wrong ejection costs little.
pub const DEFAULT_EJECTION: Duration = Duration::from_secs(5);

/// Default [`PassiveHealth::max_ejection`]: without active checks, letting a backend back
/// in is the only way to learn that it has recovered, so a dead one is tried at least
/// once a minute.
pub const DEFAULT_MAX_EJECTION: Duration = Duration::from_secs(60);

/// Default [`PassiveHealth::slow_start`]: long enough for a freshly started origin to
/// warm up under a growing load instead of taking its full share cold.
pub const DEFAULT_SLOW_START: Duration = Duration::from_secs(10);

/// Default [`PassiveHealth::panic_threshold`]: 0, so health is ignored only when no
/// server of the group is in service. Ejecting every server answers every request with
/// a 502 until an ejection expires, which is a longer outage than the one it reacts to;
/// sending to all of them instead ends the outage the moment one is back. A higher
/// value (Envoy uses 50%) also spreads load over failing servers before all are out.
pub const DEFAULT_PANIC_THRESHOLD: u8 = 0;

/// While a backend is ejected because connects to it failed, a connect is tried this
/// long after the ejection, then at twice the previous wait up to [`PROBE_MAX_WAIT`]:
/// a restarted origin is back in service within half a second of accepting
/// connections, not when the ejection ends.
pub const PROBE_FIRST_WAIT: Duration = Duration::from_millis(100);

/// The longest wait between two connect probes of an ejected backend.
pub const PROBE_MAX_WAIT: Duration = Duration::from_millis(300);

/// How long one connect probe may take: a backend that needs longer to accept is not
/// ready for requests.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Default [`CheckThresholds::unhealthy`]: one lost check can be a dropped packet.
pub const DEFAULT_UNHEALTHY_CHECKS: u32 = 2;

/// Default [`CheckThresholds::healthy`]: one passing check can be a process that answers
/// while it is still starting up or going down.
pub const DEFAULT_HEALTHY_CHECKS: u32 = 2;

/// Passive health settings of an upstream group: what real requests must do to get a
/// backend ejected, and how it comes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassiveHealth {
    /// Consecutive failed connects that eject a backend; 0 disables.
    pub max_connect_failures: u32,
    /// Consecutive 5xx responses (from the origin, or holdfast's own 502/504 for a
    /// response that failed or timed out) that eject a backend; 0 disables.
    pub max_5xx: u32,
    /// The first ejection's length; each further ejection in a row doubles it.
    pub ejection: Duration,
    /// The longest ejection.
    pub max_ejection: Duration,
    /// After an outage ends, the backend's share of traffic ramps from a tenth to all of
    /// [`FULL_WEIGHT`] over this long; zero gives the full share at once.
    pub slow_start: Duration,
    /// When fewer than this percentage of a group's servers are in service, health is
    /// ignored and requests go to every server (Envoy's panic threshold). Whatever the
    /// value, a group with no server in service sends to all of them.
    pub panic_threshold: u8,
}

impl Default for PassiveHealth {
    fn default() -> Self {
        PassiveHealth {
            max_connect_failures: DEFAULT_MAX_CONNECT_FAILURES,
            max_5xx: DEFAULT_MAX_5XX,
            ejection: DEFAULT_EJECTION,
            max_ejection: DEFAULT_MAX_EJECTION,
            slow_start: DEFAULT_SLOW_START,
            panic_threshold: DEFAULT_PANIC_THRESHOLD,
        }
    }
}

/// How many active checks in a row change a backend's standing. The checker task that
/// runs them lives elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckThresholds {
    /// Consecutive failed checks that take a backend out of service; 0 counts as 1.
    pub unhealthy: u32,
    /// Consecutive passing checks that bring it back; 0 counts as 1.
    pub healthy: u32,
}

impl Default for CheckThresholds {
    fn default() -> Self {
        CheckThresholds { unhealthy: DEFAULT_UNHEALTHY_CHECKS, healthy: DEFAULT_HEALTHY_CHECKS }
    }
}

/// Why a backend is (or last was) out of service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    ConnectFailures,
    ServerErrors,
    FailedChecks,
}

impl Cause {
    /// The name used in logs, metric labels and `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::ConnectFailures => "connect_failures",
            Cause::ServerErrors => "server_errors",
            Cause::FailedChecks => "failed_checks",
        }
    }
}

/// A change the caller acts on: log it, and on an ejection close the backend's idle
/// connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Passive detection took the backend out for `for_`.
    Ejected { cause: Cause, for_: Duration },
    /// A connect probe reached a backend ejected for failed connects: its ejection
    /// ended early, and it is in slow start.
    Reachable,
    /// Active checks took the backend out.
    CheckFailed,
    /// Active checks let the backend back in; it starts with slow start, or stays out
    /// until a passive ejection still running ends.
    CheckPassed,
}

/// Where a backend stands, as `/status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// In service with its full share.
    Healthy,
    /// Out of service until its ejection ends.
    Ejected,
    /// In slow start after an outage.
    Recovering,
    /// Out of service until active checks pass again.
    FailingChecks,
}

impl State {
    /// The name used in logs, metric labels and `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Ejected => "ejected",
            State::Recovering => "recovering",
            State::FailingChecks => "failing_checks",
        }
    }
}

/// A backend's health at one instant, for `/status`.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthSnapshot {
    /// `FailingChecks` wins over `Ejected` when both hold: an ejection ends by itself,
    /// failing checks need the origin to change. `ejected_for` still shows the ejection.
    pub state: State,
    /// Why the backend is out, or what it is recovering from; `None` when healthy.
    pub cause: Option<Cause>,
    /// Time left of a passive ejection, whatever the state.
    pub ejected_for: Option<Duration>,
    /// Passive ejections since start.
    pub ejections: u64,
    /// The share of traffic now, as [`Health::weight`] gives it.
    pub weight: u32,
}

/// A request outcome that counts against a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Connect,
    ServerError,
}

impl Failure {
    fn cause(self) -> Cause {
        match self {
            Failure::Connect => Cause::ConnectFailures,
            Failure::ServerError => Cause::ServerErrors,
        }
    }

    /// Failures in a row that eject; 0 disables.
    fn limit(self, passive: &PassiveHealth) -> u32 {
        match self {
            Failure::Connect => passive.max_connect_failures,
            Failure::ServerError => passive.max_5xx,
        }
    }
}

/// Bit of [`Health::word`]: an outage has not fully ended yet (the backend is ejected,
/// or waits for an ejection to end, or is in slow start); see [`Health::resume_at`].
const RESUMING: u32 = 1;
/// Bit of [`Health::word`]: active checks hold the backend out of service.
const FAILING_CHECKS: u32 = 2;

/// The health of one backend, shared by every request to it.
///
/// The hot path reads atomics only: [`Health::weight`] of a healthy backend is one load,
/// [`Health::on_success`] two loads. Transitions take a mutex and decide under it, and
/// publish the outcome to the atomics for lock-free readers.
///
/// # Races
/// Requests finish on many threads at once. When several of them reach a failure
/// threshold together, each takes the lock and the first ejects; the others find the
/// backend already ejected and report nothing, so the caller sees one
/// [`Transition::Ejected`]. Failures that complete while a backend is out of service
/// were sent before it went out and say nothing new; they are dropped.
///
/// A failure counted by a thread that has not yet seen an ejection published can
/// survive the counter reset and count towards the next threshold; the next success
/// clears it.
///
/// [`Health::weight`] reads the state word and the resume time without the lock. The
/// word is stored last, with release ordering, so a reader that sees it leave 0 also
/// sees the resume time stored with it. A reader racing a second ejection of a
/// recovering backend can, for a moment, still see the old resume time and give the
/// backend its slow-start share.
pub struct Health {
    /// 0 while healthy (the fast path), else `RESUMING` and/or `FAILING_CHECKS`.
    /// Written only under `inner`'s lock.
    word: AtomicU32,
    /// Mirror of the resume time in `inner`, in nanoseconds since `epoch`, for
    /// lock-free readers.
    resume_at: AtomicU64,
    /// The instant `resume_at` counts from: the first transition's `now`. Set once,
    /// before the word first leaves 0.
    epoch: OnceLock<Instant>,
    /// Consecutive failed connects; reset by a success and by an ejection.
    connect_failures: AtomicU32,
    /// Consecutive 5xx responses; reset by a success and by an ejection.
    server_errors: AtomicU32,
    /// Ejections since the last success: the back-off exponent. Incremented under
    /// `inner`'s lock; reset by any success, so the back-off doubles only while failures
    /// go on.
    ejections_in_a_row: AtomicU32,
    inner: Mutex<Inner>,
}

/// The state transitions decide on; guarded by [`Health::inner`].
#[derive(Debug, Default)]
struct Inner {
    /// Ejections since start.
    ejections: u64,
    /// The last passive ejection, until the backend is fully healthy again.
    ejection: Option<Ejection>,
    /// When and from what the backend comes back; `None` while fully healthy.
    resume: Option<Resume>,
    checks: CheckStreak,
}

#[derive(Debug, Clone, Copy)]
struct Ejection {
    cause: Cause,
    until: Instant,
}

/// The end of an outage: weight 0 before `at`, slow start from it.
#[derive(Debug, Clone, Copy)]
struct Resume {
    at: Instant,
    after: Cause,
}

#[derive(Debug, Default)]
struct CheckStreak {
    /// Active checks hold the backend out of service.
    failing: bool,
    failed_in_a_row: u32,
    passed_in_a_row: u32,
}

impl Inner {
    fn is_ejected(&self, now: Instant) -> bool {
        self.ejection.is_some_and(|e| e.until > now)
    }

    fn is_out(&self, now: Instant) -> bool {
        self.checks.failing || self.is_ejected(now)
    }

    fn weight(&self, now: Instant, passive: &PassiveHealth) -> u32 {
        if self.checks.failing {
            return 0;
        }
        match self.resume {
            None => FULL_WEIGHT,
            Some(resume) => match now.checked_duration_since(resume.at) {
                None => 0,
                Some(elapsed) => ramp_weight(elapsed, passive.slow_start),
            },
        }
    }

    /// Ends slow start once it has run its course: the backend is healthy again and its
    /// back-off starts over. Returns whether anything changed.
    fn settle(&mut self, now: Instant, passive: &PassiveHealth) -> bool {
        let Some(resume) = self.resume else { return false };
        let ramped = now.checked_duration_since(resume.at).is_some_and(|e| e >= passive.slow_start);
        if self.checks.failing || !ramped {
            return false;
        }
        self.resume = None;
        self.ejection = None;
        true
    }

    fn state(&self, now: Instant) -> State {
        if self.checks.failing {
            State::FailingChecks
        } else if self.is_ejected(now) {
            State::Ejected
        } else if self.resume.is_some() {
            State::Recovering
        } else {
            State::Healthy
        }
    }

    fn word(&self) -> u32 {
        let resuming = if self.resume.is_some() { RESUMING } else { 0 };
        let failing = if self.checks.failing { FAILING_CHECKS } else { 0 };
        resuming | failing
    }
}

/// The share of traffic `elapsed` into slow start: linear from [`SLOW_START_WEIGHT`]
/// to [`FULL_WEIGHT`].
fn ramp_weight(elapsed: Duration, slow_start: Duration) -> u32 {
    if elapsed >= slow_start {
        return FULL_WEIGHT;
    }
    let span = u128::from(FULL_WEIGHT - SLOW_START_WEIGHT);
    // elapsed < slow_start, so the quotient is below `span` and fits in a u32.
    let gained = span * elapsed.as_nanos() / slow_start.as_nanos();
    SLOW_START_WEIGHT + u32::try_from(gained).expect("gained is below FULL_WEIGHT")
}

/// No ejection lasts longer, whatever the settings: longer than any process runs, and
/// short enough that `now` plus an ejection cannot overflow an `Instant`.
const LONGEST_EJECTION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// How long the `in_a_row`-th ejection in a row lasts: doubling from `ejection`, capped.
fn ejection_length(passive: &PassiveHealth, in_a_row: u32) -> Duration {
    // Past 2^31 the cap has long been reached; the saturating product stays correct.
    let factor = 1u32 << in_a_row.saturating_sub(1).min(31);
    passive.ejection.saturating_mul(factor).min(passive.max_ejection).min(LONGEST_EJECTION)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Default for Health {
    fn default() -> Self {
        Health::new()
    }
}

impl Health {
    /// A healthy backend.
    pub fn new() -> Health {
        Health {
            word: AtomicU32::new(0),
            resume_at: AtomicU64::new(0),
            epoch: OnceLock::new(),
            connect_failures: AtomicU32::new(0),
            server_errors: AtomicU32::new(0),
            ejections_in_a_row: AtomicU32::new(0),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The backend's share of traffic now: [`FULL_WEIGHT`] when healthy, 0 while ejected
    /// or failing active checks, and during slow start a share rising linearly from a
    /// tenth of [`FULL_WEIGHT`] to all of it.
    ///
    /// Takes no lock except once, when slow start has run its course and the backend is
    /// marked healthy again.
    pub fn weight(&self, now: Instant, passive: &PassiveHealth) -> u32 {
        let word = self.word.load(Ordering::Relaxed);
        if word == 0 {
            return FULL_WEIGHT;
        }
        if word & FAILING_CHECKS != 0 {
            return 0;
        }
        // Pairs with the release store of the word: the resume time read below is at
        // least as new as the word read above.
        fence(Ordering::Acquire);
        let epoch = self.epoch.get().expect("the epoch is set before the word leaves 0");
        let since_epoch = nanos(now.saturating_duration_since(*epoch));
        let resume_at = self.resume_at.load(Ordering::Relaxed);
        let Some(elapsed) = since_epoch.checked_sub(resume_at) else { return 0 };
        let elapsed = Duration::from_nanos(elapsed);
        if elapsed < passive.slow_start {
            return ramp_weight(elapsed, passive.slow_start);
        }
        self.settled_weight(now, passive)
    }

    /// Whether the backend is plainly healthy: in service, nothing pending. One relaxed
    /// load; false means "ask [`Health::weight`]", not "down".
    pub fn is_healthy(&self) -> bool {
        self.word.load(Ordering::Relaxed) == 0
    }

    /// Whether the backend is out of service (weight 0) now.
    #[cfg(test)]
    pub fn is_down(&self, now: Instant, passive: &PassiveHealth) -> bool {
        self.weight(now, passive) == 0
    }

    /// A response that counts as a success (not a 5xx): the failure streaks end, and
    /// the next ejection, if any, is the first of a new series. Stores only when a
    /// streak is running, so that backends under load do not bounce the counters'
    /// cache line between cores.
    pub fn on_success(&self) {
        for counter in [&self.connect_failures, &self.server_errors, &self.ejections_in_a_row] {
            if counter.load(Ordering::Relaxed) != 0 {
                counter.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Whether a connect probe should still run: the backend is ejected because
    /// connects failed, and the ejection has not ended.
    pub fn awaits_probe(&self, now: Instant) -> bool {
        let inner = self.lock();
        inner.ejection.is_some_and(|e| e.cause == Cause::ConnectFailures && e.until > now)
    }

    /// A connect probe got through to a backend ejected for failed connects: the
    /// ejection ends now, and slow start begins. The back-off is kept until a request
    /// succeeds (accepting a connection is not yet serving).
    pub fn on_probe_connected(&self, now: Instant) -> Option<Transition> {
        let mut inner = self.lock();
        let ejection = inner.ejection.filter(|e| e.cause == Cause::ConnectFailures)?;
        if ejection.until <= now {
            return None;
        }
        inner.ejection = Some(Ejection { until: now, ..ejection });
        if !inner.checks.failing {
            inner.resume = Some(Resume { at: now, after: ejection.cause });
        }
        self.publish(&inner, now);
        Some(Transition::Reachable)
    }

    /// A connect to the backend failed (refused, reset, timed out).
    ///
    /// Ejects at `max_connect_failures` in a row, and during slow start at the first
    /// one: a backend that has just come back and refuses a connect is still down.
    pub fn on_connect_failure(&self, now: Instant, passive: &PassiveHealth) -> Option<Transition> {
        self.on_failure(Failure::Connect, now, passive)
    }

    /// A 5xx response: from the origin, or holdfast's own 502/504 for a response that
    /// failed or timed out. Ejects at `max_5xx` in a row, in slow start as well: a few
    /// errors are what slow start's small share is there to absorb.
    pub fn on_server_error(&self, now: Instant, passive: &PassiveHealth) -> Option<Transition> {
        self.on_failure(Failure::ServerError, now, passive)
    }

    /// The result of one active check. Active checks are independent of passive
    /// ejection: a backend both ejected and failing checks stays out until both end.
    pub fn on_check(
        &self,
        passed: bool,
        now: Instant,
        thresholds: &CheckThresholds,
    ) -> Option<Transition> {
        let mut inner = self.lock();
        let checks = &mut inner.checks;
        if passed {
            checks.failed_in_a_row = 0;
            checks.passed_in_a_row = checks.passed_in_a_row.saturating_add(1);
            if !checks.failing || checks.passed_in_a_row < thresholds.healthy.max(1) {
                return None;
            }
            checks.failing = false;
            // Slow start begins now, or when a passive ejection still running ends.
            let resume = match inner.ejection {
                Some(e) if e.until > now => Resume { at: e.until, after: e.cause },
                _ => Resume { at: now, after: Cause::FailedChecks },
            };
            inner.resume = Some(resume);
            self.publish(&inner, now);
            Some(Transition::CheckPassed)
        } else {
            checks.passed_in_a_row = 0;
            checks.failed_in_a_row = checks.failed_in_a_row.saturating_add(1);
            if checks.failing || checks.failed_in_a_row < thresholds.unhealthy.max(1) {
                return None;
            }
            checks.failing = true;
            self.publish(&inner, now);
            Some(Transition::CheckFailed)
        }
    }

    /// Where the backend stands now, for `/status`.
    pub fn snapshot(&self, now: Instant, passive: &PassiveHealth) -> HealthSnapshot {
        let mut inner = self.lock();
        self.settle(&mut inner, now, passive);
        let state = inner.state(now);
        let cause = match state {
            State::Healthy => None,
            State::Ejected => inner.ejection.map(|e| e.cause),
            State::Recovering => inner.resume.map(|r| r.after),
            State::FailingChecks => Some(Cause::FailedChecks),
        };
        let ejected_for = inner
            .ejection
            .and_then(|e| e.until.checked_duration_since(now))
            .filter(|d| !d.is_zero());
        HealthSnapshot {
            state,
            cause,
            ejected_for,
            ejections: inner.ejections,
            weight: inner.weight(now, passive),
        }
    }

    /// Counts a failure; takes the lock only at the threshold or when the backend is not
    /// healthy.
    fn on_failure(
        &self,
        failure: Failure,
        now: Instant,
        passive: &PassiveHealth,
    ) -> Option<Transition> {
        let limit = failure.limit(passive);
        if limit == 0 {
            return None;
        }
        let counter = match failure {
            Failure::Connect => &self.connect_failures,
            Failure::ServerError => &self.server_errors,
        };
        let in_a_row = counter.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if in_a_row < limit && self.word.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut inner = self.lock();
        self.settle(&mut inner, now, passive);
        if inner.is_out(now) {
            counter.store(0, Ordering::Relaxed);
            return None;
        }
        let in_slow_start = inner.resume.is_some();
        let ejects = in_a_row >= limit || (in_slow_start && failure == Failure::Connect);
        if !ejects {
            return None;
        }
        Some(self.eject(&mut inner, failure.cause(), now, passive))
    }

    fn eject(
        &self,
        inner: &mut Inner,
        cause: Cause,
        now: Instant,
        passive: &PassiveHealth,
    ) -> Transition {
        let in_a_row = self.ejections_in_a_row.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        inner.ejections += 1;
        let for_ = ejection_length(passive, in_a_row);
        let until = now + for_;
        inner.ejection = Some(Ejection { cause, until });
        inner.resume = Some(Resume { at: until, after: cause });
        self.connect_failures.store(0, Ordering::Relaxed);
        self.server_errors.store(0, Ordering::Relaxed);
        self.publish(inner, now);
        Transition::Ejected { cause, for_ }
    }

    /// Copies `inner`'s standing to the atomics lock-free readers use. Called under the
    /// lock after every change.
    fn publish(&self, inner: &Inner, now: Instant) {
        let epoch = *self.epoch.get_or_init(|| now);
        if let Some(resume) = inner.resume {
            let at = nanos(resume.at.saturating_duration_since(epoch));
            self.resume_at.store(at, Ordering::Relaxed);
        }
        self.word.store(inner.word(), Ordering::Release);
    }

    /// Ends slow start if it has run its course: the backend is fully healthy, and its
    /// back-off starts over.
    fn settle(&self, inner: &mut Inner, now: Instant, passive: &PassiveHealth) {
        if inner.settle(now, passive) {
            self.ejections_in_a_row.store(0, Ordering::Relaxed);
            self.publish(inner, now);
        }
    }

    /// The weight computed under the lock, after ending slow start if it is over.
    fn settled_weight(&self, now: Instant, passive: &PassiveHealth) -> u32 {
        let mut inner = self.lock();
        self.settle(&mut inner, now, passive);
        inner.weight(now, passive)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing here panics while holding the lock, and every field is valid on its
        // own, so a poisoned lock still holds a usable state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
