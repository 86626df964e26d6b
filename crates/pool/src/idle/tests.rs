use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::{CloseReason, Pool, PoolConfig, Poolable};

#[derive(Debug)]
struct FakeConn {
    id: u32,
    open: Arc<AtomicBool>,
}

impl FakeConn {
    fn open(id: u32) -> Self {
        FakeConn { id, open: Arc::new(AtomicBool::new(true)) }
    }
}

impl Poolable for FakeConn {
    fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn release_new(pool: &Pool<FakeConn>, id: u32) {
    pool.adopt(FakeConn::open(id), Instant::now()).release(Instant::now());
}

#[tokio::test(start_paused = true)]
async fn checkout_returns_most_recently_used_first() {
    let pool = Pool::new(PoolConfig::default());
    release_new(&pool, 1);
    release_new(&pool, 2);
    let mut got = pool.checkout(Instant::now()).expect("idle conn");
    assert_eq!(got.conn().id, 2);
    assert!(got.is_reused());
    assert_eq!(got.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn idle_connection_expires_after_idle_timeout() {
    let pool = Pool::new(PoolConfig { idle_timeout: secs(30), ..PoolConfig::default() });
    release_new(&pool, 1);
    tokio::time::advance(secs(31)).await;
    assert!(pool.checkout(Instant::now()).is_none());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::IdleTimeout), 1);
    assert_eq!(pool.stats().snapshot().idle, 0);
}

#[tokio::test(start_paused = true)]
async fn evict_expired_closes_without_a_checkout() {
    let pool = Pool::new(PoolConfig { idle_timeout: secs(5), ..PoolConfig::default() });
    release_new(&pool, 1);
    tokio::time::advance(secs(2)).await;
    release_new(&pool, 2);
    tokio::time::advance(secs(4)).await;
    pool.evict_expired(Instant::now());
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed(CloseReason::IdleTimeout)), (1, 1));
    assert_eq!(pool.next_expiry(Instant::now()), Some(secs(1)));
}

#[tokio::test(start_paused = true)]
async fn closed_idle_connection_is_skipped() {
    let pool = Pool::new(PoolConfig::default());
    release_new(&pool, 1);
    let conn = FakeConn::open(2);
    let flag = Arc::clone(&conn.open);
    pool.adopt(conn, Instant::now()).release(Instant::now());
    flag.store(false, Ordering::SeqCst);
    let mut got = pool.checkout(Instant::now()).expect("conn 1 is still open");
    assert_eq!(got.conn().id, 1);
    assert_eq!(pool.stats().snapshot().closed(CloseReason::UpstreamClosed), 1);
}

#[tokio::test(start_paused = true)]
async fn connection_retires_after_max_requests() {
    let pool = Pool::new(PoolConfig { max_requests: 3, ..PoolConfig::default() });
    release_new(&pool, 1);
    for _ in 0..2 {
        pool.checkout(Instant::now()).expect("reusable").release(Instant::now());
    }
    assert!(pool.checkout(Instant::now()).is_none());
    let snap = pool.stats().snapshot();
    assert_eq!((snap.opened, snap.reused, snap.closed(CloseReason::MaxRequests)), (1, 2, 1));
}

#[tokio::test(start_paused = true)]
async fn connection_retires_after_max_lifetime() {
    let config =
        PoolConfig { max_lifetime: secs(10), idle_timeout: secs(60), ..PoolConfig::default() };
    let pool = Pool::new(config);
    release_new(&pool, 1);
    tokio::time::advance(secs(11)).await;
    assert!(pool.checkout(Instant::now()).is_none());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::MaxLifetime), 1);
}

#[tokio::test(start_paused = true)]
async fn full_pool_evicts_least_recently_used() {
    let pool = Pool::new(PoolConfig { max_idle: 2, ..PoolConfig::default() });
    for id in 1..=3 {
        release_new(&pool, id);
    }
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed(CloseReason::PoolFull)), (2, 1));
    let first = pool.checkout(Instant::now()).unwrap().conn().id;
    let second = pool.checkout(Instant::now()).unwrap().conn().id;
    assert_eq!((first, second), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn zero_max_idle_keeps_nothing() {
    let pool = Pool::new(PoolConfig { max_idle: 0, ..PoolConfig::default() });
    release_new(&pool, 1);
    assert!(pool.checkout(Instant::now()).is_none());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::PoolFull), 1);
}

#[tokio::test(start_paused = true)]
async fn dropped_checkout_counts_as_error_and_keeps_gauges_right() {
    let pool = Pool::new(PoolConfig::default());
    release_new(&pool, 1);
    let got = pool.checkout(Instant::now()).unwrap();
    assert_eq!(pool.stats().snapshot().active, 1);
    drop(got);
    let snap = pool.stats().snapshot();
    assert_eq!((snap.active, snap.idle, snap.closed(CloseReason::Error)), (0, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn clear_closes_all_idle_for_shutdown() {
    let pool = Pool::new(PoolConfig::default());
    release_new(&pool, 1);
    release_new(&pool, 2);
    pool.clear();
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed(CloseReason::Shutdown)), (0, 2));
}
