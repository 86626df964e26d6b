//! What changed from one [`Config`] to the next, in the words a reload reports: the
//! listeners, upstream groups (and their servers), routes and settings added, removed
//! or changed. Pure: it compares two configs and touches nothing.

use std::fmt;
use std::time::Duration;

use holdfast_pool::PoolConfig;

use super::{Config, RouteConfig};
use crate::acme::{AcmeConfig, AcmeNames};
use crate::listener::ListenerConfig;
use crate::proxy::Hsts;
use crate::route::HostPattern;
use crate::telemetry::access_log::{AccessLogFormat, AccessLogTarget};
use crate::tls::origin::OriginTls;
use crate::tls::server::ListenerTls;
use crate::upstream::check::CheckConfig;
use crate::upstream::health::PassiveHealth;
use crate::upstream::UpstreamConfig;

/// Marks a change a running holdfast does not apply.
const AT_RESTART: &str = " (takes effect at restart)";

/// Every difference between two configs, one [`Change`] per listener, group, route or
/// settings table that differs; empty when they are the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    pub changes: Vec<Change>,
}

/// What changed in one thing: `upstream api: added server 10.0.0.3:80; removed server
/// 10.0.0.2:80`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// What changed: `listener 0.0.0.0:8080`, `upstream api`, `route example.com/api`,
    /// `timeouts`.
    pub subject: String,
    /// How, in order: `added`, `removed server 10.0.0.2:80`, `changed balance p2c ->
    /// round_robin`; a change the running process does not apply ends in
    /// "(takes effect at restart)".
    pub details: Vec<String>,
}

impl ConfigDiff {
    /// What changes when `new` replaces `old`: listeners, then upstream groups, routes
    /// and the settings that apply to all of them.
    pub fn between(old: &Config, new: &Config) -> ConfigDiff {
        let mut changes = Vec::new();
        listeners(&old.listeners, &new.listeners, &mut changes);
        upstreams(&old.upstreams, &new.upstreams, &mut changes);
        routes(&old.routes, &new.routes, &mut changes);
        settings(old, new, &mut changes);
        ConfigDiff { changes }
    }

    /// Whether the two configs are the same.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.subject, self.details.join("; "))
    }
}

/// `no changes`, or `2 changes` and then each on a line of its own.
impl fmt::Display for ConfigDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.changes.len() {
            0 => return write!(f, "no changes"),
            1 => write!(f, "1 change")?,
            n => write!(f, "{n} changes")?,
        }
        for change in &self.changes {
            write!(f, "\n{change}")?;
        }
        Ok(())
    }
}

/// Collects the `changed NAME OLD -> NEW` details of one thing.
#[derive(Default)]
struct Details(Vec<String>);

impl Details {
    fn field(&mut self, name: &str, old: impl fmt::Display, new: impl fmt::Display) {
        let (old, new) = (old.to_string(), new.to_string());
        if old != new {
            self.0.push(format!("changed {name} {old} -> {new}"));
        }
    }

    /// Like [`Details::field`], for a setting the running process keeps until restart.
    fn at_restart(&mut self, name: &str, old: impl fmt::Display, new: impl fmt::Display) {
        let before = self.0.len();
        self.field(name, old, new);
        if let Some(detail) = self.0.get_mut(before) {
            detail.push_str(AT_RESTART);
        }
    }

    fn push_to(self, subject: String, changes: &mut Vec<Change>) {
        if !self.0.is_empty() {
            changes.push(Change { subject, details: self.0 });
        }
    }
}

fn listeners(old: &[ListenerConfig], new: &[ListenerConfig], changes: &mut Vec<Change>) {
    // Listeners are known by their configured address; port 0 may repeat, so the
    // first unmatched one of the same address is the same listener.
    let mut unmatched: Vec<&ListenerConfig> = old.iter().collect();
    for l in new {
        let subject = format!("listener {}", l.addr);
        let Some(i) = unmatched.iter().position(|o| o.addr == l.addr) else {
            let added = match &l.upstream {
                Some(upstream) => format!("added (upstream {upstream})"),
                None => "added".to_string(),
            };
            changes.push(Change { subject, details: vec![added] });
            continue;
        };
        let o = unmatched.remove(i);
        let mut d = Details::default();
        d.field("upstream", or_none(&o.upstream), or_none(&l.upstream));
        d.field("client_max_body", or_none(&o.client_max_body), or_none(&l.client_max_body));
        d.at_restart("backlog", o.backlog, l.backlog);
        d.field("tls", listener_tls(o.tls.as_ref()), listener_tls(l.tls.as_ref()));
        d.field("redirect_https", or_none(&o.redirect_https), or_none(&l.redirect_https));
        let hsts = |h: Option<Duration>| h.map_or_else(|| "none".to_string(), duration);
        d.field("hsts", hsts(o.hsts), hsts(l.hsts));
        d.push_to(subject, changes);
    }
    for o in unmatched {
        let subject = format!("listener {}", o.addr);
        changes.push(Change { subject, details: vec!["removed".into()] });
    }
}

fn upstreams(old: &[UpstreamConfig], new: &[UpstreamConfig], changes: &mut Vec<Change>) {
    for u in new {
        let subject = format!("upstream {}", u.name);
        let Some(o) = old.iter().find(|o| o.name == u.name) else {
            let servers: Vec<String> = u.servers.iter().map(ToString::to_string).collect();
            let added = format!("added with servers {}", servers.join(", "));
            changes.push(Change { subject, details: vec![added] });
            continue;
        };
        let mut d = Details::default();
        for s in u.servers.iter().filter(|s| !o.servers.contains(s)) {
            d.0.push(format!("added server {s}"));
        }
        for s in o.servers.iter().filter(|s| !u.servers.contains(s)) {
            d.0.push(format!("removed server {s}"));
        }
        d.field("balance", o.balance.as_str(), u.balance.as_str());
        d.field("resolve_interval", duration(o.resolve_interval), duration(u.resolve_interval));
        d.field("source_address", or_none(&o.source_address), or_none(&u.source_address));
        d.field("tls", origin_tls(o.tls.as_ref()), origin_tls(u.tls.as_ref()));
        if let (Some(a), Some(b)) = (&o.tls, &u.tls) {
            if a.settings == b.settings && a != b {
                d.0.push("changed tls files (new connections)".into());
            }
        }
        pool(&mut d, &o.pool, &u.pool);
        health(&mut d, &o.health, &u.health);
        check(&mut d, o.check.as_ref(), u.check.as_ref());
        d.push_to(subject, changes);
    }
    for o in old.iter().filter(|o| !new.iter().any(|u| u.name == o.name)) {
        let subject = format!("upstream {}", o.name);
        changes.push(Change { subject, details: vec!["removed (its servers drain)".into()] });
    }
}

fn pool(d: &mut Details, old: &PoolConfig, new: &PoolConfig) {
    d.field("pool.idle_timeout", duration(old.idle_timeout), duration(new.idle_timeout));
    d.field("pool.max_requests", old.max_requests, new.max_requests);
    d.field("pool.max_lifetime", duration(old.max_lifetime), duration(new.max_lifetime));
    let ceiling = |c: Option<usize>| c.map_or_else(|| "none".to_string(), |n| n.to_string());
    let (o, n) = (ceiling(old.max_idle), ceiling(new.max_idle));
    d.field("pool.max_idle_per_server", o, n);
    d.field("pool.max_connections_per_server", old.max_connections, new.max_connections);
    d.field("pool.queue_size", old.queue_size, new.queue_size);
    d.field("pool.queue_timeout", duration(old.queue_timeout), duration(new.queue_timeout));
}

fn health(d: &mut Details, old: &PassiveHealth, new: &PassiveHealth) {
    d.field("health.max_connect_failures", old.max_connect_failures, new.max_connect_failures);
    d.field("health.max_5xx", old.max_5xx, new.max_5xx);
    d.field("health.ejection", duration(old.ejection), duration(new.ejection));
    d.field("health.max_ejection", duration(old.max_ejection), duration(new.max_ejection));
    d.field("health.slow_start", duration(old.slow_start), duration(new.slow_start));
    d.field("health.panic_threshold", old.panic_threshold, new.panic_threshold);
}

fn check(d: &mut Details, old: Option<&CheckConfig>, new: Option<&CheckConfig>) {
    match (old, new) {
        (None, None) => {}
        (None, Some(c)) => d.0.push(format!("added health_check GET {}", c.path)),
        (Some(_), None) => d.0.push("removed health_check".into()),
        (Some(o), Some(c)) => {
            d.field("health_check.path", &o.path, &c.path);
            d.field("health_check.interval", duration(o.interval), duration(c.interval));
            d.field("health_check.timeout", duration(o.timeout), duration(c.timeout));
            d.field(
                "health_check.expect_status",
                or_none(&o.expect_status),
                or_none(&c.expect_status),
            );
            d.field("health_check.host", or_none(&o.host), or_none(&c.host));
            let (ot, ct) = (&o.thresholds, &c.thresholds);
            d.field("health_check.healthy", ot.healthy, ct.healthy);
            d.field("health_check.unhealthy", ot.unhealthy, ct.unhealthy);
        }
    }
}

fn routes(old: &[RouteConfig], new: &[RouteConfig], changes: &mut Vec<Change>) {
    // A route is known by its host, path and listeners: no two routes share all three.
    let same = |a: &RouteConfig, b: &RouteConfig| {
        a.host == b.host && a.path == b.path && a.listeners == b.listeners
    };
    for r in new {
        let subject = format!("route {}", route_name(r));
        let Some(o) = old.iter().find(|o| same(o, r)) else {
            let added = format!("added (upstream {})", r.upstream);
            changes.push(Change { subject, details: vec![added] });
            continue;
        };
        let mut d = Details::default();
        d.field("upstream", &o.upstream, &r.upstream);
        d.field("client_max_body", or_none(&o.client_max_body), or_none(&r.client_max_body));
        d.field("buffer_responses", or_none(&o.buffer_responses), or_none(&r.buffer_responses));
        d.field("buffer_requests", or_none(&o.buffer_requests), or_none(&r.buffer_requests));
        d.field("redirect_https", or_none(&o.redirect_https), or_none(&r.redirect_https));
        d.field("hsts", route_hsts(o.hsts), route_hsts(r.hsts));
        let timeout = |t: Option<Duration>| t.map_or_else(|| "none".to_string(), duration);
        d.field("connect_timeout", timeout(o.connect_timeout), timeout(r.connect_timeout));
        d.field("read_timeout", timeout(o.read_timeout), timeout(r.read_timeout));
        let log =
            |t: &Option<AccessLogTarget>| t.as_ref().map_or_else(|| "none".into(), log_target);
        d.field("access_log", log(&o.access_log), log(&r.access_log));
        d.push_to(subject, changes);
    }
    for o in old.iter().filter(|o| !new.iter().any(|r| same(o, r))) {
        let subject = format!("route {}", route_name(o));
        changes.push(Change { subject, details: vec!["removed".into()] });
    }
}

/// `example.com/api`, `*.example.com/`, or `/api` for a route without host; with
/// ` on 0.0.0.0:80` for a route on some listeners only.
fn route_name(r: &RouteConfig) -> String {
    let name = match &r.host {
        HostPattern::Any => r.path.clone(),
        HostPattern::Exact(host) => format!("{host}{}", r.path),
        HostPattern::Suffix(suffix) => format!("*{suffix}{}", r.path),
    };
    if r.listeners.is_empty() {
        return name;
    }
    let on: Vec<String> = r.listeners.iter().map(ToString::to_string).collect();
    format!("{name} on {}", on.join(", "))
}

/// A route's HSTS as its header says it: `max-age=3600; includeSubDomains`, or `none`.
fn route_hsts(hsts: Option<Hsts>) -> String {
    hsts.map_or_else(|| "none".to_string(), |h| h.value())
}

/// The tables and top-level keys that apply to every listener and group.
fn settings(old: &Config, new: &Config, changes: &mut Vec<Change>) {
    let mut d = Details::default();
    let (o, n) = (&old.timeouts, &new.timeouts);
    d.field("connect", duration(o.connect), duration(n.connect));
    d.field("response_header", duration(o.response_header), duration(n.response_header));
    d.field("read", duration(o.read), duration(n.read));
    d.field("client_header", duration(o.client_header), duration(n.client_header));
    d.field("client_idle", duration(o.client_idle), duration(n.client_idle));
    d.field("client_body", duration(o.client_body), duration(n.client_body));
    d.field("client_buffered", duration(o.client_buffered), duration(n.client_buffered));
    d.field("drain", duration(o.drain), duration(n.drain));
    d.push_to("timeouts".into(), changes);

    let mut d = Details::default();
    let (o, n) = (&old.client_limits, &new.client_limits);
    d.field("max_request_headers", o.max_headers, n.max_headers);
    d.field("max_request_header_bytes", o.max_header_bytes, n.max_header_bytes);
    d.field("max_request_line_bytes", o.max_line_bytes, n.max_line_bytes);
    d.field("client_max_body", or_none(&o.max_body), or_none(&n.max_body));
    d.field(
        "client_body_min_bytes_per_second",
        o.body_min_bytes_per_second,
        n.body_min_bytes_per_second,
    );
    d.push_to("limits".into(), changes);

    if old.trusted_proxies != new.trusted_proxies {
        let details = vec![format!("changed to {} network(s)", new.trusted_proxies.len())];
        changes.push(Change { subject: "trusted_proxies".into(), details });
    }

    // Read once at start: see `instance::warn_unreloadable`.
    let at_restart = |key: &str, old: String, new: String, changes: &mut Vec<Change>| {
        if old != new {
            let details = vec![format!("changed {old} -> {new}{AT_RESTART}")];
            changes.push(Change { subject: key.into(), details });
        }
    };
    at_restart("threads", or_none(&old.threads), or_none(&new.threads), changes);
    at_restart("admin", or_none(&old.admin), or_none(&new.admin), changes);
    at_restart("access_log", access_log(old), access_log(new), changes);
    let (o, n) = (or_none(&old.max_idle_total), or_none(&new.max_idle_total));
    at_restart("pool.max_idle_total", o, n, changes);
    let mut d = Details::default();
    let (o, n) = (&old.buffering, &new.buffering);
    d.field("responses", o.responses, n.responses);
    d.field("requests", o.requests, n.requests);
    d.push_to("buffering".into(), changes);
    let (o, n) = (&old.spool, &new.spool);
    at_restart(
        "buffering.memory_per_exchange",
        o.memory_per_exchange.to_string(),
        n.memory_per_exchange.to_string(),
        changes,
    );
    at_restart(
        "buffering.file_per_exchange",
        o.file_per_exchange.to_string(),
        n.file_per_exchange.to_string(),
        changes,
    );
    at_restart(
        "buffering.memory_total",
        o.memory_total.to_string(),
        n.memory_total.to_string(),
        changes,
    );
    at_restart("buffering.file_total", or_none(&o.file_total), or_none(&n.file_total), changes);
    at_restart(
        "buffering.temp_dir",
        o.dir.display().to_string(),
        n.dir.display().to_string(),
        changes,
    );
    acme_changes(old, new, changes);
}

/// `[acme]` turned on or off, or its settings changed, which wait for a restart; and
/// the names it keeps certificates for, which follow the reload.
fn acme_changes(old: &Config, new: &Config, changes: &mut Vec<Change>) {
    let mut details = Vec::new();
    if !old.has_same_acme_settings(new) {
        let (o, n) = match (&old.acme, &new.acme) {
            (Some(o), Some(n)) => (acme_settings(o), acme_settings(n)),
            _ => (acme(old), acme(new)),
        };
        details.push(if o == n {
            // A change the summary does not show (contact, storage, ca, renew_at).
            format!("changed{AT_RESTART}")
        } else {
            format!("changed {o} -> {n}{AT_RESTART}")
        });
    }
    if let (Some(o), Some(n)) = (&old.acme, &new.acme) {
        if matches!(o.names, AcmeNames::Listed(_)) != matches!(n.names, AcmeNames::Listed(_)) {
            details.push(format!("changed names {} -> {}", acme_names(o), acme_names(n)));
        }
        let (was, is) = (old.acme_names(), new.acme_names());
        details.extend(is.iter().filter(|n| !was.contains(n)).map(|n| format!("added name {n}")));
        details.extend(was.iter().filter(|n| !is.contains(n)).map(|n| format!("removed name {n}")));
    }
    if !details.is_empty() {
        changes.push(Change { subject: "acme".into(), details });
    }
}

/// `off`, or the CA, the challenge and the names: `https://ca/dir tls-alpn-01 for
/// a.example, b.example`.
fn acme(config: &Config) -> String {
    let Some(acme) = &config.acme else { return "off".to_string() };
    format!("{} for {}", acme_settings(acme), acme_names(acme))
}

/// The CA and the challenge: `https://ca/dir tls-alpn-01`.
fn acme_settings(acme: &AcmeConfig) -> String {
    format!("{} {}", acme.directory, acme.challenge)
}

/// The names as configured: `a.example, b.example`, or `the routes' hosts`.
fn acme_names(acme: &AcmeConfig) -> String {
    match &acme.names {
        AcmeNames::Listed(names) => names.join(", "),
        AcmeNames::Routes => "the routes' hosts".to_string(),
    }
}

/// `off`, or where the lines go and their format: `stdout (json)`.
fn access_log(config: &Config) -> String {
    let format = match config.access_log.format {
        AccessLogFormat::Json => "json",
        AccessLogFormat::Text => "text",
    };
    match &config.access_log.target {
        AccessLogTarget::Off => "off".to_string(),
        target => format!("{} ({format})", log_target(target)),
    }
}

/// Where access log lines go: `off`, `stdout` or the file.
fn log_target(target: &AccessLogTarget) -> String {
    match target {
        AccessLogTarget::Off => "off".to_string(),
        AccessLogTarget::Stdout => "stdout".to_string(),
        AccessLogTarget::File(path) => path.display().to_string(),
    }
}

/// A duration as `Duration`'s `Debug` writes it: `4s`, `1.5s`, `250ms`.
fn duration(d: Duration) -> String {
    format!("{d:?}")
}

/// The value, or `none`.
/// A listener's TLS in a few words: its certificate files and whether ACME's serve.
fn listener_tls(tls: Option<&ListenerTls>) -> String {
    let Some(tls) = tls else { return "off".into() };
    let files: Vec<String> =
        tls.certificates.iter().map(|p| p.cert.display().to_string()).collect();
    match (files.is_empty(), tls.acme) {
        (true, _) => "acme".into(),
        (false, false) => files.join(", "),
        (false, true) => format!("{} and acme", files.join(", ")),
    }
}

/// An upstream's TLS settings in a few words.
fn origin_tls(tls: Option<&OriginTls>) -> String {
    let Some(tls) = tls else { return "off".into() };
    let s = &tls.settings;
    let mut words = vec!["on".to_string()];
    if let Some(name) = &s.server_name {
        words.push(format!("server_name {name}"));
    }
    if let Some(ca) = &s.ca {
        words.push(format!("ca {}", ca.display()));
    }
    if s.insecure_skip_verify {
        words.push("insecure_skip_verify".into());
    }
    if let Some(pair) = &s.client_cert {
        words.push(format!("client_cert {}", pair.cert.display()));
    }
    words.join(" ")
}

fn or_none<T: fmt::Display>(value: &Option<T>) -> String {
    value.as_ref().map_or_else(|| "none".to_string(), ToString::to_string)
}

#[cfg(test)]
mod tests;
