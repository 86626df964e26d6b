//! Certificates for the unit tests: a CA and leaf certificates it signs, made fresh
//! in memory, and rustls configs that trust them.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// A CA that signs leaves.
pub struct TestCa {
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate and its key.
pub struct TestLeaf {
    pub der: CertificateDer<'static>,
    pub key_der: PrivateKeyDer<'static>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "holdfast test CA");
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("CA");
        let der = cert.der().clone();
        TestCa { der, issuer: Issuer::new(params, key) }
    }

    /// A leaf for `names` (DNS names or IP addresses).
    pub fn leaf(&self, names: &[&str]) -> TestLeaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = CertificateParams::new(names).expect("params");
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        TestLeaf {
            der: cert.der().clone(),
            key_der: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }

    /// A client config that trusts this CA only.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).expect("root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    }
}

impl TestLeaf {
    /// A server config serving this leaf.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![self.der.clone()], self.key_der.clone_key())
            .expect("cert");
        Arc::new(config)
    }
}
