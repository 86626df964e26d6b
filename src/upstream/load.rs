//! How busy a backend is: the requests assigned to it and not finished, and its
//! smoothed time to the response head. The balancer reads both (through
//! [`Candidate`](crate::balance::Candidate)); the proxy changes them.
//!
//! Plain atomics and no lock: every request touches them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use super::Backend;
use crate::balance::Ewma;

/// A backend's load.
pub struct Load {
    /// Requests assigned to the backend and not finished (see [`Assigned`]).
    outstanding: AtomicUsize,
    /// Smoothed time to the response head.
    pub latency: Ewma,
}

impl Load {
    /// No requests, no latency known yet.
    pub(super) fn new(now: Instant) -> Load {
        Load { outstanding: AtomicUsize::new(0), latency: Ewma::new(now) }
    }

    /// Requests assigned to this backend and not finished.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }
}

/// Counts a request against its backend while it lives: [`Load::outstanding`] is what
/// least-outstanding and power-of-two-choices balancing read.
pub struct Assigned(Arc<Backend>);

impl Assigned {
    pub fn new(backend: Arc<Backend>) -> Assigned {
        backend.load.outstanding.fetch_add(1, Ordering::Relaxed);
        Assigned(backend)
    }

    pub fn backend(&self) -> &Arc<Backend> {
        &self.0
    }
}

impl std::ops::Deref for Assigned {
    type Target = Backend;

    fn deref(&self) -> &Backend {
        &self.0
    }
}

impl Drop for Assigned {
    fn drop(&mut self) {
        self.0.load.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}
