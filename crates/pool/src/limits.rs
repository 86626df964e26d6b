//! The limits that retire pooled connections, with their defaults.

use std::time::Duration;

/// Limits for one backend's pool.
///
/// The defaults aim at "correct with no tuning" for common application servers:
/// see each field for where its number comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// How long a connection may sit idle before it is closed.
    ///
    /// Default 4 s: below the 5 s idle timeout of Node.js (`keepAliveTimeout`) and
    /// Apache httpd (`KeepAliveTimeout`), so holdfast closes first and never sends a
    /// request on a connection the origin is closing. Reconnecting after a 4 s gap
    /// costs one handshake, which is cheap next to a 502.
    pub idle_timeout: Duration,
    /// How many requests one connection carries before it is retired (0: no limit).
    ///
    /// Default 100,000: high enough that reuse is near perfect, low enough that
    /// long-lived connections are recycled now and then, which spreads load again
    /// after an origin scales out.
    pub max_requests: u64,
    /// How long a connection may live, counted from connect (zero: no limit).
    ///
    /// Default 10 min, for the same reason as `max_requests`, bounded in time so that
    /// a quiet but steady client cannot pin a connection forever.
    pub max_lifetime: Duration,
    /// An optional ceiling on idle connections kept for this backend.
    ///
    /// Default `None`: demand alone bounds idle connections (the recent peak of
    /// requests in flight at once, see [`crate::Pool`]), together with the process-wide
    /// [`crate::IdleBudget`]. A fixed cap below the concurrency a backend really has
    /// closes connections that the next burst opens again (nginx's `keepalive 16`
    /// mistake), so none is set unless asked for.
    pub max_idle: Option<usize>,
    /// How many connections (idle, busy or being opened) this backend may have at once
    /// (0: no limit). Past it, requests wait in the queue.
    ///
    /// Default 1024: far more than one origin process serves at once, so it only acts
    /// when something is wrong (a stalled origin, a flood), and then it keeps holdfast
    /// from opening connections without bound, running out of ports or burying the
    /// origin.
    pub max_connections: usize,
    /// How many requests may wait for a connection when `max_connections` are busy;
    /// past it they get 503 at once. Default 1024, so a short burst queues instead of
    /// failing.
    pub queue_size: usize,
    /// How long a request may wait in the queue before it gets 503. Default 10 s: long
    /// enough to ride out a brief stall, short enough that a client hears back before
    /// its own timeout (browsers and most HTTP clients wait 30 s or more).
    pub queue_timeout: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            idle_timeout: Duration::from_secs(4),
            max_requests: 100_000,
            max_lifetime: Duration::from_secs(600),
            max_idle: None,
            max_connections: 1024,
            queue_size: 1024,
            queue_timeout: Duration::from_secs(10),
        }
    }
}

impl PoolConfig {
    /// Whether a connection that has served `requests` requests is worn out.
    pub(crate) fn is_spent(&self, requests: u64) -> bool {
        self.max_requests != 0 && requests >= self.max_requests
    }
}
