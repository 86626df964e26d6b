//! Challenge responders that serve from `DynamicCerts`, standing in for holdfast's own
//! listeners until those are wired: an HTTP server answering
//! `GET /.well-known/acme-challenge/TOKEN` from `http_challenge`, and a TLS server whose
//! certificate resolver answers ALPN `acme-tls/1` handshakes from `alpn_challenge` and
//! any other from `issued`. Both bind `127.0.0.1:0` and stop when dropped. And the TLS
//! clients the tests look at served certificates with.

use crate::tls::origin::AnyCertificate;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::client::danger::ServerCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::tls::store::DynamicCerts;

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737 section 6.2).
const ACME_TLS: &[u8] = b"acme-tls/1";

const CHALLENGE_PATH: &str = "/.well-known/acme-challenge/";

/// Answers HTTP-01 requests from `DynamicCerts`.
pub struct HttpResponder {
    pub addr: SocketAddr,
    answering: Arc<AtomicBool>,
    /// The tokens answered with a key authorization.
    answered: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Drop for HttpResponder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpResponder {
    pub async fn start(certs: Arc<DynamicCerts>) -> HttpResponder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answering = Arc::new(AtomicBool::new(true));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let (on, log) = (Arc::clone(&answering), Arc::clone(&answered));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (certs, on, log) = (Arc::clone(&certs), Arc::clone(&on), Arc::clone(&log));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<_>| {
                        let response = respond(&certs, &on, &log, request.uri().path());
                        async move { Ok::<_, std::convert::Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        HttpResponder { addr, answering, answered, task }
    }

    /// Whether challenge requests get their key authorization (else 404).
    pub fn set_answering(&self, answering: bool) {
        self.answering.store(answering, Ordering::SeqCst);
    }

    /// The tokens answered so far.
    pub fn answered(&self) -> Vec<String> {
        self.answered.lock().unwrap().clone()
    }
}

fn respond(
    certs: &DynamicCerts,
    answering: &AtomicBool,
    answered: &Mutex<Vec<String>>,
    path: &str,
) -> Response<Full<Bytes>> {
    let token = path.strip_prefix(CHALLENGE_PATH);
    let key_authorization = token
        .filter(|_| answering.load(Ordering::SeqCst))
        .and_then(|token| Some((token, certs.http_challenge(token)?)));
    match key_authorization {
        Some((token, body)) => {
            answered.lock().unwrap().push(token.to_string());
            Response::new(Full::new(Bytes::from(body)))
        }
        None => {
            let mut response = Response::new(Full::new(Bytes::from_static(b"no such challenge")));
            *response.status_mut() = StatusCode::NOT_FOUND;
            response
        }
    }
}

/// Answers TLS handshakes from `DynamicCerts`, as holdfast's TLS listener does.
pub struct TlsResponder {
    pub addr: SocketAddr,
    /// TLS-ALPN-01 handshakes answered with a challenge certificate.
    alpn_answers: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Drop for TlsResponder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Picks the certificate for a handshake: the challenge certificate for
/// `acme-tls/1`, else the one issued for the SNI name.
#[derive(Debug)]
struct FromStore {
    certs: Arc<DynamicCerts>,
    alpn_answers: Arc<AtomicU64>,
}

impl ResolvesServerCert for FromStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?;
        let is_acme = hello.alpn().is_some_and(|mut protocols| protocols.any(|p| p == ACME_TLS));
        if is_acme {
            let cert = self.certs.alpn_challenge(name)?;
            self.alpn_answers.fetch_add(1, Ordering::SeqCst);
            Some(cert)
        } else {
            self.certs.issued(name)
        }
    }
}

impl TlsResponder {
    pub async fn start(certs: Arc<DynamicCerts>) -> TlsResponder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let alpn_answers = Arc::new(AtomicU64::new(0));
        let resolver = FromStore { certs, alpn_answers: Arc::clone(&alpn_answers) };
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = vec![ACME_TLS.to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                // The handshake is the whole answer; the connection then closes.
                tokio::spawn(async move {
                    let _ = acceptor.accept(stream).await;
                });
            }
        });
        TlsResponder { addr, alpn_answers, task }
    }

    pub fn alpn_answers(&self) -> u64 {
        self.alpn_answers.load(Ordering::SeqCst)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate chain `addr` presents for `name`, trusted or not; an error when
/// the handshake fails.
pub async fn presented_chain(
    addr: SocketAddr,
    name: &str,
) -> Result<Vec<CertificateDer<'static>>, std::io::Error> {
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth();
    handshake(config, addr, name).await
}

/// The chain `addr` presents for `name`, verified against `root` for `name`; an error
/// when the handshake or the verification fails.
pub async fn verified_chain(
    addr: SocketAddr,
    name: &str,
    root: CertificateDer<'static>,
) -> Result<Vec<CertificateDer<'static>>, std::io::Error> {
    let mut roots = RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    handshake(config, addr, name).await
}

async fn handshake(
    config: rustls::ClientConfig,
    addr: SocketAddr,
    name: &str,
) -> Result<Vec<CertificateDer<'static>>, std::io::Error> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    let server_name = ServerName::try_from(name.to_string()).unwrap();
    let tls = connector.connect(server_name, tcp).await?;
    let chain = tls.get_ref().1.peer_certificates().unwrap_or_default();
    Ok(chain.iter().map(|c| c.clone().into_owned()).collect())
}

/// Verifies `chain` (end-entity first) for `name` against `root`, as a browser would.
pub fn verify_chain(
    chain: &[CertificateDer<'static>],
    name: &str,
    root: CertificateDer<'static>,
) -> Result<(), rustls::Error> {
    let mut roots = RootCertStore::empty();
    roots.add(root).unwrap();
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
    let (leaf, intermediates) =
        chain.split_first().ok_or(rustls::Error::NoCertificatesPresented)?;
    let name = ServerName::try_from(name.to_string()).unwrap();
    verifier.verify_server_cert(leaf, intermediates, &name, &[], UnixTime::now()).map(|_| ())
}
