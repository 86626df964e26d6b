//! Power of two choices: draw two eligible backends at random and send the request to the
//! less loaded one.
//!
//! Two looks per pick, whatever the size of the group, and the balancer keeps no state
//! for it: picks on different threads write nothing in common. Comparing two random backends steers
//! requests away from slow or busy backends almost as well as scanning them all, and
//! unlike always taking the single best backend, it does not send every concurrent pick
//! to the same one.

use std::cmp::Ordering;

use tokio::time::Instant;

use super::{eligible_weight, random, Candidate, Load};

/// Random draws a slot gets before falling back to a scan of the whole group. Each draw
/// lands on an eligible backend with the eligible fraction of the group as probability,
/// so four draws almost always succeed when most backends are up; the scan covers groups
/// that are mostly down or excluded.
const DRAW_ATTEMPTS: usize = 4;

/// The better of two distinct eligible backends drawn at random; with one eligible
/// backend, that one.
///
/// Each backend's load is `latency * (outstanding + 1) / weight` when both backends have a
/// measured latency, and `(outstanding + 1) / weight` when either has none (see [`Load`]):
/// a backend nobody has measured yet, or not for a while, is compared by requests in
/// flight alone, so it gets traffic and a fresh measurement. The lower load wins. Ties go
/// to the backend with an idle connection, then to either at random.
pub(super) fn pick<C: Candidate>(
    candidates: &[C],
    exclude: &[usize],
    now: Instant,
) -> Option<usize> {
    let first = draw(candidates, exclude, now, None)?;
    let Some(second) = draw(candidates, exclude, now, Some(first.index)) else {
        return Some(first.index);
    };
    Some(better(candidates, first, second, now))
}

/// A backend drawn for comparison, with the weight read while checking it is eligible.
#[derive(Debug, Clone, Copy)]
struct Drawn {
    index: usize,
    weight: u32,
}

/// An eligible backend other than `taken`, each equally likely; `None` when there is none.
///
/// Tries a few uniform draws over the group and keeps the first eligible one, which is
/// uniform over the eligible backends; after [`DRAW_ATTEMPTS`] misses, scans the group.
fn draw<C: Candidate>(
    candidates: &[C],
    exclude: &[usize],
    now: Instant,
    taken: Option<usize>,
) -> Option<Drawn> {
    // Drawing from one position fewer and stepping over `taken` makes the second backend
    // distinct without a retry; in a group of two it is the other backend at once.
    let positions = candidates.len().checked_sub(usize::from(taken.is_some()))?;
    if positions == 0 {
        return None;
    }
    for _ in 0..DRAW_ATTEMPTS {
        let index = match random::below(positions) {
            position if taken.is_some_and(|taken| position >= taken) => position + 1,
            position => position,
        };
        if let Some(weight) = eligible_weight(&candidates[index], index, exclude, now) {
            return Some(Drawn { index, weight });
        }
    }
    draw_by_scan(candidates, exclude, now, taken)
}

/// An eligible backend other than `taken`, each equally likely, found in one pass.
///
/// Keeps the k-th eligible backend seen with probability 1/k (reservoir sampling), so it
/// needs no count first and cannot disagree with itself when a weight changes mid-scan.
fn draw_by_scan<C: Candidate>(
    candidates: &[C],
    exclude: &[usize],
    now: Instant,
    taken: Option<usize>,
) -> Option<Drawn> {
    let mut seen = 0;
    let mut kept = None;
    for (index, candidate) in candidates.iter().enumerate() {
        if Some(index) == taken {
            continue;
        }
        let Some(weight) = eligible_weight(candidate, index, exclude, now) else {
            continue;
        };
        seen += 1;
        if random::below(seen) == 0 {
            kept = Some(Drawn { index, weight });
        }
    }
    kept
}

/// The index of whichever of `a` and `b` has the lower load; ties go to the one with an
/// idle connection, then to either at random.
fn better<C: Candidate>(candidates: &[C], a: Drawn, b: Drawn, now: Instant) -> usize {
    let (backend_a, backend_b) = (&candidates[a.index], &candidates[b.index]);
    let (outstanding_a, outstanding_b) = (backend_a.outstanding(), backend_b.outstanding());
    let latencies = backend_a.latency(now).zip(backend_b.latency(now));
    let (load_a, load_b) = match latencies {
        Some((latency_a, latency_b)) => (
            Load::timed(latency_a, outstanding_a, a.weight),
            Load::timed(latency_b, outstanding_b, b.weight),
        ),
        None => {
            (Load::in_flight(outstanding_a, a.weight), Load::in_flight(outstanding_b, b.weight))
        }
    };
    match load_a.compare(&load_b) {
        Ordering::Less => a.index,
        Ordering::Greater => b.index,
        // The two were drawn in random order, so when neither or both have an idle
        // connection, taking the second is as fair as tossing a coin.
        Ordering::Equal if backend_a.has_idle() && !backend_b.has_idle() => a.index,
        Ordering::Equal => b.index,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use super::super::fake::{backends, count_picks, FakeBackend};
    use super::super::{Balancer, Policy, FULL_WEIGHT};
    use super::*;

    /// Runs `ticks` ticks of load: each tick, requests that have been in flight for their
    /// backend's service time (in ticks) finish, then `per_tick` new ones are picked and
    /// stay in flight. Returns the picks per backend.
    fn simulate(
        group: &[FakeBackend],
        service_ticks: &[usize],
        per_tick: usize,
        ticks: usize,
    ) -> Vec<usize> {
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        let now = Instant::now();
        let mut picks = vec![0; group.len()];
        // Per backend, the ticks at which its requests in flight finish, earliest first.
        let mut finishing: Vec<VecDeque<usize>> = vec![VecDeque::new(); group.len()];
        for tick in 0..ticks {
            for (backend, queue) in group.iter().zip(&mut finishing) {
                while queue.front().is_some_and(|&done| done <= tick) {
                    queue.pop_front();
                    backend.outstanding.set(backend.outstanding.get() - 1);
                }
            }
            for _ in 0..per_tick {
                let index = balancer.pick(group, &[], now).expect("all up");
                picks[index] += 1;
                group[index].outstanding.set(group[index].outstanding.get() + 1);
                finishing[index].push_back(tick + service_ticks[index]);
            }
        }
        picks
    }

    fn share(picks: &[usize], index: usize) -> f64 {
        picks[index] as f64 / picks.iter().sum::<usize>() as f64
    }

    #[test]
    fn slow_backend_gets_few_picks_under_load() {
        random::reseed(21);
        let group = backends(5);
        let mut service_ticks = [10; 5];
        service_ticks[2] = 100;
        for (backend, &ticks) in group.iter().zip(&service_ticks) {
            backend.latency.set(Some(Duration::from_millis(ticks as u64)));
        }
        let picks = simulate(&group, &service_ticks, 4, 5000);
        // A fair share is 20%; comparing counts alone already cuts it to about 3%, because
        // the slow backend's requests stay in flight ten times as long.
        assert!(share(&picks, 2) < 0.02, "{picks:?}");
        let fast_mean = (picks.iter().sum::<usize>() - picks[2]) as f64 / 4.0;
        for index in [0, 1, 3, 4] {
            let deviation = (picks[index] as f64 - fast_mean).abs() / fast_mean;
            assert!(deviation < 0.1, "{picks:?}");
        }
    }

    #[test]
    fn latency_steers_away_from_a_slow_backend_that_load_alone_would_not() {
        random::reseed(28);
        // One request per tick: the fast backends finish theirs within the tick, so their
        // counts sit at 0 and the slow one's at 0 or 1. Comparing counts alone would give it
        // about 7% of the picks (half of the pairs it is in while idle).
        let group = backends(5);
        let mut service_ticks = [1; 5];
        service_ticks[0] = 10;
        for (backend, &ticks) in group.iter().zip(&service_ticks) {
            backend.latency.set(Some(Duration::from_millis(ticks as u64)));
        }
        let picks = simulate(&group, &service_ticks, 1, 10_000);
        assert!(share(&picks, 0) < 0.01, "{picks:?}");
    }

    #[test]
    fn unmeasured_backends_share_picks_about_evenly() {
        random::reseed(22);
        let picks = count_picks(&Balancer::new(Policy::PowerOfTwoChoices), &backends(5), 10_000);
        assert!(picks.iter().all(|&count| (1700..2300).contains(&count)), "{picks:?}");
    }

    #[test]
    fn slow_start_backend_gets_its_weight_share_under_load() {
        random::reseed(23);
        let group = backends(4);
        group[1].weight.set(FULL_WEIGHT / 10);
        let picks = simulate(&group, &[10; 4], 40, 2000);
        let full = (picks[0] + picks[2] + picks[3]) as f64 / 3.0;
        let ratio = picks[1] as f64 / full;
        assert!((0.05..0.15).contains(&ratio), "{picks:?}");
    }

    #[test]
    fn pair_is_both_backends_in_a_group_of_two() {
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        let group = [FakeBackend::with_outstanding(3), FakeBackend::with_outstanding(2)];
        assert_eq!(count_picks(&balancer, &group, 100), [0, 100]);
    }

    #[test]
    fn lower_latency_times_outstanding_wins() {
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        // 10 ms * (3 + 1) = 40 ms against 30 ms * (0 + 1) = 30 ms.
        let group = [FakeBackend::with_outstanding(3), FakeBackend::up()];
        group[0].latency.set(Some(Duration::from_millis(10)));
        group[1].latency.set(Some(Duration::from_millis(30)));
        assert_eq!(count_picks(&balancer, &group, 100), [0, 100]);
        group[1].outstanding.set(1);
        assert_eq!(count_picks(&balancer, &group, 100), [100, 0]);
    }

    #[test]
    fn unmeasured_backend_is_compared_by_outstanding_alone() {
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        let group = [FakeBackend::with_outstanding(1), FakeBackend::with_outstanding(2)];
        // FakeBackend 1's tiny latency would win a latency comparison; backend 0 has none.
        group[1].latency.set(Some(Duration::from_nanos(1)));
        assert_eq!(count_picks(&balancer, &group, 100), [100, 0]);
    }

    #[test]
    fn tie_goes_to_backend_with_idle_connection() {
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        let group = [FakeBackend::with_outstanding(1), FakeBackend::with_outstanding(1)];
        group[0].idle.set(true);
        assert_eq!(count_picks(&balancer, &group, 100), [100, 0]);
    }

    #[test]
    fn idle_connection_wins_every_tied_pair_it_is_in() {
        random::reseed(24);
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        let group = backends(5);
        group[4].idle.set(true);
        let picks = count_picks(&balancer, &group, 10_000);
        // In 2 of 5 pairs, and it wins each: 40%, against 15% for each of the others.
        assert!((3600..4400).contains(&picks[4]), "{picks:?}");
    }

    #[test]
    fn tie_without_idle_goes_either_way() {
        random::reseed(25);
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        let picks = count_picks(&balancer, &backends(2), 1000);
        assert!(picks.iter().all(|&count| (400..600).contains(&count)), "{picks:?}");
    }

    #[test]
    fn draws_reach_the_whole_of_a_large_group() {
        random::reseed(26);
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        let group = backends(4000);
        let now = Instant::now();
        let mut picked = vec![false; group.len()];
        for _ in 0..100_000 {
            picked[balancer.pick(&group, &[0, 3999], now).expect("all up")] = true;
        }
        assert!(!picked[0] && !picked[3999]);
        // Each other backend is in some pair with near certainty over 100,000 picks.
        assert!(picked[1..3999].iter().filter(|&&was| was).count() > 3950);
    }

    #[test]
    fn scan_draws_evenly_when_most_backends_are_down() {
        random::reseed(27);
        let balancer = Balancer::new(Policy::PowerOfTwoChoices);
        let group: Vec<FakeBackend> = (0..1000).map(|_| FakeBackend::with_weight(0)).collect();
        for index in [10, 500, 990] {
            group[index].weight.set(FULL_WEIGHT);
        }
        let picks = count_picks(&balancer, &group, 3000);
        for index in [10, 500, 990] {
            assert!((800..1200).contains(&picks[index]), "{}", picks[index]);
        }
    }
}
