//! Shared connections: each carries up to its capacity of requests at once, and the
//! peer says how many (and may change it). A request goes on the oldest connection
//! with room, so load packs onto few connections and the others go idle; another
//! connection opens only when every one is full and the backend's bound allows it
//! (`max_connections`, counted together with its exclusive connections in [`Pool`]),
//! and requests that arrive while one is opening wait for it rather than open their
//! own. So a backend has as many shared connections as its peak of requests at once
//! needs, and one that carries no request for `idle_timeout` closes.
//!
//! A connection drains (takes no new request, closes when its last one ends) when its
//! peer stops taking requests, when it reached `max_requests` or `max_lifetime`, or
//! when the pool retires. A peer that stopped a connection after answering N requests
//! on it makes new connections carry no more than N each, for
//! [`LOWERED_CAPACITY_MEMORY`] (a peer that closes connections after N requests would
//! refuse the rest).
//!
//! The pool opens nothing itself and knows no protocol: [`Seek::next`] hands the
//! caller an [`Opening`] when a connection should open; the caller connects and
//! adopts it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::bound::Bound;
use crate::queue::ConnectPermit;
use crate::{CloseReason, Exhausted, Pool, Poolable};

/// A connection that carries many requests at once.
pub trait Shareable: Send + Sync + 'static {
    /// Whether it can take another request: the peer has not closed it, nor said it
    /// takes no more.
    fn is_open(&self) -> bool;

    /// Requests it may carry at once now, as the peer says (read as at least 1).
    fn capacity(&self) -> usize;
}

/// How long a capacity lowered by a peer that stopped a connection
/// ([`Claim::peer_stopped`]) bounds new connections.
pub const LOWERED_CAPACITY_MEMORY: Duration = Duration::from_secs(30);

/// One backend's shared connections. Cheap to clone; clones share the connections.
pub struct SharedPool<S: Shareable> {
    inner: Arc<Inner<S>>,
}

impl<S: Shareable> Clone for SharedPool<S> {
    fn clone(&self) -> Self {
        SharedPool { inner: Arc::clone(&self.inner) }
    }
}

struct Inner<S> {
    bound: Arc<Bound>,
    state: Mutex<State<S>>,
}

struct State<S> {
    /// Oldest first.
    conns: Vec<Entry<S>>,
    /// Opens in progress.
    connecting: usize,
    /// Requests looking for room now.
    wanting: usize,
    /// Requests the next connection is expected to take: the last one's capacity.
    expected: usize,
    /// Requests a peer answered on a connection before it stopped it, and when.
    lowered: Option<(u64, Instant)>,
    retired: bool,
    /// Opens started, numbered from 1.
    opens: u64,
    /// The number of the latest failed open (0: none), so the requests that waited on
    /// it fail with it rather than each try again.
    failed: u64,
    /// Connections opened, and requests sent on them.
    opened: u64,
    requests: u64,
}

struct Entry<S> {
    member: Arc<Member<S>>,
    /// Requests on it now.
    active: usize,
    /// Requests it has carried.
    requests: u64,
    opened: Instant,
    idle_since: Instant,
    /// Why it takes no new request, once it does not.
    draining: Option<CloseReason>,
}

/// A connection, as the requests on it share it.
struct Member<S> {
    id: u64,
    conn: S,
    /// Requests the peer answered on it.
    answered: AtomicU64,
    /// The peer stopped it while requests were on it ([`Claim::peer_stopped`]).
    stopped: AtomicBool,
}

/// A copy of a [`SharedPool`]'s own counts at one moment. (Its connections are also
/// counted in the [`crate::PoolStats`] of its bound, with the exclusive ones.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedSnapshot {
    /// Shared connections open now.
    pub connections: usize,
    /// Requests on them now.
    pub active_requests: usize,
    /// Shared connections opened.
    pub opened: u64,
    /// Requests sent on shared connections.
    pub requests: u64,
}

/// Why a request got no room on a shared connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimError {
    /// The bound was reached and `queue_size` requests were already looking, or none
    /// found room within `queue_timeout`.
    Exhausted(Exhausted),
    /// The pool was retired.
    Retired,
    /// The open this request waited for failed (the caller that opened knows why).
    OpenFailed,
}

/// What [`Seek::next`] found.
pub enum Found<S: Shareable> {
    /// Room on a connection.
    Claim(Claim<S>),
    /// A slot to open a connection in: connect, then [`Opening::adopt`] it and ask
    /// again.
    Open(Opening<S>),
}

/// One request looking for room; it counts as wanting room until it is served or
/// dropped.
pub struct Seek<'a, S: Shareable> {
    pool: &'a SharedPool<S>,
    deadline: Instant,
    /// The opens started before this request looked, or by it: a later failure is
    /// news to it.
    seen: u64,
    counted: bool,
}

/// A slot under the bound for a connection being opened. Dropped unused (the connect
/// was abandoned), it frees the slot.
pub struct Opening<S: Shareable> {
    pool: Option<SharedPool<S>>,
}

/// One request's claim on a shared connection; its room frees when the claim drops.
pub struct Claim<S: Shareable> {
    pool: SharedPool<S>,
    member: Arc<Member<S>>,
    reused: bool,
}

impl<C: Poolable> Pool<C> {
    /// Shared connections to the same backend, under the same `max_connections` and
    /// counted in the same [`crate::PoolStats`]. A new connection is expected to take
    /// `assumed_capacity` requests until one has said how many it takes.
    pub fn shared<S: Shareable>(&self, assumed_capacity: usize) -> SharedPool<S> {
        let bound = Arc::clone(&self.inner.bound);
        bound.has_shared.store(true, Ordering::Release);
        let state = State {
            conns: Vec::new(),
            connecting: 0,
            wanting: 0,
            expected: assumed_capacity.max(1),
            lowered: None,
            retired: false,
            opens: 0,
            failed: 0,
            opened: 0,
            requests: 0,
        };
        SharedPool { inner: Arc::new(Inner { bound, state: Mutex::new(state) }) }
    }
}

impl<S: Shareable> SharedPool<S> {
    /// Starts looking for room for one request; [`Seek::next`] finds it, or says to
    /// open a connection. It gives up after `queue_timeout`.
    pub fn seek(&self) -> Seek<'_, S> {
        let deadline = Instant::now() + self.inner.bound.config.queue_timeout;
        let seen = self.lock().opens;
        Seek { pool: self, deadline, seen, counted: false }
    }

    /// The limits this pool enforces, its bound's.
    pub fn config(&self) -> &crate::PoolConfig {
        &self.inner.bound.config
    }

    /// Closes connections that carried no request for `idle_timeout`, and those the
    /// peer closed or that drain and carry none.
    pub fn evict_expired(&self, now: Instant) {
        let idle_timeout = self.inner.bound.config.idle_timeout;
        let mut state = self.lock();
        for e in state.conns.iter_mut().filter(|e| e.active == 0 && e.draining.is_none()) {
            if now.duration_since(e.idle_since) >= idle_timeout {
                e.draining = Some(CloseReason::IdleTimeout);
            }
        }
        self.sweep(&mut state);
    }

    /// Closes every connection that carries no request now, counted under `reason`.
    /// The others are not touched.
    pub fn clear_for(&self, reason: CloseReason) {
        let mut state = self.lock();
        for e in state.conns.iter_mut().filter(|e| e.active == 0 && e.draining.is_none()) {
            e.draining = Some(reason);
        }
        self.sweep(&mut state);
    }

    /// Winds the pool down for good: connections with no request close now, the others
    /// when their last request ends; no request finds room again.
    pub fn retire(&self) {
        let mut state = self.lock();
        state.retired = true;
        for e in state.conns.iter_mut().filter(|e| e.draining.is_none()) {
            e.draining = Some(CloseReason::Retired);
        }
        self.sweep(&mut state);
        drop(state);
        self.inner.bound.wake_shared();
    }

    /// Whether [`SharedPool::retire`] was called.
    pub fn is_retired(&self) -> bool {
        self.lock().retired
    }

    /// Whether a connection carries no request now (a hint for a balancer).
    pub fn has_idle(&self) -> bool {
        self.lock().conns.iter().any(|e| e.active == 0 && e.draining.is_none())
    }

    /// The counts now.
    pub fn snapshot(&self) -> SharedSnapshot {
        let state = self.lock();
        SharedSnapshot {
            connections: state.conns.len(),
            active_requests: state.conns.iter().map(|e| e.active).sum(),
            opened: state.opened,
            requests: state.requests,
        }
    }

    /// Room on the oldest connection with some, if there is one. Connections found
    /// closed, spent or too old on the way start to drain.
    fn try_claim(&self, state: &mut State<S>, now: Instant) -> Option<Claim<S>> {
        let config = &self.inner.bound.config;
        let lowered = state.lowered_capacity(now) as u64;
        let mut found = None;
        for e in state.conns.iter_mut().filter(|e| e.draining.is_none()) {
            e.draining = drain_reason(e, config, lowered, now);
            if e.draining.is_none() && e.active < e.member.conn.capacity().max(1) {
                found = Some(e);
                break;
            }
        }
        let claim = found.map(|entry| {
            if entry.active == 0 {
                self.inner.bound.stats.on_busy();
            }
            entry.active += 1;
            entry.requests += 1;
            let reused = entry.requests > 1;
            if reused {
                self.inner.bound.stats.on_reuse_shared();
            }
            Claim { pool: self.clone(), member: Arc::clone(&entry.member), reused }
        });
        if claim.is_some() {
            state.requests += 1;
        }
        self.sweep(state);
        claim
    }

    /// A request on `member` ended.
    fn release(&self, member: &Member<S>) {
        let now = Instant::now();
        let mut state = self.lock();
        let Some(entry) = state.conns.iter_mut().find(|e| e.member.id == member.id) else {
            return;
        };
        entry.active = entry.active.saturating_sub(1);
        if entry.active == 0 {
            entry.idle_since = now;
            self.inner.bound.stats.on_quiet();
            if entry.draining.is_none() && !entry.member.conn.is_open() {
                entry.draining = Some(CloseReason::OriginClosed);
            }
        }
        let wake = state.wanting > 0;
        self.sweep(&mut state);
        drop(state);
        if wake {
            self.inner.bound.wake_shared();
        }
    }

    /// Closes the draining connections that carry no request, and those the peer
    /// closed, each counted under its reason; their slots free up.
    fn sweep(&self, state: &mut State<S>) {
        let mut i = 0;
        while i < state.conns.len() {
            let e = &mut state.conns[i];
            if e.active == 0 && e.draining.is_none() && !e.member.conn.is_open() {
                e.draining = Some(CloseReason::OriginClosed);
            }
            match (e.active, e.draining) {
                (0, Some(reason)) => {
                    let entry = state.conns.remove(i);
                    // Counted before the connection is dropped, so whoever sees it
                    // closed sees it counted.
                    self.inner.bound.stats.on_close_idle(reason);
                    drop(entry);
                    self.inner.bound.free_slot();
                }
                _ => i += 1,
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<S>> {
        // Every section under the lock is short and leaves the state consistent.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why `e` should take no new request now, if it should not: the peer closed it, or
/// it reached `max_requests`, the lowered capacity or `max_lifetime`.
fn drain_reason<S: Shareable>(
    e: &Entry<S>,
    config: &crate::PoolConfig,
    lowered: u64,
    now: Instant,
) -> Option<CloseReason> {
    if !e.member.conn.is_open() {
        Some(CloseReason::OriginClosed)
    } else if config.is_spent(e.requests) {
        Some(CloseReason::MaxRequests)
    } else if e.requests >= lowered {
        Some(CloseReason::Learned)
    } else if !config.max_lifetime.is_zero() && now.duration_since(e.opened) >= config.max_lifetime
    {
        Some(CloseReason::MaxLifetime)
    } else {
        None
    }
}

impl<S> State<S> {
    /// Requests a connection may carry in all, as far as a recent stop tells.
    fn lowered_capacity(&self, now: Instant) -> usize {
        match self.lowered {
            Some((n, at)) if now.duration_since(at) < LOWERED_CAPACITY_MEMORY => {
                usize::try_from(n).unwrap_or(usize::MAX)
            }
            _ => usize::MAX,
        }
    }
}

impl<S: Shareable> Seek<'_, S> {
    /// Room on a connection; else, when every connection is full, the opens under way
    /// cannot take the requests waiting and the bound allows one more, a slot to open
    /// one in; else a wait until something changes.
    pub async fn next(&mut self) -> Result<Found<S>, ClaimError> {
        let pool = self.pool;
        let bound = &pool.inner.bound;
        loop {
            let changed = bound.shared_changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before the look, so a change between look and wait wakes us.
            changed.as_mut().enable();
            {
                let mut state = pool.lock();
                if let Some(claim) = pool.try_claim(&mut state, Instant::now()) {
                    self.served(&mut state);
                    return Ok(Found::Claim(claim));
                }
                if state.retired {
                    return Err(ClaimError::Retired);
                }
                if state.failed > self.seen {
                    return Err(ClaimError::OpenFailed);
                }
                if !self.counted {
                    state.wanting += 1;
                    self.counted = true;
                }
                let per_conn = state.lowered_capacity(Instant::now()).min(state.expected);
                let room = state.connecting.saturating_mul(per_conn.max(1));
                if room < state.wanting {
                    if bound.try_slot() {
                        state.connecting += 1;
                        state.opens += 1;
                        self.seen = state.opens;
                        return Ok(Found::Open(Opening { pool: Some(pool.clone()) }));
                    }
                    if state.wanting > bound.config.queue_size {
                        bound.stats.on_queue_full();
                        let waiting = state.wanting;
                        return Err(ClaimError::Exhausted(Exhausted::QueueFull { waiting }));
                    }
                }
            }
            if tokio::time::timeout_at(self.deadline, changed).await.is_err() {
                bound.stats.on_queue_timeout();
                let waited = bound.config.queue_timeout;
                return Err(ClaimError::Exhausted(Exhausted::QueueTimeout { waited }));
            }
        }
    }

    /// The request has its room: it no longer counts as wanting.
    fn served(&mut self, state: &mut State<S>) {
        if std::mem::take(&mut self.counted) {
            state.wanting -= 1;
        }
    }
}

impl<S: Shareable> Drop for Seek<'_, S> {
    fn drop(&mut self) {
        if self.counted {
            self.pool.lock().wanting -= 1;
        }
    }
}

impl<S: Shareable> Opening<S> {
    /// Adds the newly opened `conn` and wakes the requests waiting for room.
    pub fn adopt(mut self, conn: S) {
        let Some(pool) = self.pool.take() else { return };
        let now = Instant::now();
        let mut state = pool.lock();
        state.connecting -= 1;
        state.expected = conn.capacity().max(1);
        state.opened += 1;
        let id = state.opened;
        let draining = state.retired.then_some(CloseReason::Retired);
        let member = Arc::new(Member {
            id,
            conn,
            answered: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        pool.inner.bound.stats.on_open_shared();
        let entry =
            Entry { member, active: 0, requests: 0, opened: now, idle_since: now, draining };
        state.conns.push(entry);
        pool.sweep(&mut state);
        drop(state);
        pool.inner.bound.wake_shared();
    }

    /// The connect failed: the slot frees, and the requests that waited for this
    /// connection fail too rather than each try again.
    pub fn failed(mut self) {
        if let Some(pool) = self.pool.take() {
            let mut state = pool.lock();
            state.failed = state.opens;
            drop(state);
            pool.abandon();
        }
    }

    /// The connection opened cannot be shared (its peer chose a protocol that carries
    /// one request at a time): its slot becomes a permit to adopt it into `pool`,
    /// which must be the pool this shared pool was made from (`None` otherwise, and
    /// the slot frees).
    pub fn into_permit<C: Poolable>(mut self, pool: &Pool<C>) -> Option<ConnectPermit<C>> {
        let shared = self.pool.take()?;
        if !Arc::ptr_eq(&shared.inner.bound, &pool.inner.bound) {
            shared.abandon();
            return None;
        }
        shared.lock().connecting -= 1;
        pool.inner.bound.connecting.fetch_add(1, Ordering::AcqRel);
        pool.observe_connect(Instant::now());
        shared.inner.bound.wake_shared();
        Some(ConnectPermit::new(pool.clone()))
    }
}

impl<S: Shareable> SharedPool<S> {
    /// An open that ended without a connection: its slot frees.
    fn abandon(&self) {
        self.lock().connecting -= 1;
        self.inner.bound.free_slot();
    }
}

impl<S: Shareable> Drop for Opening<S> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.abandon();
        }
    }
}

impl<S: Shareable> Claim<S> {
    /// The connection, to send the request on.
    pub fn get(&self) -> &S {
        &self.member.conn
    }

    /// Whether the connection carried a request before this one.
    pub fn is_reused(&self) -> bool {
        self.reused
    }

    /// The peer answered the request (its response head came).
    pub fn answered(&self) {
        self.member.answered.fetch_add(1, Ordering::Relaxed);
    }

    /// The peer stopped the connection and refused this request: the connection takes
    /// no new request, and for [`LOWERED_CAPACITY_MEMORY`] new connections carry no
    /// more requests than it answered. True the first time for a connection.
    pub fn peer_stopped(&self) -> bool {
        if self.member.stopped.swap(true, Ordering::AcqRel) {
            return false;
        }
        let answered = self.member.answered.load(Ordering::Relaxed).max(1);
        let mut state = self.pool.lock();
        state.lowered = Some((answered, Instant::now()));
        if let Some(e) = state.conns.iter_mut().find(|e| e.member.id == self.member.id) {
            e.draining.get_or_insert(CloseReason::OriginClosed);
        }
        true
    }
}

impl<S: Shareable> Drop for Claim<S> {
    fn drop(&mut self) {
        self.pool.release(&self.member);
    }
}

#[cfg(test)]
mod tests;
