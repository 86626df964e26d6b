//! holdfast: an HTTP reverse proxy that keeps and reuses upstream connections by default.
//!
//! Data flows one way; a module calls only modules to its right:
//!
//! ```text
//! listener -> framing -> proxy -> upstream -> pool (holdfast-pool) -> origin
//! ```
//!
//! `listener` accepts clients and runs hyper's HTTP/1 server over a `framing` guard that
//! refuses ambiguous requests; `proxy` rewrites each request, leases a connection from
//! the chosen backend in `upstream`, and streams the response back, returning the
//! connection to its pool when the exchange ends cleanly. `config` builds the settings
//! each part takes; `server` wires them together; `demo` shows it working.

pub mod admin;
pub mod cli;
pub mod config;
pub mod demo;
pub mod framing;
pub mod listener;
pub mod live;
pub mod metrics;
pub mod proxy;
pub mod server;
pub mod telemetry;
pub mod upstream;

pub use config::Config;
pub use server::{Server, StartError};
