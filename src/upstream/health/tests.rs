use std::sync::mpsc;
use std::sync::Barrier;

use super::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Defaults: 3 connect failures, 5 5xx, 5 s ejection doubling to 60 s, 10 s slow start.
fn passive() -> PassiveHealth {
    PassiveHealth::default()
}

fn checks() -> CheckThresholds {
    CheckThresholds::default()
}

/// Fails connects until the backend is ejected; returns the ejection's length.
fn eject_by_connects(health: &Health, now: Instant, passive: &PassiveHealth) -> Duration {
    for _ in 1..passive.max_connect_failures {
        assert_eq!(health.on_connect_failure(now, passive), None);
    }
    match health.on_connect_failure(now, passive) {
        Some(Transition::Ejected { cause: Cause::ConnectFailures, for_ }) => for_,
        other => panic!("expected an ejection, got {other:?}"),
    }
}

fn fail_checks(health: &Health, now: Instant) -> Option<Transition> {
    (0..checks().unhealthy).map(|_| health.on_check(false, now, &checks())).last().flatten()
}

fn pass_checks(health: &Health, now: Instant) -> Option<Transition> {
    (0..checks().healthy).map(|_| health.on_check(true, now, &checks())).last().flatten()
}

#[test]
fn healthy_backend_has_full_weight() {
    let health = Health::new();
    let now = Instant::now();
    assert_eq!(health.weight(now, &passive()), FULL_WEIGHT);
    assert!(!health.is_down(now, &passive()));
    assert_eq!(health.snapshot(now, &passive()).state, State::Healthy);
}

#[test]
fn healthy_backend_is_served_without_the_lock() {
    let health = Health::new();
    let now = Instant::now();
    let (sent, received) = mpsc::channel();
    std::thread::scope(|s| {
        let guard = health.lock();
        s.spawn(|| {
            health.on_success();
            sent.send(health.weight(now, &passive())).expect("receiver waits");
        });
        let weight = received.recv_timeout(secs(10));
        drop(guard);
        assert_eq!(weight, Ok(FULL_WEIGHT));
    });
}

#[test]
fn failures_below_threshold_do_not_eject() {
    let health = Health::new();
    let now = Instant::now();
    let p = passive();
    for _ in 1..p.max_connect_failures {
        assert_eq!(health.on_connect_failure(now, &p), None);
    }
    for _ in 1..p.max_5xx {
        assert_eq!(health.on_server_error(now, &p), None);
    }
    assert_eq!(health.weight(now, &p), FULL_WEIGHT);
    assert_eq!(health.snapshot(now, &p).ejections, 0);
}

#[test]
fn success_in_between_resets_failure_counts() {
    let health = Health::new();
    let now = Instant::now();
    let p = passive();
    for _ in 0..10 {
        for _ in 1..p.max_connect_failures {
            assert_eq!(health.on_connect_failure(now, &p), None);
        }
        for _ in 1..p.max_5xx {
            assert_eq!(health.on_server_error(now, &p), None);
        }
        health.on_success();
    }
    assert_eq!(health.weight(now, &p), FULL_WEIGHT);
}

#[test]
fn connect_failure_threshold_ejects_for_base_time() {
    let health = Health::new();
    let now = Instant::now();
    assert_eq!(eject_by_connects(&health, now, &passive()), DEFAULT_EJECTION);
}

#[test]
fn server_error_threshold_ejects_for_base_time() {
    let health = Health::new();
    let now = Instant::now();
    let p = passive();
    for _ in 1..p.max_5xx {
        assert_eq!(health.on_server_error(now, &p), None);
    }
    let ejected = health.on_server_error(now, &p);
    assert_eq!(
        ejected,
        Some(Transition::Ejected { cause: Cause::ServerErrors, for_: DEFAULT_EJECTION })
    );
}

#[test]
fn server_errors_do_not_add_to_connect_failures() {
    let health = Health::new();
    let now = Instant::now();
    let p = passive();
    for _ in 0..10 {
        assert_eq!(health.on_connect_failure(now, &p), None);
        assert_eq!(health.on_server_error(now, &p), None);
        health.on_success();
    }
    assert_eq!(health.on_connect_failure(now, &p), None);
    assert_eq!(health.on_server_error(now, &p), None);
}

#[test]
fn concurrent_failures_at_threshold_eject_once() {
    let health = Health::new();
    let now = Instant::now();
    let p = passive();
    let threads = 8;
    let barrier = Barrier::new(threads);
    let transitions: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    (0..4).filter_map(|_| health.on_connect_failure(now, &p)).count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("no panic")).collect()
    });
    assert_eq!(transitions.iter().sum::<usize>(), 1);
    assert_eq!(health.snapshot(now, &p).ejections, 1);
}

#[test]
fn ejected_backend_has_zero_weight_until_ejection_ends() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    let for_ = eject_by_connects(&health, t0, &p);
    assert_eq!(health.weight(t0, &p), 0);
    assert!(health.is_down(t0 + for_ - ms(1), &p));
    assert!(!health.is_down(t0 + for_, &p));
}

#[test]
fn failures_while_ejected_are_ignored() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    eject_by_connects(&health, t0, &p);
    for _ in 0..10 {
        assert_eq!(health.on_connect_failure(t0 + secs(1), &p), None);
        assert_eq!(health.on_server_error(t0 + secs(1), &p), None);
    }
    let snapshot = health.snapshot(t0 + secs(1), &p);
    assert_eq!(snapshot.ejections, 1);
    assert_eq!(snapshot.ejected_for, Some(secs(4)));
    // The failures ignored above do not count in slow start either.
    let ramping = t0 + secs(6);
    for _ in 1..p.max_5xx {
        assert_eq!(health.on_server_error(ramping, &p), None);
    }
}

#[test]
fn weight_ramps_linearly_during_slow_start() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    let end = t0 + eject_by_connects(&health, t0, &p);
    let cases = [
        (Duration::ZERO, 10),
        (secs(1), 19),
        (secs(5), 55),
        (ms(9_999), 99),
        (p.slow_start, FULL_WEIGHT),
    ];
    for (into_ramp, expected) in cases {
        let now = end + into_ramp;
        // The lock-free weight and the one /status computes under the lock agree.
        assert_eq!(health.snapshot(now, &p).weight, expected, "{into_ramp:?} in");
        assert_eq!(health.weight(now, &p), expected, "{into_ramp:?} in");
    }
    assert_eq!(health.snapshot(end + secs(5), &p).state, State::Healthy);
}

#[test]
fn backend_is_healthy_after_slow_start() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    let end = t0 + eject_by_connects(&health, t0, &p);
    assert_eq!(health.snapshot(end + secs(1), &p).state, State::Recovering);
    let after = end + p.slow_start;
    assert_eq!(health.weight(after, &p), FULL_WEIGHT);
    assert_eq!(health.word.load(Ordering::Relaxed), 0, "back on the fast path");
    let snapshot = health.snapshot(after, &p);
    assert_eq!((snapshot.state, snapshot.cause), (State::Healthy, None));
}

#[test]
fn connect_failure_in_slow_start_ejects_again_for_double_time() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    let end = t0 + eject_by_connects(&health, t0, &p);
    let ejected = health.on_connect_failure(end + secs(1), &p);
    assert_eq!(
        ejected,
        Some(Transition::Ejected { cause: Cause::ConnectFailures, for_: secs(10) })
    );
    assert!(health.is_down(end + secs(10), &p));
    assert!(!health.is_down(end + secs(11), &p));
}

#[test]
fn a_success_between_ejections_starts_the_back_off_over() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    let end = t0 + eject_by_connects(&health, t0, &p);
    // Back in slow start, a request succeeds: the next outage is a new one.
    health.on_success();
    let again = health.on_connect_failure(end + secs(1), &p);
    assert_eq!(again, Some(Transition::Ejected { cause: Cause::ConnectFailures, for_: secs(5) }));
}

#[test]
fn a_probe_that_connects_ends_a_connect_ejection_at_once() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    eject_by_connects(&health, t0, &p);
    let probed = t0 + ms(300);
    assert!(health.awaits_probe(probed));
    assert!(health.is_down(probed, &p));
    assert_eq!(health.on_probe_connected(probed), Some(Transition::Reachable));
    // In slow start from the probe on, not from the ejection's end.
    assert!(!health.is_down(probed, &p));
    assert!(!health.awaits_probe(probed));
    assert_eq!(health.snapshot(probed, &p).state, State::Recovering);
    assert_eq!(health.on_probe_connected(probed + ms(1)), None, "only once");
    // The back-off stands until a request succeeds: another failed connect in slow
    // start ejects for twice as long.
    let again = health.on_connect_failure(probed + ms(10), &p);
    assert_eq!(again, Some(Transition::Ejected { cause: Cause::ConnectFailures, for_: secs(10) }));
}

#[test]
fn a_probe_does_not_end_an_ejection_for_server_errors() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    for _ in 0..p.max_5xx {
        health.on_server_error(t0, &p);
    }
    assert!(health.is_down(t0, &p));
    assert!(!health.awaits_probe(t0));
    assert_eq!(health.on_probe_connected(t0 + ms(100)), None);
    assert!(health.is_down(t0 + ms(100), &p));
}

#[test]
fn server_errors_in_slow_start_eject_at_threshold_for_double_time() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    let ramping = t0 + eject_by_connects(&health, t0, &p) + secs(1);
    for _ in 1..p.max_5xx {
        assert_eq!(health.on_server_error(ramping, &p), None);
    }
    assert_eq!(
        health.on_server_error(ramping, &p),
        Some(Transition::Ejected { cause: Cause::ServerErrors, for_: secs(10) })
    );
}

#[test]
fn back_off_doubles_up_to_max_ejection() {
    let health = Health::new();
    let mut now = Instant::now();
    let p = passive();
    let mut lengths = vec![eject_by_connects(&health, now, &p)];
    for _ in 0..5 {
        now += *lengths.last().expect("one ejection") + secs(1);
        match health.on_connect_failure(now, &p) {
            Some(Transition::Ejected { for_, .. }) => lengths.push(for_),
            other => panic!("expected an ejection, got {other:?}"),
        }
    }
    assert_eq!(lengths, [5, 10, 20, 40, 60, 60].map(secs));
}

#[test]
fn completing_slow_start_resets_back_off() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    let first = eject_by_connects(&health, t0, &p);
    let again = t0 + first + secs(1);
    assert!(matches!(health.on_connect_failure(again, &p), Some(Transition::Ejected { .. })));
    // Nothing looks at the backend until long after its slow start ends: the next
    // failure finds it healthy, counts as one, and the next ejection is short again.
    let later = again + secs(600);
    assert_eq!(eject_by_connects(&health, later, &p), DEFAULT_EJECTION);
    assert_eq!(health.snapshot(later, &p).ejections, 3);
}

#[test]
fn huge_ejection_settings_do_not_overflow() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = PassiveHealth { ejection: Duration::MAX, max_ejection: Duration::MAX, ..passive() };
    assert_eq!(eject_by_connects(&health, t0, &p), LONGEST_EJECTION);
    assert!(health.is_down(t0 + secs(86_400), &p));
}

#[test]
fn zero_thresholds_disable_ejection() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = PassiveHealth { max_connect_failures: 0, max_5xx: 0, ..passive() };
    for _ in 0..100 {
        assert_eq!(health.on_connect_failure(t0, &p), None);
        assert_eq!(health.on_server_error(t0, &p), None);
    }
    assert_eq!(health.weight(t0, &p), FULL_WEIGHT);
}

#[test]
fn disabled_connect_threshold_also_holds_in_slow_start() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = PassiveHealth { max_connect_failures: 0, max_5xx: 1, ..passive() };
    let ejected = health.on_server_error(t0, &p);
    assert!(matches!(ejected, Some(Transition::Ejected { .. })));
    assert_eq!(health.on_connect_failure(t0 + secs(6), &p), None);
    assert!(!health.is_down(t0 + secs(6), &p));
}

#[test]
fn failed_checks_take_backend_out_at_unhealthy_threshold() {
    let health = Health::new();
    let now = Instant::now();
    let p = passive();
    assert_eq!(health.on_check(false, now, &checks()), None);
    assert_eq!(health.weight(now, &p), FULL_WEIGHT);
    assert_eq!(health.on_check(false, now, &checks()), Some(Transition::CheckFailed));
    assert_eq!(health.weight(now, &p), 0);
    assert_eq!(health.on_check(false, now, &checks()), None, "reported once");
    assert_eq!(health.snapshot(now, &p).ejections, 0, "not a passive ejection");
}

#[test]
fn passing_check_in_between_resets_failed_checks() {
    let health = Health::new();
    let now = Instant::now();
    for _ in 0..10 {
        assert_eq!(health.on_check(false, now, &checks()), None);
        assert_eq!(health.on_check(true, now, &checks()), None);
    }
    assert_eq!(health.weight(now, &passive()), FULL_WEIGHT);
}

#[test]
fn passing_checks_bring_backend_back_with_slow_start() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    assert_eq!(fail_checks(&health, t0), Some(Transition::CheckFailed));
    let back = t0 + secs(30);
    assert_eq!(health.on_check(true, back, &checks()), None);
    assert_eq!(health.on_check(false, back, &checks()), None, "resets the passes");
    assert_eq!(health.on_check(true, back, &checks()), None);
    assert_eq!(health.weight(back, &p), 0);
    assert_eq!(health.on_check(true, back, &checks()), Some(Transition::CheckPassed));
    assert_eq!(health.weight(back, &p), SLOW_START_WEIGHT);
    assert_eq!(health.weight(back + secs(5), &p), 55);
    let snapshot = health.snapshot(back + secs(5), &p);
    assert_eq!(snapshot.state, State::Recovering);
    assert_eq!(snapshot.cause, Some(Cause::FailedChecks));
    assert_eq!(health.weight(back + p.slow_start, &p), FULL_WEIGHT);
    assert_eq!(health.snapshot(back + p.slow_start, &p).state, State::Healthy);
}

#[test]
fn ejected_backend_failing_checks_stays_down_until_checks_pass() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    let end = t0 + eject_by_connects(&health, t0, &p);
    assert_eq!(fail_checks(&health, t0 + secs(1)), Some(Transition::CheckFailed));
    assert!(health.is_down(end + secs(20), &p), "ejection over, checks still failing");
    assert_eq!(health.snapshot(end + secs(20), &p).state, State::FailingChecks);
    assert_eq!(pass_checks(&health, end + secs(20)), Some(Transition::CheckPassed));
    assert_eq!(health.weight(end + secs(20), &p), SLOW_START_WEIGHT);
}

#[test]
fn backend_passing_checks_stays_down_until_ejection_ends() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    assert_eq!(fail_checks(&health, t0), Some(Transition::CheckFailed));
    // In-flight requests fail while checks hold it out: not counted.
    assert_eq!(health.on_connect_failure(t0, &p), None);
    assert_eq!(pass_checks(&health, t0 + secs(1)), Some(Transition::CheckPassed));
    // In slow start after the checks, one failed connect ejects.
    let ejected = health.on_connect_failure(t0 + secs(2), &p);
    let for_ = DEFAULT_EJECTION;
    assert_eq!(ejected, Some(Transition::Ejected { cause: Cause::ConnectFailures, for_ }));
    let end = t0 + secs(2) + for_;
    assert_eq!(fail_checks(&health, t0 + secs(2)), Some(Transition::CheckFailed));
    assert_eq!(pass_checks(&health, t0 + secs(3)), Some(Transition::CheckPassed));
    assert!(health.is_down(end - ms(1), &p), "checks pass, ejection still running");
    let snapshot = health.snapshot(end - ms(1), &p);
    assert_eq!((snapshot.state, snapshot.cause), (State::Ejected, Some(Cause::ConnectFailures)));
    assert_eq!(health.weight(end, &p), SLOW_START_WEIGHT);
    let snapshot = health.snapshot(end, &p);
    assert_eq!(snapshot.state, State::Recovering);
    assert_eq!(snapshot.cause, Some(Cause::ConnectFailures));
}

#[test]
fn snapshot_reports_state_cause_remaining_time_and_count() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = passive();
    eject_by_connects(&health, t0, &p);
    let ejected = health.snapshot(t0 + secs(2), &p);
    let expected = HealthSnapshot {
        state: State::Ejected,
        cause: Some(Cause::ConnectFailures),
        ejected_for: Some(secs(3)),
        ejections: 1,
        weight: 0,
    };
    assert_eq!(ejected, expected);

    assert_eq!(fail_checks(&health, t0 + secs(3)), Some(Transition::CheckFailed));
    let both = health.snapshot(t0 + secs(3), &p);
    assert_eq!(both.state, State::FailingChecks);
    assert_eq!(both.cause, Some(Cause::FailedChecks));
    assert_eq!(both.ejected_for, Some(secs(2)), "the ejection still shows");

    assert_eq!(pass_checks(&health, t0 + secs(4)), Some(Transition::CheckPassed));
    let recovering = health.snapshot(t0 + secs(10), &p);
    let expected = HealthSnapshot {
        state: State::Recovering,
        cause: Some(Cause::ConnectFailures),
        ejected_for: None,
        ejections: 1,
        weight: 55,
    };
    assert_eq!(recovering, expected);

    let healthy = health.snapshot(t0 + secs(15), &p);
    let expected = HealthSnapshot {
        state: State::Healthy,
        cause: None,
        ejected_for: None,
        ejections: 1,
        weight: FULL_WEIGHT,
    };
    assert_eq!(healthy, expected);
}

#[test]
fn zero_slow_start_gives_full_weight_at_once() {
    let health = Health::new();
    let t0 = Instant::now();
    let p = PassiveHealth { slow_start: Duration::ZERO, ..passive() };
    let end = t0 + eject_by_connects(&health, t0, &p);
    assert_eq!(health.weight(end - ms(1), &p), 0);
    assert_eq!(health.weight(end, &p), FULL_WEIGHT);
    assert_eq!(health.snapshot(end, &p).state, State::Healthy);
    assert_eq!(eject_by_connects(&health, end, &p), DEFAULT_EJECTION, "back-off reset");
}

#[test]
fn zero_check_thresholds_count_as_one() {
    let health = Health::new();
    let now = Instant::now();
    let once = CheckThresholds { unhealthy: 0, healthy: 0 };
    assert_eq!(health.on_check(false, now, &once), Some(Transition::CheckFailed));
    assert_eq!(health.on_check(true, now, &once), Some(Transition::CheckPassed));
}

#[test]
fn names_are_stable() {
    let causes = [Cause::ConnectFailures, Cause::ServerErrors, Cause::FailedChecks];
    assert_eq!(causes.map(Cause::as_str), ["connect_failures", "server_errors", "failed_checks"]);
    let states = [State::Healthy, State::Ejected, State::Recovering, State::FailingChecks];
    assert_eq!(states.map(State::as_str), ["healthy", "ejected", "recovering", "failing_checks"]);
}

#[test]
fn health_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Health>();
}
