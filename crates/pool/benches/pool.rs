//! Micro benchmarks of the pool's hot path: a checkout and a release with nothing else
//! going on, then the same from N tasks sharing one backend's pool on two worker
//! threads. Each runs against a naive `Mutex<HashMap<Key, Vec<Conn>>>` pool beside it,
//! so every number has a comparison.
//!
//! Run with `cargo bench -p holdfast-pool` (add `-- --warm-up-time 1 --measurement-time 2`
//! for a quick look). The naive pool does less: no expiry, no limits, no demand bound,
//! no counters, no idle budget. What the comparison shows is what those cost.
//!
//! Time is read once per sample and passed in, as the proxy reads the clock once per
//! request and hands it to the pool: the clock read itself is not measured. (tokio's
//! `Instant::now` takes a lock with the `test-util` feature the pool's tests enable, so
//! reading it here would measure that lock.)

use std::collections::HashMap;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use holdfast_pool::{IdleBudget, Pool, PoolConfig, Poolable, Pooled};
use tokio::time::Instant;

/// Stands in for an upstream connection: a handle the pool moves around, always open.
struct FakeConn {
    id: u64,
}

impl Poolable for FakeConn {
    fn is_open(&self) -> bool {
        black_box(self.id) != u64::MAX
    }
}

/// A key as the naive pool needs one: the backend's address.
type Key = SocketAddr;

/// The comparison: one map from backend to its idle connections, behind one lock.
#[derive(Default)]
struct NaivePool {
    idle: Mutex<HashMap<Key, Vec<FakeConn>>>,
}

impl NaivePool {
    fn checkout(&self, key: &Key) -> Option<FakeConn> {
        self.idle.lock().unwrap().get_mut(key).and_then(Vec::pop)
    }

    fn release(&self, key: Key, conn: FakeConn) {
        self.idle.lock().unwrap().entry(key).or_default().push(conn);
    }
}

/// Backends in the naive pool's map, so its lookup hashes into a map of a realistic
/// size. holdfast's pool needs no lookup: each backend holds its own `Pool`.
const BACKENDS: u16 = 16;

fn key(n: u16) -> Key {
    SocketAddr::from(([127, 0, 0, 1], 8000 + n))
}

/// Limits that never retire a connection during a run, so every checkout after the
/// first finds one; with a process-wide idle budget, as the proxy has.
fn pool() -> Pool<FakeConn> {
    let config = PoolConfig {
        idle_timeout: Duration::from_secs(3600),
        max_requests: 0,
        max_lifetime: Duration::ZERO,
        ..PoolConfig::default()
    };
    Pool::with_budget(config, Some(Arc::new(IdleBudget::new(100_000))))
}

fn now() -> Instant {
    Instant::from_std(std::time::Instant::now())
}

/// `elapsed` for `done` operations, rescaled to the `iters` criterion asked for (the
/// tasks share them out rounded up).
fn per_iter(elapsed: Duration, iters: u64, done: u64) -> Duration {
    elapsed.mul_f64(iters as f64 / done as f64)
}

/// An idle connection, else a new one through the pool's permit (as `Backend::lease`
/// does, minus the socket).
async fn lease(pool: &Pool<FakeConn>, now: Instant, id: u64) -> Pooled<FakeConn> {
    match pool.checkout(now) {
        Some(conn) => conn,
        None => {
            let permit = pool.acquire_fresh().await.expect("max_connections is not reached");
            pool.adopt(FakeConn { id }, permit, now)
        }
    }
}

fn uncontended(c: &mut Criterion) {
    let mut group = c.benchmark_group("checkout_release");

    let holdfast = pool();
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    rt.block_on(lease(&holdfast, now(), 0)).release(now());
    group.bench_function("holdfast_pool", |b| {
        let now = now();
        b.iter(|| {
            let conn = holdfast.checkout(now).expect("an idle connection");
            black_box(conn.get());
            conn.release(now);
        });
    });

    let naive = NaivePool::default();
    for n in 0..BACKENDS {
        naive.release(key(n), FakeConn { id: u64::from(n) });
    }
    let k = key(BACKENDS / 2);
    group.bench_function("naive_mutex_hashmap", |b| {
        b.iter(|| {
            let conn = naive.checkout(black_box(&k)).expect("an idle connection");
            black_box(&conn);
            naive.release(k, conn);
        });
    });

    group.finish();
}

/// `tasks` tasks on two worker threads share one backend's pool; each checks a
/// connection out, yields once while it holds it (the exchange), and releases it.
/// Reported time is wall time per checkout-and-release, across all tasks.
fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended");
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("runtime");

    for tasks in [2u64, 16, 128] {
        group.bench_with_input(BenchmarkId::new("holdfast_pool", tasks), &tasks, |b, &tasks| {
            let pool = pool();
            b.iter_custom(|iters| {
                let rounds = iters.div_ceil(tasks);
                rt.block_on(async {
                    let started = std::time::Instant::now();
                    let handles: Vec<_> = (0..tasks)
                        .map(|t| {
                            let pool = pool.clone();
                            tokio::spawn(async move {
                                let now = now();
                                for _ in 0..rounds {
                                    let conn = lease(&pool, now, t).await;
                                    tokio::task::yield_now().await;
                                    conn.release(now);
                                }
                            })
                        })
                        .collect();
                    for h in handles {
                        h.await.expect("task ran");
                    }
                    per_iter(started.elapsed(), iters, rounds * tasks)
                })
            });
        });

        group.bench_with_input(
            BenchmarkId::new("naive_mutex_hashmap", tasks),
            &tasks,
            |b, &tasks| {
                let naive = Arc::new(NaivePool::default());
                for n in 0..BACKENDS {
                    naive.release(key(n), FakeConn { id: u64::from(n) });
                }
                let k = key(BACKENDS / 2);
                b.iter_custom(|iters| {
                    let rounds = iters.div_ceil(tasks);
                    rt.block_on(async {
                        let started = std::time::Instant::now();
                        let handles: Vec<_> = (0..tasks)
                            .map(|t| {
                                let naive = Arc::clone(&naive);
                                tokio::spawn(async move {
                                    for _ in 0..rounds {
                                        let conn = naive.checkout(&k).unwrap_or(FakeConn { id: t });
                                        tokio::task::yield_now().await;
                                        naive.release(k, conn);
                                    }
                                })
                            })
                            .collect();
                        for h in handles {
                            h.await.expect("task ran");
                        }
                        per_iter(started.elapsed(), iters, rounds * tasks)
                    })
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, uncontended, contended);
criterion_main!(benches);
