//! Upstream groups and their backends: each backend owns the pool of connections to it.

pub mod connect;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::{CloseReason, Pool, PoolConfig, PoolStatsSnapshot, Pooled};
use tokio::time::Instant;

pub use connect::{ConnectError, UpstreamConn};

use crate::config::UpstreamConfig;

/// One address of an upstream group, with the pool of connections to it.
pub struct Backend {
    pub addr: SocketAddr,
    pub pool: Pool<UpstreamConn>,
}

/// A connection ready to carry one request.
pub type Lease = Pooled<UpstreamConn>;

impl Backend {
    fn new(addr: SocketAddr, config: PoolConfig) -> Self {
        Backend { addr, pool: Pool::new(config) }
    }

    /// The most recently used idle connection that is ready for a request, or a new one.
    ///
    /// An idle connection that fails its readiness check has been closed by the origin
    /// while idle; it is dropped and the next one is tried. Nothing has been sent on it.
    pub async fn lease(&self, connect_timeout: Duration) -> Result<Lease, LeaseError> {
        while let Some(mut lease) = self.pool.checkout(Instant::now()) {
            // A released connection is idle, so this resolves at once; the bound only
            // guards against a connection task that stopped making progress.
            match tokio::time::timeout(connect_timeout, lease.conn().sender.ready()).await {
                Ok(Ok(())) => return Ok(lease),
                Ok(Err(_)) => lease.discard(CloseReason::UpstreamClosed),
                Err(_) => lease.discard(CloseReason::Error),
            }
        }
        self.connect_fresh(connect_timeout).await
    }

    /// A newly opened connection, never a pooled one (for a retry after a pooled
    /// connection turned out dead).
    pub async fn connect_fresh(&self, connect_timeout: Duration) -> Result<Lease, LeaseError> {
        let conn = connect::connect(self.addr, connect_timeout).await?;
        Ok(self.pool.adopt(conn, Instant::now()))
    }
}

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
}

/// A named group of backends (`[upstream.NAME]`), picked round robin.
pub struct Upstream {
    pub name: Arc<str>,
    pub backends: Vec<Backend>,
    next: AtomicUsize,
}

impl Upstream {
    pub fn new(config: &UpstreamConfig) -> Self {
        let backends =
            config.servers.iter().map(|addr| Backend::new(*addr, config.pool.clone())).collect();
        Upstream { name: config.name.as_str().into(), backends, next: AtomicUsize::new(0) }
    }

    /// The next backend in round-robin order.
    pub fn pick(&self) -> &Backend {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        &self.backends[i % self.backends.len()]
    }

    /// Closes idle connections past their limits, on every backend.
    pub fn evict_expired(&self, now: Instant) {
        for b in &self.backends {
            b.pool.evict_expired(now);
        }
    }
}

/// Pool counters of one backend, for status output and tests.
#[derive(Debug, Clone)]
pub struct BackendStats {
    pub upstream: Arc<str>,
    pub backend: SocketAddr,
    pub pool: PoolStatsSnapshot,
}
