//! `h2-engine-floor --listen ADDR --upstream ADDR`: the smallest HTTP/2 relay on holdfast's
//! own engine (`holdfast-h2`), for benchmarks only (not part of the product): the relay
//! `h2-floor` is on the `h2` crate, built the way the product will drive the engine.
//!
//! Each client connection (h2c with prior knowledge, as h2load speaks it) gets one task
//! and one h2c connection to the origin, opened when the client connects. The task owns
//! both engines and both sockets: no task per stream, no lock, no channel. Every stream
//! is relayed head, DATA and trailers, with the scheme set to http; received DATA is
//! released to its sender only once the other side's engine took it, so neither side
//! buffers past a window. Everything runs on one thread. A stream that fails on one side
//! is reset on the other.

use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::net::SocketAddr;
use std::num::NonZeroUsize;

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use clap::Parser;
use holdfast_bench_tools::runtime;
use holdfast_h2::conn::{Config, Connection, Event, Head};
use holdfast_h2::error::ErrorCode;
use holdfast_h2::hpack::Field;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// SETTINGS towards clients: as h2-floor's.
const MAX_CONCURRENT_STREAMS: u32 = 128;
const STREAM_WINDOW: u32 = 256 * 1024;
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Pieces of output gathered into one vectored write.
const MAX_SLICES: usize = 64;

#[derive(Debug, Parser)]
#[command(
    name = "h2-engine-floor",
    about = "Minimal h2c-to-h2c relay on holdfast's own HTTP/2 engine: a CPU floor (benchmark only)"
)]
struct Args {
    /// Address to accept h2c (HTTP/2 with prior knowledge) on.
    #[arg(long)]
    listen: SocketAddr,
    /// The h2c origin to relay every stream to.
    #[arg(long)]
    upstream: SocketAddr,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = runtime::build(NonZeroUsize::MIN)
        .context("building the tokio runtime")
        .and_then(|runtime| runtime.block_on(run(args)));
    runtime::exit_code("h2-engine-floor", result)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    runtime::print_listening(&[addr])?;
    loop {
        let (socket, _) = listener.accept().await.context("accepting a connection")?;
        let _ = socket.set_nodelay(true);
        let upstream = args.upstream;
        tokio::spawn(async move {
            if let Err(error) = relay_connection(socket, upstream).await {
                eprintln!("h2-engine-floor: {error:#}");
            }
        });
    }
}

/// One side of the relay: its socket, its engine, what was read and not yet taken.
struct Side {
    socket: TcpStream,
    conn: Connection,
    read: BytesMut,
}

impl Side {
    /// Writes everything the engine has to say, in vectored writes.
    async fn flush(&mut self) -> std::io::Result<()> {
        let mut pieces: VecDeque<Bytes> = VecDeque::new();
        loop {
            while pieces.len() < MAX_SLICES {
                match self.conn.next_output() {
                    Some(piece) => pieces.push_back(piece),
                    None => break,
                }
            }
            if pieces.is_empty() {
                return Ok(());
            }
            while !pieces.is_empty() {
                let slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
                let mut written = self.socket.write_vectored(&slices).await?;
                if written == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                while written > 0 {
                    let Some(front) = pieces.front_mut() else { break };
                    if written >= front.len() {
                        written -= front.len();
                        pieces.pop_front();
                    } else {
                        let _ = front.split_to(written);
                        written = 0;
                    }
                }
            }
        }
    }
}

/// Which stream on the other side a stream is relayed to.
#[derive(Default)]
struct Pairs {
    client_to_origin: HashMap<u32, u32>,
    origin_to_client: HashMap<u32, u32>,
}

impl Pairs {
    fn pair(&mut self, client: u32, origin: u32) {
        self.client_to_origin.insert(client, origin);
        self.origin_to_client.insert(origin, client);
    }

    fn forget_client(&mut self, client: u32) -> Option<u32> {
        let origin = self.client_to_origin.remove(&client)?;
        self.origin_to_client.remove(&origin);
        Some(origin)
    }

    fn forget_origin(&mut self, origin: u32) -> Option<u32> {
        let client = self.origin_to_client.remove(&origin)?;
        self.client_to_origin.remove(&client);
        Some(client)
    }
}

/// Relays one client connection over its own origin connection until either ends.
async fn relay_connection(client: TcpStream, upstream: SocketAddr) -> anyhow::Result<()> {
    let origin =
        TcpStream::connect(upstream).await.with_context(|| format!("connecting to {upstream}"))?;
    let _ = origin.set_nodelay(true);
    let server_config = Config {
        max_concurrent_streams: MAX_CONCURRENT_STREAMS,
        stream_window: STREAM_WINDOW,
        connection_window: CONNECTION_WINDOW,
        ..Config::default()
    };
    let mut client =
        Side { socket: client, conn: Connection::server(server_config), read: BytesMut::new() };
    let client_config = Config {
        stream_window: STREAM_WINDOW,
        connection_window: CONNECTION_WINDOW,
        ..Config::default()
    };
    let mut origin =
        Side { socket: origin, conn: Connection::client(client_config), read: BytesMut::new() };
    let mut pairs = Pairs::default();
    loop {
        client.flush().await?;
        origin.flush().await?;
        if client.conn.is_closed() || origin.conn.is_closed() {
            return Ok(());
        }
        client.read.reserve(16 * 1024);
        origin.read.reserve(16 * 1024);
        tokio::select! {
            read = client.socket.read_buf(&mut client.read) => {
                if read? == 0 {
                    return Ok(());
                }
                let _ = client.conn.receive(&mut client.read);
            }
            read = origin.socket.read_buf(&mut origin.read) => {
                if read? == 0 {
                    return Ok(());
                }
                let _ = origin.conn.receive(&mut origin.read);
            }
        }
        // Each side's events may make the other's; until both are quiet.
        loop {
            let from_client = relay_client_events(&mut client.conn, &mut origin.conn, &mut pairs);
            let from_origin = relay_origin_events(&mut origin.conn, &mut client.conn, &mut pairs);
            if !from_client && !from_origin {
                break;
            }
        }
    }
}

/// Acts on the client's events: requests opened at the origin, bodies passed on.
fn relay_client_events(
    client: &mut Connection,
    origin: &mut Connection,
    pairs: &mut Pairs,
) -> bool {
    let mut any = false;
    while let Some(event) = client.next_event() {
        any = true;
        match event {
            Event::Head { stream, head, end_stream } => {
                let fields = request_fields(&head);
                let head_request = head.pseudo.method.as_deref() == Some(b"HEAD");
                match origin.open(&fields, end_stream, head_request) {
                    Ok(id) => pairs.pair(stream, id),
                    Err(_) => client.reset(stream, ErrorCode::RefusedStream),
                }
            }
            Event::Data { stream, data, end_stream } => {
                let Some(&to) = pairs.client_to_origin.get(&stream) else { continue };
                let len = data.len();
                if origin.send_data(to, data, end_stream).is_ok() {
                    client.release(stream, len);
                } else {
                    // More than the origin's window and buffer: the floor does not queue.
                    client.reset(stream, ErrorCode::InternalError);
                    origin.reset(to, ErrorCode::Cancel);
                }
            }
            Event::Trailers { stream, fields } => {
                if let Some(&to) = pairs.client_to_origin.get(&stream) {
                    let _ = origin.send_trailers(to, fields);
                }
            }
            Event::Reset { stream, .. } => {
                if let Some(to) = pairs.forget_client(stream) {
                    origin.reset(to, ErrorCode::Cancel);
                }
            }
            Event::TooLarge { stream, .. } => {
                let _ = client.send_head(stream, &[status_field(431)], true);
            }
            Event::Writable { .. } | Event::GoAway { .. } | Event::Ready => {}
        }
    }
    any
}

/// Acts on the origin's events: responses and their bodies passed to the client.
fn relay_origin_events(
    origin: &mut Connection,
    client: &mut Connection,
    pairs: &mut Pairs,
) -> bool {
    let mut any = false;
    while let Some(event) = origin.next_event() {
        any = true;
        match event {
            Event::Head { stream, head, end_stream } => {
                let Some(&to) = pairs.origin_to_client.get(&stream) else { continue };
                let mut fields = Vec::with_capacity(head.fields.len() + 1);
                fields.push(status_field(head.pseudo.status.unwrap_or(502)));
                fields.extend(head.fields);
                let _ = client.send_head(to, &fields, end_stream);
                if end_stream {
                    pairs.forget_origin(stream);
                }
            }
            Event::Data { stream, data, end_stream } => {
                let Some(&to) = pairs.origin_to_client.get(&stream) else { continue };
                let len = data.len();
                if client.send_data(to, data, end_stream).is_ok() {
                    origin.release(stream, len);
                } else {
                    client.reset(to, ErrorCode::InternalError);
                    origin.reset(stream, ErrorCode::Cancel);
                }
                if end_stream {
                    pairs.forget_origin(stream);
                }
            }
            Event::Trailers { stream, fields } => {
                if let Some(to) = pairs.forget_origin(stream) {
                    let _ = client.send_trailers(to, fields);
                }
            }
            Event::Reset { stream, .. } => {
                if let Some(to) = pairs.forget_origin(stream) {
                    client.reset(to, ErrorCode::InternalError);
                }
            }
            Event::TooLarge { .. }
            | Event::Writable { .. }
            | Event::GoAway { .. }
            | Event::Ready => {}
        }
    }
    any
}

/// The origin request's fields: the client's pseudo-headers (scheme http) and fields.
fn request_fields(head: &Head) -> Vec<Field> {
    let mut fields = Vec::with_capacity(head.fields.len() + 4);
    let pseudo = &head.pseudo;
    let mut push = |name: &'static str, value: Option<&Bytes>| {
        if let Some(value) = value {
            fields.push(Field {
                name: Bytes::from_static(name.as_bytes()),
                value: value.clone(),
                sensitive: false,
            });
        }
    };
    push(":method", pseudo.method.as_ref());
    push(":scheme", Some(&Bytes::from_static(b"http")));
    push(":authority", pseudo.authority.as_ref());
    push(":path", pseudo.path.as_ref());
    fields.extend(head.fields.iter().cloned());
    fields
}

fn status_field(status: u16) -> Field {
    Field {
        name: Bytes::from_static(b":status"),
        value: Bytes::from(status.to_string()),
        sensitive: false,
    }
}
