//! Conformance tests of the engine, written from RFC 9113: each writes frames on the
//! engine's wire (bytes into [`Connection::receive`]) and checks what it answers
//! (bytes out of [`Connection::next_output`], decoded by the frame layer) and what it
//! tells the application. Server side first, then client side.
#![allow(clippy::indexing_slicing, clippy::arithmetic_side_effects, clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};

use super::*;
use crate::frame::{self, Frame, PREFACE};
use crate::hpack::{Decoder, Encoder, Field, FieldRef};

/// The other end of the connection: writes frames with its own HPACK encoder and reads
/// the engine's with its own decoder.
struct Peer {
    encoder: Encoder,
    decoder: Decoder,
    wire: BytesMut,
    received: BytesMut,
}

impl Peer {
    fn new() -> Peer {
        Peer {
            encoder: Encoder::new(),
            decoder: Decoder::new(4096),
            wire: BytesMut::new(),
            received: BytesMut::new(),
        }
    }

    fn preface(&mut self) -> &mut Peer {
        self.wire.extend_from_slice(PREFACE);
        self
    }

    fn settings(&mut self, settings: frame::Settings) -> &mut Peer {
        frame::write_settings(&mut self.wire, &settings).unwrap();
        self
    }

    fn settings_ack(&mut self) -> &mut Peer {
        frame::write_settings_ack(&mut self.wire);
        self
    }

    fn block(&mut self, fields: &[(&str, &str)]) -> BytesMut {
        let mut block = BytesMut::new();
        let refs = fields.iter().map(|(n, v)| FieldRef::new(n.as_bytes(), v.as_bytes()));
        self.encoder.encode(refs, &mut block);
        block
    }

    fn headers(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) -> &mut Peer {
        let block = self.block(fields);
        frame::write_headers(&mut self.wire, stream, &block, end_stream, 16_384).unwrap();
        self
    }

    /// A HEADERS frame without END_HEADERS carrying `block`'s first `cut` bytes.
    fn headers_open(&mut self, stream: u32, block: &[u8], end_stream: bool) -> &mut Peer {
        let flags = if end_stream { frame::END_STREAM } else { 0 };
        self.raw(frame::FrameType::Headers, flags, stream, block)
    }

    fn continuation(&mut self, stream: u32, fragment: &[u8], end_headers: bool) -> &mut Peer {
        let flags = if end_headers { frame::END_HEADERS } else { 0 };
        self.raw(frame::FrameType::Continuation, flags, stream, fragment)
    }

    fn data(&mut self, stream: u32, data: &[u8], end_stream: bool) -> &mut Peer {
        frame::write_data_header(&mut self.wire, stream, data.len(), end_stream).unwrap();
        self.wire.extend_from_slice(data);
        self
    }

    fn window_update(&mut self, stream: u32, increment: u32) -> &mut Peer {
        frame::write_window_update(&mut self.wire, stream, increment).unwrap();
        self
    }

    fn rst(&mut self, stream: u32, code: ErrorCode) -> &mut Peer {
        frame::write_rst_stream(&mut self.wire, stream, code).unwrap();
        self
    }

    fn ping(&mut self, data: [u8; 8]) -> &mut Peer {
        frame::write_ping(&mut self.wire, data);
        self
    }

    fn go_away(&mut self, last: u32, code: ErrorCode) -> &mut Peer {
        frame::write_goaway(&mut self.wire, last, code, b"").unwrap();
        self
    }

    fn raw(&mut self, kind: frame::FrameType, flags: u8, stream: u32, payload: &[u8]) -> &mut Peer {
        let len = u32::try_from(payload.len()).unwrap();
        self.wire.extend_from_slice(&len.to_be_bytes()[1..]);
        self.wire.extend_from_slice(&[kind.to_u8(), flags]);
        self.wire.extend_from_slice(&stream.to_be_bytes());
        self.wire.extend_from_slice(payload);
        self
    }

    /// Hands what was written to the engine.
    fn send(&mut self, conn: &mut Connection) -> Result<(), ErrorCode> {
        let mut wire = std::mem::take(&mut self.wire);
        conn.receive(&mut wire)
    }

    /// Everything the engine wrote since the last look, as frames (the client preface
    /// skipped), with header blocks decoded.
    fn read(&mut self, conn: &mut Connection) -> Vec<Out> {
        while let Some(piece) = conn.next_output() {
            self.received.extend_from_slice(&piece);
        }
        if self.received.starts_with(PREFACE) {
            let _ = self.received.split_to(PREFACE.len());
        }
        let mut frames = Vec::new();
        let mut block = BytesMut::new();
        while let Some((header, payload)) =
            frame::split_frame(&mut self.received, frame::MAX_PAYLOAD_LEN).unwrap()
        {
            let out = match frame::decode(header, payload).unwrap() {
                Frame::Headers(h) if h.end_headers => {
                    Out::Headers(h.stream_id, self.decode(&h.fragment), h.end_stream)
                }
                Frame::Headers(h) => {
                    block.extend_from_slice(&h.fragment);
                    continue;
                }
                Frame::Continuation(c) => {
                    block.extend_from_slice(&c.fragment);
                    if !c.end_headers {
                        continue;
                    }
                    let whole = block.split().freeze();
                    Out::Headers(c.stream_id, self.decode(&whole), false)
                }
                other => Out::Frame(other),
            };
            frames.push(out);
        }
        frames
    }

    fn decode(&mut self, block: &Bytes) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        self.decoder
            .decode(block, usize::MAX, |f: Field| {
                fields.push((
                    String::from_utf8_lossy(&f.name).into_owned(),
                    String::from_utf8_lossy(&f.value).into_owned(),
                ))
            })
            .unwrap();
        fields
    }
}

/// A frame the engine wrote, header blocks decoded.
#[derive(Debug, PartialEq)]
enum Out {
    Headers(u32, Vec<(String, String)>, bool),
    Frame(Frame),
}

fn goaway_code(frames: &[Out]) -> Option<ErrorCode> {
    frames.iter().find_map(|f| match f {
        Out::Frame(Frame::GoAway(g)) => Some(g.code),
        _ => None,
    })
}

fn resets(frames: &[Out]) -> Vec<(u32, ErrorCode)> {
    frames
        .iter()
        .filter_map(|f| match f {
            Out::Frame(Frame::RstStream(r)) => Some((r.stream_id, r.code)),
            _ => None,
        })
        .collect()
}

fn window_updates(frames: &[Out]) -> Vec<(u32, u32)> {
    frames
        .iter()
        .filter_map(|f| match f {
            Out::Frame(Frame::WindowUpdate(w)) => Some((w.stream_id, w.increment)),
            _ => None,
        })
        .collect()
}

fn events(conn: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| conn.next_event()).collect()
}

const GET: &[(&str, &str)] =
    &[(":method", "GET"), (":scheme", "https"), (":path", "/"), (":authority", "a.test")];
const POST: &[(&str, &str)] =
    &[(":method", "POST"), (":scheme", "https"), (":path", "/up"), (":authority", "a.test")];

fn field(name: &'static str, value: &'static str) -> Field {
    Field {
        name: Bytes::from_static(name.as_bytes()),
        value: Bytes::from_static(value.as_bytes()),
        sensitive: false,
    }
}

/// A server engine past the handshake: preface and SETTINGS exchanged, output read.
fn server_with(config: Config) -> (Connection, Peer) {
    let mut conn = Connection::server(config);
    let mut peer = Peer::new();
    peer.preface().settings(frame::Settings::default()).settings_ack().send(&mut conn).unwrap();
    peer.read(&mut conn);
    assert_eq!(events(&mut conn), vec![Event::Ready]);
    (conn, peer)
}

fn server() -> (Connection, Peer) {
    server_with(Config::default())
}

// ---- Section 3.4: the preface and the first SETTINGS -------------------------------

#[test]
fn the_server_sends_its_settings_and_acknowledges_the_clients() {
    let config = Config { max_concurrent_streams: 7, ..Config::default() };
    let mut conn = Connection::server(config);
    let mut peer = Peer::new();
    let first = peer.read(&mut conn);
    let Out::Frame(Frame::Settings(ours)) = &first[0] else { panic!("{first:?}") };
    assert_eq!(ours.max_concurrent_streams, Some(7));
    assert_eq!(ours.enable_push, None, "a server does not send ENABLE_PUSH");
    assert!(matches!(first[1], Out::Frame(Frame::WindowUpdate(ref w)) if w.stream_id == 0));
    // The preface may come in pieces.
    // What is not a whole frame (or preface) stays in the buffer for the next read.
    let mut wire = BytesMut::from(&PREFACE[..10]);
    conn.receive(&mut wire).unwrap();
    assert_eq!(wire.len(), 10);
    wire.extend_from_slice(&PREFACE[10..]);
    frame::write_settings(&mut wire, &frame::Settings::default()).unwrap();
    conn.receive(&mut wire).unwrap();
    assert!(wire.is_empty());
    let out = peer.read(&mut conn);
    assert_eq!(out, vec![Out::Frame(Frame::SettingsAck)]);
}

#[test]
fn a_wrong_preface_is_a_protocol_error() {
    let mut conn = Connection::server(Config::default());
    let mut wire = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..]);
    assert_eq!(conn.receive(&mut wire), Err(ErrorCode::ProtocolError));
    assert_eq!(goaway_code(&Peer::new().read(&mut conn)), Some(ErrorCode::ProtocolError));
    assert!(conn.is_closed());
}

#[test]
fn a_first_frame_other_than_settings_is_a_protocol_error() {
    let mut conn = Connection::server(Config::default());
    let mut peer = Peer::new();
    peer.read(&mut conn);
    assert_eq!(peer.preface().ping([0; 8]).send(&mut conn), Err(ErrorCode::ProtocolError));
}

#[test]
fn a_first_frame_other_than_settings_is_a_protocol_error_whatever_its_length() {
    // Section 3.4: a server that answers in HTTP/1.1 sent no preface; its first bytes,
    // read as a frame header, announce a frame far past our limit, yet the fault is the
    // preface, not the size.
    let mut conn = Connection::client(Config::default());
    let mut wire = BytesMut::from(&b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"[..]);
    assert_eq!(conn.receive(&mut wire), Err(ErrorCode::ProtocolError));
    assert_eq!(goaway_code(&Peer::new().read(&mut conn)), Some(ErrorCode::ProtocolError));
    // The same after a client's preface: a PING announcing 2^24 - 1 bytes.
    let mut conn = Connection::server(Config::default());
    let mut peer = Peer::new();
    peer.read(&mut conn);
    peer.preface().raw(frame::FrameType::Ping, 0, 0, &[]);
    peer.wire[PREFACE.len()..PREFACE.len() + 3].copy_from_slice(&[0xff, 0xff, 0xff]);
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::ProtocolError));
}

#[test]
fn a_settings_ack_is_not_a_preface() {
    // Section 3.4: the preface is the peer's own SETTINGS; an ACK in its place is not
    // one, even with the SETTINGS right after it.
    let mut conn = Connection::client(Config::default());
    let mut peer = Peer::new();
    peer.read(&mut conn);
    peer.settings_ack().settings(frame::Settings::default());
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::ProtocolError));
    let mut conn = Connection::server(Config::default());
    let mut peer = Peer::new();
    peer.read(&mut conn);
    peer.preface().settings_ack().settings(frame::Settings::default());
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::ProtocolError));
}

// ---- A request and its answer ------------------------------------------------------

#[test]
fn a_request_is_told_and_its_answer_written() {
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false).data(1, b"hello", true).send(&mut conn).unwrap();
    let got = events(&mut conn);
    let Event::Head { stream: 1, head, end_stream: false } = &got[0] else { panic!("{got:?}") };
    assert_eq!(head.pseudo.path.as_deref(), Some(&b"/up"[..]));
    assert_eq!(
        got[1],
        Event::Data { stream: 1, data: Bytes::from_static(b"hello"), end_stream: true }
    );
    conn.release(1, 5);
    conn.send_head(1, &[field(":status", "200")], false).unwrap();
    conn.send_data(1, Bytes::from_static(b"world"), true).unwrap();
    let out = peer.read(&mut conn);
    assert_eq!(out[0], Out::Headers(1, vec![(":status".into(), "200".into())], false));
    let Out::Frame(Frame::Data(d)) = &out[1] else { panic!("{out:?}") };
    assert_eq!((d.stream_id, &d.data[..], d.end_stream), (1, &b"world"[..], true));
    assert_eq!(conn.active_streams(), 0, "both ends ended: the stream is closed");
}

/// Section 5.1, "closed": any frame but PRIORITY after receiving RST_STREAM is a
/// stream error STREAM_CLOSED, not a connection error.
#[test]
fn data_after_the_peers_reset_is_a_stream_error() {
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false).rst(1, ErrorCode::Cancel).data(1, b"late", true);
    peer.send(&mut conn).unwrap();
    let out = peer.read(&mut conn);
    assert_eq!(resets(&out), [(1, ErrorCode::StreamClosed)]);
    assert_eq!(goaway_code(&out), None, "{out:?}");
}

/// RFC 9113 section 8.1: a server may answer before the request is whole, then reset
/// the stream with NO_ERROR to stop the rest; an answer given up is a CANCEL. What the
/// application had not released goes back to the connection either way.
#[test]
fn a_finished_stream_is_reset_as_its_answer_stands() {
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false).data(1, b"part", false).send(&mut conn).unwrap();
    peer.headers(3, POST, false).send(&mut conn).unwrap();
    events(&mut conn);
    peer.read(&mut conn);
    conn.send_head(1, &[field(":status", "200")], false).unwrap();
    conn.send_data(1, Bytes::from_static(b"whole"), true).unwrap();
    conn.finish(1);
    conn.finish(3);
    let out = peer.read(&mut conn);
    let data = out.iter().position(|f| matches!(f, Out::Frame(Frame::Data(d)) if d.end_stream));
    let reset =
        out.iter().position(|f| matches!(f, Out::Frame(Frame::RstStream(r)) if r.stream_id == 1));
    assert!(data < reset && data.is_some(), "the answer goes out whole before the reset: {out:?}");
    assert_eq!(resets(&out), [(3, ErrorCode::Cancel), (1, ErrorCode::NoError)]);
    assert_eq!(conn.recv_window.flush(), Some(4), "the unreleased 4 bytes are the peer's again");
    assert_eq!(conn.active_streams(), 0);
}

#[test]
fn trailers_go_after_the_data_and_end_the_stream() {
    let (mut conn, mut peer) = server();
    peer.headers(1, GET, true).send(&mut conn).unwrap();
    events(&mut conn);
    conn.send_head(1, &[field(":status", "200")], false).unwrap();
    conn.send_data(1, Bytes::from_static(b"x"), false).unwrap();
    conn.send_trailers(1, vec![field("grpc-status", "0")]).unwrap();
    let out = peer.read(&mut conn);
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[2], Out::Headers(1, vec![("grpc-status".into(), "0".into())], true));
    assert_eq!(conn.active_streams(), 0);
}

// ---- Section 5.1 and 5.1.1: stream states and identifiers --------------------------

#[test]
fn a_stream_opened_with_an_even_id_is_a_protocol_error() {
    let (mut conn, mut peer) = server();
    assert_eq!(peer.headers(2, GET, true).send(&mut conn), Err(ErrorCode::ProtocolError));
    assert_eq!(goaway_code(&peer.read(&mut conn)), Some(ErrorCode::ProtocolError));
}

#[test]
fn a_stream_id_below_an_earlier_one_is_a_protocol_error() {
    let (mut conn, mut peer) = server();
    peer.headers(5, GET, false).send(&mut conn).unwrap();
    assert_eq!(peer.headers(3, GET, true).send(&mut conn), Err(ErrorCode::ProtocolError));
}

#[test]
fn data_or_rst_stream_on_an_idle_stream_is_a_protocol_error() {
    let (mut conn, mut peer) = server();
    assert_eq!(peer.data(1, b"x", false).send(&mut conn), Err(ErrorCode::ProtocolError));
    let (mut conn, mut peer) = server();
    assert_eq!(peer.rst(1, ErrorCode::Cancel).send(&mut conn), Err(ErrorCode::ProtocolError));
    let (mut conn, mut peer) = server();
    assert_eq!(peer.window_update(3, 1).send(&mut conn), Err(ErrorCode::ProtocolError));
}

#[test]
fn data_after_the_clients_end_stream_is_stream_closed_and_the_connection_goes_on() {
    let (mut conn, mut peer) = server();
    peer.headers(1, GET, true).data(1, b"late", false).send(&mut conn).unwrap();
    let out = peer.read(&mut conn);
    assert_eq!(resets(&out), vec![(1, ErrorCode::StreamClosed)]);
    peer.headers(3, GET, true).send(&mut conn).unwrap();
    assert!(events(&mut conn).iter().any(|e| matches!(e, Event::Head { stream: 3, .. })));
}

#[test]
fn frames_crossing_our_reset_are_ignored() {
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false).send(&mut conn).unwrap();
    events(&mut conn);
    conn.reset(1, ErrorCode::Cancel);
    assert_eq!(resets(&peer.read(&mut conn)), vec![(1, ErrorCode::Cancel)]);
    peer.data(1, b"in flight", false).window_update(1, 10).send(&mut conn).unwrap();
    assert!(resets(&peer.read(&mut conn)).is_empty(), "no second reset");
    assert!(events(&mut conn).is_empty(), "nothing to tell: the application reset it");
}

#[test]
fn a_reset_from_the_client_is_told_and_what_was_queued_dropped() {
    let (mut conn, mut peer) = server();
    peer.headers(1, GET, true).send(&mut conn).unwrap();
    events(&mut conn);
    conn.send_head(1, &[field(":status", "200")], false).unwrap();
    peer.read(&mut conn);
    peer.rst(1, ErrorCode::Cancel).send(&mut conn).unwrap();
    assert_eq!(
        events(&mut conn),
        vec![Event::Reset { stream: 1, code: ErrorCode::Cancel, by_peer: true }]
    );
    assert_eq!(conn.send_data(1, Bytes::from_static(b"x"), true), Err(SendError::NoStream));
    assert_eq!(conn.active_streams(), 0);
}

// ---- Section 5.1.2: concurrency ------------------------------------------------------

#[test]
fn streams_over_the_limit_are_refused_and_hpack_stays_in_step() {
    let (mut conn, mut peer) =
        server_with(Config { max_concurrent_streams: 1, ..Config::default() });
    let custom = [GET, &[("x-seen", "one")]].concat();
    peer.headers(1, &custom, false).headers(3, &custom, true).send(&mut conn).unwrap();
    assert_eq!(resets(&peer.read(&mut conn)), vec![(3, ErrorCode::RefusedStream)]);
    // Stream 1 ends; the next stream's fields refer to the table entries stream 3 added.
    peer.data(1, b"", true).send(&mut conn).unwrap();
    conn.send_head(1, &[field(":status", "204")], true).unwrap();
    peer.headers(5, &custom, true).send(&mut conn).unwrap();
    let got = events(&mut conn);
    let head = got.iter().find_map(|e| match e {
        Event::Head { stream: 5, head, .. } => Some(head),
        _ => None,
    });
    assert_eq!(head.unwrap().fields, vec![field("x-seen", "one")]);
}

#[test]
fn streams_refused_before_the_client_acknowledged_our_settings_do_not_end_the_connection() {
    // A client may open streams before our SETTINGS reach it (sections 3.4 and 6.5.3):
    // those past our limit are refused, but they are not its errors, and a burst of
    // them must not end the connection (the h2 crate opens every stream it is asked for
    // until the server's SETTINGS come).
    let mut conn = Connection::server(Config::default());
    let mut peer = Peer::new();
    peer.preface().settings(frame::Settings::default());
    let mut id = 1;
    for _ in 0..500 {
        peer.headers(id, GET, true);
        id += 2;
    }
    peer.send(&mut conn).unwrap();
    let out = peer.read(&mut conn);
    let refused = resets(&out);
    assert_eq!(refused.len(), 400);
    assert!(refused.iter().all(|&(_, code)| code == ErrorCode::RefusedStream));
    assert_eq!(goaway_code(&out), None);
    // Once it acknowledged them it knows the limit: streams past it are its errors
    // again, and a flood of them is cut off.
    peer.settings_ack();
    for _ in 0..300 {
        peer.headers(id, GET, true);
        id += 2;
    }
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::EnhanceYourCalm));
}

#[test]
fn refusals_before_the_client_acknowledged_our_settings_have_a_bound_of_their_own() {
    let limits = Limits { max_early_refusals: 10, ..Limits::default() };
    let config = Config { max_concurrent_streams: 1, limits, ..Config::default() };
    let mut conn = Connection::server(config);
    let mut peer = Peer::new();
    peer.preface().settings(frame::Settings::default());
    for id in (1..=23).step_by(2) {
        peer.headers(id, GET, true);
    }
    // Stream 1 is taken, 3 to 21 are the ten refusals allowed, 23 is one too many.
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::EnhanceYourCalm));
    assert_eq!(resets(&peer.read(&mut conn)).len(), 10);
}

// ---- Section 6.10 and 4.3: header blocks ---------------------------------------------

#[test]
fn a_header_block_in_continuations_is_one_request() {
    let (mut conn, mut peer) = server();
    let block = peer.block(GET);
    let (a, b) = block.split_at(3);
    peer.headers_open(1, a, true)
        .continuation(1, &[], false)
        .continuation(1, b, true)
        .send(&mut conn)
        .unwrap();
    assert!(matches!(events(&mut conn)[..], [Event::Head { stream: 1, end_stream: true, .. }]));
}

#[test]
fn another_frame_inside_a_header_block_is_a_protocol_error() {
    let (mut conn, mut peer) = server();
    let block = peer.block(GET);
    peer.headers_open(1, &block, true).ping([1; 8]);
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::ProtocolError));
    let (mut conn, mut peer) = server();
    let block = peer.block(GET);
    peer.headers_open(1, &block, true).continuation(3, &[], true);
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::ProtocolError));
    let (mut conn, mut peer) = server();
    assert_eq!(peer.continuation(1, &[], true).send(&mut conn), Err(ErrorCode::ProtocolError));
}

#[test]
fn a_continuation_flood_is_cut_off() {
    let (mut conn, mut peer) = server();
    let block = peer.block(GET);
    peer.headers_open(1, &block, true);
    for _ in 0..1_000 {
        peer.continuation(1, &[], false);
    }
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::EnhanceYourCalm));
    assert!(events(&mut conn).is_empty(), "no request from an unfinished block");
}

#[test]
fn a_block_hpack_cannot_decode_is_a_compression_error() {
    let (mut conn, mut peer) = server();
    // Indexed field 70: past the static table, and the dynamic table is empty.
    peer.raw(frame::FrameType::Headers, frame::END_HEADERS | frame::END_STREAM, 1, &[0x80 | 70]);
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::CompressionError));
}

#[test]
fn a_field_section_over_the_list_limit_is_told_as_too_large() {
    let (mut conn, mut peer) =
        server_with(Config { max_header_list_size: 200, ..Config::default() });
    let big = "v".repeat(300);
    let fields = [GET, &[("x-big", big.as_str())]].concat();
    peer.headers(1, &fields, true).send(&mut conn).unwrap();
    assert_eq!(events(&mut conn), vec![Event::TooLarge { stream: 1, end_stream: true }]);
    conn.send_head(1, &[field(":status", "431")], true).unwrap();
    assert_eq!(peer.read(&mut conn).len(), 1);
}

#[test]
fn a_frame_above_our_max_frame_size_is_a_frame_size_error() {
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false).data(1, &vec![0; 16_385], false);
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::FrameSizeError));
}

// ---- Section 8: malformed messages ----------------------------------------------------

#[test]
fn malformed_requests_are_reset_and_the_connection_goes_on() {
    let (mut conn, mut peer) = server();
    let upper = [GET, &[("X-Upper", "1")]].concat();
    let te = [GET, &[("te", "gzip")]].concat();
    peer.headers(1, &upper, true).headers(3, &te, true).headers(5, &GET[1..], true);
    peer.headers(7, GET, true).send(&mut conn).unwrap();
    let out = peer.read(&mut conn);
    let protocol = ErrorCode::ProtocolError;
    assert_eq!(resets(&out), vec![(1, protocol), (3, protocol), (5, protocol)]);
    let heads: Vec<u32> = events(&mut conn)
        .iter()
        .filter_map(|e| match e {
            Event::Head { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(heads, vec![7]);
}

#[test]
fn data_that_contradicts_content_length_is_malformed() {
    let (mut conn, mut peer) = server();
    let declared = [POST, &[("content-length", "3")]].concat();
    peer.headers(1, &declared, false).data(1, b"four", true);
    peer.headers(3, &declared, false).data(3, b"tw", true);
    peer.headers(5, &declared, false).data(5, b"one", true).send(&mut conn).unwrap();
    let out = peer.read(&mut conn);
    let protocol = ErrorCode::ProtocolError;
    assert_eq!(resets(&out), vec![(1, protocol), (3, protocol)]);
}

#[test]
fn trailers_must_end_the_stream() {
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false).headers(1, &[("x-t", "1")], false).send(&mut conn).unwrap();
    assert_eq!(resets(&peer.read(&mut conn)), vec![(1, ErrorCode::ProtocolError)]);
    peer.headers(3, POST, false).headers(3, &[("x-t", "1")], true).send(&mut conn).unwrap();
    let got = events(&mut conn);
    assert!(
        got.contains(&Event::Trailers { stream: 3, fields: vec![field("x-t", "1")] }),
        "{got:?}"
    );
}

// ---- Section 5.2 and 6.9: flow control -------------------------------------------------

#[test]
fn data_past_the_streams_window_is_a_stream_flow_control_error() {
    let (mut conn, mut peer) = server_with(Config { stream_window: 10, ..Config::default() });
    peer.headers(1, POST, false).data(1, b"0123456789", false).data(1, b"!", false);
    peer.send(&mut conn).unwrap();
    assert_eq!(resets(&peer.read(&mut conn)), vec![(1, ErrorCode::FlowControlError)]);
}

#[test]
fn data_past_the_connections_window_is_a_connection_flow_control_error() {
    let config = Config { stream_window: 100_000, connection_window: 65_535, ..Config::default() };
    let (mut conn, mut peer) = server_with(config);
    peer.headers(1, POST, false);
    for _ in 0..4 {
        peer.data(1, &[0; 16_384], false);
    }
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::FlowControlError));
}

#[test]
fn released_data_opens_the_windows_once_half_is_owed() {
    let config = Config { stream_window: 100, connection_window: 65_535, ..Config::default() };
    let (mut conn, mut peer) = server_with(config);
    peer.headers(1, POST, false).data(1, &[1; 60], false).send(&mut conn).unwrap();
    events(&mut conn);
    conn.release(1, 40);
    assert!(peer.read(&mut conn).is_empty(), "40 of 100 owed: no update yet");
    conn.release(1, 20);
    let updates = window_updates(&peer.read(&mut conn));
    assert_eq!(updates, vec![(1, 60)]);
    // The peer may now send 100 again.
    peer.data(1, &[1; 100], false).send(&mut conn).unwrap();
}

#[test]
fn data_waits_for_the_peers_window_and_goes_when_it_opens() {
    let (mut conn, mut peer) = server();
    peer.settings(frame::Settings { initial_window_size: Some(4), ..Default::default() });
    peer.headers(1, GET, true).send(&mut conn).unwrap();
    events(&mut conn);
    conn.send_head(1, &[field(":status", "200")], false).unwrap();
    assert_eq!(conn.capacity(1), 4 + Config::default().send_buffer);
    conn.send_data(1, Bytes::from_static(b"abcdefgh"), true).unwrap();
    let data_of = |out: &[Out]| -> Vec<u8> {
        out.iter()
            .filter_map(|f| match f {
                Out::Frame(Frame::Data(d)) => Some(d.data.to_vec()),
                _ => None,
            })
            .flatten()
            .collect()
    };
    assert_eq!(data_of(&peer.read(&mut conn)), b"abcd");
    peer.window_update(1, 4).send(&mut conn).unwrap();
    assert_eq!(data_of(&peer.read(&mut conn)), b"efgh");
    assert_eq!(conn.active_streams(), 0);
}

#[test]
fn what_a_stream_may_queue_is_bounded_whatever_window_the_peer_grants() {
    let (mut conn, mut peer) = server();
    let huge =
        frame::Settings { initial_window_size: Some(frame::MAX_WINDOW_SIZE), ..Default::default() };
    peer.settings(huge).headers(1, GET, true).send(&mut conn).unwrap();
    events(&mut conn);
    conn.send_head(1, &[field(":status", "200")], false).unwrap();
    let max = Config::default().max_queued;
    assert_eq!(conn.capacity(1), max);
    conn.send_data(1, Bytes::from(vec![0; max]), false).unwrap();
    assert_eq!(conn.capacity(1), 0, "the peer's 2 GiB window is not ours to fill");
    assert_eq!(conn.send_data(1, Bytes::from_static(b"x"), false), Err(SendError::Full));
    // Writing out what the connection's window allows frees room, and says so once.
    peer.read(&mut conn);
    let writable =
        events(&mut conn).iter().filter(|e| **e == Event::Writable { stream: 1 }).count();
    assert_eq!(writable, 1);
    assert!(conn.capacity(1) > 0);
}

#[test]
fn a_window_pushed_past_its_maximum_is_a_flow_control_error() {
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false).window_update(1, frame::MAX_WINDOW_SIZE).send(&mut conn).unwrap();
    assert_eq!(resets(&peer.read(&mut conn)), vec![(1, ErrorCode::FlowControlError)]);
    assert_eq!(
        peer.window_update(0, frame::MAX_WINDOW_SIZE).send(&mut conn),
        Err(ErrorCode::FlowControlError)
    );
}

#[test]
fn a_new_initial_window_moves_open_streams_windows() {
    let (mut conn, mut peer) = server();
    peer.headers(1, GET, true).send(&mut conn).unwrap();
    events(&mut conn);
    peer.settings(frame::Settings { initial_window_size: Some(0), ..Default::default() })
        .send(&mut conn)
        .unwrap();
    conn.send_head(1, &[field(":status", "200")], false).unwrap();
    conn.send_data(1, Bytes::from_static(b"x"), true).unwrap();
    let out = peer.read(&mut conn);
    assert!(!out.iter().any(|f| matches!(f, Out::Frame(Frame::Data(_)))), "window 0: {out:?}");
    peer.settings(frame::Settings { initial_window_size: Some(1), ..Default::default() })
        .send(&mut conn)
        .unwrap();
    assert!(peer.read(&mut conn).iter().any(|f| matches!(f, Out::Frame(Frame::Data(_)))));
}

// ---- Section 6.7, 6.5: PING and SETTINGS, and their floods -----------------------------

#[test]
fn a_ping_is_answered_with_its_data_and_a_flood_is_cut_off() {
    let (mut conn, mut peer) = server();
    peer.ping(*b"12345678").send(&mut conn).unwrap();
    let out = peer.read(&mut conn);
    let Out::Frame(Frame::Ping(p)) = &out[0] else { panic!("{out:?}") };
    assert!(p.ack && &p.opaque_data == b"12345678");
    for _ in 0..1_000 {
        peer.ping([0; 8]);
    }
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::EnhanceYourCalm));
}

#[test]
fn a_settings_flood_is_cut_off() {
    let (mut conn, mut peer) = server();
    for _ in 0..1_000 {
        peer.settings(frame::Settings::default());
    }
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::EnhanceYourCalm));
}

#[test]
fn a_rapid_reset_flood_is_cut_off() {
    let (mut conn, mut peer) = server();
    let mut id = 1;
    for _ in 0..1_000 {
        peer.headers(id, GET, true).rst(id, ErrorCode::Cancel);
        id += 2;
    }
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::EnhanceYourCalm));
}

#[test]
fn a_flood_of_empty_data_frames_is_cut_off() {
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false);
    for _ in 0..1_000 {
        peer.data(1, b"", false);
    }
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::EnhanceYourCalm));
}

#[test]
fn a_push_promise_to_a_server_is_a_protocol_error() {
    let (mut conn, mut peer) = server();
    peer.headers(1, GET, false).raw(
        frame::FrameType::PushPromise,
        frame::END_HEADERS,
        1,
        &[0, 0, 0, 2],
    );
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::ProtocolError));
}

// ---- Section 6.8: GOAWAY ---------------------------------------------------------------

#[test]
fn a_graceful_goaway_names_the_last_stream_and_later_ones_are_not_processed() {
    let (mut conn, mut peer) = server();
    peer.headers(1, GET, true).send(&mut conn).unwrap();
    conn.go_away();
    let out = peer.read(&mut conn);
    let Some(Out::Frame(Frame::GoAway(g))) = out.last() else { panic!("{out:?}") };
    assert_eq!((g.last_stream_id, g.code), (1, ErrorCode::NoError));
    peer.headers(3, GET, true).send(&mut conn).unwrap();
    let heads = events(&mut conn).iter().filter(|e| matches!(e, Event::Head { .. })).count();
    assert_eq!(heads, 1, "stream 3 came after the GOAWAY");
    assert!(!conn.is_closed(), "stream 1 is still to be answered");
    conn.send_head(1, &[field(":status", "200")], true).unwrap();
    assert!(conn.is_closed());
}

// ---- Client side -------------------------------------------------------------------------

/// A client engine whose peer (a server) sent `settings`.
fn client_with(settings: frame::Settings) -> (Connection, Peer) {
    let mut conn = Connection::client(Config::default());
    let mut peer = Peer::new();
    let first = peer.read(&mut conn);
    let Out::Frame(Frame::Settings(ours)) = &first[0] else { panic!("{first:?}") };
    assert_eq!(ours.enable_push, Some(false), "a client turns push off");
    peer.settings(settings).send(&mut conn).unwrap();
    assert_eq!(events(&mut conn), vec![Event::Ready]);
    peer.read(&mut conn);
    (conn, peer)
}

fn request(pairs: &[(&'static str, &'static str)]) -> Vec<Field> {
    pairs.iter().map(|(n, v)| field(n, v)).collect()
}

#[test]
fn a_client_opens_odd_streams_and_reads_informational_then_final_heads() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    let id = conn.open(&request(GET), true, false).unwrap();
    let second = conn.open(&request(GET), true, false).unwrap();
    assert_eq!((id, second), (1, 3));
    let out = peer.read(&mut conn);
    assert!(matches!(&out[0], Out::Headers(1, fields, true) if fields[0].1 == "GET"));
    peer.headers(1, &[(":status", "103"), ("link", "</a>")], false);
    peer.headers(1, &[(":status", "200"), ("content-length", "2")], false).data(1, b"ok", true);
    peer.send(&mut conn).unwrap();
    let got = events(&mut conn);
    let statuses: Vec<u16> = got
        .iter()
        .filter_map(|e| match e {
            Event::Head { head, .. } => head.pseudo.status,
            _ => None,
        })
        .collect();
    assert_eq!(statuses, vec![103, 200]);
    assert_eq!(conn.active_streams(), 1);
}

/// Section 6.9.1: while the connection's window is short, each WINDOW_UPDATE on it goes
/// to the streams held back longest: none starves behind the others.
/// The DATA frames in `out`: (stream, bytes).
fn data_frames(out: &[Out]) -> Vec<(u32, usize)> {
    out.iter()
        .filter_map(|f| match f {
            Out::Frame(Frame::Data(d)) => Some((d.stream_id, d.data.len())),
            _ => None,
        })
        .collect()
}

/// The streams in the order their runs of DATA frames came (a stream served in two
/// separate runs appears twice).
fn runs(served: &[(u32, usize)]) -> Vec<u32> {
    let mut runs: Vec<u32> = served.iter().map(|&(id, _)| id).collect();
    runs.dedup();
    runs
}

#[test]
fn streams_held_by_the_connections_window_take_turns_as_it_opens() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    let ids: Vec<u32> = (0..4).map(|_| conn.open(&request(POST), false, false).unwrap()).collect();
    for &id in &ids {
        conn.send_data(id, Bytes::from(vec![b'x'; 60_000]), true).unwrap();
    }
    // The first 65,535 bytes of the connection's window: stream 1's turn, then the
    // start of stream 3's.
    let mut served = data_frames(&peer.read(&mut conn));
    // Then each update of a frame's worth goes to the turn under way, and the streams
    // held take theirs in the order they were held.
    for _ in 0..11 {
        peer.window_update(0, 16_384).send(&mut conn).unwrap();
        served.extend(data_frames(&peer.read(&mut conn)));
    }
    assert_eq!(runs(&served), ids, "each stream's body in one turn, in order: {served:?}");
    let sent: usize = served.iter().map(|&(_, n)| n).sum();
    assert_eq!(sent, 4 * 60_000);
}

#[test]
fn streams_held_by_the_connections_window_go_before_streams_that_queued_later() {
    let big = frame::Settings { initial_window_size: Some(1 << 20), ..Default::default() };
    let (mut conn, mut peer) = client_with(big);
    let early = conn.open(&request(POST), false, false).unwrap();
    conn.send_data(early, Bytes::from(vec![b'x'; 100_000]), true).unwrap();
    let held = conn.open(&request(POST), false, false).unwrap();
    conn.send_data(held, Bytes::from(vec![b'x'; 10_000]), true).unwrap();
    // The window (65,535) goes to `early`; `held` waits for it.
    let first = data_frames(&peer.read(&mut conn));
    assert!(first.iter().all(|&(id, _)| id == early), "{first:?}");
    let late = conn.open(&request(POST), false, false).unwrap();
    conn.send_data(late, Bytes::from(vec![b'x'; 10_000]), true).unwrap();
    peer.read(&mut conn);
    peer.window_update(0, 1 << 20).send(&mut conn).unwrap();
    let served = data_frames(&peer.read(&mut conn));
    assert_eq!(runs(&served), [early, held, late], "{served:?}");
}

#[test]
fn a_stream_that_keeps_queueing_yields_the_window_after_its_turn() {
    let big = frame::Settings { initial_window_size: Some(1 << 20), ..Default::default() };
    let (mut conn, mut peer) = client_with(big);
    let hog = conn.open(&request(POST), false, false).unwrap();
    let room = conn.capacity(hog);
    conn.send_data(hog, Bytes::from(vec![b'x'; room]), false).unwrap();
    let other = conn.open(&request(POST), false, false).unwrap();
    conn.send_data(other, Bytes::from(vec![b'y'; 1_000]), true).unwrap();
    let mut served = data_frames(&peer.read(&mut conn));
    // The hog tops its queue up whenever there is room, as a busy upload does.
    for _ in 0..8 {
        let room = conn.capacity(hog);
        if room > 0 {
            conn.send_data(hog, Bytes::from(vec![b'x'; room]), false).unwrap();
        }
        peer.window_update(0, 65_536).send(&mut conn).unwrap();
        served.extend(data_frames(&peer.read(&mut conn)));
    }
    let before_other: usize =
        served.iter().take_while(|&&(id, _)| id == hog).map(|&(_, n)| n).sum();
    assert!(served.iter().any(|&(id, _)| id == other), "the other stream starved: {served:?}");
    assert!(before_other <= 256 * 1024, "the hog's turn ran to {before_other} bytes");
}

/// Section 6.7: our PING goes out, and its ACK (same payload) says the peer is alive.
#[test]
fn a_ping_is_answered_for_when_its_ack_comes() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    conn.ping();
    let out = peer.read(&mut conn);
    let Out::Frame(Frame::Ping(ping)) = &out[0] else { panic!("{out:?}") };
    assert!(!ping.ack);
    assert_eq!(conn.unanswered_pings(), 1);
    frame::write_ping_ack(&mut peer.wire, ping.opaque_data);
    peer.send(&mut conn).unwrap();
    assert_eq!(conn.unanswered_pings(), 0);
}

/// Section 6.8: streams above a GOAWAY's last come back refused, and the code tells a
/// graceful GOAWAY from one for an error (which a proxy may not count as refusal).
#[test]
fn a_goaway_refuses_the_streams_above_its_last_and_its_code_is_kept() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    conn.open(&request(GET), true, false).unwrap();
    conn.open(&request(GET), true, false).unwrap();
    assert!(conn.is_open_stream(3));
    peer.go_away(1, ErrorCode::InternalError).send(&mut conn).unwrap();
    let got = events(&mut conn);
    assert!(got.contains(&Event::Reset {
        stream: 3,
        code: ErrorCode::RefusedStream,
        by_peer: true
    }));
    assert_eq!(conn.peer_goaway_code(), Some(ErrorCode::InternalError));
    assert!(conn.peer_went_away() && !conn.can_open());
    assert!(conn.is_open_stream(1) && !conn.is_open_stream(3));
}

#[test]
fn a_response_to_head_may_declare_a_length_it_does_not_send() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    let head = [(":method", "HEAD"), (":scheme", "https"), (":path", "/"), (":authority", "a")];
    conn.open(&request(&head), true, true).unwrap();
    peer.headers(1, &[(":status", "200"), ("content-length", "1000")], true)
        .send(&mut conn)
        .unwrap();
    assert!(resets(&peer.read(&mut conn)).is_empty());
}

#[test]
fn a_server_that_turns_push_on_is_a_protocol_error() {
    let mut conn = Connection::client(Config::default());
    let mut peer = Peer::new();
    peer.settings(frame::Settings { enable_push: Some(true), ..Default::default() });
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::ProtocolError));
}

#[test]
fn streams_above_a_goaways_last_are_refused_for_another_try() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    for _ in 0..3 {
        conn.open(&request(GET), true, false).unwrap();
    }
    peer.go_away(1, ErrorCode::NoError).send(&mut conn).unwrap();
    let mut refused: Vec<u32> = events(&mut conn)
        .iter()
        .filter_map(|e| match e {
            Event::Reset { stream, code: ErrorCode::RefusedStream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    refused.sort();
    assert_eq!(refused, vec![3, 5]);
    assert_eq!(conn.open(&request(GET), true, false), Err(SendError::Refused));
}

#[test]
fn a_client_opens_no_more_streams_than_the_server_allows() {
    let (mut conn, _peer) =
        client_with(frame::Settings { max_concurrent_streams: Some(2), ..Default::default() });
    conn.open(&request(GET), true, false).unwrap();
    conn.open(&request(GET), true, false).unwrap();
    assert!(!conn.can_open());
    assert_eq!(conn.open(&request(GET), true, false), Err(SendError::Refused));
}

#[test]
fn a_client_opens_at_most_a_hundred_streams_before_the_servers_settings() {
    // Section 6.5.2: the server's limit is unknown until its SETTINGS come, and servers
    // commonly allow 100 (the value the section recommends as a minimum); streams past
    // the limit would only be refused. nghttp2 and Go's client assume 100 too.
    let mut conn = Connection::client(Config::default());
    for _ in 0..100 {
        conn.open(&request(GET), true, false).unwrap();
    }
    assert!(!conn.can_open());
    assert_eq!(conn.open(&request(GET), true, false), Err(SendError::Refused));
    // SETTINGS without SETTINGS_MAX_CONCURRENT_STREAMS: no limit.
    let mut peer = Peer::new();
    peer.read(&mut conn);
    peer.settings(frame::Settings::default()).send(&mut conn).unwrap();
    assert!(conn.can_open());
}

#[test]
fn a_server_stream_the_client_never_opened_is_a_protocol_error() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    assert_eq!(
        peer.headers(2, &[(":status", "200")], true).send(&mut conn),
        Err(ErrorCode::ProtocolError)
    );
}

// ---- More of sections 5, 6 and 8 ---------------------------------------------------------

#[test]
fn headers_on_a_stream_both_sides_ended_is_stream_closed() {
    // Section 5.1, "closed".
    let (mut conn, mut peer) = server();
    peer.headers(1, GET, true).send(&mut conn).unwrap();
    conn.send_head(1, &[field(":status", "204")], true).unwrap();
    peer.read(&mut conn);
    let trailers = [("x-late", "1")];
    assert_eq!(peer.headers(1, &trailers, true).send(&mut conn), Err(ErrorCode::StreamClosed));
}

#[test]
fn a_new_initial_window_that_overflows_an_open_stream_is_a_flow_control_error() {
    // Section 6.9.2: a change that takes a window past 2^31 - 1.
    let (mut conn, mut peer) = server();
    peer.headers(1, GET, true).send(&mut conn).unwrap();
    peer.window_update(1, frame::MAX_WINDOW_SIZE - 65_535).send(&mut conn).unwrap();
    let larger = frame::Settings { initial_window_size: Some(65_536), ..Default::default() };
    assert_eq!(peer.settings(larger).send(&mut conn), Err(ErrorCode::FlowControlError));
}

#[test]
fn padding_counts_against_the_windows_and_is_given_back_at_once() {
    // Section 6.1: the whole payload, padding included, is flow controlled.
    let config = Config { stream_window: 100, connection_window: 65_535, ..Config::default() };
    let (mut conn, mut peer) = server_with(config);
    peer.headers(1, POST, false).send(&mut conn).unwrap();
    // 5 bytes of data behind a pad length of 90: 96 flow-controlled bytes.
    let mut payload = vec![90u8];
    payload.extend_from_slice(b"hello");
    payload.extend_from_slice(&[0; 90]);
    peer.raw(frame::FrameType::Data, frame::PADDED, 1, &payload).send(&mut conn).unwrap();
    let got = events(&mut conn);
    assert!(got.contains(&Event::Data {
        stream: 1,
        data: Bytes::from_static(b"hello"),
        end_stream: false
    }));
    let updates = window_updates(&peer.read(&mut conn));
    assert_eq!(updates, vec![(1, 91)], "the padding, given back on the stream at once");
    // The 5 data bytes are the application's to release; the stream may take 95 more.
    peer.data(1, &[0; 95], false).send(&mut conn).unwrap();
    assert!(resets(&peer.read(&mut conn)).is_empty());
}

#[test]
fn a_header_block_larger_than_any_honest_one_is_cut_off() {
    let (mut conn, mut peer) =
        server_with(Config { max_header_list_size: 1_000, ..Config::default() });
    let block = peer.block(GET);
    peer.headers_open(1, &block, true);
    for _ in 0..3 {
        peer.continuation(1, &[0x40; 16_000], false);
    }
    assert_eq!(peer.send(&mut conn), Err(ErrorCode::EnhanceYourCalm));
}

#[test]
fn trailers_with_a_pseudo_header_are_malformed() {
    // Section 8.1: trailers carry no pseudo-header field.
    let (mut conn, mut peer) = server();
    peer.headers(1, POST, false).headers(1, &[(":path", "/x")], true).send(&mut conn).unwrap();
    assert_eq!(resets(&peer.read(&mut conn)), vec![(1, ErrorCode::ProtocolError)]);
}

#[test]
fn extended_connect_is_a_request_only_where_enabled() {
    // RFC 8441 sections 3 and 4.
    let websocket = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":path", "/chat"),
        (":authority", "a.test"),
    ];
    let (mut conn, mut peer) = server();
    peer.headers(1, &websocket, false).send(&mut conn).unwrap();
    assert_eq!(resets(&peer.read(&mut conn)), vec![(1, ErrorCode::ProtocolError)]);

    let (mut conn, mut peer) = server_with(Config { connect_protocol: true, ..Config::default() });
    peer.headers(1, &websocket, false).send(&mut conn).unwrap();
    let got = events(&mut conn);
    let Some(Event::Head { head, end_stream: false, .. }) = got.first() else { panic!("{got:?}") };
    assert_eq!(head.pseudo.protocol.as_deref(), Some(&b"websocket"[..]));
    // The tunnel's bytes are DATA both ways.
    conn.send_head(1, &[field(":status", "200")], false).unwrap();
    peer.data(1, b"ping", false).send(&mut conn).unwrap();
    conn.send_data(1, Bytes::from_static(b"pong"), false).unwrap();
    assert!(peer
        .read(&mut conn)
        .iter()
        .any(|f| matches!(f, Out::Frame(Frame::Data(d)) if &d.data[..] == b"pong")));
}

#[test]
fn a_server_that_allows_extended_connect_is_known_to_the_client() {
    let (conn, _peer) =
        client_with(frame::Settings { enable_connect_protocol: Some(true), ..Default::default() });
    assert!(conn.peer_allows_connect_protocol());
    let (conn, _peer) = client_with(frame::Settings::default());
    assert!(!conn.peer_allows_connect_protocol());
}

#[test]
fn response_data_before_its_head_is_malformed() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    conn.open(&request(GET), true, false).unwrap();
    peer.data(1, b"early", true).send(&mut conn).unwrap();
    assert_eq!(resets(&peer.read(&mut conn)), vec![(1, ErrorCode::ProtocolError)]);
    assert_eq!(
        events(&mut conn),
        vec![Event::Reset { stream: 1, code: ErrorCode::ProtocolError, by_peer: false }]
    );
}

#[test]
fn an_informational_head_that_ends_the_stream_is_malformed() {
    // Section 8.1.
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    conn.open(&request(GET), true, false).unwrap();
    peer.headers(1, &[(":status", "100")], true).send(&mut conn).unwrap();
    assert_eq!(resets(&peer.read(&mut conn)), vec![(1, ErrorCode::ProtocolError)]);
}

#[test]
fn a_client_connection_closes_once_its_streams_after_a_goaway_are_done() {
    let (mut conn, mut peer) = client_with(frame::Settings::default());
    conn.open(&request(GET), true, false).unwrap();
    peer.go_away(1, ErrorCode::NoError).send(&mut conn).unwrap();
    assert!(!conn.is_closed(), "stream 1 is still to be answered");
    peer.headers(1, &[(":status", "200")], true).send(&mut conn).unwrap();
    assert!(conn.is_closed());
}
