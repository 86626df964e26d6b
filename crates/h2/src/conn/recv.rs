//! What each received frame does to the connection (RFC 9113 sections 5 and 6): the
//! rules that need the connection's state, on top of the frame layer's checks of each
//! frame alone.

use bytes::{Buf, Bytes, BytesMut};

use super::message::{self, Section};
use super::state::{Closed, Received, State, Verdict};
use super::stream::{Expect, Stream};
use super::{Connection, Event, Phase, Role};
use crate::error::{ErrorCode, H2Error};
use crate::frame::{self, Frame, FrameType, PrefaceCheck};
use crate::hpack::Field;

/// What a header block's HEADERS frame said, kept until its END_HEADERS.
#[derive(Debug, Clone, Copy)]
pub(super) struct Block {
    stream: u32,
    end_stream: bool,
    /// A stream error the HEADERS frame carries, raised once the block is decoded.
    error: Option<H2Error>,
}

/// A header block whose CONTINUATION frames are still coming (section 6.10).
pub(super) struct PartialBlock {
    head: Block,
    bytes: BytesMut,
    frames: usize,
}

impl Connection {
    /// Acts on every whole frame in `buf`; the first connection error stops it.
    pub(super) fn receive_frames(&mut self, buf: &mut BytesMut) -> Result<(), ErrorCode> {
        if self.awaiting_preface {
            match frame::check_preface(buf).map_err(H2Error::code)? {
                PrefaceCheck::Partial => return Ok(()),
                PrefaceCheck::Complete => {
                    buf.advance(frame::PREFACE.len());
                    self.awaiting_preface = false;
                }
            }
        }
        // Each round takes one frame out of `buf`.
        loop {
            if !self.peer_ready {
                check_preface_frame(buf)?;
            }
            let split = frame::split_frame(buf, self.config.max_frame_size);
            let Some((header, payload)) = split.map_err(H2Error::code)? else {
                break;
            };
            if self.phase == Phase::Closed {
                break;
            }
            match self.on_frame(header, payload) {
                Ok(()) => {}
                Err(H2Error::Connection(code)) => return Err(code),
                Err(H2Error::Stream { stream, code }) => self.stream_error(stream, code)?,
            }
        }
        Ok(())
    }

    /// A stream error: RST_STREAM, and too many of them is a flood.
    fn stream_error(&mut self, stream: u32, code: ErrorCode) -> Result<(), ErrorCode> {
        if self.streams.contains_key(&stream) {
            self.reset_stream(stream, code);
        } else {
            self.output.rst_stream(stream, code);
            self.remember_closed(stream, Closed::ResetByUs);
        }
        self.guard.on_error_reset()
    }

    fn on_frame(&mut self, header: frame::FrameHeader, payload: Bytes) -> Result<(), H2Error> {
        // Section 6.10: while a header block is open, only its CONTINUATION frames.
        if let Some(partial) = &self.partial {
            let continues =
                header.kind == FrameType::Continuation && header.stream_id == partial.head.stream;
            if !continues {
                return Err(H2Error::Connection(ErrorCode::ProtocolError));
            }
        }
        match frame::decode(header, payload)? {
            Frame::Data(data) => {
                let flow_len = data.flow_controlled_len();
                self.on_data(data.stream_id, data.data, flow_len, data.end_stream)
            }
            Frame::Headers(headers) => {
                // A priority on its own stream is a stream error raised after the block
                // is decoded (section 4.3: the HPACK table must follow the peer).
                let error = headers.stream_error();
                let block =
                    Block { stream: headers.stream_id, end_stream: headers.end_stream, error };
                self.on_headers(block, headers.fragment, headers.end_headers)
            }
            Frame::Continuation(c) => self.on_continuation(c.fragment, c.end_headers),
            Frame::Priority(_) | Frame::Unknown { .. } => Ok(()),
            Frame::RstStream(r) => self.on_rst_stream(r.stream_id, r.code),
            Frame::Settings(settings) => self.on_settings(settings),
            Frame::SettingsAck => {
                self.unacked_settings = self.unacked_settings.saturating_sub(1);
                Ok(())
            }
            // Section 8.4: a client never pushes; section 6.6: we disabled push.
            Frame::PushPromise(_) => Err(H2Error::Connection(ErrorCode::ProtocolError)),
            Frame::Ping(p) => self.on_ping(p.ack, p.opaque_data),
            Frame::GoAway(g) => self.on_go_away(g.last_stream_id, g.code, g.debug_data),
            Frame::WindowUpdate(w) => self.on_window_update(w.stream_id, w.increment),
        }
    }

    /// Whether `stream` is idle (section 5.1): never opened, by either side.
    /// Either way only odd streams are ever opened: by the client on the server side,
    /// by us on the client side (a server may open none: we take no push).
    fn is_idle(&self, stream: u32) -> bool {
        stream > self.last_stream || stream % 2 == 0
    }

    /// A frame other than PRIORITY on a stream not in the table: idle is a connection
    /// PROTOCOL_ERROR (section 5.1); one we reset lately is ignored; HEADERS or DATA on
    /// one the peer reset is a stream error STREAM_CLOSED, on another closed one a
    /// connection error STREAM_CLOSED, and HEADERS on an id below the last that
    /// was never opened is an unexpected stream identifier (5.1.1, PROTOCOL_ERROR).
    fn on_missing(&self, stream: u32, kind: Received) -> Result<Verdict, H2Error> {
        if self.is_idle(stream) {
            return Err(H2Error::Connection(ErrorCode::ProtocolError));
        }
        let closed = self.closed_lately.iter().find(|(id, _)| *id == stream).map(|(_, how)| *how);
        match (closed, kind) {
            (Some(Closed::ResetByUs), _) => Ok(Verdict::Ignore),
            (_, Received::WindowUpdate | Received::Reset | Received::Priority) => {
                Ok(Verdict::Ignore)
            }
            (None, Received::Headers { .. }) => Err(H2Error::Connection(ErrorCode::ProtocolError)),
            // "After receiving a RST_STREAM": a stream error (section 5.1, "closed").
            (Some(Closed::ResetByPeer), Received::Headers { .. } | Received::Data { .. }) => {
                Err(H2Error::Stream { stream, code: ErrorCode::StreamClosed })
            }
            (_, Received::Headers { .. } | Received::Data { .. }) => {
                Err(H2Error::Connection(ErrorCode::StreamClosed))
            }
        }
    }

    fn on_data(
        &mut self,
        stream: u32,
        data: Bytes,
        flow_len: u32,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        // Section 6.9: DATA counts against the connection's window whatever its stream;
        // what the application will not see goes back at once.
        self.recv_window.receive(flow_len, 0)?;
        match self.accept_data(stream, data.len(), flow_len, end_stream) {
            Ok(Verdict::Accept) => {}
            Ok(Verdict::Ignore) => {
                self.release_connection(flow_len);
                return Ok(());
            }
            Err(e) => {
                self.release_connection(flow_len);
                return Err(e);
            }
        }
        if data.is_empty() && !end_stream {
            self.guard.on_empty_frame().map_err(H2Error::Connection)?;
        }
        self.events.push_back(Event::Data { stream, data, end_stream });
        if end_stream {
            self.peer_ended(stream);
        }
        Ok(())
    }

    /// The stream's checks of a DATA frame, in an order that charges its window only
    /// when every other check passed: the stream's state (section 5.1), a head first,
    /// `content-length` (8.1.1), the stream's window (6.9.1). Padding goes back to both
    /// windows at once; the rest waits for the application's release.
    fn accept_data(
        &mut self,
        stream: u32,
        len: usize,
        flow_len: u32,
        end_stream: bool,
    ) -> Result<Verdict, H2Error> {
        let Some(s) = self.streams.get_mut(&stream) else {
            return self.on_missing(stream, Received::Data { end_stream }).map(|_| Verdict::Ignore);
        };
        let (next, verdict) = s.state.receive(Received::Data { end_stream }, stream)?;
        if verdict == Verdict::Ignore {
            return Ok(Verdict::Ignore);
        }
        if s.expect != Expect::Body {
            // DATA before the head (or between informational heads and the final one).
            return Err(H2Error::Stream { stream, code: ErrorCode::ProtocolError });
        }
        check_length(s, len, end_stream, stream)?;
        s.recv.receive(flow_len, stream)?;
        s.state = next;
        let data_len = u32::try_from(len).unwrap_or(u32::MAX);
        let padding = flow_len.saturating_sub(data_len);
        s.unreleased = s.unreleased.saturating_add(data_len);
        if let Some(increment) = s.recv.release(padding) {
            self.output.window_update(stream, increment);
        }
        self.release_connection(padding);
        Ok(Verdict::Accept)
    }

    fn on_headers(
        &mut self,
        head: Block,
        fragment: Bytes,
        end_headers: bool,
    ) -> Result<(), H2Error> {
        if end_headers {
            return self.on_block(head, fragment);
        }
        let mut bytes = BytesMut::with_capacity(fragment.len().saturating_mul(2));
        bytes.extend_from_slice(&fragment);
        self.partial = Some(PartialBlock { head, bytes, frames: 1 });
        Ok(())
    }

    fn on_continuation(&mut self, fragment: Bytes, end_headers: bool) -> Result<(), H2Error> {
        // Section 6.10: a CONTINUATION that follows no open block (on_frame checked the
        // stream of one that does).
        let Some(partial) = self.partial.as_mut() else {
            return Err(H2Error::Connection(ErrorCode::ProtocolError));
        };
        partial.frames = partial.frames.saturating_add(1);
        partial.bytes.extend_from_slice(&fragment);
        // A block past what any field section under our limit needs, or cut into more
        // frames than any client needs, is a flood (CONTINUATION floods).
        self.guard
            .check_block(partial.bytes.len(), partial.frames, self.config.max_header_list_size)
            .map_err(H2Error::Connection)?;
        if !end_headers {
            return Ok(());
        }
        let Some(PartialBlock { head, bytes, .. }) = self.partial.take() else {
            return Err(H2Error::Connection(ErrorCode::InternalError));
        };
        self.on_block(head, bytes.freeze())
    }

    /// A whole header block: decoded always (the HPACK table must follow the peer's),
    /// then taken as a new stream's head, a response, or trailers.
    fn on_block(&mut self, head: Block, block: Bytes) -> Result<(), H2Error> {
        let Block { stream, end_stream, error } = head;
        let mut fields = Vec::new();
        let limit = usize::try_from(self.config.max_header_list_size).unwrap_or(usize::MAX);
        let decoded = self
            .decoder
            .decode(&block, limit, |field| fields.push(field))
            .map_err(|e| H2Error::Connection(e.code()))?;
        let over_limit = decoded.over_limit;
        if self.streams.contains_key(&stream) {
            if let Some(error) = error {
                return Err(error);
            }
            return self.on_stream_block(stream, fields, over_limit, end_stream);
        }
        match self.role {
            Role::Server if stream % 2 == 1 && stream > self.last_stream => {
                if let Some(error) = error {
                    self.last_stream = stream;
                    return Err(error);
                }
                self.on_request(stream, fields, over_limit, end_stream)
            }
            // Section 5.1.1: a new stream's id must be odd and above every earlier one.
            _ if self.is_idle(stream) => Err(H2Error::Connection(ErrorCode::ProtocolError)),
            _ => self.on_missing(stream, Received::Headers { end_stream }).map(|_| ()),
        }
    }

    /// A client's new stream (server side).
    fn on_request(
        &mut self,
        stream: u32,
        fields: Vec<Field>,
        over_limit: bool,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        self.last_stream = stream;
        if self.phase != Phase::Open {
            // Section 6.8: streams above our GOAWAY's last are not processed.
            return Ok(());
        }
        // Section 5.1.2: past our limit, refused (it may be sent again).
        if self.active >= self.config.max_concurrent_streams {
            return self.refuse(stream);
        }
        let state = if end_stream { State::HalfClosedRemote } else { State::Open };
        let mut s = Stream::new(state, self.peer.initial_window, self.config.stream_window);
        s.expect = Expect::Body;
        self.streams.insert(stream, s);
        self.active = self.active.saturating_add(1);
        if over_limit {
            self.events.push_back(Event::TooLarge { stream, end_stream });
            return Ok(());
        }
        let section = Section::Request { connect_protocol: self.config.connect_protocol };
        let head = message::check(fields, section)
            .map_err(|_| H2Error::Stream { stream, code: ErrorCode::ProtocolError })?;
        if let Some(s) = self.streams.get_mut(&stream) {
            s.remaining = head.content_length;
            // Section 8.1.1: a declared length the stream's end contradicts.
            if end_stream && head.content_length.is_some_and(|n| n > 0) {
                return Err(H2Error::Stream { stream, code: ErrorCode::ProtocolError });
            }
        }
        self.events.push_back(Event::Head { stream, head, end_stream });
        Ok(())
    }

    /// Refuses a new stream past our limit. Until the client acknowledged our SETTINGS
    /// it may not know the limit (it may open streams before they reach it, sections
    /// 3.4 and 6.5.3), so the refusal is not its error and does not count toward the
    /// flood limit of error resets, only toward the looser one of early refusals; after,
    /// it is, and does.
    fn refuse(&mut self, stream: u32) -> Result<(), H2Error> {
        if self.unacked_settings == 0 {
            return Err(H2Error::Stream { stream, code: ErrorCode::RefusedStream });
        }
        self.guard.on_early_refusal().map_err(H2Error::Connection)?;
        self.output.rst_stream(stream, ErrorCode::RefusedStream);
        self.remember_closed(stream, Closed::ResetByUs);
        Ok(())
    }

    /// A header block on a stream we track: a response (client side) or trailers.
    fn on_stream_block(
        &mut self,
        stream: u32,
        fields: Vec<Field>,
        over_limit: bool,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        let role = self.role;
        let s =
            self.streams.get_mut(&stream).ok_or(H2Error::Connection(ErrorCode::InternalError))?;
        let (next, verdict) = s.state.receive(Received::Headers { end_stream }, stream)?;
        if verdict == Verdict::Ignore {
            return Ok(());
        }
        if over_limit {
            return Err(H2Error::Stream { stream, code: ErrorCode::ProtocolError });
        }
        let malformed = H2Error::Stream { stream, code: ErrorCode::ProtocolError };
        match (role, s.expect) {
            (Role::Client, Expect::Head | Expect::FinalHead) => {
                let head = message::check(fields, Section::Response).map_err(|_| malformed)?;
                let status = head.pseudo.status.unwrap_or(0);
                if (100..200).contains(&status) {
                    // Section 8.1: an informational head never ends the stream.
                    if end_stream {
                        return Err(malformed);
                    }
                    s.expect = Expect::FinalHead;
                } else {
                    s.expect = Expect::Body;
                    let bodiless = s.head_request || status == 204 || status == 304;
                    s.remaining = if bodiless { None } else { head.content_length };
                    if end_stream && s.remaining.is_some_and(|n| n > 0) {
                        return Err(malformed);
                    }
                }
                s.state = next;
                self.events.push_back(Event::Head { stream, head, end_stream });
            }
            (_, Expect::Body) => {
                // Section 8.1: trailers end the stream and carry no pseudo-header field.
                if !end_stream {
                    return Err(malformed);
                }
                let head = message::check(fields, Section::Trailers).map_err(|_| malformed)?;
                if s.remaining.is_some_and(|n| n > 0) {
                    return Err(malformed);
                }
                s.state = next;
                self.events.push_back(Event::Trailers { stream, fields: head.fields });
            }
            // A server's stream is created by its head; a second "head" is trailers.
            (Role::Server, _) => return Err(malformed),
        }
        if end_stream {
            self.peer_ended(stream);
        }
        Ok(())
    }

    fn on_rst_stream(&mut self, stream: u32, code: ErrorCode) -> Result<(), H2Error> {
        let Some(s) = self.streams.get_mut(&stream) else {
            return self.on_missing(stream, Received::Reset).map(|_| ());
        };
        let answered = s.answered;
        let (next, verdict) = s.state.receive(Received::Reset, stream)?;
        if verdict == Verdict::Ignore {
            return Ok(());
        }
        s.state = next;
        self.events.push_back(Event::Reset { stream, code, by_peer: true });
        self.forget(stream);
        if self.role == Role::Server && !answered {
            // A stream reset before its answer: many of them is a rapid reset.
            self.guard.on_peer_reset().map_err(H2Error::Connection)?;
        }
        Ok(())
    }

    fn on_settings(&mut self, s: frame::Settings) -> Result<(), H2Error> {
        self.guard.on_settings().map_err(H2Error::Connection)?;
        if let Some(size) = s.header_table_size {
            self.encoder.set_max_table_size(size);
        }
        // Section 6.5.2: a server may not turn push on.
        if self.role == Role::Client && s.enable_push == Some(true) {
            return Err(H2Error::Connection(ErrorCode::ProtocolError));
        }
        match s.max_concurrent_streams {
            Some(n) => self.peer.max_concurrent_streams = n,
            // Section 6.5.2: no limit unless the peer sets one; what we assumed before its
            // first SETTINGS goes.
            None if !self.peer_ready => self.peer.max_concurrent_streams = u32::MAX,
            None => {}
        }
        if let Some(size) = s.max_frame_size {
            self.peer.max_frame_size = size;
        }
        if let Some(on) = s.enable_connect_protocol {
            // RFC 8441 section 3: once on, it stays on.
            if self.peer.connect_protocol && !on {
                return Err(H2Error::Connection(ErrorCode::ProtocolError));
            }
            self.peer.connect_protocol = on;
        }
        if let Some(window) = s.initial_window_size {
            let old = self.peer.initial_window;
            self.peer.initial_window = window;
            let mut moved = Vec::with_capacity(self.streams.len());
            for (id, stream) in self.streams.iter_mut() {
                stream.send.resize(old, window)?;
                moved.push((*id, stream.has_pending()));
            }
            for (id, pending) in moved {
                self.wake_if_room(id);
                if pending {
                    self.output.mark_ready(id);
                }
            }
        }
        self.output.settings_ack();
        if !self.peer_ready {
            self.peer_ready = true;
            self.events.push_back(Event::Ready);
        }
        Ok(())
    }

    fn on_ping(&mut self, ack: bool, payload: [u8; 8]) -> Result<(), H2Error> {
        if ack {
            // The peer is alive: every PING sent so far is answered for (they are
            // answered in order, section 6.7).
            self.pings_out = 0;
            return Ok(());
        }
        self.guard.on_ping().map_err(H2Error::Connection)?;
        self.output.ping_ack(payload);
        Ok(())
    }

    fn on_go_away(
        &mut self,
        last_stream: u32,
        code: ErrorCode,
        debug: Bytes,
    ) -> Result<(), H2Error> {
        let last = self.peer_last_stream.map_or(last_stream, |seen| seen.min(last_stream));
        self.peer_last_stream = Some(last);
        self.peer_goaway_code = Some(code);
        if self.role == Role::Client {
            // Streams above its last were never processed: refused, they may go again.
            let refused: Vec<u32> = self.streams.keys().copied().filter(|&id| id > last).collect();
            for stream in refused {
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.state = State::Closed(Closed::ResetByPeer);
                }
                self.events.push_back(Event::Reset {
                    stream,
                    code: ErrorCode::RefusedStream,
                    by_peer: true,
                });
                self.forget(stream);
            }
        }
        self.events.push_back(Event::GoAway { last_stream: last, code, debug });
        Ok(())
    }

    fn on_window_update(&mut self, stream: u32, increment: u32) -> Result<(), H2Error> {
        if stream == 0 {
            self.send_window.grow(increment, 0)?;
            // Streams that waited on the connection's window may go, in the order they
            // began to wait (not the table's order, which would favour the same
            // streams at every update and starve others).
            self.output.unblock_connection();
            return Ok(());
        }
        let Some(s) = self.streams.get_mut(&stream) else {
            return self.on_missing(stream, Received::WindowUpdate).map(|_| ());
        };
        let (_, verdict) = s.state.receive(Received::WindowUpdate, stream)?;
        if verdict == Verdict::Ignore {
            return Ok(());
        }
        s.send.grow(increment, stream)?;
        let pending = s.has_pending();
        self.wake_if_room(stream);
        if pending {
            self.output.mark_ready(stream);
        }
        Ok(())
    }

    /// The peer's END_STREAM came on `stream`: forgotten once both sides ended.
    fn peer_ended(&mut self, stream: u32) {
        if self.streams.get(&stream).is_some_and(|s| !s.state.is_active()) {
            self.forget(stream);
        }
    }
}

/// Section 3.4: the peer's first frame is its SETTINGS, its own (an ACK of ours is not
/// a preface). Judged from the frame header as soon as it is in, before the frame's
/// length is: bytes that are not HTTP/2 at all (a server answering in HTTP/1.1, whose
/// first bytes read as a header announce a frame of megabytes) are an invalid preface,
/// a PROTOCOL_ERROR, not a frame too large.
fn check_preface_frame(buf: &[u8]) -> Result<(), ErrorCode> {
    let Some(header) = buf.first_chunk::<{ frame::HEADER_LEN }>() else {
        return Ok(());
    };
    let header = frame::FrameHeader::parse(header);
    if header.kind != FrameType::Settings || header.has_flag(frame::ACK) {
        return Err(ErrorCode::ProtocolError);
    }
    Ok(())
}

/// Section 8.1.1: DATA must add up to a declared `content-length`.
fn check_length(s: &mut Stream, len: usize, end_stream: bool, stream: u32) -> Result<(), H2Error> {
    let malformed = H2Error::Stream { stream, code: ErrorCode::ProtocolError };
    if let Some(remaining) = s.remaining.as_mut() {
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        *remaining = remaining.checked_sub(len).ok_or(malformed)?;
        if end_stream && *remaining > 0 {
            return Err(malformed);
        }
    }
    Ok(())
}
