//! [`Acme::follow`] without a CA: the directory is a port nothing listens on, so each
//! name's first order fails at once and its retry waits an hour. What a change of names
//! starts, stops, serves and counts is then plain to see: a new name gets a
//! placeholder and one order, a removed name's certificate leaves the store, and a
//! name kept keeps its task (its failure count, its retry time, no new order).

use super::pebble::free_port;
use super::*;

/// Settings whose orders all fail: nothing listens at the directory.
fn unreachable_ca(scratch: &Scratch) -> AcmeConfig {
    let ca_file = scratch.path().join("ca.pem");
    let ca = rcgen::generate_simple_self_signed(vec!["ca.holdfast.test".to_string()]).unwrap();
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    AcmeConfig {
        directory: format!("https://{}/dir", free_port()),
        storage: scratch.path().join("storage"),
        ca: Some(ca_file),
        retry_base: Duration::from_secs(3600),
        ..AcmeConfig::new()
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| n.to_string()).collect()
}

/// Waits until `acme` has counted `n` failed orders, then a little longer, and checks
/// no more come.
async fn settle_at_failed_orders(acme: &Acme, n: u64) {
    let failed = || acme.snapshot().orders_failed >= n;
    wait_until(&format!("{n} orders failed"), ORDER_DEADLINE, String::new, failed).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(acme.snapshot().orders_failed, n, "an order more than expected");
}

fn listed(acme: &Acme) -> Vec<String> {
    acme.snapshot().names.into_iter().map(|s| s.name).collect()
}

#[tokio::test]
async fn follow_starts_new_names_stops_removed_ones_and_leaves_kept_ones_alone() {
    init_logs();
    let scratch = Scratch::new("follow");
    let certs = Arc::new(DynamicCerts::default());
    let config = unreachable_ca(&scratch);
    let start = names(&["a.holdfast.test", "b.holdfast.test"]);
    let mut acme = Acme::start(config, start, Arc::clone(&certs)).expect("start the manager");
    settle_at_failed_orders(&acme, 2).await;
    let kept_cert = certs.issued("b.holdfast.test").expect("b's placeholder");
    let kept_status = acme.status("b.holdfast.test").unwrap();
    assert_eq!((kept_status.failures, kept_status.serving), (1, Serving::Placeholder));

    let changes = acme.follow(&names(&["c.holdfast.test", "b.holdfast.test"])).await;
    assert_eq!(changes.added, ["c.holdfast.test"]);
    assert_eq!(changes.removed, ["a.holdfast.test"]);
    // The removed name is no longer served or shown; the new one is served at once.
    assert!(certs.issued("a.holdfast.test").is_none(), "a is still served");
    assert!(acme.status("a.holdfast.test").is_none());
    let placeholder = Harness::served(&certs, "c.holdfast.test").expect("c's placeholder");
    assert!(is_self_signed(&placeholder));
    assert_eq!(listed(&acme), ["c.holdfast.test", "b.holdfast.test"], "in the order wanted");
    // The new name orders once; the kept name does not order again.
    settle_at_failed_orders(&acme, 3).await;
    let still = certs.issued("b.holdfast.test").unwrap();
    assert!(Arc::ptr_eq(&kept_cert, &still), "b's certificate was replaced");
    assert_eq!(acme.status("b.holdfast.test").unwrap(), kept_status, "b's task was restarted");

    // The same names again: nothing changes, nothing is ordered.
    let same = acme.follow(&names(&["b.holdfast.test", "c.holdfast.test"])).await;
    assert_eq!(same, NameChanges::default());
    assert_eq!(listed(&acme), ["b.holdfast.test", "c.holdfast.test"]);
    settle_at_failed_orders(&acme, 3).await;

    // A name that comes back starts over: served at once, ordered once.
    let back =
        acme.follow(&names(&["a.holdfast.test", "b.holdfast.test", "c.holdfast.test"])).await;
    assert_eq!((back.added.as_slice(), back.removed.len()), (&names(&["a.holdfast.test"])[..], 0));
    assert!(certs.issued("a.holdfast.test").is_some());
    settle_at_failed_orders(&acme, 4).await;
}
