//! holdfast as an HTTP/2 server, against the rules RFC 9113 (sections 3 to 8) and RFC
//! 7541 give a receiver: each test writes frames over TCP to a running holdfast (h2c,
//! prior knowledge) and checks its answer, whichever HTTP/2 implementation serves the
//! client side.
//!
//! Frames are written with holdfast-h2's writers and HPACK encoder, or byte by byte when
//! they must be wrong; what holdfast sends back is decoded with its frame decoder and
//! HPACK decoder ([`Wire`]). Tests are grouped by section, and each name starts with
//! the section it checks (`s6_5_2_...` is RFC 9113 section 6.5.2); the HPACK tests
//! (`s4_3_hpack_...`, RFC 9113 section 4.3) name their RFC 7541 section in their doc.
//!
//! How answers are judged:
//! - A connection error is a GOAWAY with the code the RFC names, then the connection
//!   closed (5.4.1). A close without GOAWAY fails, except where the RFC lets the GOAWAY
//!   be left out (an invalid connection preface, 3.4).
//! - A stream error is a RST_STREAM with the code the RFC names on that stream, after
//!   which the connection must go on (a PING is answered). Section 5.4.1 lets an
//!   endpoint treat any stream error as a connection error; holdfast does not (one bad
//!   stream must not cost a client its other streams), and these tests hold it to that.
//!   Where a section itself names both scopes for a fault (4.2 for an oversized DATA
//!   frame, 5.1 for a frame after END_STREAM), either is accepted and the test says so.
//! - A malformed request (8.1.1) is a RST_STREAM PROTOCOL_ERROR, optionally after a
//!   4xx response (8.1.1 lets a server answer first), and it never reaches the origin.
//! - A well-formed request gets the origin's response through holdfast.

use holdfast_h2::error::ErrorCode;
use holdfast_h2::frame::{self, Frame, Settings, StreamDependency, MAX_WINDOW_SIZE, PREFACE};

use crate::h2::h2c_to_http1;
use crate::support::h2_wire::{
    raw_frame, request, setting, Event, Wire, ACK, ANSWER, CONTINUATION, DATA, END_HEADERS,
    END_STREAM, GOAWAY, HEADERS, PADDED, PING, PRIORITY, PRIORITY_FLAG, PUSH_PROMISE, RST_STREAM,
    SETTINGS, SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE,
    UNKNOWN_TYPE, WINDOW_UPDATE,
};
use crate::support::http2::hpack_int;
use crate::support::{wait_until, Origin, Proxy, DEADLINE};

/// holdfast in front of the test origin, with an h2c listener; `rest` is written at
/// the end of its config (a `[limits]` table).
struct Setup {
    origin: Origin,
    proxy: Proxy,
}

impl Setup {
    async fn start() -> Setup {
        Setup::start_with("").await
    }

    async fn start_with(rest: &str) -> Setup {
        let origin = Origin::start().await;
        let proxy = Proxy::start(h2c_to_http1(&origin, rest)).await;
        Setup { origin, proxy }
    }

    /// A client connection past its start (preface and SETTINGS both ways).
    async fn wire(&self) -> Wire {
        Wire::connect(self.proxy.addr()).await
    }

    /// Opens `stream` with `GET /hold/NAME` (END_STREAM: the stream is half-closed
    /// (remote) at holdfast) and waits until the origin holds it.
    async fn hold(&self, wire: &mut Wire, stream: u32, name: &str) {
        let path = format!("/hold/{name}");
        wire.get(stream, &path).await;
        wait_until(&format!("the origin holds {path}"), DEADLINE, || {
            self.origin.count_path(&path) == 1
        })
        .await;
    }

    /// Sends a well-formed `GET path` on `stream` and checks the origin's 200 comes back
    /// for it.
    async fn assert_served(&self, wire: &mut Wire, stream: u32, path: &str) {
        wire.get(stream, path).await;
        let response = wire.response(stream).await;
        assert_eq!(response.status, 200, "GET {path}: {response:?}");
        assert_eq!(response.field("x-path"), Some(path), "a response for another request");
    }
}

/// The start of a request block from the static table alone: `:method GET`, `:scheme
/// http`, `:path /`, then `:authority holdfast.test` as a literal.
fn static_get_block() -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x84];
    // Literal without indexing, name :authority (static index 1).
    block.push(0x01);
    block.push(13);
    block.extend_from_slice(b"holdfast.test");
    block
}

/// Sends a HEADERS frame (END_HEADERS, END_STREAM) carrying `block` as it is.
async fn send_block(wire: &mut Wire, stream: u32, block: &[u8]) {
    wire.send_frame(HEADERS, END_HEADERS | END_STREAM, stream, block).await;
}

/// Reads until the connection closes; a GOAWAY before the close may be left out, but
/// if one comes it carries `code`, and no response comes.
async fn expect_closed_goaway_optional(wire: &mut Wire, code: ErrorCode, rule: &str) {
    wire.expect_closed(rule).await;
    eprintln!("{rule}: closed after {:?}", wire.seen);
    for event in &wire.seen {
        match event {
            Event::GoAway { code: got, .. } => {
                assert_eq!(*got, code, "{rule}: GOAWAY with the wrong code: {:?}", wire.seen)
            }
            Event::Fields { .. } | Event::Data { .. } => {
                panic!("{rule}: holdfast answered a request: {:?}", wire.seen)
            }
            _ => {}
        }
    }
}

// 3.4: the connection preface.

/// 3.4: the server's connection preface is a SETTINGS frame, its first frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_4_server_preface_is_settings_first() {
    let setup = Setup::start().await;
    // `connect` asserts the first frame is SETTINGS.
    let mut wire = setup.wire().await;
    setup.assert_served(&mut wire, 1, "/preface").await;
}

/// 3.4: an invalid client preface is a connection error PROTOCOL_ERROR; the GOAWAY may
/// be left out, the peer not speaking HTTP/2. holdfast serves HTTP/1.1 on the same
/// port, so it may answer such bytes as HTTP/1.1 (a 400) before closing: what is
/// checked is that the connection closes and no request is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_4_invalid_preface_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = Wire::open(setup.proxy.addr()).await;
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n".to_vec();
    bytes.extend(raw_frame(SETTINGS, 0, 0, &[]));
    bytes.extend(raw_frame(HEADERS, END_HEADERS | END_STREAM, 1, &static_get_block()));
    wire.send(&bytes).await.expect("send");
    expect_closed_goaway_optional(&mut wire, ErrorCode::ProtocolError, "3.4 invalid preface").await;
    assert_eq!(setup.origin.request_count(), 0);
}

/// 3.4: the preface must be followed by SETTINGS; another first frame makes it invalid,
/// a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_4_first_frame_not_settings_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = Wire::open(setup.proxy.addr()).await;
    let mut bytes = PREFACE.to_vec();
    bytes.extend(raw_frame(PING, 0, 0, b"notfirst"));
    wire.send(&bytes).await.expect("send");
    expect_closed_goaway_optional(&mut wire, ErrorCode::ProtocolError, "3.4 PING before SETTINGS")
        .await;
    let answered = wire.seen.iter().any(|e| matches!(e, Event::Ping { ack: true, .. }));
    assert!(!answered, "3.4: holdfast answered a PING sent in place of SETTINGS");
}

// 4.1, 4.2: frame format and size.

/// 4.1: flags a frame type does not define are ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_1_undefined_flags_are_ignored() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(PING, 0xfe, 0, b"flagged!").await;
    wire.until(
        "4.1 PING with flags it does not define",
        |e| matches!(e, Event::Ping { ack: true, payload } if payload == b"flagged!"),
    )
    .await;
    // HEADERS with the flags it does not define (0x2, 0x10, 0x40, 0x80) set.
    let block = wire.block(&request("GET", "/flags"));
    wire.send_frame(HEADERS, END_HEADERS | END_STREAM | 0xd2, 1, &block).await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
}

/// 4.1: the reserved bit of a stream identifier is ignored on receipt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_1_reserved_bit_of_the_stream_id_is_ignored() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let block = wire.block(&request("GET", "/reserved-bit"));
    wire.send_frame(HEADERS, END_HEADERS | END_STREAM, 0x8000_0001, &block).await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.field("x-path"), Some("/reserved-bit"));
}

/// 4.2: holdfast sends no frame larger than our SETTINGS_MAX_FRAME_SIZE (the default,
/// 16,384: the reader refuses anything larger), cutting a large body into frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_frames_from_holdfast_stay_within_our_max_frame_size() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.get(1, "/bytes/100000").await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body.len(), 100_000);
    let frames = wire.seen.iter().filter(|e| matches!(e, Event::Data { stream: 1, .. })).count();
    assert!(frames >= 7, "100,000 bytes in {frames} DATA frames");
}

/// 4.2: a DATA frame larger than SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR; for a
/// DATA frame the section allows a stream or a connection error, and either passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_data_over_max_frame_size_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let max = wire.peer.max_frame_size.unwrap_or(frame::DEFAULT_MAX_FRAME_SIZE);
    wire.headers(1, &request("POST", "/too-large"), false).await;
    let payload = vec![b'x'; max as usize + 1];
    wire.send_frame(DATA, END_STREAM, 1, &payload).await;
    wire.expect_stream_or_connection_error(1, ErrorCode::FrameSizeError, "4.2 DATA").await;
}

/// 4.2: a frame carrying a field block larger than SETTINGS_MAX_FRAME_SIZE is a
/// connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_headers_over_max_frame_size_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let max = wire.peer.max_frame_size.unwrap_or(frame::DEFAULT_MAX_FRAME_SIZE) as usize;
    let mut block = static_get_block();
    // Literal without indexing, new name, raw strings: pad the block past the limit.
    let value = vec![b'v'; max];
    block.push(0x00);
    hpack_int(7, 7, 0, &mut block);
    block.extend_from_slice(b"x-large");
    hpack_int(value.len(), 7, 0, &mut block);
    block.extend_from_slice(&value);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "4.2 HEADERS over the max frame size").await;
    assert_eq!(setup.origin.request_count(), 0);
}

/// 4.2: a SETTINGS frame (stream 0) larger than SETTINGS_MAX_FRAME_SIZE is a
/// connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_settings_over_max_frame_size_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let max = wire.peer.max_frame_size.unwrap_or(frame::DEFAULT_MAX_FRAME_SIZE) as usize;
    // Unknown parameters (ignored if the frame were allowed), one entry past the limit.
    let payload: Vec<u8> = (0..max / 6 + 1).flat_map(|_| setting(0xf0f0, 1)).collect();
    assert!(payload.len() > max);
    wire.send_frame(SETTINGS, 0, 0, &payload).await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "4.2 SETTINGS over the max frame size").await;
}

/// 4.2: a frame too small for the fields its flags announce is a FRAME_SIZE_ERROR, a
/// connection error for a frame carrying a field block (HEADERS with PRIORITY and 3
/// bytes of payload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_headers_too_short_for_its_priority_fields_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 1, &[0, 0, 0]).await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "4.2 HEADERS shorter than its fields").await;
}

// 4.3 and RFC 7541: field blocks and HPACK.

/// RFC 7541 2.3.3: an index past the static and dynamic tables is a decoding error,
/// which RFC 9113 4.3 makes a connection error COMPRESSION_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_index_past_the_tables_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = static_get_block();
    // Indexed field 70: 61 static entries, and the dynamic table is empty.
    hpack_int(70, 7, 0x80, &mut block);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 index past the tables").await;
    assert_eq!(setup.origin.request_count(), 0);
}

/// RFC 7541 6.1: index 0 is a decoding error: COMPRESSION_ERROR (RFC 9113 4.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_index_zero_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = static_get_block();
    block.push(0x80);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 index 0").await;
}

/// RFC 7541 6.3 and 4.2: a dynamic table size update above the SETTINGS_HEADER_TABLE_SIZE
/// we advertised is a decoding error: COMPRESSION_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_size_update_over_the_limit_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let limit = wire.peer.header_table_size.unwrap_or(4096);
    let mut block = Vec::new();
    hpack_int(limit as usize + 1, 5, 0x20, &mut block);
    block.extend(static_get_block());
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 size update over the limit").await;
}

/// RFC 7541 4.2: a dynamic table size update comes at the start of a block; one after
/// a field is a decoding error: COMPRESSION_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_size_update_after_a_field_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = static_get_block();
    hpack_int(0, 5, 0x20, &mut block);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 size update after a field").await;
}

/// RFC 7541 4.2, 6.3: a size update within the limit at the start of a block is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_size_update_within_the_limit_is_accepted() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = Vec::new();
    hpack_int(0, 5, 0x20, &mut block);
    hpack_int(256, 5, 0x20, &mut block);
    block.extend(static_get_block());
    send_block(&mut wire, 1, &block).await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
}

/// RFC 7541 5.2: a Huffman-coded string holding the EOS symbol is a decoding error:
/// COMPRESSION_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_huffman_eos_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = static_get_block();
    // Literal without indexing, name user-agent (58), a 4-byte Huffman value of 32
    // one bits: EOS (30 ones) and 2 bits more.
    hpack_int(58, 4, 0x00, &mut block);
    block.extend_from_slice(&[0x84, 0xff, 0xff, 0xff, 0xff]);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 Huffman EOS").await;
}

/// RFC 7541 5.2: Huffman padding longer than 7 bits is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_huffman_padding_over_7_bits_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = static_get_block();
    // "a" (00011) then 11 one bits of padding, over two bytes.
    hpack_int(58, 4, 0x00, &mut block);
    block.extend_from_slice(&[0x82, 0x1f, 0xff]);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 Huffman padding over 7 bits").await;
}

/// RFC 7541 5.2: Huffman padding that is not the most significant bits of EOS (all
/// ones) is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_huffman_padding_not_eos_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = static_get_block();
    // "a" (00011) then padding 000.
    hpack_int(58, 4, 0x00, &mut block);
    block.extend_from_slice(&[0x81, 0x18]);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 Huffman padding of zeros").await;
}

/// RFC 7541 5.2, RFC 9113 4.3: a string whose length runs past the end of the block
/// is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_string_past_the_block_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = static_get_block();
    hpack_int(58, 4, 0x00, &mut block);
    block.extend_from_slice(&[10, b'a', b'b']);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 string past the block").await;
}

/// RFC 7541 5.1: an integer past what the decoder can hold is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_integer_overflow_is_a_compression_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut block = static_get_block();
    // An indexed field whose index has ten continuation bytes: far past 2^32.
    block.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    send_block(&mut wire, 1, &block).await;
    wire.expect_goaway(ErrorCode::CompressionError, "4.3 integer overflow").await;
}

/// 4.3: every field block is decoded, even one whose request is refused, so the
/// dynamic table stays in step: a field added to it by a malformed request is then
/// read by index in the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_blocks_of_refused_requests_still_update_the_table() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut fields = request("GET", "/refused");
    fields.push(("x-table", "kept-in-step"));
    fields.push(("connection", "close"));
    wire.headers(1, &fields, true).await;
    wire.expect_malformed(1, "8.2.2 connection field").await;
    // Our encoder now sends x-table by index into the dynamic table.
    let mut fields = request("GET", "/after-refused");
    fields.push(("x-table", "kept-in-step"));
    wire.headers(3, &fields, true).await;
    let response = wire.response(3).await;
    assert_eq!(response.status, 200);
    let echo = String::from_utf8_lossy(&response.body).to_lowercase();
    assert!(echo.contains("x-table: kept-in-step"), "the origin got {echo}");
    assert_eq!(setup.origin.count_path("/refused"), 0);
}

// 5.1: stream states.

/// 5.1: DATA on an idle stream is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_data_on_an_idle_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.data(1, b"no stream", true).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "5.1 DATA on an idle stream").await;
}

/// 5.1: WINDOW_UPDATE on an idle stream is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_window_update_on_an_idle_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.window_update(1, 100).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "5.1 WINDOW_UPDATE on an idle stream").await;
}

/// 5.1, 6.4: RST_STREAM on an idle stream is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_rst_stream_on_an_idle_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.reset(1, ErrorCode::Cancel).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "5.1 RST_STREAM on an idle stream").await;
}

/// 5.1: PRIORITY is allowed on an idle stream, and does not open it: a lower stream
/// can still be opened after it, then the stream itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_priority_on_an_idle_stream_is_allowed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let dependency = StreamDependency { exclusive: false, depends_on: 0, weight: 15 };
    wire.write(&Frame::Priority(frame::Priority { stream_id: 5, dependency })).await;
    setup.assert_served(&mut wire, 3, "/after-priority").await;
    setup.assert_served(&mut wire, 5, "/prioritised").await;
}

/// 5.1: DATA on a half-closed (remote) stream (the request ended with END_STREAM) is
/// a stream error STREAM_CLOSED. The same section makes a frame after END_STREAM a
/// connection error STREAM_CLOSED, so a GOAWAY STREAM_CLOSED passes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_data_on_a_half_closed_remote_stream_is_stream_closed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "half-closed-data").await;
    wire.data(1, b"after the end", false).await;
    wire.expect_stream_or_connection_error(1, ErrorCode::StreamClosed, "5.1 DATA").await;
    setup.origin.release("half-closed-data");
}

/// 5.1: HEADERS on a half-closed (remote) stream is a stream error STREAM_CLOSED (or,
/// as a frame after END_STREAM, a connection error STREAM_CLOSED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_headers_on_a_half_closed_remote_stream_is_stream_closed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "half-closed-headers").await;
    wire.headers(1, &[("x-trailer", "late")], true).await;
    wire.expect_stream_or_connection_error(1, ErrorCode::StreamClosed, "5.1 HEADERS").await;
    setup.origin.release("half-closed-headers");
}

/// 5.1: WINDOW_UPDATE and PRIORITY are allowed on a half-closed (remote) stream, and
/// its response still comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_window_update_and_priority_on_a_half_closed_remote_stream_are_allowed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "half-closed-allowed").await;
    wire.window_update(1, 1000).await;
    let dependency = StreamDependency { exclusive: false, depends_on: 0, weight: 200 };
    wire.write(&Frame::Priority(frame::Priority { stream_id: 1, dependency })).await;
    wire.expect_alive("5.1 WINDOW_UPDATE and PRIORITY on half-closed (remote)").await;
    setup.origin.release("half-closed-allowed");
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"held\n");
}

/// 5.1: after receiving RST_STREAM, any frame but PRIORITY on that stream is a stream
/// error STREAM_CLOSED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_data_after_rst_stream_is_stream_closed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.headers(1, &request("POST", "/reset-then-data"), false).await;
    wait_until("the origin has the request", DEADLINE, || {
        setup.origin.count_path("/reset-then-data") == 1
    })
    .await;
    wire.reset(1, ErrorCode::Cancel).await;
    wire.data(1, b"after the reset", true).await;
    wire.expect_reset(1, ErrorCode::StreamClosed, "5.1 DATA after RST_STREAM").await;
}

/// 5.1: a frame on a stream closed by END_STREAM both ways is a connection error
/// STREAM_CLOSED; 6.1 makes DATA there a stream error STREAM_CLOSED: either passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_data_on_a_closed_stream_is_stream_closed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.assert_served(&mut wire, 1, "/closed").await;
    wire.data(1, b"after the end", true).await;
    wire.expect_stream_or_connection_error(1, ErrorCode::StreamClosed, "5.1 closed").await;
}

// 5.1.1: stream identifiers.

/// 5.1.1: a client opens odd-numbered streams; an even one is an unexpected stream
/// identifier, a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_1_even_stream_id_from_a_client_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.get(2, "/even").await;
    wire.expect_goaway(ErrorCode::ProtocolError, "5.1.1 even stream id").await;
    assert_eq!(setup.origin.count_path("/even"), 0);
}

/// 5.1.1: a new stream's identifier is above every stream the client opened; a lower
/// one is a connection error PROTOCOL_ERROR. (Opening stream 5 closed idle stream 3,
/// so 5.1's STREAM_CLOSED for a frame on a closed stream passes too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_1_lower_stream_id_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.assert_served(&mut wire, 5, "/five").await;
    wire.get(3, "/three").await;
    let codes = [ErrorCode::ProtocolError, ErrorCode::StreamClosed];
    wire.expect_goaway_of(&codes, "5.1.1 a lower stream id").await;
    assert_eq!(setup.origin.count_path("/three"), 0);
}

/// 5.1.1: a stream id is not reused: HEADERS opening a closed stream again is a
/// connection error PROTOCOL_ERROR (or STREAM_CLOSED, 5.1, a frame after END_STREAM).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_1_reused_stream_id_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.assert_served(&mut wire, 1, "/first").await;
    wire.get(1, "/again").await;
    let codes = [ErrorCode::ProtocolError, ErrorCode::StreamClosed];
    wire.expect_goaway_of(&codes, "5.1.1 a reused stream id").await;
    assert_eq!(setup.origin.count_path("/again"), 0);
}

// 5.1.2: concurrency.

/// 5.1.2: a HEADERS frame past our SETTINGS_MAX_CONCURRENT_STREAMS is a stream error,
/// PROTOCOL_ERROR or REFUSED_STREAM; the stream never reaches the origin, and the
/// streams within the limit are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_2_streams_past_max_concurrent_streams_are_refused() {
    let setup = Setup::start_with("[limits]\nh2_max_concurrent_streams = 2").await;
    let mut wire = setup.wire().await;
    assert_eq!(wire.peer.max_concurrent_streams, Some(2));
    setup.hold(&mut wire, 1, "limit-a").await;
    setup.hold(&mut wire, 3, "limit-b").await;
    wire.get(5, "/over-the-limit").await;
    let codes = [ErrorCode::RefusedStream, ErrorCode::ProtocolError];
    wire.expect_reset_of(5, &codes, "5.1.2 a third stream of two").await;
    setup.origin.release("limit-a");
    setup.origin.release("limit-b");
    assert_eq!(wire.response(1).await.status, 200);
    assert_eq!(wire.response(3).await.status, 200);
    setup.assert_served(&mut wire, 7, "/within-the-limit").await;
    assert_eq!(setup.origin.count_path("/over-the-limit"), 0);
}

// 5.3: priority (RFC 7540 5.3.1, kept by RFC 9113 5.3.2 for the frames' format).

/// RFC 7540 5.3.1: a stream cannot depend on itself; HEADERS that make it is a stream
/// error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_3_1_headers_depending_on_itself_is_a_stream_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let block = wire.block(&request("GET", "/self-dependent"));
    let mut payload = vec![0, 0, 0, 1, 16];
    payload.extend_from_slice(&block);
    wire.send_frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 1, &payload).await;
    wire.expect_reset(1, ErrorCode::ProtocolError, "5.3.1 HEADERS depending on itself").await;
    assert_eq!(setup.origin.count_path("/self-dependent"), 0);
}

/// RFC 7540 5.3.1: a PRIORITY frame making a stream depend on itself is a stream
/// error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_3_1_priority_depending_on_itself_is_a_stream_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "self-priority").await;
    wire.send_frame(PRIORITY, 0, 1, &[0, 0, 0, 1, 16]).await;
    wire.expect_reset(1, ErrorCode::ProtocolError, "5.3.1 PRIORITY depending on itself").await;
    setup.origin.release("self-priority");
}

// 5.5: extensions.

/// 5.5: frames of unknown types are ignored, on stream 0 and on a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_5_unknown_frame_types_are_ignored() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(UNKNOWN_TYPE, 0xff, 0, b"extension").await;
    wire.send_frame(UNKNOWN_TYPE, 0, 3, b"on an idle stream").await;
    setup.assert_served(&mut wire, 1, "/after-unknown").await;
    wire.expect_alive("5.5 unknown frame types").await;
}

/// 5.5: an unknown frame type inside a field block is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_5_unknown_frame_inside_a_field_block_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let block = wire.block(&request("GET", "/split-by-unknown"));
    let (first, rest) = block.split_at(3);
    wire.send_frame(HEADERS, END_STREAM, 1, first).await;
    wire.send_frame(UNKNOWN_TYPE, 0, 1, b"in the block").await;
    wire.send_frame(CONTINUATION, END_HEADERS, 1, rest).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "5.5 unknown frame in a field block").await;
    assert_eq!(setup.origin.count_path("/split-by-unknown"), 0);
}

// 6.1: DATA.

/// 6.1: DATA on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_1_data_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(DATA, 0, 0, b"stream zero").await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.1 DATA on stream 0").await;
}

/// 6.1: padding as long as the payload or longer is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_1_data_padding_past_the_payload_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.headers(1, &request("POST", "/padded"), false).await;
    // Pad Length 5 in a 4-byte payload.
    wire.send_frame(DATA, END_STREAM | PADDED, 1, &[5, b'a', b'b', b'c']).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.1 padding past the payload").await;
}

/// 6.1: padding is removed: the origin gets the data alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_1_padded_data_reaches_the_origin_without_its_padding() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut fields = request("POST", "/padded-ok");
    fields.push(("content-length", "5"));
    wire.headers(1, &fields, false).await;
    let data = frame::Data {
        stream_id: 1,
        end_stream: true,
        pad_length: Some(20),
        data: bytes::Bytes::from_static(b"hello"),
    };
    wire.write(&Frame::Data(data)).await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.field("x-received-bytes"), Some("5"));
}

// 6.2: HEADERS.

/// 6.2: HEADERS on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_2_headers_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    send_block(&mut wire, 0, &static_get_block()).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.2 HEADERS on stream 0").await;
}

/// 6.2: HEADERS padding as long as what follows Pad Length is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_2_headers_padding_past_the_payload_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let block = static_get_block();
    let mut payload = vec![u8::try_from(block.len() + 1).expect("a short block")];
    payload.extend_from_slice(&block);
    wire.send_frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1, &payload).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.2 padding past the payload").await;
}

/// 6.2: HEADERS with padding and priority fields is read past both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_2_headers_with_padding_and_priority_is_read() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let block = wire.block(&request("GET", "/padded-headers"));
    let mut payload = vec![10, 0x80, 0, 0, 0, 255];
    payload.extend_from_slice(&block);
    payload.extend_from_slice(&[0; 10]);
    let flags = END_HEADERS | END_STREAM | PADDED | PRIORITY_FLAG;
    wire.send_frame(HEADERS, flags, 1, &payload).await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.field("x-path"), Some("/padded-headers"));
}

// 6.3: PRIORITY.

/// 6.3: PRIORITY on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_3_priority_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(PRIORITY, 0, 0, &[0, 0, 0, 1, 16]).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.3 PRIORITY on stream 0").await;
}

/// 6.3: a PRIORITY frame of a length other than 5 is a stream error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_3_priority_of_wrong_length_is_a_stream_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "priority-length").await;
    wire.send_frame(PRIORITY, 0, 1, &[0, 0, 0, 0]).await;
    wire.expect_reset(1, ErrorCode::FrameSizeError, "6.3 PRIORITY of 4 bytes").await;
    setup.origin.release("priority-length");
}

// 6.4: RST_STREAM.

/// 6.4: RST_STREAM on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_4_rst_stream_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(RST_STREAM, 0, 0, &8u32.to_be_bytes()).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.4 RST_STREAM on stream 0").await;
}

/// 6.4: a RST_STREAM of a length other than 4 is a connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_4_rst_stream_of_wrong_length_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "rst-length").await;
    wire.send_frame(RST_STREAM, 0, 1, &[0, 0, 8]).await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "6.4 RST_STREAM of 3 bytes").await;
    setup.origin.release("rst-length");
}

/// 6.4: after RST_STREAM, holdfast sends nothing more on the stream (PRIORITY aside),
/// and the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_4_rst_stream_ends_the_stream() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "cancelled").await;
    wire.reset(1, ErrorCode::Cancel).await;
    setup.origin.release("cancelled");
    // A request after it, answered: by then holdfast has had the held response.
    setup.assert_served(&mut wire, 3, "/after-cancel").await;
    wire.expect_alive("6.4 RST_STREAM").await;
    let late = wire
        .seen
        .iter()
        .find(|e| matches!(e, Event::Fields { stream: 1, .. } | Event::Data { stream: 1, .. }));
    assert!(late.is_none(), "6.4: holdfast answered a stream the client reset: {late:?}");
}

// 6.5: SETTINGS.

/// 6.5.3: a SETTINGS frame is acknowledged with an empty SETTINGS ACK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_3_settings_are_acknowledged() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.settings(&Settings { initial_window_size: Some(100_000), ..Settings::default() }).await;
    wire.until("6.5.3 SETTINGS acknowledged", |e| *e == Event::SettingsAck).await;
    setup.assert_served(&mut wire, 1, "/after-settings").await;
}

/// 6.5.2, RFC 7541 4.2: with our SETTINGS_HEADER_TABLE_SIZE of 0 acknowledged,
/// holdfast's encoder keeps nothing in its dynamic table: every response head decodes
/// with a table of 0 bytes (the reader's decoder refuses an entry or a size update
/// past it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_header_table_size_of_0_is_honoured() {
    let setup = Setup::start().await;
    let none = Settings { header_table_size: Some(0), ..Settings::default() };
    let mut wire = Wire::connect_with(setup.proxy.addr(), &none).await;
    // The same response fields three times: an encoder free to index would.
    for stream in [1, 3, 5] {
        setup.assert_served(&mut wire, stream, "/no-table").await;
    }
}

/// 6.5: SETTINGS on a stream other than 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_settings_with_a_stream_id_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(SETTINGS, 0, 1, &setting(SETTINGS_INITIAL_WINDOW_SIZE, 1000)).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.5 SETTINGS on stream 1").await;
}

/// 6.5: a SETTINGS length that is not a multiple of 6 is a connection error
/// FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_settings_of_bad_length_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(SETTINGS, 0, 0, &setting(SETTINGS_INITIAL_WINDOW_SIZE, 1000)[..5]).await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "6.5 SETTINGS of 5 bytes").await;
}

/// 6.5: a SETTINGS ACK with a payload is a connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_settings_ack_with_a_payload_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(SETTINGS, ACK, 0, &setting(SETTINGS_INITIAL_WINDOW_SIZE, 1000)).await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "6.5 SETTINGS ACK with a payload").await;
}

/// 6.5.2: SETTINGS_ENABLE_PUSH other than 0 or 1 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_enable_push_of_2_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(SETTINGS, 0, 0, &setting(SETTINGS_ENABLE_PUSH, 2)).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.5.2 ENABLE_PUSH = 2").await;
}

/// 6.5.2: SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 is a connection error
/// FLOW_CONTROL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_initial_window_size_over_the_max_is_a_flow_control_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(SETTINGS, 0, 0, &setting(SETTINGS_INITIAL_WINDOW_SIZE, 1 << 31)).await;
    wire.expect_goaway(ErrorCode::FlowControlError, "6.5.2 INITIAL_WINDOW_SIZE = 2^31").await;
}

/// 6.5.2: SETTINGS_MAX_FRAME_SIZE below 2^14 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_max_frame_size_below_the_min_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(SETTINGS, 0, 0, &setting(SETTINGS_MAX_FRAME_SIZE, (1 << 14) - 1)).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.5.2 MAX_FRAME_SIZE = 2^14-1").await;
}

/// 6.5.2: SETTINGS_MAX_FRAME_SIZE above 2^24-1 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_max_frame_size_above_the_max_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(SETTINGS, 0, 0, &setting(SETTINGS_MAX_FRAME_SIZE, 1 << 24)).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.5.2 MAX_FRAME_SIZE = 2^24").await;
}

/// 6.5.2: unknown SETTINGS parameters are ignored (and the frame acknowledged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_unknown_settings_are_ignored() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut payload = setting(0x7f7f, 12345);
    payload.extend(setting(0xffff, u32::MAX));
    wire.send_frame(SETTINGS, 0, 0, &payload).await;
    wire.until("6.5.2 unknown settings acknowledged", |e| *e == Event::SettingsAck).await;
    setup.assert_served(&mut wire, 1, "/after-unknown-settings").await;
}

// 6.7: PING.

/// 6.7: a PING is answered with a PING ACK carrying the same 8 bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_ping_is_answered_with_its_payload() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.ping(*b"\x00\x01\x02\x03\xfc\xfd\xfe\xff").await;
    let answer =
        wire.until("6.7 PING answered", |e| matches!(e, Event::Ping { ack: true, .. })).await;
    let want = Event::Ping { ack: true, payload: *b"\x00\x01\x02\x03\xfc\xfd\xfe\xff" };
    assert_eq!(answer, want, "6.7: the answer carries the PING's payload");
}

/// 6.7: a PING with ACK is not answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_ping_ack_is_not_answered() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(PING, ACK, 0, b"unasked!").await;
    // A PING after it: its answer comes after any answer to the first.
    wire.expect_alive("6.7 PING ACK").await;
    let answered = wire
        .seen
        .iter()
        .any(|e| matches!(e, Event::Ping { payload, .. } if payload == b"unasked!"));
    assert!(!answered, "6.7: holdfast answered a PING ACK: {:?}", wire.seen);
}

/// 6.7: a PING of a length other than 8 is a connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_ping_of_wrong_length_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(PING, 0, 0, b"seven!!").await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "6.7 PING of 7 bytes").await;
}

/// 6.7: a PING on a stream other than 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_ping_with_a_stream_id_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(PING, 0, 1, b"streamed").await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.7 PING on stream 1").await;
}

// 6.8: GOAWAY.

/// 6.8: GOAWAY on a stream other than 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_goaway_with_a_stream_id_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(GOAWAY, 0, 1, &[0, 0, 0, 0, 0, 0, 0, 0]).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.8 GOAWAY on stream 1").await;
}

/// 4.2, 6.8: a GOAWAY too short for its last stream id and error code is a
/// connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_goaway_too_short_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(GOAWAY, 0, 0, &[0, 0, 0, 0]).await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "6.8 GOAWAY of 4 bytes").await;
}

/// 6.8: a client's GOAWAY speaks of streams the server opened (none here); the
/// client's own streams in flight are still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_streams_in_flight_are_answered_after_a_client_goaway() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "goaway-in-flight").await;
    wire.goaway(0, ErrorCode::NoError).await;
    setup.origin.release("goaway-in-flight");
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"held\n");
}

// 6.9: WINDOW_UPDATE and flow control.

/// 6.9: a WINDOW_UPDATE of 0 for the connection is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_window_update_of_0_on_the_connection_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(WINDOW_UPDATE, 0, 0, &0u32.to_be_bytes()).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.9 WINDOW_UPDATE of 0 on stream 0").await;
}

/// 6.9: a WINDOW_UPDATE of 0 for a stream is a stream error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_window_update_of_0_on_a_stream_is_a_stream_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "zero-increment").await;
    wire.send_frame(WINDOW_UPDATE, 0, 1, &0u32.to_be_bytes()).await;
    wire.expect_reset(1, ErrorCode::ProtocolError, "6.9 WINDOW_UPDATE of 0 on a stream").await;
    setup.origin.release("zero-increment");
}

/// 6.9: a WINDOW_UPDATE of a length other than 4 is a connection error
/// FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_window_update_of_wrong_length_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1]).await;
    wire.expect_goaway(ErrorCode::FrameSizeError, "6.9 WINDOW_UPDATE of 3 bytes").await;
}

/// 6.9.1: a WINDOW_UPDATE that takes the connection's window past 2^31-1 is a
/// connection error FLOW_CONTROL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_1_connection_window_past_the_max_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    // The window starts at 65,535.
    wire.window_update(0, MAX_WINDOW_SIZE).await;
    wire.expect_goaway(ErrorCode::FlowControlError, "6.9.1 connection window overflow").await;
}

/// 6.9.1: a WINDOW_UPDATE that takes a stream's window past 2^31-1 is a stream error
/// FLOW_CONTROL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_1_stream_window_past_the_max_is_a_stream_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "stream-overflow").await;
    wire.window_update(1, MAX_WINDOW_SIZE).await;
    wire.expect_reset(1, ErrorCode::FlowControlError, "6.9.1 stream window overflow").await;
    setup.origin.release("stream-overflow");
}

/// 6.9.1: holdfast sends no more DATA on a stream than the window the client gave it
/// (SETTINGS_INITIAL_WINDOW_SIZE), and the rest once the window grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_1_response_data_stays_within_the_client_window() {
    let setup = Setup::start().await;
    let small = Settings { initial_window_size: Some(100), ..Settings::default() };
    let mut wire = Wire::connect_with(setup.proxy.addr(), &small).await;
    wire.get(1, "/bytes/1000").await;
    let mut received = 0;
    let end = tokio::time::Instant::now() + ANSWER;
    // Bounded by the deadline: each round reads one event.
    while received < 100 {
        match wire.next_until(end).await {
            Ok(Event::Data { stream: 1, data, .. }) => received += data.len(),
            Ok(Event::Reset { .. } | Event::GoAway { .. }) | Err(_) => {
                panic!("6.9.1 the first 100 bytes: {:?}", wire.seen)
            }
            Ok(_) => {}
        }
    }
    assert_eq!(received, 100, "6.9.1: DATA past the stream window");
    // A PING answered means holdfast has read what came before it; any DATA it sent
    // past the window would most likely come before that answer too.
    wire.expect_alive("6.9.1").await;
    let data: usize = wire
        .seen
        .iter()
        .map(|e| match e {
            Event::Data { stream: 1, data, .. } => data.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(data, 100, "6.9.1: DATA past the stream window");
    wire.window_update(1, 900).await;
    let mut body = 100;
    let mut ended = false;
    // Bounded by the deadline: each round reads one event.
    while !ended {
        match wire.next().await {
            Ok(Event::Data { stream: 1, data, end_stream }) => {
                body += data.len();
                ended = end_stream;
            }
            Ok(Event::Reset { .. } | Event::GoAway { .. }) | Err(_) => {
                panic!("6.9.1 the rest of the body: {:?}", wire.seen)
            }
            Ok(_) => {}
        }
    }
    assert_eq!(body, 1000);
}

/// 6.9.2: a change of SETTINGS_INITIAL_WINDOW_SIZE that takes an open stream's window
/// past 2^31-1 is a connection error FLOW_CONTROL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_2_initial_window_size_overflowing_a_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "settings-overflow").await;
    // Stream 1's send window: 65,535 + this = 2^31-1 exactly.
    wire.window_update(1, MAX_WINDOW_SIZE - 65_535).await;
    wire.expect_alive("6.9.2 a window of exactly 2^31-1").await;
    wire.settings(&Settings { initial_window_size: Some(65_536), ..Settings::default() }).await;
    wire.expect_goaway(ErrorCode::FlowControlError, "6.9.2 window overflow by SETTINGS").await;
    setup.origin.release("settings-overflow");
}

/// 6.9.2: a change of SETTINGS_INITIAL_WINDOW_SIZE changes the window of every open
/// stream: a response held by a window of 0 comes once the setting grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_2_initial_window_size_change_applies_to_open_streams() {
    let setup = Setup::start().await;
    let closed = Settings { initial_window_size: Some(0), ..Settings::default() };
    let mut wire = Wire::connect_with(setup.proxy.addr(), &closed).await;
    wire.get(1, "/bytes/10").await;
    wire.until("6.9.2 the response head", |e| matches!(e, Event::Fields { stream: 1, .. })).await;
    wire.expect_alive("6.9.2 a window of 0").await;
    let early = wire.seen.iter().any(|e| matches!(e, Event::Data { data, .. } if !data.is_empty()));
    assert!(!early, "6.9.1: DATA sent into a window of 0: {:?}", wire.seen);
    wire.settings(&Settings { initial_window_size: Some(100), ..Settings::default() }).await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"xxxxxxxxxx");
}

// 6.10: CONTINUATION.

/// 6.10: a field block split over HEADERS and CONTINUATION frames is read whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_field_block_over_continuations_is_read() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut fields = request("GET", "/continued");
    fields.push(("x-continued", "yes"));
    let block = wire.block(&fields);
    let (first, rest) = block.split_at(4);
    let (second, third) = rest.split_at(rest.len() / 2);
    wire.send_frame(HEADERS, END_STREAM, 1, first).await;
    wire.send_frame(CONTINUATION, 0, 1, second).await;
    wire.send_frame(CONTINUATION, END_HEADERS, 1, third).await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200);
    let echo = String::from_utf8_lossy(&response.body).to_lowercase();
    assert!(echo.contains("x-continued: yes"), "the origin got {echo}");
}

/// 6.10, 4.3: a frame of another type inside a field block is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_other_frame_inside_a_field_block_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let block = wire.block(&request("GET", "/interleaved"));
    let (first, rest) = block.split_at(3);
    wire.send_frame(HEADERS, END_STREAM, 1, first).await;
    wire.send_frame(PING, 0, 0, b"between!").await;
    wire.send_frame(CONTINUATION, END_HEADERS, 1, rest).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.10 PING inside a field block").await;
    assert_eq!(setup.origin.count_path("/interleaved"), 0);
}

/// 6.10, 4.3: HEADERS of another stream inside a field block is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_headers_of_another_stream_inside_a_field_block_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(HEADERS, END_STREAM, 1, &static_get_block()).await;
    send_block(&mut wire, 3, &static_get_block()).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.10 HEADERS inside a field block").await;
}

/// 6.10: a CONTINUATION on another stream than the field block's is a connection
/// error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_continuation_on_another_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let block = static_get_block();
    let (first, rest) = block.split_at(3);
    wire.send_frame(HEADERS, END_STREAM, 1, first).await;
    wire.send_frame(CONTINUATION, END_HEADERS, 3, rest).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.10 CONTINUATION on stream 3").await;
}

/// 6.10: a CONTINUATION after END_HEADERS (no field block open) is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_continuation_without_a_field_block_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.headers(1, &request("POST", "/ended-block"), false).await;
    let mut extra = Vec::new();
    hpack_int(58, 4, 0x00, &mut extra);
    extra.extend_from_slice(&[1, b'x']);
    wire.send_frame(CONTINUATION, END_HEADERS, 1, &extra).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.10 CONTINUATION after END_HEADERS").await;
}

/// 6.10: a CONTINUATION on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_continuation_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.send_frame(CONTINUATION, END_HEADERS, 0, &static_get_block()).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "6.10 CONTINUATION on stream 0").await;
}

// 8.1: messages.

/// 8.1: a request with a body and trailers is proxied: the origin's response comes
/// back, having received the body and the trailer fields (and `te: trailers`, the
/// one `te` 8.2.2 allows, is accepted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_request_with_body_and_trailers_gets_the_origins_response() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut fields = request("POST", "/upload?trailers");
    fields.extend([("te", "trailers"), ("content-type", "text/plain")]);
    wire.headers(1, &fields, false).await;
    wire.data(1, b"hello, ", false).await;
    wire.data(1, b"origin", false).await;
    wire.headers(1, &[("x-checksum", "c0ffee")], true).await;
    let response = wire.response(1).await;
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.field("x-path"), Some("/upload?trailers"));
    assert_eq!(response.field("x-received-bytes"), Some("13"));
    assert_eq!(response.field("x-received-trailers"), Some("x-checksum"));
}

/// 8.1: a HEADERS frame after the request's header section that does not end the
/// stream (trailers without END_STREAM) makes the request malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_trailers_without_end_stream_are_malformed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.headers(1, &request("POST", "/open-trailers"), false).await;
    wire.data(1, b"body", false).await;
    wire.headers(1, &[("x-checksum", "c0ffee")], false).await;
    wire.expect_malformed(1, "8.1 trailers without END_STREAM").await;
}

/// 8.1: trailers carry no pseudo-header fields; a request whose trailers do is
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_pseudo_header_in_trailers_is_malformed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    wire.headers(1, &request("POST", "/pseudo-trailers"), false).await;
    wire.data(1, b"body", false).await;
    wire.headers(1, &[(":path", "/elsewhere")], true).await;
    wire.expect_malformed(1, "8.1 pseudo-header in trailers").await;
}

/// 8.1.1: a request whose DATA adds up to less than its `content-length` is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_1_data_short_of_content_length_is_malformed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut fields = request("POST", "/short-body");
    fields.push(("content-length", "10"));
    wire.headers(1, &fields, false).await;
    wire.data(1, b"12345", true).await;
    wire.expect_malformed(1, "8.1.1 DATA short of content-length").await;
}

/// 8.1.1: a request whose DATA goes past its `content-length` is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_1_data_past_content_length_is_malformed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut fields = request("POST", "/long-body");
    fields.push(("content-length", "3"));
    wire.headers(1, &fields, false).await;
    wire.data(1, b"12345", true).await;
    wire.expect_malformed(1, "8.1.1 DATA past content-length").await;
}

/// 8.1.1: a `content-length` on a request that ends with its headers (no DATA) must
/// be 0; another value makes it malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_1_content_length_without_data_is_malformed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let mut fields = request("POST", "/no-body");
    fields.push(("content-length", "4"));
    wire.headers(1, &fields, true).await;
    wire.expect_malformed(1, "8.1.1 content-length with no DATA").await;
    assert_eq!(setup.origin.count_path("/no-body"), 0);
}

// 8.2: fields.

/// One malformed request: its fields, and the rule it breaks.
struct Case {
    rule: String,
    fields: Vec<(String, String)>,
}

impl Case {
    /// `GET /malformed/N` with `extra` after its pseudo-header fields.
    fn extra(rule: &str, n: usize, extra: &[(&str, &str)]) -> Case {
        let path = format!("/malformed/{n}");
        let mut fields: Vec<(String, String)> =
            request("GET", &path).iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        fields.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        Case { rule: rule.to_string(), fields }
    }

    /// A request head of exactly `fields`.
    fn whole(rule: &str, fields: &[(&str, &str)]) -> Case {
        let fields = fields.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        Case { rule: rule.to_string(), fields }
    }
}

/// Sends each case (HEADERS with END_STREAM) on a connection of its own, in a task of
/// its own so that one case's failure does not hide another's, and checks each is
/// refused as malformed (8.1.1); then that none reached the origin. Panics listing
/// every case that failed.
async fn assert_all_malformed(setup: &Setup, cases: Vec<Case>) {
    let mut failures = Vec::new();
    for case in cases {
        let addr = setup.proxy.addr();
        let task = tokio::spawn(async move {
            let mut wire = Wire::connect(addr).await;
            let fields: Vec<(&str, &str)> =
                case.fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            wire.headers(1, &fields, true).await;
            wire.expect_malformed(1, &case.rule).await;
        });
        if let Err(e) = task.await {
            let panic = e.into_panic();
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            // The message names the case's rule.
            failures.push(text.chars().take(600).collect::<String>());
        }
    }
    assert!(failures.is_empty(), "cases that failed:\n{}", failures.join("\n"));
    assert_eq!(setup.origin.request_count(), 0, "a malformed request reached the origin");
}

/// 8.2.1: a field name with an uppercase letter makes the request malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_1_uppercase_field_name_is_malformed() {
    let setup = Setup::start().await;
    assert_all_malformed(&setup, vec![Case::extra("8.2.1 uppercase name", 1, &[("X-Upper", "1")])])
        .await;
}

/// 8.2.1: a field name with a space, a control byte, DEL, a non-ASCII byte or a colon
/// (outside a pseudo-header's first byte), or an empty name, makes the request
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_1_field_name_with_a_forbidden_byte_is_malformed() {
    let setup = Setup::start().await;
    let names = ["x name", "x\x01name", "x\x7fname", "x\u{e9}name", "x:name", ""];
    let cases = names
        .iter()
        .enumerate()
        .map(|(i, name)| Case::extra(&format!("8.2.1 name {name:?}"), i, &[(name, "1")]))
        .collect();
    assert_all_malformed(&setup, cases).await;
}

/// 8.2.1: a field value with NUL, CR or LF makes the request malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_1_field_value_with_nul_cr_or_lf_is_malformed() {
    let setup = Setup::start().await;
    let cases = ["a\0b", "a\rb", "a\nb"]
        .iter()
        .enumerate()
        .map(|(i, value)| Case::extra(&format!("8.2.1 value {value:?}"), i, &[("x-value", value)]))
        .collect();
    assert_all_malformed(&setup, cases).await;
}

/// 8.2.1: a field value that starts or ends with a space or tab makes the request
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_1_field_value_with_surrounding_whitespace_is_malformed() {
    let setup = Setup::start().await;
    let cases = [" lead", "trail ", "\tlead", "trail\t"]
        .iter()
        .enumerate()
        .map(|(i, value)| Case::extra(&format!("8.2.1 value {value:?}"), i, &[("x-value", value)]))
        .collect();
    assert_all_malformed(&setup, cases).await;
}

/// 8.2.2: connection-specific fields make a request malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_2_connection_specific_field_is_malformed() {
    let setup = Setup::start().await;
    let fields = [
        ("connection", "keep-alive"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "h2c"),
    ];
    let cases = fields
        .iter()
        .enumerate()
        .map(|(i, field)| Case::extra(&format!("8.2.2 {}", field.0), i, &[*field]))
        .collect();
    assert_all_malformed(&setup, cases).await;
}

/// 8.2.2: `te` with any value other than `trailers` makes a request malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_2_te_other_than_trailers_is_malformed() {
    let setup = Setup::start().await;
    let cases = vec![
        Case::extra("8.2.2 te: gzip", 1, &[("te", "gzip")]),
        Case::extra("8.2.2 te: trailers, gzip", 2, &[("te", "trailers, gzip")]),
    ];
    assert_all_malformed(&setup, cases).await;
}

// 8.3: pseudo-header fields.

/// 8.3: a pseudo-header field after a regular field makes the request malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_pseudo_header_after_a_regular_field_is_malformed() {
    let setup = Setup::start().await;
    let fields = [
        (":method", "GET"),
        (":scheme", "http"),
        ("x-regular", "1"),
        (":path", "/pseudo-late"),
        (":authority", "holdfast.test"),
    ];
    assert_all_malformed(&setup, vec![Case::whole("8.3 pseudo-header after a field", &fields)])
        .await;
}

/// 8.3: a response pseudo-header field (`:status`) in a request makes it malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_response_pseudo_header_in_a_request_is_malformed() {
    let setup = Setup::start().await;
    let case = Case::extra("8.3 :status in a request", 1, &[(":status", "200")]);
    assert_all_malformed(&setup, vec![case]).await;
}

/// 8.3: an undefined pseudo-header field makes the request malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_unknown_pseudo_header_is_malformed() {
    let setup = Setup::start().await;
    assert_all_malformed(&setup, vec![Case::extra("8.3 :color", 1, &[(":color", "blue")])]).await;
}

/// 8.3.1: a request has exactly one `:method`; without it, it is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_1_missing_method_is_malformed() {
    let setup = Setup::start().await;
    let fields = [(":scheme", "http"), (":path", "/pseudo"), (":authority", "holdfast.test")];
    assert_all_malformed(&setup, vec![Case::whole("8.3.1 no :method", &fields)]).await;
}

/// 8.3.1: a request has exactly one `:scheme`; without it, it is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_1_missing_scheme_is_malformed() {
    let setup = Setup::start().await;
    let fields = [(":method", "GET"), (":path", "/pseudo"), (":authority", "holdfast.test")];
    assert_all_malformed(&setup, vec![Case::whole("8.3.1 no :scheme", &fields)]).await;
}

/// 8.3.1: a request other than CONNECT has exactly one `:path`; without it, it is
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_1_missing_path_is_malformed() {
    let setup = Setup::start().await;
    let fields = [(":method", "GET"), (":scheme", "http"), (":authority", "holdfast.test")];
    assert_all_malformed(&setup, vec![Case::whole("8.3.1 no :path", &fields)]).await;
}

/// 8.3.1: a pseudo-header field given twice makes the request malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_1_repeated_pseudo_header_is_malformed() {
    let setup = Setup::start().await;
    let cases = vec![
        Case::extra("8.3.1 :path twice", 1, &[(":path", "/pseudo-again")]),
        Case::extra("8.3.1 :method twice", 2, &[(":method", "POST")]),
    ];
    assert_all_malformed(&setup, cases).await;
}

/// 8.3.1: `:path` is not empty for `http` URIs; an empty one makes the request
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_1_empty_path_is_malformed() {
    let setup = Setup::start().await;
    let fields = request("GET", "");
    assert_all_malformed(&setup, vec![Case::whole("8.3.1 empty :path", &fields)]).await;
}

// 8.4, 8.5: server push and CONNECT.

/// 8.4, 6.6: a client cannot push; a PUSH_PROMISE from one is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_4_push_promise_from_a_client_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    setup.hold(&mut wire, 1, "push-promise").await;
    let mut payload = 2u32.to_be_bytes().to_vec();
    payload.extend(static_get_block());
    wire.send_frame(PUSH_PROMISE, END_HEADERS, 1, &payload).await;
    wire.expect_goaway(ErrorCode::ProtocolError, "8.4 PUSH_PROMISE from a client").await;
    setup.origin.release("push-promise");
}

/// 8.5: a CONNECT request (not extended: no `:protocol`) omits `:scheme` and `:path`;
/// one that has them is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_5_connect_with_scheme_and_path_is_malformed() {
    let setup = Setup::start().await;
    let mut wire = setup.wire().await;
    let fields = [
        (":method", "CONNECT"),
        (":scheme", "http"),
        (":path", "/pseudo-connect"),
        (":authority", "holdfast.test:443"),
    ];
    wire.headers(1, &fields, false).await;
    wire.expect_malformed(1, "8.5 CONNECT with :scheme and :path").await;
    assert_eq!(setup.origin.request_count(), 0);
}
