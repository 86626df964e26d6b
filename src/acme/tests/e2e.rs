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
async fn origin() -> SocketAddr {
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

/// holdfast with an HTTPS listener on `https` (ACME's certificates) and a cleartext
/// one on `http` that redirects to it, getting `name` from `pebble` by `challenge`.
fn config(
    scratch: &Scratch,
    pebble: &Pebble,
    (http, https): (SocketAddr, SocketAddr),
    origin: SocketAddr,
    name: &str,
    challenge: &str,
) -> Config {
    let text = format!(
        "[[listener]]\naddress = \"{https}\"\nupstream = \"app\"\n[listener.tls]\nacme = true\n\n\
         [[listener]]\naddress = \"{http}\"\nupstream = \"app\"\nredirect_https = {}\n\n\
         [upstream.app]\nservers = [\"{origin}\"]\n\n\
         [[route]]\nhost = \"{name}\"\nupstream = \"app\"\n\n\
         [acme]\ndirectory = \"{}\"\nca = \"{}\"\nstorage = \"{}\"\nchallenge = \"{challenge}\"\n\
         pending = \"refuse\"\ncontact = \"mailto:ops@holdfast.test\"\n",
        https.port(),
        pebble.directory,
        pebble.ca_file.display(),
        scratch.path().join("storage").display(),
    );
    let path = scratch.path().join("holdfast.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(&path).expect("a valid config")
}

/// Runs pebble validating on holdfast's ports, holdfast getting `name` by `challenge`,
/// and checks an HTTPS client trusting only pebble's root gets through to the origin.
async fn issue_through_holdfast(test: &str, name: &str, challenge: &str) {
    init_logs();
    if !pebble::is_installed() {
        return skip_or_fail("pebble is not installed (apt-get install pebble)");
    }
    let scratch = Scratch::new(test);
    let dns = Dns::start().await;
    let ports = (free_port(), free_port());
    let setup = PebbleSetup {
        http_port: ports.0.port(),
        tls_port: ports.1.port(),
        dns: dns.addr,
        validity_seconds: None,
    };
    let pebble = Pebble::start(&scratch, &setup).await;
    let config = config(&scratch, &pebble, ports, origin().await, name, challenge);
    let instance = Instance::start(&config).await.expect("holdfast starts");
    let https = instance.local_addrs()[0];
    let root = pebble.issuing_root().await;
    let mut last = None;
    let deadline = tokio::time::Instant::now() + ORDER_DEADLINE;
    // Until issuance the handshake is refused (pending = "refuse").
    while tokio::time::Instant::now() < deadline {
        match verified_chain(https, name, root.clone()).await {
            Ok(chain) => {
                last = Some(chain);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
    assert!(last.is_some(), "no certificate for {name} via {challenge}; log:\n{}", pebble.log());
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
async fn https_get(
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
