//! `bench-origin --listen ADDR [--threads N] [--tls-cert FILE --tls-key FILE]`: the
//! HTTP/1.1 origin the benchmarked proxies front (routes in `holdfast_bench_tools::origin`),
//! over TLS when given a certificate and key. Prints `listening on IP:PORT` once bound,
//! serves until SIGTERM or SIGINT, then exits 0.

use std::io::Write;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use holdfast_bench_tools::origin::{self, OriginStats};
use holdfast_bench_tools::{fd_limit, runtime, tls};

#[derive(Debug, Parser)]
#[command(name = "bench-origin", about = "Fast HTTP/1.1 origin for holdfast's benchmarks")]
struct Args {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long)]
    listen: SocketAddr,
    /// Tokio worker threads (1: a current-thread runtime).
    #[arg(long, default_value = "1")]
    threads: NonZeroUsize,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM); needs --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench-origin: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
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
    let runtime = runtime::build(args.threads).context("building the tokio runtime")?;
    runtime.block_on(serve(args.listen, tls))
}

async fn serve(listen: SocketAddr, tls: Option<Arc<rustls::ServerConfig>>) -> anyhow::Result<()> {
    let stop = runtime::stop_signal().context("installing SIGTERM/SIGINT handlers")?;
    let listener = origin::bind(listen).with_context(|| format!("listening on {listen}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {addr}").context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
    drop(stdout);
    let stats = Arc::new(OriginStats::default());
    match tls {
        Some(config) => origin::serve_tls(listener, stats, config, stop).await,
        None => origin::serve(listener, stats, stop).await,
    }
    .with_context(|| format!("serving on {addr}"))?;
    eprintln!("bench-origin: stopping");
    Ok(())
}
