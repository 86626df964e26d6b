//! An in-process origin on 127.0.0.1:0, a raw HTTP/1.1 client and `wait_until`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use holdfast_bench_tools::load::target::Target;
use holdfast_bench_tools::origin::{self, OriginStats, StatsSnapshot};
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

    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    pub fn target(&self, path: &str) -> Target {
        Target::parse(&self.url(path)).expect("valid target")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
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
pub const ERROR_KINDS: [&str; 7] = [
    "addr_not_available",
    "connect_other",
    "connect_refused",
    "io",
    "status_5xx",
    "status_other",
    "timeout",
];
