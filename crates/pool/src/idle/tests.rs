use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::{
    Checkout, CloseReason, ClosedWhileIdle, Exhausted, IdleBudget, OriginLimits, Pool, PoolConfig,
    Poolable, Pooled,
};

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

/// Opens a new connection through the pool's permit, as a caller would.
async fn open(pool: &Pool<FakeConn>, id: u32) -> Pooled<FakeConn> {
    let permit = pool.acquire_fresh().await.expect("room for a connection");
    pool.adopt(FakeConn::open(id), permit, Instant::now())
}

/// A request queued in `pool` that expects an idle connection; yields its id.
fn wait_for_idle(pool: &Pool<FakeConn>) -> tokio::task::JoinHandle<u32> {
    let pool = pool.clone();
    tokio::spawn(async move {
        match pool.acquire().await {
            Ok(Checkout::Idle(mut c)) => c.conn().id,
            _ => panic!("expected a connection coming back"),
        }
    })
}

/// Opens `ids` at once (all in flight together), then releases them in order.
async fn open_all_then_release(pool: &Pool<FakeConn>, ids: &[u32]) {
    let mut conns = Vec::new();
    for id in ids {
        conns.push(open(pool, *id).await);
    }
    for c in conns {
        c.release(Instant::now());
    }
}

#[tokio::test(start_paused = true)]
async fn checkout_returns_most_recently_used_first() {
    let pool = Pool::new(PoolConfig::default());
    open_all_then_release(&pool, &[1, 2]).await;
    let mut got = pool.checkout(Instant::now()).expect("idle conn");
    assert_eq!(got.conn().id, 2);
    assert!(got.is_reused());
    assert_eq!(got.requests(), 2);
}

#[tokio::test(start_paused = true)]
async fn idle_connection_expires_after_idle_timeout() {
    let pool = Pool::new(PoolConfig { idle_timeout: secs(30), ..PoolConfig::default() });
    open_all_then_release(&pool, &[1]).await;
    tokio::time::advance(secs(31)).await;
    assert!(pool.checkout(Instant::now()).is_none());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::IdleTimeout), 1);
    assert_eq!(pool.stats().snapshot().idle, 0);
}

#[tokio::test(start_paused = true)]
async fn evict_expired_closes_without_a_checkout() {
    let pool = Pool::new(PoolConfig { idle_timeout: secs(5), ..PoolConfig::default() });
    let first = open(&pool, 1).await;
    let second = open(&pool, 2).await;
    first.release(Instant::now());
    tokio::time::advance(secs(2)).await;
    second.release(Instant::now());
    tokio::time::advance(secs(4)).await;
    pool.evict_expired(Instant::now());
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed(CloseReason::IdleTimeout)), (1, 1));
    assert_eq!(pool.next_expiry(Instant::now()), Some(secs(1)));
}

#[tokio::test(start_paused = true)]
async fn closed_idle_connection_is_skipped() {
    let pool = Pool::new(PoolConfig::default());
    let one = open(&pool, 1).await;
    let mut two = open(&pool, 2).await;
    let flag = Arc::clone(&two.conn().open);
    one.release(Instant::now());
    two.release(Instant::now());
    flag.store(false, Ordering::SeqCst);
    let mut got = pool.checkout(Instant::now()).expect("conn 1 is still open");
    assert_eq!(got.conn().id, 1);
    assert_eq!(pool.stats().snapshot().closed(CloseReason::OriginClosed), 1);
}

#[tokio::test(start_paused = true)]
async fn the_hook_hears_of_a_connection_found_closed_with_its_requests_idle_time_and_mark() {
    let heard: Arc<std::sync::Mutex<Vec<(u32, ClosedWhileIdle)>>> = Arc::default();
    let hears = Arc::clone(&heard);
    let hook =
        Box::new(move |conn: &FakeConn, closed| hears.lock().unwrap().push((conn.id, closed)));
    let pool = Pool::with_closed_hook(PoolConfig::default(), None, hook);
    let mut conn = open(&pool, 1).await;
    let flag = Arc::clone(&conn.conn().open);
    conn.release(Instant::now());
    let mut again = pool.checkout(Instant::now()).expect("idle");
    assert_eq!(again.mark(), 0);
    again.set_mark(7);
    again.release(Instant::now());
    tokio::time::advance(Duration::from_millis(30)).await;
    flag.store(false, Ordering::SeqCst);
    let now = Instant::now();
    assert!(pool.checkout(now).is_none());
    let expected = ClosedWhileIdle {
        requests: 2,
        idle_for: Duration::from_millis(30),
        found_at: now,
        mark: 7,
    };
    assert_eq!(*heard.lock().unwrap(), [(1, expected)]);
    // Closes for other reasons are not reported.
    open(&pool, 2).await.release(Instant::now());
    tokio::time::advance(PoolConfig::default().idle_timeout + secs(1)).await;
    pool.evict_expired(Instant::now());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::IdleTimeout), 1);
    assert_eq!(heard.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn connection_retires_after_max_requests() {
    let pool = Pool::new(PoolConfig { max_requests: 3, ..PoolConfig::default() });
    open_all_then_release(&pool, &[1]).await;
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
    open_all_then_release(&pool, &[1]).await;
    tokio::time::advance(secs(11)).await;
    assert!(pool.checkout(Instant::now()).is_none());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::MaxLifetime), 1);
}

#[tokio::test(start_paused = true)]
async fn full_pool_evicts_least_recently_used() {
    let pool = Pool::new(PoolConfig { max_idle: Some(2), ..PoolConfig::default() });
    open_all_then_release(&pool, &[1, 2, 3]).await;
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed(CloseReason::AboveDemand)), (2, 1));
    let first = pool.checkout(Instant::now()).unwrap().conn().id;
    let second = pool.checkout(Instant::now()).unwrap().conn().id;
    assert_eq!((first, second), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn zero_max_idle_keeps_nothing() {
    let pool = Pool::new(PoolConfig { max_idle: Some(0), ..PoolConfig::default() });
    open_all_then_release(&pool, &[1]).await;
    assert!(pool.checkout(Instant::now()).is_none());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::AboveDemand), 1);
}

#[tokio::test(start_paused = true)]
async fn idle_connections_never_outnumber_requests_recently_in_flight() {
    // One request at a time needs one idle connection, even if connections were
    // opened one after another.
    let pool = Pool::new(PoolConfig::default());
    for id in 1..=5 {
        open(&pool, id).await.release(Instant::now());
    }
    let snap = pool.stats().snapshot();
    assert_eq!((snap.opened, snap.idle, snap.closed(CloseReason::AboveDemand)), (5, 1, 4));
}

#[tokio::test(start_paused = true)]
async fn a_connect_counts_the_requests_in_flight_when_it_started() {
    // Two requests hold connections when a third finds none idle and opens one; the two
    // finish while it connects. Three were in flight at once: all three stay idle.
    let pool = Pool::new(PoolConfig::default());
    let first = open(&pool, 1).await;
    let second = open(&pool, 2).await;
    let permit = pool.acquire_fresh().await.expect("room for a connection");
    first.release(Instant::now());
    second.release(Instant::now());
    pool.adopt(FakeConn::open(3), permit, Instant::now()).release(Instant::now());
    let snap = pool.stats().snapshot();
    assert_eq!((snap.opened, snap.idle, snap.closed(CloseReason::AboveDemand)), (3, 3, 0));
    assert_eq!(pool.recent_peak(), 3);
}

#[tokio::test(start_paused = true)]
async fn idle_surplus_from_a_burst_is_closed_once_the_peak_decays() {
    let pool = Pool::new(PoolConfig { idle_timeout: secs(3600), ..PoolConfig::default() });
    open_all_then_release(&pool, &[1, 2, 3, 4, 5, 6, 7, 8]).await;
    assert_eq!(pool.stats().snapshot().idle, 8);
    // Afterwards one request at a time keeps coming.
    for _ in 0..30 {
        tokio::time::advance(secs(1)).await;
        pool.checkout(Instant::now()).expect("idle").release(Instant::now());
        pool.evict_expired(Instant::now());
    }
    assert_eq!(pool.recent_peak(), 1);
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed(CloseReason::AboveDemand)), (1, 7));
}

#[tokio::test(start_paused = true)]
async fn global_budget_caps_idle_across_pools() {
    let budget = Arc::new(IdleBudget::new(3));
    let a = Pool::with_budget(PoolConfig::default(), Some(Arc::clone(&budget)));
    let b = Pool::with_budget(PoolConfig::default(), Some(Arc::clone(&budget)));
    open_all_then_release(&a, &[1, 2]).await;
    open_all_then_release(&b, &[3, 4]).await;
    assert_eq!(budget.idle(), 3);
    assert_eq!(b.stats().snapshot().closed(CloseReason::BudgetSpent), 1);
    // Taking one out frees room in the budget for the other pool.
    let taken = a.checkout(Instant::now()).unwrap();
    assert_eq!(budget.idle(), 2);
    open_all_then_release(&b, &[5]).await;
    assert_eq!(budget.idle(), 3);
    drop(taken);
    a.clear_for(CloseReason::Shutdown);
    b.clear_for(CloseReason::Shutdown);
    assert_eq!(budget.idle(), 0);
}

#[tokio::test(start_paused = true)]
async fn no_ceiling_by_default_so_every_connection_of_a_burst_idles() {
    let pool = Pool::new(PoolConfig::default());
    let ids: Vec<u32> = (1..=1000).collect();
    open_all_then_release(&pool, &ids).await;
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed_total()), (1000, 0));
}

#[tokio::test(start_paused = true)]
async fn a_connection_returning_while_others_are_busy_stays_though_the_peak_was_forgotten() {
    let pool = Pool::new(PoolConfig { idle_timeout: secs(3600), ..PoolConfig::default() });
    let mut busy = Vec::new();
    for id in 1..=3 {
        busy.push(open(&pool, id).await);
    }
    // Long requests: the peak they set is older than two demand windows.
    tokio::time::advance(secs(60)).await;
    busy.remove(0).release(Instant::now());
    // Two requests are still in flight and none is idle: it is wanted.
    assert_eq!(pool.stats().snapshot().idle, 1);
    pool.evict_expired(Instant::now());
    assert_eq!(pool.stats().snapshot().idle, 1, "two busy, one idle: kept");
    drop(busy);
    pool.evict_expired(Instant::now());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::AboveDemand), 1);
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_gets_the_returning_connection_past_ceiling_and_budget() {
    let budget = Arc::new(IdleBudget::new(0));
    let config = PoolConfig { max_connections: 1, max_idle: Some(0), ..PoolConfig::default() };
    let pool = Pool::with_budget(config, Some(Arc::clone(&budget)));
    let busy = open(&pool, 1).await;
    let waiter = wait_for_idle(&pool);
    tokio::time::advance(Duration::from_millis(100)).await;
    busy.release(Instant::now());
    assert_eq!(waiter.await.unwrap(), 1);
    let snap = pool.stats().snapshot();
    assert_eq!(snap.closed(CloseReason::AboveDemand) + snap.closed(CloseReason::BudgetSpent), 0);
    assert_eq!((snap.reused, budget.idle()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn server_advertised_idle_timeout_tightens_the_pool_s() {
    let pool = Pool::new(PoolConfig { idle_timeout: secs(60), ..PoolConfig::default() });
    let mut conn = open(&pool, 1).await;
    conn.limit_by_origin(OriginLimits { idle: Some(secs(4)), remaining_requests: None });
    conn.release(Instant::now());
    tokio::time::advance(secs(4)).await;
    assert!(pool.checkout(Instant::now()).is_none());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::IdleTimeout), 1);
}

#[tokio::test(start_paused = true)]
async fn server_advertised_zero_timeout_or_no_requests_left_closes_on_release() {
    let pool = Pool::new(PoolConfig::default());
    let mut conn = open(&pool, 1).await;
    conn.limit_by_origin(OriginLimits { idle: Some(Duration::ZERO), remaining_requests: None });
    conn.release(Instant::now());
    let mut conn = open(&pool, 2).await;
    conn.limit_by_origin(OriginLimits { idle: None, remaining_requests: Some(0) });
    conn.release(Instant::now());
    let snap = pool.stats().snapshot();
    assert_eq!(snap.idle, 0);
    assert_eq!(snap.closed(CloseReason::IdleTimeout), 1);
    assert_eq!(snap.closed(CloseReason::MaxRequests), 1);
}

#[tokio::test(start_paused = true)]
async fn dropped_checkout_counts_as_error_and_keeps_gauges_right() {
    let pool = Pool::new(PoolConfig::default());
    open_all_then_release(&pool, &[1]).await;
    let got = pool.checkout(Instant::now()).unwrap();
    assert_eq!(pool.stats().snapshot().active, 1);
    drop(got);
    let snap = pool.stats().snapshot();
    assert_eq!((snap.active, snap.idle, snap.closed(CloseReason::Error)), (0, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn clear_closes_all_idle_for_shutdown() {
    let pool = Pool::new(PoolConfig::default());
    open_all_then_release(&pool, &[1, 2]).await;
    pool.clear_for(CloseReason::Shutdown);
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed(CloseReason::Shutdown)), (0, 2));
}

fn limited(max_connections: usize, queue_size: usize) -> Pool<FakeConn> {
    Pool::new(PoolConfig {
        max_connections,
        queue_size,
        queue_timeout: secs(5),
        ..PoolConfig::default()
    })
}

#[tokio::test(start_paused = true)]
async fn over_max_connections_a_request_waits_for_a_released_one() {
    let pool = limited(1, 10);
    let busy = open(&pool, 1).await;
    let waiter = wait_for_idle(&pool);
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(pool.stats().snapshot().waiting, 1);
    busy.release(Instant::now());
    assert_eq!(waiter.await.unwrap(), 1);
    assert_eq!(pool.stats().snapshot().waiting, 0);
}

#[tokio::test(start_paused = true)]
async fn a_closed_connection_frees_its_slot_for_a_waiter() {
    let pool = limited(1, 10);
    let busy = open(&pool, 1).await;
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { matches!(pool.acquire().await, Ok(Checkout::Connect(_))) })
    };
    tokio::time::advance(Duration::from_millis(100)).await;
    busy.discard(CloseReason::Error);
    assert!(waiter.await.unwrap(), "the waiter may open a new connection");
}

#[tokio::test(start_paused = true)]
async fn queue_times_out_and_full_queue_refuses_at_once() {
    let pool = limited(1, 1);
    let _busy = open(&pool, 1).await;
    let first = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.acquire().await.err() })
    };
    tokio::time::advance(Duration::from_millis(10)).await;
    assert!(matches!(pool.acquire().await, Err(Exhausted::QueueFull { waiting: 1 })));
    tokio::time::advance(secs(5)).await;
    let waited = match first.await.unwrap() {
        Some(Exhausted::QueueTimeout { waited }) => waited,
        _ => panic!("expected a queue timeout"),
    };
    assert!(waited >= secs(5));
    let snap = pool.stats().snapshot();
    assert_eq!((snap.queue_full, snap.queue_timeouts, snap.waiting), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn failed_connect_returns_its_permit() {
    let pool = limited(1, 0);
    let permit = pool.acquire_fresh().await.unwrap();
    assert!(matches!(pool.acquire().await, Err(Exhausted::QueueFull { .. })));
    drop(permit);
    assert!(pool.acquire_fresh().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn requests_still_connecting_count_as_demand() {
    // Four requests start together; the first finishes before the others have
    // connected. All four connections are still wanted.
    let pool = Pool::new(PoolConfig::default());
    let mut permits = Vec::new();
    for _ in 0..4 {
        permits.push(pool.acquire_fresh().await.unwrap());
    }
    for (id, permit) in permits.into_iter().enumerate() {
        pool.adopt(FakeConn::open(id as u32), permit, Instant::now()).release(Instant::now());
    }
    let snap = pool.stats().snapshot();
    assert_eq!((snap.idle, snap.closed_total()), (4, 0));
}

#[tokio::test(start_paused = true)]
async fn retired_pool_closes_idle_now_and_busy_connections_when_they_come_back() {
    let pool = Pool::new(PoolConfig::default());
    open_all_then_release(&pool, &[1, 2]).await;
    let busy = pool.checkout(Instant::now()).expect("idle conn");
    assert!(pool.has_idle());
    pool.retire();
    assert!(pool.is_retired());
    assert!(!pool.has_idle());
    assert_eq!(pool.stats().snapshot().closed(CloseReason::Retired), 1, "the idle one");
    assert_eq!(pool.open_connections(), 1, "the busy one is still open");
    busy.release(Instant::now());
    let snap = pool.stats().snapshot();
    assert_eq!(snap.closed(CloseReason::Retired), 2, "closed on its way back");
    assert_eq!(snap.idle, 0);
    assert_eq!(pool.open_connections(), 0);
}

#[tokio::test(start_paused = true)]
async fn clear_for_counts_the_reason_and_leaves_busy_connections_alone() {
    let pool = Pool::new(PoolConfig::default());
    open_all_then_release(&pool, &[1, 2]).await;
    let busy = pool.checkout(Instant::now()).expect("idle conn");
    pool.clear_for(CloseReason::Ejected);
    assert_eq!(pool.stats().snapshot().closed(CloseReason::Ejected), 1);
    busy.release(Instant::now());
    assert_eq!(pool.stats().snapshot().idle, 1, "a cleared pool still takes connections back");
}

/// A request of `priority` that expects a connection, idle or new, from `pool`.
fn ask(pool: &Pool<FakeConn>, priority: crate::Priority) -> tokio::task::JoinHandle<bool> {
    let pool = pool.clone();
    tokio::spawn(async move { pool.acquire_as(priority).await.is_ok() })
}

#[tokio::test(start_paused = true)]
async fn the_second_class_never_takes_the_reserve() {
    use crate::Priority::{First, Second};
    let pool = limited(8, 8);
    let mut busy = Vec::new();
    for id in 0..6 {
        busy.push(open(&pool, id).await);
    }
    // Six of eight busy: the last quarter is the first class's.
    let second = ask(&pool, Second);
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(!second.is_finished(), "the second class waits at the reserve");
    assert!(ask(&pool, First).await.unwrap(), "the first class takes the reserve");
    // One of the six comes back: below the reserve again, the second class goes.
    busy.pop().unwrap().release(Instant::now());
    assert!(second.await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_waiting_first_class_request_goes_before_the_second() {
    use crate::Priority::{First, Second};
    let pool = limited(4, 8);
    let mut busy = Vec::new();
    for id in 0..4 {
        busy.push(open(&pool, id).await);
    }
    let second = ask(&pool, Second);
    tokio::time::advance(Duration::from_millis(10)).await;
    let first = ask(&pool, First);
    tokio::time::advance(Duration::from_millis(10)).await;
    busy.pop().unwrap().release(Instant::now());
    assert!(first.await.unwrap(), "the later first-class request got the connection");
    assert!(!second.is_finished());
    busy.pop().unwrap().release(Instant::now());
    assert!(second.await.unwrap(), "then the second");
}

#[tokio::test(start_paused = true)]
async fn the_second_class_may_fill_half_the_queue() {
    use crate::Priority::{First, Second};
    let pool = limited(2, 8);
    let _busy = (open(&pool, 1).await, open(&pool, 2).await);
    let _waiting: Vec<_> = (0..4).map(|_| ask(&pool, Second)).collect();
    tokio::time::advance(Duration::from_millis(10)).await;
    let full = pool.acquire_as(Second).await;
    assert!(
        matches!(full, Err(Exhausted::SecondClassFull { waiting: 4 })),
        "{:?}",
        full.as_ref().err()
    );
    let first = ask(&pool, First);
    tokio::time::advance(Duration::from_millis(10)).await;
    assert!(!first.is_finished(), "the first class still queues behind the busy ones");
    assert_eq!(pool.stats().snapshot().waiting, 5);
}
