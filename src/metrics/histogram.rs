//! A latency histogram in plain atomics: recording is three relaxed adds, no lock.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds: 100 µs (a request on a pooled
/// loopback connection) up to 60 s (the default header and read timeouts).
const BOUNDS_MICROS: [u64; 18] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// Durations counted into fixed buckets, with their sum.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last one holds everything above the top bound.
    counts: [AtomicU64; BOUNDS_MICROS.len() + 1],
    sum_micros: AtomicU64,
}

/// A [`Histogram`] read at one moment, in the shape Prometheus wants.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    pub sum_seconds: f64,
    pub count: u64,
    /// `(upper bound in seconds, observations in this bucket only)`; the encoder
    /// accumulates them. The last bound is `+Inf`.
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BOUNDS_MICROS.iter().position(|&b| micros <= b).unwrap_or(BOUNDS_MICROS.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(micros, Relaxed);
    }

    /// Reads every bucket. The count is the sum of the buckets, so the two always agree
    /// even while requests are being recorded.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let bounds = BOUNDS_MICROS.iter().map(|&b| b as f64 / 1e6).chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> =
            bounds.zip(&self.counts).map(|(bound, n)| (bound, n.load(Relaxed))).collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum_seconds = self.sum_micros.load(Relaxed) as f64 / 1e6;
        HistogramSnapshot { sum_seconds, count, buckets }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100)); // on a bound: that bucket
        h.observe(Duration::from_micros(101));
        h.observe(Duration::from_secs(120)); // past every bound: +Inf only
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (0.0001, 1));
        assert_eq!(s.buckets[1], (0.00025, 1));
        assert_eq!(s.buckets[BOUNDS_MICROS.len() - 1].1, 0);
        assert_eq!(*s.buckets.last().unwrap(), (f64::INFINITY, 1));
        assert!((s.sum_seconds - 120.000201).abs() < 1e-9);
    }
}
