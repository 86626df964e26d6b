//! Decodes the header blocks a peer sends (RFC 7541 sections 3 and 6) into fields, with
//! the dynamic table size rules of section 4.2 and the caller's header list limit.

use bytes::{Bytes, BytesMut};

use super::dynamic_table::{copy_together, DynamicTable};
use super::{huffman, integer, static_table, DecodeError, Decoded, Field};

/// The unused room of the Huffman buffer kept from one block to the next; more is let
/// go (the fields of the block that reserved it still hold their part).
const KEPT_HUFFMAN_CAPACITY: usize = 4096;

/// The decoding side of one connection: the peer's encoder writes into the dynamic table
/// this mirrors.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// Our SETTINGS_HEADER_TABLE_SIZE, as the peer acknowledged it: no size update may
    /// exceed it.
    max_table_size: usize,
    /// Set when our limit went below the table's size: the next block must start with a
    /// size update at or below this (section 4.2).
    required_update: Option<usize>,
    /// The Huffman-coded strings of the block being decoded, each split off when done.
    huffman_buf: BytesMut,
}

/// The representation a field takes (section 6.2): what happens to the table and
/// whether the field is sensitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Literal {
    /// 6.2.1: added to the dynamic table.
    IncrementalIndexing,
    /// 6.2.2.
    WithoutIndexing,
    /// 6.2.3: no hop may add it to a table.
    NeverIndexed,
}

impl Decoder {
    /// A decoder whose limit and initial table size are `max_table_size`.
    ///
    /// The peer encodes with a 4096-byte table until it acknowledges our SETTINGS (RFC
    /// 9113 section 6.5.2), so a connection that advertises another value starts with
    /// [`DEFAULT_TABLE_SIZE`](super::DEFAULT_TABLE_SIZE) and calls
    /// [`set_max_table_size`](Decoder::set_max_table_size) when the ACK arrives.
    pub fn new(max_table_size: usize) -> Decoder {
        Decoder {
            table: DynamicTable::new(max_table_size),
            max_table_size,
            required_update: None,
            huffman_buf: BytesMut::new(),
        }
    }

    /// Applies a SETTINGS_HEADER_TABLE_SIZE of ours that the peer has acknowledged.
    ///
    /// Size updates above it are refused from now on. If it is below the size the peer's
    /// encoder is using, the next block must start with a size update at or below it
    /// (section 4.2); several changes before that block require the smallest of them.
    /// A new limit at or above the size in use asks nothing of the peer: its table
    /// already fits.
    pub fn set_max_table_size(&mut self, max_table_size: usize) {
        self.max_table_size = max_table_size;
        if max_table_size < self.table.max_size_bytes() {
            let bound =
                self.required_update.map_or(max_table_size, |bound| bound.min(max_table_size));
            self.required_update = Some(bound);
        }
    }

    /// Our limit on the table size.
    pub fn max_table_size(&self) -> usize {
        self.max_table_size
    }

    /// The bytes the dynamic table holds (section 4.1).
    pub fn table_size(&self) -> usize {
        self.table.size_bytes()
    }

    #[cfg(test)]
    pub(crate) fn table(&self) -> &DynamicTable {
        &self.table
    }

    /// Decodes one complete header block (the fragments of a HEADERS or PUSH_PROMISE
    /// and its CONTINUATION frames, joined) and hands each field to `out`, in order.
    ///
    /// The whole block is always decoded, so the dynamic table stays in step with the
    /// peer. Once the header list size (RFC 9113 section 6.5.2) exceeds
    /// `max_list_size`, fields stop being handed out and [`Decoded::over_limit`] says
    /// so. An error leaves the table out of step: the connection must end with
    /// COMPRESSION_ERROR.
    pub fn decode(
        &mut self,
        block: &Bytes,
        max_list_size: usize,
        mut out: impl FnMut(Field),
    ) -> Result<Decoded, DecodeError> {
        let mut reader = BlockReader { block, position: 0 };
        let mut size_updates = 0_u8;
        let mut field_seen = false;
        let mut list_size = 0_usize;
        let mut over_limit = false;
        while let Some(first) = reader.peek() {
            if first & 0xe0 == 0x20 {
                // Section 6.3, dynamic table size update: 001xxxxx.
                if field_seen {
                    // Section 4.2: updates come at the start of a block.
                    return Err(DecodeError::SizeUpdateAfterField);
                }
                let size = reader.integer(5)?;
                self.apply_size_update(size, size_updates)?;
                size_updates = size_updates.saturating_add(1);
                continue;
            }
            if let Some(limit) = self.required_update {
                // Section 4.2: the update owed after our limit went down comes first.
                return Err(DecodeError::SizeUpdateMissing { limit });
            }
            field_seen = true;
            let field = self.decode_field(&mut reader, first)?;
            list_size = list_size.saturating_add(field.size());
            over_limit = list_size > max_list_size;
            if !over_limit {
                out(field);
            }
        }
        if let Some(limit) = self.required_update {
            return Err(DecodeError::SizeUpdateMissing { limit });
        }
        if self.huffman_buf.capacity() > KEPT_HUFFMAN_CAPACITY {
            // Room left from a large block: an idle connection does not keep it.
            self.huffman_buf = BytesMut::new();
        }
        Ok(Decoded { list_size, over_limit })
    }

    /// A dynamic table size update (section 6.3).
    fn apply_size_update(&mut self, size: u32, earlier_updates: u8) -> Result<(), DecodeError> {
        if earlier_updates >= 2 {
            // Section 4.2 asks for at most two: the smallest size since the last block,
            // then the final one.
            return Err(DecodeError::TooManySizeUpdates);
        }
        let size_bytes = usize::try_from(size).unwrap_or(usize::MAX);
        if size_bytes > self.max_table_size {
            // Section 6.3: "MUST be lower than or equal to the limit".
            return Err(DecodeError::SizeUpdateOverLimit { size, limit: self.max_table_size });
        }
        if let Some(limit) = self.required_update.take() {
            if size_bytes > limit {
                // Section 4.2: the first update must reach the smallest limit we set.
                return Err(DecodeError::SizeUpdateMissing { limit });
            }
        }
        self.table.set_max_size(size_bytes);
        Ok(())
    }

    /// One field representation, starting at `first`, a byte that is not a size update.
    fn decode_field(
        &mut self,
        reader: &mut BlockReader<'_>,
        first: u8,
    ) -> Result<Field, DecodeError> {
        if first & 0x80 != 0 {
            // Section 6.1, indexed: 1xxxxxxx.
            let index = reader.integer(7)?;
            let (name, value) = self.field_at(index)?;
            return Ok(Field { name, value, sensitive: false });
        }
        // Section 6.2: 01xxxxxx with a 6-bit index, 0001xxxx and 0000xxxx with 4 bits.
        let (literal, prefix_bits) = if first & 0x40 != 0 {
            (Literal::IncrementalIndexing, 6)
        } else if first & 0x10 != 0 {
            (Literal::NeverIndexed, 4)
        } else {
            (Literal::WithoutIndexing, 4)
        };
        let name_index = reader.integer(prefix_bits)?;
        let name = if name_index == 0 {
            reader.string(&mut self.huffman_buf)?
        } else {
            self.name_at(name_index)?
        };
        let value = reader.string(&mut self.huffman_buf)?;
        Ok(match literal {
            Literal::IncrementalIndexing => {
                let name_is_static = is_static_index(name_index);
                let (name, value) = self.add_entry(&name, &value, name_is_static);
                Field { name, value, sensitive: false }
            }
            Literal::WithoutIndexing => Field { name, value, sensitive: false },
            Literal::NeverIndexed => Field { name, value, sensitive: true },
        })
    }

    /// Adds a field to the dynamic table (section 6.2.1), copied out of the block (see
    /// the module doc for why), and returns the copy to hand out.
    fn add_entry(&mut self, name: &Bytes, value: &Bytes, name_is_static: bool) -> (Bytes, Bytes) {
        let (name, value) = if name_is_static {
            (name.clone(), Bytes::copy_from_slice(value))
        } else {
            copy_together(name, value)
        };
        self.table.add(name.clone(), value.clone());
        (name, value)
    }

    /// The field at `index` of the static or dynamic table (section 2.3.3).
    fn field_at(&self, index: u32) -> Result<(Bytes, Bytes), DecodeError> {
        let position = usize::try_from(index).unwrap_or(usize::MAX);
        if position == 0 {
            // Section 6.1: "The index value of 0 is not used".
            return Err(DecodeError::IndexZero);
        }
        if let Some((name, value)) = static_table::get(position) {
            return Ok((Bytes::from_static(name), Bytes::from_static(value)));
        }
        let entry = position
            .checked_sub(static_table::FIRST_DYNAMIC_INDEX)
            .and_then(|dynamic| self.table.get(dynamic))
            // Section 2.3.3: an index past both tables is a decoding error.
            .ok_or(DecodeError::IndexPastTables { index })?;
        Ok((entry.name.clone(), entry.value.clone()))
    }

    /// The name at `index` (non-zero: zero means a literal name).
    fn name_at(&self, index: u32) -> Result<Bytes, DecodeError> {
        let position = usize::try_from(index).unwrap_or(usize::MAX);
        if let Some((name, _)) = static_table::get(position) {
            return Ok(Bytes::from_static(name));
        }
        position
            .checked_sub(static_table::FIRST_DYNAMIC_INDEX)
            .and_then(|dynamic| self.table.get(dynamic))
            .map(|entry| entry.name.clone())
            .ok_or(DecodeError::IndexPastTables { index })
    }
}

fn is_static_index(index: u32) -> bool {
    usize::try_from(index)
        .is_ok_and(|index| index != 0 && index < static_table::FIRST_DYNAMIC_INDEX)
}

/// The most bytes `coded_len` Huffman-coded bytes decode to: the shortest code has 5 bits.
fn max_huffman_decoded_len(coded_len: usize) -> usize {
    coded_len.saturating_mul(8) / 5
}

/// A position in a block being decoded.
struct BlockReader<'b> {
    block: &'b Bytes,
    position: usize,
}

impl BlockReader<'_> {
    fn peek(&self) -> Option<u8> {
        self.block.get(self.position).copied()
    }

    fn rest(&self) -> &[u8] {
        self.block.get(self.position..).unwrap_or_default()
    }

    /// An integer with a `prefix_bits` prefix in the current byte (section 5.1).
    fn integer(&mut self, prefix_bits: u32) -> Result<u32, DecodeError> {
        let decoded = integer::decode(self.rest(), prefix_bits)?;
        self.position = self.position.saturating_add(decoded.len_bytes);
        Ok(decoded.value)
    }

    /// A string literal (section 5.2): a slice of the block, or its Huffman decoding
    /// split off `huffman_buf`.
    fn string(&mut self, huffman_buf: &mut BytesMut) -> Result<Bytes, DecodeError> {
        let is_huffman = self.peek().is_some_and(|first| first & 0x80 != 0);
        let len = usize::try_from(self.integer(7)?).map_err(|_| DecodeError::StringPastBlock)?;
        let start = self.position;
        let end = start
            .checked_add(len)
            .filter(|&end| end <= self.block.len())
            .ok_or(DecodeError::StringPastBlock)?;
        self.position = end;
        if !is_huffman {
            return Ok(self.block.slice(start..end));
        }
        let coded = self.block.get(start..end).ok_or(DecodeError::StringPastBlock)?;
        if huffman_buf.capacity() < max_huffman_decoded_len(len) {
            // The first Huffman string of the block reserves room for every string left
            // in it, so a block allocates once however many strings it has.
            let rest_len = self.block.len().saturating_sub(start);
            huffman_buf.reserve(max_huffman_decoded_len(rest_len));
        }
        huffman::decode(coded, huffman_buf)?;
        Ok(huffman_buf.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::tests::{decode_block, hex};
    use crate::hpack::DEFAULT_TABLE_SIZE;

    fn field(name: &str, value: &str) -> (String, String, bool) {
        (name.to_owned(), value.to_owned(), false)
    }

    /// RFC 7541 C.2.1: literal with incremental indexing, literal name.
    #[test]
    fn c_2_1_literal_with_indexing() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
        assert_eq!(
            decode_block(&mut decoder, &block),
            Ok(vec![field("custom-key", "custom-header")])
        );
        assert_eq!(decoder.table_size(), 55);
        assert_eq!(decoder.table().get(0).unwrap().name, "custom-key");
    }

    /// RFC 7541 C.2.2: literal without indexing, indexed name.
    #[test]
    fn c_2_2_literal_without_indexing() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        let block = hex("040c 2f73 616d 706c 652f 7061 7468");
        assert_eq!(decode_block(&mut decoder, &block), Ok(vec![field(":path", "/sample/path")]));
        assert_eq!(decoder.table_size(), 0);
    }

    /// RFC 7541 C.2.3: literal never indexed, literal name; the field stays sensitive.
    #[test]
    fn c_2_3_literal_never_indexed() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        let block = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
        let fields = decode_block(&mut decoder, &block).unwrap();
        assert_eq!(fields, [("password".to_owned(), "secret".to_owned(), true)]);
        assert_eq!(decoder.table_size(), 0);
    }

    /// RFC 7541 C.2.4: indexed field.
    #[test]
    fn c_2_4_indexed() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        assert_eq!(decode_block(&mut decoder, &hex("82")), Ok(vec![field(":method", "GET")]));
        assert_eq!(decoder.table_size(), 0);
    }

    #[test]
    fn a_plain_literal_is_a_slice_of_the_block() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        let block = Bytes::from(hex("040c 2f73 616d 706c 652f 7061 7468"));
        let mut fields = Vec::new();
        decoder.decode(&block, usize::MAX, |field| fields.push(field)).unwrap();
        let value_start = fields[0].value.as_ptr() as usize;
        assert_eq!(value_start, block.as_ptr() as usize + 2);
    }

    #[test]
    fn the_huffman_strings_of_a_block_share_one_allocation() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        // C.4.3's literal name and value, without indexing (0x00 instead of 0x40).
        let block = Bytes::from(hex("0088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"));
        let mut fields = Vec::new();
        decoder.decode(&block, usize::MAX, |field| fields.push(field)).unwrap();
        assert_eq!(fields[0].name, "custom-key");
        assert_eq!(fields[0].value, "custom-value");
        let name_end = fields[0].name.as_ptr() as usize + fields[0].name.len();
        assert_eq!(fields[0].value.as_ptr() as usize, name_end);
    }

    #[test]
    fn index_zero_is_refused() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        assert_eq!(decode_block(&mut decoder, &hex("80")), Err(DecodeError::IndexZero));
    }

    #[test]
    fn an_index_past_the_tables_is_refused() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        // 62 with an empty dynamic table: indexed, then as a name of each literal kind.
        let past = DecodeError::IndexPastTables { index: 62 };
        assert_eq!(decode_block(&mut decoder, &hex("be")), Err(past));
        assert_eq!(decode_block(&mut decoder, &hex("7e 00")), Err(past));
        assert_eq!(decode_block(&mut decoder, &hex("0f 2f 00")), Err(past));
        assert_eq!(decode_block(&mut decoder, &hex("1f 2f 00")), Err(past));
        // After one entry, 62 is found and 63 is not.
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        assert!(decode_block(&mut decoder, &hex("4001 6101 62")).is_ok());
        assert_eq!(decode_block(&mut decoder, &hex("be")), Ok(vec![field("a", "b")]));
        assert_eq!(
            decode_block(&mut decoder, &hex("bf")),
            Err(DecodeError::IndexPastTables { index: 63 })
        );
        // The largest index: u32::MAX.
        assert_eq!(
            decode_block(&mut decoder, &hex("ff 80 ff ff ff 0f")),
            Err(DecodeError::IndexPastTables { index: u32::MAX })
        );
    }

    #[test]
    fn integers_that_overflow_or_end_early_are_refused() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        assert_eq!(decode_block(&mut decoder, &hex("ff")), Err(DecodeError::IntegerTruncated));
        assert_eq!(decode_block(&mut decoder, &hex("ff 80")), Err(DecodeError::IntegerTruncated));
        assert_eq!(
            decode_block(&mut decoder, &hex("ff 80 80 80 80 10")),
            Err(DecodeError::IntegerOverflow)
        );
        assert_eq!(
            decode_block(&mut decoder, &hex("ff 80 80 80 80 80 00")),
            Err(DecodeError::IntegerOverflow)
        );
        // A string length that overflows.
        assert_eq!(
            decode_block(&mut decoder, &hex("04 7f ff ff ff ff 7f")),
            Err(DecodeError::IntegerOverflow)
        );
        // A literal with no name length after it, no value length after the name.
        assert_eq!(decode_block(&mut decoder, &hex("40")), Err(DecodeError::IntegerTruncated));
        assert_eq!(decode_block(&mut decoder, &hex("4001 61")), Err(DecodeError::IntegerTruncated));
    }

    #[test]
    fn a_string_longer_than_the_block_is_refused() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        assert_eq!(
            decode_block(&mut decoder, &hex("0403 6162")),
            Err(DecodeError::StringPastBlock)
        );
        assert_eq!(
            decode_block(&mut decoder, &hex("0083 6162")),
            Err(DecodeError::StringPastBlock)
        );
        // A huge length within u32 still refers past the block.
        assert_eq!(
            decode_block(&mut decoder, &hex("04 7f ff ff ff 0f")),
            Err(DecodeError::StringPastBlock)
        );
    }

    #[test]
    fn huffman_faults_are_refused_in_names_and_values() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        // Value "0" then 8 ones of padding (0x07 0xff); as a name the same.
        assert_eq!(
            decode_block(&mut decoder, &hex("0482 07ff")),
            Err(DecodeError::HuffmanPaddingTooLong)
        );
        assert_eq!(
            decode_block(&mut decoder, &hex("0082 07ff 00")),
            Err(DecodeError::HuffmanPaddingTooLong)
        );
        // Padding with a zero bit: '0' then 000.
        assert_eq!(
            decode_block(&mut decoder, &hex("0481 00")),
            Err(DecodeError::HuffmanPaddingNotEos)
        );
        // EOS in the string: 32 ones.
        assert_eq!(
            decode_block(&mut decoder, &hex("0484 ffff ffff")),
            Err(DecodeError::HuffmanEos)
        );
    }

    #[test]
    fn an_empty_block_decodes_to_nothing() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        let decoded = decoder.decode(&Bytes::new(), 0, |_| panic!("no field")).unwrap();
        assert_eq!(decoded, Decoded { list_size: 0, over_limit: false });
    }

    #[test]
    fn a_size_update_within_the_limit_resizes_the_table() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        assert!(decode_block(&mut decoder, &hex("4001 6101 62 4001 6301 64")).is_ok());
        assert_eq!(decoder.table_size(), 68);
        // Size 34: the older entry is evicted (section 4.3); then 0 empties the table.
        assert_eq!(decode_block(&mut decoder, &hex("3f03 be")), Ok(vec![field("c", "d")]));
        assert_eq!(decoder.table_size(), 34);
        assert_eq!(decode_block(&mut decoder, &hex("20")), Ok(vec![]));
        assert_eq!(decoder.table_size(), 0);
        // Back up to the limit, 4096 (3f e1 1f).
        assert_eq!(
            decode_block(&mut decoder, &hex("3fe11f 82")),
            Ok(vec![field(":method", "GET")])
        );
        assert_eq!(decoder.table().max_size_bytes(), 4096);
    }

    #[test]
    fn a_size_update_above_the_limit_is_refused() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        // 4097 = 31 + 4066: 3f e2 1f.
        assert_eq!(
            decode_block(&mut decoder, &hex("3fe21f")),
            Err(DecodeError::SizeUpdateOverLimit { size: 4097, limit: 4096 })
        );
    }

    #[test]
    fn a_size_update_after_a_field_is_refused() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        assert_eq!(
            decode_block(&mut decoder, &hex("82 20")),
            Err(DecodeError::SizeUpdateAfterField)
        );
    }

    #[test]
    fn two_size_updates_are_allowed_and_a_third_is_not() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        assert_eq!(
            decode_block(&mut decoder, &hex("20 3f e1 1f 82")),
            Ok(vec![field(":method", "GET")])
        );
        assert_eq!(
            decode_block(&mut decoder, &hex("20 20 20")),
            Err(DecodeError::TooManySizeUpdates)
        );
    }

    #[test]
    fn after_our_limit_goes_down_the_next_block_must_start_with_an_update() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        decoder.set_max_table_size(256);
        let missing = DecodeError::SizeUpdateMissing { limit: 256 };
        assert_eq!(decode_block(&mut decoder.clone_for_test(), &hex("82")), Err(missing));
        assert_eq!(decode_block(&mut decoder.clone_for_test(), &hex("")), Err(missing));
        // An update above the new limit is over the limit.
        assert_eq!(
            decode_block(&mut decoder.clone_for_test(), &hex("3fe11f 82")),
            Err(DecodeError::SizeUpdateOverLimit { size: 4096, limit: 256 })
        );
        // 256 = 31 + 225: 3f e1 01.
        assert_eq!(
            decode_block(&mut decoder, &hex("3fe101 82")),
            Ok(vec![field(":method", "GET")])
        );
        // The requirement is met: later blocks need no update.
        assert_eq!(decode_block(&mut decoder, &hex("82")), Ok(vec![field(":method", "GET")]));
    }

    #[test]
    fn down_then_up_before_a_block_requires_the_smallest_first() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        decoder.set_max_table_size(100);
        decoder.set_max_table_size(4096);
        let missing = DecodeError::SizeUpdateMissing { limit: 100 };
        assert_eq!(decode_block(&mut decoder.clone_for_test(), &hex("82")), Err(missing));
        assert_eq!(decode_block(&mut decoder.clone_for_test(), &hex("3fe11f 82")), Err(missing));
        // 100 = 31 + 69 (3f 45), then 4096.
        assert_eq!(
            decode_block(&mut decoder, &hex("3f45 3fe11f 82")),
            Ok(vec![field(":method", "GET")])
        );
        assert_eq!(decoder.table().max_size_bytes(), 4096);
    }

    #[test]
    fn a_limit_still_above_the_table_size_asks_for_no_update() {
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        // The peer chose 100; our limit drops to 1000, above it.
        assert_eq!(decode_block(&mut decoder, &hex("3f45")), Ok(vec![]));
        decoder.set_max_table_size(1000);
        assert_eq!(decode_block(&mut decoder, &hex("82")), Ok(vec![field(":method", "GET")]));
        // But sizes above the new limit are refused.
        assert_eq!(
            decode_block(&mut decoder, &hex("3fe11f")),
            Err(DecodeError::SizeUpdateOverLimit { size: 4096, limit: 1000 })
        );
    }

    impl Decoder {
        fn clone_for_test(&self) -> Decoder {
            Decoder {
                table: self.table.clone(),
                max_table_size: self.max_table_size,
                required_update: self.required_update,
                huffman_buf: BytesMut::new(),
            }
        }
    }
}
