//! Counters a pool keeps about itself, in plain atomics, read at scrape time.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

/// Why a connection left the pool for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// It sat idle for longer than the idle timeout.
    IdleTimeout,
    /// It carried `max_requests` requests.
    MaxRequests,
    /// It lived longer than `max_lifetime`.
    MaxLifetime,
    /// The origin closed it, or said it would (`Connection: close`, HTTP/1.0).
    OriginClosed,
    /// The exchange on it did not end cleanly (body not fully read or sent, I/O error).
    Error,
    /// Keeping it idle would exceed what demand needs (the recent peak of requests in
    /// flight) or the `max_idle` ceiling, while no request waits or is in flight
    /// without an idle connection to take.
    AboveDemand,
    /// The process-wide idle budget ([`crate::IdleBudget`]) was spent, and no request
    /// was waiting for it.
    BudgetSpent,
    /// It was upgraded (for example to a WebSocket) and left HTTP.
    Upgraded,
    /// The proxy is shutting down.
    Shutdown,
    /// Its backend left the upstream group (a reload or a DNS change removed it).
    Retired,
    /// Its backend was taken out of service by a health check or passive detection.
    Ejected,
    /// Its origin was seen to close connections at this point without saying so (after
    /// so many requests, or after a kind of response), so it was not kept.
    Learned,
}

impl CloseReason {
    /// Every reason, in a fixed order (for exporting counters).
    pub const ALL: [CloseReason; 12] = [
        CloseReason::IdleTimeout,
        CloseReason::MaxRequests,
        CloseReason::MaxLifetime,
        CloseReason::OriginClosed,
        CloseReason::Error,
        CloseReason::AboveDemand,
        CloseReason::BudgetSpent,
        CloseReason::Upgraded,
        CloseReason::Shutdown,
        CloseReason::Retired,
        CloseReason::Ejected,
        CloseReason::Learned,
    ];

    /// A stable snake_case name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::MaxRequests => "max_requests",
            CloseReason::MaxLifetime => "max_lifetime",
            CloseReason::OriginClosed => "origin_closed",
            CloseReason::Error => "error",
            CloseReason::AboveDemand => "above_demand",
            CloseReason::BudgetSpent => "budget_spent",
            CloseReason::Upgraded => "upgraded",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Retired => "retired",
            CloseReason::Ejected => "ejected",
            CloseReason::Learned => "learned",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Live counters for one pool.
#[derive(Debug, Default)]
pub struct PoolStats {
    opened: AtomicU64,
    reused: AtomicU64,
    checked_out: AtomicU64,
    idle: AtomicU64,
    closed: [AtomicU64; CloseReason::ALL.len()],
    waiting: AtomicU64,
    queue_full: AtomicU64,
    queue_timeouts: AtomicU64,
}

/// A copy of [`PoolStats`] at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStatsSnapshot {
    /// Connections opened to the backend, exclusive and shared.
    pub opened: u64,
    /// Requests that went out on a connection that had carried one before: an
    /// exclusive one taken from the idle pool, or a shared one.
    pub reused: u64,
    /// Connections carrying a request now: exclusive ones handed out and not yet
    /// returned or closed, shared ones with at least one request on them.
    pub active: u64,
    /// Connections carrying no request now: exclusive ones idle in the pool, shared
    /// ones with no request on them.
    pub idle: u64,
    /// Connections closed, per reason, in the order of [`CloseReason::ALL`].
    pub closed: [u64; CloseReason::ALL.len()],
    /// Requests waiting for an exclusive connection now (`max_connections` busy).
    pub waiting: u64,
    /// Requests refused because the queue was full (for a shared connection: as many
    /// requests as `queue_size` already looked for one).
    pub queue_full: u64,
    /// Requests that waited the whole `queue_timeout` in vain, for either kind.
    pub queue_timeouts: u64,
}

impl PoolStatsSnapshot {
    /// Connections closed for `reason`.
    pub fn closed(&self, reason: CloseReason) -> u64 {
        self.closed[reason.index()]
    }

    /// Connections closed for any reason.
    pub fn closed_total(&self) -> u64 {
        self.closed.iter().sum()
    }
}

impl PoolStats {
    pub(crate) fn on_open(&self) {
        self.opened.fetch_add(1, Relaxed);
        self.checked_out.fetch_add(1, Relaxed);
    }

    pub(crate) fn on_reuse(&self) {
        self.reused.fetch_add(1, Relaxed);
        self.checked_out.fetch_add(1, Relaxed);
        self.idle.fetch_sub(1, Relaxed);
    }

    pub(crate) fn on_release(&self) {
        self.checked_out.fetch_sub(1, Relaxed);
        self.idle.fetch_add(1, Relaxed);
    }

    pub(crate) fn on_close_idle(&self, reason: CloseReason) {
        self.idle.fetch_sub(1, Relaxed);
        self.closed[reason.index()].fetch_add(1, Relaxed);
    }

    pub(crate) fn on_close_active(&self, reason: CloseReason) {
        self.checked_out.fetch_sub(1, Relaxed);
        self.closed[reason.index()].fetch_add(1, Relaxed);
    }

    /// A shared connection opened; it carries no request yet.
    pub(crate) fn on_open_shared(&self) {
        self.opened.fetch_add(1, Relaxed);
        self.idle.fetch_add(1, Relaxed);
    }

    /// A shared connection took its first request of a busy spell.
    pub(crate) fn on_busy(&self) {
        self.idle.fetch_sub(1, Relaxed);
        self.checked_out.fetch_add(1, Relaxed);
    }

    /// A shared connection's last request ended.
    pub(crate) fn on_quiet(&self) {
        self.checked_out.fetch_sub(1, Relaxed);
        self.idle.fetch_add(1, Relaxed);
    }

    /// A request went out on a shared connection that carried one before.
    pub(crate) fn on_reuse_shared(&self) {
        self.reused.fetch_add(1, Relaxed);
    }

    pub(crate) fn idle(&self) -> u64 {
        self.idle.load(Relaxed)
    }

    pub(crate) fn active(&self) -> usize {
        self.checked_out.load(Relaxed) as usize
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(SeqCst) as usize
    }

    pub(crate) fn on_enqueue(&self) {
        self.waiting.fetch_add(1, SeqCst);
    }

    pub(crate) fn on_dequeue(&self) {
        self.waiting.fetch_sub(1, Relaxed);
    }

    pub(crate) fn on_queue_full(&self) {
        self.queue_full.fetch_add(1, Relaxed);
    }

    pub(crate) fn on_queue_timeout(&self) {
        self.queue_timeouts.fetch_add(1, Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> PoolStatsSnapshot {
        PoolStatsSnapshot {
            opened: self.opened.load(Relaxed),
            reused: self.reused.load(Relaxed),
            active: self.checked_out.load(Relaxed),
            idle: self.idle.load(Relaxed),
            closed: std::array::from_fn(|i| self.closed[i].load(Relaxed)),
            waiting: self.waiting.load(Relaxed),
            queue_full: self.queue_full.load(Relaxed),
            queue_timeouts: self.queue_timeouts.load(Relaxed),
        }
    }
}
