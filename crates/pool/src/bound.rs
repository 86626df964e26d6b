//! The bound one backend's connections share: at most `max_connections` open at once,
//! exclusive ([`crate::Pool`]) and shared ([`crate::SharedPool`]) together, counted in
//! one [`PoolStats`], and who is woken when a slot frees.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::{PoolConfig, PoolStats};

/// One backend's slots under `max_connections`, its counters, and its waiters.
pub(crate) struct Bound {
    pub(crate) config: PoolConfig,
    pub(crate) stats: PoolStats,
    /// Connections open or being opened, of both kinds.
    pub(crate) open: AtomicUsize,
    /// Exclusive connections being opened (permits granted, not yet adopted).
    pub(crate) connecting: AtomicUsize,
    /// Wakes one queued request for an exclusive connection when a slot frees.
    pub(crate) wake: Notify,
    /// Wakes one queued request of the second class, when none of the first waits.
    pub(crate) wake_second: Notify,
    /// Requests of the second class waiting now (counted in `stats.waiting` too).
    pub(crate) waiting_second: AtomicUsize,
    /// Wakes every request looking for room on a shared connection: a request on one
    /// ended, one opened or failed to, a slot freed.
    pub(crate) shared_changed: Notify,
    /// Set once a shared pool uses this bound, so a backend with exclusive connections
    /// only never touches `shared_changed`.
    pub(crate) has_shared: AtomicBool,
}

impl Bound {
    pub(crate) fn new(config: PoolConfig) -> Bound {
        Bound {
            config,
            stats: PoolStats::default(),
            open: AtomicUsize::new(0),
            connecting: AtomicUsize::new(0),
            wake: Notify::new(),
            wake_second: Notify::new(),
            waiting_second: AtomicUsize::new(0),
            shared_changed: Notify::new(),
            has_shared: AtomicBool::new(false),
        }
    }

    /// Claims a slot under `max_connections` (always, when it is 0).
    pub(crate) fn try_slot(&self) -> bool {
        let max = self.config.max_connections;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (max == 0 || n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// A connection is gone, or was never opened: its slot frees up, and whoever
    /// waits for one hears of it.
    pub(crate) fn free_slot(&self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        self.wake_waiter();
        self.wake_shared();
    }

    /// Wakes one queued request for an exclusive connection, if any waits.
    ///
    /// # Races
    /// A request counts itself in `waiting` before it looks for a connection one last
    /// time; this side frees a connection before it reads `waiting` (both SeqCst). So
    /// either the request finds the connection, or this side sees the request and wakes
    /// it. Skipping the wake when nobody waits keeps `Notify`'s lock off the hot path.
    ///
    /// A request of the first class goes first (see [`crate::Priority`]); a request
    /// counts its class before it counts itself waiting, so a total above the second
    /// class's count means one of the first waits.
    pub(crate) fn wake_waiter(&self) {
        let waiting = self.stats.waiting();
        if waiting == 0 {
            return;
        }
        if waiting > self.waiting_second.load(Ordering::SeqCst) {
            self.wake.notify_one();
        } else {
            self.wake_second.notify_one();
        }
    }

    /// Wakes the requests looking for room on a shared connection, if a shared pool
    /// uses this bound. (Its waiters register before they look, so none misses this.)
    pub(crate) fn wake_shared(&self) {
        if self.has_shared.load(Ordering::Acquire) {
            self.shared_changed.notify_waiters();
        }
    }
}
