//! When a request that failed on a pooled connection is sent again on a new one.
//!
//! An origin may close an idle keep-alive connection at any moment without saying so
//! (Node.js after `keepAliveTimeout`, servers that close after N requests). A request sent
//! on such a connection just as it closes fails with a reset or an early EOF. [`may_replay`]
//! decides, in one place, whether holdfast hides that from the client by sending the
//! request once more on a fresh connection. A second send needs the request again: its
//! head is the rewritten head holdfast keeps until the response arrives, and its body
//! is empty or was read in full beforehand ([`should_keep_body`]).
//!
//! A stream an HTTP/2 origin refused is another matter: it never reached the origin's
//! application, so `exchange` sends it again whatever its method, from a copy of its body
//! kept as it streamed (`body_copy`).
//!
//! A failure on a connection that was new is not this race but the backend failing: it
//! is not retried on the same backend (that would only add load), but [`may_fail_over`]
//! decides whether another backend of the group gets the request, as it always does
//! after a failed connect. Timeouts are never retried.

use std::fmt;

use http::Method;

/// Idempotent requests whose body has a `Content-Length` of at most this many bytes are
/// read in full before they are sent and kept, so they can be sent again after a stale
/// connection ate the first attempt. 64 KiB covers the JSON and form bodies of ordinary
/// PUT and DELETE calls and bounds the memory held per request in flight; reading such a
/// body before sending delays the request by no more than the client takes to send it.
/// Larger and chunked bodies are streamed as they arrive and can only be resent when
/// not a byte of the request was written.
pub const KEEP_BODY_MAX_BYTES: u64 = 64 * 1024;

/// How far a failed attempt got before the connection failed. Only failures before any
/// byte of a response arrived are considered at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    /// Not a byte of it was written (the first write failed), so the origin cannot
    /// have received it.
    Unsent,
    /// The request was written, at least in part; the origin may have received and even
    /// acted on it.
    MaybeReceived,
}

impl SendOutcome {
    /// A stable snake_case name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SendOutcome::Unsent => "unsent",
            SendOutcome::MaybeReceived => "maybe_received",
        }
    }
}

/// Whether the request body could be sent a second time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyReplay {
    /// No body.
    Empty,
    /// Read in full beforehand and kept (see [`KEEP_BODY_MAX_BYTES`]).
    Kept,
    /// Streamed from the client as it was sent; gone once sent.
    Streamed,
}

/// What to do about a request whose attempt failed before a response head arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send it once more, on a new connection.
    Replay,
    /// Answer with the failure. The connection was new, so this is not the stale pooled
    /// connection race but the backend failing.
    Fail,
    /// Answer with the failure and say why it was not retried: it went out on a pooled
    /// connection, so it is likely the stale connection race, but a replay is unsafe or
    /// impossible.
    NotReplayed(NotReplayed),
}

/// Why a request that failed on a pooled connection was not sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReplayed {
    /// The method is not idempotent (RFC 9110, 9.2.2): a second copy could act twice.
    NotIdempotent,
    /// The body was streamed upstream and not kept, so there is nothing to send again.
    BodyStreamed,
}

impl fmt::Display for NotReplayed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotReplayed::NotIdempotent => f.write_str("the method is not idempotent"),
            NotReplayed::BodyStreamed => write!(
                f,
                "its body was streamed, not kept (only bodies with a Content-Length of at \
                 most {} KiB are kept for a retry)",
                KEEP_BODY_MAX_BYTES / 1024
            ),
        }
    }
}

/// Whether a request that failed before any response head arrived is sent again.
///
/// - Only a `reused` (pooled) connection is retried, and the retry goes out on a new
///   connection, so a request is retried at most once.
/// - [`SendOutcome::Unsent`]: always; the origin has seen nothing, whatever the method.
/// - [`SendOutcome::MaybeReceived`]: only an idempotent method whose body is empty or
///   kept. A non-idempotent request (POST, PATCH, ...) is never replayed: the origin may
///   have received it, and running it twice is worse than a 502.
pub fn may_replay(method: &Method, sent: SendOutcome, reused: bool, body: BodyReplay) -> Decision {
    match (reused, sent) {
        (false, _) => Decision::Fail,
        (true, SendOutcome::Unsent) => Decision::Replay,
        (true, SendOutcome::MaybeReceived) if !is_idempotent(method) => {
            Decision::NotReplayed(NotReplayed::NotIdempotent)
        }
        (true, SendOutcome::MaybeReceived) => match body {
            BodyReplay::Empty | BodyReplay::Kept => Decision::Replay,
            BodyReplay::Streamed => Decision::NotReplayed(NotReplayed::BodyStreamed),
        },
    }
}

/// Most backends one request is tried on: the first pick and two more after failures
/// that are safe to send elsewhere. Bounded so that a group whose servers all fail
/// answers in a few connect attempts, not one per server.
pub const MAX_BACKENDS: usize = 3;

/// Whether a request whose new connection failed before any response byte (the
/// backend failing: killed, restarting, overloaded) is sent to another backend.
///
/// - [`SendOutcome::Unsent`]: always; nothing reached the failing backend.
/// - [`SendOutcome::MaybeReceived`]: only an idempotent request whose body is empty or
///   kept: running it twice is harmless, and a second backend likely answers it.
///
/// A failed connect is always sent elsewhere: nothing was sent at all.
pub fn may_fail_over(method: &Method, sent: SendOutcome, body: BodyReplay) -> bool {
    match sent {
        SendOutcome::Unsent => true,
        SendOutcome::MaybeReceived => is_idempotent(method) && body != BodyReplay::Streamed,
    }
}

/// Whether a body of `len` bytes (its exact size, from `Content-Length`) is read in full
/// and kept before the request is sent, so a replay can send it again: for idempotent
/// methods only. (A body to an HTTP/2 origin is copied as it streams instead, for a
/// refused stream: `body_copy`.)
pub fn should_keep_body(method: &Method, len: Option<u64>) -> bool {
    is_idempotent(method) && len.is_some_and(|n| n <= KEEP_BODY_MAX_BYTES)
}

/// RFC 9110, 9.2.2: methods whose intended effect is the same however often they run.
fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use BodyReplay::{Empty, Kept, Streamed};
    use SendOutcome::{MaybeReceived, Unsent};

    const IDEMPOTENT: [Method; 6] =
        [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE];

    fn not_idempotent() -> Vec<Method> {
        vec![
            Method::POST,
            Method::PATCH,
            Method::CONNECT,
            Method::from_bytes(b"PROPPATCH").expect("a valid extension method"),
        ]
    }

    #[test]
    fn a_failing_backend_hands_over_what_is_safe_to_send_twice() {
        for method in IDEMPOTENT.iter().cloned().chain(not_idempotent()) {
            for body in [Empty, Kept, Streamed] {
                assert!(may_fail_over(&method, Unsent, body), "{method} unsent goes elsewhere");
            }
        }
        for method in IDEMPOTENT {
            assert!(may_fail_over(&method, MaybeReceived, Empty));
            assert!(may_fail_over(&method, MaybeReceived, Kept));
            assert!(!may_fail_over(&method, MaybeReceived, Streamed), "{method} body is gone");
        }
        for method in not_idempotent() {
            for body in [Empty, Kept, Streamed] {
                assert!(!may_fail_over(&method, MaybeReceived, body), "{method} may have acted");
            }
        }
    }

    #[test]
    fn failure_on_a_new_connection_is_never_retried() {
        for method in IDEMPOTENT.iter().cloned().chain(not_idempotent()) {
            for sent in [Unsent, MaybeReceived] {
                for body in [Empty, Kept, Streamed] {
                    assert_eq!(may_replay(&method, sent, false, body), Decision::Fail);
                }
            }
        }
    }

    #[test]
    fn unsent_request_on_a_pooled_connection_is_retried_whatever_the_method_and_body() {
        for method in IDEMPOTENT.iter().cloned().chain(not_idempotent()) {
            for body in [Empty, Kept, Streamed] {
                assert_eq!(may_replay(&method, Unsent, true, body), Decision::Replay, "{method}");
            }
        }
    }

    #[test]
    fn idempotent_request_that_may_have_been_received_is_retried_with_an_empty_or_kept_body() {
        for method in IDEMPOTENT {
            assert_eq!(may_replay(&method, MaybeReceived, true, Empty), Decision::Replay);
            assert_eq!(may_replay(&method, MaybeReceived, true, Kept), Decision::Replay);
        }
    }

    #[test]
    fn idempotent_request_whose_streamed_body_was_sent_is_not_retried() {
        for method in IDEMPOTENT {
            assert_eq!(
                may_replay(&method, MaybeReceived, true, Streamed),
                Decision::NotReplayed(NotReplayed::BodyStreamed)
            );
        }
    }

    #[test]
    fn non_idempotent_request_that_may_have_been_received_is_never_retried() {
        for method in not_idempotent() {
            for body in [Empty, Kept, Streamed] {
                assert_eq!(
                    may_replay(&method, MaybeReceived, true, body),
                    Decision::NotReplayed(NotReplayed::NotIdempotent),
                    "{method}"
                );
            }
        }
    }

    #[test]
    fn only_small_sized_bodies_of_idempotent_requests_are_kept() {
        assert!(should_keep_body(&Method::PUT, Some(0)));
        assert!(should_keep_body(&Method::PUT, Some(KEEP_BODY_MAX_BYTES)));
        assert!(should_keep_body(&Method::DELETE, Some(10)));
        assert!(!should_keep_body(&Method::PUT, Some(KEEP_BODY_MAX_BYTES + 1)));
        // Chunked: the size is unknown until the end.
        assert!(!should_keep_body(&Method::PUT, None));
        for method in not_idempotent() {
            assert!(!should_keep_body(&method, Some(10)), "{method}");
        }
    }
}
