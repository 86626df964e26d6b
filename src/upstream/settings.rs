//! An upstream group as configured (`[upstream.NAME]`): its servers, pool, balancer,
//! health settings and how often its names are resolved, with the defaults a group
//! starts from. Parsing a server entry (`"host:port"`) is here too, with the type.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::PoolConfig;

use super::check::CheckConfig;
use super::health::PassiveHealth;
use crate::balance::Policy;
use crate::tls::origin::OriginTls;
// What a backend speaks is also what its TLS offers by ALPN, so the type lives with the
// origin's TLS (which must not import `upstream`); upstream code names it from here.
pub use crate::tls::origin::Speaks;

/// A named group of servers with one pool configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub name: String,
    pub servers: Vec<Server>,
    pub pool: PoolConfig,
    /// Local address upstream connections are made from (`None`: the kernel picks).
    pub source_address: Option<IpAddr>,
    pub balance: Policy,
    pub health: PassiveHealth,
    /// Active health checks (`None`: passive detection only).
    pub check: Option<CheckConfig>,
    /// How often names in `servers` are resolved again.
    pub resolve_interval: Duration,
    /// TLS to the servers (`None`: cleartext).
    pub tls: Option<OriginTls>,
    /// The HTTP version spoken to the servers.
    pub protocol: Protocol,
    /// How often an idle HTTP/2 connection is pinged to find it dead (`None`: never).
    pub h2_ping_interval: Option<Duration>,
    /// How long the upgraded connections (WebSockets) of a backend that left the group
    /// may go on before they are closed (`None`: until either end closes). Docker
    /// discovery sets it for its groups (`[docker] drain_timeout`).
    pub drain_timeout: Option<Duration>,
}

/// The HTTP version a group speaks to its servers (`protocol = ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2 over TLS.
    H2,
    /// HTTP/2 in cleartext, with prior knowledge.
    H2c,
    /// Over TLS, what the server picks by ALPN (`h2` or `http/1.1`); HTTP/1.1 in
    /// cleartext.
    #[default]
    Auto,
}

impl Protocol {
    /// `"http1"`, `"h2"`, `"h2c"` or `"auto"`.
    pub fn parse(text: &str) -> Result<Protocol, String> {
        match text {
            "http1" => Ok(Protocol::Http1),
            "h2" => Ok(Protocol::H2),
            "h2c" => Ok(Protocol::H2c),
            "auto" => Ok(Protocol::Auto),
            _ => Err(format!(
                "{text:?} is not a protocol (use \"http1\", \"h2\", \"h2c\" or \"auto\")"
            )),
        }
    }
}

/// Default [`UpstreamConfig::resolve_interval`]. Container platforms replace a
/// container's address within seconds; 5 s follows them quickly for the price of one
/// lookup per name every 5 s.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(5);

impl UpstreamConfig {
    /// A group of `servers` with every setting at its default.
    pub fn new(name: &str, servers: Vec<Server>) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            servers,
            pool: PoolConfig::default(),
            source_address: None,
            balance: Policy::default(),
            health: PassiveHealth::default(),
            check: None,
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
            tls: None,
            protocol: Protocol::default(),
            h2_ping_interval: None,
            drain_timeout: None,
        }
    }

    /// What the group's connections speak: `auto` is HTTP/1.1 in cleartext and
    /// decided by ALPN over TLS.
    pub fn speaks(&self) -> Speaks {
        match (self.protocol, self.tls.is_some()) {
            (Protocol::Http1, _) | (Protocol::Auto, false) => Speaks::Http1,
            (Protocol::H2 | Protocol::H2c, _) => Speaks::H2,
            (Protocol::Auto, true) => Speaks::Either,
        }
    }
}

/// A server as configured: an address, or a name resolved to addresses at start and
/// every `resolve_interval` after, or a container Docker discovery found at an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Server {
    Ip(SocketAddr),
    Name { host: String, port: u16 },
    Container { addr: SocketAddr, container: ContainerRef },
}

/// Which container answers at a server's address (Docker discovery). A backend is known
/// by its address and this together, so a container that takes over an address another
/// one had starts with a backend, and a pool, of its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerRef {
    /// The container's full ID.
    pub id: Arc<str>,
    /// Its name, without Docker's leading `/`.
    pub name: Arc<str>,
    /// When its current process started (Docker's `State.StartedAt`): a restarted
    /// container is a new process, and no connection to the old one is worth keeping.
    pub started: Arc<str>,
}

impl ContainerRef {
    /// The ID's first 12 characters, as `docker ps` shows it.
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }
}

impl From<SocketAddr> for Server {
    fn from(addr: SocketAddr) -> Server {
        Server::Ip(addr)
    }
}

impl std::str::FromStr for Server {
    type Err = String;

    /// `"10.0.0.5:3000"`, `"[::1]:3000"` or `"app.internal:3000"`; the error says what is
    /// wrong in words for the operator.
    fn from_str(text: &str) -> Result<Server, String> {
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Server::Ip(addr));
        }
        let bad = |why: &str| format!("{text:?} is not a server: {why} (use \"host:port\")");
        let Some((host, port)) = text.rsplit_once(':') else { return Err(bad("no port")) };
        let port: u16 =
            port.parse().map_err(|_| bad("the port is not a number from 1 to 65535"))?;
        if port == 0 {
            return Err(bad("port 0"));
        }
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if host.is_empty() || !host.chars().all(valid) || host.split('.').any(str::is_empty) {
            return Err(bad("the host is not a name or IP address"));
        }
        Ok(Server::Name { host: host.to_ascii_lowercase(), port })
    }
}

impl Server {
    /// The host as written: a name, or the IP address as text.
    pub fn host(&self) -> String {
        match self {
            Server::Ip(addr) | Server::Container { addr, .. } => addr.ip().to_string(),
            Server::Name { host, .. } => host.clone(),
        }
    }
}

/// How a server entry says to speak to the server: `https://` asks for TLS, `http://`
/// or no scheme for cleartext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
    /// `h2c://`: cleartext HTTP/2 with prior knowledge.
    H2c,
}

/// A server entry with an optional scheme: `"https://10.0.0.5:443"`, `"app:3000"`.
pub fn parse_server_url(text: &str) -> Result<(Server, Scheme), String> {
    if let Some(rest) = text.strip_prefix("https://") {
        return Ok((rest.trim_end_matches('/').parse()?, Scheme::Https));
    }
    if let Some(rest) = text.strip_prefix("h2c://") {
        return Ok((rest.trim_end_matches('/').parse()?, Scheme::H2c));
    }
    if let Some(rest) = text.strip_prefix("http://") {
        return Ok((rest.trim_end_matches('/').parse()?, Scheme::Http));
    }
    if let Some((scheme, _)) = text.split_once("://") {
        return Err(format!(
            "{text:?}: unknown scheme {scheme:?} (use http://, https:// or h2c://)"
        ));
    }
    Ok((text.parse()?, Scheme::Http))
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Server::Ip(addr) => write!(f, "{addr}"),
            Server::Name { host, port } => write!(f, "{host}:{port}"),
            Server::Container { addr, container } => write!(f, "{addr} ({})", container.name),
        }
    }
}
