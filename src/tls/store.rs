//! Certificates that change while holdfast runs, shared between whoever obtains them
//! (`acme`) and the TLS listeners that serve them: issued certificates by host name,
//! TLS-ALPN-01 challenge certificates by host name, and HTTP-01 key authorizations by
//! token. Writers replace whole entries; readers (one per handshake or challenge
//! request) take a reference under a short read lock.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rustls::sign::CertifiedKey;

/// The certificates and challenge answers a certificate authority's client keeps up
/// to date. Names are stored and looked up in lowercase.
#[derive(Default)]
pub struct DynamicCerts {
    issued: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    alpn_challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    http_challenges: RwLock<HashMap<String, String>>,
}

impl std::fmt::Debug for DynamicCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicCerts").finish_non_exhaustive()
    }
}

fn read<K: Clone + std::hash::Hash + Eq, V: Clone>(
    map: &RwLock<HashMap<K, V>>,
    key: &K,
) -> Option<V> {
    map.read().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
}

fn write<K: std::hash::Hash + Eq, V>(map: &RwLock<HashMap<K, V>>, key: K, value: Option<V>) {
    let mut map = map.write().unwrap_or_else(|e| e.into_inner());
    match value {
        Some(v) => map.insert(key, v),
        None => map.remove(&key),
    };
}

impl DynamicCerts {
    /// The certificate served for `name` (issued, or a placeholder until it is).
    pub fn issued(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        read(&self.issued, &name.to_ascii_lowercase())
    }

    /// Serves `cert` for `name` from the next handshake on (`None`: no longer).
    pub fn set_issued(&self, name: &str, cert: Option<Arc<CertifiedKey>>) {
        write(&self.issued, name.to_ascii_lowercase(), cert);
    }

    /// The TLS-ALPN-01 challenge certificate for `name`, while a validation runs.
    pub fn alpn_challenge(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        read(&self.alpn_challenges, &name.to_ascii_lowercase())
    }

    /// Answers TLS-ALPN-01 handshakes for `name` with `cert` (`None`: no longer).
    pub fn set_alpn_challenge(&self, name: &str, cert: Option<Arc<CertifiedKey>>) {
        write(&self.alpn_challenges, name.to_ascii_lowercase(), cert);
    }

    /// The key authorization to answer `GET /.well-known/acme-challenge/TOKEN` with.
    pub fn http_challenge(&self, token: &str) -> Option<String> {
        read(&self.http_challenges, &token.to_string())
    }

    /// Answers HTTP-01 requests for `token` with `key_authorization` (`None`: no
    /// longer).
    pub fn set_http_challenge(&self, token: &str, key_authorization: Option<String>) {
        write(&self.http_challenges, token.to_string(), key_authorization);
    }
}
