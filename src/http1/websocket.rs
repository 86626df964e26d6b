//! The WebSocket opening handshake's key and the answer that proves an origin read it
//! (RFC 6455, 4.1 and 4.2.2). holdfast makes the key itself when it opens a WebSocket
//! on an HTTP/1.1 origin for an HTTP/2 client, which sends none (RFC 8441, 5), and
//! checks the origin's `Sec-WebSocket-Accept` against it before it tunnels anything.
//!
//! Only the handshake's fields: the frames that follow are the client's and the
//! origin's, and pass through untouched.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};

/// What RFC 6455 (1.3) appends to the key before hashing it.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A `Sec-WebSocket-Key`: a nonce of 16 random bytes, in base64 (RFC 6455, 4.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSocketKey {
    /// The nonce in base64: 24 characters.
    text: String,
}

impl WebSocketKey {
    /// A fresh key from the system's random source; `None` if it gave no bytes.
    pub fn generate() -> Option<WebSocketKey> {
        let mut nonce = [0u8; 16];
        SystemRandom::new().fill(&mut nonce).ok()?;
        Some(WebSocketKey::from_nonce(nonce))
    }

    /// The key of a given nonce.
    pub fn from_nonce(nonce: [u8; 16]) -> WebSocketKey {
        WebSocketKey { text: BASE64.encode(nonce) }
    }

    /// The key as it goes in `Sec-WebSocket-Key`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The `Sec-WebSocket-Accept` of an origin that read this key: the base64 of the
    /// SHA-1 of the key's text and the GUID (RFC 6455, 4.2.2).
    pub fn accept(&self) -> String {
        let mut sha1 = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
        sha1.update(self.text.as_bytes());
        sha1.update(GUID);
        BASE64.encode(sha1.finish())
    }

    /// Whether `value`, an origin's `Sec-WebSocket-Accept`, answers this key; the
    /// whitespace around it does not count (RFC 6455, 4.1, the client's checks).
    pub fn is_answered_by(&self, value: &[u8]) -> bool {
        value.trim_ascii() == self.accept().as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_example_key_has_the_rfc_example_accept() {
        // RFC 6455, 1.3 and 4.2.2: the nonce "the sample nonce".
        let key = WebSocketKey::from_nonce(*b"the sample nonce");
        assert_eq!(key.as_str(), "dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(key.accept(), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert!(key.is_answered_by(b" s3pPLMBiTxaQ9kYGzzhZRbK+xOo= "));
        assert!(!key.is_answered_by(b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo"));
        assert!(!key.is_answered_by(b"dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!key.is_answered_by(b""));
    }

    #[test]
    fn generated_keys_are_sixteen_bytes_and_differ() {
        let a = WebSocketKey::generate().unwrap();
        let b = WebSocketKey::generate().unwrap();
        assert_eq!(BASE64.decode(a.as_str()).unwrap().len(), 16);
        assert_eq!(a.as_str().len(), 24);
        assert_ne!(a, b);
    }
}
