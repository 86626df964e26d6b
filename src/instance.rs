//! A running holdfast: listeners bound, upstream groups and their pools created,
//! background eviction, discovery and health checks started, the admin listener and
//! access log (when configured) running beside them; and [`Instance::reload`], which
//! applies a new config to all of it without dropping a request or a warm pool.

mod merge;
mod process;
pub mod signals;
mod site;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::acme::{self, Acme, AcmeView};
use crate::admin::{self, AdminState, ReloadRequest};
use crate::config::{Config, ConfigDiff, ConfigError};
use crate::connections::Connections;
use crate::docker::{self, Discovered, DockerState};
use crate::listener::{self, ListenerConfig};
use crate::metrics::export::Exporter;
use crate::proxy::answers::Answers;
use crate::proxy::{Proxy, Site};
use crate::resources::Resources;
use crate::spool::Spools;
use crate::telemetry::access_log::AccessLog;
use crate::telemetry::failures;
use crate::tls::certs::{CertError, ServerCerts};
use crate::tls::failures::TlsMetrics;
use crate::tls::server::TlsServer;
use crate::tls::store::DynamicCerts;
use crate::upstream::{
    check, discovery, BackendStats, Resolution, Upstream, UpstreamConfig, Upstreams,
};
use arc_swap::{ArcSwap, ArcSwapOption};
use holdfast_pool::IdleBudget;
use process::{ProcessSnapshot, Snapshot};
use site::{open_route_logs, site, RouteLogs};

/// Why holdfast could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the admin listener on {addr}: {source}")]
    Admin { addr: SocketAddr, source: std::io::Error },
    #[error("{0}")]
    AccessLog(std::io::Error),
    #[error("listener {addr}: {source}")]
    Certificate { addr: SocketAddr, source: CertError },
    #[error("[acme]: {0}")]
    Acme(#[from] acme::StartError),
}

/// Where reloads read the config: a file, adjusted the way the command line adjusted
/// it at start (`--admin`, `--access-log` override the file).
pub struct ConfigSource {
    pub path: PathBuf,
    pub adjust: Adjust,
}

/// Changes a config read from the file before it is applied.
pub type Adjust = Box<dyn Fn(&mut Config) + Send + Sync>;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("holdfast was started without --config: there is no file to reload")]
    NoFile,
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("listener {addr}: {source}")]
    Certificate { addr: SocketAddr, source: CertError },
    #[error("{0}")]
    AccessLog(std::io::Error),
}

/// A started proxy. Dropping it without [`Instance::shutdown`] leaves it running until
/// the runtime ends.
pub struct Instance {
    addrs: Vec<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    draining: Arc<AtomicBool>,
    /// Stops background tasks (eviction, reload requests).
    stop: watch::Sender<bool>,
    /// Stops the admin listener, which outlives the drain so `/healthz` can say 503.
    stop_admin: watch::Sender<bool>,
}

/// What reloads change and everything that reads it.
struct Shared {
    /// Where reloads read the config (`None`: quick mode, nothing to reload).
    source: Option<ConfigSource>,
    live: ReloadLock<Live>,
    /// The groups in force, for status and metrics.
    groups: Arc<Upstreams>,
    budget: Arc<IdleBudget>,
    /// Where buffered bodies are held, across listeners; its bounds apply at start.
    spools: Arc<Spools>,
    /// Open files and local ports, read at start; the budget derives from them.
    resources: Resources,
    access_log: Option<AccessLog>,
    /// The routes' own access logs, by file, as the config in force names them.
    route_logs: ArcSwap<RouteLogs>,
    connections: Connections,
    /// Responses holdfast made itself, across listeners.
    answers: Arc<Answers>,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    /// What the TLS listeners count, across listeners.
    tls_metrics: Arc<TlsMetrics>,
    /// Certificates and challenge answers from `[acme]`, for the listeners that serve
    /// them.
    acme_certs: Arc<DynamicCerts>,
    /// What the certificate manager shows, when `[acme]` was on at start.
    acme: Option<AcmeView>,
    /// What Docker discovery shows, when `[docker]` was on at start.
    docker: Option<Arc<DockerState>>,
}

/// Each listener's certificate files, read before a config is applied (in config
/// order; `None` for a cleartext listener), so applying it cannot fail.
type ReadCerts = Vec<Option<ServerCerts>>;

/// Reads the certificate files of every TLS listener of `config`.
fn read_certs(config: &Config) -> Result<ReadCerts, (SocketAddr, CertError)> {
    config
        .listeners
        .iter()
        .map(|l| match &l.tls {
            None => Ok(None),
            Some(tls) => ServerCerts::load(&tls.certificates).map(Some).map_err(|e| (l.addr, e)),
        })
        .collect()
}

/// Serialises reloads, and shutdown's taking of the listeners. A reload holds it across
/// name resolution on purpose, so two reloads never interleave; the request path never
/// takes it, which is why this async lock is allowed where `clippy.toml` bans the type.
#[allow(clippy::disallowed_types)]
type ReloadLock<T> = tokio::sync::Mutex<T>;

/// The config in force and what was built from it.
struct Live {
    /// The config as read (the file, or quick mode's): what a reload replaces.
    file: Config,
    /// What Docker discovery found last (empty without `[docker]`).
    discovered: Arc<Discovered>,
    /// `file` with `discovered` added: the config in force.
    config: Config,
    listeners: Vec<LiveListener>,
    upstreams: BTreeMap<String, Arc<Upstream>>,
    /// The certificate manager, when `[acme]` was on at start: reloads change its
    /// names; its other settings, and turning it on or off, wait for a restart.
    acme: Option<Acme>,
}

struct LiveListener {
    /// The address as configured (port 0 stays 0), which identifies it across reloads.
    configured: SocketAddr,
    proxy: Arc<Proxy>,
    stop: watch::Sender<bool>,
    /// The accept loop, which closes the listening socket when it ends.
    accepting: tokio::task::JoinHandle<()>,
    /// The listener's client connections (counted in `Shared::connections` too).
    connections: Connections,
    /// Its TLS server, read by the accept loop at each accept (`None`: cleartext).
    tls: Arc<ArcSwapOption<TlsServer>>,
}

impl Instance {
    /// Binds every listener, resolves server names, then starts serving. Nothing is
    /// served unless every listener could be bound.
    pub async fn start(config: &Config) -> Result<Instance, StartError> {
        Instance::start_from(config, None).await
    }

    /// [`Instance::start`] for a config that came from `source`, which
    /// [`Instance::reload`] reads again.
    pub async fn start_from(
        config: &Config,
        source: Option<ConfigSource>,
    ) -> Result<Instance, StartError> {
        let mut bound = Vec::new();
        for l in &config.listeners {
            let tcp = listener::bind(l.addr, l.backlog)
                .map_err(|source| StartError::Bind { addr: l.addr, source })?;
            bound.push((l.addr, tcp));
        }
        let admin_listener = match config.admin {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartError::Admin { addr, source })?,
            ),
            None => None,
        };
        let certs = read_certs(config)
            .map_err(|(addr, source)| StartError::Certificate { addr, source })?;
        let access_log = AccessLog::open(&config.access_log).map_err(StartError::AccessLog)?;
        let route_logs =
            open_route_logs(config, &RouteLogs::new()).map_err(StartError::AccessLog)?;
        let acme_certs = Arc::new(DynamicCerts::default());
        let acme = match &config.acme {
            Some(settings) => {
                let names = config.acme_names();
                Some(Acme::start(settings.clone(), names, Arc::clone(&acme_certs))?)
            }
            None => None,
        };
        let acme_view = acme.as_ref().map(Acme::view);
        let resources = Resources::read();
        let shared = Arc::new(Shared {
            source,
            live: ReloadLock::new(Live {
                file: config.clone(),
                discovered: Arc::default(),
                config: config.clone(),
                listeners: Vec::new(),
                upstreams: BTreeMap::new(),
                acme,
            }),
            groups: Arc::default(),
            budget: Arc::new(IdleBudget::new(resources.idle_budget(config.max_idle_total))),
            spools: Spools::new(config.spool.clone()),
            resources,
            access_log,
            route_logs: ArcSwap::from_pointee(RouteLogs::new()),
            connections: Connections::default(),
            answers: Arc::default(),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            tls_metrics: Arc::default(),
            acme_certs,
            acme: acme_view,
            docker: config.docker.as_ref().map(|_| Arc::default()),
        });
        let mut addrs = Vec::new();
        for (addr, tcp) in &bound {
            addrs
                .push(tcp.local_addr().map_err(|source| StartError::Bind { addr: *addr, source })?);
        }
        {
            let mut live = shared.live.lock().await;
            let resolved = resolve_all(config, &live.upstreams, Lookups::All).await;
            shared.apply(&mut live, config.clone(), resolved, bound, Some(certs), route_logs);
        }
        let (stop, stop_rx) = watch::channel(false);
        if let (Some(settings), Some(state)) = (&config.docker, &shared.docker) {
            let (publish, found) = watch::channel(Arc::default());
            let groups = Arc::clone(&shared.groups);
            let provider =
                docker::run(settings.clone(), groups, Arc::clone(state), publish, stop_rx.clone());
            tokio::spawn(provider);
            tokio::spawn(follow_docker(Arc::clone(&shared), found, stop_rx.clone()));
        }
        tokio::spawn(evict_idle(Arc::clone(&shared.groups), stop_rx.clone()));
        tokio::spawn(flush_failures(stop_rx.clone()));
        let (reload_tx, reload_rx) = mpsc::channel(4);
        tokio::spawn(serve_reloads(Arc::clone(&shared), reload_rx, stop_rx));
        let draining = Arc::new(AtomicBool::new(false));
        let (stop_admin, stop_admin_rx) = watch::channel(false);
        let mut admin_addr = None;
        if let Some(tcp) = admin_listener {
            let addr = tcp.local_addr().map_err(|source| StartError::Admin {
                addr: config.admin.expect("bound from config.admin"),
                source,
            })?;
            tracing::info!(admin = %addr, "admin listener: /metrics /status /healthz /reload");
            admin_addr = Some(addr);
            let state = AdminState {
                exporter: Exporter::new(scrape(&shared, &draining)),
                upstreams: Arc::clone(&shared.groups),
                resources: shared.resources.clone(),
                budget: Arc::clone(&shared.budget),
                spools: Arc::clone(&shared.spools),
                draining: Arc::clone(&draining),
                acme: shared.acme.clone(),
                started: Instant::now(),
                reload: reload_tx,
            };
            tokio::spawn(admin::serve(tcp, Arc::new(state), stop_admin_rx));
        }
        Ok(Instance { addrs, admin_addr, shared, draining, stop, stop_admin })
    }

    /// The listener addresses bound at start, in config order (useful with port 0).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Where the admin listener accepts, if there is one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Pool and retry counters of every backend in force.
    pub fn stats(&self) -> Vec<BackendStats> {
        let now = Instant::now();
        let backends = self.shared.groups.backends();
        backends.iter().map(|(u, b)| BackendStats::read(&u.name, b, now)).collect()
    }

    /// Makes the access log reopen its file (after rotation).
    pub fn reopen_access_log(&self) {
        if let Some(log) = &self.shared.access_log {
            log.reopen();
        }
        for log in self.shared.route_logs.load().values() {
            log.reopen();
        }
    }

    /// Reads the config file again and applies it (see [`Instance::reload_with`]); says
    /// what changed.
    pub async fn reload(&self) -> Result<ConfigDiff, ReloadError> {
        self.shared.reload_file().await
    }

    /// Applies `config` to the running instance: listeners added and removed, groups
    /// updated (servers that stay keep their pools), routes and timeouts replaced.
    /// Requests in flight finish as they started. Says what changed.
    pub async fn reload_with(&self, config: Config) -> Result<ConfigDiff, ReloadError> {
        self.shared.reload(config).await
    }

    /// Reports draining on `/healthz`, stops accepting, lets requests in flight
    /// finish for up to `drain`, then closes every idle upstream connection and the
    /// admin listener.
    pub async fn shutdown(self, drain: Duration) {
        self.draining.store(true, Ordering::Release);
        let _ = self.stop.send(true);
        let listeners = std::mem::take(&mut self.shared.live.lock().await.listeners);
        for l in &listeners {
            let _ = l.stop.send(true);
            l.connections.stop();
        }
        // Once this returns, no listening socket is left to accept a client.
        for l in listeners {
            let _ = l.accepting.await;
        }
        let connections = &self.shared.connections;
        let deadline = Instant::now() + drain;
        while connections.count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for u in self.shared.groups.current().iter() {
            u.shut_down();
        }
        let _ = self.stop_admin.send(true);
        // Failures counted since their last line would otherwise go unsaid.
        failures::flush_all();
        tracing::info!(unfinished = connections.count(), "stopped");
    }
}

impl Shared {
    async fn reload_file(&self) -> Result<ConfigDiff, ReloadError> {
        let result = match self.read_source() {
            Ok(config) => self.try_reload(config).await,
            Err(e) => Err(e),
        };
        self.settle(result)
    }

    /// Applies `config`; on any error nothing changes.
    async fn reload(&self, config: Config) -> Result<ConfigDiff, ReloadError> {
        let result = self.try_reload(config).await;
        self.settle(result)
    }

    /// The config file, adjusted like the one read at start.
    fn read_source(&self) -> Result<Config, ReloadError> {
        let source = self.source.as_ref().ok_or(ReloadError::NoFile)?;
        let mut config = Config::load(&source.path)?;
        (source.adjust)(&mut config);
        Ok(config)
    }

    /// Resolves and binds what `config` needs, then applies it; on any error nothing
    /// changes.
    async fn try_reload(&self, file: Config) -> Result<ConfigDiff, ReloadError> {
        let mut live = self.live.lock().await;
        warn_unreloadable(&live.file, &file);
        let diff = ConfigDiff::between(&live.file, &file);
        let config = merge::merge(&file, &live.discovered);
        let certs = read_certs(&config)
            .map_err(|(addr, source)| ReloadError::Certificate { addr, source })?;
        let logs =
            open_route_logs(&config, &self.route_logs.load()).map_err(ReloadError::AccessLog)?;
        let resolved = resolve_all(&config, &live.upstreams, Lookups::All).await;
        let mut bound = Vec::new();
        for l in &config.listeners {
            if live.listeners.iter().any(|o| o.configured == l.addr) {
                continue;
            }
            let tcp = listener::bind(l.addr, l.backlog)
                .map_err(|source| ReloadError::Bind { addr: l.addr, source })?;
            bound.push((l.addr, tcp));
        }
        self.apply(&mut live, config, resolved, bound, Some(certs), logs);
        live.file = file;
        follow_acme_names(&mut live).await;
        Ok(diff)
    }

    /// Applies what Docker discovery found: the file's config with `found` added. The
    /// listeners, their certificates and the route logs stay as they are; servers are
    /// resolved again only in groups whose server list changed (a container is an
    /// address).
    async fn apply_discovered(&self, found: Arc<Discovered>) {
        let mut live = self.live.lock().await;
        let config = merge::merge(&live.file, &found);
        let diff = ConfigDiff::between(&live.config, &config);
        let resolved = resolve_all(&config, &live.upstreams, Lookups::Changed).await;
        let logs = (**self.route_logs.load()).clone();
        self.apply(&mut live, config, resolved, Vec::new(), None, logs);
        live.discovered = found;
        follow_acme_names(&mut live).await;
        for change in &diff.changes {
            tracing::info!("docker: {change}");
        }
    }

    /// Counts and logs how a reload ended: each change on a line of its own.
    fn settle(&self, result: Result<ConfigDiff, ReloadError>) -> Result<ConfigDiff, ReloadError> {
        match &result {
            Ok(diff) => {
                self.reloads_ok.fetch_add(1, Ordering::Relaxed);
                if diff.is_empty() {
                    tracing::info!("config reloaded: no changes");
                }
                for change in &diff.changes {
                    tracing::info!("config reloaded: {change}");
                }
            }
            Err(e) => {
                self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!("reload rejected, the config in force stays: {e}");
            }
        }
        result
    }

    /// Makes `config` the config in force: `resolved` holds every group's addresses,
    /// `bound` the sockets of listeners that are new, `certs` each listener's
    /// certificates (`None`: the listeners keep theirs, and none is new). Cannot fail.
    fn apply(
        &self,
        live: &mut Live,
        config: Config,
        mut resolved: BTreeMap<String, Resolution>,
        mut bound: Vec<(SocketAddr, TcpListener)>,
        certs: Option<ReadCerts>,
        logs: RouteLogs,
    ) {
        let keep_tls = certs.is_none();
        let mut certs = certs.unwrap_or_default().into_iter();
        let mut upstreams = BTreeMap::new();
        for u in &config.upstreams {
            warn_if_unverified(u, live.upstreams.get(&u.name));
            let resolution = resolved.remove(&u.name).unwrap_or_default();
            let group = match live.upstreams.remove(&u.name) {
                Some(group) => {
                    group.update(u.clone(), resolution);
                    group
                }
                None => {
                    let group = Arc::new(Upstream::new(u.clone(), resolution, &self.budget));
                    tokio::spawn(discovery::run(Arc::clone(&group)));
                    tokio::spawn(check::run(Arc::clone(&group)));
                    group
                }
            };
            upstreams.insert(u.name.clone(), group);
        }
        for (name, group) in std::mem::take(&mut live.upstreams) {
            tracing::info!(upstream = %name, "upstream group removed; its servers drain");
            group.remove();
        }
        self.groups.set(upstreams.values().cloned().collect());

        let mut listeners = Vec::new();
        for l in &config.listeners {
            let files = certs.next().flatten();
            let acme = self.acme.as_ref().map(|_| &self.acme_certs);
            let site = site(&config, l, &upstreams, acme, &self.spools, &logs);
            if let Some(i) = live.listeners.iter().position(|o| o.configured == l.addr) {
                let old = live.listeners.remove(i);
                old.proxy.replace(site);
                if !keep_tls {
                    self.update_tls(&old.tls, l, files);
                }
                listeners.push(old);
                continue;
            }
            let Some(tcp) = bound.iter().position(|(a, _)| *a == l.addr) else { continue };
            let tls = Arc::new(ArcSwapOption::empty());
            self.update_tls(&tls, l, files);
            listeners.push(self.listen(l, site, bound.swap_remove(tcp).1, tls));
        }
        for old in std::mem::take(&mut live.listeners) {
            tracing::info!(
                listen = %old.configured,
                "listener removed; its connections close after the request in flight"
            );
            let _ = old.stop.send(true);
            old.connections.stop();
        }
        live.listeners = listeners;
        live.upstreams = upstreams;
        live.config = config;
        self.route_logs.store(Arc::new(logs));
    }

    /// Gives a listener the TLS `l` asks for: its certificates (`files`) installed in
    /// the server it has (which keeps its tickets and session cache), or a new server,
    /// or none.
    fn update_tls(
        &self,
        slot: &Arc<ArcSwapOption<TlsServer>>,
        l: &ListenerConfig,
        files: Option<ServerCerts>,
    ) {
        let (Some(tls), Some(files)) = (&l.tls, files) else {
            slot.store(None);
            return;
        };
        match slot.load_full() {
            Some(server) if server.serves_acme() == tls.acme && server.offers_h2() == tls.http2 => {
                server.install(tls, files);
                let files = tls.certificates.len();
                tracing::info!(listen = %l.addr, files, "certificate files read again");
            }
            _ => {
                let server =
                    Arc::new(TlsServer::new(tls, files, &self.acme_certs, &self.tls_metrics));
                TlsServer::watch(&server, l.addr);
                slot.store(Some(server));
            }
        }
    }

    /// Starts accepting on a newly bound listener.
    fn listen(
        &self,
        l: &ListenerConfig,
        site: Site,
        tcp: TcpListener,
        tls: Arc<ArcSwapOption<TlsServer>>,
    ) -> LiveListener {
        let addr = tcp.local_addr().unwrap_or(l.addr);
        match &l.upstream {
            Some(upstream) => tracing::info!(listen = %addr, upstream = %upstream, "listening"),
            None => tracing::info!(listen = %addr, "listening"),
        }
        let proxy = Arc::new(Proxy::new(site, self.access_log.clone(), Arc::clone(&self.answers)));
        let (stop, stop_rx) = watch::channel(false);
        let connections = self.connections.child();
        let accepting = tokio::spawn(listener::accept_loop(
            tcp,
            Arc::clone(&proxy),
            connections.clone(),
            Arc::clone(&tls),
            stop_rx,
        ));
        LiveListener { configured: l.addr, proxy, stop, accepting, connections, tls }
    }
}

/// Gives the certificate manager the names the config in force wants. Without `[acme]`
/// in it the manager keeps its names: turning ACME off waits for a restart, as on does.
async fn follow_acme_names(live: &mut Live) {
    if let Live { acme: Some(acme), config: config @ Config { acme: Some(_), .. }, .. } = live {
        acme.follow(&config.acme_names()).await;
    }
}

/// When groups' names are resolved again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lookups {
    /// In every group (a reload).
    All,
    /// Only in groups whose server list changed; the others keep what they have, and
    /// their names are followed by `discovery::run` (a Docker change).
    Changed,
}

/// Resolves the servers of the groups in `config` as `lookups` says; names that fail
/// keep what the group of the same name in `current` had.
async fn resolve_all(
    config: &Config,
    current: &BTreeMap<String, Arc<Upstream>>,
    lookups: Lookups,
) -> BTreeMap<String, Resolution> {
    let mut out = BTreeMap::new();
    for u in &config.upstreams {
        let previous = current.get(&u.name).map(|g| g.state());
        let resolution = match previous {
            Some(p) if lookups == Lookups::Changed && p.config.servers == u.servers => {
                p.resolution.clone()
            }
            Some(p) => discovery::resolve(&u.servers, &p.resolution).await,
            None => discovery::resolve(&u.servers, &Resolution::default()).await,
        };
        out.insert(u.name.clone(), resolution);
    }
    out
}

/// Applies what Docker discovery publishes, the latest first, until the instance
/// stops. The provider publishes only what differs from what it published before.
async fn follow_docker(
    shared: Arc<Shared>,
    mut found: watch::Receiver<Arc<Discovered>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            changed = found.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = listener::stopped(&mut stop) => return,
        }
        let latest = Arc::clone(&found.borrow_and_update());
        shared.apply_discovered(latest).await;
    }
}

/// Warns when `insecure_skip_verify` comes into force for a group: at start, or in a
/// reload that turns it on (`running` is the group as it was).
fn warn_if_unverified(u: &UpstreamConfig, running: Option<&Arc<Upstream>>) {
    let insecure =
        |c: &UpstreamConfig| c.tls.as_ref().is_some_and(|t| t.settings.insecure_skip_verify);
    if insecure(u) && !running.is_some_and(|g| insecure(&g.state().config)) {
        tracing::warn!(
            upstream = %u.name,
            "insecure_skip_verify: origin certificates are not verified; anyone on the path to the servers can read and change this group's traffic"
        );
    }
}

/// Settings a running process cannot change: said once per reload that changes them.
fn warn_unreloadable(old: &Config, new: &Config) {
    let changed = [
        ("threads", old.threads != new.threads),
        ("admin", old.admin != new.admin),
        ("access_log", old.access_log != new.access_log),
        ("log_format", old.log_format != new.log_format),
        ("pool.max_idle_total", old.max_idle_total != new.max_idle_total),
        ("buffering (its bounds and temp_dir)", old.spool != new.spool),
        ("acme (all but its names)", !old.has_same_acme_settings(new)),
        ("docker", old.docker != new.docker),
    ];
    for (key, _) in changed.iter().filter(|(_, c)| *c) {
        tracing::warn!(key = %key, "changed in the config file; takes effect at the next restart");
    }
    for l in &new.listeners {
        if old.listeners.iter().any(|o| o.addr == l.addr && o.backlog != l.backlog) {
            tracing::warn!(
                key = "backlog",
                listen = %l.addr,
                "changed in the config file; takes effect at the next restart"
            );
        }
    }
}

/// Answers reload requests from the admin listener until the instance stops.
async fn serve_reloads(
    shared: Arc<Shared>,
    mut requests: mpsc::Receiver<ReloadRequest>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let reply: oneshot::Sender<Result<String, String>> = tokio::select! {
            Some(reply) = requests.recv() => reply,
            () = listener::stopped(&mut stop) => return,
            else => return,
        };
        let result = shared.reload_file().await.map(|d| d.to_string()).map_err(|e| e.to_string());
        let _ = reply.send(result);
    }
}

/// Reads everything `/metrics` shows, for each scrape.
fn scrape(
    shared: &Arc<Shared>,
    draining: &Arc<AtomicBool>,
) -> impl Fn() -> Snapshot + Send + Sync + 'static {
    let draining = Arc::clone(draining);
    let shared = Arc::clone(shared);
    move || Snapshot {
        upstreams: shared.groups.snapshot(),
        process: ProcessSnapshot {
            connections: shared.connections.snapshot(),
            access_log_dropped: shared.access_log.as_ref().map_or(0, AccessLog::dropped),
            answers: shared.answers.snapshot(),
            reloads_ok: shared.reloads_ok.load(Ordering::Relaxed),
            reloads_failed: shared.reloads_failed.load(Ordering::Relaxed),
            draining: draining.load(Ordering::Acquire),
            acme: shared.acme.as_ref().map(|a| a.snapshot()),
            docker: shared.docker.as_ref().map(|d| d.snapshot()),
            allocated: process::allocated_bytes(),
        },
        tls: shared.tls_metrics.snapshot(),
        h2: crate::client::h2::snapshot(),
        spool: shared.spools.snapshot(),
    }
}

/// Writes the upstream failures counted since their key's last line, once their window
/// has passed: the count an outage ends on has no later failure to carry it.
async fn flush_failures(mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(failures::WINDOW) => {}
            () = listener::stopped(&mut stop) => return,
        }
        failures::flush();
    }
}

/// Closes idle connections past their limits even when no request comes to notice.
async fn evict_idle(groups: Arc<Upstreams>, mut stop: watch::Receiver<bool>) {
    loop {
        let period = groups
            .backends()
            .iter()
            .map(|(_, b)| b.conns.config().idle_timeout / 4)
            .min()
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(50), Duration::from_secs(1));
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = listener::stopped(&mut stop) => return,
        }
        let now = Instant::now();
        for u in groups.current().iter() {
            u.evict_expired(now);
        }
    }
}
