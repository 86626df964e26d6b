//! Opens one connection to a backend (TCP connect from a chosen source address, if
//! configured, socket options, and the TLS handshake of a TLS upstream), and checks a
//! pooled one before it is reused.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use std::mem::MaybeUninit;

use rustls::pki_types::ServerName;
use rustls::HandshakeKind;
use socket2::SockRef;

use super::settings::Speaks;
use super::UpstreamConfig;
use crate::metrics::Histogram;
use crate::net::{self, Stream, TlsStream};
use crate::tls::origin::OriginTls;
use tokio::io::Interest;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// How connections to one backend are made. Connections made the same way are
/// interchangeable, so a pool holds connections of one `Dial` only, and a reload that
/// changes any part of it gives the backend a new pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Dial {
    pub addr: SocketAddr,
    /// Local address connections are made from (`None`: the kernel picks).
    pub source: Option<IpAddr>,
    /// TLS settings and the name verified and sent as SNI (`None`: cleartext).
    pub tls: Option<(OriginTls, Result<ServerName<'static>, String>)>,
    /// What the connections speak; over TLS, what ALPN offers.
    pub speaks: Speaks,
}

impl Dial {
    /// How `config`'s group connects to `addr`, which its servers list as `host`.
    pub fn new(addr: SocketAddr, host: &str, config: &UpstreamConfig) -> Dial {
        let tls = config.tls.as_ref().map(|tls| (tls.clone(), tls.name_for(host)));
        Dial { addr, source: config.source_address, tls, speaks: config.speaks() }
    }

    /// The same, speaking `speaks`.
    pub fn speaking(&self, speaks: Speaks) -> Dial {
        Dial { speaks, ..self.clone() }
    }
}

/// TLS handshakes to one backend: full or resumed, and how long they took.
#[derive(Debug, Default)]
pub struct TlsCounts {
    pub full: AtomicU64,
    pub resumed: AtomicU64,
    pub time: Histogram,
}

/// Why a connection to a backend could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connection refused")]
    Refused,
    #[error("connect timed out after {0:?}")]
    Timeout(Duration),
    /// `EADDRNOTAVAIL`: every local port to this destination is in use (often by
    /// connections in TIME_WAIT).
    #[error("local ports exhausted to {0}")]
    PortsExhausted(SocketAddr),
    /// Binding the configured `source_address` failed: it is not an address of this
    /// host, or its family differs from the backend's.
    #[error("cannot connect from source address {address}: {error}")]
    SourceAddress { address: IpAddr, error: io::Error },
    #[error("unreachable: {0}")]
    Unreachable(io::Error),
    #[error("connect failed: {0}")]
    Io(io::Error),
    /// The TLS handshake failed: the origin's certificate was not trusted for the
    /// name, it asked for a client certificate, or it does not speak TLS.
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// The HTTP/2 session could not start (preface, SETTINGS, the first PING).
    #[error("HTTP/2 handshake failed: {0}")]
    Http2(String),
    /// The origin sent a graceful GOAWAY before the HTTP/2 session was ready (it is
    /// going away, a restart for one): nothing was sent on the connection.
    #[error("the origin sent GOAWAY as the HTTP/2 session started")]
    WentAway,
    /// The backend left its group (a reload or a new resolution) while the request
    /// waited for a connection.
    #[error("the backend was removed from its group")]
    Retired,
}

impl ConnectError {
    /// Whether the origin turned the connection away before anything was sent on it,
    /// as it refuses a stream: the request may go on another connection, whatever its
    /// method.
    pub fn is_refusal(&self) -> bool {
        matches!(self, ConnectError::WentAway)
    }

    /// The same failure again, for each request that waited on the one connect.
    pub fn duplicate(&self) -> ConnectError {
        let again = |e: &io::Error| io::Error::new(e.kind(), e.to_string());
        match self {
            ConnectError::Refused => ConnectError::Refused,
            ConnectError::Timeout(d) => ConnectError::Timeout(*d),
            ConnectError::PortsExhausted(a) => ConnectError::PortsExhausted(*a),
            ConnectError::SourceAddress { address, error } => {
                ConnectError::SourceAddress { address: *address, error: again(error) }
            }
            ConnectError::Unreachable(e) => ConnectError::Unreachable(again(e)),
            ConnectError::Io(e) => ConnectError::Io(again(e)),
            ConnectError::Tls(s) => ConnectError::Tls(s.clone()),
            ConnectError::Http2(s) => ConnectError::Http2(s.clone()),
            ConnectError::WentAway => ConnectError::WentAway,
            ConnectError::Retired => ConnectError::Retired,
        }
    }

    /// Whether the failure says something about the backend (it refused, did not
    /// answer, cannot be reached, went away), so its health counts it. Running out of
    /// local ports or a bad source address is this host's problem: ejecting the backend
    /// would not help.
    pub fn is_backend_failure(&self) -> bool {
        !matches!(
            self,
            ConnectError::PortsExhausted(_)
                | ConnectError::SourceAddress { .. }
                | ConnectError::Retired
        )
    }

    /// A stable snake_case name for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            ConnectError::Refused => "connect_refused",
            ConnectError::Timeout(_) => "connect_timeout",
            ConnectError::PortsExhausted(_) => "ports_exhausted",
            ConnectError::SourceAddress { .. } => "source_address",
            ConnectError::Unreachable(_) => "unreachable",
            ConnectError::Io(_) => "connect_failed",
            ConnectError::Tls(_) => "tls_handshake",
            ConnectError::Http2(_) => "h2_handshake",
            ConnectError::WentAway => "h2_goaway",
            ConnectError::Retired => "backend_removed",
        }
    }
}

/// An open connection to one backend, between requests or carrying one.
///
/// Nothing reads it while it sits in the pool. An origin's FIN or unexpected bytes
/// are found by its `Poolable::is_open` (cheap, from the readiness the event loop
/// has seen) and, definitively, by [`OriginConn::probe`] just before reuse.
pub struct OriginConn {
    pub stream: Stream,
}

/// What a look at an idle connection finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleState {
    /// Nothing to read: it can carry a request.
    Quiet,
    /// End of stream, or an error: the origin closed it.
    Closed,
    /// Bytes nobody asked for (a stray response, a body after a response to HEAD).
    Unasked,
}

impl OriginConn {
    /// Whether the connection can carry a request now: a non-blocking peek finds
    /// neither end of stream nor stray bytes (nginx does the same on its idle
    /// connections). A FIN already received is caught here; one still in flight is
    /// the race `proxy::retry` handles.
    ///
    /// On TLS, bytes may be session housekeeping (a session ticket the origin sent
    /// after the last response): the probe reads and processes them, and the
    /// connection is kept only if no plaintext and no end of stream came with them.
    pub fn probe(&self) -> bool {
        self.look() == IdleState::Quiet
    }

    /// What the probe finds, told apart: open, closed, or bytes nobody asked for.
    pub fn look(&self) -> IdleState {
        if let Some(tls) = self.stream.tls() {
            return tls_state(tls);
        }
        let mut byte = [MaybeUninit::<u8>::uninit(); 1];
        idle_state(SockRef::from(self.stream.tcp()).peek(&mut byte))
    }

    /// Waits until the origin closes the connection, or sends bytes on it, or `until`
    /// passes; true when it closed. Reads what arrives: the connection is not used
    /// again.
    pub async fn closes_by(&self, until: Instant) -> bool {
        let mut byte = [0u8; 1];
        // Each round waits for readiness once; a read that finds nothing clears it.
        loop {
            match idle_state(self.stream.try_read(&mut byte)) {
                IdleState::Closed => return true,
                IdleState::Unasked => return false,
                IdleState::Quiet => {}
            }
            match tokio::time::timeout_at(until, self.stream.readable()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// What reading an idle TLS connection finds: [`IdleState::Quiet`] when records that
/// arrived were processed and carried no plaintext and no end.
fn tls_state(tls: &TlsStream) -> IdleState {
    let mut byte = [0u8; 1];
    idle_state(tls.try_read(&mut byte))
}

/// What a non-blocking read or peek of an idle connection returned, as [`IdleState`].
fn idle_state(read: io::Result<usize>) -> IdleState {
    match read {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => IdleState::Quiet,
        Ok(0) | Err(_) => IdleState::Closed,
        Ok(_) => IdleState::Unasked,
    }
}

impl holdfast_pool::Poolable for OriginConn {
    /// False once the event loop has seen the socket become readable and a peek finds
    /// end of stream or bytes; no system call while nothing has arrived.
    fn is_open(&self) -> bool {
        let mut byte = [MaybeUninit::<u8>::uninit(); 1];
        let tcp = self.stream.tcp();
        // A peek only once the event loop saw the socket readable; else nothing arrived.
        let mut nothing_arrived = || {
            let peeked = tcp.try_io(Interest::READABLE, || SockRef::from(tcp).peek(&mut byte));
            idle_state(peeked) == IdleState::Quiet
        };
        if let Some(tls) = self.stream.tls() {
            // Nothing arrived: open. Something did: only reading it can tell.
            let quiet = !tls.has_buffered() && nothing_arrived();
            return quiet || tls_state(tls) == IdleState::Quiet;
        }
        nothing_arrived()
    }
}

/// Connects as `dial` says within `timeout` (TCP, and the TLS handshake of a TLS
/// upstream, counted in `tls`).
pub async fn connect(
    dial: &Dial,
    timeout: Duration,
    tls: &TlsCounts,
) -> Result<OriginConn, ConnectError> {
    match tokio::time::timeout(timeout, connect_within(dial, tls)).await {
        Err(_) => Err(ConnectError::Timeout(timeout)),
        Ok(result) => result,
    }
}

async fn connect_within(dial: &Dial, counts: &TlsCounts) -> Result<OriginConn, ConnectError> {
    let stream = open(dial.addr, dial.source).await?;
    // Requests and responses are written whole; Nagle would only delay the last segment.
    stream.set_nodelay(true).map_err(ConnectError::Io)?;
    let Some((tls, name)) = &dial.tls else {
        return Ok(OriginConn { stream: Stream::from(stream) });
    };
    let name = name.clone().map_err(ConnectError::Tls)?;
    let started = Instant::now();
    let connector =
        tokio_rustls::TlsConnector::from(std::sync::Arc::clone(tls.config_for(dial.speaks)));
    let session = connector
        .connect(name, stream)
        .await
        .map_err(|e| ConnectError::Tls(handshake_error(&e)))?;
    counts.time.observe(started.elapsed());
    let (tcp, conn) = session.into_inner();
    let counter = match conn.handshake_kind() {
        Some(HandshakeKind::Resumed) => &counts.resumed,
        _ => &counts.full,
    };
    counter.fetch_add(1, Relaxed);
    Ok(OriginConn { stream: Stream::Tls(Box::new(TlsStream::new(tcp, conn.into()))) })
}

/// The TLS library's words for why a handshake failed.
fn handshake_error(e: &io::Error) -> String {
    match net::tls_error(e) {
        Some(tls) => tls.to_string(),
        None if e.kind() == io::ErrorKind::UnexpectedEof => {
            "the origin closed the connection during the handshake (does it speak TLS?)".into()
        }
        None => e.to_string(),
    }
}

/// The TCP connection, before any socket options.
///
/// With a `source` address, the socket is bound to `(source, 0)` with
/// `IP_BIND_ADDRESS_NO_PORT` (Linux): the kernel then picks the local port at connect
/// time, so one port serves every destination it is not already used with. A plain
/// bind to port 0 would reserve a port for the socket's whole life before the
/// destination is known, so the ports of the source address would run out (at bind
/// time) after some 28,000 open connections across all backends together.
async fn open(addr: SocketAddr, source: Option<IpAddr>) -> Result<TcpStream, ConnectError> {
    let Some(source) = source else {
        return TcpStream::connect(addr).await.map_err(|e| classify(e, addr));
    };
    let bound = || -> io::Result<TcpSocket> {
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        bind_address_no_port(&socket)?;
        socket.bind(SocketAddr::new(source, 0))?;
        Ok(socket)
    };
    let socket = bound().map_err(|error| ConnectError::SourceAddress { address: source, error })?;
    socket.connect(addr).await.map_err(|e| classify(e, addr))
}

/// Sets `IP_BIND_ADDRESS_NO_PORT`: a bind to port 0 takes the address only, and the
/// port is chosen at connect time.
#[cfg(target_os = "linux")]
fn bind_address_no_port(socket: &TcpSocket) -> io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt::IpBindAddressNoPort};
    setsockopt(socket, IpBindAddressNoPort, &true).map_err(io::Error::from)
}

/// Elsewhere the option does not exist; the bind reserves a port as usual.
#[cfg(not(target_os = "linux"))]
fn bind_address_no_port(_socket: &TcpSocket) -> io::Result<()> {
    Ok(())
}

/// Maps a failed connect to what the operator should know. `EADDRNOTAVAIL` from
/// `connect` means no local port is free for this destination (with a source address,
/// its bind took no port, so only the connect can run out).
fn classify(e: io::Error, addr: SocketAddr) -> ConnectError {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ConnectError::Refused,
        io::ErrorKind::AddrNotAvailable => ConnectError::PortsExhausted(addr),
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            ConnectError::Unreachable(e)
        }
        _ => ConnectError::Io(e),
    }
}
