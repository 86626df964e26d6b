//! Upstream groups and their backends: each backend owns the pool of connections to it.

pub mod connect;
pub mod keepalive;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::{
    Checkout, CloseReason, ConnectPermit, Exhausted, IdleBudget, Pool, PoolConfig,
    PoolStatsSnapshot, Pooled,
};
use tokio::time::Instant;

pub use connect::{ConnectError, UpstreamConn};

use crate::config::UpstreamConfig;
use crate::metrics::{BackendMetrics, UpstreamMetrics};

/// One address of an upstream group, with the pool of connections to it.
pub struct Backend {
    pub addr: SocketAddr,
    pub pool: Pool<UpstreamConn>,
    /// Local address connections are made from (`None`: the kernel picks).
    pub source_address: Option<IpAddr>,
    pub metrics: BackendMetrics,
}

/// A connection ready to carry one request.
pub type Lease = Pooled<UpstreamConn>;

/// Pooled connections idle at least this long get a liveness probe (a system call)
/// before reuse (see [`Backend::try_idle`]): shorter than any origin's idle timeout.
pub const PROBE_AFTER_IDLE: Duration = Duration::from_millis(250);

impl Backend {
    fn new(
        addr: SocketAddr,
        config: PoolConfig,
        source_address: Option<IpAddr>,
        budget: Option<Arc<IdleBudget>>,
    ) -> Self {
        let pool = Pool::with_budget(config, budget);
        Backend { addr, pool, source_address, metrics: BackendMetrics::default() }
    }

    /// The most recently used idle connection that is ready for a request, if there is
    /// one now; no waiting. `now` is the time of the request, read once for it.
    ///
    /// A connection that fails its liveness check has been closed by the origin (or
    /// sent bytes nobody asked for) while idle; it is dropped and the next one is
    /// tried. Nothing has been sent on it.
    ///
    /// # Races
    /// The pool drops connections the event loop has seen become readable (a FIN or
    /// stray bytes), which costs no system call. What the event loop has not looked at
    /// yet, a close that arrived in the last moments, a peek finds
    /// ([`UpstreamConn::probe`]); it runs on connections idle for [`PROBE_AFTER_IDLE`]
    /// or longer, because that is when origins close: after their idle timeout (1 to
    /// 5 s for Gunicorn, Node.js or Apache httpd), or when they restart. Busy
    /// connections are reused on the event loop's word, which saves a system call on
    /// almost every request under load; an origin that ends a connection after a
    /// response says so with `Connection: close`. A close still in flight is
    /// `proxy::retry`'s to handle.
    pub fn try_idle(&self, now: Instant) -> Option<Lease> {
        loop {
            let lease = self.pool.checkout(now)?;
            if lease.idle_for() < PROBE_AFTER_IDLE || lease.get().probe() {
                return Some(lease);
            }
            lease.discard(CloseReason::UpstreamClosed);
        }
    }

    /// An idle connection ready for a request, or a new one; when `max_connections`
    /// are open, waits in the backend's queue (see [`Backend::try_idle`]).
    pub async fn lease(&self, connect_timeout: Duration) -> Result<Lease, LeaseError> {
        loop {
            match self.pool.acquire().await.map_err(|e| self.queue_error(e))? {
                Checkout::Connect(permit) => return self.open(permit, connect_timeout).await,
                Checkout::Idle(lease) if lease.get().probe() => return Ok(lease),
                Checkout::Idle(lease) => lease.discard(CloseReason::UpstreamClosed),
            }
        }
    }

    /// A newly opened connection, never a pooled one (for a retry after a pooled
    /// connection turned out dead).
    pub async fn connect_fresh(&self, connect_timeout: Duration) -> Result<Lease, LeaseError> {
        let permit = self.pool.acquire_fresh().await.map_err(|e| self.queue_error(e))?;
        self.open(permit, connect_timeout).await
    }

    async fn open(
        &self,
        permit: ConnectPermit<UpstreamConn>,
        connect_timeout: Duration,
    ) -> Result<Lease, LeaseError> {
        let started = Instant::now();
        let conn = connect::connect(self.addr, self.source_address, connect_timeout).await?;
        let now = Instant::now();
        self.metrics.connect.observe(now - started);
        Ok(self.pool.adopt(conn, permit, now))
    }

    fn queue_error(&self, e: Exhausted) -> LeaseError {
        let max_connections = self.pool.config().max_connections;
        match e {
            Exhausted::QueueFull { waiting } => LeaseError::QueueFull { max_connections, waiting },
            Exhausted::QueueTimeout { waited } => {
                LeaseError::QueueTimeout { max_connections, waited }
            }
        }
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
    pub metrics: UpstreamMetrics,
    next: AtomicUsize,
}

impl Upstream {
    /// Backends for every server in `config`; their idle connections count against
    /// `budget`, shared by all upstreams.
    pub fn new(config: &UpstreamConfig, budget: &Arc<IdleBudget>) -> Self {
        let backends = config
            .servers
            .iter()
            .map(|addr| {
                let budget = Some(Arc::clone(budget));
                Backend::new(*addr, config.pool.clone(), config.source_address, budget)
            })
            .collect();
        Upstream {
            name: config.name.as_str().into(),
            backends,
            metrics: UpstreamMetrics::default(),
            next: AtomicUsize::new(0),
        }
    }

    /// The index in `backends` of the next backend in round-robin order.
    pub fn pick(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.backends.len()
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
    /// Requests sent again on a new connection after a pooled one failed under them.
    pub retries: u64,
    /// Requests that failed on a pooled connection after they may have reached the
    /// origin, and were answered 502 instead of being sent again (non-idempotent
    /// method, or a streamed body).
    pub unsafe_to_retry: u64,
}
