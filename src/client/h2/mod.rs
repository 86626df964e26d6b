//! One HTTP/2 client connection, served on holdfast's own engine (`holdfast-h2`): the
//! connection's task reads the socket into the engine, runs each stream's exchange
//! itself (no task per stream: they are polled together, in [`Driver`]), and writes
//! out what the engine produced. GOAWAY when the server stops or the connection idles,
//! and the count of connections cut off for misbehaving. A stream that opens a
//! WebSocket (extended CONNECT) is made an upgrade first, in [`connect`].
//!
//! Protection is the engine's, configured with holdfast's limits:
//! `SETTINGS_MAX_CONCURRENT_STREAMS` (streams beyond it are refused), the header list
//! size (a larger list is answered 431, however many CONTINUATION frames carry it, and
//! a block cut into more frames than any list needs ends the connection), flow-control
//! windows that bound what one connection buffers, and limits on streams reset by the
//! client (rapid reset, CVE-2023-44487), on streams reset for its errors, and on PING,
//! SETTINGS and empty DATA frames: past them the connection gets GOAWAY
//! `ENHANCE_YOUR_CALM` and closes. So does a connection whose streams are abandoned
//! (reset or not read) more often than answered. Other connections are not touched.

mod connect;

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::stream::{FuturesUnordered, StreamExt};
use holdfast_h2::conn::{Config, Connection, Event, Head};
use holdfast_h2::error::ErrorCode;
use tokio::time::{Instant, Sleep};

use crate::connections::OpenConnection;
use crate::http1::encode::PeerText;
use crate::http1::request::{HeadLimits, Refusal};
use crate::http2::request::{self, ClientHead};
use crate::http2::session::{self, RequestBody, Responder, Session};
use crate::http2::socket::{Read, Socket, WRITE_PIECES};
use crate::metrics::{Family, Report, Writer, NO_LABELS};
use crate::net::{self, Stream, TlsFacts};
use crate::proxy::{ClientLimits, H2Wire, Proxy};
use connect::Extended;

/// Flow-control windows granted to a client: per stream, and for the connection. The
/// connection's bounds what one client connection can make holdfast buffer.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Response bytes buffered per stream before its sender waits for the client.
const SEND_BUFFER: usize = 256 * 1024;

/// Serves an HTTP/2 client connection on `stream` (whose first bytes, already read,
/// are `prefix`) until it ends, idles out, or the server stops.
pub async fn serve(
    stream: Stream,
    prefix: Vec<u8>,
    addr: SocketAddr,
    proxy: Arc<Proxy>,
    open: &mut OpenConnection,
    tls: Option<TlsFacts>,
) {
    let site = proxy.site();
    let (limits, timeouts) = (site.limits, site.timeouts);
    drop(site);
    CLIENT.connections.fetch_add(1, Relaxed);
    let config = Config {
        max_concurrent_streams: limits.h2_max_concurrent_streams,
        stream_window: STREAM_WINDOW,
        connection_window: CONNECTION_WINDOW,
        max_header_list_size: u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX),
        // WebSockets over HTTP/2 (RFC 8441): see `connect`.
        connect_protocol: true,
        max_queued: SEND_BUFFER,
        ..Config::default()
    };
    let client = Arc::new(ClientSide {
        addr,
        proxy,
        peer: PeerText::new(addr.ip(), tls.is_some()),
        tls,
        limits,
        connection: NEXT_CONNECTION.fetch_add(1, Relaxed),
    });
    let read = BytesMut::from(&prefix[..]);
    drop(prefix);
    let mut driver = Driver {
        socket: Socket::new(stream, read),
        read_closed: false,
        broken: false,
        session: RefCell::new(Session::new(Connection::server(config))),
        streams: FuturesUnordered::new(),
        client,
        counts: StreamCounts::default(),
        ready: false,
        stopping: false,
        timeouts: (timeouts.client_header, timeouts.client_idle),
        seen: 0,
        timer: Box::pin(tokio::time::sleep(timeouts.client_header)),
    };
    // The first bytes, read before HTTP/2 was recognised, may hold whole frames (a
    // client that sent its preface, SETTINGS and first request at once).
    if !driver.socket.read.is_empty() {
        driver.receive();
    }
    poll_fn(|cx| driver.poll(cx, open)).await;
}

/// A stream's exchange, as the connection polls it: its id, and whether its client
/// abandoned it.
type Exchange = Pin<Box<dyn Future<Output = (u32, bool)> + Send>>;

/// Rounds of reading, running streams and writing in one poll before the task lets
/// others run.
const ROUNDS: usize = 16;

/// One connection's state: the socket, the engine and its streams, and the exchanges.
struct Driver {
    socket: Socket,
    read_closed: bool,
    /// The socket failed or the client closed it: nothing more is written.
    broken: bool,
    session: RefCell<Session>,
    streams: FuturesUnordered<Exchange>,
    client: Arc<ClientSide>,
    counts: StreamCounts,
    /// The client's first SETTINGS came.
    ready: bool,
    /// GOAWAY was sent (or the connection failed): no new streams.
    stopping: bool,
    /// The limits for the client's preface and SETTINGS, and for an idle connection.
    timeouts: (Duration, Duration),
    /// Streams accepted when the idle timer last looked.
    seen: u64,
    timer: Pin<Box<Sleep>>,
}

impl Driver {
    /// Serves the connection until it is over.
    fn poll(&mut self, cx: &mut Context<'_>, open: &mut OpenConnection) -> Poll<()> {
        if !self.stopping && open.poll_stop(cx) {
            // Streams in flight finish; the client opens no new ones here.
            self.go_away();
        }
        self.poll_timer(cx);
        for _ in 0..ROUNDS {
            let mut progress = self.poll_read(cx);
            progress |= self.poll_streams(cx);
            self.dispatch();
            progress |= self.poll_write(cx);
            if self.is_over() {
                self.socket.io.shutdown_write();
                return Poll::Ready(());
            }
            if !progress {
                return Poll::Pending;
            }
        }
        // Busy: others get a turn, and this connection comes back at once.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Whether everything is done: the engine closed (or the socket ended), no
    /// exchange left, nothing left to write.
    fn is_over(&self) -> bool {
        let closed = self.read_closed || self.session.borrow().conn.is_closed();
        closed && self.streams.is_empty() && !self.socket.has_pending()
    }

    /// Reads what the socket has into the engine; true if anything came.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> bool {
        if self.read_closed {
            return false;
        }
        match self.socket.poll_read(cx) {
            Read::Nothing => false,
            Read::Bytes => {
                self.receive();
                true
            }
            Read::Closed(error) => {
                self.socket_ended(error);
                true
            }
        }
    }

    /// Hands the bytes read to the engine.
    fn receive(&mut self) {
        if let Err(code) = self.session.get_mut().conn.receive(&mut self.socket.read) {
            CLIENT.failed(code, self.client.addr);
            self.stopping = true;
            self.read_closed = true;
            self.session.get_mut().end();
        }
    }

    /// The client closed its side, or the socket failed: streams hear of it, and the
    /// connection ends once they are done.
    fn socket_ended(&mut self, error: Option<io::Error>) {
        if let Some(e) = error {
            tracing::debug!(client = %self.client.addr, error = %e, "HTTP/2 client connection failed");
        }
        self.read_closed = true;
        self.broken = true;
        self.stopping = true;
        self.socket.discard();
        self.session.get_mut().end();
    }

    /// Acts on what the engine saw: new streams, and what came for the others.
    fn dispatch(&mut self) {
        let session = self.session.get_mut();
        while let Some(event) = session.conn.next_event() {
            match event {
                Event::Head { stream, head, end_stream } => {
                    CLIENT.streams.fetch_add(1, Relaxed);
                    self.counts.accepted = self.counts.accepted.saturating_add(1);
                    session.open(stream, end_stream);
                    let client = Arc::clone(&self.client);
                    self.streams.push(Box::pin(run_stream(stream, head, end_stream, client)));
                }
                Event::TooLarge { stream, .. } => {
                    too_large(&mut session.conn, stream, &self.client);
                }
                Event::Data { stream, data, end_stream } => {
                    let n = data.len();
                    if !session.data(stream, data, end_stream) {
                        session.conn.release(stream, n);
                    }
                }
                Event::Trailers { stream, fields } => session.trailers(stream, fields),
                Event::Reset { stream, code, .. } => session.reset(stream, code),
                Event::Writable { stream } => session.writable(stream),
                Event::Ready => {
                    self.ready = true;
                    let idle = net::later(Instant::now(), self.timeouts.1);
                    self.timer.as_mut().reset(idle);
                }
                Event::GoAway { .. } => {}
            }
        }
    }

    /// Runs the exchanges that can make progress; true if any ended.
    fn poll_streams(&mut self, cx: &mut Context<'_>) -> bool {
        let mut ended = false;
        // Bounded by the exchanges: each is yielded once when it ends.
        loop {
            let streams = &mut self.streams;
            let next = session::enter(&self.session, || streams.poll_next_unpin(cx));
            let Poll::Ready(Some((stream, abandoned))) = next else { break };
            ended = true;
            self.session.get_mut().close(stream);
            if abandoned && self.counts.abandoned() && !self.stopping {
                // Many streams reset or abandoned: a flood, not a client.
                CLIENT.calm.fetch_add(1, Relaxed);
                tracing::debug!(client = %self.client.addr, "HTTP/2 client abandoned too many streams; closing");
                self.session.get_mut().conn.abort(ErrorCode::EnhanceYourCalm);
                self.stopping = true;
            }
        }
        ended
    }

    /// Writes what the engine produced; true if anything was written.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> bool {
        if self.broken {
            return false;
        }
        let conn = &mut self.session.get_mut().conn;
        let written = self.socket.poll_write(cx, |pending| {
            while pending.len() < WRITE_PIECES {
                let Some(piece) = conn.next_output() else { break };
                pending.push_back(piece);
            }
        });
        written.unwrap_or_else(|e| {
            self.socket_ended(Some(e));
            true
        })
    }

    /// GOAWAY: the streams the client opened finish, no new one is taken.
    fn go_away(&mut self) {
        self.stopping = true;
        self.session.get_mut().conn.go_away();
    }

    /// The handshake's limit, then the idle limit: no stream open, and none opened
    /// since the last look.
    fn poll_timer(&mut self, cx: &mut Context<'_>) {
        if self.stopping || self.timer.as_mut().poll(cx).is_pending() {
            return;
        }
        if !self.ready {
            // No preface and SETTINGS within the header timeout.
            self.read_closed = true;
            self.stopping = true;
            self.session.get_mut().end();
            return;
        }
        let accepted = self.counts.accepted;
        if !self.streams.is_empty() || accepted != self.seen {
            self.seen = accepted;
            let idle = net::later(Instant::now(), self.timeouts.1);
            self.timer.as_mut().reset(idle);
            let _ = self.timer.as_mut().poll(cx);
        } else {
            self.go_away();
        }
    }
}

/// A connection's streams, to tell a client from a flood of streams opened and reset
/// (or otherwise abandoned) before their responses: each costs holdfast an exchange,
/// and the origin a request.
#[derive(Default)]
struct StreamCounts {
    accepted: u64,
    abandoned: u64,
}

/// Abandoned streams a connection may have before it is looked at: browsers cancel
/// some (a page navigated away from), never this many.
const MAX_ABANDONED: u64 = 100;

impl StreamCounts {
    /// A stream's client did not take its response; true past [`MAX_ABANDONED`], and
    /// more than half the streams: the connection is to be cut off.
    fn abandoned(&mut self) -> bool {
        self.abandoned = self.abandoned.saturating_add(1);
        self.abandoned >= MAX_ABANDONED && self.abandoned.saturating_mul(2) > self.accepted
    }
}

/// Answers a stream whose header list is over the limit with 431; only the stream
/// ends.
fn too_large(conn: &mut Connection, stream: u32, client: &ClientSide) {
    let refusal = Refusal::HeadTooLarge;
    tracing::debug!(client = %client.addr, reason = %refusal.as_str(), "refused HTTP/2 request");
    client.proxy.refused(client.addr, refusal.status(), refusal.name());
    let text = format!("holdfast: {}\n", refusal.as_str());
    session::answer_text(conn, stream, refusal.status(), &text);
    conn.finish(stream);
}

/// Runs one stream as an exchange: its head, read into the request model, is checked,
/// routed and rewritten like any other, then forwarded. Its id, and true when the
/// client abandoned it (reset it, or did not take the response).
async fn run_stream(stream: u32, head: Head, ended: bool, client: Arc<ClientSide>) -> (u32, bool) {
    let mut respond = Responder::new(stream);
    let body = RequestBody::new(stream);
    let ClientSide { addr, ref proxy, ref peer, tls, limits, connection } = *client;
    let protocol = head.pseudo.protocol.clone();
    let mut client_head = match ClientHead::of(head) {
        Ok(client_head) => client_head,
        Err(refusal) => {
            refuse(proxy, addr, &mut respond, refusal);
            return (stream, false);
        }
    };
    let websocket = match connect::extended(&mut client_head, protocol.as_deref()) {
        Extended::No => None,
        Extended::WebSocket(key) => Some(key),
        Extended::Refused(refused) => {
            connect::refuse(proxy, addr, &mut respond, refused);
            return (stream, false);
        }
    };
    let head_limits = HeadLimits {
        max_line_bytes: limits.max_line_bytes,
        max_head_bytes: limits.max_header_bytes,
    };
    let fields = client_head.fields.headers();
    // The HTTP/1.1 head, for an origin that speaks HTTP/1.1, comes from and goes back
    // to the thread's cache of head buffers.
    let mut origin_head = net::scratch();
    // A WebSocket's DATA frames are its tunnel, not a request body.
    let ends = websocket.is_some() || ended;
    let mut out =
        match request::decode(&client_head, &fields, ends, limits.max_headers, &head_limits) {
            Ok(mut req) => {
                if websocket.is_some() {
                    connect::upgrade(&mut req);
                }
                proxy.prepare(&req, addr, peer, tls, Some(&client_head), &mut origin_head)
            }
            Err(refusal) => {
                refuse(proxy, addr, &mut respond, refusal);
                return (stream, false);
            }
        };
    drop(fields);
    drop(client_head);
    out.over_http2(connection);
    let mut wire = H2Wire::new(respond, body);
    if let Some(key) = websocket {
        wire.open_websocket(key);
    }
    proxy.forward(out, &mut origin_head, &mut wire).await;
    net::recycle(origin_head);
    (stream, wire.client_failed())
}

/// The number the next HTTP/2 client connection gets (see `ClientSide::connection`).
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// What every stream of one client connection shares: who the client is, and the
/// proxy with the client-side limits in force when the connection was accepted (as
/// for an HTTP/1.1 connection).
struct ClientSide {
    addr: SocketAddr,
    proxy: Arc<Proxy>,
    /// The client's address as the forwarding headers give it.
    peer: PeerText,
    tls: Option<TlsFacts>,
    limits: ClientLimits,
    /// This connection's number, unique in the process (never 0): its streams count
    /// together in the backends' shares.
    connection: u64,
}

/// Answers a stream whose head cannot be forwarded; only the stream ends.
fn refuse(proxy: &Proxy, addr: SocketAddr, respond: &mut Responder, refusal: Refusal) {
    tracing::debug!(client = %addr, reason = %refusal.as_str(), "refused HTTP/2 request");
    proxy.refused(addr, refusal.status(), refusal.name());
    respond.answer_text(refusal.status(), &format!("holdfast: {}\n", refusal.as_str()));
}

/// HTTP/2 client connections, their streams, and those that ended in an error, by the
/// error's code.
#[derive(Default)]
struct ClientCounts {
    connections: AtomicU64,
    streams: AtomicU64,
    /// `ENHANCE_YOUR_CALM`: a flood (resets, pings, settings) was cut off.
    calm: AtomicU64,
    protocol: AtomicU64,
    /// Header lists too large or malformed (HPACK, CONTINUATION).
    compression: AtomicU64,
    flow_control: AtomicU64,
    frame_size: AtomicU64,
    other: AtomicU64,
}

static CLIENT: ClientCounts = ClientCounts {
    connections: AtomicU64::new(0),
    streams: AtomicU64::new(0),
    calm: AtomicU64::new(0),
    protocol: AtomicU64::new(0),
    compression: AtomicU64::new(0),
    flow_control: AtomicU64::new(0),
    frame_size: AtomicU64::new(0),
    other: AtomicU64::new(0),
};

impl ClientCounts {
    /// Counts and logs a connection that ended in an error. A client that just left
    /// (an I/O error) is not counted.
    fn failed(&self, code: ErrorCode, addr: SocketAddr) {
        let counter = match code {
            ErrorCode::EnhanceYourCalm => &self.calm,
            ErrorCode::ProtocolError => &self.protocol,
            ErrorCode::CompressionError => &self.compression,
            ErrorCode::FlowControlError => &self.flow_control,
            ErrorCode::FrameSizeError => &self.frame_size,
            ErrorCode::NoError | ErrorCode::Cancel => return,
            _ => &self.other,
        };
        counter.fetch_add(1, Relaxed);
        tracing::debug!(client = %addr, error = code.as_str(), "HTTP/2 client connection closed for an error");
    }
}

/// The HTTP/2 client counts now, for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct H2Snapshot {
    connections: u64,
    streams: u64,
    errors: [(&'static str, u64); 6],
}

/// The counts now.
pub fn snapshot() -> H2Snapshot {
    let c = &CLIENT;
    H2Snapshot {
        connections: c.connections.load(Relaxed),
        streams: c.streams.load(Relaxed),
        errors: [
            ("enhance_your_calm", c.calm.load(Relaxed)),
            ("protocol_error", c.protocol.load(Relaxed)),
            ("compression_error", c.compression.load(Relaxed)),
            ("flow_control_error", c.flow_control.load(Relaxed)),
            ("frame_size_error", c.frame_size.load(Relaxed)),
            ("other", c.other.load(Relaxed)),
        ],
    }
}

static CONNECTIONS: Family = Family {
    name: "holdfast_h2_client_connections",
    help: "HTTP/2 client connections accepted (by ALPN or h2c prior knowledge).",
};
static STREAMS: Family =
    Family { name: "holdfast_h2_client_streams", help: "HTTP/2 client streams accepted." };
static ERRORS: Family = Family {
    name: "holdfast_h2_client_connection_errors",
    help: "HTTP/2 client connections closed with GOAWAY for an error, by its code; enhance_your_calm is a flood cut off (rapid reset and the like).",
};

impl Report for H2Snapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        out.counter(&CONNECTIONS, [(NO_LABELS, self.connections)])?;
        out.counter(&STREAMS, [(NO_LABELS, self.streams)])?;
        out.counter(&ERRORS, self.errors.iter().map(|(r, n)| ([("reason", *r)], *n)))
    }
}
