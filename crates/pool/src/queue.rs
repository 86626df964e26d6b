//! Getting a connection under `max_connections`: an idle one, a permit to open one,
//! or a wait in a bounded queue with a deadline.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Pool, Poolable, Pooled};

/// What [`Pool::acquire`] found.
pub enum Checkout<C: Poolable> {
    /// An idle connection, ready for a request.
    Idle(Pooled<C>),
    /// Room to open a new connection; hand the new connection to [`Pool::adopt`].
    Connect(ConnectPermit<C>),
}

/// A slot under `max_connections` for a connection being opened. Dropping it unused
/// (the connect failed) frees the slot.
pub struct ConnectPermit<C: Poolable> {
    pool: Option<Pool<C>>,
}

impl<C: Poolable> ConnectPermit<C> {
    /// A permit for a slot already claimed, and counted as connecting, in `pool`.
    pub(crate) fn new(pool: Pool<C>) -> Self {
        ConnectPermit { pool: Some(pool) }
    }

    /// The slot now belongs to the adopted connection, which frees it when it closes.
    pub(crate) fn consume(mut self) {
        if let Some(pool) = self.pool.take() {
            pool.inner.bound.connecting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<C: Poolable> Drop for ConnectPermit<C> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.inner.bound.connecting.fetch_sub(1, Ordering::AcqRel);
            pool.inner.bound.free_slot();
        }
    }
}

/// No connection could be had within the queue's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exhausted {
    /// `queue_size` requests were already waiting.
    QueueFull {
        /// Requests waiting when this one arrived.
        waiting: usize,
    },
    /// A request of the second class found half the queue taken by its class.
    SecondClassFull {
        /// Requests of the second class waiting when this one arrived.
        waiting: usize,
    },
    /// Nothing freed up within `queue_timeout`.
    QueueTimeout {
        /// How long the request waited.
        waited: Duration,
    },
}

/// Which of two classes a request is in. A request of the [`Second`] gets a
/// connection only when no request of the [`First`] waits, and never one of the last
/// [`RESERVE_PERCENT`] of `max_connections`: those stay for the first class. A caller
/// puts there the requests of a client that already holds more than its share of the
/// backend, so that other clients are neither queued behind it nor left without a
/// connection.
///
/// [`First`]: Priority::First
/// [`Second`]: Priority::Second
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// Served in order of arrival, before any of the second class.
    #[default]
    First,
    /// At most half the queue may wait in this class.
    Second,
}

/// The share of `max_connections`, in percent, that only requests of the first class
/// may use: a quarter (none below four connections).
pub const RESERVE_PERCENT: usize = 25;

/// Counts a request as queued for as long as it waits.
struct QueueSlot<'a, C: Poolable> {
    pool: &'a Pool<C>,
    priority: Priority,
}

impl<C: Poolable> Drop for QueueSlot<'_, C> {
    fn drop(&mut self) {
        self.pool.inner.bound.stats.on_dequeue();
        if self.priority == Priority::Second {
            self.pool.inner.bound.waiting_second.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl<C: Poolable> Pool<C> {
    /// An idle connection, else room to open one, else a wait in the queue until one
    /// of those comes free.
    pub async fn acquire(&self) -> Result<Checkout<C>, Exhausted> {
        self.acquire_inner(false, Priority::First).await
    }

    /// [`Pool::acquire`] for a request of the given [`Priority`].
    pub async fn acquire_as(&self, priority: Priority) -> Result<Checkout<C>, Exhausted> {
        self.acquire_inner(false, priority).await
    }

    /// Room to open a new connection (never an idle one), waiting in the queue if
    /// `max_connections` are open.
    pub async fn acquire_fresh(&self) -> Result<ConnectPermit<C>, Exhausted> {
        match self.acquire_inner(true, Priority::First).await? {
            Checkout::Connect(permit) => Ok(permit),
            Checkout::Idle(_) => {
                unreachable!("acquire_inner(fresh) never returns an idle connection")
            }
        }
    }

    /// Whether a request of the second class may take a connection now, idle or new:
    /// none of the first waits, and fewer than `max_connections` less the reserve are
    /// busy.
    pub fn second_may_take(&self) -> bool {
        let second = self.inner.bound.waiting_second.load(Ordering::SeqCst);
        let first_waiting = self.inner.bound.stats.waiting() > second;
        let max = self.inner.bound.config.max_connections;
        let reserve = max.saturating_mul(RESERVE_PERCENT) / 100;
        !first_waiting && (max == 0 || self.in_flight() < max.saturating_sub(reserve))
    }

    async fn acquire_inner(
        &self,
        fresh: bool,
        priority: Priority,
    ) -> Result<Checkout<C>, Exhausted> {
        let second = priority == Priority::Second;
        let may_take = || !second || self.second_may_take();
        if may_take() {
            if let Some(found) = self.try_acquire(fresh) {
                return Ok(found);
            }
        }
        let config = &self.inner.bound.config;
        let waiting = self.inner.bound.stats.waiting();
        let second_waiting = self.inner.bound.waiting_second.load(Ordering::SeqCst);
        if waiting >= config.queue_size {
            self.inner.bound.stats.on_queue_full();
            return Err(Exhausted::QueueFull { waiting });
        }
        if second && second_waiting >= (config.queue_size / 2).max(1) {
            self.inner.bound.stats.on_queue_full();
            return Err(Exhausted::SecondClassFull { waiting: second_waiting });
        }
        // The class is counted before the total, so whoever sees this request waiting
        // sees its class too (see `Pool::wake_waiter`).
        if second {
            self.inner.bound.waiting_second.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.bound.stats.on_enqueue();
        let _slot = QueueSlot { pool: self, priority };
        let started = Instant::now();
        let deadline = started + config.queue_timeout;
        let wake = if second { &self.inner.bound.wake_second } else { &self.inner.bound.wake };
        loop {
            let notified = wake.notified();
            tokio::pin!(notified);
            // Registered before the check, so a release between check and wait wakes us.
            notified.as_mut().enable();
            if may_take() {
                if let Some(found) = self.try_acquire(fresh) {
                    return Ok(found);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                self.inner.bound.stats.on_queue_timeout();
                return Err(Exhausted::QueueTimeout { waited: started.elapsed() });
            }
        }
    }

    fn try_acquire(&self, fresh: bool) -> Option<Checkout<C>> {
        if !fresh {
            if let Some(pooled) = self.checkout(Instant::now()) {
                return Some(Checkout::Idle(pooled));
            }
        }
        self.try_permit().map(Checkout::Connect)
    }

    /// Claims a slot under `max_connections` (always, when it is 0).
    fn try_permit(&self) -> Option<ConnectPermit<C>> {
        if !self.inner.bound.try_slot() {
            return None;
        }
        self.inner.bound.connecting.fetch_add(1, Ordering::AcqRel);
        self.observe_connect(Instant::now());
        Some(ConnectPermit::new(self.clone()))
    }
}
