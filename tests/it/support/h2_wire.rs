//! One end of an HTTP/2 connection with holdfast, driven frame by frame over TCP (h2c,
//! prior knowledge) and written with holdfast-h2's frame writers and HPACK: a client
//! that speaks to holdfast ([`Wire::connect`]), or an origin holdfast speaks to
//! ([`Wire::accept`]). For the conformance suites, which send what no library would and
//! must read exactly what comes back.
//!
//! [`Wire`] writes well-formed frames through `holdfast_h2::frame`'s writers and its own
//! HPACK [`Encoder`], and malformed ones byte by byte ([`Wire::send_frame`]). What
//! holdfast sends is cut with `split_frame`, decoded with `decode`, and its field blocks
//! (CONTINUATION frames joined) decoded with one HPACK [`Decoder`] kept for the
//! connection, so each arrives as one [`Event`]. SETTINGS are acknowledged and PINGs
//! answered as they are read, as a client must.
//!
//! Every read has a deadline ([`ANSWER`]): a holdfast that does not answer fails the
//! test, naming what it was waiting for and the events read so far.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use holdfast_h2::error::ErrorCode;
use holdfast_h2::frame::{
    self, decode, split_frame, Frame, FrameHeader, FrameType, Settings, DEFAULT_MAX_FRAME_SIZE,
    PREFACE,
};
use holdfast_h2::hpack::{Decoder, Encoder, FieldRef, DEFAULT_TABLE_SIZE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::within;

/// How long holdfast may take to answer one thing the test sent (a frame, a request
/// to the origin and back): past it, the test fails.
pub const ANSWER: Duration = Duration::from_secs(5);

// Frame types (RFC 9113 section 6), flags and SETTINGS parameters (section 6.5.2), as
// written on the wire: for frames written byte by byte ([`Wire::send_frame`]).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
/// A frame type RFC 9113 does not define.
pub const UNKNOWN_TYPE: u8 = 0x20;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// One thing holdfast sent, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A whole field block (HEADERS and its CONTINUATION frames), decoded.
    Fields {
        stream: u32,
        fields: Vec<(String, String)>,
        end_stream: bool,
    },
    Data {
        stream: u32,
        data: Bytes,
        end_stream: bool,
    },
    Reset {
        stream: u32,
        code: ErrorCode,
    },
    /// SETTINGS without ACK (already acknowledged).
    Settings(Settings),
    SettingsAck,
    /// PING (a PING without ACK has been answered already).
    Ping {
        ack: bool,
        payload: [u8; 8],
    },
    GoAway {
        last_stream_id: u32,
        code: ErrorCode,
        debug: Bytes,
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    /// Any other frame (PRIORITY, PUSH_PROMISE, an unknown type), as decoded.
    Other(Frame),
    /// Bytes that are not HTTP/2 frames we accept (an HTTP/1.1 answer, a frame past
    /// our limits), with why; everything read after them comes the same way.
    Undecodable {
        why: String,
        bytes: Bytes,
    },
}

/// Why reading stopped without an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// holdfast closed (or reset) the connection.
    Closed,
    /// Nothing came before the deadline.
    TimedOut,
}

/// Where an error was taken: on its stream alone, or on the whole connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Stream,
    Connection,
}

/// A response read to its end on one stream.
#[derive(Debug, Clone, Default)]
pub struct Response {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
}

impl Response {
    /// The first value of the field `name` (lowercase).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A field block being received: HEADERS without END_HEADERS, then CONTINUATIONs.
struct PartialBlock {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
}

/// One HTTP/2 client connection to holdfast, driven frame by frame.
pub struct Wire {
    tcp: TcpStream,
    read_buf: BytesMut,
    encoder: Encoder,
    decoder: Decoder,
    partial: Option<PartialBlock>,
    /// What holdfast sent stopped being frames: the rest is read as bytes.
    undecodable: bool,
    /// The SETTINGS_HEADER_TABLE_SIZE of each SETTINGS we sent and holdfast has not
    /// acknowledged yet: our decoder's limit changes at the ACK (RFC 9113 6.5.3).
    unacked_table_sizes: VecDeque<Option<u32>>,
    /// holdfast's settings as received so far (the last value of each).
    pub peer: Settings,
    /// The fields holdfast sent as never indexed (RFC 7541 6.2.3): stream and name.
    pub never_indexed: Vec<(u32, String)>,
    /// Every event read so far, for failure messages.
    pub seen: Vec<Event>,
}

impl Wire {
    /// A TCP connection to `addr` on which nothing has been sent yet.
    pub async fn open(addr: SocketAddr) -> Wire {
        let tcp = within("connect to holdfast", TcpStream::connect(addr)).await.expect("connect");
        Wire::new(tcp)
    }

    /// A fresh wire on `tcp`: nothing read or sent, both HPACK tables empty.
    fn new(tcp: TcpStream) -> Wire {
        tcp.set_nodelay(true).expect("nodelay");
        Wire {
            tcp,
            read_buf: BytesMut::new(),
            encoder: Encoder::new(),
            decoder: Decoder::new(DEFAULT_TABLE_SIZE),
            partial: None,
            undecodable: false,
            unacked_table_sizes: VecDeque::new(),
            peer: Settings::default(),
            never_indexed: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// A connection past its start: the preface and an empty SETTINGS sent, holdfast's
    /// SETTINGS read (and acknowledged) and its ACK of ours read.
    pub async fn connect(addr: SocketAddr) -> Wire {
        Wire::connect_with(addr, &Settings::default()).await
    }

    /// [`Wire::connect`] with `settings` in our first SETTINGS frame.
    pub async fn connect_with(addr: SocketAddr, settings: &Settings) -> Wire {
        let mut wire = Wire::open(addr).await;
        let mut hello = BytesMut::from(&PREFACE[..]);
        frame::write_settings(&mut hello, settings).expect("valid settings");
        wire.unacked_table_sizes.push_back(settings.header_table_size);
        wire.send(&hello).await.expect("send the preface");
        wire.handshake().await;
        wire
    }

    /// The origin's end of a connection holdfast opened: holdfast's connection preface
    /// (the 24 bytes) read and checked; nothing sent yet.
    pub async fn accept(tcp: TcpStream) -> Wire {
        let mut wire = Wire::new(tcp);
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads more bytes.
        while wire.read_buf.len() < PREFACE.len() {
            let mut chunk = [0u8; 1024];
            match tokio::time::timeout_at(end, wire.tcp.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => wire.read_buf.extend_from_slice(&chunk[..n]),
                other => panic!("holdfast's connection preface: {other:?}"),
            }
        }
        let preface = wire.read_buf.split_to(PREFACE.len());
        assert_eq!(&preface[..], PREFACE, "RFC 9113 3.4: holdfast's connection preface");
        wire
    }

    /// [`Wire::accept`], then the connection's start as an origin: `settings` sent as
    /// our preface, holdfast's SETTINGS read (and acknowledged) and its ACK of ours
    /// read.
    pub async fn accept_with(tcp: TcpStream, settings: &Settings) -> Wire {
        let mut wire = Wire::accept(tcp).await;
        wire.settings(settings).await;
        wire.handshake().await;
        wire
    }

    /// Reads until holdfast's SETTINGS and its ACK of ours have both come.
    async fn handshake(&mut self) {
        let (mut settings, mut ack) = (false, false);
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads one event.
        while !(settings && ack) {
            match self.next_until(end).await {
                Ok(Event::Settings(_)) => settings = true,
                Ok(Event::SettingsAck) => ack = true,
                Ok(event @ (Event::GoAway { .. } | Event::Undecodable { .. })) => {
                    panic!("holdfast's connection start had {event:?}: {:?}", self.seen)
                }
                Ok(_) => {}
                Err(end) => panic!("the connection start ended: {end:?}; read {:?}", self.seen),
            }
        }
        let first = self.seen.first();
        assert!(
            matches!(first, Some(Event::Settings(_))),
            "RFC 9113 3.4: holdfast's first frame must be SETTINGS; it was {first:?}"
        );
    }

    /// Writes `bytes`; an error if holdfast has gone or stopped reading.
    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match tokio::time::timeout(ANSWER, self.tcp.write_all(bytes)).await {
            Ok(done) => done,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "holdfast stopped reading")),
        }
    }

    /// Writes bytes that must go out whole: panics if they do not.
    async fn must_send(&mut self, bytes: &[u8], what: &str) {
        if let Err(e) = self.send(bytes).await {
            panic!("sending {what}: {e}; read so far {:?}", self.seen);
        }
    }

    /// Writes one frame as given, valid or not: a 9-byte header (`stream` as written,
    /// reserved bit included) and `payload`.
    pub async fn send_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let bytes = raw_frame(kind, flags, stream, payload);
        self.must_send(&bytes, &format!("a frame of type {kind:#x}")).await;
    }

    /// An HPACK block of `fields` from this connection's encoder: the caller must send
    /// it, since the encoder's table now counts on holdfast having decoded it.
    pub fn block(&mut self, fields: &[(&str, &str)]) -> Bytes {
        let mut block = BytesMut::new();
        self.encoder.encode(
            fields.iter().map(|(n, v)| FieldRef::new(n.as_bytes(), v.as_bytes())),
            &mut block,
        );
        block.freeze()
    }

    /// Sends `fields` as a field block on `stream` (HEADERS, and CONTINUATIONs if it
    /// does not fit one frame), END_STREAM if `end_stream`.
    pub async fn headers(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) {
        let block = self.block(fields);
        let mut bytes = BytesMut::new();
        frame::write_headers(&mut bytes, stream, &block, end_stream, DEFAULT_MAX_FRAME_SIZE)
            .expect("a valid HEADERS frame");
        self.must_send(&bytes, "HEADERS").await;
    }

    /// Sends a request head `GET path` on `stream` with END_STREAM.
    pub async fn get(&mut self, stream: u32, path: &str) {
        self.headers(stream, &request("GET", path), true).await;
    }

    /// Sends DATA on `stream` (no padding).
    pub async fn data(&mut self, stream: u32, data: &[u8], end_stream: bool) {
        let data = frame::Data {
            stream_id: stream,
            end_stream,
            pad_length: None,
            data: Bytes::copy_from_slice(data),
        };
        self.write(&Frame::Data(data)).await;
    }

    /// Sends a frame written by holdfast-h2's writer for it.
    pub async fn write(&mut self, frame: &Frame) {
        let mut bytes = BytesMut::new();
        frame::write_frame(&mut bytes, frame).expect("a frame the writer accepts");
        self.must_send(&bytes, &format!("{:?}", frame.kind())).await;
    }

    /// Sends a SETTINGS frame with `settings`.
    pub async fn settings(&mut self, settings: &Settings) {
        self.unacked_table_sizes.push_back(settings.header_table_size);
        self.write(&Frame::Settings(*settings)).await;
    }

    /// Sends a PING with `payload`.
    pub async fn ping(&mut self, payload: [u8; 8]) {
        let mut bytes = BytesMut::new();
        frame::write_ping(&mut bytes, payload);
        self.must_send(&bytes, "PING").await;
    }

    /// Sends a WINDOW_UPDATE (increment 1 to 2^31-1; others go by [`Wire::send_frame`]).
    pub async fn window_update(&mut self, stream: u32, increment: u32) {
        let mut bytes = BytesMut::new();
        frame::write_window_update(&mut bytes, stream, increment).expect("a valid increment");
        self.must_send(&bytes, "WINDOW_UPDATE").await;
    }

    /// Sends RST_STREAM on `stream`.
    pub async fn reset(&mut self, stream: u32, code: ErrorCode) {
        let mut bytes = BytesMut::new();
        frame::write_rst_stream(&mut bytes, stream, code).expect("a valid stream");
        self.must_send(&bytes, "RST_STREAM").await;
    }

    /// Sends GOAWAY.
    pub async fn goaway(&mut self, last_stream_id: u32, code: ErrorCode) {
        let mut bytes = BytesMut::new();
        frame::write_goaway(&mut bytes, last_stream_id, code, b"").expect("a valid GOAWAY");
        self.must_send(&bytes, "GOAWAY").await;
    }

    /// The next event, read until `end`.
    pub async fn next_until(&mut self, end: Instant) -> Result<Event, End> {
        // Each round decodes one frame or reads more bytes; bounded by `end`.
        loop {
            while let Some(event) = self.take_frame().await {
                if let Some(event) = event {
                    self.seen.push(event.clone());
                    return Ok(event);
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            match tokio::time::timeout_at(end, self.tcp.read(&mut chunk)).await {
                Err(_) => return Err(End::TimedOut),
                Ok(Ok(0) | Err(_)) => return Err(End::Closed),
                Ok(Ok(n)) => self.read_buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next event within [`ANSWER`].
    pub async fn next(&mut self) -> Result<Event, End> {
        self.next_until(Instant::now() + ANSWER).await
    }

    /// Takes one whole frame off the read buffer: `None` when none is whole yet,
    /// `Some(None)` for a frame that gives no event of its own (a CONTINUATION
    /// mid-block).
    async fn take_frame(&mut self) -> Option<Option<Event>> {
        if self.read_buf.is_empty() {
            return None;
        }
        if self.undecodable {
            let bytes = self.read_buf.split().freeze();
            return Some(Some(Event::Undecodable { why: "after undecodable bytes".into(), bytes }));
        }
        let (header, payload) = match split_frame(&mut self.read_buf, DEFAULT_MAX_FRAME_SIZE) {
            Ok(Some(frame)) => frame,
            Ok(None) => return None,
            Err(e) => return Some(Some(self.undecodable(format!("a frame header: {e}"), None))),
        };
        match decode(header, payload.clone()) {
            Ok(frame) => Some(self.on_frame(frame).await),
            Err(e) => Some(Some(self.undecodable(format!("{header:?}: {e}"), Some(payload)))),
        }
    }

    /// Everything left to read, from `payload` on, as bytes that are not frames.
    fn undecodable(&mut self, why: String, payload: Option<Bytes>) -> Event {
        self.undecodable = true;
        let mut bytes = BytesMut::new();
        if let Some(payload) = payload {
            bytes.extend_from_slice(&payload);
        }
        bytes.extend_from_slice(&self.read_buf.split());
        Event::Undecodable { why, bytes: bytes.freeze() }
    }

    /// Turns a decoded frame into an event, acknowledging SETTINGS and answering PING.
    async fn on_frame(&mut self, frame: Frame) -> Option<Event> {
        if let Some(partial) = &self.partial {
            let continues =
                matches!(&frame, Frame::Continuation(c) if c.stream_id == partial.stream);
            assert!(continues, "holdfast broke a field block with {frame:?}: {:?}", self.seen);
        }
        let event = match frame {
            Frame::Headers(headers) => {
                let partial = PartialBlock {
                    stream: headers.stream_id,
                    end_stream: headers.end_stream,
                    block: BytesMut::from(&headers.fragment[..]),
                };
                if !headers.end_headers {
                    self.partial = Some(partial);
                    return None;
                }
                self.decode_block(partial)
            }
            Frame::Continuation(continuation) => {
                let Some(mut partial) = self.partial.take() else {
                    panic!("holdfast sent a CONTINUATION outside a field block: {:?}", self.seen)
                };
                partial.block.extend_from_slice(&continuation.fragment);
                if !continuation.end_headers {
                    self.partial = Some(partial);
                    return None;
                }
                self.decode_block(partial)
            }
            Frame::Data(data) => {
                Event::Data { stream: data.stream_id, data: data.data, end_stream: data.end_stream }
            }
            Frame::RstStream(rst) => Event::Reset { stream: rst.stream_id, code: rst.code },
            Frame::Settings(settings) => {
                self.apply(&settings);
                let mut ack = BytesMut::new();
                frame::write_settings_ack(&mut ack);
                // holdfast may have closed already: the next read says so.
                let _ = self.send(&ack).await;
                Event::Settings(settings)
            }
            Frame::SettingsAck => {
                if let Some(Some(size)) = self.unacked_table_sizes.pop_front() {
                    self.decoder.set_max_table_size(size as usize);
                }
                Event::SettingsAck
            }
            Frame::Ping(ping) => {
                if !ping.ack {
                    let mut pong = BytesMut::new();
                    frame::write_ping_ack(&mut pong, ping.opaque_data);
                    let _ = self.send(&pong).await;
                }
                Event::Ping { ack: ping.ack, payload: ping.opaque_data }
            }
            Frame::GoAway(goaway) => Event::GoAway {
                last_stream_id: goaway.last_stream_id,
                code: goaway.code,
                debug: goaway.debug_data,
            },
            Frame::WindowUpdate(update) => {
                Event::WindowUpdate { stream: update.stream_id, increment: update.increment }
            }
            other => Event::Other(other),
        };
        Some(event)
    }

    /// Records holdfast's settings; its header table size bounds our encoder's table.
    fn apply(&mut self, settings: &Settings) {
        if let Some(size) = settings.header_table_size {
            self.encoder.set_max_table_size(size);
        }
        let s = &mut self.peer;
        let merge = |old: &mut Option<u32>, new: Option<u32>| *old = new.or(*old);
        merge(&mut s.header_table_size, settings.header_table_size);
        merge(&mut s.max_concurrent_streams, settings.max_concurrent_streams);
        merge(&mut s.initial_window_size, settings.initial_window_size);
        merge(&mut s.max_frame_size, settings.max_frame_size);
        merge(&mut s.max_header_list_size, settings.max_header_list_size);
        s.enable_push = settings.enable_push.or(s.enable_push);
        s.enable_connect_protocol = settings.enable_connect_protocol.or(s.enable_connect_protocol);
    }

    fn decode_block(&mut self, partial: PartialBlock) -> Event {
        let mut fields = Vec::new();
        let mut never_indexed = Vec::new();
        let block = partial.block.freeze();
        let decoded = self.decoder.decode(&block, usize::MAX, |field| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            if field.sensitive {
                never_indexed.push((partial.stream, text(&field.name)));
            }
            fields.push((text(&field.name), text(&field.value)));
        });
        self.never_indexed.extend(never_indexed);
        if let Err(e) = decoded {
            panic!("holdfast sent a field block we cannot decode ({e}): {:?}", self.seen);
        }
        Event::Fields { stream: partial.stream, fields, end_stream: partial.end_stream }
    }

    /// Reads until an event for which `want` holds, and returns it; a GOAWAY, a reset of
    /// any stream, the connection's end or [`ANSWER`] passing first fails, naming `rule`.
    pub async fn until(&mut self, rule: &str, mut want: impl FnMut(&Event) -> bool) -> Event {
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads one event.
        loop {
            match self.next_until(end).await {
                Ok(event) if want(&event) => return event,
                Ok(event @ (Event::GoAway { .. } | Event::Reset { .. })) => {
                    panic!("{rule}: got {event:?} first: {:?}", self.seen)
                }
                Ok(_) => {}
                Err(end) => panic!("{rule}: the connection {}; read {:?}", ended(end), self.seen),
            }
        }
    }

    /// Reads until the connection ends with a GOAWAY carrying `code`, then until it
    /// closes (RFC 9113 5.4.1: after a GOAWAY for an error, the TCP connection is
    /// closed). Fails on a GOAWAY with another code, a close without GOAWAY, or
    /// silence.
    pub async fn expect_goaway(&mut self, code: ErrorCode, rule: &str) {
        let codes = [code];
        self.expect_goaway_of(&codes, rule).await;
    }

    /// [`Wire::expect_goaway`] where the RFC allows any of `codes`: the code it got.
    pub async fn expect_goaway_of(&mut self, codes: &[ErrorCode], rule: &str) -> ErrorCode {
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads one event.
        let code = loop {
            match self.next_until(end).await {
                Ok(Event::GoAway { code, .. }) => break code,
                Ok(_) => {}
                Err(end) => panic!(
                    "{rule}: wanted GOAWAY {codes:?}, the connection {}; read {:?}",
                    ended(end),
                    self.seen
                ),
            }
        };
        assert!(
            codes.contains(&code),
            "{rule}: wanted GOAWAY {codes:?}, got {code:?}: {:?}",
            self.seen
        );
        eprintln!("{rule}: GOAWAY {code:?}");
        self.expect_closed(rule).await;
        code
    }

    /// Reads until holdfast closes the connection; panics if it is still open after
    /// [`ANSWER`]. Events before the close are recorded, not judged.
    pub async fn expect_closed(&mut self, rule: &str) {
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads one event.
        loop {
            match self.next_until(end).await {
                Ok(_) => {}
                Err(End::Closed) => return,
                Err(End::TimedOut) => {
                    panic!("{rule}: the connection is still open {ANSWER:?} later: {:?}", self.seen)
                }
            }
        }
    }

    /// Reads until RST_STREAM on `stream`, which must carry `code`; a GOAWAY, a close,
    /// or any HEADERS or DATA on `stream` first fails. Then checks the connection still
    /// works ([`Wire::expect_alive`]): the error was the stream's alone.
    pub async fn expect_reset(&mut self, stream: u32, code: ErrorCode, rule: &str) {
        self.expect_reset_of(stream, &[code], rule).await;
    }

    /// [`Wire::expect_reset`] where the RFC allows any of `codes`: the code it got.
    pub async fn expect_reset_of(
        &mut self,
        stream: u32,
        codes: &[ErrorCode],
        rule: &str,
    ) -> ErrorCode {
        let code = self.reset_on(stream, codes, rule, false).await;
        self.expect_alive(rule).await;
        code
    }

    /// Reads until RST_STREAM on `stream` with `code`; a response head with a 4xx
    /// status may come first (RFC 9113 8.1.1: "a server MAY send an HTTP response prior
    /// to closing or resetting the stream" for a malformed request), any other answer
    /// on the stream fails. Then checks the connection still works.
    pub async fn expect_malformed(&mut self, stream: u32, rule: &str) {
        self.reset_on(stream, &[ErrorCode::ProtocolError], rule, true).await;
        self.expect_alive(rule).await;
    }

    async fn reset_on(
        &mut self,
        stream: u32,
        codes: &[ErrorCode],
        rule: &str,
        client_error_ok: bool,
    ) -> ErrorCode {
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads one event.
        loop {
            match self.next_until(end).await {
                Ok(Event::Reset { stream: s, code }) if s == stream => {
                    assert!(
                        codes.contains(&code),
                        "{rule}: wanted RST_STREAM {codes:?} on stream {stream}, got {code:?}: {:?}",
                        self.seen
                    );
                    eprintln!("{rule}: RST_STREAM {code:?}");
                    return code;
                }
                Ok(Event::Fields { stream: s, ref fields, .. }) if s == stream => {
                    let status = status_of(fields);
                    assert!(
                        client_error_ok && (400..500).contains(&status),
                        "{rule}: wanted RST_STREAM {codes:?} on stream {stream}, got a response \
                         head {fields:?}: {:?}",
                        self.seen
                    );
                }
                Ok(Event::Data { stream: s, .. }) if s == stream => assert!(
                    client_error_ok,
                    "{rule}: wanted RST_STREAM {codes:?} on stream {stream}, got DATA: {:?}",
                    self.seen
                ),
                Ok(event @ Event::GoAway { .. }) => panic!(
                    "{rule}: wanted RST_STREAM {codes:?} on stream {stream}, got {event:?}: {:?}",
                    self.seen
                ),
                Ok(_) => {}
                Err(end) => panic!(
                    "{rule}: wanted RST_STREAM {codes:?} on stream {stream}, the connection {}; \
                     read {:?}",
                    ended(end),
                    self.seen
                ),
            }
        }
    }

    /// Reads until `code` comes as a RST_STREAM on `stream` (then the connection must go
    /// on) or as a GOAWAY (then it must close): for faults whose section allows either.
    /// Which one it was.
    pub async fn expect_stream_or_connection_error(
        &mut self,
        stream: u32,
        code: ErrorCode,
        rule: &str,
    ) -> Scope {
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads one event.
        loop {
            match self.next_until(end).await {
                Ok(Event::Reset { stream: s, code: got }) if s == stream => {
                    assert_eq!(
                        got, code,
                        "{rule}: RST_STREAM with the wrong code: {:?}",
                        self.seen
                    );
                    eprintln!("{rule}: a stream error {code:?}");
                    self.expect_alive(rule).await;
                    return Scope::Stream;
                }
                Ok(Event::GoAway { code: got, .. }) => {
                    assert_eq!(got, code, "{rule}: GOAWAY with the wrong code: {:?}", self.seen);
                    eprintln!("{rule}: a connection error {code:?}");
                    self.expect_closed(rule).await;
                    return Scope::Connection;
                }
                Ok(Event::Fields { stream: s, .. } | Event::Data { stream: s, .. })
                    if s == stream =>
                {
                    panic!(
                        "{rule}: wanted {code:?}, got an answer on stream {stream}: {:?}",
                        self.seen
                    )
                }
                Ok(_) => {}
                Err(end) => {
                    panic!("{rule}: wanted {code:?}, reading ended {end:?}: {:?}", self.seen)
                }
            }
        }
    }

    /// Checks the connection is still up and read: a PING is answered with its payload,
    /// and no GOAWAY comes before.
    pub async fn expect_alive(&mut self, rule: &str) {
        let payload = *b"alive?\0\x01";
        self.ping(payload).await;
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads one event.
        loop {
            match self.next_until(end).await {
                Ok(Event::Ping { ack: true, payload: p }) if p == payload => return,
                Ok(event @ Event::GoAway { .. }) => {
                    panic!("{rule}: the connection should go on, got {event:?}: {:?}", self.seen)
                }
                Ok(_) => {}
                Err(end) => panic!(
                    "{rule}: the connection should go on, it {}; read {:?}",
                    ended(end),
                    self.seen
                ),
            }
        }
    }

    /// Reads the response on `stream` to its end: head, body, trailers, starting with
    /// what was read for it while waiting for something else. Fails on a reset of the
    /// stream, a GOAWAY before the end, or the connection's end.
    pub async fn response(&mut self, stream: u32) -> Response {
        let mut response = Response::default();
        let earlier: Vec<Event> = self
            .seen
            .iter()
            .filter(|e| event_stream(e) == Some(stream) || matches!(e, Event::GoAway { .. }))
            .cloned()
            .collect();
        for event in earlier {
            if self.add_to(&mut response, stream, event).await {
                return response;
            }
        }
        let end = Instant::now() + ANSWER;
        // Bounded by the deadline: each round reads one event.
        loop {
            let event = match self.next_until(end).await {
                Ok(event) => event,
                Err(end) => panic!(
                    "the response on stream {stream}: the connection {}; read {:?}",
                    ended(end),
                    self.seen
                ),
            };
            if self.add_to(&mut response, stream, event).await {
                return response;
            }
        }
    }

    /// Adds `event` to the response on `stream` if it is about it; whether the
    /// response is complete.
    async fn add_to(&mut self, response: &mut Response, stream: u32, event: Event) -> bool {
        match event {
            Event::Fields { stream: s, fields, end_stream } if s == stream => {
                let status = status_of(&fields);
                if response.status == 0 && (100..200).contains(&status) {
                    return false; // an interim response
                }
                if response.status == 0 {
                    response.status = status;
                    response.fields = fields;
                } else {
                    response.trailers = fields;
                }
                end_stream
            }
            Event::Data { stream: s, data, end_stream } if s == stream => {
                response.body.extend_from_slice(&data);
                // Give the room back so large bodies are not held up.
                if !data.is_empty() {
                    let n = u32::try_from(data.len()).expect("a frame's length");
                    self.window_update(0, n).await;
                    if !end_stream {
                        self.window_update(stream, n).await;
                    }
                }
                end_stream
            }
            // A graceful GOAWAY that covers the stream lets it finish.
            Event::GoAway { last_stream_id, code: ErrorCode::NoError, .. }
                if last_stream_id >= stream =>
            {
                false
            }
            event @ (Event::Reset { .. } | Event::GoAway { .. } | Event::Undecodable { .. })
                if event_stream(&event).is_none_or(|s| s == stream) =>
            {
                panic!("the response on stream {stream}: got {event:?}: {:?}", self.seen)
            }
            _ => false,
        }
    }
}

/// The stream an event is on; `None` for connection-wide ones.
fn event_stream(event: &Event) -> Option<u32> {
    match event {
        Event::Fields { stream, .. } | Event::Data { stream, .. } | Event::Reset { stream, .. } => {
            Some(*stream)
        }
        Event::WindowUpdate { stream, .. } if *stream != 0 => Some(*stream),
        _ => None,
    }
}

/// How a read ended, for failure messages.
fn ended(end: End) -> &'static str {
    match end {
        End::Closed => "closed",
        End::TimedOut => "stayed silent past the deadline",
    }
}

/// The `:status` of a response head, or 0.
fn status_of(fields: &[(String, String)]) -> u16 {
    fields.iter().find(|(n, _)| n == ":status").and_then(|(_, v)| v.parse().ok()).unwrap_or(0)
}

/// Six bytes of a SETTINGS payload: one parameter.
pub fn setting(id: u16, value: u32) -> Vec<u8> {
    let mut bytes = id.to_be_bytes().to_vec();
    bytes.extend_from_slice(&value.to_be_bytes());
    bytes
}

/// A request head's pseudo-header fields for `method path` over http to
/// `holdfast.test`.
pub fn request<'a>(method: &'a str, path: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![(":method", method), (":scheme", "http"), (":path", path), (":authority", "holdfast.test")]
}

/// One frame's bytes as given, valid or not.
pub fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("a payload under 2^24");
    let mut bytes = BytesMut::new();
    // The header's writer refuses a stream id with the reserved bit; write that by hand.
    let header = FrameHeader {
        length,
        kind: FrameType::from_u8(kind),
        flags,
        stream_id: stream & 0x7fff_ffff,
    };
    header.write(&mut bytes).expect("a payload under 2^24");
    if stream & 0x8000_0000 != 0 {
        bytes[5] |= 0x80;
    }
    bytes.extend_from_slice(payload);
    bytes.to_vec()
}
