//! TLS on both sides of holdfast: certificates that change while it runs (`store`).
//! The session itself runs inside `net::Stream`, so nothing above the stream knows
//! whether bytes were encrypted.

pub mod store;
