//! Cheap random numbers for picks: one splitmix64 generator per thread.
//!
//! Balancing needs numbers that spread evenly and cost a few instructions, not ones an
//! attacker cannot predict: nothing here is fit for secrets. A generator per thread means
//! picks on different threads share no state and take no lock.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Splitmix64's increment: the odd integer nearest 2^64 divided by the golden ratio, so
/// successive states are spread over the whole range.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
    /// Its address differs per thread, so threads seeded in the same nanosecond still
    /// get different sequences.
    static THREAD_MARK: u8 = const { 0 };
}

/// A starting state for this thread: where its thread-locals live, plus the wall clock.
fn seed() -> u64 {
    let address = THREAD_MARK.with(|mark| std::ptr::from_ref(mark).addr()) as u64;
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    mix(address ^ nanos.rotate_left(32))
}

/// Splitmix64's output function: scrambles the state so that states one `GAMMA` apart
/// give unrelated numbers.
fn mix(state: u64) -> u64 {
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The next 64 random bits of this thread's sequence.
fn next_u64() -> u64 {
    STATE.with(|state| {
        let next = state.get().wrapping_add(GAMMA);
        state.set(next);
        mix(next)
    })
}

/// A number in `0..bound`; `bound` must be above 0.
///
/// Scales 64 random bits to the range by multiplying (Lemire's method) instead of taking a
/// remainder, which costs a division. The bias is below `bound` / 2^64, far too small to
/// show for groups of any real size.
pub(super) fn below(bound: usize) -> usize {
    debug_assert!(bound > 0, "an empty range has no numbers");
    ((u128::from(next_u64()) * bound as u128) >> 64) as usize
}

/// True with probability `numerator / denominator`.
pub(super) fn chance(numerator: u32, denominator: u32) -> bool {
    below(denominator as usize) < numerator as usize
}

/// Restarts this thread's sequence, so a statistical test sees the same numbers on every
/// run.
#[cfg(test)]
pub(super) fn reseed(seed: u64) {
    STATE.with(|state| state.set(seed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_reaches_every_value() {
        reseed(1);
        let mut seen = [0usize; 7];
        for _ in 0..7000 {
            seen[below(7)] += 1;
        }
        assert!(seen.iter().all(|&count| (800..1200).contains(&count)), "{seen:?}");
    }

    #[test]
    fn chance_matches_its_fraction() {
        reseed(3);
        let hits = (0..10_000).filter(|_| chance(10, 100)).count();
        assert!((850..1150).contains(&hits), "{hits}");
        assert!((0..1000).all(|_| !chance(0, 100) && chance(100, 100)));
    }

    #[test]
    fn threads_start_from_different_states() {
        let here = next_u64();
        let there = std::thread::spawn(next_u64).join().expect("thread ran");
        assert_ne!(here, there);
    }
}
