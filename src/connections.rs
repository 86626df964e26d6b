//! The client connections open now, and the stop each of them watches: the listener
//! counts every accepted connection in ([`Connections::track`]), the connection's task
//! holds its [`OpenConnection`] while it lives, and shutdown stops them all and waits
//! until the count is zero.
//!
//! The same registry times the connections whose client has not sent a byte yet: each
//! says until when it may stay silent ([`OpenConnection::poll_silent`]), and the
//! listener wakes those past it ([`Connections::wake_silent`]). One timer per listener
//! instead of one per connection keeps a silent connection's task small.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use tokio::time::Instant;

use crate::metrics::{Family, Report, Writer, NO_LABELS};

/// Counts client connections (open now, so shutdown can wait for them, and accepted
/// since start) and tells them when the server stops. Clones share the counts; a
/// [`Connections::child`] (one listener's) counts in its parent too, but is stopped on
/// its own.
#[derive(Clone, Default)]
pub struct Connections(Arc<Counts>);

#[derive(Default)]
struct Counts {
    open: AtomicUsize,
    accepted: AtomicU64,
    stopping: AtomicBool,
    /// The task of each connection that asked to hear about the stop, by its id.
    waiting: Mutex<Waiting>,
    /// Where a child's connections are counted as well.
    parent: Option<Arc<Counts>>,
}

impl Connections {
    /// Client connections being served now.
    pub fn count(&self) -> usize {
        self.0.open.load(Ordering::Acquire)
    }

    /// Client connections accepted since start.
    pub fn accepted(&self) -> u64 {
        self.0.accepted.load(Ordering::Relaxed)
    }

    /// The counts now, for `/metrics`.
    pub fn snapshot(&self) -> ConnectionsSnapshot {
        ConnectionsSnapshot { open: self.count(), accepted: self.accepted() }
    }

    /// Tells every open connection the server is stopping (see [`OpenConnection::poll_stop`]).
    pub fn stop(&self) {
        self.0.stopping.store(true, Ordering::Release);
        let waiting = std::mem::take(&mut *self.0.lock());
        for waiter in waiting.into_values() {
            waiter.waker.wake();
        }
    }

    /// Wakes each connection that said at `now` or before that it would be silent no
    /// longer (see [`OpenConnection::poll_silent`]), once; returns the earliest such time
    /// still to come. A connection that has spoken since gets one spurious wake.
    pub fn wake_silent(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for waiter in self.0.lock().values_mut() {
            let Some(until) = waiter.silent_until() else { continue };
            if until <= now {
                waiter.silent_until = 0;
                waiter.waker.wake_by_ref();
            } else {
                next = Some(next.map_or(until, |n| n.min(until)));
            }
        }
        next
    }

    /// Connections of one listener: counted here too, stopped by their own
    /// [`Connections::stop`] (a listener removed by a reload).
    pub fn child(&self) -> Connections {
        Connections(Arc::new(Counts { parent: Some(Arc::clone(&self.0)), ..Counts::default() }))
    }

    /// Counts a newly accepted connection; it is open until the guard drops.
    pub(crate) fn track(&self) -> OpenConnection {
        let id = self.0.accepted.fetch_add(1, Ordering::Relaxed);
        self.0.open.fetch_add(1, Ordering::AcqRel);
        if let Some(parent) = &self.0.parent {
            parent.accepted.fetch_add(1, Ordering::Relaxed);
            parent.open.fetch_add(1, Ordering::AcqRel);
        }
        OpenConnection { counts: Arc::clone(&self.0), id, registered: false }
    }
}

impl Counts {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // Every operation under the lock is one insert, remove or take.
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The tasks waiting for the stop, by connection id.
type Waiting = HashMap<u64, Waiter, BuildHasherDefault<IdHasher>>;

/// A connection's task, and until when its client may stay silent, while it has not
/// been woken for that.
struct Waiter {
    waker: Waker,
    /// Nanoseconds from [`epoch`] (at least 1), 0 for none: eight bytes, where an
    /// `Option<Instant>` takes sixteen in every connection's entry.
    silent_until: u64,
}

impl Waiter {
    fn new(waker: Waker, silent_until: Option<Instant>) -> Waiter {
        Waiter { waker, silent_until: Waiter::encode(silent_until) }
    }

    /// `silent_until` as stored.
    fn encode(silent_until: Option<Instant>) -> u64 {
        silent_until.map_or(0, |at| {
            let nanos = at.saturating_duration_since(epoch()).as_nanos();
            u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
        })
    }

    fn silent_until(&self) -> Option<Instant> {
        let nanos = (self.silent_until != 0).then_some(self.silent_until)?;
        epoch().checked_add(std::time::Duration::from_nanos(nanos))
    }
}

/// The instant the registry's times count from: the first time asked for.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Hashes a connection id with one multiplication instead of SipHash: every connection
/// registers for the stop and leaves again, and the ids are holdfast's own sequence
/// numbers, never a client's input, so there is no flooding to resist. The golden-ratio
/// multiplier spreads consecutive ids over the high bits the table's probing uses.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(*byte));
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// One open client connection, counted in [`Connections`] while it lives.
pub struct OpenConnection {
    counts: Arc<Counts>,
    id: u64,
    registered: bool,
}

impl OpenConnection {
    /// Whether the server is stopping. The first call registers the task in `cx`,
    /// which [`Connections::stop`] then wakes, so a connection pays for the stop signal
    /// once, not on every wake-up: after that, this is one atomic load.
    ///
    /// # Races
    /// `stop` sets the flag before it takes the waiting tasks; registration inserts
    /// under the same lock and then reads the flag again, so a connection registering
    /// during a stop either is woken or sees the flag.
    pub fn poll_stop(&mut self, cx: &Context<'_>) -> bool {
        self.register(cx, None)
    }

    /// [`OpenConnection::poll_stop`] for a connection whose client has sent nothing
    /// yet and may stay so until `until`: the listener wakes the task then (see
    /// [`Connections::wake_silent`]), and the task looks at the clock itself. Only
    /// the first call of either registers; `until` is the connection's one deadline for
    /// its first bytes.
    pub fn poll_silent(&mut self, cx: &Context<'_>, until: Instant) -> bool {
        self.register(cx, Some(until))
    }

    /// Says, for a connection already registered, that it is silent again until `until`
    /// (an idle connection that parks); the next [`OpenConnection::poll_silent`]
    /// registers it otherwise.
    pub fn set_silent_until(&mut self, until: Instant) {
        if !self.registered {
            return;
        }
        if let Some(waiter) = self.counts.lock().get_mut(&self.id) {
            waiter.silent_until = Waiter::encode(Some(until));
        }
    }

    fn register(&mut self, cx: &Context<'_>, silent_until: Option<Instant>) -> bool {
        if self.counts.stopping.load(Ordering::Acquire) {
            return true;
        }
        if !self.registered {
            let waiter = Waiter::new(cx.waker().clone(), silent_until);
            self.counts.lock().insert(self.id, waiter);
            self.registered = true;
            return self.counts.stopping.load(Ordering::Acquire);
        }
        false
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if self.registered {
            self.counts.lock().remove(&self.id);
        }
        self.counts.open.fetch_sub(1, Ordering::AcqRel);
        if let Some(parent) = &self.counts.parent {
            parent.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

const OPEN: Family =
    Family { name: "holdfast_listener_connections", help: "Client connections open now." };
const ACCEPTED: Family =
    Family { name: "holdfast_listener_connections_accepted", help: "Client connections accepted." };

/// Client connections at one moment, for `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectionsSnapshot {
    /// Open now, across listeners.
    pub open: usize,
    /// Accepted since start.
    pub accepted: u64,
}

impl Report for ConnectionsSnapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        out.gauge(&OPEN, [(NO_LABELS, self.open as u64)])?;
        out.counter(&ACCEPTED, [(NO_LABELS, self.accepted)])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use super::*;

    /// Counts how often it is woken.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn stop_wakes_each_registered_connection_once_and_every_later_check_sees_it() {
        let connections = Connections::default();
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let cx = Context::from_waker(&waker);
        let mut open = connections.track();
        assert!(!open.poll_stop(&cx));
        assert!(!open.poll_stop(&cx), "registered once, checked cheaply after");
        assert_eq!(connections.count(), 1);
        connections.stop();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert!(open.poll_stop(&cx));
        // A connection that arrives during the stop sees it at its first check.
        let mut late = connections.track();
        assert!(late.poll_stop(&cx));
        drop((open, late));
        assert_eq!(connections.count(), 0);
        assert_eq!(connections.accepted(), 2);
    }

    #[test]
    fn silent_connections_are_woken_once_past_their_time_and_the_next_time_is_told() {
        let connections = Connections::default();
        let (early, late, speaking) =
            (Arc::new(Wakes::default()), Arc::new(Wakes::default()), Arc::new(Wakes::default()));
        let now = Instant::now();
        let at = |ms| now + std::time::Duration::from_millis(ms);
        let mut conns = Vec::new();
        for (wakes, until) in [(&early, Some(at(100))), (&late, Some(at(300))), (&speaking, None)] {
            let waker = Waker::from(Arc::clone(wakes));
            let mut open = connections.track();
            let cx = Context::from_waker(&waker);
            let stopping = match until {
                Some(until) => open.poll_silent(&cx, until),
                None => open.poll_stop(&cx),
            };
            assert!(!stopping);
            conns.push(open);
        }
        assert_eq!(connections.wake_silent(at(50)), Some(at(100)), "nobody is due yet");
        assert_eq!(connections.wake_silent(at(100)), Some(at(300)));
        assert_eq!(connections.wake_silent(at(200)), Some(at(300)), "woken once only");
        let count = |w: &Arc<Wakes>| w.0.load(Ordering::SeqCst);
        assert_eq!((count(&early), count(&late), count(&speaking)), (1, 0, 0));
        assert_eq!(connections.wake_silent(at(300)), None);
        assert_eq!((count(&early), count(&late), count(&speaking)), (1, 1, 0));
        // A connection that closed is out of the registry, silent or not.
        drop(conns);
        assert_eq!(connections.wake_silent(at(1000)), None);
        // The stop still reaches a silent connection.
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let mut open = connections.track();
        assert!(!open.poll_silent(&Context::from_waker(&waker), at(5000)));
        connections.stop();
        assert_eq!(count(&wakes), 1);
        assert!(open.poll_silent(&Context::from_waker(&waker), at(5000)));
    }

    #[test]
    fn consecutive_ids_hash_apart_in_the_high_bits_the_table_probes_with() {
        let top7 = |id: u64| {
            let mut hasher = IdHasher::default();
            hasher.write_u64(id);
            hasher.finish() >> 57
        };
        let tags: std::collections::HashSet<u64> = (0..64).map(top7).collect();
        assert!(tags.len() > 32, "64 consecutive ids share {} tags", 64 - tags.len());
    }

    #[test]
    fn a_child_counts_in_its_parent_and_stops_alone() {
        let all = Connections::default();
        let (one, other) = (all.child(), all.child());
        let waker = Waker::from(Arc::new(Wakes::default()));
        let cx = Context::from_waker(&waker);
        let (mut a, mut b) = (one.track(), other.track());
        assert_eq!((all.count(), all.accepted(), one.count()), (2, 2, 1));
        one.stop();
        assert!(a.poll_stop(&cx), "its own listener stopped");
        assert!(!b.poll_stop(&cx), "another listener's connection carries on");
        drop(a);
        assert_eq!((all.count(), one.count(), other.count()), (1, 0, 1));
        drop(b);
        assert_eq!(all.count(), 0);
    }
}
