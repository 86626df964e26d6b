//! Binds a listener, accepts connections and serves each with hyper's HTTP/1.1 server
//! until its peer closes it; stops accepting on [`Origin::stop`] or drop, and drops every
//! open connection on [`Origin::kill`].

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::connections::{Connections, Counted};

/// Pause after a failed accept (EMFILE and friends), so the loop never spins.
pub const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(10);
/// Requested accept queue length; Linux clamps it to `net.core.somaxconn` (4096 by
/// default).
const LISTEN_BACKLOG: u32 = 65_535;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// What [`Options::on_error`] holds.
pub type ErrorHook = Arc<dyn Fn(&hyper::Error) + Send + Sync>;

/// Binds `addr` with a deep accept queue, so a burst of thousands of connects is not
/// dropped at the listen queue. Must be called inside a tokio runtime.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Binds `127.0.0.1:0`: a free port on loopback, never a fixed one.
pub fn bind_loopback() -> io::Result<TcpListener> {
    bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
}

/// One accepted connection, as the function that makes its service sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// Its place in accept order, from 1.
    pub number: u64,
    /// The peer's address.
    pub peer: SocketAddr,
}

/// How connections are served, beyond the routes. The default: keep-alive with no idle
/// timeout (a connection lives until its peer closes it), not killable.
#[derive(Clone, Default)]
pub struct Options {
    /// Close a keep-alive connection idle this long (hyper's header read timeout),
    /// without telling the peer first: the origin-side keep-alive timeout.
    pub idle_close: Option<Duration>,
    /// Answer the requests already received when the peer shuts down its sending side,
    /// instead of taking that for the peer going away (hyper's `half_close`).
    pub half_close: bool,
    /// Let [`Origin::kill`] drop open connections. Each connection then also waits on
    /// the kill signal, which takes a lock each time the connection wakes, so an origin
    /// that is measured leaves this off.
    pub killable: bool,
    /// Called with hyper's error when a connection ends with one (not when it is killed).
    pub on_error: Option<ErrorHook>,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("idle_close", &self.idle_close)
            .field("half_close", &self.half_close)
            .field("killable", &self.killable)
            .field("on_error", &self.on_error.as_ref().map(|_| "Fn(&hyper::Error)"))
            .finish()
    }
}

/// A running origin; stops accepting when dropped. Open connections outlive it until
/// their peers close them, unless it was killed.
pub struct Origin {
    addr: SocketAddr,
    connections: Arc<Connections>,
    accept: AbortHandle,
    killed: watch::Sender<bool>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Origin {
    /// Accepts connections on `listener` on a task of its own, counting them in
    /// `connections`, and serves each with the service `make_service` returns for it.
    /// Must be called inside a tokio runtime.
    pub fn serve<M, S, B>(
        listener: TcpListener,
        connections: Arc<Connections>,
        options: Options,
        make_service: M,
    ) -> io::Result<Origin>
    where
        M: Fn(Accepted) -> S + Send + 'static,
        S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let addr = listener.local_addr()?;
        let (killed, kill) = watch::channel(false);
        let accept = accept_loop(listener, Arc::clone(&connections), options, make_service, kill);
        let accept = tokio::spawn(accept).abort_handle();
        Ok(Origin { addr, connections, accept, killed })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its connection counts.
    pub fn connections(&self) -> &Connections {
        &self.connections
    }

    /// Stops accepting; the listener closes. Open connections go on until their peers
    /// close them.
    pub fn stop(&self) {
        self.accept.abort();
    }

    /// Stops it the way a crashed process stops: no more accepts, and every open
    /// connection dropped at once (the peer sees a reset or end of stream), if the
    /// origin was started [`Options::killable`]. The port can be bound again.
    pub fn kill(&self) {
        self.stop();
        self.killed.send_replace(true);
    }
}

async fn accept_loop<M, S, B>(
    listener: TcpListener,
    connections: Arc<Connections>,
    options: Options,
    make_service: M,
    kill: watch::Receiver<bool>,
) where
    M: Fn(Accepted) -> S,
    S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut http = http1::Builder::new();
    // Without a timer hyper has no header read timeout, hence no idle timeout.
    if let Some(idle) = options.idle_close {
        http.timer(TokioTimer::new()).header_read_timeout(idle);
    }
    http.half_close(options.half_close);
    // Each round accepts one connection or backs off after a failed accept.
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                connections.count_accept_error();
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        let number = connections.count_accepted();
        // Small responses must not wait for Nagle; failing only costs latency.
        let _ = stream.set_nodelay(true);
        let service = make_service(Accepted { number, peer });
        let stream = Counted::new(stream, Arc::clone(&connections));
        let served = http.serve_connection(TokioIo::new(stream), service).with_upgrades();
        let kill = options.killable.then(|| kill.clone());
        tokio::spawn(finish(served, kill, options.on_error.clone()));
    }
}

/// Waits for a connection to end, or for a kill (which drops it); reports hyper's error.
async fn finish(
    served: impl Future<Output = Result<(), hyper::Error>>,
    kill: Option<watch::Receiver<bool>>,
    on_error: Option<ErrorHook>,
) {
    let result = match kill {
        None => served.await,
        Some(mut kill) => tokio::select! {
            result = served => result,
            // An origin dropped without a kill leaves its connections be (`Err`: the
            // sender is gone, the branch is disabled).
            Ok(_) = kill.wait_for(|killed| *killed) => return,
        },
    };
    if let (Err(e), Some(on_error)) = (result, on_error) {
        on_error(&e);
    }
}

#[cfg(test)]
mod tests;
