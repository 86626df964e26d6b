//! holdfast: an HTTP reverse proxy that keeps and reuses upstream connections by default.
//!
//! Data flows one way; a module calls only modules to its right:
//!
//! ```text
//! listener -> client -> proxy -> upstream -> pool (holdfast-pool) -> origin
//!               \-> http1, net (message syntax and socket I/O, used by both)
//! ```
//!
//! `listener` accepts clients; `client` reads each request head (refusing ambiguous or
//! oversized ones) and keeps the connection between requests; `proxy` rewrites the
//! request for the backend it picks, leases a connection from that backend's pool in
//! `upstream`, and streams the response back in the same task, returning the
//! connection to its pool when the exchange ends cleanly. `http1` parses and writes
//! HTTP/1.1 heads and follows body framing; `net` reads and writes sockets with bounded
//! waits. `config` builds the settings each part takes; `server` wires them together;
//! `demo` shows it working.

pub mod admin;
pub mod cli;
pub mod client;
pub mod config;
pub mod demo;
pub mod http1;
pub mod listener;
pub mod live;
pub mod metrics;
pub mod net;
pub mod proxy;
pub mod server;
pub mod telemetry;
pub mod upstream;

pub use config::Config;
pub use server::{Server, StartError};
