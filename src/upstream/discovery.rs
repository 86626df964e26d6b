//! Turns configured servers into addresses: an IP as it is, a name through the
//! system resolver (`getaddrinfo`: `/etc/hosts`, then DNS), at start and again every
//! `resolve_interval`, so a group follows containers and Kubernetes Services that
//! change addresses.
//!
//! A name that fails to resolve keeps the addresses it had: a resolver hiccup must not
//! empty a group that is serving. The failure is kept for `/status` and logged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::settings::ContainerRef;
use super::{Server, Upstream};

/// How long one lookup may take before it counts as failed.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// What every configured server of a group resolved to, in config order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    pub entries: Vec<Resolved>,
}

/// One configured server and its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub server: Server,
    /// Sorted, so two lookups that return the same set compare equal.
    pub addrs: Vec<SocketAddr>,
    /// Why the last lookup failed, if it did (`addrs` then holds the previous answer).
    pub error: Option<String>,
}

impl Resolution {
    /// Every address once, in config order, with the host of the first server that
    /// gave it as written (a name, or the IP address as text): the name TLS verifies;
    /// and for a container, which one it is (an address two containers give is there
    /// once for each).
    pub fn targets(&self) -> Vec<Target> {
        let mut out: Vec<Target> = Vec::new();
        for entry in &self.entries {
            let container = match &entry.server {
                Server::Container { container, .. } => Some(container.clone()),
                _ => None,
            };
            for addr in &entry.addrs {
                if !out.iter().any(|t| t.addr == *addr && t.container == container) {
                    let host = entry.server.host();
                    out.push(Target { addr: *addr, host, container: container.clone() });
                }
            }
        }
        out
    }

    /// Whether any server is a name (and so worth resolving again).
    pub fn has_names(&self) -> bool {
        self.entries.iter().any(|e| matches!(e.server, Server::Name { .. }))
    }
}

/// One backend a group should have: an address, the name TLS verifies there, and the
/// container behind it when Docker discovery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub container: Option<ContainerRef>,
}

/// Resolves `servers`; a name that fails keeps its addresses from `previous`.
pub async fn resolve(servers: &[Server], previous: &Resolution) -> Resolution {
    let mut entries = Vec::with_capacity(servers.len());
    for server in servers {
        let entry = match server {
            Server::Ip(addr) | Server::Container { addr, .. } => {
                Resolved { server: server.clone(), addrs: vec![*addr], error: None }
            }
            Server::Name { host, port } => match lookup(host, *port).await {
                Ok(addrs) => Resolved { server: server.clone(), addrs, error: None },
                Err(error) => {
                    let kept = previous.entries.iter().find(|e| e.server == *server);
                    let addrs = kept.map(|e| e.addrs.clone()).unwrap_or_default();
                    tracing::warn!(server = %server, error = %error, kept = addrs.len(), "cannot resolve server name");
                    Resolved { server: server.clone(), addrs, error: Some(error) }
                }
            },
        };
        entries.push(entry);
    }
    Resolution { entries }
}

async fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let found = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await;
    let mut addrs: Vec<SocketAddr> = match found {
        Err(_) => return Err(format!("no answer within {RESOLVE_TIMEOUT:?}")),
        Ok(Err(e)) => return Err(e.to_string()),
        Ok(Ok(addrs)) => addrs.collect(),
    };
    if addrs.is_empty() {
        return Err("no addresses".into());
    }
    addrs.sort_unstable();
    addrs.dedup();
    Ok(addrs)
}

/// Resolves the group's names every `resolve_interval` and applies what changed,
/// until the group is removed.
pub async fn run(upstream: Arc<Upstream>) {
    loop {
        // Made before the removal is looked at, so a removal after the look wakes it.
        let changed = upstream.changed.notified();
        if upstream.is_removed() {
            return;
        }
        let (names, interval) =
            upstream.with_state(|m| (m.resolution.has_names(), m.config.resolve_interval));
        // Without names there is nothing to do until a reload brings some.
        let wait = if names { interval } else { Duration::from_secs(3600) };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = changed => {}
        }
        if upstream.is_removed() {
            return;
        }
        let seen = upstream.state();
        if !seen.resolution.has_names() {
            continue;
        }
        let fresh = resolve(&seen.config.servers, &seen.resolution).await;
        if fresh != seen.resolution {
            upstream.refresh(&seen, fresh);
        }
    }
}
