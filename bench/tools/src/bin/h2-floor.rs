//! `h2-floor --listen ADDR --upstream ADDR [--connections N]`: the smallest HTTP/2 relay
//! the `h2` crate allows, for benchmarks only (not part of the product).
//!
//! It accepts cleartext HTTP/2 with prior knowledge (h2c, as h2load speaks it) and relays
//! every stream, head, DATA and trailers, to an h2c origin over `N` connections opened at
//! start, streams taking them in turn. Everything runs on one thread. There is no routing,
//! no header rewriting beyond the scheme, no limits, no metrics and no logging per
//! request: its CPU time per request, run against the same origin and load as holdfast, is
//! a lower bound on what proxying HTTP/2 to an h2c origin with the `h2` crate costs, the
//! part of holdfast's cost that the `h2` crate alone accounts for.
//!
//! A stream that fails either way is reset towards the client with INTERNAL_ERROR.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use h2::client::SendRequest;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use holdfast_bench_tools::runtime;
use http::uri::{Scheme, Uri};
use http::{Request, Response};
use tokio::net::{TcpListener, TcpStream};

/// SETTINGS_MAX_CONCURRENT_STREAMS towards clients.
const MAX_CONCURRENT_STREAMS: u32 = 128;
/// SETTINGS_INITIAL_WINDOW_SIZE towards clients: 256 KiB per stream.
const STREAM_WINDOW: u32 = 256 * 1024;
/// The connection-level receive window towards clients: 1 MiB.
const CONNECTION_WINDOW: u32 = 1024 * 1024;

#[derive(Debug, Parser)]
#[command(
    name = "h2-floor",
    about = "Minimal h2c-to-h2c relay on the h2 crate: a CPU floor for HTTP/2 proxying (benchmark only)"
)]
struct Args {
    /// Address to accept h2c (HTTP/2 with prior knowledge) on.
    #[arg(long)]
    listen: SocketAddr,
    /// The h2c origin to relay every stream to.
    #[arg(long)]
    upstream: SocketAddr,
    /// HTTP/2 connections to open to the origin at start; streams take them in turn.
    #[arg(long, default_value = "1")]
    connections: NonZeroUsize,
}

/// The origin connections' request handles, and whose turn is next.
struct Upstreams {
    senders: Vec<SendRequest<Bytes>>,
    next: AtomicUsize,
}

impl Upstreams {
    /// A handle on the next connection in turn.
    fn next(&self) -> SendRequest<Bytes> {
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        self.senders[turn % self.senders.len()].clone()
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = runtime::build(NonZeroUsize::MIN)
        .context("building the tokio runtime")
        .and_then(|runtime| runtime.block_on(run(args)));
    runtime::exit_code("h2-floor", result)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut senders = Vec::with_capacity(args.connections.get());
    for _ in 0..args.connections.get() {
        senders.push(connect(args.upstream).await?);
    }
    let upstreams = Arc::new(Upstreams { senders, next: AtomicUsize::new(0) });

    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    runtime::print_listening(&[addr])?;

    let mut server = h2::server::Builder::new();
    server
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW);
    loop {
        let (socket, _) = listener.accept().await.context("accepting a connection")?;
        // Small frames must not wait for Nagle; failing only costs latency.
        let _ = socket.set_nodelay(true);
        tokio::spawn(serve_client(socket, server.clone(), Arc::clone(&upstreams)));
    }
}

/// Opens one h2c connection to the origin, spawns its driver and returns its handle.
async fn connect(upstream: SocketAddr) -> anyhow::Result<SendRequest<Bytes>> {
    let socket =
        TcpStream::connect(upstream).await.with_context(|| format!("connecting to {upstream}"))?;
    let _ = socket.set_nodelay(true);
    let (sender, connection) = h2::client::handshake(socket)
        .await
        .with_context(|| format!("HTTP/2 handshake with {upstream}"))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("h2-floor: upstream connection failed: {error}");
        }
    });
    Ok(sender)
}

/// Serves one client connection: accepts its streams, each relayed by its own task, until
/// the connection ends.
async fn serve_client(socket: TcpStream, server: h2::server::Builder, upstreams: Arc<Upstreams>) {
    let Ok(mut connection) = server.handshake::<_, Bytes>(socket).await else {
        return;
    };
    while let Some(Ok((request, respond))) = connection.accept().await {
        tokio::spawn(relay_stream(request, respond, upstreams.next()));
    }
}

/// Relays one stream to the origin and its response back, or resets it.
async fn relay_stream(
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    upstream: SendRequest<Bytes>,
) {
    if relay(request, &mut respond, upstream).await.is_err() {
        // Resets the stream whether or not its response head went out.
        respond.send_reset(Reason::INTERNAL_ERROR);
    }
}

/// Error of a relayed stream; only whether there was one matters.
struct Failed;

impl From<h2::Error> for Failed {
    fn from(_: h2::Error) -> Self {
        Failed
    }
}

impl From<http::Error> for Failed {
    fn from(_: http::Error) -> Self {
        Failed
    }
}

async fn relay(
    request: Request<RecvStream>,
    respond: &mut SendResponse<Bytes>,
    upstream: SendRequest<Bytes>,
) -> Result<(), Failed> {
    // Same method, headers and extensions; the URI's authority and path as the client
    // sent them, with scheme http; version HTTP/2 already.
    let (mut head, body) = request.into_parts();
    let mut uri = std::mem::take(&mut head.uri).into_parts();
    uri.scheme = Some(Scheme::HTTP);
    head.uri = Uri::from_parts(uri).map_err(http::Error::from)?;
    let end_of_stream = body.is_end_stream();

    let mut upstream = upstream.ready().await?;
    let (response, upstream_body) =
        upstream.send_request(Request::from_parts(head, ()), end_of_stream)?;
    if !end_of_stream {
        // The request body goes up beside the response coming down: an origin may answer
        // before it has read the whole body.
        tokio::spawn(relay_request_body(body, upstream_body));
    }

    let (head, body) = response.await?.into_parts();
    let end_of_stream = body.is_end_stream();
    let mut client_body = respond.send_response(Response::from_parts(head, ()), end_of_stream)?;
    if !end_of_stream {
        relay_body(body, &mut client_body).await?;
    }
    Ok(())
}

/// Relays a request body upstream; on failure resets the upstream stream, which then fails
/// its response and so resets the client's stream.
async fn relay_request_body(from: RecvStream, mut to: SendStream<Bytes>) {
    if relay_body(from, &mut to).await.is_err() {
        to.send_reset(Reason::INTERNAL_ERROR);
    }
}

/// Relays DATA and trailers from `from` to `to` until the end of the stream, sending only
/// what `to`'s peer has window for and releasing `from`'s window as data goes out.
async fn relay_body(mut from: RecvStream, to: &mut SendStream<Bytes>) -> Result<(), Failed> {
    while let Some(data) = from.data().await {
        let data = data?;
        let len = data.len();
        let end_of_stream = from.is_end_stream();
        send_data(to, data, end_of_stream).await?;
        from.flow_control().release_capacity(len)?;
        if end_of_stream {
            return Ok(());
        }
    }
    match from.trailers().await? {
        Some(trailers) => to.send_trailers(trailers)?,
        None => to.send_data(Bytes::new(), true)?,
    }
    Ok(())
}

/// Sends `data` in pieces as `to`'s peer grants window, the last with `end_of_stream`.
async fn send_data(
    to: &mut SendStream<Bytes>,
    mut data: Bytes,
    end_of_stream: bool,
) -> Result<(), Failed> {
    if data.is_empty() {
        if end_of_stream {
            to.send_data(data, true)?;
        }
        return Ok(());
    }
    to.reserve_capacity(data.len());
    while !data.is_empty() {
        let granted = match to.capacity() {
            0 => poll_fn(|cx| to.poll_capacity(cx)).await.ok_or(Failed)??,
            assigned => assigned,
        };
        let piece = data.split_to(granted.min(data.len()));
        to.send_data(piece, end_of_stream && data.is_empty())?;
    }
    Ok(())
}
