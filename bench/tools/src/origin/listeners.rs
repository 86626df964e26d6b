//! One origin process on several listeners (`bench-origin --listen A --listen B ...`): each
//! listener counts its own connections and requests, and `/__origin/stats` on any of them
//! answers the totals of all of them, with each listener's counts in `listeners`.
//!
//! A benchmark with many backends (one port each) thus runs one origin process, not one
//! per port, and reads one stats answer for all of them. Cleartext HTTP/1.1 only: the TLS
//! and h2c modes keep their single listener.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use holdfast_origin::{Options, Origin};
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use super::{respond, Gate, OriginBody, OriginStats, StatsSnapshot};

/// The counts of every listener of one origin, in the order they were given.
#[derive(Debug)]
pub struct Listeners {
    entries: Vec<(SocketAddr, Arc<OriginStats>)>,
}

/// One listener's counts; an entry of `listeners` in `/__origin/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerSnapshot {
    /// The address it listens on.
    pub address: SocketAddr,
    /// TCP connections it accepted since start.
    pub connections: u64,
    /// Of them, open now.
    pub open: u64,
    /// Requests it answered since start, `/__origin/stats` not included.
    pub requests: u64,
}

impl Listeners {
    /// Fresh counts for listeners on `addresses`.
    pub fn new(addresses: impl IntoIterator<Item = SocketAddr>) -> Self {
        let entries = addresses
            .into_iter()
            .map(|address| (address, Arc::new(OriginStats::default())))
            .collect();
        Self { entries }
    }

    /// The totals over every listener, with each listener's own counts in `listeners`.
    pub fn snapshot(&self) -> StatsSnapshot {
        let listeners: Vec<ListenerSnapshot> = self
            .entries
            .iter()
            .map(|(address, stats)| listener_snapshot(*address, stats))
            .collect();
        let accept_errors =
            self.entries.iter().map(|(_, stats)| stats.connections.accept_errors()).sum();
        StatsSnapshot {
            connections: listeners.iter().map(|l| l.connections).sum(),
            open: listeners.iter().map(|l| l.open).sum(),
            requests: listeners.iter().map(|l| l.requests).sum(),
            in_progress: self.entries.iter().map(|(_, stats)| stats.in_progress.now()).sum(),
            accept_errors,
            tls: None,
            h2: None,
            listeners: Some(listeners),
            workers: None,
        }
    }
}

fn listener_snapshot(address: SocketAddr, stats: &OriginStats) -> ListenerSnapshot {
    ListenerSnapshot {
        address,
        connections: stats.connections.accepted(),
        open: stats.connections.open(),
        requests: stats.requests.load(Ordering::Relaxed),
    }
}

/// Serves the origin's routes on every one of `listeners` until `shutdown` resolves,
/// counting in `counts` (made with [`Listeners::new`] from the same addresses, in the
/// same order). Fails if the two lists differ in length.
pub async fn serve_many(
    listeners: Vec<TcpListener>,
    counts: Arc<Listeners>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    if listeners.len() != counts.entries.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} listeners but counts for {}", listeners.len(), counts.entries.len()),
        ));
    }
    let gate = Arc::new(Gate::new());
    let mut origins = Vec::with_capacity(listeners.len());
    for (index, listener) in listeners.into_iter().enumerate() {
        origins.push(serve_one(listener, index, Arc::clone(&counts), Arc::clone(&gate))?);
    }
    shutdown.await;
    for origin in &origins {
        origin.stop();
    }
    Ok(())
}

/// Serves listener number `index` of `counts`, on a task of its own.
fn serve_one(
    listener: TcpListener,
    index: usize,
    counts: Arc<Listeners>,
    gate: Arc<Gate>,
) -> io::Result<Origin> {
    let own = counts.entries.get(index).map(|(_, stats)| Arc::clone(stats)).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("no counts for listener {index}"))
    })?;
    let connections = Arc::clone(&own.connections);
    Origin::serve(listener, connections, Options::default(), move |_| {
        let (own, counts, gate) = (Arc::clone(&own), Arc::clone(&counts), Arc::clone(&gate));
        service_fn(move |request| {
            respond_counted(request, Arc::clone(&own), Arc::clone(&counts), Arc::clone(&gate))
        })
    })
}

/// The routes of [`respond`], counted on this listener, except `/__origin/stats`, which
/// answers every listener's counts.
async fn respond_counted(
    request: Request<Incoming>,
    own: Arc<OriginStats>,
    counts: Arc<Listeners>,
    gate: Arc<Gate>,
) -> Result<Response<OriginBody>, Infallible> {
    if request.uri().path() == "/__origin/stats" {
        return Ok(totals_response(&counts));
    }
    respond(request, own, gate).await
}

fn totals_response(counts: &Listeners) -> Response<OriginBody> {
    let json = serde_json::to_vec(&counts.snapshot()).expect("a struct of integers serializes");
    let mut response = Response::new(OriginBody::once(Bytes::from(json)));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
