//! Accepts client connections and starts a task serving each (see `client`), until
//! told to stop; then it stops accepting, and open connections finish their requests.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::client::{self, ClientSettings};

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
    settings: ClientSettings,
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
                let guard = connections.track();
                let serve = client::serve(stream, addr, settings.clone(), stop.clone());
                tokio::spawn(async move {
                    serve.await;
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

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
