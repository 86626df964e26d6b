//! Flow-control windows (RFC 9113 section 5.2 and 6.9): what we may still send on a
//! stream or the connection, and what the peer may still send us, with the batching of
//! WINDOW_UPDATE frames as the receiver hands data on.

use crate::error::{ErrorCode, H2Error};

/// The largest window RFC 9113 allows (section 6.9.1): 2^31 − 1.
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// The window every stream and the connection start with (section 6.9.2), until
/// SETTINGS_INITIAL_WINDOW_SIZE says otherwise for streams.
pub const DEFAULT_WINDOW: u32 = 65_535;

/// What we may still send: it shrinks as DATA goes out, grows with the peer's
/// WINDOW_UPDATE frames, and moves by the difference when the peer changes
/// SETTINGS_INITIAL_WINDOW_SIZE, which can make it negative (section 6.9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWindow(i64);

impl SendWindow {
    pub fn new(size: u32) -> SendWindow {
        SendWindow(i64::from(size))
    }

    /// Bytes that may go now (0 when the window is spent or negative).
    pub fn available(self) -> usize {
        usize::try_from(self.0.max(0)).unwrap_or(usize::MAX)
    }

    /// `n` bytes went out; the caller sent no more than [`SendWindow::available`].
    pub fn spend(&mut self, n: usize) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.0 = self.0.saturating_sub(n);
    }

    /// A WINDOW_UPDATE of `increment` (already checked non-zero by the frame layer).
    /// A window pushed above 2^31 − 1 is a FLOW_CONTROL_ERROR (section 6.9.1): of the
    /// connection for the connection's window, of the stream for a stream's.
    pub fn grow(&mut self, increment: u32, stream: u32) -> Result<(), H2Error> {
        let grown = self.0.saturating_add(i64::from(increment));
        if grown > i64::from(MAX_WINDOW) {
            return Err(flow_error(stream));
        }
        self.0 = grown;
        Ok(())
    }

    /// The peer changed SETTINGS_INITIAL_WINDOW_SIZE from `old` to `new`: every stream's
    /// window moves by the difference (section 6.9.2), and one pushed past 2^31 − 1 is
    /// a connection FLOW_CONTROL_ERROR.
    pub fn resize(&mut self, old: u32, new: u32) -> Result<(), H2Error> {
        let moved = self.0.saturating_add(i64::from(new)).saturating_sub(i64::from(old));
        if moved > i64::from(MAX_WINDOW) {
            return Err(H2Error::Connection(ErrorCode::FlowControlError));
        }
        self.0 = moved;
        Ok(())
    }
}

/// What the peer may still send us, and what we owe it in WINDOW_UPDATE frames.
///
/// Data counts against the window when it arrives (all of a DATA frame's payload,
/// padding included); the window opens again only when the receiver has handed the
/// data on ([`RecvWindow::release`]), so a peer can never make us hold more than the
/// window. Updates are sent once half the window is owed, not per frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWindow {
    /// The window we granted: what the peer may have in flight when nothing is owed.
    size: u32,
    /// What the peer may still send before its next update.
    left: u32,
    /// Released by the receiver and not yet announced in a WINDOW_UPDATE.
    owed: u32,
}

impl RecvWindow {
    pub fn new(size: u32) -> RecvWindow {
        RecvWindow { size, left: size, owed: 0 }
    }

    /// A DATA frame of `len` flow-controlled bytes arrived. More than the window allows
    /// is a FLOW_CONTROL_ERROR (section 6.9.1): `stream` 0 for the connection's window.
    pub fn receive(&mut self, len: u32, stream: u32) -> Result<(), H2Error> {
        self.left = self.left.checked_sub(len).ok_or_else(|| flow_error(stream))?;
        Ok(())
    }

    /// `n` received bytes were handed on (or dropped): returns the WINDOW_UPDATE
    /// increment to send now, if half the window or more is owed.
    pub fn release(&mut self, n: u32) -> Option<u32> {
        // Never more than was taken: what is left plus what is owed stays within size.
        let taken = self.size.saturating_sub(self.left).saturating_sub(self.owed);
        self.owed = self.owed.saturating_add(n.min(taken));
        if self.owed == 0 || self.owed < self.size / 2 {
            return None;
        }
        Some(self.announce())
    }

    /// Everything owed, announced now (for example before the stream ends): the
    /// increment to send, or `None` when nothing is owed.
    pub fn flush(&mut self) -> Option<u32> {
        (self.owed > 0).then(|| self.announce())
    }

    /// Bytes the peer may still send.
    pub fn left(self) -> u32 {
        self.left
    }

    fn announce(&mut self) -> u32 {
        let increment = self.owed;
        self.left = self.left.saturating_add(increment);
        self.owed = 0;
        increment
    }
}

fn flow_error(stream: u32) -> H2Error {
    match stream {
        0 => H2Error::Connection(ErrorCode::FlowControlError),
        stream => H2Error::Stream { stream, code: ErrorCode::FlowControlError },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_window_spends_grows_and_refuses_past_the_maximum() {
        let mut w = SendWindow::new(DEFAULT_WINDOW);
        w.spend(65_535);
        assert_eq!(w.available(), 0);
        w.grow(10, 1).unwrap();
        assert_eq!(w.available(), 10);
        let mut full = SendWindow::new(MAX_WINDOW);
        assert_eq!(
            full.grow(1, 3),
            Err(H2Error::Stream { stream: 3, code: ErrorCode::FlowControlError })
        );
        assert_eq!(full.grow(1, 0), Err(H2Error::Connection(ErrorCode::FlowControlError)));
        assert_eq!(full.available(), MAX_WINDOW as usize, "unchanged by the refused update");
    }

    #[test]
    fn a_smaller_initial_window_can_make_a_send_window_negative() {
        let mut w = SendWindow::new(DEFAULT_WINDOW);
        w.spend(60_000);
        w.resize(DEFAULT_WINDOW, 16_384).unwrap();
        assert_eq!(w.available(), 0, "negative: nothing may go");
        w.grow(50_000, 1).unwrap();
        // 5,535 left, less 49,151 for the smaller setting, plus 50,000.
        assert_eq!(w.available(), 6_384);
        let mut near = SendWindow::new(MAX_WINDOW - 10);
        assert_eq!(
            near.resize(DEFAULT_WINDOW, DEFAULT_WINDOW + 11),
            Err(H2Error::Connection(ErrorCode::FlowControlError))
        );
    }

    #[test]
    fn a_receive_window_refuses_more_than_granted() {
        let mut w = RecvWindow::new(100);
        w.receive(60, 1).unwrap();
        assert_eq!(
            w.receive(41, 1),
            Err(H2Error::Stream { stream: 1, code: ErrorCode::FlowControlError })
        );
        w.receive(40, 0).unwrap();
        assert_eq!(w.left(), 0);
        assert_eq!(w.receive(1, 0), Err(H2Error::Connection(ErrorCode::FlowControlError)));
    }

    #[test]
    fn updates_go_out_once_half_the_window_is_owed() {
        let mut w = RecvWindow::new(100);
        w.receive(80, 1).unwrap();
        assert_eq!(w.release(30), None);
        assert_eq!(w.release(20), Some(50));
        assert_eq!(w.left(), 70);
        assert_eq!(w.release(10), None);
        assert_eq!(w.flush(), Some(10));
        assert_eq!(w.flush(), None);
        // Releasing more than was received announces only what was received.
        assert_eq!(w.release(1_000), None);
        assert_eq!(w.flush(), Some(20));
        assert_eq!(w.left(), 100);
    }
}
