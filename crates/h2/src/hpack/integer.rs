//! Integers with an N-bit prefix (RFC 7541 section 5.1): decoded with the limits a
//! receiver needs, and encoded.
//!
//! Section 5.1 sets no bound, so a decoder must: a value must fit in a `u32`, and its
//! continuation bytes may be no more than a `u32` needs (5: 7 bits each). No index,
//! length or table size HTTP/2 can use comes near that.

use bytes::{BufMut, BytesMut};

/// An integer read from the start of a slice, and the bytes it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodedInteger {
    pub value: u32,
    pub len_bytes: usize,
}

/// Why an integer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntegerError {
    /// The block ends inside the integer.
    Truncated,
    /// The value does not fit in a `u32`, or continues past the 5 bytes a `u32` needs.
    Overflow,
}

/// The shift of each continuation byte's 7 bits: 5 bytes cover 35 bits.
const CONTINUATION_SHIFTS: [u32; 5] = [0, 7, 14, 21, 28];

/// The largest value the low `prefix_bits` bits hold (2^N - 1), for N in 1..=8.
fn prefix_max(prefix_bits: u32) -> u8 {
    u8::MAX.wrapping_shr(8_u32.wrapping_sub(prefix_bits))
}

/// Reads an integer whose prefix is the low `prefix_bits` bits of `input[0]`
/// (section 5.1); the bits above the prefix are the caller's.
pub(crate) fn decode(input: &[u8], prefix_bits: u32) -> Result<DecodedInteger, IntegerError> {
    let (&first, continuation) = input.split_first().ok_or(IntegerError::Truncated)?;
    let max = prefix_max(prefix_bits);
    let prefix = first & max;
    if prefix < max {
        return Ok(DecodedInteger { value: u32::from(prefix), len_bytes: 1 });
    }
    let mut value = u64::from(max);
    for ((&byte, shift), len_bytes) in continuation.iter().zip(CONTINUATION_SHIFTS).zip(2..) {
        // At most 255 + (2^35 - 1): no overflow in a u64.
        value = value.wrapping_add(u64::from(byte & 0x7f).wrapping_shl(shift));
        if byte & 0x80 == 0 {
            let value = u32::try_from(value).map_err(|_| IntegerError::Overflow)?;
            return Ok(DecodedInteger { value, len_bytes });
        }
    }
    if continuation.len() > CONTINUATION_SHIFTS.len() {
        Err(IntegerError::Overflow)
    } else {
        Err(IntegerError::Truncated)
    }
}

/// Appends `value` with an N-bit prefix (section 5.1); `flags` are the bits above the
/// prefix in the first byte.
pub(crate) fn encode(value: usize, prefix_bits: u32, flags: u8, dst: &mut BytesMut) {
    let max = prefix_max(prefix_bits);
    let Some(mut rest) = value.checked_sub(usize::from(max)) else {
        // value < max: it fits in the prefix.
        dst.put_u8(flags | (value & 0xff) as u8);
        return;
    };
    dst.put_u8(flags | max);
    while rest >= 0x80 {
        dst.put_u8((rest & 0x7f) as u8 | 0x80);
        rest = rest.wrapping_shr(7);
    }
    dst.put_u8((rest & 0x7f) as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(value: usize, prefix_bits: u32, flags: u8) -> Vec<u8> {
        let mut dst = BytesMut::new();
        encode(value, prefix_bits, flags, &mut dst);
        dst.to_vec()
    }

    /// RFC 7541 C.1.1: 10 with a 5-bit prefix.
    #[test]
    fn c_1_1_ten_in_a_five_bit_prefix() {
        assert_eq!(encoded(10, 5, 0), [0b0000_1010]);
        assert_eq!(decode(&[0b1110_1010], 5), Ok(DecodedInteger { value: 10, len_bytes: 1 }));
    }

    /// RFC 7541 C.1.2: 1337 with a 5-bit prefix.
    #[test]
    fn c_1_2_1337_in_a_five_bit_prefix() {
        assert_eq!(encoded(1337, 5, 0), [0b0001_1111, 0b1001_1010, 0b0000_1010]);
        let bytes = [0b1111_1111, 0b1001_1010, 0b0000_1010, 0xaa];
        assert_eq!(decode(&bytes, 5), Ok(DecodedInteger { value: 1337, len_bytes: 3 }));
    }

    /// RFC 7541 C.1.3: 42 starting at a byte boundary (8-bit prefix).
    #[test]
    fn c_1_3_42_in_an_eight_bit_prefix() {
        assert_eq!(encoded(42, 8, 0), [42]);
        assert_eq!(decode(&[42], 8), Ok(DecodedInteger { value: 42, len_bytes: 1 }));
    }

    #[test]
    fn values_round_trip_at_every_prefix() {
        let values = [0, 1, 14, 15, 16, 30, 31, 32, 62, 63, 64, 126, 127, 128, 254, 255, 256];
        let more = [4096, 16_383, 16_384, 1 << 21, (1 << 28) - 1, u32::MAX as usize];
        for prefix_bits in 1..=8 {
            for &value in values.iter().chain(&more) {
                let bytes = encoded(value, prefix_bits, 0);
                let decoded = decode(&bytes, prefix_bits).unwrap();
                assert_eq!(decoded.value as usize, value);
                assert_eq!(decoded.len_bytes, bytes.len());
            }
        }
    }

    #[test]
    fn flags_stay_above_the_prefix() {
        assert_eq!(encoded(3, 7, 0x80), [0x83]);
        assert_eq!(encoded(100, 6, 0x40), [0x7f, 100 - 63]);
        assert_eq!(decode(&[0x83], 7).unwrap().value, 3);
    }

    #[test]
    fn u32_max_is_the_largest_value() {
        // 2^32 - 1 with a 5-bit prefix: 31 + (2^32 - 32).
        let bytes = encoded(u32::MAX as usize, 5, 0);
        assert_eq!(bytes, [0x1f, 0xe0, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(decode(&bytes, 5).unwrap().value, u32::MAX);
        // One more does not fit.
        assert_eq!(decode(&[0x1f, 0xe1, 0xff, 0xff, 0xff, 0x0f], 5), Err(IntegerError::Overflow));
        // Bits past 2^35 in the fifth continuation byte.
        assert_eq!(decode(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x7f], 5), Err(IntegerError::Overflow));
    }

    #[test]
    fn a_sixth_continuation_byte_is_refused_even_for_a_small_value() {
        // Five continuation bytes holding zeros are allowed; a sixth is not.
        assert_eq!(decode(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x00], 5).unwrap().value, 31);
        assert_eq!(
            decode(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00], 5),
            Err(IntegerError::Overflow)
        );
    }

    #[test]
    fn an_integer_cut_short_is_refused() {
        assert_eq!(decode(&[], 5), Err(IntegerError::Truncated));
        assert_eq!(decode(&[0x1f], 5), Err(IntegerError::Truncated));
        assert_eq!(decode(&[0x1f, 0x9a], 5), Err(IntegerError::Truncated));
        assert_eq!(decode(&[0x1f, 0x80, 0x80, 0x80, 0x80], 5), Err(IntegerError::Truncated));
    }
}
