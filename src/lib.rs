//! holdfast: an HTTP reverse proxy that keeps and reuses upstream connections by default.
//!
//! # Vocabulary
//!
//! One name, one meaning, in types, metric names and labels, logs and docs:
//!
//! - *client*: the peer that sends holdfast requests (a browser, a load balancer).
//! - *listener*: an address holdfast accepts clients on.
//! - *upstream*: a named group of servers (`[upstream.NAME]`), as in nginx; it owns a
//!   balancer and health settings.
//! - *server*: an entry of an upstream's `servers` list, an address or a name
//!   (`upstream::Server`).
//! - *backend*: one resolved address of a server, with its pool of connections, its
//!   load and its health (`upstream::Backend`).
//! - *origin*: the application on the other end of a backend's connections.
//! - *exchange*: one request and its response, from the client's head to the end of the
//!   response; *record*: what holdfast notes about one exchange (metrics, access log).
//! - *instance*: one running holdfast ([`Instance`]).
//!
//! # Data flow
//!
//! Data flows one way; a module calls only modules to its right:
//!
//! ```text
//! listener -> client -> proxy -> route
//!                          \-> upstream (balance, pool, connect) -> origin
//!                          \-> metrics, telemetry (observe only, never decide)
//! http1 (syntax) and net (streams, buffers, bounded waits) serve client and proxy
//! tls (handshakes, certificates) serves client and upstream; acme keeps certificates
//! ```
//!
//! `listener` accepts clients as `net::Stream`s; `client` reads each request head
//! (refusing ambiguous or oversized ones) and keeps the connection between requests;
//! `proxy` routes the request to an upstream (`route`), picks one of its backends with
//! the upstream's balancer (`balance`: pure policies over each backend's load, latency
//! and health), rewrites the request for it, leases a connection from that backend's
//! pool in `upstream`, and streams the response back in the same task, returning the
//! connection to its pool when the exchange ends cleanly. Within `proxy`, `exchange`
//! decides (retry, failover, early answers, upgrades, accounting) and a `Wire` moves
//! the bytes (`h1`: HTTP/1.1 on both sides). `upstream` also follows server names
//! (`discovery`), checks backends (`check`) and takes failing ones out of service
//! (`health`). `http1` parses and writes HTTP/1.1 heads and follows body framing; `net`
//! reads and writes streams, cleartext or TLS, with bounded waits; `tls` runs the
//! handshakes on both sides and picks a listener's certificate, from its files or from
//! `acme`, which obtains and renews certificates from an ACME CA. Each part owns its settings types and
//! their defaults; `config` turns the file into them (it depends on the parts, never the
//! reverse); `instance` wires them together and applies a reloaded config; `admin`
//! serves the operator, and `cmd` holds what the operator runs (the command line,
//! `demo`, `stats`, `health` and the admin client); nothing outside `cmd` imports it.
//! `ARCHITECTURE.md` says how TLS works and where HTTP/2 plugs in.

// Only the binary's entry (`cmd::cli`) and what the integration tests build and read are
// public; every module is otherwise the crate's own, so rustc reports dead code.
mod acme;
mod admin;
mod balance;
mod client;
pub mod cmd;
mod config;
mod connections;
mod docker;
mod http1;
mod http2;
mod instance;
mod listener;
mod message;
mod metrics;
mod net;
mod proxy;
mod resources;
mod route;
mod spool;
mod telemetry;
mod tls;
mod upstream;

pub use config::Config;
pub use instance::{ConfigSource, Instance, ReloadError, StartError};
pub use proxy::forwarded::Cidr;
pub use proxy::ClientLimits;
pub use resources::{raise_open_file_limit, Resources};
pub use telemetry::access_log::{AccessLogConfig, AccessLogFormat, AccessLogTarget};
pub use upstream::BackendStats;
