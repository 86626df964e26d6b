//! A running holdfast: listeners bound, pools created, background eviction started,
//! the admin listener and access log (when configured) running beside them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::admin::{self, AdminState};
use crate::client::ClientSettings;
use crate::config::Config;
use crate::listener::{self, Connections};
use crate::metrics::export::{Exporter, ProcessReader, ProcessSnapshot};
use crate::proxy::Proxy;
use crate::telemetry::access_log::AccessLog;
use crate::upstream::{BackendStats, Upstream};
use holdfast_pool::IdleBudget;

/// Why holdfast could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the admin listener on {addr}: {source}")]
    Admin { addr: SocketAddr, source: std::io::Error },
    #[error("{0}")]
    AccessLog(std::io::Error),
}

/// A started proxy. Dropping it without [`Server::shutdown`] leaves it running until
/// the runtime ends.
pub struct Server {
    addrs: Vec<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    upstreams: Vec<Arc<Upstream>>,
    connections: Connections,
    access_log: Option<AccessLog>,
    draining: Arc<AtomicBool>,
    /// Stops the proxy listeners (and, with them, client connections).
    stop: watch::Sender<bool>,
    /// Stops the admin listener, which outlives the drain so `/healthz` can say 503.
    stop_admin: watch::Sender<bool>,
}

impl Server {
    /// Binds every listener, then starts serving. Nothing is served unless every
    /// listener could be bound.
    pub async fn start(config: &Config) -> Result<Server, StartError> {
        let mut bound = Vec::new();
        for l in &config.listeners {
            let listener = TcpListener::bind(l.addr)
                .await
                .map_err(|source| StartError::Bind { addr: l.addr, source })?;
            // Accepted sockets inherit TCP_NODELAY from the listener (Linux), which saves
            // a system call per client connection. Responses go out whole, so Nagle
            // would only hold back the last segment of a streamed body.
            let _ = socket2::SockRef::from(&listener).set_nodelay(true);
            bound.push((listener, l.addr, l.upstream.clone()));
        }
        let admin_listener = match config.admin {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartError::Admin { addr, source })?,
            ),
            None => None,
        };
        let access_log = AccessLog::open(&config.access_log).map_err(StartError::AccessLog)?;
        let budget = Arc::new(IdleBudget::new(idle_budget(config)));
        let upstreams: Vec<Arc<Upstream>> =
            config.upstreams.iter().map(|u| Arc::new(Upstream::new(u, &budget))).collect();
        let (stop, stop_rx) = watch::channel(false);
        let connections = Connections::default();
        let mut addrs = Vec::new();
        for (tcp, configured, name) in bound {
            let index = upstreams
                .iter()
                .position(|u| *u.name == *name)
                .expect("config validation guarantees each listener's upstream exists");
            let upstream = &upstreams[index];
            let addr =
                tcp.local_addr().map_err(|source| StartError::Bind { addr: configured, source })?;
            tracing::info!(listen = %addr, upstream = %name, "listening");
            addrs.push(addr);
            let proxy =
                Arc::new(Proxy::new(Arc::clone(upstream), config.timeouts, access_log.clone()));
            let settings =
                ClientSettings { proxy, limits: config.client_limits, timeouts: config.timeouts };
            tokio::spawn(listener::accept_loop(
                tcp,
                settings,
                connections.clone(),
                stop_rx.clone(),
            ));
        }
        tokio::spawn(evict_idle(upstreams.clone(), stop_rx));
        let draining = Arc::new(AtomicBool::new(false));
        let (stop_admin, stop_admin_rx) = watch::channel(false);
        let mut admin_addr = None;
        if let Some(tcp) = admin_listener {
            let addr = tcp.local_addr().map_err(|source| StartError::Admin {
                addr: config.admin.expect("bound from config.admin"),
                source,
            })?;
            tracing::info!(admin = %addr, "admin listener: /metrics /status /healthz");
            admin_addr = Some(addr);
            let process = process_reader(connections.clone(), access_log.clone(), &draining);
            let state = AdminState {
                exporter: Exporter::new(upstreams.clone(), process),
                upstreams: upstreams.clone(),
                draining: Arc::clone(&draining),
                started: Instant::now(),
            };
            tokio::spawn(admin::serve(tcp, Arc::new(state), stop_admin_rx));
        }
        Ok(Server {
            addrs,
            admin_addr,
            upstreams,
            connections,
            access_log,
            draining,
            stop,
            stop_admin,
        })
    }

    /// The bound listener addresses, in config order (useful with port 0).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Where the admin listener accepts, if there is one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Pool and retry counters of every backend.
    pub fn stats(&self) -> Vec<BackendStats> {
        self.upstreams
            .iter()
            .flat_map(|u| {
                u.backends.iter().map(|b| BackendStats {
                    upstream: Arc::clone(&u.name),
                    backend: b.addr,
                    pool: b.pool.stats().snapshot(),
                    retries: b.metrics.retries.load(Ordering::Relaxed),
                    unsafe_to_retry: b.metrics.retries_refused.load(Ordering::Relaxed),
                })
            })
            .collect()
    }

    /// Makes the access log reopen its file (after rotation).
    pub fn reopen_access_log(&self) {
        if let Some(log) = &self.access_log {
            log.reopen();
        }
    }

    /// Reports draining on `/healthz`, stops accepting, lets requests in flight
    /// finish for up to `drain`, then closes every idle upstream connection and the
    /// admin listener.
    pub async fn shutdown(self, drain: Duration) {
        self.draining.store(true, Ordering::Release);
        let _ = self.stop.send(true);
        self.connections.stop();
        let deadline = Instant::now() + drain;
        while self.connections.count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for u in &self.upstreams {
            for b in &u.backends {
                b.pool.clear();
            }
        }
        let _ = self.stop_admin.send(true);
        tracing::info!(unfinished = self.connections.count(), "stopped");
    }
}

/// Reads the process-wide numbers `/metrics` shows.
fn process_reader(
    connections: Connections,
    access_log: Option<AccessLog>,
    draining: &Arc<AtomicBool>,
) -> ProcessReader {
    let draining = Arc::clone(draining);
    Box::new(move || ProcessSnapshot {
        client_connections: connections.count(),
        client_connections_accepted: connections.accepted(),
        access_log_dropped: access_log.as_ref().map_or(0, AccessLog::dropped),
        draining: draining.load(Ordering::Acquire),
    })
}

/// Idle connections kept across all backends: `pool.max_idle_total`, or else a quarter
/// of the open-file limit, so idle upstream sockets can never crowd out client
/// connections (each client needs one descriptor, each busy request one more).
fn idle_budget(config: &Config) -> usize {
    config.max_idle_total.unwrap_or_else(|| match open_file_limit() {
        Some(limit) => (limit / 4).max(64),
        None => 4096,
    })
}

/// The soft limit on open files, from `/proc/self/limits` (Linux).
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Closes idle connections past their limits even when no request comes to notice.
async fn evict_idle(upstreams: Vec<Arc<Upstream>>, mut stop: watch::Receiver<bool>) {
    let period = upstreams
        .iter()
        .flat_map(|u| u.backends.iter().map(|b| b.pool.config().idle_timeout / 4))
        .min()
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = listener::stopped(&mut stop) => return,
        }
        let now = Instant::now();
        for u in &upstreams {
            u.evict_expired(now);
        }
    }
}
