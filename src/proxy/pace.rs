//! How long a client may keep holdfast waiting while a body moves: a token bucket of
//! waiting time. It starts full, at the head start (`client_body`); waiting on the
//! client drains it, and every byte the client moves refills it by the time that byte
//! takes at the minimum rate, never beyond the head start. A client that keeps up the
//! minimum rate never runs dry; one that trickles does, however often it sends a byte,
//! and one that filled the socket buffers quickly and then stopped reading gets the
//! head start, not hours of credit for bytes the kernel took.
//!
//! Only waits on the client count: a request body holdfast waits to read, a response
//! the client does not read fast enough for its socket to take more. Waits on the
//! origin are bounded by the upstream timeouts instead, so a slow origin (a long poll,
//! an event stream) does not count against its client. A client sending one byte a
//! minute, which a per-read timeout of a minute never stops, cannot hold a client
//! connection and an upstream connection for longer than its head start.
//!
//! Pure: durations come in, no clock is read here.

use std::time::Duration;

/// The rule: `grace` of waiting allowed at most, earned back at one second for every
/// `min_rate_bytes_per_second` bytes moved. A rate of 0 means no rate rule (only the
/// per-wait stall limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceConfig {
    pub grace: Duration,
    pub min_rate_bytes_per_second: u64,
}

/// One body's account: the waiting time left.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    config: PaceConfig,
    /// No single wait may be longer than this.
    stall: Duration,
    credit: Duration,
}

impl Pace {
    pub fn new(config: PaceConfig, stall: Duration) -> Pace {
        Pace { config, stall, credit: config.grace }
    }

    /// How long the next wait on the client may take: the credit left, at most the
    /// stall limit. Zero when it has run out.
    pub fn allowance(&self) -> Duration {
        if self.config.min_rate_bytes_per_second == 0 {
            return self.stall;
        }
        self.credit.min(self.stall)
    }

    /// `n` more bytes of the body moved: they pay for the time they take at the
    /// minimum rate.
    pub fn moved(&mut self, n: u64) {
        let rate = self.config.min_rate_bytes_per_second;
        let earned_ms = n.saturating_mul(1000).checked_div(rate).unwrap_or(0);
        let credit = self.credit.saturating_add(Duration::from_millis(earned_ms));
        self.credit = credit.min(self.config.grace);
    }

    /// From now on the client gets at most `grace` of waiting in all: the credit it has,
    /// if less, and never more than `grace` again.
    pub fn cut_grace(&mut self, grace: Duration) {
        self.config.grace = self.config.grace.min(grace);
        self.credit = self.credit.min(grace);
        self.stall = self.stall.min(grace);
    }

    /// The client kept holdfast waiting this long.
    pub fn waited(&mut self, d: Duration) {
        self.credit = self.credit.saturating_sub(d);
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn pace() -> Pace {
        let config = PaceConfig { grace: 10 * SECOND, min_rate_bytes_per_second: 1000 };
        Pace::new(config, 60 * SECOND)
    }

    #[test]
    fn a_trickle_runs_out_after_the_head_start() {
        let mut p = pace();
        assert_eq!(p.allowance(), 10 * SECOND);
        // A byte after 9 s earns 1 ms.
        p.waited(9 * SECOND);
        p.moved(1);
        assert_eq!(p.allowance(), Duration::from_millis(1001));
        p.waited(Duration::from_millis(1001));
        p.moved(1);
        assert_eq!(p.allowance(), Duration::from_millis(1));
    }

    #[test]
    fn a_body_at_the_minimum_rate_keeps_its_head_start() {
        let mut p = pace();
        for _ in 0..100 {
            p.waited(SECOND);
            p.moved(1000);
        }
        assert_eq!(p.allowance(), 10 * SECOND);
    }

    #[test]
    fn credit_never_grows_past_the_head_start() {
        let mut p = pace();
        // Megabytes into the socket buffers at once, then nothing.
        p.moved(8_000_000);
        assert_eq!(p.allowance(), 10 * SECOND);
        p.waited(10 * SECOND);
        assert_eq!(p.allowance(), Duration::ZERO);
    }

    #[test]
    fn no_wait_is_longer_than_the_stall_limit() {
        let config = PaceConfig { grace: 3600 * SECOND, min_rate_bytes_per_second: 1000 };
        assert_eq!(Pace::new(config, 60 * SECOND).allowance(), 60 * SECOND);
    }

    #[test]
    fn no_rate_rule_leaves_only_the_stall_limit() {
        let config = PaceConfig { grace: SECOND, min_rate_bytes_per_second: 0 };
        let mut p = Pace::new(config, 60 * SECOND);
        p.waited(3600 * SECOND);
        assert_eq!(p.allowance(), 60 * SECOND);
    }
}
