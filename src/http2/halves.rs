//! The two halves of an HTTP/2 stream as the proxy path moves bytes on them, whichever
//! side the stream is on: a client's ([`super::session`]) or an origin's
//! ([`super::origin`]). [`super::flow`] and the tunnels are written once against these.
//!
//! Errors are I/O errors; a stream the peer reset carries its code
//! ([`reset_code`]), so a reset with `NO_ERROR` can be told from a failure.

use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use holdfast_h2::error::ErrorCode;
use http::HeaderMap;

/// The receiving half: a message's body (DATA frames), then its trailers.
pub trait RecvHalf: Send {
    /// The next DATA frame's bytes; `None` at the end of the stream.
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>>;
    /// The trailers, once the DATA has ended (`None`: the stream ended without).
    fn poll_trailers(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<HeaderMap>>>;
    /// Gives `n` bytes of window back to the sender.
    fn release(&mut self, n: usize);
    /// Whether the stream's end has come and no DATA waits.
    fn is_end_stream(&self) -> bool;
}

/// The sending half: DATA within the peer's window, then trailers or the end.
pub trait SendHalf: Send {
    /// Asks for room for `n` bytes (where the codec wants to be asked).
    fn reserve_capacity(&mut self, n: usize);
    /// Room for DATA now.
    fn capacity(&self) -> usize;
    /// Waits for room; `None` once the stream can take no more.
    fn poll_capacity(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<usize>>>;
    /// Sends DATA (at most [`SendHalf::capacity`]); `end` ends the stream.
    fn send_data(&mut self, data: Bytes, end: bool) -> io::Result<()>;
    /// Sends trailers, which end the stream.
    fn send_trailers(&mut self, trailers: HeaderMap) -> io::Result<()>;
    /// Resets the stream.
    fn send_reset(&mut self, code: ErrorCode);
    /// Resolves when the peer resets the stream, with its code.
    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ErrorCode>>;
}

/// The error of a stream reset by its peer, carried inside an [`io::Error`].
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("stream reset: {}", .0.as_str())]
pub struct StreamReset(pub ErrorCode);

/// An I/O error for a stream reset with `code`.
pub fn reset_error(code: ErrorCode) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, StreamReset(code))
}

/// The code of the reset an error stands for, on either side.
pub fn reset_code(e: &io::Error) -> Option<ErrorCode> {
    let inner = e.get_ref()?;
    if let Some(StreamReset(code)) = inner.downcast_ref::<StreamReset>() {
        return Some(*code);
    }
    let origin = inner.downcast_ref::<super::origin::Error>()?;
    origin.is_reset().then(|| origin.reason()).flatten()
}

/// The `h2` crate's streams as halves, for the tests that run the tunnels between two
/// of its in-memory connections.
#[cfg(test)]
mod h2_crate {
    use super::*;
    use h2::{Reason, RecvStream, SendStream};

    fn to_io(e: h2::Error) -> io::Error {
        match e.reason() {
            Some(r) if e.is_reset() => reset_error(ErrorCode::from_u32(r.into())),
            _ => io::Error::other(e),
        }
    }

    impl RecvHalf for RecvStream {
        fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
            RecvStream::poll_data(self, cx).map(|d| d.map(|d| d.map_err(to_io)))
        }

        fn poll_trailers(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<HeaderMap>>> {
            RecvStream::poll_trailers(self, cx).map(|t| t.map_err(to_io))
        }

        fn release(&mut self, n: usize) {
            let _ = self.flow_control().release_capacity(n);
        }

        fn is_end_stream(&self) -> bool {
            RecvStream::is_end_stream(self)
        }
    }

    impl SendHalf for SendStream<Bytes> {
        fn reserve_capacity(&mut self, n: usize) {
            SendStream::reserve_capacity(self, n);
        }

        fn capacity(&self) -> usize {
            SendStream::capacity(self)
        }

        fn poll_capacity(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<usize>>> {
            SendStream::poll_capacity(self, cx).map(|c| c.map(|c| c.map_err(to_io)))
        }

        fn send_data(&mut self, data: Bytes, end: bool) -> io::Result<()> {
            SendStream::send_data(self, data, end).map_err(to_io)
        }

        fn send_trailers(&mut self, trailers: HeaderMap) -> io::Result<()> {
            SendStream::send_trailers(self, trailers).map_err(to_io)
        }

        fn send_reset(&mut self, code: ErrorCode) {
            SendStream::send_reset(self, Reason::from(code.to_u32()));
        }

        fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ErrorCode>> {
            SendStream::poll_reset(self, cx)
                .map(|r| r.map(|r| ErrorCode::from_u32(r.into())).map_err(to_io))
        }
    }
}
