use super::*;

fn learner() -> LearnedCloses {
    LearnedCloses::new(Arc::from("app"), SocketAddr::from(([127, 0, 0, 1], 8080)))
}

const OK: ResponseKind = ResponseKind { status: 200, declares_length: true };
const MISSING: ResponseKind = ResponseKind { status: 404, declares_length: true };

/// A close after `requests` answered requests, the last one `last`, seen 3 ms after it,
/// at a moment of its own.
fn close(requests: u64, last: ResponseKind) -> Close {
    static LOOKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let at = Instant::now() + Duration::from_nanos(LOOKS.fetch_add(1, Relaxed));
    Close { requests, last: Some(last), seen_after: Duration::from_millis(3), at }
}

/// The `request`th response on a connection, of kind `kind` after `previous`.
fn answer(request: u64, previous: Option<ResponseKind>, kind: ResponseKind) -> Answer {
    Answer { request, previous, kind }
}

/// Answers requests 1 to `n` on one connection, all of kind `kind`; the rule that ends
/// reuse after the last, if any.
fn connection(learned: &LearnedCloses, n: u64, kind: ResponseKind) -> Option<CloseRule> {
    let mut rule = None;
    for request in 1..=n {
        let previous = (request > 1).then_some(kind);
        rule = learned.answered(answer(request, previous, kind));
    }
    rule
}

fn rules(learned: &LearnedCloses) -> Vec<CloseRule> {
    learned.snapshot(Instant::now()).into_iter().map(|r| r.rule).collect()
}

#[test]
fn three_closes_after_the_same_count_make_a_rule() {
    let learned = learner();
    for _ in 0..EVIDENCE {
        assert_eq!(connection(&learned, 3, OK), None);
        learned.closed(close(3, OK));
    }
    assert_eq!(rules(&learned), [CloseRule::AfterRequests(3)]);
    // Reuse now ends at the third response, not before.
    let answers: Vec<_> =
        (1..=3).map(|r| learned.answered(answer(r, (r > 1).then_some(OK), OK))).collect();
    assert_eq!(answers, [None, None, Some(CloseRule::AfterRequests(3))]);
}

#[test]
fn a_connection_going_past_the_point_resets_the_evidence() {
    let learned = learner();
    for _ in 0..EVIDENCE - 1 {
        connection(&learned, 3, OK);
        learned.closed(close(3, OK));
    }
    // A fourth answer on some connection: the origin does not always close after 3.
    connection(&learned, 4, OK);
    learned.closed(close(3, OK));
    assert!(rules(&learned).is_empty());
    // Evidence starts again from one.
    for _ in 0..EVIDENCE - 1 {
        learned.closed(close(3, OK));
    }
    assert_eq!(rules(&learned), [CloseRule::AfterRequests(3)]);
}

#[test]
fn closes_after_a_long_idle_teach_nothing() {
    let learned = learner();
    for _ in 0..10 {
        connection(&learned, 1, OK);
        learned.closed(Close { seen_after: SHORTLY + Duration::from_millis(1), ..close(1, OK) });
    }
    assert!(rules(&learned).is_empty());
    assert_eq!(learned.flags.load(Relaxed), 0, "nothing pending either");
}

#[test]
fn closes_found_in_one_look_at_the_pool_count_once() {
    let learned = learner();
    let at = Instant::now();
    for _ in 0..10 {
        learned.closed(Close { at, ..close(2, OK) });
    }
    assert!(rules(&learned).is_empty());
}

#[test]
fn closes_after_one_kind_of_response_at_varying_counts_make_a_kind_rule() {
    let learned = learner();
    for n in [2, 1, 3, 2, 1, 3] {
        // n - 1 responses of 200, then a 404, then the close.
        for request in 1..n {
            learned.answered(answer(request, (request > 1).then_some(OK), OK));
        }
        let previous = (n > 1).then_some(OK);
        learned.answered(answer(n, previous, MISSING));
        learned.closed(close(n, MISSING));
    }
    assert_eq!(rules(&learned), [CloseRule::AfterResponse(MISSING)]);
    assert_eq!(learned.answered(answer(1, None, OK)), None);
    assert_eq!(
        learned.answered(answer(2, Some(OK), MISSING)),
        Some(CloseRule::AfterResponse(MISSING))
    );
}

#[test]
fn rare_closes_at_random_points_make_no_rule() {
    let learned = learner();
    // SplitMix64: connections of random length; about one response in ten closes.
    let mut state = 7u64;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for _ in 0..300 {
        let mut n = 1;
        while next() % 10 != 0 {
            n += 1;
        }
        connection(&learned, n, OK);
        learned.closed(close(n, OK));
        // Other connections carry on meanwhile.
        connection(&learned, 12, OK);
    }
    assert!(rules(&learned).is_empty());
}

#[test]
fn nothing_learned_costs_one_atomic_read() {
    let learned = learner();
    assert_eq!(connection(&learned, 50, OK), None);
    assert_eq!(learned.flags.load(Relaxed), 0);
    // Evidence makes answers look until they contradict it.
    learned.closed(close(2, OK));
    assert_eq!(learned.flags.load(Relaxed), PENDING);
    connection(&learned, 3, OK);
    assert_eq!(learned.flags.load(Relaxed), 0);
}

#[test]
fn re_checks_keep_a_rule_while_the_origin_closes_and_forget_it_when_it_stops() {
    let learned = learner();
    for _ in 0..EVIDENCE {
        learned.closed(close(1, OK));
    }
    let rule = CloseRule::AfterRequests(1);
    learned.rechecked(rule, true);
    learned.rechecked(rule, false);
    learned.rechecked(rule, true);
    learned.rechecked(rule, false);
    assert_eq!(learned.snapshot(Instant::now())[0].confirmed, 2);
    learned.rechecked(rule, false);
    assert!(rules(&learned).is_empty());
    assert_eq!(learned.answered(answer(5, Some(OK), OK)), None);
    assert_eq!(learned.flags.load(Relaxed), 0);
}

#[test]
fn rules_and_candidates_are_bounded() {
    let learned = learner();
    for status in 400..480 {
        let kind = ResponseKind { status, declares_length: false };
        for requests in 1..=EVIDENCE as u64 {
            // A different count each time: no count rule.
            learned.closed(Close { requests: requests + u64::from(status), ..close(1, kind) });
        }
    }
    let learned_rules = rules(&learned);
    assert_eq!(learned_rules.len(), KINDS);
    // The newest kinds stay.
    assert!(learned_rules
        .contains(&CloseRule::AfterResponse(ResponseKind { status: 479, declares_length: false })));
    assert!(learned.lock().kinds.len() <= KINDS);
}

#[test]
fn a_newer_count_replaces_the_older() {
    let learned = learner();
    for _ in 0..EVIDENCE {
        connection(&learned, 5, OK);
        learned.closed(close(5, OK));
    }
    for _ in 0..EVIDENCE {
        connection(&learned, 2, OK);
        learned.closed(close(2, OK));
    }
    assert_eq!(rules(&learned), [CloseRule::AfterRequests(2)]);
}

#[test]
fn a_kind_survives_its_code() {
    for kind in [OK, MISSING, ResponseKind { status: 999, declares_length: false }] {
        assert_ne!(kind.code(), 0);
        assert_eq!(ResponseKind::from_code(kind.code()), Some(kind));
    }
    assert_eq!(ResponseKind::from_code(0), None);
}
