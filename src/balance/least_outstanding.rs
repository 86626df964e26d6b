//! Least outstanding: the eligible backend with the fewest requests in flight for its
//! weight.
//!
//! It scans every backend on every pick, so its cost grows with the group; for groups of
//! hundreds of backends `p2c` gets most of the benefit for two looks.

use std::cmp::Ordering as Order;
use std::sync::atomic::AtomicUsize;

use tokio::time::Instant;

use super::{eligible_weight, rotation, Candidate, Load};

/// The eligible backend with the lowest `(outstanding + 1) / weight` (see [`Load`]).
///
/// Ties go to a backend with an idle connection, which saves the new request a connect.
/// Among backends still tied, the scan takes the first it meets, and each pick starts the
/// scan one position further on (the cursor), so ties rotate over the group instead of
/// always landing on the lowest index. When all eligible backends tie, as in a quiet group,
/// that spreads picks exactly evenly; when other backends sit between the tied ones, a tied
/// backend gets the turns of the backends just before it as well, which evens out as soon
/// as the picked backend's own count goes up.
///
/// # Races
/// Counts change while the scan reads them, so two concurrent picks may both see the
/// same backend as least loaded and both take it. Each difference is one request and is
/// corrected on the next picks.
pub(super) fn pick<C: Candidate>(
    cursor: &AtomicUsize,
    candidates: &[C],
    exclude: &[usize],
    now: Instant,
) -> Option<usize> {
    let mut best: Option<Best> = None;
    for index in rotation(cursor, candidates.len())? {
        let candidate = &candidates[index];
        let Some(weight) = eligible_weight(candidate, index, exclude, now) else {
            continue;
        };
        let load = Load::in_flight(candidate.outstanding(), weight);
        let Some(best) = &mut best else {
            best = Some(Best { index, load, idle: None });
            continue;
        };
        match load.compare(&best.load) {
            Order::Less => *best = Best { index, load, idle: None },
            Order::Equal if !best.has_idle(candidates) && candidate.has_idle() => {
                *best = Best { index, load, idle: Some(true) };
            }
            Order::Equal | Order::Greater => {}
        }
    }
    best.map(|best| best.index)
}

/// The least loaded backend found so far.
struct Best {
    index: usize,
    load: Load,
    /// Its `has_idle()`, asked only once a tie needs it.
    idle: Option<bool>,
}

impl Best {
    fn has_idle<C: Candidate>(&mut self, candidates: &[C]) -> bool {
        *self.idle.get_or_insert_with(|| candidates[self.index].has_idle())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::{backends, count_picks, FakeBackend};
    use super::super::{Balancer, Policy, FULL_WEIGHT};
    use super::*;

    fn outstanding(counts: &[usize]) -> Vec<FakeBackend> {
        counts.iter().map(|&count| FakeBackend::with_outstanding(count)).collect()
    }

    #[test]
    fn backend_with_fewest_outstanding_is_picked() {
        let balancer = Balancer::new(Policy::LeastOutstanding);
        let group = outstanding(&[4, 2, 7, 1, 3]);
        assert_eq!(count_picks(&balancer, &group, 20), [0, 0, 0, 20, 0]);
    }

    #[test]
    fn outstanding_is_scaled_by_weight() {
        let balancer = Balancer::new(Policy::LeastOutstanding);
        let now = Instant::now();
        // A backend at a tenth of full weight with nothing in flight counts as a full
        // backend with 9 in flight: (0 + 1) / 10 = (9 + 1) / 100.
        let group = [FakeBackend::with_outstanding(8), FakeBackend::with_weight(FULL_WEIGHT / 10)];
        assert_eq!(balancer.pick(&group, &[], now), Some(0));
        group[0].outstanding.set(10);
        assert_eq!(balancer.pick(&group, &[], now), Some(1));
    }

    #[test]
    fn tie_goes_to_backend_with_idle_connection() {
        let balancer = Balancer::new(Policy::LeastOutstanding);
        let group = outstanding(&[2, 2, 2, 2, 2]);
        group[3].idle.set(true);
        assert_eq!(count_picks(&balancer, &group, 50), [0, 0, 0, 50, 0]);
    }

    #[test]
    fn idle_connection_does_not_beat_fewer_outstanding() {
        let balancer = Balancer::new(Policy::LeastOutstanding);
        let group = outstanding(&[2, 1, 2]);
        group[0].idle.set(true);
        group[2].idle.set(true);
        assert_eq!(count_picks(&balancer, &group, 30), [0, 30, 0]);
    }

    #[test]
    fn ties_without_idle_spread_evenly_over_a_quiet_group() {
        let balancer = Balancer::new(Policy::LeastOutstanding);
        assert_eq!(count_picks(&balancer, &backends(5), 5 * 40), [40; 5]);
    }

    #[test]
    fn ties_reach_every_tied_backend() {
        let balancer = Balancer::new(Policy::LeastOutstanding);
        let group = outstanding(&[1, 0, 0, 3, 0, 5]);
        let counts = count_picks(&balancer, &group, 600);
        assert_eq!([counts[0], counts[3], counts[5]], [0, 0, 0], "{counts:?}");
        assert!([1, 2, 4].iter().all(|&i| counts[i] >= 100), "{counts:?}");
    }

    #[test]
    fn picks_follow_outstanding_as_it_changes() {
        let balancer = Balancer::new(Policy::LeastOutstanding);
        let group = backends(3);
        let now = Instant::now();
        // Each pick adds a request that never finishes: the counts must stay level.
        for _ in 0..30 {
            let index = balancer.pick(&group, &[], now).expect("all up");
            group[index].outstanding.set(group[index].outstanding.get() + 1);
        }
        let counts: Vec<usize> = group.iter().map(|backend| backend.outstanding.get()).collect();
        assert_eq!(counts, [10, 10, 10]);
    }
}
