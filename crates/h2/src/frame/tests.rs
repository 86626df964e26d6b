//! Round trips: every frame type written, split out of a buffer and decoded again
//! gives the value it was written from; a field block cut into HEADERS and
//! CONTINUATIONs comes back whole.

use bytes::{Bytes, BytesMut};

use super::*;

/// One value of every frame type, with and without the optional parts.
fn one_of_each() -> Vec<Frame> {
    let dependency = StreamDependency { exclusive: true, depends_on: 1, weight: 42 };
    vec![
        Frame::Data(Data { stream_id: 1, end_stream: false, pad_length: None, data: Bytes::new() }),
        Frame::Data(Data {
            stream_id: MAX_STREAM_ID,
            end_stream: true,
            pad_length: Some(255),
            data: Bytes::from_static(b"hello"),
        }),
        Frame::Headers(Headers {
            stream_id: 3,
            end_stream: false,
            end_headers: true,
            priority: None,
            pad_length: None,
            fragment: Bytes::from_static(&[0x82, 0x86, 0x84]),
        }),
        Frame::Headers(Headers {
            stream_id: 5,
            end_stream: true,
            end_headers: false,
            priority: Some(dependency),
            pad_length: Some(3),
            fragment: Bytes::new(),
        }),
        Frame::Priority(Priority { stream_id: 7, dependency }),
        Frame::RstStream(RstStream { stream_id: 9, code: ErrorCode::RefusedStream }),
        Frame::RstStream(RstStream { stream_id: 9, code: ErrorCode::Other(0x1234) }),
        Frame::Settings(Settings::default()),
        Frame::Settings(Settings {
            header_table_size: Some(0),
            enable_push: Some(true),
            max_concurrent_streams: Some(u32::MAX),
            initial_window_size: Some(MAX_WINDOW_SIZE),
            max_frame_size: Some(MAX_PAYLOAD_LEN),
            max_header_list_size: Some(1),
            enable_connect_protocol: Some(false),
        }),
        Frame::SettingsAck,
        Frame::PushPromise(PushPromise {
            stream_id: 1,
            promised_stream_id: 2,
            end_headers: true,
            pad_length: None,
            fragment: Bytes::from_static(&[0x82]),
        }),
        Frame::PushPromise(PushPromise {
            stream_id: 3,
            promised_stream_id: MAX_STREAM_ID - 1,
            end_headers: false,
            pad_length: Some(0),
            fragment: Bytes::new(),
        }),
        Frame::Ping(Ping { ack: false, opaque_data: *b"12345678" }),
        Frame::Ping(Ping { ack: true, opaque_data: [0xff; 8] }),
        Frame::GoAway(GoAway {
            last_stream_id: 0,
            code: ErrorCode::NoError,
            debug_data: Bytes::new(),
        }),
        Frame::GoAway(GoAway {
            last_stream_id: MAX_STREAM_ID,
            code: ErrorCode::Http11Required,
            debug_data: Bytes::from_static(b"use h1"),
        }),
        Frame::WindowUpdate(WindowUpdate { stream_id: 0, increment: 1 }),
        Frame::WindowUpdate(WindowUpdate { stream_id: 11, increment: MAX_WINDOW_SIZE }),
        Frame::Continuation(Continuation {
            stream_id: 5,
            end_headers: true,
            fragment: Bytes::from_static(&[0x84]),
        }),
        Frame::Continuation(Continuation {
            stream_id: 5,
            end_headers: false,
            fragment: Bytes::new(),
        }),
        Frame::Unknown { kind: 0xa, stream_id: 0 },
        Frame::Unknown { kind: 0xff, stream_id: 13 },
    ]
}

#[test]
fn every_frame_type_decodes_to_the_value_it_was_written_from() {
    let frames = one_of_each();
    let mut wire = BytesMut::new();
    for frame in &frames {
        write_frame(&mut wire, frame).unwrap();
    }
    let mut decoded = Vec::new();
    while let Some((header, payload)) = split_frame(&mut wire, MAX_PAYLOAD_LEN).unwrap() {
        let frame = decode(header, payload).unwrap();
        assert_eq!(frame.kind(), header.kind);
        assert_eq!(frame.stream_id(), header.stream_id);
        decoded.push(frame);
    }
    assert!(wire.is_empty());
    assert_eq!(decoded, frames);
}

#[test]
fn the_specific_writers_agree_with_write_frame() {
    let dependency = StreamDependency { exclusive: false, depends_on: 0, weight: 0 };
    type Writer = Box<dyn Fn(&mut BytesMut) -> Result<(), EncodeError>>;
    let cases: Vec<(Frame, Writer)> = vec![
        (
            Frame::Priority(Priority { stream_id: 1, dependency }),
            Box::new(move |dst| write_priority(dst, 1, dependency)),
        ),
        (
            Frame::RstStream(RstStream { stream_id: 1, code: ErrorCode::Cancel }),
            Box::new(|dst| write_rst_stream(dst, 1, ErrorCode::Cancel)),
        ),
        (
            Frame::GoAway(GoAway {
                last_stream_id: 3,
                code: ErrorCode::EnhanceYourCalm,
                debug_data: Bytes::from_static(b"slow down"),
            }),
            Box::new(|dst| write_goaway(dst, 3, ErrorCode::EnhanceYourCalm, b"slow down")),
        ),
        (
            Frame::WindowUpdate(WindowUpdate { stream_id: 1, increment: 1000 }),
            Box::new(|dst| write_window_update(dst, 1, 1000)),
        ),
        (
            Frame::Settings(Settings { max_frame_size: Some(1 << 20), ..Settings::default() }),
            Box::new(|dst| {
                write_settings(
                    dst,
                    &Settings { max_frame_size: Some(1 << 20), ..Settings::default() },
                )
            }),
        ),
        (
            Frame::Ping(Ping { ack: true, opaque_data: [7; 8] }),
            Box::new(|dst| {
                write_ping_ack(dst, [7; 8]);
                Ok(())
            }),
        ),
        (
            Frame::Headers(Headers {
                stream_id: 1,
                end_stream: true,
                end_headers: true,
                priority: None,
                pad_length: None,
                fragment: Bytes::from_static(&[0x82]),
            }),
            Box::new(|dst| write_headers(dst, 1, &[0x82], true, DEFAULT_MAX_FRAME_SIZE)),
        ),
    ];
    for (frame, write) in cases {
        let mut generic = BytesMut::new();
        write_frame(&mut generic, &frame).unwrap();
        let mut specific = BytesMut::new();
        write(&mut specific).unwrap();
        assert_eq!(generic, specific, "{frame:?}");
    }

    // DATA: the header writer, then the data written separately.
    let mut specific = BytesMut::new();
    write_data_header(&mut specific, 3, 5, true).unwrap();
    specific.extend_from_slice(b"hello");
    let data = Data {
        stream_id: 3,
        end_stream: true,
        pad_length: None,
        data: Bytes::from_static(b"hello"),
    };
    let mut generic = BytesMut::new();
    write_frame(&mut generic, &Frame::Data(data)).unwrap();
    assert_eq!(generic, specific);
}

#[test]
fn a_field_block_cut_at_16384_bytes_reassembles_from_its_frames() {
    for len in [0, 1, 16_383, 16_384, 16_385, 32_768, 50_000] {
        let block: Vec<u8> = (0..len).map(|i: usize| (i * 7) as u8).collect();
        let mut wire = BytesMut::new();
        write_headers(&mut wire, 9, &block, false, DEFAULT_MAX_FRAME_SIZE).unwrap();

        let mut reassembled = Vec::new();
        let mut frames = 0;
        let mut ended = false;
        while let Some((header, payload)) = split_frame(&mut wire, DEFAULT_MAX_FRAME_SIZE).unwrap()
        {
            assert!(!ended, "no frame after END_HEADERS");
            let (fragment, end_headers) = match decode(header, payload).unwrap() {
                Frame::Headers(headers) if frames == 0 => (headers.fragment, headers.end_headers),
                Frame::Continuation(c) if frames > 0 => (c.fragment, c.end_headers),
                other => panic!("unexpected {other:?}"),
            };
            reassembled.extend_from_slice(&fragment);
            ended = end_headers;
            frames += 1;
        }
        assert!(ended);
        assert_eq!(frames, len.div_ceil(16_384).max(1), "len {len}");
        assert_eq!(reassembled, block, "len {len}");
    }
}
