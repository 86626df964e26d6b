//! Bodies on the proxy path: the request body going up, the response body coming
//! down, and the moment the upstream connection goes back to its pool.
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

use bytes::Bytes;
use holdfast_pool::CloseReason;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

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
    inner: Option<Incoming>,
    upload: Arc<Upload>,
}

impl RequestBody {
    /// Wraps `inner`; the returned [`Upload`] follows it.
    pub fn new(inner: Incoming) -> (Self, Arc<Upload>) {
        let upload = Arc::new(Upload::default());
        upload.done.store(inner.is_end_stream(), Ordering::Relaxed);
        (RequestBody { inner: Some(inner), upload: Arc::clone(&upload) }, upload)
    }

    /// A body with nothing in it.
    pub fn empty() -> Self {
        let upload = Upload { done: AtomicBool::new(true), frames: AtomicU64::new(0) };
        RequestBody { inner: None, upload: Arc::new(upload) }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(Pin::new(inner).poll_frame(cx));
        let done = match &frame {
            None => true,
            // Trailers end a body: hyper does not poll again after them.
            Some(Ok(f)) => f.is_trailers() || self.inner.as_ref().is_some_and(Body::is_end_stream),
            Some(Err(_)) => false,
        };
        if frame.as_ref().is_some_and(|f| f.is_ok()) {
            self.upload.frames.fetch_add(1, Ordering::Relaxed);
        }
        if done {
            self.upload.done.store(true, Ordering::Release);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
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
