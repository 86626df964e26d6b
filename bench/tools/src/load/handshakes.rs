//! Closed-loop TLS handshakes: every request on a new connection with a TLS handshake of
//! its own, from many workers at once, so a server's handshake rate and cost show.
//!
//! Each worker connects, handshakes, sends one request with `Connection: close`, reads the
//! response and starts over. With `resume` each worker keeps the sessions the server hands
//! it, as a returning client does, so every handshake after its first offers one (a TLS 1.3
//! ticket, or a TLS 1.2 ticket or session ID), and the report says how many the server
//! accepted; without it every handshake is a full one. The client counts what it saw, so
//! a server that declines to resume shows up as full handshakes, not as a slower run.
//!
//! Bounded like `mixed`: no connection starts after `duration`, each (handshake and
//! request) takes at most [`REQUEST_TIMEOUT`], and a failure pauses its worker
//! [`ERROR_PAUSE`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, HandshakeKind};
use rustls_pki_types::ServerName;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::exchange::{self, ErrorKind, ExchangeError};
use super::mixed::{ERROR_PAUSE, REQUEST_TIMEOUT};
use super::tally::{ErrorCounts, Tally};
use super::target::Target;
use crate::histogram::LatencySummary;
use crate::tls;

#[derive(Debug, Clone)]
pub struct HandshakesConfig {
    /// Where to connect; the TLS server name is its IP address.
    pub target: Target,
    /// The client's TLS settings (`tls::client_config`: the CA it trusts).
    pub tls: Arc<ClientConfig>,
    /// Offer sessions to resume: each worker gets a session store of its own.
    pub resume: bool,
    pub connections: usize,
    pub duration: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct HandshakesReport {
    pub mode: &'static str,
    /// Requests, one per connection and handshake: `ok + errors`.
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub non_2xx: u64,
    pub socket_errors: u64,
    pub errors_by_kind: ErrorCounts,
    /// Handshakes completed, as the client saw them.
    pub handshakes_full: u64,
    pub handshakes_resumed: u64,
    /// From the start until the last worker finished its last connection.
    pub duration_s: f64,
    pub rps: f64,
    /// Connect, handshake, request and response, per connection.
    pub latency_us: LatencySummary,
    #[serde(skip)]
    pub first_errors: Vec<(ErrorKind, String)>,
}

/// What every worker of one run shares.
struct HandshakesRun {
    target: Target,
    name: ServerName<'static>,
    end: Instant,
    tally: Tally,
    full: AtomicU64,
    resumed: AtomicU64,
}

impl HandshakesRun {
    fn count_handshake(&self, kind: Option<HandshakeKind>) {
        let counter = match kind {
            Some(HandshakeKind::Resumed) => &self.resumed,
            Some(HandshakeKind::Full | HandshakeKind::FullWithHelloRetryRequest) | None => {
                &self.full
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

pub async fn run(config: HandshakesConfig) -> HandshakesReport {
    let start = Instant::now();
    let run = Arc::new(HandshakesRun {
        target: config.target.clone(),
        name: ServerName::IpAddress(config.target.addr.ip().into()),
        end: start + config.duration,
        tally: Tally::new(),
        full: AtomicU64::new(0),
        resumed: AtomicU64::new(0),
    });
    let mut workers = JoinSet::new();
    for _ in 0..config.connections {
        let tls = if config.resume {
            tls::with_session_store(&config.tls)
        } else {
            Arc::clone(&config.tls)
        };
        workers.spawn(run_worker(Arc::clone(&run), TlsConnector::from(tls)));
    }
    while let Some(joined) = workers.join_next().await {
        joined.expect("handshake workers do not panic");
    }
    report(&run, start.elapsed())
}

async fn run_worker(run: Arc<HandshakesRun>, connector: TlsConnector) {
    while Instant::now() < run.end {
        let started = Instant::now();
        let connection = one_connection(&run, &connector);
        let outcome = exchange::by_deadline(started + REQUEST_TIMEOUT, connection).await;
        run.tally.record(&outcome, started.elapsed());
        if outcome.is_err() {
            tokio::time::sleep(ERROR_PAUSE).await;
        }
    }
}

/// Connects, handshakes (counted once done) and sends one request with `Connection:
/// close`; the server closes after the response and the session ends with it.
async fn one_connection(
    run: &HandshakesRun,
    connector: &TlsConnector,
) -> Result<(), ExchangeError> {
    let (mut connection, kind) =
        exchange::connect_tls(run.target.addr, connector, run.name.clone()).await?;
    run.tally.add_connects(1);
    run.count_handshake(kind);
    connection.send(run.target.request(true)).await
}

fn report(run: &HandshakesRun, elapsed: Duration) -> HandshakesReport {
    let errors = run.tally.error_counts();
    let requests = run.tally.ok() + errors.total();
    let duration_s = elapsed.as_secs_f64();
    HandshakesReport {
        mode: "handshakes",
        requests,
        ok: run.tally.ok(),
        errors: errors.total(),
        non_2xx: errors.non_2xx(),
        socket_errors: errors.socket_errors(),
        errors_by_kind: errors,
        handshakes_full: run.full.load(Ordering::Relaxed),
        handshakes_resumed: run.resumed.load(Ordering::Relaxed),
        duration_s,
        rps: requests as f64 / duration_s.max(f64::EPSILON),
        latency_us: run.tally.latency(),
        first_errors: run.tally.first_errors(),
    }
}
