//! Bodies on the proxy path: the request body going up (streamed, or read into memory
//! first when it is small enough to keep for a retry), the response body coming down,
//! and the moment the upstream connection goes back to its pool.
//!
//! The connection is released when the response body ends cleanly and the request body
//! was fully sent; on any error it is discarded. If the client goes away mid-response,
//! a small known remainder is drained in the background so the connection can still be
//! reused; anything larger or of unknown size closes it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use holdfast_pool::CloseReason;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use super::retry::{BodyReplay, KEEP_BODY_MAX_BYTES};
use crate::upstream::Lease;

/// The error type of bodies the proxy produces.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Responses whose unread remainder is at most this many bytes are drained after the
/// client leaves, to keep the connection; 64 KiB is a few milliseconds on any link.
const DRAIN_LIMIT_BYTES: u64 = 64 * 1024;
/// How long a background drain may take before the connection is closed instead.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// How far a request body has got on its way upstream.
#[derive(Debug, Default)]
pub struct Upload {
    done: AtomicBool,
    frames: AtomicU64,
}

impl Upload {
    /// Whether the last byte has been handed to hyper.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Frames handed to hyper so far; a change means the upload is moving.
    pub fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }
}

/// A client's request body on its way upstream, recording its progress in an [`Upload`].
pub struct RequestBody {
    source: Source,
    upload: Arc<Upload>,
}

enum Source {
    /// Read from the client as hyper asks for it; gone once sent.
    Streamed(Incoming),
    /// In memory (read in full beforehand, or empty); `None` once handed to hyper.
    Kept(Option<Bytes>),
}

impl RequestBody {
    /// Streams `inner`; the returned [`Upload`] follows it. An empty body is not
    /// streamed but kept (there is nothing to lose by sending it twice).
    pub fn new(inner: Incoming) -> (Self, Arc<Upload>) {
        if inner.is_end_stream() {
            return RequestBody::kept(Bytes::new());
        }
        let upload = Arc::new(Upload::default());
        (RequestBody { source: Source::Streamed(inner), upload: Arc::clone(&upload) }, upload)
    }

    /// A body whose bytes are all in memory, so that it can be built again (see
    /// [`super::retry::Replay`]); the returned [`Upload`] follows it.
    pub fn kept(bytes: Bytes) -> (Self, Arc<Upload>) {
        let upload =
            Arc::new(Upload { done: AtomicBool::new(bytes.is_empty()), frames: AtomicU64::new(0) });
        let bytes = (!bytes.is_empty()).then_some(bytes);
        (RequestBody { source: Source::Kept(bytes), upload: Arc::clone(&upload) }, upload)
    }

    /// A body with nothing in it.
    pub fn empty() -> Self {
        RequestBody::kept(Bytes::new()).0
    }

    /// Whether this body could be sent a second time.
    pub fn replay(&self) -> BodyReplay {
        match &self.source {
            Source::Streamed(_) => BodyReplay::Streamed,
            Source::Kept(None) => BodyReplay::Empty,
            Source::Kept(Some(_)) => BodyReplay::Kept,
        }
    }

    /// The bytes of a body that has not been sent and is in memory (empty for no body);
    /// `None` for a streamed one.
    pub fn kept_bytes(&self) -> Option<Bytes> {
        match &self.source {
            Source::Streamed(_) => None,
            Source::Kept(bytes) => Some(bytes.clone().unwrap_or_default()),
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let (frame, done) = match &mut this.source {
            Source::Kept(bytes) => match bytes.take() {
                Some(bytes) => (Some(Ok(Frame::data(bytes))), true),
                None => return Poll::Ready(None),
            },
            Source::Streamed(inner) => {
                let frame = ready!(Pin::new(&mut *inner).poll_frame(cx));
                let done = match &frame {
                    None => true,
                    // Trailers end a body: hyper does not poll again after them.
                    Some(Ok(f)) => f.is_trailers() || inner.is_end_stream(),
                    Some(Err(_)) => false,
                };
                (frame, done)
            }
        };
        if frame.as_ref().is_some_and(|f| f.is_ok()) {
            this.upload.frames.fetch_add(1, Ordering::Relaxed);
        }
        if done {
            this.upload.done.store(true, Ordering::Release);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Streamed(inner) => inner.is_end_stream(),
            Source::Kept(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Streamed(inner) => inner.size_hint(),
            Source::Kept(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

/// Why a request body could not be read into memory.
#[derive(Debug)]
pub enum KeepError {
    /// Reading from the client failed.
    Client(hyper::Error),
    /// No part of the body arrived for the stall limit.
    Stalled,
}

/// Reads a request body of known, small size (see [`KEEP_BODY_MAX_BYTES`])
/// into memory. hyper's `Content-Length` framing bounds what can arrive; each frame must
/// come within `stall` of the one before.
pub async fn read_to_keep(mut inner: Incoming, stall: Duration) -> Result<Bytes, KeepError> {
    let exact = inner.size_hint().exact().unwrap_or(0).min(KEEP_BODY_MAX_BYTES);
    let mut kept = BytesMut::with_capacity(usize::try_from(exact).unwrap_or(0));
    // Each round takes one frame; the body ends after at most `exact` bytes.
    loop {
        match tokio::time::timeout(stall, inner.frame()).await {
            Err(_) => return Err(KeepError::Stalled),
            Ok(None) => return Ok(kept.freeze()),
            Ok(Some(Err(e))) => return Err(KeepError::Client(e)),
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    kept.extend_from_slice(data);
                }
            }
        }
    }
}

/// What must hold for the upstream connection to be reused once the response ends.
pub struct Reuse {
    pub lease: Lease,
    /// The response allows keep-alive (HTTP/1.1, no `Connection: close`).
    pub keep_alive: bool,
    /// The request body's progress; it must have been sent in full.
    pub upload: Arc<Upload>,
}

impl Reuse {
    fn finish(self) {
        if !self.keep_alive {
            self.lease.discard(CloseReason::UpstreamClosed);
        } else if !self.upload.is_done() {
            self.lease.discard(CloseReason::Error);
        } else {
            self.lease.release(Instant::now());
        }
    }
}

/// An upstream response body streamed to the client.
pub struct ResponseBody {
    inner: Option<Incoming>,
    reuse: Option<Reuse>,
    read_timeout: Duration,
    stall: Option<Pin<Box<Sleep>>>,
}

/// The response body stalled for longer than the read timeout.
#[derive(Debug, thiserror::Error)]
#[error("upstream response body stalled for {0:?}")]
pub struct ReadTimeout(Duration);

impl ResponseBody {
    pub fn new(inner: Incoming, reuse: Reuse, read_timeout: Duration) -> Self {
        let mut body =
            ResponseBody { inner: Some(inner), reuse: Some(reuse), read_timeout, stall: None };
        // An empty body (HEAD, 204, 304, Content-Length: 0) is complete already.
        if body.inner.as_ref().is_some_and(Body::is_end_stream) {
            body.finish();
        }
        body
    }

    fn finish(&mut self) {
        if let Some(reuse) = self.reuse.take() {
            reuse.finish();
        }
    }

    fn fail(&mut self) {
        if let Some(reuse) = self.reuse.take() {
            reuse.lease.discard(CloseReason::Error);
        }
    }

    /// Arms or checks the stall timer while the upstream sends nothing.
    fn poll_stall(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let timeout = self.read_timeout;
        let sleep = self.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        sleep.as_mut().poll(cx)
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Pending => {
                if this.poll_stall(cx).is_ready() {
                    this.fail();
                    this.inner = None;
                    return Poll::Ready(Some(Err(ReadTimeout(this.read_timeout).into())));
                }
                Poll::Pending
            }
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(stall) = this.stall.as_mut() {
                    stall.as_mut().reset(Instant::now() + this.read_timeout);
                }
                // Trailers end a body: hyper does not poll again after them.
                if frame.is_trailers() || this.inner.as_ref().is_some_and(Body::is_end_stream) {
                    this.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.fail();
                Poll::Ready(Some(Err(e.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for ResponseBody {
    /// The client went away before the response ended.
    fn drop(&mut self) {
        let (Some(reuse), Some(inner)) = (self.reuse.take(), self.inner.take()) else {
            return;
        };
        let small = inner.size_hint().upper().is_some_and(|n| n <= DRAIN_LIMIT_BYTES);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if small && reuse.keep_alive => {
                rt.spawn(drain(inner, reuse));
            }
            _ => reuse.lease.discard(CloseReason::Error),
        }
    }
}

/// Reads the rest of a response nobody wants, then releases the connection.
async fn drain(mut inner: Incoming, reuse: Reuse) {
    let rest = async {
        while let Some(frame) = inner.frame().await {
            frame?;
        }
        Ok::<_, hyper::Error>(())
    };
    match tokio::time::timeout(DRAIN_TIMEOUT, rest).await {
        Ok(Ok(())) => reuse.finish(),
        _ => reuse.lease.discard(CloseReason::Error),
    }
}

/// The body of a response to a client: streamed from upstream, or written by holdfast.
pub enum ClientBody {
    Upstream(ResponseBody),
    Local(Option<Bytes>),
}

impl ClientBody {
    pub fn text(text: impl Into<Bytes>) -> Self {
        ClientBody::Local(Some(text.into()))
    }

    pub fn empty() -> Self {
        ClientBody::Local(None)
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ClientBody::Upstream(body) => Pin::new(body).poll_frame(cx),
            ClientBody::Local(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Upstream(body) => body.is_end_stream(),
            ClientBody::Local(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Upstream(body) => body.size_hint(),
            ClientBody::Local(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}
