//! Counts finished exchanges per fixed interval since the start of a run (`mixed`'s timeline),
//! so a stall or a wave of errors shows where it happened, not just in the totals.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

#[derive(Debug)]
pub struct Timeline {
    start: Instant,
    interval: Duration,
    duration: Duration,
    ok: Vec<AtomicU64>,
    errors: Vec<AtomicU64>,
}

/// One interval: counts of exchanges that finished in `[t_s - interval, t_s)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimelineEntry {
    /// End of the interval, seconds since the start of the run.
    pub t_s: f64,
    pub ok: u64,
    pub errors: u64,
}

impl Timeline {
    /// One interval per `interval` of `duration` (the last may be shorter).
    pub fn new(start: Instant, interval: Duration, duration: Duration) -> Self {
        let intervals = intervals_in(duration, interval).max(1);
        Self {
            start,
            interval,
            duration,
            ok: (0..intervals).map(|_| AtomicU64::new(0)).collect(),
            errors: (0..intervals).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts an exchange that finished at `finished`. Exchanges still in flight at the end
    /// of the run finish a little later and count in the last interval, so the entries
    /// always add up to the totals.
    pub fn record(&self, finished: Instant, is_ok: bool) {
        let elapsed = finished.saturating_duration_since(self.start);
        let index = usize::try_from(elapsed.as_nanos() / self.interval.as_nanos().max(1))
            .unwrap_or(usize::MAX)
            .min(self.ok.len() - 1);
        let counter = if is_ok { &self.ok[index] } else { &self.errors[index] };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn entries(&self) -> Vec<TimelineEntry> {
        (0..self.ok.len())
            .map(|i| TimelineEntry {
                t_s: self.interval_end(i).as_secs_f64(),
                ok: self.ok[i].load(Ordering::Relaxed),
                errors: self.errors[i].load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Seconds-since-start at which interval `index` ends.
    fn interval_end(&self, index: usize) -> Duration {
        let count = u32::try_from(index + 1).unwrap_or(u32::MAX);
        self.interval.saturating_mul(count).min(self.duration)
    }
}

/// How many intervals it takes to cover `span` (rounded up).
fn intervals_in(span: Duration, interval: Duration) -> usize {
    usize::try_from(span.as_nanos().div_ceil(interval.as_nanos().max(1))).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn exchanges_land_in_the_interval_they_finished_in() {
        let start = Instant::now();
        let timeline = Timeline::new(start, Duration::from_secs(1), Duration::from_millis(2_500));
        timeline.record(start + Duration::from_millis(500), true);
        timeline.record(start + Duration::from_millis(1_500), false);
        timeline.record(start + Duration::from_secs(60), true);
        let entries = timeline.entries();
        let counts: Vec<(u64, u64)> = entries.iter().map(|e| (e.ok, e.errors)).collect();
        assert_eq!(counts, [(1, 0), (0, 1), (1, 0)]);
        let ends: Vec<f64> = entries.iter().map(|e| e.t_s).collect();
        assert_eq!(ends, [1.0, 2.0, 2.5]);
    }
}
