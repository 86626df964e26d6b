//! The certificate manager against a real `pebble` ACME CA on loopback: issuance
//! through HTTP-01 and TLS-ALPN-01, certificates that chain to pebble's root, restarts
//! that reuse stored certificates, renewal of short-lived certificates, failed
//! challenges reported and retried, and what is served before issuance. pebble
//! validates through the responders in `responder` (stand-ins for holdfast's
//! listeners), which serve from the same `DynamicCerts` the manager writes. `e2e` and
//! `reload` run holdfast itself against pebble; `follow` changes a manager's names
//! without a CA.
//!
//! Tests that need pebble skip without it, except under `CI=true`, where they fail.

mod dns;
mod e2e;
mod follow;
mod pebble;
mod reload;
mod responder;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls_pki_types::CertificateDer;

use super::certificate::read_leaf;
use super::storage::folder_name;
use super::*;
use dns::Dns;
use pebble::{Pebble, PebbleSetup};
use responder::{presented_chain, verified_chain, verify_chain, HttpResponder, TlsResponder};

/// Longest a test waits for an order to end: pebble answers in milliseconds.
const ORDER_DEADLINE: Duration = Duration::from_secs(20);

/// A folder of a test's own under the system's temporary folder, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("holdfast-acme-{test}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The one way a test skips (as `tests/it/support::skip_or_fail`): under `CI=true` it
/// fails instead, so a CI run never passes without testing.
#[track_caller]
fn skip_or_fail(why: &str) {
    if on_ci() {
        panic!("CI=true, so this test may not skip: {why}");
    }
    println!("skipped: {why}");
}

/// holdfast's log lines, shown with a failing test's output.
fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "holdfast=debug".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Polls `cond` every 5 ms until it holds; panics naming `what` (and showing `log`)
/// if it does not within `deadline`.
async fn wait_until(
    what: &str,
    deadline: Duration,
    log: impl Fn() -> String,
    mut cond: impl FnMut() -> bool,
) {
    let start = Instant::now();
    loop {
        if cond() {
            return;
        }
        if start.elapsed() > deadline {
            panic!("timed out after {deadline:?} waiting until {what}; log:\n{}", log());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A test's CA and challenge responders: pebble, the DNS server it asks, and the
/// responders it validates through, all serving from `certs`.
struct Harness {
    scratch: Scratch,
    certs: Arc<DynamicCerts>,
    http: HttpResponder,
    tls: TlsResponder,
    pebble: Pebble,
    _dns: Dns,
}

impl Harness {
    /// Starts everything; `None` when pebble is missing and the test may skip.
    async fn start(test: &str, validity_seconds: Option<u64>) -> Option<Harness> {
        init_logs();
        if !pebble::is_installed() {
            skip_or_fail("pebble is not installed (apt-get install pebble)");
            return None;
        }
        let scratch = Scratch::new(test);
        let certs = Arc::new(DynamicCerts::default());
        let http = HttpResponder::start(Arc::clone(&certs)).await;
        let tls = TlsResponder::start(Arc::clone(&certs)).await;
        let dns = Dns::start().await;
        let setup = PebbleSetup {
            http_port: http.addr.port(),
            tls_port: tls.addr.port(),
            dns: dns.addr,
            validity_seconds,
        };
        let pebble = Pebble::start(&scratch, &setup).await;
        Some(Harness { scratch, certs, http, tls, pebble, _dns: dns })
    }

    /// Settings for pebble and `name`, retries a second apart.
    fn config(&self, challenge: Challenge, name: &str) -> AcmeConfig {
        AcmeConfig {
            directory: self.pebble.directory.clone(),
            contact: Some("mailto:ops@holdfast.test".into()),
            storage: self.scratch.path().join("storage"),
            names: AcmeNames::Listed(vec![name.to_string()]),
            challenge,
            pending: Pending::Placeholder,
            ca: Some(self.pebble.ca_file.clone()),
            renew_at: settings::DEFAULT_RENEW_AT,
            retry_base: Duration::from_secs(1),
        }
    }

    fn start_acme(&self, config: &AcmeConfig, certs: &Arc<DynamicCerts>) -> Acme {
        let names = config.names.resolve([]);
        Acme::start(config.clone(), names, Arc::clone(certs)).expect("start the manager")
    }

    fn log(&self) -> impl Fn() -> String + '_ {
        || self.pebble.log()
    }

    async fn wait_issued(&self, acme: &Acme, name: &str) {
        let issued = || acme.status(name).is_some_and(|s| s.serving == Serving::Issued);
        wait_until(&format!("{name} is issued"), ORDER_DEADLINE, self.log(), issued).await;
    }

    /// Waits until the certificate served for `name` is stored too (storing follows
    /// serving).
    async fn wait_stored(&self, config: &AcmeConfig, name: &str) {
        let served = Harness::served(&self.certs, name).expect("a served certificate");
        let stored = || stored_leaf(config, name).as_ref() == Some(&served);
        wait_until(&format!("{name} is stored"), ORDER_DEADLINE, self.log(), stored).await;
    }

    /// The end-entity certificate `certs` serves for `name`.
    fn served(certs: &DynamicCerts, name: &str) -> Option<CertificateDer<'static>> {
        certs.issued(name).and_then(|k| k.cert.first().cloned())
    }
}

fn is_self_signed(cert: &[u8]) -> bool {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).unwrap();
    parsed.issuer() == parsed.subject()
}

fn stored_chain_path(config: &AcmeConfig, name: &str) -> PathBuf {
    config.storage.join(folder_name(&config.directory)).join("certs").join(format!("{name}.pem"))
}

/// The end-entity certificate stored for `name`, if a readable one is.
fn stored_leaf(config: &AcmeConfig, name: &str) -> Option<CertificateDer<'static>> {
    use rustls_pki_types::pem::PemObject;
    let pem = std::fs::read(stored_chain_path(config, name)).ok()?;
    CertificateDer::pem_slice_iter(&pem).next()?.ok()
}

#[tokio::test]
async fn http01_order_issues_a_certificate_that_chains_to_pebble_root() {
    let Some(h) = Harness::start("http01", None).await else { return };
    let name = "http01.holdfast.test";
    let config = h.config(Challenge::Http01, name);
    let acme = h.start_acme(&config, &h.certs);
    h.wait_issued(&acme, name).await;

    let served = h.certs.issued(name).unwrap();
    let root = h.pebble.issuing_root().await;
    verify_chain(&served.cert, name, root.clone()).expect("the chain verifies for the name");
    // A TLS client that trusts only pebble's root accepts what the listener serves.
    let chain = verified_chain(h.tls.addr, name, root).await.expect("verified handshake");
    assert_eq!(chain.first(), served.cert.first());

    // pebble fetched the key authorization from the responder; it is gone now.
    let answered = h.http.answered();
    assert!(!answered.is_empty(), "pebble validated without asking the responder");
    for token in &answered {
        assert_eq!(h.certs.http_challenge(token), None, "answer for {token} left behind");
    }

    let snapshot = acme.snapshot();
    assert_eq!((snapshot.orders_ok, snapshot.orders_failed), (1, 0));
    let status = snapshot.name(name).unwrap();
    let validity = read_leaf(&served.cert[0]).unwrap().validity;
    assert_eq!(status.not_after, Some(validity.not_after));
    assert_eq!(status.next_order, Some(validity.renewal_time(config.renew_at)));
    assert_eq!((status.failures, status.last_error.as_deref()), (0, None));
    let expiry = validity.not_after.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    let text = crate::metrics::export::Exporter::new(move || snapshot.clone()).render();
    let line = format!("holdfast_acme_certificate_expiry_seconds{{name=\"{name}\"}} {expiry}");
    assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");

    // Stored for the next start, readable by the owner only.
    h.wait_stored(&config, name).await;
    let chain_file = stored_chain_path(&config, name);
    let stored = std::fs::read_to_string(&chain_file).unwrap();
    assert!(stored.contains("BEGIN CERTIFICATE"), "{stored}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&chain_file), 0o600);
        assert_eq!(mode(&chain_file.with_file_name(format!("{name}.key.pem"))), 0o600);
        assert_eq!(mode(chain_file.parent().unwrap()), 0o700);
        let account = chain_file.parent().unwrap().with_file_name("account.json");
        assert_eq!(mode(&account), 0o600);
    }
}

#[tokio::test]
async fn tls_alpn01_order_issues_a_certificate_and_refuse_serves_nothing_before() {
    let Some(h) = Harness::start("tls-alpn01", None).await else { return };
    let name = "alpn.holdfast.test";
    let config = AcmeConfig { pending: Pending::Refuse, ..h.config(Challenge::TlsAlpn01, name) };
    let acme = h.start_acme(&config, &h.certs);
    // The order runs in a task that has not run yet (a current-thread runtime).
    assert!(h.certs.issued(name).is_none(), "refuse serves nothing before issuance");
    assert_eq!(acme.status(name).unwrap().serving, Serving::Nothing);

    h.wait_issued(&acme, name).await;
    let served = h.certs.issued(name).unwrap();
    let root = h.pebble.issuing_root().await;
    verify_chain(&served.cert, name, root.clone()).expect("the chain verifies for the name");
    let chain = verified_chain(h.tls.addr, name, root).await.expect("verified handshake");
    assert_eq!(chain.first(), served.cert.first());
    assert!(h.tls.alpn_answers() >= 1, "pebble validated without an acme-tls/1 handshake");
    assert!(h.certs.alpn_challenge(name).is_none(), "the challenge certificate stays served");
    assert!(h.http.answered().is_empty(), "HTTP-01 was used");
    let snapshot = acme.snapshot();
    assert_eq!((snapshot.orders_ok, snapshot.orders_failed), (1, 0));
}

#[tokio::test]
async fn restart_reuses_the_stored_certificate_and_orders_nothing() {
    let Some(h) = Harness::start("restart", None).await else { return };
    let name = "restart.holdfast.test";
    let config = h.config(Challenge::Http01, name);
    let first = h.start_acme(&config, &h.certs);
    h.wait_issued(&first, name).await;
    h.wait_stored(&config, name).await;
    let issued = Harness::served(&h.certs, name).unwrap();
    drop(first);
    assert_eq!(h.pebble.orders_created(), 1, "{}", h.pebble.log());

    // A restart: the store starts empty (the responders keep reading it), the
    // storage is the same.
    h.certs.set_issued(name, None);
    let second = h.start_acme(&config, &h.certs);
    assert_eq!(Harness::served(&h.certs, name), Some(issued.clone()), "served at once");
    let status = second.status(name).unwrap();
    assert_eq!(status.serving, Serving::Issued);
    let renewal = read_leaf(&issued).unwrap().validity.renewal_time(config.renew_at);
    assert_eq!(status.next_order, Some(renewal));
    // Nothing to wait for but time: give the task room to do what it would.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let snapshot = second.snapshot();
    assert_eq!((snapshot.orders_ok, snapshot.orders_failed), (0, 0));
    assert_eq!(h.pebble.orders_created(), 1, "a restart ordered again");
    drop(second);

    // Started later than the renewal point: the stored certificate is served while
    // the renewal is ordered at once.
    h.certs.set_issued(name, None);
    let ahead = renewal.duration_since(SystemTime::now()).unwrap() + Duration::from_secs(86400);
    let clock = Clock::from_fn(move || SystemTime::now() + ahead);
    let names = vec![name.to_string()];
    let third = Acme::start_with_clock(config.clone(), names, Arc::clone(&h.certs), clock).unwrap();
    assert_eq!(Harness::served(&h.certs, name), Some(issued.clone()));
    let renewed = || Harness::served(&h.certs, name).is_some_and(|c| c != issued);
    wait_until("the certificate is renewed", ORDER_DEADLINE, h.log(), renewed).await;
    // Stored after it is served: wait for that too, or the store lands after the
    // file is broken below.
    h.wait_stored(&config, name).await;
    drop(third);

    // A broken stored certificate is ignored: a placeholder, then a new order.
    std::fs::write(stored_chain_path(&config, name), "not a certificate").unwrap();
    let orders = h.pebble.orders_created();
    h.certs.set_issued(name, None);
    let fourth = h.start_acme(&config, &h.certs);
    let placeholder = Harness::served(&h.certs, name).expect("a placeholder");
    assert!(is_self_signed(&placeholder));
    assert_eq!(fourth.status(name).unwrap().serving, Serving::Placeholder);
    h.wait_issued(&fourth, name).await;
    assert_eq!(fourth.snapshot().orders_ok, 1);
    assert_eq!(h.pebble.orders_created(), orders + 1);
}

#[tokio::test]
async fn short_lived_certificate_is_renewed_and_replaced() {
    // Certificates valid for 6 s: renewal is due 4 s after notBefore.
    let Some(h) = Harness::start("renewal", Some(6)).await else { return };
    let name = "renew.holdfast.test";
    let config = h.config(Challenge::TlsAlpn01, name);
    let acme = h.start_acme(&config, &h.certs);
    h.wait_issued(&acme, name).await;
    let first = Harness::served(&h.certs, name).unwrap();
    let first_validity = read_leaf(&first).unwrap().validity;
    let lifetime = first_validity.not_after.duration_since(first_validity.not_before).unwrap();
    assert!(lifetime <= Duration::from_secs(7), "pebble issued for {lifetime:?}");

    let mut gaps = 0;
    let first_expiry = Some(first_validity.not_after);
    // The status changes right after the new certificate is served.
    let renewed = || {
        gaps += usize::from(h.certs.issued(name).is_none());
        acme.status(name).is_some_and(|s| s.not_after != first_expiry)
    };
    wait_until("the certificate is renewed", ORDER_DEADLINE, h.log(), renewed).await;
    assert_eq!(gaps, 0, "nothing was served for a while during renewal");
    let second = Harness::served(&h.certs, name).unwrap();
    let second_validity = read_leaf(&second).unwrap().validity;
    assert!(second_validity.not_after > first_validity.not_after);
    // Ordered at the renewal point, not earlier.
    assert!(
        second_validity.not_before
            >= first_validity.renewal_time(config.renew_at) - Duration::from_secs(1)
    );
    verify_chain(&h.certs.issued(name).unwrap().cert, name, h.pebble.issuing_root().await)
        .expect("the renewed chain verifies");
    let snapshot = acme.snapshot();
    assert!(snapshot.orders_ok >= 2, "{snapshot:?}");
    assert_eq!(snapshot.orders_failed, 0);
    assert_eq!(snapshot.name(name).unwrap().not_after, Some(second_validity.not_after));
}

#[tokio::test]
async fn failed_challenge_is_reported_counted_and_retried_with_backoff() {
    let Some(h) = Harness::start("failed-challenge", None).await else { return };
    let name = "fail.holdfast.test";
    h.http.set_answering(false);
    let config = h.config(Challenge::Http01, name);
    let acme = h.start_acme(&config, &h.certs);

    // Until issuance, TLS clients get the self-signed placeholder for the name.
    let chain = presented_chain(h.tls.addr, name).await.expect("a handshake");
    let leaf = chain.first().expect("a certificate");
    assert!(is_self_signed(leaf));
    assert_eq!(read_leaf(leaf).unwrap().dns_names, vec![name.to_string()]);

    let manager = &acme;
    let failures = |n: u32| move || manager.status(name).is_some_and(|s| s.failures >= n);
    wait_until("the first order fails", ORDER_DEADLINE, h.log(), failures(1)).await;
    let status = acme.status(name).unwrap();
    let waited = |s: &NameStatus| s.next_order.unwrap().duration_since(s.last_attempt.unwrap());
    assert_eq!(waited(&status).unwrap(), Duration::from_secs(1), "{status:?}");
    let error = status.last_error.clone().unwrap();
    assert!(error.starts_with(&format!("{name} (http-01): ")), "{error}");
    // pebble's problem document: its type, and its detail naming the 404.
    assert!(error.contains("urn:ietf:params:acme:error:unauthorized"), "{error}");
    assert!(error.contains("404"), "{error}");

    wait_until("the second order fails", ORDER_DEADLINE, h.log(), failures(2)).await;
    let status = acme.status(name).unwrap();
    assert_eq!(waited(&status).unwrap(), Duration::from_secs(2), "{status:?}");
    let snapshot = acme.snapshot();
    assert_eq!((snapshot.orders_ok, snapshot.orders_failed), (0, 2));
    assert_eq!(snapshot.challenge_failures(Challenge::Http01), 2);
    assert_eq!(snapshot.challenge_failures(Challenge::TlsAlpn01), 0);
    assert_eq!(snapshot.name(name).unwrap().serving, Serving::Placeholder);
    assert_eq!(h.pebble.orders_created(), 2);

    // The responder answers again: the next retry succeeds and clears the error.
    h.http.set_answering(true);
    h.wait_issued(&acme, name).await;
    let status = acme.status(name).unwrap();
    assert_eq!((status.failures, status.last_error), (0, None));
    assert_eq!(acme.snapshot().orders_ok, 1);
}

#[tokio::test]
async fn unreachable_ca_is_retried_while_refuse_serves_nothing_and_placeholder_serves_one() {
    // No pebble: a directory nothing listens on.
    init_logs();
    let scratch = Scratch::new("unreachable");
    let certs = Arc::new(DynamicCerts::default());
    let tls = TlsResponder::start(Arc::clone(&certs)).await;
    let ca_file = scratch.path().join("ca.pem");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = rcgen::CertificateParams::new(vec!["ca.holdfast.test".to_string()])
        .unwrap()
        .self_signed(&ca_key)
        .unwrap();
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let closed = pebble::free_port();
    let (refused, shown) = ("refuse.holdfast.test", "shown.holdfast.test");
    let config = AcmeConfig {
        directory: format!("https://{closed}/dir"),
        storage: scratch.path().join("storage"),
        names: AcmeNames::Listed(vec![refused.to_string()]),
        pending: Pending::Refuse,
        ca: Some(ca_file.clone()),
        retry_base: Duration::from_secs(1),
        ..AcmeConfig::new()
    };
    let refusing = Acme::start(config.clone(), vec![refused.into()], Arc::clone(&certs)).unwrap();
    let placeholder = AcmeConfig { pending: Pending::Placeholder, ..config };
    let showing = Acme::start(placeholder, vec![shown.into()], Arc::clone(&certs)).unwrap();

    assert!(presented_chain(tls.addr, refused).await.is_err(), "a handshake without certificate");
    let chain = presented_chain(tls.addr, shown).await.expect("a handshake with the placeholder");
    assert!(is_self_signed(chain.first().unwrap()));

    let failed = || refusing.status(refused).is_some_and(|s| s.failures >= 1);
    wait_until("the order fails", ORDER_DEADLINE, String::new, failed).await;
    let status = refusing.status(refused).unwrap();
    let error = status.last_error.unwrap();
    assert!(error.starts_with(&format!("{refused} (tls-alpn-01): no ACME account")), "{error}");
    assert!(error.contains(&format!("at https://{closed}/dir: ")), "{error}");
    assert!(error.to_lowercase().contains("connect"), "{error}");
    assert_eq!(status.serving, Serving::Nothing);
    let snapshot = refusing.snapshot();
    assert_eq!(snapshot.orders_failed, 1);
    // The CA was never reached: no challenge failed.
    assert_eq!(snapshot.challenge_failures(Challenge::TlsAlpn01), 0);
    drop(showing);
}
