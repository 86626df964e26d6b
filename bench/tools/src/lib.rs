//! Shared pieces of the benchmark tools: `bench-origin` (the origin the proxies front)
//! and `bench-load` (load generators wrk does not cover).
//!
//! The binaries are thin: they parse arguments, build the runtime and print JSON. Everything
//! they run lives here so tests start the same origin and load shapes in-process.
//!
//! ```text
//! bench-load: load::{rate, mixed, hold, burst, handshakes, grpc, steady, slow_read, zero_window}
//!                 -> load::exchange (zero_window: load::h2_frame) -> (proxy) -> origin
//!                  \-> load::tally, histogram (count only, never decide)
//! ```
//!
//! `tls` holds the TLS settings of both: the origin's in TLS mode and the client's of
//! `handshakes`.

pub mod fd_limit;
pub mod histogram;
pub mod load;
pub mod origin;
pub mod runtime;
pub mod tls;
