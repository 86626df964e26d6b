//! Prometheus text for `/metrics`: reads every counter at scrape time (pool stats,
//! [`BackendMetrics`](super::BackendMetrics), [`UpstreamMetrics`](super::UpstreamMetrics)
//! and process gauges) and writes it with `prometheus-client`'s OpenMetrics encoder.
//!
//! Metric names are documented in the README ("Metrics"); keep the two in step.

use std::sync::Arc;

use holdfast_pool::CloseReason;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::{HistogramSnapshot, STATUS_CLASSES};
use crate::upstream::{Backend, Upstream, Upstreams};

/// The content type of [`Exporter::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Process-wide numbers, read at each scrape.
#[derive(Debug, Clone, Default)]
pub struct ProcessSnapshot {
    pub client_connections: usize,
    pub client_connections_accepted: u64,
    pub access_log_dropped: u64,
    pub draining: bool,
    /// Requests no route matched (answered 404).
    pub unrouted_requests: u64,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    /// Responses holdfast made itself, by group, reason and status.
    pub answers: Vec<(super::AnswerKey, u64)>,
    /// Requests refused before routing, by rule.
    pub refusals: Vec<(&'static str, u64)>,
}

/// Reads process-wide numbers for a scrape.
pub type ProcessReader = Box<dyn Fn() -> ProcessSnapshot + Send + Sync>;

/// Everything `/metrics` shows.
pub struct Exporter {
    registry: Registry,
}

impl Exporter {
    pub fn new(upstreams: Arc<Upstreams>, process: ProcessReader) -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Sources { upstreams, process }));
        Exporter { registry }
    }

    /// The current value of every metric, in OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

struct Sources {
    upstreams: Arc<Upstreams>,
    process: ProcessReader,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").field("upstreams", &self.upstreams.current().len()).finish()
    }
}

/// One backend of one upstream, with the labels every per-backend metric carries.
struct BackendRow<'a> {
    upstream: &'a str,
    backend_label: String,
    backend: &'a Backend,
    /// Share of traffic health allows now (0 to 100).
    weight: u32,
}

impl BackendRow<'_> {
    fn labels(&self) -> [(&str, &str); 2] {
        [("upstream", self.upstream), ("backend", &self.backend_label)]
    }

    fn labels_with<'a>(&'a self, key: &'a str, value: &'a str) -> [(&'a str, &'a str); 3] {
        [("upstream", self.upstream), ("backend", &self.backend_label), (key, value)]
    }
}

impl Collector for Sources {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let upstreams = self.upstreams.current();
        let backends = self.upstreams.backends();
        let now = tokio::time::Instant::now();
        let rows: Vec<BackendRow<'_>> = backends
            .iter()
            .map(|(u, b)| BackendRow {
                upstream: &u.name,
                backend_label: b.addr.to_string(),
                backend: b,
                weight: b.health.weight(now),
            })
            .collect();
        let pools: Vec<_> = rows.iter().map(|s| s.backend.conns.stats().snapshot()).collect();
        let with_pool = || rows.iter().zip(&pools);

        let responses: Vec<_> =
            rows.iter().map(|s| s.backend.metrics.responses.snapshot()).collect();
        counter(
            &mut enc,
            "holdfast_backend_responses",
            "Responses to clients for requests sent to a server, by status class (holdfast's own 502/503/504 included).",
            rows.iter().zip(&responses).flat_map(|(s, counts)| {
                STATUS_CLASSES.iter().zip(counts).map(|(class, n)| (s.labels_with("class", class), *n))
            }),
        )?;
        counter(
            &mut enc,
            "holdfast_backend_requests",
            "Requests sent upstream, by whether the connection was reused from the pool or new.",
            rows.iter().flat_map(|s| {
                let m = &s.backend.metrics;
                [
                    (s.labels_with("connection", "reused"), load(&m.sent_reused)),
                    (s.labels_with("connection", "new"), load(&m.sent_new)),
                ]
            }),
        )?;
        counter(
            &mut enc,
            "holdfast_backend_connections_opened",
            "Upstream connections opened.",
            with_pool().map(|(s, p)| (s.labels(), p.opened)),
        )?;
        counter(
            &mut enc,
            "holdfast_backend_connections_closed",
            "Upstream connections closed, by reason.",
            with_pool().flat_map(|(s, p)| {
                CloseReason::ALL.iter().map(|r| (s.labels_with("reason", r.as_str()), p.closed(*r)))
            }),
        )?;
        gauge(
            &mut enc,
            "holdfast_backend_connections",
            "Upstream connections now, idle in the pool or active (carrying a request).",
            with_pool().flat_map(|(s, p)| {
                [
                    (s.labels_with("state", "idle"), p.idle),
                    (s.labels_with("state", "active"), p.active),
                ]
            }),
        )?;
        gauge(
            &mut enc,
            "holdfast_backend_queue_depth",
            "Requests waiting for a connection because max_connections_per_server are busy.",
            with_pool().map(|(s, p)| (s.labels(), p.waiting)),
        )?;
        counter(
            &mut enc,
            "holdfast_backend_queue_rejections",
            "Requests answered 503 by the connection queue: it was full, or the wait timed out.",
            with_pool().flat_map(|(s, p)| {
                [
                    (s.labels_with("reason", "full"), p.queue_full),
                    (s.labels_with("reason", "timeout"), p.queue_timeouts),
                ]
            }),
        )?;
        counter(
            &mut enc,
            "holdfast_backend_retries",
            "Requests sent again on a new connection after a pooled one failed under them.",
            rows.iter().map(|s| (s.labels(), load(&s.backend.metrics.retries))),
        )?;
        counter(
            &mut enc,
            "holdfast_backend_not_replayed",
            "Requests that failed on a pooled connection after they may have reached the server, answered 502 rather than sent twice.",
            rows.iter().map(|s| (s.labels(), load(&s.backend.metrics.not_replayed))),
        )?;
        let errors: Vec<_> = rows.iter().map(|s| s.backend.metrics.errors.snapshot()).collect();
        counter(
            &mut enc,
            "holdfast_backend_errors",
            "Requests holdfast answered itself because of this server, by reason.",
            rows.iter().zip(&errors).flat_map(|(s, errors)| {
                errors.iter().map(|(reason, n)| (s.labels_with("reason", reason), *n))
            }),
        )?;
        let histograms: [(&str, &str, ReadHistogram); 3] = [
            ("holdfast_backend_connect_duration", "Time to open a new upstream connection.", |b| {
                b.conns.connect_time().snapshot()
            }),
            (
                "holdfast_backend_header_duration",
                "From asking for an upstream connection to the response head.",
                |b| b.metrics.header.snapshot(),
            ),
            (
                "holdfast_backend_response_duration",
                "From asking for an upstream connection to the end of the response body.",
                |b| b.metrics.response.snapshot(),
            ),
        ];
        for (name, help, read) in histograms {
            histogram(&mut enc, name, help, rows.iter().map(|s| (s.labels(), read(s.backend))))?;
        }

        counter(
            &mut enc,
            "holdfast_backend_failovers",
            "Requests sent to another server of the group after this one failed them.",
            rows.iter().map(|s| (s.labels(), load(&s.backend.metrics.failovers))),
        )?;
        counter(
            &mut enc,
            "holdfast_backend_ejections",
            "Times a server was taken out of service (passive detection or failed checks).",
            rows.iter().map(|s| (s.labels(), load(&s.backend.metrics.ejections))),
        )?;
        gauge(
            &mut enc,
            "holdfast_backend_weight",
            "Share of traffic health allows a server now, in percent: 100 in service, 0 out, in between while re-admitted.",
            rows.iter().map(|s| (s.labels(), u64::from(s.weight))),
        )?;

        let upstreams: &[Arc<Upstream>] = &upstreams;
        let groups = || upstreams.iter().map(|u| [("upstream", &*u.name)]);
        counter(
            &mut enc,
            "holdfast_upstream_responses",
            "Responses to clients, by upstream group and status class (refused requests included).",
            upstreams.iter().flat_map(|u| {
                let counts = u.metrics.requests.snapshot();
                STATUS_CLASSES
                    .iter()
                    .zip(counts)
                    .map(move |(class, n)| ([("upstream", &*u.name), ("class", *class)], n))
            }),
        )?;
        histogram(
            &mut enc,
            "holdfast_upstream_request_duration",
            "From a client's request head arriving to the end of the response to it.",
            groups().zip(upstreams).map(|(l, u)| (l, u.metrics.duration.snapshot())),
        )?;

        let process = (self.process)();
        let none: [(&str, &str); 0] = [];
        gauge(
            &mut enc,
            "holdfast_listener_connections",
            "Client connections open now.",
            [(none, process.client_connections as u64)],
        )?;
        counter(
            &mut enc,
            "holdfast_listener_connections_accepted",
            "Client connections accepted.",
            [(none, process.client_connections_accepted)],
        )?;
        counter(
            &mut enc,
            "holdfast_access_log_dropped",
            "Access log lines dropped because the writer was behind.",
            [(none, process.access_log_dropped)],
        )?;
        counter(
            &mut enc,
            "holdfast_unrouted_requests",
            "Requests no route matched, answered 404.",
            [(none, process.unrouted_requests)],
        )?;
        counter(
            &mut enc,
            "holdfast_errors",
            "Responses holdfast made itself instead of relaying an origin's, by upstream group (- before routing), reason and status.",
            process.answers.iter().map(|(k, n)| {
                let upstream = k.upstream.as_deref().unwrap_or("-").to_string();
                let labels = [
                    ("upstream", upstream),
                    ("reason", k.reason.to_string()),
                    ("status", k.status.to_string()),
                ];
                (labels, *n)
            }),
        )?;
        counter(
            &mut enc,
            "holdfast_refused_requests",
            "Requests refused before routing, by the rule they broke.",
            process.refusals.iter().map(|(rule, n)| ([("rule", *rule)], *n)),
        )?;
        counter(
            &mut enc,
            "holdfast_config_reloads",
            "Config reloads, by result (a failed reload keeps the config in force).",
            [
                ([("result", "ok")], process.reloads_ok),
                ([("result", "failed")], process.reloads_failed),
            ],
        )?;
        gauge(
            &mut enc,
            "holdfast_draining",
            "1 while holdfast is shutting down and draining requests in flight.",
            [(none, u64::from(process.draining))],
        )?;
        let mut info = enc.encode_descriptor(
            "holdfast_build",
            "The running holdfast version.",
            None,
            MetricType::Info,
        )?;
        info.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;
        Ok(())
    }
}

/// Reads one of a server's histograms.
type ReadHistogram = fn(&Backend) -> HistogramSnapshot;

fn load(counter: &std::sync::atomic::AtomicU64) -> u64 {
    counter.load(std::sync::atomic::Ordering::Relaxed)
}

fn counter<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in series {
        metric.encode_family(&labels)?.encode_counter::<NoLabelSet, u64, u64>(&value, None)?;
    }
    Ok(())
}

fn gauge<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        metric.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

fn histogram<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, HistogramSnapshot)>,
) -> Result<(), std::fmt::Error> {
    let mut metric =
        enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (labels, h) in series {
        metric.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            h.sum_seconds,
            h.count,
            &h.buckets,
            None,
        )?;
    }
    Ok(())
}
