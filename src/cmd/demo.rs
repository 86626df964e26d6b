//! `holdfast demo`: shows what upstream connection reuse buys. It starts two origins,
//! one behind a holdfast with the defaults and one behind a holdfast with
//! `max_idle_per_server = 0` (a new upstream connection per request), drives the same
//! short load through both and prints requests, upstream connections and latency;
//! `--serve` keeps them running for curl instead. It is a command, so it prints its
//! report to stdout with `println!`.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1 as client_http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::Config;
use crate::instance::Instance;

/// Options of `holdfast demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the origins and both proxies running and print the URLs to try (no load).
    #[arg(long)]
    pub serve: bool,
    /// Seconds of load through each of the two proxies.
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u64).range(1..=60))]
    pub seconds: u64,
    /// Concurrent clients, each with its own keep-alive connection to the proxy. Each one
    /// can hold four file descriptors in this process; raise `ulimit -n` for high values.
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,
}

/// Requests per path at most, whatever the duration: bounds memory for latencies.
const MAX_REQUESTS: u64 = 2_000_000;
/// Size of the origin's response body.
const ORIGIN_BODY_BYTES: usize = 1024;
/// How long the proxies get to finish at the end.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(1);
/// Pause after a failed client connect, so a broken path does not spin.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

/// Runs the demo: measure both paths, or with `--serve` keep them up until Ctrl-C.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut paths = Vec::new();
    for mode in Mode::ALL {
        paths.push(DemoPath::start(mode).await?);
    }
    if args.serve {
        serve(&paths).await;
    } else {
        let load =
            Load { duration: Duration::from_secs(args.seconds), concurrency: args.concurrency };
        measure(&paths, load).await;
    }
    for path in paths {
        path.shutdown().await;
    }
    Ok(())
}

/// The two ways of running holdfast that the demo compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// holdfast's defaults: idle upstream connections are kept and reused.
    Reuse,
    /// `max_idle_per_server = 0`: every request opens (and then closes) its own
    /// upstream connection, like nginx with an upstream that has no `keepalive`.
    NoReuse,
}

impl Mode {
    const ALL: [Mode; 2] = [Mode::Reuse, Mode::NoReuse];

    fn label(self) -> &'static str {
        match self {
            Mode::Reuse => "reuse",
            Mode::NoReuse => "no reuse",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Mode::Reuse => "holdfast defaults",
            Mode::NoReuse => "max_idle_per_server = 0, like nginx without `keepalive`",
        }
    }

    fn config(self, origin: SocketAddr) -> Config {
        let any_port = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let mut config = Config::quick(any_port, vec![origin]);
        config.admin = Some(any_port);
        if self == Mode::NoReuse {
            for upstream in &mut config.upstreams {
                upstream.pool.max_idle = Some(0);
            }
        }
        config
    }
}

/// One origin with one holdfast in front of it.
struct DemoPath {
    mode: Mode,
    origin: Origin,
    server: Instance,
}

impl DemoPath {
    async fn start(mode: Mode) -> anyhow::Result<DemoPath> {
        let origin = Origin::start()?;
        let server = Instance::start(&mode.config(origin.addr()))
            .await
            .with_context(|| format!("starting the {} proxy", mode.label()))?;
        Ok(DemoPath { mode, origin, server })
    }

    fn proxy_addr(&self) -> SocketAddr {
        *self.server.local_addrs().first().expect("quick mode configures exactly one listener")
    }

    async fn shutdown(self) {
        self.server.shutdown(SHUTDOWN_DRAIN).await;
        self.origin.stop();
    }
}

/// `--serve`: print where to send requests, wait for Ctrl-C or SIGTERM, print counts.
async fn serve(paths: &[DemoPath]) {
    println!("holdfast demo: one origin per path, each with holdfast in front. Try:");
    for path in paths {
        println!("  {:<9} curl -i http://{}/", path.mode.label(), path.proxy_addr());
    }
    println!();
    println!("Repeat a request: the origin's reply says which upstream connection carried it.");
    println!("With reuse the number stays the same (holdfast closes a connection idle for 4 s);");
    println!("without it every request gets a new one.");
    println!();
    println!("Each holdfast has an admin listener; watch it while you send requests:");
    for path in paths {
        if let Some(admin) = path.server.admin_addr() {
            println!("  {:<9} holdfast stats --admin {admin}", path.mode.label());
            println!("  {:<9} curl http://{admin}/metrics   (or /status)", "");
        }
    }
    println!();
    println!("Ctrl-C to stop.");
    crate::instance::signals::shutdown_signal().await;
    println!();
    for path in paths {
        let requests = path.origin.requests.load(Relaxed);
        let connections = path.origin.connections();
        println!(
            "{}: {} over {}",
            path.mode.label(),
            plural(requests, "request"),
            plural(connections, "upstream connection")
        );
    }
}

/// The load driven through each path.
#[derive(Debug, Clone, Copy)]
struct Load {
    duration: Duration,
    concurrency: u32,
}

/// Drives `load` through each path in turn and prints a report per path and a summary.
async fn measure(paths: &[DemoPath], load: Load) {
    println!(
        "holdfast demo: {} keep-alive clients for {} s through each path \
         (origins, proxies and clients all in this process, on loopback)",
        load.concurrency,
        load.duration.as_secs()
    );
    let mut reports = Vec::new();
    for path in paths {
        let tally = drive(path.proxy_addr(), load).await;
        let connections = path.origin.connections();
        let report = PathReport::new(path.mode, tally, connections);
        println!();
        print!("{}", report.render());
        reports.push(report);
    }
    let by_mode = |mode| reports.iter().find(|r| r.mode == mode);
    if let (Some(reuse), Some(no_reuse)) = (by_mode(Mode::Reuse), by_mode(Mode::NoReuse)) {
        println!();
        println!("{}", render_summary(reuse, no_reuse));
    }
}

/// What the clients of one path saw.
#[derive(Debug, Default)]
struct Tally {
    requests: u64,
    errors: u64,
    first_error: Option<String>,
    /// Latency of each successful request, in microseconds.
    latencies_us: Vec<u32>,
    elapsed: Duration,
}

impl Tally {
    fn success(&mut self, latency: Duration) {
        self.requests += 1;
        self.latencies_us.push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
    }

    fn error(&mut self, error: impl std::fmt::Display) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| error.to_string());
    }

    fn merge(&mut self, other: Tally) {
        self.requests += other.requests;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.latencies_us.extend(other.latencies_us);
    }
}

/// Runs `load.concurrency` clients against `target` until the duration or
/// [`MAX_REQUESTS`] runs out.
async fn drive(target: SocketAddr, load: Load) -> Tally {
    let started = Instant::now();
    let deadline = started + load.duration;
    let issued = Arc::new(AtomicU64::new(0));
    let clients: Vec<JoinHandle<Tally>> = (0..load.concurrency)
        .map(|_| tokio::spawn(client_loop(target, deadline, Arc::clone(&issued))))
        .collect();
    let mut total = Tally::default();
    for client in clients {
        match client.await {
            Ok(tally) => total.merge(tally),
            Err(e) => total.error(format!("client task failed: {e}")),
        }
    }
    total.elapsed = started.elapsed();
    total
}

/// One client: a keep-alive connection to the proxy, one request at a time.
/// A failed connection is replaced by a new one.
async fn client_loop(target: SocketAddr, deadline: Instant, issued: Arc<AtomicU64>) -> Tally {
    let mut tally = Tally::default();
    let mut sender = None;
    while Instant::now() < deadline && issued.fetch_add(1, Relaxed) < MAX_REQUESTS {
        let conn = match &mut sender {
            Some(conn) => conn,
            None => match connect_client(target).await {
                Ok(conn) => sender.insert(conn),
                Err(e) => {
                    tally.error(format!("connecting to the proxy: {e}"));
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            },
        };
        let began = Instant::now();
        match get(conn, target).await {
            Ok(reply) if reply.status == StatusCode::OK => tally.success(began.elapsed()),
            Ok(reply) => tally.error(reply.describe()),
            Err(e) => {
                tally.error(e);
                sender = None;
            }
        }
    }
    tally
}

type ClientSender = client_http1::SendRequest<Empty<Bytes>>;

async fn connect_client(target: SocketAddr) -> anyhow::Result<ClientSender> {
    let stream = TcpStream::connect(target).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = client_http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// A response as the load clients see it.
struct Reply {
    status: StatusCode,
    body: Bytes,
}

impl Reply {
    /// `HTTP 502: holdfast: upstream default (127.0.0.1:3000): connection refused`: the
    /// status and the start of the body, which for holdfast's own errors names the cause.
    fn describe(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let text: String = text.trim().chars().take(200).collect();
        format!("HTTP {}: {text}", self.status.as_u16())
    }
}

/// Sends `GET /` and reads the whole response body.
async fn get(sender: &mut ClientSender, target: SocketAddr) -> Result<Reply, hyper::Error> {
    sender.ready().await?;
    let host = HeaderValue::try_from(target.to_string()).expect("an ip:port is a valid header");
    let mut req = Request::new(Empty::new());
    req.headers_mut().insert(header::HOST, host);
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(Reply { status, body })
}

/// The numbers printed for one path.
#[derive(Debug, Clone, PartialEq)]
struct PathReport {
    mode: Mode,
    requests: u64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    /// TCP connections the origin accepted, i.e. upstream connections holdfast opened.
    upstream_connections: u64,
    latency: Option<Latency>,
}

/// Latency percentiles of successful requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Latency {
    p50: Duration,
    p90: Duration,
    p99: Duration,
}

impl Latency {
    /// Percentiles of `latencies_us`, or `None` if it is empty.
    fn from_micros(mut latencies_us: Vec<u32>) -> Option<Latency> {
        latencies_us.sort_unstable();
        Some(Latency {
            p50: percentile(&latencies_us, 50.0)?,
            p90: percentile(&latencies_us, 90.0)?,
            p99: percentile(&latencies_us, 99.0)?,
        })
    }
}

/// The nearest-rank percentile `p` (0 to 100) of `sorted_us`.
fn percentile(sorted_us: &[u32], p: f64) -> Option<Duration> {
    let rank = (p / 100.0 * sorted_us.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted_us.len().max(1)) - 1;
    sorted_us.get(index).map(|us| Duration::from_micros(u64::from(*us)))
}

impl PathReport {
    fn new(mode: Mode, tally: Tally, upstream_connections: u64) -> Self {
        PathReport {
            mode,
            requests: tally.requests,
            errors: tally.errors,
            first_error: tally.first_error,
            elapsed: tally.elapsed,
            upstream_connections,
            latency: Latency::from_micros(tally.latencies_us),
        }
    }

    fn requests_per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.requests as f64 / secs
        } else {
            0.0
        }
    }

    /// Share of requests that went out on an upstream connection already open:
    /// `1 - connections / requests`, at least 0.
    fn reuse_ratio(&self) -> f64 {
        if self.requests == 0 {
            return 0.0;
        }
        (1.0 - self.upstream_connections as f64 / self.requests as f64).max(0.0)
    }

    fn render(&self) -> String {
        let mut out = format!("{} ({})\n", self.mode.label(), self.mode.description());
        out += &format!(
            "  requests              {} in {:.2} s = {}/s, {}\n",
            group_digits(self.requests),
            self.elapsed.as_secs_f64(),
            group_digits(self.requests_per_second().round() as u64),
            plural(self.errors, "error"),
        );
        out += &format!(
            "  upstream connections  {} opened (counted by the origin), {:.2}% of requests reused one\n",
            group_digits(self.upstream_connections),
            self.reuse_ratio() * 100.0,
        );
        if let Some(l) = &self.latency {
            out += &format!(
                "  latency               p50 {}  p90 {}  p99 {}\n",
                format_latency(l.p50),
                format_latency(l.p90),
                format_latency(l.p99),
            );
        }
        if let Some(e) = &self.first_error {
            out += &format!("  first error           {e}\n");
        }
        out
    }
}

/// One line comparing the two paths.
fn render_summary(reuse: &PathReport, no_reuse: &PathReport) -> String {
    let mut line = format!(
        "{}: {} over {}; {}: {} over {}",
        reuse.mode.label(),
        plural(reuse.requests, "request"),
        plural(reuse.upstream_connections, "upstream connection"),
        no_reuse.mode.label(),
        plural(no_reuse.requests, "request"),
        plural(no_reuse.upstream_connections, "connection"),
    );
    let baseline = no_reuse.requests_per_second();
    if baseline > 0.0 {
        line += &format!(" ({:.1}x the throughput)", reuse.requests_per_second() / baseline);
    }
    if reuse.errors + no_reuse.errors > 0 {
        line += &format!(
            "; errors: {} with reuse, {} without",
            group_digits(reuse.errors),
            group_digits(no_reuse.errors)
        );
    }
    line
}

/// `1,234,567`.
fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1 request`, `2,000 requests`.
fn plural(n: u64, noun: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} {noun}{s}", group_digits(n))
}

/// `850 µs`, `1.25 ms`, `2.50 s`.
fn format_latency(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        format!("{:.2} ms", us as f64 / 1_000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// An HTTP/1.1 origin on `127.0.0.1:0` that answers every request 200 and counts
/// requests; `holdfast_origin` accepts, counts and serves its connections.
struct Origin {
    server: holdfast_origin::Origin,
    /// Requests answered.
    requests: Arc<AtomicU64>,
}

impl Origin {
    fn start() -> anyhow::Result<Origin> {
        let listener =
            holdfast_origin::bind_loopback().context("binding the demo origin to 127.0.0.1:0")?;
        let requests = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&requests);
        let options = holdfast_origin::Options::default();
        // Each connection numbers its requests; its own number is its place in accept order.
        let make_service = move |accepted: holdfast_origin::Accepted| {
            let requests = Arc::clone(&counter);
            let on_this_connection = AtomicU64::new(0);
            service_fn(move |req: Request<Incoming>| {
                requests.fetch_add(1, Relaxed);
                let request = on_this_connection.fetch_add(1, Relaxed) + 1;
                let body = origin_body(req.uri().path(), accepted.number, request);
                async move { Ok::<_, Infallible>(origin_response(body)) }
            })
        };
        let server =
            holdfast_origin::Origin::serve(listener, Arc::default(), options, make_service)
                .context("starting the demo origin")?;
        Ok(Origin { server, requests })
    }

    fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// TCP connections accepted, i.e. upstream connections holdfast opened.
    fn connections(&self) -> u64 {
        self.server.connections().accepted()
    }

    /// Stops accepting. Open connections end when holdfast closes them.
    fn stop(self) {
        self.server.stop();
    }
}

fn origin_response(body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    let text = HeaderValue::from_static("text/plain; charset=utf-8");
    resp.headers_mut().insert(header::CONTENT_TYPE, text);
    resp
}

/// The origin's reply: who it is, what was asked, which connection carried it, padded
/// with dots to [`ORIGIN_BODY_BYTES`].
fn origin_body(path: &str, connection: u64, request: u64) -> String {
    let mut body = format!(
        "This is the holdfast demo origin.\n\
         path: {path}\n\
         upstream connection: {connection} (request {request} on it)\n\
         The origin numbers the TCP connections it accepts. Behind holdfast with reuse,\n\
         repeated requests arrive on the same connection; without reuse, each one\n\
         arrives on a new connection that cost a TCP handshake and, once closed, a\n\
         socket in TIME_WAIT on the proxy's side.\n"
    );
    const FILLER: &str =
        "........................................................................\n";
    while body.len() + FILLER.len() <= ORIGIN_BODY_BYTES {
        body.push_str(FILLER);
    }
    let rest = ORIGIN_BODY_BYTES.saturating_sub(body.len());
    if rest > 0 {
        body.push_str(&".".repeat(rest - 1));
        body.push('\n');
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(mode: Mode, requests: u64, connections: u64, secs: u64) -> PathReport {
        PathReport {
            mode,
            requests,
            errors: 0,
            first_error: None,
            elapsed: Duration::from_secs(secs),
            upstream_connections: connections,
            latency: None,
        }
    }

    #[test]
    fn group_digits_inserts_thousands_separators() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1_000), "1,000");
        assert_eq!(group_digits(48_210), "48,210");
        assert_eq!(group_digits(1_234_567), "1,234,567");
    }

    #[test]
    fn percentile_uses_nearest_rank() {
        let sorted: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 50.0), Some(Duration::from_micros(50)));
        assert_eq!(percentile(&sorted, 99.0), Some(Duration::from_micros(99)));
        assert_eq!(percentile(&[7], 99.0), Some(Duration::from_micros(7)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn latency_is_absent_without_successful_requests() {
        assert_eq!(Latency::from_micros(Vec::new()), None);
        let l = Latency::from_micros(vec![300, 100, 200]).unwrap();
        assert_eq!(l.p50, Duration::from_micros(200));
        assert_eq!(l.p99, Duration::from_micros(300));
    }

    #[test]
    fn latency_is_printed_in_a_readable_unit() {
        assert_eq!(format_latency(Duration::from_micros(850)), "850 µs");
        assert_eq!(format_latency(Duration::from_micros(1_250)), "1.25 ms");
        assert_eq!(format_latency(Duration::from_millis(2_500)), "2.50 s");
    }

    #[test]
    fn reuse_ratio_is_share_of_requests_on_an_open_connection() {
        assert_eq!(report(Mode::Reuse, 1_000, 10, 1).reuse_ratio(), 0.99);
        assert_eq!(report(Mode::NoReuse, 1_000, 1_000, 1).reuse_ratio(), 0.0);
        assert_eq!(report(Mode::NoReuse, 10, 12, 1).reuse_ratio(), 0.0);
        assert_eq!(report(Mode::Reuse, 0, 0, 1).reuse_ratio(), 0.0);
    }

    #[test]
    fn summary_compares_requests_connections_and_throughput() {
        let reuse = report(Mode::Reuse, 48_210, 16, 3);
        let no_reuse = report(Mode::NoReuse, 12_400, 12_400, 3);
        assert_eq!(
            render_summary(&reuse, &no_reuse),
            "reuse: 48,210 requests over 16 upstream connections; \
             no reuse: 12,400 requests over 12,400 connections (3.9x the throughput)"
        );
    }

    #[test]
    fn summary_counts_errors_when_there_were_any() {
        let reuse = report(Mode::Reuse, 100, 1, 1);
        let mut no_reuse = report(Mode::NoReuse, 50, 50, 1);
        no_reuse.errors = 1_200;
        assert!(render_summary(&reuse, &no_reuse)
            .ends_with("(2.0x the throughput); errors: 0 with reuse, 1,200 without"));
    }

    #[test]
    fn summary_omits_the_ratio_when_the_baseline_served_nothing() {
        let reuse = report(Mode::Reuse, 1, 1, 1);
        let no_reuse = report(Mode::NoReuse, 0, 0, 1);
        assert_eq!(
            render_summary(&reuse, &no_reuse),
            "reuse: 1 request over 1 upstream connection; no reuse: 0 requests over 0 connections"
        );
    }

    #[test]
    fn path_report_shows_rate_reuse_latency_and_first_error() {
        let mut r = report(Mode::Reuse, 10_000, 16, 2);
        r.errors = 1;
        r.first_error = Some("HTTP 502: holdfast: connection refused".into());
        r.latency = Some(Latency {
            p50: Duration::from_micros(400),
            p90: Duration::from_micros(900),
            p99: Duration::from_micros(2_100),
        });
        let text = r.render();
        assert!(text.starts_with("reuse (holdfast defaults)\n"), "{text}");
        assert!(text.contains("10,000 in 2.00 s = 5,000/s, 1 error"), "{text}");
        assert!(text.contains("16 opened (counted by the origin), 99.84% of requests"), "{text}");
        assert!(text.contains("p50 400 µs  p90 900 µs  p99 2.10 ms"), "{text}");
        assert!(text.contains("first error           HTTP 502: holdfast: connection"), "{text}");
    }

    #[test]
    fn reply_description_shows_status_and_start_of_body() {
        let reply = Reply {
            status: StatusCode::BAD_GATEWAY,
            body: Bytes::from("holdfast: upstream default (127.0.0.1:1): connection refused\n"),
        };
        assert_eq!(
            reply.describe(),
            "HTTP 502: holdfast: upstream default (127.0.0.1:1): connection refused"
        );
    }

    #[test]
    fn origin_body_names_the_path_and_connection_and_is_one_kib() {
        let body = origin_body("/hello", 3, 7);
        assert!(body.contains("holdfast demo origin"));
        assert!(body.contains("path: /hello"));
        assert!(body.contains("upstream connection: 3 (request 7 on it)"));
        assert_eq!(body.len(), ORIGIN_BODY_BYTES);
    }

    #[test]
    fn no_reuse_mode_keeps_no_idle_connections() {
        let origin: SocketAddr = "127.0.0.1:3000".parse().unwrap();
        assert_eq!(Mode::NoReuse.config(origin).upstreams[0].pool.max_idle, Some(0));
        assert_eq!(Mode::Reuse.config(origin).upstreams[0].pool.max_idle, None);
    }
}
