//! Accepts client connections and serves them with hyper's HTTP/1 server, until told
//! to stop; then it stops accepting and lets open connections finish their requests.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::config::{ClientLimits, Timeouts};
use crate::framing::FramingGuard;
use crate::proxy::{ClientContext, Proxy};

/// hyper's HTTP/1 server settings for client connections.
pub fn client_http(limits: ClientLimits, timeouts: Timeouts) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(timeouts.client_header)
        .max_headers(limits.max_headers)
        .max_header_size(limits.max_header_bytes);
    // Not `pipeline_flush`: with it, hyper holds back a write while unread bytes are
    // buffered, which swallows the 400/431 for a refused head (its bytes stay unread).
    b
}

/// Counts client connections: open now (so shutdown can wait for them) and accepted
/// since start. Clones share the counts.
#[derive(Clone, Default)]
pub struct Connections(Arc<Counts>);

#[derive(Default)]
struct Counts {
    open: AtomicUsize,
    accepted: AtomicU64,
}

impl Connections {
    /// Client connections being served now.
    pub fn count(&self) -> usize {
        self.0.open.load(Ordering::Acquire)
    }

    /// Client connections accepted since start.
    pub fn accepted(&self) -> u64 {
        self.0.accepted.load(Ordering::Relaxed)
    }

    /// Counts a newly accepted connection; it is open until the guard drops.
    fn track(&self) -> OpenConnection {
        self.0.accepted.fetch_add(1, Ordering::Relaxed);
        self.0.open.fetch_add(1, Ordering::AcqRel);
        OpenConnection(Arc::clone(&self.0))
    }
}

/// One open client connection, counted in [`Connections`] while it lives.
struct OpenConnection(Arc<Counts>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts on `listener` until `stop` turns true.
pub async fn accept_loop(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    http: Arc<http1::Builder>,
    limits: ClientLimits,
    connections: Connections,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut stop) => return,
        };
        match accepted {
            Ok((stream, addr)) => {
                let task = serve_client(
                    stream,
                    addr,
                    Arc::clone(&proxy),
                    Arc::clone(&http),
                    limits,
                    stop.clone(),
                );
                let guard = connections.track();
                tokio::spawn(async move {
                    task.await;
                    drop(guard);
                });
            }
            // Out of file descriptors or similar: back off briefly instead of spinning.
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_client(
    stream: TcpStream,
    addr: SocketAddr,
    proxy: Arc<Proxy>,
    http: Arc<http1::Builder>,
    limits: ClientLimits,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (guarded, framing) = FramingGuard::new(stream, limits.max_header_bytes);
    let context = Arc::new(ClientContext::new(addr, framing));
    let service = service_fn(move |req| {
        let proxy = Arc::clone(&proxy);
        let context = Arc::clone(&context);
        async move { Ok::<_, Infallible>(proxy.handle(req, &context).await) }
    });
    let conn = http.serve_connection(TokioIo::new(guarded), service).with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        _ = stopped(&mut stop) => {
            // Finish the request in flight (if any), then close.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(client = %addr, error = %e, "client connection ended with an error");
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
