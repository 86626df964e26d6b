//! `bench-origin --listen ADDR [--listen ADDR ...] [--threads N] [--tls-cert FILE --tls-key
//! FILE | --h2c [--h2-max-streams N]] [--workers N]`: the HTTP/1.1 origin the benchmarked
//! proxies front (routes in `holdfast_bench_tools::origin`), over TLS when given a
//! certificate and key, or also speaking HTTP/2 with prior knowledge (h2c) with `--h2c`
//! (where it also echoes gRPC calls).
//! Several `--listen` (cleartext HTTP/1.1 only) serve the same routes on each address,
//! counted per listener. `--workers N` lets at most N responses be in progress at once, as
//! an app server with N sync workers (one listener only). Prints
//! `listening on IP:PORT` once bound, one line per listener, serves until SIGTERM or SIGINT,
//! then exits 0.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use holdfast_bench_tools::origin::{self, H2cOptions, Listeners, OriginStats};
use holdfast_bench_tools::{fd_limit, runtime, tls};

#[derive(Debug, Parser)]
#[command(
    name = "bench-origin",
    about = "Fast HTTP/1.1 (and h2c) origin for holdfast's benchmarks"
)]
struct Args {
    /// Address to listen on; port 0 picks a free port (printed on stdout). Repeat it to
    /// serve several ports from one process (cleartext HTTP/1.1 only): `/__origin/stats`
    /// then answers the totals, with each listener's counts in `listeners`.
    #[arg(long, required = true)]
    listen: Vec<SocketAddr>,
    /// Tokio worker threads (1: a current-thread runtime).
    #[arg(long, default_value = "1")]
    threads: NonZeroUsize,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM); needs --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Also serve HTTP/2 with prior knowledge (h2c) on the cleartext listener, beside
    /// HTTP/1.1: the first bytes of each connection decide. gRPC calls
    /// (`content-type: application/grpc`, any path) are answered with an echo of their
    /// messages and `grpc-status: 0`.
    #[arg(long, conflicts_with = "tls_cert")]
    h2c: bool,
    /// SETTINGS_MAX_CONCURRENT_STREAMS of each HTTP/2 connection; needs --h2c.
    #[arg(long, requires = "h2c", default_value_t = origin::DEFAULT_MAX_STREAMS)]
    h2_max_streams: u32,
    /// At most N responses in progress at once, like an app server with N sync workers
    /// (Puma, gunicorn): a request waits for a free worker and keeps it until its
    /// response's last bytes are handed to the socket. Default: no limit.
    #[arg(long)]
    workers: Option<NonZeroUsize>,
}

fn main() -> std::process::ExitCode {
    runtime::exit_code("bench-origin", run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<()> {
    match fd_limit::raise_nofile_limit() {
        Ok(limit) => eprintln!("bench-origin: open-file limit {}", limit.soft),
        Err(error) => eprintln!("bench-origin: could not raise the open-file limit: {error}"),
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::server_config(cert, key).context("setting up TLS")?),
        _ => None,
    };
    let mode = match tls {
        Some(config) => Mode::Tls(config),
        None if args.h2c => Mode::H2c(H2cOptions { max_streams: args.h2_max_streams }),
        None => Mode::Http1,
    };
    if args.listen.len() > 1 && !matches!(mode, Mode::Http1) {
        anyhow::bail!(
            "several --listen addresses are for cleartext HTTP/1.1 only, not with TLS or --h2c"
        );
    }
    if args.listen.len() > 1 && args.workers.is_some() {
        anyhow::bail!("--workers is for one --listen address only");
    }
    let runtime = runtime::build(args.threads).context("building the tokio runtime")?;
    match args.listen.as_slice() {
        [one] => runtime.block_on(serve(*one, mode, args.workers)),
        several => runtime.block_on(serve_several(several)),
    }
}

/// What the listener speaks.
enum Mode {
    /// HTTP/1.1 in cleartext.
    Http1,
    /// HTTP/1.1 over TLS.
    Tls(Arc<rustls::ServerConfig>),
    /// HTTP/2 with prior knowledge or HTTP/1.1, in cleartext.
    H2c(H2cOptions),
}

async fn serve(
    listen: SocketAddr,
    mode: Mode,
    workers: Option<NonZeroUsize>,
) -> anyhow::Result<()> {
    let stop = runtime::stop_signal().context("installing SIGTERM/SIGINT handlers")?;
    let listener = origin::bind(listen).with_context(|| format!("listening on {listen}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    runtime::print_listening(&[addr])?;
    let stats = Arc::new(OriginStats::default());
    if let Some(limit) = workers {
        stats.limit_workers(limit);
    }
    match mode {
        Mode::Tls(config) => origin::serve_tls(listener, stats, config, stop).await,
        Mode::H2c(options) => origin::serve_h2c(listener, stats, options, stop).await,
        Mode::Http1 => origin::serve(listener, stats, stop).await,
    }
    .with_context(|| format!("serving on {addr}"))?;
    eprintln!("bench-origin: stopping");
    Ok(())
}

/// Serves every address of `listen` from this one process, each counted on its own.
async fn serve_several(listen: &[SocketAddr]) -> anyhow::Result<()> {
    let stop = runtime::stop_signal().context("installing SIGTERM/SIGINT handlers")?;
    let mut listeners = Vec::with_capacity(listen.len());
    let mut addrs = Vec::with_capacity(listen.len());
    for &address in listen {
        let listener = origin::bind(address).with_context(|| format!("listening on {address}"))?;
        addrs.push(listener.local_addr().context("reading the bound address")?);
        listeners.push(listener);
    }
    runtime::print_listening(&addrs)?;
    let counts = Arc::new(Listeners::new(addrs.iter().copied()));
    origin::serve_many(listeners, counts, stop)
        .await
        .with_context(|| format!("serving on {} listeners", addrs.len()))?;
    eprintln!("bench-origin: stopping");
    Ok(())
}
