use super::*;

fn config(memory_per_exchange: usize, file_per_exchange: u64) -> SpoolConfig {
    SpoolConfig {
        memory_per_exchange,
        file_per_exchange,
        memory_total: 1 << 30,
        file_total: Some(1 << 30),
        dir: std::env::temp_dir(),
    }
}

/// Everything `spool` holds, read back in order.
fn drain(spool: &mut Spool) -> Vec<u8> {
    let mut out = Vec::new();
    // Bounded: each round takes at least one byte of a finite spool.
    while !spool.is_empty() {
        let front = spool.front().expect("read back").to_vec();
        assert!(!front.is_empty(), "a spool with bytes has a front");
        spool.consume(front.len());
        out.extend_from_slice(&front);
    }
    out
}

/// `n` bytes counting up from `start`, so order and loss show.
fn bytes(start: usize, n: usize) -> Vec<u8> {
    (start..start + n).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn small_pushes_stay_in_memory_and_come_back_in_order() {
    let spools = Spools::new(config(64 * 1024, 0));
    let mut spool = spools.spool();
    spool.push(&[b"head ", b"body"]).await.expect("fits");
    spool.push(&[b" more"]).await.expect("fits");
    assert_eq!(spool.len, 14);
    assert_eq!(drain(&mut spool), b"head body more");
    assert_eq!(spools.snapshot().files, 0);
    assert_eq!(spools.file_in_use(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_memory_a_spool_uses_a_file_and_keeps_the_order() {
    let spools = Spools::new(config(4096, 10 << 20));
    let mut spool = spools.spool();
    let all = bytes(0, 1 << 20);
    for piece in all.chunks(5000) {
        spool.push(&[piece]).await.expect("fits in the file");
    }
    assert_eq!(spools.snapshot().files, 1);
    assert!(spools.file_in_use() > 0);
    // Half read back, then more pushed behind the file: still in order.
    let mut out = Vec::new();
    while out.len() < all.len() / 2 {
        let front = spool.front().expect("read back").to_vec();
        spool.consume(front.len());
        out.extend_from_slice(&front);
    }
    let more = bytes(all.len(), 100_000);
    spool.push(&[&more]).await.expect("fits");
    out.extend(drain(&mut spool));
    let mut expected = all;
    expected.extend_from_slice(&more);
    assert_eq!(out.len(), expected.len());
    assert!(out == expected, "bytes came back out of order or changed");
    assert_eq!(spools.file_in_use(), 0, "an empty spool holds no file bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_past_the_exchange_bound_is_refused_whole() {
    let spools = Spools::new(config(1024, 100_000));
    let mut spool = spools.spool();
    spool.push(&[&bytes(0, 90_000)]).await.expect("fits");
    assert_eq!(spool.push(&[&bytes(90_000, 20_000)]).await, Err(Full::Exchange(101_024)));
    assert_eq!(spool.len, 90_000, "nothing of a refused push is kept");
    spool.push(&[&bytes(90_000, 5_000)]).await.expect("what still fits is taken");
    assert_eq!(drain(&mut spool), bytes(0, 95_000));
    assert!(spools.snapshot().full >= 1);
}

#[tokio::test]
async fn memory_only_spools_refuse_what_their_memory_cannot_hold() {
    let spools = Spools::new(config(1000, 0));
    let mut spool = spools.spool();
    spool.push(&[&[1; 600]]).await.expect("fits");
    assert_eq!(spool.push(&[&[2; 600]]).await, Err(Full::Exchange(1000)));
    let n = spool.front().expect("in memory").len();
    spool.consume(n);
    spool.push(&[&[2; 600]]).await.expect("room again once the client took some");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_bounds_hold_across_spools_and_are_given_back() {
    let mut c = config(8192, 1 << 20);
    c.memory_total = 3 * 8192 + 2 * FILE_CHUNK as u64;
    c.file_total = Some(100_000);
    let spools = Spools::new(c);
    let mut a = spools.spool();
    let mut b = spools.spool();
    a.push(&[&bytes(0, 60_000)]).await.expect("a fits");
    assert_eq!(b.push(&[&bytes(0, 60_000)]).await, Err(Full::Process), "past the file total");
    assert!(spools.memory_in_use() <= 3 * 8192 + 2 * FILE_CHUNK as u64);
    drop(a);
    assert_eq!(spools.file_in_use(), 0);
    assert_eq!(spools.memory_in_use(), 0);
    b.push(&[&bytes(0, 60_000)]).await.expect("b fits once a is gone");
    assert_eq!(drain(&mut b), bytes(0, 60_000));
    b.shrink();
    drop(b);
    assert_eq!((spools.memory_in_use(), spools.file_in_use()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_spool_holds_little_memory_while_its_client_waits() {
    let spools = Spools::new(config(4096, 10 << 20));
    let mut spool = spools.spool();
    for piece in bytes(0, 300_000).chunks(10_000) {
        spool.push(&[piece]).await.expect("fits");
    }
    spool.settle().await;
    assert!(
        spools.memory_in_use() <= 4096 + 4096,
        "after settle only the front stays: {} bytes",
        spools.memory_in_use()
    );
    assert_eq!(drain(&mut spool), bytes(0, 300_000));
}

#[test]
fn the_default_file_total_is_half_the_free_space_at_most_16_gib() {
    let c = SpoolConfig { dir: std::env::temp_dir(), ..SpoolConfig::default() };
    let total = c.file_total_now();
    assert!(total > 0 && total <= MAX_DEFAULT_FILE_TOTAL, "{total}");
    let fixed = SpoolConfig { file_total: Some(123), ..c };
    assert_eq!(fixed.file_total_now(), 123);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_for_a_large_response_keeps_nothing_in_memory_once_settled() {
    let spools = Spools::new(config(32 * 1024, 10 << 20));
    let mut spool = spools.spool_for(Some(300_000));
    for piece in bytes(0, 300_000).chunks(10_000) {
        spool.push(&[piece]).await.expect("fits");
    }
    assert!(spools.memory_in_use() <= FILE_CHUNK as u64 + 4096, "only the tail");
    spool.settle().await;
    assert_eq!(spools.memory_in_use(), 0, "a client that never reads costs no memory");
    assert_eq!(drain(&mut spool), bytes(0, 300_000));
    // A small response stays in memory.
    let mut small = spools.spool_for(Some(1000));
    small.push(&[&bytes(0, 1000)]).await.expect("fits");
    assert_eq!(spools.snapshot().files, 1, "no second file");
}
