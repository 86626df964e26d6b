//! Encodes the header blocks we send (RFC 7541 sections 3 and 6): each field's
//! representation chosen by the policy in the module doc, table size changes signalled
//! at the start of the next block (section 4.2), and the dynamic table searched through
//! a small hash index rather than a scan.

use bytes::{BufMut, BytesMut};

use super::dynamic_table::{copy_together, entry_size, DynamicTable};
use super::{huffman, integer, static_table, FieldRef, DEFAULT_TABLE_SIZE};

/// The most dynamic table the encoder uses, whatever the peer allows: a peer that
/// advertises a larger SETTINGS_HEADER_TABLE_SIZE gets a 4096-byte table (the RFC 9113
/// default), so each connection's encoder holds a bounded amount of memory.
pub const ENCODER_MAX_TABLE_SIZE: usize = 4096;

/// The encoding side of one connection.
#[derive(Debug)]
pub struct Encoder {
    table: DynamicTable,
    index: TableIndex,
    /// The peer's latest SETTINGS_HEADER_TABLE_SIZE.
    peer_max_table_size: usize,
    /// The smallest table size since the last block, when a size update is owed
    /// (section 4.2).
    pending_update: Option<usize>,
}

/// The literal representations of section 6.2: the pattern of the first byte, and the
/// bits of the name index's prefix.
#[derive(Debug, Clone, Copy)]
struct Literal {
    flags: u8,
    prefix_bits: u32,
}

/// 6.2.1: 01xxxxxx.
const WITH_INCREMENTAL_INDEXING: Literal = Literal { flags: 0x40, prefix_bits: 6 };
/// 6.2.2: 0000xxxx.
const WITHOUT_INDEXING: Literal = Literal { flags: 0x00, prefix_bits: 4 };
/// 6.2.3: 0001xxxx.
const NEVER_INDEXED: Literal = Literal { flags: 0x10, prefix_bits: 4 };

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder for a peer whose SETTINGS_HEADER_TABLE_SIZE is still the default, 4096.
    pub fn new() -> Encoder {
        Encoder {
            table: DynamicTable::new(DEFAULT_TABLE_SIZE.min(ENCODER_MAX_TABLE_SIZE)),
            index: TableIndex::new(),
            peer_max_table_size: DEFAULT_TABLE_SIZE,
            pending_update: None,
        }
    }

    /// Applies the peer's SETTINGS_HEADER_TABLE_SIZE, as received.
    ///
    /// The encoder uses the smaller of it and [`ENCODER_MAX_TABLE_SIZE`], evicting at
    /// once if that is less than before, and starts its next block with the size
    /// update(s) section 4.2 asks for: the smallest size it took since the last block,
    /// then the current size if that is larger. A setting lower than the peer's previous
    /// one is answered with an update even when the size the encoder uses is unchanged,
    /// for decoders that expect one after any reduction.
    pub fn set_max_table_size(&mut self, peer_setting: u32) {
        let peer_max = usize::try_from(peer_setting).unwrap_or(usize::MAX);
        let size = peer_max.min(ENCODER_MAX_TABLE_SIZE);
        let went_down = peer_max < self.peer_max_table_size;
        self.peer_max_table_size = peer_max;
        if size != self.table.max_size_bytes() || went_down {
            self.table.set_max_size(size);
            self.pending_update =
                Some(self.pending_update.map_or(size, |smallest| smallest.min(size)));
        }
    }

    /// The bytes the dynamic table holds (section 4.1).
    pub fn table_size(&self) -> usize {
        self.table.size_bytes()
    }

    #[cfg(test)]
    pub(crate) fn table(&self) -> &DynamicTable {
        &self.table
    }

    /// Appends one complete header block holding `fields`, in order, to `dst`.
    pub fn encode<'f>(
        &mut self,
        fields: impl IntoIterator<Item = FieldRef<'f>>,
        dst: &mut BytesMut,
    ) {
        self.write_size_updates(dst);
        for field in fields {
            self.encode_field(field, dst);
        }
    }

    /// The size updates owed since the last block (section 4.2), at the block's start.
    fn write_size_updates(&mut self, dst: &mut BytesMut) {
        let Some(smallest) = self.pending_update.take() else { return };
        let current = self.table.max_size_bytes();
        if smallest < current {
            integer::encode(smallest, 5, 0x20, dst);
        }
        integer::encode(current, 5, 0x20, dst);
    }

    fn encode_field(&mut self, field: FieldRef<'_>, dst: &mut BytesMut) {
        let FieldRef { name, value, sensitive } = field;
        let name_hash = hash_bytes(HASH_SEED, name);
        if sensitive {
            // Section 6.2.3: a sensitive field is never indexed, here or by a later hop.
            self.write_literal(NEVER_INDEXED, name, name_hash, value, dst);
            return;
        }
        let field_hash = hash_bytes(name_hash, value);
        let indexed = static_table::field_index(name, value)
            .or_else(|| self.index.find_field(&self.table, field_hash, name, value));
        if let Some(index) = indexed {
            // Section 6.1.
            integer::encode(index, 7, 0x80, dst);
            return;
        }
        if should_index(name, value, self.table.max_size_bytes()) {
            self.write_literal(WITH_INCREMENTAL_INDEXING, name, name_hash, value, dst);
            let (name_bytes, value_bytes) = copy_together(name, value);
            if self.table.add(name_bytes, value_bytes) {
                self.index.insert(self.table.added_count(), name_hash, field_hash);
            }
        } else {
            self.write_literal(WITHOUT_INDEXING, name, name_hash, value, dst);
        }
    }

    /// A literal field (section 6.2): the name by index when a table has it.
    fn write_literal(
        &self,
        literal: Literal,
        name: &[u8],
        name_hash: u64,
        value: &[u8],
        dst: &mut BytesMut,
    ) {
        let name_index = static_table::name_index(name)
            .or_else(|| self.index.find_name(&self.table, name_hash, name));
        match name_index {
            Some(index) => integer::encode(index, literal.prefix_bits, literal.flags, dst),
            None => {
                integer::encode(0, literal.prefix_bits, literal.flags, dst);
                write_string(name, dst);
            }
        }
        write_string(value, dst);
    }
}

/// Whether a field found in no table is added to the dynamic table (steps 3 and 4 of
/// the policy in the module doc).
fn should_index(name: &[u8], value: &[u8], table_max_size: usize) -> bool {
    let largest_indexed = (table_max_size / 4).saturating_mul(3);
    if entry_size(name.len(), value.len()) > largest_indexed {
        return false;
    }
    match name {
        // Secret: the table of an origin connection is shared by many clients.
        b"authorization" | b"proxy-authorization" | b"cookie" | b"set-cookie" => false,
        // Usually unique to one message.
        b"content-length" | b"content-range" | b"etag" | b"last-modified" | b"age"
        | b"if-none-match" | b"if-modified-since" => false,
        b":path" => !value.contains(&b'?'),
        _ => true,
    }
}

/// A string literal (section 5.2), Huffman-coded when that is shorter.
fn write_string(string: &[u8], dst: &mut BytesMut) {
    let huffman_len = huffman::encoded_len(string);
    if huffman_len < string.len() {
        integer::encode(huffman_len, 7, 0x80, dst);
        huffman::encode(string, dst);
    } else {
        integer::encode(string.len(), 7, 0x00, dst);
        dst.put_slice(string);
    }
}

/// Slots in each array of [`TableIndex`]: a 4096-byte table holds at most 128 entries.
const INDEX_SLOTS: usize = 256;
const HASH_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// The encoder's way into its dynamic table: for a hash of a name, and of a name and
/// value, the number of the latest entry with that hash (0: none). An entry's number
/// is its place in the order of additions, which newer entries do not change; its
/// position in the table is the count of additions since. A slot that two entries
/// share keeps the later one, and a slot whose entry was evicted leads nowhere: every
/// hit is checked against the entry's bytes, so a collision costs a missed match,
/// never a wrong one.
#[derive(Debug)]
struct TableIndex {
    fields: Box<[u32; INDEX_SLOTS]>,
    names: Box<[u32; INDEX_SLOTS]>,
}

impl TableIndex {
    fn new() -> TableIndex {
        TableIndex { fields: Box::new([0; INDEX_SLOTS]), names: Box::new([0; INDEX_SLOTS]) }
    }

    /// Records the entry just added as number `number`.
    fn insert(&mut self, number: u32, name_hash: u64, field_hash: u64) {
        if let Some(slot) = self.names.get_mut(slot_of(name_hash)) {
            *slot = number;
        }
        if let Some(slot) = self.fields.get_mut(slot_of(field_hash)) {
            *slot = number;
        }
    }

    /// The index (62 and up) of an entry equal to `name` and `value`.
    fn find_field(
        &self,
        table: &DynamicTable,
        field_hash: u64,
        name: &[u8],
        value: &[u8],
    ) -> Option<usize> {
        let number = *self.fields.get(slot_of(field_hash))?;
        let position = position_of(table, number)?;
        let entry = table.get(position)?;
        (entry.name == name && entry.value == value).then(|| dynamic_index(position))?
    }

    /// The index (62 and up) of an entry whose name is `name`.
    fn find_name(&self, table: &DynamicTable, name_hash: u64, name: &[u8]) -> Option<usize> {
        let number = *self.names.get(slot_of(name_hash))?;
        let position = position_of(table, number)?;
        let entry = table.get(position)?;
        (entry.name == name).then(|| dynamic_index(position))?
    }
}

/// Where entry `number` sits now (0 = newest), if it was ever added.
fn position_of(table: &DynamicTable, number: u32) -> Option<usize> {
    if number == 0 {
        return None;
    }
    usize::try_from(table.added_count().wrapping_sub(number)).ok()
}

fn dynamic_index(position: usize) -> Option<usize> {
    position.checked_add(static_table::FIRST_DYNAMIC_INDEX)
}

fn slot_of(hash: u64) -> usize {
    // The top bits: the best mixed by the multiplication in `mix`.
    usize::try_from(hash.wrapping_shr(56)).unwrap_or(0)
}

/// A fast non-cryptographic hash of `bytes`, eight at a time, continuing from `seed`.
/// Collisions cost only a missed match (see [`TableIndex`]), and a peer does not see
/// the encoder's index, so it need not resist chosen inputs.
fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    let mut hash = seed;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        hash = mix(hash, u64::from_le_bytes(<[u8; 8]>::try_from(word).unwrap_or_default()));
    }
    let mut tail = [0_u8; 8];
    for (to, from) in tail.iter_mut().zip(words.remainder()) {
        *to = *from;
    }
    hash = mix(hash, u64::from_le_bytes(tail));
    mix(hash, u64::try_from(bytes.len()).unwrap_or(u64::MAX))
}

fn mix(hash: u64, word: u64) -> u64 {
    (hash.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::tests::hex;

    fn encode(encoder: &mut Encoder, fields: &[(&str, &str, bool)]) -> Vec<u8> {
        let mut dst = BytesMut::new();
        let refs = fields.iter().map(|&(name, value, sensitive)| FieldRef {
            name: name.as_bytes(),
            value: value.as_bytes(),
            sensitive,
        });
        encoder.encode(refs, &mut dst);
        dst.to_vec()
    }

    #[test]
    fn static_matches_are_indexed() {
        let mut encoder = Encoder::new();
        let fields = [(":method", "GET", false), (":status", "500", false), (":path", "/", false)];
        assert_eq!(encode(&mut encoder, &fields), [0x82, 0x8e, 0x84]);
        assert_eq!(encoder.table_size(), 0);
    }

    #[test]
    fn a_new_field_is_added_then_indexed() {
        let mut encoder = Encoder::new();
        // 'custom-key' and 'custom-value' Huffman-coded, as in RFC 7541 C.4.3.
        let first = encode(&mut encoder, &[("custom-key", "custom-value", false)]);
        assert_eq!(first, hex("4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"));
        assert_eq!(encoder.table_size(), 54);
        assert_eq!(encode(&mut encoder, &[("custom-key", "custom-value", false)]), [0xbe]);
        // The same name with another value: name by index 62.
        assert_eq!(encode(&mut encoder, &[("custom-key", "a", false)]), hex("7e 01 61"));
        assert_eq!(encode(&mut encoder, &[("custom-key", "custom-value", false)]), [0xbf]);
    }

    #[test]
    fn sensitive_fields_are_never_indexed_with_the_name_by_index() {
        let mut encoder = Encoder::new();
        // authorization is static index 23: 0001 1111 then 23 - 15 = 8.
        let block = encode(&mut encoder, &[("authorization", "a", true)]);
        assert_eq!(block, hex("1f08 0161"));
        // A literal name when no table has it; the value stays out of the table even
        // when a table holds the whole field.
        assert_eq!(encode(&mut encoder, &[("x", "y", true)]), hex("10 01 78 01 79"));
        // "GET" Huffman-coded takes 21 bits, 3 bytes: no shorter, so it goes raw.
        assert_eq!(encode(&mut encoder, &[(":method", "GET", true)]), hex("1203 4745 54"));
        assert_eq!(encoder.table_size(), 0);
    }

    #[test]
    fn secret_and_unique_values_go_without_indexing() {
        let mut encoder = Encoder::new();
        for name in ["authorization", "cookie", "set-cookie", "content-length", "etag", "age"] {
            let block = encode(&mut encoder, &[(name, "1", false)]);
            let index = static_table::name_index(name.as_bytes()).unwrap();
            assert_eq!(block[..2], [0x0f, (index - 15) as u8], "{name}");
        }
        assert_eq!(encode(&mut encoder, &[(":path", "/a?b", false)])[0], 0x04);
        assert_eq!(encoder.table_size(), 0);
        assert_eq!(encode(&mut encoder, &[(":path", "/ab", false)])[0], 0x44);
        assert_eq!(encoder.table_size(), 32 + 5 + 3);
    }

    #[test]
    fn a_field_over_three_quarters_of_the_table_is_not_added() {
        let mut encoder = Encoder::new();
        let value = "v".repeat(3072 - 32 - 1);
        encode(&mut encoder, &[("x", &value, false)]);
        assert_eq!(encoder.table_size(), 3072);
        let value = "v".repeat(3072 - 32);
        let block = encode(&mut encoder, &[("x", &value, false)]);
        // Without indexing, name by index 62 (0f 2f).
        assert_eq!(block[..2], [0x0f, 0x2f]);
        assert_eq!(encoder.table_size(), 3072);
    }

    #[test]
    fn a_smaller_peer_setting_is_signalled_and_evicts_at_once() {
        let mut encoder = Encoder::new();
        encode(&mut encoder, &[("custom-key", "custom-value", false)]);
        encoder.set_max_table_size(50);
        assert_eq!(encoder.table_size(), 0);
        // 50 = 31 + 19: 3f 13.
        assert_eq!(encode(&mut encoder, &[(":method", "GET", false)]), hex("3f13 82"));
        // Owed once only.
        assert_eq!(encode(&mut encoder, &[(":method", "GET", false)]), hex("82"));
    }

    #[test]
    fn down_then_up_between_blocks_sends_the_smallest_then_the_final_size() {
        let mut encoder = Encoder::new();
        encoder.set_max_table_size(100);
        encoder.set_max_table_size(0);
        encoder.set_max_table_size(65_536);
        // 0, then 4096 (the encoder's cap).
        assert_eq!(encode(&mut encoder, &[]), hex("20 3fe11f"));
        assert_eq!(encoder.table().max_size_bytes(), ENCODER_MAX_TABLE_SIZE);
    }

    #[test]
    fn a_larger_peer_setting_changes_nothing_past_the_cap() {
        let mut encoder = Encoder::new();
        encoder.set_max_table_size(1 << 20);
        assert_eq!(encode(&mut encoder, &[]), hex(""));
        // Going down from 1 MiB to 8 KiB leaves the encoder at 4096 but is answered.
        encoder.set_max_table_size(8192);
        assert_eq!(encode(&mut encoder, &[]), hex("3fe11f"));
    }

    #[test]
    fn the_index_finds_entries_as_they_move_and_forgets_evicted_ones() {
        let mut encoder = Encoder::new();
        for n in 0..200 {
            encode(&mut encoder, &[(&format!("name-{n}"), "v", false)]);
        }
        // Entries of 32 + 7 or 8 bytes: the newest ~100 fit in 4096.
        let table = encoder.table();
        assert!(table.len() > 90);
        let mut found = 0;
        for position in 0..table.len() {
            let entry = table.get(position).unwrap();
            let name_hash = hash_bytes(HASH_SEED, &entry.name);
            let field_hash = hash_bytes(name_hash, b"v");
            // None: a slot shared with a later entry, a missed match, never a wrong one.
            if let Some(index) = encoder.index.find_field(table, field_hash, &entry.name, b"v") {
                assert_eq!(index, 62 + position);
                found += 1;
            }
            let by_name = encoder.index.find_name(table, name_hash, &entry.name);
            assert!(by_name.is_none() || by_name == Some(62 + position));
        }
        assert!(found * 10 >= table.len() * 7, "found {found} of {}", table.len());
        // The oldest names were evicted: their slots lead nowhere.
        let name_hash = hash_bytes(HASH_SEED, b"name-0");
        let field_hash = hash_bytes(name_hash, b"v");
        assert_eq!(encoder.index.find_field(table, field_hash, b"name-0", b"v"), None);
        assert_eq!(encoder.index.find_name(table, name_hash, b"name-0"), None);
    }
}
