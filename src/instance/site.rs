//! What each listener serves, built from the config at start and at every reload: its
//! routes (those that apply on it, then its own upstream as the catch-all), each with
//! its group and its own limits, timeouts, redirect, HSTS and access log, and the
//! listener's settings for the rest. The routes' access log files are opened here too,
//! before a config is applied, so applying it cannot fail.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Config, RouteConfig};
use crate::listener::ListenerConfig;
use crate::proxy::forwarded::TrustedProxies;
use crate::proxy::{Buffering, Destination, Hsts, LocalRules, Site, Timeouts};
use crate::route::{HostPattern, Route, Router};
use crate::spool::Spools;
use crate::telemetry::access_log::{AccessLog, AccessLogConfig, AccessLogTarget};
use crate::tls::store::DynamicCerts;
use crate::upstream::Upstream;

/// The access logs routes write to instead of `[access_log]`'s, by file.
pub(super) type RouteLogs = BTreeMap<PathBuf, AccessLog>;

/// Opens the access log files the routes of `config` name, keeping the writers of
/// those `open` has already; the others end once their last request is logged.
pub(super) fn open_route_logs(config: &Config, open: &RouteLogs) -> std::io::Result<RouteLogs> {
    let mut logs = RouteLogs::new();
    for r in &config.routes {
        let Some(AccessLogTarget::File(path)) = &r.access_log else { continue };
        if logs.contains_key(path) {
            continue;
        }
        let log = match open.get(path) {
            Some(log) => log.clone(),
            None => {
                let target = AccessLogTarget::File(path.clone());
                let settings = AccessLogConfig { target, format: config.access_log.format };
                let Some(log) = AccessLog::open(&settings)? else { continue };
                log
            }
        };
        logs.insert(path.clone(), log);
    }
    Ok(logs)
}

/// A listener's routes: every `[[route]]` that applies on it, then its own upstream as
/// the catch-all. A route's body limit is its own `client_max_body`, else the
/// listener's, else `[limits]`'s; its timeouts, redirect, HSTS and access log its own
/// where it sets them.
pub(super) fn site(
    config: &Config,
    l: &ListenerConfig,
    upstreams: &BTreeMap<String, Arc<Upstream>>,
    acme: Option<&Arc<DynamicCerts>>,
    spools: &Arc<Spools>,
    logs: &RouteLogs,
) -> Site {
    let group = |name: &String| {
        Arc::clone(upstreams.get(name).expect("config validation guarantees the group exists"))
    };
    let listener_max_body = l.client_max_body.or(config.client_limits.max_body);
    let hsts = l.hsts.map(Hsts::max_age);
    let tls = l.tls.is_some();
    let mut routes: Vec<Route<Destination>> = config
        .routes
        .iter()
        .filter(|r| r.listeners.is_empty() || r.listeners.contains(&l.addr))
        .map(|r| {
            let own_rules = r.redirect_https.is_some() || r.hsts.is_some();
            let local = own_rules.then(|| {
                let redirect = r.redirect_https.or(l.redirect_https);
                Arc::new(LocalRules::new(acme.cloned(), redirect, r.hsts.or(hsts), tls))
            });
            Route {
                host: r.host.clone(),
                path: r.path.clone(),
                target: Destination {
                    upstream: group(&r.upstream),
                    max_body: r.client_max_body.or(listener_max_body),
                    buffering: Buffering {
                        responses: r.buffer_responses.unwrap_or(config.buffering.responses),
                        requests: r.buffer_requests.unwrap_or(config.buffering.requests),
                    },
                    timeouts: route_timeouts(config.timeouts, r),
                    local,
                    access_log: r.access_log.as_ref().map(|target| match target {
                        AccessLogTarget::File(path) => logs.get(path).cloned(),
                        _ => None,
                    }),
                },
            }
        })
        .collect();
    let fallback = l.upstream.as_ref().map(group);
    if let Some(f) = &fallback {
        let target = Destination {
            upstream: Arc::clone(f),
            max_body: listener_max_body,
            buffering: config.buffering,
            timeouts: config.timeouts,
            local: None,
            access_log: None,
        };
        routes.push(Route { host: HostPattern::Any, path: "/".into(), target });
    }
    let mut limits = config.client_limits;
    limits.max_body = listener_max_body;
    Site {
        router: Router::new(routes),
        fallback,
        timeouts: config.timeouts,
        limits,
        trusted: TrustedProxies::new(config.trusted_proxies.clone()),
        local: LocalRules::new(acme.cloned(), l.redirect_https, hsts, tls),
        h2c: l.h2c,
        spools: Arc::clone(spools),
    }
}

/// `timeouts` with a route's own: its `read_timeout` bounds the wait for the response
/// head as well as each wait for bytes, as nginx's `proxy_read_timeout` does.
fn route_timeouts(mut timeouts: Timeouts, r: &RouteConfig) -> Timeouts {
    if let Some(connect) = r.connect_timeout {
        timeouts.connect = connect;
    }
    if let Some(read) = r.read_timeout {
        timeouts.read = read;
        timeouts.response_header = read;
    }
    timeouts
}
