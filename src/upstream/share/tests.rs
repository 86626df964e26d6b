use super::*;

fn config(max_connections: usize) -> PoolConfig {
    PoolConfig { max_connections, ..PoolConfig::default() }
}

fn from(address: u64) -> Claimant {
    Claimant { address, connection: 0 }
}

/// `n` claims for `claimant`.
fn hold(shares: &Arc<Shares>, claimant: Claimant, n: usize, config: &PoolConfig) -> Vec<Claim> {
    (0..n).map(|_| shares.claim(claimant, config)).collect()
}

#[test]
fn an_uncrowded_backend_gives_every_claim_the_first_class() {
    let shares = Arc::new(Shares::default());
    let config = config(100);
    let held = hold(&shares, from(1), 75, &config);
    assert!(held.iter().all(|c| c.priority == Priority::First), "nobody else wants it");
    assert_eq!(shares.snapshot().most, 75);
    drop(held);
    let snapshot = shares.snapshot();
    assert_eq!((snapshot.addresses, snapshot.total), (0, 0), "entries go with their claims");
}

#[test]
fn on_a_crowded_backend_a_client_over_its_share_comes_second() {
    let shares = Arc::new(Shares::default());
    let config = config(100);
    let mut greedy = hold(&shares, from(1), 75, &config);
    assert_eq!(shares.claim(from(1), &config).priority, Priority::Second);
    // Another address is under its quarter: first, crowded or not, up to its share.
    let other = hold(&shares, from(2), 25, &config);
    assert!(other.iter().all(|c| c.priority == Priority::First));
    assert_eq!(shares.claim(from(2), &config).priority, Priority::Second, "its 26th");
    // Less crowded again: first for everyone.
    drop(other);
    greedy.truncate(70);
    assert_eq!(shares.claim(from(1), &config).priority, Priority::First);
}

#[test]
fn a_client_connection_has_a_share_of_its_own() {
    let shares = Arc::new(Shares::default());
    let config = config(100);
    let _crowd = hold(&shares, from(1), 75, &config);
    let conn = Claimant { address: 7, connection: 99 };
    let held = hold(&shares, conn, 12, &config);
    assert!(held.iter().all(|c| c.priority == Priority::First));
    assert_eq!(shares.claim(conn, &config).priority, Priority::Second, "at its eighth");
    let other_conn = Claimant { address: 7, connection: 100 };
    assert_eq!(shares.claim(other_conn, &config).priority, Priority::First);
}

#[test]
fn no_max_connections_means_no_shares() {
    let shares = Arc::new(Shares::default());
    let held = hold(&shares, from(1), 1000, &config(0));
    assert!(held.iter().all(|c| c.priority == Priority::First));
}
