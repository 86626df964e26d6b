//! Counts an origin's TCP connections in plain atomics: accepted, closed, failed accepts.
//! [`Counted`] is the socket that counts itself closed when dropped.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// An origin's connection counts since it started. Share one between origins, or read it
/// while they run.
#[derive(Debug, Default)]
pub struct Connections {
    accepted: AtomicU64,
    closed: AtomicU64,
    accept_errors: AtomicU64,
}

impl Connections {
    /// TCP connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Accepted connections closed since: their socket was dropped, whether hyper's
    /// connection or an upgraded stream held it last.
    pub fn closed(&self) -> u64 {
        self.closed.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open(&self) -> u64 {
        // `closed` first: a connection counted closed was counted accepted before, so
        // the difference never goes below zero.
        let closed = self.closed();
        self.accepted().saturating_sub(closed)
    }

    /// `accept` calls that failed (EMFILE when the open-file limit is reached).
    pub fn accept_errors(&self) -> u64 {
        self.accept_errors.load(Ordering::SeqCst)
    }

    /// Counts one accepted connection; returns its number in accept order, from 1. Public
    /// for origins that accept their own connections (the benchmark's TLS and h2c ones).
    pub fn count_accepted(&self) -> u64 {
        self.accepted.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Counts one accepted connection closed (a counted socket does it when dropped).
    pub fn count_closed(&self) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts one failed `accept` call.
    pub fn count_accept_error(&self) {
        self.accept_errors.fetch_add(1, Ordering::SeqCst);
    }
}

/// An accepted socket that counts itself closed when dropped, wherever it ends up.
pub(crate) struct Counted {
    io: TcpStream,
    connections: Arc<Connections>,
}

impl Counted {
    pub(crate) fn new(io: TcpStream, connections: Arc<Connections>) -> Counted {
        Counted { io, connections }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.connections.count_closed();
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

/// Every method passes through, the vectored ones included: hyper writes a response's
/// head and body with one `writev` only when the stream says it can.
impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
