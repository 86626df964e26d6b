//! Upstream failures, logged by kind rather than one line per request.
//!
//! In an outage every request fails the same way: an operator needs the first failure
//! at once, then how many followed, not a thousand identical lines a second. Failures
//! are keyed by upstream, backend (none when no backend could take the request) and
//! reason. The first failure of a key is written at once; later ones within [`WINDOW`]
//! of the key's last line are only counted. The count, with the latest failure's
//! message, is written by the next failure after the window, or by [`flush`], which
//! the server calls every [`WINDOW`], whichever comes first. So a key writes at most one
//! line per window, every failure is counted in exactly one line's `count`, and the
//! count a burst ends on is written within two windows of it.
//!
//! Client mistakes are not recorded here (the proxy logs them at debug), and the
//! success path never touches this module: its lock is taken only when a request
//! fails.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How often a key may write a line.
pub const WINDOW: Duration = Duration::from_secs(1);

/// The failures of the whole process: log lines are process-wide too.
static FAILURES: Mutex<Failures> = Mutex::new(Failures::new());

/// One failed request, as the proxy saw it.
#[derive(Clone, Copy)]
pub struct Failure<'a> {
    pub upstream: &'a Arc<str>,
    /// The backend that failed; `None` when no backend could take the request.
    pub backend: Option<SocketAddr>,
    /// A stable snake_case name (`connect_refused`, `queue_full`, ...).
    pub reason: &'static str,
    /// The status the client got (or, when the response body failed, had been sent).
    pub status: u16,
    pub message: &'a dyn fmt::Display,
}

/// Records a failure of `upstream`'s `backend` (`None`: no backend could take the
/// request) for `reason`, for which the client got `status`, and writes its line when
/// one is due (see the module docs).
pub fn record(
    upstream: &Arc<str>,
    backend: Option<SocketAddr>,
    reason: &'static str,
    status: u16,
    message: &dyn fmt::Display,
) {
    let failure = Failure { upstream, backend, reason, status, message };
    let line = lock().record(failure, Instant::now());
    if let Some(line) = line {
        line.write();
    }
}

/// Writes the counts of keys whose window has passed since their last line; the
/// server calls it every [`WINDOW`] so that the count a burst ends on is not lost.
pub fn flush() {
    let lines = lock().due(Instant::now());
    for line in &lines {
        line.write();
    }
}

/// Writes every count not yet written, window or not (when the server stops).
pub fn flush_all() {
    let lines = lock().drain();
    for line in &lines {
        line.write();
    }
}

fn lock() -> std::sync::MutexGuard<'static, Failures> {
    // Nothing panics while holding it; if something did, the tallies are still sound.
    FAILURES.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    upstream: Arc<str>,
    backend: Option<SocketAddr>,
    reason: &'static str,
}

/// What a key has seen since its last line.
#[derive(Debug)]
struct Tally {
    /// When the key's last line was written; `None`: never, so the next is due.
    written: Option<Instant>,
    /// Failures since then.
    count: u64,
    /// The latest of them.
    status: u16,
    message: String,
}

/// One line to write: `count` failures of one key, with the latest one's status and
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub upstream: Arc<str>,
    pub backend: Option<SocketAddr>,
    pub reason: &'static str,
    pub status: u16,
    pub count: u64,
    pub message: String,
}

impl Line {
    /// Writes the line at WARN; `backend` is left out when there is none. The target is
    /// the request path's, where these failures happen, so filters written for it
    /// (`RUST_LOG=holdfast::proxy=...`) keep them.
    fn write(&self) {
        let Line { upstream, backend, reason, status, count, message } = self;
        match backend {
            Some(backend) => tracing::warn!(
                target: "holdfast::proxy",
                upstream = %upstream, backend = %backend, reason = %reason, status, count,
                "{message}"
            ),
            None => tracing::warn!(
                target: "holdfast::proxy",
                upstream = %upstream, reason = %reason, status, count, "{message}"
            ),
        }
    }
}

/// The tallies, and when each key's line is due; time comes in as an argument.
#[derive(Debug)]
pub struct Failures {
    keys: BTreeMap<Key, Tally>,
}

impl Default for Failures {
    fn default() -> Self {
        Failures::new()
    }
}

impl Failures {
    pub const fn new() -> Failures {
        Failures { keys: BTreeMap::new() }
    }

    /// Counts `failure`; returns the line to write now, if one is due: for the first
    /// failure of its key, or the first after the key's window has passed (carrying the
    /// failures counted meanwhile).
    pub fn record(&mut self, failure: Failure<'_>, now: Instant) -> Option<Line> {
        let key = Key {
            upstream: Arc::clone(failure.upstream),
            backend: failure.backend,
            reason: failure.reason,
        };
        let tally = self.keys.entry(key.clone()).or_insert_with(|| Tally {
            written: None,
            count: 0,
            status: failure.status,
            message: String::new(),
        });
        tally.count = tally.count.saturating_add(1);
        tally.status = failure.status;
        tally.message.clear();
        // Writing to a String cannot fail.
        let _ = write!(tally.message, "{}", failure.message);
        if !is_due(tally, now) {
            return None;
        }
        tally.written = Some(now);
        Some(take(&key, tally))
    }

    /// Lines for the keys whose window has passed with failures counted; keys with
    /// nothing counted and a passed window are forgotten (their next failure is written
    /// at once, as it would be anyway).
    pub fn due(&mut self, now: Instant) -> Vec<Line> {
        let mut lines = Vec::new();
        self.keys.retain(|key, tally| {
            if !is_due(tally, now) {
                return true;
            }
            if tally.count == 0 {
                return false;
            }
            tally.written = Some(now);
            lines.push(take(key, tally));
            true
        });
        lines
    }

    /// Lines for every key with failures counted, window or not.
    pub fn drain(&mut self) -> Vec<Line> {
        let keys = std::mem::take(&mut self.keys);
        keys.into_iter()
            .filter(|(_, tally)| tally.count > 0)
            .map(|(key, mut tally)| take(&key, &mut tally))
            .collect()
    }
}

/// The key's window has passed since its last line.
fn is_due(tally: &Tally, now: Instant) -> bool {
    tally.written.is_none_or(|written| now.saturating_duration_since(written) >= WINDOW)
}

/// The line for what `tally` counted; the count starts again from 0.
fn take(key: &Key, tally: &mut Tally) -> Line {
    let line = Line {
        upstream: Arc::clone(&key.upstream),
        backend: key.backend,
        reason: key.reason,
        status: tally.status,
        count: tally.count,
        message: std::mem::take(&mut tally.message),
    };
    tally.count = 0;
    line
}

#[cfg(test)]
mod tests;
