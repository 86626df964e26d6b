//! One stream as the engine keeps it: its state, both windows, what the application
//! queued to send on it and what it has not yet handed on of what it received.

use std::collections::VecDeque;

use bytes::Bytes;

use super::flow::{RecvWindow, SendWindow};
use super::state::State;
use crate::error::ErrorCode;
use crate::hpack::Field;

/// Where a stream's received messages stand: what the next HEADERS frame on it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The first header section: a request (server) or a response (client).
    Head,
    /// After informational (1xx) responses: still a response head (client only).
    FinalHead,
    /// After the head: DATA, then trailers (which must end the stream).
    Body,
}

/// A stream the engine still tracks.
#[derive(Debug)]
pub struct Stream {
    pub state: State,
    pub send: SendWindow,
    pub recv: RecvWindow,
    pub expect: Expect,
    /// Body bytes still due by `content-length` (RFC 9113 section 8.1.1), if declared.
    pub remaining: Option<u64>,
    /// The request was HEAD (client side): its response's `content-length` says nothing
    /// about DATA.
    pub head_request: bool,
    /// DATA the application queued and the windows have not let out yet.
    pub queued: VecDeque<Bytes>,
    pub queued_len: usize,
    /// END_STREAM goes with the last queued byte (or alone, when nothing is queued).
    pub end_queued: bool,
    /// Trailers to send once the queue is out; encoded only when written, so HPACK state
    /// follows the order of frames on the wire.
    pub trailers: Option<Vec<Field>>,
    /// The application saw no room to queue: tell it when there is.
    pub waiting: bool,
    /// DATA sent in the stream's current turn (see `send`'s module doc).
    pub turn_sent: usize,
    /// Received bytes (flow-controlled) the application has not released: given back to
    /// the connection's window when the stream goes.
    pub unreleased: u32,
    /// We sent the response head (server side): a reset after it is not a rapid reset.
    pub answered: bool,
    /// The application finished with the stream while the peer still sends: this reset
    /// goes out once our end has (see `Connection::finish`).
    pub reset_after_end: Option<ErrorCode>,
}

impl Stream {
    pub fn new(state: State, send_window: u32, recv_window: u32) -> Stream {
        Stream {
            state,
            send: SendWindow::new(send_window),
            recv: RecvWindow::new(recv_window),
            expect: Expect::Head,
            remaining: None,
            head_request: false,
            queued: VecDeque::new(),
            queued_len: 0,
            end_queued: false,
            trailers: None,
            waiting: false,
            turn_sent: 0,
            unreleased: 0,
            answered: false,
            reset_after_end: None,
        }
    }

    /// Room to queue DATA now: the peer's window plus `buffer`, at most `max_queued` in
    /// all, less what is queued; 0 once the sending side ended.
    pub fn room(&self, buffer: usize, max_queued: usize) -> usize {
        if !self.state.can_send() || self.end_queued {
            return 0;
        }
        let allowed = self.send.available().saturating_add(buffer).min(max_queued);
        allowed.saturating_sub(self.queued_len)
    }

    /// Whether anything is waiting to go out on it.
    pub fn has_pending(&self) -> bool {
        self.queued_len > 0 || (self.end_queued && self.state.can_send())
    }
}
