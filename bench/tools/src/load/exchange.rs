//! One HTTP/1.1 exchange on one TCP connection (or one TLS session on it), with any failure
//! sorted into an [`ErrorKind`].
//!
//! A [`Connection`] is a hyper client connection whose driver runs on its own task. It does
//! no pooling and no retries: the load shapes decide when to reconnect. `mixed`, `hold`,
//! `burst` and `handshakes` (over TLS) send on it; `rate` and `hosts` use the cheaper raw
//! client of [`super::raw`], which shares [`ErrorKind`] and [`ExchangeError`] with it.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::rt::{Read, Write};
use hyper_util::rt::TokioIo;
use rustls::HandshakeKind;
use rustls_pki_types::ServerName;
use serde::Serialize;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::raw::ProtocolError;

/// How long [`Connection::close`] (and [`super::raw::RawSlot::close`]) waits for the socket
/// to be shut down before giving up on it.
pub(super) const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// The classes of failure the load reports count, one JSON key each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// `connect` failed with EADDRNOTAVAIL (errno 99): no local port left for the address.
    AddrNotAvailable,
    ConnectRefused,
    ConnectOther,
    Status5xx,
    /// A status that is neither 2xx nor 5xx.
    StatusOther,
    /// Reset or EOF in the middle of an exchange, or a connection that closed under us.
    Io,
    Timeout,
    /// The TLS handshake failed: an alert, a certificate the client does not trust, or the
    /// peer closing before it finished.
    Tls,
}

impl ErrorKind {
    pub const ALL: [Self; 8] = [
        Self::AddrNotAvailable,
        Self::ConnectRefused,
        Self::ConnectOther,
        Self::Status5xx,
        Self::StatusOther,
        Self::Io,
        Self::Timeout,
        Self::Tls,
    ];

    /// Position in [`ErrorKind::ALL`], for counters kept in arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AddrNotAvailable => "addr_not_available",
            Self::ConnectRefused => "connect_refused",
            Self::ConnectOther => "connect_other",
            Self::Status5xx => "status_5xx",
            Self::StatusOther => "status_other",
            Self::Io => "io",
            Self::Timeout => "timeout",
            Self::Tls => "tls",
        }
    }

    /// A response arrived (with a status we count as a failure): the connection still works.
    pub fn is_status(self) -> bool {
        matches!(self, Self::Status5xx | Self::StatusOther)
    }
}

/// Why one exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("connect failed: {0}")]
    Connect(io::Error),
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("exchange failed: {0}")]
    Http(hyper::Error),
    /// The raw client's socket broke: reset, or EOF before the response was complete.
    #[error("connection broke: {0}")]
    Io(io::Error),
    /// The raw client got bytes that are not a well-formed response.
    #[error("bad response: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("status {0}")]
    Status(StatusCode),
    #[error("no complete response before the deadline")]
    Timeout,
}

impl ExchangeError {
    /// The connection it happened on carries no more requests: every failure but a
    /// response with a status we count as one.
    pub fn ends_connection(&self) -> bool {
        !self.kind().is_status()
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Connect(error) => connect_error_kind(error),
            Self::Tls(_) => ErrorKind::Tls,
            Self::Http(_) | Self::Io(_) | Self::Protocol(_) => ErrorKind::Io,
            Self::Status(status) if status.is_server_error() => ErrorKind::Status5xx,
            Self::Status(_) => ErrorKind::StatusOther,
            Self::Timeout => ErrorKind::Timeout,
        }
    }
}

/// Runs `exchange` until `deadline`; past it, the exchange is dropped and the outcome is
/// [`ExchangeError::Timeout`].
pub async fn by_deadline<T>(
    deadline: Instant,
    exchange: impl Future<Output = Result<T, ExchangeError>>,
) -> Result<T, ExchangeError> {
    tokio::time::timeout_at(deadline, exchange).await.unwrap_or(Err(ExchangeError::Timeout))
}

fn connect_error_kind(error: &io::Error) -> ErrorKind {
    match error.kind() {
        io::ErrorKind::AddrNotAvailable => ErrorKind::AddrNotAvailable,
        io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
        _ => ErrorKind::ConnectOther,
    }
}

/// An HTTP/1.1 client connection: the request half here, the driver on its own task.
#[derive(Debug)]
pub struct Connection {
    sender: SendRequest<Empty<Bytes>>,
    driver: JoinHandle<()>,
}

/// Opens a TCP connection to `addr` with TCP_NODELAY and starts an HTTP/1.1 client on it.
pub async fn connect(addr: SocketAddr) -> Result<Connection, ExchangeError> {
    start_http1(TokioIo::new(connect_tcp(addr).await?)).await
}

/// Opens a TCP connection to `addr`, handshakes TLS for `name` with `connector` (which
/// resumes a session if its configuration keeps them and holds one for `name`), and
/// starts an HTTP/1.1 client on the session. Returns the connection and how the handshake
/// went.
pub async fn connect_tls(
    addr: SocketAddr,
    connector: &TlsConnector,
    name: ServerName<'static>,
) -> Result<(Connection, Option<HandshakeKind>), ExchangeError> {
    let stream = connect_tcp(addr).await?;
    let tls = connector.connect(name, stream).await.map_err(ExchangeError::Tls)?;
    let kind = tls.get_ref().1.handshake_kind();
    Ok((start_http1(TokioIo::new(tls)).await?, kind))
}

/// Opens a TCP connection to `addr` with TCP_NODELAY (each request goes out in one segment).
pub(super) async fn connect_tcp(addr: SocketAddr) -> Result<TcpStream, ExchangeError> {
    let stream = TcpStream::connect(addr).await.map_err(ExchangeError::Connect)?;
    stream.set_nodelay(true).map_err(ExchangeError::Connect)?;
    Ok(stream)
}

/// Like [`connect_tcp`], from local address `source` (its port chosen by the kernel) when
/// given: a client of its own on loopback, as 127.0.0.2 is beside 127.0.0.3.
pub(super) async fn connect_tcp_from(
    addr: SocketAddr,
    source: Option<IpAddr>,
) -> Result<TcpStream, ExchangeError> {
    let Some(source) = source else {
        return connect_tcp(addr).await;
    };
    let socket = unbound_socket(addr).map_err(ExchangeError::Connect)?;
    socket.bind(SocketAddr::new(source, 0)).map_err(ExchangeError::Connect)?;
    let stream = socket.connect(addr).await.map_err(ExchangeError::Connect)?;
    stream.set_nodelay(true).map_err(ExchangeError::Connect)?;
    Ok(stream)
}

/// A TCP socket of `addr`'s family, not yet bound or connected.
pub(super) fn unbound_socket(addr: SocketAddr) -> io::Result<TcpSocket> {
    if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
}

async fn start_http1<T>(io: T) -> Result<Connection, ExchangeError>
where
    T: Read + Write + Unpin + Send + 'static,
{
    let (sender, driver) =
        hyper::client::conn::http1::handshake(io).await.map_err(ExchangeError::Http)?;
    // The driver ends when the peer closes or when `sender` is dropped and the
    // connection is idle; either way the socket is closed then.
    let driver = tokio::spawn(async move {
        let _ = driver.await;
    });
    Ok(Connection { sender, driver })
}

impl Connection {
    /// Sends `request` and reads the whole response body. A non-2xx status is an
    /// [`ExchangeError::Status`], after which the connection is still usable.
    pub async fn send(&mut self, request: Request<Empty<Bytes>>) -> Result<(), ExchangeError> {
        self.sender.ready().await.map_err(ExchangeError::Http)?;
        let response = self.sender.send_request(request).await.map_err(ExchangeError::Http)?;
        let status = response.status();
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            frame.map_err(ExchangeError::Http)?;
        }
        if status.is_success() {
            Ok(())
        } else {
            Err(ExchangeError::Status(status))
        }
    }

    /// The peer closed the connection (or it broke): no request can go out on it.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// Closes the connection and waits (briefly) until the socket is shut down.
    pub async fn close(self) {
        let Self { sender, mut driver } = self;
        drop(sender);
        if tokio::time::timeout(CLOSE_WAIT, &mut driver).await.is_err() {
            driver.abort();
        }
    }
}

/// One keep-alive connection that a worker sends on again and again, reconnecting when the
/// previous exchange broke it or the peer closed it while idle.
#[derive(Debug)]
pub struct KeepAliveSlot {
    addr: SocketAddr,
    connection: Option<Connection>,
    connects: u64,
}

impl KeepAliveSlot {
    /// A slot that starts with `connection` (already counted by the caller) or connects lazily.
    pub fn new(addr: SocketAddr, connection: Option<Connection>) -> Self {
        Self { addr, connection, connects: 0 }
    }

    /// TCP connections this slot opened.
    pub fn connects(&self) -> u64 {
        self.connects
    }

    /// Sends `request` and reads the response before `deadline`.
    ///
    /// A connection the peer closed while idle (nothing was sent on it yet) is replaced
    /// without an error: keep-alive limits such as nginx's `keepalive_requests` close
    /// connections gracefully. Any failure after that point is returned, and unless it was
    /// a non-2xx status the connection is dropped, so the next call reconnects.
    pub async fn send(
        &mut self,
        request: Request<Empty<Bytes>>,
        deadline: Instant,
    ) -> Result<(), ExchangeError> {
        let exchange = async { self.ready_connection().await?.send(request).await };
        let outcome = by_deadline(deadline, exchange).await;
        if outcome.as_ref().is_err_and(ExchangeError::ends_connection) {
            self.connection = None;
        }
        outcome
    }

    async fn ready_connection(&mut self) -> Result<&mut Connection, ExchangeError> {
        let is_ready = match &mut self.connection {
            Some(connection) => connection.sender.ready().await.is_ok(),
            None => false,
        };
        if !is_ready {
            self.connection = None;
            self.connection = Some(connect(self.addr).await?);
            self.connects += 1;
        }
        Ok(self.connection.as_mut().expect("a connection was set just above"))
    }

    /// Closes the connection, if any (see [`Connection::close`]).
    pub async fn close(self) {
        if let Some(connection) = self.connection {
            connection.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_errors_are_classified_by_errno() {
        let unavailable = ExchangeError::Connect(io::Error::from_raw_os_error(99));
        assert_eq!(unavailable.kind(), ErrorKind::AddrNotAvailable);
        let refused = ExchangeError::Connect(io::ErrorKind::ConnectionRefused.into());
        assert_eq!(refused.kind(), ErrorKind::ConnectRefused);
        let other = ExchangeError::Connect(io::ErrorKind::PermissionDenied.into());
        assert_eq!(other.kind(), ErrorKind::ConnectOther);
    }

    #[test]
    fn failed_handshakes_are_their_own_kind() {
        let error = ExchangeError::Tls(io::ErrorKind::InvalidData.into());
        assert_eq!(error.kind(), ErrorKind::Tls);
        assert_eq!(error.kind().as_str(), "tls");
    }

    #[test]
    fn statuses_are_split_into_5xx_and_other() {
        assert_eq!(ExchangeError::Status(StatusCode::BAD_GATEWAY).kind(), ErrorKind::Status5xx);
        assert_eq!(ExchangeError::Status(StatusCode::NOT_FOUND).kind(), ErrorKind::StatusOther);
    }

    #[test]
    fn all_lists_every_kind_at_its_index() {
        for (position, kind) in ErrorKind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), position);
        }
    }
}
