//! What the engine writes, in order: control frames and header blocks as they are
//! made, DATA as the windows let it out, taken in turns from the streams that have some
//! while the output is below its high-water mark.
//!
//! A stream's turn is what it had queued, up to [`TURN`] bytes: it sends that before
//! the next stream's turn, and streams the connection's window held back take theirs
//! first when it opens, in the order they were held. A frame-at-a-time rotation would
//! share the window evenly, but then every transfer takes as long as all of the
//! connection's together (a 1 MB upload among 30 others on an origin's 64 KiB window
//! took over 10 s under load where the whole batch took 5); in turns, a transfer waits
//! for the turns ahead of it and then goes at the connection's pace, and the bounded
//! turn keeps any stream from holding the window.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::state::State;
use super::Connection;
use crate::error::ErrorCode;
use crate::frame::{self, EncodeError, Settings};
use crate::hpack::{Encoder, Field, FieldRef};

/// Output held before DATA stops being moved out of the streams' queues: the caller
/// writes it before more is scheduled, so a slow peer holds back the streams, not
/// memory.
const OUTPUT_HIGH: usize = 64 * 1024;

/// The most DATA one stream sends in one turn before the next stream's turn.
pub(super) const TURN: usize = 256 * 1024;

/// Bytes waiting to be written, in order: small frames gathered in `buf`, DATA
/// payloads as the `Bytes` the application gave (no copy).
#[derive(Debug, Default)]
pub(super) struct Output {
    buf: BytesMut,
    pieces: VecDeque<Bytes>,
    /// Bytes in `buf` and `pieces`.
    len: usize,
    /// Streams with DATA, END_STREAM or trailers waiting, in the order of their turns
    /// (the first's turn may be under way).
    ready: VecDeque<u32>,
    /// Streams with DATA the connection's window holds back, in the order they were
    /// held: the next connection WINDOW_UPDATE gives them their turn in that order, so
    /// none starves behind others while the window is short.
    blocked: VecDeque<u32>,
    /// Where header blocks are encoded before they are cut into frames; kept, so a
    /// block costs no allocation once the connection has sent one of its size.
    block: BytesMut,
}

impl Output {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The next piece to write.
    pub fn next(&mut self) -> Option<Bytes> {
        if self.pieces.is_empty() && !self.buf.is_empty() {
            self.seal();
        }
        let piece = self.pieces.pop_front()?;
        self.len = self.len.saturating_sub(piece.len());
        Some(piece)
    }

    /// Moves what `buf` gathered into the pieces, ahead of a payload.
    fn seal(&mut self) {
        if !self.buf.is_empty() {
            self.pieces.push_back(self.buf.split().freeze());
        }
    }

    /// Gathers one frame (or the preface) that `write` puts in `buf`, and counts it.
    fn put(&mut self, write: impl FnOnce(&mut BytesMut)) {
        let before = self.buf.len();
        write(&mut self.buf);
        self.len = self.len.saturating_add(self.buf.len().saturating_sub(before));
    }

    pub fn preface(&mut self) {
        self.put(|buf| buf.extend_from_slice(frame::PREFACE));
    }

    pub fn settings(&mut self, settings: &Settings) {
        self.put(|buf| written(frame::write_settings(buf, settings)));
    }

    pub fn settings_ack(&mut self) {
        self.put(frame::write_settings_ack);
    }

    pub fn ping(&mut self, payload: [u8; 8]) {
        self.put(|buf| frame::write_ping(buf, payload));
    }

    pub fn ping_ack(&mut self, payload: [u8; 8]) {
        self.put(|buf| frame::write_ping_ack(buf, payload));
    }

    pub fn window_update(&mut self, stream: u32, increment: u32) {
        self.put(|buf| written(frame::write_window_update(buf, stream, increment)));
    }

    pub fn rst_stream(&mut self, stream: u32, code: ErrorCode) {
        self.put(|buf| written(frame::write_rst_stream(buf, stream, code)));
    }

    pub fn go_away(&mut self, last_stream: u32, code: ErrorCode, debug: &[u8]) {
        self.put(|buf| written(frame::write_goaway(buf, last_stream, code, debug)));
    }

    /// A header section, encoded now (into `block`, kept for the next) and cut into
    /// HEADERS and CONTINUATION frames.
    pub fn head<'f>(
        &mut self,
        encoder: &mut Encoder,
        stream: u32,
        fields: impl IntoIterator<Item = FieldRef<'f>>,
        end_stream: bool,
        max_frame: u32,
    ) {
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        encoder.encode(fields, &mut block);
        self.put(|buf| written(frame::write_headers(buf, stream, &block, end_stream, max_frame)));
        self.block = block;
    }

    /// A DATA frame: its header gathered, its payload a piece of its own.
    fn data(&mut self, stream: u32, payload: Bytes, end_stream: bool) {
        self.put(|buf| written(frame::write_data_header(buf, stream, payload.len(), end_stream)));
        if !payload.is_empty() {
            self.seal();
            self.len = self.len.saturating_add(payload.len());
            self.pieces.push_back(payload);
        }
    }

    /// `stream` waits for the connection's window.
    pub fn block_on_connection(&mut self, stream: u32) {
        if !self.blocked.contains(&stream) {
            self.blocked.push_back(stream);
        }
    }

    /// The connection's window grew: the streams it held take their turns before those
    /// that became ready meanwhile, those held longest first.
    pub fn unblock_connection(&mut self) {
        // Bounded by the blocked streams; pushed to the front last to first.
        while let Some(stream) = self.blocked.pop_back() {
            if let Some(at) = self.ready.iter().position(|&id| id == stream) {
                self.ready.remove(at);
            }
            self.ready.push_front(stream);
        }
    }

    /// `stream` has something to send: it joins the turn if not in it.
    pub fn mark_ready(&mut self, stream: u32) {
        if !self.ready.contains(&stream) {
            self.ready.push_back(stream);
        }
    }
}

impl Connection {
    /// Moves DATA (and the END_STREAM or trailers after it) from the streams' queues to
    /// the output, each stream's turn in order, as the windows allow, until the output
    /// reaches its high-water mark or no stream can send.
    pub(super) fn schedule(&mut self) {
        while self.output.len < OUTPUT_HIGH {
            let Some(&id) = self.output.ready.front() else { break };
            match self.send_one(id) {
                // Its turn goes on: the next frame is its own, now or once the output
                // is written.
                Turn::More if self.turn_left(id) => {}
                Turn::More => {
                    self.output.ready.pop_front();
                    self.end_turn(id);
                    self.output.ready.push_back(id);
                }
                // A blocked stream leaves the rotation (keeping what is left of its
                // turn): a WINDOW_UPDATE brings it back.
                Turn::Blocked => {
                    self.output.ready.pop_front();
                }
                Turn::Done => {
                    self.output.ready.pop_front();
                    self.end_turn(id);
                }
            }
        }
    }

    /// Whether `stream` may send more in its current turn.
    fn turn_left(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.turn_sent < TURN)
    }

    fn end_turn(&mut self, stream: u32) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.turn_sent = 0;
        }
    }

    /// One frame of `stream`'s queue, if the windows allow.
    fn send_one(&mut self, id: u32) -> Turn {
        let max_frame = usize::try_from(self.peer.max_frame_size).unwrap_or(16_384);
        let conn_room = self.send_window.available();
        let Some(s) = self.streams.get_mut(&id) else { return Turn::Done };
        if !s.state.can_send() {
            return Turn::Done;
        }
        if s.queued_len > 0 {
            let stream_room = s.send.available();
            let room = stream_room.min(conn_room).min(max_frame);
            if room == 0 {
                // Its own WINDOW_UPDATE brings a stream out of its window's block; the
                // connection's brings out those blocked on it, in the order they came.
                if stream_room > 0 {
                    self.output.block_on_connection(id);
                }
                return Turn::Blocked;
            }
            let Some(front) = s.queued.front_mut() else { return Turn::Done };
            let take = room.min(front.len());
            let piece = if take == front.len() {
                s.queued.pop_front().unwrap_or_default()
            } else {
                front.split_to(take)
            };
            s.queued_len = s.queued_len.saturating_sub(piece.len());
            s.turn_sent = s.turn_sent.saturating_add(piece.len());
            s.send.spend(piece.len());
            let last = s.queued_len == 0 && s.end_queued && s.trailers.is_none();
            self.send_window.spend(piece.len());
            self.output.data(id, piece, last);
            self.guard.on_frame_written();
            // Room comes back here only where `max_queued` was what held it.
            self.wake_if_room(id);
            if last {
                self.end_sent(id);
                return Turn::Done;
            }
            return if self.streams.get(&id).is_some_and(|s| s.has_pending()) {
                Turn::More
            } else {
                Turn::Done
            };
        }
        if let Some(trailers) = s.trailers.take() {
            let max = self.peer.max_frame_size;
            self.output.head(
                &mut self.encoder,
                id,
                trailers.iter().map(Field::as_field_ref),
                true,
                max,
            );
            self.end_sent(id);
            return Turn::Done;
        }
        if s.end_queued && matches!(s.state, State::Open | State::HalfClosedRemote) {
            self.output.data(id, Bytes::new(), true);
            self.end_sent(id);
        }
        Turn::Done
    }
}

/// The engine writes only frames the frame layer accepts (valid ids, increments,
/// settings and lengths): a refusal here would be the engine's bug, never the peer's.
fn written(result: Result<(), EncodeError>) {
    debug_assert!(result.is_ok(), "the engine wrote a frame the frame layer refuses: {result:?}");
}

/// What one stream's turn came to.
enum Turn {
    /// It has more to send now.
    More,
    /// Nothing left, or nothing it can send until the application queues more.
    Done,
    /// It has DATA but no window.
    Blocked,
}
