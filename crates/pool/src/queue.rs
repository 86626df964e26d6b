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
    /// The slot now belongs to the adopted connection, which frees it when it closes.
    pub(crate) fn consume(mut self) {
        if let Some(pool) = self.pool.take() {
            pool.inner.connecting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<C: Poolable> Drop for ConnectPermit<C> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.inner.connecting.fetch_sub(1, Ordering::AcqRel);
            pool.inner.open.fetch_sub(1, Ordering::SeqCst);
            pool.wake_waiter();
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
    /// Nothing freed up within `queue_timeout`.
    QueueTimeout {
        /// How long the request waited.
        waited: Duration,
    },
}

/// Counts a request as queued for as long as it waits.
struct QueueSlot<'a, C: Poolable>(&'a Pool<C>);

impl<C: Poolable> Drop for QueueSlot<'_, C> {
    fn drop(&mut self) {
        self.0.inner.stats.on_dequeue();
    }
}

impl<C: Poolable> Pool<C> {
    /// An idle connection, else room to open one, else a wait in the queue until one
    /// of those comes free.
    pub async fn acquire(&self) -> Result<Checkout<C>, Exhausted> {
        self.acquire_inner(false).await
    }

    /// Room to open a new connection (never an idle one), waiting in the queue if
    /// `max_connections` are open.
    pub async fn acquire_fresh(&self) -> Result<ConnectPermit<C>, Exhausted> {
        match self.acquire_inner(true).await? {
            Checkout::Connect(permit) => Ok(permit),
            Checkout::Idle(_) => {
                unreachable!("acquire_inner(fresh) never returns an idle connection")
            }
        }
    }

    async fn acquire_inner(&self, fresh: bool) -> Result<Checkout<C>, Exhausted> {
        if let Some(found) = self.try_acquire(fresh) {
            return Ok(found);
        }
        let config = &self.inner.config;
        let waiting = self.inner.stats.waiting();
        if waiting >= config.queue_size {
            self.inner.stats.on_queue_full();
            return Err(Exhausted::QueueFull { waiting });
        }
        self.inner.stats.on_enqueue();
        let _slot = QueueSlot(self);
        let started = Instant::now();
        let deadline = started + config.queue_timeout;
        loop {
            let notified = self.inner.wake.notified();
            tokio::pin!(notified);
            // Registered before the check, so a release between check and wait wakes us.
            notified.as_mut().enable();
            if let Some(found) = self.try_acquire(fresh) {
                return Ok(found);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                self.inner.stats.on_queue_timeout();
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
        let max = self.inner.config.max_connections;
        self.inner
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (max == 0 || n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| {
                self.inner.connecting.fetch_add(1, Ordering::AcqRel);
                self.observe_connect(Instant::now());
                ConnectPermit { pool: Some(self.clone()) }
            })
    }
}
