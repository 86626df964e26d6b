//! holdfast: an HTTP reverse proxy that keeps and reuses upstream connections by default.
//!
//! Data flows one way; a module calls only modules to its right:
//!
//! ```text
//! listener -> client -> proxy -> route -> upstream -> balance
//!                                              \-> pool (holdfast-pool) -> origin
//!               \-> http1, net (message syntax and socket I/O, used by both)
//! ```
//!
//! `listener` accepts clients; `client` reads each request head (refusing ambiguous or
//! oversized ones) and keeps the connection between requests; `proxy` routes the
//! request to an upstream group (`route`), picks one of its backends with the group's
//! balancer (`balance`: pure policies over each backend's load, latency and health,
//! which an upstream group owns the way an nginx `upstream {}` block owns its method),
//! rewrites the request for it, leases a connection from that backend's pool in
//! `upstream`, and streams the response back in the same task, returning the
//! connection to its pool when the exchange ends cleanly. `upstream` also follows
//! server names (`discovery`), checks servers (`check`) and takes failing ones out of
//! service (`health`). `http1` parses and writes HTTP/1.1 heads and follows body
//! framing; `net` reads and writes sockets with bounded waits. Each part owns its
//! settings types and their defaults; `config` turns the file into them (it depends on
//! the parts, never the reverse); `instance` wires them together and applies a reloaded
//! config; `demo` shows it working.

pub mod admin;
pub mod balance;
pub mod cli;
pub mod client;
pub mod config;
pub mod demo;
pub mod http1;
pub mod instance;
pub mod listener;
pub mod live;
pub mod metrics;
pub mod net;
pub mod proxy;
pub mod resources;
pub mod route;
pub mod telemetry;
pub mod upstream;

pub use config::Config;
pub use instance::{ConfigSource, Instance, ReloadError, StartError};
