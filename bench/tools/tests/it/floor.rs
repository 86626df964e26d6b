//! `floor`, the minimal HTTP/1.1 relay, end to end as the harness runs it: in front of the
//! benchmark origin, which counts the upstream connections it opens.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{raw_get, spawn_listening, Spawned, TestOrigin};

/// The `floor` binary in front of `upstream`; killed when dropped.
struct Floor {
    _child: Spawned,
    addr: SocketAddr,
}

impl Floor {
    fn start(upstream: SocketAddr) -> Self {
        let upstream = upstream.to_string();
        let args = ["--listen", "127.0.0.1:0", "--upstream", &upstream];
        let (child, addr) = spawn_listening(env!("CARGO_BIN_EXE_floor"), &args);
        Self { addr: addr.parse().expect("an address"), _child: child }
    }
}

/// A client connection and what was read off it past the last response.
struct Client {
    stream: TcpStream,
    pending: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Self {
        Self { stream: TcpStream::connect(addr).await.expect("connect"), pending: Vec::new() }
    }

    async fn send(&mut self, request: &str) {
        self.stream.write_all(request.as_bytes()).await.expect("write");
    }

    /// The next response: its head, and a body of the length the head announces.
    async fn response(&mut self) -> (String, Vec<u8>) {
        let head_end = loop {
            if let Some(end) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            self.read_more().await;
        };
        let head = String::from_utf8_lossy(&self.pending[..head_end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok())?
            })
            .expect("a Content-Length");
        while self.pending.len() < head_end + length {
            self.read_more().await;
        }
        let rest = self.pending.split_off(head_end + length);
        let body = self.pending.split_off(head_end);
        self.pending = rest;
        (head, body)
    }

    async fn read_more(&mut self) {
        let mut chunk = [0u8; 16 * 1024];
        let n = read_some(&mut self.stream, &mut chunk).await;
        assert!(n > 0, "closed within a response: {}", String::from_utf8_lossy(&self.pending));
        self.pending.extend_from_slice(&chunk[..n]);
    }
}

async fn read_some(stream: &mut TcpStream, into: &mut [u8]) -> usize {
    tokio::time::timeout(Duration::from_secs(5), stream.read(into))
        .await
        .expect("a response within 5 s")
        .expect("read")
}

#[tokio::test]
async fn relays_over_one_kept_upstream_connection_and_honours_connection_close() {
    let origin = TestOrigin::start().await;
    let floor = Floor::start(origin.addr);

    // Keep-alive: /tiny and /50k on one client connection, one upstream connection.
    let mut client = Client::connect(floor.addr).await;
    for (path, size) in [("/tiny", 100), ("/50k", 51_200), ("/tiny", 100)] {
        client.send(&format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", floor.addr)).await;
        let (head, body) = client.response().await;
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        assert!(!head.to_ascii_lowercase().contains("connection:"), "{path}: {head}");
        assert_eq!(body.len(), size, "{path}");
    }
    let stats = origin.stats();
    assert_eq!((stats.connections, stats.requests), (1, 3), "{stats:?}");

    // Two requests in one write, the second closing: both answered in order, the second
    // with `Connection: close`, then the client connection is closed.
    client
        .send(&format!(
            "GET /tiny HTTP/1.1\r\nHost: {0}\r\n\r\nGET /50k HTTP/1.1\r\nHost: {0}\r\n\
             Connection: close\r\n\r\n",
            floor.addr
        ))
        .await;
    let (_, first) = client.response().await;
    let (head, second) = client.response().await;
    assert_eq!((first.len(), second.len()), (100, 51_200));
    assert!(head.contains("Connection: close\r\n"), "{head}");
    assert!(client.pending.is_empty(), "nothing after the last response");
    assert_eq!(read_some(&mut client.stream, &mut [0u8; 16]).await, 0, "closed after it");

    // `Connection: close` on a new client connection: answered with `Connection: close`,
    // the client connection closed (raw_get reads to EOF), the upstream connection kept.
    let response = raw_get(floor.addr, "/tiny").await;
    assert!(response.head.starts_with("HTTP/1.1 200"), "{}", response.head);
    assert_eq!(response.header("connection"), Some("close"));
    assert_eq!(response.body.len(), 100);
    let stats = origin.stats();
    assert_eq!((stats.connections, stats.requests), (1, 6), "{stats:?}");
}

#[tokio::test]
async fn chunked_requests_are_refused_and_a_dead_origin_answers_502() {
    let origin = TestOrigin::start().await;
    let floor = Floor::start(origin.addr);
    let mut client = Client::connect(floor.addr).await;
    client.send("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").await;
    let (head, _) = client.response().await;
    assert!(head.starts_with("HTTP/1.1 501"), "{head}");

    let addr = origin.addr;
    drop(origin);
    // The origin's listener is gone once its task saw the stop; wait for refused connects.
    crate::support::wait_until("the origin stops listening", || {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await;
    let response = raw_get(floor.addr, "/tiny").await;
    assert!(response.head.starts_with("HTTP/1.1 502"), "{}", response.head);
}
