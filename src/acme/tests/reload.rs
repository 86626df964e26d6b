//! ACME names following reloads of a running holdfast, with pebble validating through
//! its listeners: the config file is rewritten and `POST /reload` sent to the admin
//! listener, as a deploy that adds or removes an app does. A new route's host gets a
//! certificate served by SNI; a removed route's host stops being served at once, and is
//! served again from storage when it comes back; a reload that keeps the names orders
//! nothing. Orders are counted twice: in pebble's log and in holdfast's `/metrics`.

use std::net::SocketAddr;
use std::time::Duration;

use rustls_pki_types::CertificateDer;

use super::e2e::{config_text, https_get, origin, wait_served, Ca};
use super::responder::{presented_chain, verified_chain};
use super::{stored_leaf, wait_until, Scratch, ORDER_DEADLINE};
use crate::cmd::AdminClient;
use crate::config::Config;
use crate::instance::{ConfigSource, Instance};

const A: &str = "a.reload.holdfast.test";
const B: &str = "b.reload.holdfast.test";

/// holdfast started from a config file that routes `hosts` to an origin, with
/// certificates from pebble by TLS-ALPN-01 (`pending = "refuse"`) and an admin
/// listener.
struct Running {
    ca: Ca,
    scratch: Scratch,
    origin: SocketAddr,
    /// Kept for its listeners; reloads go through the admin listener.
    _instance: Instance,
    admin: AdminClient,
    https: SocketAddr,
    root: CertificateDer<'static>,
    /// The config as started, for where certificates are stored.
    config: Config,
}

impl Running {
    /// Starts pebble and holdfast; `None` when pebble is missing and the test may skip.
    async fn start(test: &str, hosts: &[&str]) -> Option<Running> {
        let scratch = Scratch::new(test);
        let ca = Ca::start(&scratch).await?;
        let origin = origin().await;
        let path = write_config(&scratch, &ca, origin, hosts);
        let config = Config::load(&path).expect("a valid config");
        let source = ConfigSource { path, adjust: Box::new(|_| {}) };
        let instance = Instance::start_from(&config, Some(source)).await.expect("holdfast starts");
        let https = instance.local_addrs()[0];
        let admin =
            AdminClient::new(instance.admin_addr().expect("an admin listener"), ORDER_DEADLINE);
        let root = ca.pebble.issuing_root().await;
        let _instance = instance;
        Some(Running { ca, scratch, origin, _instance, admin, https, root, config })
    }

    /// Rewrites the config file with routes for `hosts` to `origin`, reloads it through
    /// the admin listener, and returns what the reload says changed.
    async fn reload(&self, hosts: &[&str], origin: SocketAddr) -> String {
        write_config(&self.scratch, &self.ca, origin, hosts);
        let answer = self.admin.post("/reload").await.expect("POST /reload");
        let text = answer.text().into_owned();
        assert!(answer.status.is_success(), "{text}");
        text
    }

    /// The chain served for `name` once it is served.
    async fn served(&self, name: &str) -> Vec<CertificateDer<'static>> {
        wait_served(self.https, name, &self.root, &self.ca.pebble).await
    }

    /// Waits until pebble has logged `n` orders.
    async fn wait_orders(&self, n: usize) {
        let pebble = &self.ca.pebble;
        let logged = || pebble.orders_created() >= n;
        wait_until(&format!("pebble logged {n} orders"), ORDER_DEADLINE, || pebble.log(), logged)
            .await;
    }

    /// Orders counted by pebble and by holdfast's `/metrics` (successful ones), after a
    /// second in which nothing should happen.
    async fn orders_after_a_while(&self) -> (usize, u64) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let metrics = self.admin.get("/metrics").await.expect("GET /metrics").text().into_owned();
        let line = "holdfast_acme_orders_total{result=\"ok\"} ";
        let ok = metrics.lines().find_map(|l| l.strip_prefix(line)).expect("the orders line");
        (self.ca.pebble.orders_created(), ok.parse().unwrap())
    }

    /// `/status`'s certificates: each name with what is served.
    async fn certificates(&self) -> Vec<(String, String)> {
        let status = self.admin.get("/status").await.expect("GET /status");
        let json: serde_json::Value = serde_json::from_slice(&status.body).unwrap();
        let list = json["certificates"].as_array().expect("certificates listed").clone();
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        list.iter().map(|c| (text(&c["name"]), text(&c["serving"]))).collect()
    }

    /// Waits until the certificate served for `name` is stored too.
    async fn wait_stored(&self, name: &str, served: &CertificateDer<'static>) {
        let acme = self.config.acme.as_ref().expect("[acme]");
        let stored = || stored_leaf(acme, name).as_ref() == Some(served);
        wait_until(&format!("{name} is stored"), ORDER_DEADLINE, || self.ca.pebble.log(), stored)
            .await;
    }
}

/// Writes holdfast.toml (routes for `hosts`, and an admin listener) into `scratch`.
fn write_config(
    scratch: &Scratch,
    ca: &Ca,
    origin: SocketAddr,
    hosts: &[&str],
) -> std::path::PathBuf {
    let mut text = config_text(scratch, &ca.pebble, ca.ports, origin, hosts, "tls-alpn-01");
    text.push_str("\n[admin]\naddress = \"127.0.0.1:0\"\n");
    let path = scratch.path().join("holdfast.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn issued(name: &str) -> (String, String) {
    (name.to_string(), "issued".to_string())
}

#[tokio::test]
async fn reload_adding_a_route_gets_its_host_a_certificate_served_by_sni() {
    let Some(h) = Running::start("reload-add", &[A]).await else { return };
    let a = h.served(A).await;
    h.wait_orders(1).await;
    // Before the reload, B has no certificate: the handshake is refused.
    assert!(presented_chain(h.https, B).await.is_err(), "B is served before its route");

    let changes = h.reload(&[A, B], h.origin).await;
    assert!(changes.contains(&format!("acme: added name {B}")), "{changes}");
    let b = h.served(B).await;
    assert_ne!(a.first(), b.first());
    let answer = https_get(h.https, B, h.root.clone()).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("origin\n"), "{answer}");
    // A kept its certificate, and only B was ordered.
    let still = verified_chain(h.https, A, h.root.clone()).await.expect("A is served");
    assert_eq!(still.first(), a.first());
    assert_eq!(h.orders_after_a_while().await, (2, 2), "{}", h.ca.pebble.log());
    assert_eq!(h.certificates().await, [issued(A), issued(B)]);
}

#[tokio::test]
async fn reload_removing_a_route_stops_serving_its_certificate() {
    let Some(h) = Running::start("reload-remove", &[A, B]).await else { return };
    let a = h.served(A).await;
    let b = h.served(B).await;
    h.wait_stored(A, &a[0]).await;
    h.wait_orders(2).await;

    let changes = h.reload(&[B], h.origin).await;
    assert!(changes.contains(&format!("acme: removed name {A}")), "{changes}");
    // The reload's answer comes once A's certificate has left the store.
    assert!(presented_chain(h.https, A).await.is_err(), "A is still served");
    let still = verified_chain(h.https, B, h.root.clone()).await.expect("B is served");
    assert_eq!(still.first(), b.first());
    assert_eq!(h.certificates().await, [issued(B)]);
    let metrics = h.admin.get("/metrics").await.unwrap().text().into_owned();
    assert!(!metrics.contains(&format!("name=\"{A}\"")), "{metrics}");

    // A comes back: its stored certificate is served at once, and nothing is ordered.
    let changes = h.reload(&[A, B], h.origin).await;
    assert!(changes.contains(&format!("acme: added name {A}")), "{changes}");
    let back = verified_chain(h.https, A, h.root.clone()).await.expect("A is served at once");
    assert_eq!(back.first(), a.first());
    assert_eq!(h.orders_after_a_while().await, (2, 2), "{}", h.ca.pebble.log());
    assert_eq!(h.certificates().await, [issued(A), issued(B)]);
}

#[tokio::test]
async fn reload_that_keeps_the_names_orders_nothing_new() {
    let Some(h) = Running::start("reload-same", &[A]).await else { return };
    // While A's first order is under way (created, its validation polled no sooner than
    // 250 ms later): a task started again would abandon it and order again.
    h.wait_orders(1).await;
    let other = origin().await;
    let changes = h.reload(&[A], other).await;
    assert!(changes.contains("upstream app") && !changes.contains("acme"), "{changes}");
    let a = h.served(A).await;
    // Once issued: the same file again, then a change elsewhere.
    assert!(h.reload(&[A], other).await.contains("no changes"));
    let changes = h.reload(&[A], h.origin).await;
    assert!(!changes.contains("acme"), "{changes}");
    assert_eq!(h.orders_after_a_while().await, (1, 1), "{}", h.ca.pebble.log());
    let still = verified_chain(h.https, A, h.root.clone()).await.expect("A is served");
    assert_eq!(still.first(), a.first());
    assert_eq!(h.certificates().await, [issued(A)]);
}
