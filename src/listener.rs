//! Accepts client connections and starts a task serving each (see `client`), until
//! told to stop; then it stops accepting, and open connections finish their requests.
//! Meanwhile it wakes the connections that wait for their client past their deadline
//! ([`Silences`]): one timer for all of them.
//! [`bind`] opens the listening socket with its backlog; [`ListenerConfig`] is one
//! `[[listener]]` as configured, and [`default_backlog`] the backlog it gets unless it
//! names one.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::client;
use crate::connections::Connections;
use crate::net;
use crate::proxy::Proxy;
use crate::tls::server::{ListenerTls, TlsServer};
use arc_swap::ArcSwapOption;

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
    /// HTTPS: the certificates to serve (`None`: cleartext HTTP).
    pub tls: Option<ListenerTls>,
    /// On a cleartext listener: answer every request with a 308 to the same URL over
    /// HTTPS, on this port (443 is left out of the URL).
    pub redirect_https: Option<u16>,
    /// `Strict-Transport-Security: max-age=...` on responses to HTTPS clients.
    pub hsts: Option<std::time::Duration>,
    /// On a cleartext listener: accept HTTP/2 with prior knowledge too.
    pub h2c: bool,
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

/// Opens a listening socket on `addr` with room for `backlog` connections waiting to be
/// accepted. Accepted sockets inherit TCP_NODELAY from it (Linux), which saves a system
/// call per client connection; responses go out whole, so Nagle would only hold back the
/// last segment of a streamed body.
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { ipv6_only()? };
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

/// An IPv6 socket that takes IPv6 only, as nginx's `ipv6only=on` default: `[::]:80`
/// and `0.0.0.0:80` can then both be listeners.
fn ipv6_only() -> std::io::Result<TcpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(true)?;
    socket.set_nonblocking(true)?;
    Ok(TcpSocket::from_std_stream(socket.into()))
}

/// The largest listen backlog the kernel grants (`net.core.somaxconn`), where it says.
pub fn somaxconn() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok()?;
    text.trim().parse().ok()
}

/// How far apart the listener's rounds over its silent connections are at least (see
/// [`Silences`]): how late past `client_header` a silent connection may close.
const SILENCE_ROUND: Duration = Duration::from_millis(50);

/// How far apart the rounds are at most while connections are open: parked ones (see
/// `client::h1::Parked`) say their deadlines in the registry, not to the listener, so
/// their `client_idle` ends up to this late.
const PARKED_ROUND: Duration = Duration::from_secs(1);

/// Accepts on `listener` until `stop` turns true. Each connection speaks TLS when
/// `tls` holds a server at its accept (a reload may turn it on or off).
pub async fn accept_loop(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    connections: Connections,
    tls: Arc<ArcSwapOption<TlsServer>>,
    mut stop: watch::Receiver<bool>,
) {
    // One stop future for the whole loop, polled only when no connection is waiting.
    let mut stop = std::pin::pin!(stopped(&mut stop));
    let mut silences = Silences::new();
    loop {
        let accepted = tokio::select! {
            biased;
            // First: an accept flood must not keep silent connections open.
            () = silences.due() => {
                silences.round(&connections);
                continue;
            }
            accepted = listener.accept() => accepted,
            () = stop.as_mut() => return,
        };
        match accepted {
            Ok((stream, addr)) => {
                let open = connections.track();
                let tls = tls.load_full();
                let accepted = Instant::now();
                let deadline = net::later(accepted, proxy.client_header());
                silences.accepted(deadline);
                let proxy = Arc::clone(&proxy);
                let client = client::serve(stream, addr, proxy, open, tls, accepted, deadline);
                tokio::spawn(client);
            }
            // Out of file descriptors or similar: back off briefly instead of spinning.
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// When the listener next wakes the connections whose client is still silent past its
/// deadline (`Connections::wake_silent`): new connections that have not sent a byte,
/// and parked ones. One timer for all of them instead of one per connection.
/// Scheduled from the deadlines of the accepts, after each round from the deadlines
/// still to come, and at least every [`PARKED_ROUND`] while connections are open;
/// rounds are [`SILENCE_ROUND`] apart at least, so that a stream of accepts costs a
/// few scans of the registry a second, not one per accept.
struct Silences {
    timer: Pin<Box<Sleep>>,
    /// When the timer is set for; `None`: no round is due.
    next: Option<Instant>,
    /// The latest deadline of an accepted connection: one accepted just before a round
    /// may not have registered its deadline yet.
    latest: Option<Instant>,
    /// The earliest the next round may run.
    not_before: Instant,
}

impl Silences {
    fn new() -> Silences {
        let now = Instant::now();
        Silences {
            timer: Box::pin(tokio::time::sleep_until(now)),
            next: None,
            latest: None,
            not_before: now,
        }
    }

    /// A connection accepted now may stay silent until `deadline`.
    fn accepted(&mut self, deadline: Instant) {
        self.latest = Some(deadline);
        if self.next.is_none_or(|next| deadline < next) {
            self.schedule(Some(deadline));
        }
    }

    /// Resolves when a round is due; never while none is.
    async fn due(&mut self) {
        if self.next.is_none() {
            return std::future::pending().await;
        }
        self.timer.as_mut().await;
    }

    /// Wakes the connections past their deadline and sets the next round.
    fn round(&mut self, connections: &Connections) {
        let now = Instant::now();
        self.not_before = net::later(now, SILENCE_ROUND);
        let pending = connections.wake_silent(now);
        let latest = self.latest.filter(|latest| *latest > now);
        let parked = (connections.count() > 0).then(|| net::later(now, PARKED_ROUND));
        let next = [pending, latest, parked].into_iter().flatten().min();
        self.schedule(next);
    }

    fn schedule(&mut self, at: Option<Instant>) {
        self.next = at.map(|at| at.max(self.not_before));
        if let Some(next) = self.next {
            self.timer.as_mut().reset(next);
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_ipv6_wildcard_listener_leaves_the_ipv4_wildcard_to_another() {
        let v4 = bind("0.0.0.0:0".parse().unwrap(), 16).expect("IPv4 wildcard");
        let port = v4.local_addr().unwrap().port();
        let v6: SocketAddr = format!("[::]:{port}").parse().unwrap();
        match bind(v6, 16) {
            Ok(_) => {}
            // A machine without IPv6 has nothing to show here.
            Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {}
            Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {}
            Err(e) => panic!("[::]:{port} beside 0.0.0.0:{port}: {e}"),
        }
    }
}
