//! Loopback ports a test holds for as long as it needs them, so that no other test (or
//! other process) running meanwhile can take them.
//!
//! A port found by binding a listener and dropping it is free only until someone else
//! binds it or connects from it. Both types here keep a socket bound to the port and
//! not listening instead. Linux then gives the port to no one else: a bind to port 0
//! and the local port of an outgoing connect skip ports that have a bound socket, and
//! an explicit bind conflicts with it unless both sockets set `SO_REUSEADDR`.

use std::net::SocketAddr;

use socket2::{Domain, Socket, Type};

/// Binds a new socket to `127.0.0.1:0`, with `SO_REUSEADDR` as `reuse` says.
fn bound(reuse: bool) -> (Socket, SocketAddr) {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("create a socket");
    socket.set_reuse_address(reuse).expect("set SO_REUSEADDR");
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("bind 127.0.0.1:0");
    let addr = socket.local_addr().expect("bound address").as_socket().expect("an inet address");
    (socket, addr)
}

/// A loopback address where nothing listens for as long as this lives: a connect to it
/// is refused. Its socket has no `SO_REUSEADDR`, so nothing else can bind the port.
pub struct ClosedPort {
    socket: Socket,
    addr: SocketAddr,
}

impl ClosedPort {
    pub fn new() -> ClosedPort {
        let (socket, addr) = bound(false);
        ClosedPort { socket, addr }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts listening on the port: a server that comes up where there was none.
    pub fn listen(self) -> tokio::net::TcpListener {
        self.socket.listen(1024).expect("listen on the held port");
        self.socket.set_nonblocking(true).expect("non-blocking listener");
        tokio::net::TcpListener::from_std(self.socket.into()).expect("a tokio listener")
    }
}

/// A loopback port kept for a child process to listen on. Its socket sets
/// `SO_REUSEADDR` and never listens, so holdfast (whose listeners set `SO_REUSEADDR`
/// too) can bind the port and listen on it while this is held, and nobody else gets
/// the port in between. Connects reach whoever listens; while no one does, they are
/// refused. Keep it for as long as the child may use the port.
pub struct ReservedPort {
    _socket: Socket,
    addr: SocketAddr,
}

impl ReservedPort {
    pub fn new() -> ReservedPort {
        let (socket, addr) = bound(true);
        ReservedPort { _socket: socket, addr }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}
