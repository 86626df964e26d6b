//! What the certificate manager counts and shows: orders by result and failed
//! challenges by type ([`AcmeMetrics`], plain atomics), each name's state
//! ([`NameStatus`]: what is served, until when, the next order, the last error), and
//! [`AcmeSnapshot`], all of it read at one moment, which writes itself for `/metrics`.
//! Metrics observe; the manager never reads them to decide anything.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::SystemTime;

use super::settings::Challenge;
use crate::metrics::{Family, Report, Writer};

/// Orders and challenge failures since start.
#[derive(Debug, Default)]
pub struct AcmeMetrics {
    orders_ok: AtomicU64,
    orders_failed: AtomicU64,
    /// By challenge, in the order of [`Challenge::ALL`].
    challenge_failures: [AtomicU64; 2],
}

impl AcmeMetrics {
    pub fn order_succeeded(&self) {
        self.orders_ok.fetch_add(1, Relaxed);
    }

    /// An order that failed; `challenge_failed`: because the CA could not validate its
    /// `challenge`.
    pub fn order_failed(&self, challenge: Challenge, challenge_failed: bool) {
        self.orders_failed.fetch_add(1, Relaxed);
        if challenge_failed {
            self.challenge_failures[challenge_index(challenge)].fetch_add(1, Relaxed);
        }
    }
}

fn challenge_index(challenge: Challenge) -> usize {
    match challenge {
        Challenge::Http01 => 0,
        Challenge::TlsAlpn01 => 1,
    }
}

/// What TLS clients get for a name now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// A certificate from the CA (issued in this run, or stored by an earlier one).
    Issued,
    /// The self-signed placeholder, until issuance.
    Placeholder,
    /// Nothing: handshakes for the name fail until issuance (`pending = "refuse"`).
    Nothing,
}

impl Serving {
    /// A stable snake_case name for `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Serving::Issued => "issued",
            Serving::Placeholder => "placeholder",
            Serving::Nothing => "nothing",
        }
    }
}

/// One name's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameStatus {
    pub name: String,
    pub serving: Serving,
    /// When the issued certificate being served expires.
    pub not_after: Option<SystemTime>,
    /// When the next order (first, renewal or retry) is due.
    pub next_order: Option<SystemTime>,
    /// When the last order started.
    pub last_attempt: Option<SystemTime>,
    /// Orders that failed in a row (0 after a success).
    pub failures: u32,
    /// Why the last order failed: the name, the challenge and what the CA said. Cleared
    /// by the next success.
    pub last_error: Option<String>,
}

impl NameStatus {
    pub fn new(name: &str, serving: Serving) -> NameStatus {
        NameStatus {
            name: name.to_string(),
            serving,
            not_after: None,
            next_order: None,
            last_attempt: None,
            failures: 0,
            last_error: None,
        }
    }
}

/// The manager's numbers and every name's state at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcmeSnapshot {
    pub orders_ok: u64,
    pub orders_failed: u64,
    /// Failed challenges by type, both types always listed.
    pub challenge_failures: Vec<(Challenge, u64)>,
    pub names: Vec<NameStatus>,
}

impl AcmeSnapshot {
    pub fn read(metrics: &AcmeMetrics, names: Vec<NameStatus>) -> AcmeSnapshot {
        AcmeSnapshot {
            orders_ok: metrics.orders_ok.load(Relaxed),
            orders_failed: metrics.orders_failed.load(Relaxed),
            challenge_failures: Challenge::ALL
                .iter()
                .map(|c| (*c, metrics.challenge_failures[challenge_index(*c)].load(Relaxed)))
                .collect(),
            names,
        }
    }

    #[cfg(test)]
    pub fn challenge_failures(&self, challenge: Challenge) -> u64 {
        self.challenge_failures.iter().find(|(c, _)| *c == challenge).map_or(0, |(_, n)| *n)
    }

    #[cfg(test)]
    pub fn name(&self, name: &str) -> Option<&NameStatus> {
        self.names.iter().find(|s| s.name == name)
    }
}

const ORDERS: Family = Family {
    name: "holdfast_acme_orders",
    help: "Certificate orders placed with the ACME CA, by result.",
};
const CHALLENGE_FAILURES: Family = Family {
    name: "holdfast_acme_challenge_failures",
    help: "Challenges the ACME CA could not validate, by challenge type.",
};
const EXPIRY: Family = Family {
    name: "holdfast_acme_certificate_expiry_seconds",
    help: "When the certificate served for a name expires, in seconds since the Unix epoch (names without an issued certificate are absent).",
};

impl Report for AcmeSnapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        out.counter(
            &ORDERS,
            [([("result", "ok")], self.orders_ok), ([("result", "failed")], self.orders_failed)],
        )?;
        out.counter(
            &CHALLENGE_FAILURES,
            self.challenge_failures.iter().map(|(c, n)| ([("challenge", c.as_str())], *n)),
        )?;
        out.gauge(
            &EXPIRY,
            self.names.iter().filter_map(|s| {
                let seconds = s.not_after?.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
                Some(([("name", s.name.clone())], seconds))
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::metrics::export::Exporter;

    #[test]
    fn families_show_orders_challenges_and_expiry() {
        let metrics = AcmeMetrics::default();
        metrics.order_succeeded();
        metrics.order_failed(Challenge::Http01, true);
        metrics.order_failed(Challenge::TlsAlpn01, false);
        let mut issued = NameStatus::new("a.example", Serving::Issued);
        issued.not_after = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        let waiting = NameStatus::new("b.example", Serving::Placeholder);
        let snapshot = AcmeSnapshot::read(&metrics, vec![issued, waiting]);
        assert_eq!(snapshot.challenge_failures(Challenge::Http01), 1);
        assert_eq!(snapshot.challenge_failures(Challenge::TlsAlpn01), 0);
        let text = Exporter::new(move || snapshot.clone()).render();
        for line in [
            "holdfast_acme_orders_total{result=\"ok\"} 1",
            "holdfast_acme_orders_total{result=\"failed\"} 2",
            "holdfast_acme_challenge_failures_total{challenge=\"http-01\"} 1",
            "holdfast_acme_challenge_failures_total{challenge=\"tls-alpn-01\"} 0",
            "holdfast_acme_certificate_expiry_seconds{name=\"a.example\"} 1800000000",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
        assert!(!text.contains("b.example"), "{text}");
    }
}
