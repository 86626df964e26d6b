//! TLS settings of the benchmark tools, rustls with the ring provider: the origin's server
//! side (`bench-origin --tls-cert --tls-key`) and bench-load's client side (`handshakes`).
//!
//! The origin resumes sessions both ways a client may ask, so a proxy that resumes its
//! upstream sessions can be seen to: stateless tickets (TLS 1.3 and 1.2) and a session
//! cache (TLS 1.2 session IDs). The client trusts one CA from a PEM file and resumes only
//! when asked. Certificates come from files the harness makes at run time; nothing here
//! generates or stores keys.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::ServerSessionMemoryCache;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// TLS 1.2 sessions the origin keeps for session-ID resumption: more than the
/// connections any benchmark opens to it at once.
pub const SERVER_SESSION_CACHE_ENTRIES: usize = 16_384;
/// Sessions one client keeps: it talks to one server, and rustls holds up to 8 TLS 1.3
/// tickets for it.
pub const CLIENT_SESSION_CACHE_ENTRIES: usize = 8;
/// The one application protocol both sides speak.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Why a TLS configuration could not be built; names the file it read.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("reading {what} from {path}: {source}")]
    Pem { what: &'static str, path: PathBuf, source: rustls_pki_types::pem::Error },
    #[error("{path} holds no {what}")]
    Empty { what: &'static str, path: PathBuf },
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let pem_error =
        |source| TlsConfigError::Pem { what: "certificates", path: path.to_owned(), source };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(pem_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_error)?;
    if certificates.is_empty() {
        return Err(TlsConfigError::Empty { what: "certificate", path: path.to_owned() });
    }
    Ok(certificates)
}

fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsConfigError::Pem {
        what: "a private key",
        path: path.to_owned(),
        source,
    })
}

/// The origin's server settings: the certificate chain in `cert` (PEM, leaf first) and the
/// key in `key`, TLS 1.2 and 1.3, ALPN `http/1.1`, tickets and a session cache.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(read_certificates(cert)?, read_private_key(key)?)?;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    config.session_storage = ServerSessionMemoryCache::new(SERVER_SESSION_CACHE_ENTRIES);
    config.ticketer = rustls::crypto::ring::Ticketer::new()?;
    Ok(Arc::new(config))
}

/// bench-load's client settings: trusts the CA certificates in `ca` (PEM) and nothing
/// else, offers ALPN `http/1.1`, and keeps no sessions (every handshake is a full one)
/// until given a store with [`with_session_store`].
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(ca)? {
        roots.add(certificate)?;
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

/// `config` with a session store of its own: it keeps the sessions the server hands out
/// and offers one on its next connection, as one client that comes back does.
///
/// One store per client, not one for all: rustls keeps at most 8 TLS 1.3 tickets per
/// server name and each is used once, so many connections at once from one shared store
/// would run out and fall back to full handshakes.
pub fn with_session_store(config: &ClientConfig) -> Arc<ClientConfig> {
    let mut config = config.clone();
    config.resumption =
        rustls::client::Resumption::in_memory_sessions(CLIENT_SESSION_CACHE_ENTRIES);
    Arc::new(config)
}
