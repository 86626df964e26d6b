//! Keeps idle upstream connections and hands them out again.
//!
//! One [`Pool`] serves one backend (one address): every connection in it is
//! interchangeable. The pool knows connections, counts and time. It does not know
//! HTTP, routes or config files: callers pass a [`PoolConfig`] and values that
//! implement [`Poolable`], and decide themselves whether a connection is fit to
//! return (the response was fully read, both sides allow keep-alive).
#![deny(missing_docs)]

mod budget;
mod idle;
mod limits;
mod queue;
mod stats;

pub use budget::IdleBudget;
pub use idle::{ClosedHook, ClosedWhileIdle, OriginLimits, Pool, Pooled};
pub use limits::PoolConfig;
pub use queue::{Checkout, ConnectPermit, Exhausted, Priority, RESERVE_PERCENT};
pub use stats::{CloseReason, PoolStats, PoolStatsSnapshot};

/// A connection the pool can hold.
pub trait Poolable: Send + 'static {
    /// Whether the connection can still carry a request: the peer has not closed it
    /// and it has not failed while idle (for example by sending unexpected bytes).
    fn is_open(&self) -> bool;
}
