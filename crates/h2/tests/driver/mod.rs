//! Runs one holdfast-h2 [`Connection`] over a TCP socket, on one task: the prototype of
//! how the proxy drives the engine. The loop reads into a buffer and hands it to
//! [`Connection::receive`], lets the application act on the events that came of it,
//! and writes what [`Connection::next_output`] produced (vectored, in order) whenever
//! the socket takes it. Reading and writing are both served by one wait on the socket's
//! readiness, so neither side can stall the other: a peer that stops reading holds back
//! our writes, never our reads.
//!
//! The roles live beside it: `origin` (an engine server answering test routes) and
//! `client` (an engine client running a list of exchanges). What both need (fields,
//! the body pattern, a checksum) is at the bottom of this file.

pub mod client;
pub mod origin;

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use holdfast_h2::conn::{Connection, Event};
use holdfast_h2::error::ErrorCode;
use holdfast_h2::hpack::Field;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// What the application does with the connection's events, and on its own.
pub trait Application {
    /// Acts on one event, in the order the engine reported them.
    fn on_event(&mut self, conn: &mut Connection, event: Event);

    /// Acts after each batch of events (the client opens streams here).
    fn act(&mut self, _conn: &mut Connection) {}
}

/// How a connection's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// The connection error the engine found (it sent GOAWAY with this code), if any.
    pub error: Option<ErrorCode>,
    /// The peer closed its side before the engine was done.
    pub peer_closed_early: bool,
}

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Output taken from the engine and not yet written, at most: enough for a vectored
/// write of several frames, small enough that the engine's own high-water mark, not
/// this buffer, decides how much a slow peer holds back.
const PENDING_HIGH: usize = 128 * 1024;

/// Slices in one vectored write.
const MAX_SLICES: usize = 64;

/// How long a closed connection waits for the peer's end of stream before dropping
/// the socket (so our last frames are not lost to a TCP reset).
const LINGER: Duration = Duration::from_secs(2);

/// Runs `conn` over `socket` until the engine is closed or the peer closes, then
/// shuts the socket down.
pub async fn run<A: Application>(
    mut conn: Connection,
    mut socket: TcpStream,
    app: &mut A,
) -> io::Result<End> {
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut pending = Pending::default();
    let mut eof = false;
    loop {
        while let Some(event) = conn.next_event() {
            app.on_event(&mut conn, event);
        }
        app.act(&mut conn);
        pending.take_from(&mut conn);
        if pending.is_empty() && (conn.is_closed() || eof) {
            break;
        }
        let ready = socket.ready(interest(eof, !pending.is_empty())).await?;
        if ready.is_readable() && !eof {
            eof = read(&socket, &mut input, &mut conn)?;
        }
        if ready.is_writable() && !pending.is_empty() {
            unless_would_block(pending.write_to(&socket))?;
        }
    }
    let end = End { error: conn.error(), peer_closed_early: eof && !conn.is_closed() };
    linger(&mut socket, eof).await;
    Ok(end)
}

/// What to wait for: input until the peer's end of stream, room to write while there
/// is output.
fn interest(eof: bool, has_output: bool) -> Interest {
    match (eof, has_output) {
        (false, false) => Interest::READABLE,
        (false, true) => Interest::READABLE | Interest::WRITABLE,
        (true, _) => Interest::WRITABLE,
    }
}

/// Reads what the socket has and hands it to the engine; whether the peer closed.
/// A connection error needs nothing here: the engine queued GOAWAY and is closed, so
/// the loop writes the GOAWAY and ends.
fn read(socket: &TcpStream, input: &mut BytesMut, conn: &mut Connection) -> io::Result<bool> {
    input.reserve(READ_CHUNK);
    match socket.try_read_buf(input) {
        Ok(0) => Ok(true),
        Ok(_) => {
            let _ = conn.receive(input);
            Ok(false)
        }
        Err(e) => unless_would_block(Err(e)).map(|()| false),
    }
}

/// A readiness that turned out false (`WouldBlock`) is no error: the loop waits again.
fn unless_would_block(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        other => other,
    }
}

/// Ends our side and waits, bounded, for the peer's: a socket closed with unread input
/// sends a reset, which can destroy the frames we wrote last before the peer reads them.
async fn linger(socket: &mut TcpStream, eof: bool) {
    let _ = socket.shutdown().await;
    if eof {
        return;
    }
    let drain = async {
        let mut sink = [0u8; 4096];
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Output taken from the engine, in order, not yet written.
#[derive(Default)]
struct Pending {
    pieces: VecDeque<Bytes>,
    len: usize,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Takes the engine's next pieces, up to the high-water mark.
    fn take_from(&mut self, conn: &mut Connection) {
        while self.len < PENDING_HIGH {
            let Some(piece) = conn.next_output() else { break };
            self.len += piece.len();
            self.pieces.push_back(piece);
        }
    }

    /// One vectored write of the pieces' front; what went is taken off.
    fn write_to(&mut self, socket: &TcpStream) -> io::Result<()> {
        let slices: Vec<IoSlice<'_>> =
            self.pieces.iter().take(MAX_SLICES).map(|p| IoSlice::new(p)).collect();
        let mut written = socket.try_write_vectored(&slices)?;
        self.len -= written;
        while written > 0 {
            let Some(front) = self.pieces.front_mut() else { break };
            if written < front.len() {
                front.advance(written);
                break;
            }
            written -= front.len();
            self.pieces.pop_front();
        }
        Ok(())
    }
}

// ---- What both roles and the tests share ---------------------------------------------

/// How long any one wait of a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// Awaits `future`, failing the test with `what` when it takes longer than [`WAIT`].
pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(WAIT, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: no result within {WAIT:?}"),
    }
}

/// A field for the engine's API.
pub fn field(name: &str, value: &str) -> Field {
    Field {
        name: Bytes::copy_from_slice(name.as_bytes()),
        value: Bytes::copy_from_slice(value.as_bytes()),
        sensitive: false,
    }
}

/// A field section as text pairs, for assertions.
pub fn text_fields(fields: &[Field]) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|f| {
            let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
            (text(&f.name), text(&f.value))
        })
        .collect()
}

/// The period of the body pattern: a prime, so the pattern does not line up with
/// frame or window sizes.
const PERIOD: usize = 251;

/// The pattern's bytes, several periods long, sliced (no copy) for each chunk.
fn pattern_bytes() -> &'static Bytes {
    static PATTERN: OnceLock<Bytes> = OnceLock::new();
    PATTERN.get_or_init(|| (0..PERIOD * 300).map(|i| (i % PERIOD) as u8).collect())
}

/// The largest chunk [`pattern_chunk`] makes.
pub const PATTERN_CHUNK_MAX: usize = PERIOD * 299;

/// The body `GET /size/N` answers, from `offset`, `len` bytes (at most
/// [`PATTERN_CHUNK_MAX`]): byte `i` of the body is `i % 251`.
pub fn pattern_chunk(offset: usize, len: usize) -> Bytes {
    let start = offset % PERIOD;
    pattern_bytes().slice(start..start + len.min(PATTERN_CHUNK_MAX))
}

/// The whole body of `GET /size/N`.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % PERIOD) as u8).collect()
}

/// FNV-1a (32 bits) of `bytes`: the checksum the external peers' bodies are compared
/// by (Node computes the same in the test's script).
pub fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}
