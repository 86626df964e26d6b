use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Failure, Failures, Line, WINDOW};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn addr(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// A `connect_refused` of `backend` in the group `app`, with `message`.
fn refused<'a>(
    app: &'a Arc<str>,
    backend: Option<SocketAddr>,
    message: &'a dyn Display,
) -> Failure<'a> {
    Failure { upstream: app, backend, reason: "connect_refused", status: 502, message }
}

fn counts(lines: &[Line]) -> u64 {
    lines.iter().map(|l| l.count).sum()
}

#[test]
fn first_failure_of_a_key_is_written_at_once() {
    let (app, t0) = (Arc::from("app"), Instant::now());
    let mut failures = Failures::new();
    let line = failures.record(refused(&app, addr(3000), &"connection refused"), t0);
    let expected = Line {
        upstream: Arc::clone(&app),
        backend: addr(3000),
        reason: "connect_refused",
        status: 502,
        count: 1,
        message: "connection refused".into(),
    };
    assert_eq!(line, Some(expected));
}

#[test]
fn failures_within_the_window_are_counted_then_written_by_the_next_after_it() {
    let (app, t0) = (Arc::from("app"), Instant::now());
    let mut failures = Failures::new();
    assert!(failures.record(refused(&app, addr(3000), &"first"), t0).is_some());
    for i in 1..=311 {
        let line = failures.record(refused(&app, addr(3000), &format!("n{i}")), t0 + ms(i));
        assert_eq!(line, None, "failure {i} was written inside the window");
    }
    // The first failure after the window carries itself and the 311 before it, with
    // the latest message.
    let line = failures.record(refused(&app, addr(3000), &"latest"), t0 + WINDOW).expect("due");
    assert_eq!((line.count, line.message.as_str()), (312, "latest"));
    // A new window starts with that line.
    assert_eq!(failures.record(refused(&app, addr(3000), &"again"), t0 + WINDOW + ms(1)), None);
}

#[test]
fn a_tick_writes_the_count_a_burst_ended_on() {
    let (app, t0) = (Arc::from("app"), Instant::now());
    let mut failures = Failures::new();
    failures.record(refused(&app, addr(3000), &"first"), t0);
    for i in 1..=9 {
        failures.record(refused(&app, addr(3000), &format!("n{i}")), t0 + ms(10 * i));
    }
    assert_eq!(failures.due(t0 + ms(999)), [], "written before the window ended");
    let lines = failures.due(t0 + WINDOW);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!((lines[0].count, lines[0].message.as_str()), (9, "n9"));
    // Written once: the next tick has nothing.
    assert_eq!(failures.due(t0 + 2 * WINDOW), []);
}

#[test]
fn keys_differ_by_upstream_backend_and_reason() {
    let (app, api, t0) = (Arc::from("app"), Arc::from("api"), Instant::now());
    let mut failures = Failures::new();
    let timeout =
        Failure { reason: "connect_timeout", status: 504, ..refused(&app, addr(3000), &"") };
    let firsts = [
        refused(&app, addr(3000), &"a"),
        refused(&app, addr(3001), &"b"),
        refused(&api, addr(3000), &"c"),
        refused(&app, None, &"d"),
        timeout,
    ];
    for (i, failure) in firsts.into_iter().enumerate() {
        let line = failures.record(failure, t0 + ms(i as u64));
        assert_eq!(line.map(|l| l.count), Some(1), "failure {i} is the first of its key");
    }
    // Every key is in its window now.
    assert_eq!(failures.record(refused(&app, None, &"e"), t0 + ms(10)), None);
    assert_eq!(failures.record(timeout, t0 + ms(10)), None);
    let lines = failures.due(t0 + ms(10) + WINDOW);
    let mut due: Vec<(Option<SocketAddr>, &str, u16)> =
        lines.iter().map(|l| (l.backend, l.reason, l.status)).collect();
    due.sort();
    assert_eq!(due, [(None, "connect_refused", 502), (addr(3000), "connect_timeout", 504)]);
}

#[test]
fn an_outage_writes_one_line_per_key_per_window_and_counts_every_failure() {
    let (app, t0) = (Arc::from("app"), Instant::now());
    let mut failures = Failures::new();
    let mut lines = Vec::new();
    let mut written_at = Vec::new();
    // Five seconds of a failure every 3 ms (two keys), with a tick every second.
    let mut recorded = 0;
    for step in 0..=5000u64 {
        let now = t0 + ms(step);
        if step % 3 == 0 {
            let backend = if step % 2 == 0 { addr(3000) } else { None };
            recorded += 1;
            if let Some(line) = failures.record(refused(&app, backend, &"down"), now) {
                written_at.push((line.backend, now));
                lines.push(line);
            }
        }
        if step % 1000 == 999 {
            for line in failures.due(now) {
                written_at.push((line.backend, now));
                lines.push(line);
            }
        }
    }
    lines.extend(failures.drain());
    assert_eq!(counts(&lines), recorded, "{lines:?}");
    assert!(lines.len() <= 14, "{} lines for {recorded} failures: {lines:?}", lines.len());
    for key in [addr(3000), None] {
        let times: Vec<Instant> =
            written_at.iter().filter(|(b, _)| *b == key).map(|(_, t)| *t).collect();
        for pair in times.windows(2) {
            assert!(pair[1] - pair[0] >= WINDOW, "{key:?} wrote twice within a window");
        }
    }
}

#[test]
fn quiet_keys_are_forgotten_and_their_next_failure_is_written_at_once() {
    let (app, t0) = (Arc::from("app"), Instant::now());
    let mut failures = Failures::new();
    failures.record(refused(&app, addr(3000), &"first"), t0);
    assert_eq!(failures.due(t0 + WINDOW), []);
    assert!(failures.keys.is_empty(), "a quiet key is kept: {:?}", failures.keys);
    let line = failures.record(refused(&app, addr(3000), &"back"), t0 + WINDOW + ms(1));
    assert_eq!(line.map(|l| l.count), Some(1));
}

#[test]
fn drain_writes_every_pending_count_inside_its_window() {
    let (app, t0) = (Arc::from("app"), Instant::now());
    let mut failures = Failures::new();
    for i in 0..5 {
        failures.record(refused(&app, addr(3000), &"x"), t0 + ms(i));
        failures.record(refused(&app, None, &"y"), t0 + ms(i));
    }
    let lines = failures.drain();
    assert_eq!(lines.iter().map(|l| l.count).collect::<Vec<_>>(), [4, 4], "{lines:?}");
    assert_eq!(failures.drain(), []);
}
