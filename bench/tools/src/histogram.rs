//! A log-linear latency histogram: fixed memory, under 0.4% error on any percentile.
//!
//! Values (microseconds) below 256 get one bucket each. Above that, every power of two
//! `[2^k, 2^(k+1))` is split into 128 equal buckets, so a bucket is at most 1/128 of its lower
//! bound wide, and reporting its middle keeps the error under 0.4%. The whole `u64` range fits
//! in 7,424 buckets (58 KiB): nothing is clamped and no sample is stored.

use serde::Serialize;

/// Buckets per power of two: `2^MANTISSA_BITS`, see [`bucket_index`].
const MANTISSA_BITS: u32 = 7;
const LINEAR_LIMIT: u64 = 1 << MANTISSA_BITS;
/// Index of the last bucket (`u64::MAX`) plus one.
const BUCKETS: usize = ((64 - MANTISSA_BITS as usize) << MANTISSA_BITS) + LINEAR_LIMIT as usize;

/// Counts of recorded values by bucket, plus the exact count, sum and maximum.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

/// Latency percentiles in microseconds, as the load modes print them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub fn new() -> Self {
        Self { buckets: vec![0; BUCKETS], count: 0, sum: 0, min: u64::MAX, max: 0 }
    }

    pub fn record(&mut self, value: u64) {
        self.buckets[bucket_index(value)] += 1;
        self.count += 1;
        self.sum += u128::from(value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The value at quantile `q` (0.0..=1.0): the middle of the bucket holding the
    /// `ceil(q * count)`-th smallest value, kept within the observed min and max.
    /// Returns 0 when nothing was recorded.
    pub fn value_at_quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_middle(index).clamp(self.min, self.max);
            }
        }
        self.max
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            p50: self.value_at_quantile(0.50),
            p90: self.value_at_quantile(0.90),
            p99: self.value_at_quantile(0.99),
            p999: self.value_at_quantile(0.999),
            max: self.max,
            mean: self.mean(),
        }
    }
}

/// Values below 128 map to themselves. For larger values, `shift` is how many low bits are
/// dropped so that `value >> shift` lies in `128..256`; each shift level owns 128 indexes.
fn bucket_index(value: u64) -> usize {
    if value < LINEAR_LIMIT {
        return value as usize;
    }
    let shift = (63 - value.leading_zeros()) - MANTISSA_BITS;
    ((shift as usize) << MANTISSA_BITS) + (value >> shift) as usize
}

/// The middle value of bucket `index` (the value itself for the exact buckets).
fn bucket_middle(index: usize) -> u64 {
    if index < 2 * LINEAR_LIMIT as usize {
        return index as u64;
    }
    let shift = (index >> MANTISSA_BITS) as u32 - 1;
    let top = (index as u64 & (LINEAR_LIMIT - 1)) | LINEAR_LIMIT;
    let low = top << shift;
    let width = 1u64 << shift;
    low + (width - 1) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within_one_percent(actual: u64, expected: u64) -> bool {
        (actual as f64 - expected as f64).abs() <= expected as f64 * 0.01
    }

    #[test]
    fn percentiles_of_uniform_distribution_within_one_percent() {
        let mut histogram = Histogram::new();
        for value in 1..=1_000_000 {
            histogram.record(value);
        }
        let summary = histogram.summary();
        assert!(within_one_percent(summary.p50, 500_000), "{summary:?}");
        assert!(within_one_percent(summary.p90, 900_000), "{summary:?}");
        assert!(within_one_percent(summary.p99, 990_000), "{summary:?}");
        assert!(within_one_percent(summary.p999, 999_000), "{summary:?}");
        assert_eq!(summary.max, 1_000_000);
        assert!((summary.mean - 500_000.5).abs() < 1e-6);
    }

    #[test]
    fn percentiles_of_spread_values_within_one_percent_up_to_an_hour() {
        // Values from 1 µs to an hour, each magnitude equally likely: every bucket range
        // (exact, small shifts, large shifts) is exercised.
        let mut values: Vec<u64> =
            (0..10_000).map(|i| (3_600_000_000f64.powf(i as f64 / 9_999.0)) as u64).collect();
        let mut histogram = Histogram::new();
        for &value in &values {
            histogram.record(value);
        }
        values.sort_unstable();
        for q in [0.1, 0.5, 0.75, 0.9, 0.99, 0.999] {
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let expected = values[rank - 1];
            let actual = histogram.value_at_quantile(q);
            assert!(within_one_percent(actual, expected), "q={q}: {actual} vs {expected}");
        }
    }

    #[test]
    fn every_value_lands_in_a_bucket_that_contains_it() {
        for value in (0..5_000).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let index = bucket_index(value);
            assert!(index < BUCKETS, "{value}");
            let middle = bucket_middle(index);
            assert!(middle.abs_diff(value) as f64 <= value as f64 / 128.0, "{value} -> {middle}");
        }
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let summary = Histogram::new().summary();
        assert_eq!((summary.p50, summary.max), (0, 0));
        assert_eq!(summary.mean, 0.0);
    }
}
