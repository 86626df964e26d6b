//! What the workers of one run counted: successes, failures by kind, latency, connects, and the first
//! failure of each kind (so stderr can say what went wrong without a line per request).
//!
//! Shared by all workers of a run through an `Arc`; counters are relaxed atomics and the
//! histogram sits behind a mutex held only for one `record` (a few nanoseconds).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde::Serialize;

use super::exchange::{ErrorKind, ExchangeError};
use crate::histogram::{Histogram, LatencySummary};

#[derive(Debug, Default)]
pub struct Tally {
    ok: AtomicU64,
    connects: AtomicU64,
    errors: [AtomicU64; ErrorKind::ALL.len()],
    first_errors: [OnceLock<String>; ErrorKind::ALL.len()],
    latency_us: Mutex<Histogram>,
}

/// Failures by kind; every kind is present (zero if none), so the JSON shape is fixed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    pub addr_not_available: u64,
    pub connect_refused: u64,
    pub connect_other: u64,
    pub status_5xx: u64,
    pub status_other: u64,
    pub io: u64,
    pub timeout: u64,
    pub tls: u64,
}

impl ErrorCounts {
    pub fn get(&self, kind: ErrorKind) -> u64 {
        match kind {
            ErrorKind::AddrNotAvailable => self.addr_not_available,
            ErrorKind::ConnectRefused => self.connect_refused,
            ErrorKind::ConnectOther => self.connect_other,
            ErrorKind::Status5xx => self.status_5xx,
            ErrorKind::StatusOther => self.status_other,
            ErrorKind::Io => self.io,
            ErrorKind::Timeout => self.timeout,
            ErrorKind::Tls => self.tls,
        }
    }

    fn set(&mut self, kind: ErrorKind, count: u64) {
        let field = match kind {
            ErrorKind::AddrNotAvailable => &mut self.addr_not_available,
            ErrorKind::ConnectRefused => &mut self.connect_refused,
            ErrorKind::ConnectOther => &mut self.connect_other,
            ErrorKind::Status5xx => &mut self.status_5xx,
            ErrorKind::StatusOther => &mut self.status_other,
            ErrorKind::Io => &mut self.io,
            ErrorKind::Timeout => &mut self.timeout,
            ErrorKind::Tls => &mut self.tls,
        };
        *field = count;
    }

    pub fn total(&self) -> u64 {
        ErrorKind::ALL.into_iter().map(|kind| self.get(kind)).sum()
    }

    /// Responses that arrived with a non-2xx status.
    pub fn non_2xx(&self) -> u64 {
        self.status_5xx + self.status_other
    }

    /// Failures where no response arrived: connect, TLS, I/O and timeouts.
    pub fn socket_errors(&self) -> u64 {
        self.total() - self.non_2xx()
    }
}

impl Tally {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one finished exchange that started `latency` ago. Latency is recorded for
    /// every exchange that got a response (2xx or not), not for socket errors or timeouts.
    pub fn record(&self, outcome: &Result<(), ExchangeError>, latency: Duration) {
        match outcome {
            Ok(()) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                self.record_latency(latency);
            }
            Err(error) => {
                self.record_error(error);
                if error.kind().is_status() {
                    self.record_latency(latency);
                }
            }
        }
    }

    /// Counts one failure that has no latency worth recording.
    pub fn record_error(&self, error: &ExchangeError) {
        let index = error.kind().index();
        self.errors[index].fetch_add(1, Ordering::Relaxed);
        if self.first_errors[index].get().is_none() {
            let _ = self.first_errors[index].set(error.to_string());
        }
    }

    fn record_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_us.lock().unwrap_or_else(PoisonError::into_inner).record(micros);
    }

    /// Counts TCP connections opened (successful connects).
    pub fn add_connects(&self, count: u64) {
        self.connects.fetch_add(count, Ordering::Relaxed);
    }

    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    pub fn error_counts(&self) -> ErrorCounts {
        let mut counts = ErrorCounts::default();
        for kind in ErrorKind::ALL {
            counts.set(kind, self.errors[kind.index()].load(Ordering::Relaxed));
        }
        counts
    }

    pub fn latency(&self) -> LatencySummary {
        self.latency_us.lock().unwrap_or_else(PoisonError::into_inner).summary()
    }

    /// The first failure seen of each kind, in [`ErrorKind::ALL`] order.
    pub fn first_errors(&self) -> Vec<(ErrorKind, String)> {
        ErrorKind::ALL
            .into_iter()
            .filter_map(|kind| Some((kind, self.first_errors[kind.index()].get()?.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn status_failures_count_as_non_2xx_and_keep_their_latency() {
        let tally = Tally::new();
        tally.record(&Ok(()), Duration::from_micros(100));
        tally.record(
            &Err(ExchangeError::Status(StatusCode::BAD_GATEWAY)),
            Duration::from_micros(300),
        );
        tally.record(&Err(ExchangeError::Timeout), Duration::from_secs(10));
        let counts = tally.error_counts();
        assert_eq!((tally.ok(), counts.non_2xx(), counts.socket_errors()), (1, 1, 1));
        assert_eq!(tally.latency().max, 300);
        assert_eq!(tally.first_errors().len(), 2);
    }
}
