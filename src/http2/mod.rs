//! HTTP/2: the client connection driver ([`serve`]) and the translation between an
//! HTTP/2 message and the HTTP/1.1 head the rest of the request path works from
//! ([`convert`]). Framing, HPACK and flow control are the `h2` crate's; this module
//! maps streams to exchanges and decides nothing about them.
//!
//! A client stream becomes an HTTP/1.1 request head, parsed by `http1::request` like
//! any other: one set of rules refuses faulty requests, routes them and writes the
//! head an origin gets. The same head becomes an HTTP/2 request again for an HTTP/2
//! origin.
//!
//! Like the rest of the request path, this module handles bytes from clients and
//! origins: the lints below keep indexing and unchecked arithmetic out of it.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

pub mod convert;
pub mod flood;
pub mod flow;
pub mod serve;

/// What an HTTP/2 client sends first (RFC 9113, 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a client's first bytes start the HTTP/2 preface: no HTTP/1.1 method is
/// `PRI`, so three bytes tell.
pub fn starts_preface(data: &[u8]) -> bool {
    data.len() >= 3
        && PREFACE.starts_with(data.get(..data.len().min(PREFACE.len())).unwrap_or_default())
}
