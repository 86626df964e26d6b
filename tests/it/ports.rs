//! Local ports: upstream connections from a configured source address, and a network
//! namespace with a narrow port range where reuse keeps working and no reuse runs out.
//!
//! The namespace tests need root (`ip netns add`); where namespaces are not permitted
//! they print why and pass without running, except under `CI=true`, where they fail.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::support::netns::Namespace;
use crate::support::{within_for, Origin, Proxy, RawClient};

/// A config file's text: one listener on `127.0.0.1:0` in front of `origin`, connecting
/// from `source`.
fn config_from_source(origin: SocketAddr, source: &str) -> holdfast::Config {
    let text = format!(
        r#"[[listener]]
address = "127.0.0.1:0"
upstream = "app"

[upstream.app]
servers = ["{origin}"]
source_address = "{source}"
"#
    );
    holdfast::Config::parse(&text, Path::new("ports.toml")).expect("valid config")
}

/// An origin that notes the peer address of each connection it accepts and answers
/// every request head with `200 ok`.
async fn peer_recording_origin() -> (SocketAddr, Arc<Mutex<Vec<SocketAddr>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
    let addr = listener.local_addr().expect("origin addr");
    let peers = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&peers);
    tokio::spawn(async move {
        while let Ok((mut stream, peer)) = listener.accept().await {
            seen.lock().unwrap().push(peer);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0u8; 1024];
                // Each round reads at least one byte or ends.
                while let Ok(n @ 1..) = stream.read(&mut chunk).await {
                    head.extend_from_slice(&chunk[..n]);
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        head.clear();
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n";
                        if stream.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, peers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_come_from_the_source_address() {
    let (origin, peers) = peer_recording_origin().await;
    let proxy = Proxy::start(config_from_source(origin, "127.0.0.2")).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/").await.status, StatusCode::OK);
    assert_eq!(client.get("/again").await.status, StatusCode::OK);
    let peers = peers.lock().unwrap().clone();
    assert_eq!(peers.len(), 1, "one pooled connection: {peers:?}");
    assert_eq!(peers[0].ip().to_string(), "127.0.0.2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_address_not_on_this_host_gives_502_naming_it() {
    let origin = Origin::start().await;
    // TEST-NET-1 (RFC 5737): no host has it, so the bind fails and nothing is sent.
    let proxy = Proxy::start(config_from_source(origin.addr(), "192.0.2.1")).await;
    let mut client = proxy.client().await;
    let reply = client.get("/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let text = reply.text();
    assert!(text.contains("cannot connect from source address 192.0.2.1"), "body: {text}");
    assert!(!text.contains("ports exhausted"), "body: {text}");
    assert_eq!(origin.accepted(), 0);
}

/// Local ports in the namespace: 1,000, where Linux normally offers about 28,000.
const PORT_RANGE: (u16, u16) = (40_000, 40_999);
const PORT_COUNT: usize = (PORT_RANGE.1 - PORT_RANGE.0) as usize + 1;
/// Requests per run: twenty times the port range.
const REQUESTS: usize = 20_000;
/// Clients sending at once, each on its own connection that it closes after the reply.
const CONCURRENCY: usize = 32;

/// What one run through the namespace observed.
#[derive(Debug, Default)]
struct Run {
    ok: usize,
    /// 502s whose body says the local ports ran out.
    exhausted: usize,
    /// Replies that were neither.
    other: usize,
    /// The first few of those: status and body, or what happened instead.
    other_samples: Vec<String>,
    /// The number of the first reply that was not a 200, and when it came.
    first_error: Option<(usize, Duration)>,
    /// Upstream connections the origin accepted.
    accepted: usize,
    /// Most established connections to the origin that `ss` saw at once.
    peak_established: usize,
    /// After the load: client ports in TIME_WAIT (connections to holdfast's listener).
    client_time_wait: usize,
    /// After the load: holdfast's upstream ports in TIME_WAIT (connections to the origin).
    upstream_time_wait: usize,
    elapsed: Duration,
}

/// Runs [`REQUESTS`] closing requests through holdfast inside a fresh namespace with a
/// narrow port range and no TIME_WAIT reuse, with the upstream pool on or off.
///
/// `None` when namespaces are not available here.
fn closing_load_in_namespace(pooled: bool) -> Option<Run> {
    // One run at a time: each keeps a core busy, and the rest of the suite runs beside
    // it.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let ns = Namespace::create_or_skip()?;
    ns.sysctl("net.ipv4.ip_local_port_range", &format!("{} {}", PORT_RANGE.0, PORT_RANGE.1));
    // The kernel's default (2) reuses TIME_WAIT ports for loopback connections, which
    // hides exhaustion on loopback; real destinations do not get that.
    ns.sysctl("net.ipv4.tcp_tw_reuse", "0");
    let ns = Arc::new(ns);
    let inside = Arc::clone(&ns);
    let thread = std::thread::spawn(move || {
        inside.enter();
        // Built after `setns`, so its worker thread (and blocking threads) start inside
        // the namespace too. One worker leaves the other core to the rest of the suite.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(closing_load(&inside, pooled))
    });
    match thread.join() {
        Ok(run) => Some(run),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

async fn closing_load(ns: &Arc<Namespace>, pooled: bool) -> Run {
    let origin = Origin::start().await;
    let mut config = crate::support::config_for(&origin);
    if !pooled {
        config.upstreams[0].pool.max_idle = Some(0);
    }
    let proxy = Proxy::start(config).await;
    let ports = PORT_RANGE.0..=PORT_RANGE.1;
    assert!(
        ports.contains(&origin.addr().port()) && ports.contains(&proxy.addr().port()),
        "listeners outside the namespace's port range: not inside the namespace?"
    );
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let sampler = {
        let (ns, stop, port) = (Arc::clone(ns), Arc::clone(&stop.0), origin.addr().port());
        // Runs on the blocking pool, so sleeping between samples blocks no runtime worker.
        #[allow(clippy::disallowed_methods)]
        let sample = move || {
            let mut peak = 0;
            // Ends when the load does; one `ss` run per round.
            while !stop.load(Ordering::SeqCst) {
                peak = peak.max(ns.sockets("established", "dport", port));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        };
        tokio::task::spawn_blocking(sample)
    };
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let run = Arc::new(Mutex::new(Run::default()));
    let clients: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (next, done, run) = (Arc::clone(&next), Arc::clone(&done), Arc::clone(&run));
            let addr = proxy.addr();
            tokio::spawn(async move {
                // Bounded: each round claims one of the REQUESTS numbers.
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= REQUESTS {
                        return;
                    }
                    let outcome = closing_request(addr, i).await;
                    let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                    let mut run = run.lock().unwrap();
                    if !matches!(outcome, Outcome::Ok) && run.first_error.is_none() {
                        run.first_error = Some((n, started.elapsed()));
                    }
                    match outcome {
                        Outcome::Ok => run.ok += 1,
                        Outcome::Exhausted => run.exhausted += 1,
                        Outcome::Other(what) => {
                            run.other += 1;
                            if run.other_samples.len() < 5 {
                                run.other_samples.push(what);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    within_for("20,000 closing requests", Duration::from_secs(60), async {
        for c in clients {
            c.await.expect("client task");
        }
    })
    .await;
    let elapsed = started.elapsed();
    drop(stop);
    let peak_established = sampler.await.expect("ss sampler");
    let mut run = std::mem::take(&mut *run.lock().unwrap());
    run.client_time_wait = ns.sockets("time-wait", "dport", proxy.addr().port());
    run.upstream_time_wait = ns.sockets("time-wait", "dport", origin.addr().port());
    run.accepted = origin.accepted();
    run.peak_established = peak_established;
    run.elapsed = elapsed;
    run
}

/// Stops the `ss` sampler when dropped, also when the load panics: the runtime waits
/// for blocking tasks before it shuts down.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

enum Outcome {
    Ok,
    Exhausted,
    Other(String),
}

/// One request on a new connection with `Connection: close`. The client waits for
/// holdfast to close first, so the client's own port never sits in TIME_WAIT.
async fn closing_request(proxy: SocketAddr, i: usize) -> Outcome {
    let mut client = RawClient::connect(proxy).await;
    client.send(format!("GET /r{i} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")).await;
    match client.response_then_close().await {
        Some(resp) if resp.status == 200 => Outcome::Ok,
        Some(resp) if resp.status == 502 && resp.body_text().contains("local ports exhausted") => {
            Outcome::Exhausted
        }
        Some(resp) => Outcome::Other(format!("{} {}", resp.status, resp.body_text().trim())),
        None => Outcome::Other("closed without a response".into()),
    }
}

#[test]
fn closing_clients_never_exhaust_ports_with_reuse() {
    let Some(run) = closing_load_in_namespace(true) else { return };
    println!("with reuse: {run:?}");
    assert_eq!((run.ok, run.exhausted, run.other), (REQUESTS, 0, 0), "{run:?}");
    // Far below the 1,000 ports: connections are reused, not replaced.
    assert!(run.accepted <= 2 * CONCURRENCY, "{run:?}");
    assert!((1..=CONCURRENCY).contains(&run.peak_established), "{run:?}");
    assert!(run.client_time_wait < 100, "{run:?}");
}

#[test]
fn closing_clients_exhaust_ports_without_reuse() {
    // The same load with the pool off: every request opens a connection, holdfast
    // closes it first, and its port sits in TIME_WAIT for 60 s. This is the failure
    // the test above would catch if the pool stopped reusing connections.
    let Some(run) = closing_load_in_namespace(false) else { return };
    println!("without reuse: {run:?}");
    assert!(run.exhausted > 0, "no request failed for lack of ports: {run:?}");
    assert_eq!(run.other, 0, "{run:?}");
    // Each success held a port for longer than the run lasted.
    assert!(run.ok <= PORT_COUNT, "{run:?}");
    assert!(run.client_time_wait < 100, "{run:?}");
}
