//! The request path: one client request in, one upstream exchange, one response out.
//!
//! For each request: refuse it if its framing was bad, pick a backend, lease a
//! connection (pooled or new), rewrite headers, send, and stream the response back
//! with a body that returns the connection to its pool when the exchange ends cleanly.

pub mod body;
pub mod error;
pub mod headers;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::time::error::Elapsed;

use holdfast_pool::CloseReason;
use http::{header, HeaderValue, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use body::{ClientBody, RequestBody, ResponseBody, Reuse, Upload};
use error::{local_response, ProxyError, ProxyErrorKind};

use crate::config::Timeouts;
use crate::framing::FramingState;
use crate::upstream::{keepalive, Backend, Lease, Upstream};

/// Serves requests for one listener: everything goes to one upstream group.
pub struct Proxy {
    upstream: Arc<Upstream>,
    timeouts: Timeouts,
}

/// What the proxy knows about the client connection a request came on.
pub struct ClientContext {
    pub addr: SocketAddr,
    pub framing: Arc<FramingState>,
}

impl Proxy {
    pub fn new(upstream: Arc<Upstream>, timeouts: Timeouts) -> Self {
        Proxy { upstream, timeouts }
    }

    /// Answers one client request.
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        client: &ClientContext,
    ) -> Response<ClientBody> {
        if let Some(violation) = client.framing.rejection() {
            tracing::debug!(client = %client.addr, reason = violation.as_str(), "refused request framing");
            let mut resp = local_response(
                StatusCode::BAD_REQUEST,
                format!("holdfast: {}\n", violation.as_str()),
            );
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return resp;
        }
        let backend = self.upstream.pick();
        match self.exchange(req, client.addr, backend).await {
            Ok(resp) => resp,
            Err(e) => {
                tracing::warn!(
                    upstream = %e.upstream, backend = %e.backend, reused = e.reused,
                    status = e.status().as_u16(), "{}", e.kind
                );
                e.to_response()
            }
        }
    }

    async fn exchange(
        &self,
        req: Request<Incoming>,
        client: SocketAddr,
        backend: &Backend,
    ) -> Result<Response<ClientBody>, ProxyError> {
        let mut req = req;
        let upgrade = (req.version() == Version::HTTP_11)
            .then(|| headers::upgrade_request(req.headers()))
            .flatten();
        let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        let (mut parts, incoming) = req.into_parts();
        rewrite_request_head(&mut parts, client, backend.addr);
        if let Some(protocol) = &upgrade {
            headers::set_upgrade(&mut parts.headers, protocol.clone());
        }
        let (body, upload) = RequestBody::new(incoming);
        let (resp, lease) = self.send(Request::from_parts(parts, body), &upload, backend).await?;
        match client_upgrade {
            Some(on_client) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
                Ok(splice_upgrade(resp, lease, on_client))
            }
            _ => Ok(self.response(resp, lease, upload)),
        }
    }

    /// Sends on a leased connection. A reused connection that hyper reports closed
    /// before the request was written is replaced once by a fresh one: nothing reached
    /// the origin, so this is safe for every method.
    async fn send(
        &self,
        req: Request<RequestBody>,
        upload: &Upload,
        backend: &Backend,
    ) -> Result<(Response<Incoming>, Lease), ProxyError> {
        let fail = |kind, reused| ProxyError {
            upstream: Arc::clone(&self.upstream.name),
            backend: backend.addr,
            kind,
            reused,
        };
        let mut lease =
            backend.lease(self.timeouts.connect).await.map_err(|e| fail(e.into(), false))?;
        let mut req = req;
        loop {
            let reused = lease.is_reused();
            let sent = lease.conn().sender.try_send_request(req);
            match self.await_response_head(sent, upload).await {
                Ok(Ok(resp)) => return Ok((resp, lease)),
                Err(_) => {
                    let kind = ProxyErrorKind::HeaderTimeout(self.timeouts.response_header);
                    return Err(fail(kind, reused));
                }
                Ok(Err(mut e)) => match e.take_message() {
                    Some(unsent) if reused => {
                        lease.discard(CloseReason::UpstreamClosed);
                        lease = backend
                            .connect_fresh(self.timeouts.connect)
                            .await
                            .map_err(|e| fail(e.into(), false))?;
                        req = unsent;
                    }
                    _ => {
                        let error = e.into_error();
                        let kind = if error.is_user() {
                            ProxyErrorKind::ClientBody(error)
                        } else {
                            ProxyErrorKind::Closed(error)
                        };
                        return Err(fail(kind, reused));
                    }
                },
            }
        }
    }

    /// Waits for the response head. The `response_header` timeout counts from the end
    /// of the request: while the request body is still moving (a slow upload), the
    /// timer starts over; a body that stops moving does not stop the timer.
    async fn await_response_head<F: Future>(
        &self,
        sent: F,
        upload: &Upload,
    ) -> Result<F::Output, Elapsed> {
        let limit = self.timeouts.response_header;
        tokio::pin!(sent);
        let mut frames = upload.frames();
        loop {
            match tokio::time::timeout(limit, sent.as_mut()).await {
                Err(_) if !upload.is_done() && upload.frames() != frames => {
                    frames = upload.frames();
                }
                outcome => return outcome,
            }
        }
    }

    /// Turns an upstream response into the client's, keeping the connection for reuse.
    fn response(
        &self,
        resp: Response<Incoming>,
        mut lease: Lease,
        upload: Arc<Upload>,
    ) -> Response<ClientBody> {
        let (mut parts, incoming) = resp.into_parts();
        let keep_alive =
            parts.version == Version::HTTP_11 && !headers::connection_has(&parts.headers, "close");
        lease.limit_by_server(keepalive::server_limits(&parts.headers));
        headers::strip_hop_by_hop(&mut parts.headers);
        let reuse = Reuse { lease, keep_alive, upload };
        let body = ResponseBody::new(incoming, reuse, self.timeouts.read);
        Response::from_parts(parts, ClientBody::Upstream(body))
    }
}

/// Rewrites a client request head for the upstream: origin-form target, HTTP/1.1,
/// hop-by-hop headers removed, Host kept (or supplied), X-Forwarded-* added.
fn rewrite_request_head(parts: &mut http::request::Parts, client: SocketAddr, backend: SocketAddr) {
    headers::strip_hop_by_hop(&mut parts.headers);
    // We answered `Expect: 100-continue` ourselves (hyper sends 100 when the body is
    // first read); the origin receives the body straight away.
    parts.headers.remove(header::EXPECT);
    // The host the client asked for: its Host header, or an absolute-form target.
    let client_host = parts
        .headers
        .get(header::HOST)
        .cloned()
        .or_else(|| parts.uri.authority().and_then(|a| HeaderValue::try_from(a.as_str()).ok()));
    headers::add_forwarded(&mut parts.headers, client, client_host.as_ref());
    if !parts.headers.contains_key(header::HOST) {
        // HTTP/1.1 requires Host upstream; an HTTP/1.0 client may not have sent one.
        let host = client_host.unwrap_or_else(|| {
            HeaderValue::try_from(backend.to_string()).expect("a socket address is a valid header")
        });
        parts.headers.insert(header::HOST, host);
    }
    if parts.uri.authority().is_some() {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = Uri::try_from(path).unwrap_or_else(|_| Uri::from_static("/"));
    }
    parts.version = Version::HTTP_11;
}

/// Answers 101 to the client and copies bytes both ways once both sides have switched.
/// The upstream connection leaves the pool for good.
fn splice_upgrade(
    mut resp: Response<Incoming>,
    lease: Lease,
    on_client: hyper::upgrade::OnUpgrade,
) -> Response<ClientBody> {
    let on_upstream = hyper::upgrade::on(&mut resp);
    drop(lease.into_inner(CloseReason::Upgraded));
    tokio::spawn(async move {
        let (client, upstream) = match tokio::try_join!(on_client, on_upstream) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(error = %e, "upgrade did not complete");
                return;
            }
        };
        let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            tracing::debug!(error = %e, "upgraded connection ended with an error");
        }
    });
    let (parts, _) = resp.into_parts();
    Response::from_parts(parts, ClientBody::empty())
}
