//! One backend: a resolved address of an upstream group, and its parts, each with one
//! job and a file of its own: its connections ([`OriginPool`], `lease.rs`), its load
//! ([`Load`], `load.rs`), its health ([`BackendHealth`], `backend_health.rs`) and its
//! counters ([`BackendMetrics`], `metrics.rs`). Callers name the part they touch:
//! `backend.conns.try_idle(now)`, `backend.load.outstanding()`,
//! `backend.health.weight(now)`.
//!
//! A backend lives in an `Arc`: in its group's state, in each request sent to it, and
//! in its probe task; one that leaves its group lives on until the last of them ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::IdleBudget;
use tokio::time::Instant;

use super::backend_health::BackendHealth;
use super::connect::Dial;
use super::lease::OriginPool;
use super::load::Load;
use super::metrics::BackendMetrics;
use super::UpstreamConfig;
use crate::balance::Candidate;

/// One resolved address of an upstream group, with its connections, load, health and
/// counters.
pub struct Backend {
    pub addr: SocketAddr,
    /// Idle connections to it, and the connects that open new ones.
    pub conns: OriginPool,
    /// Requests in flight and latency, for the balancer.
    pub load: Load,
    pub health: BackendHealth,
    pub metrics: BackendMetrics,
}

impl Backend {
    /// A backend at `addr`, which the group's servers list as `host` (the name TLS
    /// verifies and sends).
    pub(super) fn new(
        addr: SocketAddr,
        host: &str,
        config: &UpstreamConfig,
        budget: &Arc<IdleBudget>,
    ) -> Arc<Self> {
        Arc::new(Backend {
            addr,
            conns: OriginPool::new(Dial::new(addr, host, config), config.pool.clone(), budget),
            load: Load::new(Instant::now()),
            health: BackendHealth::new(config.health.clone()),
            metrics: BackendMetrics::default(),
        })
    }

    /// Whether this backend can stay in a group configured as `config`, listed as
    /// `host` (same pool settings, and connections made the same way: source address,
    /// TLS settings and name), keeping its pool, health and latency.
    pub(super) fn fits(&self, config: &UpstreamConfig, host: &str) -> bool {
        self.conns.fits(&config.pool, &Dial::new(self.addr, host, config))
    }
}

/// What the balancer sees of a backend: health's weight, load, and whether an idle
/// connection waits.
impl Candidate for Arc<Backend> {
    fn weight(&self, now: Instant) -> u32 {
        self.health.weight(now)
    }

    fn outstanding(&self) -> usize {
        self.load.outstanding()
    }

    fn latency(&self, now: Instant) -> Option<Duration> {
        self.load.latency.get(now)
    }

    fn has_idle(&self) -> bool {
        self.conns.has_idle()
    }
}
