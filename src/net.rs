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

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Storage size of a client connection's read buffer: request heads and the start of
/// request bodies. Larger heads grow it (up to `max_request_header_bytes`).
pub const CLIENT_BUF: usize = 8 * 1024;
/// Storage size of the buffer an upstream response is read into: one read takes up to
/// this much of a large body, so a 50 kB response needs one or two reads.
pub const UPSTREAM_BUF: usize = 64 * 1024;

/// Buffers of each size kept per thread for reuse (at most 4 MiB of 64 kB buffers).
const CACHED_BUFFERS: usize = 64;

thread_local! {
    static CACHE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Storage of `size` bytes, from this thread's cache when it has one.
fn take_storage(size: usize) -> Vec<u8> {
    let cached = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let i = c.iter().rposition(|b| b.len() == size)?;
        Some(c.swap_remove(i))
    });
    cached.unwrap_or_else(|| vec![0; size])
}

fn give_storage(storage: Vec<u8>) {
    if storage.len() != CLIENT_BUF && storage.len() != UPSTREAM_BUF {
        return;
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let same = c.iter().filter(|b| b.len() == storage.len()).count();
        if same < CACHED_BUFFERS {
            c.push(storage);
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
        &self.storage[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Marks the first `n` bytes of `data()` as used.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n;
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
        self.storage.resize((len * 2).min(limit), 0);
        true
    }

    /// Room to read into: moves unused bytes to the front when that makes room.
    fn spare(&mut self) -> &mut [u8] {
        if self.storage.is_empty() {
            self.storage = take_storage(self.size);
        }
        if self.end == self.storage.len() && self.start > 0 {
            self.storage.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.storage[self.end..]
    }

    /// One read from `stream`, waiting within `limit` for something to arrive.
    /// `Ok(0)` is end of stream; a full buffer must be consumed or grown first.
    ///
    /// Reads go through tokio's `poll_read`, which marks the socket not ready after a
    /// short read, so the next read waits for readiness instead of making a system
    /// call that would only say `EAGAIN`.
    pub async fn fill(&mut self, stream: &mut TcpStream, limit: Limit) -> Result<usize, WaitError> {
        let spare = self.spare();
        if spare.is_empty() {
            return Err(WaitError::Io(io::Error::other("read buffer is full")));
        }
        let mut read = pin!(poll_fn(|cx| {
            let mut buf = ReadBuf::new(&mut *spare);
            match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len())),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        }));
        // Only a read that has to wait needs the clock and a timer.
        let first = poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
        let n = match first {
            Poll::Ready(result) => result.map_err(WaitError::Io)?,
            Poll::Pending => match tokio::time::timeout_at(limit.deadline(), read).await {
                Ok(result) => result.map_err(WaitError::Io)?,
                Err(_) => return Err(WaitError::TimedOut),
            },
        };
        self.end += n;
        Ok(n)
    }
}

impl Drop for InBuf {
    fn drop(&mut self) {
        self.start = 0;
        self.end = 0;
        self.release();
    }
}

/// How long a read or write may wait for its socket.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// This long from when the wait starts.
    Stall(Duration),
    /// Until this moment.
    Until(Instant),
}

impl Limit {
    pub fn deadline(self) -> Instant {
        match self {
            Limit::Stall(d) => Instant::now() + d,
            Limit::Until(t) => t,
        }
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

/// Writes all of `parts` to `stream` (vectored), waiting up to `stall` each time the
/// socket has no room. Returns how many bytes went out before an error, with it.
pub async fn write_all(
    stream: &TcpStream,
    parts: &[&[u8]],
    stall: Duration,
) -> Result<(), (u64, WaitError)> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut written = 0;
    while written < total {
        match try_write_from(stream, parts, written) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(stall, stream.writable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err((written as u64, WaitError::Io(e))),
                    Err(_) => return Err((written as u64, WaitError::TimedOut)),
                }
            }
            Err(e) => return Err((written as u64, WaitError::Io(e))),
        }
    }
    Ok(())
}

/// One vectored write of `parts`, skipping the first `skip` bytes.
fn try_write_from(stream: &TcpStream, parts: &[&[u8]], mut skip: usize) -> io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); 4];
    let mut count = 0;
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        if count == slices.len() {
            break;
        }
        slices[count] = IoSlice::new(&part[skip..]);
        skip = 0;
        count += 1;
    }
    match count {
        1 => stream.try_write(&slices[0]),
        _ => stream.try_write_vectored(&slices[..count]),
    }
}
