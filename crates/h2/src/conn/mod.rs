//! The connection engine: one HTTP/2 connection's streams, flow control and settings,
//! for either role, with no I/O and no lock.
//!
//! The caller owns the socket. It hands the engine what it read ([`Connection::receive`]),
//! takes the events that came of it ([`Connection::next_event`]), acts on streams
//! ([`Connection::send_head`], [`Connection::send_data`], [`Connection::release`],
//! [`Connection::reset`], and on the client side [`Connection::open`]) and writes what
//! the engine produced ([`Connection::next_output`]). Everything happens on the
//! connection's own task: no stream has a task or a lock of its own.
//!
//! Flow control is end to end for a proxy: received DATA counts against our windows
//! until the application says it handed the bytes on ([`Connection::release`]), so a
//! peer can never make us hold more than we granted; DATA the application sends is
//! queued only up to what the peer's window allows plus a bounded buffer
//! ([`Connection::capacity`]), and [`Event::Writable`] says when there is room again.
//!
//! Module map: `state` (a stream's state per RFC 9113 section 5.1), `flow` (windows),
//! `stream` (what the engine keeps per stream), `message` (section 8's checks of a field
//! section), `ids` (tables keyed by stream id), `recv` (each received frame), `send`
//! (the output queue and DATA scheduling), `guard` (flood limits).

pub mod flow;
mod guard;
pub mod ids;
pub mod message;
mod recv;
mod send;
pub mod state;
mod stream;

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::error::ErrorCode;
use crate::frame::Settings;
use crate::hpack::{Decoder, Encoder, Field, FieldRef};
pub use guard::Limits;
pub use message::{Head, Malformed, Pseudo};
use send::Output;
use state::{Closed, State};
use stream::Stream;

/// Which end of the connection we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We accepted the connection: the peer opens (odd) streams with requests.
    Server,
    /// We opened it: we open streams, the peer answers.
    Client,
}

/// What we grant and accept on one connection.
#[derive(Debug, Clone)]
pub struct Config {
    /// SETTINGS_MAX_CONCURRENT_STREAMS we advertise (server side; streams past it are
    /// refused with REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: what the peer may send on one stream before we
    /// release some.
    pub stream_window: u32,
    /// The connection's receive window (raised from 65,535 by a WINDOW_UPDATE at start).
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE we accept.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a larger field section is refused (the stream
    /// gets [`Event::TooLarge`]); decoding still runs over all of it.
    pub max_header_list_size: u32,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441), server side.
    pub connect_protocol: bool,
    /// DATA the application may queue on one stream beyond what the peer's window lets
    /// out at once.
    pub send_buffer: usize,
    /// The most DATA queued on one stream, whatever the peer's window (a peer may grant
    /// 2^31 − 1 and then not read): the bound on what a stream's sender holds.
    pub max_queued: usize,
    /// Flood limits.
    pub limits: Limits,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_concurrent_streams: 100,
            stream_window: 256 * 1024,
            connection_window: 1024 * 1024,
            max_frame_size: 16_384,
            max_header_list_size: 64 * 1024,
            connect_protocol: false,
            send_buffer: 64 * 1024,
            max_queued: 256 * 1024,
            limits: Limits::default(),
        }
    }
}

/// What happened on the connection, for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A header section that opens a message: a request (server side) or a response,
    /// informational or final (client side). `end_stream`: no body follows.
    Head { stream: u32, head: Head, end_stream: bool },
    /// Body bytes; the application releases them once handed on.
    Data { stream: u32, data: Bytes, end_stream: bool },
    /// Trailers, which end the stream.
    Trailers { stream: u32, fields: Vec<Field> },
    /// The request's field section is larger than SETTINGS_MAX_HEADER_LIST_SIZE (server
    /// side): the stream is open for an answer (431).
    TooLarge { stream: u32, end_stream: bool },
    /// The stream ended before its end: reset by the peer (`by_peer`), or by the engine
    /// for a stream error it found (the peer was told with RST_STREAM), or refused by
    /// the peer's GOAWAY (code REFUSED_STREAM: it never reached the application).
    Reset { stream: u32, code: ErrorCode, by_peer: bool },
    /// There is room again to queue DATA on a stream the application found full.
    Writable { stream: u32 },
    /// The peer said it goes away: it takes no stream above `last_stream`.
    GoAway { last_stream: u32, code: ErrorCode, debug: Bytes },
    /// The peer's first SETTINGS arrived (client side: what it allows is known).
    Ready,
}

/// Why the application's action on a stream was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The stream is gone (closed or reset) or was never opened.
    NoStream,
    /// The stream's sending side ended already.
    Ended,
    /// More DATA than [`Connection::capacity`] allowed.
    Full,
    /// No new stream: the connection is going away, or is at the peer's limit of
    /// concurrent streams.
    Refused,
}

/// The connection's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// We sent GOAWAY: streams up to the last one finish; new ones are ignored.
    GoingAway,
    /// A connection error, or both sides gone away with nothing left: no more frames.
    Closed,
}

/// One HTTP/2 connection, either role.
pub struct Connection {
    role: Role,
    config: Config,
    phase: Phase,
    /// Server side: the client's 24-byte preface is still being read.
    awaiting_preface: bool,
    streams: ids::StreamMap<Stream>,
    /// Streams open or half-closed, for the concurrency limits.
    active: u32,
    /// Highest stream id the peer opened (server) or we opened (client).
    last_stream: u32,
    /// Streams closed lately, and whether by our reset: frames the peer sent before it
    /// saw our reset are ignored, others on a closed stream are STREAM_CLOSED (RFC 9113
    /// section 5.1, "closed").
    closed_lately: VecDeque<(u32, Closed)>,
    decoder: Decoder,
    encoder: Encoder,
    /// The peer's settings in force.
    peer: PeerSettings,
    /// Whether the peer's first SETTINGS has come.
    peer_ready: bool,
    /// Our SETTINGS frames not yet acknowledged.
    unacked_settings: u32,
    /// A header block still waiting for CONTINUATION frames.
    partial: Option<recv::PartialBlock>,
    send_window: flow::SendWindow,
    recv_window: flow::RecvWindow,
    /// The GOAWAY the peer sent, if any: its last stream, and its code.
    peer_last_stream: Option<u32>,
    peer_goaway_code: Option<ErrorCode>,
    output: Output,
    events: VecDeque<Event>,
    guard: guard::Guard,
    /// The code of the connection error that closed it, if one did.
    error: Option<ErrorCode>,
    /// PINGs we sent whose ACK has not come.
    pings_out: u32,
}

/// The peer's SETTINGS that matter to us (RFC 9113 section 6.5.2 defaults, but for the
/// stream limit before its first SETTINGS).
#[derive(Debug, Clone, Copy)]
struct PeerSettings {
    /// Until the peer's first SETTINGS: [`STREAMS_BEFORE_SETTINGS`]; then what it set,
    /// or no limit.
    max_concurrent_streams: u32,
    initial_window: u32,
    max_frame_size: u32,
    connect_protocol: bool,
}

impl Default for PeerSettings {
    fn default() -> PeerSettings {
        PeerSettings {
            max_concurrent_streams: STREAMS_BEFORE_SETTINGS,
            initial_window: flow::DEFAULT_WINDOW,
            max_frame_size: 16_384,
            connect_protocol: false,
        }
    }
}

impl Connection {
    /// A connection we accepted: the client's preface is expected first; our SETTINGS
    /// and the connection window's update are queued.
    pub fn server(config: Config) -> Connection {
        Connection::new(Role::Server, config)
    }

    /// A connection we opened: the preface, our SETTINGS and the window update are
    /// queued; streams may be opened at once (RFC 9113 section 3.4).
    pub fn client(config: Config) -> Connection {
        Connection::new(Role::Client, config)
    }

    fn new(role: Role, config: Config) -> Connection {
        let mut conn = Connection {
            role,
            phase: Phase::Open,
            awaiting_preface: role == Role::Server,
            streams: ids::StreamMap::default(),
            active: 0,
            last_stream: 0,
            closed_lately: VecDeque::new(),
            decoder: Decoder::new(4096),
            encoder: Encoder::new(),
            peer: PeerSettings::default(),
            peer_ready: false,
            unacked_settings: 0,
            partial: None,
            send_window: flow::SendWindow::new(flow::DEFAULT_WINDOW),
            recv_window: flow::RecvWindow::new(config.connection_window.max(flow::DEFAULT_WINDOW)),
            peer_last_stream: None,
            peer_goaway_code: None,
            output: Output::default(),
            events: VecDeque::new(),
            guard: guard::Guard::new(config.limits),
            error: None,
            pings_out: 0,
            config,
        };
        conn.start();
        conn
    }

    /// Queues what opens the connection from our side.
    fn start(&mut self) {
        if self.role == Role::Client {
            self.output.preface();
        }
        let ours = self.our_settings();
        self.output.settings(&ours);
        self.unacked_settings = 1;
        let raise = self.config.connection_window.saturating_sub(flow::DEFAULT_WINDOW);
        if raise > 0 {
            self.output.window_update(0, raise);
        }
    }

    fn our_settings(&self) -> Settings {
        let mut s = Settings::default();
        match self.role {
            Role::Server => {
                s.max_concurrent_streams = Some(self.config.max_concurrent_streams);
                if self.config.connect_protocol {
                    s.enable_connect_protocol = Some(true);
                }
            }
            // We never accept pushes (section 6.5.2).
            Role::Client => s.enable_push = Some(false),
        }
        s.initial_window_size = Some(self.config.stream_window);
        s.max_frame_size = Some(self.config.max_frame_size);
        s.max_header_list_size = Some(self.config.max_header_list_size);
        s
    }

    /// Takes in bytes read from the socket: every whole frame in `buf` is acted on and
    /// taken out of it. A connection error ends the connection: GOAWAY is queued, the
    /// error returned, and the caller writes the output and closes.
    pub fn receive(&mut self, buf: &mut BytesMut) -> Result<(), ErrorCode> {
        if self.phase == Phase::Closed {
            buf.clear();
            return Err(self.error.unwrap_or(ErrorCode::NoError));
        }
        match self.receive_frames(buf) {
            Ok(()) => Ok(()),
            Err(code) => {
                self.fail(code);
                buf.clear();
                Err(code)
            }
        }
    }

    /// Ends the connection for an error of ours or the peer's: GOAWAY with `code`, then
    /// nothing more.
    fn fail(&mut self, code: ErrorCode) {
        if self.phase == Phase::Closed {
            return;
        }
        let last = self.last_peer_stream();
        self.output.go_away(last, code, b"");
        self.phase = Phase::Closed;
        self.error = Some(code);
    }

    /// The next event, in the order things happened.
    pub fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next bytes to write to the socket, in order; `None` when nothing is waiting.
    /// Pieces are written in the order they come; several may be taken for one
    /// vectored write. DATA is moved out of the streams' queues only while less than
    /// 64 KiB is waiting here, so what has been taken and not written stays bounded by
    /// what the caller takes at once.
    pub fn next_output(&mut self) -> Option<Bytes> {
        if self.output.is_empty() {
            self.schedule();
        }
        self.output.next()
    }

    /// Whether the connection is over: an error, or gone away on both sides with no
    /// stream left.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
            || (self.active == 0
                && (self.phase == Phase::GoingAway || self.peer_last_stream.is_some()))
    }

    /// Whether a stream is still tracked: open, or half-closed either way.
    pub fn is_open_stream(&self, stream: u32) -> bool {
        self.streams.contains_key(&stream)
    }

    /// Streams open or half-closed.
    pub fn active_streams(&self) -> u32 {
        self.active
    }

    /// The connection error that ended it, if any.
    pub fn error(&self) -> Option<ErrorCode> {
        self.error
    }

    /// Whether the peer allows extended CONNECT (RFC 8441), client side.
    pub fn peer_allows_connect_protocol(&self) -> bool {
        self.peer.connect_protocol
    }

    /// SETTINGS_MAX_CONCURRENT_STREAMS of the peer (client side: how many streams it
    /// takes at once; until its first SETTINGS, the 100 assumed).
    pub fn peer_max_concurrent_streams(&self) -> u32 {
        self.peer.max_concurrent_streams
    }

    /// Whether the peer sent GOAWAY: it takes no new stream.
    pub fn peer_went_away(&self) -> bool {
        self.peer_last_stream.is_some()
    }

    /// The code of the GOAWAY the peer sent, if it sent one.
    pub fn peer_goaway_code(&self) -> Option<ErrorCode> {
        self.peer_goaway_code
    }

    /// Whether the peer's first SETTINGS came.
    pub fn is_ready(&self) -> bool {
        self.peer_ready
    }

    /// Sends a PING, to see the peer is alive; [`Connection::unanswered_pings`] says
    /// whether it answered.
    pub fn ping(&mut self) {
        if self.phase != Phase::Closed {
            self.pings_out = self.pings_out.saturating_add(1);
            // The count, in both halves of the payload.
            let count = u64::from(self.pings_out);
            self.output.ping((count << 32 | count).to_be_bytes());
        }
    }

    /// PINGs sent whose ACK has not come.
    pub fn unanswered_pings(&self) -> u32 {
        self.pings_out
    }

    /// Whether a new stream may be opened now (client side).
    pub fn can_open(&self) -> bool {
        self.role == Role::Client
            && self.phase == Phase::Open
            && self.peer_last_stream.is_none()
            && self.active < self.peer.max_concurrent_streams
            && self.last_stream < MAX_STREAM_ID.saturating_sub(1)
    }

    /// Opens a stream with a request head (client side): its id.
    pub fn open(
        &mut self,
        fields: &[Field],
        end_stream: bool,
        head_request: bool,
    ) -> Result<u32, SendError> {
        self.open_of(fields.iter().map(Field::as_field_ref), end_stream, head_request)
    }

    /// [`Connection::open`], the fields borrowed from wherever the caller keeps them.
    pub fn open_of<'f>(
        &mut self,
        fields: impl IntoIterator<Item = FieldRef<'f>>,
        end_stream: bool,
        head_request: bool,
    ) -> Result<u32, SendError> {
        if !self.can_open() {
            return Err(SendError::Refused);
        }
        let id = if self.last_stream == 0 { 1 } else { self.last_stream.saturating_add(2) };
        self.last_stream = id;
        let mut stream =
            Stream::new(State::Open, self.peer.initial_window, self.config.stream_window);
        stream.head_request = head_request;
        self.streams.insert(id, stream);
        self.active = self.active.saturating_add(1);
        self.write_head(id, fields, end_stream);
        Ok(id)
    }

    /// Sends a header section on a stream: a response (informational or final) on the
    /// server side. `end_stream`: no body follows.
    pub fn send_head(
        &mut self,
        stream: u32,
        fields: &[Field],
        end_stream: bool,
    ) -> Result<(), SendError> {
        self.send_head_of(stream, fields.iter().map(Field::as_field_ref), end_stream)
    }

    /// [`Connection::send_head`], the fields borrowed from wherever the caller keeps
    /// them (a proxy's response head, say), encoded without a copy.
    pub fn send_head_of<'f>(
        &mut self,
        stream: u32,
        fields: impl IntoIterator<Item = FieldRef<'f>>,
        end_stream: bool,
    ) -> Result<(), SendError> {
        let s = self.streams.get_mut(&stream).ok_or(SendError::NoStream)?;
        if !s.state.can_send() || s.end_queued {
            return Err(SendError::Ended);
        }
        if !s.answered {
            s.answered = true;
            self.guard.on_answered();
        }
        self.write_head(stream, fields, end_stream);
        Ok(())
    }

    /// Room to queue DATA on a stream now: the peer's window plus the send buffer, at
    /// most `max_queued` in all, less what is queued. 0 means wait for
    /// [`Event::Writable`].
    pub fn capacity(&mut self, stream: u32) -> usize {
        let (buffer, max_queued) = (self.config.send_buffer, self.config.max_queued);
        let Some(s) = self.streams.get_mut(&stream) else { return 0 };
        let room = s.room(buffer, max_queued);
        s.waiting = room == 0;
        room
    }

    /// Tells the application there is room on `stream` again, if it found none before
    /// and there is now.
    fn wake_if_room(&mut self, stream: u32) {
        let (buffer, max_queued) = (self.config.send_buffer, self.config.max_queued);
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if s.waiting && s.room(buffer, max_queued) > 0 {
            s.waiting = false;
            self.events.push_back(Event::Writable { stream });
        }
    }

    /// Queues DATA on a stream; it goes out as the windows allow. At most
    /// [`Connection::capacity`] bytes.
    pub fn send_data(
        &mut self,
        stream: u32,
        data: Bytes,
        end_stream: bool,
    ) -> Result<(), SendError> {
        let room = self.capacity(stream);
        let s = self.streams.get_mut(&stream).ok_or(SendError::NoStream)?;
        if !s.state.can_send() || s.end_queued {
            return Err(SendError::Ended);
        }
        if data.len() > room {
            return Err(SendError::Full);
        }
        s.queued_len = s.queued_len.saturating_add(data.len());
        if !data.is_empty() {
            s.queued.push_back(data);
        }
        s.end_queued = end_stream;
        s.waiting = false;
        self.output.mark_ready(stream);
        Ok(())
    }

    /// Queues trailers, which end the stream once the queued DATA is out.
    pub fn send_trailers(&mut self, stream: u32, fields: Vec<Field>) -> Result<(), SendError> {
        let s = self.streams.get_mut(&stream).ok_or(SendError::NoStream)?;
        if !s.state.can_send() || s.end_queued {
            return Err(SendError::Ended);
        }
        s.trailers = Some(fields);
        s.end_queued = true;
        self.output.mark_ready(stream);
        Ok(())
    }

    /// The application handed `n` received bytes of a stream on: the peer may send that
    /// much more (WINDOW_UPDATE frames go out once half a window is owed).
    pub fn release(&mut self, stream: u32, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(s) = self.streams.get_mut(&stream) {
            let n = n.min(s.unreleased);
            s.unreleased = s.unreleased.saturating_sub(n);
            if let Some(increment) = s.recv.release(n) {
                if s.state.can_receive() {
                    self.output.window_update(stream, increment);
                }
            }
            self.release_connection(n);
        }
    }

    /// Gives `n` bytes back to the connection's receive window.
    fn release_connection(&mut self, n: u32) {
        if let Some(increment) = self.recv_window.release(n) {
            self.output.window_update(0, increment);
        }
    }

    /// Resets a stream (RST_STREAM with `code`); what was queued on it is dropped.
    pub fn reset(&mut self, stream: u32, code: ErrorCode) {
        if self.streams.contains_key(&stream) {
            self.output.rst_stream(stream, code);
            self.close_by_reset(stream);
        }
    }

    /// The application is done with a stream: what it did not release goes back to the
    /// windows. On the client side a stream still open is reset (CANCEL). On the server
    /// side a stream the peer is still sending on is reset, with NO_ERROR when
    /// our side ended (the answer is whole, the rest of the peer's message is not
    /// needed: RFC 9113 section 8.1), CANCEL when it did not (the answer was given up).
    /// What was queued before our end still goes out.
    pub fn finish(&mut self, stream: u32) {
        let unreleased = self.streams.get(&stream).map_or(0, |s| s.unreleased);
        self.release(stream, usize::try_from(unreleased).unwrap_or(usize::MAX));
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if self.role == Role::Client {
            // The response (or the request) was given up: the origin stops.
            self.reset(stream, ErrorCode::Cancel);
            return;
        }
        let ended = s.end_queued || !s.state.can_send();
        match (ended, s.state.can_receive()) {
            (false, _) => self.reset(stream, ErrorCode::Cancel),
            // It closes by itself once its end is out.
            (true, false) => {}
            // Our end may still wait behind queued DATA: the reset follows it.
            (true, true) if s.has_pending() => s.reset_after_end = Some(ErrorCode::NoError),
            (true, true) => self.reset(stream, ErrorCode::NoError),
        }
    }

    /// Starts a graceful shutdown: GOAWAY NO_ERROR naming the last stream the peer
    /// opened; streams up to it finish, later ones are ignored (server side). On the
    /// client side: no new stream is opened.
    pub fn go_away(&mut self) {
        if self.phase == Phase::Open {
            let last = self.last_peer_stream();
            self.output.go_away(last, ErrorCode::NoError, b"");
            self.phase = Phase::GoingAway;
        }
    }

    /// Ends the connection at once with GOAWAY `code` (for example ENHANCE_YOUR_CALM
    /// for a flood the application saw).
    pub fn abort(&mut self, code: ErrorCode) {
        self.fail(code);
    }

    /// The last stream the peer opened, as GOAWAY names it (0 on the client side: the
    /// server opens none).
    fn last_peer_stream(&self) -> u32 {
        match self.role {
            Role::Server => self.last_stream,
            Role::Client => 0,
        }
    }

    /// Encodes and queues a header section (HEADERS and CONTINUATION frames) now, so
    /// HPACK state follows the order of frames on the wire.
    fn write_head<'f>(
        &mut self,
        stream: u32,
        fields: impl IntoIterator<Item = FieldRef<'f>>,
        end_stream: bool,
    ) {
        let max_frame = self.peer.max_frame_size;
        self.output.head(&mut self.encoder, stream, fields, end_stream, max_frame);
        if end_stream {
            self.end_sent(stream);
        }
    }

    /// Our END_STREAM went out on `stream`.
    fn end_sent(&mut self, stream: u32) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        s.state = s.state.end_local();
        s.end_queued = true;
        if !s.state.is_active() {
            self.forget(stream);
        } else if let Some(code) = s.reset_after_end.take() {
            self.reset(stream, code);
        }
    }

    /// Closes a stream for an error found on it: RST_STREAM to the peer, the
    /// application told.
    fn reset_stream(&mut self, stream: u32, code: ErrorCode) {
        self.output.rst_stream(stream, code);
        if self.streams.contains_key(&stream) {
            self.events.push_back(Event::Reset { stream, code, by_peer: false });
            self.close_by_reset(stream);
        }
    }

    /// Our RST_STREAM went out on `stream`: closed, and forgotten.
    fn close_by_reset(&mut self, stream: u32) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.state = State::Closed(Closed::ResetByUs);
        }
        self.forget(stream);
    }

    fn remember_closed(&mut self, stream: u32, how: Closed) {
        if self.closed_lately.len() >= CLOSED_REMEMBERED {
            self.closed_lately.pop_front();
        }
        self.closed_lately.push_back((stream, how));
    }

    /// Drops a closed stream: its unreleased bytes go back to the connection's window.
    fn forget(&mut self, stream: u32) {
        if let Some(s) = self.streams.remove(&stream) {
            let how = match s.state {
                State::Closed(how) => how,
                // Forgotten while active only when the connection gives it up.
                _ => Closed::ResetByUs,
            };
            self.remember_closed(stream, how);
            self.active = self.active.saturating_sub(1);
            self.release_connection(s.unreleased);
        }
    }
}

/// The streams a client opens before the server's first SETTINGS says its limit.
/// Section 6.5.2 sets none, but servers commonly allow 100 (the smallest value it
/// recommends), and a stream past the limit is only refused: opening 1,000 streams at
/// once would have 900 refused. nghttp2 and Go's client assume 100 too.
const STREAMS_BEFORE_SETTINGS: u32 = 100;

/// The largest stream id (section 5.1.1).
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// How many closed streams are remembered, to tell a late frame on one (ignored after
/// our reset, STREAM_CLOSED otherwise) from a frame on a stream never opened.
const CLOSED_REMEMBERED: usize = 64;

#[cfg(test)]
mod tests;
