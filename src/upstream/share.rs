//! How much of one backend a client may hold while the backend is crowded, so that a
//! handful of clients cannot queue everyone else behind them.
//!
//! Each request takes a *claim* on the backend before it leases a connection, and gives
//! it back once the connection is settled: a claim is held while its request has, or
//! waits for, a connection. Claims are counted per client address, and per client
//! connection (only an HTTP/2 client has more than one request at a time). While fewer
//! than [`CROWDED_PERCENT`] of the backend's `max_connections` are claimed, every claim
//! is an ordinary one: a client may use what nobody else wants. Past it, a client
//! address that holds [`ADDRESS_SHARE_PERCENT`] of `max_connections` or more (a client
//! connection: [`CONNECTION_SHARE_PERCENT`]) gets a claim of the second class
//! ([`Priority::Second`]): its request gets a connection only when no other client's
//! request waits for one, never one of the last quarter of `max_connections`, and it
//! waits in a queue of its own that may hold at most half the queue size. Other
//! clients' requests go ahead of it; a client alone still uses three quarters of the
//! backend.
//!
//! It counts claims; it does not know requests, sockets or what a client is: callers
//! give opaque keys ([`Claimant`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use holdfast_pool::{PoolConfig, Priority};

/// Claimed connections, in percent of `max_connections`, from which a backend is
/// crowded: where the pool's reserve for the first class begins.
pub const CROWDED_PERCENT: usize = 100 - holdfast_pool::RESERVE_PERCENT;

/// The claims one client address may hold while the backend is crowded and keep its
/// place in the queue, in percent of `max_connections`: a quarter.
pub const ADDRESS_SHARE_PERCENT: usize = 25;

/// The claims one client connection may hold while the backend is crowded and keep its
/// place in the queue, in percent of `max_connections`: an eighth, the 128 streams an
/// HTTP/2 connection may open (by default) against the default 1024 connections.
pub const CONNECTION_SHARE_PERCENT: usize = 12;

/// Who a claim is for: the client's address and its connection, as opaque keys
/// (`connection` 0: none apart from the address, as for an HTTP/1.1 client, which has
/// one request at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Claimant {
    pub address: u64,
    pub connection: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Address(u64),
    Connection(u64),
}

/// One backend's claims.
#[derive(Debug, Default)]
pub struct Shares {
    held: Mutex<Claims>,
}

/// Every claim held now: by key, and their count.
#[derive(Debug, Default)]
struct Claims {
    by: HashMap<Key, usize>,
    /// Claims held, all clients together: how busy the backend is. Counted here rather
    /// than read from the pool, whose count lags behind claims granted a moment ago.
    total: usize,
}

/// A claim on a backend, given back when dropped.
#[derive(Debug)]
pub struct Claim {
    shares: Arc<Shares>,
    claimant: Claimant,
    /// The queue class its request waits in, if it has to.
    pub priority: Priority,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.shares.lock().remove(self.claimant);
    }
}

impl Shares {
    /// A claim on the backend for `claimant`, whose pool is configured as `config`: of
    /// the second class when the backend is crowded and the claimant over its share.
    pub fn claim(self: &Arc<Self>, claimant: Claimant, config: &PoolConfig) -> Claim {
        let mut claims = self.lock();
        let priority = match config.max_connections {
            0 => Priority::First,
            max => claims.priority(claimant, max),
        };
        claims.add(claimant);
        drop(claims);
        Claim { shares: Arc::clone(self), claimant, priority }
    }

    /// Client addresses holding claims now, and the most one holds: for `/status`.
    pub fn snapshot(&self) -> ShareSnapshot {
        let claims = self.lock();
        let addresses = claims.by.iter().filter(|(k, _)| matches!(k, Key::Address(_)));
        let (count, most) = addresses.fold((0, 0), |(n, most), (_, c)| (n + 1, most.max(*c)));
        ShareSnapshot { addresses: count, most, total: claims.total }
    }

    fn lock(&self) -> MutexGuard<'_, Claims> {
        // Every change under the lock is a count or an entry: a poisoned lock still holds
        // consistent counts.
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Claims {
    /// The class of a new claim of `c` on a backend of `max` connections.
    fn priority(&self, c: Claimant, max: usize) -> Priority {
        let percent = |p: usize| (max.saturating_mul(p) / 100).max(1);
        if self.total < percent(CROWDED_PERCENT) {
            return Priority::First;
        }
        let held = |key| self.by.get(&key).copied().unwrap_or(0);
        let over_address = held(Key::Address(c.address)) >= percent(ADDRESS_SHARE_PERCENT);
        let over_connection = c.connection != 0
            && held(Key::Connection(c.connection)) >= percent(CONNECTION_SHARE_PERCENT);
        if over_address || over_connection {
            Priority::Second
        } else {
            Priority::First
        }
    }

    fn add(&mut self, c: Claimant) {
        self.total = self.total.saturating_add(1);
        for key in keys(c) {
            let held = self.by.entry(key).or_default();
            *held = held.saturating_add(1);
        }
    }

    fn remove(&mut self, c: Claimant) {
        self.total = self.total.saturating_sub(1);
        for key in keys(c) {
            if let Some(held) = self.by.get_mut(&key) {
                *held = held.saturating_sub(1);
                if *held == 0 {
                    self.by.remove(&key);
                }
            }
        }
    }
}

/// The keys a claimant counts under.
fn keys(c: Claimant) -> impl Iterator<Item = Key> {
    let connection = (c.connection != 0).then_some(Key::Connection(c.connection));
    std::iter::once(Key::Address(c.address)).chain(connection)
}

/// What a backend's claims look like now.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShareSnapshot {
    /// Client addresses holding claims.
    pub addresses: usize,
    /// The most claims one address holds.
    pub most: usize,
    /// Claims held, all addresses together.
    pub total: usize,
}

#[cfg(test)]
mod tests;
