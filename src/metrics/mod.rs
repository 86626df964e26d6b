//! The building blocks of what holdfast counts about itself, and the exporter that
//! shows it. Counting is plain atomics ([`ClassCounts`], [`Histogram`]) or a small lock
//! for rare events ([`ReasonCounts`]), kept on the objects they describe by the
//! components that own them (`upstream::BackendMetrics`, `proxy::answers::Answers`,
//! ...), each with its families' names and help beside it. At scrape time a plain
//! snapshot of them writes itself through `export`'s [`Writer`] into Prometheus text
//! for the admin listener.
//!
//! This module knows no component: they depend on it, never the other way.
//! Metrics observe; nothing on the request path reads them to decide anything.

pub mod export;
pub mod histogram;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

pub use export::{Family, Report, Writer, NO_LABELS};
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
