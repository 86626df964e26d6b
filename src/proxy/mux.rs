//! The logic of one exchange with an HTTP/2 origin: a stream on a shared connection
//! instead of a connection of its own. The rules are `exchange`'s: a connect that
//! fails moves the request to another backend, a stream that failed before its
//! response goes again when `retry` allows it, and everything is counted the same way.
//! One rule is HTTP/2's own: a stream the origin refused (`REFUSED_STREAM`, or above
//! the last stream of its graceful GOAWAY) never reached its application, so it goes
//! again whatever its method and wherever its body was: a body read beforehand goes
//! again whole, a streamed one from the copy kept as it went (`body_copy`); a body too
//! large to keep cannot, and the client gets a 502 that says so.

use std::sync::Arc;

use tokio::time::Instant;

use super::body_copy::BodyCopy;
use super::error::{ProxyError, ProxyErrorKind};
use super::exchange::{catch_up, client_left, delivered, origin_body_failed};
use super::retry::{self, Decision};
use super::transfer::{DownloadError, Upload};
use super::wire::{Attempt, MuxWire, ResponseStart};
use super::{error, record, Done, Outbound, Proxy};
use crate::http1::encode::ConnectionOut;
use crate::http2::encode::OriginHead;
use crate::upstream::multiplex::MuxLease;
use crate::upstream::LeaseError;

/// Refused streams sent again, at most, before the request fails: an origin that
/// refuses every stream is failing. Many, because refusals are cheap and can come in
/// runs: an origin that sends GOAWAY after every few streams refuses the streams that
/// crowded onto each new connection before its GOAWAY arrived.
const MAX_REFUSED: usize = 25;

/// A request that reached an HTTP/2 origin and got a response head.
pub(super) struct SentMux {
    lease: MuxLease,
    upload: Upload,
    start: ResponseStart,
}

/// How sending to an HTTP/2 origin ended short of a response.
pub(super) enum MuxFailure {
    Failed(ProxyError),
    /// The backend turned out to speak HTTP/1.1 (ALPN): send it that way, with the
    /// body read already, if one was.
    SpeaksHttp1(Option<Vec<u8>>),
}

impl From<ProxyError> for MuxFailure {
    fn from(e: ProxyError) -> Self {
        MuxFailure::Failed(e)
    }
}

impl Proxy {
    /// Leases a stream, sends the request and reads the response head; again when the
    /// origin refused the stream (up to [`MAX_REFUSED`] times, if the body can go
    /// again), or when the stream failed and [`retry::may_replay`] allows it; on
    /// another backend when a connect failed or [`retry::may_fail_over`] allows it.
    pub(super) async fn send_mux<W: MuxWire>(
        &self,
        out: &mut Outbound,
        head: &OriginHead,
        wire: &mut W,
    ) -> Result<SentMux, MuxFailure> {
        let (kept, _, body) = self.prelude(out, wire, None).await?;
        // A streamed body as far as it went, until the response head comes.
        let mut copy = BodyCopy::new();
        let mut tried = Vec::new();
        let mut refused = 0usize;
        loop {
            self.leave_retired(out, &mut tried);
            let backend = Arc::clone(out.backend());
            let started = Instant::now();
            let connect = out.route.timeouts.connect;
            // A request whose client leaves while it waits for a stream stops waiting.
            let leased = tokio::select! {
                biased;
                leased = backend.lease_stream(connect) => leased,
                () = wire.client_gone() => Err(LeaseError::ClientGone),
            };
            let lease = match leased {
                Ok(Some(lease)) => lease,
                Ok(None) => return Err(MuxFailure::SpeaksHttp1(kept)),
                Err(LeaseError::Connect(e)) => {
                    // Turned away as the connection opened: refused like a stream.
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
                        continue;
                    }
                    return Err(error(out, e.into(), false).into());
                }
                Err(e) => return Err(error(out, e.into(), false).into()),
            };
            out.record.connected(started.elapsed());
            let reused = lease.is_reused();
            out.record.sending(reused);
            let request = head.request();
            let sender = lease.sender();
            let attempt = wire.mux_attempt(out, sender, request, kept.as_deref(), &mut copy).await;
            let (outcome, io_error) = match attempt {
                Ok((upload, start)) => {
                    lease.answered();
                    return Ok(SentMux { lease, upload, start });
                }
                Err(Attempt::Failed(kind)) => return Err(error(out, kind, reused).into()),
                Err(Attempt::Refused { goaway, error: io_error }) => {
                    if goaway {
                        lease.went_away();
                    }
                    if let Some(why) = copy.lost() {
                        let method = out.request.method.clone();
                        let kind =
                            ProxyErrorKind::RefusedNotResent { error: io_error, method, why };
                        return Err(error(out, kind, reused).into());
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
                    backend.observe(502, None, Instant::now());
                    let unsent = retry::SendOutcome::Unsent;
                    if retry::may_fail_over(&out.request.method, unsent, body)
                        && self.fail_over(out, &mut tried)
                    {
                        continue;
                    }
                    return Err(error(out, ProxyErrorKind::Closed(io_error), reused).into());
                }
                Err(Attempt::Closed { outcome, error }) => (outcome, error),
            };
            drop(lease);
            let decision = retry::may_replay(&out.request.method, outcome, reused, body);
            record(&backend, decision);
            match decision {
                Decision::Replay => continue,
                Decision::NotReplayed(why) => {
                    let kind = ProxyErrorKind::NotReplayed {
                        error: io_error,
                        method: out.request.method.clone(),
                        why,
                    };
                    return Err(error(out, kind, reused).into());
                }
                Decision::Fail => {}
            }
            backend.observe(502, None, Instant::now());
            if retry::may_fail_over(&out.request.method, outcome, body)
                && self.fail_over(out, &mut tried)
            {
                continue;
            }
            return Err(error(out, ProxyErrorKind::Closed(io_error), reused).into());
        }
    }

    /// Streams an HTTP/2 origin's response to the client; the stream's slot on its
    /// connection frees when it ends.
    pub(super) async fn respond_mux<W: MuxWire>(
        &self,
        mut out: Outbound,
        sent: SentMux,
        wire: &mut W,
    ) -> Done {
        let SentMux { lease, upload, start } = sent;
        let (header, now) = out.record.response_head(start.status);
        out.backend().observe(start.status, header, now);
        let status = start.status;
        let keep_client = start.connection != ConnectionOut::Close;
        let downloaded = wire.mux_relay(&out, &start).await;
        drop(lease);
        match downloaded {
            // The origin is done and its stream free; the client takes the rest at its
            // own pace.
            Ok(_) if wire.is_behind() => catch_up(out, status, keep_client, upload, wire).await,
            Ok(done) => delivered(out, status, done.bytes, Instant::now(), keep_client, upload),
            Err(DownloadError::Client { error, bytes, .. }) => {
                client_left(out, status, bytes, &error)
            }
            Err(DownloadError::Upstream { error, bytes }) => {
                origin_body_failed(out, status, bytes, &error)
            }
        }
    }
}
