//! The responses holdfast makes itself instead of relaying an origin's (the 502/503/504
//! of an upstream failure, the 4xx of a refused request, the 404 of a request no route
//! matched), counted across listeners, with the name and help of the families they are
//! exported as.
//!
//! Answers are rare, so a lock here costs nothing that matters. They observe: nothing
//! reads them to decide anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::metrics::{Family, ReasonCounts, Report, Writer, NO_LABELS};

/// One kind of response holdfast made itself: for which group (`None`: before a
/// route was found), why, and with which status.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AnswerKey {
    pub upstream: Option<Arc<str>>,
    pub reason: &'static str,
    pub status: u16,
}

/// Every response holdfast made itself, by group, reason and status.
#[derive(Debug, Default)]
pub struct Answers {
    counts: Mutex<Vec<(AnswerKey, u64)>>,
    /// Requests refused before routing, by the rule they broke (finer than the
    /// answers' reason: `bad_framing`, `bad_host`, ...).
    pub refusals: ReasonCounts,
    /// Requests no route matched (answered 404).
    unrouted: AtomicU64,
}

impl Answers {
    pub fn record(&self, upstream: Option<&Arc<str>>, reason: &'static str, status: u16) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let found = counts.iter_mut().find(|(k, _)| {
            k.reason == reason
                && k.status == status
                && k.upstream.as_deref() == upstream.map(|u| &**u)
        });
        match found {
            Some((_, n)) => *n = n.saturating_add(1),
            None => {
                let key = AnswerKey { upstream: upstream.cloned(), reason, status };
                counts.push((key, 1));
            }
        }
    }

    /// A request no route matched.
    pub fn unrouted(&self) {
        self.unrouted.fetch_add(1, Ordering::Relaxed);
    }

    /// Every kind of answer so far with its count, sorted; refusals by rule; unrouted
    /// requests.
    pub fn snapshot(&self) -> AnswersSnapshot {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner()).clone();
        counts.sort_unstable();
        AnswersSnapshot {
            unrouted: self.unrouted.load(Ordering::Relaxed),
            answers: counts,
            refusals: self.refusals.snapshot(),
        }
    }
}

const UNROUTED: Family =
    Family { name: "holdfast_unrouted_requests", help: "Requests no route matched, answered 404." };
const ERRORS: Family = Family {
    name: "holdfast_errors",
    help: "Responses holdfast made itself instead of relaying an origin's, by upstream group (- before routing), reason and status.",
};
const REFUSED: Family = Family {
    name: "holdfast_refused_requests",
    help: "Requests refused before routing, by the rule they broke.",
};

/// The proxy's own answers at one moment.
#[derive(Debug, Clone, Default)]
pub struct AnswersSnapshot {
    /// Requests no route matched (answered 404).
    pub unrouted: u64,
    /// Responses holdfast made itself, by group, reason and status ([`Answers::snapshot`]).
    pub answers: Vec<(AnswerKey, u64)>,
    /// Requests refused before routing, by rule.
    pub refusals: Vec<(&'static str, u64)>,
}

impl Report for AnswersSnapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        out.counter(&UNROUTED, [(NO_LABELS, self.unrouted)])?;
        out.counter(
            &ERRORS,
            self.answers.iter().map(|(k, n)| {
                let upstream = k.upstream.as_deref().unwrap_or("-").to_string();
                let labels = [
                    ("upstream", upstream),
                    ("reason", k.reason.to_string()),
                    ("status", k.status.to_string()),
                ];
                (labels, *n)
            }),
        )?;
        out.counter(&REFUSED, self.refusals.iter().map(|(rule, n)| ([("rule", *rule)], *n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_count_by_group_reason_and_status() {
        let answers = Answers::default();
        let app: Arc<str> = Arc::from("app");
        answers.record(Some(&app), "connect_refused", 502);
        answers.record(Some(&app), "connect_refused", 502);
        answers.record(None, "bad_request", 400);
        answers.record(Some(&app), "connect_timeout", 504);
        answers.unrouted();
        let snapshot = answers.snapshot();
        assert_eq!(snapshot.unrouted, 1);
        let snap = snapshot.answers;
        let find =
            |reason| snap.iter().find(|(k, _)| k.reason == reason).map(|(k, n)| (k.clone(), *n));
        assert_eq!(find("connect_refused").map(|(k, n)| (k.status, n)), Some((502, 2)));
        assert_eq!(find("bad_request").map(|(k, _)| k.upstream), Some(None));
        assert_eq!(snap.iter().map(|(_, n)| n).sum::<u64>(), 4);
    }
}
