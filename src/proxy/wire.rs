//! The seam between an exchange's logic and its protocol. `exchange` decides: which
//! connection, whether to send again or elsewhere, what the client is told, what is
//! counted, whether a connection goes back to its pool. A [`Wire`] moves the bytes of
//! one exchange in one protocol's syntax and reports what happened in the terms those
//! decisions need ([`Attempt`], [`ResponseStart`], [`Upload`]).
//!
//! HTTP/1.1 on both sides implements it today ([`super::h1::H1Wire`]). An HTTP/2
//! client stream, or a stream to an HTTP/2 origin, implements it next; the retry,
//! failover, early-answer, upgrade and accounting rules in `exchange` stay as they are.

use std::future::Future;
use std::io;
use std::time::Duration;

use super::body_copy::BodyCopy;
use super::error::ProxyErrorKind;
use super::retry::SendOutcome;
use super::transfer::{DownloadError, Downloaded, Upload};
use super::Outbound;
use crate::http1::encode::{BodyOut, ConnectionOut};
use crate::http1::Framing;
use crate::http2::encode::OriginHead;
use crate::http2::origin::SendRequest;
use crate::upstream::{Lease, OriginConn};
use holdfast_pool::OriginLimits;

/// How one exchange's bytes move between the client and an origin connection.
///
/// The futures are `Send` whenever the implementing type is: the exchange runs in the
/// client connection's task, which tokio may move between threads.
pub(crate) trait Wire {
    /// Reads the whole request body, `len` bytes, before anything is sent, so that it
    /// can be sent again (see `retry::should_keep_body`).
    fn read_kept(
        &mut self,
        out: &mut Outbound,
        len: u64,
    ) -> impl Future<Output = Result<Vec<u8>, Attempt>> + Send;

    /// Resolves once the client has gone (closed its connection, reset its stream), so
    /// that a request waiting for a connection stops waiting; never, while it cannot
    /// tell.
    fn client_gone(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// Reads the whole request body before anything is sent (request buffering), to
    /// send it with the head on the next attempt; a wire that cannot leaves the body
    /// to stream.
    fn buffer_request(
        &mut self,
        _out: &mut Outbound,
    ) -> impl Future<Output = Result<(), Attempt>> + Send {
        async { Ok(()) }
    }

    /// One try on one connection: the request (`head`, the `kept` body or the body as
    /// it streams from the client) goes out, and the final response head comes back.
    fn attempt(
        &mut self,
        out: &mut Outbound,
        conn: &mut OriginConn,
        head: &[u8],
        kept: Option<&[u8]>,
    ) -> impl Future<Output = Result<(Upload, ResponseStart), Attempt>> + Send;

    /// Forgets what was read from a connection whose attempt failed, before the
    /// request is tried on another.
    fn forget_origin(&mut self);

    /// Streams the response body to the client, after the head.
    fn relay(
        &mut self,
        out: &Outbound,
        conn: &mut OriginConn,
        start: &ResponseStart,
    ) -> impl Future<Output = Result<Downloaded, DownloadError>> + Send;

    /// Whether response bytes wait for the client after [`Wire::relay`] returned: the
    /// origin is done with the response, the client is not (response buffering).
    fn is_behind(&self) -> bool {
        false
    }

    /// Gives the client the response bytes that wait for it (see [`Wire::is_behind`]),
    /// once the origin's connection is settled; the total body bytes it got.
    fn finish(
        &mut self,
        _out: &Outbound,
    ) -> impl Future<Output = Result<u64, DownloadError>> + Send {
        async { Ok(0) }
    }

    /// Whether bytes past the response were read from the origin connection (it then
    /// cannot be drained for reuse).
    fn origin_has_extra(&self) -> bool;

    /// Sends the client the response head that switches protocols (`101`); true when
    /// it went out.
    fn switch(&mut self, out: &Outbound) -> impl Future<Output = bool> + Send;

    /// Copies bytes both ways between the client and `conn` until either side ends,
    /// after a switch of protocols; the connection is the tunnel's for good.
    /// `stall` bounds the wait for the client to take the bytes read ahead.
    fn tunnel(&mut self, conn: OriginConn, stall: Duration) -> impl Future<Output = ()> + Send;

    /// Reads the unread `remaining` bytes of a response nobody wants, in the
    /// background, then returns the connection to its pool (or closes it).
    fn drain_later(&self, lease: Lease, remaining: u64);

    /// Sends holdfast's own response, `status` with `text`, asking the client to keep
    /// the connection when `keep`. True when it went out.
    fn answer_local(
        &mut self,
        out: &Outbound,
        status: u16,
        text: &str,
        extra: &[u8],
        keep: bool,
    ) -> impl Future<Output = bool> + Send;
}

/// An exchange whose origin speaks HTTP/2: the request goes out as a stream on a
/// shared connection instead of bytes on a connection of its own.
pub(crate) trait H2OriginWire: Wire {
    /// One try on one stream: the request head (`head`), then the `kept` body or
    /// the body as it streams from the client, and the final response head back. A
    /// body may still be streaming when the response head comes (gRPC streams both
    /// ways); [`H2OriginWire::relay_h2`] finishes it.
    ///
    /// A streamed body goes into `copy` as it goes out, until the response head
    /// comes; a try after a refused one sends what `copy` holds first, then the rest
    /// of the body as it streams. A refusal is [`Attempt::Refused`] wherever the body
    /// was when it came; whether the request goes again is the caller's to decide.
    fn attempt_h2(
        &mut self,
        out: &mut Outbound,
        send: SendRequest,
        head: &OriginHead,
        kept: Option<&[u8]>,
        copy: &mut BodyCopy,
    ) -> impl Future<Output = Result<(Upload, ResponseStart), Attempt>> + Send;

    /// Streams the response body and trailers to the client, after the head.
    fn relay_h2(
        &mut self,
        out: &Outbound,
        start: &ResponseStart,
    ) -> impl Future<Output = Result<Downloaded, DownloadError>> + Send;
}

/// The response head as the client gets it, and how its body travels.
pub(crate) struct ResponseStart {
    pub status: u16,
    /// The origin's framing of the body.
    pub framing: Framing,
    /// The framing the client gets.
    pub body_out: BodyOut,
    /// The origin lets the connection carry another request.
    pub reusable: bool,
    /// The response has `Content-Length` or `Transfer-Encoding` (learned close rules
    /// tell responses apart by it and the status).
    pub declares_length: bool,
    /// The origin's limits on the connection (`Keep-Alive`).
    pub limits: OriginLimits,
    /// What the client's connection does after this response.
    pub connection: ConnectionOut,
    /// Response buffering applies: what the client does not take at once may be held
    /// for it (see `backlog`).
    pub buffer: bool,
}

/// Why one attempt on one connection failed.
pub(crate) enum Attempt {
    /// The connection failed before any response byte: the stale-connection race,
    /// or the backend failing; `retry` decides.
    Closed { outcome: SendOutcome, error: io::Error },
    /// Anything else: no retry.
    Failed(ProxyErrorKind),
    /// An HTTP/2 origin refused the stream (`REFUSED_STREAM`, or above the last stream
    /// of its graceful GOAWAY): it never processed it, so it goes again whatever its
    /// method, if its body can be sent again.
    Refused { goaway: bool, error: io::Error },
}
