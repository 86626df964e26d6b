//! A backend's HTTP/2 connections: the protocol around the pool's shared connections
//! (`holdfast_pool::SharedPool`). Each connection carries streams up to the origin's
//! `SETTINGS_MAX_CONCURRENT_STREAMS`, its capacity; the pool packs streams onto the
//! oldest connection with room, opens another only when all are full and the backend's
//! `max_connections` (counted with its HTTP/1.1 connections) allows it, drains
//! connections that reached a limit, and closes idle ones. This file makes the
//! connections: the handshake, the origin's SETTINGS, pings, GOAWAY seen on a
//! connection, and the `SendRequest` a stream is sent on.
//!
//! A connection that received GOAWAY, reached `max_requests` or `max_lifetime`, or
//! failed a ping takes no new streams and closes once its streams end. Streams the
//! origin refused (GOAWAY above its last stream, `REFUSED_STREAM`) never reached it;
//! `proxy` sends them again.
//!
//! Over TLS with ALPN offering both versions (`protocol = "auto"`), the first
//! connection tells what the backend speaks: one that negotiated HTTP/1.1 is handed
//! back ([`Leased::Http1`]) with its slot, for the HTTP/1.1 pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast_pool::{Claim, ClaimError, Exhausted, Found, Opening, Shareable, SharedPool};
use tokio::time::Instant;

use super::connect::{self, ConnectError, Dial, OriginConn, TlsCounts};
use super::lease::LeaseError;
use super::settings::Speaks;
use crate::http2::origin::{self as h2_conn, SendRequest};
use crate::net::Stream;

/// Streams a new connection is assumed to take before the origin's SETTINGS say: RFC
/// 9113 recommends servers allow at least 100.
pub(super) const ASSUMED_STREAMS: usize = 100;
/// Streams counted per connection at most, whatever the origin allows.
const MAX_STREAMS: usize = 10_000;
/// Flow-control windows holdfast grants an origin: per stream, and for the connection.
/// They bound what one connection buffers of responses not yet taken by clients.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;
/// Response header list bytes accepted from an origin.
const MAX_HEADER_LIST: u32 = 256 * 1024;

/// A backend's HTTP/2 connections and the connects that open them.
pub struct H2Conns {
    /// How connections are made: `speaks` is `H2` or `Either`.
    dial: Dial,
    ping: Option<Duration>,
    streams: SharedPool<H2Conn>,
    /// The latest failed connect, for the requests that waited on it.
    failure: Mutex<Option<ConnectError>>,
    stats: Arc<H2Stats>,
}

/// One HTTP/2 connection to the origin (its driver runs in a task of its own, see
/// [`h2_conn`]).
pub struct H2Conn {
    send: SendRequest,
}

/// Counters of a backend's HTTP/2 streams that the pool does not keep.
#[derive(Debug, Default)]
pub struct H2Stats {
    /// Streams refused by the origin (GOAWAY, `REFUSED_STREAM`) and sent again.
    pub retried: AtomicU64,
    pub goaways: AtomicU64,
}

/// A snapshot for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct H2Snapshot {
    pub open: usize,
    pub active_streams: usize,
    pub opened: u64,
    pub streams: u64,
    pub retried: u64,
    pub goaways: u64,
}

/// One stream's claim on a connection; the stream's slot frees when it drops.
pub struct StreamLease {
    claim: Claim<H2Conn>,
    stats: Arc<H2Stats>,
}

/// What a lease found.
pub enum Leased {
    Stream(StreamLease),
    /// ALPN picked HTTP/1.1: the backend speaks HTTP/1.1, and this is its first
    /// connection, with the slot it was opened in.
    Http1(OriginConn, Opening<H2Conn>),
}

/// A connect's result.
enum Opened {
    H2(H2Conn),
    Http1(OriginConn),
}

impl H2Conns {
    /// No connections yet; connections are made as `dial` says (its `speaks` is `H2`
    /// or `Either`) and kept in `streams`, which shares its bound with the backend's
    /// HTTP/1.1 pool.
    pub(super) fn new(dial: Dial, ping: Option<Duration>, streams: SharedPool<H2Conn>) -> Self {
        let (failure, stats) = (Mutex::new(None), Arc::default());
        H2Conns { dial, ping, streams, failure, stats }
    }

    /// A stream on a connection with room, opening one when all are full and the
    /// limit allows, else waiting (up to `queue_timeout`) for room.
    pub async fn lease(
        &self,
        connect_timeout: Duration,
        tls: &TlsCounts,
    ) -> Result<Leased, LeaseError> {
        let mut seek = self.streams.seek();
        loop {
            let found = seek.next().await.map_err(|e| self.claim_error(e))?;
            let opening = match found {
                Found::Claim(claim) => {
                    let stats = Arc::clone(&self.stats);
                    return Ok(Leased::Stream(StreamLease { claim, stats }));
                }
                Found::Open(opening) => opening,
            };
            // Boxed: connecting is rare, and its state would otherwise make every
            // lease's future larger.
            match Box::pin(self.open(connect_timeout, tls)).await {
                Ok(Opened::H2(conn)) => opening.adopt(conn),
                Ok(Opened::Http1(conn)) => return Ok(Leased::Http1(conn, opening)),
                Err(e) => {
                    *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.duplicate());
                    opening.failed();
                    return Err(LeaseError::Connect(e));
                }
            }
        }
    }

    /// The error a request that found no stream gets.
    fn claim_error(&self, e: ClaimError) -> LeaseError {
        let max_connections = self.streams.config().max_connections;
        match e {
            ClaimError::Exhausted(Exhausted::QueueTimeout { waited }) => {
                LeaseError::QueueTimeout { max_connections, waited }
            }
            ClaimError::Exhausted(
                Exhausted::QueueFull { waiting } | Exhausted::SecondClassFull { waiting },
            ) => LeaseError::QueueFull { max_connections, waiting },
            ClaimError::Retired => LeaseError::Connect(ConnectError::Retired),
            ClaimError::OpenFailed => {
                let failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
                // A failed open records its error before the pool hears of it.
                let why = failure.as_ref().map_or(ConnectError::Retired, ConnectError::duplicate);
                LeaseError::Connect(why)
            }
        }
    }

    /// Whether these connections can serve a group configured as `config`, made as
    /// `dial` says. (The pool settings are the HTTP/1.1 pool's, checked there.)
    pub(super) fn fits(&self, dial: &Dial, config: &super::UpstreamConfig) -> bool {
        self.dial == *dial && self.ping == config.h2_ping_interval && !self.streams.is_retired()
    }

    /// Closes idle connections past `idle_timeout`, and ended ones.
    pub fn evict_expired(&self, now: Instant) {
        self.streams.evict_expired(now);
    }

    /// Closes the connections that carry no stream now, counted under `reason`.
    pub fn clear_for(&self, reason: holdfast_pool::CloseReason) {
        self.streams.clear_for(reason);
    }

    /// Takes no new streams; connections close as their streams end.
    pub fn retire(&self) {
        self.streams.retire();
    }

    /// The counts now.
    pub fn snapshot(&self) -> H2Snapshot {
        let pool = self.streams.snapshot();
        H2Snapshot {
            open: pool.connections,
            active_streams: pool.active_requests,
            opened: pool.opened,
            streams: pool.requests,
            retried: self.stats.retried.load(Ordering::Relaxed),
            goaways: self.stats.goaways.load(Ordering::Relaxed),
        }
    }

    /// Whether a connection is idle, for the balancer's tie-break.
    pub fn has_idle(&self) -> bool {
        self.streams.has_idle()
    }

    /// Opens a connection and its HTTP/2 session within `timeout`.
    async fn open(&self, timeout: Duration, tls: &TlsCounts) -> Result<Opened, ConnectError> {
        let started = Instant::now();
        let conn = connect::connect(&self.dial, timeout, tls).await?;
        if self.dial.speaks == Speaks::Either && !negotiated_h2(&conn.stream) {
            return Ok(Opened::Http1(conn));
        }
        let left = timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, self.handshake(conn.stream)).await {
            Ok(result) => result.map(Opened::H2),
            Err(_) => Err(ConnectError::Timeout(timeout)),
        }
    }

    /// The HTTP/2 preface both ways, and the origin's first SETTINGS (what it allows).
    async fn handshake(&self, stream: Stream) -> Result<H2Conn, ConnectError> {
        let settings = h2_conn::Settings {
            stream_window: STREAM_WINDOW,
            connection_window: CONNECTION_WINDOW,
            max_header_list_size: MAX_HEADER_LIST,
        };
        let send = h2_conn::start(stream, &settings, self.ping);
        let ready = send.ready().await;
        // A graceful GOAWAY before the session was ready: the origin is going away, and
        // the connection never took a stream. (Adopted, it would be dropped at once and
        // another opened, without end if the origin always does this.)
        if send.went_away() {
            return Err(ConnectError::WentAway);
        }
        ready.map_err(|e| ConnectError::Http2(e.to_string()))?;
        Ok(H2Conn { send })
    }
}

/// Whether the TLS session on `stream` negotiated `h2`.
fn negotiated_h2(stream: &Stream) -> bool {
    stream.tls().is_some_and(|t| t.facts().alpn == "h2")
}

/// What the pool needs of an HTTP/2 connection: whether it takes new streams, and how
/// many at once.
impl Shareable for H2Conn {
    /// Open, and the session takes streams (a GOAWAY received makes it refuse them).
    fn is_open(&self) -> bool {
        self.send.is_open()
    }

    /// Streams it may carry at once, as the origin's SETTINGS say.
    fn capacity(&self) -> usize {
        self.send.current_max_send_streams().clamp(1, MAX_STREAMS)
    }
}

impl StreamLease {
    /// A handle to send the request on.
    pub fn sender(&self) -> SendRequest {
        self.claim.get().send.clone()
    }

    /// Whether the connection carried a stream before this one.
    pub fn is_reused(&self) -> bool {
        self.claim.is_reused()
    }

    /// The origin refused the stream by GOAWAY: the connection takes no more, and for
    /// [`holdfast_pool::LOWERED_CAPACITY_MEMORY`] new ones carry no more streams than
    /// it answered.
    pub fn went_away(&self) {
        if self.claim.peer_stopped() {
            self.stats.goaways.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The origin answered the stream (its response head came).
    pub fn answered(&self) {
        self.claim.answered();
    }

    /// The stream is sent again on another connection.
    pub fn retried(&self) {
        self.stats.retried.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use holdfast_pool::{Pool, PoolConfig};
    use std::sync::atomic::AtomicUsize;
    use tokio::net::TcpListener;

    /// An h2c server allowing `max_streams` at once that answers every stream after
    /// `delay`; returns its address and its count of accepted connections.
    async fn server(max_streams: u32, delay: Duration) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut conn = h2::server::Builder::new()
                        .max_concurrent_streams(max_streams)
                        .handshake::<_, Bytes>(tcp)
                        .await
                        .unwrap();
                    while let Some(Ok((_, mut respond))) = conn.accept().await {
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = respond.send_response(http::Response::new(()), true);
                        });
                    }
                });
            }
        });
        (addr, accepted)
    }

    fn pool(addr: std::net::SocketAddr) -> H2Conns {
        let dial = Dial { addr, source: None, tls: None, speaks: Speaks::H2 };
        let pool = Pool::<OriginConn>::new(PoolConfig::default());
        H2Conns::new(dial, None, pool.shared(ASSUMED_STREAMS))
    }

    async fn one_request(pool: &H2Conns) {
        let Ok(Leased::Stream(lease)) =
            pool.lease(Duration::from_secs(5), &TlsCounts::default()).await
        else {
            panic!("no stream");
        };
        let request = http::Request::get("http://origin/").body(()).unwrap();
        let head = crate::http2::encode::OriginHead::of_request(&request);
        let (response, _) = lease.sender().send_request(&head, true).unwrap();
        response.await.unwrap();
        lease.answered();
    }

    #[tokio::test]
    async fn streams_fill_connections_up_to_the_origins_settings_before_another_opens() {
        let (addr, accepted) = server(10, Duration::from_millis(100)).await;
        let pool = Arc::new(pool(addr));
        let mut requests = tokio::task::JoinSet::new();
        for _ in 0..100 {
            let pool = Arc::clone(&pool);
            requests.spawn(async move { one_request(&pool).await });
        }
        while let Some(done) = requests.join_next().await {
            done.unwrap();
        }
        // 100 at once, 10 streams each: 10 connections, no more.
        assert_eq!(accepted.load(Ordering::SeqCst), 10);
        assert_eq!(pool.snapshot().open, 10);
        // One at a time: the first connection carries them all.
        for _ in 0..20 {
            one_request(&pool).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 10);
    }
}
