//! What the proxy counts about itself, kept in plain atomics on the objects they
//! describe (one [`BackendMetrics`] per server, one [`UpstreamMetrics`] per group) and
//! read only when someone asks: `export` turns them, with each pool's own
//! `PoolStats`, into Prometheus text for the admin listener.
//!
//! Metrics observe; nothing on the request path reads them to decide anything.

pub mod export;
pub mod histogram;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

pub use histogram::{Histogram, HistogramSnapshot};

/// Status classes, in the order [`ClassCounts`] keeps them.
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Responses counted by status class.
#[derive(Debug, Default)]
pub struct ClassCounts([AtomicU64; 5]);

impl ClassCounts {
    pub fn record(&self, status: u16) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.0[class].fetch_add(1, Relaxed);
    }

    /// Counts in the order of [`STATUS_CLASSES`].
    pub fn snapshot(&self) -> [u64; 5] {
        std::array::from_fn(|i| self.0[i].load(Relaxed))
    }

    pub fn total(&self) -> u64 {
        self.snapshot().iter().sum()
    }
}

/// Failures counted by a short reason name. Failures are rare, so a lock on this
/// path costs nothing that matters, and the set of reasons stays open.
#[derive(Debug, Default)]
pub struct ReasonCounts(Mutex<Vec<(&'static str, u64)>>);

impl ReasonCounts {
    pub fn record(&self, reason: &'static str) {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match counts.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => counts.push((reason, 1)),
        }
    }

    /// Every reason seen so far with its count, sorted by reason.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        counts.sort_unstable();
        counts
    }

    pub fn get(&self, reason: &str) -> u64 {
        self.snapshot().iter().find(|(r, _)| *r == reason).map_or(0, |(_, n)| *n)
    }
}

/// One kind of response holdfast made itself: for which group (`None`: before a
/// route was found), why, and with which status.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AnswerKey {
    pub upstream: Option<Arc<str>>,
    pub reason: &'static str,
    pub status: u16,
}

/// Every response holdfast made itself instead of relaying an origin's, across all
/// listeners: the 502/503/504 of an upstream failure, the 4xx of a refused request.
/// Answers are rare, so a lock here costs nothing that matters.
#[derive(Debug, Default)]
pub struct Answers {
    counts: Mutex<Vec<(AnswerKey, u64)>>,
    /// Requests refused before routing, by the rule they broke (finer than the
    /// answers' reason: `bad_framing`, `bad_host`, ...).
    pub refusals: ReasonCounts,
}

impl Answers {
    pub fn record(&self, upstream: Option<&Arc<str>>, reason: &'static str, status: u16) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let found = counts.iter_mut().find(|(k, _)| {
            k.reason == reason
                && k.status == status
                && k.upstream.as_deref() == upstream.map(|u| &**u)
        });
        match found {
            Some((_, n)) => *n += 1,
            None => {
                let key = AnswerKey { upstream: upstream.cloned(), reason, status };
                counts.push((key, 1));
            }
        }
    }

    /// Every kind of answer so far with its count, sorted.
    pub fn snapshot(&self) -> Vec<(AnswerKey, u64)> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner()).clone();
        counts.sort_unstable();
        counts
    }
}

/// Counters and latencies of one server of an upstream group. Connection counts
/// (opened, closed, idle, active, queue) live in the server's pool, connect times in
/// its `OriginPool`.
#[derive(Debug, Default)]
pub struct BackendMetrics {
    /// Responses clients got for requests sent to this server, holdfast's own
    /// 502/503/504 included.
    pub responses: ClassCounts,
    /// Requests sent on a connection taken from the idle pool.
    pub sent_reused: AtomicU64,
    /// Requests sent on a connection opened for them.
    pub sent_new: AtomicU64,
    /// Requests sent again on a new connection after a pooled one failed under them.
    pub retries: AtomicU64,
    /// Requests that failed on a pooled connection after they may have reached the
    /// origin, and were answered 502 instead of being sent again.
    pub not_replayed: AtomicU64,
    /// Requests sent to another server of the group after this one failed them (a
    /// failed connect, or a failure before any response byte of an idempotent request).
    pub failovers: AtomicU64,
    /// Times this server was taken out of service (passive ejection or failed checks).
    pub ejections: AtomicU64,
    /// Requests holdfast answered itself, by reason (`connect_refused`, ...).
    pub errors: ReasonCounts,
    /// From asking the pool for a connection to the response head.
    pub header: Histogram,
    /// From asking the pool for a connection to the end of the response body.
    pub response: Histogram,
}

impl BackendMetrics {
    pub fn count_sent(&self, reused: bool) {
        let counter = if reused { &self.sent_reused } else { &self.sent_new };
        counter.fetch_add(1, Relaxed);
    }
}

/// Counters of one upstream group as its clients see it.
#[derive(Debug, Default)]
pub struct UpstreamMetrics {
    /// Every response to a client of this group, including refused requests that
    /// never reached a server.
    pub requests: ClassCounts,
    /// From the request head arriving to the end of the response to the client.
    pub duration: Histogram,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_count_by_class_with_odd_codes_clamped() {
        let c = ClassCounts::default();
        for status in [101, 200, 204, 302, 404, 502, 599, 99, 600] {
            c.record(status);
        }
        assert_eq!(c.snapshot(), [2, 2, 1, 1, 3]);
        assert_eq!(c.total(), 9);
    }

    #[test]
    fn answers_count_by_group_reason_and_status() {
        let answers = Answers::default();
        let app: Arc<str> = Arc::from("app");
        answers.record(Some(&app), "connect_refused", 502);
        answers.record(Some(&app), "connect_refused", 502);
        answers.record(None, "bad_request", 400);
        answers.record(Some(&app), "connect_timeout", 504);
        let snap = answers.snapshot();
        let find =
            |reason| snap.iter().find(|(k, _)| k.reason == reason).map(|(k, n)| (k.clone(), *n));
        assert_eq!(find("connect_refused").map(|(k, n)| (k.status, n)), Some((502, 2)));
        assert_eq!(find("bad_request").map(|(k, _)| k.upstream), Some(None));
        assert_eq!(snap.iter().map(|(_, n)| n).sum::<u64>(), 4);
    }

    #[test]
    fn reasons_count_separately_and_sort() {
        let r = ReasonCounts::default();
        r.record("header_timeout");
        r.record("connect_refused");
        r.record("header_timeout");
        assert_eq!(r.snapshot(), vec![("connect_refused", 1), ("header_timeout", 2)]);
        assert_eq!(r.get("header_timeout"), 2);
        assert_eq!(r.get("closed"), 0);
    }
}
