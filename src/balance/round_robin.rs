//! Round robin: each eligible backend in index order, one request at a time.
//!
//! It looks at nothing but eligibility and weight, so it spreads requests evenly even
//! when backends differ in speed; `least_outstanding` and `p2c` adapt to load instead.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::time::Instant;

use super::{eligible_weight, random, rotation, Candidate, FULL_WEIGHT};

/// The next eligible backend at or after the cursor, which then moves past it.
///
/// A backend of weight w below [`FULL_WEIGHT`] is taken with probability w/`FULL_WEIGHT`;
/// otherwise its turn passes to the next eligible backend, so on average it gets
/// w/`FULL_WEIGHT` of a full backend's picks. When every eligible backend passes its turn
/// that way, the first one in the scan is taken, so a pick never fails while a backend is
/// eligible.
///
/// # Races
/// Concurrent picks each take their own starting position from the cursor
/// (`fetch_add`), so no two start at the same place. A pick that passes over backends moves
/// the cursor by as many more positions; a pick running meanwhile may still start on one
/// of them and take the same backend, which evens out over the following turns.
pub(super) fn pick<C: Candidate>(
    cursor: &AtomicUsize,
    candidates: &[C],
    exclude: &[usize],
    now: Instant,
) -> Option<usize> {
    let mut first_eligible = None;
    for (passed, index) in rotation(cursor, candidates.len())?.enumerate() {
        let Some(weight) = eligible_weight(&candidates[index], index, exclude, now) else {
            continue;
        };
        if weight >= FULL_WEIGHT || random::chance(weight, FULL_WEIGHT) {
            move_past(cursor, passed);
            return Some(index);
        }
        first_eligible.get_or_insert((passed, index));
    }
    let (passed, index) = first_eligible?;
    move_past(cursor, passed);
    Some(index)
}

/// Moves the cursor over the `passed` positions this pick looked at beyond its start.
///
/// Without this, the pick after one that passed over a backend would start on the backend
/// just taken and take it again: the backend after an excluded, down or skipped one would
/// get twice its share.
fn move_past(cursor: &AtomicUsize, passed: usize) {
    if passed > 0 {
        cursor.fetch_add(passed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::{backends, count_picks, FakeBackend};
    use super::super::{random, Balancer, Policy};
    use super::*;

    #[test]
    fn equal_backends_get_exactly_equal_shares() {
        let balancer = Balancer::new(Policy::RoundRobin);
        let group = backends(5);
        assert_eq!(count_picks(&balancer, &group, 5 * 200), [200; 5]);
    }

    #[test]
    fn backends_are_taken_in_index_order() {
        let balancer = Balancer::new(Policy::RoundRobin);
        let group = backends(4);
        let now = Instant::now();
        let mut previous = balancer.pick(&group, &[], now).expect("all up");
        for _ in 0..20 {
            let next = balancer.pick(&group, &[], now).expect("all up");
            assert_eq!(next, (previous + 1) % 4);
            previous = next;
        }
    }

    #[test]
    fn backend_after_a_skipped_one_gets_no_extra_share() {
        let balancer = Balancer::new(Policy::RoundRobin);
        let group = backends(4);
        group[1].weight.set(0);
        let now = Instant::now();
        let mut counts = [0; 4];
        for _ in 0..3 * 100 {
            counts[balancer.pick(&group, &[2], now).expect("0 and 3 are up")] += 1;
        }
        assert_eq!(counts, [150, 0, 0, 150]);
    }

    #[test]
    fn slow_start_backend_gets_its_weight_share() {
        random::reseed(11);
        let balancer = Balancer::new(Policy::RoundRobin);
        let group = backends(4);
        group[2].weight.set(FULL_WEIGHT / 10);
        let counts = count_picks(&balancer, &group, 40_000);
        let full = (counts[0] + counts[1] + counts[3]) as f64 / 3.0;
        let ratio = counts[2] as f64 / full;
        assert!((0.07..0.13).contains(&ratio), "{counts:?}");
        // The passed turns go to all full backends alike, not to the slow one's neighbour.
        for index in [0, 1, 3] {
            let deviation = (counts[index] as f64 - full).abs() / full;
            assert!(deviation < 0.02, "{counts:?}");
        }
    }

    #[test]
    fn group_of_slow_start_backends_always_yields_a_pick() {
        random::reseed(12);
        let balancer = Balancer::new(Policy::RoundRobin);
        let group: Vec<FakeBackend> = (0..3).map(|_| FakeBackend::with_weight(1)).collect();
        let counts = count_picks(&balancer, &group, 3000);
        assert!(counts.iter().all(|&count| (800..1200).contains(&count)), "{counts:?}");
    }
}
