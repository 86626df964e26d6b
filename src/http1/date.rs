//! The `Date` header value (IMF-fixdate), formatted once a second per thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
const LEN: usize = 29;

struct Cached {
    second: u64,
    text: [u8; LEN],
}

thread_local! {
    static CACHED: RefCell<Cached> = const { RefCell::new(Cached { second: u64::MAX, text: [b' '; LEN] }) };
}

/// Appends the current date as an IMF-fixdate to `out`.
pub fn append_now(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.second != second {
            let text = httpdate::fmt_http_date(now);
            if text.len() == LEN {
                cached.text.copy_from_slice(text.as_bytes());
                cached.second = second;
            } else {
                // Years past 9999 would not fit; write them uncached.
                out.extend_from_slice(text.as_bytes());
                return;
            }
        }
        out.extend_from_slice(&cached.text);
    });
}
