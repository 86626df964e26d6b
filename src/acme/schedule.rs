//! When the next order for a name is due: at the renewal point of its certificate's
//! lifetime, or after a failure, with a wait that doubles up to a ceiling and never
//! lasts past the certificate's expiry. Pure: the time comes in as an argument; the
//! [`Clock`] is where the manager reads it, and tests can move it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::settings::{RenewAt, MAX_RETRY_DELAY};

/// Where the manager reads wall-clock time: certificates' validity is wall-clock time.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> SystemTime + Send + Sync>);

impl Clock {
    /// The system's clock.
    pub fn system() -> Clock {
        Clock(Arc::new(SystemTime::now))
    }

    /// A clock that reads `now`, for tests.
    #[cfg(test)]
    pub fn from_fn(now: impl Fn() -> SystemTime + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(now))
    }

    pub fn now(&self) -> SystemTime {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clock").finish_non_exhaustive()
    }
}

/// The validity period a certificate states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// When the renewal of a certificate valid for this period is due: `renew_at` of
    /// the way through it.
    pub fn renewal_time(&self, renew_at: RenewAt) -> SystemTime {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + lifetime.mul_f64(renew_at.fraction())
    }

    /// Whether the certificate is still valid at `now`.
    pub fn is_valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }
}

/// The waits between failed attempts: `base`, then twice that for each further
/// failure in a row, at most [`MAX_RETRY_DELAY`] (or `base`, if that is longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
}

impl Backoff {
    /// The wait after `failures` failures in a row (1 for the first).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        let delay = self.base.checked_mul(1 << doublings).unwrap_or(Duration::MAX);
        delay.min(MAX_RETRY_DELAY.max(self.base))
    }

    /// When to try again after `failures` failures in a row at `now`, for a
    /// certificate that expires at `expires` (if there is one): the retry never waits
    /// past the expiry, so a certificate gets a last attempt before clients see it
    /// expired.
    pub fn retry_time(
        &self,
        now: SystemTime,
        failures: u32,
        expires: Option<SystemTime>,
    ) -> SystemTime {
        let retry = now + self.delay(failures);
        match expires {
            Some(expires) if now < expires && expires < retry => expires,
            _ => retry,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn renewal_is_two_thirds_through_the_lifetime() {
        let validity = Validity { not_before: at(0), not_after: at(90 * 86400) };
        let renew_at = crate::acme::settings::DEFAULT_RENEW_AT;
        assert_eq!(validity.renewal_time(renew_at), at(60 * 86400));
        let half = RenewAt::new(0.5).unwrap();
        assert_eq!(Validity { not_before: at(10), not_after: at(20) }.renewal_time(half), at(15));
    }

    #[test]
    fn validity_is_checked_at_both_ends() {
        let validity = Validity { not_before: at(10), not_after: at(20) };
        assert!(!validity.is_valid_at(at(9)));
        assert!(validity.is_valid_at(at(10)));
        assert!(validity.is_valid_at(at(19)));
        assert!(!validity.is_valid_at(at(20)));
    }

    #[test]
    fn retry_waits_double_from_a_minute_to_an_hour() {
        let backoff = Backoff { base: MINUTE };
        let waits: Vec<u64> = (1..=9).map(|n| backoff.delay(n).as_secs() / 60).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff.delay(u32::MAX), MAX_RETRY_DELAY);
    }

    #[test]
    fn retry_never_waits_past_expiry() {
        let backoff = Backoff { base: MINUTE };
        // The sixth failure would wait 32 minutes; the certificate expires in 10.
        assert_eq!(backoff.retry_time(at(0), 6, Some(at(600))), at(600));
        assert_eq!(backoff.retry_time(at(0), 1, Some(at(600))), at(60));
        // Already expired, or no certificate: the usual wait.
        assert_eq!(backoff.retry_time(at(700), 1, Some(at(600))), at(760));
        assert_eq!(backoff.retry_time(at(0), 2, None), at(120));
    }
}
