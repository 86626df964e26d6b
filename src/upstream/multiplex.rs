//! A backend's HTTP/2 connections: each carries many requests at once, as streams, up
//! to the origin's `SETTINGS_MAX_CONCURRENT_STREAMS`. A stream goes on the oldest
//! connection with room, so load packs onto few connections and the others go idle;
//! another connection opens only when every one is full (and `max_connections` allows
//! it), and requests that arrive while one is opening wait for it rather than open
//! their own. Connections are bounded by demand: only a request that finds every
//! connection full opens one, so a backend has as many as its peak of concurrent
//! streams needs, and a connection with no stream for `idle_timeout` closes.
//!
//! A connection that received GOAWAY, reached `max_requests` or `max_lifetime`, or
//! failed a ping takes no new streams and closes once its streams end. Streams the
//! origin refused (GOAWAY above its last stream, `REFUSED_STREAM`) never reached it;
//! `proxy` sends them again.
//!
//! Over TLS with ALPN offering both versions (`protocol = "auto"`), the first
//! connection tells what the backend speaks: one that negotiated HTTP/1.1 is handed
//! back ([`Leased::Http1`]) for the HTTP/1.1 pool.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use holdfast_pool::PoolConfig;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::connect::{self, ConnectError, Dial, OriginConn, TlsCounts};
use super::lease::LeaseError;
use super::settings::Speaks;
use crate::net::Stream;

/// Streams a new connection is assumed to take before the origin's SETTINGS say: RFC
/// 9113 recommends servers allow at least 100.
const ASSUMED_STREAMS: usize = 100;
/// Streams counted per connection at most, whatever the origin allows.
const MAX_STREAMS: usize = 10_000;
/// Flow-control windows holdfast grants an origin: per stream, and for the connection.
/// They bound what one connection buffers of responses not yet taken by clients.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;
/// Response header list bytes accepted from an origin.
const MAX_HEADER_LIST: u32 = 256 * 1024;

/// A backend's HTTP/2 connections and the connects that open them.
pub struct Multiplexed {
    shared: Arc<Shared>,
}

struct Shared {
    /// How connections are made: `speaks` is `H2` or `Either`.
    dial: Dial,
    config: PoolConfig,
    ping: Option<Duration>,
    state: Mutex<State>,
    /// Wakes requests waiting for room: a stream ended, a connection opened or failed.
    changed: Notify,
    stats: MuxStats,
}

#[derive(Default)]
struct State {
    conns: Vec<Entry>,
    /// Connects in progress.
    connecting: usize,
    /// Requests looking for a stream now.
    wanting: usize,
    /// Streams the next connection is expected to take: the last origin's limit.
    expected: usize,
    /// Streams the origin answered on a connection before it sent GOAWAY, and when:
    /// for a while, connections carry no more than that each (an origin that closes
    /// connections after N requests would refuse the rest).
    goaway_after: Option<(u64, Instant)>,
    retired: bool,
    /// The latest failed connect, by number, so the requests that waited on it fail
    /// with it rather than each try again.
    failure: Option<(u64, ConnectError)>,
    connects: u64,
}

struct Entry {
    conn: Arc<Conn>,
    /// Streams open on it now.
    active: usize,
    /// Streams it has carried.
    streams: u64,
    opened: Instant,
    idle_since: Instant,
}

/// One HTTP/2 connection to the origin.
pub struct Conn {
    id: u64,
    send: SendRequest<Bytes>,
    /// The connection ended (its driver returned), or a ping went unanswered.
    closed: Arc<AtomicBool>,
    /// It takes no new streams: GOAWAY, or a limit reached.
    draining: AtomicBool,
    /// Streams the origin answered on it.
    answered: AtomicU64,
}

/// Counters of a backend's HTTP/2 connections, for `/metrics`.
#[derive(Debug, Default)]
pub struct MuxStats {
    pub opened: AtomicU64,
    pub streams: AtomicU64,
    /// Streams refused by the origin (GOAWAY, `REFUSED_STREAM`) and sent again.
    pub retried: AtomicU64,
    pub goaways: AtomicU64,
}

/// A snapshot for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct MuxSnapshot {
    pub open: usize,
    pub active_streams: usize,
    pub opened: u64,
    pub streams: u64,
    pub retried: u64,
    pub goaways: u64,
}

/// One stream's claim on a connection; the stream's slot frees when it drops.
pub struct MuxLease {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
    reused: bool,
}

/// What a lease found.
pub enum Leased {
    Stream(MuxLease),
    /// ALPN picked HTTP/1.1: the backend speaks HTTP/1.1, and this is its first
    /// connection.
    Http1(OriginConn),
}

impl Multiplexed {
    /// No connections yet; connections are made as `dial` says (its `speaks` is `H2`
    /// or `Either`).
    pub(super) fn new(dial: Dial, config: PoolConfig, ping: Option<Duration>) -> Multiplexed {
        let state = State { expected: ASSUMED_STREAMS, ..State::default() };
        let shared = Shared {
            dial,
            config,
            ping,
            state: Mutex::new(state),
            changed: Notify::new(),
            stats: MuxStats::default(),
        };
        Multiplexed { shared: Arc::new(shared) }
    }

    /// A stream on a connection with room, opening one when all are full and the
    /// limit allows, else waiting (up to `queue_timeout`) for room.
    pub async fn lease(
        &self,
        connect_timeout: Duration,
        tls: &TlsCounts,
    ) -> Result<Leased, LeaseError> {
        let shared = &self.shared;
        let deadline = Instant::now() + shared.config.queue_timeout;
        let mut wanting = Wanting { shared, counted: false };
        let mut seen_failure = shared.lock().connects;
        loop {
            let changed = shared.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let open = {
                let mut state = shared.lock();
                if let Some(lease) = shared.try_stream(&mut state, Instant::now()) {
                    wanting.served(&mut state);
                    return Ok(Leased::Stream(lease));
                }
                if state.retired {
                    return Err(LeaseError::Connect(ConnectError::Retired));
                }
                if let Some((n, why)) = &state.failure {
                    if *n > seen_failure {
                        return Err(LeaseError::Connect(why.duplicate()));
                    }
                }
                wanting.count(&mut state);
                let per_conn = state.per_connection(Instant::now()).min(state.expected);
                let room = state.connecting.saturating_mul(per_conn.max(1));
                let max = shared.config.max_connections;
                let below_max = max == 0 || state.conns.len() + state.connecting < max;
                if below_max && room < state.wanting {
                    state.connecting += 1;
                    state.connects += 1;
                    seen_failure = state.connects;
                    true
                } else {
                    if !below_max && state.wanting > shared.config.queue_size {
                        return Err(LeaseError::QueueFull {
                            max_connections: max,
                            waiting: state.wanting,
                        });
                    }
                    false
                }
            };
            if open {
                // Boxed: connecting is rare, and its state would otherwise make
                // every lease's future larger.
                let opening = Box::pin(shared.open(connect_timeout, tls));
                match opening.await {
                    Ok(Opened::H2(conn)) => shared.adopt(conn),
                    Ok(Opened::Http1(conn)) => {
                        shared.lock().connecting -= 1;
                        shared.changed.notify_waiters();
                        return Ok(Leased::Http1(conn));
                    }
                    Err(e) => {
                        let mut state = shared.lock();
                        state.connecting -= 1;
                        state.failure = Some((state.connects, e.duplicate()));
                        drop(state);
                        shared.changed.notify_waiters();
                        return Err(LeaseError::Connect(e));
                    }
                }
                continue;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let max_connections = shared.config.max_connections;
                let waited = shared.config.queue_timeout;
                return Err(LeaseError::QueueTimeout { max_connections, waited });
            }
        }
    }

    /// Whether these connections can serve a group configured as `config`, made as
    /// `dial` says.
    pub(super) fn fits(&self, dial: &Dial, config: &super::UpstreamConfig) -> bool {
        let shared = &self.shared;
        shared.dial == *dial
            && shared.config == config.pool
            && shared.ping == config.h2_ping_interval
            && !shared.lock().retired
    }

    /// Closes idle connections past `idle_timeout`, and forgets ended ones.
    pub fn evict_expired(&self, now: Instant) {
        let mut state = self.shared.lock();
        let idle_timeout = self.shared.config.idle_timeout;
        state.conns.retain(|e| {
            let expired = e.active == 0 && now.duration_since(e.idle_since) >= idle_timeout;
            !expired && !e.conn.closed.load(Ordering::Acquire)
        });
    }

    /// Takes no new streams; connections close as their streams end.
    pub fn retire(&self) {
        let mut state = self.shared.lock();
        state.retired = true;
        state.conns.retain(|e| e.active > 0);
        for e in &state.conns {
            e.conn.draining.store(true, Ordering::Release);
        }
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// The counts now.
    pub fn snapshot(&self) -> MuxSnapshot {
        let state = self.shared.lock();
        let stats = &self.shared.stats;
        MuxSnapshot {
            open: state.conns.len(),
            active_streams: state.conns.iter().map(|e| e.active).sum(),
            opened: stats.opened.load(Ordering::Relaxed),
            streams: stats.streams.load(Ordering::Relaxed),
            retried: stats.retried.load(Ordering::Relaxed),
            goaways: stats.goaways.load(Ordering::Relaxed),
        }
    }

    /// Whether a connection is idle, for the balancer's tie-break.
    pub fn has_idle(&self) -> bool {
        self.shared.lock().conns.iter().any(|e| e.active == 0)
    }
}

/// How long the count of streams answered before a GOAWAY bounds new connections.
pub const GOAWAY_MEMORY: Duration = Duration::from_secs(30);

impl State {
    /// Streams a connection may carry in all, as far as a recent GOAWAY tells.
    fn per_connection(&self, now: Instant) -> usize {
        match self.goaway_after {
            Some((n, at)) if now.duration_since(at) < GOAWAY_MEMORY => {
                usize::try_from(n).unwrap_or(usize::MAX)
            }
            _ => usize::MAX,
        }
    }
}

/// Counts a request in `wanting` while it looks for a stream.
struct Wanting<'a> {
    shared: &'a Shared,
    counted: bool,
}

impl Wanting<'_> {
    fn count(&mut self, state: &mut State) {
        if !self.counted {
            state.wanting += 1;
            self.counted = true;
        }
    }
}

impl Wanting<'_> {
    /// The request has its stream: it no longer counts.
    fn served(&mut self, state: &mut State) {
        if std::mem::take(&mut self.counted) {
            state.wanting -= 1;
        }
    }
}

impl Drop for Wanting<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.shared.lock().wanting -= 1;
        }
    }
}

/// A connect's result.
enum Opened {
    H2(Arc<Conn>),
    Http1(OriginConn),
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every section under the lock is short and cannot panic midway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A stream on the oldest connection with room, if there is one.
    fn try_stream(self: &Arc<Self>, state: &mut State, now: Instant) -> Option<MuxLease> {
        state.conns.retain(|e| e.active > 0 || e.conn.accepts_streams());
        let config = &self.config;
        let learned = state.per_connection(now) as u64;
        let entry = state.conns.iter_mut().find(|e| {
            if !e.conn.accepts_streams() {
                return false;
            }
            let spent = (config.max_requests != 0 && e.streams >= config.max_requests)
                || e.streams >= learned;
            let old = !config.max_lifetime.is_zero()
                && now.duration_since(e.opened) >= config.max_lifetime;
            if spent || old {
                e.conn.draining.store(true, Ordering::Release);
                return false;
            }
            e.active < e.conn.limit()
        })?;
        entry.active += 1;
        entry.streams += 1;
        let reused = entry.streams > 1;
        self.stats.streams.fetch_add(1, Ordering::Relaxed);
        Some(MuxLease { shared: Arc::clone(self), conn: Arc::clone(&entry.conn), reused })
    }

    /// Adds a newly opened connection and wakes the requests waiting for room.
    fn adopt(&self, conn: Arc<Conn>) {
        let now = Instant::now();
        let mut state = self.lock();
        state.connecting -= 1;
        state.expected = conn.limit();
        if state.retired {
            conn.draining.store(true, Ordering::Release);
        }
        let entry = Entry { conn, active: 0, streams: 0, opened: now, idle_since: now };
        state.conns.push(entry);
        drop(state);
        self.changed.notify_waiters();
    }

    /// A stream on `conn` ended.
    fn release(&self, conn: &Conn) {
        let now = Instant::now();
        let mut state = self.lock();
        let Some(i) = state.conns.iter().position(|e| e.conn.id == conn.id) else { return };
        let Some(entry) = state.conns.get_mut(i) else { return };
        entry.active = entry.active.saturating_sub(1);
        if entry.active == 0 {
            entry.idle_since = now;
            if !entry.conn.accepts_streams() {
                state.conns.remove(i);
            }
        }
        let wake = state.wanting > 0;
        drop(state);
        if wake {
            self.changed.notify_waiters();
        }
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

    /// The HTTP/2 preface both ways; the origin's SETTINGS are in once its answer to
    /// a PING (sent after them) is.
    async fn handshake(&self, stream: Stream) -> Result<Arc<Conn>, ConnectError> {
        let fail = |e: h2::Error| ConnectError::Http2(e.to_string());
        let (send, mut connection) = h2::client::Builder::new()
            .initial_max_send_streams(ASSUMED_STREAMS)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(MAX_HEADER_LIST)
            .enable_push(false)
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(fail)?;
        let mut pings = connection.ping_pong();
        let closed = Arc::new(AtomicBool::new(false));
        let ended = Arc::clone(&closed);
        let addr = self.dial.addr;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(backend = %addr, error = %e, "HTTP/2 connection to the origin ended");
            }
            ended.store(true, Ordering::Release);
        });
        let pinged = match pings.as_mut() {
            Some(pings) => pings.ping(h2::Ping::opaque()).await.map(|_| ()),
            None => Ok(()),
        };
        // A graceful GOAWAY before the session was ready, whether or not the ping's
        // answer came first: the origin is going away, and the connection never took a
        // stream. (Adopted, it would be dropped at once and another opened, without
        // end if the origin always does this.)
        if went_away(&send) {
            return Err(ConnectError::WentAway);
        }
        pinged.map_err(fail)?;
        let id = self.stats.opened.fetch_add(1, Ordering::Relaxed);
        let draining = AtomicBool::new(false);
        let conn = Arc::new(Conn { id, send, closed, draining, answered: AtomicU64::new(0) });
        if let (Some(every), Some(pings)) = (self.ping, pings) {
            tokio::spawn(keep_pinging(Arc::downgrade(&conn), pings, every, addr));
        }
        Ok(conn)
    }
}

/// Pings the origin every `every` while the connection lives; one not answered within
/// `every` marks it closed, so no new stream goes on it.
async fn keep_pinging(
    conn: std::sync::Weak<Conn>,
    mut pings: h2::PingPong,
    every: Duration,
    addr: std::net::SocketAddr,
) {
    loop {
        tokio::time::sleep(every).await;
        let Some(alive) = conn.upgrade() else { return };
        if alive.closed.load(Ordering::Acquire) {
            return;
        }
        drop(alive);
        let answered = tokio::time::timeout(every, pings.ping(h2::Ping::opaque())).await;
        if !matches!(answered, Ok(Ok(_))) {
            tracing::info!(backend = %addr, "HTTP/2 connection did not answer a ping; closing it");
            if let Some(conn) = conn.upgrade() {
                conn.closed.store(true, Ordering::Release);
            }
            return;
        }
    }
}

/// Whether the origin sent a graceful GOAWAY (NO_ERROR) on the connection of `send`.
fn went_away(send: &SendRequest<Bytes>) -> bool {
    let mut probe = send.clone();
    let mut cx = Context::from_waker(Waker::noop());
    matches!(
        probe.poll_ready(&mut cx),
        Poll::Ready(Err(e))
            if e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR)
    )
}

/// Whether the TLS session on `stream` negotiated `h2`.
fn negotiated_h2(stream: &Stream) -> bool {
    stream.tls().is_some_and(|t| t.facts().alpn == "h2")
}

impl Conn {
    /// Whether a new stream may go on it: open, not draining, and the session takes
    /// streams (a GOAWAY received makes it refuse them).
    fn accepts_streams(&self) -> bool {
        if self.closed.load(Ordering::Acquire) || self.draining.load(Ordering::Acquire) {
            return false;
        }
        let mut probe = self.send.clone();
        let mut cx = Context::from_waker(Waker::noop());
        match probe.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) | Poll::Pending => true,
            Poll::Ready(Err(_)) => {
                self.draining.store(true, Ordering::Release);
                false
            }
        }
    }

    /// Streams it may carry at once, as the origin's SETTINGS say.
    fn limit(&self) -> usize {
        self.send.current_max_send_streams().clamp(1, MAX_STREAMS)
    }
}

impl MuxLease {
    /// A handle to send the request on.
    pub fn sender(&self) -> SendRequest<Bytes> {
        self.conn.send.clone()
    }

    /// Whether the connection carried a stream before this one.
    pub fn is_reused(&self) -> bool {
        self.reused
    }

    /// The origin refused the stream by GOAWAY: the connection takes no more, and for
    /// [`GOAWAY_MEMORY`] new ones carry no more streams than it answered.
    pub fn went_away(&self) {
        if !self.conn.draining.swap(true, Ordering::AcqRel) {
            self.shared.stats.goaways.fetch_add(1, Ordering::Relaxed);
            let answered = self.conn.answered.load(Ordering::Relaxed).max(1);
            self.shared.lock().goaway_after = Some((answered, Instant::now()));
        }
    }

    /// The origin answered the stream (its response head came).
    pub fn answered(&self) {
        self.conn.answered.fetch_add(1, Ordering::Relaxed);
    }

    /// The stream is sent again on another connection.
    pub fn retried(&self) {
        self.shared.stats.retried.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for MuxLease {
    fn drop(&mut self) {
        self.shared.release(&self.conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn pool(addr: std::net::SocketAddr) -> Multiplexed {
        let dial = Dial { addr, source: None, tls: None, speaks: Speaks::H2 };
        Multiplexed::new(dial, PoolConfig::default(), None)
    }

    async fn one_request(pool: &Multiplexed) {
        let Ok(Leased::Stream(lease)) =
            pool.lease(Duration::from_secs(5), &TlsCounts::default()).await
        else {
            panic!("no stream");
        };
        let request = http::Request::get("http://origin/").body(()).unwrap();
        let (response, _) = lease.sender().send_request(request, true).unwrap();
        response.await.unwrap();
        lease.answered();
    }

    #[tokio::test]
    async fn streams_fill_connections_up_to_the_origins_limit_before_another_opens() {
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

    #[tokio::test]
    async fn after_a_goaway_new_connections_carry_no_more_than_were_answered() {
        let (addr, accepted) = server(100, Duration::ZERO).await;
        let pool = pool(addr);
        for _ in 0..3 {
            one_request(&pool).await;
        }
        let Ok(Leased::Stream(lease)) =
            pool.lease(Duration::from_secs(5), &TlsCounts::default()).await
        else {
            panic!("no stream");
        };
        // As if the origin refused this fourth stream with GOAWAY.
        lease.went_away();
        drop(lease);
        assert_eq!(pool.snapshot().goaways, 1);
        for _ in 0..7 {
            one_request(&pool).await;
        }
        // 3 streams a connection from then on: 7 more streams need 3 more connections.
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    }
}
