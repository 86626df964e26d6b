//! TLS to origins: an upstream group's settings (verification against the system roots
//! and a CA bundle, the name to verify and send as SNI, an optional client
//! certificate), built once into a rustls client config whose session cache lets every
//! new connection of the group resume an earlier session.
//!
//! Two connections are interchangeable only if they were made with the same settings to
//! the same name: [`OriginTls`] compares equal only when the settings and the contents
//! of the files they name are the same, and a backend's pool holds connections of one
//! `OriginTls` and one name (see `upstream::connect::Dial`).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::certs::{self, CertPair};
use super::server::{H2_ALPN, HTTP1_ALPN};

/// TLS sessions remembered per upstream group for resumption (tickets or IDs).
const RESUMPTION_SESSIONS: usize = 1024;

/// What a backend's connections speak, as far as is known before one is open: over TLS,
/// what the handshake offers by ALPN ([`OriginTls::config_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaks {
    Http1,
    H2,
    /// TLS with ALPN offering both: the first connection tells.
    Either,
}

/// An upstream group's TLS to its servers, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OriginTlsSettings {
    /// The name verified in the certificate and sent as SNI; `None`: each server's host
    /// as written (an IP address is checked against IP SANs and sends no SNI).
    pub server_name: Option<String>,
    /// PEM CA bundle trusted besides the system's roots.
    pub ca: Option<PathBuf>,
    /// Accept any certificate. Logged as a warning whenever it comes into force.
    pub insecure_skip_verify: bool,
    /// A client certificate for origins that ask for one (mutual TLS).
    pub client_cert: Option<CertPair>,
}

/// The group's TLS, ready to connect with.
#[derive(Clone)]
pub struct OriginTls {
    pub settings: OriginTlsSettings,
    /// Offers `http/1.1` by ALPN.
    pub config: Arc<ClientConfig>,
    /// The same, offering `h2` only, and `h2` then `http/1.1` (one session cache).
    h2: Arc<ClientConfig>,
    either: Arc<ClientConfig>,
    /// Of the settings and the contents of the files they name.
    fingerprint: u64,
}

impl std::fmt::Debug for OriginTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginTls").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl PartialEq for OriginTls {
    fn eq(&self, other: &OriginTls) -> bool {
        self.settings == other.settings && self.fingerprint == other.fingerprint
    }
}

impl Eq for OriginTls {}

impl OriginTls {
    /// Reads the files `settings` names and builds the client config; the error says
    /// which file and why, in words for the operator.
    pub fn build(settings: OriginTlsSettings) -> Result<OriginTls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| e.to_string())?;
        let builder = if settings.insecure_skip_verify {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        } else {
            builder.with_root_certificates(roots(settings.ca.as_ref())?)
        };
        let mut config = match &settings.client_cert {
            None => builder.with_no_client_auth(),
            Some(pair) => {
                let loaded = certs::load(pair).map_err(|e| e.to_string())?;
                let key = PrivateKeyDer::from_pem_file(&pair.key)
                    .map_err(|e| format!("{}: {e}", pair.key.display()))?;
                let chain = loaded.key.cert.clone();
                builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
            }
        };
        config.resumption = Resumption::in_memory_sessions(RESUMPTION_SESSIONS);
        config.alpn_protocols = vec![HTTP1_ALPN.to_vec()];
        let offering = |alpn: &[&[u8]]| {
            let mut c = config.clone();
            c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Arc::new(c)
        };
        let (h2, either) = (offering(&[H2_ALPN]), offering(&[H2_ALPN, HTTP1_ALPN]));
        let fingerprint = fingerprint(&settings);
        Ok(OriginTls { settings, config: Arc::new(config), h2, either, fingerprint })
    }

    /// The client config whose ALPN offers what `speaks` says.
    pub fn config_for(&self, speaks: Speaks) -> &Arc<ClientConfig> {
        match speaks {
            Speaks::Http1 => &self.config,
            Speaks::H2 => &self.h2,
            Speaks::Either => &self.either,
        }
    }

    /// The name to verify and send for a server written as `host` (a name, or an IP
    /// address as text).
    pub fn name_for(&self, host: &str) -> Result<ServerName<'static>, String> {
        let name = self.settings.server_name.as_deref().unwrap_or(host);
        ServerName::try_from(name.to_owned())
            .map_err(|_| format!("{name:?} is not a DNS name or IP address to verify"))
    }
}

/// The system's roots (read once per process) and the bundle at `ca`.
fn roots(ca: Option<&PathBuf>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(path) = ca {
        let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut added = 0usize;
        for cert in CertificateDer::pem_slice_iter(&text) {
            let cert =
                cert.map_err(|e| format!("{}: not a PEM certificate: {e}", path.display()))?;
            store.add(cert).map_err(|e| format!("{}: {e}", path.display()))?;
            added = added.saturating_add(1);
        }
        if added == 0 {
            return Err(format!("{}: no PEM certificate in it", path.display()));
        }
    }
    Ok(store)
}

/// The operating system's trusted roots; none if it has none (a bare container), in
/// which case only a configured `ca` verifies origins.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::debug!("reading the system's root certificates: {e}");
        }
        found.certs
    })
}

/// Of the settings and the bytes of every file they name.
fn fingerprint(settings: &OriginTlsSettings) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    settings.hash(&mut hasher);
    let files =
        settings.ca.iter().chain(settings.client_cert.iter().flat_map(|p| [&p.cert, &p.key]));
    for path in files {
        std::fs::read(path).ok().hash(&mut hasher);
    }
    hasher.finish()
}

/// `insecure_skip_verify`: any certificate is taken, but the handshake's signatures
/// are still checked, so the peer holds the key of the certificate it sent.
#[derive(Debug)]
pub struct AnyCertificate(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
