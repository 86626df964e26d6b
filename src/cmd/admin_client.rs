//! Sends one request to a running holdfast's admin listener and returns its status and
//! body: `holdfast stats` reads `GET /metrics`, `holdfast reload` sends `POST /reload`.
//!
//! Each request gets its own connection (hyper's HTTP/1.1 client over a tokio socket)
//! and one deadline over connecting, sending and reading the whole body. The commands
//! are its only users: the proxy path never calls the admin listener, and the active
//! health checks of origins (`upstream::check`) are not admin requests.

use std::borrow::Cow;
use std::error::Error as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

/// Far above any page the admin listener writes (a few KiB per server); the cap keeps a
/// wrong address from filling memory.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// Talks to the admin listener at one address.
#[derive(Debug, Clone, Copy)]
pub struct AdminClient {
    addr: SocketAddr,
    timeout: Duration,
}

/// What the admin listener answered, whatever the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminResponse {
    pub status: StatusCode,
    pub body: Bytes,
}

impl AdminResponse {
    /// The body as text, with invalid UTF-8 replaced.
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }
}

/// A request to the admin listener that got no complete response.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} to the admin listener at {addr} failed: {kind}")]
pub struct AdminError {
    pub addr: SocketAddr,
    pub method: Method,
    pub path: &'static str,
    pub kind: AdminErrorKind,
}

/// Why a request to the admin listener failed. Each message carries its cause, so the
/// error has no `source()`.
#[derive(Debug, thiserror::Error)]
pub enum AdminErrorKind {
    /// Nothing listens at the address.
    #[error(
        "connection refused: holdfast may not be running, or its admin listener is on \
         another address or off (it listens only with `--admin ADDR` or an `[admin]` section)"
    )]
    Refused,
    #[error("connecting: {0}")]
    Connect(std::io::Error),
    #[error("no connection within {}", humantime::format_duration(*.0))]
    ConnectTimeout(Duration),
    #[error("no complete response within {}", humantime::format_duration(*.0))]
    ResponseTimeout(Duration),
    /// The exchange broke off or the response was not valid HTTP/1.1.
    #[error("{}", with_sources(.0))]
    Http(hyper::Error),
    #[error("the response body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
}

impl AdminClient {
    /// A client for the admin listener at `addr`; each request must complete within
    /// `timeout`, connecting included.
    pub fn new(addr: SocketAddr, timeout: Duration) -> AdminClient {
        AdminClient { addr, timeout }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `GET path`. `path` is a literal such as `"/metrics"`; an invalid one panics.
    pub async fn get(&self, path: &'static str) -> Result<AdminResponse, AdminError> {
        self.send(Method::GET, path).await
    }

    /// `POST path` with an empty body. `path` is a literal such as `"/reload"`; an
    /// invalid one panics.
    pub async fn post(&self, path: &'static str) -> Result<AdminResponse, AdminError> {
        self.send(Method::POST, path).await
    }

    async fn send(&self, method: Method, path: &'static str) -> Result<AdminResponse, AdminError> {
        match self.exchange(&method, path).await {
            Ok(response) => Ok(response),
            Err(kind) => Err(AdminError { addr: self.addr, method, path, kind }),
        }
    }

    async fn exchange(
        &self,
        method: &Method,
        path: &'static str,
    ) -> Result<AdminResponse, AdminErrorKind> {
        let deadline = Instant::now() + self.timeout;
        let stream = match timeout_at(deadline, TcpStream::connect(self.addr)).await {
            Err(_) => return Err(AdminErrorKind::ConnectTimeout(self.timeout)),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(AdminErrorKind::Refused)
            }
            Ok(Err(e)) => return Err(AdminErrorKind::Connect(e)),
            Ok(Ok(stream)) => stream,
        };
        let request = self.request(method, path);
        let exchange = async {
            let (mut sender, conn) =
                http1::handshake(TokioIo::new(stream)).await.map_err(AdminErrorKind::Http)?;
            let response = async move {
                let response = sender.send_request(request).await.map_err(AdminErrorKind::Http)?;
                let status = response.status();
                let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
                    .collect()
                    .await
                    .map_err(body_error)?
                    .to_bytes();
                Ok(AdminResponse { status, body })
            };
            // The connection is driven here rather than on a task of its own, so a
            // timeout drops the socket with the request. It ends once the response is
            // read (the request says `Connection: close`, and the sender is dropped); a
            // failure of it reaches `send_request` or the body as well.
            let (response, _) = tokio::join!(response, conn);
            response
        };
        match timeout_at(deadline, exchange).await {
            Ok(response) => response,
            Err(_) => Err(AdminErrorKind::ResponseTimeout(self.timeout)),
        }
    }

    fn request(&self, method: &Method, path: &'static str) -> Request<Empty<Bytes>> {
        let mut request = Request::new(Empty::new());
        *request.method_mut() = method.clone();
        *request.uri_mut() = Uri::from_static(path);
        let host = HeaderValue::try_from(self.addr.to_string()).expect("an ip:port is header text");
        let headers = request.headers_mut();
        headers.insert(header::HOST, host);
        let agent = concat!("holdfast/", env!("CARGO_PKG_VERSION"));
        headers.insert(header::USER_AGENT, HeaderValue::from_static(agent));
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        if *method == Method::POST {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        }
        request
    }
}

/// `Limited` fails with the body's own error or with its length limit.
fn body_error(e: Box<dyn std::error::Error + Send + Sync>) -> AdminErrorKind {
    match e.downcast::<hyper::Error>() {
        Ok(e) => AdminErrorKind::Http(*e),
        Err(_) => AdminErrorKind::TooLarge,
    }
}

/// `error: its source: ...`: hyper's message alone often leaves out the cause
/// ("connection error" without the reset that caused it).
fn with_sources(e: &hyper::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    // Bounded by the length of the source chain.
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
