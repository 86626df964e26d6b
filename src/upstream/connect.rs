//! Opens one connection to a backend (TCP connect from a chosen source address, if
//! configured, and socket options), and checks a pooled one before it is reused.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use std::mem::MaybeUninit;

use socket2::SockRef;

use crate::net::Stream;
use tokio::io::Interest;
use tokio::net::{TcpSocket, TcpStream};

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
}

impl ConnectError {
    /// Whether the failure says something about the backend (it refused, did not
    /// answer, cannot be reached), so its health counts it. Running out of local ports
    /// or a bad source address is this host's problem: ejecting the backend would not
    /// help.
    pub fn is_backend_failure(&self) -> bool {
        !matches!(self, ConnectError::PortsExhausted(_) | ConnectError::SourceAddress { .. })
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

impl OriginConn {
    /// Whether the connection can carry a request now: a non-blocking peek finds
    /// neither end of stream nor stray bytes (nginx does the same on its idle
    /// connections). A FIN already received is caught here; one still in flight is
    /// the race `proxy::retry` handles.
    pub fn probe(&self) -> bool {
        let mut byte = [MaybeUninit::<u8>::uninit(); 1];
        nothing_arrived(SockRef::from(self.stream.tcp()).peek(&mut byte))
    }
}

/// Whether a peek at an idle connection found it open: no end of stream and no bytes
/// nobody asked for, only nothing to read.
fn nothing_arrived(peeked: io::Result<usize>) -> bool {
    matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

impl holdfast_pool::Poolable for OriginConn {
    /// False once the event loop has seen the socket become readable and a peek finds
    /// end of stream or bytes; no system call while nothing has arrived.
    fn is_open(&self) -> bool {
        let mut byte = [MaybeUninit::<u8>::uninit(); 1];
        let tcp = self.stream.tcp();
        nothing_arrived(tcp.try_io(Interest::READABLE, || SockRef::from(tcp).peek(&mut byte)))
    }
}

/// Connects to `addr` within `timeout`, from `source` if given (else the kernel picks
/// the local address).
pub async fn connect(
    addr: SocketAddr,
    source: Option<IpAddr>,
    timeout: Duration,
) -> Result<OriginConn, ConnectError> {
    let stream = match tokio::time::timeout(timeout, open(addr, source)).await {
        Err(_) => return Err(ConnectError::Timeout(timeout)),
        Ok(result) => result?,
    };
    // Requests and responses are written whole; Nagle would only delay the last segment.
    stream.set_nodelay(true).map_err(ConnectError::Io)?;
    Ok(OriginConn { stream: Stream::from(stream) })
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
