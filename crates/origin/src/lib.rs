//! The origin server that holdfast's demo, its integration tests and the benchmark origin
//! share: an HTTP/1.1 server on a bound listener that counts the TCP connections it
//! accepts and closes, and serves each with hyper, keep-alive on, until the peer closes it
//! (or a kill drops it). Each user adds only its routes: a function that makes the hyper
//! service for each accepted connection.
//!
//! It knows no routes, bodies or per-request counts; those stay with each user. Nothing
//! here locks or allocates per request: the connection counts are plain atomics, touched
//! once when a connection opens and once when it closes.
#![deny(missing_docs)]

mod connections;
mod origin;

pub use connections::Connections;
pub use origin::{bind, bind_loopback, Accepted, ErrorHook, Options, Origin, ACCEPT_ERROR_BACKOFF};
