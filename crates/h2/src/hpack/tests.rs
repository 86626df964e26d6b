//! Tests across the HPACK files: the request and response sequences of RFC 7541
//! Appendix C through the decoder and the encoder, the encoder and decoder tables kept
//! in step over thousands of random blocks, the header list limit, and the reference
//! blocks made with Python's `hpack` (`tests/fixtures/hpack-reference.txt`).

use bytes::{Bytes, BytesMut};

use super::dynamic_table::DynamicTable;
use super::*;

/// Bytes from hex digits; anything else (spaces) is skipped.
pub(crate) fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    assert!(digits.len() % 2 == 0, "odd number of hex digits in {text:?}");
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// Decodes one block with no list limit; fields as (name, value, sensitive).
pub(crate) fn decode_block(
    decoder: &mut Decoder,
    block: &[u8],
) -> Result<Vec<(String, String, bool)>, DecodeError> {
    let mut fields = Vec::new();
    let decoded = decoder.decode(&Bytes::copy_from_slice(block), usize::MAX, |field| {
        fields.push((
            String::from_utf8_lossy(&field.name).into_owned(),
            String::from_utf8_lossy(&field.value).into_owned(),
            field.sensitive,
        ));
    })?;
    assert!(!decoded.over_limit);
    Ok(fields)
}

fn table_entries(table: &DynamicTable) -> Vec<(String, String)> {
    table
        .entries()
        .map(|entry| {
            (
                String::from_utf8_lossy(&entry.name).into_owned(),
                String::from_utf8_lossy(&entry.value).into_owned(),
            )
        })
        .collect()
}

fn pairs(fields: &[(&str, &str)]) -> Vec<(String, String)> {
    fields.iter().map(|&(name, value)| (name.to_owned(), value.to_owned())).collect()
}

/// One block of an Appendix C sequence: its bytes, the fields, and the dynamic table
/// after it, newest first.
struct Step {
    block: &'static str,
    fields: &'static [(&'static str, &'static str)],
    table: &'static [(&'static str, &'static str)],
    table_size: usize,
}

const AUTHORITY: (&str, &str) = (":authority", "www.example.com");
const NO_CACHE: (&str, &str) = ("cache-control", "no-cache");
const CUSTOM: (&str, &str) = ("custom-key", "custom-value");
const REQUEST_1: &[(&str, &str)] =
    &[(":method", "GET"), (":scheme", "http"), (":path", "/"), AUTHORITY];
const REQUEST_2: &[(&str, &str)] =
    &[(":method", "GET"), (":scheme", "http"), (":path", "/"), AUTHORITY, NO_CACHE];
const REQUEST_3: &[(&str, &str)] =
    &[(":method", "GET"), (":scheme", "https"), (":path", "/index.html"), AUTHORITY, CUSTOM];

/// RFC 7541 C.3: requests without Huffman coding.
const C_3: [Step; 3] = [
    Step {
        block: "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        fields: REQUEST_1,
        table: &[AUTHORITY],
        table_size: 57,
    },
    Step {
        block: "8286 84be 5808 6e6f 2d63 6163 6865",
        fields: REQUEST_2,
        table: &[NO_CACHE, AUTHORITY],
        table_size: 110,
    },
    Step {
        block: "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        fields: REQUEST_3,
        table: &[CUSTOM, NO_CACHE, AUTHORITY],
        table_size: 164,
    },
];

/// RFC 7541 C.4: the same requests with Huffman coding.
const C_4: [Step; 3] = [
    Step {
        block: "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        fields: REQUEST_1,
        table: &[AUTHORITY],
        table_size: 57,
    },
    Step {
        block: "8286 84be 5886 a8eb 1064 9cbf",
        fields: REQUEST_2,
        table: &[NO_CACHE, AUTHORITY],
        table_size: 110,
    },
    Step {
        block: "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        fields: REQUEST_3,
        table: &[CUSTOM, NO_CACHE, AUTHORITY],
        table_size: 164,
    },
];

const PRIVATE: (&str, &str) = ("cache-control", "private");
const DATE_21: (&str, &str) = ("date", "Mon, 21 Oct 2013 20:13:21 GMT");
const DATE_22: (&str, &str) = ("date", "Mon, 21 Oct 2013 20:13:22 GMT");
const LOCATION: (&str, &str) = ("location", "https://www.example.com");
const GZIP: (&str, &str) = ("content-encoding", "gzip");
const COOKIE: (&str, &str) =
    ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1");
const RESPONSE_1: &[(&str, &str)] = &[(":status", "302"), PRIVATE, DATE_21, LOCATION];
const RESPONSE_2: &[(&str, &str)] = &[(":status", "307"), PRIVATE, DATE_21, LOCATION];
const RESPONSE_3: &[(&str, &str)] = &[(":status", "200"), PRIVATE, DATE_22, LOCATION, GZIP, COOKIE];
const TABLE_1: &[(&str, &str)] = &[LOCATION, DATE_21, PRIVATE, (":status", "302")];
const TABLE_2: &[(&str, &str)] = &[(":status", "307"), LOCATION, DATE_21, PRIVATE];
const TABLE_3: &[(&str, &str)] = &[COOKIE, GZIP, DATE_22];

/// RFC 7541 C.5: responses without Huffman coding, a 256-byte table, evictions.
const C_5: [Step; 3] = [
    Step {
        block: "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 \
                3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 \
                7861 6d70 6c65 2e63 6f6d",
        fields: RESPONSE_1,
        table: TABLE_1,
        table_size: 222,
    },
    Step { block: "4803 3330 37c1 c0bf", fields: RESPONSE_2, table: TABLE_2, table_size: 222 },
    Step {
        block: "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 \
                474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 \
                454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 \
                6572 7369 6f6e 3d31",
        fields: RESPONSE_3,
        table: TABLE_3,
        table_size: 215,
    },
];

/// RFC 7541 C.6: the same responses with Huffman coding.
const C_6: [Step; 3] = [
    Step {
        block: "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 \
                82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        fields: RESPONSE_1,
        table: TABLE_1,
        table_size: 222,
    },
    Step { block: "4883 640e ffc1 c0bf", fields: RESPONSE_2, table: TABLE_2, table_size: 222 },
    Step {
        block: "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b \
                d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 \
                0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        fields: RESPONSE_3,
        table: TABLE_3,
        table_size: 215,
    },
];

fn decode_sequence(max_table_size: usize, steps: &[Step]) {
    let mut decoder = Decoder::new(max_table_size);
    for (number, step) in steps.iter().enumerate() {
        let fields = decode_block(&mut decoder, &hex(step.block)).unwrap();
        let fields: Vec<(String, String)> = fields.into_iter().map(|(n, v, _)| (n, v)).collect();
        assert_eq!(fields, pairs(step.fields), "block {}", number + 1);
        assert_eq!(table_entries(decoder.table()), pairs(step.table), "block {}", number + 1);
        assert_eq!(decoder.table_size(), step.table_size, "block {}", number + 1);
    }
}

#[test]
fn c_3_requests_without_huffman() {
    decode_sequence(4096, &C_3);
}

#[test]
fn c_4_requests_with_huffman() {
    decode_sequence(4096, &C_4);
}

#[test]
fn c_5_responses_without_huffman_evict() {
    decode_sequence(256, &C_5);
}

#[test]
fn c_6_responses_with_huffman_evict() {
    decode_sequence(256, &C_6);
}

fn encode_pairs(encoder: &mut Encoder, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut dst = BytesMut::new();
    encoder.encode(fields.iter().map(|(n, v)| FieldRef::new(n.as_bytes(), v.as_bytes())), &mut dst);
    dst.to_vec()
}

/// The encoder makes C.4's choices exactly (each string is Huffman-coded because that
/// is shorter), so its bytes are C.4's; the decoder reads them back.
#[test]
fn c_4_encoder_writes_the_rfc_bytes() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    for step in &C_4 {
        let block = encode_pairs(&mut encoder, step.fields);
        assert_eq!(block, hex(step.block));
        decode_block(&mut decoder, &block).unwrap();
        assert_eq!(table_entries(encoder.table()), pairs(step.table));
        assert_eq!(table_entries(decoder.table()), pairs(step.table));
    }
}

/// C.6 with the encoder: the peer's 256 is signalled first (3f e1 01: the RFC's
/// example assumes it was in force from the start), then C.6.1 exactly. In C.6.2,
/// "307" Huffman-coded is no shorter (3 bytes), so it goes raw: C.5.2's bytes. In
/// C.6.3 the encoder sends `set-cookie` without indexing (policy), 0f 28 instead of
/// 77, and keeps it out of the table; everything else is the RFC's bytes.
#[test]
fn c_6_encoder_writes_the_rfc_bytes_but_keeps_set_cookie_out_of_the_table() {
    let mut encoder = Encoder::new();
    encoder.set_max_table_size(256);
    let mut decoder = Decoder::new(4096);
    decoder.set_max_table_size(256);

    let first = encode_pairs(&mut encoder, C_6[0].fields);
    assert_eq!(first[..3], [0x3f, 0xe1, 0x01]);
    assert_eq!(first[3..], hex(C_6[0].block));
    let second = encode_pairs(&mut encoder, C_6[1].fields);
    assert_eq!(second, hex(C_5[1].block));
    let third = encode_pairs(&mut encoder, C_6[2].fields);
    let (before, after) = C_6[2].block.split_once("77ad").unwrap();
    let expected = [hex(before), vec![0x0f, 0x28, 0xad], hex(after)].concat();
    assert_eq!(third, expected);

    for block in [first, second, third].iter() {
        decode_block(&mut decoder, block).unwrap();
    }
    let table = pairs(&[GZIP, DATE_22, (":status", "307"), LOCATION]);
    assert_eq!(table_entries(encoder.table()), table);
    assert_eq!(table_entries(decoder.table()), table);
    assert_eq!(decoder.table_size(), 222);
}

/// A tiny xorshift generator with a fixed seed: reproducible, no dependency.
struct Xorshift(u64);

impl Xorshift {
    fn new(seed: u64) -> Xorshift {
        Xorshift(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const NAMES: [&str; 16] = [
    ":method",
    ":path",
    ":authority",
    ":status",
    "content-type",
    "content-length",
    "cookie",
    "set-cookie",
    "authorization",
    "accept-encoding",
    "user-agent",
    "date",
    "x-custom",
    "x-trace-id",
    "a",
    "",
];

fn random_value(rng: &mut Xorshift) -> Vec<u8> {
    const COMMON: [&str; 6] = ["GET", "/", "/search?q=1", "gzip, deflate", "text/html", "1"];
    match rng.below(10) {
        0 => Vec::new(),
        1..=4 => COMMON[rng.below(COMMON.len())].as_bytes().to_vec(),
        5..=7 => (0..rng.below(24)).map(|_| b"abcdefghij0123/-= "[rng.below(18)]).collect(),
        8 => (0..rng.below(40)).map(|_| rng.next() as u8).collect(),
        _ => (0..100 + rng.below(3500)).map(|_| rng.next() as u8).collect(),
    }
}

fn random_fields(rng: &mut Xorshift) -> Vec<Field> {
    (0..rng.below(12))
        .map(|_| Field {
            name: Bytes::from_static(NAMES[rng.below(NAMES.len())].as_bytes()),
            value: Bytes::from(random_value(rng)),
            sensitive: rng.below(8) == 0,
        })
        .collect()
}

/// A peer's SETTINGS_HEADER_TABLE_SIZE changing: applied to the encoder as received
/// and to the decoder as acknowledged (the encoder's next block follows both).
fn change_table_size(rng: &mut Xorshift, encoder: &mut Encoder, decoder: &mut Decoder) {
    const SIZES: [u32; 8] = [0, 32, 50, 256, 1000, 4096, 8192, 65_536];
    for _ in 0..=rng.below(3) {
        let size = SIZES[rng.below(SIZES.len())];
        encoder.set_max_table_size(size);
        decoder.set_max_table_size(size as usize);
    }
}

/// Random fields, random table size changes (down, up, down then up between blocks):
/// every block decodes to the fields encoded, `sensitive` included, and both tables
/// hold the same entries.
#[test]
fn encoder_and_decoder_tables_stay_in_step_over_random_blocks() {
    let mut rng = Xorshift::new(0x5eed_1234_abcd_0001);
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
    let mut indexed = 0;
    for block_number in 0..4000 {
        if rng.below(10) == 0 {
            change_table_size(&mut rng, &mut encoder, &mut decoder);
        }
        let fields = random_fields(&mut rng);
        let mut block = BytesMut::new();
        encoder.encode(fields.iter().map(Field::as_field_ref), &mut block);
        indexed += block.iter().filter(|&&byte| byte >= 0xbe).count();
        let mut decoded = Vec::new();
        let result = decoder.decode(&block.freeze(), usize::MAX, |field| decoded.push(field));
        assert!(result.is_ok(), "block {block_number}: {result:?}");
        assert_eq!(decoded, fields, "block {block_number}");
        assert_eq!(table_entries(decoder.table()), table_entries(encoder.table()));
        assert_eq!(decoder.table_size(), encoder.table_size());
        assert_eq!(decoder.table().max_size_bytes(), encoder.table().max_size_bytes());
    }
    // The dynamic table was used, not only literals.
    assert!(indexed > 1000, "{indexed} bytes that look like dynamic indexes");
}

/// A block over the list limit is decoded to its end: fields stop at the limit, the
/// table still takes every entry, and the next block (which refers to them) decodes.
#[test]
fn a_block_over_the_list_limit_keeps_the_table_in_step() {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
    let big = "x".repeat(200);
    let fields = [("a", "1"), ("b", big.as_str()), ("c", "3")];
    let block = Bytes::from(encode_pairs(&mut encoder, &fields));
    let mut handed_out = Vec::new();
    // a: 34 bytes, b: 233, c: 34.
    let decoded = decoder.decode(&block, 100, |field| handed_out.push(field)).unwrap();
    assert_eq!(decoded, Decoded { list_size: 34 + 233 + 34, over_limit: true });
    assert_eq!(handed_out.len(), 1);
    assert_eq!(handed_out[0].name, "a");
    assert_eq!(table_entries(decoder.table()), table_entries(encoder.table()));
    assert_eq!(decoder.table().len(), 3);

    // The same fields again: all three indexed from the dynamic table.
    let block = Bytes::from(encode_pairs(&mut encoder, &fields));
    assert_eq!(block[..], [0xc0, 0xbf, 0xbe]);
    let mut again = Vec::new();
    let decoded = decoder.decode(&block, 4096, |field| again.push(field)).unwrap();
    assert!(!decoded.over_limit);
    let names: Vec<&[u8]> = again.iter().map(|field| &field.name[..]).collect();
    assert_eq!(names, [&b"a"[..], b"b", b"c"]);
    assert_eq!(again[1].value, big);
}

#[test]
fn a_list_exactly_at_the_limit_is_not_over_it() {
    let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
    // :method GET is 7 + 3 + 32 = 42.
    let decoded = decoder.decode(&Bytes::from_static(&[0x82, 0x82]), 84, |_| {}).unwrap();
    assert_eq!(decoded, Decoded { list_size: 84, over_limit: false });
    let decoded = decoder.decode(&Bytes::from_static(&[0x82, 0x82]), 83, |_| {}).unwrap();
    assert_eq!(decoded, Decoded { list_size: 84, over_limit: true });
}

#[test]
fn every_error_is_a_compression_error_with_a_message() {
    let errors = [
        DecodeError::IntegerTruncated,
        DecodeError::IndexPastTables { index: 70 },
        DecodeError::SizeUpdateMissing { limit: 0 },
        DecodeError::HuffmanEos,
    ];
    for error in errors {
        assert_eq!(error.code(), crate::error::ErrorCode::CompressionError);
        assert!(!error.to_string().is_empty());
    }
    assert_eq!(
        DecodeError::IndexPastTables { index: 70 }.to_string(),
        "HPACK index 70 past the static and dynamic tables"
    );
}

/// One block of the reference fixture, with what Python's `hpack` decoded from it.
struct ReferenceBlock {
    /// Our SETTINGS_HEADER_TABLE_SIZE changes acknowledged before the block.
    settings: Vec<usize>,
    block: Vec<u8>,
    fields: Vec<Field>,
    table_size: usize,
}

/// The fixture's connections, each a list of blocks decoded in order by one decoder.
fn reference_connections() -> Vec<Vec<ReferenceBlock>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hpack-reference.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let mut connections: Vec<Vec<ReferenceBlock>> = Vec::new();
    let mut settings = Vec::new();
    let mut current: Option<ReferenceBlock> = None;
    let hex_or_empty = |word: &str| if word == "-" { Vec::new() } else { hex(word) };
    for line in text.lines().filter(|line| !line.starts_with('#') && !line.is_empty()) {
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["connection"] => connections.push(Vec::new()),
            ["settings", size] => settings.push(size.parse().unwrap()),
            ["block", block] => {
                current = Some(ReferenceBlock {
                    settings: std::mem::take(&mut settings),
                    block: hex_or_empty(block),
                    fields: Vec::new(),
                    table_size: 0,
                });
            }
            ["field", name, value, kind] => current.as_mut().unwrap().fields.push(Field {
                name: Bytes::from(hex_or_empty(name)),
                value: Bytes::from(hex_or_empty(value)),
                sensitive: kind == "never",
            }),
            ["table", size] => {
                let mut block = current.take().unwrap();
                block.table_size = size.parse().unwrap();
                connections.last_mut().unwrap().push(block);
            }
            _ => panic!("unexpected fixture line {line:?}"),
        }
    }
    connections
}

/// Blocks Python's `hpack` encoded (Huffman or not, with size updates, never-indexed
/// fields, evictions) decode here to the fields it decoded, with the same table size.
#[test]
fn reference_blocks_from_python_hpack_decode_the_same() {
    let connections = reference_connections();
    assert!(connections.len() >= 5);
    let mut blocks = 0;
    for (connection_number, connection) in connections.iter().enumerate() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        for (block_number, reference) in connection.iter().enumerate() {
            for &size in &reference.settings {
                decoder.set_max_table_size(size);
            }
            let mut fields = Vec::new();
            let result = decoder
                .decode(&Bytes::from(reference.block.clone()), usize::MAX, |f| fields.push(f));
            let place = format!("connection {connection_number} block {block_number}");
            assert!(result.is_ok(), "{place}: {result:?}");
            assert_eq!(fields, reference.fields, "{place}");
            assert_eq!(decoder.table_size(), reference.table_size, "{place}");
            blocks += 1;
        }
    }
    assert!(blocks >= 300, "{blocks} blocks");
}

/// A rough cost figure, not a check: decoding the three C.4 blocks (one connection's
/// worth: Huffman strings, indexed fields, table additions) and encoding their fields,
/// in a loop. Run in release: `cargo test --release -p holdfast-h2 --lib hpack_cost
/// -- --ignored --nocapture`.
#[test]
#[ignore = "a timing, meaningful in release only"]
fn hpack_cost() {
    let blocks: Vec<Bytes> = C_4.iter().map(|step| Bytes::from(hex(step.block))).collect();
    let rounds = 1_000_000 / blocks.len();
    let start = std::time::Instant::now();
    let mut fields = 0_usize;
    for _ in 0..rounds {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        for block in &blocks {
            decoder.decode(block, usize::MAX, |_| fields += 1).unwrap();
        }
    }
    let decode_ns = start.elapsed().as_nanos() as f64 / (rounds * blocks.len()) as f64;

    // Steady state on one connection: the same block over and over (all indexed).
    let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
    for block in &blocks {
        decoder.decode(block, usize::MAX, |_| {}).unwrap();
    }
    let start = std::time::Instant::now();
    for _ in 0..1_000_000 {
        decoder.decode(&blocks[2], usize::MAX, |_| fields += 1).unwrap();
    }
    let steady_ns = start.elapsed().as_nanos() as f64 / 1e6;

    let start = std::time::Instant::now();
    let mut dst = BytesMut::with_capacity(256);
    for _ in 0..rounds {
        let mut encoder = Encoder::new();
        for step in &C_4 {
            dst.clear();
            encoder.encode(
                step.fields.iter().map(|(n, v)| FieldRef::new(n.as_bytes(), v.as_bytes())),
                &mut dst,
            );
        }
    }
    let encode_ns = start.elapsed().as_nanos() as f64 / (rounds * blocks.len()) as f64;
    eprintln!(
        "C.4 decode {decode_ns:.0} ns/block (fresh decoder per 3 blocks), \
         C.4.3 again on a warm table {steady_ns:.0} ns/block, \
         C.4 encode {encode_ns:.0} ns/block ({fields} fields)"
    );
}
