//! TLS on both sides of holdfast: the listeners' server side (`server`: policy,
//! resumption, certificates by SNI, the handshake; `certs`: reading and checking
//! certificate files; `failures`: what the handshakes count), the origins' client side
//! (`origin`: verification, SNI, client certificates, resumption), and the
//! certificates that change while holdfast runs (`store`).
//!
//! The session itself runs inside `net::Stream` once the handshake is done, so nothing
//! above the stream knows whether bytes were encrypted.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

pub mod certs;
pub mod failures;
pub mod origin;
pub mod server;
pub mod store;

#[cfg(test)]
pub mod testing;
