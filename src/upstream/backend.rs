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
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::IdleBudget;
use tokio::sync::watch;
use tokio::time::Instant;

use super::backend_health::BackendHealth;
use super::connect::Dial;
use super::discovery::Target;
use super::h2::{H2Conns, Leased, StreamLease, ASSUMED_STREAMS};
use super::lease::OriginPool;
use super::load::Load;
use super::metrics::BackendMetrics;
use super::settings::{ContainerRef, Speaks};
use super::share::Shares;
use super::{LeaseError, UpstreamConfig};
use crate::balance::Candidate;

/// One resolved address of an upstream group, with its connections, load, health and
/// counters.
pub struct Backend {
    pub addr: SocketAddr,
    /// The container at `addr`, when Docker discovery found it: part of who the
    /// backend is, with the address.
    pub container: Option<ContainerRef>,
    /// Its HTTP/1.1 connections, idle and busy, and the connects that open new ones;
    /// its pool's bound and counters cover its HTTP/2 connections too.
    pub conns: OriginPool,
    /// Its HTTP/2 connections, when it speaks or may speak HTTP/2: in the same pool,
    /// under the same `max_connections`.
    pub h2: Option<H2Conns>,
    /// What it speaks: HTTP/1.1, HTTP/2, or not known until the first TLS handshake.
    speaks: AtomicU8,
    /// Requests in flight and latency, for the balancer.
    pub load: Load,
    pub health: BackendHealth,
    pub metrics: BackendMetrics,
    /// What each client holds of it, so none takes it all while it is crowded.
    pub shares: Arc<Shares>,
    /// Set once it left its group and its drain time passed: its upgraded connections
    /// close. (Shared with the timer that sets it, which so holds nothing else of the
    /// backend.)
    cut: Arc<watch::Sender<bool>>,
}

impl Backend {
    /// A backend at `addr`, which the group's servers list as `host` (the name TLS
    /// verifies and sends).
    pub(super) fn new(
        addr: SocketAddr,
        host: &str,
        container: Option<ContainerRef>,
        config: &UpstreamConfig,
        budget: &Arc<IdleBudget>,
    ) -> Arc<Self> {
        let dial = Dial::new(addr, host, config);
        let speaks = dial.speaks;
        // The HTTP/1.1 pool offers only HTTP/1.1, whatever the group may speak.
        let h1_dial = dial.speaking(Speaks::Http1);
        let conns = OriginPool::new(h1_dial, &config.name, config.pool.clone(), budget);
        let h2 = (speaks != Speaks::Http1)
            .then(|| H2Conns::new(dial, config.h2_ping_interval, conns.shared(ASSUMED_STREAMS)));
        Arc::new(Backend {
            addr,
            container,
            conns,
            h2,
            speaks: AtomicU8::new(speaks as u8),
            load: Load::new(Instant::now()),
            health: BackendHealth::new(config.health.clone()),
            metrics: BackendMetrics::default(),
            shares: Arc::default(),
            cut: Arc::new(watch::Sender::new(false)),
        })
    }

    /// Whether this backend is the one `target` names: the same address and, for a
    /// container, the same container (and process).
    pub(super) fn is(&self, target: &Target) -> bool {
        self.addr == target.addr && self.container == target.container
    }

    /// The container's name, or `""` for a backend that is no container.
    pub fn container_name(&self) -> &str {
        self.container.as_ref().map_or("", |c| &c.name)
    }

    /// Whether this backend can stay in a group configured as `config`, listed as
    /// `host` (same pool settings, and connections made the same way: source address,
    /// TLS settings and name), keeping its pool, health and latency.
    pub(super) fn fits(&self, config: &UpstreamConfig, host: &str) -> bool {
        let dial = Dial::new(self.addr, host, config);
        self.h2.is_some() == (dial.speaks != Speaks::Http1)
            && self.h2.as_ref().is_none_or(|h2| h2.fits(&dial, config))
            && self.conns.fits(&config.pool, &dial.speaking(Speaks::Http1))
    }

    /// Takes no new requests' connections; open ones close as their requests end
    /// (the backend left its group), and its upgraded connections after `drain` when
    /// one is given.
    pub(super) fn retire(&self, drain: Option<Duration>) {
        self.conns.retire();
        if let Some(h2) = &self.h2 {
            h2.retire();
        }
        if let Some(drain) = drain {
            let cut = Arc::clone(&self.cut);
            tokio::spawn(async move {
                tokio::time::sleep(drain).await;
                cut.send_replace(true);
            });
        }
    }

    /// Completes once the backend left its group and its drain time is over (never
    /// for one that stays, or one without a drain time).
    pub async fn cut_off(&self) {
        let mut cut = self.cut.subscribe();
        if cut.wait_for(|cut| *cut).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// What it speaks, as far as is known: `Either` until a TLS handshake has told.
    pub fn speaks(&self) -> Speaks {
        match self.speaks.load(Ordering::Relaxed) {
            s if s == Speaks::H2 as u8 => Speaks::H2,
            s if s == Speaks::Either as u8 => Speaks::Either,
            _ => Speaks::Http1,
        }
    }

    /// ALPN told what it speaks.
    pub fn learned(&self, speaks: Speaks) {
        self.speaks.store(speaks as u8, Ordering::Relaxed);
    }

    /// A stream on one of its HTTP/2 connections, within `connect_timeout` if one has to
    /// open; `None` when it speaks HTTP/1.1: it has no HTTP/2 connections, it said so
    /// before, or ALPN chose HTTP/1.1 just now (that connection then joins the HTTP/1.1
    /// pool). What ALPN chose is remembered.
    pub async fn lease_stream(
        &self,
        connect_timeout: Duration,
    ) -> Result<Option<StreamLease>, LeaseError> {
        let Some(h2) = self.h2.as_ref().filter(|_| self.speaks() != Speaks::Http1) else {
            return Ok(None);
        };
        match h2.lease(connect_timeout, self.conns.tls_counts()).await? {
            Leased::Stream(lease) => {
                if self.speaks() == Speaks::Either {
                    self.learned(Speaks::H2);
                }
                Ok(Some(lease))
            }
            Leased::Http1(conn, opening) => {
                self.learned(Speaks::Http1);
                self.conns.keep(conn, opening);
                Ok(None)
            }
        }
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
        self.conns.has_idle() || self.h2.as_ref().is_some_and(H2Conns::has_idle)
    }
}
