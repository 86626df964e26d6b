//! Why a request could not be proxied, and the status and text the client gets.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Method;

use super::body_copy::CopyLost;
use super::retry::NotReplayed;
use crate::http1::request::FramingViolation;
use crate::http1::response::BadResponse;
use crate::http2::encode::NotH2;
use crate::spool::Full;
use crate::upstream::{ConnectError, LeaseError};

/// A failure on the way to or from one backend.
#[derive(Debug, thiserror::Error)]
#[error("upstream {upstream} ({backend}): {kind}")]
pub struct ProxyError {
    pub upstream: Arc<str>,
    pub backend: SocketAddr,
    pub kind: ProxyErrorKind,
    /// The request went out on a pooled connection (not a fresh one).
    pub reused: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyErrorKind {
    #[error("{0}")]
    Connect(#[from] ConnectError),
    #[error("{0}")]
    Queue(LeaseError),
    #[error("no response header within {0:?}")]
    HeaderTimeout(Duration),
    #[error("connection closed before a response: {0}")]
    Closed(io::Error),
    /// A pooled connection failed after the request may have reached the origin, and
    /// `retry::may_replay` would not send it again.
    #[error(
        "connection closed before a response: {error}; the {method} request was not \
         retried because it may have reached the origin and {why}"
    )]
    NotReplayed { error: io::Error, method: Method, why: NotReplayed },
    /// An HTTP/2 origin refused the stream, so it never processed the request, but its
    /// body streamed without a copy to send again (`body_copy`).
    #[error(
        "the origin refused the stream ({error}), so it did not process the {method} \
         request, and holdfast could not send it again: {why}"
    )]
    RefusedNotResent { error: io::Error, method: Method, why: CopyLost },
    #[error("{0}")]
    BadResponse(#[from] BadResponse),
    #[error("reading the client's request body failed: {0}")]
    ClientBody(ClientBodyError),
    /// The client did not keep its request body moving (`proxy::pace`).
    #[error("the client sent its request body too slowly")]
    ClientTimeout,
    #[error("the request body is larger than client_max_body ({0} bytes)")]
    BodyTooLarge(u64),
    /// Request buffering could not hold the whole body.
    #[error("the request body is larger than request buffering holds ({0} bytes)")]
    BodyTooLargeToBuffer(u64),
    /// Request buffering found holdfast's buffers full (`buffering.memory_total`,
    /// `file_total`) or its temporary file failing.
    #[error("holdfast's request buffers are full")]
    BuffersFull,
    /// The request has something HTTP/2 cannot carry, for an origin that speaks it:
    /// holdfast's side of the exchange, never the origin's.
    #[error("{0}")]
    NotH2(NotH2),
    /// A WebSocket from an HTTP/2 client (extended CONNECT, RFC 8441) for an HTTP/2
    /// origin that did not send `SETTINGS_ENABLE_CONNECT_PROTOCOL`.
    #[error(
        "the HTTP/2 origin does not accept WebSockets over HTTP/2 (it did not send \
         SETTINGS_ENABLE_CONNECT_PROTOCOL)"
    )]
    NoWebSocketOverH2,
    /// An HTTP/1.1 origin answered an HTTP/2 client's WebSocket with this 2xx instead
    /// of switching protocols: passed on, it would tell the client its WebSocket is
    /// open (RFC 8441, 5).
    #[error("the origin answered {0} to a WebSocket upgrade instead of switching protocols (101)")]
    WebSocketNotSwitched(u16),
}

/// Why the client's request body could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    #[error("the client closed the connection before the body ended")]
    Closed,
    #[error("{0}")]
    Io(io::Error),
    #[error("{}", .0.as_str())]
    Invalid(FramingViolation),
}

impl ProxyErrorKind {
    /// A stable snake_case name for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            ProxyErrorKind::Connect(e) => e.as_str(),
            ProxyErrorKind::Queue(LeaseError::QueueTimeout { .. }) => "queue_timeout",
            ProxyErrorKind::Queue(LeaseError::ShareFull { .. }) => "client_share_full",
            ProxyErrorKind::Queue(_) => "queue_full",
            ProxyErrorKind::HeaderTimeout(_) => "response_timeout",
            ProxyErrorKind::Closed(e) if refused_our_side(e) => "tls_handshake",
            ProxyErrorKind::Closed(_) => "origin_closed",
            ProxyErrorKind::NotReplayed { .. } => "not_replayed",
            ProxyErrorKind::RefusedNotResent { .. } => "refused_not_resent",
            ProxyErrorKind::BadResponse(_) => "bad_response",
            ProxyErrorKind::ClientBody(ClientBodyError::Invalid(_)) => "bad_request",
            ProxyErrorKind::ClientBody(_) => "client_aborted",
            ProxyErrorKind::ClientTimeout => "client_timeout",
            ProxyErrorKind::BodyTooLarge(_) | ProxyErrorKind::BodyTooLargeToBuffer(_) => {
                "body_too_large"
            }
            ProxyErrorKind::BuffersFull => "buffers_full",
            ProxyErrorKind::NotH2(_) => "not_h2",
            ProxyErrorKind::NoWebSocketOverH2 => "no_websocket_over_h2",
            ProxyErrorKind::WebSocketNotSwitched(_) => "websocket_not_switched",
        }
    }
}

/// Whether `e` is a TLS alert in which the origin refused holdfast's side of the
/// session: its client certificate (missing, or not trusted), or its access. Under TLS
/// 1.3 an origin that wants a client certificate says so only after holdfast's side of
/// the handshake is done, so the refusal arrives where the response was awaited: it is
/// a failed handshake all the same.
fn refused_our_side(e: &io::Error) -> bool {
    use rustls::AlertDescription as A;
    let alert = crate::net::tls_error(e);
    matches!(
        alert,
        Some(rustls::Error::AlertReceived(
            A::CertificateRequired
                | A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::AccessDenied
                | A::HandshakeFailure
        ))
    )
}

impl ProxyErrorKind {
    /// Whether the failure is the backend's (it failed or did not answer in time), so
    /// its health counts it like a 5xx. Connect failures are counted where they happen;
    /// full queues, bad client bodies and refused streams (an origin going away
    /// gracefully) are not the backend's doing.
    pub fn is_backend_failure(&self) -> bool {
        matches!(
            self,
            ProxyErrorKind::HeaderTimeout(_)
                | ProxyErrorKind::Closed(_)
                | ProxyErrorKind::NotReplayed { .. }
                | ProxyErrorKind::BadResponse(_)
        )
    }
}

impl ProxyErrorKind {
    /// Whether the client caused the failure (its body was malformed, cut short, too
    /// slow or too large): nothing an operator of holdfast or the origin can act on, so
    /// it is logged at debug, not counted among upstream failures.
    pub fn is_client_fault(&self) -> bool {
        matches!(
            self,
            ProxyErrorKind::ClientBody(_)
                | ProxyErrorKind::ClientTimeout
                | ProxyErrorKind::BodyTooLarge(_)
                | ProxyErrorKind::BodyTooLargeToBuffer(_)
                | ProxyErrorKind::Queue(LeaseError::ShareFull { .. })
        )
    }
}

impl ProxyError {
    /// The status the client gets: 400, 408, 413, 501, 502, 503 or 504.
    pub fn status(&self) -> u16 {
        match &self.kind {
            ProxyErrorKind::Connect(ConnectError::Timeout(_))
            | ProxyErrorKind::HeaderTimeout(_) => 504,
            ProxyErrorKind::Connect(_)
            | ProxyErrorKind::Closed(_)
            | ProxyErrorKind::NotReplayed { .. }
            | ProxyErrorKind::RefusedNotResent { .. }
            | ProxyErrorKind::BadResponse(_)
            | ProxyErrorKind::NotH2(_)
            | ProxyErrorKind::WebSocketNotSwitched(_) => 502,
            ProxyErrorKind::ClientBody(_) => 400,
            ProxyErrorKind::ClientTimeout => 408,
            ProxyErrorKind::BodyTooLarge(_) | ProxyErrorKind::BodyTooLargeToBuffer(_) => 413,
            ProxyErrorKind::NoWebSocketOverH2 => 501,
            ProxyErrorKind::Queue(_) | ProxyErrorKind::BuffersFull => 503,
        }
    }

    /// The response body: holdfast's name, then the upstream, backend and reason.
    pub fn text(&self) -> String {
        format!("holdfast: {self}\n")
    }
}

/// Request buffering could not hold the body: past its exchange's bound (413), or with
/// holdfast's buffers full (503).
impl From<Full> for ProxyErrorKind {
    fn from(e: Full) -> Self {
        match e {
            Full::Exchange(max) => ProxyErrorKind::BodyTooLargeToBuffer(max),
            Full::Process => ProxyErrorKind::BuffersFull,
        }
    }
}

impl From<LeaseError> for ProxyErrorKind {
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::Connect(e) => ProxyErrorKind::Connect(e),
            LeaseError::ClientGone => ProxyErrorKind::ClientBody(ClientBodyError::Closed),
            queue => ProxyErrorKind::Queue(queue),
        }
    }
}
