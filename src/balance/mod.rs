//! Picks which backend of an upstream group gets the next request.
//!
//! Pure: the balancer reads each backend through [`Candidate`] and takes the time as an
//! argument; it opens no sockets and keeps no per-backend state. A pick runs on every
//! request, so it allocates nothing, takes no lock, and touches at most one shared atomic
//! (the round-robin cursor) besides what the candidates read.
//!
//! Each policy lives in its own file: `round_robin`, `least_outstanding`, `p2c`.
//! `ewma` holds the smoothed latency a backend reports through [`Candidate::latency`].

pub mod ewma;
mod least_outstanding;
mod p2c;
mod random;
mod round_robin;

use std::cmp::Ordering;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tokio::time::Instant;

pub use ewma::Ewma;

/// Which rule picks a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Each backend in turn.
    RoundRobin,
    /// The backend with the fewest requests in flight.
    LeastOutstanding,
    /// The better of two backends drawn at random, by latency and requests in flight.
    #[default]
    PowerOfTwoChoices,
}

impl Policy {
    /// Every policy, in the order the parse error lists them.
    const ALL: [Policy; 3] =
        [Policy::RoundRobin, Policy::LeastOutstanding, Policy::PowerOfTwoChoices];

    /// The policy named by a config value: "round_robin", "least_outstanding" or "p2c".
    /// The error names the valid values.
    pub fn parse(text: &str) -> Result<Policy, String> {
        Policy::ALL.into_iter().find(|policy| policy.as_str() == text).ok_or_else(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|policy| policy.as_str()).collect();
            format!("unknown balance policy {text:?}: expected one of {}", names.join(", "))
        })
    }

    /// The config value that names this policy; [`Policy::parse`] reads it back.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round_robin",
            Policy::LeastOutstanding => "least_outstanding",
            Policy::PowerOfTwoChoices => "p2c",
        }
    }
}

/// Full weight: a backend in normal service.
///
/// Weights below it come from backends being re-admitted after an ejection (slow start):
/// a backend with weight w gets about w/`FULL_WEIGHT` of the share a full-weight backend
/// gets. Round robin gives it exactly that on average. Least outstanding and p2c divide
/// its load by w/`FULL_WEIGHT` instead, so it follows the load: it gets no requests while
/// its peers carry fewer than about `FULL_WEIGHT`/w each, and nears its share as they
/// carry many times that (with w = 10: about half of it at 20 each, 90% at 100).
/// Weight 0: never picked.
pub const FULL_WEIGHT: u32 = 100;

/// What the balancer reads about each backend (implemented by the proxy's `Backend`).
pub trait Candidate {
    /// 0 (down: never picked) ..= [`FULL_WEIGHT`]. Larger values count as `FULL_WEIGHT`.
    fn weight(&self, now: Instant) -> u32;
    /// Requests in flight on this backend now.
    fn outstanding(&self) -> usize;
    /// Smoothed response latency, `None` when nothing was measured recently.
    fn latency(&self, now: Instant) -> Option<Duration>;
    /// Whether an idle pooled connection to it is ready now (a request there saves a
    /// connect).
    fn has_idle(&self) -> bool;
}

/// One group's balancer: its policy and the state it keeps between picks (the
/// round-robin position).
#[derive(Debug)]
pub struct Balancer {
    policy: Policy,
    /// Where the next round-robin turn starts; least outstanding rotates the start of its
    /// scan with it. Only ever incremented; positions are taken modulo the group size.
    cursor: AtomicUsize,
}

impl Balancer {
    /// A balancer for one upstream group.
    ///
    /// The cursor starts at a random position, so proxies started together do not all send
    /// their first requests to the same backend.
    pub fn new(policy: Policy) -> Balancer {
        Balancer { policy, cursor: AtomicUsize::new(random::below(usize::MAX)) }
    }

    /// The index in `candidates` of the backend for the next request, skipping the indices
    /// in `exclude` (backends that already failed this request) and backends of weight 0;
    /// `None` when no backend may be picked.
    pub fn pick<C: Candidate>(
        &self,
        candidates: &[C],
        exclude: &[usize],
        now: Instant,
    ) -> Option<usize> {
        match self.policy {
            Policy::RoundRobin => round_robin::pick(&self.cursor, candidates, exclude, now),
            Policy::LeastOutstanding => {
                least_outstanding::pick(&self.cursor, candidates, exclude, now)
            }
            Policy::PowerOfTwoChoices => p2c::pick(candidates, exclude, now),
        }
    }

    /// The next of `len` backends in turn, skipping the indices in `exclude`, whatever
    /// their health: for a group in panic (see `upstream::UpstreamState::choose`), where health
    /// no longer decides; `None` when every backend is excluded.
    pub fn pick_ignoring_health(&self, len: usize, exclude: &[usize]) -> Option<usize> {
        let open = (0..len).filter(|i| !exclude.contains(i)).count();
        if open == 0 {
            return None;
        }
        let turn = self.cursor.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % open;
        (0..len).filter(|i| !exclude.contains(i)).nth(turn)
    }
}

/// Every index of `len` backends once, starting at the cursor's next position and
/// wrapping around, so that successive picks start their scans at successive backends;
/// `None` when there are no backends.
fn rotation(cursor: &AtomicUsize, len: usize) -> Option<impl Iterator<Item = usize>> {
    if len == 0 {
        return None;
    }
    let start = cursor.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % len;
    Some((start..len).chain(0..start))
}

/// The weight of the backend at `index` when it may take this request: not in `exclude`
/// and weight above 0. Weights above [`FULL_WEIGHT`] are capped, so the policies' share
/// arithmetic holds whatever a `Candidate` reports.
fn eligible_weight<C: Candidate>(
    candidate: &C,
    index: usize,
    exclude: &[usize],
    now: Instant,
) -> Option<u32> {
    // `exclude` holds the one or two backends that failed this request, so a linear
    // search is the cheapest test.
    if exclude.contains(&index) {
        return None;
    }
    match candidate.weight(now) {
        0 => None,
        weight => Some(weight.min(FULL_WEIGHT)),
    }
}

/// What sending one more request to a backend costs, as compared between backends: `cost`
/// divided by `weight`, so a backend at a tenth of full weight looks ten times as loaded.
#[derive(Debug, Clone, Copy)]
struct Load {
    cost: u128,
    /// 1 ..= `FULL_WEIGHT`.
    weight: u32,
}

impl Load {
    /// Requests in flight, counting the one being placed: `outstanding + 1`. The `+ 1`
    /// makes weight count on an idle backend too.
    fn in_flight(outstanding: usize, weight: u32) -> Load {
        Load { cost: outstanding as u128 + 1, weight }
    }

    /// Latency in nanoseconds times `outstanding + 1`: roughly how long the new request
    /// waits behind those in flight.
    fn timed(latency: Duration, outstanding: usize, weight: u32) -> Load {
        let in_flight = Load::in_flight(outstanding, weight).cost;
        Load { cost: latency.as_nanos().saturating_mul(in_flight), weight }
    }

    /// Orders `self.cost / self.weight` against `other.cost / other.weight`. Multiplying
    /// across instead of dividing keeps it exact, so equal loads tie exactly and reach the
    /// tie-breaks.
    fn compare(&self, other: &Load) -> Ordering {
        let this = self.cost.saturating_mul(u128::from(other.weight));
        let that = other.cost.saturating_mul(u128::from(self.weight));
        this.cmp(&that)
    }
}

/// A backend the tests control: every field is what the balancer will read.
#[cfg(test)]
mod fake {
    use std::cell::Cell;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Balancer, Candidate, FULL_WEIGHT};

    #[derive(Debug)]
    pub struct FakeBackend {
        pub weight: Cell<u32>,
        pub outstanding: Cell<usize>,
        pub latency: Cell<Option<Duration>>,
        pub idle: Cell<bool>,
    }

    impl FakeBackend {
        /// Full weight, nothing in flight, no latency measured, no idle connection.
        pub fn up() -> FakeBackend {
            FakeBackend {
                weight: Cell::new(FULL_WEIGHT),
                outstanding: Cell::new(0),
                latency: Cell::new(None),
                idle: Cell::new(false),
            }
        }

        pub fn with_weight(weight: u32) -> FakeBackend {
            let backend = FakeBackend::up();
            backend.weight.set(weight);
            backend
        }

        pub fn with_outstanding(outstanding: usize) -> FakeBackend {
            let backend = FakeBackend::up();
            backend.outstanding.set(outstanding);
            backend
        }
    }

    impl Candidate for FakeBackend {
        fn weight(&self, _now: Instant) -> u32 {
            self.weight.get()
        }
        fn outstanding(&self) -> usize {
            self.outstanding.get()
        }
        fn latency(&self, _now: Instant) -> Option<Duration> {
            self.latency.get()
        }
        fn has_idle(&self) -> bool {
            self.idle.get()
        }
    }

    pub fn backends(count: usize) -> Vec<FakeBackend> {
        (0..count).map(|_| FakeBackend::up()).collect()
    }

    /// How many of `picks` picks each backend got, with nothing excluded and no backend's
    /// state changing between picks.
    pub fn count_picks(balancer: &Balancer, backends: &[FakeBackend], picks: usize) -> Vec<usize> {
        let now = Instant::now();
        let mut counts = vec![0; backends.len()];
        for _ in 0..picks {
            let index = balancer.pick(backends, &[], now).expect("a backend is eligible");
            counts[index] += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{backends, FakeBackend};
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for policy in Policy::ALL {
            assert_eq!(Policy::parse(policy.as_str()), Ok(policy));
        }
        assert_eq!(Policy::parse("p2c"), Ok(Policy::PowerOfTwoChoices));
    }

    #[test]
    fn unknown_policy_error_lists_valid_names() {
        let error = Policy::parse("random").unwrap_err();
        assert!(error.contains("\"random\""), "{error}");
        assert!(error.contains("round_robin, least_outstanding, p2c"), "{error}");
    }

    #[test]
    fn default_policy_is_power_of_two_choices() {
        assert_eq!(Policy::default(), Policy::PowerOfTwoChoices);
        assert_eq!(Policy::default(), Policy::PowerOfTwoChoices);
    }

    #[test]
    fn excluded_and_down_backends_are_never_picked() {
        for policy in Policy::ALL {
            let balancer = Balancer::new(policy);
            let group = backends(6);
            group[4].weight.set(0);
            let exclude = [1, 3];
            let now = Instant::now();
            let mut counts = [0; 6];
            for _ in 0..3000 {
                counts[balancer.pick(&group, &exclude, now).expect("0, 2 and 5 are up")] += 1;
            }
            assert_eq!([counts[1], counts[3], counts[4]], [0, 0, 0], "{policy:?}: {counts:?}");
            assert!([0, 2, 5].iter().all(|&i| counts[i] > 0), "{policy:?}: {counts:?}");
        }
    }

    #[test]
    fn no_pick_when_nothing_is_eligible() {
        let now = Instant::now();
        let down = [FakeBackend::with_weight(0), FakeBackend::with_weight(0)];
        let mixed = [FakeBackend::up(), FakeBackend::with_weight(0), FakeBackend::up()];
        for policy in Policy::ALL {
            let balancer = Balancer::new(policy);
            assert_eq!(balancer.pick::<FakeBackend>(&[], &[], now), None, "{policy:?}: empty");
            assert_eq!(balancer.pick(&backends(2), &[0, 1], now), None, "{policy:?}: excluded");
            assert_eq!(balancer.pick(&down, &[], now), None, "{policy:?}: down");
            assert_eq!(balancer.pick(&mixed, &[0, 2], now), None, "{policy:?}: mixed");
        }
    }

    #[test]
    fn only_eligible_backend_among_thousands_is_always_picked() {
        let now = Instant::now();
        let group: Vec<FakeBackend> = (0..3000).map(|_| FakeBackend::with_weight(0)).collect();
        group[1234].weight.set(FULL_WEIGHT);
        group[2999].weight.set(FULL_WEIGHT);
        for policy in Policy::ALL {
            let balancer = Balancer::new(policy);
            for _ in 0..50 {
                assert_eq!(balancer.pick(&group, &[2999], now), Some(1234), "{policy:?}");
            }
        }
    }

    #[test]
    fn ignoring_health_takes_turns_over_backends_not_excluded() {
        let balancer = Balancer::new(Policy::RoundRobin);
        let picks: Vec<_> =
            (0..6).map(|_| balancer.pick_ignoring_health(3, &[1]).unwrap()).collect();
        assert!(picks.iter().all(|&i| i == 0 || i == 2), "{picks:?}");
        assert_eq!(picks.iter().filter(|&&i| i == 0).count(), 3, "{picks:?}");
        assert_eq!(balancer.pick_ignoring_health(2, &[0, 1]), None);
        assert_eq!(balancer.pick_ignoring_health(0, &[]), None);
    }

    #[test]
    fn balancer_is_shared_between_threads() {
        fn is_send_sync<T: Send + Sync>() {}
        is_send_sync::<Balancer>();
    }

    #[test]
    fn weight_above_full_counts_as_full() {
        let now = Instant::now();
        let heavy = FakeBackend::with_weight(FULL_WEIGHT * 10);
        assert_eq!(eligible_weight(&heavy, 0, &[], now), Some(FULL_WEIGHT));
    }

    #[test]
    fn load_compares_cost_per_weight_exactly() {
        let full = Load::in_flight(9, FULL_WEIGHT);
        let tenth = Load::in_flight(0, FULL_WEIGHT / 10);
        assert_eq!(full.compare(&tenth), Ordering::Equal);
        assert_eq!(Load::in_flight(10, FULL_WEIGHT).compare(&tenth), Ordering::Greater);
        let slow = Load::timed(Duration::from_millis(30), 0, FULL_WEIGHT);
        let busy = Load::timed(Duration::from_millis(10), 3, FULL_WEIGHT);
        assert_eq!(slow.compare(&busy), Ordering::Less);
    }
}
