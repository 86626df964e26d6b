//! The request path: one client request in, one upstream exchange, one response out.
//!
//! For each request: refuse it if its framing was bad, pick a backend, lease a
//! connection (pooled or new), rewrite headers, send (once more on a new connection if
//! a pooled one failed under the request and `retry` allows it), and stream the response
//! back with a body that returns the connection to its pool when the exchange ends cleanly.

pub mod body;
pub mod error;
pub mod headers;
pub mod retry;
pub mod trace;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::time::error::Elapsed;
use tokio::time::Instant;

use holdfast_pool::CloseReason;
use http::{header, HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use body::{ClientBody, KeepError, RequestBody, ResponseBody, Reuse, Upload};
use error::{local_response, ProxyError, ProxyErrorKind};
use retry::{Decision, Replay, SendOutcome};
use trace::{Trace, Traced};

use crate::config::Timeouts;
use crate::framing::FramingState;
use crate::telemetry::access_log::AccessLog;
use crate::upstream::{keepalive, Backend, Lease, Upstream};

/// Serves requests for one listener: everything goes to one upstream group.
pub struct Proxy {
    upstream: Arc<Upstream>,
    timeouts: Timeouts,
    access_log: Option<AccessLog>,
}

/// What the proxy knows about the client connection a request came on.
pub struct ClientContext {
    pub addr: SocketAddr,
    /// The client's IP as a header value, made once per connection for
    /// `X-Forwarded-For`.
    pub ip: HeaderValue,
    pub framing: Arc<FramingState>,
}

impl ClientContext {
    pub fn new(addr: SocketAddr, framing: Arc<FramingState>) -> Self {
        let ip = HeaderValue::try_from(addr.ip().to_string()).expect("an IP is a valid header");
        ClientContext { addr, ip, framing }
    }
}

impl Proxy {
    /// Each request is traced into the metrics of `upstream`, and logged to
    /// `access_log` if there is one.
    pub fn new(upstream: Arc<Upstream>, timeouts: Timeouts, access_log: Option<AccessLog>) -> Self {
        Proxy { upstream, timeouts, access_log }
    }

    /// Answers one client request.
    pub async fn handle(&self, req: Request<Incoming>, client: &ClientContext) -> Response<Traced> {
        let mut trace = Trace::begin(&self.upstream, &req, client.addr, self.access_log.as_ref());
        if let Some(violation) = client.framing.rejection() {
            tracing::debug!(client = %client.addr, reason = violation.as_str(), "refused request framing");
            let mut resp = local_response(
                StatusCode::BAD_REQUEST,
                format!("holdfast: {}\n", violation.as_str()),
            );
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            trace.failed(violation.as_str());
            return trace.respond(resp);
        }
        let index = self.upstream.pick();
        let backend = &self.upstream.backends[index];
        let method = req.method().clone();
        trace.chose(index);
        match self.exchange(req, client, backend, &mut trace).await {
            Ok(resp) => trace.respond(resp),
            Err(e) => {
                tracing::warn!(
                    upstream = %e.upstream, backend = %e.backend, method = %method,
                    reused = e.reused, status = e.status().as_u16(), reason = e.kind.as_str(),
                    "{}", e.kind
                );
                trace.failed(e.kind.as_str());
                trace.respond(e.to_response())
            }
        }
    }

    async fn exchange(
        &self,
        req: Request<Incoming>,
        client: &ClientContext,
        backend: &Backend,
        trace: &mut Trace,
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
        let (body, upload) = self.request_body(&parts.method, incoming, backend).await?;
        let (resp, lease, upload) =
            self.send(Request::from_parts(parts, body), upload, backend, trace).await?;
        match client_upgrade {
            Some(on_client) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
                Ok(splice_upgrade(resp, lease, on_client))
            }
            _ => Ok(self.response(resp, lease, upload)),
        }
    }

    /// The body to send upstream: streamed from the client, except that a small body
    /// of an idempotent request is read first and kept, so that the request can be sent
    /// again if a pooled connection fails under it (see [`retry::should_keep_body`]).
    async fn request_body(
        &self,
        method: &Method,
        incoming: Incoming,
        backend: &Backend,
    ) -> Result<(RequestBody, Arc<Upload>), ProxyError> {
        if incoming.is_end_stream()
            || !retry::should_keep_body(method, incoming.size_hint().exact())
        {
            return Ok(RequestBody::new(incoming));
        }
        // A body that stops moving fails as it does while streaming: once it has stalled
        // for `response_header`, with the same 504.
        let stall = self.timeouts.response_header;
        match body::read_to_keep(incoming, stall).await {
            Ok(bytes) => Ok(RequestBody::kept(bytes)),
            Err(KeepError::Client(e)) => {
                Err(self.error(backend, ProxyErrorKind::ClientBody(e), false))
            }
            Err(KeepError::Stalled) => {
                Err(self.error(backend, ProxyErrorKind::HeaderTimeout(stall), false))
            }
        }
    }

    /// Sends on a leased connection and waits for the response head.
    ///
    /// # Races
    /// A pooled connection may be closing at the origin just as the request goes out on
    /// it (an idle timeout, a limit on requests per connection). hyper then reports a
    /// failure before any response head. [`retry::may_replay`] decides whether the request
    /// is sent once more on a new connection: always when hyper hands it back unsent,
    /// and for idempotent requests whose body is empty or kept even when it may have
    /// arrived. For the latter a copy ([`Replay`]) is made before sending, as hyper
    /// consumes the request.
    async fn send(
        &self,
        req: Request<RequestBody>,
        upload: Arc<Upload>,
        backend: &Backend,
        trace: &mut Trace,
    ) -> Result<(Response<Incoming>, Lease, Arc<Upload>), ProxyError> {
        let asked = trace.asking();
        let mut lease = backend
            .lease(self.timeouts.connect)
            .await
            .map_err(|e| self.error(backend, e.into(), false))?;
        trace.connected(asked.elapsed());
        let (mut req, mut upload) = (req, upload);
        // At most two rounds: a retry goes out on a new connection, which `may_replay`
        // never retries.
        loop {
            let reused = lease.is_reused();
            let method = req.method().clone();
            let body = req.body().replay();
            let copy = if reused { Replay::copy_if_replayable(&req) } else { None };
            trace.sending(reused);
            let sent = lease.conn().sender.try_send_request(req);
            let mut failed = match self.await_response_head(sent, &upload).await {
                Ok(Ok(resp)) => {
                    trace.response_head(resp.status().as_u16());
                    return Ok((resp, lease, upload));
                }
                Ok(Err(failed)) => failed,
                Err(_) => {
                    let kind = ProxyErrorKind::HeaderTimeout(self.timeouts.response_header);
                    return Err(self.error(backend, kind, reused));
                }
            };
            // Every error of the response future came before a complete response head.
            let unsent = failed.take_message();
            let error = failed.into_error();
            if unsent.is_none() && error.is_user() {
                // Reading the client's body failed: nothing to do with the connection.
                return Err(self.error(backend, ProxyErrorKind::ClientBody(error), reused));
            }
            let outcome =
                if unsent.is_some() { SendOutcome::Unsent } else { SendOutcome::MaybeReceived };
            let decision = retry::may_replay(&method, outcome, reused, body);
            (req, upload) = match (decision, unsent, copy) {
                (Decision::Retry, Some(unsent), _) => (unsent, upload),
                (Decision::Retry, None, Some(copy)) => copy.into_request(),
                (Decision::Refuse(why), _, _) => {
                    self.record(backend, decision);
                    let kind = ProxyErrorKind::NotRetried { error, method, why };
                    return Err(self.error(backend, kind, reused));
                }
                // `Fail`. (`Retry` of a sent request without a copy does not happen:
                // `copy_if_replayable` copies exactly when `may_replay` allows that.)
                _ => return Err(self.error(backend, ProxyErrorKind::Closed(error), reused)),
            };
            self.record(backend, decision);
            tracing::debug!(
                upstream = %self.upstream.name, backend = %backend.addr, method = %method,
                outcome = ?outcome, error = %error, "pooled connection failed, retrying on a new one"
            );
            lease.discard(CloseReason::UpstreamClosed);
            let asked = Instant::now();
            lease = backend
                .connect_fresh(self.timeouts.connect)
                .await
                .map_err(|e| self.error(backend, e.into(), false))?;
            trace.connected(asked.elapsed());
        }
    }

    fn error(&self, backend: &Backend, kind: ProxyErrorKind, reused: bool) -> ProxyError {
        ProxyError {
            upstream: Arc::clone(&self.upstream.name),
            backend: backend.addr,
            kind,
            reused,
        }
    }

    /// Counts a retry decision for `backend`.
    fn record(&self, backend: &Backend, decision: Decision) {
        let counter = match decision {
            Decision::Retry => &backend.metrics.retries,
            Decision::Refuse(_) => &backend.metrics.retries_refused,
            Decision::Fail => return,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
fn rewrite_request_head(
    parts: &mut http::request::Parts,
    client: &ClientContext,
    backend: SocketAddr,
) {
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
    headers::add_forwarded(&mut parts.headers, &client.ip, client_host.as_ref());
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
