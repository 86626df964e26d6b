//! A well-behaved client at a steady rate, for the drills that watch whether a proxy keeps
//! serving it while other clients misbehave: request `n` is due at `n / rate` s and goes
//! out then on a task of its own, whatever happened to the ones before (open loop), and
//! must be answered, body and all, within the deadline or it counts as timed out.
//!
//! Every request is reported on its own (due time, status or failure, latency from the due
//! time), so the harness can cut the run into slices. The connections may come from a
//! source address of their own (`127.0.0.2`), so a proxy that tells clients apart by
//! address sees this one apart from the misbehaving ones.
//!
//! HTTP/1.1: keep-alive connections taken from an idle stack, a new one when none is idle
//! (at most rate x deadline are in use at once); a connection whose request failed or timed
//! out is dropped. HTTP/2 with prior knowledge (h2c): one connection carries every request,
//! as a browser's does, and is made again when it fails; a request that times out is reset.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::exchange::{self, ErrorKind, ExchangeError};
use super::raw::RawSlot;
use super::target::Target;
use crate::histogram::{Histogram, LatencySummary};

/// How long the first connect of an HTTP/2 session, and its handshake, may take at most
/// (each request's own deadline usually ends the wait first).
const H2_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The protocol the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http1,
    H2c,
}

#[derive(Debug, Clone)]
pub struct SteadyConfig {
    pub target: Target,
    /// Requests per second.
    pub rate: f64,
    /// Requests due in `[0, duration)` are sent.
    pub duration: Duration,
    /// Each request must be answered, body and all, this long after its due time.
    pub deadline: Duration,
    /// Local address the connections come from; None: the kernel picks.
    pub source: Option<IpAddr>,
    pub protocol: Protocol,
}

/// One request as it went.
#[derive(Debug, Clone, Serialize)]
pub struct SteadyRequest {
    /// When it was due, from the start of the run.
    pub due_s: f64,
    /// The response's status, when a response came in time.
    pub status: Option<u16>,
    /// Why no response came: `timeout` (the deadline passed) or a socket failure.
    pub error: Option<ErrorKind>,
    /// From the due time to the end of the response (or of the failure); None for a
    /// timeout.
    pub latency_us: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SteadyReport {
    pub mode: &'static str,
    pub protocol: Protocol,
    pub source: Option<IpAddr>,
    pub rate: f64,
    pub duration_s: f64,
    pub deadline_s: f64,
    /// Requests sent (every request due in the window).
    pub sent: u64,
    /// 2xx responses.
    pub ok: u64,
    /// Responses by status, 2xx included.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests without a response in time.
    pub timeouts: u64,
    /// Requests that failed otherwise, by kind.
    pub errors: BTreeMap<&'static str, u64>,
    /// Over the requests that got a response (any status).
    pub latency_us: LatencySummary,
    /// TCP connections opened.
    pub connects: u64,
    pub requests: Vec<SteadyRequest>,
    /// The first failure of each kind, in words (a reset, a GOAWAY and its code).
    #[serde(rename = "first_errors", serialize_with = "by_kind")]
    pub first_errors: Vec<(ErrorKind, String)>,
}

fn by_kind<S: serde::Serializer>(
    errors: &[(ErrorKind, String)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(errors.iter().map(|(kind, message)| (kind.as_str(), message)))
}

pub async fn run(config: SteadyConfig) -> SteadyReport {
    let client = match config.protocol {
        Protocol::Http1 => Client::Http1(Arc::new(Http1Pool::new(&config))),
        Protocol::H2c => Client::H2c(Arc::new(H2Session::new(&config))),
    };
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let mut n: u64 = 0;
    loop {
        let due_offset = Duration::from_secs_f64(n as f64 / config.rate);
        if due_offset >= config.duration {
            break;
        }
        let due = start + due_offset;
        tokio::time::sleep_until(due).await;
        let deadline = due + config.deadline;
        let client = client.clone();
        tasks.spawn(async move {
            let outcome = exchange::by_deadline(deadline, client.send()).await;
            (n, due_offset, outcome, due.elapsed())
        });
        n += 1;
    }
    let mut requests = Vec::with_capacity(tasks.len());
    while let Some(joined) = tasks.join_next().await {
        requests.push(joined.expect("steady requests do not panic"));
    }
    requests.sort_by_key(|(n, ..)| *n);
    report(&config, client.connects(), requests)
}

fn report(
    config: &SteadyConfig,
    connects: u64,
    requests: Vec<(u64, Duration, Result<StatusCode, ExchangeError>, Duration)>,
) -> SteadyReport {
    let mut statuses = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut first_errors: Vec<(ErrorKind, String)> = Vec::new();
    let mut latency = Histogram::new();
    let mut listed = Vec::with_capacity(requests.len());
    for (_, due_offset, outcome, elapsed) in requests {
        let latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let (status, error) = match outcome {
            Ok(status) | Err(ExchangeError::Status(status)) => {
                *statuses.entry(status.as_u16()).or_insert(0) += 1;
                latency.record(latency_us);
                (Some(status.as_u16()), None)
            }
            Err(error) => {
                let kind = error.kind();
                *errors.entry(kind.as_str()).or_insert(0) += 1;
                if !first_errors.iter().any(|(seen, _)| *seen == kind) {
                    first_errors.push((kind, error.to_string()));
                }
                (None, Some(kind))
            }
        };
        listed.push(SteadyRequest {
            due_s: due_offset.as_secs_f64(),
            status,
            error,
            latency_us: (error != Some(ErrorKind::Timeout)).then_some(latency_us),
        });
    }
    let ok = statuses.iter().filter(|(status, _)| (200..300).contains(*status)).map(|(_, n)| n);
    SteadyReport {
        mode: "steady",
        protocol: config.protocol,
        source: config.source,
        rate: config.rate,
        duration_s: config.duration.as_secs_f64(),
        deadline_s: config.deadline.as_secs_f64(),
        sent: listed.len() as u64,
        ok: ok.sum(),
        statuses,
        timeouts: errors.remove(ErrorKind::Timeout.as_str()).unwrap_or(0),
        errors,
        latency_us: latency.summary(),
        connects,
        requests: listed,
        first_errors,
    }
}

/// The client all requests of a run share.
#[derive(Debug, Clone)]
enum Client {
    Http1(Arc<Http1Pool>),
    H2c(Arc<H2Session>),
}

impl Client {
    /// Sends one GET; `Ok` with a 2xx status, [`ExchangeError::Status`] with any other.
    async fn send(self) -> Result<StatusCode, ExchangeError> {
        match self {
            Self::Http1(pool) => pool.send().await,
            Self::H2c(session) => session.send().await,
        }
    }

    fn connects(&self) -> u64 {
        match self {
            Self::Http1(pool) => pool.connects(),
            Self::H2c(session) => session.connects.load(Ordering::Relaxed),
        }
    }
}

/// Idle HTTP/1.1 keep-alive connections (the raw client's slots), taken one per request.
#[derive(Debug)]
struct Http1Pool {
    addr: SocketAddr,
    source: Option<IpAddr>,
    request: Arc<[u8]>,
    idle: Mutex<Vec<RawSlot>>,
    /// Connects of slots that were dropped (a timed-out request's).
    dropped_connects: AtomicU64,
}

impl Http1Pool {
    fn new(config: &SteadyConfig) -> Self {
        Self {
            addr: config.target.addr,
            source: config.source,
            request: config.target.get_bytes().into(),
            idle: Mutex::new(Vec::new()),
            dropped_connects: AtomicU64::new(0),
        }
    }

    async fn send(&self) -> Result<StatusCode, ExchangeError> {
        let taken = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let mut slot = SlotGuard {
            pool: self,
            slot: Some(
                taken.unwrap_or_else(|| RawSlot::new(self.addr, None).with_source(self.source)),
            ),
        };
        // The caller's deadline bounds this; RawSlot's own deadline is only a backstop.
        let backstop = Instant::now() + Duration::from_secs(3_600);
        let outcome = slot.slot.as_mut().expect("set above").send(&self.request, backstop).await;
        slot.give_back();
        match outcome {
            Ok(()) => Ok(StatusCode::OK),
            Err(error) => Err(error),
        }
    }

    fn connects(&self) -> u64 {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        self.dropped_connects.load(Ordering::Relaxed)
            + idle.iter().map(RawSlot::connects).sum::<u64>()
    }
}

/// A slot in use: back to the idle stack after its response, or dropped (with its
/// connection) when the request's deadline dropped the exchange half-way.
struct SlotGuard<'a> {
    pool: &'a Http1Pool,
    slot: Option<RawSlot>,
}

impl SlotGuard<'_> {
    fn give_back(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool.idle.lock().unwrap_or_else(PoisonError::into_inner).push(slot);
        }
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.pool.dropped_connects.fetch_add(slot.connects(), Ordering::Relaxed);
        }
    }
}

/// One HTTP/2 connection shared by every request, made again when it fails.
#[derive(Debug)]
struct H2Session {
    addr: SocketAddr,
    source: Option<IpAddr>,
    uri: Uri,
    /// The connection in use and its number; None before the first and after a failure.
    /// An async lock held across the connect on purpose: requests that find no connection
    /// wait for the one being made, as a browser's requests wait for its one connection,
    /// instead of each opening its own.
    #[allow(clippy::disallowed_types)]
    current: tokio::sync::Mutex<Option<(u64, h2::client::SendRequest<Bytes>)>>,
    connects: AtomicU64,
}

impl H2Session {
    fn new(config: &SteadyConfig) -> Self {
        Self {
            addr: config.target.addr,
            source: config.source,
            uri: config.target.absolute_uri(),
            #[allow(clippy::disallowed_types)]
            current: tokio::sync::Mutex::new(None),
            connects: AtomicU64::new(0),
        }
    }

    async fn send(&self) -> Result<StatusCode, ExchangeError> {
        let (generation, sender) = self.sender().await?;
        let outcome = self.exchange(sender).await;
        if outcome.as_ref().is_err_and(|error| !error.is_reset()) {
            // Anything but a reset of this one stream: the connection is not to be trusted.
            self.forget(generation).await;
        }
        let status = outcome.map_err(|error| ExchangeError::Io(io::Error::other(error)))?;
        if status.is_success() {
            Ok(status)
        } else {
            Err(ExchangeError::Status(status))
        }
    }

    async fn exchange(
        &self,
        sender: h2::client::SendRequest<Bytes>,
    ) -> Result<StatusCode, h2::Error> {
        let mut sender = sender.ready().await?;
        let request = Request::get(self.uri.clone())
            .body(())
            .expect("a GET of a valid URI is a valid request");
        let (response, _) = sender.send_request(request, true)?;
        let response = response.await?;
        let status = response.status();
        let mut body = response.into_body();
        while let Some(data) = body.data().await {
            let data = data?;
            // Read, so the window opens again: this client is the well-behaved one.
            body.flow_control().release_capacity(data.len())?;
        }
        Ok(status)
    }

    /// The connection in use, or a new one.
    async fn sender(&self) -> Result<(u64, h2::client::SendRequest<Bytes>), ExchangeError> {
        let mut current = self.current.lock().await;
        if let Some((generation, sender)) = current.as_ref() {
            return Ok((*generation, sender.clone()));
        }
        let connect = async {
            let stream = exchange::connect_tcp_from(self.addr, self.source).await?;
            h2::client::handshake(stream)
                .await
                .map_err(|error| ExchangeError::Io(io::Error::other(error)))
        };
        let (sender, connection) = tokio::time::timeout(H2_CONNECT_TIMEOUT, connect)
            .await
            .unwrap_or(Err(ExchangeError::Timeout))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let generation = self.connects.fetch_add(1, Ordering::Relaxed) + 1;
        *current = Some((generation, sender.clone()));
        Ok((generation, sender))
    }

    /// Drops connection `generation` after a failure on it, unless another replaced it.
    async fn forget(&self, generation: u64) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|(current, _)| *current == generation) {
            *current = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SteadyConfig {
        SteadyConfig {
            target: Target::parse("http://127.0.0.1:8080/tiny").expect("valid"),
            rate: 10.0,
            duration: Duration::from_secs(1),
            deadline: Duration::from_secs(5),
            source: None,
            protocol: Protocol::Http1,
        }
    }

    #[test]
    fn report_sorts_outcomes_into_statuses_timeouts_and_errors() {
        let ms = Duration::from_millis;
        let requests = vec![
            (0, ms(0), Ok(StatusCode::OK), ms(2)),
            (1, ms(100), Err(ExchangeError::Status(StatusCode::SERVICE_UNAVAILABLE)), ms(3)),
            (2, ms(200), Err(ExchangeError::Timeout), ms(5_000)),
            (3, ms(300), Err(ExchangeError::Io(io::ErrorKind::ConnectionReset.into())), ms(1)),
            (4, ms(400), Ok(StatusCode::OK), ms(4)),
        ];
        let report = report(&config(), 2, requests);
        assert_eq!((report.sent, report.ok, report.timeouts), (5, 2, 1));
        assert_eq!(report.statuses, BTreeMap::from([(200, 2), (503, 1)]));
        assert_eq!(report.errors, BTreeMap::from([("io", 1)]));
        assert_eq!(report.latency_us.max, 4_000, "answered requests only");
        assert_eq!(report.requests[1].status, Some(503));
        assert_eq!(report.requests[2].error, Some(ErrorKind::Timeout));
        assert_eq!(report.requests[2].latency_us, None);
        assert_eq!(report.requests[3].latency_us, Some(1_000));
        assert_eq!(report.first_errors.len(), 2);
    }
}
