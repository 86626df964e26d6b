//! Command line: run the proxy (quick mode or a config file), `check`, and `demo`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::config::Config;
use crate::server::Server;

#[derive(Debug, Parser)]
#[command(
    name = "holdfast",
    version,
    about = "A reverse proxy that reuses upstream connections by default"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Address to accept clients on (quick mode).
    #[arg(long, value_name = "ADDR", conflicts_with = "config")]
    pub listen: Option<SocketAddr>,
    /// Backend to proxy to; repeat for several (round robin). Quick mode.
    #[arg(long = "upstream", value_name = "ADDR", conflicts_with = "config")]
    pub upstreams: Vec<SocketAddr>,
    /// Config file (TOML); see examples/holdfast.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Worker threads (default: the CPUs this process may run on).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config file; exits non-zero listing each error with file, line and key.
    Check {
        /// The config file.
        file: PathBuf,
    },
    /// Run an origin with holdfast in front of it and show how reuse pays off.
    Demo(crate::demo::DemoArgs),
}

/// Runs the parsed command line; the exit code says whether it worked.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Some(Command::Check { file }) => Ok(check(&file)),
        Some(Command::Demo(args)) => {
            let runtime = runtime(None)?;
            runtime.block_on(crate::demo::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
        None => serve(cli.run),
    }
}

fn check(file: &std::path::Path) -> ExitCode {
    match Config::load(file) {
        Ok(config) => {
            println!(
                "{}: ok ({} listener(s), {} upstream(s))",
                file.display(),
                config.listeners.len(),
                config.upstreams.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn config_from(args: &RunArgs) -> anyhow::Result<Config> {
    if let Some(path) = &args.config {
        return Ok(Config::load(path)?);
    }
    match (args.listen, args.upstreams.is_empty()) {
        (Some(listen), false) => Ok(Config::quick(listen, args.upstreams.clone())),
        _ => anyhow::bail!(
            "nothing to do: give --listen ADDR --upstream ADDR, or --config FILE \
             (or try `holdfast demo`)"
        ),
    }
}

fn serve(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut config = config_from(&args)?;
    if let Some(n) = args.threads {
        config.threads = Some(n.into());
    }
    let runtime = runtime(config.threads)?;
    runtime.block_on(async {
        // Before listening: once a client can connect, SIGTERM means drain, never the
        // default action (an immediate exit).
        let signal = ShutdownSignal::install().context("installing signal handlers")?;
        let server = Server::start(&config).await.context("starting holdfast")?;
        signal.recv().await;
        tracing::info!(drain = ?config.timeouts.drain, "shutting down");
        server.shutdown(config.timeouts.drain).await;
        Ok(ExitCode::SUCCESS)
    })
}

/// A multi-threaded runtime with `threads` workers (default: available parallelism).
pub fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let threads =
        threads.or_else(|| std::thread::available_parallelism().ok().map(usize::from)).unwrap_or(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context("building the async runtime")
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    match ShutdownSignal::install() {
        Ok(signal) => signal.recv().await,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// SIGTERM or Ctrl-C (SIGINT), caught from the moment this is created, so a signal
/// that arrives before anyone waits for it is kept, not lost or fatal.
pub struct ShutdownSignal {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    /// Installs the handlers; must run inside the runtime.
    pub fn install() -> std::io::Result<ShutdownSignal> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(ShutdownSignal {
                term: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignal {})
    }

    /// Resolves once a signal has arrived (at once, if one came already).
    pub async fn recv(self) {
        #[cfg(unix)]
        {
            let ShutdownSignal { mut term, mut interrupt } = self;
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}
