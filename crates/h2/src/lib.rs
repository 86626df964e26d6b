//! HTTP/2 as holdfast speaks it, to clients and to origins: frames (RFC 9113 section 4
//! and 6), HPACK (RFC 7541) and, on top of them, the connection engine. No I/O: the
//! caller reads bytes from its socket into the engine and writes out what the engine
//! produced, so all streams of a connection are served by the connection's own task,
//! with no lock and no task per stream.
//!
//! A package of its own, like the pool: Cargo keeps it free of routing, config and
//! sockets, and its decoders are built with the lints that keep input away from a panic
//! (no indexing, slicing or arithmetic that can overflow outside tests).
//!
//! - [`error`]: the error codes of RFC 9113 section 7, and whether an error ends the
//!   connection or one stream.
//! - [`frame`]: frame headers and payloads, decoded with every check section 4 and 6
//!   ask of a receiver, and encoded.
//! - [`hpack`]: header block decoding and encoding: static and dynamic tables, Huffman.
#![cfg_attr(
    not(test),
    deny(
        clippy::string_slice,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

pub mod conn;
pub mod error;
pub mod frame;
pub mod hpack;
