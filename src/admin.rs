//! The admin listener: `/metrics` (Prometheus), `/status` (JSON per pool),
//! `/healthz` (200 while serving, 503 while draining) and `POST /reload` (re-read the
//! config file), on an address of its own (by default [`DEFAULT_ADMIN_ADDR`], on
//! loopback) so that proxy traffic and its limits never reach it. The other end, for
//! the `stats`, `reload` and `health` commands, is `cmd::admin_client`.

use crate::acme::{AcmeSnapshot, AcmeView};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::listener;
use crate::metrics::export::{self, Exporter};
use crate::resources::Resources;
use crate::upstream::learned::CloseRule;
use crate::upstream::{Backend, Server, UpstreamState, Upstreams};
use holdfast_pool::IdleBudget;

/// The admin listener's address when `[admin]` names none, and where `holdfast reload`
/// and `holdfast stats` look unless told: loopback only, since metrics and status are for
/// the operator, not for clients.
pub const DEFAULT_ADMIN_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9901);

/// Asks the server to reload its config file; the answer says what changed, or why
/// nothing did.
pub type ReloadRequest = oneshot::Sender<Result<String, String>>;

/// What the admin endpoints read.
pub struct AdminState {
    pub exporter: Exporter,
    pub upstreams: Arc<Upstreams>,
    /// Open files and local ports, read at start.
    pub resources: Resources,
    /// The idle-connection budget derived from them (or `pool.max_idle_total`).
    pub budget: Arc<IdleBudget>,
    /// Where buffered bodies are held, and how much of them now.
    pub spools: Arc<crate::spool::Spools>,
    /// Set when shutdown begins; `/healthz` answers 503 from then on.
    pub draining: Arc<AtomicBool>,
    /// What the certificate manager shows, for each name's certificate in `/status`.
    pub acme: Option<AcmeView>,
    pub started: Instant,
    pub reload: mpsc::Sender<ReloadRequest>,
}

/// Serves admin requests on `listener` until `stop` turns true.
pub async fn serve(listener: TcpListener, state: Arc<AdminState>, mut stop: watch::Receiver<bool>) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(std::time::Duration::from_secs(10));
    let http = Arc::new(http);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = listener::stopped(&mut stop) => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let (state, http, mut stop) = (Arc::clone(&state), Arc::clone(&http), stop.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(answer(&req, &state).await) }
            });
            let conn = http.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = listener::stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

async fn answer(req: &Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
    if req.uri().path() == "/reload" {
        return reload(req, state).await;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    match req.uri().path() {
        "/metrics" => with_type(state.exporter.render(), export::CONTENT_TYPE),
        "/status" => with_type(status(state).to_string() + "\n", "application/json"),
        "/healthz" if state.draining.load(Ordering::Acquire) => {
            text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/" => text(StatusCode::OK, "holdfast admin: /metrics /status /healthz, POST /reload\n"),
        _ => text(StatusCode::NOT_FOUND, "not found; try /metrics, /status or /healthz\n"),
    }
}

/// `POST /reload`: 200 with what changed, or 500 with why the config in force stays.
async fn reload(req: &Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
    if req.method() != Method::POST {
        let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "use POST /reload\n");
        resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        return resp;
    }
    let (reply, answer) = oneshot::channel();
    if state.reload.send(reply).await.is_err() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    }
    let (status, body) = match answer.await {
        Ok(Ok(report)) => (StatusCode::OK, format!("reloaded: {report}\n")),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reload rejected, the config in force stays:\n{e}\n"),
        ),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".to_string()),
    };
    let mut resp = with_type(body, "text/plain; charset=utf-8");
    *resp.status_mut() = status;
    resp
}

/// Every pool at this moment, as JSON.
pub fn status(state: &AdminState) -> Value {
    let draining = state.draining.load(Ordering::Acquire);
    let now = Instant::now();
    let upstreams: Vec<Value> = state
        .upstreams
        .current()
        .iter()
        .map(|u| {
            let members = u.state();
            let backends: Vec<Value> =
                members.backends.iter().map(|b| backend_status(b, now)).collect();
            // `servers` and `server` name backends here: the JSON keeps the names it
            // was published with.
            json!({
                "name": &*u.name,
                "balance": members.config.balance.as_str(),
                "servers": backends,
                "names": names_status(&members),
            })
        })
        .collect();
    json!({
        "state": if draining { "draining" } else { "serving" },
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": state.started.elapsed().as_secs_f64(),
        "limits": state.resources.status(&state.budget),
        "buffering": state.spools.status(),
        "upstreams": upstreams,
        "certificates": state.acme.as_ref().map(|a| certificates_status(&a.snapshot())),
    })
}

/// Each ACME name: what is served, until when, the next order and the last error.
fn certificates_status(acme: &AcmeSnapshot) -> Vec<Value> {
    let time = |t: Option<std::time::SystemTime>| {
        t.map(|t| humantime::format_rfc3339_seconds(t).to_string())
    };
    acme.names
        .iter()
        .map(|n| {
            json!({
                "name": n.name,
                "serving": n.serving.as_str(),
                "not_after": time(n.not_after),
                "next_order": time(n.next_order),
                "failures": n.failures,
                "last_error": n.last_error,
            })
        })
        .collect()
}

/// What each server name resolved to, and the last lookup error.
fn names_status(members: &UpstreamState) -> Vec<Value> {
    members
        .resolution
        .entries
        .iter()
        .filter(|e| matches!(e.server, Server::Name { .. }))
        .map(|e| {
            let addrs: Vec<String> = e.addrs.iter().map(ToString::to_string).collect();
            json!({ "name": e.server.to_string(), "addresses": addrs, "error": e.error })
        })
        .collect()
}

fn backend_status(b: &Backend, now: Instant) -> Value {
    let pool = b.conns.stats().snapshot();
    let health = b.health.snapshot(now);
    let m = &b.metrics;
    let reused = m.sent_reused.load(Ordering::Relaxed);
    let requests = reused + m.sent_new.load(Ordering::Relaxed);
    let shares = b.shares.snapshot();
    let closed: serde_json::Map<String, Value> = holdfast_pool::CloseReason::ALL
        .iter()
        .map(|r| (r.as_str().to_string(), pool.closed(*r).into()))
        .collect();
    json!({
        "server": b.addr.to_string(),
        // The container at the address, when Docker discovery found it.
        "container": b.container.as_ref().map(|c| json!({ "id": &*c.id, "name": &*c.name })),
        "idle": pool.idle,
        "active": pool.active,
        "opened": pool.opened,
        "closed": closed,
        "requests": requests,
        "reused": reused,
        // Share of requests sent on a pooled connection; null before the first one.
        "reuse_ratio": (requests > 0).then(|| reused as f64 / requests as f64),
        "waiting": pool.waiting,
        // Requests holding or waiting for a connection, by client address (see
        // `upstream::share`).
        "clients": { "addresses": shares.addresses, "most_held": shares.most, "claims": shares.total },
        "retries": m.retries.load(Ordering::Relaxed),
        "failovers": m.failovers.load(Ordering::Relaxed),
        "outstanding": b.load.outstanding(),
        "health": health.state.as_str(),
        "health_cause": health.cause.map(|c| c.as_str()),
        "ejected_for_seconds": health.ejected_for.map(|d| d.as_secs_f64()),
        "ejections": health.ejections,
        "weight": health.weight,
        "latency_seconds": b.load.latency.get(now).map(|d| d.as_secs_f64()),
        "errors": m.errors.snapshot().iter().map(|(_, n)| n).sum::<u64>(),
        "learned_closes": learned_status(b, now),
    })
}

/// The rules learned from the origin's unannounced closes: where holdfast retires its
/// connections, since when, and how often a retired connection was then seen closed.
fn learned_status(b: &Backend, now: Instant) -> Vec<Value> {
    b.conns
        .learned()
        .snapshot(now)
        .iter()
        .map(|r| {
            let mut rule = json!({
                "rule": r.rule.as_str(),
                "text": r.rule.to_string(),
                "learned_seconds_ago": r.age.as_secs_f64(),
                "confirmed": r.confirmed,
            });
            match r.rule {
                CloseRule::AfterRequests(n) => rule["requests"] = n.into(),
                CloseRule::AfterResponse(kind) => {
                    rule["status"] = kind.status.into();
                    rule["declares_length"] = kind.declares_length.into();
                }
            }
            rule
        })
        .collect()
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = with_type(body.to_string(), "text/plain; charset=utf-8");
    *resp.status_mut() = status;
    resp
}

fn with_type(body: String, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
