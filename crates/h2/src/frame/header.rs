//! The 9-byte frame header (RFC 9113 section 4.1): its fields, the frame types and
//! flags it names, and how it is read from and written to the wire.
//!
//! It does not judge the payload: lengths against the max frame size are checked by
//! [`split_frame`](super::split_frame), and each type's rules by [`decode`](super::decode()).

use bytes::{BufMut, BytesMut};

use super::encode::EncodeError;

/// The size of a frame header on the wire (section 4.1).
pub const HEADER_LEN: usize = 9;

/// The largest payload length the 24-bit Length field can carry (section 4.1), which
/// is also the largest value SETTINGS_MAX_FRAME_SIZE may take (section 4.2).
pub const MAX_PAYLOAD_LEN: u32 = (1 << 24) - 1;

/// The initial SETTINGS_MAX_FRAME_SIZE and the smallest value it may take (section
/// 4.2): every endpoint accepts payloads of this size.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 1 << 14;

/// The largest stream identifier: 31 bits (section 5.1.1).
pub const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// The reserved bit above a 31-bit stream identifier or window increment: ignored
/// when received (sections 4.1, 6.8, 6.9), so it is masked off.
pub(crate) const RESERVED_BIT: u32 = 1 << 31;

/// END_STREAM (0x1) on DATA and HEADERS: the sender's last frame on the stream
/// (sections 6.1, 6.2).
pub const END_STREAM: u8 = 0x1;
/// ACK (0x1) on SETTINGS and PING: an acknowledgment (sections 6.5, 6.7).
pub const ACK: u8 = 0x1;
/// END_HEADERS (0x4) on HEADERS, PUSH_PROMISE and CONTINUATION: the field block ends
/// in this frame (sections 6.2, 6.6, 6.10).
pub const END_HEADERS: u8 = 0x4;
/// PADDED (0x8) on DATA, HEADERS and PUSH_PROMISE: a Pad Length byte and padding are
/// present (sections 6.1, 6.2, 6.6).
pub const PADDED: u8 = 0x8;
/// PRIORITY (0x20) on HEADERS: the exclusive bit, stream dependency and weight are
/// present (section 6.2).
pub const PRIORITY: u8 = 0x20;

/// A frame type (section 6); types RFC 9113 does not define are kept as
/// `Unknown(code)`, to be discarded (section 5.5).
///
/// `Unknown` is meant for codes above 0x9: [`FrameType::from_u8`] never makes
/// `Unknown` of a defined code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    Data,
    Headers,
    Priority,
    RstStream,
    Settings,
    PushPromise,
    Ping,
    GoAway,
    WindowUpdate,
    Continuation,
    Unknown(u8),
}

impl FrameType {
    /// The type read from the wire.
    pub fn from_u8(code: u8) -> FrameType {
        match code {
            0x0 => FrameType::Data,
            0x1 => FrameType::Headers,
            0x2 => FrameType::Priority,
            0x3 => FrameType::RstStream,
            0x4 => FrameType::Settings,
            0x5 => FrameType::PushPromise,
            0x6 => FrameType::Ping,
            0x7 => FrameType::GoAway,
            0x8 => FrameType::WindowUpdate,
            0x9 => FrameType::Continuation,
            other => FrameType::Unknown(other),
        }
    }

    /// The type as it goes on the wire.
    pub fn to_u8(self) -> u8 {
        match self {
            FrameType::Data => 0x0,
            FrameType::Headers => 0x1,
            FrameType::Priority => 0x2,
            FrameType::RstStream => 0x3,
            FrameType::Settings => 0x4,
            FrameType::PushPromise => 0x5,
            FrameType::Ping => 0x6,
            FrameType::GoAway => 0x7,
            FrameType::WindowUpdate => 0x8,
            FrameType::Continuation => 0x9,
            FrameType::Unknown(code) => code,
        }
    }
}

/// A frame header as read from the wire (section 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The payload's length in bytes, 24 bits (header not included).
    pub length: u32,
    pub kind: FrameType,
    /// All eight flag bits as sent; each type reads the ones it defines and ignores
    /// the others (section 4.1).
    pub flags: u8,
    /// The stream identifier, with the reserved bit masked off (section 4.1).
    pub stream_id: u32,
}

impl FrameHeader {
    /// Reads a header from its 9 bytes. Infallible: every bit pattern is a header;
    /// the reserved bit is dropped.
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> FrameHeader {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = *bytes;
        FrameHeader {
            length: u32::from_be_bytes([0, l0, l1, l2]),
            kind: FrameType::from_u8(kind),
            flags,
            stream_id: u32::from_be_bytes([s0, s1, s2, s3]) & !RESERVED_BIT,
        }
    }

    /// Whether `flag` (one of the flag constants) is set.
    pub fn has_flag(&self, flag: u8) -> bool {
        self.flags & flag == flag
    }

    /// Writes the header's 9 bytes. Refuses, writing nothing, a length above
    /// [`MAX_PAYLOAD_LEN`] or a stream id above [`MAX_STREAM_ID`]: neither fits its
    /// field.
    pub fn write(&self, dst: &mut BytesMut) -> Result<(), EncodeError> {
        if self.length > MAX_PAYLOAD_LEN {
            return Err(EncodeError::PayloadTooLong { length: self.length as usize });
        }
        if self.stream_id > MAX_STREAM_ID {
            return Err(EncodeError::InvalidStreamId(self.stream_id));
        }
        put_header(dst, self.length, self.kind, self.flags, self.stream_id);
        Ok(())
    }
}

/// Writes a header whose length and stream id the caller has checked against
/// [`MAX_PAYLOAD_LEN`] and [`MAX_STREAM_ID`]; out-of-range bits are dropped, never a
/// panic.
pub(crate) fn put_header(
    dst: &mut BytesMut,
    length: u32,
    kind: FrameType,
    flags: u8,
    stream_id: u32,
) {
    let [_, l0, l1, l2] = length.to_be_bytes();
    let [s0, s1, s2, s3] = (stream_id & !RESERVED_BIT).to_be_bytes();
    dst.put_slice(&[l0, l1, l2, kind.to_u8(), flags, s0, s1, s2, s3]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_reads_length_type_flags_and_masks_the_reserved_bit() {
        let header = FrameHeader::parse(&[0x01, 0x02, 0x03, 0x01, 0x25, 0x80, 0x00, 0x00, 0x07]);
        assert_eq!(
            header,
            FrameHeader { length: 0x01_0203, kind: FrameType::Headers, flags: 0x25, stream_id: 7 }
        );
        assert!(header.has_flag(END_STREAM));
        assert!(header.has_flag(END_HEADERS));
        assert!(header.has_flag(PRIORITY));
        assert!(!header.has_flag(PADDED));
    }

    #[test]
    fn every_type_code_goes_to_the_wire_and_back() {
        for code in 0..=u8::MAX {
            assert_eq!(FrameType::from_u8(code).to_u8(), code);
        }
        assert_eq!(FrameType::from_u8(0x9), FrameType::Continuation);
        assert_eq!(FrameType::from_u8(0xa), FrameType::Unknown(0xa));
    }

    #[test]
    fn header_writes_its_nine_bytes_and_refuses_what_does_not_fit() {
        let mut dst = BytesMut::new();
        let header = FrameHeader {
            length: MAX_PAYLOAD_LEN,
            kind: FrameType::Ping,
            flags: ACK,
            stream_id: 0,
        };
        header.write(&mut dst).unwrap();
        assert_eq!(&dst[..], &[0xff, 0xff, 0xff, 0x06, 0x01, 0, 0, 0, 0]);
        assert_eq!(FrameHeader::parse(&dst[..].try_into().unwrap()), header);

        let too_long = FrameHeader { length: MAX_PAYLOAD_LEN + 1, ..header };
        assert_eq!(too_long.write(&mut dst), Err(EncodeError::PayloadTooLong { length: 1 << 24 }));
        let reserved = FrameHeader { stream_id: RESERVED_BIT, ..header };
        assert_eq!(reserved.write(&mut dst), Err(EncodeError::InvalidStreamId(RESERVED_BIT)));
        assert_eq!(dst.len(), HEADER_LEN);
    }
}
