//! The Huffman code of RFC 7541 Appendix B, which string literals may be written in
//! (section 5.2): strings encoded into it, and decoded from it with the checks a receiver
//! must make (padding of at most 7 bits, padding that is the most significant bits of
//! EOS, no EOS inside a string).
//!
//! The code is transcribed once, as [`CODES`]. The decoder reads four bits at a time
//! through a state machine that a `const fn` derives from that table at compile time:
//! its states are the 256 internal nodes of the code tree, and each (state, nibble) pair
//! gives the next state and at most one symbol (the shortest code has 5 bits). A table
//! that is not a complete prefix code fails the build, not a request.

use bytes::{BufMut, BytesMut};

/// (code, length in bits) of each symbol, 0 to 255 and EOS (256), the code aligned to
/// the least significant bit: the "code as hex" and "len" columns of RFC 7541 Appendix B.
#[rustfmt::skip]
pub(crate) const CODES: [(u32, u8); 257] = [
    // 0..=31: control characters.
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28),
    (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28),
    (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28),
    (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),
    (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),
    (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28),
    (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28), (0xffffffb, 28),
    // 32..=63: ' ' ! " # $ % & ' ( ) * + , - . / 0-9 : ; < = > ?
    (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11),
    (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6),
    (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6),
    (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10),
    // 64..=95: @ A-Z [ \ ] ^ _
    (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7),
    (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7),
    (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7),
    (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7),
    (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13),
    (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    // 96..=127: ` a-z { | } ~ DEL
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5),
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),
    (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),
    (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5),
    (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5),
    (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15),
    (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),
    // 128..=255.
    (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20),
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23),
    (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
    (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23),
    (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),
    (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23),
    (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22),
    (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
    (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24),
    (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),
    (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23),
    (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22),
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
    (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19),
    (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25),
    (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27),
    (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
    (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26),
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),
    (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23),
    (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25), (0x1ffffef, 25),
    (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26),
    (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27),
    (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27),
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26),
    // 256: EOS, never encoded; its leading bits pad the last byte.
    (0x3fffffff, 30),
];

/// The index of EOS in [`CODES`].
const EOS: usize = 256;

/// Why a Huffman-coded string was refused (RFC 7541 section 5.2). Each is a
/// COMPRESSION_ERROR for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HuffmanError {
    /// The bits after the last symbol are more than 7.
    PaddingTooLong,
    /// The bits after the last symbol are not the leading bits of EOS (all ones).
    PaddingNotEos,
    /// The string holds the EOS symbol.
    Eos,
}

/// The length in bytes of `input` Huffman-coded, padding included.
pub(crate) fn encoded_len(input: &[u8]) -> usize {
    let bits =
        input.iter().fold(0_usize, |bits, &byte| bits.saturating_add(code_of(byte).1.into()));
    bits.div_ceil(8)
}

/// Appends `input` Huffman-coded to `dst`, the last byte padded with the most
/// significant bits of EOS (section 5.2).
pub(crate) fn encode(input: &[u8], dst: &mut BytesMut) {
    // Bits not yet written sit in the low `pending_bits` bits of `bits`; whatever lies
    // above them has been written already and is never read again.
    let mut bits: u64 = 0;
    let mut pending_bits: u32 = 0;
    for &byte in input {
        let (code, len) = code_of(byte);
        let len = u32::from(len);
        bits = bits.wrapping_shl(len) | u64::from(code);
        pending_bits = pending_bits.wrapping_add(len);
        while pending_bits >= 8 {
            pending_bits = pending_bits.wrapping_sub(8);
            dst.put_u8(low_byte(bits.wrapping_shr(pending_bits)));
        }
    }
    if pending_bits > 0 {
        let padding_bits = 8_u32.wrapping_sub(pending_bits);
        let padding = u64::from(u8::MAX.wrapping_shr(pending_bits));
        dst.put_u8(low_byte(bits.wrapping_shl(padding_bits) | padding));
    }
}

/// Appends the decoding of `input` to `dst`. At most `input.len() * 8 / 5` bytes come
/// out (the shortest code has 5 bits); reserving them beforehand is the caller's choice.
pub(crate) fn decode(input: &[u8], dst: &mut BytesMut) -> Result<(), HuffmanError> {
    let mut state = ROOT;
    for &byte in input {
        state = step(state, byte.wrapping_shr(4), dst)?;
        state = step(state, byte & 0x0f, dst)?;
    }
    match MACHINE.ends.get(usize::from(state)).copied().unwrap_or(End::PaddingNotEos) {
        End::Accept => Ok(()),
        End::PaddingTooLong => Err(HuffmanError::PaddingTooLong),
        End::PaddingNotEos => Err(HuffmanError::PaddingNotEos),
    }
}

/// Feeds four bits to the state machine; returns the next state.
#[inline(always)]
fn step(state: u8, nibble: u8, dst: &mut BytesMut) -> Result<u8, HuffmanError> {
    let transition = MACHINE
        .steps
        .get(usize::from(state))
        .and_then(|row| row.get(usize::from(nibble)))
        .copied()
        .unwrap_or(FAIL_TRANSITION);
    if transition.flags & EMITS != 0 {
        dst.put_u8(transition.symbol);
    }
    if transition.flags & FAILS != 0 {
        return Err(HuffmanError::Eos);
    }
    Ok(transition.next)
}

fn code_of(byte: u8) -> (u32, u8) {
    // `byte` < 256 = CODES.len() - 1: the fallback is never taken.
    CODES.get(usize::from(byte)).copied().unwrap_or((0, 0))
}

fn low_byte(bits: u64) -> u8 {
    (bits & 0xff) as u8
}

/// The state at the root of the code tree: no bits of a symbol read yet.
const ROOT: u8 = 0;
/// The transition emits `symbol`.
const EMITS: u8 = 1;
/// The four bits reach EOS: the string is refused.
const FAILS: u8 = 2;
const FAIL_TRANSITION: Transition = Transition { next: ROOT, symbol: 0, flags: FAILS };

/// Where four bits lead from one state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transition {
    next: u8,
    symbol: u8,
    flags: u8,
}

/// What the input ending in a state means (section 5.2): the bits read since the last
/// symbol are the padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// At most 7 bits, all ones (a prefix of EOS).
    Accept,
    /// All ones, but 8 bits or more.
    PaddingTooLong,
    /// Not all ones.
    PaddingNotEos,
}

/// The decoding state machine: a transition for each state and nibble, and the verdict
/// for an input that ends in each state.
struct Machine {
    steps: [[Transition; 16]; 256],
    ends: [End; 256],
}

static MACHINE: Machine = build_machine();

/// A child in the code tree during [`build_machine`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Child {
    Empty,
    Node(usize),
    Leaf(usize),
}

/// Derives the decoding state machine from [`CODES`].
///
/// Evaluated at compile time only (it initialises a `static`): an index out of bounds, an
/// overflow or a failed assertion here is a build error, never a panic at run time, so
/// the lints that keep input away from a panic are lifted for this function.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects, clippy::panic)]
const fn build_machine() -> Machine {
    // The code tree: node 0 is the root; a complete prefix code over 257 symbols has
    // exactly 256 internal nodes.
    let mut children = [[Child::Empty; 2]; 256];
    let mut nodes = 1;
    let mut symbol = 0;
    while symbol < CODES.len() {
        let (code, len) = CODES[symbol];
        assert!(len >= 5 && len <= 30, "a code length outside 5..=30");
        let mut node = 0;
        let mut remaining = len as u32;
        while remaining > 1 {
            remaining -= 1;
            let bit = ((code >> remaining) & 1) as usize;
            match children[node][bit] {
                Child::Empty => {
                    assert!(nodes < 256, "more internal nodes than a prefix code has");
                    children[node][bit] = Child::Node(nodes);
                    node = nodes;
                    nodes += 1;
                }
                Child::Node(next) => node = next,
                Child::Leaf(_) => panic!("a code has another code as its prefix"),
            }
        }
        let bit = (code & 1) as usize;
        assert!(matches!(children[node][bit], Child::Empty), "two symbols share a code");
        children[node][bit] = Child::Leaf(symbol);
        symbol += 1;
    }
    assert!(nodes == 256, "the code is not complete");

    // Depth of each node, and whether the path to it is all ones (a prefix of EOS).
    // Children are numbered after their parent, so one pass in order reaches them all.
    let mut depth = [0_u32; 256];
    let mut all_ones = [false; 256];
    all_ones[0] = true;
    let mut node = 0;
    while node < 256 {
        let mut bit = 0;
        while bit < 2 {
            if let Child::Node(child) = children[node][bit] {
                depth[child] = depth[node] + 1;
                all_ones[child] = all_ones[node] && bit == 1;
            }
            bit += 1;
        }
        node += 1;
    }

    let mut machine =
        Machine { steps: [[FAIL_TRANSITION; 16]; 256], ends: [End::PaddingNotEos; 256] };
    let mut state = 0;
    while state < 256 {
        machine.ends[state] = if !all_ones[state] {
            End::PaddingNotEos
        } else if depth[state] > 7 {
            End::PaddingTooLong
        } else {
            End::Accept
        };
        let mut nibble = 0;
        while nibble < 16 {
            let mut node = state;
            let mut transition = Transition { next: ROOT, symbol: 0, flags: 0 };
            let mut shift = 4;
            while shift > 0 {
                shift -= 1;
                let bit = (nibble >> shift) & 1;
                match children[node][bit] {
                    Child::Node(next) => node = next,
                    Child::Leaf(EOS) => {
                        transition.flags |= FAILS;
                        break;
                    }
                    Child::Leaf(symbol) => {
                        // Codes have at least 5 bits: one nibble completes at most one.
                        assert!(transition.flags & EMITS == 0, "two symbols in one nibble");
                        transition.flags |= EMITS;
                        transition.symbol = symbol as u8;
                        node = 0;
                    }
                    Child::Empty => panic!("the code is not complete"),
                }
            }
            transition.next = node as u8;
            machine.steps[state][nibble] = transition;
            nibble += 1;
        }
        state += 1;
    }
    machine
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(input: &[u8]) -> Vec<u8> {
        let mut dst = BytesMut::new();
        encode(input, &mut dst);
        assert_eq!(dst.len(), encoded_len(input));
        dst.to_vec()
    }

    fn decoded(input: &[u8]) -> Result<Vec<u8>, HuffmanError> {
        let mut dst = BytesMut::new();
        decode(input, &mut dst).map(|()| dst.to_vec())
    }

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    /// Kraft's sum is exactly 1 (the code is complete: every bit string decodes or is a
    /// prefix of a code), lengths are 5..=30, EOS is 30 ones, and no code is a prefix
    /// of another.
    #[test]
    fn codes_are_a_complete_prefix_code() {
        let kraft: u64 = CODES.iter().map(|&(_, len)| 1_u64 << (30 - len)).sum();
        assert_eq!(kraft, 1 << 30);
        for &(code, len) in &CODES {
            assert!((5..=30).contains(&len));
            assert!(u64::from(code) < 1 << len, "{code:#x} does not fit {len} bits");
        }
        assert_eq!(CODES[EOS], ((1 << 30) - 1, 30));
        for (a, &(code_a, len_a)) in CODES.iter().enumerate() {
            for (b, &(code_b, len_b)) in CODES.iter().enumerate() {
                if a != b && len_a <= len_b {
                    assert_ne!(code_b >> (len_b - len_a), code_a, "{a} is a prefix of {b}");
                }
            }
        }
    }

    #[test]
    fn every_byte_round_trips_alone_and_together() {
        for byte in 0..=255_u8 {
            let coded = encoded(&[byte]);
            assert_eq!(decoded(&coded), Ok(vec![byte]), "byte {byte}");
        }
        let all: Vec<u8> = (0..=255).chain((0..=255).rev()).collect();
        assert_eq!(decoded(&encoded(&all)), Ok(all));
        assert_eq!(encoded(b""), b"");
        assert_eq!(decoded(b""), Ok(Vec::new()));
    }

    /// The Huffman-coded strings of RFC 7541 Appendix C.4 and C.6.
    #[test]
    fn rfc_7541_appendix_c_strings() {
        let cases: [(&str, &[u8]); 10] = [
            ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", b"www.example.com"),
            ("a8eb 1064 9cbf", b"no-cache"),
            ("25a8 49e9 5ba9 7d7f", b"custom-key"),
            ("25a8 49e9 5bb8 e8b4 bf", b"custom-value"),
            ("6402", b"302"),
            ("aec3 771a 4b", b"private"),
            ("d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff", b"Mon, 21 Oct 2013 20:13:21 GMT"),
            ("9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3", b"https://www.example.com"),
            ("9bd9 ab", b"gzip"),
            (
                "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
                b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
            ),
        ];
        for (coded, plain) in cases {
            assert_eq!(decoded(&hex(coded)), Ok(plain.to_vec()));
            assert_eq!(encoded(plain), hex(coded));
        }
    }

    #[test]
    fn padding_of_eight_ones_is_refused() {
        // '0' is 00000, padded with 3 ones: 0000_0111. A whole byte of ones after it is
        // 11 bits of padding.
        assert_eq!(decoded(&[0x07]), Ok(b"0".to_vec()));
        assert_eq!(decoded(&[0x07, 0xff]), Err(HuffmanError::PaddingTooLong));
        // A string that is only padding: 8 ones.
        assert_eq!(decoded(&[0xff]), Err(HuffmanError::PaddingTooLong));
    }

    #[test]
    fn padding_that_is_not_ones_is_refused() {
        // '0' then 000: the padding has zeros.
        assert_eq!(decoded(&[0x00]), Err(HuffmanError::PaddingNotEos));
        // 'a' (00011) then 011.
        assert_eq!(decoded(&[0x1b]), Err(HuffmanError::PaddingNotEos));
        // '0' '0' '0' (15 bits) and a last bit 0.
        assert_eq!(decoded(&[0x00, 0x00]), Err(HuffmanError::PaddingNotEos));
    }

    #[test]
    fn eos_in_a_string_is_refused() {
        // EOS is 30 ones; 32 ones contain it.
        assert_eq!(decoded(&[0xff, 0xff, 0xff, 0xff]), Err(HuffmanError::Eos));
        // '0' (00000), then EOS, then 5 ones of padding: 00000111 1*29 ... 35 + 5 = 40 bits.
        assert_eq!(decoded(&[0x07, 0xff, 0xff, 0xff, 0xff]), Err(HuffmanError::Eos));
        // 24 ones: a prefix of EOS, too long to be padding.
        assert_eq!(decoded(&[0xff, 0xff, 0xff]), Err(HuffmanError::PaddingTooLong));
        // 29 ones and a zero are byte 22 (a 30-bit code); the 00 after it is no padding.
        assert_eq!(decoded(&[0xff, 0xff, 0xff, 0xf8]), Err(HuffmanError::PaddingNotEos));
    }

    #[test]
    fn a_string_may_end_with_up_to_seven_ones() {
        // 'a' (00011) + 3 ones; 'a' 'a' (10 bits) + 6 ones; a 28-bit code + 4 ones.
        assert_eq!(decoded(&[0x1f]), Ok(b"a".to_vec()));
        assert_eq!(decoded(&[0x18, 0xff]), Ok(b"aa".to_vec()));
        assert_eq!(decoded(&[0xff, 0xff, 0xfe, 0x2f]), Ok(vec![2]));
    }
}
