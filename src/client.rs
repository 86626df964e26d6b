//! One client connection: reads each request head, refuses what cannot be forwarded,
//! hands the rest to the proxy, and keeps the connection for the next request as long
//! as both sides allow, until the server stops.
//!
//! Time limits: the first request's head must be complete within `client_header` of
//! the accept; later, the connection may idle for `client_idle` between requests, and
//! once a head has started it must be complete within `client_header`. Pipelined
//! requests are read from the same buffer and answered in order.
//!
//! While idle, a connection holds its socket and no buffer (see `net::InBuf`).

use std::mem::MaybeUninit;
use std::net::{Shutdown, SocketAddr};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use socket2::SockRef;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{ClientLimits, Timeouts};
use crate::http1::encode::{self, ConnectionOut};
use crate::http1::request::{self, Refusal};
use crate::listener::stopped;
use crate::net::{self, InBuf, Limit, WaitError};
use crate::proxy::{Client, Next, Outbound, Proxy};

/// How long a closing connection keeps reading what the client still sends, so that
/// its last response is not lost to a reset.
const LINGER: Duration = Duration::from_secs(2);

/// What a client connection needs besides its socket.
#[derive(Clone)]
pub struct ClientSettings {
    pub proxy: Arc<Proxy>,
    pub limits: ClientLimits,
    pub timeouts: Timeouts,
}

/// Where the connection is, for a shutdown that arrives meanwhile.
#[derive(Default)]
struct Phase {
    /// Waiting for a request with nothing of it read: safe to close at once.
    idle: AtomicBool,
    /// The server is stopping: finish the request in flight, then close.
    stopping: AtomicBool,
}

/// Serves `stream` until the client leaves, a limit closes it, or `stop` turns true.
pub async fn serve(
    stream: TcpStream,
    addr: SocketAddr,
    settings: ClientSettings,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let mut conn = Conn {
        stream,
        addr,
        ip: addr.ip().to_string(),
        buf: InBuf::new(net::CLIENT_BUF),
        head: Vec::new(),
    };
    let phase = Phase::default();
    let mut served = pin!(conn.run(&settings, &phase));
    tokio::select! {
        () = served.as_mut() => {}
        () = stopped(&mut stop) => {
            phase.stopping.store(true, Relaxed);
            if !phase.idle.load(Relaxed) {
                served.await;
            }
        }
    }
}

struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
    /// The client's IP as text, for `X-Forwarded-For`.
    ip: String,
    buf: InBuf,
    /// The rewritten head of the request in flight, as the origin gets it.
    head: Vec<u8>,
}

/// What reading the next request head came to.
enum Read {
    Request(Outbound),
    Refused(Refusal),
    /// The client left, or a time limit ran out: close without a word.
    Gone,
}

impl Conn {
    async fn run(&mut self, settings: &ClientSettings, phase: &Phase) {
        let mut first = true;
        while !phase.stopping.load(Relaxed) {
            let out = match self.next_request(settings, phase, first).await {
                Read::Request(out) => out,
                Read::Refused(refusal) => return self.refuse(settings, refusal).await,
                Read::Gone => return,
            };
            first = false;
            let client = Client { stream: &mut self.stream, buf: &mut self.buf };
            match settings.proxy.forward(out, &self.head, client).await {
                Next::KeepOpen => {}
                Next::Close => return,
                Next::Linger => return self.linger().await,
            }
        }
    }

    /// Reads until a complete request head is buffered, then parses and prepares it.
    async fn next_request(
        &mut self,
        settings: &ClientSettings,
        phase: &Phase,
        first: bool,
    ) -> Read {
        let header_limit = settings.timeouts.client_header;
        let mut deadline = None;
        loop {
            if !self.buf.is_empty() {
                match self.parse(settings) {
                    Ok(Some(out)) => return Read::Request(out),
                    Ok(None) if self.buf.is_full() => {
                        if !self.buf.grow(settings.limits.max_header_bytes) {
                            return Read::Refused(Refusal::HeadTooLarge);
                        }
                    }
                    Ok(None) => {}
                    Err(refusal) => return Read::Refused(refusal),
                }
            }
            let idle = self.buf.is_empty();
            let limit = if idle && !first {
                Limit::Stall(settings.timeouts.client_idle)
            } else {
                // From the accept, or from the first byte of this head.
                Limit::Until(*deadline.get_or_insert_with(|| Instant::now() + header_limit))
            };
            if idle {
                self.buf.release();
                self.head = Vec::new();
            }
            phase.idle.store(idle, Relaxed);
            let read = self.buf.fill(&mut self.stream, limit).await;
            phase.idle.store(false, Relaxed);
            match read {
                Ok(0) => return Read::Gone,
                Ok(_) => {}
                Err(WaitError::TimedOut) => {
                    tracing::debug!(client = %self.addr, idle, "client connection timed out");
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
        let mut storage = [const { MaybeUninit::uninit() }; request::MAX_HEADERS];
        let max_headers = settings.limits.max_headers.min(request::MAX_HEADERS);
        let parsed = request::parse(
            self.buf.data(),
            &mut storage[..max_headers],
            settings.limits.max_header_bytes,
        )?;
        let Some(req) = parsed else { return Ok(None) };
        let out = settings.proxy.prepare(&req, self.addr, &self.ip, &mut self.head);
        let len = req.head_len;
        self.buf.consume(len);
        Ok(Some(out))
    }

    /// Answers a request that cannot be forwarded, then closes: after a refused head,
    /// nothing that follows on the connection can be trusted to be framed right.
    async fn refuse(&mut self, settings: &ClientSettings, refusal: Refusal) {
        tracing::debug!(client = %self.addr, reason = refusal.as_str(), "refused request");
        settings.proxy.refused(self.addr, refusal.status(), refusal.as_str());
        let mut response = Vec::with_capacity(256);
        let text = format!("holdfast: {}\n", refusal.as_str());
        encode::local_response(refusal.status(), &text, ConnectionOut::Close, &mut response);
        if net::write_all(&self.stream, &[&response], settings.timeouts.read).await.is_ok() {
            self.linger().await;
        }
    }

    /// Closes without losing the last response: stops writing, then reads and
    /// discards what the client still sends, for up to [`LINGER`]. Closing a socket
    /// with unread bytes sends a reset, and a reset can destroy the response before the
    /// client has read it.
    async fn linger(&mut self) {
        let _ = SockRef::from(&self.stream).shutdown(Shutdown::Write);
        let deadline = Limit::Until(Instant::now() + LINGER);
        loop {
            self.buf.consume(self.buf.len());
            match self.buf.fill(&mut self.stream, deadline).await {
                Ok(n) if n > 0 => {}
                _ => return,
            }
        }
    }
}
