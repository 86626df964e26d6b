//! A backend's connections: its pool of [`OriginConn`]s and the connects that fill it
//! (from the group's source address, timed). Adapts `holdfast-pool` to origins: every
//! idle connection is probed before reuse, the pool's limits become [`LeaseError`]s
//! that name them, and closes the origin makes without announcing them go to the
//! backend's [`LearnedCloses`].
//!
//! It knows one address and its pool; whether the backend is healthy, and which
//! backend a request goes to, are decided elsewhere.

use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::{
    Checkout, CloseReason, ClosedWhileIdle, ConnectPermit, Exhausted, IdleBudget, Opening, Pool,
    PoolConfig, PoolStats, Pooled, Priority, Shareable, SharedPool,
};
use tokio::time::Instant;

use super::connect::{self, ConnectError, Dial, IdleState, OriginConn, TlsCounts};
use super::learned::{Answer, Close, CloseRule, LearnedCloses, ResponseKind};
use crate::metrics::Histogram;

/// A connection ready to carry one request; back to the pool when released, closed
/// when dropped or discarded.
pub type Lease = Pooled<OriginConn>;

/// Why no connection could be had for a request.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// `max_connections` were busy and `queue_size` requests were already waiting.
    #[error("all {max_connections} connections busy and {waiting} requests already queued")]
    QueueFull { max_connections: usize, waiting: usize },
    /// `max_connections` were busy for the whole `queue_timeout`.
    #[error("all {max_connections} connections stayed busy for {waited:?}")]
    QueueTimeout { max_connections: usize, waited: Duration },
    /// The client held more than its share of a crowded backend, and as many such
    /// requests as may wait (half the queue) already did (see `share`).
    #[error(
        "all {max_connections} connections busy, this client holds more than its share \
         of them, and {waiting} requests over their share already queued"
    )]
    ShareFull { max_connections: usize, waiting: usize },
    /// The client went away while its request waited for a connection.
    #[error("the client went away while its request waited for a connection")]
    ClientGone,
}

/// The connections to one backend: idle ones in its pool, and new ones opened to
/// `addr` when the pool has none.
pub struct OriginPool {
    pool: Pool<OriginConn>,
    /// How connections are made: every connection in the pool was made this way.
    dial: Dial,
    /// TCP connect (and TLS handshake) of each new connection.
    connect_time: Histogram,
    /// TLS handshakes of new connections: full or resumed, and their time.
    tls: TlsCounts,
    /// Where the origin closes connections without announcing it.
    learned: Arc<LearnedCloses>,
}

impl OriginPool {
    /// An empty pool of connections made as `dial` says, for the group `upstream`; its
    /// idle connections count against `budget`.
    pub(super) fn new(
        dial: Dial,
        upstream: &str,
        config: PoolConfig,
        budget: &Arc<IdleBudget>,
    ) -> OriginPool {
        let learned = Arc::new(LearnedCloses::new(Arc::from(upstream), dial.addr));
        let hears = Arc::clone(&learned);
        let hook = Box::new(move |conn: &OriginConn, closed: ClosedWhileIdle| {
            // Bytes nobody asked for are not a close.
            if conn.look() == IdleState::Closed {
                hears.closed(Close {
                    requests: closed.requests,
                    last: ResponseKind::from_code(closed.mark),
                    seen_after: closed.idle_for,
                    at: closed.found_at,
                });
            }
        });
        OriginPool {
            pool: Pool::with_closed_hook(config, Some(Arc::clone(budget)), hook),
            dial,
            connect_time: Histogram::default(),
            tls: TlsCounts::default(),
            learned,
        }
    }

    /// Whether these connections can serve a group with pool settings `config` whose
    /// connections are made as `dial` says (and the pool still serves).
    pub(super) fn fits(&self, config: &PoolConfig, dial: &Dial) -> bool {
        *self.pool.config() == *config && self.dial == *dial && !self.pool.is_retired()
    }

    /// The most recently used idle connection that is ready for a request, if there is
    /// one now; no waiting. `now` is the time of the request, read once for it.
    ///
    /// Every connection is probed before reuse ([`OriginConn::probe`], one system
    /// call): one that the origin closed while it was idle, or on which the origin
    /// sent bytes nobody asked for (a stray response, a body after a response to
    /// HEAD), is dropped and the next one tried. Nothing has been sent on it. A
    /// connection with unread bytes is never reused, however soon after its last
    /// response the next request comes: those bytes would be taken for the next
    /// request's response.
    ///
    /// # Races
    /// A close or stray bytes still in flight when the probe runs are not seen. A
    /// close is `proxy::retry`'s to handle; bytes that arrive before the next
    /// response are read as it. Only an origin that answers one request twice can do
    /// that, and no probe can tell its late bytes from the next response.
    pub fn try_idle(&self, now: Instant) -> Option<Lease> {
        loop {
            let lease = self.pool.checkout(now)?;
            if self.usable(&lease, Some(now)) {
                return Some(lease);
            }
            lease.discard(CloseReason::OriginClosed);
        }
    }

    /// Whether the probe finds the connection of `lease`, just checked out, ready for a
    /// request; a close it finds is evidence for [`LearnedCloses`], seen `at` (read from
    /// the clock when not given).
    fn usable(&self, lease: &Lease, at: Option<Instant>) -> bool {
        match lease.get().look() {
            IdleState::Quiet => true,
            IdleState::Unasked => false,
            IdleState::Closed => {
                let at = at.unwrap_or_else(Instant::now);
                self.learned.closed(close_under(lease, lease.idle_for(), at));
                false
            }
        }
    }

    /// An idle connection ready for a request, or a new one; when `max_connections`
    /// are open, waits in the backend's queue, in `priority`'s class (see
    /// [`OriginPool::try_idle`] and `share`).
    pub async fn lease(
        &self,
        connect_timeout: Duration,
        priority: Priority,
    ) -> Result<Lease, LeaseError> {
        loop {
            let acquired = self.pool.acquire_as(priority).await;
            match acquired.map_err(|e| self.queue_error(e))? {
                // Boxed: with reuse, connecting is the rare case, and its state would
                // otherwise make every lease's future larger.
                Checkout::Connect(permit) => {
                    let opening = Box::pin(self.open(permit, connect_timeout));
                    return opening.await;
                }
                Checkout::Idle(lease) => {
                    if self.usable(&lease, None) {
                        return Ok(lease);
                    }
                    lease.discard(CloseReason::OriginClosed);
                }
            }
        }
    }

    /// Whether a request of the second class may take a connection now (see
    /// [`Priority`]).
    pub fn second_may_take(&self) -> bool {
        self.pool.second_may_take()
    }

    /// A request on `lease`, a reused connection, failed before any response byte:
    /// the origin closed it, which is evidence for [`LearnedCloses`]. `asked`: when the
    /// request asked for the connection.
    pub fn closed_under_request(&self, lease: &Lease, asked: Instant) {
        let now = Instant::now();
        let seen_after = lease.idle_for().saturating_add(now.saturating_duration_since(asked));
        self.learned.closed(close_under(lease, seen_after, now));
    }

    /// The origin answered the request on `lease` with a response of `kind`: marks the
    /// connection with it, and says whether a learned rule ends its reuse after it.
    pub fn answered(&self, lease: &mut Lease, kind: ResponseKind) -> Option<CloseRule> {
        let previous = ResponseKind::from_code(lease.mark());
        lease.set_mark(kind.code());
        self.learned.answered(Answer { request: lease.requests(), previous, kind })
    }

    /// Closes `lease` instead of pooling it: a learned `rule` says the origin closes it
    /// after the response that ended at `ended`. Counted as `learned`; the origin's close
    /// may be watched for, to check the rule again.
    pub fn retire_learned(&self, lease: Lease, rule: CloseRule, ended: Instant) {
        let conn = lease.into_inner(CloseReason::Learned);
        self.learned.retire(conn, rule, ended);
    }

    /// Where the origin closes connections without announcing it, as learned.
    pub fn learned(&self) -> &LearnedCloses {
        &self.learned
    }

    /// A newly opened connection, never a pooled one (for a retry after a pooled
    /// connection turned out dead).
    pub async fn connect_fresh(&self, connect_timeout: Duration) -> Result<Lease, LeaseError> {
        let acquired = self.pool.acquire_fresh().await;
        let permit = acquired.map_err(|e| self.queue_error(e))?;
        self.open(permit, connect_timeout).await
    }

    /// Keeps `conn`, opened in `opening`'s slot for an HTTP/2 connection (a TLS
    /// handshake that chose HTTP/1.1 by ALPN), as an idle connection in that slot.
    pub fn keep<S: Shareable>(&self, conn: OriginConn, opening: Opening<S>) {
        if let Some(permit) = opening.into_permit(&self.pool) {
            let now = Instant::now();
            self.pool.adopt(conn, permit, now).release(now);
        }
    }

    /// Shared connections to the same backend, under the same `max_connections` and
    /// counted in the same stats (its HTTP/2 connections).
    pub(super) fn shared<S: Shareable>(&self, assumed_capacity: usize) -> SharedPool<S> {
        self.pool.shared(assumed_capacity)
    }

    /// Whether a connection to the backend opens within `timeout`; the connection is
    /// closed at once and never pooled (a probe of a backend ejected for failed
    /// connects).
    pub async fn can_connect(&self, timeout: Duration) -> bool {
        connect::connect(&self.dial, timeout, &self.tls).await.is_ok()
    }

    async fn open(
        &self,
        permit: ConnectPermit<OriginConn>,
        connect_timeout: Duration,
    ) -> Result<Lease, LeaseError> {
        let started = Instant::now();
        let conn = connect::connect(&self.dial, connect_timeout, &self.tls).await?;
        let now = Instant::now();
        self.connect_time.observe(now - started);
        Ok(self.pool.adopt(conn, permit, now))
    }

    fn queue_error(&self, e: Exhausted) -> LeaseError {
        let max_connections = self.pool.config().max_connections;
        match e {
            Exhausted::QueueFull { waiting } => LeaseError::QueueFull { max_connections, waiting },
            Exhausted::SecondClassFull { waiting } => {
                LeaseError::ShareFull { max_connections, waiting }
            }
            Exhausted::QueueTimeout { waited } => {
                LeaseError::QueueTimeout { max_connections, waited }
            }
        }
    }

    /// Time to open each new connection.
    pub fn connect_time(&self) -> &Histogram {
        &self.connect_time
    }

    /// Whether connections to the backend speak TLS.
    pub fn is_tls(&self) -> bool {
        self.dial.tls.is_some()
    }

    /// TLS handshakes of new connections (none for a cleartext backend).
    pub fn tls_counts(&self) -> &TlsCounts {
        &self.tls
    }

    /// The pool's counters (opened, reused, closed by reason, idle and active now).
    pub fn stats(&self) -> &PoolStats {
        self.pool.stats()
    }

    pub fn config(&self) -> &PoolConfig {
        self.pool.config()
    }

    /// Whether an idle connection is waiting (the balancer prefers such a backend).
    pub fn has_idle(&self) -> bool {
        self.pool.has_idle()
    }

    /// Closes every idle connection now, counted under `reason`.
    pub fn clear_for(&self, reason: CloseReason) {
        self.pool.clear_for(reason);
    }

    /// Closes idle connections past their limits.
    pub fn evict_expired(&self, now: Instant) {
        self.pool.evict_expired(now);
    }

    /// The backend left its group: idle connections close now, busy ones when their
    /// request ends, and none is pooled again.
    pub fn retire(&self) {
        self.pool.retire();
    }

    pub fn is_retired(&self) -> bool {
        self.pool.is_retired()
    }
}

/// The close of the connection of `lease`, just checked out for its next request, seen
/// `seen_after` its last response, at `at`: evidence for [`LearnedCloses`].
fn close_under(lease: &Lease, seen_after: Duration, at: Instant) -> Close {
    Close {
        // The count includes the request the connection was checked out for.
        requests: lease.requests().saturating_sub(1),
        last: ResponseKind::from_code(lease.mark()),
        seen_after,
        at,
    }
}

#[cfg(test)]
mod tests {
    use super::Lease;

    /// A lease, and the idle entry it comes from, of more than 128 bytes is moved by
    /// `memcpy` calls instead of inline copies: a few hundred instructions more per
    /// request on checkout and release (measured with bench/instructions when a
    /// connection grew by 16 bytes).
    #[test]
    fn a_lease_is_moved_by_inline_copies() {
        assert!(std::mem::size_of::<Lease>() <= 128, "{}", std::mem::size_of::<Lease>());
    }
}
