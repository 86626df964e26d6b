//! The certificates and keys the manager makes or reads, with no I/O: a new key and
//! its CSR for an order, the self-signed placeholder served until issuance, the
//! TLS-ALPN-01 challenge certificate (RFC 8737), and an issued PEM chain and key turned
//! into the rustls `CertifiedKey` the listeners serve, with its validity period.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, CustomExtension, DistinguishedName, DnType, KeyPair};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::schedule::Validity;

/// Why a certificate could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("cannot make a key or certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the certificate chain holds no certificate")]
    EmptyChain,
    #[error("the certificate chain is not PEM: {0}")]
    ChainPem(rustls_pki_types::pem::Error),
    #[error("the private key is not PEM: {0}")]
    KeyPem(rustls_pki_types::pem::Error),
    #[error("the private key is not one rustls can sign with: {0}")]
    Key(rustls::Error),
    #[error("the private key is not the certificate's: {0}")]
    KeyMismatch(rustls::Error),
    #[error("the certificate does not parse: {0}")]
    Parse(String),
    #[error("the certificate is not for {0}")]
    WrongName(String),
    #[error("the challenge digest is {0} bytes, not the 32 of SHA-256")]
    DigestLength(usize),
}

/// A certificate ready to serve: what the listeners get, its validity period, and the
/// PEM text it was read from (what storage keeps).
#[derive(Clone)]
pub struct Issued {
    pub key: Arc<CertifiedKey>,
    pub validity: Validity,
    pub chain_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("validity", &self.validity).finish_non_exhaustive()
    }
}

impl Issued {
    /// Reads a PEM chain (end-entity certificate first) and its PEM private key, and
    /// checks that the key is the certificate's and that the certificate is for `name`.
    pub fn from_pem(
        name: &str,
        chain_pem: &str,
        key_pem: &str,
    ) -> Result<Issued, CertificateError> {
        let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(CertificateError::ChainPem)?;
        let leaf = chain.first().ok_or(CertificateError::EmptyChain)?;
        let facts = read_leaf(leaf)?;
        if !facts.dns_names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return Err(CertificateError::WrongName(name.to_string()));
        }
        let key =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(CertificateError::KeyPem)?;
        let certified = certified_key(chain, &key)?;
        certified.keys_match().map_err(CertificateError::KeyMismatch)?;
        Ok(Issued {
            key: Arc::new(certified),
            validity: facts.validity,
            chain_pem: chain_pem.to_string(),
            key_pem: key_pem.to_string(),
        })
    }
}

/// A fresh key for a certificate: ECDSA P-256, which every current client accepts and
/// which makes smaller, faster handshakes than RSA.
pub fn new_key() -> Result<KeyPair, CertificateError> {
    Ok(KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?)
}

/// The CSR for `name` signed with `key` (DER). It names nothing but `name` (an empty
/// subject, as CAs fill it in from the SAN), so it holds nothing of the account.
pub fn csr(name: &str, key: &KeyPair) -> Result<Vec<u8>, CertificateError> {
    let mut params = CertificateParams::new(vec![name.to_string()])?;
    params.distinguished_name = DistinguishedName::new();
    Ok(params.serialize_request(key)?.der().to_vec())
}

/// A self-signed certificate for `name`, served until the real one is issued: a
/// client sees a certificate it does not trust rather than a failed handshake.
pub fn placeholder(name: &str) -> Result<Arc<CertifiedKey>, CertificateError> {
    let mut params = CertificateParams::new(vec![name.to_string()])?;
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, format!("{name} (holdfast placeholder until issuance)"));
    params.distinguished_name = subject;
    self_signed(params)
}

/// The TLS-ALPN-01 certificate for `name` (RFC 8737 section 3): self-signed, the name
/// as its only SAN, and the critical acmeIdentifier extension holding `digest`, the
/// SHA-256 of the key authorization.
pub fn alpn_challenge(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, CertificateError> {
    if digest.len() != 32 {
        return Err(CertificateError::DigestLength(digest.len()));
    }
    let mut params = CertificateParams::new(vec![name.to_string()])?;
    params.distinguished_name = DistinguishedName::new();
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    self_signed(params)
}

fn self_signed(params: CertificateParams) -> Result<Arc<CertifiedKey>, CertificateError> {
    let key = new_key()?;
    let cert = params.self_signed(&key)?;
    let key_der = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| CertificateError::Parse(e.to_string()))?;
    Ok(Arc::new(certified_key(vec![cert.der().clone()], &key_der)?))
}

/// The chain and key as rustls serves them, signing with ring.
fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: &PrivateKeyDer<'_>,
) -> Result<CertifiedKey, CertificateError> {
    let signer =
        rustls::crypto::ring::sign::any_supported_type(key).map_err(CertificateError::Key)?;
    Ok(CertifiedKey::new(chain, signer))
}

/// What the manager needs to know of an end-entity certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafFacts {
    pub validity: Validity,
    /// The DNS names of its subjectAltName extension.
    pub dns_names: Vec<String>,
}

/// Reads the validity period and DNS names of a DER certificate.
pub fn read_leaf(der: &[u8]) -> Result<LeafFacts, CertificateError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| CertificateError::Parse(e.to_string()))?;
    let validity = cert.validity();
    let validity = Validity {
        not_before: unix_time(validity.not_before.timestamp()),
        not_after: unix_time(validity.not_after.timestamp()),
    };
    let sans =
        cert.subject_alternative_name().map_err(|e| CertificateError::Parse(e.to_string()))?;
    let dns_names = sans
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(dns) => Some(dns.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(LeafFacts { validity, dns_names })
}

/// Seconds since the epoch as a `SystemTime`; a time before the epoch, or past what
/// `SystemTime` holds, becomes the epoch (so a certificate dated so counts as expired).
fn unix_time(seconds: i64) -> SystemTime {
    let since = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    SystemTime::UNIX_EPOCH.checked_add(since).unwrap_or(SystemTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_is_self_signed_for_the_name() {
        let key = placeholder("a.example").unwrap();
        let leaf = key.end_entity_cert().unwrap();
        let facts = read_leaf(leaf).unwrap();
        assert_eq!(facts.dns_names, vec!["a.example".to_string()]);
        let (_, cert) = x509_parser::parse_x509_certificate(leaf).unwrap();
        assert_eq!(cert.issuer(), cert.subject());
        key.keys_match().unwrap();
    }

    #[test]
    fn alpn_challenge_certificate_carries_the_digest_in_a_critical_extension() {
        let digest = [7u8; 32];
        let key = alpn_challenge("a.example", &digest).unwrap();
        let (_, cert) =
            x509_parser::parse_x509_certificate(key.end_entity_cert().unwrap()).unwrap();
        // id-pe-acmeIdentifier, RFC 8737 section 6.1.
        let ext = cert
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier extension");
        assert!(ext.critical);
        // An OCTET STRING of the 32 digest bytes.
        assert_eq!(ext.value, [&[0x04, 32][..], &digest[..]].concat());
        assert!(alpn_challenge("a.example", &[0u8; 20]).is_err());
    }

    #[test]
    fn issued_pem_is_checked_for_name_and_key() {
        let key = new_key().unwrap();
        let cert = CertificateParams::new(vec!["a.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let issued = Issued::from_pem("A.example", &cert.pem(), &key.serialize_pem()).unwrap();
        assert!(issued.validity.not_before < issued.validity.not_after);
        let wrong = Issued::from_pem("b.example", &cert.pem(), &key.serialize_pem());
        assert!(matches!(wrong, Err(CertificateError::WrongName(_))), "{wrong:?}");
        let other_key = new_key().unwrap().serialize_pem();
        let mismatch = Issued::from_pem("a.example", &cert.pem(), &other_key);
        assert!(matches!(mismatch, Err(CertificateError::KeyMismatch(_))), "{mismatch:?}");
        let garbage = Issued::from_pem("a.example", "not pem", &key.serialize_pem());
        assert!(matches!(garbage, Err(CertificateError::EmptyChain)), "{garbage:?}");
    }

    #[test]
    fn csr_names_only_the_name() {
        use x509_parser::extensions::{GeneralName, ParsedExtension};
        use x509_parser::prelude::FromDer;
        let key = new_key().unwrap();
        let der = csr("a.example", &key).unwrap();
        let (_, request) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
        assert_eq!(request.certification_request_info.subject.iter().count(), 0);
        let names: Vec<String> = request
            .requested_extensions()
            .into_iter()
            .flatten()
            .filter_map(|e| match e {
                ParsedExtension::SubjectAlternativeName(san) => Some(&san.general_names),
                _ => None,
            })
            .flatten()
            .map(|n| match n {
                GeneralName::DNSName(dns) => dns.to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(names, vec!["a.example".to_string()]);
    }
}
