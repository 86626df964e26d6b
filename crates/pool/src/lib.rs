//! Keeps upstream connections and hands them out again.
//!
//! One [`Pool`] serves one backend (one address): every connection in it is
//! interchangeable. It holds two kinds of connection under one bound
//! (`max_connections`) and one set of counters ([`PoolStats`]): exclusive ones, which
//! carry one request at a time and wait idle in between (the [`Pool`] itself), and
//! shared ones, which carry up to their capacity of requests at once
//! ([`SharedPool`], made with [`Pool::shared`]).
//!
//! The pool knows connections, counts and time. It does not know HTTP, routes or
//! config files: callers pass a [`PoolConfig`] and values that implement [`Poolable`]
//! or [`Shareable`], open connections themselves, and decide whether a connection is
//! fit to return (the response was fully read, both sides allow keep-alive).
#![deny(missing_docs)]

mod bound;
mod budget;
mod idle;
mod limits;
mod queue;
mod shared;
mod stats;

pub use budget::IdleBudget;
pub use idle::{ClosedHook, ClosedWhileIdle, OriginLimits, Pool, Pooled};
pub use limits::PoolConfig;
pub use queue::{Checkout, ConnectPermit, Exhausted, Priority, RESERVE_PERCENT};
pub use shared::{
    Claim, ClaimError, Found, Opening, Seek, Shareable, SharedPool, SharedSnapshot,
    LOWERED_CAPACITY_MEMORY,
};
pub use stats::{CloseReason, PoolStats, PoolStatsSnapshot};

/// A connection the pool can hold and hand out to one request at a time.
pub trait Poolable: Send + 'static {
    /// Whether the connection can still carry a request: the peer has not closed it
    /// and it has not failed while idle (for example by sending unexpected bytes).
    fn is_open(&self) -> bool;
}
