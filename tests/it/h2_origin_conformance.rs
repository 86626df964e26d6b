//! holdfast as an HTTP/2 client of its origins, against the rules RFC 9113 (sections 3
//! to 8) and RFC 7541 give a client receiving from a server: each test puts holdfast in
//! front of a scripted origin ([`ScriptedOrigin`], h2c), sends a request through it,
//! has the origin answer with the frames under test, and checks both ends: what
//! holdfast sent the origin, and what the client got.
//!
//! Frames are written with holdfast-h2's writers and HPACK encoder, or byte by byte when
//! they must be wrong; what holdfast sends is decoded with its frame decoder and HPACK
//! decoder ([`Wire`], the same as the server-side suite's). Tests are grouped by
//! section, and each name starts with the section it checks (`s6_5_2_...` is RFC 9113
//! section 6.5.2); the HPACK tests (`s4_3_hpack_...`, RFC 9113 section 4.3) name their
//! RFC 7541 section in their doc.
//!
//! How answers are judged, at the origin:
//! - A connection error is a GOAWAY with the code the RFC names, then the connection
//!   closed (5.4.1); where the RFC lets the GOAWAY be left out (an invalid preface, 3.4)
//!   a close without one passes. The next request goes on a new connection.
//! - A stream error is a RST_STREAM with the code the RFC names on that stream, after
//!   which the connection goes on (a PING is answered) and carries the next request.
//!   Where a section names both scopes for a fault, either passes and the test says so.
//! - A malformed response (8.1.1) is a stream error PROTOCOL_ERROR.
//! - A frame the RFC says to ignore changes nothing: the response comes whole, and no
//!   RST_STREAM or GOAWAY is sent.
//!
//! And at the client: a response that failed before anything of it was relayed is
//! holdfast's own 502, naming the upstream group and the backend; one whose head was
//! relayed has its stream reset (an HTTP/2 client's), never its end. Requests that fail
//! are `POST`s: holdfast never sends one again after a failure that may have reached
//! the origin, so the client sees what the one try got.

use holdfast_h2::error::ErrorCode;
use holdfast_h2::frame::{self, Frame, Settings, StreamDependency, MAX_WINDOW_SIZE};
use tokio::time::Instant;

use crate::support::h2_origin_wire::{field, served, ScriptedOrigin};
use crate::support::h2_wire::{
    raw_frame, setting, Event, Scope, Wire, ACK, ANSWER, CONTINUATION, DATA, END_HEADERS,
    END_STREAM, GOAWAY, HEADERS, PADDED, PING, PRIORITY, PRIORITY_FLAG, PUSH_PROMISE, RST_STREAM,
    SETTINGS, SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE,
    UNKNOWN_TYPE, WINDOW_UPDATE,
};
use crate::support::http2::{h2_config, hpack_int, hpack_literal};
use crate::support::{Proxy, RawClient};

/// holdfast (an h2c listener, HTTP/1.1 clients welcome too) in front of a scripted
/// origin it speaks h2c to.
struct Setup {
    origin: ScriptedOrigin,
    proxy: Proxy,
}

impl Setup {
    async fn start() -> Setup {
        Setup::start_with("").await
    }

    /// `rest` is written at the end of the config (a `[buffering]` table).
    async fn start_with(rest: &str) -> Setup {
        let origin = ScriptedOrigin::start().await;
        let servers = [format!("h2c://{}", origin.addr())];
        let proxy = Proxy::start(h2_config("h2c = true", &servers, "", rest)).await;
        Setup { origin, proxy }
    }

    /// Sends `POST path` with an empty body from a new HTTP/1.1 client connection.
    async fn post(&self, path: &str) -> RawClient {
        let mut client = RawClient::connect(self.proxy.addr()).await;
        let request =
            format!("POST {path} HTTP/1.1\r\nHost: holdfast.test\r\nContent-Length: 0\r\n\r\n");
        client.send(request).await;
        client
    }

    /// Sends `GET path` from a new HTTP/1.1 client connection.
    async fn get(&self, path: &str) -> RawClient {
        let mut client = RawClient::connect(self.proxy.addr()).await;
        client.send(format!("GET {path} HTTP/1.1\r\nHost: holdfast.test\r\n\r\n")).await;
        client
    }

    /// `POST path` from a new client, read on a new origin connection past its start:
    /// the client, the connection, and the stream the request came on.
    async fn first(&self, path: &str) -> (RawClient, Wire, u32) {
        self.first_with(path, &Settings::default()).await
    }

    /// [`Setup::first`], the origin's SETTINGS being `settings`.
    async fn first_with(&self, path: &str, settings: &Settings) -> (RawClient, Wire, u32) {
        let client = self.post(path).await;
        let mut conn = self.origin.accept_with(settings).await;
        let request = conn.request(path).await;
        assert_eq!(request.field(":path"), Some(path), "a request for another path");
        (client, conn, request.stream)
    }

    /// `POST path` from a new client, read on `conn`: the client and the stream.
    async fn another(&self, conn: &mut Wire, path: &str) -> (RawClient, u32) {
        let client = self.post(path).await;
        let request = conn.request(path).await;
        assert_eq!(request.field(":path"), Some(path), "a request for another path");
        (client, request.stream)
    }

    /// Checks the client got holdfast's own 502, naming the group and the backend.
    async fn expect_502(&self, client: &mut RawClient, rule: &str) {
        let response = match client.try_response(false).await {
            Ok(response) => response,
            Err(e) => panic!("{rule}: the client wanted a 502, got {e:?}"),
        };
        let body = response.body_text();
        assert_eq!(response.status, 502, "{rule}: {body}");
        let names = format!("upstream app ({})", self.origin.addr());
        assert!(body.contains(&names), "{rule}: the 502 names no backend: {body}");
        eprintln!("{rule}: the client got {body:?}");
    }

    /// Checks the next request is carried by `conn` (the connection outlived the
    /// error) and served whole.
    async fn expect_served_on(&self, conn: &mut Wire, rule: &str) {
        let mut client = self.get("/next").await;
        let request = conn.request(&format!("{rule}: the next request")).await;
        assert_eq!(request.field(":path"), Some("/next"));
        conn.answer(request.stream, "/next").await;
        expect_answered(&mut client, "/next", rule).await;
        assert_eq!(self.origin.untaken(), 0, "{rule}: holdfast opened another connection");
    }

    /// Checks the next request goes on a new connection and is served whole; that
    /// connection.
    async fn expect_served_fresh(&self, rule: &str) -> Wire {
        let mut client = self.get("/next").await;
        let mut conn = self.origin.accept().await;
        let request = conn.request(&format!("{rule}: the next request")).await;
        assert_eq!(request.field(":path"), Some("/next"));
        conn.answer(request.stream, "/next").await;
        expect_answered(&mut client, "/next", rule).await;
        conn
    }

    /// The checks of a connection error found before any of the response was relayed:
    /// GOAWAY `code` and the close, a 502, the next request on a new connection.
    async fn connection_error(
        &self,
        mut conn: Wire,
        mut client: RawClient,
        code: ErrorCode,
        rule: &str,
    ) {
        conn.expect_goaway(code, rule).await;
        self.expect_502(&mut client, rule).await;
        self.expect_served_fresh(rule).await;
    }

    /// The checks of a stream error found before any of the response was relayed:
    /// RST_STREAM `code` on `stream` and the connection going on, a 502, the next
    /// request on the same connection.
    async fn stream_error(
        &self,
        conn: &mut Wire,
        stream: u32,
        mut client: RawClient,
        code: ErrorCode,
        rule: &str,
    ) {
        conn.expect_reset(stream, code, rule).await;
        self.expect_502(&mut client, rule).await;
        self.expect_served_on(conn, rule).await;
    }

    /// The next request after an error whose scope holdfast chose (`scope`): on `conn`
    /// after a stream error, on a new connection after a connection error.
    async fn expect_served_after(&self, scope: Scope, conn: &mut Wire, rule: &str) {
        match scope {
            Scope::Stream => self.expect_served_on(conn, rule).await,
            Scope::Connection => {
                self.expect_served_fresh(rule).await;
            }
        }
    }

    /// An HTTP/2 client's `GET path` on its stream 1, read on a new origin connection,
    /// and the origin's response head (`:status 200` and `head`) relayed to the client:
    /// the client, the origin's connection, and the request's stream there.
    async fn relayed(&self, path: &str, head: &[(&str, &str)]) -> (Wire, Wire, u32) {
        self.relayed_with(path, &Settings::default(), head).await
    }

    /// [`Setup::relayed`], the client's SETTINGS being `settings`.
    async fn relayed_with(
        &self,
        path: &str,
        settings: &Settings,
        head: &[(&str, &str)],
    ) -> (Wire, Wire, u32) {
        let mut client = Wire::connect_with(self.proxy.addr(), settings).await;
        client.get(1, path).await;
        let mut conn = self.origin.accept().await;
        let request = conn.request(path).await;
        let mut fields = vec![(":status", "200")];
        fields.extend_from_slice(head);
        conn.headers(request.stream, &fields, false).await;
        client
            .until(&format!("{path}: the response head relayed"), |e| {
                matches!(e, Event::Fields { stream: 1, .. })
            })
            .await;
        (client, conn, request.stream)
    }
}

/// Checks `client` got the origin's whole answer to `path` ([`Wire::answer`]).
async fn expect_answered(client: &mut RawClient, path: &str, rule: &str) {
    let response = match client.try_response(false).await {
        Ok(response) => response,
        Err(e) => panic!("{rule}: the client wanted the answer to {path}, got {e:?}"),
    };
    assert_eq!(response.status, 200, "{rule}: {}", response.body_text());
    assert_eq!(response.header("x-path"), Some(path), "{rule}: an answer to another request");
    assert_eq!(response.body_text(), served(path), "{rule}");
}

/// Reads an HTTP/2 client's `stream` until holdfast resets it (any code: the RFC names
/// none for a proxy whose origin failed); its end (a DATA or HEADERS frame with
/// END_STREAM) first fails. Then checks the client's connection goes on.
async fn expect_cut(client: &mut Wire, stream: u32, rule: &str) {
    let ended = |e: &Event| {
        matches!(e, Event::Data { stream: s, end_stream: true, .. }
            | Event::Fields { stream: s, end_stream: true, .. } if *s == stream)
    };
    assert!(!client.seen.iter().any(ended), "{rule}: the client got the end: {:?}", client.seen);
    // Read already while waiting for another stream's.
    if client.seen.iter().any(|e| matches!(e, Event::Reset { stream: s, .. } if *s == stream)) {
        return;
    }
    let end = Instant::now() + ANSWER;
    // Bounded by the deadline: each round reads one event.
    loop {
        match client.next_until(end).await {
            Ok(Event::Reset { stream: s, code }) if s == stream => {
                eprintln!("{rule}: the client's stream was reset: {code:?}");
                break;
            }
            Ok(
                Event::Data { stream: s, end_stream: true, .. }
                | Event::Fields { stream: s, end_stream: true, .. },
            ) if s == stream => {
                panic!("{rule}: the client got the end of a failed response: {:?}", client.seen)
            }
            Ok(event @ Event::GoAway { .. }) => {
                panic!("{rule}: the client's connection got {event:?}: {:?}", client.seen)
            }
            Ok(_) => {}
            Err(end) => {
                panic!("{rule}: the client's stream was not reset ({end:?}): {:?}", client.seen)
            }
        }
    }
    client.expect_alive(rule).await;
}

/// Checks holdfast reset no stream and sent no GOAWAY on `conn`, and that it still
/// answers a PING.
async fn expect_no_error(conn: &mut Wire, rule: &str) {
    expect_no_error_after(conn, 0, rule).await;
}

/// [`expect_no_error`] for what holdfast sent after the first `seen` events.
async fn expect_no_error_after(conn: &mut Wire, seen: usize, rule: &str) {
    conn.expect_alive(rule).await;
    let errors: Vec<&Event> = conn.seen[seen..]
        .iter()
        .filter(|e| matches!(e, Event::Reset { .. } | Event::GoAway { .. }))
        .collect();
    assert!(errors.is_empty(), "{rule}: holdfast sent {errors:?}: {:?}", conn.seen);
}

/// Reads until holdfast closes `conn`; a GOAWAY before the close may be left out
/// (3.4), but if one comes it carries `code`.
async fn expect_closed_goaway_optional(conn: &mut Wire, code: ErrorCode, rule: &str) {
    conn.expect_closed(rule).await;
    eprintln!("{rule}: closed after {:?}", conn.seen);
    for event in &conn.seen {
        if let Event::GoAway { code: got, .. } = event {
            assert_eq!(*got, code, "{rule}: GOAWAY with the wrong code: {:?}", conn.seen);
        }
    }
}

/// A response block of the static table's `:status 200`, then `rest` as it is.
fn status_200_then(rest: &[u8]) -> Vec<u8> {
    let mut block = vec![0x88];
    block.extend_from_slice(rest);
    block
}

/// Sends a HEADERS frame (END_HEADERS, END_STREAM) carrying `block` as it is.
async fn send_block(conn: &mut Wire, stream: u32, block: &[u8]) {
    conn.send_frame(HEADERS, END_HEADERS | END_STREAM, stream, block).await;
}

/// A whole response of `:status 200`, `content-length` and `body` for `path`, in one
/// HEADERS and one DATA frame: [`Wire::answer`]'s, with the flags and stream given.
async fn answer_raw(conn: &mut Wire, stream: u32, path: &str, headers_flags: u8, data_flags: u8) {
    let body = served(path);
    let length = body.len().to_string();
    let block = conn.block(&[(":status", "200"), ("content-length", &length), ("x-path", path)]);
    conn.send_frame(HEADERS, headers_flags, stream, &block).await;
    conn.send_frame(DATA, data_flags, stream, body.as_bytes()).await;
}

// 3.4: the connection preface.

/// 3.4: holdfast's connection preface is the 24 bytes, then SETTINGS as its first frame;
/// 6.5.2: as a client it turns push off. A request then goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_4_holdfast_sends_its_preface_then_settings() {
    let setup = Setup::start().await;
    let mut client = setup.post("/preface").await;
    // `accept` checks the 24 bytes and that SETTINGS comes first.
    let mut conn = setup.origin.accept().await;
    assert_eq!(conn.peer.enable_push, Some(false), "6.5.2: {:?}", conn.seen);
    let request = conn.request("3.4").await;
    conn.answer(request.stream, "/preface").await;
    expect_answered(&mut client, "/preface", "3.4").await;
    expect_no_error(&mut conn, "3.4").await;
}

/// 3.4: the server's preface is a SETTINGS frame; another first frame makes it invalid,
/// a connection error PROTOCOL_ERROR (the GOAWAY may be left out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_4_origin_preface_other_than_settings_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut client = setup.post("/preface").await;
    let mut conn = setup.origin.accept_raw().await;
    conn.ping(*b"notfirst").await;
    expect_closed_goaway_optional(&mut conn, ErrorCode::ProtocolError, "3.4 PING first").await;
    let answered = conn.seen.iter().any(|e| matches!(e, Event::Ping { ack: true, .. }));
    assert!(!answered, "3.4: holdfast answered a PING sent in place of SETTINGS");
    setup.expect_502(&mut client, "3.4 PING first").await;
    setup.expect_served_fresh("3.4 PING first").await;
}

/// 3.4: an origin that answers in HTTP/1.1 sent no valid preface: a connection error
/// PROTOCOL_ERROR, the GOAWAY optional (the peer does not speak HTTP/2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_4_origin_answering_http1_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut client = setup.post("/preface").await;
    let mut conn = setup.origin.accept_raw().await;
    let http1 = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    conn.send(http1).await.expect("send");
    expect_closed_goaway_optional(&mut conn, ErrorCode::ProtocolError, "3.4 HTTP/1.1").await;
    setup.expect_502(&mut client, "3.4 HTTP/1.1").await;
    setup.expect_served_fresh("3.4 HTTP/1.1").await;
}

/// 3.4: the server's preface is its own SETTINGS; a SETTINGS ACK in its place is not
/// one: a connection error PROTOCOL_ERROR (the GOAWAY may be left out). A SETTINGS
/// follows the ACK at once, so a holdfast that let the ACK pass would go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_4_settings_ack_as_the_origin_preface_is_a_connection_error() {
    let setup = Setup::start().await;
    let mut client = setup.post("/preface").await;
    let mut conn = setup.origin.accept_raw().await;
    let mut bytes = raw_frame(SETTINGS, ACK, 0, &[]);
    bytes.extend(raw_frame(SETTINGS, 0, 0, &[]));
    conn.send(&bytes).await.expect("send");
    expect_closed_goaway_optional(&mut conn, ErrorCode::ProtocolError, "3.4 ACK first").await;
    setup.expect_502(&mut client, "3.4 ACK first").await;
    setup.expect_served_fresh("3.4 ACK first").await;
}

// 4.1, 4.2: frame format and size.

/// 4.1: flags a frame type does not define are ignored (HEADERS with 0x2, 0x10, 0x40
/// and 0x80 set; DATA with all but END_STREAM and PADDED; PING with all but ACK).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_1_undefined_flags_are_ignored() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/flags").await;
    conn.send_frame(PING, 0xfe, 0, b"flagged!").await;
    conn.until(
        "4.1 PING with flags it does not define",
        |e| matches!(e, Event::Ping { ack: true, payload } if payload == b"flagged!"),
    )
    .await;
    answer_raw(&mut conn, stream, "/flags", END_HEADERS | 0xd2, END_STREAM | 0xf6).await;
    expect_answered(&mut client, "/flags", "4.1").await;
    expect_no_error(&mut conn, "4.1").await;
}

/// 4.1: the reserved bit of a stream identifier is ignored on receipt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_1_reserved_bit_of_the_stream_id_is_ignored() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/reserved-bit").await;
    let marked = stream | 0x8000_0000;
    answer_raw(&mut conn, marked, "/reserved-bit", END_HEADERS, END_STREAM).await;
    expect_answered(&mut client, "/reserved-bit", "4.1").await;
    expect_no_error(&mut conn, "4.1").await;
}

/// 4.2: holdfast sends no frame larger than the origin's SETTINGS_MAX_FRAME_SIZE (the
/// default, 16,384: the reader refuses anything larger), cutting a large body into
/// frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_frames_from_holdfast_stay_within_the_origin_max_frame_size() {
    let setup = Setup::start().await;
    let mut client = RawClient::connect(setup.proxy.addr()).await;
    let body = vec![b'b'; 100_000];
    let head = "POST /large HTTP/1.1\r\nHost: holdfast.test\r\nContent-Length: 100000\r\n\r\n";
    client.send([head.as_bytes(), &body].concat()).await;
    let mut conn = setup.origin.accept().await;
    let request = conn.request("4.2").await;
    assert_eq!(request.body.len(), 100_000);
    let frames = conn
        .seen
        .iter()
        .filter(|e| matches!(e, Event::Data { stream, .. } if *stream == request.stream))
        .count();
    assert!(frames >= 7, "100,000 bytes in {frames} DATA frames");
    conn.answer(request.stream, "/large").await;
    expect_answered(&mut client, "/large", "4.2").await;
}

/// 4.2: a DATA frame larger than our SETTINGS_MAX_FRAME_SIZE (holdfast's default,
/// 16,384) is a FRAME_SIZE_ERROR; for DATA the section allows a stream or a connection
/// error, and either passes. The client's stream, its head relayed, is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_data_over_our_max_frame_size_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.relayed("/too-large", &[]).await;
    let max = conn.peer.max_frame_size.unwrap_or(frame::DEFAULT_MAX_FRAME_SIZE) as usize;
    conn.send_frame(DATA, END_STREAM, stream, &vec![b'x'; max + 1]).await;
    let rule = "4.2 DATA over the max frame size";
    let scope =
        conn.expect_stream_or_connection_error(stream, ErrorCode::FrameSizeError, rule).await;
    expect_cut(&mut client, 1, rule).await;
    setup.expect_served_after(scope, &mut conn, rule).await;
}

/// 4.2: a frame carrying a field block larger than SETTINGS_MAX_FRAME_SIZE is a
/// connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_headers_over_our_max_frame_size_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/too-large").await;
    let max = conn.peer.max_frame_size.unwrap_or(frame::DEFAULT_MAX_FRAME_SIZE) as usize;
    let mut block = status_200_then(&[]);
    hpack_literal(b"x-large", &vec![b'v'; max], &mut block);
    send_block(&mut conn, stream, &block).await;
    setup.connection_error(conn, client, ErrorCode::FrameSizeError, "4.2 HEADERS").await;
}

/// 4.2: a frame too small for the fields its flags announce is a FRAME_SIZE_ERROR, a
/// connection error for a frame carrying a field block (HEADERS with PRIORITY and 3
/// bytes of payload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_2_headers_too_short_for_its_priority_fields_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/short").await;
    conn.send_frame(HEADERS, END_HEADERS | PRIORITY_FLAG, stream, &[0, 0, 0]).await;
    setup.connection_error(conn, client, ErrorCode::FrameSizeError, "4.2 short HEADERS").await;
}

// 4.3 and RFC 7541: field blocks and HPACK.

/// Sends a response head of `block` as it is (END_STREAM) and checks it is a
/// connection error COMPRESSION_ERROR (RFC 9113 4.3: a field block that cannot be
/// decoded), with a 502 and the next request on a new connection.
async fn expect_compression_error(path: &str, block: &[u8], rule: &str) {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first(path).await;
    send_block(&mut conn, stream, block).await;
    setup.connection_error(conn, client, ErrorCode::CompressionError, rule).await;
}

/// RFC 7541 2.3.3: an index past the static and dynamic tables is a decoding error,
/// which RFC 9113 4.3 makes a connection error COMPRESSION_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_index_past_the_tables_is_a_compression_error() {
    // Indexed field 70: 61 static entries, and the dynamic table is empty.
    let mut rest = Vec::new();
    hpack_int(70, 7, 0x80, &mut rest);
    expect_compression_error("/index-70", &status_200_then(&rest), "4.3 index 70").await;
}

/// RFC 7541 6.1: index 0 is a decoding error: COMPRESSION_ERROR (RFC 9113 4.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_index_zero_is_a_compression_error() {
    expect_compression_error("/index-0", &status_200_then(&[0x80]), "4.3 index 0").await;
}

/// RFC 7541 6.3 and 4.2: a dynamic table size update above the limit we allow (the
/// default 4,096: holdfast sets no SETTINGS_HEADER_TABLE_SIZE) is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_size_update_over_the_limit_is_a_compression_error() {
    let mut block = Vec::new();
    hpack_int(4097, 5, 0x20, &mut block);
    block.push(0x88);
    expect_compression_error("/update-4097", &block, "4.3 size update over 4,096").await;
}

/// RFC 7541 4.2: a dynamic table size update comes at the start of a block; one after
/// a field is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_size_update_after_a_field_is_a_compression_error() {
    let mut rest = Vec::new();
    hpack_int(0, 5, 0x20, &mut rest);
    expect_compression_error("/late-update", &status_200_then(&rest), "4.3 late size update").await;
}

/// RFC 7541 4.2, 6.3: size updates within the limit at the start of a block are
/// accepted (two of them: down to 0, back up to 4,096, so the origin's encoder, whose
/// table is empty, stays in step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_size_updates_within_the_limit_are_accepted() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/updates").await;
    let mut block = Vec::new();
    hpack_int(0, 5, 0x20, &mut block);
    hpack_int(4096, 5, 0x20, &mut block);
    block.push(0x88);
    let body = served("/updates");
    hpack_literal(b"content-length", body.len().to_string().as_bytes(), &mut block);
    hpack_literal(b"x-path", b"/updates", &mut block);
    conn.send_frame(HEADERS, END_HEADERS, stream, &block).await;
    conn.data(stream, body.as_bytes(), true).await;
    expect_answered(&mut client, "/updates", "4.3 size updates").await;
    expect_no_error(&mut conn, "4.3 size updates").await;
    setup.expect_served_on(&mut conn, "4.3 size updates").await;
}

/// RFC 7541 5.2: a Huffman-coded string holding the EOS symbol is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_huffman_eos_is_a_compression_error() {
    // Literal without indexing, name `server` (static 54), a 4-byte Huffman value of 32
    // one bits: EOS (30 ones) and 2 bits more.
    let mut rest = Vec::new();
    hpack_int(54, 4, 0x00, &mut rest);
    rest.extend_from_slice(&[0x84, 0xff, 0xff, 0xff, 0xff]);
    expect_compression_error("/eos", &status_200_then(&rest), "4.3 Huffman EOS").await;
}

/// RFC 7541 5.2: Huffman padding longer than 7 bits is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_huffman_padding_over_7_bits_is_a_compression_error() {
    // "a" (00011), then 11 one bits of padding over two bytes.
    let mut rest = Vec::new();
    hpack_int(54, 4, 0x00, &mut rest);
    rest.extend_from_slice(&[0x82, 0x1f, 0xff]);
    expect_compression_error("/long-pad", &status_200_then(&rest), "4.3 long padding").await;
}

/// RFC 7541 5.2: Huffman padding that is not the top bits of EOS (ones) is a decoding
/// error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_huffman_padding_not_eos_is_a_compression_error() {
    // "a" (00011), then 000 as padding.
    let mut rest = Vec::new();
    hpack_int(54, 4, 0x00, &mut rest);
    rest.extend_from_slice(&[0x81, 0x18]);
    expect_compression_error("/zero-pad", &status_200_then(&rest), "4.3 padding of zeros").await;
}

/// RFC 7541 5.2, RFC 9113 4.3: a string whose length runs past the end of the block is
/// a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_string_past_the_block_is_a_compression_error() {
    let mut rest = Vec::new();
    hpack_int(54, 4, 0x00, &mut rest);
    rest.extend_from_slice(&[10, b'a', b'b']);
    expect_compression_error("/short", &status_200_then(&rest), "4.3 string past the block").await;
}

/// RFC 7541 5.1: an integer past what the decoder can hold is a decoding error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_integer_overflow_is_a_compression_error() {
    // An indexed field whose index runs on for ten continuation bytes: far past 2^32.
    let rest = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    expect_compression_error("/huge", &status_200_then(&rest), "4.3 integer overflow").await;
}

/// 4.3: every field block is decoded, even one whose response is refused as malformed,
/// so the dynamic table stays in step: a field the refused head added to the table is
/// read by index in the next response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_blocks_of_malformed_responses_still_update_the_table() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/malformed").await;
    // The origin's encoder adds x-table to its dynamic table; `connection` makes the
    // head malformed (8.2.2).
    let head = [(":status", "200"), ("x-table", "kept-in-step"), ("connection", "close")];
    conn.headers(stream, &head, true).await;
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, "4.3").await;
    // Now x-table goes by index.
    let (mut client, stream) = setup.another(&mut conn, "/indexed").await;
    conn.headers(stream, &[(":status", "200"), ("x-table", "kept-in-step")], true).await;
    let response = client.response().await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("x-table"), Some("kept-in-step"), "{response:?}");
}

/// 4.3: a field block on a stream holdfast reset is decoded all the same (the stream is
/// gone, the table is the connection's): a field it added is read by index in the
/// next response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_blocks_on_streams_holdfast_reset_still_update_the_table() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/reset").await;
    // A stream error first (6.9: a WINDOW_UPDATE of 0 on a stream): holdfast resets it.
    conn.send_frame(WINDOW_UPDATE, 0, stream, &[0, 0, 0, 0]).await;
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, "4.3").await;
    // The origin had its head on the way: holdfast ignores it (5.1, closed) but decodes it.
    let seen = conn.seen.len();
    conn.headers(stream, &[(":status", "200"), ("x-table", "kept-in-step")], true).await;
    let (mut client, stream) = setup.another(&mut conn, "/indexed").await;
    conn.headers(stream, &[(":status", "200"), ("x-table", "kept-in-step")], true).await;
    let response = client.response().await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("x-table"), Some("kept-in-step"), "{response:?}");
    expect_no_error_after(&mut conn, seen, "4.3 after the late head").await;
}

/// RFC 7541 4.3, 4.4: entries are evicted oldest first as new ones need room, and an
/// entry larger than the table empties it: holdfast's table follows the origin's, so
/// every field read by index afterwards is the right one. The blocks are written by
/// hand, sizes counted here (an entry is its name, its value and 32 bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_eviction_keeps_the_tables_in_step() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/evict").await;
    // Literal with incremental indexing, new name: 0x40, name, value.
    let add = |name: &[u8], value: &[u8], block: &mut Vec<u8>| {
        block.push(0x40);
        hpack_int(name.len(), 7, 0, block);
        block.extend_from_slice(name);
        hpack_int(value.len(), 7, 0, block);
        block.extend_from_slice(value);
    };
    // Three entries of 1,000 + 10 + 32 bytes: 3,126 of 4,096.
    let big = vec![b'v'; 1000];
    let mut block = vec![0x88];
    add(b"x-entry-01", &big, &mut block);
    add(b"x-entry-02", &big, &mut block);
    add(b"x-entry-03", &big, &mut block);
    // A fourth makes 4,168: the oldest (x-entry-01) goes.
    add(b"x-entry-04", &big, &mut block);
    send_block(&mut conn, stream, &block).await;
    let response = client.response().await;
    assert_eq!(response.header("x-entry-04").map(str::len), Some(1000), "{response:?}");
    // Newest first from index 62: 04, 03, 02; 65 is past the table.
    let (mut client, stream) = setup.another(&mut conn, "/indexed").await;
    let mut block = vec![0x88];
    hpack_int(64, 7, 0x80, &mut block);
    hpack_int(62, 7, 0x80, &mut block);
    send_block(&mut conn, stream, &block).await;
    let response = client.response().await;
    assert_eq!(response.status, 200);
    assert!(response.header("x-entry-02").is_some(), "index 64: {response:?}");
    assert!(response.header("x-entry-04").is_some(), "index 62: {response:?}");
    assert!(response.header("x-entry-01").is_none(), "evicted: {response:?}");
    // An entry larger than the whole table empties it and is not added (4.4): index 62
    // is then past the table.
    let (client, stream) = setup.another(&mut conn, "/too-big").await;
    let mut block = vec![0x88];
    add(b"x-huge", &vec![b'h'; 4096], &mut block);
    hpack_int(62, 7, 0x80, &mut block);
    send_block(&mut conn, stream, &block).await;
    setup.connection_error(conn, client, ErrorCode::CompressionError, "4.4 emptied table").await;
}

/// RFC 7541 6.2.3: a field the origin sent as never indexed goes on to the client the
/// same way (an intermediary keeps the representation, so that no hop puts a secret
/// in a table a compression attack could probe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_never_indexed_response_fields_stay_never_indexed() {
    let setup = Setup::start().await;
    let mut client = Wire::connect(setup.proxy.addr()).await;
    client.get(1, "/secret").await;
    let mut conn = setup.origin.accept().await;
    let request = conn.request("6.2.3").await;
    // :status 200, then x-secret as a never-indexed literal with a new name.
    let mut block = status_200_then(&[0x10]);
    hpack_int(8, 7, 0, &mut block);
    block.extend_from_slice(b"x-secret");
    hpack_int(6, 7, 0, &mut block);
    block.extend_from_slice(b"s3cr3t");
    send_block(&mut conn, request.stream, &block).await;
    let response = client.response(1).await;
    assert_eq!(response.field("x-secret"), Some("s3cr3t"));
    assert!(
        client.never_indexed.contains(&(1, "x-secret".to_string())),
        "6.2.3: x-secret went on with indexing: {:?}",
        client.never_indexed
    );
}

/// RFC 7541 6.2.3: a field a client sent as never indexed goes on to the origin the
/// same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_hpack_never_indexed_request_fields_stay_never_indexed() {
    let setup = Setup::start().await;
    let mut client = Wire::connect(setup.proxy.addr()).await;
    let mut block = client.block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/secret"),
        (":authority", "holdfast.test"),
    ]);
    let mut secret = vec![0x10];
    hpack_int(8, 7, 0, &mut secret);
    secret.extend_from_slice(b"x-secret");
    hpack_int(6, 7, 0, &mut secret);
    secret.extend_from_slice(b"s3cr3t");
    block = [&block[..], &secret].concat().into();
    client.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block).await;
    let mut conn = setup.origin.accept().await;
    let request = conn.request("6.2.3").await;
    assert_eq!(request.field("x-secret"), Some("s3cr3t"));
    assert!(
        conn.never_indexed.contains(&(request.stream, "x-secret".to_string())),
        "6.2.3: x-secret went on with indexing: {:?}",
        conn.never_indexed
    );
    conn.answer(request.stream, "/secret").await;
    assert_eq!(client.response(1).await.status, 200);
}

/// RFC 7541 4.2, RFC 9113 4.3.1 and 6.5.2: once holdfast has acknowledged the origin's
/// SETTINGS_HEADER_TABLE_SIZE of 0, its encoder keeps nothing in its dynamic table:
/// every request head decodes with a table of 0 bytes (the reader's decoder refuses
/// an entry, or a size update, past it; and the first block after the change must
/// carry the size update).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_3_1_origin_header_table_size_of_0_is_honoured() {
    let setup = Setup::start().await;
    let none = Settings { header_table_size: Some(0), ..Settings::default() };
    let (mut client, mut conn, stream) = setup.first_with("/table-0", &none).await;
    conn.answer(stream, "/table-0").await;
    expect_answered(&mut client, "/table-0", "4.3.1").await;
    for path in ["/table-0/a", "/table-0/b"] {
        let (mut client, stream) = setup.another(&mut conn, path).await;
        conn.answer(stream, path).await;
        expect_answered(&mut client, path, "4.3.1").await;
    }
}

// 5.1: stream states.

/// 5.1, 5.1.1: HEADERS on a stream holdfast never opened (idle: an odd id above its
/// streams) is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_headers_on_an_idle_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/idle").await;
    conn.headers(stream + 2, &[(":status", "200")], true).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "5.1 HEADERS idle").await;
}

/// 5.1.1: a server opens only even streams, and holdfast takes no push: HEADERS on an
/// even stream is an unexpected stream identifier, a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_1_headers_on_an_even_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/even").await;
    conn.headers(2, &[(":status", "200")], true).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "5.1.1 even stream").await;
}

/// 5.1: DATA on an idle stream is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_data_on_an_idle_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/idle").await;
    conn.data(stream + 2, b"no stream", true).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "5.1 DATA idle").await;
}

/// 5.1, 6.4: RST_STREAM on an idle stream is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_rst_stream_on_an_idle_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/idle").await;
    conn.reset(stream + 2, ErrorCode::Cancel).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "5.1 RST_STREAM idle").await;
}

/// 5.1: WINDOW_UPDATE on an idle stream is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_window_update_on_an_idle_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/idle").await;
    conn.window_update(stream + 2, 100).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "5.1 WINDOW_UPDATE idle").await;
}

/// 5.1: PRIORITY is allowed on an idle stream and does not open it: holdfast's next
/// stream is still the one after its last, and the response comes whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_priority_on_an_idle_stream_is_allowed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/priority").await;
    let dependency = StreamDependency { exclusive: false, depends_on: 0, weight: 15 };
    let idle = stream + 4;
    conn.write(&Frame::Priority(frame::Priority { stream_id: idle, dependency })).await;
    conn.answer(stream, "/priority").await;
    expect_answered(&mut client, "/priority", "5.1 PRIORITY idle").await;
    expect_no_error(&mut conn, "5.1 PRIORITY idle").await;
    let (mut client, next) = setup.another(&mut conn, "/after-priority").await;
    assert_eq!(next, stream + 2, "5.1.1: the next stream after the last holdfast opened");
    conn.answer(next, "/after-priority").await;
    expect_answered(&mut client, "/after-priority", "5.1 PRIORITY idle").await;
}

/// 5.1: after the origin's END_STREAM the stream is closed (holdfast's request ended
/// too); DATA on it is STREAM_CLOSED, a connection error by 5.1 ("closed") and a
/// stream error by 6.1: either passes. The client had the whole response by then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_data_after_end_stream_is_stream_closed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/ended").await;
    conn.answer(stream, "/ended").await;
    expect_answered(&mut client, "/ended", "5.1 DATA after END_STREAM").await;
    conn.data(stream, b"after the end", false).await;
    let rule = "5.1 DATA after END_STREAM";
    let scope = conn.expect_stream_or_connection_error(stream, ErrorCode::StreamClosed, rule).await;
    setup.expect_served_after(scope, &mut conn, rule).await;
}

/// 5.1: HEADERS after the origin's END_STREAM (trailers on a closed stream) is
/// STREAM_CLOSED, a connection error (5.1, "closed") or a stream error (5.1,
/// "half-closed (remote)"): either passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_headers_after_end_stream_is_stream_closed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/ended").await;
    conn.answer(stream, "/ended").await;
    expect_answered(&mut client, "/ended", "5.1 HEADERS after END_STREAM").await;
    conn.headers(stream, &[("x-late", "1")], true).await;
    let rule = "5.1 HEADERS after END_STREAM";
    let scope = conn.expect_stream_or_connection_error(stream, ErrorCode::StreamClosed, rule).await;
    setup.expect_served_after(scope, &mut conn, rule).await;
}

/// 5.1: after the peer's RST_STREAM, any frame but PRIORITY on the stream is a stream
/// error STREAM_CLOSED; 5.4.2: holdfast answers the origin's RST_STREAM itself with
/// no RST_STREAM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_data_after_the_origin_reset_the_stream_is_stream_closed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/reset").await;
    conn.reset(stream, ErrorCode::InternalError).await;
    setup.expect_502(&mut client, "5.1 after RST_STREAM").await;
    conn.expect_alive("5.4.2").await;
    let answered = conn.seen.iter().any(|e| matches!(e, Event::Reset { .. }));
    assert!(!answered, "5.4.2: holdfast answered a RST_STREAM with one: {:?}", conn.seen);
    conn.data(stream, b"after the reset", false).await;
    conn.expect_reset(stream, ErrorCode::StreamClosed, "5.1 DATA after RST_STREAM").await;
    setup.expect_served_on(&mut conn, "5.1 DATA after RST_STREAM").await;
}

/// 5.1: WINDOW_UPDATE and RST_STREAM may arrive on a stream for a while after it
/// closed (the origin sent them before it saw holdfast's END_STREAM): no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_window_update_and_rst_stream_after_the_close_are_allowed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/closed").await;
    conn.answer(stream, "/closed").await;
    expect_answered(&mut client, "/closed", "5.1 closed").await;
    conn.window_update(stream, 1000).await;
    conn.reset(stream, ErrorCode::NoError).await;
    expect_no_error(&mut conn, "5.1 closed").await;
    setup.expect_served_on(&mut conn, "5.1 closed").await;
}

/// 5.1: after holdfast reset a stream (its client went away: CANCEL), frames the origin
/// sent on it before seeing the reset are ignored, and the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_frames_after_holdfast_reset_the_stream_are_ignored() {
    let setup = Setup::start().await;
    let mut client = Wire::connect(setup.proxy.addr()).await;
    client.get(1, "/abandoned").await;
    let mut conn = setup.origin.accept().await;
    let request = conn.request("5.1").await;
    client.reset(1, ErrorCode::Cancel).await;
    conn.until(
        "5.1: holdfast resets the stream its client left",
        |e| matches!(e, Event::Reset { stream, .. } if *stream == request.stream),
    )
    .await;
    conn.answer(request.stream, "/abandoned").await;
    conn.window_update(request.stream, 100).await;
    conn.expect_alive("5.1 frames after holdfast's reset").await;
    let goaway = conn.seen.iter().any(|e| matches!(e, Event::GoAway { .. }));
    assert!(!goaway, "5.1: {:?}", conn.seen);
    setup.expect_served_on(&mut conn, "5.1 frames after holdfast's reset").await;
}

/// 5.1: DATA before the response head (the stream expects HEADERS first) makes the
/// response malformed (8.1): a stream error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_data_before_the_response_head_is_malformed() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/headless").await;
    conn.data(stream, b"no head", true).await;
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, "8.1 DATA first").await;
}

// 5.1.2: stream concurrency.

/// 5.1.2: holdfast opens no more streams at once than the origin's
/// SETTINGS_MAX_CONCURRENT_STREAMS: with a limit of 1 and a stream open, a second
/// request goes on a connection of its own, none on the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_2_holdfast_opens_no_more_streams_than_the_origin_allows() {
    let setup = Setup::start().await;
    let one = Settings { max_concurrent_streams: Some(1), ..Settings::default() };
    let (mut first, mut conn, stream) = setup.first_with("/one", &one).await;
    let mut second = setup.post("/two").await;
    let mut other = setup.origin.accept_with(&one).await;
    let request = other.request("5.1.2: the second request").await;
    assert_eq!(request.field(":path"), Some("/two"));
    conn.expect_alive("5.1.2").await;
    let opened: Vec<&Event> = conn
        .seen
        .iter()
        .filter(|e| matches!(e, Event::Fields { stream: s, .. } if *s != stream))
        .collect();
    assert!(opened.is_empty(), "5.1.2: a second stream while the first was open: {opened:?}");
    other.answer(request.stream, "/two").await;
    expect_answered(&mut second, "/two", "5.1.2").await;
    conn.answer(stream, "/one").await;
    expect_answered(&mut first, "/one", "5.1.2").await;
}

// 5.5: extending HTTP/2.

/// 5.5: frames of unknown types are ignored, on stream 0 and on the response's stream,
/// before and between its frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_5_unknown_frame_types_are_ignored() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/unknown").await;
    conn.send_frame(UNKNOWN_TYPE, 0xff, 0, b"on the connection").await;
    conn.send_frame(UNKNOWN_TYPE, 0, stream, b"before the head").await;
    let body = served("/unknown");
    let length = body.len().to_string();
    let head = [(":status", "200"), ("content-length", length.as_str()), ("x-path", "/unknown")];
    conn.headers(stream, &head, false).await;
    conn.send_frame(UNKNOWN_TYPE, 0x1, stream, b"between").await;
    conn.data(stream, body.as_bytes(), true).await;
    expect_answered(&mut client, "/unknown", "5.5").await;
    expect_no_error(&mut conn, "5.5").await;
}

/// 5.5, 6.10: an unknown frame type inside a field block is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_5_unknown_frame_inside_a_field_block_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/unknown").await;
    let block = conn.block(&[(":status", "200"), ("x-path", "/unknown")]);
    let (first, rest) = block.split_at(1);
    conn.send_frame(HEADERS, END_STREAM, stream, first).await;
    conn.send_frame(UNKNOWN_TYPE, 0, stream, b"inside").await;
    conn.send_frame(CONTINUATION, END_HEADERS, stream, rest).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "5.5 inside a block").await;
}

// 6.1: DATA.

/// 6.1: DATA on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_1_data_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/data-0").await;
    conn.send_frame(DATA, 0, 0, b"no stream").await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.1 DATA on 0").await;
}

/// 6.1: padding as long as the payload or longer is a connection error PROTOCOL_ERROR;
/// the client's stream, its head relayed, is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_1_data_padding_past_the_payload_is_a_connection_error() {
    let setup = Setup::start().await;
    let (mut client, conn, stream) = setup.relayed("/padding", &[]).await;
    let mut conn = conn;
    // Pad Length 4 in a payload of 4: the padding would take the Pad Length byte too.
    conn.send_frame(DATA, PADDED | END_STREAM, stream, &[4, b'a', b'b', b'c']).await;
    conn.expect_goaway(ErrorCode::ProtocolError, "6.1 padding").await;
    expect_cut(&mut client, 1, "6.1 padding").await;
    setup.expect_served_fresh("6.1 padding").await;
}

/// 6.1: padding is removed: the client gets the data alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_1_padded_data_reaches_the_client_without_its_padding() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/padded").await;
    let body = served("/padded");
    let length = body.len().to_string();
    let head = [(":status", "200"), ("content-length", length.as_str()), ("x-path", "/padded")];
    conn.headers(stream, &head, false).await;
    let mut payload = vec![20];
    payload.extend_from_slice(body.as_bytes());
    payload.extend_from_slice(&[0; 20]);
    conn.send_frame(DATA, PADDED | END_STREAM, stream, &payload).await;
    expect_answered(&mut client, "/padded", "6.1 padded").await;
    expect_no_error(&mut conn, "6.1 padded").await;
}

// 6.2: HEADERS.

/// 6.2: HEADERS on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_2_headers_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/headers-0").await;
    send_block(&mut conn, 0, &status_200_then(&[])).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.2 HEADERS on 0").await;
}

/// 6.2: HEADERS padding as long as what follows Pad Length is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_2_headers_padding_past_the_payload_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/padding").await;
    let mut payload = vec![2];
    payload.extend(status_200_then(&[]));
    conn.send_frame(HEADERS, END_HEADERS | END_STREAM | PADDED, stream, &payload).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.2 padding").await;
}

/// 6.2: HEADERS with padding and priority fields is read past both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_2_headers_with_padding_and_priority_is_read() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/padded-head").await;
    let body = served("/padded-head");
    let length = body.len().to_string();
    let block =
        conn.block(&[(":status", "200"), ("content-length", &length), ("x-path", "/padded-head")]);
    // Pad Length 6, then the stream dependency (0, not exclusive) and weight 16.
    let mut payload = vec![6, 0, 0, 0, 0, 15];
    payload.extend_from_slice(&block);
    payload.extend_from_slice(&[0; 6]);
    conn.send_frame(HEADERS, END_HEADERS | PADDED | PRIORITY_FLAG, stream, &payload).await;
    conn.data(stream, body.as_bytes(), true).await;
    expect_answered(&mut client, "/padded-head", "6.2 padding and priority").await;
    expect_no_error(&mut conn, "6.2 padding and priority").await;
}

/// RFC 7540 5.3.1 (kept by RFC 9113 5.3.2): a stream cannot depend on itself; a
/// response HEADERS that makes it is a stream error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_3_1_headers_depending_on_itself_is_a_stream_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/self").await;
    let block = conn.block(&[(":status", "200")]);
    let mut payload = stream.to_be_bytes().to_vec();
    payload.push(15);
    payload.extend_from_slice(&block);
    conn.send_frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, stream, &payload).await;
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, "5.3.1").await;
}

// 6.3: PRIORITY.

/// 6.3: PRIORITY on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_3_priority_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/priority-0").await;
    conn.send_frame(PRIORITY, 0, 0, &[0, 0, 0, 1, 15]).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.3 PRIORITY on 0").await;
}

/// 6.3: a PRIORITY frame of a length other than 5 is a stream error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_3_priority_of_wrong_length_is_a_stream_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/priority").await;
    conn.send_frame(PRIORITY, 0, stream, &[0, 0, 0, 0]).await;
    setup.stream_error(&mut conn, stream, client, ErrorCode::FrameSizeError, "6.3 length").await;
}

/// RFC 7540 5.3.1: a PRIORITY frame making a stream depend on itself is a stream error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_3_1_priority_depending_on_itself_is_a_stream_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/self").await;
    let mut payload = stream.to_be_bytes().to_vec();
    payload.push(15);
    conn.send_frame(PRIORITY, 0, stream, &payload).await;
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, "5.3.1 PRIORITY").await;
}

// 6.4: RST_STREAM.

/// 6.4: RST_STREAM on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_4_rst_stream_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/rst-0").await;
    conn.send_frame(RST_STREAM, 0, 0, &ErrorCode::Cancel.to_u32().to_be_bytes()).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.4 RST_STREAM on 0").await;
}

/// 6.4: a RST_STREAM of a length other than 4 is a connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_4_rst_stream_of_wrong_length_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/rst").await;
    conn.send_frame(RST_STREAM, 0, stream, &[0, 0, 0, 0, 8]).await;
    setup.connection_error(conn, client, ErrorCode::FrameSizeError, "6.4 length").await;
}

/// 6.4, 5.4.2: the origin's RST_STREAM ends that stream alone: the client gets a 502,
/// holdfast sends no RST_STREAM back, and the connection carries the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_4_rst_stream_from_the_origin_ends_its_stream_only() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/reset").await;
    conn.reset(stream, ErrorCode::InternalError).await;
    setup.expect_502(&mut client, "6.4").await;
    expect_no_error(&mut conn, "6.4").await;
    setup.expect_served_on(&mut conn, "6.4").await;
}

/// Section 7: an unknown error code has no special meaning: a RST_STREAM carrying one
/// fails the stream as any error would (a 502, never sent again), and the connection
/// goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_unknown_error_code_is_no_special_case() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/unknown-code").await;
    conn.send_frame(RST_STREAM, 0, stream, &0xbeef_u32.to_be_bytes()).await;
    setup.expect_502(&mut client, "7 unknown code").await;
    expect_no_error(&mut conn, "7 unknown code").await;
    setup.expect_served_on(&mut conn, "7 unknown code").await;
}

// 6.5: SETTINGS.

/// 6.5.3: a SETTINGS frame from the origin is acknowledged with an empty SETTINGS ACK
/// (the one at the connection's start too: `accept` waits for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_3_settings_are_acknowledged() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/settings").await;
    let acks = |conn: &Wire| conn.seen.iter().filter(|e| matches!(e, Event::SettingsAck)).count();
    let before = acks(&conn);
    conn.settings(&Settings { max_concurrent_streams: Some(50), ..Settings::default() }).await;
    conn.until("6.5.3 SETTINGS ACK", |e| matches!(e, Event::SettingsAck)).await;
    assert_eq!(acks(&conn), before + 1);
    conn.answer(stream, "/settings").await;
    expect_answered(&mut client, "/settings", "6.5.3").await;
    expect_no_error(&mut conn, "6.5.3").await;
}

/// 6.5.3: the values of a SETTINGS frame are processed in the order they come, the last
/// one of a parameter holding: SETTINGS_INITIAL_WINDOW_SIZE of 10 then of 100,000 in
/// one frame lets holdfast send a body of 50,000 bytes without any WINDOW_UPDATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_3_settings_values_are_processed_in_order() {
    let setup = Setup::start().await;
    let mut client = post_body(&setup, "/in-order", &vec![b'o'; 50_000]).await;
    let closed = Settings { initial_window_size: Some(0), ..Settings::default() };
    let mut conn = setup.origin.accept_with(&closed).await;
    let (stream, _, _) = conn.request_head("6.5.3").await;
    let mut payload = setting(SETTINGS_INITIAL_WINDOW_SIZE, 10);
    payload.extend(setting(SETTINGS_INITIAL_WINDOW_SIZE, 100_000));
    conn.send_frame(SETTINGS, 0, 0, &payload).await;
    let mut got = 0;
    data_until(&mut conn, stream, &mut got, 50_000, 100_000, "6.5.3 in order").await;
    conn.answer(stream, "/in-order").await;
    expect_answered(&mut client, "/in-order", "6.5.3 in order").await;
}

/// Sends a SETTINGS frame of `payload` once the request is in and checks it is a
/// connection error `code`.
async fn expect_settings_error(
    path: &str,
    flags: u8,
    stream_id: u32,
    payload: &[u8],
    code: ErrorCode,
    rule: &str,
) {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first(path).await;
    conn.send_frame(SETTINGS, flags, stream_id, payload).await;
    setup.connection_error(conn, client, code, rule).await;
}

/// 6.5: SETTINGS on a stream other than 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_settings_with_a_stream_id_is_a_connection_error() {
    let payload = setting(SETTINGS_INITIAL_WINDOW_SIZE, 1000);
    expect_settings_error("/s", 0, 1, &payload, ErrorCode::ProtocolError, "6.5 stream").await;
}

/// 6.5: a SETTINGS length that is not a multiple of 6 is a connection error
/// FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_settings_of_bad_length_is_a_frame_size_error() {
    let payload = setting(SETTINGS_INITIAL_WINDOW_SIZE, 1000);
    let rule = "6.5 length 5";
    expect_settings_error("/s", 0, 0, &payload[..5], ErrorCode::FrameSizeError, rule).await;
}

/// 6.5: a SETTINGS ACK with a payload is a connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_settings_ack_with_a_payload_is_a_frame_size_error() {
    let payload = setting(SETTINGS_INITIAL_WINDOW_SIZE, 1000);
    expect_settings_error("/s", ACK, 0, &payload, ErrorCode::FrameSizeError, "6.5 ACK").await;
}

/// 6.5.2: a server may not turn SETTINGS_ENABLE_PUSH on; a 1 from the origin is a
/// connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_enable_push_of_1_from_an_origin_is_a_connection_error() {
    let payload = setting(SETTINGS_ENABLE_PUSH, 1);
    expect_settings_error("/s", 0, 0, &payload, ErrorCode::ProtocolError, "6.5.2 push 1").await;
}

/// 6.5.2: SETTINGS_ENABLE_PUSH other than 0 or 1 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_enable_push_of_2_is_a_connection_error() {
    let payload = setting(SETTINGS_ENABLE_PUSH, 2);
    expect_settings_error("/s", 0, 0, &payload, ErrorCode::ProtocolError, "6.5.2 push 2").await;
}

/// 6.5.2: SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 is a connection error
/// FLOW_CONTROL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_initial_window_size_over_the_max_is_a_flow_control_error() {
    let payload = setting(SETTINGS_INITIAL_WINDOW_SIZE, 1 << 31);
    let rule = "6.5.2 window 2^31";
    expect_settings_error("/s", 0, 0, &payload, ErrorCode::FlowControlError, rule).await;
}

/// 6.5.2: SETTINGS_MAX_FRAME_SIZE below 2^14 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_max_frame_size_below_the_min_is_a_connection_error() {
    let payload = setting(SETTINGS_MAX_FRAME_SIZE, (1 << 14) - 1);
    let rule = "6.5.2 max frame size 2^14-1";
    expect_settings_error("/s", 0, 0, &payload, ErrorCode::ProtocolError, rule).await;
}

/// 6.5.2: SETTINGS_MAX_FRAME_SIZE above 2^24-1 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_max_frame_size_above_the_max_is_a_connection_error() {
    let payload = setting(SETTINGS_MAX_FRAME_SIZE, 1 << 24);
    let rule = "6.5.2 max frame size 2^24";
    expect_settings_error("/s", 0, 0, &payload, ErrorCode::ProtocolError, rule).await;
}

/// 6.5.2: unknown SETTINGS parameters are ignored, and the frame acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_5_2_unknown_settings_are_ignored() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/unknown-settings").await;
    let mut payload = setting(0x7f7f, 12345);
    payload.extend(setting(0xffff, u32::MAX));
    conn.send_frame(SETTINGS, 0, 0, &payload).await;
    conn.until("6.5.2 unknown settings acknowledged", |e| matches!(e, Event::SettingsAck)).await;
    conn.answer(stream, "/unknown-settings").await;
    expect_answered(&mut client, "/unknown-settings", "6.5.2 unknown").await;
    expect_no_error(&mut conn, "6.5.2 unknown").await;
}

// 6.6, 8.4: PUSH_PROMISE.

/// 6.6, 8.4: holdfast turned push off (and the origin acknowledged it): a PUSH_PROMISE
/// is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_6_push_promise_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/push").await;
    let block = conn.block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/pushed"),
        (":authority", "holdfast.test"),
    ]);
    let mut payload = 2u32.to_be_bytes().to_vec();
    payload.extend_from_slice(&block);
    conn.send_frame(PUSH_PROMISE, END_HEADERS, stream, &payload).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.6 PUSH_PROMISE").await;
}

// 6.7: PING.

/// 6.7: a PING is answered with a PING ACK carrying the same 8 bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_ping_is_answered_with_its_payload() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/ping").await;
    let sent = *b"\x00\x01\x02\x03\xfc\xfd\xfe\xff";
    conn.ping(sent).await;
    conn.until(
        "6.7 PING ACK",
        |e| matches!(e, Event::Ping { ack: true, payload } if *payload == sent),
    )
    .await;
    conn.answer(stream, "/ping").await;
    expect_answered(&mut client, "/ping", "6.7").await;
}

/// 6.7: a PING with ACK is never answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_ping_ack_is_not_answered() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/ping").await;
    conn.send_frame(PING, ACK, 0, b"unasked!").await;
    conn.ping(*b"answered").await;
    conn.until(
        "6.7 the PING after the ACK",
        |e| matches!(e, Event::Ping { ack: true, payload } if payload == b"answered"),
    )
    .await;
    let echoed = conn
        .seen
        .iter()
        .any(|e| matches!(e, Event::Ping { payload, .. } if payload == b"unasked!"));
    assert!(!echoed, "6.7: holdfast answered a PING ACK: {:?}", conn.seen);
    conn.answer(stream, "/ping").await;
    expect_answered(&mut client, "/ping", "6.7 ACK").await;
}

/// 6.7: a PING of a length other than 8 is a connection error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_ping_of_wrong_length_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/ping").await;
    conn.send_frame(PING, 0, 0, b"seven!!").await;
    setup.connection_error(conn, client, ErrorCode::FrameSizeError, "6.7 length 7").await;
}

/// 6.7: a PING on a stream other than 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_7_ping_with_a_stream_id_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/ping").await;
    conn.send_frame(PING, 0, stream, b"onstream").await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.7 stream").await;
}

// 6.8: GOAWAY.

/// 6.8: GOAWAY on a stream other than 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_goaway_with_a_stream_id_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/goaway").await;
    conn.send_frame(GOAWAY, 0, stream, &[0, 0, 0, 0, 0, 0, 0, 0]).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.8 stream").await;
}

/// 4.2, 6.8: a GOAWAY too short for its last stream id and error code is a connection
/// error FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_goaway_too_short_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/goaway").await;
    conn.send_frame(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0]).await;
    setup.connection_error(conn, client, ErrorCode::FrameSizeError, "6.8 length 7").await;
}

/// 6.8: after the origin's GOAWAY holdfast opens no stream on the connection: the
/// next request goes on a new one. Streams up to the GOAWAY's last still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_no_new_stream_after_a_goaway() {
    let setup = Setup::start().await;
    let (mut first, mut conn, stream) = setup.first("/before").await;
    conn.goaway(stream, ErrorCode::NoError).await;
    // holdfast reads frames in order: once the PING is answered, it has the GOAWAY.
    conn.expect_alive("6.8").await;
    let mut fresh = setup.expect_served_fresh("6.8 after a GOAWAY").await;
    conn.answer(stream, "/before").await;
    expect_answered(&mut first, "/before", "6.8: a stream up to the last").await;
    // Its streams done, holdfast closes the connection it may no longer use.
    conn.expect_closed("6.8").await;
    let later: Vec<&Event> = conn
        .seen
        .iter()
        .filter(|e| matches!(e, Event::Fields { stream: s, .. } if *s != stream))
        .collect();
    assert!(later.is_empty(), "6.8: streams opened after the GOAWAY: {later:?}");
    expect_no_error(&mut fresh, "6.8").await;
}

/// 6.8, 8.7: streams above a graceful GOAWAY's last were not processed: holdfast sends
/// them again on a new connection (a POST too: it never reached the origin), where
/// the origin answers each once; the stream up to the last completes where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_streams_above_the_last_go_again_on_a_new_connection() {
    let setup = Setup::start().await;
    let (mut first, mut conn, stream) = setup.first("/first").await;
    let (mut second, above) = setup.another(&mut conn, "/second").await;
    assert!(above > stream);
    conn.goaway(stream, ErrorCode::NoError).await;
    let mut fresh = setup.origin.accept().await;
    let again = fresh.request("6.8: the refused stream sent again").await;
    assert_eq!(again.field(":path"), Some("/second"));
    fresh.answer(again.stream, "/second").await;
    expect_answered(&mut second, "/second", "6.8 sent again").await;
    conn.answer(stream, "/first").await;
    expect_answered(&mut first, "/first", "6.8 up to the last").await;
    conn.expect_closed("6.8").await;
    expect_no_error(&mut fresh, "6.8").await;
}

/// 6.8: a GOAWAY with an error code ends the connection; a stream up to its last may
/// have been processed, so holdfast does not send it again (a 502), and the next
/// request goes on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_8_goaway_with_an_error_code_ends_the_connection() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/failing").await;
    conn.goaway(stream, ErrorCode::InternalError).await;
    setup.expect_502(&mut client, "6.8 GOAWAY INTERNAL_ERROR").await;
    // The origin closes, as an endpoint does after a GOAWAY for an error (5.4.1).
    drop(conn);
    setup.expect_served_fresh("6.8 GOAWAY INTERNAL_ERROR").await;
    assert_eq!(setup.proxy.stats()[0].retries, 0, "6.8: the stream was sent again");
}

/// Section 7: an unknown error code in a GOAWAY is no special case: the GOAWAY ends
/// the connection as one for an error does (a 502 for the stream up to its last, not
/// sent again), and the next request goes on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_unknown_error_code_in_a_goaway_is_no_special_case() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/unknown-code").await;
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend_from_slice(&0xbeef_u32.to_be_bytes());
    conn.send_frame(GOAWAY, 0, 0, &payload).await;
    setup.expect_502(&mut client, "7 GOAWAY of an unknown code").await;
    drop(conn);
    setup.expect_served_fresh("7 GOAWAY of an unknown code").await;
    assert_eq!(setup.proxy.stats()[0].retries, 0, "7: the stream was sent again");
}

/// 8.7: a stream the origin reset with REFUSED_STREAM was not processed: holdfast sends
/// it again (a POST too), and the origin answers it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_7_a_refused_stream_goes_again() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/refused").await;
    conn.reset(stream, ErrorCode::RefusedStream).await;
    let again = conn.request("8.7 the refused stream sent again").await;
    assert_eq!(again.field(":path"), Some("/refused"));
    assert!(again.stream > stream, "5.1.1: a new stream");
    conn.answer(again.stream, "/refused").await;
    expect_answered(&mut client, "/refused", "8.7").await;
    expect_no_error(&mut conn, "8.7").await;
}

// 6.9: WINDOW_UPDATE and flow control.

/// 6.9: a WINDOW_UPDATE of 0 for the connection is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_window_update_of_0_on_the_connection_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/window").await;
    conn.send_frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0, 0]).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.9 0 on 0").await;
}

/// 6.9: a WINDOW_UPDATE of 0 for a stream is a stream error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_window_update_of_0_on_a_stream_is_a_stream_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/window").await;
    conn.send_frame(WINDOW_UPDATE, 0, stream, &[0, 0, 0, 0]).await;
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, "6.9 0").await;
}

/// 6.9: a WINDOW_UPDATE of a length other than 4 is a connection error
/// FRAME_SIZE_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_window_update_of_wrong_length_is_a_frame_size_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/window").await;
    conn.send_frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1]).await;
    setup.connection_error(conn, client, ErrorCode::FrameSizeError, "6.9 length 3").await;
}

/// 6.9.1: a WINDOW_UPDATE that takes the connection's window past 2^31-1 is a
/// connection error FLOW_CONTROL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_1_connection_window_past_the_max_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, _) = setup.first("/window").await;
    conn.window_update(0, MAX_WINDOW_SIZE).await;
    setup.connection_error(conn, client, ErrorCode::FlowControlError, "6.9.1 connection").await;
}

/// 6.9.1: a WINDOW_UPDATE that takes a stream's window past 2^31-1 is a stream error
/// FLOW_CONTROL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_1_stream_window_past_the_max_is_a_stream_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/window").await;
    conn.window_update(stream, MAX_WINDOW_SIZE).await;
    let rule = "6.9.1 stream";
    setup.stream_error(&mut conn, stream, client, ErrorCode::FlowControlError, rule).await;
}

/// Sends `POST path` with `body` (Content-Length) from a new HTTP/1.1 client.
async fn post_body(setup: &Setup, path: &str, body: &[u8]) -> RawClient {
    let mut client = RawClient::connect(setup.proxy.addr()).await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: holdfast.test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    client.send([head.as_bytes(), body].concat()).await;
    client
}

/// Reads DATA on `stream`, granting no window, until `want` bytes of it came in all
/// (`got` counts them across calls); more than `allowed` in all fails: holdfast sent
/// past the window it had.
async fn data_until(
    conn: &mut Wire,
    stream: u32,
    got: &mut usize,
    want: usize,
    allowed: usize,
    rule: &str,
) {
    let end = Instant::now() + ANSWER;
    // Bounded by the deadline: each round reads one event.
    while *got < want {
        match conn.next_until(end).await {
            Ok(Event::Data { stream: s, data, .. }) if s == stream => {
                *got += data.len();
                assert!(*got <= allowed, "{rule}: {got} bytes of DATA with a window of {allowed}");
            }
            Ok(event @ (Event::Reset { .. } | Event::GoAway { .. })) => {
                panic!("{rule}: {event:?} after {got} bytes: {:?}", conn.seen)
            }
            Ok(_) => {}
            Err(end) => panic!("{rule}: {got} of {want} bytes came, then {end:?}"),
        }
    }
}

/// Checks holdfast has no more DATA on its way on `stream`: a PING sent now is
/// answered with no DATA before it.
async fn no_more_data(conn: &mut Wire, stream: u32, rule: &str) {
    let seen = conn.seen.len();
    conn.expect_alive(rule).await;
    let more = conn.seen[seen..].iter().any(
        |e| matches!(e, Event::Data { stream: s, data, .. } if *s == stream && !data.is_empty()),
    );
    assert!(!more, "{rule}: DATA past the window: {:?}", &conn.seen[seen..]);
}

/// 6.9.1: holdfast sends no more DATA than the origin's windows allow, the stream's and
/// the connection's, and the rest as they grow; 5.2.1: HEADERS are not flow
/// controlled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_1_holdfast_sends_no_more_data_than_the_origin_windows_allow() {
    let setup = Setup::start().await;
    let mut client = post_body(&setup, "/upload", &vec![b'u'; 100_000]).await;
    let small = Settings { initial_window_size: Some(1000), ..Settings::default() };
    let mut conn = setup.origin.accept_with(&small).await;
    let (stream, _, end_stream) = conn.request_head("6.9.1").await;
    assert!(!end_stream);
    let mut got = 0;
    let rule = "6.9.1 the stream's window";
    data_until(&mut conn, stream, &mut got, 1000, 1000, rule).await;
    no_more_data(&mut conn, stream, rule).await;
    // The stream may take 200,000 more; the connection, 65,535 in all.
    conn.window_update(stream, 200_000).await;
    let rule = "6.9.1 the connection's window";
    data_until(&mut conn, stream, &mut got, 65_535, 65_535, rule).await;
    no_more_data(&mut conn, stream, rule).await;
    conn.window_update(0, 100_000).await;
    data_until(&mut conn, stream, &mut got, 100_000, 100_000, "6.9.1 the rest").await;
    conn.answer(stream, "/upload").await;
    expect_answered(&mut client, "/upload", "6.9.1").await;
}

/// 6.9.2: a new SETTINGS_INITIAL_WINDOW_SIZE moves the window of open streams by the
/// difference, down past 0 too: holdfast sends nothing until WINDOW_UPDATE frames
/// bring it above 0, then only what they allow. 5.2.1: the request's HEADERS go with
/// a window of 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_2_initial_window_size_changes_move_open_streams_windows() {
    let setup = Setup::start().await;
    let mut client = post_body(&setup, "/grow", &vec![b'g'; 20_000]).await;
    let closed = Settings { initial_window_size: Some(0), ..Settings::default() };
    let mut conn = setup.origin.accept_with(&closed).await;
    let (stream, _, _) = conn.request_head("6.9.2").await;
    no_more_data(&mut conn, stream, "6.9.2 a window of 0").await;
    let mut got = 0;
    conn.settings(&Settings { initial_window_size: Some(10_000), ..Settings::default() }).await;
    data_until(&mut conn, stream, &mut got, 10_000, 10_000, "6.9.2 grown to 10,000").await;
    no_more_data(&mut conn, stream, "6.9.2 grown to 10,000").await;
    // 10,000 went: down to 4,000 makes the window -6,000, and 6,000 brings it to 0.
    conn.settings(&Settings { initial_window_size: Some(4_000), ..Settings::default() }).await;
    conn.window_update(stream, 6_000).await;
    no_more_data(&mut conn, stream, "6.9.2 a window of -6,000 + 6,000").await;
    conn.window_update(stream, 10_000).await;
    data_until(&mut conn, stream, &mut got, 20_000, 20_000, "6.9.2 the rest").await;
    conn.answer(stream, "/grow").await;
    expect_answered(&mut client, "/grow", "6.9.2").await;
}

/// 6.9.2: a change of SETTINGS_INITIAL_WINDOW_SIZE that takes an open stream's window
/// past 2^31-1 is a connection error FLOW_CONTROL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_2_initial_window_size_overflowing_a_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/overflow").await;
    // The stream's window (65,535, the default) up to the max, then the setting one more.
    conn.window_update(stream, MAX_WINDOW_SIZE - 65_535).await;
    conn.settings(&Settings { initial_window_size: Some(65_536), ..Settings::default() }).await;
    setup.connection_error(conn, client, ErrorCode::FlowControlError, "6.9.2").await;
}

/// The client settings that hold back everything holdfast relays: a stream window of
/// 0. With response buffering off, holdfast then holds the origin's DATA without
/// giving its window back (past what the client stream's send buffer takes), so the
/// windows it granted the origin are what limits it.
const NO_WINDOW: Settings = Settings {
    header_table_size: None,
    enable_push: None,
    max_concurrent_streams: None,
    initial_window_size: Some(0),
    max_frame_size: None,
    max_header_list_size: None,
    enable_connect_protocol: None,
};

const NO_BUFFERING: &str = "[buffering]\nresponses = false\n";

/// Sends `len` bytes of DATA on `stream` in frames of at most 16,384 bytes.
async fn send_data(conn: &mut Wire, stream: u32, len: usize) {
    let frame = vec![b'd'; 16_384];
    let mut left = len;
    // Bounded: one frame per round, `len` / 16,384 rounds.
    while left > 0 {
        let n = left.min(frame.len());
        conn.data(stream, &frame[..n], false).await;
        left -= n;
    }
}

/// The stream window holdfast granted: its SETTINGS_INITIAL_WINDOW_SIZE.
fn granted_stream_window(conn: &Wire) -> usize {
    conn.peer.initial_window_size.unwrap_or(65_535) as usize
}

/// The connection window holdfast granted: 65,535 and its WINDOW_UPDATEs on 0.
fn granted_connection_window(conn: &Wire) -> usize {
    let updates: u32 = conn
        .seen
        .iter()
        .filter_map(|e| match e {
            Event::WindowUpdate { stream: 0, increment } => Some(*increment),
            _ => None,
        })
        .sum();
    65_535 + updates as usize
}

/// Grants the client's connection and each of its `streams` a window of 2^30.
async fn open_windows(client: &mut Wire, streams: &[u32]) {
    client.window_update(0, 1 << 30).await;
    for &stream in streams {
        client.window_update(stream, 1 << 30).await;
    }
}

/// 6.9.1: DATA past the stream window holdfast granted is a stream error
/// FLOW_CONTROL_ERROR; the client's stream, its head relayed, is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_1_data_past_the_stream_window_is_a_stream_error() {
    let setup = Setup::start_with(NO_BUFFERING).await;
    let (mut client, mut conn, stream) = setup.relayed_with("/flood", &NO_WINDOW, &[]).await;
    let window = granted_stream_window(&conn);
    send_data(&mut conn, stream, window + 1).await;
    let rule = "6.9.1 the stream's window";
    conn.expect_reset(stream, ErrorCode::FlowControlError, rule).await;
    let updates = conn
        .seen
        .iter()
        .any(|e| matches!(e, Event::WindowUpdate { stream: s, .. } if *s == stream));
    assert!(!updates, "{rule}: holdfast gave window back meanwhile: {:?}", conn.seen);
    // What holdfast holds for the client goes once it grants window, then the reset.
    open_windows(&mut client, &[1]).await;
    expect_cut(&mut client, 1, rule).await;
    setup.expect_served_on(&mut conn, rule).await;
}

/// 6.9.1: DATA past the connection window holdfast granted (on streams each within its
/// own) is a connection error FLOW_CONTROL_ERROR; every client stream is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_9_1_data_past_the_connection_window_is_a_connection_error() {
    let setup = Setup::start_with(NO_BUFFERING).await;
    let (mut client, mut conn, first) = setup.relayed_with("/flood/1", &NO_WINDOW, &[]).await;
    let (stream_window, connection_window) =
        (granted_stream_window(&conn), granted_connection_window(&conn));
    // Enough streams to hold the connection's window, each filled to its own.
    let full = connection_window / stream_window;
    let mut streams = vec![(1, first)];
    for i in 1..=full {
        let id = 1 + 2 * i as u32;
        client.get(id, &format!("/flood/{id}")).await;
        let request = conn.request("6.9.1 another stream").await;
        conn.headers(request.stream, &[(":status", "200")], false).await;
        streams.push((id, request.stream));
    }
    let mut sent = 0;
    for &(_, stream) in &streams[..full] {
        send_data(&mut conn, stream, stream_window).await;
        sent += stream_window;
    }
    let (_, last) = streams[full];
    send_data(&mut conn, last, connection_window - sent + 1).await;
    let rule = "6.9.1 the connection's window";
    conn.expect_goaway(ErrorCode::FlowControlError, rule).await;
    let ids: Vec<u32> = streams.iter().map(|&(id, _)| id).collect();
    open_windows(&mut client, &ids).await;
    for (id, _) in streams {
        expect_cut(&mut client, id, rule).await;
    }
    setup.expect_served_fresh(rule).await;
}

// 6.10: CONTINUATION.

/// 6.10: a response head split over HEADERS and CONTINUATION frames is read whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_response_head_over_continuations_is_read() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/continued").await;
    let body = served("/continued");
    let length = body.len().to_string();
    let block = conn.block(&[
        (":status", "200"),
        ("content-length", &length),
        ("x-path", "/continued"),
        ("x-filler", &"f".repeat(100)),
    ]);
    let (first, rest) = block.split_at(3);
    let (second, third) = rest.split_at(rest.len() / 2);
    conn.send_frame(HEADERS, 0, stream, first).await;
    conn.send_frame(CONTINUATION, 0, stream, second).await;
    conn.send_frame(CONTINUATION, END_HEADERS, stream, third).await;
    conn.data(stream, body.as_bytes(), true).await;
    expect_answered(&mut client, "/continued", "6.10").await;
    expect_no_error(&mut conn, "6.10").await;
}

/// 6.10, 4.3: a frame of another type inside a field block is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_other_frame_inside_a_field_block_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/interleaved").await;
    let block = conn.block(&[(":status", "200"), ("x-path", "/interleaved")]);
    let (first, rest) = block.split_at(1);
    conn.send_frame(HEADERS, END_STREAM, stream, first).await;
    conn.ping(*b"inside!!").await;
    conn.send_frame(CONTINUATION, END_HEADERS, stream, rest).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.10 PING inside").await;
}

/// 6.10, 4.3: HEADERS of another stream inside a field block is a connection error
/// PROTOCOL_ERROR; both streams' clients get a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_headers_of_another_stream_inside_a_field_block_is_a_connection_error() {
    let setup = Setup::start().await;
    let (mut first, mut conn, one) = setup.first("/one").await;
    let (second, two) = setup.another(&mut conn, "/two").await;
    let block = conn.block(&[(":status", "200"), ("x-path", "/one")]);
    let (start, _) = block.split_at(1);
    conn.send_frame(HEADERS, END_STREAM, one, start).await;
    send_block(&mut conn, two, &status_200_then(&[])).await;
    let rule = "6.10 HEADERS of another stream inside";
    setup.expect_502(&mut first, rule).await;
    setup.connection_error(conn, second, ErrorCode::ProtocolError, rule).await;
}

/// 6.10: a CONTINUATION on another stream than the field block's is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_continuation_on_another_stream_is_a_connection_error() {
    let setup = Setup::start().await;
    let (mut first, mut conn, one) = setup.first("/one").await;
    let (second, two) = setup.another(&mut conn, "/two").await;
    let block = conn.block(&[(":status", "200"), ("x-path", "/one")]);
    let (start, rest) = block.split_at(1);
    conn.send_frame(HEADERS, END_STREAM, one, start).await;
    conn.send_frame(CONTINUATION, END_HEADERS, two, rest).await;
    let rule = "6.10 CONTINUATION on another stream";
    setup.expect_502(&mut first, rule).await;
    setup.connection_error(conn, second, ErrorCode::ProtocolError, rule).await;
}

/// 6.10: a CONTINUATION after END_HEADERS (no field block open) is a connection error
/// PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_continuation_without_a_field_block_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/orphan").await;
    conn.send_frame(CONTINUATION, END_HEADERS, stream, &status_200_then(&[])).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.10 no block").await;
}

/// 6.10: a CONTINUATION on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_10_continuation_on_stream_0_is_a_connection_error() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/continuation-0").await;
    let block = conn.block(&[(":status", "200")]);
    let (first, rest) = block.split_at(0);
    conn.send_frame(HEADERS, END_STREAM, stream, first).await;
    conn.send_frame(CONTINUATION, END_HEADERS, 0, rest).await;
    setup.connection_error(conn, client, ErrorCode::ProtocolError, "6.10 on 0").await;
}

// 8.1: messages.

/// Reads the client's response, past interim ones (1xx): it must be the origin's whole
/// answer to `path`.
async fn expect_final_answer(client: &mut RawClient, path: &str, rule: &str) {
    // Bounded: at most three interim responses.
    for _ in 0..4 {
        let response = match client.try_response(false).await {
            Ok(response) => response,
            Err(e) => panic!("{rule}: the client wanted the answer to {path}, got {e:?}"),
        };
        if (100..200).contains(&response.status) {
            continue;
        }
        assert_eq!(response.status, 200, "{rule}: {}", response.body_text());
        assert_eq!(response.header("x-path"), Some(path), "{rule}: an answer to another request");
        assert_eq!(response.body_text(), served(path), "{rule}");
        return;
    }
    panic!("{rule}: no final response");
}

/// 8.1: interim responses (1xx) come before the final one, which is relayed whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_interim_responses_then_the_final_one_are_read() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/interim").await;
    conn.headers(stream, &[(":status", "103"), ("link", "</style.css>; rel=preload")], false).await;
    conn.headers(stream, &[(":status", "100")], false).await;
    conn.answer(stream, "/interim").await;
    expect_final_answer(&mut client, "/interim", "8.1 interim").await;
    expect_no_error(&mut conn, "8.1 interim").await;
}

/// 8.1: an interim response never ends the stream; one with END_STREAM is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_interim_response_that_ends_the_stream_is_malformed() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/interim").await;
    conn.headers(stream, &[(":status", "103")], true).await;
    let rule = "8.1 1xx with END_STREAM";
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, rule).await;
}

/// 8.1: DATA comes after the final head only; DATA after an interim head is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_data_after_an_interim_head_is_malformed() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/interim").await;
    conn.headers(stream, &[(":status", "103")], false).await;
    conn.data(stream, b"too early", true).await;
    let rule = "8.1 DATA after a 1xx";
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, rule).await;
}

/// 8.1: a response head that ends the stream has no body; an HTTP/1.1 client is told
/// so (a 200 without framing would be read until the close) and its connection
/// carries the next response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_response_ending_with_its_head_reaches_an_http1_client_framed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/empty").await;
    conn.headers(stream, &[(":status", "200"), ("x-path", "/empty")], true).await;
    let response = client.response().await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-length"), Some("0"), "{response:?}");
    client.send("GET /again HTTP/1.1\r\nHost: holdfast.test\r\n\r\n").await;
    let request = conn.request("8.1 the same client's next request").await;
    conn.answer(request.stream, "/again").await;
    expect_answered(&mut client, "/again", "8.1 after an empty body").await;
}

/// 8.1: trailers (a HEADERS frame with END_STREAM after the body) reach an HTTP/2
/// client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_trailers_are_relayed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.relayed("/trailers", &[]).await;
    conn.data(stream, b"body", false).await;
    conn.headers(stream, &[("x-checksum", "1234")], true).await;
    let response = client.response(1).await;
    assert_eq!(response.body, b"body");
    assert_eq!(field(&response.trailers, "x-checksum"), Some("1234"), "{response:?}");
    expect_no_error(&mut conn, "8.1 trailers").await;
}

/// The checks of a malformed response found after its head was relayed: RST_STREAM
/// PROTOCOL_ERROR on `stream` and the connection going on, the client's stream cut,
/// the next request on the same connection.
async fn malformed_after_the_head(
    setup: &Setup,
    client: &mut Wire,
    conn: &mut Wire,
    stream: u32,
    rule: &str,
) {
    conn.expect_reset(stream, ErrorCode::ProtocolError, rule).await;
    expect_cut(client, 1, rule).await;
    setup.expect_served_on(conn, rule).await;
}

/// 8.1: a HEADERS frame after the body that does not end the stream (trailers without
/// END_STREAM) makes the response malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_trailers_without_end_stream_are_malformed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.relayed("/trailers", &[]).await;
    conn.data(stream, b"body", false).await;
    conn.headers(stream, &[("x-checksum", "1234")], false).await;
    let rule = "8.1 trailers without END_STREAM";
    malformed_after_the_head(&setup, &mut client, &mut conn, stream, rule).await;
}

/// 8.1: trailers carry no pseudo-header field; a response whose trailers do is
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_pseudo_header_in_trailers_is_malformed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.relayed("/trailers", &[]).await;
    conn.data(stream, b"body", false).await;
    conn.headers(stream, &[(":status", "200")], true).await;
    let rule = "8.1 pseudo-header in trailers";
    malformed_after_the_head(&setup, &mut client, &mut conn, stream, rule).await;
}

/// 8.1: an origin may answer before the request ended, then reset the stream with
/// NO_ERROR: the whole response stands (the client must not discard it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_whole_response_then_rst_stream_no_error_stands() {
    let setup = Setup::start().await;
    let mut client = RawClient::connect(setup.proxy.addr()).await;
    // Ten bytes announced, five sent: the request is still going up.
    let head = "POST /early HTTP/1.1\r\nHost: holdfast.test\r\nContent-Length: 10\r\n\r\nhello";
    client.send(head).await;
    let mut conn = setup.origin.accept().await;
    let (stream, _, end_stream) = conn.request_head("8.1").await;
    assert!(!end_stream);
    conn.until(
        "8.1 the start of the body",
        |e| matches!(e, Event::Data { stream: s, .. } if *s == stream),
    )
    .await;
    conn.answer(stream, "/early").await;
    conn.reset(stream, ErrorCode::NoError).await;
    expect_answered(&mut client, "/early", "8.1 RST_STREAM NO_ERROR").await;
}

// 8.1.1: content-length.

/// 8.1.1: a response whose DATA goes past its `content-length` is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_1_data_past_content_length_is_malformed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.relayed("/long", &[("content-length", "5")]).await;
    conn.data(stream, b"123456", true).await;
    let rule = "8.1.1 DATA past content-length";
    malformed_after_the_head(&setup, &mut client, &mut conn, stream, rule).await;
}

/// 8.1.1: a response whose DATA ends short of its `content-length` is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_1_data_short_of_content_length_is_malformed() {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.relayed("/short", &[("content-length", "10")]).await;
    conn.data(stream, b"12345", true).await;
    let rule = "8.1.1 DATA short of content-length";
    malformed_after_the_head(&setup, &mut client, &mut conn, stream, rule).await;
}

/// 8.1.1: a head that ends the stream with a `content-length` other than 0 is
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_1_content_length_without_data_is_malformed() {
    let setup = Setup::start().await;
    let (client, mut conn, stream) = setup.first("/promised").await;
    conn.headers(stream, &[(":status", "200"), ("content-length", "5")], true).await;
    let rule = "8.1.1 content-length and END_STREAM";
    setup.stream_error(&mut conn, stream, client, ErrorCode::ProtocolError, rule).await;
}

/// 8.1.1: a response to HEAD may carry the `content-length` of the body a GET would
/// have, and no DATA: not malformed, and the client is told that length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_1_a_response_to_head_may_declare_a_length_without_data() {
    let setup = Setup::start().await;
    let mut client = RawClient::connect(setup.proxy.addr()).await;
    client.send("HEAD /head HTTP/1.1\r\nHost: holdfast.test\r\n\r\n").await;
    let mut conn = setup.origin.accept().await;
    let request = conn.request("8.1.1 HEAD").await;
    assert_eq!(request.field(":method"), Some("HEAD"));
    conn.headers(request.stream, &[(":status", "200"), ("content-length", "1000")], true).await;
    let response = client.head_response().await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-length"), Some("1000"));
    expect_no_error(&mut conn, "8.1.1 HEAD").await;
}

/// 8.1.1: a 304 may carry the `content-length` of the representation and no DATA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_1_1_a_304_may_declare_a_length_without_data() {
    let setup = Setup::start().await;
    let mut client = setup.get("/cached").await;
    let mut conn = setup.origin.accept().await;
    let request = conn.request("8.1.1 304").await;
    let head = [(":status", "304"), ("content-length", "1000"), ("etag", "\"v1\"")];
    conn.headers(request.stream, &head, true).await;
    let response = client.head_response().await;
    assert_eq!(response.status, 304);
    assert!(response.body.is_empty());
    expect_no_error(&mut conn, "8.1.1 304").await;
}

// 8.2, 8.3, 8.6: fields and pseudo-header fields of a response.

/// One response head a case sends; it must be malformed by `rule`.
struct Case {
    rule: &'static str,
    fields: Vec<(&'static str, &'static str)>,
}

/// `:status 200` and then `extra`.
fn with_status(rule: &'static str, extra: &[(&'static str, &'static str)]) -> Case {
    let mut fields = vec![(":status", "200")];
    fields.extend_from_slice(extra);
    Case { rule, fields }
}

/// A head of exactly `fields`.
fn whole(rule: &'static str, fields: &[(&'static str, &'static str)]) -> Case {
    Case { rule, fields: fields.to_vec() }
}

/// Answers one request per case, all on one connection after a first request is
/// served, with the case's head (no END_STREAM, so that nothing but the head is
/// judged): each is a stream error PROTOCOL_ERROR (8.1.1), its client gets a 502, and
/// the connection goes on to the next case and to a request served whole.
async fn assert_malformed_heads(cases: Vec<Case>) {
    let setup = Setup::start().await;
    let (mut client, mut conn, stream) = setup.first("/before").await;
    conn.answer(stream, "/before").await;
    expect_answered(&mut client, "/before", "the first request").await;
    for (i, case) in cases.iter().enumerate() {
        let (mut client, stream) = setup.another(&mut conn, &format!("/malformed/{i}")).await;
        conn.headers(stream, &case.fields, false).await;
        conn.expect_reset(stream, ErrorCode::ProtocolError, case.rule).await;
        setup.expect_502(&mut client, case.rule).await;
    }
    setup.expect_served_on(&mut conn, "after the malformed heads").await;
}

/// 8.2: field names are lowercase; a response with an uppercase letter in one is
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_uppercase_field_name_is_malformed() {
    assert_malformed_heads(vec![
        with_status("8.2 X-Upper", &[("X-Upper", "1")]),
        with_status("8.2 x-uppeR", &[("x-uppeR", "1")]),
    ])
    .await;
}

/// 8.2.1: a field name with a space, a control byte, DEL, a non-ASCII byte or a colon
/// (outside a pseudo-header's first byte), or an empty name, makes the response
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_1_field_name_with_a_forbidden_byte_is_malformed() {
    assert_malformed_heads(vec![
        with_status("8.2.1 space", &[("x bad", "1")]),
        with_status("8.2.1 control", &[("x\u{1}bad", "1")]),
        with_status("8.2.1 DEL", &[("x\u{7f}bad", "1")]),
        with_status("8.2.1 non-ASCII", &[("caf\u{e9}", "1")]),
        with_status("8.2.1 colon", &[("x:bad", "1")]),
        with_status("8.2.1 empty", &[("", "1")]),
    ])
    .await;
}

/// 8.2.1: a field value with NUL, CR or LF makes the response malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_1_field_value_with_nul_cr_or_lf_is_malformed() {
    assert_malformed_heads(vec![
        with_status("8.2.1 NUL", &[("x-bad", "a\0b")]),
        with_status("8.2.1 CR", &[("x-bad", "a\rb")]),
        with_status("8.2.1 LF", &[("x-bad", "a\nb")]),
        with_status("8.2.1 CRLF", &[("x-bad", "a\r\nx-injected: 1")]),
    ])
    .await;
}

/// 8.2.1: a field value that starts or ends with a space or a tab makes the response
/// malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_1_field_value_with_surrounding_whitespace_is_malformed() {
    assert_malformed_heads(vec![
        with_status("8.2.1 leading space", &[("x-bad", " a")]),
        with_status("8.2.1 trailing space", &[("x-bad", "a ")]),
        with_status("8.2.1 leading tab", &[("x-bad", "\ta")]),
        with_status("8.2.1 trailing tab", &[("x-bad", "a\t")]),
    ])
    .await;
}

/// 8.2.2: connection-specific fields make a response malformed: `connection`,
/// `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`, and `te` with a
/// value other than `trailers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_2_connection_specific_field_is_malformed() {
    assert_malformed_heads(vec![
        with_status("8.2.2 connection", &[("connection", "keep-alive")]),
        with_status("8.2.2 keep-alive", &[("keep-alive", "timeout=5")]),
        with_status("8.2.2 proxy-connection", &[("proxy-connection", "keep-alive")]),
        with_status("8.2.2 transfer-encoding", &[("transfer-encoding", "chunked")]),
        with_status("8.2.2 upgrade", &[("upgrade", "h2c")]),
        with_status("8.2.2 te", &[("te", "gzip")]),
    ])
    .await;
}

/// 8.2.2: `te` is connection-specific too; the one exception is a request's `te:
/// trailers`: in a response it makes the response malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_2_te_trailers_in_a_response_is_malformed() {
    assert_malformed_heads(vec![with_status("8.2.2 te: trailers", &[("te", "trailers")])]).await;
}

/// 8.3: every pseudo-header field comes before the regular fields; one after a
/// regular field makes the response malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_pseudo_header_after_a_regular_field_is_malformed() {
    assert_malformed_heads(vec![whole(
        "8.3 :status last",
        &[("x-first", "1"), (":status", "200")],
    )])
    .await;
}

/// 8.3: request pseudo-header fields do not appear in responses; a response with one
/// is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_request_pseudo_header_in_a_response_is_malformed() {
    assert_malformed_heads(vec![
        with_status("8.3 :method", &[(":method", "GET")]),
        with_status("8.3 :scheme", &[(":scheme", "http")]),
        with_status("8.3 :authority", &[(":authority", "holdfast.test")]),
        with_status("8.3 :path", &[(":path", "/")]),
        with_status("8.3 :protocol", &[(":protocol", "websocket")]),
    ])
    .await;
}

/// 8.3: an undefined pseudo-header field makes the response malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_unknown_pseudo_header_is_malformed() {
    assert_malformed_heads(vec![with_status("8.3 :reason", &[(":reason", "OK")])]).await;
}

/// 8.3.2: a response carries exactly one `:status`: none, or two, makes it malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_2_missing_or_repeated_status_is_malformed() {
    assert_malformed_heads(vec![
        whole("8.3.2 no :status", &[("x-no-status", "1")]),
        whole("8.3.2 two :status", &[(":status", "200"), (":status", "200")]),
        whole("8.3.2 two different :status", &[(":status", "200"), (":status", "404")]),
    ])
    .await;
}

/// 8.3.2 and RFC 9110 15: `:status` is a three-digit code; anything else makes the
/// response malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_3_2_status_that_is_not_three_digits_is_malformed() {
    assert_malformed_heads(vec![
        whole("8.3.2 20", &[(":status", "20")]),
        whole("8.3.2 2000", &[(":status", "2000")]),
        whole("8.3.2 abc", &[(":status", "abc")]),
        whole("8.3.2 empty", &[(":status", "")]),
        whole("8.3.2 20x", &[(":status", "20x")]),
    ])
    .await;
}

/// 8.6: HTTP/2 has no 101 (Switching Protocols): a 101 response is malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_6_101_response_is_malformed() {
    assert_malformed_heads(vec![whole("8.6 101", &[(":status", "101"), ("upgrade", "h2c")])]).await;
}

// What holdfast sends: requests.

/// 5.1.1: the streams holdfast opens have odd identifiers, each above the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_1_1_holdfast_opens_odd_streams_in_increasing_order() {
    let setup = Setup::start().await;
    let (mut client, mut conn, first) = setup.first("/1").await;
    conn.answer(first, "/1").await;
    expect_answered(&mut client, "/1", "5.1.1").await;
    let mut ids = vec![first];
    for path in ["/2", "/3", "/4"] {
        let (mut client, stream) = setup.another(&mut conn, path).await;
        conn.answer(stream, path).await;
        expect_answered(&mut client, path, "5.1.1").await;
        ids.push(stream);
    }
    assert!(ids.iter().all(|id| id % 2 == 1), "5.1.1: even streams among {ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "5.1.1: streams out of order: {ids:?}");
}

/// 8.2.2: holdfast sends the origin no connection-specific field, whatever the client
/// sent (`connection` and the fields it names, `keep-alive`, `proxy-connection`,
/// `transfer-encoding`), and `te` only as `trailers`; 8.1, 8.3.1: the request is well
/// formed (the pseudo-header fields first, lowercase names, an `:authority` without
/// userinfo and no `host` that differs from it), its DATA matches any
/// `content-length`, and its trailers end the stream with no pseudo-header field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_2_2_requests_holdfast_sends_carry_no_connection_specific_fields() {
    let setup = Setup::start().await;
    let mut client = RawClient::connect(setup.proxy.addr()).await;
    client
        .send(
            "POST /hop HTTP/1.1\r\nHost: holdfast.test\r\nConnection: keep-alive, X-Hop\r\n\
             Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\n\
             X-Hop: 1\r\nX-End-To-End: 1\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\n0\r\nX-Checksum: 99\r\n\r\n",
        )
        .await;
    let mut conn = setup.origin.accept().await;
    let request = conn.request("8.2.2").await;
    let fields: Vec<holdfast_h2::hpack::Field> = request
        .fields
        .iter()
        .map(|(n, v)| holdfast_h2::hpack::Field {
            name: n.clone().into_bytes().into(),
            value: v.clone().into_bytes().into(),
            sensitive: false,
        })
        .collect();
    let section = holdfast_h2::conn::message::Section::Request { connect_protocol: false };
    let head = holdfast_h2::conn::message::check(fields, section);
    assert!(head.is_ok(), "8.2, 8.2.2, 8.3: {head:?} for {:?}", request.fields);
    for name in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "x-hop"] {
        assert_eq!(request.field(name), None, "8.2.2: {name} went to the origin");
    }
    assert!(matches!(request.field("te"), None | Some("trailers")), "{:?}", request.fields);
    // 8.3.1: :authority without userinfo, and no Host that differs from it.
    let authority = request.field(":authority").expect("8.3.1: :authority");
    assert!(!authority.contains('@'), "8.3.1: userinfo in {authority}");
    let host = request.field("host");
    assert!(host.is_none_or(|h| h == authority), "8.3.1: {:?}", request.fields);
    assert_eq!(request.field("x-end-to-end"), Some("1"));
    assert_eq!(request.body, b"hello");
    if let Some(length) = request.field("content-length") {
        assert_eq!(length, "5", "8.1.1: content-length and DATA disagree");
    }
    let trailers = request.trailers.as_ref().expect("the client's trailers");
    assert_eq!(field(trailers, "x-checksum"), Some("99"), "{trailers:?}");
    assert!(trailers.iter().all(|(n, _)| !n.starts_with(':')), "8.1: {trailers:?}");
    let trailers_ended = conn.seen.iter().any(|e| {
        matches!(e, Event::Fields { stream, fields, end_stream: true }
            if *stream == request.stream && field(fields, "x-checksum").is_some())
    });
    assert!(trailers_ended, "8.1: trailers that do not end the stream: {:?}", conn.seen);
    conn.answer(request.stream, "/hop").await;
    expect_answered(&mut client, "/hop", "8.2.2").await;
}
