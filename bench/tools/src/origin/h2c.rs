//! The origin in h2c mode (`bench-origin --h2c`): the same routes over HTTP/2 with prior
//! knowledge, and over HTTP/1.1 on the same port, told apart by the first bytes a client
//! sends (hyper-util's automatic server). The harness reads `/__origin/stats` over
//! HTTP/1.1; a proxy that speaks h2c to the origin gets HTTP/2.
//!
//! Besides the TCP connections (counted in the same holdfast-origin counts as the
//! cleartext origin's: accepted, open, failed accepts), it counts what went over HTTP/2: connections that carried at
//! least one HTTP/2 request, how many of those are open, and requests. A proxy that says
//! it speaks h2c to its origin shows here whether it did, and how many connections it
//! spread its streams over. Each connection allows [`Options::max_streams`] concurrent
//! streams (SETTINGS_MAX_CONCURRENT_STREAMS).
//!
//! A gRPC call (`content-type: application/grpc`, any path) is answered by the gRPC echo
//! (see `grpc.rs`) instead of the routes, and counted as a request like them.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use holdfast_origin::ACCEPT_ERROR_BACKOFF;
use http::{Response, Version};
use http_body_util::Either;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};

use super::{grpc, respond, ClosedOnDrop, Gate, OriginBody, OriginStats};

/// SETTINGS_MAX_CONCURRENT_STREAMS the origin announces unless told otherwise: 100, the
/// value RFC 9113 recommends as the least a server should allow (section 6.5.2), and what
/// many servers announce.
pub const DEFAULT_MAX_STREAMS: u32 = 100;

/// How the h2c origin serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Concurrent streams one HTTP/2 connection may carry (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_streams: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options { max_streams: DEFAULT_MAX_STREAMS }
    }
}

/// HTTP/2 counts of an origin in h2c mode, in plain atomics.
#[derive(Debug, Default)]
pub(super) struct H2Counts {
    h2_connections: AtomicU64,
    h2_closed: AtomicU64,
    h2_requests: AtomicU64,
    max_streams: AtomicU64,
}

/// One reading of the HTTP/2 counts; `h2` in `/__origin/stats` in h2c mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct H2Snapshot {
    /// Connections that carried at least one HTTP/2 request, since start.
    pub connections: u64,
    /// Of those, open now.
    pub open: u64,
    /// Requests served over HTTP/2 (the stats route not included).
    pub requests: u64,
    /// The SETTINGS_MAX_CONCURRENT_STREAMS every connection announces.
    pub max_streams: u64,
}

impl H2Counts {
    pub(super) fn h2(&self) -> H2Snapshot {
        let closed = self.h2_closed.load(Ordering::SeqCst);
        let connections = self.h2_connections.load(Ordering::SeqCst);
        H2Snapshot {
            connections,
            open: connections.saturating_sub(closed),
            requests: self.h2_requests.load(Ordering::Relaxed),
            max_streams: self.max_streams.load(Ordering::Relaxed),
        }
    }
}

/// Counts its HTTP/2 connection closed when dropped, if it carried HTTP/2, however the
/// connection's task ends.
struct OpenH2 {
    stats: Arc<OriginStats>,
    is_h2: Arc<AtomicBool>,
}

impl Drop for OpenH2 {
    fn drop(&mut self) {
        let counts = self.stats.h2c.get().expect("serve initialises the h2c counts");
        if self.is_h2.load(Ordering::Relaxed) {
            counts.h2_closed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Accepts connections on `listener` and serves the routes over HTTP/2 (prior knowledge)
/// or HTTP/1.1, whichever each connection starts with, until `shutdown` resolves; counts
/// go to `stats` (its `h2c` part from then on).
///
/// Connections already open keep being served by their own tasks after this returns, as
/// in the cleartext origin.
pub async fn serve(
    listener: TcpListener,
    stats: Arc<OriginStats>,
    options: Options,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let counts = stats.h2c.get_or_init(H2Counts::default);
    counts.max_streams.store(u64::from(options.max_streams), Ordering::Relaxed);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(options.max_streams);
    let gate = Arc::new(Gate::new());
    tokio::select! {
        () = accept_loop(listener, Arc::new(builder), stats, gate) => {}
        () = shutdown => {}
    }
    Ok(())
}

async fn accept_loop(
    listener: TcpListener,
    builder: Arc<auto::Builder<TokioExecutor>>,
    stats: Arc<OriginStats>,
    gate: Arc<Gate>,
) {
    // Each round accepts one connection or backs off after a failed accept.
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                stats.connections.count_accept_error();
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        stats.connections.count_accepted();
        // Small responses must not wait for Nagle; failing only costs latency.
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(
            stream,
            Arc::clone(&builder),
            Arc::clone(&stats),
            Arc::clone(&gate),
        ));
    }
}

/// Serves one connection, HTTP/2 or HTTP/1.1 with keep-alive and no idle timeout, until the
/// peer closes it; counts it as an HTTP/2 connection at its first HTTP/2 request.
async fn serve_connection(
    stream: TcpStream,
    builder: Arc<auto::Builder<TokioExecutor>>,
    stats: Arc<OriginStats>,
    gate: Arc<Gate>,
) {
    let is_h2 = Arc::new(AtomicBool::new(false));
    let _open = ClosedOnDrop(Arc::clone(&stats.connections));
    let _open_h2 = OpenH2 { stats: Arc::clone(&stats), is_h2: Arc::clone(&is_h2) };
    let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
        if request.version() == Version::HTTP_2 {
            let counts = stats.h2c.get().expect("initialised before accepting");
            if !is_h2.swap(true, Ordering::Relaxed) {
                counts.h2_connections.fetch_add(1, Ordering::SeqCst);
            }
            if request.uri().path() != "/__origin/stats" {
                counts.h2_requests.fetch_add(1, Ordering::Relaxed);
            }
        }
        answer(request, Arc::clone(&stats), Arc::clone(&gate))
    });
    let _ = builder.serve_connection(TokioIo::new(stream), service).await;
}

/// A response body of the h2c origin: one of the routes' bodies, or a gRPC call's echo.
type H2cBody = Either<OriginBody, grpc::EchoBody>;

/// Answers a gRPC call with its echo, anything else from the routes.
async fn answer(
    request: http::Request<hyper::body::Incoming>,
    stats: Arc<OriginStats>,
    gate: Arc<Gate>,
) -> Result<Response<H2cBody>, Infallible> {
    if grpc::is_call(&request) {
        stats.requests.fetch_add(1, Ordering::Relaxed);
        return Ok(grpc::echo(request).map(Either::Right));
    }
    let response = respond(request, stats, gate).await?;
    Ok(response.map(Either::Left))
}
