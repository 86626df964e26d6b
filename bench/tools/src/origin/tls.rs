//! The origin over TLS (`bench-origin --tls-cert --tls-key`): the same routes, behind a
//! rustls handshake on every accepted connection, and counts of those handshakes.
//!
//! A proxy in front of it shows how often it handshakes with its origin, and how often it
//! resumes a session instead of a full handshake, in counts the origin keeps the same way
//! whatever the proxy: full, resumed, failed, and of those done how many were TLS 1.3.
//! holdfast-origin serves plain TCP only, so this file has its own accept loop; it counts
//! connections in the origin's holdfast-origin counts (accepted, open, failed accepts).

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_origin::ACCEPT_ERROR_BACKOFF;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::{HandshakeKind, ProtocolVersion, ServerConfig};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use super::{respond, ClosedOnDrop, Gate, OriginStats};

/// A handshake not done within this fails (and closes its connection), so a client that
/// connects and sends nothing holds nothing for long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes of an origin in TLS mode, in plain atomics.
#[derive(Debug, Default)]
pub(super) struct TlsCounts {
    full: AtomicU64,
    resumed: AtomicU64,
    failed: AtomicU64,
    tls13: AtomicU64,
}

/// One reading of the handshake counts; `tls` in `/__origin/stats` in TLS mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeSnapshot {
    /// Full handshakes completed (with or without a HelloRetryRequest).
    pub full: u64,
    /// Handshakes that resumed a session (a ticket or a session ID).
    pub resumed: u64,
    /// Handshakes that failed or timed out; their connections count as accepted.
    pub failed: u64,
    /// Completed handshakes (full or resumed) that negotiated TLS 1.3.
    pub tls13: u64,
}

impl TlsCounts {
    pub(super) fn handshakes(&self) -> HandshakeSnapshot {
        HandshakeSnapshot {
            full: self.full.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            tls13: self.tls13.load(Ordering::Relaxed),
        }
    }

    fn count_handshake(&self, kind: Option<HandshakeKind>, version: Option<ProtocolVersion>) {
        let counter = match kind {
            Some(HandshakeKind::Resumed) => &self.resumed,
            // A completed handshake always has a kind; were it missing, count it as full.
            Some(HandshakeKind::Full | HandshakeKind::FullWithHelloRetryRequest) | None => {
                &self.full
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if version == Some(ProtocolVersion::TLSv1_3) {
            self.tls13.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Accepts connections on `listener`, handshakes TLS with `config` and serves the routes
/// until `shutdown` resolves; counts go to `stats` (its `tls` part from then on).
///
/// Connections already open keep being served by their own tasks after this returns, as
/// in the cleartext origin.
pub async fn serve(
    listener: TcpListener,
    stats: Arc<OriginStats>,
    config: Arc<ServerConfig>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    stats.tls.get_or_init(TlsCounts::default);
    let acceptor = TlsAcceptor::from(config);
    let gate = Arc::new(Gate::new());
    tokio::select! {
        () = accept_loop(listener, acceptor, stats, gate) => {}
        () = shutdown => {}
    }
    Ok(())
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    stats: Arc<OriginStats>,
    gate: Arc<Gate>,
) {
    // Each round accepts one connection or backs off after a failed accept.
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                stats.connections.count_accept_error();
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        stats.connections.count_accepted();
        // Small responses must not wait for Nagle; failing only costs latency.
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(
            stream,
            acceptor.clone(),
            Arc::clone(&stats),
            Arc::clone(&gate),
        ));
    }
}

/// Handshakes, counts the handshake, then serves HTTP/1.1 with keep-alive and no idle
/// timeout until the peer closes the connection.
async fn serve_connection(
    stream: TcpStream,
    acceptor: TlsAcceptor,
    stats: Arc<OriginStats>,
    gate: Arc<Gate>,
) {
    let counts = stats.tls.get().expect("serve initialises the TLS counts before accepting");
    let _open = ClosedOnDrop(Arc::clone(&stats.connections));
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(_)) | Err(_) => {
            counts.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let (_, session) = tls.get_ref();
    counts.count_handshake(session.handshake_kind(), session.protocol_version());
    let service = {
        let stats = Arc::clone(&stats);
        service_fn(move |request| respond(request, Arc::clone(&stats), Arc::clone(&gate)))
    };
    let _ = http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
}
