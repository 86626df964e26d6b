//! Writes frames (RFC 9113 section 6) into a connection's write buffer.
//!
//! What a writer writes, [`decode`](super::decode()) accepts. A value a receiver would
//! refuse (a payload past 2^24-1 bytes, a stream id past 2^31-1 or 0 where the type
//! needs a stream, a window increment outside 1..=2^31-1, a stream depending on
//! itself, a setting out of range) is the caller's bug: the writer returns an
//! [`EncodeError`] and writes nothing, rather than send a frame that would end the
//! connection. Limits that depend on the peer (its SETTINGS_MAX_FRAME_SIZE for DATA,
//! flow-control windows) are the engine's, except in [`write_headers`], which cuts a
//! field block at the max frame size it is given.

use bytes::{BufMut, BytesMut};

use super::header::{put_header, FrameType, HEADER_LEN, RESERVED_BIT};
use super::header::{ACK, DEFAULT_MAX_FRAME_SIZE, END_HEADERS, END_STREAM, MAX_PAYLOAD_LEN};
use super::header::{MAX_STREAM_ID, PADDED, PRIORITY};
use super::settings::{Settings, MAX_WINDOW_SIZE};
use super::{Continuation, Data, Frame, Headers, PushPromise, StreamDependency};
use crate::error::ErrorCode;

/// A frame a writer refused to write, because its receiver would refuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// A payload longer than the 24-bit Length field carries (section 4.1).
    PayloadTooLong { length: usize },
    /// A stream id above 2^31-1 (section 5.1.1), or 0 where the frame type needs a
    /// stream (DATA, HEADERS, PRIORITY, RST_STREAM, PUSH_PROMISE and its promised
    /// stream, CONTINUATION).
    InvalidStreamId(u32),
    /// A stream made to depend on itself (RFC 7540 section 5.3.1).
    SelfDependency(u32),
    /// A WINDOW_UPDATE increment outside 1..=2^31-1 (section 6.9).
    InvalidIncrement(u32),
    /// A SETTINGS value outside its range (section 6.5.2): the identifier and value.
    SettingValue { id: u16, value: u32 },
    /// A max frame size outside 2^14..=2^24-1 (section 4.2).
    InvalidMaxFrameSize(u32),
    /// [`Frame::Unknown`] given a type code RFC 9113 defines (0x0 to 0x9).
    DefinedKind(u8),
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::PayloadTooLong { length } => {
                write!(f, "frame payload of {length} bytes exceeds 2^24-1")
            }
            EncodeError::InvalidStreamId(id) => write!(f, "stream id {id} not valid here"),
            EncodeError::SelfDependency(id) => write!(f, "stream {id} depends on itself"),
            EncodeError::InvalidIncrement(n) => {
                write!(f, "window increment {n} outside 1..=2^31-1")
            }
            EncodeError::SettingValue { id, value } => {
                write!(f, "setting {id:#x} value {value} out of range")
            }
            EncodeError::InvalidMaxFrameSize(n) => {
                write!(f, "max frame size {n} outside 2^14..=2^24-1")
            }
            EncodeError::DefinedKind(kind) => write!(f, "frame type {kind:#x} is not unknown"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Writes any frame as one frame on the wire, its flags, padding and priority fields
/// as the value has them. A [`Frame::Unknown`] is written with an empty payload.
///
/// To send a field block, [`write_headers`] cuts it at the peer's max frame size;
/// this writes a HEADERS, PUSH_PROMISE or CONTINUATION value as it is.
pub fn write_frame(dst: &mut BytesMut, frame: &Frame) -> Result<(), EncodeError> {
    match frame {
        Frame::Data(data) => write_data(dst, data),
        Frame::Headers(headers) => write_headers_frame(dst, headers),
        Frame::Priority(priority) => write_priority(dst, priority.stream_id, priority.dependency),
        Frame::RstStream(rst) => write_rst_stream(dst, rst.stream_id, rst.code),
        Frame::Settings(settings) => write_settings(dst, settings),
        Frame::SettingsAck => {
            write_settings_ack(dst);
            Ok(())
        }
        Frame::PushPromise(promise) => write_push_promise(dst, promise),
        Frame::Ping(ping) if ping.ack => {
            write_ping_ack(dst, ping.opaque_data);
            Ok(())
        }
        Frame::Ping(ping) => {
            write_ping(dst, ping.opaque_data);
            Ok(())
        }
        Frame::GoAway(goaway) => {
            write_goaway(dst, goaway.last_stream_id, goaway.code, &goaway.debug_data)
        }
        Frame::WindowUpdate(update) => write_window_update(dst, update.stream_id, update.increment),
        Frame::Continuation(continuation) => write_continuation(dst, continuation),
        &Frame::Unknown { kind, stream_id } => {
            if let FrameType::Unknown(kind) = FrameType::from_u8(kind) {
                put_header(dst, 0, FrameType::Unknown(kind), 0, any_stream(stream_id)?);
                Ok(())
            } else {
                Err(EncodeError::DefinedKind(kind))
            }
        }
    }
}

/// Writes the 9-byte header of a DATA frame (section 6.1) whose `length` bytes of data
/// the caller writes next, from its own `Bytes` (a vectored write: the data is not
/// copied). No padding. The caller keeps `length` within the peer's
/// SETTINGS_MAX_FRAME_SIZE and flow-control windows.
pub fn write_data_header(
    dst: &mut BytesMut,
    stream_id: u32,
    length: usize,
    end_stream: bool,
) -> Result<(), EncodeError> {
    let stream_id = stream(stream_id)?;
    let length = payload_len(&[length])?;
    put_header(dst, length, FrameType::Data, if end_stream { END_STREAM } else { 0 }, stream_id);
    Ok(())
}

/// Writes a whole field block as a HEADERS frame followed by as many CONTINUATION
/// frames as it takes (sections 4.3, 6.2, 6.10), none with a payload above
/// `max_frame_size` (the peer's SETTINGS_MAX_FRAME_SIZE); END_HEADERS on the last,
/// END_STREAM (if asked) on the HEADERS frame. No padding, no priority fields.
pub fn write_headers(
    dst: &mut BytesMut,
    stream_id: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) -> Result<(), EncodeError> {
    let stream_id = stream(stream_id)?;
    if !(DEFAULT_MAX_FRAME_SIZE..=MAX_PAYLOAD_LEN).contains(&max_frame_size) {
        return Err(EncodeError::InvalidMaxFrameSize(max_frame_size));
    }
    let max = usize::try_from(max_frame_size)
        .map_err(|_| EncodeError::InvalidMaxFrameSize(max_frame_size))?;
    let (first, rest) = block.split_at_checked(max).unwrap_or((block, &[]));
    let frames = rest.len().div_ceil(max).saturating_add(1);
    dst.reserve(block.len().saturating_add(frames.saturating_mul(HEADER_LEN)));

    let mut flags = if end_stream { END_STREAM } else { 0 };
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    put_header(dst, len_u32(first.len()), FrameType::Headers, flags, stream_id);
    dst.put_slice(first);
    let mut chunks = rest.chunks(max).peekable();
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_none() { END_HEADERS } else { 0 };
        put_header(dst, len_u32(chunk.len()), FrameType::Continuation, flags, stream_id);
        dst.put_slice(chunk);
    }
    Ok(())
}

/// Writes a SETTINGS frame (section 6.5) with the parameters present in `settings`,
/// in identifier order.
pub fn write_settings(dst: &mut BytesMut, settings: &Settings) -> Result<(), EncodeError> {
    settings.check()?;
    put_header(dst, settings.payload_len(), FrameType::Settings, 0, 0);
    settings.put_payload(dst);
    Ok(())
}

/// Writes a SETTINGS frame with ACK and no payload (section 6.5.3).
pub fn write_settings_ack(dst: &mut BytesMut) {
    put_header(dst, 0, FrameType::Settings, ACK, 0);
}

/// Writes a PING frame (section 6.7).
pub fn write_ping(dst: &mut BytesMut, opaque_data: [u8; 8]) {
    put_header(dst, 8, FrameType::Ping, 0, 0);
    dst.put_slice(&opaque_data);
}

/// Writes a PING frame with ACK: the answer to a PING, with its 8 bytes (section 6.7).
pub fn write_ping_ack(dst: &mut BytesMut, opaque_data: [u8; 8]) {
    put_header(dst, 8, FrameType::Ping, ACK, 0);
    dst.put_slice(&opaque_data);
}

/// Writes a GOAWAY frame (section 6.8) with optional debug data.
pub fn write_goaway(
    dst: &mut BytesMut,
    last_stream_id: u32,
    code: ErrorCode,
    debug_data: &[u8],
) -> Result<(), EncodeError> {
    let last_stream_id = any_stream(last_stream_id)?;
    let length = payload_len(&[8, debug_data.len()])?;
    put_header(dst, length, FrameType::GoAway, 0, 0);
    dst.put_u32(last_stream_id);
    dst.put_u32(code.to_u32());
    dst.put_slice(debug_data);
    Ok(())
}

/// Writes a RST_STREAM frame (section 6.4).
pub fn write_rst_stream(
    dst: &mut BytesMut,
    stream_id: u32,
    code: ErrorCode,
) -> Result<(), EncodeError> {
    let stream_id = stream(stream_id)?;
    put_header(dst, 4, FrameType::RstStream, 0, stream_id);
    dst.put_u32(code.to_u32());
    Ok(())
}

/// Writes a WINDOW_UPDATE frame (section 6.9) for a stream, or for the connection
/// with stream 0. The increment must be 1 to 2^31-1.
pub fn write_window_update(
    dst: &mut BytesMut,
    stream_id: u32,
    increment: u32,
) -> Result<(), EncodeError> {
    let stream_id = any_stream(stream_id)?;
    if !(1..=MAX_WINDOW_SIZE).contains(&increment) {
        return Err(EncodeError::InvalidIncrement(increment));
    }
    put_header(dst, 4, FrameType::WindowUpdate, 0, stream_id);
    dst.put_u32(increment);
    Ok(())
}

/// Writes a PRIORITY frame (section 6.3, deprecated by section 5.3.2).
pub fn write_priority(
    dst: &mut BytesMut,
    stream_id: u32,
    dependency: StreamDependency,
) -> Result<(), EncodeError> {
    let stream_id = stream(stream_id)?;
    let fields = dependency_fields(stream_id, dependency)?;
    put_header(dst, 5, FrameType::Priority, 0, stream_id);
    dst.put_slice(&fields);
    Ok(())
}

fn write_data(dst: &mut BytesMut, data: &Data) -> Result<(), EncodeError> {
    let flags = if data.end_stream { END_STREAM } else { 0 };
    let stream_id = stream(data.stream_id)?;
    write_padded(dst, FrameType::Data, flags, stream_id, data.pad_length, &[], &data.data)
}

fn write_headers_frame(dst: &mut BytesMut, headers: &Headers) -> Result<(), EncodeError> {
    let stream_id = stream(headers.stream_id)?;
    let mut flags = 0;
    if headers.end_stream {
        flags |= END_STREAM;
    }
    if headers.end_headers {
        flags |= END_HEADERS;
    }
    let fields = match headers.priority {
        Some(dependency) => {
            flags |= PRIORITY;
            Some(dependency_fields(stream_id, dependency)?)
        }
        None => None,
    };
    let fields = fields.as_ref().map_or(&[][..], |fields| &fields[..]);
    write_padded(
        dst,
        FrameType::Headers,
        flags,
        stream_id,
        headers.pad_length,
        fields,
        &headers.fragment,
    )
}

fn write_push_promise(dst: &mut BytesMut, promise: &PushPromise) -> Result<(), EncodeError> {
    let stream_id = stream(promise.stream_id)?;
    let promised = stream(promise.promised_stream_id)?;
    let flags = if promise.end_headers { END_HEADERS } else { 0 };
    let fields = promised.to_be_bytes();
    write_padded(
        dst,
        FrameType::PushPromise,
        flags,
        stream_id,
        promise.pad_length,
        &fields,
        &promise.fragment,
    )
}

fn write_continuation(dst: &mut BytesMut, continuation: &Continuation) -> Result<(), EncodeError> {
    let stream_id = stream(continuation.stream_id)?;
    let length = payload_len(&[continuation.fragment.len()])?;
    let flags = if continuation.end_headers { END_HEADERS } else { 0 };
    put_header(dst, length, FrameType::Continuation, flags, stream_id);
    dst.put_slice(&continuation.fragment);
    Ok(())
}

/// Writes a frame that may be padded (DATA, HEADERS, PUSH_PROMISE): Pad Length when
/// `pad_length` is set, the fixed `fields`, the `body`, then zeroed padding (sections
/// 6.1, 6.2, 6.6). At most 255 bytes of padding always fit what follows Pad Length,
/// so `decode` accepts the result.
fn write_padded(
    dst: &mut BytesMut,
    kind: FrameType,
    mut flags: u8,
    stream_id: u32,
    pad_length: Option<u8>,
    fields: &[u8],
    body: &[u8],
) -> Result<(), EncodeError> {
    let padding = pad_length.map_or(0, usize::from);
    let overhead = if pad_length.is_some() { padding.saturating_add(1) } else { 0 };
    let length = payload_len(&[overhead, fields.len(), body.len()])?;
    if pad_length.is_some() {
        flags |= PADDED;
    }
    put_header(dst, length, kind, flags, stream_id);
    if let Some(pad) = pad_length {
        dst.put_u8(pad);
    }
    dst.put_slice(fields);
    dst.put_slice(body);
    dst.put_bytes(0, padding);
    Ok(())
}

/// The 5 bytes of priority fields; refuses a dependency id past 2^31-1 and a stream
/// depending on itself.
fn dependency_fields(stream_id: u32, dependency: StreamDependency) -> Result<[u8; 5], EncodeError> {
    let depends_on = any_stream(dependency.depends_on)?;
    if depends_on == stream_id {
        return Err(EncodeError::SelfDependency(stream_id));
    }
    let exclusive = if dependency.exclusive { RESERVED_BIT } else { 0 };
    let [d0, d1, d2, d3] = (depends_on | exclusive).to_be_bytes();
    Ok([d0, d1, d2, d3, dependency.weight])
}

/// A stream id for a frame that needs a stream: 1 to 2^31-1.
fn stream(stream_id: u32) -> Result<u32, EncodeError> {
    if stream_id == 0 {
        return Err(EncodeError::InvalidStreamId(stream_id));
    }
    any_stream(stream_id)
}

/// A stream id that may be 0: at most 2^31-1.
fn any_stream(stream_id: u32) -> Result<u32, EncodeError> {
    if stream_id > MAX_STREAM_ID {
        return Err(EncodeError::InvalidStreamId(stream_id));
    }
    Ok(stream_id)
}

/// The sum of a payload's parts, if the Length field can carry it.
fn payload_len(parts: &[usize]) -> Result<u32, EncodeError> {
    let total = parts.iter().try_fold(0_usize, |sum, &part| sum.checked_add(part));
    let too_long = EncodeError::PayloadTooLong { length: total.unwrap_or(usize::MAX) };
    let length = total.and_then(|total| u32::try_from(total).ok()).ok_or(too_long)?;
    if length > MAX_PAYLOAD_LEN {
        return Err(too_long);
    }
    Ok(length)
}

/// A length already bounded by a max frame size (at most 2^24-1), as the header's u32.
fn len_u32(length: usize) -> u32 {
    u32::try_from(length).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn written(write: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>) -> Vec<u8> {
        let mut dst = BytesMut::new();
        write(&mut dst).unwrap();
        dst.to_vec()
    }

    fn refused(write: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>) -> EncodeError {
        let mut dst = BytesMut::new();
        let error = write(&mut dst).unwrap_err();
        assert!(dst.is_empty(), "nothing written on refusal");
        error
    }

    #[test]
    fn each_writer_writes_the_exact_bytes() {
        assert_eq!(
            written(|dst| write_data_header(dst, 1, 16_384, true)),
            [0x00, 0x40, 0x00, 0x0, 0x1, 0, 0, 0, 1]
        );
        assert_eq!(
            written(|dst| write_data_header(dst, 3, 0, false)),
            [0, 0, 0, 0x0, 0x0, 0, 0, 0, 3]
        );
        assert_eq!(
            written(|dst| write_headers(dst, 1, &[0x82, 0x86], true, 16_384)),
            [0, 0, 2, 0x1, 0x5, 0, 0, 0, 1, 0x82, 0x86]
        );
        let settings = Settings {
            max_concurrent_streams: Some(100),
            enable_push: Some(false),
            enable_connect_protocol: Some(true),
            ..Settings::default()
        };
        assert_eq!(
            written(|dst| write_settings(dst, &settings)),
            [
                0, 0, 18, 0x4, 0x0, 0, 0, 0, 0, //
                0, 0x2, 0, 0, 0, 0, //
                0, 0x3, 0, 0, 0, 100, //
                0, 0x8, 0, 0, 0, 1,
            ]
        );
        assert_eq!(
            written(|dst| {
                write_settings_ack(dst);
                Ok(())
            }),
            [0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]
        );
        assert_eq!(
            written(|dst| {
                write_ping(dst, [1, 2, 3, 4, 5, 6, 7, 8]);
                write_ping_ack(dst, [8, 7, 6, 5, 4, 3, 2, 1]);
                Ok(())
            }),
            [
                0, 0, 8, 0x6, 0x0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, //
                0, 0, 8, 0x6, 0x1, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1,
            ]
        );
        assert_eq!(
            written(|dst| write_goaway(dst, 7, ErrorCode::ProtocolError, b"bad")),
            [0, 0, 11, 0x7, 0x0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 1, b'b', b'a', b'd']
        );
        assert_eq!(
            written(|dst| write_rst_stream(dst, 5, ErrorCode::Cancel)),
            [0, 0, 4, 0x3, 0x0, 0, 0, 0, 5, 0, 0, 0, 8]
        );
        assert_eq!(
            written(|dst| write_window_update(dst, 0, MAX_WINDOW_SIZE)),
            [0, 0, 4, 0x8, 0x0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff]
        );
        let dependency = StreamDependency { exclusive: true, depends_on: 3, weight: 200 };
        assert_eq!(
            written(|dst| write_priority(dst, 5, dependency)),
            [0, 0, 5, 0x2, 0x0, 0, 0, 0, 5, 0x80, 0, 0, 3, 200]
        );
    }

    #[test]
    fn padded_frames_carry_pad_length_fields_and_zeroed_padding() {
        let data = Data {
            stream_id: 1,
            end_stream: false,
            pad_length: Some(2),
            data: Bytes::from_static(b"ab"),
        };
        assert_eq!(
            written(|dst| write_frame(dst, &Frame::Data(data))),
            [0, 0, 5, 0x0, 0x8, 0, 0, 0, 1, 2, b'a', b'b', 0, 0]
        );
        let headers = Headers {
            stream_id: 3,
            end_stream: true,
            end_headers: true,
            priority: Some(StreamDependency { exclusive: false, depends_on: 1, weight: 15 }),
            pad_length: Some(0),
            fragment: Bytes::from_static(&[0x82]),
        };
        assert_eq!(
            written(|dst| write_frame(dst, &Frame::Headers(headers))),
            [0, 0, 7, 0x1, 0x2d, 0, 0, 0, 3, 0, 0, 0, 0, 1, 15, 0x82]
        );
        let promise = PushPromise {
            stream_id: 1,
            promised_stream_id: 2,
            end_headers: false,
            pad_length: Some(1),
            fragment: Bytes::from_static(&[0x82]),
        };
        assert_eq!(
            written(|dst| write_frame(dst, &Frame::PushPromise(promise))),
            [0, 0, 7, 0x5, 0x8, 0, 0, 0, 1, 1, 0, 0, 0, 2, 0x82, 0]
        );
    }

    #[test]
    fn a_field_block_is_cut_into_headers_and_continuations_at_the_max_frame_size() {
        let block: Vec<u8> = (0..40_000_u32).map(|i| i as u8).collect();
        let mut dst = BytesMut::new();
        write_headers(&mut dst, 7, &block, true, 16_384).unwrap();

        // HEADERS with END_STREAM only, 16,384 bytes; CONTINUATION 16,384; then the
        // last 7,232 bytes in a CONTINUATION with END_HEADERS.
        let mut pieces = Vec::new();
        let mut reassembled = Vec::new();
        while let Some((header, payload)) = crate::frame::split_frame(&mut dst, 16_384).unwrap() {
            pieces.push((header.kind, header.flags, header.length, header.stream_id));
            reassembled.extend_from_slice(&payload);
        }
        assert!(dst.is_empty());
        assert_eq!(
            pieces,
            [
                (FrameType::Headers, END_STREAM, 16_384, 7),
                (FrameType::Continuation, 0, 16_384, 7),
                (FrameType::Continuation, END_HEADERS, 7_232, 7),
            ]
        );
        assert_eq!(reassembled, block);
    }

    #[test]
    fn a_field_block_of_exactly_the_max_or_empty_fits_one_headers_frame() {
        let block = vec![0x82; 16_384];
        let mut dst = BytesMut::new();
        write_headers(&mut dst, 1, &block, false, 16_384).unwrap();
        assert_eq!(dst.len(), 9 + 16_384);
        assert_eq!(&dst[..9], &[0x00, 0x40, 0x00, 0x1, 0x4, 0, 0, 0, 1]);

        assert_eq!(
            written(|dst| write_headers(dst, 1, &[], true, 16_384)),
            [0, 0, 0, 0x1, 0x5, 0, 0, 0, 1]
        );
        // One byte over: a CONTINUATION of one byte.
        let mut dst = BytesMut::new();
        write_headers(&mut dst, 1, &vec![0x82; 16_385], false, 16_384).unwrap();
        assert_eq!(&dst[9 + 16_384..], &[0, 0, 1, 0x9, 0x4, 0, 0, 0, 1, 0x82]);
    }

    #[test]
    fn writers_refuse_what_a_receiver_would_refuse() {
        use EncodeError::*;
        assert_eq!(
            refused(|dst| write_data_header(dst, 1, 1 << 24, false)),
            PayloadTooLong { length: 1 << 24 }
        );
        assert_eq!(refused(|dst| write_data_header(dst, 0, 1, false)), InvalidStreamId(0));
        assert_eq!(
            refused(|dst| write_data_header(dst, 1 << 31, 1, false)),
            InvalidStreamId(1 << 31)
        );
        assert_eq!(refused(|dst| write_headers(dst, 0, &[0x82], true, 16_384)), InvalidStreamId(0));
        assert_eq!(refused(|dst| write_headers(dst, 1, &[0x82], true, 0)), InvalidMaxFrameSize(0));
        assert_eq!(
            refused(|dst| write_headers(dst, 1, &[0x82], true, 1 << 24)),
            InvalidMaxFrameSize(1 << 24)
        );
        assert_eq!(refused(|dst| write_window_update(dst, 1, 0)), InvalidIncrement(0));
        assert_eq!(refused(|dst| write_window_update(dst, 1, 1 << 31)), InvalidIncrement(1 << 31));
        assert_eq!(refused(|dst| write_window_update(dst, 1 << 31, 1)), InvalidStreamId(1 << 31));
        assert_eq!(refused(|dst| write_rst_stream(dst, 0, ErrorCode::Cancel)), InvalidStreamId(0));
        assert_eq!(
            refused(|dst| write_goaway(dst, 1 << 31, ErrorCode::NoError, b"")),
            InvalidStreamId(1 << 31)
        );
        assert_eq!(
            refused(|dst| write_goaway(dst, 1, ErrorCode::NoError, &vec![0; (1 << 24) - 8])),
            PayloadTooLong { length: 1 << 24 }
        );
        let own = StreamDependency { exclusive: false, depends_on: 3, weight: 0 };
        assert_eq!(refused(|dst| write_priority(dst, 3, own)), SelfDependency(3));
        let reserved = StreamDependency { exclusive: false, depends_on: 1 << 31, weight: 0 };
        assert_eq!(refused(|dst| write_priority(dst, 3, reserved)), InvalidStreamId(1 << 31));
        let window = Settings { initial_window_size: Some(1 << 31), ..Settings::default() };
        assert_eq!(
            refused(|dst| write_settings(dst, &window)),
            SettingValue { id: 0x4, value: 1 << 31 }
        );
        let promise = PushPromise {
            stream_id: 1,
            promised_stream_id: 0,
            end_headers: true,
            pad_length: None,
            fragment: Bytes::new(),
        };
        assert_eq!(
            refused(|dst| write_frame(dst, &Frame::PushPromise(promise))),
            InvalidStreamId(0)
        );
        assert_eq!(
            refused(|dst| write_frame(dst, &Frame::Unknown { kind: 0x1, stream_id: 1 })),
            DefinedKind(0x1)
        );
        let padded = Data {
            stream_id: 1,
            end_stream: false,
            pad_length: Some(255),
            data: Bytes::from(vec![0; (1 << 24) - 256]),
        };
        assert_eq!(
            refused(|dst| write_frame(dst, &Frame::Data(padded))),
            PayloadTooLong { length: 1 << 24 }
        );
    }
}
