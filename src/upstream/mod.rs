//! Upstream groups and their backends: each backend owns the pool of connections to
//! it, its health and its load; a group's set of backends changes with reloads and
//! DNS answers while requests keep flowing.
//!
//! A group's current backends, balancer and settings form one [`UpstreamState`] value,
//! swapped whole ([`Upstream::update`]): a request reads one consistent set, and a
//! backend that leaves the set lives on (an `Arc`) until its last request ends.
//!
//! This file holds the groups; a backend's parts each have a file: `backend.rs` (the
//! backend: its address and parts), `lease.rs` (its connections), `load.rs` (requests
//! in flight, latency), `backend_health.rs` (its health, and what ejection does) and
//! `metrics.rs` (what groups and backends count).

mod backend;
mod backend_health;
pub mod check;
pub mod connect;
pub mod discovery;
pub mod h2;
pub mod health;
pub mod keepalive;
pub mod learned;
mod lease;
mod load;
mod metrics;
mod session;
pub mod settings;
pub mod share;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use holdfast_pool::{CloseReason, IdleBudget};
use tokio::sync::Notify;
use tokio::time::Instant;

pub use backend::Backend;
pub use connect::{ConnectError, OriginConn};
pub use discovery::Resolution;
pub use lease::{Lease, LeaseError};
pub use load::Assigned;
pub use metrics::{
    BackendMetrics, BackendSnapshot, BackendStats, UpstreamMetrics, UpstreamSnapshot,
    UpstreamsSnapshot,
};
pub use session::{Session, Want};
pub use settings::{ContainerRef, Server, UpstreamConfig};

use crate::balance::Balancer;

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
    /// lengthens it. A lone backend is never out (see [`BackendHealth::is_alone`](backend_health::BackendHealth::is_alone)).
    pub fn choose(&self, exclude: &[usize], now: Instant) -> Option<usize> {
        if let [only] = &self.backends[..] {
            debug_assert!(only.health.is_alone());
            return exclude.is_empty().then_some(0);
        }
        if !self.in_panic(now) {
            if let Some(i) = self.balancer.pick(&self.backends, exclude, now) {
                return Some(i);
            }
            if self.backends.iter().any(|b| !b.health.is_down(now)) {
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
        let in_service = self.backends.iter().filter(|b| !b.health.is_down(now)).count();
        in_service * 100 < threshold * self.backends.len()
    }

    /// Why no backend may take a request now, for the 502 the client gets.
    pub fn unavailable(&self, now: Instant) -> String {
        if self.backends.is_empty() {
            if self.resolution.entries.is_empty() {
                // No server at all: only Docker discovery leaves a group so (a file's
                // group needs one), when none of its containers is in service.
                return "no container of the group is in service (starting, unhealthy, \
                        paused or stopping)"
                    .into();
            }
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
                let h = b.health.snapshot(now);
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
            .targets()
            .into_iter()
            .map(|t| Backend::new(t.addr, &t.host, t.container, &config, budget))
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
            .targets()
            .into_iter()
            .map(|t| match old.backends.iter().find(|b| b.is(&t) && b.fits(&config, &t.host)) {
                Some(b) => {
                    b.health.set_passive(config.health.clone());
                    kept.push(Arc::clone(b));
                    Arc::clone(b)
                }
                None => Backend::new(t.addr, &t.host, t.container, &config, &self.budget),
            })
            .collect();
        mark_alone(&backends);
        for b in &old.backends {
            if !backends.iter().any(|n| Arc::ptr_eq(n, b)) {
                let container = b.container_name();
                tracing::info!(upstream = %self.name, backend = %b.addr, container, "backend removed; draining");
                b.retire(old.config.drain_timeout);
            }
        }
        for b in &backends {
            if !kept.iter().any(|k| Arc::ptr_eq(k, b)) {
                let container = b.container_name();
                tracing::info!(upstream = %self.name, backend = %b.addr, container, "backend added");
            }
        }
        let balancer = Balancer::new(config.balance);
        self.state.store(Arc::new(UpstreamState { config, backends, balancer, resolution }));
        self.changed.notify_waiters();
    }

    /// The group left the config: its backends drain and its background tasks end.
    pub fn remove(&self) {
        self.removed.store(true, Ordering::Release);
        let state = self.state.load();
        for b in &state.backends {
            b.retire(state.config.drain_timeout);
        }
        self.changed.notify_waiters();
    }

    /// holdfast stops: idle connections close now (counted as `shutdown`), and the
    /// group winds down as if removed.
    pub fn shut_down(&self) {
        for b in &self.state.load().backends {
            b.conns.clear_for(CloseReason::Shutdown);
            if let Some(h2) = &b.h2 {
                h2.clear_for(CloseReason::Shutdown);
                h2.retire();
            }
        }
        self.remove();
    }

    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Closes idle connections past their limits, on every backend.
    pub fn evict_expired(&self, now: Instant) {
        for b in &self.state.load().backends {
            b.conns.evict_expired(now);
            if let Some(h2) = &b.h2 {
                h2.evict_expired(now);
            }
        }
    }
}

/// Tells each backend whether it is the only one of its group.
fn mark_alone(backends: &[Arc<Backend>]) {
    let alone = backends.len() == 1;
    for b in backends {
        b.health.set_alone(alone);
    }
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

    /// The active health check of the group `name`, when it is in force and has one.
    pub fn check_of(&self, name: &str) -> Option<Arc<check::CheckConfig>> {
        let groups = self.current();
        let group = groups.iter().find(|u| &*u.name == name)?;
        group.with_state(|s| s.config.check.clone().map(Arc::new))
    }

    /// The counters of every group in force and of each of its backends, read now.
    pub fn snapshot(&self) -> UpstreamsSnapshot {
        let now = Instant::now();
        let mut snapshot = UpstreamsSnapshot::default();
        for u in self.current().iter() {
            for b in &u.state().backends {
                snapshot.backends.push(BackendSnapshot::read(&u.name, b, now));
            }
            snapshot.groups.push(UpstreamSnapshot::read(u));
        }
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn container(id: &str, addr: &str) -> Server {
        let container =
            ContainerRef { id: id.into(), name: format!("c-{id}").into(), started: "t0".into() };
        Server::Container { addr: addr.parse().expect("addr"), container }
    }

    async fn group_of(servers: &[Server]) -> (UpstreamConfig, Resolution) {
        let config = UpstreamConfig::new("web", servers.to_vec());
        let resolution = discovery::resolve(servers, &Resolution::default()).await;
        (config, resolution)
    }

    #[tokio::test]
    async fn a_container_that_takes_over_an_address_gets_a_backend_of_its_own() {
        let budget = Arc::new(IdleBudget::new(16));
        let a = container("a", "127.0.0.1:5000");
        let (config, resolution) = group_of(std::slice::from_ref(&a)).await;
        let group = Upstream::new(config, resolution, &budget);
        let first = Arc::clone(&group.state().backends[0]);

        // The same container read again keeps its backend, and so its pool.
        let (config, resolution) = group_of(std::slice::from_ref(&a)).await;
        group.update(config, resolution);
        assert!(Arc::ptr_eq(&group.state().backends[0], &first));

        // Another container at the same address is another backend.
        let b = container("b", "127.0.0.1:5000");
        let (config, resolution) = group_of(&[b]).await;
        group.update(config, resolution);
        let second = Arc::clone(&group.state().backends[0]);
        assert!(!Arc::ptr_eq(&second, &first));
        assert_eq!(second.addr, first.addr);
        assert_eq!(second.container_name(), "c-b");
        assert_eq!(Arc::strong_count(&first), 1, "the old backend is held by nothing else");
    }

    #[tokio::test]
    async fn a_backend_that_refuses_a_connect_or_is_ejected_is_measured_afresh() {
        let budget = Arc::new(IdleBudget::new(16));
        // Two: a lone backend is never ejected.
        let (a, b) = (container("a", "127.0.0.1:5000"), container("b", "127.0.0.1:5001"));
        let (config, resolution) = group_of(&[a, b]).await;
        let group = Upstream::new(config, resolution, &budget);
        let backend = Arc::clone(&group.state().backends[0]);
        let now = Instant::now();
        let slow = || backend.observe(200, Some(Duration::from_millis(900)), now);

        slow();
        assert!(backend.load.latency.get(now).is_some());
        // One refused connect is not an ejection, but the old answer is forgotten.
        backend.connect_failed(now);
        assert_eq!(backend.health.snapshot(now).ejections, 0);
        assert_eq!(backend.load.latency.get(now), None);

        slow();
        for _ in 0..health::DEFAULT_MAX_5XX {
            backend.observe(503, None, now);
        }
        assert_eq!(backend.health.snapshot(now).ejections, 1);
        assert_eq!(backend.load.latency.get(now), None, "an ejected backend comes back unmeasured");
    }

    #[tokio::test]
    async fn a_removed_backend_with_a_drain_time_is_cut_off_after_it() {
        let budget = Arc::new(IdleBudget::new(16));
        let (a, b) = (container("a", "127.0.0.1:5000"), container("b", "127.0.0.1:5001"));
        let (mut config, resolution) = group_of(&[a, b.clone()]).await;
        config.drain_timeout = Some(Duration::from_millis(50));
        let group = Upstream::new(config.clone(), resolution, &budget);
        let (leaving, staying) = {
            let state = group.state();
            (Arc::clone(&state.backends[0]), Arc::clone(&state.backends[1]))
        };
        let (_, resolution) = group_of(std::slice::from_ref(&b)).await;
        group.update(UpstreamConfig { servers: vec![b], ..config }, resolution);
        let wait = Duration::from_secs(2);
        tokio::time::timeout(wait, leaving.cut_off()).await.expect("cut off after 50 ms");
        let staying_cut = tokio::time::timeout(Duration::from_millis(200), staying.cut_off());
        assert!(staying_cut.await.is_err(), "a backend that stays is never cut off");
    }

    #[tokio::test]
    async fn a_removed_group_is_let_go_by_its_background_tasks() {
        let budget = Arc::new(IdleBudget::new(16));
        let (config, resolution) = group_of(&[container("a", "127.0.0.1:5000")]).await;
        let group = Arc::new(Upstream::new(config, resolution, &budget));
        tokio::spawn(discovery::run(Arc::clone(&group)));
        tokio::spawn(check::run(Arc::clone(&group)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A change first: each task goes round its loop once before the removal.
        group.changed.notify_waiters();
        tokio::time::sleep(Duration::from_millis(20)).await;
        group.remove();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while Arc::strong_count(&group) > 1 {
            assert!(tokio::time::Instant::now() < deadline, "a task still holds the group");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
