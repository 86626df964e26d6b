//! Fuzzes the frame layer with mutated byte streams (seeds: valid streams of several
//! frames of every type). Each stream is split and decoded frame by frame until an
//! error or its end, and must never panic; every frame that decodes is written again
//! and decodes to the same value; and the stream fed in small pieces gives the same
//! frames and the same error as fed whole.
//!
//! Bounded: a few seconds and an iteration cap by default. `H2_FUZZ_BUDGET_SECS=N`
//! runs for N seconds with no cap (run it in release mode:
//! `cargo test -p holdfast-h2 --release --test fuzz_frame`); `H2_FUZZ_SEED` replays a
//! run.

mod support;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use holdfast_h2::error::{ErrorCode, H2Error};
use holdfast_h2::frame::{
    check_preface, decode, split_frame, write_data_header, write_frame, write_goaway,
    write_headers, write_ping, write_ping_ack, write_priority, write_rst_stream, write_settings,
    write_settings_ack, write_window_update, Continuation, Data, EncodeError, Frame, Headers,
    PrefaceCheck, PushPromise, Settings, StreamDependency, DEFAULT_MAX_FRAME_SIZE, MAX_PAYLOAD_LEN,
    PREFACE,
};

/// The default run: at most this long, and at most this many mutated inputs.
const DEFAULT_BUDGET: Duration = Duration::from_secs(4);
const DEFAULT_ITERATIONS: u64 = 20_000;
/// The longest mutated input: room for a field block cut into a HEADERS and a
/// CONTINUATION at 16,384 bytes.
const MAX_INPUT_LEN: usize = 40_000;

#[test]
fn mutated_frame_streams_never_panic_and_decoded_frames_round_trip() {
    let (budget, iterations) =
        match std::env::var("H2_FUZZ_BUDGET_SECS").ok().and_then(|secs| secs.parse().ok()) {
            Some(secs) => (Duration::from_secs(secs), u64::MAX),
            None => (DEFAULT_BUDGET, DEFAULT_ITERATIONS),
        };
    let seeds = seeds();
    let start = std::time::Instant::now();
    let done = support::run("frame", &seeds, iterations, budget, MAX_INPUT_LEN, check_stream);
    eprintln!("fuzz frame: {done} mutated streams in {:.1?}", start.elapsed());
}

/// What splitting and decoding a stream gave: the frames, then how it ended.
#[derive(Debug, PartialEq)]
struct Outcome {
    frames: Vec<Frame>,
    end: End,
}

#[derive(Debug, PartialEq)]
enum End {
    /// An error ended the stream.
    Error(H2Error),
    /// The stream ran out of whole frames with this many bytes left: the start of a
    /// frame that had not all arrived.
    Left(usize),
}

fn check_stream(input: &[u8]) {
    // A server reads a client's first bytes as the preface; frames follow it.
    let input = match check_preface(input) {
        Ok(PrefaceCheck::Complete) => input.get(PREFACE.len()..).unwrap_or_default(),
        _ => input,
    };
    // Our max frame size: the default, or a large one for some inputs, so that frames
    // past 16,384 bytes are decoded too.
    let max_frame_size =
        if input.len() % 3 == 0 { MAX_PAYLOAD_LEN } else { DEFAULT_MAX_FRAME_SIZE };
    let whole = split_and_decode(input, input.len().max(1), max_frame_size);
    let piece = 1 + input.first().map_or(0, |&b| usize::from(b % 16));
    let in_pieces = split_and_decode(input, piece, max_frame_size);
    assert_eq!(whole, in_pieces, "fed whole and in pieces of {piece}");
}

/// Feeds `input` in pieces of `piece` bytes, taking out and decoding every whole
/// frame, until an error or the end; checks each decoded frame's round trip.
fn split_and_decode(input: &[u8], piece: usize, max_frame_size: u32) -> Outcome {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in input.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            let (header, payload) = match split_frame(&mut buf, max_frame_size) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => return Outcome { frames, end: End::Error(error) },
            };
            assert_eq!(payload.len(), header.length as usize);
            match decode(header, payload) {
                Ok(frame) => {
                    assert_eq!(frame.kind(), header.kind);
                    assert_eq!(frame.stream_id(), header.stream_id);
                    check_round_trip(&frame);
                    frames.push(frame);
                }
                Err(error) => {
                    check_error_scope(error, header.stream_id);
                    return Outcome { frames, end: End::Error(error) };
                }
            }
        }
    }
    Outcome { frames, end: End::Left(buf.len()) }
}

/// A decoded frame, written again, decodes to the same value. The one value a writer
/// refuses is a HEADERS frame depending on its own stream, which decodes (its field
/// block must reach HPACK) with the stream error to raise.
fn check_round_trip(frame: &Frame) {
    let mut wire = BytesMut::new();
    match write_frame(&mut wire, frame) {
        Ok(()) => {}
        Err(EncodeError::SelfDependency(_)) if matches!(frame, Frame::Headers(headers) if headers.stream_error().is_some()) =>
        {
            return;
        }
        Err(error) => panic!("decoded {frame:?} refused by write_frame: {error}"),
    }
    let (header, payload) = split_frame(&mut wire, MAX_PAYLOAD_LEN).unwrap().unwrap();
    assert!(wire.is_empty(), "one frame written for {frame:?}");
    assert_eq!(decode(header, payload).as_ref(), Ok(frame));
}

/// A stream error names the frame's stream, and never stream 0.
fn check_error_scope(error: H2Error, stream_id: u32) {
    if let H2Error::Stream { stream, code } = error {
        assert_eq!(stream, stream_id);
        assert_ne!(stream, 0);
        assert!(matches!(code, ErrorCode::ProtocolError | ErrorCode::FrameSizeError));
    }
}

/// Valid streams of several frames, every type in some of them, and each frame type
/// alone.
fn seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![
        client_start(),
        field_blocks(),
        control_frames(),
        push_and_padding(),
        big_field_block(),
    ];
    for stream in seeds.clone() {
        // Each frame alone too, so that mutations of one frame's payload are common.
        let mut buf = BytesMut::from(&stream[..]);
        if check_preface(&buf) == Ok(PrefaceCheck::Complete) {
            let _ = buf.split_to(PREFACE.len());
        }
        let mut start = buf.clone();
        while let Ok(Some((header, _))) = split_frame(&mut buf, MAX_PAYLOAD_LEN) {
            let len = 9 + header.length as usize;
            seeds.push(start.split_to(len).to_vec());
        }
    }
    seeds
}

/// A client's first flight: preface, SETTINGS, a connection window, a request with
/// content.
fn client_start() -> Vec<u8> {
    let mut buf = BytesMut::from(&PREFACE[..]);
    let settings = Settings {
        header_table_size: Some(4096),
        enable_push: Some(false),
        max_concurrent_streams: Some(100),
        initial_window_size: Some(1 << 20),
        max_frame_size: Some(1 << 15),
        max_header_list_size: Some(16_384),
        enable_connect_protocol: Some(true),
    };
    write_settings(&mut buf, &settings).unwrap();
    write_settings_ack(&mut buf);
    write_window_update(&mut buf, 0, 1 << 24).unwrap();
    write_headers(&mut buf, 1, &[0x83, 0x86, 0x84, 0x41, 0x8a, 0x08, 0x9d], false, 16_384).unwrap();
    write_data_header(&mut buf, 1, 5, false).unwrap();
    buf.extend_from_slice(b"hello");
    write_data_header(&mut buf, 1, 0, true).unwrap();
    buf.to_vec()
}

/// Field blocks in pieces: HEADERS without END_HEADERS and its CONTINUATIONs, HEADERS
/// with priority fields and padding, trailers.
fn field_blocks() -> Vec<u8> {
    let mut buf = BytesMut::new();
    let frames = [
        Frame::Headers(Headers {
            stream_id: 3,
            end_stream: false,
            end_headers: false,
            priority: None,
            pad_length: None,
            fragment: Bytes::from_static(&[0x82, 0x86]),
        }),
        Frame::Continuation(Continuation {
            stream_id: 3,
            end_headers: false,
            fragment: Bytes::from_static(&[0x84]),
        }),
        Frame::Continuation(Continuation {
            stream_id: 3,
            end_headers: true,
            fragment: Bytes::from_static(&[0x41, 0x82, 0x61, 0x62]),
        }),
        Frame::Headers(Headers {
            stream_id: 5,
            end_stream: true,
            end_headers: true,
            priority: Some(StreamDependency { exclusive: true, depends_on: 3, weight: 15 }),
            pad_length: Some(4),
            fragment: Bytes::from_static(&[0x82, 0x87, 0x84]),
        }),
        Frame::Headers(Headers {
            stream_id: 3,
            end_stream: true,
            end_headers: true,
            priority: None,
            pad_length: None,
            fragment: Bytes::from_static(&[0x40, 0x81, 0x61, 0x81, 0x62]),
        }),
    ];
    for frame in &frames {
        write_frame(&mut buf, frame).unwrap();
    }
    buf.to_vec()
}

/// Frames about streams and the connection: PRIORITY, RST_STREAM, PING and its ack,
/// WINDOW_UPDATE, GOAWAY with debug data.
fn control_frames() -> Vec<u8> {
    let mut buf = BytesMut::new();
    let dependency = StreamDependency { exclusive: false, depends_on: 1, weight: 200 };
    write_priority(&mut buf, 7, dependency).unwrap();
    write_rst_stream(&mut buf, 7, ErrorCode::Cancel).unwrap();
    write_ping(&mut buf, *b"pingpong");
    write_ping_ack(&mut buf, *b"pongping");
    write_window_update(&mut buf, 5, 65_535).unwrap();
    write_goaway(&mut buf, 7, ErrorCode::EnhanceYourCalm, b"too many resets").unwrap();
    buf.to_vec()
}

/// PUSH_PROMISE (padded), padded DATA and frames of unknown types.
fn push_and_padding() -> Vec<u8> {
    let mut buf = BytesMut::new();
    let frames = [
        Frame::PushPromise(PushPromise {
            stream_id: 1,
            promised_stream_id: 2,
            end_headers: true,
            pad_length: Some(3),
            fragment: Bytes::from_static(&[0x82, 0x84]),
        }),
        Frame::Data(Data {
            stream_id: 1,
            end_stream: false,
            pad_length: Some(8),
            data: Bytes::from_static(b"padded data"),
        }),
        Frame::Unknown { kind: 0xb, stream_id: 0 },
        Frame::Data(Data {
            stream_id: 1,
            end_stream: true,
            pad_length: Some(0),
            data: Bytes::new(),
        }),
    ];
    for frame in &frames {
        write_frame(&mut buf, frame).unwrap();
    }
    // An unknown type with a payload and flags.
    buf.extend_from_slice(&[0, 0, 3, 0xfe, 0xff, 0, 0, 0, 1, 1, 2, 3]);
    buf.to_vec()
}

/// A field block of 20,000 bytes: a full HEADERS and a CONTINUATION.
fn big_field_block() -> Vec<u8> {
    let block: Vec<u8> = (0..20_000_u32).map(|i| (i % 251) as u8).collect();
    let mut buf = BytesMut::new();
    write_headers(&mut buf, 1, &block, true, 16_384).unwrap();
    buf.to_vec()
}
