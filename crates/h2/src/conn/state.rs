//! One stream's state (RFC 9113 section 5.1) and which frames it may receive in each.
//!
//! holdfast never pushes and refuses pushes, so the reserved states do not occur: a
//! stream goes idle -> open -> half-closed -> closed, or is reset.

use crate::error::{ErrorCode, H2Error};

/// Where a stream stands, from this endpoint's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Both sides may send.
    Open,
    /// We sent END_STREAM; the peer may still send.
    HalfClosedLocal,
    /// The peer sent END_STREAM; we may still send.
    HalfClosedRemote,
    /// Both sides ended, or one reset it.
    Closed(Closed),
}

/// How a stream closed: what a late frame on it means depends on it (section 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// END_STREAM both ways.
    Ended,
    /// We sent RST_STREAM: frames the peer sent before seeing it are ignored.
    ResetByUs,
    /// The peer sent RST_STREAM: any frame but PRIORITY after it is STREAM_CLOSED.
    ResetByPeer,
}

/// The kinds of frame that act on a stream's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    Headers { end_stream: bool },
    Data { end_stream: bool },
    WindowUpdate,
    Priority,
    Reset,
}

/// What the engine does with a frame received on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Take it.
    Accept,
    /// Drop it silently (a frame in flight when we reset the stream).
    Ignore,
}

impl State {
    /// The state after a frame on this stream arrived, or the error it is.
    pub fn receive(self, frame: Received, stream: u32) -> Result<(State, Verdict), H2Error> {
        let closed = H2Error::Stream { stream, code: ErrorCode::StreamClosed };
        match (self, frame) {
            (_, Received::Priority) => Ok((self, Verdict::Accept)),
            (State::Closed(_), Received::Reset) => Ok((self, Verdict::Ignore)),
            (_, Received::Reset) => Ok((State::Closed(Closed::ResetByPeer), Verdict::Accept)),
            // Section 5.1, "closed": after sending RST_STREAM, frames the peer sent before
            // it saw ours are ignored.
            (State::Closed(Closed::ResetByUs), _) => Ok((self, Verdict::Ignore)),
            // WINDOW_UPDATE can follow our END_STREAM for a while ("closed").
            (State::Closed(Closed::Ended), Received::WindowUpdate) => Ok((self, Verdict::Ignore)),
            // Section 5.1, "closed": anything but PRIORITY after the peer's RST_STREAM, and
            // HEADERS or DATA after both END_STREAMs, is STREAM_CLOSED.
            (State::Closed(_), _) => Err(closed),
            // "half-closed (remote)": frames other than WINDOW_UPDATE, PRIORITY or
            // RST_STREAM are a stream error STREAM_CLOSED.
            (State::HalfClosedRemote, Received::WindowUpdate) => Ok((self, Verdict::Accept)),
            (State::HalfClosedRemote, _) => Err(closed),
            (State::Open | State::HalfClosedLocal, Received::WindowUpdate) => {
                Ok((self, Verdict::Accept))
            }
            (
                State::Open | State::HalfClosedLocal,
                Received::Headers { end_stream } | Received::Data { end_stream },
            ) => Ok((if end_stream { self.end_remote() } else { self }, Verdict::Accept)),
        }
    }

    /// The state after we sent END_STREAM.
    pub fn end_local(self) -> State {
        match self {
            State::Open => State::HalfClosedLocal,
            State::HalfClosedRemote => State::Closed(Closed::Ended),
            other => other,
        }
    }

    /// The state after the peer sent END_STREAM.
    fn end_remote(self) -> State {
        match self {
            State::Open => State::HalfClosedRemote,
            State::HalfClosedLocal => State::Closed(Closed::Ended),
            other => other,
        }
    }

    /// Whether we may still send HEADERS or DATA on it.
    pub fn can_send(self) -> bool {
        matches!(self, State::Open | State::HalfClosedRemote)
    }

    /// Whether the peer may still send HEADERS or DATA on it.
    pub fn can_receive(self) -> bool {
        matches!(self, State::Open | State::HalfClosedLocal)
    }

    /// Whether it counts against SETTINGS_MAX_CONCURRENT_STREAMS (section 5.1.2: open or
    /// half-closed).
    pub fn is_active(self) -> bool {
        !matches!(self, State::Closed(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOSED: H2Error = H2Error::Stream { stream: 1, code: ErrorCode::StreamClosed };

    fn data(end_stream: bool) -> Received {
        Received::Data { end_stream }
    }

    #[test]
    fn a_request_and_its_response_close_the_stream() {
        let (s, _) = State::Open.receive(data(true), 1).unwrap();
        assert_eq!(s, State::HalfClosedRemote);
        assert!(s.can_send() && !s.can_receive());
        assert_eq!(s.end_local(), State::Closed(Closed::Ended));
        let s = State::Open.end_local();
        assert_eq!(s, State::HalfClosedLocal);
        let (s, _) = s.receive(Received::Headers { end_stream: true }, 1).unwrap();
        assert_eq!(s, State::Closed(Closed::Ended));
        assert!(!s.is_active());
    }

    #[test]
    fn data_after_the_peers_end_stream_is_stream_closed() {
        // RFC 9113 section 5.1, half-closed (remote).
        assert_eq!(State::HalfClosedRemote.receive(data(false), 1), Err(CLOSED));
        let trailers = Received::Headers { end_stream: true };
        assert_eq!(State::HalfClosedRemote.receive(trailers, 1), Err(CLOSED));
        let update = State::HalfClosedRemote.receive(Received::WindowUpdate, 1);
        assert_eq!(update, Ok((State::HalfClosedRemote, Verdict::Accept)));
    }

    #[test]
    fn frames_after_our_reset_are_ignored_and_after_the_peers_are_stream_closed() {
        let ours = State::Closed(Closed::ResetByUs);
        assert_eq!(ours.receive(data(false), 1), Ok((ours, Verdict::Ignore)));
        let theirs = State::Closed(Closed::ResetByPeer);
        assert_eq!(theirs.receive(data(false), 1), Err(CLOSED));
        assert_eq!(theirs.receive(Received::Priority, 1), Ok((theirs, Verdict::Accept)));
        let (reset, _) = State::Open.receive(Received::Reset, 1).unwrap();
        assert_eq!(reset, theirs);
    }

    #[test]
    fn a_window_update_after_both_ends_is_ignored_but_data_is_not() {
        let ended = State::Closed(Closed::Ended);
        assert_eq!(ended.receive(Received::WindowUpdate, 1), Ok((ended, Verdict::Ignore)));
        assert_eq!(ended.receive(data(false), 1), Err(CLOSED));
    }
}
