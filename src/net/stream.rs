//! The byte stream of a connection, client or origin, whatever carries it: plain TCP,
//! or a TLS session over TCP ([`super::tls`]). Everything above (read buffers, bounded
//! writes, the exchange, the pool) works on `Stream` and never asks which.
//!
//! The methods are the ones the proxy path uses: readiness and non-blocking reads and
//! writes, so the common case costs one system call and no waker ([`super`]'s module
//! doc), plus `AsyncRead`/`AsyncWrite` for the upgrade tunnel. The TLS variant serves them
//! from its session's buffers, and answers readiness from the socket below it when its
//! buffers are empty.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use std::net::Shutdown;

use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::tls::TlsStream;

/// A connection's byte stream.
#[derive(Debug)]
pub enum Stream {
    /// Cleartext TCP.
    Tcp(TcpStream),
    /// A TLS session over TCP, handshake done.
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The TCP socket underneath: socket options, shutdown, the liveness peek of a
    /// pooled connection.
    #[inline]
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => s.tcp(),
        }
    }

    /// The TLS session, if the stream has one.
    #[inline]
    pub fn tls(&self) -> Option<&TlsStream> {
        match self {
            Stream::Tcp(_) => None,
            Stream::Tls(s) => Some(s),
        }
    }

    /// Before a close: on TLS, sends `close_notify` if the socket takes it now, so the
    /// peer can tell the close from a truncation. Nothing on TCP.
    pub fn close_notify(&self) {
        if let Stream::Tls(s) = self {
            let _ = s.close_notify();
        }
    }

    /// Ends the sending direction: `close_notify` first on TLS (best effort), then
    /// TCP's FIN.
    pub fn shutdown_write(&self) {
        self.close_notify();
        let _ = SockRef::from(self.tcp()).shutdown(Shutdown::Write);
    }

    /// Waits until a read may find bytes (or the end of the stream).
    #[inline]
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.readable().await,
            Stream::Tls(s) if s.has_buffered() => Ok(()),
            Stream::Tls(s) => s.tcp().readable().await,
        }
    }

    /// Reads what is there now; `WouldBlock` when nothing is.
    #[inline]
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read(buf),
            Stream::Tls(s) => s.try_read(buf),
        }
    }

    /// Polls for read readiness (registers the waker when not ready).
    #[inline]
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Tls(s) => s.poll_read_ready(cx),
        }
    }

    /// Waits until a write may take bytes.
    #[inline]
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.writable().await,
            Stream::Tls(s) => s.tcp().writable().await,
        }
    }

    /// Writes what the stream takes now; `WouldBlock` when it takes nothing.
    #[inline]
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            Stream::Tls(s) => s.try_write(buf),
        }
    }

    /// [`Stream::try_write`], asking the socket even when tokio last saw it full: epoll
    /// reports a TCP socket writable only once a third of its send buffer is free,
    /// while a write succeeds as soon as any room is. Over TLS, a plain `try_write`.
    pub fn try_write_unready(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => socket2::SockRef::from(s).send(buf),
            Stream::Tls(s) => s.try_write(buf),
        }
    }

    /// [`Stream::try_write`] from several slices at once.
    #[inline]
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write_vectored(bufs),
            Stream::Tls(s) => s.try_write_vectored(bufs),
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
            Stream::Tls(s) => poll_io(
                cx,
                |cx| s.tcp().poll_read_ready(cx),
                || {
                    let n = s.try_read(buf.initialize_unfilled())?;
                    buf.advance(n);
                    Ok(())
                },
            ),
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
            Stream::Tls(s) => poll_io(cx, |cx| s.tcp().poll_write_ready(cx), || s.try_write(buf)),
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
            Stream::Tls(s) => {
                poll_io(cx, |cx| s.tcp().poll_write_ready(cx), || s.try_write_vectored(bufs))
            }
        }
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Tls(_) => true,
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => poll_io(cx, |cx| s.tcp().poll_write_ready(cx), || s.try_flush()),
        }
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => {
                let sent = poll_io(cx, |cx| s.tcp().poll_write_ready(cx), || s.close_notify());
                if let Poll::Ready(Ok(())) = sent {
                    let _ = SockRef::from(s.tcp()).shutdown(Shutdown::Write);
                }
                sent
            }
        }
    }
}

/// Runs `op` until it does not say `WouldBlock`, waiting on `ready` between tries: a
/// `WouldBlock` comes from the socket, which tokio then marks not ready, so `ready`
/// registers the waker for the next event.
fn poll_io<T>(
    cx: &mut Context<'_>,
    mut ready: impl FnMut(&mut Context<'_>) -> Poll<io::Result<()>>,
    mut op: impl FnMut() -> io::Result<T>,
) -> Poll<io::Result<T>> {
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            done => return Poll::Ready(done),
        }
        match ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
    }
}
