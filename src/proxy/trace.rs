//! What one request did on its way through holdfast (which server, whether the
//! connection was reused, how long each step took, what status came back), reported
//! once, when the response to the client ends: to the metrics, and to the access log
//! when there is one.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use super::body::{BoxError, ClientBody};
use crate::telemetry::access_log::{AccessEntry, AccessLog};
use crate::upstream::Upstream;

/// The record of one request, filled in along the proxy path.
pub struct Trace {
    upstream: Arc<Upstream>,
    started: Instant,
    /// Index of the chosen server in `upstream.backends`.
    backend: Option<usize>,
    upstream_started: Option<Instant>,
    connect: Option<Duration>,
    header: Option<Duration>,
    upstream_status: Option<u16>,
    reused: Option<bool>,
    retried: bool,
    status: u16,
    error: Option<&'static str>,
    /// What only the access log needs; not collected when it is off.
    log: Option<Box<LogFields>>,
}

struct LogFields {
    sink: AccessLog,
    time: SystemTime,
    client: SocketAddr,
    method: Method,
    uri: Uri,
    version: Version,
    host: Option<HeaderValue>,
    referer: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
}

impl Trace {
    /// Starts the record of `req`, which has just arrived from `client`.
    pub fn begin<B>(
        upstream: &Arc<Upstream>,
        req: &Request<B>,
        client: SocketAddr,
        log: Option<&AccessLog>,
    ) -> Trace {
        let log = log.map(|sink| {
            let header = |name| req.headers().get(name).cloned();
            Box::new(LogFields {
                sink: sink.clone(),
                time: SystemTime::now(),
                client,
                method: req.method().clone(),
                uri: req.uri().clone(),
                version: req.version(),
                host: header(header::HOST),
                referer: header(header::REFERER),
                user_agent: header(header::USER_AGENT),
            })
        });
        Trace {
            upstream: Arc::clone(upstream),
            started: Instant::now(),
            backend: None,
            upstream_started: None,
            connect: None,
            header: None,
            upstream_status: None,
            reused: None,
            retried: false,
            status: 0,
            error: None,
            log,
        }
    }

    /// The request goes to server `backend` of the group.
    pub fn chose(&mut self, backend: usize) {
        self.backend = Some(backend);
    }

    /// The upstream clock starts: a connection is asked for. Returns the time.
    pub fn asking(&mut self) -> Instant {
        let now = Instant::now();
        self.upstream_started = Some(now);
        now
    }

    /// A connection is ready for the request after `waited` (queue, connect); a retry
    /// adds the wait for its new connection.
    pub fn connected(&mut self, waited: Duration) {
        *self.connect.get_or_insert(Duration::ZERO) += waited;
    }

    /// The request goes out (again, after a retry) on a reused or a new connection.
    pub fn sending(&mut self, reused: bool) {
        if self.reused.is_some() {
            self.retried = true;
        }
        self.reused = Some(reused);
        if let Some(b) = self.backend_metrics() {
            b.count_sent(reused);
        }
    }

    /// The upstream's response head arrived.
    pub fn response_head(&mut self, status: u16) {
        self.header = self.upstream_started.map(|t| t.elapsed());
        self.upstream_status = Some(status);
    }

    /// holdfast answers by itself, for `reason`; counted against the chosen server.
    pub fn failed(&mut self, reason: &'static str) {
        self.error = Some(reason);
        if let Some(b) = self.backend_metrics() {
            b.errors.record(reason);
        }
    }

    /// Wraps the response so that the record is reported when its body ends.
    pub fn respond(mut self, resp: Response<ClientBody>) -> Response<Traced> {
        self.status = resp.status().as_u16();
        resp.map(|body| Traced { body, trace: Some(self), bytes: 0, ended: None, failed: false })
    }

    fn backend_metrics(&self) -> Option<&crate::metrics::BackendMetrics> {
        self.backend.and_then(|i| self.upstream.backends.get(i)).map(|b| &b.metrics)
    }

    /// Records the finished request. `ended`: when the last byte of the response was
    /// handed on (`None`: it never was; the client left or the upstream body failed).
    fn report(self, bytes: u64, ended: Option<Instant>) {
        // The response ended when its last frame was handed on; the drop follows at
        // once, so only a response that did not end needs the clock read again.
        let now = ended.unwrap_or_else(Instant::now);
        let request_time = now - self.started;
        let response_time = match (self.upstream_started, self.upstream_status) {
            (Some(start), Some(_)) => Some(ended.unwrap_or(now) - start),
            _ => None,
        };
        let group = &self.upstream.metrics;
        group.requests.record(self.status);
        group.duration.observe(request_time);
        if let Some(b) = self.backend_metrics() {
            b.responses.record(self.status);
            if let Some(header) = self.header {
                b.header.observe(header);
            }
            if let Some(response) = response_time {
                b.response.observe(response);
            }
        }
        let Some(log) = &self.log else { return };
        let target = log.uri.path_and_query().map_or_else(|| log.uri.path(), |p| p.as_str());
        let entry = AccessEntry {
            time: log.time,
            client: log.client,
            method: log.method.as_str(),
            target,
            version: log.version,
            host: text(&log.host),
            status: self.status,
            bytes,
            referer: text(&log.referer),
            user_agent: text(&log.user_agent),
            upstream: Some(&self.upstream.name),
            upstream_addr: self.backend.and_then(|i| self.upstream.backends.get(i)).map(|b| b.addr),
            upstream_status: self.upstream_status,
            reused: self.reused,
            retried: self.retried,
            upstream_connect_time: self.connect,
            upstream_header_time: self.header,
            upstream_response_time: response_time,
            request_time,
            completed: ended.is_some(),
            error: self.error,
        };
        log.sink.log(&entry);
    }
}

/// A header's value as text, if it was sent and is visible ASCII.
fn text(value: &Option<HeaderValue>) -> Option<&str> {
    value.as_ref().and_then(|v| v.to_str().ok())
}

/// A response body that reports its request's [`Trace`] when it ends or is dropped.
pub struct Traced {
    body: ClientBody,
    trace: Option<Trace>,
    bytes: u64,
    ended: Option<Instant>,
    /// The body returned an error: the response is incomplete whatever comes after.
    failed: bool,
}

impl Body for Traced {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.bytes += frame.data_ref().map_or(0, |d| d.len() as u64);
                if this.body.is_end_stream() {
                    this.ended.get_or_insert_with(Instant::now);
                }
            }
            Poll::Ready(None) => {
                this.ended.get_or_insert_with(Instant::now);
            }
            Poll::Ready(Some(Err(_))) => this.failed = true,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        let Some(trace) = self.trace.take() else { return };
        // hyper need not poll a body it knows is complete (empty from the start, or a
        // HEAD response): that counts as ended, now.
        if self.ended.is_none() && !self.failed && self.body.is_end_stream() {
            self.ended = Some(Instant::now());
        }
        trace.report(self.bytes, self.ended);
    }
}
