//! `holdfast stats`: a refreshing table of what each backend's pool is doing, read from
//! a running holdfast's admin listener.
//!
//! Each frame reads `GET /metrics` with the admin client (`cmd::admin_client`) and parses the
//! OpenMetrics text into samples (the `scrape` submodule), then shows one row per
//! (upstream, backend) with rates over the time since the previous scrape. A rate needs
//! two scrapes, so the first frame appears one interval after start. Latency percentiles come from the
//! histogram buckets' increase over the same interval, interpolated linearly inside a
//! bucket as Prometheus' `histogram_quantile` does: they are estimates bounded by the
//! bucket edges, not exact observations.
//!
//! It only reads metrics; it never changes the running proxy.

mod scrape;

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use http::StatusCode;
use tokio::time::Instant;

use super::admin_client::{AdminClient, AdminError};
use crate::admin::DEFAULT_ADMIN_ADDR;
use scrape::{ParseError, Sample};

/// Faster refreshes only measure scheduling noise in the rates.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// How long one scrape may take, connecting included.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// Flags of `holdfast stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The admin listener of the running holdfast (its `--admin` address).
    #[arg(long, value_name = "ADDR", default_value_t = DEFAULT_ADMIN_ADDR)]
    pub admin: SocketAddr,
    /// Time between frames, e.g. 500ms or 2s; at least 100ms.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print N frames, then exit (default: run until Ctrl-C).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text).map_err(|e| format!("{e} (try 500ms or 2s)"))?;
    if interval < MIN_INTERVAL {
        return Err(format!("must be at least {}", humantime::format_duration(MIN_INTERVAL)));
    }
    Ok(interval)
}

/// How frames follow each other on the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameStyle {
    /// Clear the screen and draw each frame at the top (a terminal).
    Redraw,
    /// Print frames one after another, separated by a blank line (a pipe or file).
    Append,
}

/// Runs `holdfast stats` on stdout, redrawing in place when stdout is a terminal.
/// One scrape at a time: a current-thread runtime is enough.
pub async fn run(args: &StatsArgs) -> anyhow::Result<()> {
    let mut stdout = io::stdout();
    let style = if stdout.is_terminal() { FrameStyle::Redraw } else { FrameStyle::Append };
    watch(args, &mut stdout, style).await
}

/// Scrapes every `args.interval` and writes a frame per scrape after the first.
///
/// The first scrape failing is an error; a later one writes a line and keeps trying,
/// with rates of the next frame taken over the whole gap. A closed pipe ends the
/// watch without an error (`holdfast stats | head`).
pub async fn watch(
    args: &StatsArgs,
    out: &mut impl Write,
    style: FrameStyle,
) -> anyhow::Result<()> {
    let admin = AdminClient::new(args.admin, SCRAPE_TIMEOUT);
    let mut previous = Scrape::fetch(&admin).await?;
    let mut frames = 0;
    let mut due = previous.at;
    while args.count.is_none_or(|count| frames < count) {
        // A scrape slower than the interval moves the schedule instead of firing the
        // missed scrapes back to back.
        due = (due + args.interval).max(Instant::now());
        tokio::time::sleep_until(due).await;
        let written = match Scrape::fetch(&admin).await {
            Ok(current) => {
                let elapsed = current.at.saturating_duration_since(previous.at);
                let frame = Frame::new(
                    args.admin,
                    SystemTime::now(),
                    elapsed,
                    &previous.data,
                    &current.data,
                );
                previous = current;
                frames += 1;
                write_frame(out, &frame, style, frames == 1)
            }
            Err(e) => {
                let time = humantime::format_rfc3339_seconds(SystemTime::now());
                writeln!(out, "{time}  {e}; retrying").and_then(|()| out.flush())
            }
        };
        match written {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            other => other.map_err(|e| anyhow::anyhow!("writing the table: {e}"))?,
        }
    }
    Ok(())
}

fn write_frame(
    out: &mut impl Write,
    frame: &Frame,
    style: FrameStyle,
    is_first: bool,
) -> io::Result<()> {
    match style {
        FrameStyle::Redraw => write!(out, "\x1b[2J\x1b[H")?,
        FrameStyle::Append if !is_first => writeln!(out)?,
        FrameStyle::Append => {}
    }
    render(out, frame)?;
    out.flush()
}

// ---------------------------------------------------------------------------------
// One scrape reduced to what the table shows, and the increase between two.

/// One successful scrape and when it arrived.
struct Scrape {
    at: Instant,
    data: Snapshot,
}

impl Scrape {
    async fn fetch(admin: &AdminClient) -> Result<Scrape, ScrapeError> {
        let response = admin.get("/metrics").await?;
        let at = Instant::now();
        let addr = admin.addr();
        if response.status != StatusCode::OK {
            return Err(ScrapeError::Status { admin: addr, status: response.status });
        }
        let text = std::str::from_utf8(&response.body)
            .map_err(|_| ScrapeError::NotText { admin: addr })?;
        let samples =
            scrape::parse(text).map_err(|error| ScrapeError::Malformed { admin: addr, error })?;
        Ok(Scrape { at, data: Snapshot::from_samples(&samples) })
    }
}

/// Why a scrape gave no metrics. Each message names the admin listener.
#[derive(Debug, thiserror::Error)]
enum ScrapeError {
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("GET /metrics from the admin listener at {admin} answered {status}, expected 200")]
    Status { admin: SocketAddr, status: StatusCode },
    #[error("the metrics page of the admin listener at {admin} is not UTF-8")]
    NotText { admin: SocketAddr },
    #[error("the metrics page of the admin listener at {admin} is malformed, {error}")]
    Malformed { admin: SocketAddr, error: ParseError },
}

/// The row key: an upstream and one of its backends.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct BackendKey {
    upstream: String,
    backend: String,
}

/// Per-backend values of one scrape: counters and histograms since holdfast started,
/// gauges as of the scrape.
#[derive(Debug, Clone, Default, PartialEq)]
struct BackendSample {
    responses: f64,
    responses_5xx: f64,
    reused: f64,
    new: f64,
    opened: f64,
    idle: f64,
    active: f64,
    connect: Histogram,
    header: Histogram,
    /// The container's name, for a backend Docker discovery found.
    container: Option<String>,
}

impl BackendSample {
    /// Adds one sample labelled with this backend; other metrics are ignored.
    fn record(&mut self, sample: &Sample) {
        let label = |name: &str| sample.labels.get(name).map(String::as_str);
        let v = sample.value;
        match (sample.name.as_str(), label("class"), label("connection"), label("state")) {
            ("holdfast_backend_responses_total", class, _, _) => {
                self.responses += v;
                if class == Some("5xx") {
                    self.responses_5xx += v;
                }
            }
            ("holdfast_backend_container_info", ..) => {
                self.container = label("container").map(str::to_string);
            }
            ("holdfast_backend_requests_total", _, Some("reused"), _) => self.reused += v,
            ("holdfast_backend_requests_total", _, Some("new"), _) => self.new += v,
            ("holdfast_backend_connections_opened_total", ..) => self.opened += v,
            ("holdfast_backend_connections", _, _, Some("idle")) => self.idle = v,
            ("holdfast_backend_connections", _, _, Some("active")) => self.active = v,
            ("holdfast_backend_connect_duration_seconds_bucket", ..) => {
                self.connect.record(label("le"), v);
            }
            ("holdfast_backend_header_duration_seconds_bucket", ..) => {
                self.header.record(label("le"), v);
            }
            _ => {}
        }
    }
}

/// What the table needs from one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
struct Snapshot {
    backends: BTreeMap<BackendKey, BackendSample>,
    /// Sum of `holdfast_upstream_responses_total` over upstreams.
    downstream_requests: f64,
    client_connections: f64,
    is_draining: bool,
}

impl Snapshot {
    /// Picks the metrics the table shows; other metrics are ignored. Any sample with
    /// `upstream` and `backend` labels makes a row for that backend.
    fn from_samples(samples: &[Sample]) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for sample in samples {
            let label = |name: &str| sample.labels.get(name).map(String::as_str);
            match sample.name.as_str() {
                "holdfast_upstream_responses_total" => snapshot.downstream_requests += sample.value,
                "holdfast_listener_connections" => snapshot.client_connections = sample.value,
                "holdfast_draining" => snapshot.is_draining = sample.value != 0.0,
                _ => {}
            }
            let (Some(upstream), Some(backend)) = (label("upstream"), label("backend")) else {
                continue;
            };
            let key = BackendKey { upstream: upstream.to_string(), backend: backend.to_string() };
            snapshot.backends.entry(key).or_default().record(sample);
        }
        for backend in snapshot.backends.values_mut() {
            backend.connect.sort();
            backend.header.sort();
        }
        snapshot
    }
}

/// A counter's increase from `before` to `now`; a smaller `now` means holdfast
/// restarted in between, and the counter then rose from zero to `now`.
fn increase(now: f64, before: f64) -> f64 {
    if now >= before {
        now - before
    } else {
        now
    }
}

/// One cumulative histogram bucket: observations `<= le` seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    le: f64,
    count: f64,
}

/// Cumulative buckets sorted by bound, the last one `+Inf` when complete.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    buckets: Vec<Bucket>,
}

impl Histogram {
    /// Adds the bucket `le` (as written in the label) holding `count`.
    fn record(&mut self, le: Option<&str>, count: f64) {
        if let Some(le) = le.and_then(|le| le.parse().ok()) {
            self.buckets.push(Bucket { le, count });
        }
    }

    fn sort(&mut self) {
        self.buckets.sort_by(|a, b| a.le.total_cmp(&b.le));
    }

    fn total(&self) -> f64 {
        self.buckets.last().map_or(0.0, |b| b.count)
    }

    /// The observations made between `before` and `self`, bucket by bucket. Different
    /// bounds or a smaller total mean a restart: everything in `self` is new.
    fn increase_since(&self, before: &Histogram) -> Histogram {
        let same_bounds = self.buckets.len() == before.buckets.len()
            && self.buckets.iter().zip(&before.buckets).all(|(a, b)| a.le == b.le);
        if !same_bounds || self.total() < before.total() {
            return self.clone();
        }
        let buckets = self
            .buckets
            .iter()
            .zip(&before.buckets)
            .map(|(now, then)| Bucket { le: now.le, count: (now.count - then.count).max(0.0) })
            .collect();
        Histogram { buckets }
    }
}

/// The `q` quantile (0..=1) of cumulative `buckets` sorted by bound, as Prometheus'
/// `histogram_quantile` estimates it: linear inside the bucket holding the rank, the
/// lower edge of the first bucket taken as 0, and the highest finite bound when the
/// rank falls in `+Inf`. `None` without observations or without a `+Inf` bucket.
fn quantile(q: f64, buckets: &[Bucket]) -> Option<f64> {
    let last = buckets.last()?;
    if last.le != f64::INFINITY || last.count <= 0.0 {
        return None;
    }
    let rank = q * last.count;
    let b = buckets.iter().position(|bucket| bucket.count >= rank)?;
    let upper = buckets[b];
    if b == buckets.len() - 1 {
        return b.checked_sub(1).map(|below| buckets[below].le);
    }
    if b == 0 && upper.le <= 0.0 {
        return Some(upper.le);
    }
    let lower = if b == 0 { Bucket { le: 0.0, count: 0.0 } } else { buckets[b - 1] };
    let in_bucket = upper.count - lower.count;
    if in_bucket <= 0.0 {
        return Some(upper.le);
    }
    Some(lower.le + (upper.le - lower.le) * (rank - lower.count) / in_bucket)
}

// ---------------------------------------------------------------------------------
// Frames: rows computed from two snapshots, rendered as a table.

/// Median and 99th percentile, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Latency {
    p50: f64,
    p99: f64,
}

impl Latency {
    fn of(histogram: &Histogram) -> Option<Latency> {
        let p50 = quantile(0.5, &histogram.buckets)?;
        let p99 = quantile(0.99, &histogram.buckets)?;
        Some(Latency { p50, p99 })
    }
}

/// One table row: a backend's activity over the interval.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    upstream: String,
    backend: String,
    requests_per_sec: f64,
    /// Share of upstream requests sent on a pooled connection; `None` without requests.
    reuse_percent: Option<f64>,
    idle: f64,
    active: f64,
    opened_per_sec: f64,
    connect: Option<Latency>,
    header: Option<Latency>,
    responses_5xx_per_sec: f64,
}

/// Rows for every backend in `now`, sorted by upstream then backend; a backend missing
/// from `before` counts from zero.
fn rows(before: &Snapshot, now: &Snapshot, elapsed: Duration) -> Vec<Row> {
    let secs = elapsed.as_secs_f64().max(f64::EPSILON);
    let empty = BackendSample::default();
    now.backends
        .iter()
        .map(|(key, now)| {
            let then = before.backends.get(key).unwrap_or(&empty);
            let reused = increase(now.reused, then.reused);
            let sent = reused + increase(now.new, then.new);
            Row {
                upstream: key.upstream.clone(),
                backend: match &now.container {
                    Some(name) => format!("{} ({name})", key.backend),
                    None => key.backend.clone(),
                },
                requests_per_sec: increase(now.responses, then.responses) / secs,
                reuse_percent: (sent > 0.0).then(|| 100.0 * reused / sent),
                idle: now.idle,
                active: now.active,
                opened_per_sec: increase(now.opened, then.opened) / secs,
                connect: Latency::of(&now.connect.increase_since(&then.connect)),
                header: Latency::of(&now.header.increase_since(&then.header)),
                responses_5xx_per_sec: increase(now.responses_5xx, then.responses_5xx) / secs,
            }
        })
        .collect()
}

/// Everything one frame shows.
#[derive(Debug, Clone, PartialEq)]
struct Frame {
    admin: SocketAddr,
    time: SystemTime,
    elapsed: Duration,
    requests_per_sec: f64,
    client_connections: f64,
    is_draining: bool,
    rows: Vec<Row>,
}

impl Frame {
    fn new(
        admin: SocketAddr,
        time: SystemTime,
        elapsed: Duration,
        before: &Snapshot,
        now: &Snapshot,
    ) -> Frame {
        let secs = elapsed.as_secs_f64().max(f64::EPSILON);
        Frame {
            admin,
            time,
            elapsed,
            requests_per_sec: increase(now.downstream_requests, before.downstream_requests) / secs,
            client_connections: now.client_connections,
            is_draining: now.is_draining,
            rows: rows(before, now, elapsed),
        }
    }
}

const COLUMNS: [&str; 10] = [
    "UPSTREAM",
    "BACKEND",
    "REQ/S",
    "REUSE%",
    "IDLE",
    "ACTIVE",
    "OPENED/S",
    "CONNECT p50/p99",
    "HEADER p50/p99",
    "5XX/S",
];
/// UPSTREAM and BACKEND are left-aligned; the numbers are right-aligned.
const LEFT_ALIGNED: usize = 2;

/// Writes the header line and the table (or a note when no backend has metrics yet).
fn render(out: &mut impl Write, frame: &Frame) -> io::Result<()> {
    let millis = frame.elapsed.as_millis();
    writeln!(
        out,
        "holdfast {}  {}  over {}.{:03}s  {} req/s  {} client connections  {}",
        frame.admin,
        humantime::format_rfc3339_seconds(frame.time),
        millis / 1000,
        millis % 1000,
        format_rate(frame.requests_per_sec),
        frame.client_connections,
        if frame.is_draining { "DRAINING" } else { "serving" },
    )?;
    let mut table = vec![COLUMNS.map(String::from)];
    table.extend(frame.rows.iter().map(cells));
    let mut widths = [0; COLUMNS.len()];
    for line in &table {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for line in &table {
        let mut text = String::new();
        for (i, (cell, width)) in line.iter().zip(widths).enumerate() {
            let gap = if i == 0 { "" } else { "  " };
            if i < LEFT_ALIGNED {
                text.push_str(&format!("{gap}{cell:<width$}"));
            } else {
                text.push_str(&format!("{gap}{cell:>width$}"));
            }
        }
        writeln!(out, "{}", text.trim_end())?;
    }
    if frame.rows.is_empty() {
        writeln!(out, "(no backend has metrics yet: none has been sent a request)")?;
    }
    Ok(())
}

fn cells(row: &Row) -> [String; COLUMNS.len()] {
    [
        row.upstream.clone(),
        row.backend.clone(),
        format_rate(row.requests_per_sec),
        row.reuse_percent.map_or_else(|| "-".into(), |p| format!("{p:.1}")),
        format!("{}", row.idle),
        format!("{}", row.active),
        format_rate(row.opened_per_sec),
        format_latency(row.connect),
        format_latency(row.header),
        format_rate(row.responses_5xx_per_sec),
    ]
}

fn format_rate(per_sec: f64) -> String {
    format!("{per_sec:.1}")
}

/// `p50/p99ms`, or `-` without observations in the interval.
fn format_latency(latency: Option<Latency>) -> String {
    match latency {
        Some(l) => format!("{}/{}ms", format_ms(l.p50), format_ms(l.p99)),
        None => "-".into(),
    }
}

/// Seconds as milliseconds with three significant digits or so: 0.25, 12.3, 250.
fn format_ms(seconds: f64) -> String {
    let ms = seconds * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else if ms < 100.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

#[cfg(test)]
mod tests;
