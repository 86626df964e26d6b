//! The few HTTP/2 frames (RFC 9113) the zero-window client writes, and the frame heads it
//! reads, by hand: a client made of the `h2` crate decides itself when to send
//! WINDOW_UPDATE, and this one must never send one.
//!
//! Requests are GETs whose header block uses only HPACK's static table and literals
//! without indexing (RFC 7541), so the client keeps no dynamic table. Responses are not
//! decoded beyond their first byte: `:status 200` is index 8 of the static table, which
//! both nginx and the `h2` crate send as the one byte 0x88.

/// What a client connection starts with (RFC 9113, section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes of a frame head: length (24 bits), type, flags, stream (31 bits).
pub const HEAD_BYTES: usize = 9;
/// The window every stream and the connection start with (RFC 9113, section 6.9.2).
pub const INITIAL_WINDOW: u32 = 65_535;

pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;

/// Flags, by the frame types they belong to.
pub const FLAG_END_STREAM: u8 = 0x1;
pub const FLAG_ACK: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;
pub const FLAG_PADDED: u8 = 0x8;
pub const FLAG_PRIORITY: u8 = 0x20;

/// `:status 200` as an indexed field of the static table (RFC 7541, appendix A).
pub const STATUS_200_INDEXED: u8 = 0x88;

/// The frame types (RFC 9113, section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub fn from_byte(byte: u8) -> Self {
        match byte {
            0x0 => Self::Data,
            0x1 => Self::Headers,
            0x2 => Self::Priority,
            0x3 => Self::RstStream,
            0x4 => Self::Settings,
            0x5 => Self::PushPromise,
            0x6 => Self::Ping,
            0x7 => Self::GoAway,
            0x8 => Self::WindowUpdate,
            0x9 => Self::Continuation,
            other => Self::Unknown(other),
        }
    }

    pub fn to_byte(self) -> u8 {
        match self {
            Self::Data => 0x0,
            Self::Headers => 0x1,
            Self::Priority => 0x2,
            Self::RstStream => 0x3,
            Self::Settings => 0x4,
            Self::PushPromise => 0x5,
            Self::Ping => 0x6,
            Self::GoAway => 0x7,
            Self::WindowUpdate => 0x8,
            Self::Continuation => 0x9,
            Self::Unknown(other) => other,
        }
    }
}

/// A parsed frame head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    /// Payload bytes after the head.
    pub length: u32,
    pub kind: FrameType,
    pub flags: u8,
    pub stream: u32,
}

impl FrameHead {
    pub fn parse(bytes: [u8; HEAD_BYTES]) -> Self {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = bytes;
        Self {
            length: u32::from_be_bytes([0, l0, l1, l2]),
            kind: FrameType::from_byte(kind),
            flags,
            stream: u32::from_be_bytes([s0, s1, s2, s3]) & 0x7fff_ffff,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Appends one frame.
pub fn write_frame(out: &mut Vec<u8>, kind: FrameType, flags: u8, stream: u32, payload: &[u8]) {
    let length = u32::try_from(payload.len()).expect("the frames written here are small");
    out.extend_from_slice(&length.to_be_bytes()[1..]);
    out.push(kind.to_byte());
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Appends a SETTINGS frame with `values`.
pub fn write_settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    let mut payload = Vec::with_capacity(values.len() * 6);
    for (id, value) in values {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    write_frame(out, FrameType::Settings, 0, 0, &payload);
}

/// The value of setting `id` in a SETTINGS payload, the last one if repeated.
pub fn setting(payload: &[u8], id: u16) -> Option<u32> {
    payload
        .chunks_exact(6)
        .filter(|entry| entry[..2] == id.to_be_bytes())
        .map(|entry| u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]))
        .next_back()
}

/// Appends a HEADERS frame (END_STREAM, END_HEADERS) with a GET of `path` at `authority`
/// over `http`, on `stream`.
pub fn write_get(out: &mut Vec<u8>, stream: u32, authority: &[u8], path: &[u8]) {
    let mut block = Vec::with_capacity(8 + authority.len() + path.len());
    block.push(0x82); // :method GET, static index 2
    block.push(0x86); // :scheme http, static index 6
    literal_with_indexed_name(&mut block, 4, path); // :path
    literal_with_indexed_name(&mut block, 1, authority); // :authority
    write_frame(out, FrameType::Headers, FLAG_END_STREAM | FLAG_END_HEADERS, stream, &block);
}

/// The header block fragment of a HEADERS payload, without padding and priority fields;
/// None if the payload is shorter than its flags say.
pub fn header_block<'a>(head: &FrameHead, payload: &'a [u8]) -> Option<&'a [u8]> {
    let mut block = payload;
    let mut padding = 0;
    if head.has(FLAG_PADDED) {
        padding = usize::from(*block.first()?);
        block = block.get(1..)?;
    }
    if head.has(FLAG_PRIORITY) {
        block = block.get(5..)?;
    }
    block.get(..block.len().checked_sub(padding)?)
}

/// A "literal header field without indexing" whose name is static entry `index` (RFC 7541,
/// section 6.2.2), its value a plain string.
fn literal_with_indexed_name(out: &mut Vec<u8>, index: u64, value: &[u8]) {
    integer(out, 0x00, 4, index);
    integer(out, 0x00, 7, value.len() as u64); // H = 0: not Huffman-coded
    out.extend_from_slice(value);
}

/// An HPACK integer with an `prefix_bits`-bit prefix after the bits of `first` (RFC 7541,
/// section 5.1).
fn integer(out: &mut Vec<u8>, first: u8, prefix_bits: u32, value: u64) {
    let max = (1u64 << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_rfc_7541_examples() {
        let mut out = Vec::new();
        integer(&mut out, 0, 5, 10);
        assert_eq!(out, [10]);
        out.clear();
        integer(&mut out, 0, 5, 1337); // RFC 7541, C.1.2
        assert_eq!(out, [31, 154, 10]);
        out.clear();
        integer(&mut out, 0x40, 6, 42);
        assert_eq!(out, [0x40 | 42]);
    }

    #[test]
    fn a_get_is_one_headers_frame_with_static_and_literal_fields() {
        let mut out = Vec::new();
        write_get(&mut out, 3, b"127.0.0.1:8080", b"/tiny");
        let head = FrameHead::parse(out[..HEAD_BYTES].try_into().expect("nine bytes"));
        assert_eq!(head.kind, FrameType::Headers);
        assert_eq!(head.stream, 3);
        assert!(head.has(FLAG_END_STREAM) && head.has(FLAG_END_HEADERS));
        let block = &out[HEAD_BYTES..];
        assert_eq!(head.length as usize, block.len());
        assert_eq!(block, b"\x82\x86\x04\x05/tiny\x01\x0e127.0.0.1:8080");
    }

    #[test]
    fn settings_round_trip_and_the_last_value_wins() {
        let mut out = Vec::new();
        write_settings(
            &mut out,
            &[(SETTINGS_ENABLE_PUSH, 0), (SETTINGS_MAX_CONCURRENT_STREAMS, 7)],
        );
        let head = FrameHead::parse(out[..HEAD_BYTES].try_into().expect("nine bytes"));
        assert_eq!((head.kind, head.length, head.stream), (FrameType::Settings, 12, 0));
        let payload = &out[HEAD_BYTES..];
        assert_eq!(setting(payload, SETTINGS_MAX_CONCURRENT_STREAMS), Some(7));
        assert_eq!(setting(payload, 0x4), None);
        let twice = [payload, &[0, 3, 0, 0, 0, 9]].concat();
        assert_eq!(setting(&twice, SETTINGS_MAX_CONCURRENT_STREAMS), Some(9));
    }

    #[test]
    fn header_block_strips_padding_and_priority_and_refuses_short_payloads() {
        let head = |flags| FrameHead { length: 0, kind: FrameType::Headers, flags, stream: 1 };
        assert_eq!(header_block(&head(0), &[0x88]), Some(&[0x88][..]));
        let padded = [2, 0x88, 0, 0];
        assert_eq!(header_block(&head(FLAG_PADDED), &padded), Some(&[0x88][..]));
        let prioritized = [0, 0, 0, 1, 16, 0x88];
        assert_eq!(header_block(&head(FLAG_PRIORITY), &prioritized), Some(&[0x88][..]));
        assert_eq!(header_block(&head(FLAG_PADDED), &[5, 0x88]), None);
        assert_eq!(header_block(&head(FLAG_PRIORITY), &[0, 0]), None);
    }

    #[test]
    fn frame_heads_parse_length_type_flags_and_stream_without_its_reserved_bit() {
        let head = FrameHead::parse([0, 0x40, 0, 0x0, 0x1, 0x80, 0, 0, 5]);
        assert_eq!(head, FrameHead { length: 16_384, kind: FrameType::Data, flags: 1, stream: 5 });
        assert_eq!(FrameType::from_byte(0xfa), FrameType::Unknown(0xfa));
        assert_eq!(FrameType::Unknown(0xfa).to_byte(), 0xfa);
    }
}
