//! Reads the limits an origin advertises in `Keep-Alive: timeout=N, max=M`.
//!
//! Servers that send it (Node.js, Apache httpd) close an idle connection after about N
//! seconds and accept M more requests on it. Both values are whole numbers, and Node
//! rounds its timeout down (300 ms is sent as `timeout=0`), so the real timeout lies in
//! [N, N+1) seconds. holdfast retires the connection a margin earlier than N: a fifth of
//! it, at least 500 ms. N = 0 means the connection must not idle at all.

use std::time::Duration;

use holdfast_pool::OriginLimits;

/// The smallest margin kept before an advertised idle timeout: covers the time between
/// a pool checkout and the request reaching the origin on a loaded machine.
const MIN_MARGIN: Duration = Duration::from_millis(500);

/// The limits in a response's `Keep-Alive` header value, if it has one.
pub fn origin_limits(value: Option<&[u8]>) -> OriginLimits {
    let mut limits = OriginLimits::default();
    let Some(value) = value.and_then(|v| std::str::from_utf8(v).ok()) else {
        return limits;
    };
    let params = value.split(',').filter_map(|p| p.split_once('='));
    for (name, value) in params {
        let Ok(n) = value.trim().trim_matches('"').parse::<u64>() else { continue };
        match name.trim().to_ascii_lowercase().as_str() {
            "timeout" => limits.idle = Some(idle_with_margin(Duration::from_secs(n))),
            "max" => limits.remaining_requests = Some(n),
            _ => {}
        }
    }
    limits
}

fn idle_with_margin(advertised: Duration) -> Duration {
    let margin = (advertised / 5).max(MIN_MARGIN);
    advertised.saturating_sub(margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(value: &str) -> OriginLimits {
        origin_limits(Some(value.as_bytes()))
    }

    #[test]
    fn timeout_is_shortened_by_a_margin() {
        assert_eq!(limits("timeout=5").idle, Some(Duration::from_secs(4)));
        assert_eq!(limits("timeout=60").idle, Some(Duration::from_secs(48)));
        assert_eq!(limits("timeout=1").idle, Some(Duration::from_millis(500)));
        assert_eq!(limits("timeout=0").idle, Some(Duration::ZERO));
    }

    #[test]
    fn max_and_timeout_are_read_in_any_order_and_case() {
        let l = limits("MAX=99, Timeout=15");
        assert_eq!(l.remaining_requests, Some(99));
        assert_eq!(l.idle, Some(Duration::from_secs(12)));
    }

    #[test]
    fn missing_or_garbled_header_sets_nothing() {
        assert_eq!(origin_limits(None), OriginLimits::default());
        assert_eq!(limits("timeout=soon, max=-1"), OriginLimits::default());
    }
}
