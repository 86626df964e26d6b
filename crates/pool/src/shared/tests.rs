use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::{
    Checkout, Claim, ClaimError, CloseReason, Exhausted, Found, Pool, PoolConfig, Poolable,
    Shareable, SharedPool,
};

/// A shared connection: an id, a capacity the test sets, and an `open` flag.
struct FakeShared {
    id: usize,
    capacity: usize,
    open: Arc<AtomicBool>,
}

impl Shareable for FakeShared {
    fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

/// An exclusive connection, for the bound both kinds share.
struct FakeConn;

impl Poolable for FakeConn {
    fn is_open(&self) -> bool {
        true
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Opens connections of `capacity` as a caller would, counting them in `opened`.
struct Opener {
    capacity: usize,
    opened: AtomicUsize,
}

impl Opener {
    fn new(capacity: usize) -> Arc<Opener> {
        Arc::new(Opener { capacity, opened: AtomicUsize::new(0) })
    }

    /// Room for one request, opening a connection (which takes `connect` to open) when
    /// told to.
    async fn claim(
        &self,
        pool: &SharedPool<FakeShared>,
        connect: Duration,
    ) -> Result<Claim<FakeShared>, ClaimError> {
        let mut seek = pool.seek();
        loop {
            match seek.next().await? {
                Found::Claim(claim) => return Ok(claim),
                Found::Open(opening) => {
                    tokio::time::sleep(connect).await;
                    let id = self.opened.fetch_add(1, Ordering::SeqCst) + 1;
                    let open = Arc::new(AtomicBool::new(true));
                    opening.adopt(FakeShared { id, capacity: self.capacity, open });
                }
            }
        }
    }

    fn opened(&self) -> usize {
        self.opened.load(Ordering::SeqCst)
    }
}

fn pools(config: PoolConfig) -> (Pool<FakeConn>, SharedPool<FakeShared>) {
    let pool = Pool::new(config);
    let shared = pool.shared(100);
    (pool, shared)
}

/// `n` requests at once, each holding its room for `hold`.
async fn burst(
    shared: &SharedPool<FakeShared>,
    opener: &Arc<Opener>,
    n: usize,
    hold: Duration,
) -> Vec<Result<(), ClaimError>> {
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (shared, opener) = (shared.clone(), Arc::clone(opener));
        requests.spawn(async move {
            let claim = opener.claim(&shared, Duration::from_millis(10)).await?;
            tokio::time::sleep(hold).await;
            claim.answered();
            drop(claim);
            Ok(())
        });
    }
    let mut done = Vec::new();
    while let Some(result) = requests.join_next().await {
        done.push(result.expect("request task"));
    }
    done
}

#[tokio::test(start_paused = true)]
async fn requests_fill_connections_up_to_their_capacity_before_another_opens() {
    let (pool, shared) = pools(PoolConfig::default());
    let opener = Opener::new(10);
    let done = burst(&shared, &opener, 100, Duration::from_millis(100)).await;
    assert!(done.iter().all(Result::is_ok));
    // 100 at once, 10 each: 10 connections, no more; the requests that came while
    // one was opening waited for it.
    assert_eq!(opener.opened(), 10);
    assert_eq!(shared.snapshot().connections, 10);
    // One at a time: the oldest connection carries them all.
    for _ in 0..20 {
        drop(opener.claim(&shared, Duration::ZERO).await.unwrap());
    }
    assert_eq!(opener.opened(), 10);
    let stats = pool.stats().snapshot();
    assert_eq!((stats.opened, stats.idle, stats.active), (10, 10, 0));
    assert_eq!(shared.snapshot().requests, 120);
    // The first request on each connection is its only one not reused.
    assert_eq!(stats.reused, 110);
}

#[tokio::test(start_paused = true)]
async fn after_a_peer_stopped_a_connection_new_ones_carry_no_more_than_it_answered() {
    let (pool, shared) = pools(PoolConfig::default());
    let opener = Opener::new(100);
    for _ in 0..3 {
        let claim = opener.claim(&shared, Duration::ZERO).await.unwrap();
        claim.answered();
    }
    let fourth = opener.claim(&shared, Duration::ZERO).await.unwrap();
    assert!(fourth.peer_stopped());
    assert!(!fourth.peer_stopped(), "one stop per connection");
    drop(fourth);
    // It drained and closed with its last request.
    assert_eq!(pool.stats().snapshot().closed(CloseReason::OriginClosed), 1);
    for _ in 0..7 {
        drop(opener.claim(&shared, Duration::ZERO).await.unwrap());
    }
    // 3 requests a connection from then on: 7 more need 3 more connections.
    assert_eq!(opener.opened(), 4);
    // Once the memory fades, the youngest connection (one request so far) carries as
    // many as it says again.
    tokio::time::advance(crate::LOWERED_CAPACITY_MEMORY).await;
    for _ in 0..10 {
        drop(opener.claim(&shared, Duration::ZERO).await.unwrap());
    }
    assert_eq!(opener.opened(), 4);
}

#[tokio::test(start_paused = true)]
async fn exclusive_and_shared_connections_share_one_bound() {
    let config = PoolConfig { max_connections: 3, queue_timeout: secs(1), ..Default::default() };
    let (pool, shared) = pools(config);
    let opener = Opener::new(1);
    // Two exclusive connections, one idle and one busy.
    let Ok(Checkout::Connect(permit)) = pool.acquire().await else { panic!("no permit") };
    let first = pool.adopt(FakeConn, permit, Instant::now());
    let Ok(Checkout::Connect(permit)) = pool.acquire().await else { panic!("no permit") };
    let _busy = pool.adopt(FakeConn, permit, Instant::now());
    first.release(Instant::now());
    // Room for one shared connection of one request; a second request waits in vain.
    let held = opener.claim(&shared, Duration::ZERO).await.unwrap();
    let waited = opener.claim(&shared, Duration::ZERO).await;
    assert!(matches!(waited, Err(ClaimError::Exhausted(Exhausted::QueueTimeout { .. }))));
    assert_eq!(opener.opened(), 1);
    assert_eq!(pool.open_connections(), 3);
    // An exclusive request now gets only the idle one, then waits.
    let Ok(Checkout::Idle(_idle)) = pool.acquire().await else { panic!("not the idle one") };
    assert!(matches!(pool.acquire().await, Err(Exhausted::QueueTimeout { .. })));
    // The shared connection closes: its slot goes to a waiting exclusive request.
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { matches!(pool.acquire().await, Ok(Checkout::Connect(_))) })
    };
    tokio::task::yield_now().await;
    shared.retire();
    drop(held);
    assert!(waiter.await.unwrap(), "the freed slot went to the exclusive request");
    let stats = pool.stats().snapshot();
    assert_eq!(stats.opened, 3);
    assert_eq!(stats.closed(CloseReason::Retired), 1);
    assert_eq!(stats.queue_timeouts, 2);
}

#[tokio::test(start_paused = true)]
async fn a_shared_request_waits_for_an_exclusive_slot_to_free() {
    let config = PoolConfig { max_connections: 1, ..Default::default() };
    let (pool, shared) = pools(config);
    let Ok(Checkout::Connect(permit)) = pool.acquire().await else { panic!("no permit") };
    let exclusive = pool.adopt(FakeConn, permit, Instant::now());
    let opener = Opener::new(10);
    let waiting = {
        let (shared, opener) = (shared.clone(), Arc::clone(&opener));
        tokio::spawn(async move { opener.claim(&shared, Duration::ZERO).await.is_ok() })
    };
    tokio::time::sleep(secs(1)).await;
    assert_eq!(opener.opened(), 0);
    exclusive.discard(CloseReason::OriginClosed);
    assert!(waiting.await.unwrap());
    assert_eq!(opener.opened(), 1);
}

#[tokio::test(start_paused = true)]
async fn idle_shared_connections_close_after_idle_timeout() {
    let config = PoolConfig { idle_timeout: secs(30), ..Default::default() };
    let (pool, shared) = pools(config);
    let opener = Opener::new(10);
    drop(opener.claim(&shared, Duration::ZERO).await.unwrap());
    assert!(shared.has_idle());
    tokio::time::advance(secs(29)).await;
    shared.evict_expired(Instant::now());
    assert_eq!(shared.snapshot().connections, 1);
    tokio::time::advance(secs(1)).await;
    shared.evict_expired(Instant::now());
    assert_eq!(shared.snapshot().connections, 0);
    let stats = pool.stats().snapshot();
    assert_eq!((stats.idle, stats.closed(CloseReason::IdleTimeout)), (0, 1));
    assert_eq!(pool.open_connections(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_reached_max_requests_drains_and_closes_with_its_last() {
    let config = PoolConfig { max_requests: 2, ..Default::default() };
    let (pool, shared) = pools(config);
    let opener = Opener::new(10);
    let a = opener.claim(&shared, Duration::ZERO).await.unwrap();
    let b = opener.claim(&shared, Duration::ZERO).await.unwrap();
    // Spent: the third request opens another connection; the first stays open while
    // it carries requests.
    let c = opener.claim(&shared, Duration::ZERO).await.unwrap();
    assert_eq!(opener.opened(), 2);
    assert_eq!(shared.snapshot().connections, 2);
    drop(a);
    assert_eq!(shared.snapshot().connections, 2);
    drop(b);
    assert_eq!(shared.snapshot().connections, 1);
    assert_eq!(pool.stats().snapshot().closed(CloseReason::MaxRequests), 1);
    drop(c);
}

#[tokio::test(start_paused = true)]
async fn a_connection_the_peer_closed_takes_no_request() {
    let (pool, shared) = pools(PoolConfig::default());
    let opener = Opener::new(10);
    let claim = opener.claim(&shared, Duration::ZERO).await.unwrap();
    claim.get().open.store(false, Ordering::SeqCst);
    let other = opener.claim(&shared, Duration::ZERO).await.unwrap();
    assert_eq!(other.get().id, 2);
    drop(claim);
    assert_eq!(pool.stats().snapshot().closed(CloseReason::OriginClosed), 1);
    assert_eq!(shared.snapshot().connections, 1);
}

#[tokio::test(start_paused = true)]
async fn requests_waiting_on_a_failed_open_fail_with_it() {
    let (pool, shared) = pools(PoolConfig::default());
    // It started looking before the open began.
    let waiter = {
        let shared = shared.clone();
        let (looking, look) = tokio::sync::oneshot::channel::<()>();
        let waiter = tokio::spawn(async move {
            let mut seek = shared.seek();
            let _ = look.await;
            seek.next().await.err()
        });
        tokio::task::yield_now().await;
        (waiter, looking)
    };
    let mut seek = shared.seek();
    let Ok(Found::Open(opening)) = seek.next().await else { panic!("expected to open") };
    let (waiter, looking) = waiter;
    looking.send(()).unwrap();
    tokio::task::yield_now().await;
    opening.failed();
    assert_eq!(waiter.await.unwrap(), Some(ClaimError::OpenFailed));
    drop(seek);
    assert_eq!(pool.open_connections(), 0);
    // A request that comes later tries again.
    assert!(matches!(shared.seek().next().await, Ok(Found::Open(_))));
}

#[tokio::test(start_paused = true)]
async fn an_opening_that_cannot_be_shared_becomes_an_exclusive_connection() {
    let config = PoolConfig { max_connections: 1, ..Default::default() };
    let (pool, shared) = pools(config);
    let mut seek = shared.seek();
    let Ok(Found::Open(opening)) = seek.next().await else { panic!("expected to open") };
    let permit = opening.into_permit(&pool).expect("the same bound");
    assert_eq!(pool.open_connections(), 1);
    pool.adopt(FakeConn, permit, Instant::now()).release(Instant::now());
    assert_eq!(pool.open_connections(), 1);
    assert!(matches!(pool.acquire().await, Ok(Checkout::Idle(_))));
    // A pool of another backend does not take it.
    let other = Pool::<FakeConn>::new(PoolConfig::default());
    drop(seek);
    let shared_again = pool.shared::<FakeShared>(10);
    let pool2 = Pool::<FakeConn>::new(PoolConfig::default());
    let shared2 = pool2.shared::<FakeShared>(10);
    let mut seek = shared2.seek();
    let Ok(Found::Open(opening)) = seek.next().await else { panic!("expected to open") };
    assert!(opening.into_permit(&other).is_none());
    assert_eq!(pool2.open_connections(), 0);
    drop(shared_again);
}

#[tokio::test(start_paused = true)]
async fn retire_closes_idle_connections_and_drains_busy_ones() {
    let (pool, shared) = pools(PoolConfig::default());
    let opener = Opener::new(1);
    let busy = opener.claim(&shared, Duration::ZERO).await.unwrap();
    drop(opener.claim(&shared, Duration::ZERO).await.unwrap());
    assert_eq!(shared.snapshot().connections, 2);
    shared.retire();
    assert_eq!(shared.snapshot().connections, 1);
    assert!(matches!(shared.seek().next().await, Err(ClaimError::Retired)));
    drop(busy);
    assert_eq!(shared.snapshot().connections, 0);
    assert_eq!(pool.stats().snapshot().closed(CloseReason::Retired), 2);
    assert_eq!(pool.open_connections(), 0);
}
