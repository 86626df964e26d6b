//! The request path: one client request in, one upstream exchange, one response out.
//!
//! For each request: route it to an upstream group, pick a backend and rewrite the
//! head for it ([`Proxy::prepare`]), lease a connection (pooled or new), send the head
//! and body (once more on a new connection if a pooled one failed under the request
//! and `retry` allows it; to another backend of the group when the connect failed, or
//! the backend failed a request that may be sent again), read the response head, and
//! stream the response to the client. The connection goes back to its pool when the
//! exchange ended cleanly; otherwise it is closed.
//!
//! One task does all of it: the client connection's. It owns the upstream connection
//! for the length of the exchange, so a request costs no channel, no second task and no
//! wake-up between them.
//!
//! The request path carries bytes from clients and origins: this module and its
//! submodules use no indexing and no unchecked arithmetic (the lints below deny them;
//! tests may), so no input can make them panic.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

pub mod answers;
pub mod error;
pub mod forwarded;
pub mod pace;
pub mod record;
pub mod retry;
pub mod transfer;

use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use holdfast_pool::CloseReason;
use http::Method;
use tokio::net::TcpStream;
use tokio::time::Instant;

use answers::Answers;
use error::{ProxyError, ProxyErrorKind};
use forwarded::TrustedProxies;
use pace::PaceConfig;
use record::{Delivery, Record};
use retry::{BodyReplay, Decision, SendOutcome};
use transfer::{DownloadError, DownloadLimits, Upload, UploadError, UploadLimits};

use crate::config::{ClientLimits, Timeouts};
use crate::http1::encode::{self, BodyOut, ConnectionOut, Forwarding, PeerText};
use crate::http1::head::HeadScan;
use crate::http1::request::Request;
use crate::http1::response::{self, BadResponse};
use crate::http1::{Framing, Version};
use crate::net::{self, Deadline, InBuf, Timer, WaitError};
use crate::route::Router;
use crate::telemetry::access_log::AccessLog;
use crate::telemetry::failures;
use crate::upstream::{keepalive, Assigned, Backend, Lease, LeaseError, Upstream};

/// Responses whose unread remainder is at most this many bytes are drained after the
/// client leaves, to keep the connection; 64 KiB is a few milliseconds on any link.
const DRAIN_LIMIT_BYTES: u64 = 64 * 1024;
/// How long a background drain may take before the connection is closed instead.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Serves requests for one listener, by the routes and settings of the config in force.
pub struct Proxy {
    site: ArcSwap<Site>,
    access_log: Option<AccessLog>,
    /// Requests no route matched, across listeners.
    unrouted: Arc<AtomicU64>,
    /// Every response holdfast makes itself, by group, reason and status.
    answers: Arc<Answers>,
}

/// What a listener serves with: its routes and the settings of one config. A reload
/// replaces it whole; a request keeps the one it started with.
pub struct Site {
    pub router: Router<Destination>,
    /// The listener's own upstream group, which counts requests refused before they
    /// could be routed.
    pub fallback: Option<Arc<Upstream>>,
    pub timeouts: Timeouts,
    pub limits: ClientLimits,
    pub trusted: TrustedProxies,
}

/// Where a route sends requests, and the limits that go with the route.
pub struct Destination {
    pub upstream: Arc<Upstream>,
    /// Request body bytes allowed (413 beyond); `None`: no limit.
    pub max_body: Option<u64>,
}

/// The client side of an exchange: its socket and the bytes read from it that have
/// not been used (the rest of the request body, pipelined requests).
pub struct Client<'a> {
    pub stream: &'a mut TcpStream,
    pub buf: &'a mut InBuf,
    /// The connection's timer, for the waits of the exchange.
    pub timer: &'a mut Timer,
}

/// How an exchange ended for the client connection.
#[derive(Debug, Clone, Copy)]
pub struct Done {
    pub next: Next,
    /// When it ended: the client connection's idle time counts from here.
    pub at: Instant,
}

/// A request whose head has been read and rewritten for its backend: what it is,
/// where it goes, who serves it, how far it got, and the record that reports on it.
pub struct Outbound {
    request: RequestFacts,
    route: RouteChoice,
    /// The backend the request goes to; `None` when there is none (no route when
    /// `route.upstream` is `None` too, else no server that may take it).
    backend: Option<Assigned>,
    progress: Progress,
    /// Observes the request for metrics and the access log; decides nothing.
    record: Record,
}

/// What the request head said, as the exchange needs it.
struct RequestFacts {
    method: Method,
    version: Version,
    framing: Framing,
    upgrade: bool,
    /// The client's connection may carry another request after this one.
    keep_alive: bool,
}

/// Where the request goes and under which settings.
struct RouteChoice {
    /// The settings in force when the request arrived.
    site: Arc<Site>,
    /// The group the request was routed to (`None`: no route matched).
    upstream: Option<Arc<Upstream>>,
    /// Request body bytes allowed on its route.
    max_body: Option<u64>,
}

/// How far the exchange got with the client's side of it.
struct Progress {
    /// The client asked for `100 Continue` and has not had it yet.
    expect_continue: bool,
    /// The request body has been read from the client to its end.
    body_consumed: bool,
}

/// What the client connection does after an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read the next request.
    KeepOpen,
    Close,
    /// Close, but first let the client finish sending what it was sending (a request
    /// body holdfast did not read), so the response is not lost to a reset.
    Linger,
}

/// The response head as the client gets it, and how its body travels.
struct ResponseStart {
    status: u16,
    framing: Framing,
    body_out: BodyOut,
    /// The origin lets the connection carry another request.
    reusable: bool,
    limits: holdfast_pool::OriginLimits,
    connection: ConnectionOut,
}

/// A request that reached its origin and got a response head.
struct Sent {
    lease: Lease,
    upload: Upload,
    start: ResponseStart,
}

/// Why one attempt on one connection failed.
enum Attempt {
    /// The connection failed before any response byte: the stale-connection race,
    /// or the backend failing; `retry` decides.
    Closed { outcome: SendOutcome, error: std::io::Error },
    /// Anything else: no retry.
    Failed(ProxyErrorKind),
}

impl Proxy {
    /// Each request is traced into the metrics of its upstream group, and logged to
    /// `access_log` if there is one; requests no route matches count in `unrouted`.
    pub fn new(
        site: Site,
        access_log: Option<AccessLog>,
        unrouted: Arc<AtomicU64>,
        answers: Arc<Answers>,
    ) -> Self {
        Proxy { site: ArcSwap::from_pointee(site), access_log, unrouted, answers }
    }

    /// The routes and settings in force now.
    pub fn site(&self) -> Arc<Site> {
        self.site.load_full()
    }

    /// Serves new requests with `site` (a reload); requests in flight finish with the
    /// one they started with.
    pub fn replace(&self, site: Site) {
        self.site.store(Arc::new(site));
    }

    /// Starts a request: routes it, picks its backend and writes, into `head`, the head
    /// the origin gets (see [`encode::upstream_request`]).
    pub fn prepare(
        &self,
        req: &Request<'_, '_>,
        client: SocketAddr,
        peer: &PeerText,
        head: &mut Vec<u8>,
    ) -> Outbound {
        let site = self.site.load_full();
        let destination = match site.router.only() {
            Some(only) => Some(only),
            None => site.router.find(req.host, req.path.route_path()),
        };
        let upstream = destination.map(|d| Arc::clone(&d.upstream));
        let max_body = destination.map_or(site.limits.max_body, |d| d.max_body);
        let mut record = Record::begin(req, client, self.access_log.as_ref());
        let backend = upstream.as_ref().and_then(|u| pick(u, &[], record.started()));
        if head.capacity() == 0 {
            *head = net::scratch();
        }
        head.clear();
        if let Some(backend) = &backend {
            record.chose(backend.backend());
            let trusted = site.trusted.contains(client.ip());
            let real_ip = trusted.then(|| {
                let forwarded_for = req
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
                    .map(|h| h.value);
                site.trusted.real_client(client.ip(), forwarded_for).to_string()
            });
            let real_ip = real_ip.as_ref().map_or(peer.ip(), String::as_bytes);
            let fwd = Forwarding { peer, trusted, real_ip, backend: backend.addr };
            encode::upstream_request(req, &fwd, head);
        }
        Outbound {
            request: RequestFacts {
                method: Method::from_bytes(req.method.as_bytes()).unwrap_or(Method::GET),
                version: req.version,
                framing: req.framing,
                upgrade: req.upgrade.is_some(),
                keep_alive: req.keep_alive(),
            },
            route: RouteChoice { upstream, site, max_body },
            backend,
            progress: Progress {
                expect_continue: req.expect_continue,
                body_consumed: req.framing.is_bodyless(),
            },
            record,
        }
    }

    /// Counts and logs a request refused before it could be parsed or forwarded; the
    /// caller answers it.
    pub fn refused(&self, client: SocketAddr, status: u16, reason: &'static str) {
        let site = self.site.load();
        let mut record = Record::refused(client, self.access_log.as_ref());
        self.answers.refusals.record(reason);
        self.answers.record(
            site.fallback.as_ref().map(|u| &u.name),
            refusal_reason(status),
            status,
        );
        record.failed(reason);
        let delivery = Delivery { status, bytes: 0, ended: Some(Instant::now()) };
        record.finish(site.fallback.as_deref(), delivery);
    }

    /// Carries one request to its backend and the response back to the client.
    pub async fn forward(&self, mut out: Outbound, head: &[u8], mut client: Client<'_>) -> Done {
        if out.backend.is_none() {
            return self.answer_unserved(out, client.stream).await;
        }
        if let (Framing::Length(len), Some(max)) = (out.request.framing, out.route.max_body) {
            if len > max {
                // Refused before anything reaches the origin.
                let kind = ProxyErrorKind::BodyTooLarge(max);
                tracing::debug!(length = len, reason = %kind.as_str(), "{kind}");
                let text = format!("holdfast: {kind}\n");
                return self.answer(out, 413, "body_too_large", &text, client.stream).await;
            }
        }
        let mut origin_buf = InBuf::new(net::ORIGIN_BUF);
        let mut response_head = net::scratch();
        let sent =
            self.send(&mut out, head, &mut client, &mut origin_buf, &mut response_head).await;
        let done = match sent {
            Ok(sent) => self.respond(out, sent, &response_head, client, &mut origin_buf).await,
            // Boxed, as the upgrade below: a rare path's state would otherwise make every
            // exchange's (boxed per request) larger.
            Err(e) => Box::pin(self.answer_error(out, e, client.stream)).await,
        };
        origin_buf.release();
        net::recycle(response_head);
        done
    }

    /// Answers a request that has nowhere to go: 404 when no route matched it, 502 when
    /// its group has no backend that may take requests now.
    async fn answer_unserved(&self, out: Outbound, client: &mut TcpStream) -> Done {
        let (status, reason, text) = match out.route.upstream.as_ref() {
            None => {
                self.unrouted.fetch_add(1, Ordering::Relaxed);
                (404, "no_route", "holdfast: no route for this host and path\n".to_string())
            }
            Some(upstream) => {
                let why = upstream.with_state(|m| m.unavailable(Instant::now()));
                failures::record(&upstream.name, None, "no_healthy_server", 502, &why);
                (502, "no_healthy_server", format!("holdfast: upstream {}: {why}\n", upstream.name))
            }
        };
        self.answer(out, status, reason, &text, client).await
    }

    /// Leases a connection, sends the request and reads the response head; once more
    /// on a new connection when a pooled one failed under the request and
    /// [`retry::may_replay`] allows it; on another backend when a connect failed or
    /// [`retry::may_fail_over`] allows it, up to [`retry::MAX_BACKENDS`] backends.
    ///
    /// # Races
    /// A pooled connection may be closing at the origin just as the request goes out on
    /// it (an idle timeout, a limit on requests per connection). The attempt then fails
    /// before any response byte. The request is sent again when not a byte of it was
    /// written, and for idempotent requests whose body is empty or kept even when it
    /// may have arrived.
    async fn send(
        &self,
        out: &mut Outbound,
        head: &[u8],
        client: &mut Client<'_>,
        origin_buf: &mut InBuf,
        response_head: &mut Vec<u8>,
    ) -> Result<Sent, ProxyError> {
        let kept = self.kept_body(out, client).await?;
        // One clock read serves the request's arrival and the pool's checkout, unless a
        // body was read in between.
        let asked = if kept.is_some() { Instant::now() } else { out.record.started() };
        out.record.asking(asked);
        let body = match (&kept, out.request.framing) {
            (Some(_), _) => BodyReplay::Kept,
            (None, Framing::Empty) => BodyReplay::Empty,
            (None, _) => BodyReplay::Streamed,
        };
        let mut tried = Vec::new();
        // After a pooled connection failed under the request: the same backend, on a new
        // connection.
        let mut fresh = false;
        loop {
            let backend = Arc::clone(out.backend());
            let mut lease = match self.connect(out, &backend, fresh, asked).await {
                Ok(lease) => lease,
                Err(LeaseError::Connect(e)) => {
                    if e.is_backend_failure() {
                        backend.connect_failed(Instant::now());
                    }
                    if self.fail_over(out, &mut tried) {
                        fresh = false;
                        continue;
                    }
                    return Err(error(out, e.into(), false));
                }
                Err(e) => return Err(error(out, e.into(), false)),
            };
            let reused = lease.is_reused();
            out.record.sending(reused);
            let attempt = self
                .attempt(out, &mut lease, head, kept.as_deref(), client, origin_buf, response_head)
                .await;
            let (outcome, io_error) = match attempt {
                Ok((upload, start)) => return Ok(Sent { lease, upload, start }),
                Err(Attempt::Failed(kind)) => return Err(error(out, kind, reused)),
                Err(Attempt::Closed { outcome, error }) => (outcome, error),
            };
            lease.discard(CloseReason::OriginClosed);
            origin_buf.consume(origin_buf.len());
            let decision = retry::may_replay(&out.request.method, outcome, reused, body);
            record(&backend, decision);
            match decision {
                Decision::Replay => {
                    tracing::debug!(
                        backend = %backend.addr, method = %out.request.method, outcome = %outcome.as_str(),
                        error = %io_error, "pooled connection failed, retrying on a new one"
                    );
                    fresh = true;
                    continue;
                }
                Decision::NotReplayed(why) => {
                    let kind = ProxyErrorKind::NotReplayed {
                        error: io_error,
                        method: out.request.method.clone(),
                        why,
                    };
                    return Err(error(out, kind, reused));
                }
                Decision::Fail => {}
            }
            // A new connection failed before any response byte: the backend is failing.
            backend.observe(502, None, Instant::now());
            if retry::may_fail_over(&out.request.method, outcome, body)
                && self.fail_over(out, &mut tried)
            {
                tracing::debug!(
                    backend = %backend.addr, method = %out.request.method, error = %io_error,
                    "backend failed the request before answering; sending it to another"
                );
                fresh = false;
                continue;
            }
            return Err(error(out, ProxyErrorKind::Closed(io_error), reused));
        }
    }

    /// A connection to `backend` for the request: an idle pooled one if there is one
    /// (unless `fresh`), else a new one, after the queue if the backend is at its limit.
    async fn connect(
        &self,
        out: &mut Outbound,
        backend: &Backend,
        fresh: bool,
        asked: Instant,
    ) -> Result<Lease, LeaseError> {
        if !fresh {
            if let Some(lease) = backend.conns.try_idle(asked) {
                out.record.connected(Duration::ZERO);
                return Ok(lease);
            }
        }
        let started = if fresh { Instant::now() } else { asked };
        let connect = out.route.site.timeouts.connect;
        let lease = if fresh {
            backend.conns.connect_fresh(connect).await?
        } else {
            backend.conns.lease(connect).await?
        };
        out.record.connected(started.elapsed());
        Ok(lease)
    }

    /// Moves the request to another backend of its group, one it has not tried; false
    /// when there is none that may take it, or the request has been to
    /// [`retry::MAX_BACKENDS`] already.
    fn fail_over(&self, out: &mut Outbound, tried: &mut Vec<SocketAddr>) -> bool {
        let (Some(upstream), Some(failed)) = (out.route.upstream.as_ref(), &out.backend) else {
            return false;
        };
        tried.push(failed.addr);
        if tried.len() >= retry::MAX_BACKENDS {
            return false;
        }
        let Some(next) = pick(upstream, tried, Instant::now()) else { return false };
        failed.metrics.failovers.fetch_add(1, Ordering::Relaxed);
        out.record.chose(next.backend());
        out.backend = Some(next);
        true
    }

    /// The body of a small idempotent request, read in full before it is sent so it
    /// can be sent again (see [`retry::should_keep_body`]); `None` for other requests.
    async fn kept_body(
        &self,
        out: &mut Outbound,
        client: &mut Client<'_>,
    ) -> Result<Option<Vec<u8>>, ProxyError> {
        let Framing::Length(len) = out.request.framing else { return Ok(None) };
        if !retry::should_keep_body(&out.request.method, Some(len)) {
            return Ok(None);
        }
        let limits = upload_limits(out);
        let read = transfer::read_kept(
            client.stream,
            client.buf,
            len,
            &mut out.progress.expect_continue,
            &limits,
        );
        match read.await {
            Ok(kept) => {
                out.progress.body_consumed = true;
                Ok(Some(kept))
            }
            Err(e) => {
                let kind = match upload_error(e, limits.upstream_stall) {
                    Attempt::Failed(kind) => kind,
                    Attempt::Closed { error, .. } => ProxyErrorKind::Closed(error),
                };
                Err(error(out, kind, false))
            }
        }
    }

    /// One try on one connection: head (and kept body), streamed body, response head.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        out: &mut Outbound,
        lease: &mut Lease,
        head: &[u8],
        kept: Option<&[u8]>,
        client: &mut Client<'_>,
        origin_buf: &mut InBuf,
        response_head: &mut Vec<u8>,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let limit = out.route.site.timeouts.response_header;
        let stream = &mut lease.conn().stream;
        let parts = [head, kept.unwrap_or_default()];
        if let Err((written, error)) = net::write_all(stream, &parts, limit).await {
            return Err(match error {
                WaitError::TimedOut => Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit)),
                WaitError::Io(error) if written == 0 => {
                    Attempt::Closed { outcome: SendOutcome::Unsent, error }
                }
                WaitError::Io(error) => {
                    Attempt::Closed { outcome: SendOutcome::MaybeReceived, error }
                }
            });
        }
        // `response_header` counts from the end of the request: its arrival when it had
        // no body or one read beforehand, else the end of the upload.
        let (upload, sent_at) = if out.progress.body_consumed {
            (Upload::Complete, out.record.started())
        } else {
            let limits = upload_limits(out);
            let (framing, expect) = (out.request.framing, &mut out.progress.expect_continue);
            let sent = transfer::upload(
                client.stream,
                client.buf,
                stream,
                origin_buf,
                framing,
                expect,
                &limits,
            );
            (sent.await.map_err(|e| upload_error(e, limit))?, Instant::now())
        };
        if upload == Upload::Complete {
            out.progress.body_consumed = true;
        }
        // The origin may take long to answer: the client's buffer, unless it holds a
        // pipelined request, goes back meanwhile.
        client.buf.release();
        let mut deadline = Deadline::on(client.timer, net::later(sent_at, limit));
        let start = self
            .response_head(out, upload, stream, origin_buf, &mut deadline, response_head)
            .await?;
        Ok((upload, start))
    }

    /// Reads the origin's response head (skipping interim 1xx responses) and writes the
    /// client's version of it into `response_head`.
    async fn response_head(
        &self,
        out: &Outbound,
        upload: Upload,
        stream: &mut TcpStream,
        buf: &mut InBuf,
        deadline: &mut Deadline<'_>,
        response_head: &mut Vec<u8>,
    ) -> Result<ResponseStart, Attempt> {
        let mut received_any = false;
        let mut scan = HeadScan::default();
        loop {
            if !buf.is_empty() {
                received_any = true;
                match self.parse_response(out, upload, buf, &mut scan, response_head) {
                    Ok(Some(start)) => return Ok(start),
                    Ok(None) if buf.is_full() && !buf.grow(response::MAX_HEAD_BYTES) => {
                        return Err(Attempt::Failed(BadResponse::HeadTooLarge.into()));
                    }
                    Ok(None) => {}
                    Err(e) => return Err(Attempt::Failed(e.into())),
                }
            }
            match buf.fill(stream, deadline).await {
                Ok(0) => {
                    let error = std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the origin closed the connection",
                    );
                    return Err(closed(received_any, error));
                }
                Ok(_) => {}
                Err(WaitError::TimedOut) => {
                    let limit = out.route.site.timeouts.response_header;
                    return Err(Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit)));
                }
                Err(WaitError::Io(error)) => return Err(closed(received_any, error)),
            }
        }
    }

    /// Parses a complete response head in `buf`, if there is one, consuming it.
    fn parse_response(
        &self,
        out: &Outbound,
        upload: Upload,
        buf: &mut InBuf,
        scan: &mut HeadScan,
        response_head: &mut Vec<u8>,
    ) -> Result<Option<ResponseStart>, BadResponse> {
        loop {
            let mut storage = [const { MaybeUninit::uninit() }; response::MAX_HEADERS];
            let head_request = out.request.method == Method::HEAD;
            let Some(resp) = response::read(scan, buf.data(), &mut storage, head_request)? else {
                return Ok(None);
            };
            let len = resp.head_len;
            if resp.is_interim() {
                // 100 Continue and other interim responses are not passed on; holdfast
                // answered `Expect` itself.
                buf.consume(len);
                *scan = HeadScan::default();
                if buf.is_empty() {
                    return Ok(None);
                }
                continue;
            }
            let upgrade = resp.status == 101;
            if upgrade && !out.request.upgrade {
                return Err(BadResponse::UnrequestedUpgrade);
            }
            let body_out = BodyOut::choose(resp.framing, out.request.version);
            let close = !out.request.keep_alive
                || body_out == BodyOut::CloseDelimited
                || upload == Upload::Interrupted;
            let connection = if upgrade {
                ConnectionOut::Upgrade
            } else {
                ConnectionOut::for_client(!close, out.request.version)
            };
            response_head.clear();
            encode::client_response(&resp, body_out, connection, response_head);
            let start = ResponseStart {
                status: resp.status,
                framing: resp.framing,
                body_out,
                reusable: resp.is_reusable() && !upgrade,
                limits: keepalive::origin_limits(resp.keep_alive),
                connection,
            };
            let len = resp.head_len;
            buf.consume(len);
            return Ok(Some(start));
        }
    }

    /// Streams the response to the client and settles the upstream connection:
    /// back to the pool, drained in the background, or closed.
    async fn respond(
        &self,
        mut out: Outbound,
        sent: Sent,
        response_head: &[u8],
        client: Client<'_>,
        origin_buf: &mut InBuf,
    ) -> Done {
        let Sent { mut lease, upload, start } = sent;
        let (header, now) = out.record.response_head(start.status);
        out.backend().observe(start.status, header, now);
        if start.connection == ConnectionOut::Upgrade {
            return Box::pin(self.switch(out, lease, response_head, client, origin_buf)).await;
        }
        lease.limit_by_origin(start.limits);
        let reusable = start.reusable && upload == Upload::Complete;
        let timeouts = &out.route.site.timeouts;
        let limits = DownloadLimits {
            upstream_stall: timeouts.read,
            client_stall: timeouts.read,
            pace: pace_config(&out.route.site),
        };
        let downloaded = transfer::download(
            &mut lease.conn().stream,
            origin_buf,
            client.stream,
            response_head,
            start.framing,
            start.body_out,
            &limits,
        )
        .await;
        let status = start.status;
        let keep_client = start.connection != ConnectionOut::Close;
        match downloaded {
            Ok(done) => {
                let now = Instant::now();
                if reusable && !done.extra && out.backend().health.is_down(now) {
                    // Taken out of service while this response was on its way.
                    lease.discard(CloseReason::Ejected);
                } else if reusable && !done.extra {
                    lease.release(now);
                } else {
                    let reason =
                        if done.extra { CloseReason::Error } else { CloseReason::OriginClosed };
                    lease.discard(reason);
                }
                out.record.finish(
                    out.route.upstream.as_deref(),
                    Delivery { status, bytes: done.bytes, ended: Some(now) },
                );
                let next = match (keep_client, upload) {
                    (true, _) => Next::KeepOpen,
                    // The origin answered before the whole body came: the client may still
                    // be sending it.
                    (false, Upload::Interrupted) => Next::Linger,
                    (false, Upload::Complete) => Next::Close,
                };
                Done { next, at: now }
            }
            Err(DownloadError::Client { error, bytes, remaining }) => {
                tracing::debug!(error = %error, "client left before the response ended");
                match remaining {
                    Some(n) if reusable && n <= DRAIN_LIMIT_BYTES && origin_buf.is_empty() => {
                        drain_in_background(lease, n)
                    }
                    _ => lease.discard(CloseReason::Error),
                }
                let at = out.record.started();
                out.record
                    .finish(out.route.upstream.as_deref(), Delivery { status, bytes, ended: None });
                Done { next: Next::Close, at }
            }
            Err(DownloadError::Upstream { error, bytes }) => {
                if let Some(upstream) = out.route.upstream.as_ref() {
                    let backend = Some(out.backend().addr);
                    let message = format!("upstream response body failed: {error}");
                    failures::record(&upstream.name, backend, "origin_body", status, &message);
                }
                lease.discard(CloseReason::Error);
                out.record.failed("origin_body");
                let at = out.record.started();
                out.record
                    .finish(out.route.upstream.as_deref(), Delivery { status, bytes, ended: None });
                Done { next: Next::Close, at }
            }
        }
    }

    /// Answers 101 to the client and copies bytes both ways until either side ends.
    /// The upstream connection leaves the pool for good.
    async fn switch(
        &self,
        out: Outbound,
        lease: Lease,
        response_head: &[u8],
        client: Client<'_>,
        origin_buf: &mut InBuf,
    ) -> Done {
        let upstream = lease.into_inner(CloseReason::Upgraded).stream;
        let stall = out.route.site.timeouts.read;
        let wrote = net::write_all(client.stream, &[response_head], stall).await;
        let at = Instant::now();
        out.record.finish(
            out.route.upstream.as_deref(),
            Delivery { status: 101, bytes: 0, ended: Some(at) },
        );
        if wrote.is_ok() {
            if let Err(e) =
                transfer::tunnel(client.stream, client.buf, upstream, origin_buf, stall).await
            {
                tracing::debug!(error = %e, "upgraded connection ended with an error");
            }
        }
        Done { next: Next::Close, at }
    }

    /// Answers a request that failed with holdfast's own response naming the upstream,
    /// the backend and the reason.
    async fn answer_error(&self, out: Outbound, e: ProxyError, client: &mut TcpStream) -> Done {
        if e.kind.is_client_fault() {
            tracing::debug!(
                upstream = %e.upstream, backend = %e.backend, method = %out.request.method,
                status = e.status(), reason = %e.kind.as_str(), "{}", e.kind
            );
        } else {
            failures::record(&e.upstream, Some(e.backend), e.kind.as_str(), e.status(), &e.kind);
        }
        if e.kind.is_backend_failure() {
            out.backend().observe(e.status(), None, Instant::now());
        }
        self.answer(out, e.status(), e.kind.as_str(), &e.text(), client).await
    }

    /// Sends holdfast's own response, `status` with `text`, for a request that failed
    /// for `reason`; keeps the client connection when the request was read in full.
    async fn answer(
        &self,
        mut out: Outbound,
        status: u16,
        reason: &'static str,
        text: &str,
        client: &mut TcpStream,
    ) -> Done {
        out.record.failed(reason);
        self.answers.record(out.route.upstream.as_ref().map(|u| &u.name), reason, status);
        // Unread body bytes would be taken for the next request: close instead.
        let keep = out.request.keep_alive && out.progress.body_consumed;
        let connection = ConnectionOut::for_client(keep, out.request.version);
        let mut response = Vec::with_capacity(text.len().saturating_add(256));
        encode::local_response(status, text, connection, &mut response);
        let sent = net::write_all(client, &[&response], out.route.site.timeouts.read).await;
        let at = Instant::now();
        let ended = sent.is_ok().then_some(at);
        out.record.finish(
            out.route.upstream.as_deref(),
            Delivery { status, bytes: text.len() as u64, ended },
        );
        let next = match (sent.is_ok(), keep, out.progress.body_consumed) {
            (false, _, _) => Next::Close,
            (true, true, _) => Next::KeepOpen,
            (true, false, true) => Next::Close,
            (true, false, false) => Next::Linger,
        };
        Done { next, at }
    }
}

impl Outbound {
    /// The backend the request goes to; only called once one was picked.
    fn backend(&self) -> &Arc<Backend> {
        self.backend.as_ref().expect("the request has a backend").backend()
    }
}

/// The least loaded backend of `upstream` that may take a request, by its balancer,
/// other than those at the addresses in `tried`; counted as assigned until the request
/// ends.
fn pick(upstream: &Upstream, tried: &[SocketAddr], now: Instant) -> Option<Assigned> {
    upstream.with_state(|m| {
        let i = if tried.is_empty() {
            m.choose(&[], now)?
        } else {
            let exclude: Vec<usize> = (m.backends.iter().enumerate())
                .filter(|(_, b)| tried.contains(&b.addr))
                .map(|(i, _)| i)
                .collect();
            m.choose(&exclude, now)?
        };
        Some(Assigned::new(Arc::clone(m.backends.get(i)?)))
    })
}

/// The reason a refused request is counted under in `holdfast_errors`, from its
/// status (the rule it broke is counted apart, in `holdfast_refused_requests`).
fn refusal_reason(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        405 => "method_not_allowed",
        408 => "request_timeout",
        414 => "uri_too_long",
        417 => "expectation_failed",
        431 => "headers_too_large",
        501 => "not_implemented",
        _ => "refused",
    }
}

/// The failure of a request to its backend, as the client hears of it.
fn error(out: &Outbound, kind: ProxyErrorKind, reused: bool) -> ProxyError {
    let upstream =
        out.route.upstream.as_ref().map_or_else(|| Arc::from("-"), |u| Arc::clone(&u.name));
    ProxyError { upstream, backend: out.backend().addr, kind, reused }
}

/// Counts a retry decision for `backend`.
fn record(backend: &Backend, decision: Decision) {
    let counter = match decision {
        Decision::Replay => &backend.metrics.retries,
        Decision::NotReplayed(_) => &backend.metrics.not_replayed,
        Decision::Fail => return,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The client's pace rule under `site`.
fn pace_config(site: &Site) -> PaceConfig {
    PaceConfig {
        grace: site.timeouts.client_body,
        min_rate_bytes_per_second: site.limits.body_min_bytes_per_second,
    }
}

/// The limits the request body of `out` moves under.
fn upload_limits(out: &Outbound) -> UploadLimits {
    let site = &out.route.site;
    UploadLimits {
        upstream_stall: site.timeouts.response_header,
        client_stall: site.timeouts.read,
        pace: pace_config(site),
        max_body: out.route.max_body,
    }
}

/// What a failed upload means for the attempt: the origin's side failing is the retry
/// policy's to judge; the client's side failing is the client's error. `limit` is the
/// response-header timeout.
fn upload_error(e: UploadError, limit: Duration) -> Attempt {
    match e {
        UploadError::Client(e) => Attempt::Failed(ProxyErrorKind::ClientBody(e)),
        UploadError::ClientStalled => Attempt::Failed(ProxyErrorKind::ClientTimeout),
        UploadError::TooLarge(max) => Attempt::Failed(ProxyErrorKind::BodyTooLarge(max)),
        // An origin that stops taking the body fails like a response that does not come.
        UploadError::Upstream(WaitError::TimedOut) => {
            Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit))
        }
        UploadError::Upstream(WaitError::Io(error)) => {
            Attempt::Closed { outcome: SendOutcome::MaybeReceived, error }
        }
    }
}

/// A connection that failed with `error`: before any response byte, the retry policy
/// decides; after some, the response is broken and nothing is retried.
fn closed(received_any: bool, error: std::io::Error) -> Attempt {
    if received_any {
        Attempt::Failed(ProxyErrorKind::Closed(error))
    } else {
        Attempt::Closed { outcome: SendOutcome::MaybeReceived, error }
    }
}

/// Reads the rest of a response nobody wants, then returns the connection to its pool.
fn drain_in_background(mut lease: Lease, remaining: u64) {
    tokio::spawn(async move {
        if net::drain(&mut lease.conn().stream, remaining, DRAIN_TIMEOUT).await {
            lease.release(Instant::now());
        } else {
            lease.discard(CloseReason::Error);
        }
    });
}
