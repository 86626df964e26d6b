//! Bounded fuzz tests of HPACK, on the mutation fuzzer in `support`:
//! - the decoder on mutated sequences of blocks (seeds: RFC 7541 Appendix C and the
//!   Python `hpack` reference fixture), several blocks on one decoder with table size
//!   changes between them: it never panics, each block decodes or is refused with
//!   COMPRESSION_ERROR, and what it decodes survives our encoder and a second decoder;
//! - encoder to decoder round trips of fields made from the fuzzer's bytes.
//!
//! Each runs for at most `H2_FUZZ_BUDGET_SECS` (default 5) and `H2_FUZZ_ITERATIONS`
//! inputs (default 200,000): seconds in CI's debug build, and as long as one likes in
//! release (`H2_FUZZ_BUDGET_SECS=600 H2_FUZZ_ITERATIONS=1000000000000 cargo test
//! --release -p holdfast-h2 --test fuzz_hpack -- --nocapture`). `H2_FUZZ_SEED` replays
//! a run.

mod support;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use holdfast_h2::error::ErrorCode;
use holdfast_h2::hpack::{Decoder, Encoder, Field, DEFAULT_TABLE_SIZE};

/// The table sizes a block header can ask for (those of the reference fixture).
const SIZES: [usize; 8] = [0, 32, 100, 256, 1024, 4096, 8192, 65_536];
/// The list limit of a block whose header asks for a small one.
const SMALL_LIST_LIMIT: usize = 200;
/// Inputs longer than this are cut.
const MAX_INPUT_LEN: usize = 4096;

fn budget() -> Duration {
    let seconds = std::env::var("H2_FUZZ_BUDGET_SECS").ok().and_then(|s| s.parse().ok());
    Duration::from_secs(seconds.unwrap_or(5))
}

fn iterations() -> u64 {
    std::env::var("H2_FUZZ_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(200_000)
}

/// One block of a decoder input and what comes before it.
struct InputBlock<'a> {
    /// Our SETTINGS_HEADER_TABLE_SIZE changes, acknowledged before the block.
    settings: Vec<usize>,
    max_list_size: usize,
    block: &'a [u8],
}

/// Splits a decoder input into blocks. Each starts with 3 bytes: `c`, then the block's
/// length in 15 bits, big-endian, its top bit asking for a small list limit. In `c`,
/// bit 3 sets the table size `SIZES[c & 7]`, then bit 7 sets `SIZES[(c >> 4) & 7]`.
fn split_blocks(mut input: &[u8]) -> Vec<InputBlock<'_>> {
    let mut blocks = Vec::new();
    while let [control, len_high, len_low, rest @ ..] = input {
        let mut settings = Vec::new();
        if control & 0x08 != 0 {
            settings.push(SIZES[usize::from(control & 7)]);
        }
        if control & 0x80 != 0 {
            settings.push(SIZES[usize::from((control >> 4) & 7)]);
        }
        let max_list_size = if len_high & 0x80 != 0 { SMALL_LIST_LIMIT } else { usize::MAX };
        let len = (usize::from(len_high & 0x7f) << 8 | usize::from(*len_low)).min(rest.len());
        let (block, after) = rest.split_at(len);
        blocks.push(InputBlock { settings, max_list_size, block });
        input = after;
    }
    blocks
}

/// Joins blocks into a decoder input (the inverse of `split_blocks`).
fn join_blocks(blocks: &[(Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut input = Vec::new();
    for (settings, block) in blocks {
        let mut control = 0_u8;
        if let Some(first) = settings.first() {
            control |= 0x08 | SIZES.iter().position(|size| size == first).unwrap() as u8;
        }
        if let Some(second) = settings.get(1) {
            control |= 0x80 | (SIZES.iter().position(|size| size == second).unwrap() as u8) << 4;
        }
        input.push(control);
        input.extend_from_slice(&(block.len() as u16).to_be_bytes());
        input.extend_from_slice(block);
    }
    input
}

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// RFC 7541 Appendix C.3 to C.6: three blocks per sequence.
fn appendix_c_seeds() -> Vec<Vec<u8>> {
    let sequences: [(&[usize], [&str; 3]); 4] = [
        (
            &[],
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
        ),
        (
            &[],
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        ),
        // C.5 and C.6 assume a 256-byte table: signalled first here (3f e1 01).
        (
            &[256],
            [
                "3fe101 4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 \
             3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 \
             2e65 7861 6d70 6c65 2e63 6f6d",
                "4803 3330 37c1 c0bf",
                "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d \
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 \
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e \
             3d31",
            ],
        ),
        (
            &[256],
            [
                "3fe101 4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 \
             66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                "4883 640e ffc1 c0bf",
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab \
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f \
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ],
        ),
    ];
    sequences
        .iter()
        .map(|(settings, blocks)| {
            let blocks: Vec<(Vec<usize>, Vec<u8>)> = blocks
                .iter()
                .enumerate()
                .map(|(n, block)| (if n == 0 { settings.to_vec() } else { Vec::new() }, hex(block)))
                .collect();
            join_blocks(&blocks)
        })
        .collect()
}

/// The reference fixture's connections, cut into runs of a few consecutive blocks.
fn fixture_seeds() -> Vec<Vec<u8>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hpack-reference.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let mut connections: Vec<Vec<(Vec<usize>, Vec<u8>)>> = Vec::new();
    let mut settings = Vec::new();
    for line in text.lines() {
        match line.split(' ').collect::<Vec<_>>()[..] {
            ["connection"] => connections.push(Vec::new()),
            ["settings", size] => settings.push(size.parse().unwrap()),
            ["block", block] => {
                let block = if block == "-" { Vec::new() } else { hex(block) };
                connections.last_mut().unwrap().push((std::mem::take(&mut settings), block));
            }
            _ => {}
        }
    }
    // A run from the start of a connection, so the tables are those the blocks expect.
    connections
        .iter()
        .flat_map(|blocks| {
            (1..=blocks.len().min(12)).step_by(3).map(|end| join_blocks(&blocks[..end]))
        })
        .filter(|seed| seed.len() <= MAX_INPUT_LEN)
        .collect()
}

/// Decodes each block of `input` on one decoder. Every block decodes or is refused with
/// COMPRESSION_ERROR, after which the connection is over. What decodes is encoded by
/// our encoder and decoded by a second decoder, and must come back the same.
fn decode_blocks(input: &[u8]) {
    let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
    let mut encoder = Encoder::new();
    let mut mirror = Decoder::new(DEFAULT_TABLE_SIZE);
    for InputBlock { settings, max_list_size, block } in split_blocks(input) {
        for &size in &settings {
            decoder.set_max_table_size(size);
            encoder.set_max_table_size(size as u32);
            mirror.set_max_table_size(size);
        }
        let mut fields = Vec::new();
        let result = decoder.decode(&Bytes::copy_from_slice(block), max_list_size, |field| {
            fields.push(field);
        });
        let decoded = match result {
            Ok(decoded) => decoded,
            Err(error) => {
                assert_eq!(error.code(), ErrorCode::CompressionError);
                assert!(!error.to_string().is_empty());
                return;
            }
        };
        assert!(decoder.table_size() <= decoder.max_table_size());
        let handed_out: usize = fields.iter().map(Field::size).sum();
        assert!(handed_out <= decoded.list_size);
        assert_eq!(decoded.over_limit, decoded.list_size > max_list_size);
        if !decoded.over_limit {
            assert_eq!(handed_out, decoded.list_size);
        }
        assert_eq!(round_trip(&mut encoder, &mut mirror, &fields), fields);
    }
}

/// `fields` through `encoder` and `decoder`.
fn round_trip(encoder: &mut Encoder, decoder: &mut Decoder, fields: &[Field]) -> Vec<Field> {
    let mut block = BytesMut::new();
    encoder.encode(fields.iter().map(Field::as_field_ref), &mut block);
    let mut decoded = Vec::new();
    let result = decoder.decode(&block.freeze(), usize::MAX, |field| decoded.push(field));
    assert!(result.is_ok(), "our own block refused: {result:?}");
    assert_eq!(encoder.table_size(), decoder.table_size());
    decoded
}

#[test]
fn decoder_survives_mutated_blocks() {
    let mut seeds = appendix_c_seeds();
    seeds.extend(fixture_seeds());
    assert!(seeds.len() > 20);
    let start = Instant::now();
    let done =
        support::run("hpack decoder", &seeds, iterations(), budget(), MAX_INPUT_LEN, decode_blocks);
    eprintln!("fuzz hpack decoder: {done} inputs in {:.1?}", start.elapsed());
}

const NAMES: [&[u8]; 10] = [
    b":method",
    b":path",
    b":status",
    b"cookie",
    b"authorization",
    b"content-length",
    b"x-a",
    b"x-b",
    b"date",
    b"",
];

/// Reads a script of blocks from fuzzer bytes: 0x00..=0x0f changes the peer's table
/// size to `SIZES[op & 7]`; 0xff ends a block; any other byte is a field: its name
/// (one of `NAMES`, or the next bytes when the pick is past them), value length and
/// value next, sensitive when bit 4 of the byte is set.
struct Script<'a> {
    bytes: std::slice::Iter<'a, u8>,
}

impl<'a> Script<'a> {
    fn take(&mut self, len: usize) -> &'a [u8] {
        let rest = self.bytes.as_slice();
        let (taken, after) = rest.split_at(len.min(rest.len()));
        self.bytes = after.iter();
        taken
    }

    fn string(&mut self) -> Vec<u8> {
        let len = self.bytes.next().map_or(0, |&len| usize::from(len));
        // Long values now and then: a length byte over 0xf0 means 16x.
        let len = if len > 0xf0 { (len - 0xf0) * 256 } else { len };
        self.take(len).to_vec()
    }
}

fn round_trip_script(input: &[u8]) {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
    let mut script = Script { bytes: input.iter() };
    let mut fields = Vec::new();
    while let Some(&op) = script.bytes.next() {
        match op {
            0x00..=0x0f => {
                let size = SIZES[usize::from(op & 7)];
                encoder.set_max_table_size(size as u32);
                decoder.set_max_table_size(size);
            }
            0xff => {
                assert_eq!(round_trip(&mut encoder, &mut decoder, &fields), fields);
                fields.clear();
            }
            _ => {
                let pick = usize::from(op & 0x0f);
                let name = NAMES.get(pick).map_or_else(|| script.string(), |name| name.to_vec());
                let value = script.string();
                fields.push(Field {
                    name: name.into(),
                    value: value.into(),
                    sensitive: op & 0x10 != 0,
                });
            }
        }
    }
    assert_eq!(round_trip(&mut encoder, &mut decoder, &fields), fields);
}

#[test]
fn encoder_and_decoder_round_trip_fuzzed_fields() {
    let seeds: Vec<Vec<u8>> = vec![
        b"\x20\x03GET\x21\x01/\xff\x20\x03GET\x21\x01/\xff".to_vec(),
        b"\x2a\x03one\x0a\x03two\x3b\x04\x01x\xff\x05\x2a\x03one\xff\x0d\x2a\xf3zzz".to_vec(),
        b"\x23\x10session=abc12345\x24\x06secret\x33\x03abc\xff\x00\xff\x0f\x23\x01a".to_vec(),
        b"\x2e\x03x-y\xf2\x41\x42\x43\xff\x2e\x03x-y\x01z\x04\x2e\x03x-y\x01z\xff".to_vec(),
    ];
    let start = Instant::now();
    let done =
        support::run("hpack round trip", &seeds, iterations(), budget(), MAX_INPUT_LEN, |input| {
            round_trip_script(input);
        });
    eprintln!("fuzz hpack round trip: {done} inputs in {:.1?}", start.elapsed());
}

/// The fuzz inputs' framing is what the seeds assume.
#[test]
fn seeds_split_back_into_their_blocks() {
    let seed = &appendix_c_seeds()[2];
    let blocks = split_blocks(seed);
    assert_eq!(blocks.len(), 3);
    assert_eq!(blocks[0].settings, [256]);
    assert_eq!(blocks[1].block, hex("4803 3330 37c1 c0bf"));
    for seed in appendix_c_seeds().iter().chain(&fixture_seeds()) {
        decode_blocks(seed);
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        for InputBlock { settings, block, .. } in split_blocks(seed) {
            for size in settings {
                decoder.set_max_table_size(size);
            }
            assert!(decoder.decode(&Bytes::copy_from_slice(block), usize::MAX, |_| {}).is_ok());
        }
    }
}
