//! Command line: run the proxy (quick mode or a config file), `check`, `demo`, `stats`,
//! `reload` and `health`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

use super::admin_client::AdminClient;
use crate::acme::{self, AcmeConfig, AcmeNames};
use crate::config::Config;
use crate::instance::signals::ShutdownSignal;
use crate::instance::{ConfigSource, Instance};
use crate::listener::MAX_BACKLOG;
use crate::telemetry;
use crate::telemetry::access_log::{AccessLogFormat, AccessLogTarget};
use crate::telemetry::LogFormat;
use crate::tls::certs::CertPair;
use crate::tls::origin::{OriginTls, OriginTlsSettings};
use crate::tls::server::ListenerTls;
use crate::upstream::settings::{parse_server_url, Scheme};
use crate::upstream::Server;

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
    /// Server to proxy to, `ip:port` or `host:port` (a name is resolved again every
    /// 5 s); `https://ip:port` speaks TLS to it (verified against the system roots and
    /// --upstream-ca; HTTP/2 or HTTP/1.1 as the server picks by ALPN); `h2c://ip:port`
    /// speaks cleartext HTTP/2 to it. Repeat for several (balanced by power of two
    /// choices). Quick mode.
    #[arg(long = "upstream", value_name = "ADDR", conflicts_with = "config", value_parser = parse_upstream)]
    pub upstreams: Vec<UpstreamArg>,
    /// Route by the labels of the local Docker Engine's containers (`holdfast.host`,
    /// `holdfast.path`, `holdfast.port`, ..., and Traefik's), following them as they
    /// start, turn healthy and stop. The Engine is at DOCKER_HOST, else
    /// /var/run/docker.sock. Quick mode; combines with --upstream (the catch-all).
    #[arg(long, conflicts_with = "config")]
    pub docker: bool,
    /// PEM certificate chain: makes the --listen listener HTTPS (with --tls-key).
    #[arg(long, value_name = "FILE", conflicts_with = "config", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", conflicts_with = "config", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Accept HTTP/2 with prior knowledge (h2c) on the cleartext --listen listener, as
    /// well as HTTP/1.1. A TLS listener offers HTTP/2 by ALPN without it.
    #[arg(long, conflicts_with_all = ["config", "tls_cert", "acme_names"])]
    pub h2c: bool,
    /// PEM CA bundle trusted for https:// upstreams, besides the system roots.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub upstream_ca: Option<PathBuf>,
    /// Get a certificate for NAME from an ACME CA (Let's Encrypt by default) and make the
    /// --listen listener HTTPS with it; repeat for several names. TLS-ALPN-01, on the
    /// listener itself: it must be reachable on port 443 under each name.
    #[arg(long = "acme", value_name = "NAME", conflicts_with_all = ["config", "tls_cert"], value_parser = parse_acme_name)]
    pub acme_names: Vec<String>,
    /// Email address the CA may write to about the certificates (with --acme).
    #[arg(long, value_name = "EMAIL", requires = "acme_names", value_parser = parse_acme_contact)]
    pub acme_email: Option<String>,
    /// Where the ACME account and certificates are kept (with --acme; default
    /// /var/lib/holdfast/acme).
    #[arg(long, value_name = "DIR", requires = "acme_names")]
    pub acme_storage: Option<PathBuf>,
    /// The CA's ACME directory URL, or `letsencrypt-staging` (with --acme).
    #[arg(long, value_name = "URL", requires = "acme_names", value_parser = parse_acme_directory)]
    pub acme_directory: Option<String>,
    /// PEM root certificate to trust for the ACME directory, besides the system roots
    /// (a private CA, or pebble's for testing; with --acme).
    #[arg(long, value_name = "FILE", requires = "acme_names")]
    pub acme_ca: Option<PathBuf>,
    /// Config file (TOML); see examples/holdfast.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Worker threads (default: the CPUs this process may run on).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Address of the admin listener (GET /metrics), e.g. 127.0.0.1:9901; overrides the
    /// config file's admin address.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// Access log: `off`, `stdout`, or a file path (`./off` for a file named off);
    /// overrides the config file's access_log.target.
    #[arg(long, value_name = "TARGET", value_parser = parse_access_log_target)]
    pub access_log: Option<AccessLogTarget>,
    /// Access log line format; overrides the config file's access_log.format.
    #[arg(long, value_name = "FORMAT")]
    pub access_log_format: Option<AccessLogFormatArg>,
    /// Listen backlog of every listener (default: 511, or net.core.somaxconn if lower);
    /// overrides the config file's `backlog`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BACKLOG)))]
    pub backlog: Option<u32>,
    /// holdfast's own log lines on stderr: `text`, or `json` for log shippers; overrides
    /// the config file's log_format.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormatArg>,
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// `key=value` text, coloured on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

impl From<LogFormatArg> for LogFormat {
    fn from(arg: LogFormatArg) -> LogFormat {
        match arg {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
}

/// An `--upstream` value: a server, and whether to speak TLS to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamArg {
    pub server: Server,
    pub scheme: Scheme,
}

fn parse_acme_name(text: &str) -> Result<String, String> {
    acme::parse_name(text)
}

fn parse_acme_contact(text: &str) -> Result<String, String> {
    acme::parse_contact(text)
}

fn parse_acme_directory(text: &str) -> Result<String, String> {
    acme::parse_directory(text)
}

/// An `--upstream` value. The one place its syntax is decided.
fn parse_upstream(text: &str) -> Result<UpstreamArg, String> {
    let (server, scheme) = parse_server_url(text)?;
    Ok(UpstreamArg { server, scheme })
}

/// `--access-log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AccessLogFormatArg {
    /// One JSON object per line.
    Json,
    /// Combined-log-like text with upstream fields appended.
    Text,
}

impl From<AccessLogFormatArg> for AccessLogFormat {
    fn from(arg: AccessLogFormatArg) -> AccessLogFormat {
        match arg {
            AccessLogFormatArg::Json => AccessLogFormat::Json,
            AccessLogFormatArg::Text => AccessLogFormat::Text,
        }
    }
}

fn parse_access_log_target(text: &str) -> Result<AccessLogTarget, String> {
    match text {
        "off" => Ok(AccessLogTarget::Off),
        "stdout" => Ok(AccessLogTarget::Stdout),
        "" => Err("is empty: use off, stdout or a file path".into()),
        path => Ok(AccessLogTarget::File(PathBuf::from(path))),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config file; exits non-zero listing each error with file, line and key.
    Check {
        /// The config file.
        file: PathBuf,
    },
    /// Run an origin with holdfast in front of it and show how reuse pays off.
    Demo(super::demo::DemoArgs),
    /// Show a live table of requests, reuse and latency per server, from a running
    /// holdfast's admin listener.
    Stats(super::stats::StatsArgs),
    /// Make a running holdfast re-read its config file (like SIGHUP), through its admin
    /// listener; prints what changed, or why the config in force stays.
    Reload(ReloadArgs),
    /// Exit 0 if a running holdfast answers 200 on its admin listener's /healthz within
    /// 2 s, 1 (with the reason on stderr) if not: a container HEALTHCHECK.
    Health(super::health::HealthArgs),
}

/// Runs the parsed command line; the exit code says whether it worked. Logging starts
/// here: serving starts it once the config says its format, other commands log text.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if cli.command.is_some() {
        telemetry::init(telemetry::DEFAULT_FILTER, LogFormat::Text);
    }
    match cli.command {
        Some(Command::Check { file }) => Ok(check(&file)),
        Some(Command::Demo(args)) => {
            let runtime = runtime(None)?;
            runtime.block_on(super::demo::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
        // The admin client sends one request at a time: one thread will do.
        Some(Command::Stats(args)) => {
            runtime(Some(1))?.block_on(super::stats::run(&args))?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Reload(args)) => runtime(Some(1))?.block_on(reload(&args)),
        Some(Command::Health(args)) => runtime(Some(1))?.block_on(health(&args)),
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
    let Some(listen) = args.listen.filter(|_| !args.upstreams.is_empty() || args.docker) else {
        anyhow::bail!(
            "nothing to do: give --listen ADDR --upstream ADDR (or --docker), or --config \
             FILE (or try `holdfast demo`)"
        )
    };
    let mut config = if args.upstreams.is_empty() {
        Config::quick_docker(listen)
    } else {
        Config::quick(listen, args.upstreams.iter().map(|u| u.server.clone()))
    };
    if args.docker {
        config.docker = Some(crate::docker::settings::DockerConfig::default());
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let pair = CertPair { cert: cert.clone(), key: key.clone() };
        crate::tls::certs::load(&pair)?;
        for l in &mut config.listeners {
            l.tls =
                Some(ListenerTls { certificates: vec![pair.clone()], acme: false, http2: true });
        }
    }
    if !args.acme_names.is_empty() {
        let mut settings = AcmeConfig::new();
        settings.names = AcmeNames::Listed(args.acme_names.clone());
        settings.contact = args.acme_email.clone();
        if let Some(dir) = &args.acme_storage {
            settings.storage = dir.clone();
        }
        if let Some(directory) = &args.acme_directory {
            settings.directory = directory.clone();
        }
        settings.ca = args.acme_ca.clone();
        config.acme = Some(settings);
        for l in &mut config.listeners {
            l.tls = Some(ListenerTls { certificates: Vec::new(), acme: true, http2: true });
        }
    }
    for l in &mut config.listeners {
        l.h2c = args.h2c;
    }
    let https = args.upstreams.iter().filter(|u| u.scheme == Scheme::Https).count();
    let h2c = args.upstreams.iter().filter(|u| u.scheme == Scheme::H2c).count();
    if args.upstreams.iter().any(|u| Some(u.scheme) != args.upstreams.first().map(|f| f.scheme)) {
        anyhow::bail!(
            "--upstream: a mix of http://, https:// and h2c:// servers; use one kind for all"
        );
    }
    if h2c > 0 {
        for u in &mut config.upstreams {
            u.protocol = crate::upstream::settings::Protocol::H2c;
        }
    }
    if https == 0 && args.upstream_ca.is_some() {
        anyhow::bail!("--upstream-ca is for https:// upstreams, and none is given");
    }
    if https > 0 {
        let settings = OriginTlsSettings { ca: args.upstream_ca.clone(), ..Default::default() };
        let tls = OriginTls::build(settings).map_err(|e| anyhow::anyhow!("--upstream-ca: {e}"))?;
        for u in &mut config.upstreams {
            u.tls = Some(tls.clone());
        }
    }
    Ok(config)
}

/// `holdfast reload` options.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// The admin listener of the running holdfast.
    #[arg(long, value_name = "ADDR", conflicts_with = "config")]
    pub admin: Option<SocketAddr>,
    /// Read the admin address from this config file instead.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// How long `holdfast reload` waits: a reload resolves server names, which may take a
/// few seconds when a resolver is slow.
const RELOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

async fn reload(args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    let admin = match (&args.admin, &args.config) {
        (Some(admin), _) => *admin,
        (None, Some(path)) => Config::load(path)?.admin.with_context(|| {
            format!("{} has no [admin] section: reload needs the admin listener", path.display())
        })?,
        (None, None) => crate::admin::DEFAULT_ADMIN_ADDR,
    };
    // The error names the admin address and what to check.
    let response = AdminClient::new(admin, RELOAD_TIMEOUT).post("/reload").await?;
    if response.status == http::StatusCode::OK {
        print!("{}", response.text());
        Ok(ExitCode::SUCCESS)
    } else {
        eprint!("{}", response.text());
        Ok(ExitCode::FAILURE)
    }
}

/// `holdfast health`: exit 0 when `/healthz` answers 200, 1 with a one-line reason.
async fn health(args: &super::health::HealthArgs) -> anyhow::Result<ExitCode> {
    use super::health::{probe, PROBE_TIMEOUT};
    let admin = match (&args.admin, &args.config) {
        (Some(admin), _) => *admin,
        (None, Some(path)) => Config::load(path)?.admin.with_context(|| {
            format!("{} has no [admin] section: health needs the admin listener", path.display())
        })?,
        (None, None) => crate::admin::DEFAULT_ADMIN_ADDR,
    };
    match probe(&AdminClient::new(admin, PROBE_TIMEOUT)).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("holdfast health: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Applies the run flags that override the config file (or quick mode's defaults).
fn apply_overrides(config: &mut Config, args: &RunArgs) {
    if let Some(n) = args.threads {
        config.threads = Some(n.into());
    }
    if let Some(admin) = args.admin {
        config.admin = Some(admin);
    }
    if let Some(target) = &args.access_log {
        config.access_log.target = target.clone();
    }
    if let Some(format) = args.access_log_format {
        config.access_log.format = format.into();
    }
    if let Some(backlog) = args.backlog {
        for l in &mut config.listeners {
            l.backlog = backlog;
        }
    }
    if let Some(format) = args.log_format {
        config.log_format = format.into();
    }
}

fn serve(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut config = config_from(&args)?;
    apply_overrides(&mut config, &args);
    telemetry::init(telemetry::DEFAULT_FILTER, config.log_format);
    if let Some((before, after)) = crate::resources::raise_open_file_limit() {
        tracing::info!(before, after, "raised the open-file limit to its hard limit");
    }
    let runtime = runtime(config.threads)?;
    runtime.block_on(async {
        // Before listening: once a client can connect, SIGTERM means drain, never the
        // default action (an immediate exit).
        // SIGHUP and SIGUSR1 too: a reload or a log rotation that comes while holdfast
        // starts waits for it instead of ending the process.
        let signal = ShutdownSignal::install().context("installing signal handlers")?;
        #[cfg(unix)]
        let others = OtherSignals::install().context("installing signal handlers")?;
        let source = args.config.clone().map(|path| {
            let adjust: crate::instance::Adjust =
                Box::new(move |c: &mut Config| apply_overrides(c, &args));
            ConfigSource { path, adjust }
        });
        let server = Instance::start_from(&config, source).await.context("starting holdfast")?;
        #[cfg(unix)]
        serve_until(&server, signal, others).await;
        #[cfg(not(unix))]
        serve_until(&server, signal).await;
        let drain = humantime::format_duration(config.timeouts.drain);
        tracing::info!(drain = %drain, "shutting down");
        server.shutdown(config.timeouts.drain).await;
        Ok(ExitCode::SUCCESS)
    })
}

/// SIGHUP (reload the config file) and SIGUSR1 (reopen the access log), caught from
/// the moment they are installed.
#[cfg(unix)]
struct OtherSignals {
    hangup: tokio::signal::unix::Signal,
    reopen: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl OtherSignals {
    fn install() -> std::io::Result<OtherSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(OtherSignals {
            hangup: signal(SignalKind::hangup())?,
            reopen: signal(SignalKind::user_defined1())?,
        })
    }
}

/// Waits for the shutdown signal; meanwhile SIGUSR1 makes the access log reopen its
/// file (after log rotation), as with nginx, and SIGHUP reloads the config file.
#[cfg(unix)]
async fn serve_until(server: &Instance, signal: ShutdownSignal, others: OtherSignals) {
    let OtherSignals { mut hangup, mut reopen } = others;
    let stop = signal.recv();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = reopen.recv() => {
                tracing::info!("SIGUSR1: reopening the access log");
                server.reopen_access_log();
            }
            _ = hangup.recv() => {
                tracing::info!("SIGHUP: reloading the config file");
                // The outcome is logged by the reload itself.
                let _ = server.reload().await;
            }
        }
    }
}

#[cfg(not(unix))]
async fn serve_until(server: &Instance, signal: ShutdownSignal) {
    let _ = server;
    signal.recv().await;
}

pub fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let threads =
        threads.or_else(|| std::thread::available_parallelism().ok().map(usize::from)).unwrap_or(1);
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all().build().context("building the async runtime")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::CommandFactory;

    use super::*;
    use crate::admin::DEFAULT_ADMIN_ADDR;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("holdfast").chain(args.iter().copied()))
    }

    fn quick() -> Config {
        let addr = |s: &str| s.parse().expect("an ip:port");
        Config::quick(addr("127.0.0.1:8000"), vec![addr("127.0.0.1:9000")])
    }

    const QUICK: [&str; 4] = ["--listen", "127.0.0.1:8000", "--upstream", "127.0.0.1:9000"];

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_flags_parse_admin_and_access_log() {
        let flags = ["--admin", "127.0.0.1:9902", "--access-log", "stdout"];
        let cli = parse(&[&QUICK[..], &flags, &["--access-log-format", "text"]].concat())
            .expect("valid flags");
        assert!(cli.command.is_none());
        assert_eq!(cli.run.admin, Some("127.0.0.1:9902".parse().expect("addr")));
        assert_eq!(cli.run.access_log, Some(AccessLogTarget::Stdout));
        assert_eq!(cli.run.access_log_format, Some(AccessLogFormatArg::Text));
    }

    #[test]
    fn access_log_target_is_off_stdout_or_a_path() {
        let target = |value: &str| parse(&["--access-log", value]).map(|cli| cli.run.access_log);
        assert_eq!(target("off").expect("off"), Some(AccessLogTarget::Off));
        assert_eq!(target("stdout").expect("stdout"), Some(AccessLogTarget::Stdout));
        let file = AccessLogTarget::File(PathBuf::from("/var/log/holdfast/access.log"));
        assert_eq!(target("/var/log/holdfast/access.log").expect("path"), Some(file));
        assert!(target("").is_err());
    }

    #[test]
    fn access_log_format_is_json_or_text() {
        let format = |value: &str| parse(&["--access-log-format", value]);
        let json = format("json").expect("json").run.access_log_format;
        assert_eq!(json, Some(AccessLogFormatArg::Json));
        assert!(format("xml").is_err());
    }

    #[test]
    fn log_format_flag_is_text_or_json_and_overrides_the_config() {
        let cli = parse(&[&QUICK[..], &["--log-format", "json"]].concat()).expect("json");
        assert_eq!(cli.run.log_format, Some(LogFormatArg::Json));
        let mut config = quick();
        assert_eq!(config.log_format, LogFormat::Text);
        apply_overrides(&mut config, &cli.run);
        assert_eq!(config.log_format, LogFormat::Json);
        assert!(parse(&["--config", "holdfast.toml", "--log-format", "text"]).is_ok());
        assert!(parse(&[&QUICK[..], &["--log-format", "pretty"]].concat()).is_err());
    }

    #[test]
    fn admin_and_access_log_flags_combine_with_a_config_file() {
        let cli = parse(&["--config", "holdfast.toml", "--admin", "127.0.0.1:9901"])
            .expect("--admin with --config");
        assert_eq!(cli.run.admin, Some(DEFAULT_ADMIN_ADDR));
        assert!(parse(&["--config", "holdfast.toml", "--access-log", "off"]).is_ok());
        assert!(parse(&["--config", "holdfast.toml", "--admin", "localhost"]).is_err());
    }

    #[test]
    fn overrides_replace_config_values() {
        let flags = ["--admin", "127.0.0.1:9901", "--access-log", "access.log"];
        let cli = parse(&[&QUICK[..], &flags, &["--access-log-format", "text"]].concat())
            .expect("valid flags");
        let mut config = quick();
        config.access_log.target = AccessLogTarget::Stdout;
        apply_overrides(&mut config, &cli.run);
        assert_eq!(config.admin, Some(DEFAULT_ADMIN_ADDR));
        assert_eq!(config.access_log.target, AccessLogTarget::File(PathBuf::from("access.log")));
        assert_eq!(config.access_log.format, AccessLogFormat::Text);
    }

    #[test]
    fn without_flags_the_config_is_unchanged() {
        let cli = parse(&QUICK).expect("quick mode");
        let mut config = quick();
        config.admin = Some("127.0.0.1:7000".parse().expect("addr"));
        config.access_log.format = AccessLogFormat::Text;
        config.log_format = LogFormat::Json;
        let before = (config.admin, config.access_log.clone(), config.log_format);
        apply_overrides(&mut config, &cli.run);
        assert_eq!((config.admin, config.access_log, config.log_format), before);
    }

    #[test]
    fn docker_quick_mode_routes_by_labels_alone_or_beside_a_catch_all() {
        let cli = parse(&["--listen", "127.0.0.1:8000", "--docker"]).expect("valid");
        let config = config_from(&cli.run).expect("a config");
        assert!(config.docker.is_some());
        assert!(config.upstreams.is_empty());
        assert_eq!(config.listeners[0].upstream, None, "unclaimed hosts get 404");
        let cli =
            parse(&["--listen", "127.0.0.1:8000", "--docker", "--upstream", "127.0.0.1:9000"])
                .expect("valid");
        let config = config_from(&cli.run).expect("a config");
        assert!(config.docker.is_some());
        assert_eq!(config.listeners[0].upstream.as_deref(), Some(crate::config::QUICK_UPSTREAM));
        assert!(parse(&["--config", "x.toml", "--docker"]).is_err(), "--docker is quick mode");
        let nothing = parse(&["--listen", "127.0.0.1:8000"]).expect("parses");
        let error = config_from(&nothing.run).expect_err("nothing to do");
        assert!(error.to_string().contains("--docker"), "{error}");
    }

    #[test]
    fn upstream_is_an_address_or_a_host_name_with_a_port() {
        let cli = parse(&["--listen", "127.0.0.1:8000", "--upstream", "127.0.0.1:9000"])
            .expect("an ip:port");
        let servers: Vec<&Server> = cli.run.upstreams.iter().map(|u| &u.server).collect();
        assert_eq!(servers, [&Server::Ip("127.0.0.1:9000".parse().expect("addr"))]);
        let cli = parse(&["--listen", "127.0.0.1:8000", "--upstream", "LocalHost:3000"])
            .expect("a host:port");
        let servers: Vec<&Server> = cli.run.upstreams.iter().map(|u| &u.server).collect();
        assert_eq!(servers, [&Server::Name { host: "localhost".into(), port: 3000 }]);
        let error =
            parse(&["--listen", "127.0.0.1:8000", "--upstream", "localhost"]).expect_err("no port");
        assert!(error.to_string().contains("no port"), "{error}");
        assert!(parse(&["--listen", "127.0.0.1:8000", "--upstream", "app:0"]).is_err());
    }

    #[test]
    fn backlog_flag_sets_every_listener() {
        let cli = parse(&[&QUICK[..], &["--backlog", "1024"]].concat()).expect("a backlog");
        assert_eq!(cli.run.backlog, Some(1024));
        let mut config = quick();
        config.listeners.push(config.listeners[0].clone());
        apply_overrides(&mut config, &cli.run);
        assert!(config.listeners.iter().all(|l| l.backlog == 1024), "{:?}", config.listeners);
        assert!(parse(&[&QUICK[..], &["--backlog", "0"]].concat()).is_err());
    }

    #[test]
    fn stats_parses_admin_interval_and_count() {
        let cli = parse(&["stats", "--admin", "127.0.0.1:9902", "--interval", "250ms"])
            .expect("stats flags");
        let Some(Command::Stats(args)) = cli.command else { panic!("not stats: {cli:?}") };
        assert_eq!(args.admin, "127.0.0.1:9902".parse().expect("addr"));
        assert_eq!(args.interval, Duration::from_millis(250));
        assert_eq!(args.count, None);
    }

    #[test]
    fn stats_defaults_to_the_default_admin_address_every_second() {
        let cli = parse(&["stats", "--count", "3"]).expect("stats");
        let Some(Command::Stats(args)) = cli.command else { panic!("not stats: {cli:?}") };
        assert_eq!(args.admin, DEFAULT_ADMIN_ADDR);
        assert_eq!(args.interval, Duration::from_secs(1));
        assert_eq!(args.count, Some(3));
        assert!(parse(&["stats", "--interval", "10ms"]).is_err());
        assert!(parse(&["stats", "--count", "0"]).is_err());
    }
}
