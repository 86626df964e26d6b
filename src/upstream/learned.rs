//! Closes a backend's origin makes without announcing them, learned from what it does:
//! it closes each connection shortly after its Nth request, or shortly after a kind of
//! response (a status, with or without a declared length), with no `Connection: close`
//! and no `Keep-Alive: max`. Once the same point has been seen often enough, holdfast
//! retires connections there itself, as it does when the origin says `Keep-Alive: max`,
//! instead of sending the next request into the close (a 502 for a POST, which must not
//! be sent twice).
//!
//! Evidence is a close seen within [`SHORTLY`] of the connection's last response: an
//! idle pooled connection found closed (by the event loop or the probe before reuse),
//! or a request on a reused connection that failed before any response byte. A close
//! after a longer idle is an idle timeout, the pool's `idle_timeout` and the origin's
//! `Keep-Alive: timeout` business, and teaches nothing. A rule needs [`EVIDENCE`] closes
//! at the same point with no connection going past that point in between. A rule in
//! force is checked again on retired connections, one at a time: when the origin no
//! longer closes them soon after (within [`RECHECK`]), the rule is forgotten.
//!
//! # Cost
//! Each response costs one atomic read while nothing is learned or pending, and a few
//! more while a rule is in force. The lock is taken for a close, for each response
//! while a point has evidence that no answer has contradicted yet, and for a re-check.
//! Memory is bounded: one count and [`KINDS`] kinds of response, both as candidates
//! and as rules.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::connect::OriginConn;

/// How soon after a connection's last response a close counts as caused by it (or by
/// the connection's count of requests). Servers that close after a response they meant
/// as the last do so within milliseconds (1 to 5 ms in the field report); idle
/// timeouts that servers ship with are seconds (Node.js 5 s, Apache httpd 5 s,
/// gunicorn 2 s, nginx 75 s), so a close seen this early is not one of them.
pub const SHORTLY: Duration = Duration::from_millis(200);

/// Closes at the same point, on this many connections, with no connection going past
/// it in between, make a rule. One close could be anything (a restart, a crash). An
/// origin that closes connections at random, once in every 1/p responses, gives three
/// in a row by chance about p² of the time: after any close, the next two connections
/// close after their first response (1 in 400 closes for p = 5%); four in a row, p³
/// (1 in 8,000). Each close before a rule may cost a 502 for a request that could not
/// be sent again; a wrong rule costs reuse until re-checks forget it.
pub const EVIDENCE: u32 = 4;

/// How long after its last response a connection a rule retired is watched for the
/// origin's close. Wider than [`SHORTLY`], so that a busy holdfast which sees the close
/// late does not take it for a change; still shorter than the idle timeouts servers
/// ship with, so an origin that now keeps its connections until its idle timeout is
/// not taken for one that closes them.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Re-checks in a row that found the origin keeping a retired connection open past
/// [`RECHECK`] before a rule is forgotten. One can be a slow origin; two are not.
const MISSES_TO_FORGET: u32 = 2;

/// Kinds of response kept as candidates, and as rules, per backend at most.
pub const KINDS: usize = 4;

/// A response as the rules tell responses apart: its status, and whether it declared
/// its length (`Content-Length` or `Transfer-Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResponseKind {
    pub status: u16,
    pub declares_length: bool,
}

impl ResponseKind {
    /// The kind as one non-zero number, for an atomic slot or a connection's mark in
    /// the pool (0: none).
    pub fn code(self) -> u32 {
        (u32::from(self.status) << 1 | u32::from(self.declares_length)) + 1
    }

    /// The kind [`ResponseKind::code`] made `code`; `None` for 0.
    pub fn from_code(code: u32) -> Option<ResponseKind> {
        let bits = code.checked_sub(1)?;
        let status = u16::try_from(bits >> 1).ok()?;
        Some(ResponseKind { status, declares_length: bits & 1 == 1 })
    }
}

impl fmt::Display for ResponseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let length = if self.declares_length { "with" } else { "without" };
        write!(f, "a {} response {length} a declared length", self.status)
    }
}

/// Where an origin closes its connections, as learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseRule {
    /// After this many requests on a connection.
    AfterRequests(u64),
    /// After each response of this kind.
    AfterResponse(ResponseKind),
}

impl CloseRule {
    /// Every kind of rule, in a fixed order (for exporting counts).
    pub const NAMES: [&'static str; 2] = ["after_requests", "after_response"];

    /// A stable snake_case name for logs, metric labels and `/status`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CloseRule::AfterRequests(_) => "after_requests",
            CloseRule::AfterResponse(_) => "after_response",
        }
    }
}

impl fmt::Display for CloseRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseRule::AfterRequests(1) => write!(f, "after the first request on a connection"),
            CloseRule::AfterRequests(n) => write!(f, "after {n} requests on a connection"),
            CloseRule::AfterResponse(kind) => write!(f, "after {kind}"),
        }
    }
}

/// One close the origin did not announce.
#[derive(Debug, Clone, Copy)]
pub struct Close {
    /// Requests the connection carried and got answers to.
    pub requests: u64,
    /// The kind of the last of those answers.
    pub last: Option<ResponseKind>,
    /// From the end of that answer to when the close was seen.
    pub seen_after: Duration,
    /// When it was seen. Closes seen in one look at the pool share it, and count once:
    /// an origin that restarts closes every connection at once, and that is one event.
    pub at: Instant,
}

/// A response the origin sent: to the `request`th request on its connection, after a
/// response of kind `previous` on it (none for the first).
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub request: u64,
    pub previous: Option<ResponseKind>,
    pub kind: ResponseKind,
}

/// Bits of [`LearnedCloses::flags`].
const PENDING: u8 = 1;
const RULES: u8 = 2;

/// What one backend's origin has been seen to do with its connections.
pub struct LearnedCloses {
    upstream: Arc<str>,
    backend: SocketAddr,
    /// [`PENDING`]: a point has evidence and waits for more, so answers may contradict
    /// it; [`RULES`]: a rule is in force. Zero on the common path.
    flags: AtomicU8,
    /// The `AfterRequests` rule in force (0: none).
    after_requests: AtomicU64,
    /// The `AfterResponse` rules in force, as [`ResponseKind::code`]s (0: empty slot).
    after_responses: [AtomicU32; KINDS],
    /// A retired connection is being watched (one at a time).
    watching: AtomicBool,
    learning: Mutex<Learning>,
}

/// Evidence and rules, behind the lock.
#[derive(Default)]
struct Learning {
    /// The count of requests after which connections were last seen closing.
    count: Option<Streak<u64>>,
    /// Kinds of response after which connections were seen closing.
    kinds: Vec<Streak<ResponseKind>>,
    rules: Vec<Rule>,
    /// When the last close counted was seen (see [`Close::at`]).
    last_at: Option<Instant>,
}

/// Closes seen in a row at one point.
struct Streak<T> {
    point: T,
    closes: u32,
}

/// A rule in force and how it has held up.
struct Rule {
    rule: CloseRule,
    learned_at: Instant,
    /// Retired connections the origin then closed within [`RECHECK`].
    confirmed: u64,
    /// Re-checks in a row that saw no close.
    misses: u32,
}

/// A rule in force, for `/status` and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSnapshot {
    pub rule: CloseRule,
    /// How long ago it was learned.
    pub age: Duration,
    /// Retired connections the origin then closed within [`RECHECK`].
    pub confirmed: u64,
}

impl LearnedCloses {
    /// Nothing learned yet about the origin at `backend` of the group `upstream`.
    pub fn new(upstream: Arc<str>, backend: SocketAddr) -> LearnedCloses {
        LearnedCloses {
            upstream,
            backend,
            flags: AtomicU8::new(0),
            after_requests: AtomicU64::new(0),
            after_responses: Default::default(),
            watching: AtomicBool::new(false),
            learning: Mutex::new(Learning::default()),
        }
    }

    /// Counts `close` as evidence when it came within [`SHORTLY`] of a response.
    pub fn closed(&self, close: Close) {
        if close.requests == 0 || close.seen_after > SHORTLY {
            return;
        }
        let mut learning = self.lock();
        if learning.last_at == Some(close.at) {
            return;
        }
        learning.last_at = Some(close.at);
        let now = Instant::now();
        if let Some(rule) = learning.count_close(close.requests) {
            self.learn(&mut learning, rule, now);
        } else if let Some(rule) = close.last.and_then(|kind| learning.kind_close(kind)) {
            self.learn(&mut learning, rule, now);
        }
        self.publish(&learning);
    }

    /// Hears of a response from the origin, and says whether a rule ends its
    /// connection's reuse after it. Reads one atomic when nothing is learned or pending.
    pub fn answered(&self, answer: Answer) -> Option<CloseRule> {
        let flags = self.flags.load(Relaxed);
        if flags == 0 {
            return None;
        }
        if flags & PENDING != 0 {
            let mut learning = self.lock();
            learning.contradict(answer);
            self.publish(&learning);
        }
        if flags & RULES == 0 {
            return None;
        }
        let after = self.after_requests.load(Relaxed);
        if after != 0 && answer.request >= after {
            return Some(CloseRule::AfterRequests(after));
        }
        let code = answer.kind.code();
        let by_kind = self.after_responses.iter().any(|slot| slot.load(Relaxed) == code);
        by_kind.then_some(CloseRule::AfterResponse(answer.kind))
    }

    /// Takes `conn`, retired by `rule` after a response that ended at `ended`: watches
    /// whether the origin closes it within [`RECHECK`] of that, unless another
    /// connection is being watched, and closes it.
    pub fn retire(self: &Arc<Self>, conn: OriginConn, rule: CloseRule, ended: Instant) {
        if self.watching.swap(true, Relaxed) {
            return;
        }
        let learned = Arc::clone(self);
        tokio::spawn(async move {
            let closed = conn.closes_by(ended + RECHECK).await;
            drop(conn);
            learned.rechecked(rule, closed);
        });
    }

    /// A watched connection retired by `rule` was `closed` by the origin within
    /// [`RECHECK`], or not.
    fn rechecked(&self, rule: CloseRule, closed: bool) {
        let mut learning = self.lock();
        if let Some(i) = learning.rules.iter().position(|r| r.rule == rule) {
            let held = &mut learning.rules[i];
            if closed {
                held.confirmed += 1;
                held.misses = 0;
            } else {
                held.misses += 1;
                if held.misses >= MISSES_TO_FORGET {
                    learning.rules.remove(i);
                    tracing::info!(
                        upstream = %self.upstream, backend = %self.backend, rule = %rule,
                        "origin no longer closes connections at this point; the rule is forgotten"
                    );
                }
            }
        }
        self.publish(&learning);
        self.watching.store(false, Relaxed);
    }

    /// The rules in force as of `now`.
    pub fn snapshot(&self, now: Instant) -> Vec<RuleSnapshot> {
        let learning = self.lock();
        learning
            .rules
            .iter()
            .map(|r| RuleSnapshot {
                rule: r.rule,
                age: now.saturating_duration_since(r.learned_at),
                confirmed: r.confirmed,
            })
            .collect()
    }

    fn learn(&self, learning: &mut Learning, rule: CloseRule, now: Instant) {
        match rule {
            // One count: a newer one replaces it (the origin changed its limit).
            CloseRule::AfterRequests(_) => {
                learning.rules.retain(|r| !matches!(r.rule, CloseRule::AfterRequests(_)));
            }
            CloseRule::AfterResponse(_) => {
                let kinds = || learning.rules.iter().filter(|r| r.rule.as_str() == rule.as_str());
                if kinds().count() >= KINDS {
                    // The oldest kind makes room.
                    let oldest = kinds().min_by_key(|r| r.learned_at).map(|r| r.rule);
                    learning.rules.retain(|r| Some(r.rule) != oldest);
                }
            }
        }
        learning.rules.push(Rule { rule, learned_at: now, confirmed: 0, misses: 0 });
        tracing::warn!(
            upstream = %self.upstream, backend = %self.backend, rule = %rule, closes = EVIDENCE,
            "origin closes connections without announcing it; holdfast retires them at this point"
        );
    }

    /// Makes the lock-free view agree with `learning`: the flags and the rules.
    fn publish(&self, learning: &Learning) {
        let mut after = 0;
        let mut kinds = [0u32; KINDS];
        let mut slots = kinds.iter_mut();
        for rule in &learning.rules {
            match rule.rule {
                CloseRule::AfterRequests(n) => after = n,
                CloseRule::AfterResponse(kind) => {
                    if let Some(slot) = slots.next() {
                        *slot = kind.code();
                    }
                }
            }
        }
        self.after_requests.store(after, Relaxed);
        for (slot, code) in self.after_responses.iter().zip(kinds) {
            slot.store(code, Relaxed);
        }
        let pending = learning.count.is_some() || !learning.kinds.is_empty();
        let flags =
            if pending { PENDING } else { 0 } | if learning.rules.is_empty() { 0 } else { RULES };
        self.flags.store(flags, Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Learning> {
        // Every change leaves the state consistent, so a poisoned lock is still usable.
        self.learning.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Learning {
    /// A close after `requests` requests: the rule it completes, if any.
    fn count_close(&mut self, requests: u64) -> Option<CloseRule> {
        let covered = self.rules.iter().any(|r| r.rule == CloseRule::AfterRequests(requests));
        if covered {
            // A connection already under way when the rule was learned.
            return None;
        }
        let closes = match &mut self.count {
            Some(streak) if streak.point == requests => {
                streak.closes += 1;
                streak.closes
            }
            _ => {
                self.count = Some(Streak { point: requests, closes: 1 });
                1
            }
        };
        (closes >= EVIDENCE).then(|| {
            self.count = None;
            CloseRule::AfterRequests(requests)
        })
    }

    /// A close after a response of kind `kind`: the rule it completes, if any.
    fn kind_close(&mut self, kind: ResponseKind) -> Option<CloseRule> {
        let rule = CloseRule::AfterResponse(kind);
        if self.rules.iter().any(|r| r.rule == rule) {
            return None;
        }
        let i = match self.kinds.iter().position(|s| s.point == kind) {
            Some(i) => i,
            None => {
                if self.kinds.len() >= KINDS {
                    // The kind with the least evidence makes room.
                    let least = self.kinds.iter().enumerate().min_by_key(|(_, s)| s.closes);
                    if let Some((i, _)) = least {
                        self.kinds.swap_remove(i);
                    }
                }
                self.kinds.push(Streak { point: kind, closes: 0 });
                self.kinds.len() - 1
            }
        };
        let streak = &mut self.kinds[i];
        streak.closes += 1;
        (streak.closes >= EVIDENCE).then(|| {
            self.kinds.swap_remove(i);
            rule
        })
    }

    /// The origin answered `answer`: it did not close after the requests before it,
    /// nor after the response before it on that connection.
    fn contradict(&mut self, answer: Answer) {
        if self.count.as_ref().is_some_and(|s| s.point < answer.request) {
            self.count = None;
        }
        if let Some(previous) = answer.previous {
            self.kinds.retain(|s| s.point != previous);
        }
    }
}

#[cfg(test)]
mod tests;
