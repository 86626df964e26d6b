//! One HTTP/1.1 client connection: reads each request head, refuses what cannot be forwarded,
//! hands the rest to the proxy, and keeps the connection for the next request as long
//! as both sides allow, until the server stops.
//!
//! Time limits: the first request's head must be complete within `client_header` of
//! the accept; later, the connection may idle for `client_idle` between requests, and
//! once a head has started it must be complete within `client_header`. Pipelined
//! requests are read from the same buffer and answered in order.
//!
//! While idle, a connection holds its socket and no buffer (see `net::InBuf`). Idle
//! for [`PARK_AFTER`], it parks: the task keeps a [`Parked`] (socket, settings,
//! registration), a few hundred bytes instead of the state for reading requests, and
//! builds that state again when the client sends. A parked connection has no timer of
//! its own: the listener wakes it at its `client_idle` deadline (up to a second late,
//! see `listener`).
//!
//! A head that arrives in one read is parsed at once; one that does not is parsed
//! again only once [`HeadScan`], looking at each new byte once, has found its end, so a
//! head that trickles in costs time linear in its size. A head that
//! starts and does not finish within `client_header` gets 408.
//!
//! This module handles bytes from the network: the lints below keep indexing and
//! unchecked arithmetic out of it, so no input can make it panic.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use std::future::{poll_fn, Future};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::net::Stream;
use tokio::time::Instant;

use crate::connections::OpenConnection;
use crate::http1::encode::{self, ConnectionOut, PeerText};
use crate::http1::head::{self, HeadScan, Look};
use crate::http1::request::{self, HeadLimits, Refusal};
use crate::net::{self, Deadline, InBuf, Timer, TlsFacts, TlsStream, WaitError};
use crate::proxy::{Client, ClientLimits, H1Wire, Next, Outbound, Proxy, Site, Timeouts};

/// How long a closing connection keeps reading what the client still sends, so that
/// its last response is not lost to a reset: long enough for a busy client to read it
/// (nginx's `lingering_timeout` is 5 s too), short enough not to hold sockets.
const LINGER: Duration = Duration::from_secs(5);

/// What a client connection needs besides its socket: the proxy, and the client-side
/// limits of the config in force when it was accepted.
pub struct ClientSettings {
    pub proxy: Arc<Proxy>,
    pub limits: ClientLimits,
    pub timeouts: Timeouts,
}

impl ClientSettings {
    /// The client-side settings of `site`, the proxy's site at the accept.
    pub(super) fn of(proxy: Arc<Proxy>, site: &Site) -> ClientSettings {
        ClientSettings { limits: site.limits, timeouts: site.timeouts, proxy }
    }
}

/// Where the connection is, for a shutdown that arrives meanwhile.
#[derive(Default)]
struct Phase {
    /// Waiting for a request with nothing of it read: safe to close at once.
    idle: AtomicBool,
    /// The server is stopping: finish the request in flight, then close.
    stopping: AtomicBool,
}

/// How long a connection waits for its next request with its state for reading
/// requests before it parks (see [`Parked`]). Long enough that a client sending
/// request after request never parks (parking and coming back cost a few allocations
/// and a lock, about a microsecond), short against the `client_idle` an idle client
/// may take: browsers and pooled HTTP clients leave connections idle for seconds. The
/// connection's timer then fires about once a second while the client is busy, where
/// it fired once a minute: one wake-up of a few microseconds. At 250 ms those
/// wake-ups showed in the instructions per request (+1.3% instead of +0.9% with 64
/// keep-alive clients under callgrind, where time runs slow).
const PARK_AFTER: Duration = Duration::from_secs(1);

/// Reads and forwards requests from the connection's first bytes, in `buf`, until the
/// connection ends or parks.
pub(super) fn serve_requests(
    stream: Stream,
    addr: SocketAddr,
    settings: ClientSettings,
    open: OpenConnection,
    accepted: Instant,
    buf: InBuf,
) -> impl Future<Output = Option<Box<Parked>>> {
    // On Linux the socket has TCP_NODELAY from its listener already (see `listener`).
    #[cfg(not(target_os = "linux"))]
    let _ = stream.tcp().set_nodelay(true);
    serve(Conn::new(stream, addr, accepted, buf), settings, open, true)
}

/// Serves a parked connection again: its client sent something.
pub(super) fn resume(parked: Box<Parked>) -> impl Future<Output = Option<Box<Parked>>> {
    let Parked { stream, addr, settings, open, idle_since } = *parked;
    let conn = Conn::new(stream, addr, idle_since, InBuf::new(net::CLIENT_BUF));
    serve(conn, settings, open, false)
}

/// Reads and forwards requests until the connection ends (`None`) or parks.
///
/// Takes the connection built: an `async fn` that built it from its parts would keep
/// the parts and the connection side by side in its state, which is what a connection
/// between requests holds (1,808 bytes instead of 1,384 when that was measured).
async fn serve(
    mut conn: Conn,
    settings: ClientSettings,
    mut open: OpenConnection,
    first: bool,
) -> Option<Box<Parked>> {
    let phase = Phase::default();
    let ended = serve_until_stopped(&mut conn, &settings, &phase, &mut open, first).await;
    // The head buffer goes back for the thread's next connection, as it does while the
    // connection is idle: a client that closes after each request would otherwise cost
    // an allocation of it per request.
    net::recycle(std::mem::take(&mut conn.head));
    if ended == Ended::Parked {
        let parked = Parked {
            stream: conn.stream,
            addr: conn.addr,
            settings,
            open,
            idle_since: conn.idle_since,
        };
        let deadline = parked.deadline();
        let mut parked = Box::new(parked);
        parked.open.set_silent_until(deadline);
        return Some(parked);
    }
    // A TLS client learns the close was meant (close_notify); TCP's FIN follows on drop.
    conn.stream.close_notify();
    None
}

/// How serving a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Closed,
    /// Idle for [`PARK_AFTER`]: to be kept as a [`Parked`].
    Parked,
}

/// Runs the connection until it ends or parks, or until holdfast stops: at once if it
/// is idle, else after its request in flight.
async fn serve_until_stopped(
    conn: &mut Conn,
    settings: &ClientSettings,
    phase: &Phase,
    open: &mut OpenConnection,
    first: bool,
) -> Ended {
    let mut served = pin!(conn.run(settings, phase, first));
    poll_fn(|cx| {
        if let Poll::Ready(ended) = served.as_mut().poll(cx) {
            return Poll::Ready(ended);
        }
        if open.poll_stop(cx) {
            phase.stopping.store(true, Relaxed);
            // An idle connection closes now; a busy one after its request.
            if phase.idle.load(Relaxed) {
                return Poll::Ready(Ended::Closed);
            }
        }
        Poll::Pending
    })
    .await
}

/// An HTTP/1.1 client connection idle for [`PARK_AFTER`]: what it needs to serve its
/// next request and nothing more (no buffer, no timer, no state for reading requests),
/// which the connection's task holds until the client sends, `client_idle` runs out or
/// the server stops.
pub struct Parked {
    stream: Stream,
    addr: SocketAddr,
    settings: ClientSettings,
    open: OpenConnection,
    idle_since: Instant,
}

impl Parked {
    /// When the connection closes if the client sends nothing.
    fn deadline(&self) -> Instant {
        net::later(self.idle_since, self.settings.timeouts.client_idle)
    }

    /// True once the client sent something (or the socket says so: a stale readiness
    /// costs a wait with the full state, which parks again); false when the connection
    /// should close: an error, the deadline passed, or the server is stopping.
    pub(super) fn poll_wake(&mut self, cx: &mut std::task::Context<'_>) -> Poll<bool> {
        match self.stream.tcp().poll_read_ready(cx) {
            Poll::Ready(ready) => return Poll::Ready(ready.is_ok()),
            Poll::Pending => {}
        }
        let deadline = self.deadline();
        if self.open.poll_silent(cx, deadline) || Instant::now() >= deadline {
            return Poll::Ready(false);
        }
        Poll::Pending
    }

    /// Closes the connection, telling a TLS client the close was meant.
    pub(super) fn close(self) {
        self.stream.close_notify();
    }
}

struct Conn {
    stream: Stream,
    /// The TLS session's facts, for the access log (`None`: cleartext).
    tls: Option<TlsFacts>,
    addr: SocketAddr,
    /// The client's address as the forwarding headers give it.
    peer: PeerText,
    buf: InBuf,
    /// The rewritten head of the request in flight, as the origin gets it.
    head: Vec<u8>,
    /// How far the buffered start of the next head has been looked at.
    scan: HeadScan,
    /// The one timer all waits on this connection share.
    timer: Timer,
    /// When the last exchange ended (or the connection was accepted).
    idle_since: Instant,
}

/// What reading the next request head came to.
// Not boxed: `Outbound` is the request in flight, and boxing it would cost an
// allocation per request for a value that lives across one return.
#[allow(clippy::large_enum_variant)]
enum Read {
    Request(Outbound),
    Refused(Refusal),
    /// The client left, or a time limit ran out: close without a word.
    Gone,
    /// Idle for [`PARK_AFTER`].
    Park,
}

impl Conn {
    fn new(stream: Stream, addr: SocketAddr, idle_since: Instant, buf: InBuf) -> Conn {
        let tls = stream.tls().map(TlsStream::facts);
        Conn {
            stream,
            tls,
            addr,
            peer: PeerText::new(addr.ip(), tls.is_some()),
            buf,
            head: Vec::new(),
            scan: HeadScan::default(),
            timer: Timer::new(),
            idle_since,
        }
    }

    async fn run(&mut self, settings: &ClientSettings, phase: &Phase, mut first: bool) -> Ended {
        while !phase.stopping.load(Relaxed) {
            let out = match self.next_request(settings, phase, first).await {
                Read::Request(out) => out,
                Read::Refused(refusal) => {
                    self.refuse(settings, refusal).await;
                    return Ended::Closed;
                }
                Read::Gone => return Ended::Closed,
                Read::Park => return Ended::Parked,
            };
            first = false;
            let client =
                Client { stream: &mut self.stream, buf: &mut self.buf, timer: &mut self.timer };
            let mut wire = H1Wire::new(client);
            // Boxed: the exchange's state (a few kB) exists only while a request is in
            // flight, so an idle connection's task stays small.
            let forwarding = Box::pin(settings.proxy.forward(out, &mut self.head, &mut wire));
            let done = forwarding.await;
            drop(wire);
            self.idle_since = done.at;
            match done.next {
                Next::KeepOpen => {}
                Next::Close => return Ended::Closed,
                Next::Linger => {
                    self.linger().await;
                    return Ended::Closed;
                }
            }
        }
        Ended::Closed
    }

    /// Reads until a complete request head is buffered, then parses and prepares it.
    async fn next_request(
        &mut self,
        settings: &ClientSettings,
        phase: &Phase,
        first: bool,
    ) -> Read {
        // The head must be complete `client_header` after the accept, or after its
        // first byte.
        let header_limit = settings.timeouts.client_header;
        let mut head_deadline = first.then(|| net::later(self.idle_since, header_limit));
        loop {
            if !self.buf.is_empty() {
                match self.parse(settings) {
                    Ok(Some(out)) => return Read::Request(out),
                    Ok(None) if self.buf.is_full() => {
                        // The limit is checked on the head, so a full buffer of the
                        // largest size holds a head that is too large.
                        if !self.buf.grow(settings.limits.max_header_bytes.saturating_add(1)) {
                            return Read::Refused(Refusal::HeadTooLarge);
                        }
                    }
                    Ok(None) => {}
                    Err(refusal) => return Read::Refused(refusal),
                }
            }
            let idle = self.buf.is_empty();
            // Between requests: until the connection parks, or closes if `client_idle`
            // ends first.
            let (at, parks) = if idle && !first {
                let closes = net::later(self.idle_since, settings.timeouts.client_idle);
                let park = net::later(self.idle_since, PARK_AFTER);
                (park.min(closes), park < closes)
            } else {
                (
                    *head_deadline.get_or_insert_with(|| net::later(Instant::now(), header_limit)),
                    false,
                )
            };
            if idle {
                self.buf.release();
                net::recycle(std::mem::take(&mut self.head));
            }
            phase.idle.store(idle, Relaxed);
            let read =
                self.buf.fill(&mut self.stream, &mut Deadline::on(&mut self.timer, at)).await;
            phase.idle.store(false, Relaxed);
            match read {
                Ok(0) => return Read::Gone,
                Ok(_) => {}
                // RFC 9110, 15.5.9: a head that started and did not finish gets 408.
                Err(WaitError::TimedOut) if !idle => return Read::Refused(Refusal::HeadTimeout),
                Err(WaitError::TimedOut) if parks => return Read::Park,
                Err(WaitError::TimedOut) => {
                    tracing::debug!(client = %self.addr, "client connection timed out");
                    return Read::Gone;
                }
                Err(WaitError::Io(e)) => {
                    tracing::debug!(client = %self.addr, error = %e, "client connection failed");
                    return Read::Gone;
                }
            }
        }
    }

    /// Parses the head at the start of the buffer, if it is complete, and prepares it
    /// for its backend; the head's bytes are then consumed.
    fn parse(&mut self, settings: &ClientSettings) -> Result<Option<Outbound>, Refusal> {
        if self.scan.is_fresh() {
            let empty_lines = head::leading_empty_lines(self.buf.data());
            self.buf.consume(empty_lines);
            if self.buf.is_empty() {
                return Ok(None);
            }
        }
        let limits = HeadLimits {
            max_line_bytes: settings.limits.max_line_bytes,
            max_head_bytes: settings.limits.max_header_bytes,
        };
        let data = self.buf.data();
        let look = self.scan.look(data);
        let mut storage = [const { MaybeUninit::uninit() }; request::MAX_HEADERS];
        let max_headers = settings.limits.max_headers.min(request::MAX_HEADERS);
        let storage = storage.get_mut(..max_headers).unwrap_or_default();
        let parsed = match look {
            Look::Wait => None,
            Look::First | Look::Complete => request::parse(data, storage, &limits)?,
        };
        let Some(req) = parsed else {
            if !self.scan.agrees_incomplete(look, data) {
                return Err(Refusal::Malformed);
            }
            request::check_partial(data, self.scan.first_line(), &limits)?;
            return Ok(None);
        };
        let len = req.head_len;
        let out =
            settings.proxy.prepare(&req, self.addr, &self.peer, self.tls, None, &mut self.head);
        self.buf.consume(len);
        self.scan = HeadScan::default();
        Ok(Some(out))
    }

    /// Answers a request that cannot be forwarded, then closes: after a refused head,
    /// nothing that follows on the connection can be trusted to be framed right.
    async fn refuse(&mut self, settings: &ClientSettings, refusal: Refusal) {
        tracing::debug!(client = %self.addr, reason = %refusal.as_str(), "refused request");
        settings.proxy.refused(self.addr, refusal.status(), refusal.name());
        let mut response = Vec::with_capacity(256);
        let text = format!("holdfast: {}\n", refusal.as_str());
        encode::local_response(refusal.status(), &text, ConnectionOut::Close, &mut response);
        if net::write_all(&self.stream, &[&response], settings.timeouts.read).await.is_ok() {
            self.linger().await;
        }
    }

    /// Closes without losing the last response, for up to [`LINGER`] (see
    /// [`net::linger`]).
    async fn linger(&mut self) {
        net::linger(&mut self.stream, &mut self.buf, LINGER).await;
    }
}
