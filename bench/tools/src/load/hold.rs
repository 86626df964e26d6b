//! Opens many client connections, proxies one request on each, then holds them all open and
//! idle: what a proxy's memory and fd use look like with many idle clients, and whether it
//! closes them. With [`HoldConfig::silent`] the connections send nothing at all (a TCP
//! connect and no byte): what a proxy holds for a client that has not started a request.
//!
//! Connects (with their first request) are bounded in flight, so the proxy needs few
//! upstream connections to serve them. Bounded in time: each connection gets
//! [`EXCHANGE_TIMEOUT`], all of them [`ESTABLISH_DEADLINE`]; the hold itself ends when the
//! caller's `release` future resolves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::exchange::{self, Connection, ErrorKind, ExchangeError};
use super::tally::{ErrorCounts, Tally};
use super::target::Target;

/// Connect plus first request on one connection; longer is a `timeout` and the connection
/// counts as failed.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections not established this long after the start count as failed (`timeout`).
pub const ESTABLISH_DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct HoldConfig {
    pub target: Target,
    pub connections: usize,
    /// Connects (with their first request) in flight at once.
    pub connects_in_flight: usize,
    /// Connect only and never send a byte (no request, not even part of one).
    pub silent: bool,
}

/// Printed once every connection is established (or failed), before the hold.
#[derive(Debug, Clone, Serialize)]
pub struct HoldingEvent {
    pub event: &'static str,
    /// Connections asked for; `connections - failed` are held.
    pub connections: usize,
    pub failed: u64,
    /// Seconds it took to establish them.
    pub establish_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HoldReport {
    pub mode: &'static str,
    pub silent: bool,
    pub connections: usize,
    pub failed: u64,
    /// Held connections the peer had closed by the time the hold ended.
    pub closed_by_peer: usize,
    pub errors_by_kind: ErrorCounts,
    pub establish_s: f64,
    #[serde(skip)]
    pub first_errors: Vec<(ErrorKind, String)>,
}

/// Establishes the connections, calls `on_holding`, waits for `release`, closes everything.
pub async fn run(
    config: HoldConfig,
    on_holding: impl FnOnce(&HoldingEvent),
    release: impl Future<Output = ()>,
) -> HoldReport {
    let started = Instant::now();
    let tally = Tally::new();
    let held: Vec<Held> = if config.silent {
        establish_silent(&config, &tally).await.into_iter().map(Held::Silent).collect()
    } else {
        establish(&config, &tally).await.into_iter().map(Held::Http).collect()
    };
    let establish_s = started.elapsed().as_secs_f64();
    let failed = tally.error_counts().total();
    on_holding(&HoldingEvent {
        event: "holding",
        connections: config.connections,
        failed,
        establish_s,
    });
    release.await;
    let closed_by_peer = held.iter().filter(|connection| connection.is_closed()).count();
    let mut http = Vec::new();
    for connection in held {
        match connection {
            Held::Http(connection) => http.push(connection),
            // A bare socket: dropping it closes it.
            Held::Silent(stream) => drop(stream),
        }
    }
    super::close_all(http).await;
    HoldReport {
        mode: "hold",
        silent: config.silent,
        connections: config.connections,
        failed,
        closed_by_peer,
        errors_by_kind: tally.error_counts(),
        establish_s,
        first_errors: tally.first_errors(),
    }
}

/// A held connection: an HTTP client that has sent one request, or a socket that sent nothing.
enum Held {
    Http(Connection),
    Silent(TcpStream),
}

impl Held {
    /// The peer closed (or reset) the connection, or, on a silent one, wrote anything at
    /// all, which a server only does to a client that sent nothing when it gives up on it
    /// (a 408 before closing, say).
    fn is_closed(&self) -> bool {
        match self {
            Self::Http(connection) => connection.is_closed(),
            Self::Silent(stream) => !matches!(
                stream.try_read(&mut [0; 1]),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock
            ),
        }
    }
}

/// Opens `config.connections` TCP connections that send nothing; returns those that opened.
async fn establish_silent(config: &HoldConfig, tally: &Tally) -> Vec<TcpStream> {
    let limit = super::connect_limit(config.connects_in_flight);
    let deadline = Instant::now() + ESTABLISH_DEADLINE;
    let mut opening = JoinSet::new();
    for _ in 0..config.connections {
        let (addr, limit) = (config.target.addr, Arc::clone(&limit));
        opening.spawn(async move {
            let open = async {
                let _permit = limit.acquire_owned().await.expect("the semaphore is never closed");
                let own_deadline = (Instant::now() + EXCHANGE_TIMEOUT).min(deadline);
                match tokio::time::timeout_at(own_deadline, TcpStream::connect(addr)).await {
                    Ok(connected) => connected.map_err(ExchangeError::Connect),
                    Err(_) => Err(ExchangeError::Timeout),
                }
            };
            exchange::by_deadline(deadline, open).await
        });
    }
    let mut held = Vec::with_capacity(config.connections);
    while let Some(joined) = opening.join_next().await {
        match joined.expect("connect tasks do not panic") {
            Ok(stream) => held.push(stream),
            Err(error) => tally.record_error(&error),
        }
    }
    held
}

/// Opens `config.connections` connections with one GET each; returns those that succeeded.
async fn establish(config: &HoldConfig, tally: &Tally) -> Vec<Connection> {
    let limit = super::connect_limit(config.connects_in_flight);
    let deadline = Instant::now() + ESTABLISH_DEADLINE;
    let mut opening = JoinSet::new();
    for _ in 0..config.connections {
        let (target, limit) = (config.target.clone(), Arc::clone(&limit));
        opening.spawn(async move {
            let open = async {
                let _permit = limit.acquire_owned().await.expect("the semaphore is never closed");
                let own_deadline = Instant::now() + EXCHANGE_TIMEOUT;
                open_with_one_request(&target, own_deadline.min(deadline)).await
            };
            exchange::by_deadline(deadline, open).await
        });
    }
    let mut held = Vec::with_capacity(config.connections);
    while let Some(joined) = opening.join_next().await {
        match joined.expect("connect tasks do not panic") {
            Ok(connection) => held.push(connection),
            Err(error) => tally.record_error(&error),
        }
    }
    held
}

async fn open_with_one_request(
    target: &Target,
    deadline: Instant,
) -> Result<Connection, ExchangeError> {
    let exchange = async {
        let mut connection = exchange::connect(target.addr).await?;
        connection.send(target.request(false)).await?;
        Ok(connection)
    };
    exchange::by_deadline(deadline, exchange).await
}
