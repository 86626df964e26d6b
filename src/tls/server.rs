//! TLS for a listener's clients: the rustls server config (policy, resumption, ALPN),
//! the certificate chosen for each handshake (ACME's challenge or issued certificate,
//! else the configured files by SNI), reloading the files, and the handshake itself.
//!
//! # Policy
//! TLS 1.3 and 1.2 only, with rustls' ring suites: AES-GCM and ChaCha20-Poly1305 with
//! ECDHE. That is Mozilla's "intermediate" profile without its DHE suites (rustls has no
//! finite-field DH, CBC, RSA key exchange or SSLv3/TLS 1.0/1.1).
//!
//! # Resumption
//! Session tickets (TLS 1.2 and 1.3) under rotating keys, and a session-ID cache for
//! TLS 1.2 clients that do not take tickets. Both belong to the listener's
//! [`TlsServer`], which a reload keeps, so a reload does not cost every client a full
//! handshake.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;

use super::certs::{self, CertPair, ServerCerts};
use super::failures::{HandshakeFailure, TlsMetrics};
use super::store::DynamicCerts;
use crate::http1::encode::{self, ConnectionOut};
use crate::net::{self, Stream, TlsStream};

/// ALPN of a TLS-ALPN-01 validation (RFC 8737).
pub const ACME_ALPN: &[u8] = b"acme-tls/1";
/// ALPN of HTTP/1.1.
pub const HTTP1_ALPN: &[u8] = b"http/1.1";
/// ALPN of HTTP/2 over TLS.
pub const H2_ALPN: &[u8] = b"h2";

/// TLS 1.2 sessions the session-ID cache keeps per listener (about 1 kB each).
const SESSION_CACHE: usize = 10_000;

/// How often certificate files are checked for changes.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(5);

/// A listener's TLS as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// Certificate pairs; the first is served when no name matches.
    pub certificates: Vec<CertPair>,
    /// Serve the certificates `[acme]` obtains (and answer its TLS-ALPN-01 challenges).
    pub acme: bool,
    /// Offer HTTP/2 (`h2`) by ALPN, preferred over HTTP/1.1.
    pub http2: bool,
}

/// What picks a handshake's certificate.
struct Resolver {
    files: ArcSwap<ServerCerts>,
    acme: Option<Arc<DynamicCerts>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name();
        if let Some(acme) = &self.acme {
            let challenge = hello.alpn().is_some_and(|mut p| p.any(|p| p == ACME_ALPN));
            if challenge {
                return acme.alpn_challenge(name?);
            }
            if let Some(issued) = name.and_then(|n| acme.issued(n)) {
                return Some(issued);
            }
        }
        let files = self.files.load();
        name.and_then(|n| files.named(n)).or_else(|| files.default_key()).cloned()
    }
}

/// A TLS listener's state: the server config and the certificate files behind it.
/// Kept across reloads, so its tickets and session cache outlive them.
pub struct TlsServer {
    config: Arc<ServerConfig>,
    resolver: Arc<Resolver>,
    /// The pairs in force and the fingerprint of their files' contents.
    pairs: Mutex<(Vec<CertPair>, u64)>,
    metrics: Arc<TlsMetrics>,
}

/// A client connection whose handshake finished.
pub struct Accepted {
    pub stream: Stream,
    /// The connection was a TLS-ALPN-01 validation: close it, there is no request.
    pub acme_challenge: bool,
}

impl TlsServer {
    /// A server for `tls` with its certificate files already read (`files`); `acme` is
    /// the store `[acme]` fills, served when `tls.acme` is on.
    pub fn new(
        tls: &ListenerTls,
        files: ServerCerts,
        acme: &Arc<DynamicCerts>,
        metrics: &Arc<TlsMetrics>,
    ) -> TlsServer {
        let acme = tls.acme.then(|| Arc::clone(acme));
        let pairs = Mutex::new((tls.certificates.clone(), files.fingerprint()));
        let resolver = Arc::new(Resolver { files: ArcSwap::from_pointee(files), acme });
        let config = server_config(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>, tls.http2);
        TlsServer { config: Arc::new(config), resolver, pairs, metrics: Arc::clone(metrics) }
    }

    /// Serves `files`, read from `tls`'s certificate files, from the next handshake on.
    /// The server config (tickets, session cache) stays.
    pub fn install(&self, tls: &ListenerTls, files: ServerCerts) {
        let fingerprint = files.fingerprint();
        self.resolver.files.store(Arc::new(files));
        *self.lock_pairs() = (tls.certificates.clone(), fingerprint);
    }

    /// Whether it serves ACME's certificates.
    pub fn serves_acme(&self) -> bool {
        self.resolver.acme.is_some()
    }

    /// Whether it offers HTTP/2 by ALPN.
    pub fn offers_h2(&self) -> bool {
        self.config.alpn_protocols.first().is_some_and(|p| p == H2_ALPN)
    }

    fn lock_pairs(&self) -> std::sync::MutexGuard<'_, (Vec<CertPair>, u64)> {
        self.pairs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reloads the files if their contents changed since they were last read; a
    /// broken new file is logged once (per change) and the old certificates stay.
    pub fn reload_if_changed(&self, listen: SocketAddr) {
        let (pairs, seen) = self.lock_pairs().clone();
        let now = certs::fingerprint(&pairs);
        if now == seen {
            return;
        }
        let tls =
            ListenerTls { certificates: pairs, acme: self.serves_acme(), http2: self.offers_h2() };
        match ServerCerts::load(&tls.certificates) {
            Ok(files) => {
                self.install(&tls, files);
                tracing::info!(listen = %listen, "certificate files changed; now serving them");
            }
            Err(e) => {
                // Remember the broken contents so the error is logged once, not every 5 s.
                self.lock_pairs().1 = now;
                tracing::error!(listen = %listen, "certificate files changed but cannot be served, the previous certificates stay: {e}");
            }
        }
    }

    /// Checks the certificate files every [`WATCH_INTERVAL`] while the server lives.
    pub fn watch(server: &Arc<TlsServer>, listen: SocketAddr) {
        let weak: Weak<TlsServer> = Arc::downgrade(server);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH_INTERVAL).await;
                let Some(server) = weak.upgrade() else { return };
                // Reading files blocks: off the runtime's workers.
                let _ = tokio::task::spawn_blocking(move || server.reload_if_changed(listen)).await;
            }
        });
    }

    /// Runs the handshake on `tcp` within `timeout`. Plain HTTP sent to the port is
    /// answered with a 400 that says to use https:// (and counted as a failure); the
    /// answer has a time limit of its own, `PLAIN_HTTP_LINGER`, so a `timeout` shorter
    /// than that neither cuts it off nor counts the client as timed out.
    pub async fn accept(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
    ) -> Option<Accepted> {
        let deadline = net::later(tokio::time::Instant::now(), timeout);
        let failure = match tokio::time::timeout_at(deadline, looks_like_plain_http(&tcp)).await {
            Ok(Ok(false)) => match tokio::time::timeout_at(deadline, self.handshake(tcp)).await {
                Ok(Ok(accepted)) => return Some(accepted),
                Ok(Err(failure)) => failure,
                Err(_) => HandshakeFailure::Timeout,
            },
            Ok(Ok(true)) => {
                answer_plain_http(Stream::Tcp(tcp)).await;
                HandshakeFailure::PlainHttp
            }
            Ok(Err(failure)) => failure,
            Err(_) => HandshakeFailure::Timeout,
        };
        self.metrics.failed(failure, peer);
        None
    }

    async fn handshake(&self, tcp: TcpStream) -> Result<Accepted, HandshakeFailure> {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&self.config));
        let tls = acceptor.accept(tcp).await.map_err(|e| HandshakeFailure::of_io(&e))?;
        let (tcp, conn) = tls.into_inner();
        let acme_challenge = conn.alpn_protocol() == Some(ACME_ALPN);
        self.metrics.handshake(&conn);
        let stream = Stream::Tls(Box::new(TlsStream::new(tcp, conn.into())));
        Ok(Accepted { stream, acme_challenge })
    }
}

/// The server config every TLS listener uses, certificates from `resolver`.
/// `h2` is offered first when `http2`.
fn server_config(resolver: Arc<dyn ResolvesServerCert>, http2: bool) -> ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("the ring provider supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    match rustls::crypto::ring::Ticketer::new() {
        Ok(ticketer) => config.ticketer = ticketer,
        Err(e) => tracing::warn!("TLS session tickets are off: {e}"),
    }
    config.alpn_protocols = vec![HTTP1_ALPN.to_vec(), ACME_ALPN.to_vec()];
    if http2 {
        config.alpn_protocols.insert(0, H2_ALPN.to_vec());
    }
    config
}

/// Whether the client's first bytes are an HTTP request rather than a TLS handshake
/// record (which starts with 0x16).
async fn looks_like_plain_http(tcp: &TcpStream) -> Result<bool, HandshakeFailure> {
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await {
        Ok(0) => Err(HandshakeFailure::Closed),
        Ok(_) => Ok(first.first().is_some_and(u8::is_ascii_uppercase)),
        Err(_) => Err(HandshakeFailure::Io),
    }
}

/// Tells a client that spoke HTTP to the HTTPS port what to do, then closes.
async fn answer_plain_http(mut stream: Stream) {
    let body = "holdfast: this port speaks HTTPS; use https:// to reach it\n";
    let mut answer = Vec::with_capacity(256);
    encode::local_response(400, body, ConnectionOut::Close, &mut answer);
    if net::write_all(&stream, &[&answer], PLAIN_HTTP_LINGER).await.is_err() {
        return;
    }
    // The request is unread: read it (briefly) so the close does not reset the answer.
    let mut buf = net::InBuf::new(net::CLIENT_BUF);
    net::linger(&mut stream, &mut buf, PLAIN_HTTP_LINGER).await;
}

/// How long a plain-HTTP client's answer may take to go out and its request to drain.
const PLAIN_HTTP_LINGER: Duration = Duration::from_secs(1);
