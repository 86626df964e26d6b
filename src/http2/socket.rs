//! The socket under an HTTP/2 connection's driver, for both kinds of connection
//! (clients, [`crate::client::h2`]; origins, [`super::origin`]): reads into the buffer
//! the engine takes frames from, and writes the engine's output, its pieces gathered
//! into vectored writes.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWrite};

use crate::net::Stream;

/// Bytes read from the socket at once (more when a frame needs it).
const READ_SIZE: usize = 16 * 1024;
/// Output pieces gathered into one vectored write.
pub const WRITE_PIECES: usize = 32;

/// One connection's socket, its read buffer and the output not yet written.
pub struct Socket {
    pub io: Stream,
    /// Bytes read and not yet whole frames.
    pub read: BytesMut,
    /// Output taken from the engine and not yet written.
    pending: VecDeque<Bytes>,
}

/// What a read found.
pub enum Read {
    /// Nothing now.
    Nothing,
    /// Bytes, in [`Socket::read`].
    Bytes,
    /// The peer closed the connection (no error), or it failed.
    Closed(Option<io::Error>),
}

impl Socket {
    /// `read` holds bytes already read, if any.
    pub fn new(io: Stream, read: BytesMut) -> Socket {
        Socket { io, read, pending: VecDeque::new() }
    }

    /// Reads what the socket has now.
    pub fn poll_read(&mut self, cx: &mut Context<'_>) -> Read {
        if self.read.capacity().saturating_sub(self.read.len()) < READ_SIZE / 4 {
            self.read.reserve(READ_SIZE);
        }
        let read = {
            let fill = std::pin::pin!(self.io.read_buf(&mut self.read));
            fill.poll(cx)
        };
        match read {
            Poll::Pending => {
                // An idle connection holds no read buffer (a frame split across reads
                // keeps its start in it until the rest comes).
                if self.read.is_empty() {
                    self.read = BytesMut::new();
                }
                Read::Nothing
            }
            Poll::Ready(Ok(0)) => Read::Closed(None),
            Poll::Ready(Ok(_)) => Read::Bytes,
            Poll::Ready(Err(e)) => Read::Closed(Some(e)),
        }
    }

    /// Writes the engine's output as the socket takes it: `take` moves pieces into the
    /// queue it is given, up to [`WRITE_PIECES`]. Whether anything was written; an error
    /// once the socket failed.
    pub fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        mut take: impl FnMut(&mut VecDeque<Bytes>),
    ) -> io::Result<bool> {
        let mut wrote = false;
        // Bounded: each round writes bytes, or stops.
        loop {
            if self.pending.len() < WRITE_PIECES {
                take(&mut self.pending);
            }
            if self.pending.is_empty() {
                if wrote {
                    let _ = Pin::new(&mut self.io).poll_flush(cx);
                }
                return Ok(wrote);
            }
            let slices: Vec<IoSlice<'_>> = self.pending.iter().map(|b| IoSlice::new(b)).collect();
            match Pin::new(&mut self.io).poll_write_vectored(cx, &slices) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Ready(Ok(n)) => {
                    advance(&mut self.pending, n);
                    wrote = true;
                }
                Poll::Pending => return Ok(wrote),
            }
        }
    }

    /// Whether output waits to be written.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Drops what waits to be written: the socket failed.
    pub fn discard(&mut self) {
        self.pending.clear();
    }
}

/// Drops the first `n` bytes of `pending`.
fn advance(pending: &mut VecDeque<Bytes>, mut n: usize) {
    // Bounded by the pieces.
    while n > 0 {
        let Some(front) = pending.front_mut() else { break };
        if front.len() <= n {
            n = n.saturating_sub(front.len());
            pending.pop_front();
        } else {
            let _ = front.split_to(n);
            n = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_drops_whole_pieces_then_a_piece_of_the_next() {
        let mut pending: VecDeque<Bytes> =
            [&b"abc"[..], b"de", b"fgh"].into_iter().map(Bytes::from_static).collect();
        advance(&mut pending, 4);
        assert_eq!(pending, [Bytes::from_static(b"e"), Bytes::from_static(b"fgh")]);
        advance(&mut pending, 4);
        assert!(pending.is_empty());
    }
}
