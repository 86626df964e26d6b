//! The logic of one exchange, whatever the protocol: lease a connection, send the
//! request once more on a new connection when a pooled one failed under it and
//! `retry` allows it, move it to another backend when a connect failed or the backend
//! failed it, answer early (no route, no server, body too large), switch protocols,
//! and settle the connection: back to its pool, drained in the background, or closed.
//! Every answer and outcome is counted here. The bytes move through a [`Wire`]; this
//! module never touches a socket or a byte of HTTP syntax.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use holdfast_pool::CloseReason;
use tokio::time::Instant;

use super::body_copy::{BodyCopy, CopyLost};
use super::error::{ProxyError, ProxyErrorKind};
use super::record::Delivery;
use super::retry::{self, BodyReplay, Decision, SendOutcome};
use super::transfer::{DownloadError, Upload};
use super::wire::{Attempt, H2OriginWire, ResponseStart, Wire};
use super::{error, pick, record, Done, H2Head, Next, Outbound, Proxy};
use crate::http1::encode::{self, ConnectionOut};
use crate::http1::Framing;
use crate::http2::encode::OriginHead;
use crate::net::WaitError;
use crate::telemetry::failures;
use crate::upstream::h2::StreamLease;
use crate::upstream::learned::ResponseKind;
use crate::upstream::settings::Speaks;
use crate::upstream::share::Claim;
use crate::upstream::{Backend, Lease, LeaseError, Session, Want};

/// The failure of a step before any connection was asked for (reading the body
/// beforehand), as the client hears of it.
fn attempt_failed(out: &Outbound, e: Attempt) -> ProxyError {
    let kind = match e {
        Attempt::Failed(kind) => kind,
        Attempt::Closed { error, .. } | Attempt::Refused { error, .. } => {
            ProxyErrorKind::Closed(error)
        }
    };
    error(out, kind, false)
}

/// The response reached the client whole at `now`: recorded, and what the client's
/// connection does next (`keep_client`: the response lets it stay open).
fn delivered(
    out: Outbound,
    status: u16,
    bytes: u64,
    now: Instant,
    keep_client: bool,
    upload: Upload,
) -> Done {
    out.record.finish(out.route.upstream.as_deref(), Delivery { status, bytes, ended: Some(now) });
    let next = match (keep_client, upload) {
        (true, _) => Next::KeepOpen,
        // The origin answered before the whole body came: the client may still be
        // sending it.
        (false, Upload::Interrupted) => Next::Linger,
        (false, Upload::Complete) => Next::Close,
    };
    Done { next, at: now }
}

/// Gives the client the rest of a response the origin is done with (response
/// buffering), then records it.
async fn catch_up<W: Wire>(
    out: Outbound,
    status: u16,
    keep_client: bool,
    upload: Upload,
    wire: &mut W,
) -> Done {
    match wire.finish(&out).await {
        Ok(bytes) => delivered(out, status, bytes, Instant::now(), keep_client, upload),
        Err(DownloadError::Client { error, bytes, .. }) => client_left(out, status, bytes, &error),
        Err(DownloadError::Upstream { error, bytes }) => {
            origin_body_failed(out, status, bytes, &error)
        }
    }
}

/// The client left before the response ended (`bytes` of its body went out).
fn client_left(out: Outbound, status: u16, bytes: u64, error: &WaitError) -> Done {
    tracing::debug!(error = %error, "client left before the response ended");
    let at = out.record.started();
    out.record.finish(out.route.upstream.as_deref(), Delivery { status, bytes, ended: None });
    Done { next: Next::Close, at }
}

/// The origin's response body failed after the head went out: counted against the
/// backend, and the client's connection closes (the response is cut off).
fn origin_body_failed(mut out: Outbound, status: u16, bytes: u64, error: &std::io::Error) -> Done {
    if let Some(upstream) = out.route.upstream.as_ref() {
        let backend = Some(out.backend().addr);
        let message = format!("upstream response body failed: {error}");
        failures::record(&upstream.name, backend, "origin_body", status, &message);
    }
    out.record.failed("origin_body");
    let at = out.record.started();
    out.record.finish(out.route.upstream.as_deref(), Delivery { status, bytes, ended: None });
    Done { next: Next::Close, at }
}

/// Responses whose unread remainder is at most this many bytes are drained after the
/// client leaves, to keep the connection; 64 KiB is a few milliseconds on any link.
const DRAIN_LIMIT_BYTES: u64 = 64 * 1024;

/// Refused streams sent again, at most, before the request fails: an origin that
/// refuses every stream is failing. Many, because refusals are cheap and can come in
/// runs: an origin that sends GOAWAY after every few streams refuses the streams that
/// crowded onto each new connection before its GOAWAY arrived.
const MAX_REFUSED: usize = 25;

/// The head of a request as the origin gets it, in the protocol of the session it goes
/// on: HTTP/1.1 text, or an HTTP/2 head (`prepare` writes the one the backend speaks;
/// the text is written from the HTTP/2 head when ALPN chose HTTP/1.1 instead).
struct Heads<'a> {
    h1: &'a mut Vec<u8>,
    h2: Option<Box<OriginHead>>,
}

impl Heads<'_> {
    /// Makes sure the HTTP/1.1 text is there, for a body framed `framing`.
    fn write_h1(&mut self, framing: Framing) {
        if let (true, Some(h2)) = (self.h1.is_empty(), self.h2.as_deref()) {
            let fields = h2.fields.iter().map(|f| (&f.name[..], &f.value[..]));
            let (method, authority) = (h2.method.as_str(), &h2.authority);
            encode::request_from_h2(method, authority, &h2.path, fields, framing, self.h1);
        }
    }
}

/// A request that reached its origin and got a response head.
struct Sent {
    session: Session,
    /// The request's claim on the backend (see `upstream::share`), given back once the
    /// connection is settled.
    claim: Claim,
    upload: Upload,
    start: ResponseStart,
}

impl Proxy {
    /// Carries one request to its backend and the response back to the client, over
    /// `wire` (the client side's protocol picks it: [`super::H1Wire`] for an HTTP/1.1
    /// client connection).
    pub(crate) async fn forward<W: H2OriginWire>(
        &self,
        mut out: Outbound,
        head: &mut Vec<u8>,
        wire: &mut W,
    ) -> Done {
        // holdfast's own answers are boxed, like every rare path here: their state
        // would otherwise make every exchange's future larger, and each await of a
        // future copies all of it.
        if let Some(local) = out.route.local.take() {
            let (status, reason, text, extra) = local.response();
            let answer =
                Box::pin(self.answer_with(out, status, reason, &text, extra.as_bytes(), wire));
            return answer.await;
        }
        if out.backend.is_none() {
            let answer = Box::pin(self.answer_unserved(out, wire));
            return answer.await;
        }
        if let (Some(len), Some(max)) = (out.request.framing.declared(), out.route.max_body) {
            if len > max {
                // Refused before anything reaches the origin.
                let kind = ProxyErrorKind::BodyTooLarge(max);
                tracing::debug!(length = len, reason = %kind.as_str(), "{kind}");
                let text = format!("holdfast: {kind}\n");
                let answer = Box::pin(self.answer(out, 413, "body_too_large", &text, wire));
                return answer.await;
            }
        }
        let h2 = match std::mem::replace(&mut out.h2_head, H2Head::None) {
            H2Head::None => None,
            H2Head::Ready(h2) => Some(h2),
            H2Head::Failed(e) => {
                let e = error(&out, ProxyErrorKind::NotH2(*e), false);
                let answer = Box::pin(self.answer_error(out, e, wire));
                return answer.await;
            }
        };
        let mut heads = Heads { h1: head, h2 };
        let sent = match self.send(&mut out, &mut heads, wire).await {
            Ok(sent) => sent,
            // Boxed, as the upgrade: a rare path's state would otherwise make every
            // exchange's (boxed per request) larger.
            Err(e) => {
                let answer = Box::pin(self.answer_error(out, e, wire));
                return answer.await;
            }
        };
        // The response streams to the client and the session is settled: an HTTP/1.1
        // connection goes back to the pool, is drained in the background, or is
        // closed; a stream's slot on its HTTP/2 connection frees when it ends. (Awaited
        // here, not in a function of its own: each level of nesting would add the
        // request's state again to every exchange's future.)
        let Sent { session, claim, upload, start } = sent;
        response_head(&mut out, &start);
        match session {
            Session::H1(lease) => self.respond_h1(out, lease, claim, upload, start, wire).await,
            Session::H2(lease) => {
                // Boxed: only exchanges with HTTP/2 origins carry its state.
                Box::pin(respond_h2(out, lease, upload, start, wire)).await
            }
        }
    }

    /// Answers a request that has nowhere to go: 404 when no route matched it, 502 when
    /// its group has no backend that may take requests now.
    async fn answer_unserved<W: Wire>(&self, out: Outbound, wire: &mut W) -> Done {
        let (status, reason, text) = match out.route.upstream.as_ref() {
            None => {
                self.answers.unrouted();
                (404, "no_route", "holdfast: no route for this host and path\n".to_string())
            }
            Some(upstream) => {
                let why = upstream.with_state(|m| m.unavailable(Instant::now()));
                failures::record(&upstream.name, None, "no_healthy_server", 502, &why);
                (502, "no_healthy_server", format!("holdfast: upstream {}: {why}\n", upstream.name))
            }
        };
        self.answer(out, status, reason, &text, wire).await
    }

    /// Checks out a session (see [`crate::upstream::Backend::checkout`]), sends the request and reads
    /// the response head; once more on a new connection when a pooled one failed under
    /// the request and [`retry::may_replay`] allows it; again when an HTTP/2 origin
    /// refused the stream (up to [`MAX_REFUSED`] times, if the body can go again); on
    /// another backend when a connect failed or [`retry::may_fail_over`] allows it, up
    /// to [`retry::MAX_BACKENDS`] backends.
    ///
    /// # Races
    /// A pooled connection may be closing at the origin just as the request goes out on
    /// it (an idle timeout, a limit on requests per connection). The attempt then fails
    /// before any response byte. The request is sent again when not a byte of it was
    /// written, and for idempotent requests whose body is empty or kept even when it
    /// may have arrived. A stream an HTTP/2 origin refused (`REFUSED_STREAM`, or above
    /// the last stream of its graceful GOAWAY) never reached its application, so it goes
    /// again whatever its method and wherever its body was: a body read beforehand goes
    /// again whole, a streamed one from the copy kept as it went (`body_copy`); a body
    /// too large to keep cannot, and the client gets a 502 that says so.
    async fn send<W: H2OriginWire>(
        &self,
        out: &mut Outbound,
        heads: &mut Heads<'_>,
        wire: &mut W,
    ) -> Result<Sent, ProxyError> {
        let (kept, asked, body) = self.prelude(out, wire).await?;
        // A body streamed to an HTTP/2 origin as far as it went, until the response
        // head comes.
        let mut copy = BodyCopy::new();
        let mut tried = Vec::new();
        // After a pooled connection failed under the request: the same backend, on a new
        // connection.
        let mut fresh = false;
        let mut refused = 0usize;
        loop {
            if self.leave_retired(out, &mut tried) {
                fresh = false;
            }
            let backend = Arc::clone(out.backend());
            let claim = backend.shares.claim(out.claimant, backend.conns.config());
            let want = Want {
                fresh,
                asked,
                priority: claim.priority,
                h1_only: heads.h2.is_none(),
                connect: out.route.timeouts.connect,
            };
            // A request whose client leaves while it waits for a connection stops
            // waiting: it would take a connection, and the origin's work, for nobody.
            let checked_out = tokio::select! {
                biased;
                leased = backend.checkout(want) => leased,
                () = wire.client_gone() => Err(LeaseError::ClientGone),
            };
            let mut session = match checked_out {
                Ok((session, took)) => {
                    out.record.connected(took);
                    session
                }
                Err(LeaseError::Connect(e)) => {
                    // Turned away as an HTTP/2 connection opened: refused like a stream.
                    if e.is_refusal() && refused < MAX_REFUSED {
                        refused = refused.saturating_add(1);
                        tracing::debug!(
                            backend = %backend.addr, error = %e,
                            "the origin went away as the connection opened; trying another"
                        );
                        continue;
                    }
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
            let reused = session.is_reused();
            out.record.sending(reused);
            if matches!(session, Session::H1(_)) && (copy.len() > 0 || copy.lost().is_some()) {
                // A body that went in part to an HTTP/2 origin cannot go on over HTTP/1.1.
                let why = CopyLost::OtherProtocol;
                let method = out.request.method.clone();
                let refusal = std::io::Error::other("refused by an HTTP/2 origin");
                let kind = ProxyErrorKind::RefusedNotResent { error: refusal, method, why };
                return Err(error(out, kind, reused));
            }
            let attempt = match &mut session {
                Session::H1(lease) => {
                    heads.write_h1(out.request.framing);
                    wire.attempt(out, lease.conn(), heads.h1, kept.as_deref()).await
                }
                Session::H2(lease) => {
                    let fallback;
                    let head = match heads.h2.as_deref() {
                        Some(head) => head,
                        None => {
                            fallback = OriginHead::default();
                            &fallback
                        }
                    };
                    let sender = lease.sender();
                    // Boxed: only exchanges with HTTP/2 origins carry its state.
                    let attempt = wire.attempt_h2(out, sender, head, kept.as_deref(), &mut copy);
                    Box::pin(attempt).await
                }
            };
            let (outcome, io_error) = match attempt {
                Ok((upload, start)) => {
                    if let Session::H2(lease) = &mut session {
                        lease.answered();
                    }
                    return Ok(Sent { session, claim, upload, start });
                }
                Err(Attempt::Failed(kind)) => return Err(error(out, kind, reused)),
                Err(Attempt::Refused { goaway, error: io_error }) => {
                    let Session::H2(lease) = session else {
                        return Err(error(out, ProxyErrorKind::Closed(io_error), reused));
                    };
                    if goaway {
                        lease.went_away();
                    }
                    if let Some(why) = copy.lost() {
                        let method = out.request.method.clone();
                        let kind =
                            ProxyErrorKind::RefusedNotResent { error: io_error, method, why };
                        return Err(error(out, kind, reused));
                    }
                    refused = refused.saturating_add(1);
                    if refused <= MAX_REFUSED {
                        lease.retried();
                        tracing::debug!(
                            backend = %backend.addr, method = %out.request.method, goaway,
                            resent_bytes = copy.len(), error = %io_error,
                            "the origin refused the stream; sending it again"
                        );
                        continue;
                    }
                    // The origin refuses stream after stream: the backend is failing,
                    // whether the connection is new or not.
                    drop(lease);
                    if self.backend_failed(out, &backend, SendOutcome::Unsent, body, &mut tried) {
                        continue;
                    }
                    return Err(error(out, ProxyErrorKind::Closed(io_error), reused));
                }
                Err(Attempt::Closed { outcome, error }) => (outcome, error),
            };
            if let Session::H1(lease) = session {
                if reused {
                    // The origin closed a pooled connection: maybe where it always does.
                    backend.conns.closed_under_request(&lease, asked);
                }
                lease.discard(CloseReason::OriginClosed);
                wire.forget_origin();
            }
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
            if self.backend_failed(out, &backend, outcome, body, &mut tried) {
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

    /// What every protocol's send starts with: the kept body, if the request has one
    /// (see [`retry::should_keep_body`]), when the request asked for a connection
    /// (one clock read serves its arrival and the pool's checkout, unless a body was
    /// read in between), and what a replay would have to send.
    async fn prelude<W: Wire>(
        &self,
        out: &mut Outbound,
        wire: &mut W,
    ) -> Result<(Option<Vec<u8>>, Instant, BodyReplay), ProxyError> {
        let kept = self.kept_body(out, wire).await?;
        let buffer = kept.is_none()
            && out.route.buffering.requests
            && !out.progress.body_consumed
            && out.backend().speaks() == Speaks::Http1;
        if buffer {
            // Request buffering: the whole body before a connection is asked for.
            wire.buffer_request(out).await.map_err(|e| attempt_failed(out, e))?;
        }
        let asked = if kept.is_some() || buffer { Instant::now() } else { out.record.started() };
        out.record.asking(asked);
        let body = match (&kept, out.request.framing) {
            (Some(_), _) => BodyReplay::Kept,
            (None, Framing::Empty) => BodyReplay::Empty,
            (None, _) => BodyReplay::Streamed,
        };
        Ok((kept, asked, body))
    }

    /// Moves the request to another backend of its group, one it has not tried; false
    /// when there is none that may take it, or the request has been to
    /// [`retry::MAX_BACKENDS`] already.
    pub(super) fn fail_over(&self, out: &mut Outbound, tried: &mut Vec<SocketAddr>) -> bool {
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

    /// The backend failed the request before answering (`outcome` says how far it got):
    /// its health counts a 502, and the request moves to another backend when
    /// [`retry::may_fail_over`] allows it and there is one (true).
    fn backend_failed(
        &self,
        out: &mut Outbound,
        backend: &Arc<Backend>,
        outcome: SendOutcome,
        body: BodyReplay,
        tried: &mut Vec<SocketAddr>,
    ) -> bool {
        backend.observe(502, None, Instant::now());
        retry::may_fail_over(&out.request.method, outcome, body) && self.fail_over(out, tried)
    }

    /// Moves the request to another backend of its group when the one it was given
    /// left the group since (a reload removed it, or its container was sent a stop
    /// signal): a request that raced the change, or is replayed after a pooled
    /// connection failed under it, goes where new requests go. Stays when no other
    /// backend can take it.
    pub(super) fn leave_retired(&self, out: &mut Outbound, tried: &mut Vec<SocketAddr>) -> bool {
        out.backend.as_ref().is_some_and(|b| b.conns.is_retired()) && self.fail_over(out, tried)
    }

    /// The body of a small idempotent request, read in full before it is sent so it
    /// can be sent again (see [`retry::should_keep_body`]); `None` for other requests.
    pub(super) async fn kept_body<W: Wire>(
        &self,
        out: &mut Outbound,
        wire: &mut W,
    ) -> Result<Option<Vec<u8>>, ProxyError> {
        let Framing::Length(len) = out.request.framing else { return Ok(None) };
        if !retry::should_keep_body(&out.request.method, Some(len)) {
            return Ok(None);
        }
        match wire.read_kept(out, len).await {
            Ok(kept) => {
                out.progress.body_consumed = true;
                Ok(Some(kept))
            }
            Err(e) => Err(attempt_failed(out, e)),
        }
    }

    /// Streams the response to the client and settles the HTTP/1.1 connection: back
    /// to the pool, drained in the background, or closed.
    async fn respond_h1<W: Wire>(
        &self,
        out: Outbound,
        mut lease: Lease,
        claim: Claim,
        upload: Upload,
        start: ResponseStart,
        wire: &mut W,
    ) -> Done {
        if start.connection == ConnectionOut::Upgrade {
            drop(claim);
            let switching = Box::pin(self.switch(out, lease, wire));
            return switching.await;
        }
        lease.limit_by_origin(start.limits);
        let kept = start.reusable && upload == Upload::Complete;
        let downloaded = wire.relay(&out, lease.conn(), &start).await;
        let status = start.status;
        let keep_client = start.connection != ConnectionOut::Close;
        // The origin lets the connection carry another request, unless a rule learned
        // from its past closes says it closes after this response anyway. (Asked after
        // the relay: a value held across it would enlarge every exchange's state.)
        let kind = ResponseKind { status, declares_length: start.declares_length };
        let learned = out.backend().conns.answered(&mut lease, kind);
        let reusable = kept && learned.is_none();
        match downloaded {
            Ok(done) => {
                let now = Instant::now();
                if reusable && !done.extra && out.backend().health.is_down(now) {
                    // Taken out of service while this response was on its way.
                    lease.discard(CloseReason::Ejected);
                } else if reusable && !done.extra {
                    lease.release(now);
                } else if let Some(rule) = learned.filter(|_| kept && !done.extra) {
                    out.backend().conns.retire_learned(lease, rule, now);
                } else {
                    let reason =
                        if done.extra { CloseReason::Error } else { CloseReason::OriginClosed };
                    lease.discard(reason);
                }
                drop(claim);
                if wire.is_behind() {
                    // The origin is done and its connection settled; the client takes
                    // the rest at its own pace.
                    return Box::pin(catch_up(out, status, keep_client, upload, wire)).await;
                }
                delivered(out, status, done.bytes, now, keep_client, upload)
            }
            Err(DownloadError::Client { error, bytes, remaining }) => {
                match remaining {
                    Some(n) if reusable && n <= DRAIN_LIMIT_BYTES && !wire.origin_has_extra() => {
                        wire.drain_later(lease, n)
                    }
                    _ => lease.discard(CloseReason::Error),
                }
                client_left(out, status, bytes, &error)
            }
            Err(DownloadError::Upstream { error, bytes }) => {
                lease.discard(CloseReason::Error);
                origin_body_failed(out, status, bytes, &error)
            }
        }
    }

    /// Answers 101 to the client and copies bytes both ways until either side ends.
    /// The upstream connection leaves the pool for good.
    async fn switch<W: Wire>(&self, out: Outbound, lease: Lease, wire: &mut W) -> Done {
        let conn = lease.into_inner(CloseReason::Upgraded);
        let stall = out.route.timeouts.read;
        let backend = Arc::clone(out.backend());
        let wrote = wire.switch(&out).await;
        let at = Instant::now();
        let delivery = Delivery { status: 101, bytes: 0, ended: Some(at) };
        out.record.finish(out.route.upstream.as_deref(), delivery);
        if wrote {
            // A backend that left its group may close its tunnels after its drain time.
            tokio::select! {
                () = wire.tunnel(conn, stall) => {}
                () = backend.cut_off() => {
                    tracing::info!(backend = %backend.addr, container = backend.container_name(), "upgraded connection closed: its server left and the drain time is over");
                }
            }
        }
        Done { next: Next::Close, at }
    }

    /// Answers a request that failed with holdfast's own response naming the upstream,
    /// the backend and the reason.
    async fn answer_error<W: Wire>(&self, out: Outbound, e: ProxyError, wire: &mut W) -> Done {
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
        self.answer(out, e.status(), e.kind.as_str(), &e.text(), wire).await
    }

    /// Sends holdfast's own response, `status` with `text`, for a request that failed
    /// for `reason`; keeps the client connection when the request was read in full.
    async fn answer<W: Wire>(
        &self,
        out: Outbound,
        status: u16,
        reason: &'static str,
        text: &str,
        wire: &mut W,
    ) -> Done {
        self.answer_with(out, status, reason, text, b"", wire).await
    }

    /// [`Proxy::answer`] with `extra` header lines; a status below 400 is an answer,
    /// not a failure, in the access log.
    async fn answer_with<W: Wire>(
        &self,
        mut out: Outbound,
        status: u16,
        reason: &'static str,
        text: &str,
        extra: &[u8],
        wire: &mut W,
    ) -> Done {
        if status >= 400 {
            out.record.failed(reason);
        }
        self.answers.record(out.route.upstream.as_ref().map(|u| &u.name), reason, status);
        // Unread body bytes would be taken for the next request: close instead.
        let keep = out.request.keep_alive && out.progress.body_consumed;
        let sent = wire.answer_local(&out, status, text, extra, keep).await;
        let at = Instant::now();
        let ended = sent.then_some(at);
        out.record.finish(
            out.route.upstream.as_deref(),
            Delivery { status, bytes: text.len() as u64, ended },
        );
        let next = match (sent, keep, out.progress.body_consumed) {
            (false, _, _) => Next::Close,
            (true, true, _) => Next::KeepOpen,
            (true, false, true) => Next::Close,
            (true, false, false) => Next::Linger,
        };
        Done { next, at }
    }
}

/// Records the response head's arrival, and tells the backend's health its status.
fn response_head(out: &mut Outbound, start: &ResponseStart) {
    let now = out.record.response_head(start.status);
    out.backend().observe(start.status, out.record.origin_time(), now);
}

/// Streams an HTTP/2 origin's response to the client; the stream's slot on its
/// connection frees when it ends.
async fn respond_h2<W: H2OriginWire>(
    out: Outbound,
    lease: StreamLease,
    upload: Upload,
    start: ResponseStart,
    wire: &mut W,
) -> Done {
    let status = start.status;
    let keep_client = start.connection != ConnectionOut::Close;
    let downloaded = wire.relay_h2(&out, &start).await;
    drop(lease);
    match downloaded {
        // The origin is done and its stream free; the client takes the rest at its own
        // pace.
        Ok(_) if wire.is_behind() => catch_up(out, status, keep_client, upload, wire).await,
        Ok(done) => delivered(out, status, done.bytes, Instant::now(), keep_client, upload),
        Err(DownloadError::Client { error, bytes, .. }) => client_left(out, status, bytes, &error),
        Err(DownloadError::Upstream { error, bytes }) => {
            origin_body_failed(out, status, bytes, &error)
        }
    }
}
