//! The origin's response bodies: a body known up front, sent as one frame, or `/bytes`'
//! N bytes, made on the fly in frames of [`CHUNK_BYTES`] so a 10 MB response costs no
//! 10 MB of memory. Either one holds its place among the responses in progress, and the
//! worker that serves it if workers are limited ([`super::workers`]), until its last
//! frame is taken.
//!
//! hyper takes the next frame only when it has room to write it, so a body whose client
//! (a proxy) does not read stops being polled, and its worker stays busy, as a Puma or
//! gunicorn sync worker stays busy writing to a socket nobody reads.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::workers::Responding;

/// Bytes in each frame of a `/bytes` body (the last one may be shorter).
pub const CHUNK_BYTES: usize = 64 * 1024;

static CHUNK: [u8; CHUNK_BYTES] = [b'c'; CHUNK_BYTES];

/// A response body of the origin.
#[derive(Debug)]
pub struct OriginBody {
    left: Left,
    /// This response in progress (and its worker), counted out once the last frame is
    /// taken (or when the body is dropped: the client went away).
    responding: Option<Responding>,
}

/// What is still to be sent.
#[derive(Debug)]
enum Left {
    /// One frame, or nothing once it is taken.
    Once(Option<Bytes>),
    /// This many bytes of `CHUNK`'s filler.
    Repeat(u64),
}

impl OriginBody {
    /// `bytes` as one frame.
    pub fn once(bytes: Bytes) -> Self {
        Self { left: Left::Once(Some(bytes).filter(|b| !b.is_empty())), responding: None }
    }

    /// `length` filler bytes, in frames of [`CHUNK_BYTES`].
    pub fn repeat(length: u64) -> Self {
        Self { left: Left::Repeat(length), responding: None }
    }

    /// The same body, holding `responding` until its last frame is taken.
    pub fn holding(mut self, responding: Responding) -> Self {
        self.responding = if self.is_end_stream() { None } else { Some(responding) };
        self
    }

    fn remaining(&self) -> u64 {
        match &self.left {
            Left::Once(bytes) => bytes.as_ref().map_or(0, |b| b.len() as u64),
            Left::Repeat(left) => *left,
        }
    }

    fn next_frame(&mut self) -> Option<Bytes> {
        match &mut self.left {
            Left::Once(bytes) => bytes.take(),
            Left::Repeat(0) => None,
            Left::Repeat(left) => {
                let length = usize::try_from(*left).unwrap_or(CHUNK_BYTES).min(CHUNK_BYTES);
                *left -= length as u64;
                Some(Bytes::from_static(&CHUNK[..length]))
            }
        }
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let frame = this.next_frame();
        if this.is_end_stream() {
            // The last frame is on its way: the worker is free for the next request.
            this.responding = None;
        }
        Poll::Ready(frame.map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining())
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn repeat_sends_exactly_the_length_in_chunks() {
        let length = 2 * CHUNK_BYTES as u64 + 5;
        let body = OriginBody::repeat(length);
        assert_eq!(body.size_hint().exact(), Some(length));
        let mut body = body;
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.expect("infallible").into_data().expect("data").len());
        }
        assert_eq!(frames, [CHUNK_BYTES, CHUNK_BYTES, 5]);
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn once_sends_its_bytes_and_empty_bodies_end_at_once() {
        let body = OriginBody::once(Bytes::from_static(b"hello"));
        let collected = body.collect().await.expect("infallible").to_bytes();
        assert_eq!(collected, Bytes::from_static(b"hello"));
        assert!(OriginBody::once(Bytes::new()).is_end_stream());
        assert!(OriginBody::repeat(0).is_end_stream());
    }
}
