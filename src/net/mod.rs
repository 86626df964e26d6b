//! Socket I/O on the proxy path: read buffers, and reads and writes that wait a bounded
//! time for the socket.
//!
//! Every operation tries the system call first and waits for readiness only when the
//! socket has nothing (or no room) now, so the common case costs one call and no timer.
//!
//! Buffers belong to a connection only while it is busy. An idle connection (a client
//! between requests, a pooled upstream connection) holds none; [`InBuf`] takes its
//! storage from a small per-thread cache and gives it back, so ten thousand idle
//! clients cost no buffer memory and a busy connection does not hit the allocator.
//!
//! Offsets here follow bytes from the network, so the module uses no indexing and no
//! unchecked arithmetic (the lints below deny them; tests may): a wrong offset gives an
//! empty slice, never a panic.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

mod stream;
mod tls;

pub use stream::Stream;
pub use tls::{tls_error, TlsFacts, TlsStream};

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Storage size of a client connection's read buffer: request heads and the start of
/// request bodies. Larger heads grow it (up to `max_request_header_bytes`).
pub const CLIENT_BUF: usize = 8 * 1024;
/// Storage size of the buffer an upstream response is read into: one read takes up to
/// this much of a large body, so a 50 kB response needs one or two reads.
pub const ORIGIN_BUF: usize = 64 * 1024;

/// Buffers of each size kept per thread for reuse (at most 4 MiB of 64 kB buffers).
const CACHED_BUFFERS: usize = 64;

thread_local! {
    /// Storage of `CLIENT_BUF` and `ORIGIN_BUF` bytes, given back by idle connections.
    static CACHE: RefCell<[Vec<Vec<u8>>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
}

/// Capacity of the buffers heads are written into ([`scratch`]): a head of a few
/// hundred bytes, with room for large cookies.
const SCRATCH_CAPACITY: usize = 4096;

thread_local! {
    /// Empty head buffers given back by finished exchanges.
    static SCRATCH: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer to write a head into, from this thread's cache when it has one;
/// give it back with [`recycle`].
pub fn scratch() -> Vec<u8> {
    SCRATCH.with(|c| c.borrow_mut().pop()).unwrap_or_else(|| Vec::with_capacity(SCRATCH_CAPACITY))
}

/// Gives a buffer from [`scratch`] back for reuse (one that grew is dropped).
pub fn recycle(mut buf: Vec<u8>) {
    if buf.capacity() != SCRATCH_CAPACITY {
        return;
    }
    buf.clear();
    SCRATCH.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() < CACHED_BUFFERS {
            c.push(buf);
        }
    });
}

/// Which of the cache's stacks holds storage of `size` bytes, if any does.
fn stack_of(size: usize) -> Option<usize> {
    match size {
        CLIENT_BUF => Some(0),
        ORIGIN_BUF => Some(1),
        _ => None,
    }
}

/// Storage of `size` bytes, from this thread's cache when it has one.
fn take_storage(size: usize) -> Vec<u8> {
    let cached = stack_of(size).and_then(|s| CACHE.with(|c| c.borrow_mut().get_mut(s)?.pop()));
    cached.unwrap_or_else(|| vec![0; size])
}

fn give_storage(storage: Vec<u8>) {
    let Some(s) = stack_of(storage.len()) else { return };
    CACHE.with(|c| {
        if let Some(stack) = c.borrow_mut().get_mut(s) {
            if stack.len() < CACHED_BUFFERS {
                stack.push(storage);
            }
        }
    });
}

/// Bytes read from a socket that have not been used yet.
///
/// `data()` is the unused part. Storage is taken on the first read and given back by
/// [`InBuf::release`] once the buffer is empty.
pub struct InBuf {
    storage: Vec<u8>,
    start: usize,
    end: usize,
    size: usize,
}

impl InBuf {
    /// An empty buffer that will take `size` bytes of storage when first read into.
    pub fn new(size: usize) -> InBuf {
        InBuf { storage: Vec::new(), start: 0, end: 0, size }
    }

    /// The bytes read and not yet consumed.
    pub fn data(&self) -> &[u8] {
        self.storage.get(self.start..self.end).unwrap_or_default()
    }

    /// The bytes read and not yet consumed, to decode in place.
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.storage.get_mut(self.start..self.end).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Marks the first `n` bytes of `data()` as used.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start = self.start.saturating_add(n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Gives the storage back to the cache if nothing unused is in it.
    pub fn release(&mut self) {
        if self.is_empty() && !self.storage.is_empty() {
            give_storage(std::mem::take(&mut self.storage));
        }
    }

    /// Whether the buffer is full, so a read would need it to grow.
    pub fn is_full(&self) -> bool {
        !self.storage.is_empty() && self.start == 0 && self.end == self.storage.len()
    }

    /// Doubles the storage, up to `limit` bytes; false when it is there already.
    pub fn grow(&mut self, limit: usize) -> bool {
        let len = self.storage.len().max(self.size);
        if len >= limit {
            return false;
        }
        self.storage.resize(len.saturating_mul(2).min(limit), 0);
        true
    }

    /// Room to read into: moves unused bytes to the front when that makes room.
    fn spare(&mut self) -> &mut [u8] {
        if self.storage.is_empty() {
            self.storage = take_storage(self.size);
        }
        if self.end == self.storage.len() && self.start > 0 {
            self.storage.copy_within(self.start..self.end, 0);
            self.end = self.len();
            self.start = 0;
        }
        self.storage.get_mut(self.end..).unwrap_or_default()
    }

    /// One read from `stream` if it has bytes now, without waiting. `WouldBlock` when it
    /// has none (the socket is then marked not ready, and the storage can be released);
    /// `Ok(0)` is end of stream.
    pub fn try_fill(&mut self, stream: &Stream) -> io::Result<usize> {
        let spare = self.spare();
        if spare.is_empty() {
            return Err(io::Error::other("read buffer is full"));
        }
        let n = stream.try_read(spare)?;
        self.end = self.end.saturating_add(n).min(self.storage.len());
        Ok(n)
    }

    /// One read from `stream`, waiting within `limit` for something to arrive.
    /// `Ok(0)` is end of stream; a full buffer must be consumed or grown first.
    ///
    /// An empty buffer waits for the socket before it takes storage, so a connection
    /// that waits long (an idle client, a slow origin) holds no buffer meanwhile.
    /// Reads go through tokio's `poll_read`, which marks the socket not ready after a
    /// short read, so the next read waits for readiness instead of making a system
    /// call that would only say `EAGAIN`.
    pub async fn fill(
        &mut self,
        stream: &mut Stream,
        deadline: &mut Deadline<'_>,
    ) -> Result<usize, WaitError> {
        if self.storage.is_empty() {
            wait_readable(stream, deadline).await?;
            // Readiness can be stale (a read that did not end in `EAGAIN`, such as the
            // first request's, leaves it set): a read that finds nothing gives the
            // storage back and waits again, so an idle connection holds no buffer. The
            // `Pending` read cleared the stale readiness; a second one is waited out
            // with the storage, as any read is.
            match poll_fn(|cx| Poll::Ready(self.poll_fill(stream, cx))).await {
                Poll::Ready(read) => return read.map_err(WaitError::Io),
                Poll::Pending => self.release(),
            }
            wait_readable(stream, deadline).await?;
        }
        let read = poll_fn(|cx| self.poll_fill(stream, cx));
        wait(read, deadline).await?.map_err(WaitError::Io)
    }

    /// One read into the spare room, through tokio's `poll_read`.
    fn poll_fill(&mut self, stream: &mut Stream, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let spare = self.spare();
        if spare.is_empty() {
            return Poll::Ready(Err(io::Error::other("read buffer is full")));
        }
        let mut buf = ReadBuf::new(spare);
        let n = match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => buf.filled().len(),
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        self.end = self.end.saturating_add(n).min(self.storage.len());
        Poll::Ready(Ok(n))
    }
}

/// Waits, until `deadline`, for `stream` to have something to read.
async fn wait_readable(stream: &Stream, deadline: &mut Deadline<'_>) -> Result<(), WaitError> {
    let readable = poll_fn(|cx| stream.poll_read_ready(cx));
    wait(readable, deadline).await?.map_err(WaitError::Io)
}

/// Runs `fut` until `deadline`. It is polled once first: only a future that has to wait
/// costs a clock read and a timer.
pub(crate) async fn wait<F: Future>(
    fut: F,
    deadline: &mut Deadline<'_>,
) -> Result<F::Output, WaitError> {
    let mut fut = pin!(fut);
    if let Poll::Ready(out) = poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
        return Ok(out);
    }
    let at = deadline.instant();
    match deadline.timer.as_deref_mut() {
        Some(timer) => timer.run(fut, at).await,
        None => tokio::time::timeout_at(at, fut).await.map_err(|_| WaitError::TimedOut),
    }
}

impl Drop for InBuf {
    fn drop(&mut self) {
        self.start = 0;
        self.end = 0;
        self.release();
    }
}

/// How long reads may wait for their socket: a span that starts at the first wait, or
/// a fixed moment, measured by a fresh tokio timer or by a connection's [`Timer`]. One
/// `Deadline` shared by several reads bounds them together (a request head that
/// arrives in pieces); a new one per read bounds each (a body that must keep moving).
#[derive(Debug)]
pub struct Deadline<'t> {
    span: Duration,
    at: Option<Instant>,
    timer: Option<&'t mut Timer>,
}

impl Deadline<'_> {
    /// `span` from the first wait; the clock is read only if something has to wait.
    pub fn after(span: Duration) -> Deadline<'static> {
        Deadline { span, at: None, timer: None }
    }

    /// At `at`, measured by the connection's `timer`.
    pub fn on(timer: &mut Timer, at: Instant) -> Deadline<'_> {
        Deadline { span: Duration::ZERO, at: Some(at), timer: Some(timer) }
    }

    fn instant(&mut self) -> Instant {
        let span = self.span;
        *self.at.get_or_insert_with(|| later(Instant::now(), span))
    }

    /// For a deadline made by [`Deadline::after`]: when its first wait began, if
    /// anything had to wait.
    pub fn first_wait(&self) -> Option<Instant> {
        self.at.map(|at| at.checked_sub(self.span).unwrap_or(at))
    }
}

/// `span` after `at`, or a day after it if `span` is absurdly long.
pub fn later(at: Instant, span: Duration) -> Instant {
    at.checked_add(span).or_else(|| at.checked_add(Duration::from_secs(86_400))).unwrap_or(at)
}

/// One timer for the waits of a connection, moved as rarely as possible.
///
/// A fresh tokio timer per wait is entered into the timer wheel when the wait starts
/// and taken out when it ends: two trips through the wheel's lock for every request.
/// This one stays in the wheel. A wait whose deadline is later than the timer's only
/// polls it; if the timer fires first, the wait looks at the clock and re-arms it for
/// its own deadline. Waits on one connection mostly run to "now + 60 s" for some
/// recent now, so the timer moves about once a minute instead of twice a request.
pub struct Timer {
    sleep: Pin<Box<Sleep>>,
    /// When the timer fires, if it is in the wheel.
    armed: Option<Instant>,
}

impl Timer {
    pub fn new() -> Timer {
        // Armed on the first wait; until then this deadline is never polled.
        let sleep =
            Box::pin(tokio::time::sleep_until(later(Instant::now(), Duration::from_secs(86_400))));
        Timer { sleep, armed: None }
    }

    /// Runs `fut` until `deadline`.
    async fn run<F: Future>(&mut self, fut: F, deadline: Instant) -> Result<F::Output, WaitError> {
        if self.armed.is_none_or(|armed| deadline < armed) {
            self.arm(deadline);
        }
        let mut fut = pin!(fut);
        loop {
            tokio::select! {
                biased;
                out = fut.as_mut() => return Ok(out),
                () = self.sleep.as_mut() => {
                    self.armed = None;
                    if Instant::now() >= deadline {
                        return Err(WaitError::TimedOut);
                    }
                    self.arm(deadline);
                }
            }
        }
    }

    fn arm(&mut self, at: Instant) {
        self.sleep.as_mut().reset(at);
        self.armed = Some(at);
    }
}

impl Default for Timer {
    fn default() -> Self {
        Timer::new()
    }
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer").field("armed", &self.armed).finish()
    }
}

/// A wait for a socket that did not end in success.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error("{0}")]
    Io(io::Error),
    #[error("timed out")]
    TimedOut,
}

impl WaitError {
    /// As an `io::Error`, for callers that report either the same way.
    pub fn into_io(self) -> io::Error {
        match self {
            WaitError::Io(e) => e,
            WaitError::TimedOut => io::ErrorKind::TimedOut.into(),
        }
    }
}

/// Writes all of `parts` to `stream` (vectored), waiting for room within `stall` of
/// the first wait. Returns how many bytes went out before an error, with it.
pub async fn write_all(
    stream: &Stream,
    parts: &[&[u8]],
    stall: Duration,
) -> Result<(), (u64, WaitError)> {
    write_all_by(stream, parts, &mut Deadline::after(stall)).await
}

/// Writes all of `parts` to `stream` (vectored), waiting for room until `deadline`.
/// Returns how many bytes went out before an error, with it.
///
/// What the socket takes at once is written without a wait; only a socket that is full
/// sends the rest through a future of its own, on the heap, so the exchanges that await
/// this carry no wait state in the common case.
pub async fn write_all_by(
    stream: &Stream,
    parts: &[&[u8]],
    deadline: &mut Deadline<'_>,
) -> Result<(), (u64, WaitError)> {
    let written = write_now(stream, parts, 0).map_err(|(n, e)| (n as u64, WaitError::Io(e)))?;
    write_rest_boxed(stream, parts, written, deadline).await
}

/// [`write_all_by`] for the last bytes before the connection closes. On Linux a TCP
/// socket is told that more follows (`MSG_MORE`), so what the kernel has not sent yet
/// waits for the close and leaves in the same segment as the FIN: one segment less
/// per closing connection for each side's TCP stack. Only for bytes the connection's
/// close or `shutdown` follows at once: nothing else sends them.
pub async fn write_last_by(
    stream: &Stream,
    parts: &[&[u8]],
    deadline: &mut Deadline<'_>,
) -> Result<(), (u64, WaitError)> {
    let written = match try_write_more(stream, parts) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err((0, WaitError::Io(e))),
    };
    write_rest_boxed(stream, parts, written, deadline).await
}

/// What the socket takes now of `parts`, which are the last bytes before the
/// connection closes (see [`write_last_by`]): how far it got, or how far it got before
/// an error.
pub(crate) fn write_now_last(
    stream: &Stream,
    parts: &[&[u8]],
) -> Result<usize, (usize, io::Error)> {
    let written = match try_write_more(stream, parts) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
        Err(e) => return Err((0, e)),
    };
    write_now(stream, parts, written)
}

/// What is left of `parts` after the `written` bytes the socket took at once: nothing
/// when that was all, else written through a future of its own on the heap.
async fn write_rest_boxed(
    stream: &Stream,
    parts: &[&[u8]],
    written: usize,
    deadline: &mut Deadline<'_>,
) -> Result<(), (u64, WaitError)> {
    let total = parts.iter().fold(0usize, |sum, p| sum.saturating_add(p.len()));
    if written >= total {
        return Ok(());
    }
    let rest = Box::pin(write_rest(stream, parts, written, total, deadline));
    rest.await
}

/// One vectored write of `parts` with `MSG_MORE` on a TCP socket (Linux); an ordinary
/// one elsewhere and over TLS.
fn try_write_more(stream: &Stream, parts: &[&[u8]]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    if let Stream::Tcp(tcp) = stream {
        let mut slices = [IoSlice::new(&[]); MAX_PARTS];
        let slices = io_slices(parts, 0, &mut slices);
        return tcp.try_io(tokio::io::Interest::WRITABLE, || {
            socket2::SockRef::from(tcp).send_vectored_with_flags(slices, libc::MSG_MORE)
        });
    }
    try_write_from(stream, parts, 0)
}

/// Writes what the socket takes now of `parts`, from byte `written` on: how far it got,
/// or how far it got before an error.
pub(crate) fn write_now(
    stream: &Stream,
    parts: &[&[u8]],
    mut written: usize,
) -> Result<usize, (usize, io::Error)> {
    let total = parts.iter().fold(0usize, |sum, p| sum.saturating_add(p.len()));
    while written < total {
        match try_write_from(stream, parts, written) {
            Ok(n) => written = written.saturating_add(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err((written, e)),
        }
    }
    Ok(written)
}

/// Writes `parts` from byte `written` to `total`, waiting for room until `deadline`.
async fn write_rest(
    stream: &Stream,
    parts: &[&[u8]],
    mut written: usize,
    total: usize,
    deadline: &mut Deadline<'_>,
) -> Result<(), (u64, WaitError)> {
    while written < total {
        match wait(stream.writable(), deadline).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err((written as u64, WaitError::Io(e))),
            Err(e) => return Err((written as u64, e)),
        }
        written =
            write_now(stream, parts, written).map_err(|(n, e)| (n as u64, WaitError::Io(e)))?;
    }
    Ok(())
}

/// Most parts one vectored write takes: a head, a chunk's size line, its data, its
/// CRLF, and the last chunk with trailers.
const MAX_PARTS: usize = 8;

/// One vectored write of `parts`, skipping the first `skip` bytes.
pub fn try_write_from(stream: &Stream, parts: &[&[u8]], skip: usize) -> io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); MAX_PARTS];
    match io_slices(parts, skip, &mut slices) {
        [one] => stream.try_write(one),
        some => stream.try_write_vectored(some),
    }
}

/// `parts` from byte `skip` on as the slices of one vectored write (at most
/// [`MAX_PARTS`], empty ones left out), in `slices`.
fn io_slices<'a>(
    parts: &[&'a [u8]],
    mut skip: usize,
    slices: &'a mut [IoSlice<'a>; MAX_PARTS],
) -> &'a [IoSlice<'a>] {
    let mut count = 0usize;
    for part in parts {
        if skip >= part.len() {
            skip = skip.saturating_sub(part.len());
            continue;
        }
        let Some(slot) = slices.get_mut(count) else { break };
        *slot = IoSlice::new(part.get(skip..).unwrap_or_default());
        skip = 0;
        count = count.saturating_add(1);
    }
    slices.get(..count).unwrap_or_default()
}

/// Closes without losing the last response: stops writing, then reads and discards
/// what the peer still sends (`buf`'s unread bytes first), for up to `limit`. Closing a
/// socket with unread bytes sends a reset, and a reset can destroy the response before
/// the peer has read it.
pub async fn linger(stream: &mut Stream, buf: &mut InBuf, limit: Duration) {
    stream.shutdown_write();
    let mut deadline = Deadline::after(limit);
    loop {
        buf.consume(buf.len());
        match buf.fill(stream, &mut deadline).await {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

/// Reads and discards `remaining` body bytes within `limit`, so the connection can be
/// reused (after a client left mid-response, after a health check). True when the body
/// ended cleanly: no early end, nothing beyond it.
pub async fn drain(upstream: &mut Stream, mut remaining: u64, limit: Duration) -> bool {
    let mut deadline = Deadline::after(limit);
    let mut buf = InBuf::new(ORIGIN_BUF);
    while remaining > 0 {
        match buf.fill(upstream, &mut deadline).await {
            Ok(n) if n > 0 && n as u64 <= remaining => {
                remaining = remaining.saturating_sub(n as u64);
                buf.consume(n);
            }
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use std::future::{pending, ready};

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn timer_ends_each_wait_at_its_own_deadline() {
        let mut timer = Timer::new();
        let start = Instant::now();
        let timed_out = timer.run(pending::<()>(), start + 10 * SECOND).await;
        assert!(matches!(timed_out, Err(WaitError::TimedOut)));
        assert_eq!(start.elapsed(), 10 * SECOND);
        // A later deadline than the one the timer last had.
        let start = Instant::now();
        assert!(timer.run(pending::<()>(), start + 60 * SECOND).await.is_err());
        assert_eq!(start.elapsed(), 60 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn timer_armed_early_does_not_end_a_later_wait_early() {
        let mut timer = Timer::new();
        let start = Instant::now();
        // This wait arms the timer for +5 s and ends at once; the timer stays armed.
        assert!(timer.run(ready(()), start + 5 * SECOND).await.is_ok());
        // This one runs to +60 s: the timer fires at +5 s, is re-armed, and fires again.
        assert!(timer.run(pending::<()>(), start + 60 * SECOND).await.is_err());
        assert_eq!(start.elapsed(), 60 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn timer_armed_late_is_moved_for_an_earlier_deadline() {
        let mut timer = Timer::new();
        let start = Instant::now();
        assert!(timer.run(ready(()), start + 60 * SECOND).await.is_ok());
        assert!(timer.run(pending::<()>(), start + 2 * SECOND).await.is_err());
        assert_eq!(start.elapsed(), 2 * SECOND);
    }

    #[tokio::test]
    async fn an_idle_wait_holds_no_storage_when_readiness_was_stale() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut stream = Stream::from(listener.accept().await.unwrap().0);
        client.write_all(b"GET").await.unwrap();
        // A read that does not end in EAGAIN (as the first request's) leaves the socket
        // marked readable.
        let mut buf = InBuf::new(CLIENT_BUF);
        loop {
            stream.readable().await.unwrap();
            if buf.try_fill(&stream).is_ok() {
                break;
            }
        }
        buf.consume(3);
        buf.release();
        let waited = buf.fill(&mut stream, &mut Deadline::after(SECOND / 20)).await;
        assert!(matches!(waited, Err(WaitError::TimedOut)));
        assert!(buf.storage.is_empty(), "the idle wait gave its buffer back");
        drop(client);
    }

    #[test]
    fn buffer_keeps_unused_bytes_and_gives_storage_back_only_when_empty() {
        let mut buf = InBuf::new(CLIENT_BUF);
        assert!(buf.is_empty() && !buf.is_full());
        buf.spare()[..5].copy_from_slice(b"hello");
        buf.end += 5;
        buf.consume(2);
        assert_eq!(buf.data(), b"llo");
        buf.release();
        assert_eq!(buf.data(), b"llo", "a buffer with unused bytes keeps its storage");
        buf.consume(3);
        assert!(buf.is_empty());
        buf.release();
        assert!(buf.storage.is_empty());
    }

    #[test]
    fn full_buffer_grows_to_its_limit_and_no_further() {
        let mut buf = InBuf::new(CLIENT_BUF);
        let room = buf.spare().len();
        buf.end += room;
        assert!(buf.is_full());
        assert!(buf.grow(3 * CLIENT_BUF));
        assert_eq!(buf.spare().len(), CLIENT_BUF);
        buf.end += CLIENT_BUF;
        assert!(buf.grow(3 * CLIENT_BUF));
        assert!(!buf.grow(3 * CLIENT_BUF));
        assert_eq!(buf.len(), 2 * CLIENT_BUF);
    }

    #[test]
    fn scratch_buffers_come_back_empty() {
        let mut head = scratch();
        head.extend_from_slice(b"GET / HTTP/1.1\r\n");
        recycle(head);
        let again = scratch();
        assert!(again.is_empty() && again.capacity() == SCRATCH_CAPACITY);
    }
}
