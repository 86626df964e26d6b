//! The messages `bench-load grpc` sends: gRPC's length-prefixed framing (one flag byte,
//! 0: not compressed; the length as a 4-byte big-endian number; the message) around a
//! protobuf message `{ bytes data = 1; }`, its data numbered so an echo that comes back
//! out of order or from another call does not pass for the right one.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes of gRPC's prefix before each message: the compressed flag and the length.
pub const PREFIX_BYTES: usize = 5;
/// Smallest payload `encode` makes: the protobuf field's tag and length, and the
/// message number.
pub const MIN_PAYLOAD_BYTES: usize = 2 + NUMBER_BYTES;
/// Largest payload `encode` makes (gRPC's usual limit on a received message is 4 MiB).
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// The message number at the head of the data.
const NUMBER_BYTES: usize = 8;
/// The protobuf tag of field 1, wire type 2 (length-delimited): `bytes data = 1`.
const DATA_FIELD_TAG: u8 = 0x0a;
/// What fills the data after the message number.
const FILLER: u8 = b'g';

/// Message `number` as it goes on the wire: the prefix, then a protobuf payload of
/// `payload_bytes` bytes (clamped to [`MIN_PAYLOAD_BYTES`]..=[`MAX_PAYLOAD_BYTES`]).
pub fn encode(number: u64, payload_bytes: usize) -> Bytes {
    let payload_bytes = payload_bytes.clamp(MIN_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES);
    let DataField { data_bytes, varint_bytes } = data_field(payload_bytes);
    let mut out = BytesMut::with_capacity(PREFIX_BYTES + payload_bytes);
    out.put_u8(0);
    out.put_u32(u32::try_from(payload_bytes).expect("payloads are at most 1 MiB"));
    out.put_u8(DATA_FIELD_TAG);
    put_varint(&mut out, data_bytes as u64, varint_bytes);
    out.put_u64_le(number);
    out.put_bytes(FILLER, data_bytes - NUMBER_BYTES);
    debug_assert_eq!(out.len(), PREFIX_BYTES + payload_bytes);
    out.freeze()
}

/// The data field's length and the bytes its length's varint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DataField {
    data_bytes: usize,
    varint_bytes: usize,
}

/// The data field that makes the whole payload `payload_bytes` long: what is left after
/// the tag and the varint of the data's own length. Some totals no shortest varint
/// reaches (130: data of 128 needs 2 bytes, 131 in all; 127 needs 1, 129 in all), so the
/// varint may be one byte longer than it must (a continuation byte with no bits, which
/// protobuf parsers take).
fn data_field(payload_bytes: usize) -> DataField {
    let after_tag = payload_bytes - 1;
    (1..=4)
        .map(|varint_bytes| DataField { data_bytes: after_tag - varint_bytes, varint_bytes })
        .find(|field| varint_length(field.data_bytes as u64) <= field.varint_bytes)
        .expect("a 1 MiB payload needs at most a 3-byte varint")
}

/// Bytes protobuf's base-128 varint takes for `value`.
fn varint_length(value: u64) -> usize {
    let bits = 64 - value.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// `value` as a base-128 varint of exactly `width` bytes (at least its shortest length):
/// seven bits a byte, low bits first, the top bit set on every byte but the last.
fn put_varint(out: &mut BytesMut, mut value: u64, width: usize) {
    for _ in 1..width {
        out.put_u8((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.put_u8((value & 0x7f) as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_the_prefix_then_a_protobuf_bytes_field_of_the_asked_size() {
        let message = encode(7, 100);
        assert_eq!(message.len(), PREFIX_BYTES + 100);
        assert_eq!(&message[..PREFIX_BYTES], &[0, 0, 0, 0, 100]);
        // tag, then the data's length (98) as a one-byte varint, then the number
        assert_eq!(&message[5..7], &[DATA_FIELD_TAG, 98]);
        assert_eq!(&message[7..15], &7u64.to_le_bytes());
        assert!(message[15..].iter().all(|&b| b == FILLER));
    }

    #[test]
    fn longer_payloads_take_a_longer_varint_and_still_add_up() {
        for payload in [129, 130, 131, 16_386, 16_387, 100_000, MAX_PAYLOAD_BYTES] {
            let message = encode(1, payload);
            assert_eq!(message.len(), PREFIX_BYTES + payload, "{payload}");
            let field = data_field(payload);
            assert_eq!(1 + field.varint_bytes + field.data_bytes, payload, "{payload}");
        }
    }

    #[test]
    fn sizes_outside_the_bounds_are_clamped() {
        assert_eq!(encode(0, 0).len(), PREFIX_BYTES + MIN_PAYLOAD_BYTES);
        assert_eq!(encode(0, usize::MAX).len(), PREFIX_BYTES + MAX_PAYLOAD_BYTES);
    }

    #[test]
    fn numbers_tell_messages_apart() {
        assert_ne!(encode(1, 100), encode(2, 100));
    }

    #[test]
    fn varints_are_base_128() {
        let mut out = BytesMut::new();
        put_varint(&mut out, 300, 2);
        assert_eq!(&out[..], &[0xac, 0x02]);
        // padded: 127 in two bytes
        out.clear();
        put_varint(&mut out, 127, 2);
        assert_eq!(&out[..], &[0xff, 0x00]);
        assert_eq!(varint_length(0), 1);
        assert_eq!(varint_length(127), 1);
        assert_eq!(varint_length(128), 2);
    }
}
