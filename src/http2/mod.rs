//! HTTP/2 as the proxy path needs it, on holdfast's own engine (`holdfast-h2`, which
//! does framing, HPACK, flow control and the protocol's rules): a client connection's
//! streams ([`session`]; the connection is served in `client::h2`), connections to
//! origins ([`origin`]), the socket under both ([`socket`]), a stream's two halves
//! ([`halves`]) and moving bytes on them within flow control ([`flow`]), the request
//! and response heads read into the message model ([`request`], [`response`]) and
//! written from it ([`encode`]), the preface, and trailers between the two protocols
//! ([`convert`]).
//!
//! Like the rest of the request path, this module handles bytes from clients and
//! origins: the lints below keep indexing and unchecked arithmetic out of it.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

pub mod convert;
pub mod encode;
pub mod fields;
pub mod flow;
pub mod halves;
pub mod origin;
pub mod request;
pub mod response;
pub mod session;
pub mod socket;

/// What an HTTP/2 client sends first (RFC 9113, 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a client's first bytes start the HTTP/2 preface: no HTTP/1.1 method is
/// `PRI`, so three bytes tell.
pub fn starts_preface(data: &[u8]) -> bool {
    data.len() >= 3
        && PREFACE.starts_with(data.get(..data.len().min(PREFACE.len())).unwrap_or_default())
}
