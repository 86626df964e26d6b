//! A copy of a request body kept as it streams to an HTTP/2 origin, so that a stream
//! the origin refuses (`REFUSED_STREAM`, or above the last stream of a graceful GOAWAY)
//! can go again from the start, wherever its body was when the refusal came.
//!
//! A copy is bounded per request ([`MAX_BYTES`]) and across the process
//! ([`BUDGET_BYTES`]): past either it is dropped, and the body can no longer be sent
//! again. Whoever holds a [`BodyCopy`] sees pushes, the chunks to send again and why a
//! copy was lost; not where the bytes are (memory today).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

/// The most of one request body a copy keeps. 1 MiB covers the JSON, form and
/// small-file uploads that are nearly every POST, so an origin that closes its
/// connections with GOAWAY (a restart, a limit on requests per connection) loses none
/// of them; a larger upload streams without a copy and fails if its stream is refused.
pub const MAX_BYTES: usize = 1024 * 1024;

/// The most all copies hold at once, across the process. A copy lives until its
/// response head arrives, so slow origins and many large uploads at once would
/// otherwise hold memory without bound: 64 MiB is 64 copies of the largest kept size.
/// Past it, bodies stream without a copy.
pub const BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// Bytes gathered before they become one chunk: small pushes (a chunked body in tiny
/// chunks) cost one allocation per 16 KiB, not one each, so what the budget counts is
/// what the copy holds.
const PIECE_BYTES: usize = 16 * 1024;

/// What copies may hold at once, and hold now.
pub(crate) struct Budget {
    max: usize,
    used: AtomicUsize,
}

impl Budget {
    pub(crate) const fn new(max: usize) -> Budget {
        Budget { max, used: AtomicUsize::new(0) }
    }

    /// Takes `n` bytes of the budget; false (nothing taken) when they do not fit.
    fn take(&self, n: usize) -> bool {
        let fits = |used: usize| used.checked_add(n).filter(|total| *total <= self.max);
        self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, fits).is_ok()
    }

    fn give_back(&self, n: usize) {
        // Never more than was taken: `BodyCopy` gives back exactly what it holds.
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The budget of every copy in the process.
static PROCESS: Budget = Budget::new(BUDGET_BYTES);

/// Why a copy was dropped, so the body cannot be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyLost {
    /// The body grew past [`MAX_BYTES`].
    TooLarge,
    /// Copies of other bodies held the whole [`BUDGET_BYTES`].
    OverBudget,
    /// Part of the body went to an HTTP/2 origin, and the backend that takes the request
    /// now speaks HTTP/1.1, whose connection gets the body only as the client sends it.
    OtherProtocol,
}

impl fmt::Display for CopyLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyLost::TooLarge => write!(
                f,
                "its body was too large to keep (holdfast keeps at most {} KiB of a request \
                 body to send it again)",
                MAX_BYTES / 1024
            ),
            CopyLost::OverBudget => write!(
                f,
                "its body could not be kept (copies of the request bodies in flight held \
                 {} MiB, the most holdfast keeps at once)",
                BUDGET_BYTES / (1024 * 1024)
            ),
            CopyLost::OtherProtocol => write!(
                f,
                "part of its body went out as HTTP/2, and the backend it moved to speaks \
                 HTTP/1.1"
            ),
        }
    }
}

/// The bytes of one request body as far as it went, or why they were not kept.
pub(crate) struct BodyCopy {
    budget: &'static Budget,
    /// Full pieces, each at least [`PIECE_BYTES`].
    chunks: Vec<Bytes>,
    /// The piece being filled.
    tail: Vec<u8>,
    /// Bytes held, all taken from the budget.
    len: usize,
    lost: Option<CopyLost>,
}

impl BodyCopy {
    /// An empty copy, within the process's budget.
    pub(crate) fn new() -> BodyCopy {
        BodyCopy::within(&PROCESS)
    }

    pub(crate) fn within(budget: &'static Budget) -> BodyCopy {
        BodyCopy { budget, chunks: Vec::new(), tail: Vec::new(), len: 0, lost: None }
    }

    /// Adds the next bytes of the body. False once the copy is lost: past
    /// [`MAX_BYTES`], or past the budget; what it held is dropped then, and it takes
    /// nothing more.
    pub(crate) fn push(&mut self, data: &[u8]) -> bool {
        if self.lost.is_some() {
            return false;
        }
        let Some(len) = self.len.checked_add(data.len()).filter(|n| *n <= MAX_BYTES) else {
            self.lose(CopyLost::TooLarge);
            return false;
        };
        if !self.budget.take(data.len()) {
            self.lose(CopyLost::OverBudget);
            return false;
        }
        self.len = len;
        if self.tail.is_empty() {
            self.tail.reserve(PIECE_BYTES.max(data.len()));
        }
        self.tail.extend_from_slice(data);
        if self.tail.len() >= PIECE_BYTES {
            self.chunks.push(Bytes::from(std::mem::take(&mut self.tail)));
        }
        true
    }

    /// The body from its start, as far as it was pushed.
    pub(crate) fn chunks(&self) -> impl Iterator<Item = Bytes> + '_ {
        let tail = (!self.tail.is_empty()).then(|| Bytes::copy_from_slice(&self.tail));
        self.chunks.iter().cloned().chain(tail)
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Why the copy was dropped, if it was: the body cannot be sent again.
    pub(crate) fn lost(&self) -> Option<CopyLost> {
        self.lost
    }

    fn lose(&mut self, why: CopyLost) {
        self.chunks = Vec::new();
        self.tail = Vec::new();
        self.budget.give_back(std::mem::take(&mut self.len));
        self.lost = Some(why);
    }
}

impl Drop for BodyCopy {
    fn drop(&mut self) {
        self.budget.give_back(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(copy: &BodyCopy) -> Vec<u8> {
        copy.chunks().flat_map(|c| c.to_vec()).collect()
    }

    #[test]
    fn sends_again_what_was_pushed_in_order() {
        static BUDGET: Budget = Budget::new(BUDGET_BYTES);
        let mut copy = BodyCopy::within(&BUDGET);
        let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        // Pieces of every size, tiny ones included.
        let mut rest = body.as_slice();
        for size in [1, 2, 3, 1000, 16 * 1024, 17, 40_000].into_iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (piece, later) = rest.split_at(size.min(rest.len()));
            assert!(copy.push(piece));
            rest = later;
        }
        assert_eq!(copy.len(), body.len());
        assert_eq!(joined(&copy), body);
        // Twice: sending again does not consume it.
        assert_eq!(joined(&copy), body);
        assert_eq!(BUDGET.used.load(Ordering::Acquire), body.len());
        drop(copy);
        assert_eq!(BUDGET.used.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_body_past_the_limit_is_dropped_for_good() {
        static BUDGET: Budget = Budget::new(BUDGET_BYTES);
        let mut copy = BodyCopy::within(&BUDGET);
        assert!(copy.push(&vec![b'a'; MAX_BYTES - 1]));
        assert!(copy.push(b"b"), "exactly the limit is kept");
        assert_eq!(copy.lost(), None);
        assert!(!copy.push(b"c"));
        assert_eq!(copy.lost(), Some(CopyLost::TooLarge));
        assert_eq!((copy.len(), copy.chunks().count()), (0, 0));
        assert_eq!(BUDGET.used.load(Ordering::Acquire), 0, "its bytes went back");
        // Nothing more is kept, however small.
        assert!(!copy.push(b"d"));
        assert!(!copy.push(b""));
        assert_eq!(copy.lost(), Some(CopyLost::TooLarge));
        assert!(copy.lost().unwrap().to_string().contains("too large to keep"));
        assert!(copy.lost().unwrap().to_string().contains("1024 KiB"));
    }

    #[test]
    fn copies_past_the_budget_are_not_kept() {
        static BUDGET: Budget = Budget::new(100);
        let mut first = BodyCopy::within(&BUDGET);
        assert!(first.push(&[1; 60]));
        let mut second = BodyCopy::within(&BUDGET);
        assert!(second.push(&[2; 40]));
        let mut third = BodyCopy::within(&BUDGET);
        assert!(!third.push(&[3; 1]));
        assert_eq!(third.lost(), Some(CopyLost::OverBudget));
        // The second no longer fits either: it is dropped whole, and gives its share
        // back.
        assert!(!second.push(&[2; 1]));
        assert_eq!(second.lost(), Some(CopyLost::OverBudget));
        assert_eq!(BUDGET.used.load(Ordering::Acquire), 60);
        drop(first);
        let mut fourth = BodyCopy::within(&BUDGET);
        assert!(fourth.push(&[4; 100]), "the budget is free again");
        assert!(CopyLost::OverBudget.to_string().contains("64 MiB"));
    }

    #[test]
    fn an_empty_body_is_kept_and_empty() {
        static BUDGET: Budget = Budget::new(0);
        let mut copy = BodyCopy::within(&BUDGET);
        assert!(copy.push(b""));
        assert_eq!((copy.len(), copy.chunks().count(), copy.lost()), (0, 0, None));
    }
}
