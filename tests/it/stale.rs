//! An origin that closes a pooled connection just as holdfast sends on it, which used to
//! cost the client a 502. Safe requests are sent again on a new connection, so the client
//! sees no error; a request that may have reached the origin and must not run twice gets
//! an explanatory 502.
//!
//! The origins are Node.js (`fixtures/stale_origin.js`): the race with Node's idle close
//! is the case that hurts in practice.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use holdfast::BackendStats;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::sync::Barrier;

use crate::support::client::Reply;
use crate::support::node::NodeOrigin;
use crate::support::{config_to, seed, within_for, ClientBody, Generated, HttpClient};

/// holdfast in this process, in front of one Node origin.
struct Holdfast {
    server: holdfast::Instance,
}

impl Holdfast {
    /// Quick mode in front of `origin`, with a 10 s pool idle timeout: far longer than the
    /// origin keeps idle connections, so holdfast never retires one first and every close
    /// comes from the origin, unannounced.
    async fn start(origin: &NodeOrigin) -> Holdfast {
        let mut config = config_to(origin.addr());
        config.upstreams[0].pool.idle_timeout = Duration::from_secs(10);
        let server = holdfast::Instance::start(&config).await.expect("holdfast starts");
        Holdfast { server }
    }

    fn addr(&self) -> SocketAddr {
        self.server.local_addrs()[0]
    }

    async fn client(&self) -> HttpClient {
        HttpClient::connect(self.addr()).await
    }

    /// Pool and retry counters of the one backend.
    fn stats(&self) -> BackendStats {
        let stats = self.server.stats();
        assert_eq!(stats.len(), 1, "expected exactly one backend");
        stats[0].clone()
    }
}

/// A small deterministic generator (SplitMix64), so gaps and sizes vary without a
/// dependency, and a failing run can be repeated from its seed (`HOLDFAST_TEST_SEED`,
/// see [`seed`]).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// `n` durations from `lo_ms` to `hi_ms`, one at a random point of each of `n` equal
    /// slices of that range (so they cover it evenly), in random order.
    fn spread(&mut self, lo_ms: u64, hi_ms: u64, n: usize) -> Vec<Duration> {
        let slice_us = (hi_ms - lo_ms) * 1000 / n as u64;
        let mut out: Vec<Duration> = (0..n as u64)
            .map(|i| {
                let us = lo_ms * 1000 + i * slice_us + self.between(0, slice_us - 1);
                Duration::from_micros(us)
            })
            .collect();
        // Fisher-Yates.
        for i in (1..n).rev() {
            out.swap(i, self.between(0, i as u64) as usize);
        }
        out
    }
}

fn sized_body(len: usize) -> ClientBody {
    Full::new(Bytes::from(vec![b'p'; len])).map_err(Into::into).boxed()
}

/// What the clients of a load test saw.
#[derive(Default)]
struct Tally {
    sent: AtomicUsize,
    errors: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    /// Counts a reply; anything but a 200 is an error the client saw.
    fn check(&self, what: &str, reply: &Reply) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if reply.status != StatusCode::OK {
            self.error(format!("{what}: {} {}", reply.status, reply.text()));
        }
    }

    fn error(&self, error: String) {
        self.errors.lock().unwrap().push(error);
    }

    fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }
}

/// Regression: a request sent on a pooled connection the origin was closing just then
/// (its idle close, without a `Keep-Alive` hint) got a 502. Here the origin drops idle
/// connections 300 ms after their last response, while clients come back around that
/// 300 ms mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn origin_closing_idle_connections_silently_gives_no_client_errors() {
    // Wave clients send together, so each takes a connection of its own; all return
    // them at about the same moment, wait the same gap, and send together again. The
    // gaps of the rounds spread evenly over 250-350 ms, in random order, so some waves
    // land just before the origin's close, some during it, some after it.
    const WAVE_CLIENTS: usize = 8;
    const ROUNDS: usize = 40;
    // Whether a request meets a closing connection depends on timing. A pass of waves
    // in which none did proves nothing, so passes go on, up to this many, until one has.
    const MAX_PASSES: usize = 4;
    // Burst clients send 10 requests back to back, then pause 0-300 ms, until the waves
    // end; they keep some connections busy and hit the close at other moments.
    const BURST_CLIENTS: usize = 2;
    const BURST_MAX_REQUESTS: usize = 800 * MAX_PASSES;
    let node = NodeOrigin::start(
        "stale_origin.js",
        // On deciding to close, the script stops reading for 20 ms, then closes: a
        // request that arrives in between is reset unread, as one that crosses the close
        // on a real network would be (see `closeIdle` in the script).
        &["--idle-close-ms", "300", "--close-lag-ms", "20"],
    )
    .await;
    let proxy = Holdfast::start(&node).await;
    let tally = Arc::new(Tally::default());
    let waves_done = Arc::new(AtomicBool::new(false));
    let seed = seed(0x57a1_e000_0001);
    let mut rng = Rng(seed);
    let mut bursts = Vec::new();
    for c in 0..BURST_CLIENTS {
        let mut client = proxy.client().await;
        let (tally, waves_done) = (Arc::clone(&tally), Arc::clone(&waves_done));
        let mut rng = Rng(seed ^ (c as u64 + 1));
        bursts.push(tokio::spawn(async move {
            let mut i = 0;
            while i < BURST_MAX_REQUESTS && !waves_done.load(Ordering::Relaxed) {
                for _ in 0..10 {
                    let path = format!("/burst/{c}/{i}");
                    let reply = client.get(&path).await;
                    tally.check(&path, &reply);
                    i += 1;
                }
                tokio::time::sleep(Duration::from_millis(rng.between(0, 300))).await;
            }
        }));
    }
    // 40 rounds of at most 350 ms plus the requests themselves: about 15 s a pass.
    let limit = Duration::from_secs(60);
    let mut passes = 0;
    // Bounded: at most MAX_PASSES passes.
    while passes < MAX_PASSES && (passes == 0 || proxy.stats().retries == 0) {
        let barrier = Arc::new(Barrier::new(WAVE_CLIENTS));
        let gaps: Arc<[Duration]> = rng.spread(250, 350, ROUNDS).into();
        let mut waves = Vec::new();
        for c in 0..WAVE_CLIENTS {
            let mut client = proxy.client().await;
            let (tally, barrier, gaps) =
                (Arc::clone(&tally), Arc::clone(&barrier), Arc::clone(&gaps));
            waves.push(tokio::spawn(async move {
                for (round, gap) in gaps.iter().enumerate() {
                    let path = format!("/wave/{passes}/{c}/{round}");
                    let reply = client.get(&path).await;
                    tally.check(&path, &reply);
                    barrier.wait().await;
                    tokio::time::sleep(*gap).await;
                }
            }));
        }
        for task in waves {
            within_for("the wave clients", limit, task).await.expect("wave client");
        }
        passes += 1;
        eprintln!("pass {passes}: holdfast retried {} so far", proxy.stats().retries);
    }
    waves_done.store(true, Ordering::Relaxed);
    for task in bursts {
        within_for("the burst clients", limit, task).await.expect("burst client");
    }

    let errors = tally.errors();
    assert!(errors.is_empty(), "{} client-visible errors, first: {:?}", errors.len(), errors[0]);
    let sent = tally.sent.load(Ordering::Relaxed);
    let stats = proxy.stats();
    let origin = node.stats().await;
    eprintln!(
        "{sent} requests in {passes} passes; holdfast retried {}, opened {}; origin accepted \
         {}, closed {} idle",
        stats.retries,
        stats.pool.opened,
        origin.counter("accepted"),
        origin.counter("closed_idle")
    );
    // The race really happened: some requests met a closing connection.
    assert!(
        stats.retries > 0,
        "no request met a closing connection in {passes} passes; origin: {origin:?}"
    );
    assert_eq!(stats.not_replayed, 0);
    // Each request was processed exactly once: a request that met the close was reset
    // unread, so only its retry reached the origin's handler.
    assert_eq!(origin.total_arrivals(), sent as u64, "origin stderr: {}", node.stderr());
    let twice: Vec<_> = origin.requests().filter(|(_, n)| *n != 1).collect();
    assert!(twice.is_empty(), "requests that arrived more than once: {twice:?}");
}

/// Regression: a request sent on a pooled connection the origin had just closed (after a
/// random 1 to 20 responses, right after the last one, without `Connection: close`) got
/// a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn origin_closing_after_a_few_requests_silently_gives_no_client_errors() {
    const CLIENTS: usize = 16;
    const REQUESTS_PER_CLIENT: usize = 188; // about 3,000 in all
    let node = NodeOrigin::start("stale_origin.js", &["--close-after-max", "20"]).await;
    let proxy = Holdfast::start(&node).await;
    let tally = Arc::new(Tally::default());
    let seed = seed(0x57a1_e000_0002);
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let mut client = proxy.client().await;
        let tally = Arc::clone(&tally);
        let mut rng = Rng(seed ^ (c as u64 + 1));
        tasks.push(tokio::spawn(async move {
            for i in 0..REQUESTS_PER_CLIENT {
                if i % 2 == 0 {
                    let path = format!("/get/{c}/{i}");
                    let reply = client.get(&path).await;
                    tally.check(&path, &reply);
                } else {
                    // Small bodies, kept by holdfast so the request can be sent again.
                    let len = rng.between(1, 16 * 1024) as usize;
                    let path = format!("/put/{c}/{i}");
                    let reply = client.request(Method::PUT, &path, sized_body(len)).await;
                    tally.check(&path, &reply);
                    let received = reply.header("x-received-bytes").unwrap_or("none");
                    if received != len.to_string() {
                        tally.error(format!("{path}: sent {len} bytes, origin got {received}"));
                    }
                }
            }
        }));
    }
    for task in tasks {
        within_for("the clients", Duration::from_secs(60), task).await.expect("client task");
    }

    let errors = tally.errors();
    assert!(errors.is_empty(), "{} client-visible errors, first: {:?}", errors.len(), errors[0]);
    let sent = tally.sent.load(Ordering::Relaxed);
    let stats = proxy.stats();
    let origin = node.stats().await;
    eprintln!(
        "{sent} requests; holdfast retried {}, opened {}; origin accepted {}, closed {} after n",
        stats.retries,
        stats.pool.opened,
        origin.counter("accepted"),
        origin.counter("closed_after_n")
    );
    assert!(origin.counter("closed_after_n") > 100, "the origin closed too few connections");
    assert_eq!(stats.not_replayed, 0);
    // The origin closes only after a response is out and before holdfast sends again on
    // that connection, so nothing it processed is lost and nothing runs twice.
    assert_eq!(origin.total_arrivals(), sent as u64);
    let twice: Vec<_> = origin.requests().filter(|(_, n)| *n != 1).collect();
    assert!(twice.is_empty(), "requests that arrived more than once: {twice:?}");
}

/// A Node origin, holdfast in front of it, and a client whose first request has left a
/// pooled connection behind, so the next request goes out on a reused connection.
async fn warmed_up() -> (NodeOrigin, Holdfast, HttpClient) {
    let node = NodeOrigin::start("stale_origin.js", &[]).await;
    let proxy = Holdfast::start(&node).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/warm").await.status, StatusCode::OK);
    (node, proxy, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_that_may_have_reached_the_origin_is_not_replayed() {
    let (node, proxy, mut client) = warmed_up().await;
    // The origin reads the whole POST, then closes the connection without answering.
    let reply = client.request(Method::POST, "/drop/order", sized_body(100)).await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let text = reply.text();
    assert!(
        text.contains("the POST request was not retried because it may have reached the origin"),
        "body: {text}"
    );
    assert!(text.contains(&node.addr().to_string()), "body: {text}");
    let origin = node.stats().await;
    assert_eq!(origin.arrivals("POST", "/drop/order"), 1);
    let stats = proxy.stats();
    assert_eq!(stats.pool.reused, 1, "the POST went out on the warm connection");
    assert_eq!((stats.retries, stats.not_replayed), (0, 1));
    // The client connection is fine.
    assert_eq!(client.get("/after").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_that_may_have_reached_the_origin_is_retried_once() {
    let (node, proxy, mut client) = warmed_up().await;
    // The first arrival is read and dropped unanswered; the second is answered.
    let reply = client.get("/drop-once/page").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    // It did reach the origin the first time, so it arrived twice: GET allows that.
    assert_eq!(node.stats().await.arrivals("GET", "/drop-once/page"), 2);
    let stats = proxy.stats();
    assert_eq!((stats.retries, stats.not_replayed), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_with_a_small_body_is_retried_with_its_body() {
    let (node, proxy, mut client) = warmed_up().await;
    let reply = client.request(Method::PUT, "/drop-once/doc", sized_body(5000)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-received-bytes"), Some("5000"));
    assert_eq!(node.stats().await.arrivals("PUT", "/drop-once/doc"), 2);
    assert_eq!(proxy.stats().retries, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_with_a_streamed_body_is_not_replayed_once_sent() {
    let (node, proxy, mut client) = warmed_up().await;
    // Chunked: holdfast streams it and keeps no copy.
    let body = Generated::chunked(5000).map_err(Into::into).boxed();
    let reply = client.request(Method::PUT, "/drop-once/big", body).await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let text = reply.text();
    assert!(text.contains("its body was streamed, not kept"), "body: {text}");
    assert_eq!(node.stats().await.arrivals("PUT", "/drop-once/big"), 1);
    let stats = proxy.stats();
    assert_eq!((stats.retries, stats.not_replayed), (0, 1));
}

/// Requests from one keep-alive client with gaps that cycle through `gaps_ms`.
async fn spaced_requests(proxy: &Holdfast, gaps_ms: &[u64], rounds: usize, tally: &Tally) {
    let mut client = proxy.client().await;
    for i in 0..rounds {
        let path = format!("/spaced/{i}");
        let reply = client.get(&path).await;
        tally.check(&path, &reply);
        tokio::time::sleep(Duration::from_millis(gaps_ms[i % gaps_ms.len()])).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_keep_alive_timeout_is_honoured_with_requests_spaced_around_it() {
    // Node's own keepAliveTimeout: 300 ms (announced as `timeout=0`) and 1500 ms
    // (`timeout=1`). Requests come just before, at and just after those intervals.
    let short = NodeOrigin::start("stale_origin.js", &["--keep-alive-timeout-ms", "300"]).await;
    let longer = NodeOrigin::start("stale_origin.js", &["--keep-alive-timeout-ms", "1500"]).await;
    let (short_proxy, longer_proxy) =
        (Holdfast::start(&short).await, Holdfast::start(&longer).await);
    let tally = Tally::default();
    tokio::join!(
        spaced_requests(&short_proxy, &[250, 300, 350, 0, 280], 20, &tally),
        spaced_requests(&longer_proxy, &[400, 1400, 1500, 1600, 0, 900], 8, &tally),
    );
    assert_eq!(tally.errors(), Vec::<String>::new());
    for (node, proxy, expected) in [(&short, &short_proxy, 20), (&longer, &longer_proxy, 8)] {
        assert_eq!(node.stats().await.total_arrivals(), expected);
        assert_eq!(proxy.stats().not_replayed, 0);
    }
    // `timeout=1` leaves 0.5 s of idle life: the gaps under it reuse the connection.
    assert!(longer_proxy.stats().pool.reused > 0);
}
