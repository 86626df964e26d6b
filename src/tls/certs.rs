//! Certificate and key files a listener serves: reading PEM, checking that the pair is
//! usable (the key matches, the certificate is in its validity period), and choosing
//! one by the client's SNI name (exact name, then wildcard, then the first pair).
//!
//! A pair that cannot be served is refused with the file and why, so a reload can keep
//! the certificates in force.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// One certificate chain and its key, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CertPair {
    /// PEM: the certificate, then its intermediates.
    pub cert: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why a certificate pair cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{path}: {error}")]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: not a PEM certificate chain: {error}")]
    BadCertificate { path: PathBuf, error: String },
    #[error("{path}: no usable PEM private key in it: {error}")]
    BadKey { path: PathBuf, error: String },
    #[error("{key} does not belong to the certificate in {cert}")]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error("{path}: the certificate expired {ago} ago")]
    Expired { path: PathBuf, ago: String },
    #[error("{path}: the certificate is not valid before {from}")]
    NotYetValid { path: PathBuf, from: String },
}

/// A pair read and checked: what rustls serves, and the names it is for.
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// DNS names of the certificate's subjectAltName (lowercase; `*.example.com` kept).
    pub names: Vec<String>,
}

/// Reads and checks `pair`.
pub fn load(pair: &CertPair) -> Result<Loaded, CertError> {
    let (cert_pem, key_pem) = read_pair(pair)?;
    check(pair, &cert_pem, &key_pem)
}

/// The contents of `pair`'s certificate and key files.
fn read_pair(pair: &CertPair) -> Result<(Vec<u8>, Vec<u8>), CertError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|error| CertError::Read { path: path.to_owned(), error })
    };
    Ok((read(&pair.cert)?, read(&pair.key)?))
}

/// Checks `pair` as read: `cert_pem` and `key_pem` are its files' contents.
fn check(pair: &CertPair, cert_pem: &[u8], key_pem: &[u8]) -> Result<Loaded, CertError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::BadCertificate { path: pair.cert.clone(), error: e.to_string() })?;
    let Some(leaf) = chain.first() else {
        return Err(CertError::NoCertificate { path: pair.cert.clone() });
    };
    let (names, not_before, not_after) = describe(leaf)
        .map_err(|error| CertError::BadCertificate { path: pair.cert.clone(), error })?;
    check_validity(&pair.cert, not_before, not_after)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| CertError::BadKey { path: pair.key.clone(), error: e.to_string() })?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| CertError::BadKey { path: pair.key.clone(), error: e.to_string() })?;
    let certified = CertifiedKey::new(chain, signer);
    if certified.keys_match().is_err() {
        return Err(CertError::Mismatch { cert: pair.cert.clone(), key: pair.key.clone() });
    }
    Ok(Loaded { key: Arc::new(certified), names })
}

/// The DNS names, notBefore and notAfter (Unix seconds) of a DER certificate.
pub fn describe(der: &CertificateDer<'_>) -> Result<(Vec<String>, i64, i64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let validity = cert.validity();
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push(dns.to_ascii_lowercase());
            }
        }
    }
    Ok((names, validity.not_before.timestamp(), validity.not_after.timestamp()))
}

fn check_validity(path: &Path, not_before: i64, not_after: i64) -> Result<(), CertError> {
    let now = unix_now();
    let text = |secs: i64| {
        let at = UNIX_EPOCH.checked_add(Duration::from_secs(secs.max(0).unsigned_abs()));
        at.map_or_else(|| secs.to_string(), httpdate::fmt_http_date)
    };
    if now > not_after {
        let ago = Duration::from_secs(now.saturating_sub(not_after).unsigned_abs());
        let ago = humantime::format_duration(ago);
        return Err(CertError::Expired { path: path.to_owned(), ago: ago.to_string() });
    }
    if now < not_before {
        return Err(CertError::NotYetValid { path: path.to_owned(), from: text(not_before) });
    }
    Ok(())
}

/// Seconds since the Unix epoch now.
pub fn unix_now() -> i64 {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// A listener's certificates from files, by name.
pub struct ServerCerts {
    /// Each pair's key, in the configured order (the first is the default).
    keys: Vec<Arc<CertifiedKey>>,
    exact: HashMap<String, usize>,
    /// `*.example.com` as `example.com`.
    wildcard: HashMap<String, usize>,
    /// Of the files' contents as they were read (see [`fingerprint`]).
    fingerprint: u64,
}

impl ServerCerts {
    /// Loads every pair; the first problem is the error.
    pub fn load(pairs: &[CertPair]) -> Result<ServerCerts, CertError> {
        let mut certs = ServerCerts {
            keys: Vec::new(),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            fingerprint: 0,
        };
        let mut contents = Contents::default();
        for pair in pairs {
            let (cert_pem, key_pem) = read_pair(pair)?;
            contents.add(Some(&cert_pem));
            contents.add(Some(&key_pem));
            certs.add(check(pair, &cert_pem, &key_pem)?);
        }
        certs.fingerprint = contents.finish();
        Ok(certs)
    }

    /// The fingerprint of the contents these certificates were read from: what
    /// [`fingerprint`] gives for the files until one of them changes.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    fn add(&mut self, loaded: Loaded) {
        let i = self.keys.len();
        self.keys.push(loaded.key);
        for name in loaded.names {
            // The first pair that names a host serves it.
            match name.strip_prefix("*.") {
                Some(parent) => self.wildcard.entry(parent.to_owned()).or_insert(i),
                None => self.exact.entry(name).or_insert(i),
            };
        }
    }

    /// The certificate for `sni` by exact name, else by wildcard, if one is for it.
    pub fn named(&self, sni: &str) -> Option<&Arc<CertifiedKey>> {
        let sni = sni.to_ascii_lowercase();
        let i = self.exact.get(&sni).or_else(|| {
            let (_, parent) = sni.split_once('.')?;
            self.wildcard.get(parent)
        })?;
        self.keys.get(*i)
    }

    /// The first pair: served when no name matches (or the client sent no SNI).
    pub fn default_key(&self) -> Option<&Arc<CertifiedKey>> {
        self.keys.first()
    }
}

/// A fingerprint of the files' contents: changes when a file is replaced or rewritten.
pub fn fingerprint(pairs: &[CertPair]) -> u64 {
    let mut contents = Contents::default();
    for pair in pairs {
        for path in [&pair.cert, &pair.key] {
            contents.add(std::fs::read(path).ok().as_deref());
        }
    }
    contents.finish()
}

/// Hashes files' contents in order (`None`: a file that could not be read), the same
/// way for [`fingerprint`] and [`ServerCerts::load`].
#[derive(Default)]
struct Contents(std::collections::hash_map::DefaultHasher);

impl Contents {
    fn add(&mut self, bytes: Option<&[u8]>) {
        std::hash::Hash::hash(&bytes, &mut self.0);
    }

    fn finish(&self) -> u64 {
        std::hash::Hasher::finish(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed pair for `example.test`, written to a fresh folder.
    fn pair(test: &str) -> CertPair {
        let dir =
            std::env::temp_dir().join(format!("holdfast-certs-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["example.test".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let pair = CertPair { cert: dir.join("cert.pem"), key: dir.join("key.pem") };
        std::fs::write(&pair.cert, cert.pem()).unwrap();
        std::fs::write(&pair.key, key.serialize_pem()).unwrap();
        pair
    }

    #[test]
    fn loaded_certificates_carry_the_fingerprint_the_file_watch_computes() {
        let pairs = [pair("fingerprint")];
        let loaded = ServerCerts::load(&pairs).unwrap();
        // Equal, or the watch would take unchanged files for changed ones every time.
        assert_eq!(loaded.fingerprint(), fingerprint(&pairs));
        assert!(loaded.named("example.test").is_some());
        std::fs::write(&pairs[0].key, b"changed").unwrap();
        assert_ne!(loaded.fingerprint(), fingerprint(&pairs));
        let _ = std::fs::remove_dir_all(pairs[0].cert.parent().unwrap());
    }
}
