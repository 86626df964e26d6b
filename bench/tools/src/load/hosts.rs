//! Fixed-rate load spread over many virtual hosts on a schedule (`bench-load hosts`): the
//! [`rate`] shape with each request's `Host` chosen by [`HostSchedule`].
//!
//! Hosts `steady` get traffic all the time; hosts `bursty` get none for `idle`, then a
//! share of the rate for `burst`, then none again, over and over (the first burst starts
//! after the first `idle`). While a burst is on, half the requests go to the bursty hosts
//! and half to the steady ones; otherwise all go to the steady ones. Within a group the
//! host is drawn from the request number by a fixed mix (splitmix64), so every client
//! connection sends to every host in turn, and two runs send the same sequence.
//!
//! A proxy behind it that routes by host then sees many backends, most with steady
//! traffic and some that sit idle between bursts: what per-worker pools multiply.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderValue;
use serde::Serialize;

use super::rate::{self, RateConfig, RateReport};

/// The `{}` in a host pattern that a host's number replaces.
pub const HOST_NUMBER: &str = "{}";
/// Most hosts one schedule may name (steady and bursty together).
pub const MAX_HOSTS: usize = 10_000;

/// Which hosts get each request, by request number and due time.
#[derive(Debug)]
pub struct HostSchedule {
    steady: Vec<HeaderValue>,
    bursty: Vec<HeaderValue>,
    idle: Duration,
    burst: Duration,
    /// Requests [`HostSchedule::host_for`] sent to bursty hosts.
    bursty_sent: AtomicU64,
}

/// Why a host schedule was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("host pattern {0:?} must contain {HOST_NUMBER} (where the host's number goes)")]
    NoNumber(String),
    #[error("host pattern {0:?} makes host names that are not valid header values")]
    BadName(String),
    #[error("at least one steady host is needed")]
    NoSteadyHost,
    #[error("at most {MAX_HOSTS} hosts in all, not {0}")]
    TooManyHosts(usize),
    #[error("a burst must last longer than 0s when there are bursty hosts")]
    EmptyBurst,
}

/// The group a request's host belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Steady,
    Bursty,
}

/// The settings of a schedule, as `bench-load hosts` takes them.
#[derive(Debug, Clone)]
pub struct HostsSettings {
    /// Host names with [`HOST_NUMBER`] standing for the host's number, e.g. `app{}.bench`.
    pub pattern: String,
    /// Hosts 0 .. steady - 1 get steady traffic.
    pub steady: usize,
    /// Hosts steady .. steady + bursty - 1 get bursts.
    pub bursty: usize,
    pub idle: Duration,
    pub burst: Duration,
}

impl HostSchedule {
    pub fn new(settings: &HostsSettings) -> Result<Self, ScheduleError> {
        if !settings.pattern.contains(HOST_NUMBER) {
            return Err(ScheduleError::NoNumber(settings.pattern.clone()));
        }
        if settings.steady == 0 {
            return Err(ScheduleError::NoSteadyHost);
        }
        let total = settings.steady.saturating_add(settings.bursty);
        if total > MAX_HOSTS {
            return Err(ScheduleError::TooManyHosts(total));
        }
        if settings.bursty > 0 && settings.burst.is_zero() {
            return Err(ScheduleError::EmptyBurst);
        }
        let names = (0..total)
            .map(|number| host_name(&settings.pattern, number))
            .collect::<Result<Vec<_>, _>>()?;
        let (steady, bursty) = names.split_at(settings.steady);
        Ok(Self {
            steady: steady.to_vec(),
            bursty: bursty.to_vec(),
            idle: settings.idle,
            burst: settings.burst,
            bursty_sent: AtomicU64::new(0),
        })
    }

    /// The host of request `n`, due at `offset` from the start, counted for the report.
    pub fn host_for(&self, n: u64, offset: Duration) -> &HeaderValue {
        let (group, host) = self.pick(n, offset);
        if group == Group::Bursty {
            self.bursty_sent.fetch_add(1, Ordering::Relaxed);
        }
        host
    }

    /// Requests [`HostSchedule::host_for`] sent to bursty hosts so far.
    pub fn bursty_sent(&self) -> u64 {
        self.bursty_sent.load(Ordering::Relaxed)
    }

    /// Idle stretch plus burst: the length of one cycle, in nanoseconds, never 0 when
    /// there are bursty hosts (their burst is longer than 0).
    fn period_nanos(&self) -> u128 {
        self.idle.saturating_add(self.burst).as_nanos().max(1)
    }

    /// Whether a burst is on at `offset` from the start.
    pub fn is_bursting(&self, offset: Duration) -> bool {
        if self.bursty.is_empty() {
            return false;
        }
        offset.as_nanos() % self.period_nanos() >= self.idle.as_nanos()
    }

    /// The group and host of request `n`, due at `offset` from the start.
    pub fn pick(&self, n: u64, offset: Duration) -> (Group, &HeaderValue) {
        let mixed = splitmix64(n);
        let to_bursty = self.is_bursting(offset) && mixed & 1 == 0;
        let (group, hosts) =
            if to_bursty { (Group::Bursty, &self.bursty) } else { (Group::Steady, &self.steady) };
        (group, nth(hosts, mixed >> 1))
    }

    /// How many bursts start before `end` (counted from the start).
    pub fn bursts_started(&self, end: Duration) -> u64 {
        if self.bursty.is_empty() || end <= self.idle {
            return 0;
        }
        let started = (end - self.idle).as_nanos().div_ceil(self.period_nanos());
        u64::try_from(started).unwrap_or(u64::MAX)
    }
}

/// Host `number` of `pattern`, as a header value.
fn host_name(pattern: &str, number: usize) -> Result<HeaderValue, ScheduleError> {
    HeaderValue::from_str(&pattern.replace(HOST_NUMBER, &number.to_string()))
        .map_err(|_| ScheduleError::BadName(pattern.to_owned()))
}

/// Entry `index % len` of `hosts`, which is never empty (checked in [`HostSchedule::new`]).
fn nth(hosts: &[HeaderValue], index: u64) -> &HeaderValue {
    let len = u64::try_from(hosts.len()).unwrap_or(u64::MAX).max(1);
    let at = usize::try_from(index % len).unwrap_or(0);
    hosts.get(at).or_else(|| hosts.first()).expect("a host group is never empty")
}

/// Sebastiano Vigna's splitmix64 finalizer: spreads consecutive request numbers over the
/// hosts with no pattern a connection's share of them could follow.
fn splitmix64(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The result of a `hosts` run: the rate report, and the schedule it followed.
#[derive(Debug, Clone, Serialize)]
pub struct HostsReport {
    #[serde(flatten)]
    pub rate: RateReport,
    pub steady_hosts: usize,
    pub bursty_hosts: usize,
    pub idle_s: f64,
    pub burst_s: f64,
    /// Bursts that started within the run.
    pub bursts: u64,
    /// Requests sent to bursty hosts (part of `requests`, unless some were never sent).
    pub bursty_requests: u64,
}

/// Runs `config` (which must have no warm-up: the schedule counts from its start) with
/// hosts from `schedule`.
pub async fn run(config: RateConfig, schedule: HostSchedule) -> HostsReport {
    let schedule = Arc::new(schedule);
    let config =
        RateConfig { warmup: Duration::ZERO, hosts: Some(Arc::clone(&schedule)), ..config };
    let bursts = schedule.bursts_started(config.duration);
    let mut report = rate::run(config).await;
    report.mode = "hosts";
    HostsReport {
        rate: report,
        steady_hosts: schedule.steady.len(),
        bursty_hosts: schedule.bursty.len(),
        idle_s: schedule.idle.as_secs_f64(),
        burst_s: schedule.burst.as_secs_f64(),
        bursts,
        bursty_requests: schedule.bursty_sent(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(steady: usize, bursty: usize) -> HostsSettings {
        HostsSettings {
            pattern: "app{}.bench".to_owned(),
            steady,
            bursty,
            idle: Duration::from_secs(3),
            burst: Duration::from_secs(1),
        }
    }

    fn millis(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn bursts_come_after_each_idle_stretch() {
        let schedule = HostSchedule::new(&settings(4, 2)).expect("valid");
        assert!(!schedule.is_bursting(millis(0)));
        assert!(!schedule.is_bursting(millis(2_999)));
        assert!(schedule.is_bursting(millis(3_000)));
        assert!(schedule.is_bursting(millis(3_999)));
        assert!(!schedule.is_bursting(millis(4_000)));
        assert!(schedule.is_bursting(millis(7_500)));
        assert_eq!(schedule.bursts_started(millis(3_000)), 0);
        assert_eq!(schedule.bursts_started(millis(3_001)), 1);
        assert_eq!(schedule.bursts_started(millis(20_000)), 5);
    }

    #[test]
    fn only_steady_hosts_get_requests_between_bursts() {
        let schedule = HostSchedule::new(&settings(4, 2)).expect("valid");
        for n in 0..1_000 {
            let (group, host) = schedule.pick(n, millis(1_000));
            assert_eq!(group, Group::Steady);
            assert!(schedule.steady.contains(host));
        }
    }

    #[test]
    fn a_burst_sends_about_half_to_the_bursty_hosts_and_reaches_each_of_them() {
        let schedule = HostSchedule::new(&settings(4, 2)).expect("valid");
        let picks: Vec<_> = (0..1_000).map(|n| schedule.pick(n, millis(3_500))).collect();
        let bursty = picks.iter().filter(|(group, _)| *group == Group::Bursty).count();
        assert!((400..600).contains(&bursty), "{bursty} of 1000");
        for host in ["app4.bench", "app5.bench", "app0.bench", "app3.bench"] {
            assert!(picks.iter().any(|(_, h)| *h == host), "{host} never picked");
        }
    }

    #[test]
    fn every_connection_sees_every_steady_host() {
        // 64 connections, 40 hosts: request n goes out on connection n % 64.
        let schedule = HostSchedule::new(&settings(40, 0)).expect("valid");
        let seen: std::collections::HashSet<_> =
            (0..40 * 64).map(|i| schedule.pick(i * 64, millis(0)).1.clone()).collect();
        assert_eq!(seen.len(), 40);
    }

    #[test]
    fn host_for_counts_what_went_to_bursty_hosts() {
        let schedule = HostSchedule::new(&settings(4, 2)).expect("valid");
        for n in 0..100 {
            schedule.host_for(n, millis(1_000));
        }
        assert_eq!(schedule.bursty_sent(), 0);
        let bursty = (0..100).filter(|&n| schedule.pick(n, millis(3_500)).0 == Group::Bursty);
        let expected = u64::try_from(bursty.count()).expect("small");
        for n in 0..100 {
            schedule.host_for(n, millis(3_500));
        }
        assert_eq!(schedule.bursty_sent(), expected);
    }

    #[test]
    fn bad_settings_are_errors_not_panics() {
        let no_number = HostsSettings { pattern: "app.bench".to_owned(), ..settings(4, 2) };
        assert!(matches!(HostSchedule::new(&no_number), Err(ScheduleError::NoNumber(_))));
        let bad_name = HostsSettings { pattern: "app{}\n".to_owned(), ..settings(4, 2) };
        assert!(matches!(HostSchedule::new(&bad_name), Err(ScheduleError::BadName(_))));
        assert!(matches!(HostSchedule::new(&settings(0, 2)), Err(ScheduleError::NoSteadyHost)));
        assert!(matches!(
            HostSchedule::new(&settings(MAX_HOSTS, 1)),
            Err(ScheduleError::TooManyHosts(_))
        ));
        let no_burst = HostsSettings { burst: Duration::ZERO, ..settings(4, 2) };
        assert!(matches!(HostSchedule::new(&no_burst), Err(ScheduleError::EmptyBurst)));
        let no_idle = HostsSettings { idle: Duration::ZERO, ..settings(4, 2) };
        let always = HostSchedule::new(&no_idle).expect("bursting all the time is allowed");
        assert!(always.is_bursting(millis(123)));
    }
}
