//! HPACK (RFC 7541): header blocks decoded into fields and fields encoded into blocks,
//! with the static and dynamic tables and Huffman coding. Bytes only: HTTP semantics
//! (pseudo-headers, uppercase names, connection-specific fields) are the request
//! model's job above it.
//!
//! - [`Decoder`] reads the blocks a peer sends, with every check a receiver must make;
//!   any fault is a [`DecodeError`], a connection error of type COMPRESSION_ERROR.
//! - [`Encoder`] writes the blocks we send.
//! - `integer` and `huffman` are the primitive types of section 5; `static_table` and
//!   `dynamic_table` the tables of section 2.3.
//!
//! # Decoding
//! A literal that is not Huffman-coded comes out as a slice of the block (no copy). The
//! Huffman-coded strings of one block are decoded into one buffer, reserved once per
//! block, and split off. A field from the static table refers to static bytes, one from
//! the dynamic table is a reference-counted clone of the entry.
//!
//! Entries the decoder adds to its dynamic table are copied out of the block into one
//! allocation each (name and value together), rather than kept as slices of it: a slice
//! would keep the whole block's buffer (and the read buffer it came from) alive for as
//! long as the entry stays in the table, so a peer could make a 4 KiB table hold many
//! megabytes. The copy is bounded by the table size, and made once per added entry.
//!
//! # Encoding: which representation each field gets
//! In order, the first that applies:
//! 1. `sensitive` fields: literal never indexed (section 6.2.3), with the name's index
//!    when a table has it. A never-indexed field we decoded is forwarded never indexed,
//!    as section 6.2.3 requires of an intermediary.
//! 2. A field equal to an entry of the static or dynamic table: indexed (6.1).
//! 3. Literal without indexing (6.2.2), the name by index when a table has it, for:
//!    - values that are secret: `authorization`, `proxy-authorization`, `cookie`,
//!      `set-cookie`. On an origin connection the table is shared by every client whose
//!      requests it carries; an indexed secret would let one client probe for another's
//!      by the size of what it sends (section 7.1, the CRIME family). The cost is that
//!      cookies are sent whole on every request;
//!    - values that are usually unique to one message, and would only push useful
//!      entries out: `content-length`, `content-range`, `etag`, `last-modified`, `age`,
//!      `if-none-match`, `if-modified-since`, and a `:path` with a query (`?`);
//!    - fields larger than 3/4 of the table, which would evict nearly all of it.
//! 4. Otherwise: literal with incremental indexing (6.2.1), added to the table.
//!
//! A string is Huffman-coded when that is shorter than the raw bytes.
//!
//! The encoder uses at most [`ENCODER_MAX_TABLE_SIZE`] bytes of table, whatever the peer
//! allows, so each connection's encoder holds a bounded amount of memory.

mod decoder;
mod dynamic_table;
mod encoder;
mod huffman;
mod integer;
mod static_table;

#[cfg(test)]
mod tests;

use bytes::Bytes;

pub use decoder::Decoder;
pub use encoder::{Encoder, ENCODER_MAX_TABLE_SIZE};
use huffman::HuffmanError;
use integer::IntegerError;

use crate::error::ErrorCode;

/// The initial SETTINGS_HEADER_TABLE_SIZE of both peers (RFC 9113 section 6.5.2).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// A header or trailer field, as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The name, as it came (HPACK does not check case or characters).
    pub name: Bytes,
    /// The value, as it came.
    pub value: Bytes,
    /// The field came, or must go, as a literal never indexed (RFC 7541 sections 6.2.3
    /// and 7.1.3): no hop may add it to a table.
    pub sensitive: bool,
}

impl Field {
    /// The size RFC 7541 section 4.1 and RFC 9113 section 6.5.2 (header list size)
    /// give a field: name and value lengths plus 32.
    pub fn size(&self) -> usize {
        dynamic_table::entry_size(self.name.len(), self.value.len())
    }

    /// The field as the encoder takes it.
    pub fn as_field_ref(&self) -> FieldRef<'_> {
        FieldRef { name: &self.name, value: &self.value, sensitive: self.sensitive }
    }
}

/// A field to encode, borrowed from wherever the caller keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldRef<'a> {
    /// The name, lowercase as HTTP/2 requires (the encoder does not check).
    pub name: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// Send as a literal never indexed (RFC 7541 section 6.2.3).
    pub sensitive: bool,
}

impl<'a> FieldRef<'a> {
    /// A field that is not sensitive.
    pub fn new(name: &'a [u8], value: &'a [u8]) -> FieldRef<'a> {
        FieldRef { name, value, sensitive: false }
    }
}

impl<'a> From<&'a Field> for FieldRef<'a> {
    fn from(field: &'a Field) -> FieldRef<'a> {
        field.as_field_ref()
    }
}

/// What decoding a whole block gave, besides its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The header list size (RFC 9113 section 6.5.2) of every field in the block,
    /// including those past the limit.
    pub list_size: usize,
    /// The list exceeded the caller's limit: fields stopped being handed out at the one
    /// that crossed it, though the block was decoded to its end to keep the dynamic
    /// table in step. The engine answers with a stream error (or a 431), not a
    /// connection error.
    pub over_limit: bool,
}

/// Why a header block was refused. Every one is a connection error of type
/// COMPRESSION_ERROR (RFC 9113 section 4.3): the dynamic table can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// An integer (section 5.1) is cut off by the end of the block.
    IntegerTruncated,
    /// An integer (section 5.1) exceeds a `u32` or has more continuation bytes than a
    /// `u32` needs.
    IntegerOverflow,
    /// A string's length (section 5.2) runs past the end of the block.
    StringPastBlock,
    /// Huffman padding longer than 7 bits (section 5.2).
    HuffmanPaddingTooLong,
    /// Huffman padding that is not the most significant bits of EOS (section 5.2).
    HuffmanPaddingNotEos,
    /// The EOS symbol inside a Huffman-coded string (section 5.2).
    HuffmanEos,
    /// Index 0 (section 6.1).
    IndexZero,
    /// An index past the static and dynamic tables (section 2.3.3).
    IndexPastTables { index: u32 },
    /// A dynamic table size update larger than the limit we set (section 6.3).
    SizeUpdateOverLimit { size: u32, limit: usize },
    /// A dynamic table size update after a field of the block (section 4.2).
    SizeUpdateAfterField,
    /// More than two dynamic table size updates at the start of a block (section 4.2
    /// asks for at most the smallest and the final size).
    TooManySizeUpdates,
    /// After we lowered our SETTINGS_HEADER_TABLE_SIZE below the table's size, the
    /// block does not start with a size update at or below `limit` (section 4.2).
    SizeUpdateMissing { limit: usize },
}

impl DecodeError {
    /// The code that goes in the GOAWAY: always COMPRESSION_ERROR.
    pub fn code(self) -> ErrorCode {
        ErrorCode::CompressionError
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::IntegerTruncated => {
                f.write_str("HPACK integer cut off by the block's end")
            }
            DecodeError::IntegerOverflow => f.write_str("HPACK integer larger than 2^32 - 1"),
            DecodeError::StringPastBlock => {
                f.write_str("HPACK string length runs past the block's end")
            }
            DecodeError::HuffmanPaddingTooLong => f.write_str("Huffman padding longer than 7 bits"),
            DecodeError::HuffmanPaddingNotEos => {
                f.write_str("Huffman padding is not the most significant bits of EOS")
            }
            DecodeError::HuffmanEos => f.write_str("EOS inside a Huffman-coded string"),
            DecodeError::IndexZero => f.write_str("HPACK index 0"),
            DecodeError::IndexPastTables { index } => {
                write!(f, "HPACK index {index} past the static and dynamic tables")
            }
            DecodeError::SizeUpdateOverLimit { size, limit } => {
                write!(f, "dynamic table size update to {size} above our limit {limit}")
            }
            DecodeError::SizeUpdateAfterField => {
                f.write_str("dynamic table size update after a field")
            }
            DecodeError::TooManySizeUpdates => {
                f.write_str("more than two dynamic table size updates in a block")
            }
            DecodeError::SizeUpdateMissing { limit } => write!(
                f,
                "block does not start with a dynamic table size update at or below {limit} \
                 after our limit went down"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<IntegerError> for DecodeError {
    fn from(error: IntegerError) -> DecodeError {
        match error {
            IntegerError::Truncated => DecodeError::IntegerTruncated,
            IntegerError::Overflow => DecodeError::IntegerOverflow,
        }
    }
}

impl From<HuffmanError> for DecodeError {
    fn from(error: HuffmanError) -> DecodeError {
        match error {
            HuffmanError::PaddingTooLong => DecodeError::HuffmanPaddingTooLong,
            HuffmanError::PaddingNotEos => DecodeError::HuffmanPaddingNotEos,
            HuffmanError::Eos => DecodeError::HuffmanEos,
        }
    }
}
