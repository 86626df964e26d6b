//! The client side: one task per client connection, from the accept to the close.
//!
//! The protocol is decided here and nowhere else: a TLS connection that negotiated `h2`
//! by ALPN, or a cleartext one on an `h2c` listener whose first bytes are the HTTP/2
//! preface, is served by [`h2`]; every other connection by [`h1`]. Both hand each
//! request to `proxy::Proxy` with the wire of their protocol.
//!
//! This module handles bytes from the network: the lints below keep indexing and
//! unchecked arithmetic out of it, so no input can make it panic.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

pub mod h1;
pub mod h2;

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::connections::OpenConnection;
use crate::http2;
use crate::net::{self, InBuf, Stream, TlsStream};
use crate::proxy::Proxy;
use crate::tls::server::{Accepted, TlsServer};

/// Serves `tcp` until the client leaves, a limit closes it, or `stop` turns true. On a
/// TLS listener (`tls`), the handshake comes first and must finish, with the first
/// request's head, by `deadline` (the accept plus `client_header`); on a cleartext one
/// the first request's head must be complete by then.
///
/// Until a cleartext client's first bytes arrive, the connection's task is a
/// [`Silent`]: its socket, its deadline and its registration in 136 bytes, in the
/// smallest task tokio allocates. There is no timer of its own: the listener wakes it
/// at its deadline (see `Connections::wake_silent`). The read buffer, the state for
/// reading and forwarding requests and a timer are taken when there is something to
/// read, and given back when an HTTP/1.1 connection parks between requests (see
/// [`h1::Parked`]). A crowd of connections that never send anything, or that sent a
/// request and stay idle, costs little.
pub fn serve(
    tcp: TcpStream,
    addr: SocketAddr,
    proxy: Arc<Proxy>,
    open: OpenConnection,
    tls: Option<Arc<TlsServer>>,
    accepted: Instant,
    deadline: Instant,
) -> Client {
    let silent = Silent { stream: Stream::from(tcp), addr, proxy, open, accepted, deadline };
    match tls {
        None => Client::Silent(silent),
        // Boxed: the handshake's state would otherwise size every connection's task.
        Some(tls) => Client::Serving(Box::pin(serve_tls(silent, tls))),
    }
}

/// A client connection's task: silent, served, or parked between requests.
pub enum Client {
    Silent(Silent),
    Serving(Serving),
    Parked(Box<h1::Parked>),
    Done,
}

/// The state of a connection being served, in an allocation of its protocol's size; it
/// ends with the connection, or with an HTTP/1.1 connection parking.
type Serving = Pin<Box<dyn Future<Output = Option<Box<h1::Parked>>> + Send>>;

/// A cleartext connection whose client has sent nothing yet.
pub struct Silent {
    stream: Stream,
    addr: SocketAddr,
    proxy: Arc<Proxy>,
    open: OpenConnection,
    accepted: Instant,
    /// When the first request's head must be complete.
    deadline: Instant,
}

impl Future for Client {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // Bounded: each state ends, waits, or moves on (silent to served, served to
        // parked and back); a parked connection woken is served until it waits again.
        loop {
            match &mut *self {
                Client::Serving(serving) => {
                    *self = match ready!(serving.as_mut().poll(cx)) {
                        Some(parked) => Client::Parked(parked),
                        None => Client::Done,
                    };
                }
                Client::Parked(parked) => {
                    let woke = ready!(parked.poll_wake(cx));
                    let Client::Parked(parked) = std::mem::replace(&mut *self, Client::Done) else {
                        return Poll::Ready(());
                    };
                    if woke {
                        *self = Client::Serving(Box::pin(h1::resume(parked)));
                    } else {
                        parked.close();
                    }
                }
                Client::Done => return Poll::Ready(()),
                Client::Silent(silent) => match silent.poll_first_bytes(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(None) => {
                        *self = Client::Done;
                        return Poll::Ready(());
                    }
                    Poll::Ready(Some(buf)) => {
                        let Client::Silent(silent) = std::mem::replace(&mut *self, Client::Done)
                        else {
                            return Poll::Ready(());
                        };
                        *self = Client::Serving(silent.spoke(buf));
                    }
                },
            }
        }
    }
}

impl Silent {
    /// The client's first bytes; `None` when the connection should close instead: the
    /// client closed it or it failed, its deadline passed, or the server is stopping.
    ///
    /// A fresh socket can be reported readable before any byte has arrived; the read then
    /// finds nothing, gives the buffer back and waits again, so no buffer is held for a
    /// connection that is still silent.
    fn poll_first_bytes(&mut self, cx: &mut Context<'_>) -> Poll<Option<InBuf>> {
        // Bounded: each round reads, or waits for readiness.
        loop {
            match self.stream.tcp().poll_read_ready(cx) {
                Poll::Ready(Ok(())) => {
                    if let Poll::Ready(read) = read_first(&self.stream) {
                        return Poll::Ready(read);
                    }
                }
                Poll::Ready(Err(_)) => return Poll::Ready(None),
                Poll::Pending => break,
            }
        }
        if self.open.poll_silent(cx, self.deadline) || Instant::now() >= self.deadline {
            return Poll::Ready(None);
        }
        Poll::Pending
    }

    /// Serves the connection from its first bytes on: HTTP/2 when they are the preface
    /// on an `h2c` listener, else HTTP/1.1. Each protocol's state in an allocation of
    /// its own size.
    fn spoke(self, buf: InBuf) -> Serving {
        let Silent { stream, addr, proxy, mut open, accepted, .. } = self;
        let site = proxy.site();
        if site.h2c && http2::starts_preface(buf.data()) {
            drop(site);
            let prefix = buf.data().to_vec();
            drop(buf);
            return Box::pin(async move {
                h2::serve(stream, prefix, addr, proxy, &mut open, None).await;
                None
            });
        }
        let settings = h1::ClientSettings::of(proxy, &site);
        drop(site);
        Box::pin(h1::serve_requests(stream, addr, settings, open, accepted, buf))
    }
}

/// A TLS connection: the handshake, then the protocol ALPN picked.
async fn serve_tls(silent: Silent, tls: Arc<TlsServer>) -> Option<Box<h1::Parked>> {
    let Silent { stream, addr, proxy, mut open, accepted, deadline } = silent;
    let Stream::Tcp(tcp) = stream else { return None };
    let header_limit = deadline.saturating_duration_since(accepted);
    // Boxed, as the protocols after it: this state is what the connection holds while
    // it is served.
    let stream = match Box::pin(tls.accept(tcp, addr, header_limit)).await {
        Some(Accepted { stream, acme_challenge: false }) => stream,
        // A TLS-ALPN-01 validation ends with the handshake.
        Some(Accepted { stream, acme_challenge: true }) => {
            stream.shutdown_write();
            return None;
        }
        None => return None,
    };
    let facts = stream.tls().map(TlsStream::facts);
    if facts.is_some_and(|f| f.alpn == "h2") {
        let serving = Box::pin(h2::serve(stream, Vec::new(), addr, proxy, &mut open, facts));
        serving.await;
        return None;
    }
    let buf = first_bytes(&stream, deadline, &mut open).await?;
    let site = proxy.site();
    let settings = h1::ClientSettings::of(proxy, &site);
    drop(site);
    Box::pin(h1::serve_requests(stream, addr, settings, open, accepted, buf)).await
}

/// Waits for a TLS client's first bytes after the handshake and reads them; `None`
/// when the connection should close instead: the client closed it or it failed, the
/// first request's head did not start by `deadline`, or the server is stopping.
async fn first_bytes(
    stream: &Stream,
    deadline: Instant,
    open: &mut OpenConnection,
) -> Option<InBuf> {
    let mut sleep = pin!(tokio::time::sleep_until(deadline));
    // Bounded by the deadline: every round waits for readiness or ends.
    loop {
        let mut readable = pin!(stream.readable());
        let ready = poll_fn(|cx| {
            if let Poll::Ready(ready) = readable.as_mut().poll(cx) {
                return Poll::Ready(ready.is_ok());
            }
            if sleep.as_mut().poll(cx).is_ready() || open.poll_stop(cx) {
                return Poll::Ready(false);
            }
            Poll::Pending
        })
        .await;
        if !ready {
            return None;
        }
        if let Poll::Ready(read) = read_first(stream) {
            return read;
        }
    }
}

/// One read of a client's first bytes, the socket reported readable: `Pending` when it
/// found nothing after all (a fresh socket can be reported readable before any byte
/// has arrived; the buffer goes back), `None` when the client closed the connection or
/// it failed.
fn read_first(stream: &Stream) -> Poll<Option<InBuf>> {
    let mut buf = InBuf::new(net::CLIENT_BUF);
    match buf.try_fill(stream) {
        Ok(0) => Poll::Ready(None),
        Ok(_) => Poll::Ready(Some(buf)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            buf.release();
            Poll::Pending
        }
        Err(_) => Poll::Ready(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task tokio allocates is the future plus 104 bytes (header, scheduler, id, trailer)
    /// rounded up to 128: 256 bytes for a future of 152 or less. A silent connection is
    /// that task, its socket's registration (256 bytes) and its entry in the registry.
    #[test]
    fn a_silent_connections_task_is_the_smallest_tokio_allocates() {
        let size = std::mem::size_of::<Client>();
        assert!(size <= 152, "a silent client's task holds {size} bytes");
    }
}
