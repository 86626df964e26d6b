//! A real `pebble` ACME test CA as a child process on loopback: its own TLS
//! certificate (from a test CA made here, which the manager trusts through `ca`), the
//! challenge ports of the test's responders, a DNS server of the test's for the names
//! it validates, and no artificial sleeps or nonce rejections. The child is killed when
//! the [`Pebble`] is dropped.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::Scratch;

/// Where a test's pebble validates challenges, and how.
pub struct PebbleSetup {
    /// The port pebble sends HTTP-01 requests to.
    pub http_port: u16,
    /// The port pebble sends TLS-ALPN-01 handshakes to.
    pub tls_port: u16,
    /// The DNS server pebble asks for the names it validates.
    pub dns: SocketAddr,
    /// Seconds an issued certificate is valid; `None`: pebble's default (5 years).
    pub validity_seconds: Option<u64>,
}

/// A running pebble.
pub struct Pebble {
    /// Spawned with `kill_on_drop`.
    _child: Child,
    pub directory: String,
    /// The test CA's root that pebble's HTTPS certificate chains to (PEM file).
    pub ca_file: PathBuf,
    ca_roots: RootCertStore,
    management: SocketAddr,
    output: Arc<Mutex<String>>,
}

/// Whether `pebble` is on PATH.
pub fn is_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("pebble").is_file()))
}

impl Pebble {
    /// Starts pebble with its files in `scratch`, and waits until its directory answers.
    pub async fn start(scratch: &Scratch, setup: &PebbleSetup) -> Pebble {
        let ca_file = scratch.path().join("pebble-ca.pem");
        let (cert_file, key_file) = write_tls_files(scratch.path(), &ca_file);
        let ca_pem = std::fs::read(&ca_file).expect("read the test CA");
        let mut ca_roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca_pem) {
            ca_roots.add(cert.expect("test CA PEM")).expect("test CA is a root");
        }
        // The listen ports are chosen here and released for pebble to bind: a port
        // taken by someone else in between makes pebble exit, and the next try picks
        // other ports.
        let mut last_output = String::new();
        for _ in 0..3 {
            let (listen, management) = (free_port(), free_port());
            let config = scratch.path().join("pebble-config.json");
            std::fs::write(&config, config_json(setup, listen, management, &cert_file, &key_file))
                .expect("write pebble config");
            let mut child = Command::new("pebble")
                .arg("-config")
                .arg(&config)
                .arg("-dnsserver")
                .arg(setup.dns.to_string())
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_WFE_NONCEREJECT", "0")
                // Every order validates its challenge: no authorization is reused.
                .env("PEBBLE_AUTHZREUSE", "0")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("run pebble");
            let output = Arc::new(Mutex::new(String::new()));
            collect(child.stdout.take(), &output);
            collect(child.stderr.take(), &output);
            if wait_for_port(&mut child, listen).await
                && wait_for_port(&mut child, management).await
            {
                return Pebble {
                    _child: child,
                    directory: format!("https://{listen}/dir"),
                    ca_file,
                    ca_roots,
                    management,
                    output,
                };
            }
            last_output = output.lock().unwrap().clone();
        }
        panic!("pebble did not start; its last output:\n{last_output}");
    }

    /// Orders pebble has created so far (it logs each one).
    pub fn orders_created(&self) -> usize {
        self.output.lock().unwrap().matches("Added order").count()
    }

    /// pebble's log so far, for failure messages.
    pub fn log(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// The root pebble issues certificates under (it makes a new one at each start),
    /// from its management interface.
    pub async fn issuing_root(&self) -> CertificateDer<'static> {
        let response = self.management_get("/roots/0").await;
        CertificateDer::pem_slice_iter(response.as_bytes())
            .next()
            .unwrap_or_else(|| panic!("no certificate in /roots/0: {response}"))
            .expect("pebble's root is PEM")
    }

    /// `GET path` on the management interface, over HTTPS; the whole response.
    async fn management_get(&self, path: &str) -> String {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(self.ca_roots.clone())
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(self.management).await.expect("connect");
        let name = ServerName::IpAddress(self.management.ip().into());
        let mut tls = connector.connect(name, tcp).await.expect("TLS to pebble's management");
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.management
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        // Go closes without close_notify at times; what was read is the response.
        let _ = tls.read_to_end(&mut response).await;
        String::from_utf8_lossy(&response).into_owned()
    }
}

fn config_json(
    setup: &PebbleSetup,
    listen: SocketAddr,
    management: SocketAddr,
    cert: &Path,
    key: &Path,
) -> String {
    let validity = setup
        .validity_seconds
        .map_or(String::new(), |s| format!(",\n    \"certificateValidityPeriod\": {s}"));
    format!(
        r#"{{
  "pebble": {{
    "listenAddress": "{listen}",
    "managementListenAddress": "{management}",
    "certificate": "{}",
    "privateKey": "{}",
    "httpPort": {},
    "tlsPort": {},
    "ocspResponderURL": "",
    "externalAccountBindingRequired": false{validity}
  }}
}}"#,
        cert.display(),
        key.display(),
        setup.http_port,
        setup.tls_port,
    )
}

/// Writes a test CA (to `ca_file`) and a certificate for 127.0.0.1 it signed, with its
/// key, for pebble's HTTPS; returns the certificate's and key's paths.
fn write_tls_files(dir: &Path, ca_file: &Path) -> (PathBuf, PathBuf) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.distinguished_name.push(DnType::CommonName, "holdfast test CA for pebble");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let (cert_file, key_file) = (dir.join("pebble-cert.pem"), dir.join("pebble-key.pem"));
    std::fs::write(ca_file, ca_cert.pem()).unwrap();
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (cert_file, key_file)
}

/// A loopback port free now.
pub fn free_port() -> SocketAddr {
    StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// Appends everything `pipe` says to `sink`, until it closes.
fn collect(pipe: Option<impl AsyncRead + Unpin + Send + 'static>, sink: &Arc<Mutex<String>>) {
    let Some(mut pipe) = pipe else { return };
    let sink = Arc::clone(sink);
    tokio::spawn(async move {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
}

/// Waits until `addr` accepts connections; false if the child exits first or it
/// takes more than 10 s.
async fn wait_for_port(child: &mut Child, addr: SocketAddr) -> bool {
    for _ in 0..1000 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return true;
        }
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}
