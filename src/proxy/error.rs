//! Why a request could not be proxied, and the status and body the client gets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};

use super::body::ClientBody;
use super::retry::NotReplayed;
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
    Closed(hyper::Error),
    /// A pooled connection failed after the request may have reached the origin, and
    /// `retry::may_replay` would not send it again.
    #[error(
        "connection closed before a response: {error}; the {method} request was not \
         retried because it may have reached the origin and {why}"
    )]
    NotRetried { error: hyper::Error, method: Method, why: NotReplayed },
    #[error("reading the client's request body failed: {0}")]
    ClientBody(hyper::Error),
}

impl ProxyErrorKind {
    /// A stable snake_case name for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            ProxyErrorKind::Connect(e) => e.as_str(),
            ProxyErrorKind::Queue(LeaseError::QueueTimeout { .. }) => "queue_timeout",
            ProxyErrorKind::Queue(_) => "queue_full",
            ProxyErrorKind::HeaderTimeout(_) => "header_timeout",
            ProxyErrorKind::Closed(_) => "closed",
            ProxyErrorKind::NotRetried { why: NotReplayed::NotIdempotent, .. } => {
                "not_retried_not_idempotent"
            }
            ProxyErrorKind::NotRetried { why: NotReplayed::BodyStreamed, .. } => {
                "not_retried_body_streamed"
            }
            ProxyErrorKind::ClientBody(_) => "client_body",
        }
    }
}

impl ProxyError {
    /// The status the client gets: 400, 502, 503 or 504.
    pub fn status(&self) -> StatusCode {
        match &self.kind {
            ProxyErrorKind::Connect(ConnectError::Timeout(_))
            | ProxyErrorKind::HeaderTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ProxyErrorKind::Connect(_)
            | ProxyErrorKind::Closed(_)
            | ProxyErrorKind::NotRetried { .. } => StatusCode::BAD_GATEWAY,
            ProxyErrorKind::ClientBody(_) => StatusCode::BAD_REQUEST,
            ProxyErrorKind::Queue(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Short text naming the upstream, backend and reason.
    pub fn to_response(&self) -> Response<ClientBody> {
        local_response(self.status(), format!("holdfast: {self}\n"))
    }
}

/// A response written by holdfast itself, with a plain-text body.
pub fn local_response(status: StatusCode, text: String) -> Response<ClientBody> {
    let mut resp = Response::new(ClientBody::text(Bytes::from(text)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

impl From<LeaseError> for ProxyErrorKind {
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::Connect(e) => ProxyErrorKind::Connect(e),
            queue => ProxyErrorKind::Queue(queue),
        }
    }
}
