//! An in-process origin on 127.0.0.1:0 (cleartext, TLS or h2c), certificates made with the
//! `openssl` command, a raw HTTP/1.1 client, bench binaries started on port 0 and
//! `wait_until`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_bench_tools::load::target::Target;
use holdfast_bench_tools::origin::{self, OriginStats, StatsSnapshot};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// The benchmark origin served on its own task; stops when dropped.
pub struct TestOrigin {
    pub addr: SocketAddr,
    stats: Arc<OriginStats>,
    _stop: oneshot::Sender<()>,
}

impl TestOrigin {
    pub async fn start() -> Self {
        let listener = origin::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let stats = Arc::new(OriginStats::default());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(origin::serve(listener, Arc::clone(&stats), async {
            let _ = stopped.await;
        }));
        Self { addr, stats, _stop: stop }
    }

    /// The origin with at most `limit` responses in progress at once (`--workers`).
    pub async fn start_with_workers(limit: usize) -> Self {
        let origin = Self::start().await;
        let limit = std::num::NonZeroUsize::new(limit).expect("at least one worker");
        assert!(origin.stats.limit_workers(limit), "the limit is set once");
        origin
    }

    /// The origin over TLS, with the server certificate and key of `certs`.
    pub async fn start_tls(certs: &TestCerts) -> Self {
        let config =
            holdfast_bench_tools::tls::server_config(&certs.server_cert, &certs.server_key)
                .expect("server TLS settings");
        let listener = origin::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let stats = Arc::new(OriginStats::default());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(origin::serve_tls(listener, Arc::clone(&stats), config, async {
            let _ = stopped.await;
        }));
        wait_until("the TLS counts are set up", || stats.snapshot().tls.is_some()).await;
        Self { addr, stats, _stop: stop }
    }

    /// The origin in h2c mode: HTTP/2 with prior knowledge and HTTP/1.1 on one port.
    pub async fn start_h2c(options: origin::H2cOptions) -> Self {
        let listener = origin::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let stats = Arc::new(OriginStats::default());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(origin::serve_h2c(listener, Arc::clone(&stats), options, async {
            let _ = stopped.await;
        }));
        wait_until("the h2c counts are set up", || stats.snapshot().h2.is_some()).await;
        Self { addr, stats, _stop: stop }
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    pub fn target(&self, path: &str) -> Target {
        Target::parse(&self.url(path)).expect("valid target")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn https_target(&self, path: &str) -> Target {
        Target::parse_https(&format!("https://{}{path}", self.addr)).expect("valid target")
    }
}

/// A CA and a server certificate it signed (ECDSA P-256, for IP 127.0.0.1 and
/// `localhost`), made with the `openssl` command in a directory of their own, as
/// bench/harness/certs.py makes them; removed when dropped.
pub struct TestCerts {
    dir: PathBuf,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

impl TestCerts {
    pub fn make() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "bench-tools-certs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("certificate directory");
        let certs = Self {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            dir,
        };
        let ca_key = certs.dir.join("ca.key");
        let csr = certs.dir.join("server.csr");
        let extensions = certs.dir.join("server.ext");
        std::fs::write(
            &extensions,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("extensions file");
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=bench-tools test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
            "-keyout",
            path(&ca_key),
            "-out",
            path(&certs.ca),
        ]);
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            path(&certs.server_key),
            "-out",
            path(&csr),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            path(&csr),
            "-CA",
            path(&certs.ca),
            "-CAkey",
            path(&ca_key),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            path(&extensions),
            "-out",
            path(&certs.server_cert),
        ]);
        certs
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn path(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

/// Runs `openssl` with `args`; panics with its output unless it succeeds. `.ci/run`
/// installs it; a machine without it fails these tests rather than skipping them.
fn openssl(args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("running openssl (is it installed?): {error}"));
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A response as read off the wire.
pub struct RawResponse {
    pub head: String,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// Sends `GET path` with `Connection: close` on a new connection and reads until EOF.
pub async fn raw_get(addr: SocketAddr, path: &str) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut bytes))
        .await
        .expect("response within 5 s")
        .expect("read");
    let split = bytes.windows(4).position(|w| w == b"\r\n\r\n").expect("end of head") + 4;
    RawResponse {
        head: String::from_utf8_lossy(&bytes[..split]).into_owned(),
        body: bytes[split..].to_vec(),
    }
}

/// A bench binary started by [`spawn_listening`]. Killed when dropped, so a test that
/// fails part-way leaves no process behind; [`Spawned::stop`] ends it the graceful way.
pub struct Spawned {
    child: Child,
}

impl Spawned {
    /// SIGTERM, then its exit status once it has exited.
    pub fn stop(mut self) -> ExitStatus {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits"));
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        self.child.wait().expect("the child exits")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // Already waited for (`stop`) or exited on its own: nothing left to end.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `program` with `args`, and returns it with the address it printed on its first
/// line (`listening on ADDR`), as the bench binaries do once they listen.
pub fn spawn_listening(program: &str, args: &[&str]) -> (Spawned, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {program}: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the listening line");
    let addr = line.trim().strip_prefix("listening on ").expect("listening line").to_owned();
    (Spawned { child }, addr)
}

/// Polls `condition` every 5 ms until it holds; panics after 5 s.
pub async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The keys of a JSON object, sorted.
pub fn keys(value: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> =
        value.as_object().expect("a JSON object").keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

pub const LATENCY_KEYS: [&str; 6] = ["max", "mean", "p50", "p90", "p99", "p999"];
pub const ERROR_KINDS: [&str; 8] = [
    "addr_not_available",
    "connect_other",
    "connect_refused",
    "io",
    "status_5xx",
    "status_other",
    "timeout",
    "tls",
];
