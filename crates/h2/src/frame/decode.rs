//! Turns a frame's header and payload into a [`Frame`], with every check RFC 9113
//! sections 4 and 6 ask of a receiver that the frame alone can answer. Each refusal is
//! the [`H2Error`] the RFC names, with its scope: the whole connection or one stream.
//!
//! Checks that need connection or stream state are the engine's; the module doc of
//! `frame` lists them.

use bytes::{Buf, Bytes};

use super::header::{FrameHeader, FrameType, RESERVED_BIT};
use super::header::{ACK, END_HEADERS, END_STREAM, PADDED, PRIORITY};
use super::settings::Settings;
use super::{
    Continuation, Data, Frame, GoAway, Headers, Ping, Priority, PushPromise, RstStream,
    StreamDependency, WindowUpdate,
};
use crate::error::{ErrorCode, H2Error};

const PROTOCOL_ERROR: H2Error = H2Error::Connection(ErrorCode::ProtocolError);
const FRAME_SIZE_ERROR: H2Error = H2Error::Connection(ErrorCode::FrameSizeError);

/// Decodes one frame. `payload` is the whole payload (as [`split_frame`] cuts it;
/// its length is the frame's, `header.length` is not read again). Data and field
/// block fragments in the result are slices of `payload`: nothing is copied.
///
/// Unknown frame types give [`Frame::Unknown`] (section 5.5); flags a type does not
/// define are ignored (section 4.1). A HEADERS frame whose stream depends on itself
/// is returned, with the stream error in [`Headers::stream_error`], so that its field
/// block still reaches HPACK.
///
/// [`split_frame`]: super::split_frame
pub fn decode(header: FrameHeader, payload: Bytes) -> Result<Frame, H2Error> {
    match header.kind {
        FrameType::Data => decode_data(&header, payload),
        FrameType::Headers => decode_headers(&header, payload),
        FrameType::Priority => decode_priority(&header, &payload),
        FrameType::RstStream => decode_rst_stream(&header, &payload),
        FrameType::Settings => decode_settings(&header, &payload),
        FrameType::PushPromise => decode_push_promise(&header, payload),
        FrameType::Ping => decode_ping(&header, &payload),
        FrameType::GoAway => decode_goaway(&header, payload),
        FrameType::WindowUpdate => decode_window_update(&header, &payload),
        FrameType::Continuation => decode_continuation(&header, payload),
        // 5.5: frames of unknown types are discarded; the header is kept so that the
        // engine can refuse one in the middle of a field block.
        FrameType::Unknown(kind) => Ok(Frame::Unknown { kind, stream_id: header.stream_id }),
    }
}

fn decode_data(header: &FrameHeader, payload: Bytes) -> Result<Frame, H2Error> {
    // 6.1: DATA on stream 0 is a connection PROTOCOL_ERROR.
    if header.stream_id == 0 {
        return Err(PROTOCOL_ERROR);
    }
    let (pad_length, data) = strip_padding(header, payload)?;
    Ok(Frame::Data(Data {
        stream_id: header.stream_id,
        end_stream: header.has_flag(END_STREAM),
        pad_length,
        data,
    }))
}

fn decode_headers(header: &FrameHeader, payload: Bytes) -> Result<Frame, H2Error> {
    // 6.2: HEADERS on stream 0 is a connection PROTOCOL_ERROR.
    if header.stream_id == 0 {
        return Err(PROTOCOL_ERROR);
    }
    let (pad_length, mut fragment) = strip_padding(header, payload)?;
    let priority = if header.has_flag(PRIORITY) {
        // 6.2, 4.2: PRIORITY makes the 5 bytes of priority fields mandatory; a payload
        // without room for them (after padding) is a FRAME_SIZE_ERROR, on the
        // connection as HEADERS carries a field block.
        Some(split_dependency(&mut fragment).ok_or(FRAME_SIZE_ERROR)?)
    } else {
        None
    };
    Ok(Frame::Headers(Headers {
        stream_id: header.stream_id,
        end_stream: header.has_flag(END_STREAM),
        end_headers: header.has_flag(END_HEADERS),
        priority,
        pad_length,
        fragment,
    }))
}

fn decode_priority(header: &FrameHeader, payload: &[u8]) -> Result<Frame, H2Error> {
    // 6.3: PRIORITY on stream 0 is a connection PROTOCOL_ERROR.
    if header.stream_id == 0 {
        return Err(PROTOCOL_ERROR);
    }
    // 6.3: a length other than 5 is a stream FRAME_SIZE_ERROR.
    let Ok(fields) = <&[u8; 5]>::try_from(payload) else {
        return Err(H2Error::Stream { stream: header.stream_id, code: ErrorCode::FrameSizeError });
    };
    let dependency = parse_dependency(fields);
    // RFC 7540 section 5.3.1 (kept by RFC 9113 section 5.3.2): a stream that depends on
    // itself is a stream PROTOCOL_ERROR.
    if dependency.depends_on == header.stream_id {
        return Err(H2Error::Stream { stream: header.stream_id, code: ErrorCode::ProtocolError });
    }
    Ok(Frame::Priority(Priority { stream_id: header.stream_id, dependency }))
}

fn decode_rst_stream(header: &FrameHeader, payload: &[u8]) -> Result<Frame, H2Error> {
    // 6.4: RST_STREAM on stream 0 is a connection PROTOCOL_ERROR.
    if header.stream_id == 0 {
        return Err(PROTOCOL_ERROR);
    }
    // 6.4: a length other than 4 is a connection FRAME_SIZE_ERROR.
    let Ok(&code) = <&[u8; 4]>::try_from(payload) else {
        return Err(FRAME_SIZE_ERROR);
    };
    Ok(Frame::RstStream(RstStream {
        stream_id: header.stream_id,
        code: ErrorCode::from_u32(u32::from_be_bytes(code)),
    }))
}

fn decode_settings(header: &FrameHeader, payload: &[u8]) -> Result<Frame, H2Error> {
    // 6.5: SETTINGS on a stream other than 0 is a connection PROTOCOL_ERROR.
    if header.stream_id != 0 {
        return Err(PROTOCOL_ERROR);
    }
    if header.has_flag(ACK) {
        // 6.5: an ACK with a payload is a connection FRAME_SIZE_ERROR.
        if !payload.is_empty() {
            return Err(FRAME_SIZE_ERROR);
        }
        return Ok(Frame::SettingsAck);
    }
    // 6.5 (length a multiple of 6) and 6.5.2 (values) are checked by Settings::decode.
    Settings::decode(payload).map(Frame::Settings)
}

fn decode_push_promise(header: &FrameHeader, payload: Bytes) -> Result<Frame, H2Error> {
    // 6.6: PUSH_PROMISE on stream 0 is a connection PROTOCOL_ERROR.
    if header.stream_id == 0 {
        return Err(PROTOCOL_ERROR);
    }
    let (pad_length, mut fragment) = strip_padding(header, payload)?;
    // 6.6, 4.2: the Promised Stream ID is mandatory; a payload without room for it
    // (after padding) is a FRAME_SIZE_ERROR, on the connection (a field block).
    let Some(&promised) = fragment.first_chunk::<4>() else {
        return Err(FRAME_SIZE_ERROR);
    };
    fragment.advance(4);
    // 6.6: the reserved bit is ignored.
    let promised_stream_id = u32::from_be_bytes(promised) & !RESERVED_BIT;
    // 6.6, 5.1.1: promising stream 0, which can never be opened, is an illegal stream
    // identifier: a connection PROTOCOL_ERROR. Other ids are judged by the engine.
    if promised_stream_id == 0 {
        return Err(PROTOCOL_ERROR);
    }
    Ok(Frame::PushPromise(PushPromise {
        stream_id: header.stream_id,
        promised_stream_id,
        end_headers: header.has_flag(END_HEADERS),
        pad_length,
        fragment,
    }))
}

fn decode_ping(header: &FrameHeader, payload: &[u8]) -> Result<Frame, H2Error> {
    // 6.7: PING on a stream other than 0 is a connection PROTOCOL_ERROR.
    if header.stream_id != 0 {
        return Err(PROTOCOL_ERROR);
    }
    // 6.7: a length other than 8 is a connection FRAME_SIZE_ERROR.
    let Ok(&opaque_data) = <&[u8; 8]>::try_from(payload) else {
        return Err(FRAME_SIZE_ERROR);
    };
    Ok(Frame::Ping(Ping { ack: header.has_flag(ACK), opaque_data }))
}

fn decode_goaway(header: &FrameHeader, mut payload: Bytes) -> Result<Frame, H2Error> {
    // 6.8: GOAWAY on a stream other than 0 is a connection PROTOCOL_ERROR.
    if header.stream_id != 0 {
        return Err(PROTOCOL_ERROR);
    }
    // 6.8, 4.2: the last stream id and error code are mandatory; fewer than 8 bytes is
    // a connection FRAME_SIZE_ERROR (stream 0).
    let Some(&[s0, s1, s2, s3, c0, c1, c2, c3]) = payload.first_chunk::<8>() else {
        return Err(FRAME_SIZE_ERROR);
    };
    payload.advance(8);
    Ok(Frame::GoAway(GoAway {
        // 6.8: the reserved bit is ignored.
        last_stream_id: u32::from_be_bytes([s0, s1, s2, s3]) & !RESERVED_BIT,
        code: ErrorCode::from_u32(u32::from_be_bytes([c0, c1, c2, c3])),
        debug_data: payload,
    }))
}

fn decode_window_update(header: &FrameHeader, payload: &[u8]) -> Result<Frame, H2Error> {
    // 6.9: a length other than 4 is a connection FRAME_SIZE_ERROR, whatever the stream.
    let Ok(&raw) = <&[u8; 4]>::try_from(payload) else {
        return Err(FRAME_SIZE_ERROR);
    };
    // 6.9: the reserved bit is ignored.
    let increment = u32::from_be_bytes(raw) & !RESERVED_BIT;
    // 6.9: an increment of 0 is a stream PROTOCOL_ERROR on a stream, and a connection
    // error on the connection's window (stream 0).
    if increment == 0 {
        return Err(match header.stream_id {
            0 => PROTOCOL_ERROR,
            stream => H2Error::Stream { stream, code: ErrorCode::ProtocolError },
        });
    }
    Ok(Frame::WindowUpdate(WindowUpdate { stream_id: header.stream_id, increment }))
}

fn decode_continuation(header: &FrameHeader, payload: Bytes) -> Result<Frame, H2Error> {
    // 6.10: CONTINUATION on stream 0 is a connection PROTOCOL_ERROR.
    if header.stream_id == 0 {
        return Err(PROTOCOL_ERROR);
    }
    Ok(Frame::Continuation(Continuation {
        stream_id: header.stream_id,
        end_headers: header.has_flag(END_HEADERS),
        fragment: payload,
    }))
}

/// Removes the Pad Length byte and the padding of a DATA, HEADERS or PUSH_PROMISE
/// payload when PADDED is set; returns the Pad Length and what lies between.
fn strip_padding(header: &FrameHeader, mut payload: Bytes) -> Result<(Option<u8>, Bytes), H2Error> {
    if !header.has_flag(PADDED) {
        return Ok((None, payload));
    }
    // 4.2: PADDED makes the Pad Length byte mandatory; an empty payload is too small
    // for it: a FRAME_SIZE_ERROR, on the connection (required for HEADERS and
    // PUSH_PROMISE, chosen for DATA too: the frame cannot be read at all).
    let Some(&pad) = payload.first() else {
        return Err(FRAME_SIZE_ERROR);
    };
    payload.advance(1);
    // 6.1, 6.2, 6.6: padding as long as the payload or longer is a connection
    // PROTOCOL_ERROR. The payload counts the Pad Length byte, so the padding must fit
    // in what follows that byte.
    let kept = payload.len().checked_sub(usize::from(pad)).ok_or(PROTOCOL_ERROR)?;
    payload.truncate(kept);
    Ok((Some(pad), payload))
}

/// Takes the 5 bytes of priority fields (sections 6.2, 6.3) off the front of a
/// HEADERS payload, if they are there.
fn split_dependency(payload: &mut Bytes) -> Option<StreamDependency> {
    let dependency = parse_dependency(payload.first_chunk::<5>()?);
    payload.advance(5);
    Some(dependency)
}

/// Reads the exclusive bit, the 31-bit stream dependency and the weight.
fn parse_dependency(fields: &[u8; 5]) -> StreamDependency {
    let [d0, d1, d2, d3, weight] = *fields;
    let raw = u32::from_be_bytes([d0, d1, d2, d3]);
    StreamDependency { exclusive: raw & RESERVED_BIT != 0, depends_on: raw & !RESERVED_BIT, weight }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::frame::{split_frame, MAX_PAYLOAD_LEN};

    const CONNECTION_PROTOCOL: Result<Frame, H2Error> = Err(PROTOCOL_ERROR);
    const CONNECTION_FRAME_SIZE: Result<Frame, H2Error> = Err(FRAME_SIZE_ERROR);

    /// Splits and decodes exactly one frame given as its wire bytes.
    fn decode_wire(wire: &[u8]) -> Result<Frame, H2Error> {
        let mut buf = BytesMut::from(wire);
        let (header, payload) = split_frame(&mut buf, MAX_PAYLOAD_LEN).unwrap().unwrap();
        assert!(buf.is_empty(), "one whole frame expected");
        decode(header, payload)
    }

    fn stream_error(stream: u32, code: ErrorCode) -> Result<Frame, H2Error> {
        Err(H2Error::Stream { stream, code })
    }

    // DATA (6.1)

    #[test]
    fn data_on_stream_0_is_a_connection_protocol_error() {
        assert_eq!(decode_wire(&[0, 0, 2, 0x0, 0x0, 0, 0, 0, 0, b'h', b'i']), CONNECTION_PROTOCOL);
    }

    #[test]
    fn data_padding_as_long_as_the_payload_is_a_connection_protocol_error() {
        // Payload of 3: Pad Length 3 (and 4, 255) covers the Pad Length byte itself.
        for pad in [3, 4, 255] {
            let wire = [0, 0, 3, 0x0, 0x8, 0, 0, 0, 1, pad, 0, 0];
            assert_eq!(decode_wire(&wire), CONNECTION_PROTOCOL, "pad {pad}");
        }
    }

    #[test]
    fn data_padded_without_a_pad_length_byte_is_a_connection_frame_size_error() {
        assert_eq!(decode_wire(&[0, 0, 0, 0x0, 0x8, 0, 0, 0, 1]), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn data_gives_its_bytes_without_padding_and_counts_the_whole_payload() {
        // Payload of 6: Pad Length 2, "abc", two bytes of padding; END_STREAM.
        let wire = [0, 0, 6, 0x0, 0x9, 0, 0, 0, 3, 2, b'a', b'b', b'c', 0, 0];
        let expected = Data {
            stream_id: 3,
            end_stream: true,
            pad_length: Some(2),
            data: Bytes::from_static(b"abc"),
        };
        assert_eq!(decode_wire(&wire), Ok(Frame::Data(expected.clone())));
        assert_eq!(expected.flow_controlled_len(), 6);
        // Padding that leaves no data at all is allowed.
        let wire = [0, 0, 3, 0x0, 0x8, 0, 0, 0, 1, 2, 0, 0];
        let Ok(Frame::Data(data)) = decode_wire(&wire) else { panic!("DATA expected") };
        assert!(data.data.is_empty());
        assert_eq!(data.flow_controlled_len(), 3);
    }

    #[test]
    fn unknown_flags_are_ignored() {
        // DATA with every flag but PADDED set: END_STREAM counts, the rest is ignored.
        let wire = [0, 0, 1, 0x0, 0xf7, 0, 0, 0, 1, b'x'];
        let expected = Data {
            stream_id: 1,
            end_stream: true,
            pad_length: None,
            data: Bytes::from_static(b"x"),
        };
        assert_eq!(decode_wire(&wire), Ok(Frame::Data(expected)));
        // PING with every flag but ACK set is not an ACK.
        let wire = [0, 0, 8, 0x6, 0xfe, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(
            decode_wire(&wire),
            Ok(Frame::Ping(Ping { ack: false, opaque_data: [1, 2, 3, 4, 5, 6, 7, 8] }))
        );
    }

    #[test]
    fn the_reserved_bit_of_the_stream_id_is_ignored() {
        let wire = [0, 0, 1, 0x0, 0x0, 0x80, 0, 0, 5, b'x'];
        assert_eq!(decode_wire(&wire).map(|frame| frame.stream_id()), Ok(5));
        // Stream "0" with the reserved bit set is still stream 0.
        let wire = [0, 0, 1, 0x0, 0x0, 0x80, 0, 0, 0, b'x'];
        assert_eq!(decode_wire(&wire), CONNECTION_PROTOCOL);
    }

    // HEADERS (6.2)

    #[test]
    fn headers_on_stream_0_is_a_connection_protocol_error() {
        assert_eq!(decode_wire(&[0, 0, 1, 0x1, 0x4, 0, 0, 0, 0, 0x82]), CONNECTION_PROTOCOL);
    }

    #[test]
    fn headers_padding_as_long_as_the_payload_is_a_connection_protocol_error() {
        let wire = [0, 0, 3, 0x1, 0xc, 0, 0, 0, 1, 3, 0x82, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_PROTOCOL);
        assert_eq!(decode_wire(&[0, 0, 0, 0x1, 0xc, 0, 0, 0, 1]), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn headers_too_short_for_its_priority_fields_is_a_connection_frame_size_error() {
        // PRIORITY set, 4 bytes of payload.
        let wire = [0, 0, 4, 0x1, 0x24, 0, 0, 0, 1, 0, 0, 0, 3];
        assert_eq!(decode_wire(&wire), CONNECTION_FRAME_SIZE);
        // PADDED and PRIORITY: 7 bytes, 5 of padding leave only 1 for the 5 fields.
        let wire = [0, 0, 7, 0x1, 0x2c, 0, 0, 0, 1, 5, 0, 0, 0, 3, 16, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn headers_gives_its_fragment_priority_and_flags() {
        // PADDED | PRIORITY | END_HEADERS | END_STREAM on stream 5: Pad Length 1,
        // exclusive dependency on 3, weight 15, fragment 0x82 0x86, one padding byte.
        let wire = [0, 0, 9, 0x1, 0x2d, 0, 0, 0, 5, 1, 0x80, 0, 0, 3, 15, 0x82, 0x86, 0];
        let expected = Headers {
            stream_id: 5,
            end_stream: true,
            end_headers: true,
            priority: Some(StreamDependency { exclusive: true, depends_on: 3, weight: 15 }),
            pad_length: Some(1),
            fragment: Bytes::from_static(&[0x82, 0x86]),
        };
        assert_eq!(decode_wire(&wire), Ok(Frame::Headers(expected.clone())));
        assert_eq!(expected.stream_error(), None);
        // No flags: the whole payload is the fragment, and more is to come.
        let wire = [0, 0, 2, 0x1, 0x0, 0, 0, 0, 5, 0x82, 0x86];
        let expected = Headers {
            end_stream: false,
            end_headers: false,
            priority: None,
            pad_length: None,
            ..expected
        };
        assert_eq!(decode_wire(&wire), Ok(Frame::Headers(expected)));
    }

    #[test]
    fn headers_depending_on_its_own_stream_carries_a_stream_protocol_error() {
        // The frame comes back (its fragment must reach HPACK) with the error to raise.
        let wire = [0, 0, 6, 0x1, 0x24, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0x82];
        let Ok(Frame::Headers(headers)) = decode_wire(&wire) else { panic!("HEADERS expected") };
        assert_eq!(&headers.fragment[..], &[0x82]);
        assert_eq!(
            headers.stream_error(),
            Some(H2Error::Stream { stream: 5, code: ErrorCode::ProtocolError })
        );
    }

    // PRIORITY (6.3)

    #[test]
    fn priority_on_stream_0_is_a_connection_protocol_error() {
        assert_eq!(
            decode_wire(&[0, 0, 5, 0x2, 0x0, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
            CONNECTION_PROTOCOL
        );
    }

    #[test]
    fn priority_of_a_length_other_than_5_is_a_stream_frame_size_error() {
        let short = [0, 0, 4, 0x2, 0x0, 0, 0, 0, 3, 0, 0, 0, 1];
        assert_eq!(decode_wire(&short), stream_error(3, ErrorCode::FrameSizeError));
        let long = [0, 0, 6, 0x2, 0x0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0];
        assert_eq!(decode_wire(&long), stream_error(3, ErrorCode::FrameSizeError));
    }

    #[test]
    fn priority_depending_on_its_own_stream_is_a_stream_protocol_error() {
        let wire = [0, 0, 5, 0x2, 0x0, 0, 0, 0, 3, 0x80, 0, 0, 3, 7];
        assert_eq!(decode_wire(&wire), stream_error(3, ErrorCode::ProtocolError));
    }

    #[test]
    fn priority_gives_its_fields() {
        let wire = [0, 0, 5, 0x2, 0x0, 0, 0, 0, 3, 0, 0, 0, 1, 255];
        let dependency = StreamDependency { exclusive: false, depends_on: 1, weight: 255 };
        assert_eq!(decode_wire(&wire), Ok(Frame::Priority(Priority { stream_id: 3, dependency })));
    }

    // RST_STREAM (6.4)

    #[test]
    fn rst_stream_on_stream_0_is_a_connection_protocol_error() {
        assert_eq!(decode_wire(&[0, 0, 4, 0x3, 0x0, 0, 0, 0, 0, 0, 0, 0, 8]), CONNECTION_PROTOCOL);
    }

    #[test]
    fn rst_stream_of_a_length_other_than_4_is_a_connection_frame_size_error() {
        assert_eq!(decode_wire(&[0, 0, 3, 0x3, 0x0, 0, 0, 0, 1, 0, 0, 8]), CONNECTION_FRAME_SIZE);
        let long = [0, 0, 5, 0x3, 0x0, 0, 0, 0, 1, 0, 0, 0, 8, 0];
        assert_eq!(decode_wire(&long), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn rst_stream_gives_its_code_known_or_not() {
        let wire = [0, 0, 4, 0x3, 0x0, 0, 0, 0, 1, 0, 0, 0, 8];
        assert_eq!(
            decode_wire(&wire),
            Ok(Frame::RstStream(RstStream { stream_id: 1, code: ErrorCode::Cancel }))
        );
        let wire = [0, 0, 4, 0x3, 0x0, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef];
        assert_eq!(
            decode_wire(&wire),
            Ok(Frame::RstStream(RstStream { stream_id: 1, code: ErrorCode::Other(0xdead_beef) }))
        );
    }

    // SETTINGS (6.5)

    #[test]
    fn settings_on_a_stream_is_a_connection_protocol_error() {
        assert_eq!(decode_wire(&[0, 0, 0, 0x4, 0x0, 0, 0, 0, 1]), CONNECTION_PROTOCOL);
        assert_eq!(decode_wire(&[0, 0, 0, 0x4, 0x1, 0, 0, 0, 1]), CONNECTION_PROTOCOL);
    }

    #[test]
    fn settings_ack_with_a_payload_is_a_connection_frame_size_error() {
        let wire = [0, 0, 6, 0x4, 0x1, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        assert_eq!(decode_wire(&wire), CONNECTION_FRAME_SIZE);
        assert_eq!(decode_wire(&[0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]), Ok(Frame::SettingsAck));
    }

    #[test]
    fn settings_of_a_length_not_a_multiple_of_6_is_a_connection_frame_size_error() {
        let wire = [0, 0, 5, 0x4, 0x0, 0, 0, 0, 0, 0, 3, 0, 0, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_FRAME_SIZE);
        let wire = [0, 0, 7, 0x4, 0x0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn settings_values_out_of_range_are_refused_with_their_codes() {
        let settings = |id: u8, value: [u8; 4]| {
            let [v0, v1, v2, v3] = value;
            decode_wire(&[0, 0, 6, 0x4, 0x0, 0, 0, 0, 0, 0, id, v0, v1, v2, v3])
        };
        // ENABLE_PUSH other than 0 or 1: PROTOCOL_ERROR.
        assert_eq!(settings(0x2, [0, 0, 0, 2]), CONNECTION_PROTOCOL);
        // INITIAL_WINDOW_SIZE above 2^31-1: FLOW_CONTROL_ERROR.
        assert_eq!(
            settings(0x4, [0x80, 0, 0, 0]),
            Err(H2Error::Connection(ErrorCode::FlowControlError))
        );
        // MAX_FRAME_SIZE below 2^14 or above 2^24-1: PROTOCOL_ERROR.
        assert_eq!(settings(0x5, [0, 0, 0x3f, 0xff]), CONNECTION_PROTOCOL);
        assert_eq!(settings(0x5, [0x01, 0, 0, 0]), CONNECTION_PROTOCOL);
        // ENABLE_CONNECT_PROTOCOL (RFC 8441) other than 0 or 1: PROTOCOL_ERROR.
        assert_eq!(settings(0x8, [0, 0, 0, 2]), CONNECTION_PROTOCOL);
        // The edges that are allowed.
        let max_window =
            Settings { initial_window_size: Some((1 << 31) - 1), ..Settings::default() };
        assert_eq!(settings(0x4, [0x7f, 0xff, 0xff, 0xff]), Ok(Frame::Settings(max_window)));
        let min_frame = Settings { max_frame_size: Some(1 << 14), ..Settings::default() };
        assert_eq!(settings(0x5, [0, 0, 0x40, 0]), Ok(Frame::Settings(min_frame)));
    }

    #[test]
    fn settings_ignore_unknown_ids_and_keep_the_last_value() {
        // HEADER_TABLE_SIZE 100, unknown 0x10 = 7, HEADER_TABLE_SIZE 0.
        let wire = [
            0, 0, 18, 0x4, 0x0, 0, 0, 0, 0, //
            0, 0x1, 0, 0, 0, 100, //
            0, 0x10, 0, 0, 0, 7, //
            0, 0x1, 0, 0, 0, 0,
        ];
        let expected = Settings { header_table_size: Some(0), ..Settings::default() };
        assert_eq!(decode_wire(&wire), Ok(Frame::Settings(expected)));
        assert_eq!(
            decode_wire(&[0, 0, 0, 0x4, 0x0, 0, 0, 0, 0]),
            Ok(Frame::Settings(Settings::default()))
        );
    }

    // PUSH_PROMISE (6.6)

    #[test]
    fn push_promise_on_stream_0_is_a_connection_protocol_error() {
        let wire = [0, 0, 5, 0x5, 0x4, 0, 0, 0, 0, 0, 0, 0, 2, 0x82];
        assert_eq!(decode_wire(&wire), CONNECTION_PROTOCOL);
    }

    #[test]
    fn push_promise_padding_as_long_as_the_payload_is_a_connection_protocol_error() {
        let wire = [0, 0, 6, 0x5, 0xc, 0, 0, 0, 1, 6, 0, 0, 0, 2, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_PROTOCOL);
    }

    #[test]
    fn push_promise_too_short_for_its_promised_id_is_a_connection_frame_size_error() {
        assert_eq!(decode_wire(&[0, 0, 3, 0x5, 0x4, 0, 0, 0, 1, 0, 0, 2]), CONNECTION_FRAME_SIZE);
        // 6 bytes, but 2 of them padding: 3 left for the 4-byte id.
        let wire = [0, 0, 6, 0x5, 0xc, 0, 0, 0, 1, 2, 0, 0, 2, 0, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn push_promise_of_stream_0_is_a_connection_protocol_error() {
        // The reserved bit set does not make it another stream.
        let wire = [0, 0, 5, 0x5, 0x4, 0, 0, 0, 1, 0x80, 0, 0, 0, 0x82];
        assert_eq!(decode_wire(&wire), CONNECTION_PROTOCOL);
    }

    #[test]
    fn push_promise_gives_its_promised_stream_and_fragment() {
        // PADDED | END_HEADERS on stream 1: Pad Length 1, promised 2 (reserved bit
        // set), fragment 0x82, one byte of padding.
        let wire = [0, 0, 7, 0x5, 0xc, 0, 0, 0, 1, 1, 0x80, 0, 0, 2, 0x82, 0];
        let expected = PushPromise {
            stream_id: 1,
            promised_stream_id: 2,
            end_headers: true,
            pad_length: Some(1),
            fragment: Bytes::from_static(&[0x82]),
        };
        assert_eq!(decode_wire(&wire), Ok(Frame::PushPromise(expected)));
    }

    // PING (6.7)

    #[test]
    fn ping_on_a_stream_is_a_connection_protocol_error() {
        let wire = [0, 0, 8, 0x6, 0x0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_PROTOCOL);
    }

    #[test]
    fn ping_of_a_length_other_than_8_is_a_connection_frame_size_error() {
        let short = [0, 0, 7, 0x6, 0x0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_wire(&short), CONNECTION_FRAME_SIZE);
        let long = [0, 0, 9, 0x6, 0x0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_wire(&long), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn ping_gives_its_ack_flag_and_data() {
        let wire = [0, 0, 8, 0x6, 0x1, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1];
        assert_eq!(
            decode_wire(&wire),
            Ok(Frame::Ping(Ping { ack: true, opaque_data: [8, 7, 6, 5, 4, 3, 2, 1] }))
        );
    }

    // GOAWAY (6.8)

    #[test]
    fn goaway_on_a_stream_is_a_connection_protocol_error() {
        let wire = [0, 0, 8, 0x7, 0x0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_PROTOCOL);
    }

    #[test]
    fn goaway_shorter_than_8_is_a_connection_frame_size_error() {
        let wire = [0, 0, 7, 0x7, 0x0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_wire(&wire), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn goaway_gives_last_stream_code_and_debug_data() {
        // Last stream 2^31-1 with the reserved bit set, ENHANCE_YOUR_CALM, "calm".
        let wire = [
            0, 0, 12, 0x7, 0x0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0xb, b'c', b'a', b'l',
            b'm',
        ];
        let expected = GoAway {
            last_stream_id: (1 << 31) - 1,
            code: ErrorCode::EnhanceYourCalm,
            debug_data: Bytes::from_static(b"calm"),
        };
        assert_eq!(decode_wire(&wire), Ok(Frame::GoAway(expected)));
    }

    // WINDOW_UPDATE (6.9)

    #[test]
    fn window_update_of_a_length_other_than_4_is_a_connection_frame_size_error() {
        assert_eq!(decode_wire(&[0, 0, 3, 0x8, 0x0, 0, 0, 0, 1, 0, 0, 1]), CONNECTION_FRAME_SIZE);
        let long = [0, 0, 5, 0x8, 0x0, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        assert_eq!(decode_wire(&long), CONNECTION_FRAME_SIZE);
    }

    #[test]
    fn window_update_of_0_is_a_stream_error_on_a_stream_and_a_connection_error_on_0() {
        let on_stream = [0, 0, 4, 0x8, 0x0, 0, 0, 0, 7, 0, 0, 0, 0];
        assert_eq!(decode_wire(&on_stream), stream_error(7, ErrorCode::ProtocolError));
        let on_connection = [0, 0, 4, 0x8, 0x0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode_wire(&on_connection), CONNECTION_PROTOCOL);
        // Only the reserved bit set: still an increment of 0.
        let reserved = [0, 0, 4, 0x8, 0x0, 0, 0, 0, 7, 0x80, 0, 0, 0];
        assert_eq!(decode_wire(&reserved), stream_error(7, ErrorCode::ProtocolError));
    }

    #[test]
    fn window_update_gives_its_increment_without_the_reserved_bit() {
        let wire = [0, 0, 4, 0x8, 0x0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(
            decode_wire(&wire),
            Ok(Frame::WindowUpdate(WindowUpdate { stream_id: 0, increment: (1 << 31) - 1 }))
        );
    }

    // CONTINUATION (6.10)

    #[test]
    fn continuation_on_stream_0_is_a_connection_protocol_error() {
        assert_eq!(decode_wire(&[0, 0, 1, 0x9, 0x4, 0, 0, 0, 0, 0x82]), CONNECTION_PROTOCOL);
    }

    #[test]
    fn continuation_gives_its_fragment_and_end_headers() {
        let wire = [0, 0, 2, 0x9, 0x4, 0, 0, 0, 3, 0x82, 0x84];
        let expected = Continuation {
            stream_id: 3,
            end_headers: true,
            fragment: Bytes::from_static(&[0x82, 0x84]),
        };
        assert_eq!(decode_wire(&wire), Ok(Frame::Continuation(expected)));
    }

    // Unknown types (5.5)

    #[test]
    fn an_unknown_type_is_kept_as_its_header_only() {
        let wire = [0, 0, 3, 0xfa, 0xff, 0, 0, 0, 0, 1, 2, 3];
        assert_eq!(decode_wire(&wire), Ok(Frame::Unknown { kind: 0xfa, stream_id: 0 }));
        let wire = [0, 0, 0, 0xa, 0x0, 0, 0, 0, 9];
        assert_eq!(decode_wire(&wire), Ok(Frame::Unknown { kind: 0xa, stream_id: 9 }));
    }
}
