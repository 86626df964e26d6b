//! Turns `holdfast.toml` (or the quick-mode flags) into a validated [`Config`]:
//! `file::FileConfig` (as written; `read` steps over unknown keys and mistyped values)
//! -> `Config` (typed, defaults applied; `validate` checks the values and builds it).
//! `diff` says what changes from one to the next.
//!
//! `Config` is made of the settings types of the components that use them
//! ([`ListenerConfig`], [`UpstreamConfig`], [`Timeouts`], [`AccessLogConfig`], ...), and
//! each default lives beside its type with the reason for its value; `validate` checks
//! the file's values and fills those types from them. It depends on the components,
//! never the reverse. Only [`RouteConfig`] is its own: the wiring (`instance`) reads it
//! to build each listener's `route::Router`.
//!
//! Precedence for pool settings: `[upstream.NAME.pool]`, then `[pool]`, then the
//! pool's own defaults. A file's `include` takes in other files (`include.rs`) with
//! groups, routes and certificates; the config is the whole set. Every problem is
//! reported at once, each with its file, line and key. `holdfast check`, start-up and
//! reloads run the same [`Config::load`].

mod diff;
mod error;
mod file;
mod include;
mod read;
mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_pool::PoolConfig;

use crate::acme::AcmeConfig;
use crate::docker::settings::DockerConfig;
use crate::listener::{self, ListenerConfig};
use crate::proxy::forwarded::Cidr;
use crate::proxy::{Buffering, ClientLimits, Hsts, Timeouts};
use crate::route::HostPattern;
use crate::spool::SpoolConfig;
use crate::telemetry::access_log::{AccessLogConfig, AccessLogTarget};
use crate::telemetry::LogFormat;
use crate::upstream::{Server, UpstreamConfig};

pub use diff::ConfigDiff;
pub use error::{ConfigError, ConfigProblem};
use file::FileConfig;

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listeners: Vec<ListenerConfig>,
    /// In the order written; `route::Router` decides which one a request takes.
    pub routes: Vec<RouteConfig>,
    pub upstreams: Vec<UpstreamConfig>,
    pub timeouts: Timeouts,
    pub client_limits: ClientLimits,
    /// Worker threads; `None` means one per CPU the process may run on.
    pub threads: Option<usize>,
    /// Idle connections kept across all backends; `None` derives it from the file
    /// descriptor limit (see `upstream::IdleBudget`).
    pub max_idle_total: Option<usize>,
    /// Where the admin listener (metrics, status, health) accepts; `None`: no admin
    /// listener.
    pub admin: Option<SocketAddr>,
    pub access_log: AccessLogConfig,
    /// How holdfast's own log lines look; applies at start only.
    pub log_format: LogFormat,
    /// Peers whose forwarding headers are extended rather than replaced.
    pub trusted_proxies: Vec<Cidr>,
    /// Certificates from an ACME CA (`[acme]`); `None`: none.
    pub acme: Option<AcmeConfig>,
    /// Response and request buffering where a route does not say (`[buffering]`).
    pub buffering: Buffering,
    /// Where buffered bodies are kept and how much of them; applies at start only.
    pub spool: SpoolConfig,
    /// Groups and routes from Docker containers' labels (`[docker]`); applies at start
    /// only.
    pub docker: Option<DockerConfig>,
    /// `[pool]`: the pool settings of groups the file does not define (Docker's).
    pub pool: PoolConfig,
}

/// Requests for `host` under `path` go to the group `upstream`. The router never sees
/// it: `instance` turns each into a `route::Route` with the group itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    pub host: HostPattern,
    pub path: String,
    pub upstream: String,
    /// Request body bytes allowed on this route (over the listener's and `[limits]`'s).
    pub client_max_body: Option<u64>,
    /// Response buffering on this route, over `[buffering] responses`.
    pub buffer_responses: Option<bool>,
    /// Request buffering on this route, over `[buffering] requests`.
    pub buffer_requests: Option<bool>,
    /// The listeners it applies on, by their configured address; empty: every one.
    pub listeners: Vec<SocketAddr>,
    /// Cleartext requests get a redirect to HTTPS on this port, over the listener's.
    pub redirect_https: Option<u16>,
    /// The `Strict-Transport-Security` of its HTTPS responses, over the listener's.
    pub hsts: Option<Hsts>,
    /// Over `[timeouts] connect`.
    pub connect_timeout: Option<Duration>,
    /// Over `[timeouts] read`.
    pub read_timeout: Option<Duration>,
    /// Where its requests are logged, over `[access_log] target` (same format).
    pub access_log: Option<AccessLogTarget>,
}

impl RouteConfig {
    /// Requests for `host` under `path` go to `upstream`, with every other setting the
    /// listener's or the defaults'.
    pub fn to(host: HostPattern, path: String, upstream: String) -> RouteConfig {
        RouteConfig {
            host,
            path,
            upstream,
            client_max_body: None,
            buffer_responses: None,
            buffer_requests: None,
            listeners: Vec::new(),
            redirect_https: None,
            hsts: None,
            connect_timeout: None,
            read_timeout: None,
            access_log: None,
        }
    }
}

/// The name quick mode gives its one upstream group.
pub const QUICK_UPSTREAM: &str = "default";

impl Config {
    /// Quick mode: one listener proxying to `servers` (addresses, or names resolved
    /// like a config file's), everything else default.
    pub fn quick(
        listen: SocketAddr,
        servers: impl IntoIterator<Item = impl Into<Server>>,
    ) -> Config {
        Config {
            listeners: vec![ListenerConfig {
                addr: listen,
                upstream: Some(QUICK_UPSTREAM.into()),
                client_max_body: None,
                backlog: listener::default_backlog(),
                tls: None,
                redirect_https: None,
                hsts: None,
                h2c: false,
            }],
            routes: Vec::new(),
            upstreams: vec![UpstreamConfig::new(
                QUICK_UPSTREAM,
                servers.into_iter().map(Into::into).collect(),
            )],
            timeouts: Timeouts::default(),
            client_limits: ClientLimits::default(),
            threads: None,
            max_idle_total: None,
            admin: None,
            access_log: AccessLogConfig::default(),
            log_format: LogFormat::default(),
            trusted_proxies: Vec::new(),
            acme: None,
            buffering: Buffering::default(),
            spool: SpoolConfig::default(),
            docker: None,
            pool: PoolConfig::default(),
        }
    }

    /// Quick mode with Docker discovery: one listener whose requests go where the
    /// containers' labels say (404 where no label claims the host).
    pub fn quick_docker(listen: SocketAddr) -> Config {
        let mut config = Config::quick(listen, Vec::<Server>::new());
        config.upstreams.clear();
        for l in &mut config.listeners {
            l.upstream = None;
        }
        config.docker = Some(DockerConfig::default());
        config
    }

    /// The names `[acme]` gets certificates for: those it lists, or else every exact
    /// DNS host the routes name. Empty without `[acme]`.
    pub fn acme_names(&self) -> Vec<String> {
        let Some(acme) = &self.acme else { return Vec::new() };
        acme.names.resolve(exact_hosts(&self.routes))
    }

    /// Whether `[acme]` is on in both configs or in neither, with the same settings
    /// apart from `names`: what a reload cannot change (the names follow reloads).
    pub fn has_same_acme_settings(&self, other: &Config) -> bool {
        match (&self.acme, &other.acme) {
            (Some(a), Some(b)) => AcmeConfig { names: b.names.clone(), ..a.clone() } == *b,
            (a, b) => a == b,
        }
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let problem = ConfigProblem { line: None, key: String::new(), message: e.to_string() };
            ConfigError::single(path.to_path_buf(), problem)
        })?;
        Config::parse(&text, path)
    }

    /// Validates config text read from `path`, which names the file in errors and is
    /// where relative paths in it (the access log file, `include` patterns) are
    /// resolved from. The files it includes are read and validated with it: the
    /// config is the whole set, or an error listing the problems of every file.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut read = read::read::<FileConfig>(text);
        let mut included = Vec::new();
        let config = read.file.take().map(|raw| {
            let mut main = validate::main_file(text, path, raw);
            main.problems.retain(|p| !read.is_after_blanking(&p.key));
            read.problems.append(&mut main.problems);
            included = main.included;
            main.config
        });
        let included: Vec<ConfigError> = included
            .into_iter()
            .filter(|s| !s.read.problems.is_empty())
            .map(|s| ConfigError::of_file(s.path, s.read.problems))
            .collect();
        match config {
            Some(config) if read.problems.is_empty() && included.is_empty() => Ok(config),
            _ => {
                let mut error = ConfigError::of_file(PathBuf::from(path), read.problems);
                error.included = included;
                Err(error)
            }
        }
    }
}

/// The exact hosts the routes name: those `[acme]` gets certificates for by default.
fn exact_hosts(routes: &[RouteConfig]) -> impl Iterator<Item = &str> {
    routes.iter().filter_map(|r| match &r.host {
        HostPattern::Exact(host) => Some(host.as_str()),
        _ => None,
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|b| *b == b'\n').count() + 1
}

#[cfg(test)]
mod tests;
