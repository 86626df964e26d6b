//! The clients of the slow-reader drills: the well-behaved `steady` client (HTTP/1.1 and
//! h2c), the zero-window HTTP/2 clients and the slow readers, against the in-process
//! origin and against small servers written here that record what the clients do.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast_bench_tools::load::exchange::ErrorKind;
use holdfast_bench_tools::load::slow_read::{self, SlowReadConfig};
use holdfast_bench_tools::load::steady::{self, Protocol, SteadyConfig};
use holdfast_bench_tools::load::target::Target;
use holdfast_bench_tools::load::zero_window::{self, Close, ZeroWindowConfig};
use holdfast_bench_tools::origin::H2cOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::TestOrigin;

const WELL_BEHAVED: &str = "127.0.0.2";
const ATTACKER: &str = "127.0.0.3";

fn ip(text: &str) -> IpAddr {
    text.parse().expect("an IP address")
}

fn steady_config(target: Target, protocol: Protocol) -> SteadyConfig {
    SteadyConfig {
        target,
        rate: 40.0,
        duration: Duration::from_millis(500),
        deadline: Duration::from_secs(5),
        source: Some(ip(WELL_BEHAVED)),
        protocol,
    }
}

/// A server that records the source address of each connection and answers every
/// request head (read up to its blank line) with `response`; with `close_after_first`
/// it closes each connection after its first response.
struct CannedServer {
    addr: SocketAddr,
    peers: Arc<Mutex<Vec<IpAddr>>>,
}

impl CannedServer {
    async fn start(response: &'static [u8], close_after_first: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let peers = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&peers);
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                recorded.lock().expect("not poisoned").push(peer.ip());
                tokio::spawn(answer(stream, response, close_after_first));
            }
        });
        Self { addr, peers }
    }

    fn url(&self, path: &str) -> Target {
        Target::parse(&format!("http://{}{path}", self.addr)).expect("valid target")
    }

    fn peers(&self) -> Vec<IpAddr> {
        self.peers.lock().expect("not poisoned").clone()
    }
}

async fn answer(mut stream: TcpStream, response: &'static [u8], close_after_first: bool) {
    let mut pending = Vec::new();
    let mut buffer = [0; 4096];
    while let Ok(read) = stream.read(&mut buffer).await {
        if read == 0 {
            return;
        }
        pending.extend_from_slice(&buffer[..read]);
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            if stream.write_all(response).await.is_err() || close_after_first {
                return;
            }
        }
    }
}

#[tokio::test]
async fn steady_http1_sends_every_request_due_from_its_own_address_on_kept_connections() {
    let server =
        CannedServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false).await;
    let report = steady::run(steady_config(server.url("/tiny"), Protocol::Http1)).await;
    assert_eq!((report.sent, report.ok, report.timeouts), (20, 20, 0), "{report:?}");
    assert_eq!(report.statuses, BTreeMap::from([(200, 20)]));
    assert!(report.requests.iter().all(|r| r.status == Some(200) && r.latency_us.is_some()));
    let due: Vec<f64> = report.requests.iter().map(|r| r.due_s).collect();
    assert_eq!(due[1], 0.025, "request n is due at n / rate");
    let peers = server.peers();
    assert_eq!(report.connects, peers.len() as u64);
    assert!(peers.len() < 20, "connections are kept and reused: {}", peers.len());
    assert!(peers.iter().all(|peer| *peer == ip(WELL_BEHAVED)), "{peers:?}");
}

#[tokio::test]
async fn steady_counts_each_status_and_a_request_past_its_deadline_as_a_timeout() {
    let unavailable = CannedServer::start(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
        false,
    )
    .await;
    let report = steady::run(steady_config(unavailable.url("/"), Protocol::Http1)).await;
    assert_eq!((report.sent, report.ok), (20, 0));
    assert_eq!(report.statuses, BTreeMap::from([(503, 20)]));

    let origin = TestOrigin::start().await;
    let config = SteadyConfig {
        deadline: Duration::from_millis(100),
        ..steady_config(origin.target("/slow?ms=5000"), Protocol::Http1)
    };
    let report = steady::run(config).await;
    assert_eq!((report.sent, report.ok, report.timeouts), (20, 0, 20), "{report:?}");
    assert!(report.requests.iter().all(|r| r.error == Some(ErrorKind::Timeout)));
    assert!(report.requests.iter().all(|r| r.latency_us.is_none()));
}

#[tokio::test]
async fn steady_h2c_multiplexes_every_request_on_one_connection() {
    let origin = TestOrigin::start_h2c(H2cOptions::default()).await;
    let report = steady::run(steady_config(origin.target("/50k"), Protocol::H2c)).await;
    assert_eq!((report.sent, report.ok, report.timeouts), (20, 20, 0), "{report:?}");
    assert_eq!(report.connects, 1);
    let stats = origin.stats();
    assert_eq!(stats.h2.map(|h2| (h2.connections, h2.requests)), Some((1, 20)));
}

/// Relays connections to `upstream`, keeping every byte the clients sent.
struct RecordingRelay {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl RecordingRelay {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let sent = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&sent);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let index = {
                    let mut all = recorded.lock().expect("not poisoned");
                    all.push(Vec::new());
                    all.len() - 1
                };
                let recorded = Arc::clone(&recorded);
                tokio::spawn(async move {
                    let origin = TcpStream::connect(upstream).await.expect("connect upstream");
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut origin_read, mut origin_write) = origin.into_split();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut origin_read, &mut client_write).await;
                    });
                    let mut buffer = [0; 16 * 1024];
                    while let Ok(read) = client_read.read(&mut buffer).await {
                        if read == 0 || origin_write.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                        recorded.lock().expect("not poisoned")[index]
                            .extend_from_slice(&buffer[..read]);
                    }
                });
            }
        });
        Self { addr, sent }
    }
}

/// (frame type, flags) of every frame in `bytes`, which start with the client preface.
fn frames(bytes: &[u8]) -> Vec<(u8, u8)> {
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    assert!(bytes.starts_with(preface), "the client preface comes first");
    let mut rest = &bytes[preface.len()..];
    let mut found = Vec::new();
    while rest.len() >= 9 {
        let length = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        found.push((rest[3], rest[4]));
        rest = &rest[(9 + length).min(rest.len())..];
    }
    found
}

#[tokio::test]
async fn zero_window_clients_ack_settings_read_everything_and_never_open_the_window() {
    let origin = TestOrigin::start_h2c(H2cOptions::default()).await;
    let relay = RecordingRelay::start(origin.addr).await;
    let config = ZeroWindowConfig {
        target: Target::parse(&format!("http://{}/bytes?n=1048576", relay.addr)).expect("url"),
        connections: 2,
        streams: 10,
        duration: Duration::from_millis(1_500),
        source: None,
    };
    let report = zero_window::run(config).await;

    assert_eq!((report.connected, report.streams_opened, report.responses), (2, 20, 20));
    assert_eq!(report.closed_by_peer, 0, "open until the client closed them");
    for connection in &report.per_connection {
        assert_eq!(connection.max_concurrent_streams, Some(100));
        assert_eq!(connection.responses_200, 10);
        assert!(connection.settings_acked >= 1);
        assert!(connection.data_bytes > 0, "the first window's bytes arrive");
        assert!(connection.data_bytes <= 65_535, "no more than the connection's first window");
        assert_eq!(connection.streams_ended, 0);
    }
    assert_eq!(origin.stats().h2.map(|h2| h2.requests), Some(20));

    let sent = relay.sent.lock().expect("not poisoned").clone();
    assert_eq!(sent.len(), 2);
    for bytes in &sent {
        let frames = frames(bytes);
        let count = |kind: u8| frames.iter().filter(|(k, _)| *k == kind).count();
        assert_eq!(count(0x8), 0, "no WINDOW_UPDATE, ever: {frames:?}");
        assert_eq!(count(0x1), 10, "one HEADERS per stream");
        assert!(frames.contains(&(0x4, 0x1)), "the server's SETTINGS acknowledged");
    }
}

#[tokio::test]
async fn zero_window_clients_report_when_the_server_closes_them() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let peers = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&peers);
    tokio::spawn(async move {
        while let Ok((mut stream, peer)) = listener.accept().await {
            recorded.lock().expect("not poisoned").push(peer.ip());
            tokio::spawn(async move {
                // An empty SETTINGS, then a close once the streams are open.
                stream.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await.expect("settings");
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut sink = vec![0; 64 * 1024];
                let _ = stream.read(&mut sink).await;
            });
        }
    });
    let config = ZeroWindowConfig {
        target: Target::parse(&format!("http://{addr}/")).expect("url"),
        connections: 3,
        streams: 4,
        duration: Duration::from_secs(5),
        source: Some(ip(ATTACKER)),
    };
    let report = zero_window::run(config).await;
    assert_eq!((report.connected, report.streams_opened), (3, 12));
    assert_eq!(report.closed_by_peer, 3, "{report:?}");
    assert!(report.last_close_s.is_some_and(|s| s < 5.0));
    for connection in &report.per_connection {
        assert!(matches!(connection.close, Some(Close::Eof | Close::Reset)), "{connection:?}");
        assert_eq!(connection.settings_acked, 1);
    }
    assert!(peers.lock().expect("not poisoned").iter().all(|peer| *peer == ip(ATTACKER)));
}

fn slow_config(target: Target) -> SlowReadConfig {
    SlowReadConfig {
        target,
        connections: 3,
        receive_buffer_bytes: 4096,
        read_bytes: 1000,
        interval: Duration::from_millis(200),
        duration: Duration::from_secs(1),
        source: Some(ip(ATTACKER)),
        connects_in_flight: 256,
    }
}

#[tokio::test]
async fn slow_readers_take_at_most_their_share_per_read() {
    let origin = TestOrigin::start().await;
    let report = slow_read::run(slow_config(origin.target("/bytes?n=10485760"))).await;
    assert_eq!((report.connected, report.failed, report.complete), (3, 0, 0), "{report:?}");
    assert_eq!(report.statuses, BTreeMap::from([(200, 3)]));
    assert_eq!(report.closed_by_peer, 0);
    for reader in &report.per_connection {
        // Reads at 0, 0.2, ..., 0.8 s (a sixth allowed for a late timer): 1,000 bytes each.
        assert!(reader.bytes_read > 0 && reader.bytes_read <= 6_000, "{reader:?}");
    }
}

#[tokio::test]
async fn slow_readers_report_complete_responses_and_closes_by_the_server() {
    let origin = TestOrigin::start().await;
    let report = slow_read::run(slow_config(origin.target("/tiny"))).await;
    assert_eq!((report.complete, report.closed_by_peer), (3, 0), "{report:?}");

    let closing =
        CannedServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nsome of it", true)
            .await;
    let report = slow_read::run(slow_config(closing.url("/"))).await;
    assert_eq!((report.complete, report.closed_by_peer), (0, 3), "{report:?}");
    assert!(report.per_connection.iter().all(|r| r.close == Some(Close::Eof)));
    assert!(closing.peers().iter().all(|peer| *peer == ip(ATTACKER)));
}
