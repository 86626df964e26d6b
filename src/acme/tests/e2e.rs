//! ACME through holdfast's own listeners: pebble validates TLS-ALPN-01 on an HTTPS
//! listener with `acme = true`, and HTTP-01 on a cleartext listener that redirects
//! everything else to HTTPS; the certificate is then served to HTTPS clients, who reach
//! the origin through it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::dns::Dns;
use super::pebble::{self, free_port, Pebble, PebbleSetup};
use super::responder::verified_chain;
use super::{init_logs, skip_or_fail, wait_until, Scratch, ORDER_DEADLINE};
use crate::config::Config;
use crate::instance::Instance;

/// A tiny origin: answers every request on a connection with `200 origin`.
pub(super) async fn origin() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\norigin\n";
                    if tcp.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The text of a holdfast config with an HTTPS listener on `https` (ACME's
/// certificates) and a cleartext one on `http` that redirects to it, a route for each of
/// `hosts`, and `[acme]` getting their certificates from `pebble` by `challenge`.
pub(super) fn config_text(
    scratch: &Scratch,
    pebble: &Pebble,
    (http, https): (SocketAddr, SocketAddr),
    origin: SocketAddr,
    hosts: &[&str],
    challenge: &str,
) -> String {
    let routes: String = hosts
        .iter()
        .map(|host| format!("[[route]]\nhost = \"{host}\"\nupstream = \"app\"\n\n"))
        .collect();
    format!(
        "[[listener]]\naddress = \"{https}\"\nupstream = \"app\"\n[listener.tls]\nacme = true\n\n\
         [[listener]]\naddress = \"{http}\"\nupstream = \"app\"\nredirect_https = {}\n\n\
         [upstream.app]\nservers = [\"{origin}\"]\n\n\
         {routes}\
         [acme]\ndirectory = \"{}\"\nca = \"{}\"\nstorage = \"{}\"\nchallenge = \"{challenge}\"\n\
         pending = \"refuse\"\ncontact = \"mailto:ops@holdfast.test\"\n",
        https.port(),
        pebble.directory,
        pebble.ca_file.display(),
        scratch.path().join("storage").display(),
    )
}

/// pebble validating on the ports holdfast is to listen on, and the DNS server it asks.
pub(super) struct Ca {
    pub pebble: Pebble,
    /// The cleartext and the HTTPS listener's addresses, free when chosen.
    pub ports: (SocketAddr, SocketAddr),
    _dns: Dns,
}

impl Ca {
    /// Starts pebble with its files in `scratch`; `None` when pebble is missing and the
    /// test may skip.
    pub async fn start(scratch: &Scratch) -> Option<Ca> {
        init_logs();
        if !pebble::is_installed() {
            skip_or_fail("pebble is not installed (apt-get install pebble)");
            return None;
        }
        let dns = Dns::start().await;
        let ports = (free_port(), free_port());
        let setup = PebbleSetup {
            http_port: ports.0.port(),
            tls_port: ports.1.port(),
            dns: dns.addr,
            validity_seconds: None,
        };
        let pebble = Pebble::start(scratch, &setup).await;
        Some(Ca { pebble, ports, _dns: dns })
    }
}

/// The chain `https` serves for `name`, verified against `root`, as soon as it serves
/// one (within [`ORDER_DEADLINE`]); panics with pebble's log if it does not.
pub(super) async fn wait_served(
    https: SocketAddr,
    name: &str,
    root: &rustls_pki_types::CertificateDer<'static>,
    pebble: &Pebble,
) -> Vec<rustls_pki_types::CertificateDer<'static>> {
    let deadline = tokio::time::Instant::now() + ORDER_DEADLINE;
    // Until issuance the handshake is refused (pending = "refuse").
    while tokio::time::Instant::now() < deadline {
        match verified_chain(https, name, root.clone()).await {
            Ok(chain) => return chain,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
    panic!("no certificate for {name} within {ORDER_DEADLINE:?}; log:\n{}", pebble.log());
}

/// Runs pebble validating on holdfast's ports, holdfast getting `name` by `challenge`,
/// and checks an HTTPS client trusting only pebble's root gets through to the origin.
async fn issue_through_holdfast(test: &str, name: &str, challenge: &str) {
    let scratch = Scratch::new(test);
    let Some(ca) = Ca::start(&scratch).await else { return };
    let pebble = &ca.pebble;
    let text = config_text(&scratch, pebble, ca.ports, origin().await, &[name], challenge);
    let path = scratch.path().join("holdfast.toml");
    std::fs::write(&path, text).unwrap();
    let config = Config::load(&path).expect("a valid config");
    let instance = Instance::start(&config).await.expect("holdfast starts");
    let https = instance.local_addrs()[0];
    let root = pebble.issuing_root().await;
    wait_served(https, name, &root, pebble).await;
    let answer = https_get(https, name, root).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("origin\n"), "{answer}");
    wait_until(
        "pebble logged the validation",
        ORDER_DEADLINE,
        || pebble.log(),
        || pebble.orders_created() == 1,
    )
    .await;
}

/// One GET over HTTPS to `addr` for `name`, trusting `root`; the whole answer.
pub(super) async fn https_get(
    addr: SocketAddr,
    name: &str,
    root: rustls_pki_types::CertificateDer<'static>,
) -> String {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let server_name = rustls_pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut tls = connector.connect(server_name, tcp).await.expect("handshake");
    let request = format!("GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    // Read to the end of the stream; an error ends the answer too.
    let mut buf = [0u8; 4096];
    loop {
        match tls.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn tls_alpn01_through_an_https_listener() {
    issue_through_holdfast("e2e-alpn", "alpn.holdfast.test", "tls-alpn-01").await;
}

#[tokio::test]
async fn http01_through_a_redirecting_cleartext_listener() {
    issue_through_holdfast("e2e-http", "http.holdfast.test", "http-01").await;
}
