//! Bytes held for a peer that takes them slower than they come: memory first, then a
//! temporary file, within bounds per exchange and for the whole process.
//!
//! A [`Spool`] is a queue of bytes: pushed at the back as the origin sends them, taken
//! from the front as the client takes them, in order. Up to
//! [`SpoolConfig::memory_per_exchange`] bytes stay in memory; past that they go to a
//! temporary file (unlinked when it is made, so nothing is left behind whatever
//! happens to the process), up to [`SpoolConfig::file_per_exchange`]. Every spool draws
//! on one [`Spools`] budget: memory and file bytes in use across all exchanges are
//! bounded by [`SpoolConfig::memory_total`] and [`SpoolConfig::file_total`]. A push that
//! would pass a bound is refused whole ([`Full`]); the caller then waits for its client
//! instead, as if there were no spool.
//!
//! File writes run on tokio's blocking threads, a chunk of [`FILE_CHUNK`] bytes at a
//! time, so a disk that stalls (writeback throttling) stalls the exchange that wrote,
//! not the worker thread and every connection on it. Reads back are small and come
//! from the page cache the writes just filled; they run inline.
//!
//! It knows bytes, files and budgets; not HTTP, clients or origins.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::metrics::{Family, Report, Writer, NO_LABELS};

/// Bytes written to the file in one go: large enough that a file costs one
/// blocking-thread hand-off per 32 KiB, small enough that the tail waiting to be
/// written holds little memory.
pub const FILE_CHUNK: usize = 32 * 1024;

/// Bytes read back from the file at a time: what a client that has fallen behind takes
/// in one go, held only while it does.
pub const READ_CHUNK: usize = 16 * 1024;

/// File writes in progress at once, across all spools: enough to keep a disk busy,
/// few enough that the threads doing them leave the CPU to the workers.
pub const WRITERS: usize = 4;

/// The bounds of spooling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolConfig {
    /// Bytes one exchange keeps in memory before it uses a file.
    pub memory_per_exchange: usize,
    /// Bytes one exchange may write to its file (0: no file, memory only).
    pub file_per_exchange: u64,
    /// Memory all spools together may hold.
    pub memory_total: u64,
    /// File bytes all spools together may hold; `None`: half the space free in `dir`
    /// when holdfast starts, at most [`MAX_DEFAULT_FILE_TOTAL`] (1 GiB when the free
    /// space cannot be read), so spooling never fills a disk other programs write to.
    pub file_total: Option<u64>,
    /// Where temporary files are made.
    pub dir: PathBuf,
}

/// Default [`SpoolConfig::memory_per_exchange`]: 32 KiB, what nginx's `proxy_buffers 8
/// 4k` hold in memory per response on most systems. Most responses a slow client reads
/// are smaller and never touch a file.
pub const DEFAULT_MEMORY_PER_EXCHANGE: usize = 32 * 1024;

/// Default [`SpoolConfig::file_per_exchange`]: 1 GiB, nginx's
/// `proxy_max_temp_file_size`. A larger response streams at its client's pace past it.
pub const DEFAULT_FILE_PER_EXCHANGE: u64 = 1024 * 1024 * 1024;

/// Default [`SpoolConfig::memory_total`]: 64 MiB, a thousand exchanges' worth of
/// [`DEFAULT_MEMORY_PER_EXCHANGE`] and a file chunk each at once. Past it, a spool
/// takes nothing more and its exchange waits for its client.
pub const DEFAULT_MEMORY_TOTAL: u64 = 64 * 1024 * 1024;

/// The most [`SpoolConfig::file_total`] defaults to, whatever the disk has free.
pub const MAX_DEFAULT_FILE_TOTAL: u64 = 16 * 1024 * 1024 * 1024;

impl SpoolConfig {
    /// The bound on file bytes in force: [`SpoolConfig::file_total`], or what it
    /// defaults to now.
    pub fn file_total_now(&self) -> u64 {
        self.file_total.unwrap_or_else(|| {
            free_bytes(&self.dir)
                .map_or(DEFAULT_FILE_PER_EXCHANGE, |free| (free / 2).min(MAX_DEFAULT_FILE_TOTAL))
        })
    }
}

impl Default for SpoolConfig {
    fn default() -> Self {
        SpoolConfig {
            memory_per_exchange: DEFAULT_MEMORY_PER_EXCHANGE,
            file_per_exchange: DEFAULT_FILE_PER_EXCHANGE,
            memory_total: DEFAULT_MEMORY_TOTAL,
            file_total: None,
            dir: default_dir(),
        }
    }
}

/// Where temporary files go by default: `$TMPDIR` when set, else `/var/tmp`, which is on
/// disk on every common distribution, where `/tmp` is often a tmpfs (memory).
pub fn default_dir() -> PathBuf {
    match std::env::var_os("TMPDIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from("/var/tmp"),
    }
}

/// Bytes free for an unprivileged writer on the file system of `dir`.
#[cfg(target_os = "linux")]
fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(dir).ok()?;
    stat.blocks_available().checked_mul(stat.fragment_size())
}

#[cfg(not(target_os = "linux"))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

/// The process-wide budget every spool draws on, and what spooling has done.
#[derive(Debug)]
pub struct Spools {
    config: SpoolConfig,
    /// Turns to write to a file: [`WRITERS`] at a time.
    writers: tokio::sync::Semaphore,
    /// [`SpoolConfig::file_total`] as resolved when the budget was made.
    file_total: u64,
    memory: AtomicU64,
    file: AtomicU64,
    stats: SpoolCounts,
}

#[derive(Debug, Default)]
struct SpoolCounts {
    /// Exchanges that spooled at least one byte.
    used: AtomicU64,
    /// Exchanges that wrote to a file.
    files: AtomicU64,
    memory_bytes: AtomicU64,
    file_bytes: AtomicU64,
    /// Pushes refused at a bound: the exchange waited for its client instead.
    full: AtomicU64,
    /// Temporary files that could not be made, written or read.
    errors: AtomicU64,
}

/// A push was refused: it would pass a bound of the exchange or of the process (or
/// the temporary file failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// The exchange's own bound: its memory and file bytes, `memory_per_exchange` and
    /// `file_per_exchange`.
    #[error("more than one exchange may hold ({0} bytes)")]
    Exchange(u64),
    /// The bound on all exchanges together, or a temporary file that failed.
    #[error("holdfast's buffers are full")]
    Process,
}

impl Spools {
    pub fn new(config: SpoolConfig) -> Arc<Spools> {
        Arc::new(Spools {
            writers: tokio::sync::Semaphore::new(WRITERS),
            file_total: config.file_total_now(),
            config,
            memory: AtomicU64::new(0),
            file: AtomicU64::new(0),
            stats: SpoolCounts::default(),
        })
    }

    /// An empty spool for bytes that will come to about `expected` in all, when that is
    /// known: past what an exchange keeps in memory, they go to the file from the
    /// first byte, so a spool whose client never reads holds no memory at all.
    pub fn spool_for(self: &Arc<Self>, expected: Option<u64>) -> Spool {
        let mut spool = self.spool();
        let memory = self.config.memory_per_exchange as u64;
        spool.file_first = expected.is_some_and(|n| n > memory);
        spool
    }

    /// An empty spool; it takes nothing until bytes are pushed.
    pub fn spool(self: &Arc<Self>) -> Spool {
        Spool {
            spools: Arc::clone(self),
            front: Vec::new(),
            head: 0,
            file: None,
            tail: Vec::new(),
            len: 0,
            memory_held: 0,
            counted: false,
            broken: false,
            file_first: false,
        }
    }

    /// Memory held by spools now.
    pub fn memory_in_use(&self) -> u64 {
        self.memory.load(Relaxed)
    }

    /// File bytes held by spools now.
    pub fn file_in_use(&self) -> u64 {
        self.file.load(Relaxed)
    }

    /// Takes `n` bytes of `counter` under `limit`; false (and nothing taken) past it.
    fn take(counter: &AtomicU64, n: u64, limit: u64) -> bool {
        counter
            .fetch_update(Relaxed, Relaxed, |used| used.checked_add(n).filter(|t| *t <= limit))
            .is_ok()
    }

    fn give(counter: &AtomicU64, n: u64) {
        let _ = counter.fetch_update(Relaxed, Relaxed, |used| Some(used.saturating_sub(n)));
    }

    /// The `/status` view.
    pub fn status(&self) -> Value {
        let c = &self.config;
        json!({
            "dir": c.dir.display().to_string(),
            "memory_per_exchange": c.memory_per_exchange,
            "file_per_exchange": c.file_per_exchange,
            "memory_total": c.memory_total,
            "file_total": self.file_total,
            "memory_in_use": self.memory_in_use(),
            "file_in_use": self.file_in_use(),
        })
    }

    /// The counts now, for `/metrics`.
    pub fn snapshot(&self) -> SpoolSnapshot {
        let s = &self.stats;
        SpoolSnapshot {
            used: s.used.load(Relaxed),
            files: s.files.load(Relaxed),
            memory_bytes: s.memory_bytes.load(Relaxed),
            file_bytes: s.file_bytes.load(Relaxed),
            full: s.full.load(Relaxed),
            errors: s.errors.load(Relaxed),
            memory_in_use: self.memory_in_use(),
            file_in_use: self.file_in_use(),
            memory_total: self.config.memory_total,
            file_total: self.file_total,
        }
    }
}

/// The temporary file of one spool: its unread bytes are `read_at..write_at`.
struct SpoolFile {
    file: Arc<File>,
    read_at: u64,
    write_at: u64,
}

/// One exchange's queue of bytes: `front[head..]`, then the file's unread bytes, then
/// `tail` (bytes bound for the file, not written yet). Once bytes are in the file or
/// the tail, new bytes go to the tail, so order is kept.
pub struct Spool {
    spools: Arc<Spools>,
    front: Vec<u8>,
    head: usize,
    file: Option<SpoolFile>,
    tail: Vec<u8>,
    /// Unread bytes in all three.
    len: u64,
    /// Memory taken from the budget: the capacity of `front` and `tail`.
    memory_held: u64,
    /// This exchange was counted as one that spooled.
    counted: bool,
    /// A file write failed: no more bytes go to the file.
    broken: bool,
    /// Bytes go to the file even while the front has room (see [`Spools::spool_for`]).
    file_first: bool,
}

impl Spool {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Unread bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes in the file now (written and not yet read back).
    fn file_unread(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.write_at.saturating_sub(f.read_at))
    }

    /// Appends `parts`: all of them, or nothing ([`Full`]).
    pub async fn push(&mut self, parts: &[&[u8]]) -> Result<(), Full> {
        let n = parts.iter().fold(0usize, |sum, p| sum.saturating_add(p.len()));
        if n == 0 {
            return Ok(());
        }
        let in_memory = !self.file_first && self.file_unread() == 0 && self.tail.is_empty();
        let unread_front = self.front.len().saturating_sub(self.head);
        let fits = unread_front.saturating_add(n) <= self.spools.config.memory_per_exchange;
        if in_memory && fits && self.grow_front(n) {
            for part in parts {
                self.front.extend_from_slice(part);
            }
            self.pushed(n, false);
            return Ok(());
        }
        self.push_to_file(parts, n).await
    }

    /// Room in `front` for `n` more bytes, taking the memory it needs from the budget;
    /// unread bytes move to the start first. False when the budget is spent.
    fn grow_front(&mut self, n: usize) -> bool {
        if self.head > 0 {
            self.front.drain(..self.head.min(self.front.len()));
            self.head = 0;
        }
        let need = self.front.len().saturating_add(n);
        if need <= self.front.capacity() {
            return true;
        }
        let capacity = need.next_power_of_two().max(4096);
        let more = capacity.saturating_sub(self.front.capacity()) as u64;
        if !Spools::take(&self.spools.memory, more, self.spools.config.memory_total) {
            return false;
        }
        self.memory_held = self.memory_held.saturating_add(more);
        self.front.reserve_exact(capacity.saturating_sub(self.front.len()));
        self.sync_memory();
        true
    }

    /// Brings the memory taken from the budget in line with what `front` and `tail`
    /// hold (an allocator may give more than asked, a read back may grow the front).
    fn sync_memory(&mut self) {
        let now = self.front.capacity().saturating_add(self.tail.capacity()) as u64;
        if now > self.memory_held {
            self.spools.memory.fetch_add(now.saturating_sub(self.memory_held), Relaxed);
        } else {
            Spools::give(&self.spools.memory, self.memory_held.saturating_sub(now));
        }
        self.memory_held = now;
    }

    /// Appends `parts` (`n` bytes) behind what the file holds: into the tail, which is
    /// written out once it holds [`FILE_CHUNK`] bytes.
    async fn push_to_file(&mut self, parts: &[&[u8]], n: usize) -> Result<(), Full> {
        let spools = Arc::clone(&self.spools);
        let config = &spools.config;
        let written = self.file.as_ref().map_or(0, |f| f.write_at);
        let after = written.saturating_add(self.tail.len() as u64).saturating_add(n as u64);
        if self.broken {
            return Err(self.full(Full::Process));
        }
        if config.file_per_exchange == 0 || after > config.file_per_exchange {
            let bound =
                (config.memory_per_exchange as u64).saturating_add(config.file_per_exchange);
            return Err(self.full(Full::Exchange(bound)));
        }
        if self.tail.capacity() == 0 {
            let chunk = FILE_CHUNK as u64;
            if !Spools::take(&self.spools.memory, chunk, config.memory_total) {
                return Err(self.full(Full::Process));
            }
            self.memory_held = self.memory_held.saturating_add(chunk);
            self.tail = Vec::with_capacity(FILE_CHUNK);
            self.sync_memory();
        }
        if self.file.is_none() {
            match make_file(&config.dir) {
                Ok(file) => {
                    self.file = Some(SpoolFile { file: Arc::new(file), read_at: 0, write_at: 0 });
                    self.spools.stats.files.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    self.broken = true;
                    self.failed(&e, "could not make a temporary file");
                    return Err(Full::Process);
                }
            }
        }
        // What the tail holds goes out first when the new bytes would overflow it, so
        // that a failed write leaves the new bytes the caller's.
        if !self.tail.is_empty()
            && self.tail.len().saturating_add(n) > FILE_CHUNK
            && !self.flush_tail().await
        {
            return Err(Full::Process);
        }
        if !Spools::take(&spools.file, n as u64, spools.file_total) {
            return Err(self.full(Full::Process));
        }
        for part in parts {
            self.tail.extend_from_slice(part);
        }
        self.sync_memory();
        self.pushed(n, true);
        if self.tail.len() >= FILE_CHUNK {
            // Should the write fail, the bytes stay in the tail, readable from memory.
            self.flush_tail().await;
        }
        Ok(())
    }

    /// Writes the tail at the end of the file, on a blocking thread.
    async fn write_tail(&mut self) -> io::Result<()> {
        let Some(file) = self.file.as_mut() else { return Ok(()) };
        let tail = std::mem::take(&mut self.tail);
        let (handle, at) = (Arc::clone(&file.file), file.write_at);
        // A few writes at a time: each runs on a thread of its own, and hundreds of
        // spools writing at once would take the CPU from the workers serving clients.
        let _turn = self.spools.writers.acquire().await.map_err(io::Error::other)?;
        let job = tokio::task::spawn_blocking(move || {
            let written = handle.write_all_at(&tail, at);
            (tail, written)
        });
        let (mut tail, written) = job.await.map_err(io::Error::other)?;
        if written.is_ok() {
            file.write_at = file.write_at.saturating_add(tail.len() as u64);
            tail.clear();
        }
        self.tail = tail;
        written
    }

    /// Writes the tail to the file; false when that failed, and then nothing more goes
    /// to this file (the tail keeps its bytes).
    async fn flush_tail(&mut self) -> bool {
        match self.write_tail().await {
            Ok(()) => true,
            Err(e) => {
                self.broken = true;
                self.failed(&e, "could not write a temporary file");
                false
            }
        }
    }

    /// The exchange's producer is done: the tail goes to the file and its memory back
    /// to the budget, so a spool that waits long for its client holds little memory.
    pub async fn settle(&mut self) {
        let unwritten = self.file.is_some() && !self.tail.is_empty() && !self.broken;
        if unwritten && !self.flush_tail().await {
            return;
        }
        if self.tail.is_empty() {
            self.tail = Vec::new();
            self.sync_memory();
        }
    }

    /// The next unread bytes in memory; empty only when the spool is. Reads the next
    /// chunk back from the file, or moves the tail to the front, when the front is
    /// used up.
    pub fn front(&mut self) -> io::Result<&[u8]> {
        if self.head >= self.front.len() && self.len > 0 {
            self.refill()?;
        }
        Ok(self.front.get(self.head..).unwrap_or_default())
    }

    /// Fills the empty front from the file, or else from the tail.
    fn refill(&mut self) -> io::Result<()> {
        self.front.clear();
        self.head = 0;
        let unread = self.file_unread();
        let Some(file) = self.file.as_mut().filter(|_| unread > 0) else {
            std::mem::swap(&mut self.front, &mut self.tail);
            // Bytes in the tail were taken from the file budget when pushed.
            Spools::give(&self.spools.file, self.front.len() as u64);
            return Ok(());
        };
        let n = usize::try_from(unread).unwrap_or(usize::MAX).min(READ_CHUNK);
        self.front.resize(n, 0);
        let read = file.file.read_exact_at(&mut self.front, file.read_at);
        if let Err(e) = read {
            self.front.clear();
            self.spools.stats.errors.fetch_add(1, Relaxed);
            self.sync_memory();
            return Err(e);
        }
        file.read_at = file.read_at.saturating_add(n as u64);
        if file.read_at >= file.write_at {
            // All read back: the file starts over, and its bytes leave the budget and
            // the disk.
            Spools::give(&self.spools.file, file.write_at);
            file.read_at = 0;
            file.write_at = 0;
            let _ = file.file.set_len(0);
        }
        self.sync_memory();
        Ok(())
    }

    /// Marks the first `n` bytes of [`Spool::front`] as taken.
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.front.len().saturating_sub(self.head));
        self.head = self.head.saturating_add(n);
        self.len = self.len.saturating_sub(n as u64);
        if self.len == 0 {
            self.front.clear();
            self.head = 0;
        }
    }

    /// Gives back the memory of a spool that is empty now (its file stays open: a spool
    /// empties and fills again as its client catches up and falls behind).
    pub fn shrink(&mut self) {
        if self.len == 0 {
            self.front = Vec::new();
            self.tail = Vec::new();
            self.head = 0;
            self.sync_memory();
        }
    }

    fn pushed(&mut self, n: usize, to_file: bool) {
        self.len = self.len.saturating_add(n as u64);
        let stats = &self.spools.stats;
        if !std::mem::replace(&mut self.counted, true) {
            stats.used.fetch_add(1, Relaxed);
        }
        let counter = if to_file { &stats.file_bytes } else { &stats.memory_bytes };
        counter.fetch_add(n as u64, Relaxed);
    }

    fn full(&self, why: Full) -> Full {
        self.spools.stats.full.fetch_add(1, Relaxed);
        why
    }

    fn failed(&self, e: &io::Error, what: &str) {
        self.spools.stats.errors.fetch_add(1, Relaxed);
        let dir = self.spools.config.dir.display();
        tracing::warn!(dir = %dir, error = %e, "{what}; the exchange waits for its client instead");
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        Spools::give(&self.spools.memory, self.memory_held);
        // The file's bytes since it last started over, and the tail's, were taken from
        // the file budget.
        let in_file = self.file.as_ref().map_or(0, |f| f.write_at);
        Spools::give(&self.spools.file, in_file.saturating_add(self.tail.len() as u64));
        // Closing a file of many megabytes frees its pages in the closing thread: on a
        // blocking thread, not the worker.
        if let (Some(file), Ok(runtime)) = (self.file.take(), tokio::runtime::Handle::try_current())
        {
            if in_file > FILE_CHUNK as u64 {
                runtime.spawn_blocking(move || drop(file));
            }
        }
    }
}

/// A new temporary file in `dir`, already unlinked: `O_TMPFILE` where the file system
/// has it, else a file made and removed at once.
fn make_file(dir: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    #[cfg(target_os = "linux")]
    {
        let tmp = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(dir);
        if let Ok(file) = tmp {
            return Ok(file);
        }
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("holdfast-spool-{}-{}", std::process::id(), NEXT.fetch_add(1, Relaxed));
    let path = dir.join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// Spooling counts at one moment, for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpoolSnapshot {
    used: u64,
    files: u64,
    memory_bytes: u64,
    file_bytes: u64,
    full: u64,
    errors: u64,
    memory_in_use: u64,
    file_in_use: u64,
    memory_total: u64,
    file_total: u64,
}

static USED: Family = Family {
    name: "holdfast_spooled_exchanges",
    help: "Exchanges that held bytes for a client slower than its origin (response buffering, request buffering), so the upstream connection could be released before the client was done.",
};
static FILES: Family = Family {
    name: "holdfast_spool_files",
    help: "Exchanges whose spool went past its memory and used a temporary file.",
};
static BYTES: Family = Family {
    name: "holdfast_spooled_bytes",
    help: "Bytes spooled, by where they were kept (memory or file).",
};
static FULL: Family = Family {
    name: "holdfast_spool_full",
    help: "Times a spool could take no more (its per-exchange or the process-wide bound): the exchange waited for its client instead.",
};
static ERRORS: Family = Family {
    name: "holdfast_spool_errors",
    help: "Temporary files that could not be made, written or read.",
};
static IN_USE: Family = Family {
    name: "holdfast_spool_bytes",
    help: "Bytes spools hold now, by where (memory or file).",
};
static LIMIT: Family = Family {
    name: "holdfast_spool_limit_bytes",
    help: "The process-wide bound on spooled bytes, by where (memory or file).",
};

impl Report for SpoolSnapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        out.counter(&USED, [(NO_LABELS, self.used)])?;
        out.counter(&FILES, [(NO_LABELS, self.files)])?;
        out.counter(
            &BYTES,
            [([("kept", "memory")], self.memory_bytes), ([("kept", "file")], self.file_bytes)],
        )?;
        out.counter(&FULL, [(NO_LABELS, self.full)])?;
        out.counter(&ERRORS, [(NO_LABELS, self.errors)])?;
        out.gauge(
            &IN_USE,
            [([("kept", "memory")], self.memory_in_use), ([("kept", "file")], self.file_in_use)],
        )?;
        out.gauge(
            &LIMIT,
            [([("kept", "memory")], self.memory_total), ([("kept", "file")], self.file_total)],
        )
    }
}

#[cfg(test)]
mod tests;
