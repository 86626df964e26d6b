//! The HTTPS client the ACME protocol runs over: hyper with rustls and ring, trusting
//! the system's roots and, when configured, one more CA's (a private ACME CA, or a
//! test CA such as pebble's).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, HttpClient};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// A TCP connect to the CA that takes longer than this fails (and the order is tried
/// again later): a CA that cannot be reached in 30 s is not there.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the CA certificate {path}: {message}")]
    CaFile { path: String, message: String },
    #[error("the CA certificate file {0} holds no certificate")]
    CaEmpty(String),
    #[error("no root certificate to trust: the system has none and no `ca` is configured")]
    NoRoots,
    #[error("cannot set up TLS: {0}")]
    Tls(rustls::Error),
}

/// The roots to trust for the directory: the system's, and every certificate in `ca`.
pub fn roots(ca: Option<&Path>) -> Result<RootCertStore, ClientError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::debug!(%error, "skipping a system root certificate");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "system root certificates for the ACME directory");
    if let Some(path) = ca {
        let shown = path.display().to_string();
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| ClientError::CaFile { path: shown.clone(), message: e.to_string() })?;
        if certs.is_empty() {
            return Err(ClientError::CaEmpty(shown));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| ClientError::CaFile { path: shown.clone(), message: e.to_string() })?;
        }
    }
    if roots.is_empty() {
        return Err(ClientError::NoRoots);
    }
    Ok(roots)
}

/// An HTTPS-only client that trusts `roots`, for `instant_acme`.
pub fn http_client(roots: RootCertStore) -> Result<Box<dyn HttpClient>, ClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ClientError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(tcp);
    let client: Client<_, BodyWrapper<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    Ok(Box::new(client))
}
