//! The benchmark origin: answers HTTP/1.1 from static bodies (or filler made on the fly) as
//! fast as it can, so the proxy in front of it is what a benchmark measures.
//!
//! Routes (method ignored): `/tiny` (100 bytes), `/50k` (51,200 bytes), `/bytes?n=N` (N
//! bytes, N ≤ 1 GiB, made on the fly in 64 KiB frames), `/slow?ms=N` (the tiny body after N
//! ms, N ≤ 60,000), `/gate?n=N&ms=M` (the tiny body once N requests wait at the gate
//! together, or after M ms), `/__origin/stats` (JSON counters), anything else: tiny.
//! With [`OriginStats::limit_workers`], at most N responses are in progress at once, as in
//! an app server with N sync workers (see `workers.rs`).
//! Connections are kept alive with no idle timeout: the origin never closes one first, so
//! every close a benchmark sees comes from the proxy. Accepting, counting connections and
//! serving them with hyper is `holdfast-origin`'s job, shared with holdfast's demo and
//! tests; this file adds the routes and the request count. [`serve_tls`] serves the same
//! routes over TLS and also counts handshakes (see `tls.rs`); [`serve_h2c`] serves them
//! over HTTP/2 with prior knowledge as well as HTTP/1.1 and counts what went over HTTP/2
//! (see `h2c.rs`), and answers gRPC calls there with an echo (see `grpc.rs`). [`serve_many`] serves them on several listeners at once and counts per
//! listener (see `listeners.rs`).

mod body;
mod grpc;
mod h2c;
mod listeners;
mod tls;
mod workers;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use holdfast_origin::{Connections, Options, Origin};
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use body::{OriginBody, CHUNK_BYTES};
pub use grpc::CONTENT_TYPE_GRPC;
pub use h2c::{serve as serve_h2c, H2Snapshot, Options as H2cOptions, DEFAULT_MAX_STREAMS};
/// Binds `addr` with a deep accept queue (the kernel caps it at `net.core.somaxconn`), so
/// a burst of thousands of connects is not dropped at the listen queue.
pub use holdfast_origin::bind;
pub use listeners::{serve_many, ListenerSnapshot, Listeners};
pub use tls::{serve as serve_tls, HandshakeSnapshot, HANDSHAKE_TIMEOUT};
pub use workers::{InProgress, Responding, Workers, WorkersSnapshot};

/// Body of `/tiny`, `/slow` and unknown paths.
pub const TINY_BODY_BYTES: usize = 100;
/// Body of `/50k`.
pub const LARGE_BODY_BYTES: usize = 51_200;
/// Upper bound of `/bytes?n=N`; larger values are clamped to it.
pub const MAX_BYTES: u64 = 1 << 30;
/// Upper bound of `/slow?ms=N` and of the wait at `/gate`; larger values are clamped to it.
pub const MAX_SLOW: Duration = Duration::from_secs(60);
/// How long a request waits at `/gate` when the query names no `ms`.
pub const DEFAULT_GATE_WAIT: Duration = Duration::from_secs(30);

static TINY_BODY: [u8; TINY_BODY_BYTES] = [b'a'; TINY_BODY_BYTES];
static LARGE_BODY: [u8; LARGE_BODY_BYTES] = [b'b'; LARGE_BODY_BYTES];

/// What the origin counted since it started, in plain atomics.
#[derive(Debug, Default)]
pub struct OriginStats {
    /// TCP connections, counted by holdfast-origin (the cleartext origin) or by the TLS
    /// and h2c accept loops, in whichever mode the origin serves.
    connections: Arc<Connections>,
    requests: AtomicU64,
    /// Handshakes of the TLS origin, set when [`serve_tls`] starts.
    tls: OnceLock<tls::TlsCounts>,
    /// HTTP/2 counts of the h2c origin, set when [`serve_h2c`] starts.
    h2c: OnceLock<h2c::H2Counts>,
    /// The workers, when their number is limited ([`OriginStats::limit_workers`]).
    workers: OnceLock<Workers>,
    /// Responses in progress now (see `workers.rs`).
    in_progress: InProgress,
}

/// Counts an accepted connection closed in the origin's counts when dropped, however its
/// task ends (the TLS and h2c accept loops; holdfast-origin counts the cleartext ones).
struct ClosedOnDrop(Arc<Connections>);

impl Drop for ClosedOnDrop {
    fn drop(&mut self) {
        self.0.count_closed();
    }
}

/// One reading of [`OriginStats`]; also the JSON body of `/__origin/stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StatsSnapshot {
    /// TCP connections accepted since start.
    pub connections: u64,
    /// Connections open now.
    pub open: u64,
    /// Requests answered since start, `/__origin/stats` not included.
    pub requests: u64,
    /// Responses in progress now: started and their last frame not yet taken (a client
    /// that does not read holds one), `/__origin/stats` not included.
    #[serde(default)]
    pub in_progress: u64,
    /// Failed `accept` calls (EMFILE when the fd limit is reached).
    pub accept_errors: u64,
    /// TLS handshakes, in TLS mode only (absent from the JSON otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<HandshakeSnapshot>,
    /// What went over HTTP/2, in h2c mode only (absent from the JSON otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2: Option<H2Snapshot>,
    /// Each listener's counts, when the origin serves several (absent from the JSON
    /// otherwise); the fields above are then their totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listeners: Option<Vec<ListenerSnapshot>>,
    /// The workers, when their number is limited (absent from the JSON otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersSnapshot>,
}

impl OriginStats {
    /// From now on at most `limit` responses are in progress at once; the rest wait.
    /// Returns false (and changes nothing) if the limit was already set.
    pub fn limit_workers(&self, limit: NonZeroUsize) -> bool {
        self.workers.set(Workers::new(limit)).is_ok()
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            connections: self.connections.accepted(),
            open: self.connections.open(),
            requests: self.requests.load(Ordering::Relaxed),
            in_progress: self.in_progress.now(),
            accept_errors: self.connections.accept_errors(),
            tls: self.tls.get().map(tls::TlsCounts::handshakes),
            h2: self.h2c.get().map(h2c::H2Counts::h2),
            listeners: None,
            workers: self.workers.get().map(Workers::snapshot),
        }
    }
}

/// Accepts connections on `listener` and serves them until `shutdown` resolves.
///
/// Connections already open keep being served by their own tasks after this returns; they
/// end with the runtime (the binary exits right after).
pub async fn serve(
    listener: TcpListener,
    stats: Arc<OriginStats>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let gate = Arc::new(Gate::new());
    let connections = Arc::clone(&stats.connections);
    // The default options: no idle timeout (a connection lives until the client closes
    // it) and no kill switch, which would cost a lock per wake-up of each connection.
    let origin = Origin::serve(listener, connections, Options::default(), move |_| {
        let (stats, gate) = (Arc::clone(&stats), Arc::clone(&gate));
        service_fn(move |request| respond(request, Arc::clone(&stats), Arc::clone(&gate)))
    })?;
    shutdown.await;
    origin.stop();
    Ok(())
}

async fn respond(
    request: Request<Incoming>,
    stats: Arc<OriginStats>,
    gate: Arc<Gate>,
) -> Result<Response<OriginBody>, Infallible> {
    let uri = request.uri();
    if uri.path() == "/__origin/stats" {
        return Ok(stats_response(&stats));
    }
    let worker = match stats.workers.get() {
        Some(workers) => Some(workers.acquire().await),
        None => None,
    };
    let responding = stats.in_progress.start(worker);
    let response = match uri.path() {
        "/50k" => body_response(&LARGE_BODY, HeaderValue::from_static("51200")),
        "/bytes" => bytes_response(bytes_length(uri.query())),
        "/slow" => {
            tokio::time::sleep(slow_delay(uri.query())).await;
            tiny_response()
        }
        "/gate" => {
            let (count, wait) = gate_params(uri.query());
            gate.pass(count, wait).await;
            tiny_response()
        }
        _ => tiny_response(),
    };
    stats.requests.fetch_add(1, Ordering::Relaxed);
    Ok(response.map(|body| body.holding(responding)))
}

/// The length `/bytes?n=N` asks for: N, at most [`MAX_BYTES`]; 0 if absent.
pub fn bytes_length(query: Option<&str>) -> u64 {
    query_number(query, "n").unwrap_or(0).min(MAX_BYTES)
}

/// The delay `/slow?ms=N` asks for: N milliseconds, at most [`MAX_SLOW`]; 0 if absent.
pub fn slow_delay(query: Option<&str>) -> Duration {
    let ms = query_number(query, "ms").unwrap_or(0);
    Duration::from_millis(ms).min(MAX_SLOW)
}

/// What `/gate?n=N&ms=M` asks for: N requests together (at least 1; 1 if absent), waiting
/// at most M ms ([`DEFAULT_GATE_WAIT`] if absent, at most [`MAX_SLOW`]).
pub fn gate_params(query: Option<&str>) -> (u64, Duration) {
    let count = query_number(query, "n").unwrap_or(1).max(1);
    let wait = query_number(query, "ms").map_or(DEFAULT_GATE_WAIT, Duration::from_millis);
    (count, wait.min(MAX_SLOW))
}

fn query_number(query: Option<&str>, key: &str) -> Option<u64> {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
        .and_then(|value| value.parse::<u64>().ok())
}

/// The barrier behind `/gate`: requests wait until `n` of them are waiting together, then
/// all go at once. A burst through a proxy thus has every request in flight at the same
/// moment however slowly its connections open, and is answered right after the last one
/// arrives (a fixed `/slow` delay must guess how long the connects take).
///
/// A request that waited `ms` without the gate opening leaves it and is answered anyway.
#[derive(Debug)]
struct Gate {
    /// Requests waiting now for the next opening.
    waiting: Mutex<u64>,
    /// How many times the gate has opened; waiters watch it change.
    openings: watch::Sender<u64>,
}

impl Gate {
    fn new() -> Self {
        Gate { waiting: Mutex::new(0), openings: watch::Sender::new(0) }
    }

    /// Returns once `count` requests are waiting together (this one included), or after
    /// `wait`.
    async fn pass(&self, count: u64, wait: Duration) {
        let mut opened = {
            let mut waiting = self.lock();
            *waiting += 1;
            if *waiting >= count {
                *waiting = 0;
                self.openings.send_modify(|n| *n += 1);
                return;
            }
            // Subscribed under the lock: the opening this request waits for comes later.
            self.openings.subscribe()
        };
        let _leave = GateLeave { gate: self, seen: *opened.borrow() };
        let _ = tokio::time::timeout(wait, opened.changed()).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.waiting.lock().expect("the gate lock is never poisoned")
    }
}

/// Takes a request off the waiting count if it leaves before the gate opened: its wait
/// ran out, or its client went away and the response future was dropped.
struct GateLeave<'a> {
    gate: &'a Gate,
    seen: u64,
}

impl Drop for GateLeave<'_> {
    fn drop(&mut self) {
        let mut waiting = self.gate.lock();
        if *self.gate.openings.borrow() == self.seen {
            *waiting = waiting.saturating_sub(1);
        }
    }
}

fn tiny_response() -> Response<OriginBody> {
    body_response(&TINY_BODY, HeaderValue::from_static("100"))
}

fn body_response(body: &'static [u8], length: HeaderValue) -> Response<OriginBody> {
    let mut response = Response::new(OriginBody::once(Bytes::from_static(body)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(CONTENT_LENGTH, length);
    response
}

fn bytes_response(length: u64) -> Response<OriginBody> {
    let mut response = Response::new(OriginBody::repeat(length));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    response
}

fn stats_response(stats: &OriginStats) -> Response<OriginBody> {
    let json = serde_json::to_vec(&stats.snapshot()).expect("a struct of integers serializes");
    let mut response = Response::new(OriginBody::once(Bytes::from(json)));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_delay_reads_ms_and_clamps_to_a_minute() {
        assert_eq!(slow_delay(Some("ms=250")), Duration::from_millis(250));
        assert_eq!(slow_delay(Some("x=1&ms=5")), Duration::from_millis(5));
        assert_eq!(slow_delay(Some("ms=999999")), MAX_SLOW);
        assert_eq!(slow_delay(Some("ms=abc")), Duration::ZERO);
        assert_eq!(slow_delay(None), Duration::ZERO);
    }

    #[test]
    fn gate_params_read_n_and_ms_with_defaults_and_clamps() {
        assert_eq!(gate_params(Some("n=9900&ms=5000")), (9900, Duration::from_millis(5000)));
        assert_eq!(gate_params(Some("ms=999999&n=3")), (3, MAX_SLOW));
        assert_eq!(gate_params(Some("n=0")), (1, DEFAULT_GATE_WAIT));
        assert_eq!(gate_params(Some("nn=5")), (1, DEFAULT_GATE_WAIT));
        assert_eq!(gate_params(None), (1, DEFAULT_GATE_WAIT));
    }

    #[tokio::test(start_paused = true)]
    async fn gate_opens_for_everyone_when_the_last_one_arrives() {
        let gate = Arc::new(Gate::new());
        let wait = Duration::from_secs(30);
        let early: Vec<_> = (0..2)
            .map(|_| {
                tokio::spawn({
                    let gate = Arc::clone(&gate);
                    async move { gate.pass(3, wait).await }
                })
            })
            .collect();
        tokio::task::yield_now().await;
        let started = tokio::time::Instant::now();
        gate.pass(3, wait).await;
        for waiter in early {
            waiter.await.expect("waiter");
        }
        assert_eq!(started.elapsed(), Duration::ZERO, "no one waited for the timeout");
        assert_eq!(*gate.lock(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn gate_lets_a_lone_request_go_after_its_wait() {
        let gate = Gate::new();
        let started = tokio::time::Instant::now();
        gate.pass(2, Duration::from_millis(500)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(500));
        assert_eq!(*gate.lock(), 0, "it left the gate");
    }

    #[test]
    fn bytes_length_reads_n_and_clamps_to_a_gibibyte() {
        assert_eq!(bytes_length(Some("n=10485760")), 10_485_760);
        assert_eq!(bytes_length(Some("n=99999999999")), MAX_BYTES);
        assert_eq!(bytes_length(Some("n=x")), 0);
        assert_eq!(bytes_length(None), 0);
        let response = bytes_response(1_000);
        assert_eq!(response.headers()[CONTENT_LENGTH], "1000");
    }

    #[test]
    fn bodies_have_the_advertised_sizes() {
        assert_eq!(tiny_response().headers()[CONTENT_LENGTH], TINY_BODY_BYTES.to_string());
        let large = body_response(&LARGE_BODY, HeaderValue::from_static("51200"));
        assert_eq!(large.headers()[CONTENT_LENGTH], LARGE_BODY_BYTES.to_string());
    }
}
