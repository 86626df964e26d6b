//! What an operator runs: the command line (`cli`: parsing, quick mode, `check`,
//! `reload`, and starting the proxy), `holdfast demo` (`demo`), `holdfast stats`
//! (`stats`, the live table), `holdfast health` (`health`), and the client with which
//! `stats`, `reload` and `health` reach a running holdfast's admin listener
//! (`admin_client`).
//!
//! Commands start and ask the instance; the core never calls back into them, so no
//! module outside this folder imports `cmd`, tests aside (`tests/it/layout.rs` checks it).

pub mod cli;

mod admin_client;
mod demo;
mod health;
mod stats;

// Tests that drive a running holdfast from the operator's side (acme's reload tests)
// reach its admin listener with the commands' client.
#[cfg(test)]
pub(crate) use admin_client::AdminClient;
