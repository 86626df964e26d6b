//! One HTTP/2 client connection: the `h2` session (its settings are holdfast's limits),
//! a task per stream that runs the stream as an exchange, GOAWAY when the server stops
//! or the connection idles, and the count of connections cut off for misbehaving. A
//! stream that opens a WebSocket (extended CONNECT) is made an upgrade first, in
//! [`connect`].
//!
//! Protection is the session's settings and the `h2` crate's enforcement of them:
//! `SETTINGS_MAX_CONCURRENT_STREAMS` (streams beyond it are refused), the header list
//! size (a larger list, however many CONTINUATION frames carry it, ends the
//! connection), flow-control windows that bound what one connection buffers, and
//! limits on streams reset by the client (rapid reset, CVE-2023-44487) and on streams
//! holdfast had to reset: past them the connection gets GOAWAY `ENHANCE_YOUR_CALM` and
//! closes. So does a client that sends PING or SETTINGS frames past the rates
//! `flood` allows, which the `h2` crate would answer forever. Other connections are
//! not touched.

mod connect;
pub mod flood;

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::connections::OpenConnection;
use crate::http1::encode::PeerText;
use crate::http1::request::{HeadLimits, Refusal};
use crate::http2::convert;
use crate::http2::request;
use crate::metrics::{Family, Report, Writer, NO_LABELS};
use crate::net::{self, Stream, TlsFacts};
use crate::proxy::{ClientLimits, H2Wire, Proxy};
use connect::Extended;
use flood::{ControlWatch, FloodAlarm};

/// Flow-control windows granted to a client: per stream, and for the connection. The
/// connection's bounds what one client connection can make holdfast buffer.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Response bytes buffered per stream before its sender waits for the client.
const SEND_BUFFER: usize = 256 * 1024;
/// Streams reset by the client and not yet accepted by holdfast, before the
/// connection is cut off (rapid reset).
const MAX_PENDING_RESETS: usize = 20;
/// Streams holdfast reset because the client broke a rule, before the connection is
/// cut off.
const MAX_ERROR_RESETS: usize = 256;

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
    let alarm = Arc::new(FloodAlarm::default());
    let watch = ControlWatch::new(Arc::clone(&alarm));
    let io = Prefixed { prefix, at: 0, stream, watch };
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(limits.h2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(Some(MAX_ERROR_RESETS))
        // WebSockets over HTTP/2 (RFC 8441): see `connect`.
        .enable_connect_protocol()
        .handshake::<_, Bytes>(io);
    let mut conn = match tokio::time::timeout(timeouts.client_header, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => return CLIENT.failed(&e, addr),
        Err(_) => return,
    };
    let client = Arc::new(ClientSide {
        addr,
        proxy,
        peer: PeerText::new(addr.ip(), tls.is_some()),
        tls,
        limits,
        connection: NEXT_CONNECTION.fetch_add(1, Relaxed),
    });
    let streams = Arc::new(StreamCounts::default());
    let idle = timeouts.client_idle;
    let mut stopping = false;
    // Made once and kept: a timer, a stop watch and a notification made again for
    // every stream would cost each stream their registrations.
    let mut stop = std::pin::pin!(stopped(open));
    let mut cut = std::pin::pin!(streams.cut.notified());
    let mut flooded = std::pin::pin!(alarm.tripped());
    let mut idle_timer = std::pin::pin!(tokio::time::sleep(idle));
    let mut seen = 0u64;
    loop {
        let accepted = tokio::select! {
            biased;
            accepted = conn.accept() => accepted,
            () = &mut stop, if !stopping => {
                // Streams in flight finish; the client opens no new ones here.
                stopping = true;
                conn.graceful_shutdown();
                continue;
            }
            () = &mut cut, if !stopping => {
                // Many streams reset or abandoned: a flood, not a client.
                CLIENT.calm.fetch_add(1, Relaxed);
                tracing::debug!(client = %addr, "HTTP/2 client abandoned too many streams; closing");
                conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                stopping = true;
                continue;
            }
            () = &mut flooded, if !stopping => {
                // PING or SETTINGS frames past any client's rate (see `flood`).
                CLIENT.calm.fetch_add(1, Relaxed);
                let frames = alarm.flooded().map_or("control", |f| f.as_str());
                tracing::debug!(client = %addr, frames, "HTTP/2 client flooded control frames; closing");
                conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                stopping = true;
                continue;
            }
            () = &mut idle_timer, if !stopping => {
                // Idle: no stream open, and none opened since the last look.
                let opened = streams.accepted.load(Relaxed);
                if conn.has_streams() || opened != seen {
                    seen = opened;
                    idle_timer.as_mut().reset(crate::net::later(Instant::now(), idle));
                } else {
                    stopping = true;
                    conn.graceful_shutdown();
                }
                continue;
            }
        };
        match accepted {
            Some(Ok((req, respond))) => {
                CLIENT.streams.fetch_add(1, Relaxed);
                streams.accepted.fetch_add(1, Relaxed);
                let client = Arc::clone(&client);
                let streams = Arc::clone(&streams);
                // The stream's state lives in a box of its own: the task then holds
                // a pointer, and tokio moves no large future when it starts and ends.
                let stream = Box::pin(run_stream(req, respond, client));
                tokio::spawn(async move {
                    if stream.await {
                        streams.abandoned();
                    }
                });
            }
            Some(Err(e)) => return CLIENT.failed(&e, addr),
            None => return,
        }
    }
}

/// A connection's streams, to tell a client from a flood of streams opened and reset
/// (or otherwise abandoned) before their responses: each costs holdfast an exchange,
/// and the origin a request.
#[derive(Default)]
struct StreamCounts {
    accepted: AtomicU64,
    abandoned: AtomicU64,
    /// Wakes the connection to cut it off.
    cut: tokio::sync::Notify,
}

/// Abandoned streams a connection may have before it is looked at: browsers cancel
/// some (a page navigated away from), never this many.
const MAX_ABANDONED: u64 = 100;

impl StreamCounts {
    /// A stream's client did not take its response; past [`MAX_ABANDONED`], and more
    /// than half the streams, the connection is cut off.
    fn abandoned(&self) {
        let abandoned = self.abandoned.fetch_add(1, Relaxed).saturating_add(1);
        let accepted = self.accepted.load(Relaxed);
        if abandoned >= MAX_ABANDONED && abandoned.saturating_mul(2) > accepted {
            self.cut.notify_one();
        }
    }
}

/// Resolves once the server is stopping.
async fn stopped(open: &mut OpenConnection) {
    poll_fn(|cx| if open.poll_stop(cx) { Poll::Ready(()) } else { Poll::Pending }).await
}

/// Runs one stream as an exchange: its head, read into the request model, is checked,
/// routed and rewritten like any other, then forwarded. True when the client abandoned
/// it (reset it, or did not take the response).
async fn run_stream(
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    client: Arc<ClientSide>,
) -> bool {
    let ClientSide { addr, ref proxy, ref peer, tls, limits, connection } = *client;
    let (mut parts, body) = req.into_parts();
    let websocket = match connect::extended(&mut parts) {
        Extended::No => None,
        Extended::WebSocket(key) => Some(key),
        Extended::Refused(refused) => {
            connect::refuse(proxy, addr, &mut respond, refused);
            return false;
        }
    };
    let head_limits = HeadLimits {
        max_line_bytes: limits.max_line_bytes,
        max_head_bytes: limits.max_header_bytes,
    };
    let fields = crate::http2::fields_of(&parts.headers);
    // The HTTP/1.1 head, for an origin that speaks HTTP/1.1, comes from and goes back
    // to the thread's cache of head buffers.
    let mut origin_head = net::scratch();
    // A WebSocket's DATA frames are its tunnel, not a request body.
    let ends = websocket.is_some() || body.is_end_stream();
    let mut out = match request::decode(&parts, &fields, ends, limits.max_headers, &head_limits) {
        Ok(mut req) => {
            if websocket.is_some() {
                connect::upgrade(&mut req);
            }
            proxy.prepare(&req, addr, peer, tls, Some(&parts), &mut origin_head)
        }
        Err(refusal) => {
            refuse(proxy, addr, &mut respond, refusal);
            return false;
        }
    };
    drop(fields);
    drop(parts);
    out.over_http2(connection);
    let mut wire = H2Wire::new(respond, body);
    if let Some(key) = websocket {
        wire.open_websocket(key);
    }
    proxy.forward(out, &mut origin_head, &mut wire).await;
    net::recycle(origin_head);
    wire.client_failed()
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
fn refuse(proxy: &Proxy, addr: SocketAddr, respond: &mut SendResponse<Bytes>, refusal: Refusal) {
    tracing::debug!(client = %addr, reason = %refusal.as_str(), "refused HTTP/2 request");
    proxy.refused(addr, refusal.status(), refusal.name());
    let text = format!("holdfast: {}\n", refusal.as_str());
    let mut response = http::Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(refusal.status()).unwrap_or(http::StatusCode::BAD_REQUEST);
    *response.headers_mut() = convert::local_headers(b"", text.len());
    if let Ok(mut body) = respond.send_response(response, false) {
        let _ = body.send_data(Bytes::from(text), true);
    }
}

/// The client's first bytes, read before HTTP/2 was recognised, then the connection;
/// the frames both ways pass the connection's flood watch.
struct Prefixed {
    prefix: Vec<u8>,
    at: usize,
    stream: Stream,
    watch: ControlWatch,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(rest) = this.prefix.get(this.at..).filter(|r| !r.is_empty()) {
            let n = rest.len().min(buf.remaining());
            let piece = rest.get(..n).unwrap_or_default();
            this.watch.on_read(piece);
            buf.put_slice(piece);
            this.at = this.at.saturating_add(n);
            if this.at >= this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read {
            this.watch.on_read(buf.filled().get(before..).unwrap_or_default());
        }
        read
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.watch.on_written(buf.get(..n).unwrap_or_default());
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            // The first `n` bytes of the slices, in order.
            let mut left = n;
            for slice in bufs {
                if left == 0 {
                    break;
                }
                let part = slice.get(..left.min(slice.len())).unwrap_or_default();
                this.watch.on_written(part);
                left = left.saturating_sub(part.len());
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
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
    fn failed(&self, e: &h2::Error, addr: SocketAddr) {
        if e.is_io() {
            tracing::debug!(client = %addr, error = %e, "HTTP/2 client connection failed");
            return;
        }
        let counter = match e.reason() {
            Some(Reason::ENHANCE_YOUR_CALM) => &self.calm,
            Some(Reason::PROTOCOL_ERROR) => &self.protocol,
            Some(Reason::COMPRESSION_ERROR) => &self.compression,
            Some(Reason::FLOW_CONTROL_ERROR) => &self.flow_control,
            Some(Reason::FRAME_SIZE_ERROR) => &self.frame_size,
            Some(Reason::NO_ERROR) | Some(Reason::CANCEL) => return,
            _ => &self.other,
        };
        counter.fetch_add(1, Relaxed);
        tracing::debug!(client = %addr, error = %e, "HTTP/2 client connection closed for an error");
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
