//! Responses in progress, and at most N of them at once, as an app server with N sync
//! workers (Puma, gunicorn) serves them: a request waits for a free worker, in arrival
//! order, and keeps it until the last frame of its response is handed to hyper (see
//! `body.rs`), so a client that reads slowly keeps a worker busy.
//!
//! Responses in progress are counted always ([`InProgress`]); the workers only with
//! `--workers` ([`Workers`]).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The origin's workers: how many, and which are busy.
#[derive(Debug)]
pub struct Workers {
    limit: usize,
    free: Arc<Semaphore>,
    /// Requests waiting for a worker now.
    waiting: AtomicU64,
}

/// One busy worker; free again when dropped.
#[derive(Debug)]
pub struct Worker {
    _permit: OwnedSemaphorePermit,
}

/// Responses in progress: from a request's start (once it has a worker, if they are
/// limited) until the last frame of its response is taken, or the client goes away.
#[derive(Debug, Default)]
pub struct InProgress(Arc<AtomicU64>);

/// One response in progress, and its worker if any; counted out when dropped.
#[derive(Debug)]
pub struct Responding {
    count: Arc<AtomicU64>,
    _worker: Option<Worker>,
}

impl InProgress {
    /// Counts a response in progress until the returned guard is dropped.
    pub fn start(&self, worker: Option<Worker>) -> Responding {
        self.0.fetch_add(1, Ordering::Relaxed);
        Responding { count: Arc::clone(&self.0), _worker: worker }
    }

    pub fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for Responding {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One reading of [`Workers`]; the `workers` part of `/__origin/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkersSnapshot {
    /// Responses that may be in progress at once.
    pub limit: u64,
    /// Responses in progress now.
    pub busy: u64,
    /// Requests waiting for a worker now.
    pub waiting: u64,
}

impl Workers {
    pub fn new(limit: NonZeroUsize) -> Self {
        Self {
            limit: limit.get(),
            free: Arc::new(Semaphore::new(limit.get())),
            waiting: AtomicU64::new(0),
        }
    }

    /// Waits for a free worker (tokio's semaphore serves waiters in arrival order).
    pub async fn acquire(&self) -> Worker {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        // Counted down however the wait ends, also when the client goes away meanwhile.
        let _waiting = Waiting(&self.waiting);
        let permit =
            Arc::clone(&self.free).acquire_owned().await.expect("the semaphore is never closed");
        Worker { _permit: permit }
    }

    pub fn snapshot(&self) -> WorkersSnapshot {
        let busy = self.limit.saturating_sub(self.free.available_permits());
        WorkersSnapshot {
            limit: self.limit as u64,
            busy: busy as u64,
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }
}

struct Waiting<'a>(&'a AtomicU64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_waits_until_a_worker_is_given_back() {
        let workers = Arc::new(Workers::new(NonZeroUsize::new(1).expect("non-zero")));
        let first = workers.acquire().await;
        let second = tokio::spawn({
            let workers = Arc::clone(&workers);
            async move { workers.acquire().await }
        });
        for _ in 0..1_000 {
            if workers.snapshot().waiting == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(workers.snapshot(), WorkersSnapshot { limit: 1, busy: 1, waiting: 1 });
        drop(first);
        let second = second.await.expect("the waiter gets the worker");
        assert_eq!(workers.snapshot(), WorkersSnapshot { limit: 1, busy: 1, waiting: 0 });
        drop(second);
        assert_eq!(workers.snapshot().busy, 0);
    }

    #[test]
    fn a_response_counts_in_progress_until_its_guard_drops() {
        let in_progress = InProgress::default();
        let first = in_progress.start(None);
        let second = in_progress.start(None);
        assert_eq!(in_progress.now(), 2);
        drop(first);
        assert_eq!(in_progress.now(), 1);
        drop(second);
        assert_eq!(in_progress.now(), 0);
    }
}
