//! Accepts client connections and starts a task serving each (see `client`), until
//! told to stop; then it stops accepting, and open connections finish their requests.
//! [`bind`] opens the listening socket with its backlog; [`ListenerConfig`] is one
//! `[[listener]]` as configured, and [`default_backlog`] the backlog it gets unless it
//! names one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;

use crate::client;
use crate::net::Stream;
use crate::proxy::Proxy;

/// One address to accept clients on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub addr: SocketAddr,
    /// The upstream group for requests no route matches (`None`: they get 404).
    pub upstream: Option<String>,
    /// Request body bytes allowed on this listener (over `[limits]`'s).
    pub client_max_body: Option<u64>,
    /// Connections the kernel holds for holdfast to accept (`listen()`'s backlog).
    pub backlog: u32,
}

/// The default [`ListenerConfig::backlog`]: connections the kernel completes and holds
/// for holdfast to accept. 511 is nginx's default on Linux, enough to ride out a burst of
/// new clients while every worker is busy; Rust's standard library (and so tokio) uses
/// 128, which a burst of a few hundred connections overflows, and the kernel then drops
/// connection attempts, which clients retry only after a second. Linux silently caps the
/// backlog at `net.core.somaxconn` (4096 on current kernels, 128 before 5.4), so the
/// default is the smaller of the two: what the kernel really uses, and what `ss -ltn`
/// shows.
pub fn default_backlog() -> u32 {
    somaxconn().map_or(DEFAULT_BACKLOG, |max| max.min(DEFAULT_BACKLOG))
}

/// See [`default_backlog`].
pub const DEFAULT_BACKLOG: u32 = 511;

/// The largest listen backlog: `listen()` takes a C `int`.
pub const MAX_BACKLOG: u32 = i32::MAX as u32;

/// Counts client connections (open now, so shutdown can wait for them, and accepted
/// since start) and tells them when the server stops. Clones share the counts; a
/// [`Connections::child`] (one listener's) counts in its parent too, but is stopped on
/// its own.
#[derive(Clone, Default)]
pub struct Connections(Arc<Counts>);

#[derive(Default)]
struct Counts {
    open: AtomicUsize,
    accepted: AtomicU64,
    stopping: AtomicBool,
    /// The task of each connection that asked to hear about the stop, by its id.
    waiting: Mutex<HashMap<u64, Waker>>,
    /// Where a child's connections are counted as well.
    parent: Option<Arc<Counts>>,
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

    /// Tells every open connection the server is stopping (see [`OpenConnection::poll_stop`]).
    pub fn stop(&self) {
        self.0.stopping.store(true, Ordering::Release);
        let waiting = std::mem::take(&mut *self.0.lock());
        for waker in waiting.into_values() {
            waker.wake();
        }
    }

    /// Connections of one listener: counted here too, stopped by their own
    /// [`Connections::stop`] (a listener removed by a reload).
    pub fn child(&self) -> Connections {
        Connections(Arc::new(Counts { parent: Some(Arc::clone(&self.0)), ..Counts::default() }))
    }

    /// Counts a newly accepted connection; it is open until the guard drops.
    fn track(&self) -> OpenConnection {
        let id = self.0.accepted.fetch_add(1, Ordering::Relaxed);
        self.0.open.fetch_add(1, Ordering::AcqRel);
        if let Some(parent) = &self.0.parent {
            parent.accepted.fetch_add(1, Ordering::Relaxed);
            parent.open.fetch_add(1, Ordering::AcqRel);
        }
        OpenConnection { counts: Arc::clone(&self.0), id, registered: false }
    }
}

impl Counts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waker>> {
        // Every operation under the lock is one insert, remove or take.
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One open client connection, counted in [`Connections`] while it lives.
pub struct OpenConnection {
    counts: Arc<Counts>,
    id: u64,
    registered: bool,
}

impl OpenConnection {
    /// Whether the server is stopping. The first call registers the task in `cx`,
    /// which [`Connections::stop`] then wakes, so a connection pays for the stop signal
    /// once, not on every wake-up: after that, this is one atomic load.
    ///
    /// # Races
    /// `stop` sets the flag before it takes the waiting tasks; registration inserts
    /// under the same lock and then reads the flag again, so a connection registering
    /// during a stop either is woken or sees the flag.
    pub fn poll_stop(&mut self, cx: &Context<'_>) -> bool {
        if self.counts.stopping.load(Ordering::Acquire) {
            return true;
        }
        if !self.registered {
            self.counts.lock().insert(self.id, cx.waker().clone());
            self.registered = true;
            return self.counts.stopping.load(Ordering::Acquire);
        }
        false
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if self.registered {
            self.counts.lock().remove(&self.id);
        }
        self.counts.open.fetch_sub(1, Ordering::AcqRel);
        if let Some(parent) = &self.counts.parent {
            parent.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Opens a listening socket on `addr` with room for `backlog` connections waiting to be
/// accepted. Accepted sockets inherit TCP_NODELAY from it (Linux), which saves a system
/// call per client connection; responses go out whole, so Nagle would only hold back the
/// last segment of a streamed body.
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    // As std and tokio do: a restarted holdfast can bind while connections of the
    // previous one are in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let _ = socket.set_nodelay(true);
    if let Some(max) = somaxconn().filter(|max| backlog > *max) {
        tracing::warn!(
            listen = %addr,
            backlog,
            somaxconn = max,
            "backlog is above net.core.somaxconn; the kernel uses somaxconn"
        );
    }
    socket.listen(backlog)
}

/// The largest listen backlog the kernel grants (`net.core.somaxconn`), where it says.
pub fn somaxconn() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok()?;
    text.trim().parse().ok()
}

/// Accepts on `listener` until `stop` turns true.
pub async fn accept_loop(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    connections: Connections,
    mut stop: watch::Receiver<bool>,
) {
    // One stop future for the whole loop, polled only when no connection is waiting.
    let mut stop = std::pin::pin!(stopped(&mut stop));
    loop {
        let accepted = tokio::select! {
            biased;
            accepted = listener.accept() => accepted,
            () = stop.as_mut() => return,
        };
        match accepted {
            Ok((stream, addr)) => {
                let open = connections.track();
                tokio::spawn(client::serve(Stream::from(stream), addr, Arc::clone(&proxy), open));
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use super::*;

    /// Counts how often it is woken.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn stop_wakes_each_registered_connection_once_and_every_later_check_sees_it() {
        let connections = Connections::default();
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let cx = Context::from_waker(&waker);
        let mut open = connections.track();
        assert!(!open.poll_stop(&cx));
        assert!(!open.poll_stop(&cx), "registered once, checked cheaply after");
        assert_eq!(connections.count(), 1);
        connections.stop();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert!(open.poll_stop(&cx));
        // A connection that arrives during the stop sees it at its first check.
        let mut late = connections.track();
        assert!(late.poll_stop(&cx));
        drop((open, late));
        assert_eq!(connections.count(), 0);
        assert_eq!(connections.accepted(), 2);
    }

    #[test]
    fn a_child_counts_in_its_parent_and_stops_alone() {
        let all = Connections::default();
        let (one, other) = (all.child(), all.child());
        let waker = Waker::from(Arc::new(Wakes::default()));
        let cx = Context::from_waker(&waker);
        let (mut a, mut b) = (one.track(), other.track());
        assert_eq!((all.count(), all.accepted(), one.count()), (2, 2, 1));
        one.stop();
        assert!(a.poll_stop(&cx), "its own listener stopped");
        assert!(!b.poll_stop(&cx), "another listener's connection carries on");
        drop(a);
        assert_eq!((all.count(), one.count(), other.count()), (1, 0, 1));
        drop(b);
        assert_eq!(all.count(), 0);
    }
}
