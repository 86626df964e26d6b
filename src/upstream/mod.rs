//! Upstream groups and their backends: each backend owns the pool of connections to
//! it, its health and its load; a group's set of backends changes with reloads and
//! DNS answers while requests keep flowing.
//!
//! A group's current backends, balancer and settings form one [`UpstreamState`] value,
//! swapped whole ([`Upstream::update`]): a request reads one consistent set, and a
//! backend that leaves the set lives on (an `Arc`) until its last request ends.

pub mod check;
pub mod connect;
pub mod discovery;
pub mod health;
pub mod keepalive;
pub mod settings;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use holdfast_pool::{
    Checkout, CloseReason, ConnectPermit, Exhausted, IdleBudget, Pool, PoolStatsSnapshot, Pooled,
};
use tokio::sync::Notify;
use tokio::time::Instant;

pub use connect::{ConnectError, OriginConn};
pub use discovery::Resolution;
pub use settings::{Server, UpstreamConfig};

use crate::balance::{Balancer, Candidate, Ewma};
use crate::metrics::{BackendMetrics, UpstreamMetrics};
use health::{Health, PassiveHealth, Transition};

/// One address of an upstream group, with the pool of connections to it.
pub struct Backend {
    pub addr: SocketAddr,
    pub pool: Pool<OriginConn>,
    /// Local address connections are made from (`None`: the kernel picks).
    pub source_address: Option<IpAddr>,
    pub metrics: BackendMetrics,
    pub health: Health,
    /// Smoothed time to the response head, for the balancer.
    pub latency: Ewma,
    /// The group's passive health settings (they may change on reload).
    passive: ArcSwap<PassiveHealth>,
    /// Requests assigned to this backend and not finished.
    outstanding: AtomicUsize,
    /// The only server of its group: it is never ejected (nowhere else could take its
    /// requests, so an ejection would only turn a blip into an outage).
    alone: AtomicBool,
    /// Itself, for the probe task an ejection starts.
    me: Weak<Backend>,
}

/// A connection ready to carry one request.
pub type Lease = Pooled<OriginConn>;

impl Backend {
    fn new(addr: SocketAddr, config: &UpstreamConfig, budget: &Arc<IdleBudget>) -> Arc<Self> {
        let pool = Pool::with_budget(config.pool.clone(), Some(Arc::clone(budget)));
        Arc::new_cyclic(|me| Backend {
            alone: AtomicBool::new(false),
            me: me.clone(),
            addr,
            pool,
            source_address: config.source_address,
            metrics: BackendMetrics::default(),
            health: Health::new(),
            latency: Ewma::new(Instant::now()),
            passive: ArcSwap::from_pointee(config.health.clone()),
            outstanding: AtomicUsize::new(0),
        })
    }

    /// Whether it is the only server of its group: then it is never ejected, since
    /// nowhere else could take its requests.
    pub fn is_alone(&self) -> bool {
        self.alone.load(Ordering::Relaxed)
    }

    /// Whether this backend can stay in a group configured as `config` (same pool
    /// settings and source address), keeping its pool, health and latency.
    fn fits(&self, config: &UpstreamConfig) -> bool {
        *self.pool.config() == config.pool
            && self.source_address == config.source_address
            && !self.pool.is_retired()
    }

    /// Requests assigned to this backend and not finished.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// Share of traffic health allows now: `FULL_WEIGHT` in service, 0 out, in between
    /// while re-admitted.
    pub fn weight(&self, now: Instant) -> u32 {
        if self.health.is_healthy() {
            return health::FULL_WEIGHT;
        }
        self.health.weight(now, &self.passive.load())
    }

    /// Its health now, for status output.
    pub fn health_now(&self, now: Instant) -> health::HealthSnapshot {
        self.health.snapshot(now, &self.passive.load())
    }

    /// Whether health says the backend must get no requests now.
    pub fn is_down(&self, now: Instant) -> bool {
        self.weight(now) == 0
    }

    /// A response (or holdfast's own answer for a failed one) came back with `status`:
    /// health and latency learn from it. `header` is the time to the response head,
    /// when there was one.
    pub fn observe(&self, status: u16, header: Option<Duration>, now: Instant) {
        if let Some(header) = header {
            self.latency.observe(header, now);
        }
        if status >= 500 {
            if self.is_alone() {
                return;
            }
            let transition = self.health.on_server_error(now, &self.passive.load());
            self.act_on(transition);
        } else {
            self.health.on_success();
        }
    }

    /// A connect to this backend failed.
    pub fn connect_failed(&self, now: Instant) {
        if self.is_alone() {
            return;
        }
        let transition = self.health.on_connect_failure(now, &self.passive.load());
        self.act_on(transition);
    }

    /// Logs a health change and, when the backend left service, closes its idle
    /// connections: they lead to a server that is failing or gone.
    pub fn act_on(&self, transition: Option<Transition>) {
        let Some(transition) = transition else { return };
        match transition {
            Transition::Ejected { cause, for_ } => {
                let ejected_for = humantime::format_duration(for_);
                tracing::warn!(backend = %self.addr, cause = %cause.as_str(), ejected_for = %ejected_for, "backend ejected");
                self.metrics.ejections.fetch_add(1, Ordering::Relaxed);
                self.pool.clear_for(CloseReason::Ejected);
                if cause == health::Cause::ConnectFailures {
                    self.start_probing();
                }
            }
            Transition::Reachable => {
                tracing::info!(backend = %self.addr, "backend accepts connections again; back in service");
            }
            Transition::CheckFailed => {
                tracing::warn!(backend = %self.addr, "backend failed its health checks");
                self.metrics.ejections.fetch_add(1, Ordering::Relaxed);
                self.pool.clear_for(CloseReason::Ejected);
            }
            Transition::CheckPassed => {
                tracing::info!(backend = %self.addr, "backend passed its health checks");
            }
        }
    }

    /// Tries a connect now and then while the backend is ejected for failed connects,
    /// and ends the ejection at the first that gets through (see
    /// [`health::PROBE_FIRST_WAIT`]). Ends by itself when the ejection ends or the
    /// backend leaves its group.
    fn start_probing(&self) {
        let me = self.me.clone();
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        tokio::spawn(async move {
            let mut wait = health::PROBE_FIRST_WAIT;
            // Bounded by the ejection: each round first checks that it still runs.
            loop {
                tokio::time::sleep(wait).await;
                let Some(backend) = me.upgrade() else { return };
                if backend.pool.is_retired() || !backend.health.awaits_probe(Instant::now()) {
                    return;
                }
                let (addr, source) = (backend.addr, backend.source_address);
                if connect::connect(addr, source, health::PROBE_TIMEOUT).await.is_ok() {
                    let transition = backend.health.on_probe_connected(Instant::now());
                    backend.act_on(transition);
                    return;
                }
                wait = (wait * 2).min(health::PROBE_MAX_WAIT);
            }
        });
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
            if lease.get().probe() {
                return Some(lease);
            }
            lease.discard(CloseReason::OriginClosed);
        }
    }

    /// An idle connection ready for a request, or a new one; when `max_connections`
    /// are open, waits in the backend's queue (see [`Backend::try_idle`]).
    pub async fn lease(&self, connect_timeout: Duration) -> Result<Lease, LeaseError> {
        loop {
            match self.pool.acquire().await.map_err(|e| self.queue_error(e))? {
                Checkout::Connect(permit) => return self.open(permit, connect_timeout).await,
                Checkout::Idle(lease) if lease.get().probe() => return Ok(lease),
                Checkout::Idle(lease) => lease.discard(CloseReason::OriginClosed),
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
        permit: ConnectPermit<OriginConn>,
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

/// Counts a request against its backend while it lives: [`Candidate::outstanding`]
/// is what least-outstanding and power-of-two-choices balancing read.
pub struct Assigned(Arc<Backend>);

impl Assigned {
    pub fn new(backend: Arc<Backend>) -> Assigned {
        backend.outstanding.fetch_add(1, Ordering::Relaxed);
        Assigned(backend)
    }

    pub fn backend(&self) -> &Arc<Backend> {
        &self.0
    }
}

impl std::ops::Deref for Assigned {
    type Target = Backend;

    fn deref(&self) -> &Backend {
        &self.0
    }
}

impl Drop for Assigned {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Candidate for Arc<Backend> {
    fn weight(&self, now: Instant) -> u32 {
        Backend::weight(self, now)
    }

    fn outstanding(&self) -> usize {
        Backend::outstanding(self)
    }

    fn latency(&self, now: Instant) -> Option<Duration> {
        self.latency.get(now)
    }

    fn has_idle(&self) -> bool {
        self.pool.has_idle()
    }
}

/// A group's backends and settings at one moment; replaced whole on every change.
pub struct UpstreamState {
    pub config: UpstreamConfig,
    pub backends: Vec<Arc<Backend>>,
    pub balancer: Balancer,
    /// What each configured server resolved to (names may fail to resolve).
    pub resolution: Resolution,
}

impl UpstreamState {
    /// The index of the backend for the next request, skipping the indices in
    /// `exclude` (backends this request already failed on): the balancer's pick among
    /// backends in service, or, while the group is in panic, any backend in turn.
    ///
    /// The group is in panic when fewer than `panic_threshold` percent of its backends
    /// are in service, and always when none is: requests then go to backends health
    /// has taken out, because an ejection that outlasts the origin's outage only
    /// lengthens it. A lone backend is never out (see [`Backend::is_alone`]).
    pub fn choose(&self, exclude: &[usize], now: Instant) -> Option<usize> {
        if let [only] = &self.backends[..] {
            debug_assert!(only.is_alone());
            return exclude.is_empty().then_some(0);
        }
        if !self.in_panic(now) {
            if let Some(i) = self.balancer.pick(&self.backends, exclude, now) {
                return Some(i);
            }
            if self.backends.iter().any(|b| !b.is_down(now)) {
                // Some backend is in service; this request has been to each of them.
                return None;
            }
        }
        self.balancer.pick_ignoring_health(self.backends.len(), exclude)
    }

    /// Whether fewer than `panic_threshold` percent of the backends are in service
    /// (never with a threshold of 0, the default).
    fn in_panic(&self, now: Instant) -> bool {
        let threshold = usize::from(self.config.health.panic_threshold);
        if threshold == 0 {
            return false;
        }
        let in_service = self.backends.iter().filter(|b| !b.is_down(now)).count();
        in_service * 100 < threshold * self.backends.len()
    }

    /// Why no backend may take a request now, for the 502 the client gets.
    pub fn unavailable(&self, now: Instant) -> String {
        if self.backends.is_empty() {
            let unresolved: Vec<String> = self
                .resolution
                .entries
                .iter()
                .filter_map(|e| {
                    e.error.as_ref().map(|err| format!("{} does not resolve ({err})", e.server))
                })
                .collect();
            if unresolved.is_empty() {
                return "the group has no servers".into();
            }
            return format!("the group has no servers: {}", unresolved.join("; "));
        }
        let states: Vec<String> = self
            .backends
            .iter()
            .map(|b| {
                let h = b.health_now(now);
                let cause = h.cause.map_or("", |c| c.as_str());
                match h.ejected_for {
                    Some(left) => {
                        format!("{} ejected ({cause}) for {:.1}s more", b.addr, left.as_secs_f64())
                    }
                    None => format!("{} {} ({cause})", b.addr, h.state.as_str()),
                }
            })
            .collect();
        format!("all {} servers are down: {}", self.backends.len(), states.join("; "))
    }
}

/// A named group of backends (`[upstream.NAME]`).
pub struct Upstream {
    pub name: Arc<str>,
    pub metrics: UpstreamMetrics,
    state: ArcSwap<UpstreamState>,
    budget: Arc<IdleBudget>,
    /// Serialises [`Upstream::update`] (a reload and a DNS refresh may race).
    updating: Mutex<()>,
    /// The group left the config: its background tasks end.
    removed: AtomicBool,
    /// Wakes the background tasks when the settings change.
    pub(crate) changed: Notify,
}

impl Upstream {
    /// A group with a backend for every address in `resolution`; idle connections count
    /// against `budget`, shared by all groups.
    pub fn new(config: UpstreamConfig, resolution: Resolution, budget: &Arc<IdleBudget>) -> Self {
        let backends: Vec<Arc<Backend>> = resolution
            .addrs()
            .into_iter()
            .map(|addr| Backend::new(addr, &config, budget))
            .collect();
        mark_alone(&backends);
        let state =
            UpstreamState { balancer: Balancer::new(config.balance), config, backends, resolution };
        Upstream {
            name: state.config.name.as_str().into(),
            metrics: UpstreamMetrics::default(),
            state: ArcSwap::from_pointee(state),
            budget: Arc::clone(budget),
            updating: Mutex::new(()),
            removed: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    /// The current backends and settings.
    pub fn state(&self) -> Arc<UpstreamState> {
        self.state.load_full()
    }

    /// Reads the current state without taking a reference count: for code that does
    /// not hold them across an `.await`.
    pub fn with_state<T>(&self, f: impl FnOnce(&UpstreamState) -> T) -> T {
        f(&self.state.load())
    }

    /// Applies new settings and addresses. Backends whose address stays, with the same
    /// pool settings, keep their pool (warm connections), health and latency; the others
    /// are retired: no new requests, idle connections closed now, busy ones when their
    /// request ends.
    pub fn update(&self, config: UpstreamConfig, resolution: Resolution) {
        let _serial = self.updating.lock().unwrap_or_else(|e| e.into_inner());
        self.apply(config, resolution);
    }

    /// Applies a fresh DNS answer, unless the state changed since `seen` was read (a
    /// reload won the race, and its own lookup stands).
    pub fn refresh(&self, seen: &Arc<UpstreamState>, resolution: Resolution) {
        let _serial = self.updating.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::ptr_eq(&self.state.load(), seen) {
            self.apply(seen.config.clone(), resolution);
        }
    }

    /// [`Upstream::update`]'s work; the caller holds `updating`.
    fn apply(&self, config: UpstreamConfig, resolution: Resolution) {
        let old = self.state.load_full();
        let mut kept = Vec::new();
        let backends: Vec<Arc<Backend>> = resolution
            .addrs()
            .into_iter()
            .map(|addr| match old.backends.iter().find(|b| b.addr == addr && b.fits(&config)) {
                Some(b) => {
                    b.passive.store(Arc::new(config.health.clone()));
                    kept.push(addr);
                    Arc::clone(b)
                }
                None => Backend::new(addr, &config, &self.budget),
            })
            .collect();
        mark_alone(&backends);
        for b in &old.backends {
            if !backends.iter().any(|n| Arc::ptr_eq(n, b)) {
                tracing::info!(upstream = %self.name, backend = %b.addr, "backend removed; draining");
                b.pool.retire();
            }
        }
        for b in &backends {
            if !kept.contains(&b.addr) {
                tracing::info!(upstream = %self.name, backend = %b.addr, "backend added");
            }
        }
        let balancer = Balancer::new(config.balance);
        self.state.store(Arc::new(UpstreamState { config, backends, balancer, resolution }));
        self.changed.notify_waiters();
    }

    /// The group left the config: its backends drain and its background tasks end.
    pub fn remove(&self) {
        self.removed.store(true, Ordering::Release);
        for b in &self.state.load().backends {
            b.pool.retire();
        }
        self.changed.notify_waiters();
    }

    /// holdfast stops: idle connections close now (counted as `shutdown`), and the
    /// group winds down as if removed.
    pub fn shut_down(&self) {
        for b in &self.state.load().backends {
            b.pool.clear_for(CloseReason::Shutdown);
        }
        self.remove();
    }

    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Closes idle connections past their limits, on every backend.
    pub fn evict_expired(&self, now: Instant) {
        for b in &self.state.load().backends {
            b.pool.evict_expired(now);
        }
    }
}

/// Tells each backend whether it is the only one of its group.
fn mark_alone(backends: &[Arc<Backend>]) {
    let alone = backends.len() == 1;
    for b in backends {
        b.alone.store(alone, Ordering::Relaxed);
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
    pub not_replayed: u64,
    /// Times health took it out of service (passive ejections and failed checks).
    pub ejections: u64,
    /// Where its health stands now (`healthy`, `ejected`, `recovering`, ...).
    pub health: &'static str,
}

/// The upstream groups in force, for whoever reports on them (status, metrics); a
/// reload replaces the list.
#[derive(Default)]
pub struct Upstreams(ArcSwap<Vec<Arc<Upstream>>>);

impl Upstreams {
    pub fn current(&self) -> Arc<Vec<Arc<Upstream>>> {
        self.0.load_full()
    }

    pub fn set(&self, groups: Vec<Arc<Upstream>>) {
        self.0.store(Arc::new(groups));
    }

    /// Every backend in force, with its group.
    pub fn backends(&self) -> Vec<(Arc<Upstream>, Arc<Backend>)> {
        let mut out = Vec::new();
        for u in self.current().iter() {
            for b in &u.state().backends {
                out.push((Arc::clone(u), Arc::clone(b)));
            }
        }
        out
    }
}
