//! What upstream groups and their backends count: [`BackendMetrics`] on each backend
//! and [`UpstreamMetrics`] on each group, in plain atomics that requests add to; the
//! name and help of each family they are exported as; and [`UpstreamsSnapshot`], all
//! of it read at one moment, which writes itself for `/metrics`.
//!
//! Connection counts (opened, closed, idle, active, queue) live in each backend's pool
//! and connect times in its [`OriginPool`](super::lease::OriginPool); the snapshot reads them
//! too. Metrics observe; nothing on the request path reads them to decide anything.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use holdfast_pool::{CloseReason, PoolStatsSnapshot};
use tokio::time::Instant;

use super::h2::{H2Conns, H2Snapshot};
use super::learned::{CloseRule, RuleSnapshot};
use super::{Backend, ContainerRef, Upstream};
use crate::metrics::{
    ClassCounts, Family, Histogram, HistogramSnapshot, ReasonCounts, Report, Writer, STATUS_CLASSES,
};

/// Counters and latencies of one server of an upstream group.
#[derive(Debug, Default)]
pub struct BackendMetrics {
    /// Responses clients got for requests sent to this server, holdfast's own
    /// 502/503/504 included.
    pub responses: ClassCounts,
    /// Requests sent on a connection taken from the idle pool.
    pub sent_reused: AtomicU64,
    /// Requests sent on a connection opened for them.
    pub sent_new: AtomicU64,
    /// Requests sent again on a new connection after a pooled one failed under them.
    pub retries: AtomicU64,
    /// Requests that failed on a pooled connection after they may have reached the
    /// origin, and were answered 502 instead of being sent again.
    pub not_replayed: AtomicU64,
    /// Requests sent to another server of the group after this one failed them (a
    /// failed connect, or a failure before any response byte of an idempotent request).
    pub failovers: AtomicU64,
    /// Times this server was taken out of service (passive ejection or failed checks).
    pub ejections: AtomicU64,
    /// Requests holdfast answered itself, by reason (`connect_refused`, ...).
    pub errors: ReasonCounts,
    /// From asking the pool for a connection to the response head.
    pub header: Histogram,
    /// From asking the pool for a connection to the end of the response body.
    pub response: Histogram,
}

impl BackendMetrics {
    pub fn count_sent(&self, reused: bool) {
        let counter = if reused { &self.sent_reused } else { &self.sent_new };
        counter.fetch_add(1, Relaxed);
    }
}

/// Counters of one upstream group as its clients see it.
#[derive(Debug, Default)]
pub struct UpstreamMetrics {
    /// Every response to a client of this group, including refused requests that
    /// never reached a server.
    pub requests: ClassCounts,
    /// From the request head arriving to the end of the response to the client.
    pub duration: Histogram,
}

// The families each backend is exported as, labelled `upstream` and `backend` (and
// one more label where the family is split), in the order they are written.

const BACKEND_RESPONSES: Family = Family {
    name: "holdfast_backend_responses",
    help: "Responses to clients for requests sent to a server, by status class (holdfast's own 502/503/504 included).",
};
const BACKEND_REQUESTS: Family = Family {
    name: "holdfast_backend_requests",
    help: "Requests sent upstream, by whether the connection was reused from the pool or new.",
};
const CONNECTIONS_OPENED: Family =
    Family { name: "holdfast_backend_connections_opened", help: "Upstream connections opened." };
const CONNECTIONS_CLOSED: Family = Family {
    name: "holdfast_backend_connections_closed",
    help: "Upstream connections closed, by reason.",
};
const CONNECTIONS: Family = Family {
    name: "holdfast_backend_connections",
    help: "Upstream connections now, idle in the pool or active (carrying a request).",
};
const QUEUE_DEPTH: Family = Family {
    name: "holdfast_backend_queue_depth",
    help: "Requests waiting for a connection because max_connections_per_server are busy.",
};
const QUEUE_REJECTIONS: Family = Family {
    name: "holdfast_backend_queue_rejections",
    help: "Requests answered 503 by the connection queue: it was full, or the wait timed out.",
};
const RETRIES: Family = Family {
    name: "holdfast_backend_retries",
    help: "Requests sent again on a new connection after a pooled one failed under them.",
};
const NOT_REPLAYED: Family = Family {
    name: "holdfast_backend_not_replayed",
    help: "Requests that failed on a pooled connection after they may have reached the server, answered 502 rather than sent twice.",
};
const ERRORS: Family = Family {
    name: "holdfast_backend_errors",
    help: "Requests holdfast answered itself because of this server, by reason.",
};
const CONNECT_DURATION: Family = Family {
    name: "holdfast_backend_connect_duration",
    help: "Time to open a new upstream connection.",
};
const TLS_HANDSHAKES: Family = Family {
    name: "holdfast_backend_tls_handshakes",
    help: "TLS handshakes of new upstream connections, by session: full, or resumed from an earlier connection's.",
};
const TLS_HANDSHAKE_DURATION: Family = Family {
    name: "holdfast_backend_tls_handshake_duration",
    help: "Time of the TLS handshake of a new upstream connection (part of the connect time).",
};
const HEADER_DURATION: Family = Family {
    name: "holdfast_backend_header_duration",
    help: "From asking for an upstream connection to the response head.",
};
const RESPONSE_DURATION: Family = Family {
    name: "holdfast_backend_response_duration",
    help: "From asking for an upstream connection to the end of the response body.",
};
const FAILOVERS: Family = Family {
    name: "holdfast_backend_failovers",
    help: "Requests sent to another server of the group after this one failed them.",
};
const EJECTIONS: Family = Family {
    name: "holdfast_backend_ejections",
    help: "Times a server was taken out of service (passive detection or failed checks).",
};
const LEARNED_RULES: Family = Family {
    name: "holdfast_backend_learned_close_rules",
    help: "Rules in force, learned from the server's unannounced closes, that retire its connections after so many requests or after a kind of response.",
};
const WEIGHT: Family = Family {
    name: "holdfast_backend_weight",
    help: "Share of traffic health allows a server now, in percent: 100 in service, 0 out, in between while re-admitted.",
};

// The families each group is exported as, labelled `upstream`.

const UPSTREAM_RESPONSES: Family = Family {
    name: "holdfast_upstream_responses",
    help: "Responses to clients, by upstream group and status class (refused requests included).",
};
const UPSTREAM_REQUEST_DURATION: Family = Family {
    name: "holdfast_upstream_request_duration",
    help: "From a client's request head arriving to the end of the response to it.",
};

/// One backend's counters at one moment.
#[derive(Debug, Clone)]
pub struct BackendSnapshot {
    pub upstream: Arc<str>,
    pub backend: SocketAddr,
    /// The container at the address, when Docker discovery found it.
    pub container: Option<ContainerRef>,
    pub pool: PoolStatsSnapshot,
    /// Responses by status class, in the order of [`STATUS_CLASSES`].
    pub responses: [u64; 5],
    pub sent_reused: u64,
    pub sent_new: u64,
    pub retries: u64,
    pub not_replayed: u64,
    pub failovers: u64,
    pub ejections: u64,
    /// Requests holdfast answered itself, by reason, sorted.
    pub errors: Vec<(&'static str, u64)>,
    pub connect: HistogramSnapshot,
    /// Whether connections to it speak TLS.
    pub tls: bool,
    /// TLS handshakes of new connections: full, resumed, and their time.
    pub tls_full: u64,
    pub tls_resumed: u64,
    pub tls_handshake: HistogramSnapshot,
    pub header: HistogramSnapshot,
    pub response: HistogramSnapshot,
    /// Share of traffic health allows now (0 to 100).
    pub weight: u32,
    /// Its HTTP/2 connections, when it speaks or may speak HTTP/2.
    pub h2: Option<H2Snapshot>,
    /// Rules learned from its origin's unannounced closes, in force now.
    pub learned: Vec<RuleSnapshot>,
}

impl BackendSnapshot {
    /// Reads `backend` of the group `upstream`; its weight as of `now`.
    pub fn read(upstream: &Arc<str>, backend: &Backend, now: Instant) -> BackendSnapshot {
        let m = &backend.metrics;
        BackendSnapshot {
            upstream: Arc::clone(upstream),
            backend: backend.addr,
            container: backend.container.clone(),
            pool: backend.conns.stats().snapshot(),
            responses: m.responses.snapshot(),
            sent_reused: load(&m.sent_reused),
            sent_new: load(&m.sent_new),
            retries: load(&m.retries),
            not_replayed: load(&m.not_replayed),
            failovers: load(&m.failovers),
            ejections: load(&m.ejections),
            errors: m.errors.snapshot(),
            connect: backend.conns.connect_time().snapshot(),
            tls: backend.conns.is_tls(),
            tls_full: load(&backend.conns.tls_counts().full),
            tls_resumed: load(&backend.conns.tls_counts().resumed),
            tls_handshake: backend.conns.tls_counts().time.snapshot(),
            header: m.header.snapshot(),
            response: m.response.snapshot(),
            weight: backend.health.weight(now),
            h2: backend.h2.as_ref().map(H2Conns::snapshot),
            learned: backend.conns.learned().snapshot(now),
        }
    }
}

/// One group's counters at one moment.
#[derive(Debug, Clone)]
pub struct UpstreamSnapshot {
    pub upstream: Arc<str>,
    /// Responses by status class, in the order of [`STATUS_CLASSES`].
    pub responses: [u64; 5],
    pub duration: HistogramSnapshot,
}

impl UpstreamSnapshot {
    pub fn read(group: &Upstream) -> UpstreamSnapshot {
        UpstreamSnapshot {
            upstream: Arc::clone(&group.name),
            responses: group.metrics.requests.snapshot(),
            duration: group.metrics.duration.snapshot(),
        }
    }
}

/// Every group in force and every backend of them, read at one moment
/// ([`Upstreams::snapshot`](super::Upstreams::snapshot)).
#[derive(Debug, Clone, Default)]
pub struct UpstreamsSnapshot {
    pub backends: Vec<BackendSnapshot>,
    pub groups: Vec<UpstreamSnapshot>,
}

impl Report for UpstreamsSnapshot {
    /// Every backend family, then every group family.
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        let rows: Vec<Row<'_>> = self.backends.iter().map(Row::new).collect();
        traffic(out, &rows)?;
        connections(out, &rows)?;
        h2(out, &rows)?;
        failures(out, &rows)?;
        durations(out, &rows)?;
        health(out, &rows)?;
        groups(out, &self.groups)
    }
}

/// One backend's snapshot with the labels every per-backend series carries.
struct Row<'a> {
    snapshot: &'a BackendSnapshot,
    backend: String,
}

impl<'a> Row<'a> {
    fn new(snapshot: &'a BackendSnapshot) -> Row<'a> {
        Row { snapshot, backend: snapshot.backend.to_string() }
    }

    fn labels(&self) -> [(&str, &str); 2] {
        [("upstream", &self.snapshot.upstream), ("backend", &self.backend)]
    }

    fn is_tls(&self) -> bool {
        self.snapshot.tls
    }

    fn labels_with<'b>(&'b self, key: &'b str, value: &'b str) -> [(&'b str, &'b str); 3] {
        [("upstream", &self.snapshot.upstream), ("backend", &self.backend), (key, value)]
    }
}

/// HTTP/2 connections and streams, for backends that speak or may speak HTTP/2.
fn h2(out: &mut Writer<'_>, rows: &[Row<'_>]) -> std::fmt::Result {
    let h2 = || rows.iter().filter_map(|r| r.snapshot.h2.map(|h| (r, h)));
    out.gauge(&H2_CONNECTIONS, h2().map(|(r, h)| (r.labels(), h.open as u64)))?;
    out.gauge(&H2_ACTIVE_STREAMS, h2().map(|(r, h)| (r.labels(), h.active_streams as u64)))?;
    out.counter(&H2_OPENED, h2().map(|(r, h)| (r.labels(), h.opened)))?;
    out.counter(&H2_STREAMS, h2().map(|(r, h)| (r.labels(), h.streams)))?;
    out.counter(&H2_RETRIED, h2().map(|(r, h)| (r.labels(), h.retried)))?;
    out.counter(&H2_GOAWAYS, h2().map(|(r, h)| (r.labels(), h.goaways)))
}

const H2_CONNECTIONS: Family = Family {
    name: "holdfast_backend_h2_connections",
    help: "HTTP/2 connections to the server open now.",
};
const H2_ACTIVE_STREAMS: Family = Family {
    name: "holdfast_backend_h2_active_streams",
    help: "Streams open now on the server's HTTP/2 connections.",
};
const H2_OPENED: Family = Family {
    name: "holdfast_backend_h2_connections_opened",
    help: "HTTP/2 connections opened to the server.",
};
const H2_STREAMS: Family = Family {
    name: "holdfast_backend_h2_streams",
    help: "Streams sent on the server's HTTP/2 connections (a retry counts again).",
};
const H2_RETRIED: Family = Family {
    name: "holdfast_backend_h2_retried_streams",
    help: "Streams the server refused (REFUSED_STREAM, or above the last stream of a GOAWAY) that holdfast sent again.",
};
const H2_GOAWAYS: Family = Family {
    name: "holdfast_backend_h2_goaways",
    help: "HTTP/2 connections the server ended with GOAWAY while holdfast had streams for them.",
};

/// Responses by status class, and requests by whether their connection was reused.
fn traffic(out: &mut Writer<'_>, rows: &[Row<'_>]) -> std::fmt::Result {
    out.counter(
        &BACKEND_RESPONSES,
        rows.iter().flat_map(|r| {
            let counts = &r.snapshot.responses;
            STATUS_CLASSES.iter().zip(counts).map(|(class, n)| (r.labels_with("class", class), *n))
        }),
    )?;
    out.counter(
        &BACKEND_REQUESTS,
        rows.iter().flat_map(|r| {
            [
                (r.labels_with("connection", "reused"), r.snapshot.sent_reused),
                (r.labels_with("connection", "new"), r.snapshot.sent_new),
            ]
        }),
    )
}

/// The pool: connections opened (and their TLS handshakes), closed by reason, open
/// now, and the queue for them.
fn connections(out: &mut Writer<'_>, rows: &[Row<'_>]) -> std::fmt::Result {
    out.counter(&CONNECTIONS_OPENED, rows.iter().map(|r| (r.labels(), r.snapshot.pool.opened)))?;
    out.counter(
        &TLS_HANDSHAKES,
        rows.iter().filter(|r| r.is_tls()).flat_map(|r| {
            [
                (r.labels_with("session", "full"), r.snapshot.tls_full),
                (r.labels_with("session", "resumed"), r.snapshot.tls_resumed),
            ]
        }),
    )?;
    out.counter(
        &CONNECTIONS_CLOSED,
        rows.iter().flat_map(|r| {
            let pool = &r.snapshot.pool;
            CloseReason::ALL.iter().map(|c| (r.labels_with("reason", c.as_str()), pool.closed(*c)))
        }),
    )?;
    out.gauge(
        &CONNECTIONS,
        rows.iter().flat_map(|r| {
            let pool = &r.snapshot.pool;
            [
                (r.labels_with("state", "idle"), pool.idle),
                (r.labels_with("state", "active"), pool.active),
            ]
        }),
    )?;
    out.gauge(&QUEUE_DEPTH, rows.iter().map(|r| (r.labels(), r.snapshot.pool.waiting)))?;
    out.gauge(
        &LEARNED_RULES,
        rows.iter().flat_map(|r| {
            CloseRule::NAMES.iter().map(|name| {
                let learned = &r.snapshot.learned;
                let n = learned.iter().filter(|l| l.rule.as_str() == *name).count() as u64;
                (r.labels_with("rule", name), n)
            })
        }),
    )?;
    out.counter(
        &QUEUE_REJECTIONS,
        rows.iter().flat_map(|r| {
            let pool = &r.snapshot.pool;
            [
                (r.labels_with("reason", "full"), pool.queue_full),
                (r.labels_with("reason", "timeout"), pool.queue_timeouts),
            ]
        }),
    )
}

/// Requests sent again, not sent again, and answered by holdfast itself.
fn failures(out: &mut Writer<'_>, rows: &[Row<'_>]) -> std::fmt::Result {
    out.counter(&RETRIES, rows.iter().map(|r| (r.labels(), r.snapshot.retries)))?;
    out.counter(&NOT_REPLAYED, rows.iter().map(|r| (r.labels(), r.snapshot.not_replayed)))?;
    out.counter(
        &ERRORS,
        rows.iter().flat_map(|r| {
            r.snapshot.errors.iter().map(|(reason, n)| (r.labels_with("reason", reason), *n))
        }),
    )
}

/// Connect, response head and whole response times.
fn durations(out: &mut Writer<'_>, rows: &[Row<'_>]) -> std::fmt::Result {
    out.histogram(&CONNECT_DURATION, rows.iter().map(|r| (r.labels(), &r.snapshot.connect)))?;
    out.histogram(
        &TLS_HANDSHAKE_DURATION,
        rows.iter().filter(|r| r.is_tls()).map(|r| (r.labels(), &r.snapshot.tls_handshake)),
    )?;
    out.histogram(&HEADER_DURATION, rows.iter().map(|r| (r.labels(), &r.snapshot.header)))?;
    out.histogram(&RESPONSE_DURATION, rows.iter().map(|r| (r.labels(), &r.snapshot.response)))
}

/// Requests moved to another backend, ejections, and the weight health allows now.
fn health(out: &mut Writer<'_>, rows: &[Row<'_>]) -> std::fmt::Result {
    out.counter(&FAILOVERS, rows.iter().map(|r| (r.labels(), r.snapshot.failovers)))?;
    out.counter(&EJECTIONS, rows.iter().map(|r| (r.labels(), r.snapshot.ejections)))?;
    out.gauge(&WEIGHT, rows.iter().map(|r| (r.labels(), u64::from(r.snapshot.weight))))?;
    let containers = rows.iter().filter_map(|r| {
        let c = r.snapshot.container.as_ref()?;
        let labels = [
            ("upstream", &*r.snapshot.upstream),
            ("backend", r.backend.as_str()),
            ("container", &*c.name),
            ("container_id", c.short_id()),
        ];
        Some((labels, 1))
    });
    out.gauge(&CONTAINER, containers)
}

const CONTAINER: Family = Family {
    name: "holdfast_backend_container_info",
    help: "The container a backend is, for backends Docker discovery found (always 1).",
};

/// Each group's responses by status class, and its request durations.
fn groups(out: &mut Writer<'_>, groups: &[UpstreamSnapshot]) -> std::fmt::Result {
    out.counter(
        &UPSTREAM_RESPONSES,
        groups.iter().flat_map(|g| {
            STATUS_CLASSES
                .iter()
                .zip(g.responses)
                .map(move |(class, n)| ([("upstream", &*g.upstream), ("class", *class)], n))
        }),
    )?;
    out.histogram(
        &UPSTREAM_REQUEST_DURATION,
        groups.iter().map(|g| ([("upstream", &*g.upstream)], &g.duration)),
    )
}

/// Pool and retry counters of one backend, and its health, for tests and status
/// output.
#[derive(Debug, Clone)]
pub struct BackendStats {
    pub upstream: Arc<str>,
    pub backend: SocketAddr,
    pub pool: PoolStatsSnapshot,
    /// Requests sent again on a new connection after a pooled one failed under them.
    pub retries: u64,
    /// Requests that failed on a pooled connection after they may have reached the
    /// origin, and were answered 502 instead of being sent again (non-idempotent
    /// method, or a streamed body).
    pub not_replayed: u64,
    /// Times health took it out of service (passive ejections and failed checks).
    pub ejections: u64,
    /// Where its health stands now (`healthy`, `ejected`, `recovering`, ...).
    pub health: &'static str,
}

impl BackendStats {
    /// Reads `backend` of the group `upstream`; its health as of `now`.
    pub fn read(upstream: &Arc<str>, backend: &Backend, now: Instant) -> BackendStats {
        let m = &backend.metrics;
        BackendStats {
            upstream: Arc::clone(upstream),
            backend: backend.addr,
            pool: backend.conns.stats().snapshot(),
            retries: load(&m.retries),
            not_replayed: load(&m.not_replayed),
            ejections: load(&m.ejections),
            health: backend.health.snapshot(now).state.as_str(),
        }
    }
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Relaxed)
}
