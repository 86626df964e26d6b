//! Checks a config file as read (`file::FileConfig`, and the files it includes) and
//! turns it into a [`Config`], collecting every problem, each with its file, line and
//! key, rather than stopping at the first: values of the wrong form or out of range,
//! names that refer to nothing (a route's upstream, a listener's), groups defined twice
//! and settings that cannot work together. The TLS sections, which read certificate
//! files, are checked in `tls`.
//!
//! It only validates: reading the TOML is `read`'s job, gathering included files is
//! `include`'s, and what a missing value defaults to is decided beside each setting's type.

mod tls;

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_pool::PoolConfig;

use crate::acme::{self, AcmeConfig, AcmeNames, Challenge, Pending, RenewAt};
use crate::admin::DEFAULT_ADMIN_ADDR;
use crate::balance::Policy;
use crate::docker::settings::{check_endpoint, DockerConfig};
use crate::http1::request::MAX_HEADERS;
use crate::listener::{self, ListenerConfig, MAX_BACKLOG};
use crate::proxy::forwarded::Cidr;
use crate::proxy::{Buffering, ClientLimits, Hsts, Timeouts};
use crate::route::{self, HostPattern};
use crate::spool::SpoolConfig;
use crate::telemetry::access_log::{self, AccessLogConfig, AccessLogFormat, AccessLogTarget};
use crate::telemetry::LogFormat;
use crate::upstream::check::{self, CheckConfig};
use crate::upstream::health::{CheckThresholds, PassiveHealth};
use crate::upstream::settings::{parse_server_url, Protocol, Scheme};
use crate::upstream::{Server, UpstreamConfig};
use toml::Spanned;

use super::{exact_hosts, file, include, line_of, Config, ConfigProblem, RouteConfig};
use crate::tls::certs::CertPair;
use file::{
    FileAccessLog, FileAcme, FileAdmin, FileBuffering, FileConfig, FileDocker, FileHealth,
    FileHealthCheck, FileIncluded, FilePool, FileRoute,
};

/// What validating the main file gives.
pub(super) struct Validated {
    pub config: Config,
    /// The main file's problems.
    pub problems: Vec<ConfigProblem>,
    /// The files it includes, each with its own problems in its `read`.
    pub included: Vec<include::Source>,
}

/// Validates the main file's `raw` (`text`, read from `path`) and the files it includes.
pub(super) fn main_file(text: &str, path: &Path, raw: FileConfig) -> Validated {
    let dir = path.parent().unwrap_or(Path::new(""));
    let docker = raw_has_docker(&raw);
    let mut v = Validator { text, dir, file: path, main: true, docker, problems: Vec::new() };
    let including = raw.include.as_ref().map(|patterns| include::Including { patterns, dir, text });
    let mut included = include::gather(path, including, &mut v.problems);
    let config = v.config(raw, &mut included);
    Validated { config, problems: v.problems, included }
}

/// The routes read so far, across files, and where each is written (`route[2]` in the
/// main file, `route[0] at FILE:LINE` in an included one).
#[derive(Default)]
struct Routes {
    configs: Vec<RouteConfig>,
    places: Vec<String>,
}

/// What `Validator::route_options` reads.
struct RouteOptions {
    listeners: Vec<SocketAddr>,
    redirect_https: Option<u16>,
    hsts: Option<Hsts>,
    connect_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
    access_log: Option<AccessLogTarget>,
}

/// Whether the main file turns Docker discovery on.
fn raw_has_docker(raw: &FileConfig) -> bool {
    raw.docker.is_some()
}

/// Validates what the included file `source` holds with `f`, adding the problems
/// found to the file's.
/// `docker`: the main file has `[docker]`.
fn in_file(
    source: &mut include::Source,
    docker: bool,
    f: impl FnOnce(&mut Validator<'_>, &FileIncluded),
) {
    let Some(file) = source.read.file.as_ref() else { return };
    let mut v = Validator {
        text: &source.text,
        dir: source.dir(),
        file: &source.path,
        main: false,
        docker,
        problems: Vec::new(),
    };
    f(&mut v, file);
    let mut problems = v.problems;
    problems.retain(|p| !source.read.is_after_blanking(&p.key));
    source.read.problems.append(&mut problems);
}

/// Walks a `FileConfig`, collecting every problem rather than stopping at the first.
struct Validator<'a> {
    text: &'a str,
    /// The file `text` is read from, for the places problems name.
    file: &'a Path,
    /// Whether it is the main file, not an included one.
    main: bool,
    /// Whether the main file has `[docker]`: a group's servers may then all come from
    /// containers.
    docker: bool,
    /// The config file's directory: relative paths in the file are relative to it.
    dir: &'a Path,
    problems: Vec<ConfigProblem>,
}

impl Validator<'_> {
    fn problem(&mut self, span: Range<usize>, key: impl Into<String>, message: impl Into<String>) {
        let line = Some(line_of(self.text, span.start));
        self.problems.push(ConfigProblem { line, key: key.into(), message: message.into() });
    }

    fn config(&mut self, raw: FileConfig, included: &mut [include::Source]) -> Config {
        let docker = self.docker;
        let base_pool = self.pool("pool", raw.pool.as_ref(), PoolConfig::default());
        let mut upstreams = Vec::new();
        // Each group's name, and where it is defined.
        let mut defined: Vec<(String, String)> = Vec::new();
        for (name, up) in &raw.upstream {
            defined.push((name.get_ref().clone(), self.place(name.span())));
            upstreams.push(self.upstream(name, up, &base_pool));
        }
        for source in included.iter_mut() {
            in_file(source, docker, |v, file| {
                for (name, up) in &file.upstream {
                    let key = format!("upstream.{}", name.get_ref());
                    if let Some((_, place)) = defined.iter().find(|(n, _)| n == name.get_ref()) {
                        v.problem(
                            name.span(),
                            key,
                            format!("is defined twice: here and at {place}"),
                        );
                        continue;
                    }
                    defined.push((name.get_ref().clone(), v.place(name.span())));
                    upstreams.push(v.upstream(name, up, &base_pool));
                }
            });
        }
        let mut certificates = self.certificates(&raw.certificate);
        for source in included.iter_mut() {
            in_file(source, docker, |v, file| {
                certificates.extend(v.certificates(&file.certificate))
            });
        }
        let including = raw.include.is_some();
        // Containers' labels route requests too.
        let has_routes = !raw.route.is_empty() || including || docker;
        let listeners = self.listeners(&raw, &upstreams, has_routes, &certificates);
        let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.addr).collect();
        let mut routes = Routes::default();
        self.routes(&raw.route, &upstreams, &addrs, &mut routes);
        for source in included.iter_mut() {
            in_file(source, docker, |v, file| {
                v.routes(&file.route, &upstreams, &addrs, &mut routes)
            });
        }
        let routes = routes.configs;
        // Hosts may come later, with included files or containers' labels: [acme] may
        // start with no name.
        let names_later = including || docker;
        let acme = raw.acme.as_ref().map(|acme| self.acme(acme, &routes, names_later));
        let nameless = names_later
            && acme.as_ref().is_some_and(|a| a.names.resolve(exact_hosts(&routes)).is_empty());
        self.acme_listeners(&raw, &listeners, nameless);
        let threads = raw.threads.as_ref().and_then(|t| self.positive(t, "threads"));
        let docker = raw.docker.as_ref().map(|d| self.docker(d));
        let max_idle_total = raw
            .pool
            .as_ref()
            .and_then(|p| p.max_idle_total.as_ref())
            .and_then(|v| self.non_negative(v, "pool.max_idle_total"));
        Config {
            listeners,
            routes,
            upstreams,
            timeouts: self.timeouts(raw.timeouts.unwrap_or_default()),
            client_limits: self.limits(raw.limits.unwrap_or_default()),
            threads,
            max_idle_total,
            admin: raw.admin.map(|admin| self.admin(admin)),
            access_log: raw.access_log.map(|log| self.access_log(log)).unwrap_or_default(),
            log_format: self.log_format(raw.log_format.as_ref()),
            trusted_proxies: self.trusted_proxies(raw.trusted_proxies.as_ref()),
            acme,
            buffering: self.buffering(raw.buffering.as_ref()),
            spool: self.spool(raw.buffering.as_ref()),
            docker,
            pool: base_pool,
        }
    }

    /// One `[upstream.NAME]` group.
    fn upstream(
        &mut self,
        name: &Spanned<String>,
        up: &file::FileUpstream,
        base_pool: &PoolConfig,
    ) -> UpstreamConfig {
        let key = format!("upstream.{}", name.get_ref());
        let (servers, scheme) = self.servers(&format!("{key}.servers"), &up.servers);
        let https = scheme == Some(Scheme::Https);
        let tls = self.upstream_tls(&key, up.tls.as_ref(), https);
        if let (Some(Scheme::H2c), Some(v)) = (scheme, &up.tls) {
            let message = "h2c:// servers are cleartext; use https:// servers for TLS";
            self.problem(v.span(), format!("{key}.tls"), message);
        }
        let protocol = self.protocol(&key, up.protocol.as_ref(), scheme, tls.is_some());
        let h2_ping_interval =
            self.optional_duration(&up.h2_ping_interval, &format!("{key}.h2_ping_interval"));
        let pool = self.pool(&format!("{key}.pool"), up.pool.as_ref(), base_pool.clone());
        if let Some(v) = up.pool.as_ref().and_then(|p| p.max_idle_total.as_ref()) {
            self.problem(
                v.span(),
                format!("{key}.pool.max_idle_total"),
                "only allowed in the top-level [pool]",
            );
        }
        let source_address =
            up.source_address.as_ref().and_then(|v| self.ip(v, &format!("{key}.source_address")));
        let mut upstream = UpstreamConfig::new(name.get_ref(), servers);
        upstream.pool = pool;
        upstream.source_address = source_address;
        upstream.tls = tls;
        upstream.protocol = protocol;
        upstream.h2_ping_interval = h2_ping_interval;
        if let Some(v) = &up.balance {
            match Policy::parse(v.get_ref()) {
                Ok(policy) => upstream.balance = policy,
                Err(message) => self.problem(v.span(), format!("{key}.balance"), message),
            }
        }
        let interval = format!("{key}.resolve_interval");
        self.set_positive_duration(&up.resolve_interval, &interval, &mut upstream.resolve_interval);
        if let Some(health) = &up.health {
            upstream.health = self.health(&format!("{key}.health"), health);
        }
        upstream.check =
            up.health_check.as_ref().map(|c| self.check(&format!("{key}.health_check"), c));
        upstream
    }

    /// `[buffering] responses` and `requests`: the routes' defaults.
    fn buffering(&mut self, raw: Option<&FileBuffering>) -> Buffering {
        let mut b = Buffering::default();
        if let Some(raw) = raw {
            if let Some(v) = &raw.responses {
                b.responses = *v.get_ref();
            }
            if let Some(v) = &raw.requests {
                b.requests = *v.get_ref();
            }
        }
        b
    }

    /// `[buffering]`'s bounds and directory.
    fn spool(&mut self, raw: Option<&FileBuffering>) -> SpoolConfig {
        let mut c = SpoolConfig::default();
        let Some(raw) = raw else { return c };
        if let Some(v) = &raw.memory_per_exchange {
            match self.size(v, "buffering.memory_per_exchange") {
                Some(n) => c.memory_per_exchange = usize::try_from(n).unwrap_or(usize::MAX),
                None => c.memory_per_exchange = 0,
            }
        }
        if let Some(v) = &raw.file_per_exchange {
            c.file_per_exchange = self.size(v, "buffering.file_per_exchange").unwrap_or(0);
        }
        if let Some(v) = &raw.memory_total {
            match self.size(v, "buffering.memory_total") {
                Some(n) => c.memory_total = n,
                None => self.problem(
                    v.span(),
                    "buffering.memory_total",
                    "must be more than 0 (set responses = false to turn buffering off)",
                ),
            }
        }
        if let Some(v) = &raw.file_total {
            let auto = matches!(v.get_ref(), file::FileSize::Text(t) if t.trim() == "auto");
            if !auto {
                c.file_total = Some(self.size(v, "buffering.file_total").unwrap_or(0));
            }
        }
        if let Some(v) = &raw.temp_dir {
            let dir = PathBuf::from(v.get_ref());
            if !dir.is_absolute() {
                self.problem(v.span(), "buffering.temp_dir", "must be an absolute path");
            } else if !dir.is_dir() {
                let message = format!("{} is not a directory", dir.display());
                self.problem(v.span(), "buffering.temp_dir", message);
            }
            c.dir = dir;
        }
        c
    }

    /// `[acme]`; `names_later`: routes may come later (with included files, or from
    /// containers' labels), so that none naming a host yet is no problem.
    fn acme(&mut self, raw: &FileAcme, routes: &[RouteConfig], names_later: bool) -> AcmeConfig {
        let mut out = AcmeConfig::new();
        if let Some(v) = &raw.directory {
            match acme::parse_directory(v.get_ref()) {
                Ok(directory) => out.directory = directory,
                Err(message) => self.problem(v.span(), "acme.directory", message),
            }
        }
        if let Some(v) = &raw.contact {
            match acme::parse_contact(v.get_ref()) {
                Ok(contact) => out.contact = Some(contact),
                Err(message) => self.problem(v.span(), "acme.contact", message),
            }
        }
        if let Some(v) = &raw.storage {
            if v.get_ref().trim().is_empty() {
                self.problem(v.span(), "acme.storage", "is empty: use a directory path");
            } else {
                out.storage = self.dir.join(v.get_ref());
            }
        }
        if let Some(v) = &raw.ca {
            if v.get_ref().trim().is_empty() {
                self.problem(v.span(), "acme.ca", "is empty: use the path of a PEM file");
            } else {
                out.ca = Some(self.dir.join(v.get_ref()));
            }
        }
        if let Some(v) = &raw.challenge {
            match Challenge::parse(v.get_ref()) {
                Ok(challenge) => out.challenge = challenge,
                Err(message) => self.problem(v.span(), "acme.challenge", message),
            }
        }
        if let Some(v) = &raw.pending {
            match Pending::parse(v.get_ref()) {
                Ok(pending) => out.pending = pending,
                Err(message) => self.problem(v.span(), "acme.pending", message),
            }
        }
        if let Some(v) = &raw.renew_at {
            match RenewAt::new(*v.get_ref()) {
                Ok(renew_at) => out.renew_at = renew_at,
                Err(message) => self.problem(v.span(), "acme.renew_at", message),
            }
        }
        out.names = self.acme_names(raw.names.as_ref(), routes, names_later);
        out
    }

    /// `[acme]`'s names as listed, or the routes' hosts when it lists none; a problem
    /// when that leaves no name at all.
    fn acme_names(
        &mut self,
        raw: Option<&Spanned<Vec<Spanned<String>>>>,
        routes: &[RouteConfig],
        names_later: bool,
    ) -> AcmeNames {
        let Some(raw) = raw else {
            if AcmeNames::Routes.resolve(exact_hosts(routes)).is_empty() && !names_later {
                self.problems.push(ConfigProblem {
                    line: None,
                    key: "acme".into(),
                    message: "no name to get a certificate for: list them in `names`, or give \
                              a [[route]] an exact `host` such as \"example.com\""
                        .into(),
                });
            }
            return AcmeNames::Routes;
        };
        if raw.get_ref().is_empty() {
            let message = "is empty: list the names to get certificates for, or leave `names` \
                           out to use the hosts of the [[route]]s";
            self.problem(raw.span(), "acme.names", message);
        }
        let mut names: Vec<String> = Vec::new();
        for v in raw.get_ref() {
            match acme::parse_name(v.get_ref()) {
                Ok(name) if names.contains(&name) => {
                    self.problem(v.span(), "acme.names", format!("{name} is listed twice"))
                }
                Ok(name) => names.push(name),
                Err(message) => self.problem(v.span(), "acme.names", message),
            }
        }
        AcmeNames::Listed(names)
    }

    /// `[docker]`: where the Engine is and which containers are routed.
    fn docker(&mut self, raw: &FileDocker) -> DockerConfig {
        let mut docker = DockerConfig::default();
        if let Some(v) = &raw.endpoint {
            match check_endpoint(v.get_ref()) {
                Ok(()) => docker.endpoint = Some(v.get_ref().clone()),
                Err(message) => self.problem(v.span(), "docker.endpoint", message),
            }
        }
        if let Some(v) = &raw.network {
            if v.get_ref().trim().is_empty() {
                self.problem(v.span(), "docker.network", "is empty: name a Docker network");
            } else {
                docker.network = Some(v.get_ref().clone());
            }
        }
        if let Some(v) = &raw.exposed_by_default {
            docker.exposed_by_default = *v.get_ref();
        }
        self.set_positive_duration(&raw.resync, "docker.resync", &mut docker.resync);
        let drain = &mut docker.drain_timeout;
        self.set_positive_duration(&raw.drain_timeout, "docker.drain_timeout", drain);
        docker
    }

    fn admin(&mut self, raw: FileAdmin) -> SocketAddr {
        raw.address
            .and_then(|address| self.socket_addr(&address, "admin.address"))
            .unwrap_or(DEFAULT_ADMIN_ADDR)
    }

    /// Where an access log goes: `off`, `stdout` or a file (relative to this file's
    /// directory); `None` after a problem.
    fn log_target(&mut self, v: &Spanned<String>, key: &str) -> Option<AccessLogTarget> {
        match v.get_ref().as_str() {
            "off" => Some(AccessLogTarget::Off),
            "stdout" => Some(AccessLogTarget::Stdout),
            blank if blank.trim().is_empty() => {
                let message = "is empty: use \"off\", \"stdout\" or a file path";
                self.problem(v.span(), key, message);
                None
            }
            path => Some(AccessLogTarget::File(self.dir.join(path))),
        }
    }

    fn access_log(&mut self, raw: FileAccessLog) -> AccessLogConfig {
        let target = raw
            .target
            .as_ref()
            .and_then(|v| self.log_target(v, "access_log.target"))
            .unwrap_or(access_log::DEFAULT_ENABLED_TARGET);
        let format = match &raw.format {
            None => AccessLogFormat::default(),
            Some(v) => match v.get_ref().as_str() {
                "json" => AccessLogFormat::Json,
                "text" => AccessLogFormat::Text,
                other => {
                    let message = format!("{other:?} is not a format: use \"json\" or \"text\"");
                    self.problem(v.span(), "access_log.format", message);
                    AccessLogFormat::default()
                }
            },
        };
        AccessLogConfig { target, format }
    }

    fn log_format(&mut self, raw: Option<&Spanned<String>>) -> LogFormat {
        let Some(v) = raw else { return LogFormat::default() };
        match v.get_ref().as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                let message = format!("{other:?} is not a format: use \"text\" or \"json\"");
                self.problem(v.span(), "log_format", message);
                LogFormat::default()
            }
        }
    }

    /// The `[[listener]]`s; `has_routes`: requests may be routed without a listener's
    /// own `upstream`. `certificates` are served by every TLS listener.
    fn listeners(
        &mut self,
        raw: &FileConfig,
        upstreams: &[UpstreamConfig],
        has_routes: bool,
        certificates: &[CertPair],
    ) -> Vec<ListenerConfig> {
        if raw.listener.is_empty() {
            self.problems.push(ConfigProblem {
                line: None,
                key: "listener".into(),
                message: "no [[listener]]: add one with `address` (and `upstream`, or [[route]]s)"
                    .into(),
            });
        }
        let mut out = Vec::new();
        for (i, l) in raw.listener.iter().enumerate() {
            let key = format!("listener[{i}]");
            let addr = self.socket_addr(&l.address, &format!("{key}.address"));
            if let Some(name) = &l.upstream {
                self.known_upstream(name, &format!("{key}.upstream"), upstreams);
            } else if !has_routes {
                let message = "has no `upstream` and there is no [[route]]: every request \
                               would get 404";
                self.problem(l.address.span(), key.clone(), message);
            }
            // Port 0 (any free port) may repeat: each listener gets a port of its own.
            let taken = |o: &ListenerConfig| Some(o.addr) == addr && o.addr.port() != 0;
            if let (Some(addr), Some(same)) = (addr, out.iter().position(taken)) {
                let message = format!("{addr} is also listener[{same}]'s address");
                self.problem(l.address.span(), format!("{key}.address"), message);
            }
            let client_max_body = l
                .client_max_body
                .as_ref()
                .and_then(|v| self.size(v, &format!("{key}.client_max_body")));
            let backlog = match &l.backlog {
                None => Some(listener::default_backlog()),
                Some(v) => match u32::try_from(*v.get_ref()) {
                    // listen() takes an int.
                    Ok(n @ 1..=MAX_BACKLOG) => Some(n),
                    _ => {
                        let message = format!("must be from 1 to {MAX_BACKLOG}");
                        self.problem(v.span(), format!("{key}.backlog"), message);
                        None
                    }
                },
            };
            // `None` when [listener.tls] has a problem (reported), `Some(None)` without it.
            let tls = match &l.tls {
                None => Some(None),
                Some(t) => self.listener_tls(&key, t, certificates).map(Some),
            };
            let redirect_https = l
                .redirect_https
                .as_ref()
                .and_then(|v| self.redirect_https(&format!("{key}.redirect_https"), v));
            if let (Some(_), Some(_), Some(v)) = (redirect_https, &l.tls, &l.redirect_https) {
                let message = "this listener speaks HTTPS already; redirect_https goes on a cleartext listener";
                self.problem(v.span(), format!("{key}.redirect_https"), message);
            }
            let hsts = l.hsts.as_ref().and_then(|v| self.hsts(&format!("{key}.hsts"), v));
            let h2c = l.h2c.as_ref().is_some_and(|v| *v.get_ref());
            if let (true, Some(_), Some(v)) = (h2c, &l.tls, &l.h2c) {
                let message = "h2c is HTTP/2 on a cleartext listener; a TLS listener offers h2 by ALPN (see `http2`)";
                self.problem(v.span(), format!("{key}.h2c"), message);
            }
            let http2 = l.http2.as_ref().is_none_or(|v| *v.get_ref());
            if let (None, Some(v)) = (&l.tls, &l.http2) {
                let message = "`http2` is offered by ALPN on a TLS listener; a cleartext listener takes `h2c = true`";
                self.problem(v.span(), format!("{key}.http2"), message);
            }
            let tls = tls.map(|t| t.map(|t| crate::tls::server::ListenerTls { http2, ..t }));
            if let (Some(addr), Some(backlog), Some(tls)) = (addr, backlog, tls) {
                let upstream = l.upstream.as_ref().map(|n| n.get_ref().clone());
                out.push(ListenerConfig {
                    addr,
                    upstream,
                    client_max_body,
                    backlog,
                    tls,
                    redirect_https,
                    hsts,
                    h2c,
                });
            }
        }
        out
    }

    /// Records a problem unless an upstream group is called `name`.
    fn known_upstream(&mut self, name: &Spanned<String>, key: &str, upstreams: &[UpstreamConfig]) {
        if !upstreams.iter().any(|u| &u.name == name.get_ref()) {
            let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
            let message = format!("no upstream named {:?} (defined: {known:?})", name.get_ref());
            self.problem(name.span(), key, message);
        }
    }

    /// The `[[route]]`s of one file, added to `out` (those of the files before it).
    fn routes(
        &mut self,
        raw: &[FileRoute],
        upstreams: &[UpstreamConfig],
        listeners: &[SocketAddr],
        out: &mut Routes,
    ) {
        for (i, r) in raw.iter().enumerate() {
            let key = format!("route[{i}]");
            self.known_upstream(&r.upstream, &format!("{key}.upstream"), upstreams);
            let host = match &r.host {
                None => Some(HostPattern::Any),
                Some(v) => HostPattern::parse(v.get_ref())
                    .map_err(|message| self.problem(v.span(), format!("{key}.host"), message))
                    .ok(),
            };
            let path = match &r.path {
                None => Some("/".to_string()),
                Some(v) => route::parse_path_prefix(v.get_ref())
                    .map_err(|message| self.problem(v.span(), format!("{key}.path"), message))
                    .ok(),
            };
            let client_max_body = r
                .client_max_body
                .as_ref()
                .and_then(|v| self.size(v, &format!("{key}.client_max_body")));
            let options = self.route_options(&key, r, listeners);
            let (Some(host), Some(path)) = (host, path) else { continue };
            let overlap = |o: &RouteConfig| {
                o.listeners.is_empty()
                    || options.listeners.is_empty()
                    || o.listeners.iter().any(|l| options.listeners.contains(l))
            };
            let same = |o: &RouteConfig| o.host == host && o.path == path && overlap(o);
            if let Some(same) = out.configs.iter().position(same) {
                let place = out.places.get(same).map_or("", String::as_str);
                let message = format!("the same host and path as {place}");
                self.problem(r.upstream.span(), key, message);
                continue;
            }
            let place = if self.main {
                key.clone()
            } else {
                format!("{key} at {}", self.place(r.upstream.span()))
            };
            let upstream = r.upstream.get_ref().clone();
            out.places.push(place);
            out.configs.push(RouteConfig {
                host,
                path,
                upstream,
                client_max_body,
                buffer_responses: r.buffer_responses.as_ref().map(|v| *v.get_ref()),
                buffer_requests: r.buffer_requests.as_ref().map(|v| *v.get_ref()),
                listeners: options.listeners,
                redirect_https: options.redirect_https,
                hsts: options.hsts,
                connect_timeout: options.connect_timeout,
                read_timeout: options.read_timeout,
                access_log: options.access_log,
            });
        }
    }

    /// A route's own settings over its listeners' and the file's: which listeners,
    /// HTTPS redirect and HSTS, timeouts, access log. `listeners` are the addresses
    /// configured.
    fn route_options(
        &mut self,
        key: &str,
        r: &FileRoute,
        listeners: &[SocketAddr],
    ) -> RouteOptions {
        let mut on = Vec::new();
        if let Some(v) = &r.listeners {
            let k = format!("{key}.listeners");
            if v.get_ref().is_empty() {
                self.problem(v.span(), &k, "is empty: leave it out to apply on every listener");
            }
            for a in v.get_ref() {
                let Some(addr) = self.socket_addr(a, &k) else { continue };
                if !listeners.contains(&addr) {
                    let message = format!("no [[listener]] has the address {addr}");
                    self.problem(a.span(), &k, message);
                }
                on.push(addr);
            }
        }
        let redirect_https = r
            .redirect_https
            .as_ref()
            .and_then(|v| self.redirect_https(&format!("{key}.redirect_https"), v));
        let age = r.hsts.as_ref().and_then(|v| self.hsts(&format!("{key}.hsts"), v));
        let flag = |v: &Option<Spanned<bool>>| v.as_ref().is_some_and(|v| *v.get_ref());
        for (name, v) in [
            ("hsts_include_subdomains", &r.hsts_include_subdomains),
            ("hsts_preload", &r.hsts_preload),
        ] {
            if let (Some(v), None) = (v, &r.hsts) {
                self.problem(v.span(), format!("{key}.{name}"), "needs `hsts` (the max-age)");
            }
        }
        let hsts = age.map(|max_age| Hsts {
            max_age,
            include_subdomains: flag(&r.hsts_include_subdomains),
            preload: flag(&r.hsts_preload),
        });
        let connect_timeout =
            self.optional_duration(&r.connect_timeout, &format!("{key}.connect_timeout"));
        let read_timeout = self.optional_duration(&r.read_timeout, &format!("{key}.read_timeout"));
        let log_key = format!("{key}.access_log");
        let access_log = r.access_log.as_ref().and_then(|v| match self.log_target(v, &log_key) {
            Some(AccessLogTarget::Stdout) => {
                self.problem(v.span(), &log_key, "a route logs to a file, or \"off\"");
                None
            }
            target => target,
        });
        RouteOptions {
            listeners: on,
            redirect_https,
            hsts,
            connect_timeout,
            read_timeout,
            access_log,
        }
    }

    /// Top-level `[[certificate]]`s: served by every TLS listener.
    fn certificates(&mut self, raw: &[file::FileCertPair]) -> Vec<CertPair> {
        let each = raw.iter().enumerate().filter_map(|(i, pair)| {
            self.cert_pair(&format!("certificate[{i}]"), ["cert", "key"], &pair.cert, &pair.key)
        });
        each.collect()
    }

    /// Where `span` is, as `FILE:LINE`.
    fn place(&self, span: Range<usize>) -> String {
        format!("{}:{}", self.file.display(), line_of(self.text, span.start))
    }

    /// The servers, and whether they are `https://` ones (a group speaks TLS to all
    /// of its servers or to none).
    fn servers(
        &mut self,
        key: &str,
        servers: &Spanned<Vec<Spanned<String>>>,
    ) -> (Vec<Server>, Option<Scheme>) {
        if servers.get_ref().is_empty() && !self.docker {
            self.problem(servers.span(), key, "needs at least one server (\"host:port\")");
        }
        let mut out = Vec::new();
        let mut schemes = Vec::new();
        for s in servers.get_ref() {
            match parse_server_url(s.get_ref()) {
                Ok((server, _)) if out.contains(&server) => {
                    self.problem(s.span(), key, format!("{server} is listed twice"))
                }
                Ok((server, scheme)) => {
                    if schemes.first().is_some_and(|first| *first != scheme) {
                        let message = "mixes http://, https:// and h2c:// servers: a group speaks one way to all of its servers";
                        self.problem(s.span(), key, message);
                    }
                    schemes.push(scheme);
                    out.push(server);
                }
                Err(message) => self.problem(s.span(), key, message),
            }
        }
        (out, schemes.first().copied())
    }

    /// The group's `protocol`, checked against its servers' scheme (`h2c://` means
    /// h2c) and whether it speaks TLS.
    fn protocol(
        &mut self,
        key: &str,
        raw: Option<&Spanned<String>>,
        scheme: Option<Scheme>,
        tls: bool,
    ) -> Protocol {
        let key = format!("{key}.protocol");
        let h2c_servers = scheme == Some(Scheme::H2c);
        let Some(v) = raw else {
            return if h2c_servers { Protocol::H2c } else { Protocol::Auto };
        };
        let protocol = match Protocol::parse(v.get_ref()) {
            Ok(p) => p,
            Err(message) => {
                self.problem(v.span(), key, message);
                return Protocol::Auto;
            }
        };
        let clash = match protocol {
            Protocol::H2c if tls => Some("h2c is cleartext HTTP/2, but the group speaks TLS (use \"h2\")"),
            Protocol::H2 if !tls => Some("h2 is HTTP/2 over TLS, but the group speaks cleartext (use \"h2c\", or https:// servers)"),
            Protocol::Http1 if h2c_servers => Some("the servers are h2c://"),
            _ => None,
        };
        if let Some(message) = clash {
            self.problem(v.span(), key, message);
        }
        // `auto` over cleartext is HTTP/1.1, but h2c:// servers say HTTP/2.
        match protocol {
            Protocol::Auto if h2c_servers => Protocol::H2c,
            other => other,
        }
    }

    fn health(&mut self, key: &str, raw: &FileHealth) -> PassiveHealth {
        let mut h = PassiveHealth::default();
        let k = |name: &str| format!("{key}.{name}");
        self.set_count(
            &raw.max_connect_failures,
            &k("max_connect_failures"),
            &mut h.max_connect_failures,
        );
        self.set_count(&raw.max_5xx, &k("max_5xx"), &mut h.max_5xx);
        self.set_positive_duration(&raw.ejection, &k("ejection"), &mut h.ejection);
        self.set_positive_duration(&raw.max_ejection, &k("max_ejection"), &mut h.max_ejection);
        self.set_duration(&raw.slow_start, &k("slow_start"), &mut h.slow_start);
        if let Some(v) = &raw.panic_threshold {
            match u8::try_from(*v.get_ref()) {
                Ok(percent) if percent <= 100 => h.panic_threshold = percent,
                _ => self.problem(
                    v.span(),
                    k("panic_threshold"),
                    "must be a percentage from 0 to 100",
                ),
            }
        }
        if h.max_ejection < h.ejection {
            if let Some(v) = &raw.max_ejection {
                self.problem(v.span(), k("max_ejection"), "must be at least `ejection`");
            }
        }
        h
    }

    fn check(&mut self, key: &str, raw: &FileHealthCheck) -> CheckConfig {
        let k = |name: &str| format!("{key}.{name}");
        // Any request target that starts with '/' will do, query string included.
        let path = if raw.path.get_ref().starts_with('/') {
            raw.path.get_ref().clone()
        } else {
            let message = format!("{:?} must start with '/'", raw.path.get_ref());
            self.problem(raw.path.span(), k("path"), message);
            "/".into()
        };
        let mut check = CheckConfig {
            path,
            interval: check::DEFAULT_INTERVAL,
            timeout: check::DEFAULT_TIMEOUT,
            expect_status: None,
            host: raw.host.as_ref().map(|h| h.get_ref().clone()),
            thresholds: CheckThresholds::default(),
        };
        self.set_positive_duration(&raw.interval, &k("interval"), &mut check.interval);
        self.set_positive_duration(&raw.timeout, &k("timeout"), &mut check.timeout);
        if let Some(v) = &raw.expect_status {
            match u16::try_from(*v.get_ref()) {
                Ok(status @ 100..=599) => check.expect_status = Some(status),
                _ => self.problem(v.span(), k("expect_status"), "must be a status from 100 to 599"),
            }
        }
        if let Some(n) = raw.healthy.as_ref().and_then(|v| self.positive(v, &k("healthy"))) {
            check.thresholds.healthy = n.try_into().unwrap_or(u32::MAX);
        }
        if let Some(n) = raw.unhealthy.as_ref().and_then(|v| self.positive(v, &k("unhealthy"))) {
            check.thresholds.unhealthy = n.try_into().unwrap_or(u32::MAX);
        }
        check
    }

    fn socket_addr(&mut self, value: &Spanned<String>, key: &str) -> Option<SocketAddr> {
        match value.get_ref().parse() {
            Ok(addr) => Some(addr),
            Err(_) => {
                let message =
                    format!("{:?} is not an ip:port like \"127.0.0.1:8080\"", value.get_ref());
                self.problem(value.span(), key, message);
                None
            }
        }
    }

    fn pool(&mut self, key: &str, raw: Option<&FilePool>, base: PoolConfig) -> PoolConfig {
        let Some(raw) = raw else { return base };
        let mut pool = base;
        let k = |name: &str| format!("{key}.{name}");
        self.set_duration(&raw.idle_timeout, &k("idle_timeout"), &mut pool.idle_timeout);
        self.set_duration(&raw.max_lifetime, &k("max_lifetime"), &mut pool.max_lifetime);
        self.set_duration(&raw.queue_timeout, &k("queue_timeout"), &mut pool.queue_timeout);
        self.set_count(&raw.max_requests, &k("max_requests"), &mut pool.max_requests);
        if let Some(v) = &raw.max_idle_per_server {
            pool.max_idle = self.non_negative(v, &k("max_idle_per_server")).or(pool.max_idle);
        }
        let max_connections = k("max_connections_per_server");
        self.set_count(
            &raw.max_connections_per_server,
            &max_connections,
            &mut pool.max_connections,
        );
        self.set_count(&raw.queue_size, &k("queue_size"), &mut pool.queue_size);
        pool
    }

    fn timeouts(&mut self, raw: file::FileTimeouts) -> Timeouts {
        let mut t = Timeouts::default();
        let fields = [
            (&raw.connect, "connect", &mut t.connect),
            (&raw.response_header, "response_header", &mut t.response_header),
            (&raw.read, "read", &mut t.read),
            (&raw.client_header, "client_header", &mut t.client_header),
            (&raw.client_idle, "client_idle", &mut t.client_idle),
            (&raw.client_body, "client_body", &mut t.client_body),
            (&raw.client_buffered, "client_buffered", &mut t.client_buffered),
            (&raw.drain, "drain", &mut t.drain),
        ];
        for (value, name, slot) in fields {
            if let Some(v) = value {
                match self.duration(v, &format!("timeouts.{name}")) {
                    Some(d) if d.is_zero() => {
                        self.problem(v.span(), format!("timeouts.{name}"), "must be more than 0")
                    }
                    Some(d) => *slot = d,
                    None => {}
                }
            }
        }
        t
    }

    fn limits(&mut self, raw: file::FileLimits) -> ClientLimits {
        let mut l = ClientLimits::default();
        if let Some(v) = &raw.max_request_headers {
            match self.positive(v, "limits.max_request_headers") {
                Some(n) if n > MAX_HEADERS => self.problem(
                    v.span(),
                    "limits.max_request_headers",
                    format!("must be at most {MAX_HEADERS}"),
                ),
                Some(n) => l.max_headers = n,
                None => {}
            }
        }
        if let Some(v) = &raw.max_request_header_bytes {
            match self.positive(v, "limits.max_request_header_bytes") {
                Some(n) if n < 1024 => self.problem(
                    v.span(),
                    "limits.max_request_header_bytes",
                    "must be at least 1024",
                ),
                Some(n) => l.max_header_bytes = n,
                None => {}
            }
        }
        if let Some(v) = &raw.max_request_line_bytes {
            match self.positive(v, "limits.max_request_line_bytes") {
                Some(n) if n < 256 => {
                    self.problem(v.span(), "limits.max_request_line_bytes", "must be at least 256")
                }
                Some(n) => l.max_line_bytes = n,
                None => {}
            }
        }
        if let Some(v) = &raw.client_max_body {
            l.max_body = self.size(v, "limits.client_max_body");
        }
        if let Some(v) = &raw.client_body_min_bytes_per_second {
            if let Some(n) = self.non_negative(v, "limits.client_body_min_bytes_per_second") {
                l.body_min_bytes_per_second = n as u64;
            }
        }
        if let Some(v) = &raw.h2_max_concurrent_streams {
            match self.positive(v, "limits.h2_max_concurrent_streams") {
                Some(n) if n > 100_000 => self.problem(
                    v.span(),
                    "limits.h2_max_concurrent_streams",
                    "must be at most 100000",
                ),
                Some(n) => l.h2_max_concurrent_streams = n as u32,
                None => {}
            }
        }
        l
    }

    /// A byte size: a whole number of bytes, or a string with a unit (`"10MB"`,
    /// `"512k"`, `"1GiB"`; k, M and G count in 1024s, as nginx's sizes do). `"unlimited"`
    /// or 0 means no limit.
    fn size(&mut self, value: &Spanned<file::FileSize>, key: &str) -> Option<u64> {
        let parsed = match value.get_ref() {
            file::FileSize::Bytes(n) => {
                u64::try_from(*n).map_err(|_| "must be 0 or more".to_string())
            }
            file::FileSize::Text(text) => parse_size(text),
        };
        match parsed {
            Ok(0) => None,
            Ok(n) => Some(n),
            Err(message) => {
                self.problem(value.span(), key, message);
                None
            }
        }
    }

    fn trusted_proxies(&mut self, raw: Option<&Spanned<Vec<Spanned<String>>>>) -> Vec<Cidr> {
        let Some(raw) = raw else { return Vec::new() };
        let mut out = Vec::new();
        for v in raw.get_ref() {
            match Cidr::parse(v.get_ref()) {
                Ok(cidr) => out.push(cidr),
                Err(message) => self.problem(v.span(), "trusted_proxies", message),
            }
        }
        out
    }

    fn ip(&mut self, value: &Spanned<String>, key: &str) -> Option<IpAddr> {
        match value.get_ref().parse() {
            Ok(ip) => Some(ip),
            Err(_) => {
                let message =
                    format!("{:?} is not an IP address like \"127.0.0.2\"", value.get_ref());
                self.problem(value.span(), key, message);
                None
            }
        }
    }

    /// Sets `slot` from an optional duration string, recording a problem if it is bad.
    fn set_duration(&mut self, value: &Option<Spanned<String>>, key: &str, slot: &mut Duration) {
        if let Some(d) = value.as_ref().and_then(|v| self.duration(v, key)) {
            *slot = d;
        }
    }

    /// Like [`Validator::set_duration`], but zero is a problem.
    fn set_positive_duration(
        &mut self,
        value: &Option<Spanned<String>>,
        key: &str,
        slot: &mut Duration,
    ) {
        let Some(v) = value else { return };
        match self.duration(v, key) {
            Some(d) if d.is_zero() => self.problem(v.span(), key, "must be more than 0"),
            Some(d) => *slot = d,
            None => {}
        }
    }

    /// An optional duration that must be more than 0 when given; `None` when it is not
    /// given or has a problem (recorded).
    fn optional_duration(
        &mut self,
        value: &Option<Spanned<String>>,
        key: &str,
    ) -> Option<Duration> {
        let mut slot = Duration::ZERO;
        self.set_positive_duration(value, key, &mut slot);
        (!slot.is_zero()).then_some(slot)
    }

    /// Sets `slot` from an optional count (0 or more), recording a problem if it is bad.
    fn set_count<T: TryFrom<usize>>(
        &mut self,
        value: &Option<Spanned<i64>>,
        key: &str,
        slot: &mut T,
    ) {
        if let Some(Ok(n)) = value.as_ref().and_then(|v| self.non_negative(v, key)).map(T::try_from)
        {
            *slot = n;
        }
    }

    fn duration(&mut self, value: &Spanned<String>, key: &str) -> Option<Duration> {
        match humantime::parse_duration(value.get_ref()) {
            Ok(d) => Some(d),
            Err(e) => {
                let message =
                    format!("{:?} is not a duration like \"4s\" or \"10m\": {e}", value.get_ref());
                self.problem(value.span(), key, message);
                None
            }
        }
    }

    fn non_negative(&mut self, value: &Spanned<i64>, key: &str) -> Option<usize> {
        match usize::try_from(*value.get_ref()) {
            Ok(n) => Some(n),
            Err(_) => {
                self.problem(value.span(), key, "must be 0 or more");
                None
            }
        }
    }

    fn positive(&mut self, value: &Spanned<i64>, key: &str) -> Option<usize> {
        match usize::try_from(*value.get_ref()) {
            Ok(n) if n > 0 => Some(n),
            _ => {
                self.problem(value.span(), key, "must be 1 or more");
                None
            }
        }
    }
}

/// A size with an optional unit: `"10MB"`, `"512k"`, `"1GiB"`, `"4096"`; `"unlimited"` is 0.
fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a size like \"10MB\" or 1048576 (bytes)");
    let t = text.trim();
    if t.eq_ignore_ascii_case("unlimited") {
        return Ok(0);
    }
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).ok_or_else(bad)
}
