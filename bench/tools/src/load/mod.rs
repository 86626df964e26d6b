//! The load shapes `bench-load` runs, each a function from a config to a report:
//!
//! - [`rate`]: open-loop fixed rate over keep-alive connections (no coordinated omission);
//! - [`hosts`]: `rate` with each request's `Host` from a schedule: many virtual hosts, most
//!   with steady traffic, some idle between bursts;
//! - [`mixed`]: closed loop, keep-alive workers next to workers that close after each request;
//! - [`hold`]: many connections, each proxied once (or silent: no byte sent), then held idle;
//! - [`burst`]: many requests in flight at once, each on its own new connection;
//! - [`handshakes`]: closed loop over HTTPS, a new connection and TLS handshake (full, or
//!   resuming a session) for every request;
//! - [`grpc`]: closed-loop gRPC calls over h2c on the `h2` crate's client, unary or
//!   bidirectional streams in lockstep, every echo checked (messages: [`grpc_message`]);
//! - [`steady`]: a well-behaved client at a steady rate, each request with a deadline and
//!   reported on its own (HTTP/1.1 or h2c), for the slow-reader drills;
//! - [`zero_window`]: HTTP/2 connections whose streams never open their window again (their
//!   frames written by hand, [`h2_frame`]);
//! - [`slow_read`]: HTTP/1.1 clients that read a large response at a trickle.
//!
//! They share [`target`] (where to send), [`exchange`] (one request on one connection, with
//! its failure classified) and [`tally`] (what the workers counted); `rate` and `hosts`
//! send on [`raw`], a minimal HTTP/1.1 client that costs less CPU per request than hyper's.

pub mod burst;
pub mod exchange;
pub mod grpc;
pub mod grpc_message;
pub mod h2_frame;
pub mod handshakes;
pub mod hold;
pub mod hosts;
pub mod mixed;
pub mod rate;
pub mod raw;
pub mod slow_read;
pub mod steady;
pub mod tally;
pub mod target;
pub mod timeline;
pub mod zero_window;

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use exchange::Connection;

/// Connects allowed in flight at once while opening many connections (`hold`, `rate`).
pub const DEFAULT_CONNECTS_IN_FLIGHT: usize = 256;

/// A semaphore that bounds connects in flight, with at least one permit.
fn connect_limit(permits: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(permits.max(1)))
}

/// Closes every connection at once and waits until all are shut down.
async fn close_all(connections: Vec<Connection>) {
    let mut closing: JoinSet<()> = connections.into_iter().map(Connection::close).collect();
    while closing.join_next().await.is_some() {}
}
