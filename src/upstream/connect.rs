//! Opens one HTTP/1.1 connection to a backend: TCP connect, socket options, handshake.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::proxy::body::RequestBody;

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
    #[error("unreachable: {0}")]
    Unreachable(io::Error),
    #[error("connect failed: {0}")]
    Io(io::Error),
    #[error("HTTP/1.1 handshake failed: {0}")]
    Handshake(hyper::Error),
}

/// A live HTTP/1.1 client connection to one backend.
///
/// hyper's connection task runs beside it and reads the socket while the connection is
/// idle, so an origin's FIN or unexpected bytes close it and `is_open`
/// turns false without anyone sending on it.
pub struct UpstreamConn {
    pub sender: http1::SendRequest<RequestBody>,
}

impl holdfast_pool::Poolable for UpstreamConn {
    fn is_open(&self) -> bool {
        !self.sender.is_closed()
    }
}

/// Connects to `addr` within `timeout` and starts the HTTP/1.1 connection task.
pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<UpstreamConn, ConnectError> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Err(_) => return Err(ConnectError::Timeout(timeout)),
        Ok(Err(e)) => return Err(classify(e, addr)),
        Ok(Ok(stream)) => stream,
    };
    // Requests and responses are written whole; Nagle would only delay the last segment.
    stream.set_nodelay(true).map_err(ConnectError::Io)?;
    let (sender, conn) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(ConnectError::Handshake)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(backend = %addr, error = %e, "upstream connection ended with an error");
        }
    });
    Ok(UpstreamConn { sender })
}

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
