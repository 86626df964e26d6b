//! The idle stack: checkout takes the most recently used connection, release puts it
//! back, unless demand, limits or the global budget say it should close.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::bound::Bound;
use crate::budget::IdleBudget;
use crate::queue::ConnectPermit;
use crate::{CloseReason, PoolConfig, PoolStats, Poolable};

/// How long one demand window lasts. The idle bound is the peak of in-flight requests
/// over the current and the previous window, so a burst is remembered for 10 to 20 s
/// and then forgotten: idle connections it left behind are closed.
pub(crate) const DEMAND_WINDOW: Duration = Duration::from_secs(10);

/// Connections to one backend: idle ones (most recently used last), and the count of
/// all open ones for `max_connections`.
///
/// Cheap to clone; clones share the same connections.
pub struct Pool<C: Poolable> {
    pub(crate) inner: Arc<Inner<C>>,
}

impl<C: Poolable> Clone for Pool<C> {
    fn clone(&self) -> Self {
        Pool { inner: Arc::clone(&self.inner) }
    }
}

pub(crate) struct Inner<C> {
    /// The limits, counters and slots under `max_connections`, shared with the
    /// backend's shared connections ([`crate::SharedPool`]) when it has any.
    pub(crate) bound: Arc<Bound>,
    state: Mutex<State<C>>,
    budget: Option<Arc<IdleBudget>>,
    /// Set by [`Pool::retire`]: connections coming back close instead of idling.
    retired: AtomicBool,
    /// Hears of idle connections found not open.
    closed_hook: Option<ClosedHook<C>>,
}

struct State<C> {
    idle: Vec<Idle<C>>,
    demand: Demand,
}

/// Peak in-flight requests over the current and the previous [`DEMAND_WINDOW`].
#[derive(Debug)]
struct Demand {
    peak_now: usize,
    peak_before: usize,
    window_start: Instant,
    /// `window_start + DEMAND_WINDOW`, kept so most calls compare one instant.
    window_end: Instant,
}

impl Demand {
    fn new(now: Instant) -> Self {
        Demand { peak_now: 0, peak_before: 0, window_start: now, window_end: now + DEMAND_WINDOW }
    }

    fn observe(&mut self, in_flight: usize, now: Instant) {
        self.rotate(now);
        self.peak_now = self.peak_now.max(in_flight);
    }

    fn rotate(&mut self, now: Instant) {
        if now < self.window_end {
            return;
        }
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed >= DEMAND_WINDOW * 2 {
            (self.peak_before, self.peak_now) = (0, 0);
            self.window_start = now;
            self.window_end = now + DEMAND_WINDOW;
        } else if elapsed >= DEMAND_WINDOW {
            self.peak_before = std::mem::take(&mut self.peak_now);
            self.window_start += DEMAND_WINDOW;
            self.window_end += DEMAND_WINDOW;
        }
    }

    /// The most requests recently in flight at once.
    fn recent_peak(&self) -> usize {
        self.peak_now.max(self.peak_before)
    }
}

/// What the pool remembers about a connection across uses.
///
/// Kept small: an idle entry and a [`Pooled`] of up to 128 bytes are moved as inline
/// copies, larger ones through `memcpy` calls, a few hundred instructions per request
/// on the checkout and release path. So the origin's limits are kept as plain values.
#[derive(Debug, Clone, Copy)]
struct Life {
    /// When `max_lifetime` runs out (`None`: no limit).
    expires_at: Option<Instant>,
    /// Requests sent on it so far, the one in flight included.
    requests: u64,
    /// The origin's idle limit, when it advertised one (`Keep-Alive: timeout`).
    origin_idle: Option<Duration>,
    /// Further requests the origin accepts, when it said (`Keep-Alive: max`);
    /// `u64::MAX` when it did not.
    origin_remaining: u64,
    /// The caller's mark ([`Pooled::set_mark`]).
    mark: u32,
}

/// Hears of each idle connection the pool finds not open ([`Poolable::is_open`]),
/// just before the pool drops it, with what the pool knows of it. The pool decides
/// nothing from it; a caller may learn from when its peer closes.
pub type ClosedHook<C> = Box<dyn Fn(&C, ClosedWhileIdle) + Send + Sync>;

/// An idle connection the pool found not open, as its [`ClosedHook`] hears of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosedWhileIdle {
    /// Requests it carried, every one of them answered.
    pub requests: u64,
    /// From its release after the last of them to when the close was found.
    pub idle_for: Duration,
    /// When the close was found. Connections found closed in one look at the pool
    /// (one checkout, one eviction pass) share it.
    pub found_at: Instant,
    /// The caller's mark on it ([`Pooled::set_mark`]).
    pub mark: u32,
}

/// Limits an origin advertised for one connection; they tighten the pool's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OriginLimits {
    /// Longest the connection may stay idle before the origin would close it, already
    /// less a safety margin.
    pub idle: Option<Duration>,
    /// Further requests the origin accepts on the connection after the current one.
    pub remaining_requests: Option<u64>,
}

struct Idle<C> {
    conn: C,
    life: Life,
    idle_since: Instant,
    /// When it has idled too long: the pool's `idle_timeout`, or the origin's shorter one.
    idle_until: Instant,
}

/// A connection taken out of the pool (or newly opened) for one request.
///
/// It goes back only through [`Pooled::release`]. Dropping it closes it and counts
/// an error: a connection whose exchange did not finish cleanly must never be reused.
pub struct Pooled<C: Poolable> {
    conn: Option<C>,
    life: Life,
    reused: bool,
    /// How long it sat idle before this checkout (zero for a new connection).
    idle_for: Duration,
    pool: Pool<C>,
}

impl<C: Poolable> Pooled<C> {
    /// The connection.
    pub fn get(&self) -> &C {
        self.conn.as_ref().expect("a Pooled holds its connection until consumed")
    }

    /// The connection, to use it.
    pub fn conn(&mut self) -> &mut C {
        self.conn.as_mut().expect("a Pooled holds its connection until consumed")
    }

    /// Whether it came from the idle pool rather than a fresh connect.
    pub fn is_reused(&self) -> bool {
        self.reused
    }

    /// How long it sat idle in the pool before this checkout (zero for a new one).
    pub fn idle_for(&self) -> Duration {
        self.idle_for
    }

    /// How many requests it has carried, the current one included.
    pub fn requests(&self) -> u64 {
        self.life.requests
    }

    /// The caller's mark on the connection: 0 until [`Pooled::set_mark`].
    pub fn mark(&self) -> u32 {
        self.life.mark
    }

    /// Keeps `mark`, a value of the caller's, with the connection across uses (holdfast
    /// marks the kind of its last response); the [`ClosedHook`] hears it too.
    pub fn set_mark(&mut self, mark: u32) {
        self.life.mark = mark;
    }

    /// Records limits the origin advertised in its latest response. They replace
    /// earlier ones (an origin counts `max` down as requests go by).
    pub fn limit_by_origin(&mut self, limits: OriginLimits) {
        self.life.origin_idle = limits.idle;
        self.life.origin_remaining = limits.remaining_requests.unwrap_or(u64::MAX);
    }

    /// Takes the connection out for good (for example after an upgrade).
    /// The pool counts it as closed for `reason`.
    pub fn into_inner(mut self, reason: CloseReason) -> C {
        self.pool.closed_active(None, reason);
        self.conn.take().expect("a Pooled holds its connection until consumed")
    }

    /// Gives the connection back after a clean exchange. It is closed instead if it
    /// has reached a limit, is no longer open, or is more than demand needs.
    pub fn release(mut self, now: Instant) {
        let conn = self.conn.take().expect("a Pooled holds its connection until consumed");
        let idle_until = now + self.pool.idle_limit(&self.life);
        self.pool.put_back(Idle { conn, life: self.life, idle_since: now, idle_until });
    }

    /// Closes a connection that must not be reused, counted under `reason`.
    pub fn discard(mut self, reason: CloseReason) {
        let conn = self.conn.take();
        self.pool.closed_active(conn, reason);
    }
}

impl<C: Poolable> Drop for Pooled<C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.closed_active(Some(conn), CloseReason::Error);
        }
    }
}

impl<C: Poolable> Pool<C> {
    /// An empty pool with no share in a global idle budget.
    pub fn new(config: PoolConfig) -> Self {
        Pool::with_budget(config, None)
    }

    /// An empty pool whose idle connections also count against `budget`, shared with
    /// other pools.
    pub fn with_budget(config: PoolConfig, budget: Option<Arc<IdleBudget>>) -> Self {
        Pool::with_hook(config, budget, None)
    }

    /// [`Pool::with_budget`], and `hook` hears of each idle connection found not open.
    pub fn with_closed_hook(
        config: PoolConfig,
        budget: Option<Arc<IdleBudget>>,
        hook: ClosedHook<C>,
    ) -> Self {
        Pool::with_hook(config, budget, Some(hook))
    }

    fn with_hook(
        config: PoolConfig,
        budget: Option<Arc<IdleBudget>>,
        closed_hook: Option<ClosedHook<C>>,
    ) -> Self {
        let state = State { idle: Vec::new(), demand: Demand::new(Instant::now()) };
        Pool {
            inner: Arc::new(Inner {
                bound: Arc::new(Bound::new(config)),
                state: Mutex::new(state),
                budget,
                retired: AtomicBool::new(false),
                closed_hook,
            }),
        }
    }

    /// The limits this pool enforces.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.bound.config
    }

    /// Live counters.
    pub fn stats(&self) -> &PoolStats {
        &self.inner.bound.stats
    }

    /// Returns the most recently used idle connection that is still open and within
    /// its limits, or `None` when there is none.
    ///
    /// Connections found expired or closed on the way are closed and counted.
    ///
    /// # Races
    /// The origin may close the socket between this check and the first write; the
    /// caller sees an error on a reused connection and decides whether to retry.
    pub fn checkout(&self, now: Instant) -> Option<Pooled<C>> {
        let mut retired = Vec::new();
        let found = {
            let mut state = self.lock();
            let mut found = None;
            while let Some(entry) = state.idle.pop() {
                match self.retire_reason(&entry, now) {
                    Some(reason) => retired.push((entry, reason)),
                    None => {
                        found = Some(entry);
                        break;
                    }
                }
            }
            if found.is_some() {
                self.inner.bound.stats.on_reuse();
                state.demand.observe(self.in_flight(), now);
            }
            found
        };
        self.close_idle(retired, Some(now));
        let entry = found?;
        self.give_budget(1);
        let life = Life { requests: entry.life.requests + 1, ..entry.life };
        let idle_for = now.saturating_duration_since(entry.idle_since);
        Some(Pooled { conn: Some(entry.conn), life, reused: true, idle_for, pool: self.clone() })
    }

    /// Wraps a freshly opened connection for its first request. The permit (from
    /// [`Pool::acquire`]) is its slot under `max_connections`.
    pub fn adopt(&self, conn: C, permit: ConnectPermit<C>, opened_at: Instant) -> Pooled<C> {
        self.inner.bound.stats.on_open();
        permit.consume();
        let in_flight = self.in_flight();
        self.lock().demand.observe(in_flight, opened_at);
        let lifetime = self.inner.bound.config.max_lifetime;
        let expires_at = (!lifetime.is_zero()).then(|| opened_at + lifetime);
        let life = Life {
            expires_at,
            requests: 1,
            origin_idle: None,
            origin_remaining: u64::MAX,
            mark: 0,
        };
        Pooled {
            conn: Some(conn),
            life,
            reused: false,
            idle_for: Duration::ZERO,
            pool: self.clone(),
        }
    }

    fn put_back(&self, entry: Idle<C>) {
        let now = entry.idle_since;
        if self.is_retired() {
            self.closed_active(None, CloseReason::Retired);
            return;
        }
        if let Some(reason) = self.release_reason(&entry, now) {
            self.closed_active(None, reason);
            return;
        }
        if !self.take_budget() {
            if self.inner.bound.stats.waiting() == 0 {
                self.closed_active(None, CloseReason::BudgetSpent);
                return;
            }
            // A queued request takes it at once: closing it would only make that
            // request open another. It idles past the budget for that moment.
            self.force_budget();
        }
        let mut state = self.lock();
        state.demand.rotate(now);
        // This connection is still counted in flight: the others are busy.
        let busy = self.in_flight().saturating_sub(1);
        let bound = self.idle_bound(&state.demand, state.idle.len(), busy);
        if bound == 0 {
            drop(state);
            self.give_budget(1);
            self.closed_active(None, CloseReason::AboveDemand);
            return;
        }
        self.inner.bound.stats.on_release();
        state.idle.push(entry);
        // Over the bound: the least recently used connection makes room.
        let evicted = (state.idle.len() > bound).then(|| state.idle.remove(0));
        drop(state);
        if let Some(entry) = evicted {
            self.close_idle(vec![(entry, CloseReason::AboveDemand)], None);
        }
        self.wake_waiter();
    }

    /// Why a connection coming back from a request must close instead of idling.
    fn release_reason(&self, entry: &Idle<C>, now: Instant) -> Option<CloseReason> {
        let life = &entry.life;
        if self.inner.bound.config.is_spent(life.requests) || life.origin_remaining == 0 {
            Some(CloseReason::MaxRequests)
        } else if life.origin_idle == Some(Duration::ZERO) {
            Some(CloseReason::IdleTimeout)
        } else {
            self.retire_reason(entry, now)
        }
    }

    /// Idle connections worth keeping when `idle` are idle and `busy` other requests
    /// hold a connection: no more than requests recently in flight at once (a
    /// connection beyond that would only wait to time out), and no more than
    /// `max_idle` when that ceiling is set.
    ///
    /// Demand now overrides the recent peak: while more requests are in flight than
    /// connections idle, the next ones want a connection at once, and closing one
    /// would only make a request open another. A queued request overrides the ceiling
    /// too: it takes the connection the moment it is back.
    fn idle_bound(&self, demand: &Demand, idle: usize, busy: usize) -> usize {
        if self.inner.bound.stats.waiting() > 0 {
            return usize::MAX;
        }
        let by_demand = if busy > idle { usize::MAX } else { demand.recent_peak() };
        self.inner.bound.config.max_idle.map_or(by_demand, |cap| by_demand.min(cap))
    }

    /// Closes idle connections that have expired, been closed by the origin, or are
    /// more than recent demand needs. Call it periodically so idle connections do not
    /// outlive their limits when no request comes to check them out.
    pub fn evict_expired(&self, now: Instant) {
        let retired = {
            let mut state = self.lock();
            let mut retired = Vec::new();
            let mut i = 0;
            while i < state.idle.len() {
                match self.retire_reason(&state.idle[i], now) {
                    Some(reason) => retired.push((state.idle.remove(i), reason)),
                    None => i += 1,
                }
            }
            state.demand.rotate(now);
            let bound = self.idle_bound(&state.demand, state.idle.len(), self.in_flight());
            let surplus = state.idle.len().saturating_sub(bound);
            retired.extend(state.idle.drain(..surplus).map(|e| (e, CloseReason::AboveDemand)));
            retired
        };
        self.close_idle(retired, Some(now));
    }

    /// Closes every idle connection, counted under `reason`. Busy connections are not
    /// touched: they come back, or close, when their request ends.
    pub fn clear_for(&self, reason: CloseReason) {
        let all: Vec<_> = std::mem::take(&mut self.lock().idle);
        self.close_idle(all.into_iter().map(|e| (e, reason)).collect(), None);
    }

    /// Winds the pool down for good: idle connections close now, busy ones when their
    /// request ends, since nothing will ask for them again.
    ///
    /// # Races
    /// The flag is set before the idle list is emptied, and `put_back` reads it before
    /// it takes the lock, so a connection coming back meanwhile is either closed by
    /// `put_back` or found and closed here.
    pub fn retire(&self) {
        self.inner.retired.store(true, Ordering::SeqCst);
        self.clear_for(CloseReason::Retired);
    }

    /// Whether [`Pool::retire`] was called.
    pub fn is_retired(&self) -> bool {
        self.inner.retired.load(Ordering::SeqCst)
    }

    /// Connections open now: idle, busy, or being opened.
    pub fn open_connections(&self) -> usize {
        self.inner.bound.open.load(Ordering::SeqCst)
    }

    /// Whether an idle connection is waiting now (a hint: it may be gone by the time a
    /// request asks for it).
    pub fn has_idle(&self) -> bool {
        self.inner.bound.stats.idle() > 0
    }

    /// How long until the first idle connection expires, if any is idle.
    pub fn next_expiry(&self, now: Instant) -> Option<Duration> {
        let state = self.lock();
        state.idle.iter().map(|e| e.idle_until.saturating_duration_since(now)).min()
    }

    /// The most requests in flight at once over the last 10 to 20 s.
    pub fn recent_peak(&self) -> usize {
        let mut state = self.lock();
        state.demand.rotate(Instant::now());
        state.demand.recent_peak()
    }

    /// Records the demand of a request that found no idle connection and opens one: it
    /// and the requests in flight now. Observed when the connect starts, not when it
    /// ends: the others may finish meanwhile, and a peak counted after them would be
    /// too low to keep the new connection once all are back.
    pub(crate) fn observe_connect(&self, now: Instant) {
        let in_flight = self.in_flight();
        self.lock().demand.observe(in_flight, now);
    }

    /// Requests holding a connection or opening one now.
    pub(crate) fn in_flight(&self) -> usize {
        self.inner.bound.stats.active() + self.inner.bound.connecting.load(Ordering::Acquire)
    }

    fn idle_limit(&self, life: &Life) -> Duration {
        let own = self.inner.bound.config.idle_timeout;
        life.origin_idle.map_or(own, |origin| origin.min(own))
    }

    fn retire_reason(&self, entry: &Idle<C>, now: Instant) -> Option<CloseReason> {
        if !entry.conn.is_open() {
            Some(CloseReason::OriginClosed)
        } else if now >= entry.idle_until {
            Some(CloseReason::IdleTimeout)
        } else if entry.life.expires_at.is_some_and(|t| now >= t) {
            Some(CloseReason::MaxLifetime)
        } else {
            None
        }
    }

    /// Drops retired idle connections outside the lock and counts them. When they were
    /// looked at `found_at`, the [`ClosedHook`] hears of those found not open
    /// (`OriginClosed`) first.
    fn close_idle(&self, retired: Vec<(Idle<C>, CloseReason)>, found_at: Option<Instant>) {
        if retired.is_empty() {
            return;
        }
        self.give_budget(retired.len());
        for (entry, reason) in retired {
            if let (CloseReason::OriginClosed, Some(now), Some(hook)) =
                (reason, found_at, &self.inner.closed_hook)
            {
                let closed = ClosedWhileIdle {
                    requests: entry.life.requests,
                    idle_for: now.saturating_duration_since(entry.idle_since),
                    found_at: now,
                    mark: entry.life.mark,
                };
                hook(&entry.conn, closed);
            }
            // Counted before the socket closes, so whoever sees the close sees it counted.
            self.inner.bound.stats.on_close_idle(reason);
            drop(entry);
            self.closed_one();
        }
    }

    /// Counts a connection that was carrying a request as closed for `reason`, then
    /// drops `conn` when the caller hands it over: counted before its socket closes, so
    /// whoever sees the close sees it counted. (`None`: the caller drops it afterwards,
    /// or keeps it, as an upgrade does.)
    fn closed_active(&self, conn: Option<C>, reason: CloseReason) {
        self.inner.bound.stats.on_close_active(reason);
        drop(conn);
        self.closed_one();
    }

    /// A connection is gone: its slot under `max_connections` frees up.
    fn closed_one(&self) {
        self.inner.bound.free_slot();
    }

    /// Wakes one queued request, if any waits (see [`Bound::wake_waiter`]).
    pub(crate) fn wake_waiter(&self) {
        self.inner.bound.wake_waiter();
    }

    fn take_budget(&self) -> bool {
        self.inner.budget.as_ref().is_none_or(|b| b.take())
    }

    fn force_budget(&self) {
        if let Some(b) = &self.inner.budget {
            b.force();
        }
    }

    fn give_budget(&self, n: usize) {
        if let Some(b) = &self.inner.budget {
            b.give(n);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<C>> {
        // A panic while holding this lock leaves the state consistent (every operation
        // is a single push, pop or remove), so a poisoned lock is still usable.
        self.inner.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests;
