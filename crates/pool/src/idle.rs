//! The idle stack: checkout takes the most recently used connection, release puts it back.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::{CloseReason, PoolConfig, PoolStats, Poolable};

/// Idle connections to one backend, most recently used last.
///
/// Cheap to clone; clones share the same connections.
pub struct Pool<C: Poolable> {
    inner: Arc<Inner<C>>,
}

impl<C: Poolable> Clone for Pool<C> {
    fn clone(&self) -> Self {
        Pool { inner: Arc::clone(&self.inner) }
    }
}

struct Inner<C> {
    config: PoolConfig,
    idle: Mutex<Vec<Idle<C>>>,
    stats: PoolStats,
}

/// What the pool remembers about a connection across uses.
#[derive(Debug, Clone, Copy)]
struct Life {
    opened_at: Instant,
    /// Requests sent on it so far, the one in flight included.
    requests: u64,
}

struct Idle<C> {
    conn: C,
    life: Life,
    idle_since: Instant,
}

/// A connection taken out of the pool (or newly opened) for one request.
///
/// It goes back only through [`Pooled::release`]. Dropping it closes it and counts
/// an error: a connection whose exchange did not finish cleanly must never be reused.
pub struct Pooled<C: Poolable> {
    conn: Option<C>,
    life: Life,
    reused: bool,
    pool: Pool<C>,
}

impl<C: Poolable> Pooled<C> {
    /// The connection.
    pub fn conn(&mut self) -> &mut C {
        self.conn.as_mut().expect("a Pooled holds its connection until consumed")
    }

    /// Whether it came from the idle pool rather than a fresh connect.
    pub fn is_reused(&self) -> bool {
        self.reused
    }

    /// How many requests it has carried, the current one included.
    pub fn requests(&self) -> u64 {
        self.life.requests
    }

    /// Takes the connection out for good (for example after an upgrade).
    /// The pool counts it as closed for `reason`.
    pub fn into_inner(mut self, reason: CloseReason) -> C {
        self.pool.inner.stats.on_close_active(reason);
        self.conn.take().expect("a Pooled holds its connection until consumed")
    }

    /// Gives the connection back after a clean exchange. It is closed instead if it
    /// has reached a limit, is no longer open, or the pool is full.
    pub fn release(mut self, now: Instant) {
        let conn = self.conn.take().expect("a Pooled holds its connection until consumed");
        self.pool.put_back(Idle { conn, life: self.life, idle_since: now });
    }

    /// Closes a connection that must not be reused, counted under `reason`.
    pub fn discard(mut self, reason: CloseReason) {
        self.conn.take();
        self.pool.inner.stats.on_close_active(reason);
    }
}

impl<C: Poolable> Drop for Pooled<C> {
    fn drop(&mut self) {
        if self.conn.take().is_some() {
            self.pool.inner.stats.on_close_active(CloseReason::Error);
        }
    }
}

impl<C: Poolable> Pool<C> {
    /// An empty pool.
    pub fn new(config: PoolConfig) -> Self {
        Pool {
            inner: Arc::new(Inner {
                config,
                idle: Mutex::new(Vec::new()),
                stats: PoolStats::default(),
            }),
        }
    }

    /// The limits this pool enforces.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// Live counters.
    pub fn stats(&self) -> &PoolStats {
        &self.inner.stats
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
            let mut idle = self.lock();
            let mut found = None;
            while let Some(entry) = idle.pop() {
                match self.retire_reason(&entry, now) {
                    Some(reason) => retired.push((entry, reason)),
                    None => {
                        found = Some(entry);
                        break;
                    }
                }
            }
            found
        };
        self.close_idle(retired);
        let entry = found?;
        self.inner.stats.on_reuse();
        let life = Life { requests: entry.life.requests + 1, ..entry.life };
        Some(Pooled { conn: Some(entry.conn), life, reused: true, pool: self.clone() })
    }

    /// Wraps a freshly opened connection for its first request.
    pub fn adopt(&self, conn: C, opened_at: Instant) -> Pooled<C> {
        self.inner.stats.on_open();
        let life = Life { opened_at, requests: 1 };
        Pooled { conn: Some(conn), life, reused: false, pool: self.clone() }
    }

    fn put_back(&self, entry: Idle<C>) {
        let now = entry.idle_since;
        let reason = if self.inner.config.is_spent(entry.life.requests) {
            Some(CloseReason::MaxRequests)
        } else {
            self.retire_reason(&entry, now)
        };
        if let Some(reason) = reason {
            self.inner.stats.on_close_active(reason);
            return;
        }
        if self.inner.config.max_idle == 0 {
            self.inner.stats.on_close_active(CloseReason::PoolFull);
            return;
        }
        self.inner.stats.on_release();
        let evicted = {
            let mut idle = self.lock();
            idle.push(entry);
            // Full: the least recently used connection makes room for this one.
            (idle.len() > self.inner.config.max_idle).then(|| idle.remove(0))
        };
        if let Some(entry) = evicted {
            self.close_idle(vec![(entry, CloseReason::PoolFull)]);
        }
    }

    /// Closes idle connections that have expired or been closed by the origin.
    /// Call it periodically so idle connections do not outlive their timeout when
    /// no request comes to check them out.
    pub fn evict_expired(&self, now: Instant) {
        let retired = {
            let mut idle = self.lock();
            let mut retired = Vec::new();
            let mut i = 0;
            while i < idle.len() {
                match self.retire_reason(&idle[i], now) {
                    Some(reason) => retired.push((idle.remove(i), reason)),
                    None => i += 1,
                }
            }
            retired
        };
        self.close_idle(retired);
    }

    /// Closes every idle connection (shutdown).
    pub fn clear(&self) {
        let all: Vec<_> = std::mem::take(&mut *self.lock());
        self.close_idle(all.into_iter().map(|e| (e, CloseReason::Shutdown)).collect());
    }

    /// How long until the oldest idle connection expires, if any is idle.
    pub fn next_expiry(&self, now: Instant) -> Option<Duration> {
        let idle = self.lock();
        idle.first()
            .map(|e| (e.idle_since + self.inner.config.idle_timeout).saturating_duration_since(now))
    }

    fn retire_reason(&self, entry: &Idle<C>, now: Instant) -> Option<CloseReason> {
        let config = &self.inner.config;
        if !entry.conn.is_open() {
            Some(CloseReason::UpstreamClosed)
        } else if config.is_idle_expired(now.saturating_duration_since(entry.idle_since)) {
            Some(CloseReason::IdleTimeout)
        } else if config.is_too_old(now.saturating_duration_since(entry.life.opened_at)) {
            Some(CloseReason::MaxLifetime)
        } else {
            None
        }
    }

    /// Drops retired connections outside the lock and counts them.
    fn close_idle(&self, retired: Vec<(Idle<C>, CloseReason)>) {
        for (entry, reason) in retired {
            drop(entry);
            self.inner.stats.on_close_idle(reason);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Idle<C>>> {
        // A panic while holding this lock leaves the Vec consistent (every operation
        // is a single push, pop or remove), so a poisoned lock is still usable.
        self.inner.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests;
