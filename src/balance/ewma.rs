//! A backend's smoothed response latency, kept in atomics, fading when no samples come.
//!
//! The proxy records each response time here and reports the value through
//! [`Candidate::latency`](super::Candidate::latency); `p2c` weighs backends by it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Without samples the value halves every `HALF_LIFE`.
///
/// A backend that answered slowly once is avoided, so it gets no requests that could show
/// it has recovered; the decay makes it look fast again after a while, it gets a request,
/// and that measures it afresh. 5 s keeps a busy backend's value steady (between requests
/// a few milliseconds apart it loses well under 1%) while a backend left alone after one
/// slow answer is back in play within some tens of seconds.
pub const HALF_LIFE: Duration = Duration::from_secs(5);

/// After this long without a sample the value is forgotten: [`Ewma::get`] returns `None`.
///
/// By then the value is a sixteenth of the last one, too little to say anything about the
/// backend. Reporting a near-zero latency instead would let the backend win every
/// comparison of latency times load until its next answer came back; reported as
/// unmeasured, it is compared by requests in flight like any unmeasured backend.
pub const FORGET_AFTER: Duration = HALF_LIFE.saturating_mul(4);

/// How far one sample below the value moves it towards that sample.
///
/// One fast answer says little while slower ones are still coming, so a drop needs
/// several samples (seven eighths of the gap remains after one, a third after eight);
/// the time decay covers backends that get few samples.
const TOWARDS_LOWER: f64 = 1.0 / 8.0;

/// The stored value before the first sample. No arithmetic on durations yields it: its
/// bits are a NaN.
const EMPTY: u64 = u64::MAX;

/// A smoothed latency that fits in atomics and forgets with time.
///
/// Peak-sensitive: a sample above the current value replaces it at once, so a backend that
/// turns slow is avoided from its first slow answer; a sample below moves the value an
/// eighth of the way down. Between samples the value decays towards zero with a
/// half-life of [`HALF_LIFE`], and after [`FORGET_AFTER`] without samples it is gone.
///
/// # Races
/// `observe` reads the value, then writes the new one and its time as two separate
/// stores, with no lock around them. Two concurrent samples may both start from the same
/// old value, and then one of them is lost: on a backend busy enough for that to happen,
/// the next samples follow within moments. A `get` that runs between the two stores may
/// pair the new value with the previous sample's time, or the reverse, and see the value
/// decayed by the time between the two samples too much or too little; the next read
/// is right again.
#[derive(Debug)]
pub struct Ewma {
    /// The instant that sample times count from.
    base: Instant,
    /// The value at the time of the last sample, in nanoseconds, as `f64` bits; [`EMPTY`]
    /// before the first.
    value_nanos: AtomicU64,
    /// When the last sample came, in nanoseconds since `base`.
    sampled_at_nanos: AtomicU64,
}

impl Ewma {
    /// An `Ewma` with no samples yet. `now` only anchors the clock: any instant at or
    /// before the first sample works.
    pub fn new(now: Instant) -> Ewma {
        Ewma { base: now, value_nanos: AtomicU64::new(EMPTY), sampled_at_nanos: AtomicU64::new(0) }
    }

    /// Adds one response time: taken at once when above the current value, otherwise the
    /// value moves an eighth of the way down to it.
    pub fn observe(&self, sample: Duration, now: Instant) {
        // Through u64: converting a u128 to f64 is a library call, and no latency
        // comes near 2^64 ns.
        let sample = sample.as_nanos() as u64 as f64;
        let value = match self.value_at(now) {
            Some(current) if sample < current => current + (sample - current) * TOWARDS_LOWER,
            _ => sample,
        };
        self.sampled_at_nanos.store(self.since_base(now), Ordering::Relaxed);
        self.value_nanos.store(value.to_bits(), Ordering::Relaxed);
    }

    /// Drops the value, as before the first sample: what was measured no longer says
    /// anything about the backend (it stopped answering, or left service and will come
    /// back as a new process). Until the next sample the balancer compares it by
    /// requests in flight, so it is not held off by a slow answer from before.
    pub fn forget(&self) {
        self.value_nanos.store(EMPTY, Ordering::Relaxed);
    }

    /// The value now, decayed for the time since the last sample; `None` before the
    /// first sample and once [`FORGET_AFTER`] has passed without one.
    pub fn get(&self, now: Instant) -> Option<Duration> {
        self.value_at(now).map(|nanos| Duration::from_nanos(nanos.round() as u64))
    }

    /// The value at `now` in nanoseconds. A `now` before the last sample (a time read
    /// earlier by a slower thread) counts as the time of the sample: the value never grows
    /// by decay.
    fn value_at(&self, now: Instant) -> Option<f64> {
        let bits = self.value_nanos.load(Ordering::Relaxed);
        if bits == EMPTY {
            return None;
        }
        let sampled_at = self.sampled_at_nanos.load(Ordering::Relaxed);
        let elapsed = self.since_base(now).saturating_sub(sampled_at);
        if elapsed > FORGET_AFTER.as_nanos() as u64 {
            return None;
        }
        let half_lives = elapsed as f64 / HALF_LIFE.as_nanos() as u64 as f64;
        Some(f64::from_bits(bits) * decay(half_lives))
    }

    /// Nanoseconds from `base` to `now`; 0 for a `now` before `base`. A `u64` of
    /// nanoseconds lasts 584 years.
    fn since_base(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.base).as_nanos() as u64
    }
}

/// `2^-half_lives`. Under load samples come microseconds apart, where the first-order
/// term is exact to far below a nanosecond of latency and saves an `exp2` per request.
fn decay(half_lives: f64) -> f64 {
    if half_lives < 1e-3 {
        1.0 - half_lives * std::f64::consts::LN_2
    } else {
        (-half_lives).exp2()
    }
}

impl Default for Ewma {
    /// An `Ewma` with no samples, its clock anchored at the current time.
    fn default() -> Ewma {
        Ewma::new(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn assert_near(value: Option<Duration>, expected: Duration) {
        let value = value.expect("a value");
        let error = value.abs_diff(expected).as_secs_f64() / expected.as_secs_f64();
        assert!(error < 0.001, "{value:?} is not {expected:?}");
    }

    #[test]
    fn no_value_before_the_first_sample() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        assert_eq!(ewma.get(start), None);
        assert_eq!(ewma.get(start + ms(100)), None);
        assert_eq!(Ewma::default().get(Instant::now()), None);
    }

    #[test]
    fn first_sample_is_the_value() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        ewma.observe(ms(40), start);
        assert_eq!(ewma.get(start), Some(ms(40)));
    }

    #[test]
    fn higher_sample_is_taken_at_once() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        ewma.observe(ms(40), start);
        ewma.observe(ms(50), start);
        assert_eq!(ewma.get(start), Some(ms(50)));
        ewma.observe(ms(250), start + ms(1));
        assert_eq!(ewma.get(start + ms(1)), Some(ms(250)));
    }

    #[test]
    fn lower_sample_moves_the_value_an_eighth_of_the_way() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        ewma.observe(ms(80), start);
        ewma.observe(ms(16), start);
        assert_eq!(ewma.get(start), Some(ms(72)));
        ewma.observe(ms(16), start);
        assert_eq!(ewma.get(start), Some(ms(65)));
    }

    #[test]
    fn value_halves_after_one_half_life() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        ewma.observe(ms(40), start + ms(3));
        assert_near(ewma.get(start + ms(3) + HALF_LIFE), ms(20));
        assert_near(ewma.get(start + ms(3) + HALF_LIFE * 2), ms(10));
    }

    #[test]
    fn decay_counts_from_the_last_sample() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        ewma.observe(ms(40), start);
        let later = start + HALF_LIFE * 3;
        ewma.observe(ms(30), later);
        assert_eq!(ewma.get(later), Some(ms(30)));
        assert_near(ewma.get(later + HALF_LIFE), ms(15));
    }

    #[test]
    fn lower_sample_starts_from_the_decayed_value() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        ewma.observe(ms(80), start);
        // Decayed to 40 ms, then an eighth of the way down to 8 ms: 36 ms.
        ewma.observe(ms(8), start + HALF_LIFE);
        assert_near(ewma.get(start + HALF_LIFE), ms(36));
    }

    #[test]
    fn value_is_forgotten_after_four_half_lives_without_samples() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        ewma.observe(ms(160), start);
        assert_near(ewma.get(start + FORGET_AFTER), ms(10));
        assert_eq!(ewma.get(start + FORGET_AFTER + ms(1)), None);
        ewma.observe(ms(5), start + FORGET_AFTER + ms(2));
        assert_eq!(ewma.get(start + FORGET_AFTER + ms(2)), Some(ms(5)));
    }

    #[test]
    fn a_forgotten_value_is_gone_and_the_next_sample_starts_afresh() {
        let start = Instant::now();
        let ewma = Ewma::new(start);
        ewma.observe(ms(400), start);
        ewma.forget();
        assert_eq!(ewma.get(start), None);
        // Not a peak over the forgotten 400 ms: the first sample is the value.
        ewma.observe(ms(2), start + ms(10));
        assert_near(ewma.get(start + ms(10)), ms(2));
    }

    #[test]
    fn time_before_the_last_sample_does_not_grow_the_value() {
        let start = Instant::now() + HALF_LIFE;
        let ewma = Ewma::new(start);
        ewma.observe(ms(40), start + ms(10));
        assert_eq!(ewma.get(start), Some(ms(40)));
        assert_eq!(ewma.get(start - HALF_LIFE), Some(ms(40)));
    }

    #[test]
    fn shared_between_threads() {
        fn is_send_sync<T: Send + Sync>() {}
        is_send_sync::<Ewma>();
    }
}
