//! The origin's gRPC echo, in h2c mode: a request whose `content-type` is
//! `application/grpc` (with or without a `+proto` suffix) is a call, on any path, and is
//! answered with the bytes of its own request body, as they arrive, then trailers with
//! `grpc-status: 0`.
//!
//! Passing the request's DATA on as it comes echoes every length-prefixed message
//! unchanged and in order, whether the call is unary (one message, then the end of the
//! stream) or a bidirectional stream (the client sends the next message once it has its
//! echo): the origin never parses the framing, so it costs the load core as little as a
//! gRPC server can. The response head goes out at once, before any message, as a gRPC
//! server's does.
//!
//! It does not: check the framing, decompress, or answer anything but status 0 (a call
//! whose request body fails, a reset stream, ends the response with that error instead).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame};
use hyper::body::Incoming;

/// The media type of a gRPC call (gRPC over HTTP/2, "Requests": `application/grpc`,
/// optionally followed by `+proto`, `+json`, ...).
pub const CONTENT_TYPE_GRPC: &str = "application/grpc";

/// Whether `request` is a gRPC call, by its `content-type`.
pub fn is_call<B>(request: &Request<B>) -> bool {
    request.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok()).is_some_and(|value| {
        value == CONTENT_TYPE_GRPC
            || value.strip_prefix(CONTENT_TYPE_GRPC).is_some_and(|rest| rest.starts_with('+'))
    })
}

/// The response to a gRPC call: status 200, `content-type: application/grpc`, the
/// request's body echoed as it arrives, then `grpc-status: 0`.
pub fn echo(request: Request<Incoming>) -> Response<EchoBody> {
    let mut response = Response::new(EchoBody::new(request.into_body()));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_GRPC));
    response
}

/// The trailers that end every echoed call: `grpc-status: 0` (OK).
fn ok_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers
}

/// A response body that hands on the request body's DATA frames and ends with
/// [`ok_trailers`] once the request body has ended.
#[derive(Debug)]
pub struct EchoBody {
    request: Incoming,
    /// The trailers went out: nothing more comes.
    done: bool,
}

impl EchoBody {
    fn new(request: Incoming) -> Self {
        Self { request, done: false }
    }
}

impl Body for EchoBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        // Each round looks at one frame of the request body: DATA goes back, the client's
        // own trailers (gRPC clients send none) are dropped, its end sends the trailers.
        loop {
            match Pin::new(&mut this.request).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Err(_trailers) => continue,
                },
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(Some(Ok(Frame::trailers(ok_trailers()))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_content_type(value: &str) -> Request<()> {
        Request::builder().header(CONTENT_TYPE, value).body(()).expect("request")
    }

    #[test]
    fn a_call_is_told_by_its_content_type() {
        assert!(is_call(&with_content_type("application/grpc")));
        assert!(is_call(&with_content_type("application/grpc+proto")));
        assert!(!is_call(&with_content_type("application/grpc-web")));
        assert!(!is_call(&with_content_type("text/plain")));
        assert!(!is_call(&Request::new(())));
    }

    #[test]
    fn every_call_ends_with_status_ok() {
        assert_eq!(ok_trailers()["grpc-status"], "0");
    }
}
