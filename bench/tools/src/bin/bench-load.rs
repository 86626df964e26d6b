//! `bench-load [--threads N] rate|hosts|mixed|hold|burst|handshakes|grpc|steady|zero-window|slow-read ...`:
//! load shapes wrk cannot produce
//! (logic in `holdfast_bench_tools::load`). Each prints one JSON object on stdout at the end
//! and exits 0, failed requests included; progress and errors go to stderr. Non-zero exit
//! only for bad arguments (2) or when the run could not start at all (1).

use std::io::Write;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, CommandFactory, Parser, Subcommand};
use holdfast_bench_tools::load::exchange::ErrorKind;
use holdfast_bench_tools::load::target::{Target, TargetError};
use holdfast_bench_tools::load::{
    burst, grpc, grpc_message, handshakes, hold, hosts, mixed, rate, slow_read, steady, zero_window,
};
use holdfast_bench_tools::{fd_limit, runtime, tls};
use serde::Serialize;

/// Longest `--duration`, `--warmup` or `--hold` accepted: every run is bounded.
const MAX_DURATION: Duration = Duration::from_secs(3_600);
/// How long `hold` holds without `--hold`, unless a signal comes first.
const DEFAULT_HOLD: Duration = Duration::from_secs(600);
/// Most connections or workers one run may ask for.
const MAX_CONNECTIONS: u64 = 1_000_000;
/// Highest `--rate` accepted, requests per second.
const MAX_RATE: f64 = 10_000_000.0;
/// Most hosts `hosts` may spread requests over (steady and bursty each).
const MAX_HOSTS: u64 = hosts::MAX_HOSTS as u64;
/// Most streams `zero-window` opens on one connection.
const MAX_STREAMS: u32 = 1 << 20;
/// Most bytes `slow-read` sets as a receive buffer or takes in one read.
const MAX_BUFFER_BYTES: u64 = 1 << 24;
/// Most messages one `grpc` call sends.
const MAX_MESSAGES: u32 = 1_000_000;
/// Most calls in flight at once on one `grpc` connection.
const MAX_GRPC_STREAMS: u64 = 10_000;

#[derive(Debug, Parser)]
#[command(name = "bench-load", about = "Load shapes for holdfast's benchmarks (loopback only)")]
struct Cli {
    /// Tokio worker threads (1: a current-thread runtime).
    #[arg(long, global = true, default_value = "1")]
    threads: NonZeroUsize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Open-loop fixed rate over keep-alive connections; latency from the due time.
    Rate {
        #[command(flatten)]
        load: RateArgs,
        /// Sent like the rest but not recorded.
        #[arg(long, value_parser = parse_duration, default_value = "0s")]
        warmup: Duration,
    },
    /// `rate` spread over many virtual hosts: each request's Host from a schedule in which
    /// most hosts get steady traffic and some sit idle between bursts. --url says where to
    /// connect (the proxy) and the path; the Host header comes from --hosts.
    Hosts {
        #[command(flatten)]
        load: RateArgs,
        /// Host names, `{}` standing for each host's number from 0.
        #[arg(long, default_value = "app{}.bench")]
        hosts: String,
        /// Hosts 0 .. N-1 get traffic all the time.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_HOSTS))]
        steady: u64,
        /// The next N hosts get traffic only in bursts.
        #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_HOSTS), default_value = "0")]
        bursty: u64,
        /// How long the bursty hosts get nothing before each burst.
        #[arg(long, value_parser = parse_duration, default_value = "3s")]
        idle: Duration,
        /// How long each burst lasts (half the rate goes to the bursty hosts meanwhile).
        #[arg(long, value_parser = parse_duration, default_value = "1s")]
        burst: Duration,
    },
    /// Closed loop: keep-alive workers next to workers that close after every request.
    Mixed {
        #[arg(long, value_parser = parse_target)]
        url: Target,
        #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_CONNECTIONS))]
        keepalive: u64,
        #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_CONNECTIONS))]
        closing: u64,
        #[arg(long, value_parser = parse_duration)]
        duration: Duration,
        /// Width of one timeline entry.
        #[arg(long, value_parser = parse_interval, default_value = "1s")]
        interval: Duration,
    },
    /// Open N connections, proxy one request on each (none with --silent), hold them idle.
    Hold {
        #[arg(long, value_parser = parse_target)]
        url: Target,
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS))]
        connections: u64,
        /// How long to hold; default until SIGTERM/SIGINT, at most 10 minutes.
        #[arg(long, value_parser = parse_duration)]
        hold: Option<Duration>,
        /// Connect only: send no request, not a single byte.
        #[arg(long)]
        silent: bool,
    },
    /// N requests in flight at once, each on its own new connection.
    Burst {
        #[arg(long, value_parser = parse_target)]
        url: Target,
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS))]
        connections: u64,
    },
    /// Closed loop over HTTPS: a new connection and TLS handshake for every request.
    Handshakes {
        /// An https:// URL on loopback.
        #[arg(long, value_parser = parse_https_target)]
        url: Target,
        /// CA certificates (PEM) to verify the server with; nothing else is trusted.
        #[arg(long)]
        ca: PathBuf,
        /// Workers, each with one connection at a time.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS))]
        connections: u64,
        #[arg(long, value_parser = parse_duration)]
        duration: Duration,
        /// Keep the sessions the server hands out and offer them again (resumed
        /// handshakes); without it every handshake is a full one.
        #[arg(long)]
        resume: bool,
    },
    /// Closed loop gRPC calls over HTTP/2 with prior knowledge (h2c): unary with
    /// `--messages 1`, else bidirectional streams in lockstep (each message goes out once
    /// the echo of the one before came back). Each echo must come back byte for byte,
    /// and the call end with `grpc-status: 0`.
    Grpc {
        /// `http://IP:PORT/package.Service/Method` on loopback.
        #[arg(long, value_parser = parse_target)]
        url: Target,
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS))]
        connections: u64,
        /// Calls in flight at once on each connection.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_GRPC_STREAMS))]
        streams: u64,
        /// Messages each call sends (1: unary).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_MESSAGES)), default_value = "1")]
        messages: u32,
        /// Bytes of each message after gRPC's 5-byte prefix (a protobuf `bytes` field).
        #[arg(long, value_parser = parse_payload, default_value = "100")]
        payload: usize,
        /// No call starts after this; calls under way finish (each within 10 s).
        #[arg(long, value_parser = parse_duration)]
        duration: Duration,
    },
    /// A well-behaved client: open loop at a steady rate, each request with a deadline,
    /// every request reported on its own.
    Steady {
        #[arg(long, value_parser = parse_target)]
        url: Target,
        /// Requests per second.
        #[arg(long, value_parser = parse_rate)]
        rate: f64,
        #[arg(long, value_parser = parse_duration)]
        duration: Duration,
        /// Each request must be answered, body and all, this long after its due time.
        #[arg(long, value_parser = parse_duration, default_value = "5s")]
        deadline: Duration,
        /// Local address to connect from (loopback, e.g. 127.0.0.2); default: the kernel's.
        #[arg(long, value_parser = parse_source)]
        bind: Option<IpAddr>,
        /// Speak HTTP/2 with prior knowledge over one connection instead of HTTP/1.1.
        #[arg(long)]
        h2c: bool,
    },
    /// HTTP/2 connections (prior knowledge) that open many streams and never send a
    /// WINDOW_UPDATE, while reading everything the server sends.
    ZeroWindow {
        #[arg(long, value_parser = parse_target)]
        url: Target,
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS))]
        connections: u64,
        /// Streams per connection (fewer if the server allows fewer at once).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_STREAMS)))]
        streams: u32,
        #[arg(long, value_parser = parse_duration)]
        duration: Duration,
        /// Local address to connect from (loopback, e.g. 127.0.0.3); default: the kernel's.
        #[arg(long, value_parser = parse_source)]
        bind: Option<IpAddr>,
    },
    /// HTTP/1.1 clients that each GET the URL and read the response at a trickle.
    SlowRead {
        #[arg(long, value_parser = parse_target)]
        url: Target,
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS))]
        connections: u64,
        /// SO_RCVBUF in bytes, set before the connect.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_BUFFER_BYTES), default_value = "4096")]
        rcvbuf: u64,
        /// Most bytes taken by one read.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_BUFFER_BYTES), default_value = "1024")]
        read_bytes: u64,
        /// Time between two reads.
        #[arg(long, value_parser = parse_interval, default_value = "1s")]
        interval: Duration,
        #[arg(long, value_parser = parse_duration)]
        duration: Duration,
        /// Local address to connect from (loopback, e.g. 127.0.0.3); default: the kernel's.
        #[arg(long, value_parser = parse_source)]
        bind: Option<IpAddr>,
    },
}

/// What `rate` and `hosts` share: where, how fast, how long, over how many connections.
#[derive(Debug, Args)]
struct RateArgs {
    #[arg(long, value_parser = parse_target)]
    url: Target,
    /// Requests per second over all connections.
    #[arg(long, value_parser = parse_rate)]
    rate: f64,
    #[arg(long, value_parser = parse_duration)]
    duration: Duration,
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS))]
    connections: u64,
}

impl RateArgs {
    /// The rate run these arguments ask for, its first `warmup` not recorded.
    fn config(self, warmup: Duration) -> rate::RateConfig {
        rate::RateConfig {
            target: self.url,
            rate: self.rate,
            duration: self.duration,
            connections: to_usize(self.connections),
            warmup,
            connects_in_flight: holdfast_bench_tools::load::DEFAULT_CONNECTS_IN_FLIGHT,
            hosts: None,
        }
    }
}

fn parse_target(url: &str) -> Result<Target, TargetError> {
    Target::parse(url)
}

fn parse_https_target(url: &str) -> Result<Target, TargetError> {
    Target::parse_https(url)
}

/// A local address to connect from: loopback only, as every address these tools talk to.
fn parse_source(text: &str) -> Result<IpAddr, String> {
    let ip: IpAddr = text.parse().map_err(|_| format!("{text:?} is not an IP address"))?;
    if !ip.is_loopback() {
        return Err(format!("{ip} is not a loopback address"));
    }
    Ok(ip)
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if duration > MAX_DURATION {
        return Err(format!("at most {}", humantime::format_duration(MAX_DURATION)));
    }
    Ok(duration)
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if interval < Duration::from_millis(10) {
        return Err("at least 10ms".to_owned());
    }
    Ok(interval)
}

fn parse_payload(text: &str) -> Result<usize, String> {
    let bytes: usize = text.parse().map_err(|_| format!("{text:?} is not a byte count"))?;
    let (min, max) = (grpc_message::MIN_PAYLOAD_BYTES, grpc_message::MAX_PAYLOAD_BYTES);
    if !(min..=max).contains(&bytes) {
        return Err(format!("must be {min} to {max} bytes"));
    }
    Ok(bytes)
}

fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if !(rate > 0.0 && rate <= MAX_RATE) {
        return Err(format!("must be above 0 and at most {MAX_RATE}"));
    }
    Ok(rate)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::Mixed { keepalive: 0, closing: 0, .. } = cli.command {
        Cli::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                "--keepalive + --closing must be at least 1",
            )
            .exit();
    }
    runtime::exit_code("bench-load", run(cli))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match fd_limit::raise_nofile_limit() {
        Ok(limit) => eprintln!("bench-load: open-file limit {}", limit.soft),
        Err(error) => eprintln!("bench-load: could not raise the open-file limit: {error}"),
    }
    let runtime = runtime::build(cli.threads).context("building the tokio runtime")?;
    runtime.block_on(run_command(cli.command))
}

async fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Rate { load, warmup } => {
            let report = rate::run(load.config(warmup)).await;
            finish(&report, &report.first_errors)
        }
        Command::Hosts { load, hosts, steady, bursty, idle, burst } => {
            let settings = hosts::HostsSettings {
                pattern: hosts,
                steady: to_usize(steady),
                bursty: to_usize(bursty),
                idle,
                burst,
            };
            let schedule = hosts::HostSchedule::new(&settings)
                .context("--hosts, --steady, --bursty, --idle, --burst")?;
            let report = hosts::run(load.config(Duration::ZERO), schedule).await;
            finish(&report, &report.rate.first_errors)
        }
        Command::Mixed { url, keepalive, closing, duration, interval } => {
            let config = mixed::MixedConfig {
                target: url,
                keepalive_workers: to_usize(keepalive),
                closing_workers: to_usize(closing),
                duration,
                interval,
            };
            let report = mixed::run(config).await;
            finish(&report, &report.first_errors)
        }
        Command::Hold { url, connections, hold, silent } => {
            let stop = runtime::stop_signal().context("installing SIGTERM/SIGINT handlers")?;
            let release = async {
                tokio::select! {
                    () = tokio::time::sleep(hold.unwrap_or(DEFAULT_HOLD)) => {}
                    () = stop => eprintln!("bench-load: signal received, releasing"),
                }
            };
            let config = hold::HoldConfig {
                target: url,
                connections: to_usize(connections),
                connects_in_flight: holdfast_bench_tools::load::DEFAULT_CONNECTS_IN_FLIGHT,
                silent,
            };
            let report = hold::run(config, print_holding_event, release).await;
            finish(&report, &report.first_errors)
        }
        Command::Burst { url, connections } => {
            let config = burst::BurstConfig {
                target: url,
                connections: to_usize(connections),
                connects_in_flight: burst::DEFAULT_CONNECTS_IN_FLIGHT,
                deadline: burst::DEFAULT_DEADLINE,
            };
            let report = burst::run(config).await;
            finish(&report, &report.first_errors)
        }
        Command::Handshakes { url, ca, connections, duration, resume } => {
            let tls = tls::client_config(&ca).context("setting up TLS")?;
            let config = handshakes::HandshakesConfig {
                target: url,
                tls,
                resume,
                connections: to_usize(connections),
                duration,
            };
            let report = handshakes::run(config).await;
            finish(&report, &report.first_errors)
        }
        Command::Grpc { url, connections, streams, messages, payload, duration } => {
            let config = grpc::GrpcConfig {
                target: url,
                connections: to_usize(connections),
                streams: to_usize(streams),
                messages,
                payload_bytes: payload,
                duration,
            };
            let report = grpc::run(config).await;
            for (kind, message) in &report.first_errors {
                eprintln!("bench-load: first {}: {message}", kind.as_str());
            }
            print_json_line(&report)
        }
        Command::Steady { url, rate, duration, deadline, bind, h2c } => {
            let config = steady::SteadyConfig {
                target: url,
                rate,
                duration,
                deadline,
                source: bind,
                protocol: if h2c { steady::Protocol::H2c } else { steady::Protocol::Http1 },
            };
            let report = steady::run(config).await;
            finish(&report, &report.first_errors)
        }
        Command::ZeroWindow { url, connections, streams, duration, bind } => {
            let config = zero_window::ZeroWindowConfig {
                target: url,
                connections: to_usize(connections),
                streams,
                duration,
                source: bind,
            };
            let report = zero_window::run(config).await;
            if let Some(failed) = report.per_connection.iter().find_map(|c| c.failed.as_ref()) {
                eprintln!("bench-load: first failed connection: {failed}");
            }
            print_json_line(&report)
        }
        Command::SlowRead { url, connections, rcvbuf, read_bytes, interval, duration, bind } => {
            let config = slow_read::SlowReadConfig {
                target: url,
                connections: to_usize(connections),
                receive_buffer_bytes: u32::try_from(rcvbuf)
                    .expect("--rcvbuf is capped at MAX_BUFFER_BYTES, which fits a u32"),
                read_bytes: to_usize(read_bytes),
                interval,
                duration,
                source: bind,
                connects_in_flight: holdfast_bench_tools::load::DEFAULT_CONNECTS_IN_FLIGHT,
            };
            let report = slow_read::run(config).await;
            if let Some(failed) = &report.first_failure {
                eprintln!("bench-load: first failed reader: {failed}");
            }
            print_json_line(&report)
        }
    }
}

fn to_usize(count: u64) -> usize {
    usize::try_from(count).expect(
        "counts are capped at MAX_CONNECTIONS, MAX_HOSTS or MAX_GRPC_STREAMS, which fit a usize",
    )
}

/// The `holding` line must reach the harness as soon as it is printed; a failed write is
/// reported but does not abort the hold (the final JSON may still get through).
fn print_holding_event(event: &hold::HoldingEvent) {
    if let Err(error) = print_json_line(event) {
        eprintln!("bench-load: writing the holding event: {error:#}");
    }
}

/// Reports the first failure of each kind on stderr, then the result on stdout.
fn finish(report: &impl Serialize, first_errors: &[(ErrorKind, String)]) -> anyhow::Result<()> {
    for (kind, message) in first_errors {
        eprintln!("bench-load: first {}: {message}", kind.as_str());
    }
    print_json_line(report)
}

fn print_json_line(value: &impl Serialize) -> anyhow::Result<()> {
    let json = serde_json::to_string(value).context("encoding the result as JSON")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{json}").context("writing to stdout")?;
    stdout.flush().context("writing to stdout")
}
