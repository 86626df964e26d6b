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
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::connections::OpenConnection;
use crate::http2;
use crate::net::{self, InBuf, Stream, TlsStream};
use crate::proxy::Proxy;
use crate::tls::server::{Accepted, TlsServer};

/// Serves `tcp` until the client leaves, a limit closes it, or `stop` turns true. On a
/// TLS listener (`tls`), the handshake comes first and must finish, with the first
/// request's head, within `client_header` of the accept.
///
/// Until the client's first bytes arrive, the connection's task holds only its socket
/// and a deadline: the read buffer, and the state for reading and forwarding requests
/// (a few hundred bytes more, and a timer), are taken when there is something to read.
/// A crowd of connections that never send anything costs little.
pub async fn serve(
    tcp: TcpStream,
    addr: SocketAddr,
    proxy: Arc<Proxy>,
    mut open: OpenConnection,
    tls: Option<Arc<TlsServer>>,
) {
    let accepted = Instant::now();
    // Read once: the first wait's deadline and the connection's settings come from the
    // same config. Only the `Arc` is held while the client is silent.
    let site = proxy.site();
    let header_limit = site.timeouts.client_header;
    let stream = match tls {
        None => Stream::from(tcp),
        // Boxed: the handshake's state would otherwise size every connection's task,
        // cleartext ones included, and the task's future is moved as it starts and ends.
        Some(tls) => {
            let handshake = Box::pin(tls.accept(tcp, addr, header_limit));
            match handshake.await {
                Some(Accepted { stream, acme_challenge: false }) => stream,
                // A TLS-ALPN-01 validation ends with the handshake.
                Some(Accepted { stream, acme_challenge: true }) => return stream.shutdown_write(),
                None => return,
            }
        }
    };
    let facts = stream.tls().map(TlsStream::facts);
    if facts.is_some_and(|f| f.alpn == "h2") {
        drop(site);
        let serving = Box::pin(h2::serve(stream, Vec::new(), addr, proxy, &mut open, facts));
        return serving.await;
    }
    let Some(buf) = first_bytes(&stream, net::later(accepted, header_limit), &mut open).await
    else {
        return;
    };
    if site.h2c && facts.is_none() && http2::starts_preface(buf.data()) {
        drop(site);
        let prefix = buf.data().to_vec();
        drop(buf);
        let serving = Box::pin(h2::serve(stream, prefix, addr, proxy, &mut open, None));
        return serving.await;
    }
    let settings = h1::ClientSettings::of(proxy, &site);
    drop(site);
    let serving = Box::pin(h1::serve_requests(stream, addr, settings, open, accepted, buf));
    serving.await;
}

/// Waits for the client's first bytes and reads them; `None` when the connection
/// should close instead: the client closed it or it failed, the first request's head
/// did not start in time (it must be complete within `client_header` of the accept),
/// or the server is stopping.
///
/// A fresh socket can be reported readable before any byte has arrived; the read then
/// finds nothing, gives the buffer back and waits again, so no buffer is held for a
/// connection that is still silent.
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
        let mut buf = InBuf::new(net::CLIENT_BUF);
        match buf.try_fill(stream) {
            Ok(0) => return None,
            Ok(_) => return Some(buf),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => buf.release(),
            Err(_) => return None,
        }
    }
}
