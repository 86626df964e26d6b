//! A budget of idle connections shared by every pool in the process.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Caps idle connections across all backends, so many backends with a few idle
/// connections each cannot together use up file descriptors or local ports.
#[derive(Debug)]
pub struct IdleBudget {
    limit: usize,
    idle: AtomicUsize,
}

impl IdleBudget {
    /// A budget of `limit` idle connections.
    pub fn new(limit: usize) -> Self {
        IdleBudget { limit, idle: AtomicUsize::new(0) }
    }

    /// The most idle connections allowed.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Idle connections counted now.
    pub fn idle(&self) -> usize {
        self.idle.load(Ordering::Relaxed)
    }

    /// Claims room for one more idle connection; false when the budget is spent.
    pub(crate) fn take(&self) -> bool {
        self.idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Counts one more idle connection even past the limit (one a queued request is
    /// about to take).
    pub(crate) fn force(&self) {
        self.idle.fetch_add(1, Ordering::AcqRel);
    }

    /// Returns room for `n` idle connections that left the pool.
    pub(crate) fn give(&self, n: usize) {
        self.idle.fetch_sub(n, Ordering::AcqRel);
    }
}
