//! The byte stream of a connection, client or origin, whatever carries it: plain TCP
//! today. It is the one place a new transport plugs in: a TLS session becomes a second
//! variant, and everything above (read buffers, bounded writes, the exchange, the
//! pool) keeps working on `Stream` unchanged.
//!
//! The methods are the ones the proxy path uses: readiness and non-blocking reads and
//! writes, so the common case costs one system call and no waker ([`super`]'s module
//! doc), plus `AsyncRead`/`AsyncWrite` for the upgrade tunnel. A TLS variant serves them
//! from its session's buffers, and answers readiness from the socket below it when its
//! buffers are empty.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A connection's byte stream.
#[derive(Debug)]
pub enum Stream {
    /// Cleartext TCP.
    Tcp(TcpStream),
}

impl Stream {
    /// The TCP socket underneath: socket options, shutdown, the liveness peek of a
    /// pooled connection.
    #[inline]
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
        }
    }

    /// Waits until a read may find bytes (or the end of the stream).
    #[inline]
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.readable().await,
        }
    }

    /// Reads what is there now; `WouldBlock` when nothing is.
    #[inline]
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read(buf),
        }
    }

    /// Polls for read readiness (registers the waker when not ready).
    #[inline]
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
        }
    }

    /// Waits until a write may take bytes.
    #[inline]
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.writable().await,
        }
    }

    /// Writes what the stream takes now; `WouldBlock` when it takes nothing.
    #[inline]
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
        }
    }

    /// [`Stream::try_write`] from several slices at once.
    #[inline]
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write_vectored(bufs),
        }
    }
}

impl From<TcpStream> for Stream {
    #[inline]
    fn from(stream: TcpStream) -> Self {
        Stream::Tcp(stream)
    }
}

impl AsyncRead for Stream {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
