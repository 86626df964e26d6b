//! TLS for the tests: a CA and the certificates it signs, made fresh per test and
//! written as PEM files to the test's temporary directory ([`Pki`]); a TLS origin that counts the
//! TCP connections it accepts and the handshakes on them (full or resumed, the SNI each
//! asked for, the client certificate); HTTPS clients for holdfast's listeners; and the
//! `curl` and `openssl` tools, run with a deadline.
//!
//! A certificate's common name is its label, so a test can say which certificate a
//! server presented ([`common_name`]).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use holdfast::Config;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1 as client_http1;
use hyper::server::conn::http1 as server_http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::version::{TLS12, TLS13};
use rustls::{
    ClientConfig, DigitallySignedStruct, HandshakeKind, ProtocolVersion, RootCertStore,
    ServerConfig, SignatureScheme, SupportedProtocolVersion,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::client::{request, ClientBody, Reply};
use super::{skip_or_fail, within, within_for, Generated, TempDir, DEADLINE};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parses a config file's text (paths in it are absolute); panics with its problems.
pub fn parse_config(text: &str) -> Config {
    Config::parse(text, Path::new("tls.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A test's CA, a temporary directory, and the CA's certificate written there.
pub struct Pki {
    pub dir: TempDir,
    pub ca: Ca,
    pub ca_file: PathBuf,
}

impl Pki {
    pub fn new(test: &str) -> Pki {
        let dir = TempDir::new(test);
        let ca = Ca::new("holdfast test CA");
        let ca_file = ca.write(&dir, "ca.pem");
        Pki { dir, ca, ca_file }
    }

    /// A certificate for `localhost` and `127.0.0.1`, labelled `label`, written as
    /// `NAME.pem` and `NAME.key`.
    pub fn localhost(&self, label: &str, name: &str) -> (Leaf, PemFiles) {
        let leaf = self.ca.leaf(label, &["localhost", "127.0.0.1"]);
        let files = leaf.write(&self.dir, name);
        (leaf, files)
    }
}

/// A certificate authority that signs the test's certificates.
pub struct Ca {
    pub pem: String,
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A new CA whose common name is `name`.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("self-signed CA");
        Ca { pem: cert.pem(), der: cert.der().clone(), issuer: Issuer::new(params, key) }
    }

    /// A certificate with common name `label` for `names` (DNS names, `*.` wildcards,
    /// or IP addresses, which become IP SANs), valid from 1975 to 4096.
    pub fn leaf(&self, label: &str, names: &[&str]) -> Leaf {
        self.sign(label, names, false)
    }

    /// Like [`Ca::leaf`], but it expired on 2020-01-01.
    pub fn expired_leaf(&self, label: &str, names: &[&str]) -> Leaf {
        self.sign(label, names, true)
    }

    fn sign(&self, label: &str, names: &[&str], expired: bool) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, label);
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed leaf");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            key_der: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }

    /// Writes the CA certificate to `name` in `dir`.
    pub fn write(&self, dir: &TempDir, name: &str) -> PathBuf {
        dir.write(name, &self.pem)
    }

    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).expect("a CA certificate");
        roots
    }

    /// A client config that trusts this CA only, speaks TLS 1.3 and 1.2, and keeps
    /// sessions to resume (rustls' default in-memory cache).
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client_config_for(&[&TLS13, &TLS12])
    }

    /// [`Ca::client_config`] that offers `alpn` (in order of preference) instead of
    /// `http/1.1` alone.
    pub fn client_config_alpn(&self, alpn: &[&[u8]]) -> Arc<ClientConfig> {
        let mut config = Arc::unwrap_or_clone(self.client_config());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// [`Ca::client_config`] limited to `versions`.
    pub fn client_config_for(
        &self,
        versions: &[&'static SupportedProtocolVersion],
    ) -> Arc<ClientConfig> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(self.roots())
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// A certificate and its private key.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
    key_der: PrivateKeyDer<'static>,
}

/// Where a certificate and its key were written.
#[derive(Debug, Clone)]
pub struct PemFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl PemFiles {
    /// `cert = "..."` and `key = "..."` on two lines, for a config file's table.
    pub fn toml(&self) -> String {
        format!("cert = {}\nkey = {}", toml_path(&self.cert), toml_path(&self.key))
    }

    /// `{ cert = "...", key = "..." }`, for a config file's array of pairs.
    pub fn toml_inline(&self) -> String {
        format!("{{ cert = {}, key = {} }}", toml_path(&self.cert), toml_path(&self.key))
    }
}

/// `path` as a TOML string.
pub fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

impl Leaf {
    /// A server config presenting this certificate (TLS 1.3 and 1.2) that offers `alpn`,
    /// in order of preference.
    pub fn server_config(&self, alpn: &[&[u8]]) -> Arc<ServerConfig> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&TLS13, &TLS12])
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![self.der.clone()], self.key_der.clone_key())
            .expect("the server's certificate");
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// Writes `NAME.pem` and `NAME.key` to `dir`.
    pub fn write(&self, dir: &TempDir, name: &str) -> PemFiles {
        let files = PemFiles {
            cert: dir.path().join(format!("{name}.pem")),
            key: dir.path().join(format!("{name}.key")),
        };
        self.replace(&files);
        files
    }

    /// Replaces the contents of `files` with this certificate and key, each file by a
    /// rename, so a reader sees the old file or the new one, never half of one.
    pub fn replace(&self, files: &PemFiles) {
        replace_file(&files.key, &self.key_pem);
        replace_file(&files.cert, &self.cert_pem);
    }
}

/// Writes `text` to `path` by way of a temporary file renamed over it.
pub fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write a temporary file");
    std::fs::rename(&tmp, path).expect("rename over the file");
}

/// The common name of a DER certificate (a [`Leaf`]'s label).
pub fn common_name(der: &CertificateDer<'_>) -> String {
    let (_, cert) = x509_parser::parse_x509_certificate(der).expect("a DER certificate");
    let cn = cert.subject().iter_common_name().next().expect("a common name");
    cn.as_str().expect("a text common name").to_string()
}

/// A client config that takes any certificate (and still checks the handshake's
/// signatures), for tests that ask which certificate a server presents, not whether it
/// is trusted.
pub fn any_certificate_config() -> Arc<ClientConfig> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth();
    Arc::new(config)
}

#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

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

/// `name` as rustls takes it: an IP address (verified against IP SANs, no SNI sent) or
/// a DNS name (sent as SNI).
fn server_name(name: &str) -> ServerName<'static> {
    ServerName::try_from(name.to_string()).expect("a DNS name or an IP address")
}

/// A TLS handshake with `addr` for `name`, within [`DEADLINE`].
pub async fn tls_connect(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    name: &str,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    within("TLS connect", async {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        tokio_rustls::TlsConnector::from(Arc::clone(config)).connect(server_name(name), tcp).await
    })
    .await
}

/// The label of the certificate `addr` presents for `name` (no SNI for an IP address).
pub async fn presented(addr: SocketAddr, name: &str) -> String {
    let tls = tls_connect(addr, &any_certificate_config(), name).await.expect("TLS handshake");
    let (_, conn) = tls.get_ref();
    common_name(conn.peer_certificates().and_then(|c| c.first()).expect("a certificate"))
}

/// One HTTP/1.1 keep-alive connection over TLS.
pub struct HttpsClient {
    sender: client_http1::SendRequest<ClientBody>,
    conn: JoinHandle<()>,
    /// How the handshake went: full or resumed.
    pub kind: HandshakeKind,
    pub version: ProtocolVersion,
    /// The label of the certificate the server presented.
    pub certificate: String,
}

impl Drop for HttpsClient {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl HttpsClient {
    /// Connects and handshakes for `name`, verifying as `config` says.
    pub async fn connect(addr: SocketAddr, config: &Arc<ClientConfig>, name: &str) -> HttpsClient {
        let tls = tls_connect(addr, config, name).await.expect("TLS handshake with holdfast");
        let (_, conn) = tls.get_ref();
        let kind = conn.handshake_kind().expect("the handshake finished");
        let version = conn.protocol_version().expect("a version");
        let certificate =
            common_name(conn.peer_certificates().and_then(|c| c.first()).expect("a certificate"));
        let (sender, conn) = within("HTTP handshake", client_http1::handshake(TokioIo::new(tls)))
            .await
            .expect("HTTP/1.1 over TLS");
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        HttpsClient { sender, conn, kind, version, certificate }
    }

    /// `GET path` with `Host: holdfast.test`, read to the end.
    pub async fn get(&mut self, path: &str) -> Reply {
        self.request(Method::GET, path, Empty::new().map_err(Into::into).boxed()).await
    }

    /// `GET path` with `Host: host`, read to the end.
    pub async fn get_host(&mut self, host: &str, path: &str) -> Reply {
        let mut req = request(Method::GET, path, Empty::new().map_err(Into::into).boxed());
        req.headers_mut().insert(http::header::HOST, host.parse().expect("a valid host"));
        self.send(req).await
    }

    /// Sends a request with `Host: holdfast.test` and reads the whole response.
    pub async fn request(&mut self, method: Method, path: &str, body: ClientBody) -> Reply {
        self.send(request(method, path, body)).await
    }

    async fn send(&mut self, req: http::Request<ClientBody>) -> Reply {
        within("client ready", self.sender.ready()).await.expect("connection ready");
        let resp = within("response head", self.sender.send_request(req)).await.expect("response");
        let (parts, body) = resp.into_parts();
        let body = within("response body", body.collect()).await.expect("body").to_bytes();
        Reply { status: parts.status, headers: parts.headers, body }
    }
}

/// How a [`TlsOrigin`] behaves.
#[derive(Default)]
pub struct TlsOriginOptions {
    /// Close a keep-alive connection idle this long, without a word to the peer.
    pub idle_close: Option<Duration>,
    /// Require a client certificate signed by one of these.
    pub client_roots: Option<RootCertStore>,
    /// A while after each response, send a TLS 1.3 KeyUpdate on the idle connection:
    /// session housekeeping a pooled connection receives between requests. (The origin
    /// then reads requests by hand, heads only, instead of with hyper.)
    pub key_update_when_idle: bool,
}

/// One finished handshake at a [`TlsOrigin`].
#[derive(Debug, Clone)]
pub struct OriginHandshake {
    /// The name the client sent (SNI), if any.
    pub sni: Option<String>,
    pub resumed: bool,
    /// The label of the client's certificate, if it sent one.
    pub client: Option<String>,
}

#[derive(Default)]
struct TlsOriginState {
    accepted: AtomicUsize,
    closed: AtomicUsize,
    requests: AtomicUsize,
    handshakes: Mutex<Vec<OriginHandshake>>,
    /// Why handshakes failed, in rustls' words.
    failures: Mutex<Vec<String>>,
    /// KeyUpdates sent on idle connections.
    key_updates: AtomicUsize,
}

/// An HTTPS origin on `127.0.0.1:0`: it reads each request's body and answers 200 with
/// `x-conn` (the number of the handshake its connection made, from 1), `x-sni` (the name
/// the connection asked for, `-` for none), `x-path` and `x-received-bytes`; the body is
/// N bytes of `x` for `/bytes/N`, a line naming the path otherwise. Keep-alive on.
pub struct TlsOrigin {
    addr: SocketAddr,
    state: Arc<TlsOriginState>,
    accept: JoinHandle<()>,
}

impl Drop for TlsOrigin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl TlsOrigin {
    /// Serves `leaf` (TLS 1.3 and 1.2, sessions resumable).
    pub async fn start(leaf: &Leaf, options: TlsOriginOptions) -> TlsOrigin {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&TLS13, &TLS12])
            .expect("versions");
        let builder = match options.client_roots {
            None => builder.with_no_client_auth(),
            Some(roots) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                        .build()
                        .expect("a client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(vec![leaf.der.clone()], leaf.key_der.clone_key())
            .expect("the origin's certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the TLS origin");
        let addr = listener.local_addr().expect("TLS origin address");
        let state = Arc::new(TlsOriginState::default());
        let key_update_when_idle = options.key_update_when_idle;
        let mut http = server_http1::Builder::new();
        if let Some(idle) = options.idle_close {
            http.timer(TokioTimer::new()).header_read_timeout(idle);
        }
        let accept = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    state.accepted.fetch_add(1, Ordering::SeqCst);
                    let _ = tcp.set_nodelay(true);
                    let (acceptor, state, http) =
                        (acceptor.clone(), Arc::clone(&state), http.clone());
                    tokio::spawn(serve_tls(tcp, acceptor, state, http, key_update_when_idle));
                }
            })
        };
        TlsOrigin { addr, state, accept }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Accepted connections that have since ended.
    pub fn closed(&self) -> usize {
        self.state.closed.load(Ordering::SeqCst)
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Every finished handshake, in order.
    pub fn handshakes(&self) -> Vec<OriginHandshake> {
        self.state.handshakes.lock().unwrap().clone()
    }

    /// KeyUpdates sent on idle connections ([`TlsOriginOptions::key_update_when_idle`]).
    pub fn key_updates(&self) -> usize {
        self.state.key_updates.load(Ordering::SeqCst)
    }

    /// Why handshakes failed, in order.
    pub fn failures(&self) -> Vec<String> {
        self.state.failures.lock().unwrap().clone()
    }
}

async fn serve_tls(
    tcp: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<TlsOriginState>,
    http: server_http1::Builder,
    key_update_when_idle: bool,
) {
    let tls = match acceptor.accept(tcp).await {
        Ok(tls) => tls,
        Err(e) => {
            state.failures.lock().unwrap().push(e.to_string());
            state.closed.fetch_add(1, Ordering::SeqCst);
            return;
        }
    };
    let (_, conn) = tls.get_ref();
    let handshake = OriginHandshake {
        sni: conn.server_name().map(str::to_string),
        resumed: conn.handshake_kind() == Some(HandshakeKind::Resumed),
        client: conn.peer_certificates().and_then(|c| c.first()).map(common_name),
    };
    let sni = handshake.sni.clone().unwrap_or_else(|| "-".to_string());
    let number = {
        let mut handshakes = state.handshakes.lock().unwrap();
        handshakes.push(handshake);
        handshakes.len()
    };
    if key_update_when_idle {
        serve_by_hand(tls, number, &state).await;
        state.closed.fetch_add(1, Ordering::SeqCst);
        return;
    }
    let service_state = Arc::clone(&state);
    let service = service_fn(move |req: Request<Incoming>| {
        let state = Arc::clone(&service_state);
        let sni = sni.clone();
        async move {
            state.requests.fetch_add(1, Ordering::SeqCst);
            let path = req.uri().path().to_string();
            let mut body = req.into_body();
            let mut received = 0u64;
            // Bounded by the request body; each round takes one frame.
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(io::Error::other)?;
                received += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            let body = match path.strip_prefix("/bytes/").and_then(|n| n.parse().ok()) {
                Some(n) => Generated::sized(n).boxed(),
                None => Full::new(Bytes::from(format!("tls origin: {path}\n"))).boxed(),
            };
            let resp = Response::builder()
                .header("x-conn", number)
                .header("x-sni", sni.as_str())
                .header("x-path", path.as_str())
                .header("x-received-bytes", received)
                .body(body)
                .expect("a response");
            Ok::<_, io::Error>(resp)
        }
    });
    let _ = http.serve_connection(TokioIo::new(tls), service).await;
    state.closed.fetch_add(1, Ordering::SeqCst);
}

/// How long after a response [`serve_by_hand`] sends its KeyUpdate: long enough for
/// the peer to have read the response and put the connection back in its pool.
const KEY_UPDATE_AFTER: Duration = Duration::from_millis(100);

/// Answers each request head on `tls` with a 200 carrying `x-conn: number`, then sends
/// a KeyUpdate while the connection sits idle; ends when the peer closes.
async fn serve_by_hand(
    mut tls: tokio_rustls::server::TlsStream<TcpStream>,
    number: usize,
    state: &TlsOriginState,
) {
    let mut pending = Vec::new();
    let mut chunk = [0u8; 4096];
    // Each round reads at least one byte or ends.
    loop {
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            match tls.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        pending.drain(..end + 4);
        state.requests.fetch_add(1, Ordering::SeqCst);
        let body = "tls origin: by hand\n";
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-conn: {number}\r\n\r\n{body}",
            body.len()
        );
        if tls.write_all(resp.as_bytes()).await.is_err() || tls.flush().await.is_err() {
            return;
        }
        tokio::time::sleep(KEY_UPDATE_AFTER).await;
        let (_, conn) = tls.get_mut();
        conn.refresh_traffic_keys().expect("a TLS 1.3 connection can update its keys");
        if tls.flush().await.is_err() {
            return;
        }
        state.key_updates.fetch_add(1, Ordering::SeqCst);
    }
}

/// Whether the command-line tool `name` runs here (`openssl version`, `curl
/// --version`). When it does not, the test skips (see [`skip_or_fail`]: under CI=true
/// it fails instead) and this returns false.
#[track_caller]
pub fn have_tool(name: &str) -> bool {
    let version = if name == "openssl" { "version" } else { "--version" };
    let runs = std::process::Command::new(name)
        .arg(version)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        skip_or_fail(&format!("`{name}` is not installed"));
    }
    runs
}

/// Runs `program` with `args`, `stdin` written to it and then closed; its output once it
/// exits. Panics if it runs longer than [`DEADLINE`] (and kills it).
pub async fn run_tool(program: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let mut input = child.stdin.take().expect("piped stdin");
    // A tool that exits before reading all of it closes the pipe: not an error here.
    let _ = input.write_all(stdin).await;
    drop(input);
    within_for(&format!("{program} {}", args.join(" ")), DEADLINE, child.wait_with_output())
        .await
        .expect("the tool's output")
}

/// `openssl s_client` to `addr` with `args` (and `stdin`): its stdout and stderr, as
/// text, one after the other.
pub async fn s_client(addr: SocketAddr, args: &[&str], stdin: &[u8]) -> String {
    let connect = addr.to_string();
    let mut all = vec!["s_client", "-connect", connect.as_str()];
    all.extend_from_slice(args);
    let out = run_tool("openssl", &all, stdin).await;
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}
