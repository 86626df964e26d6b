//! Origins that close a connection after some responses without saying so (no
//! `Connection: close`), a few milliseconds after the response: a response to HEAD that
//! has no length, and the close rules holdfast learns from such origins.
//!
//! The origin here is hand-written, so the moment of each close is the test's choice:
//! after a response its script marks, it reads on but answers nothing for a few
//! milliseconds (a request arriving then is one the origin never answers, as a request
//! crossing a close on a real network), then sends its FIN and keeps reading, so that a
//! request holdfast sends afterwards is seen and counted too.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::{BodyExt, Empty};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::{admin_get, config_to, seed, wait_until, ClientBody, Proxy, DEADLINE};

/// What the origin does with one request: the response, and how long after it the
/// connection closes (`None`: it stays open).
#[derive(Debug, Clone, Copy)]
struct Answer {
    response: &'static [u8],
    close_after: Option<Duration>,
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
const NOT_FOUND: &[u8] = b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\ngone";

impl Answer {
    fn keep(response: &'static [u8]) -> Answer {
        Answer { response, close_after: None }
    }

    fn then_close(response: &'static [u8], lag: Duration) -> Answer {
        Answer { response, close_after: Some(lag) }
    }
}

/// How the origin answers a request head, given its request line and its number on its
/// connection (1 for the first).
type Script = Arc<dyn Fn(&str, usize) -> Answer + Send + Sync>;

/// Counts shared by the origin's connections.
#[derive(Default)]
struct Counts {
    accepted: AtomicUsize,
    answered: AtomicUsize,
    /// Requests that arrived on a connection after the origin had decided to close it:
    /// each would be lost (a 502 for a POST).
    late: AtomicUsize,
    /// Connections the origin closed itself.
    closed: AtomicUsize,
}

/// The hand-written origin: answers request heads (requests without a body) as its
/// script says, on as many keep-alive connections as it is given.
struct ClosingOrigin {
    addr: SocketAddr,
    counts: Arc<Counts>,
    accept: JoinHandle<()>,
}

impl Drop for ClosingOrigin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl ClosingOrigin {
    /// Closes connections only as `script` says.
    async fn start(script: impl Fn(&str, usize) -> Answer + Send + Sync + 'static) -> Self {
        ClosingOrigin::start_with_idle(None, script).await
    }

    /// Also closes a connection that has idled for `idle_close`, as a keep-alive timeout
    /// does, without announcing the timeout.
    async fn start_with_idle(
        idle_close: Option<Duration>,
        script: impl Fn(&str, usize) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let addr = listener.local_addr().expect("origin addr");
        let counts = Arc::new(Counts::default());
        let script: Script = Arc::new(script);
        let shared = Arc::clone(&counts);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                let (script, counts) = (Arc::clone(&script), Arc::clone(&shared));
                tokio::spawn(serve(stream, script, counts, idle_close));
            }
        });
        ClosingOrigin { addr, counts, accept }
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn accepted(&self) -> usize {
        self.counts.accepted.load(Ordering::SeqCst)
    }

    fn late(&self) -> usize {
        self.counts.late.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.counts.closed.load(Ordering::SeqCst)
    }
}

/// One connection: answers heads until the script or the idle limit closes it; ends
/// when the peer closes.
async fn serve(mut stream: TcpStream, script: Script, counts: Arc<Counts>, idle: Option<Duration>) {
    let mut pending = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut number = 0;
    // Each round reads at least one byte, or ends the connection.
    let lag = loop {
        let read = match idle {
            Some(limit) => match tokio::time::timeout(limit, stream.read(&mut chunk)).await {
                Ok(read) => read,
                Err(_) => break Duration::ZERO,
            },
            None => stream.read(&mut chunk).await,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
        let mut close = None;
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = pending.drain(..end + 4).collect();
            if close.is_some() {
                // Pipelined behind the response that closes: never answered.
                counts.late.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            number += 1;
            let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
            let answer = script(&line, number);
            if stream.write_all(answer.response).await.is_err() {
                return;
            }
            counts.answered.fetch_add(1, Ordering::SeqCst);
            close = answer.close_after;
        }
        if let Some(lag) = close {
            break lag;
        }
    };
    // Decided to close: nothing more is answered. What arrives during the lag and
    // after the FIN is a request sent on a connection the origin closed.
    let fin_at = Instant::now() + lag;
    let mut fin_sent = false;
    // Each round reads at least one byte, sends the FIN once, or ends.
    loop {
        let read = if fin_sent {
            stream.read(&mut chunk).await
        } else {
            match tokio::time::timeout_at(fin_at, stream.read(&mut chunk)).await {
                Ok(read) => read,
                Err(_) => {
                    fin_sent = true;
                    counts.closed.fetch_add(1, Ordering::SeqCst);
                    if stream.shutdown().await.is_err() {
                        return;
                    }
                    continue;
                }
            }
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                counts.late.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

fn empty() -> ClientBody {
    Empty::new().map_err(Into::into).boxed()
}

/// The field report: an origin answers HEAD with 200 and neither `Content-Length` nor
/// `Transfer-Encoding`, and closes 1 to 5 ms later. Such a head describes a GET response
/// delimited by the close (RFC 9112, 6.3), so the connection is not pooled: each POST
/// that follows goes on another connection and succeeds (it got 502 `not_replayed` when
/// the POST went out on the closing connection), and the origin never sees a request
/// on a connection it closed.
#[tokio::test]
async fn a_head_response_without_a_length_is_not_followed_by_a_request_on_its_connection() {
    const ROUNDS: usize = 10;
    let lags = Arc::new(AtomicUsize::new(0));
    let origin = ClosingOrigin::start(move |line, _| {
        if line.starts_with("HEAD ") {
            let lag = 1 + lags.fetch_add(1, Ordering::SeqCst) % 5;
            let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n";
            Answer::then_close(head, Duration::from_millis(lag as u64))
        } else {
            Answer::keep(OK)
        }
    })
    .await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.client().await;
    let mut posted = 0;
    for _ in 0..ROUNDS {
        let head = client.request(Method::HEAD, "/file", empty()).await;
        assert_eq!(head.status, StatusCode::OK);
        let post = client.request(Method::POST, "/submit", empty()).await;
        if post.status == StatusCode::OK {
            posted += 1;
        }
    }
    assert_eq!(posted, ROUNDS, "POSTs answered 200");
    assert_eq!(origin.late(), 0, "requests sent on a connection the origin closed");
    // Each HEAD's connection is closed by holdfast; each POST's is the next HEAD's.
    assert_eq!(origin.accepted(), ROUNDS + 1);
}

/// holdfast in front of `origin`, with an admin listener for `/status` and `/metrics`.
async fn proxy_with_admin(origin: &ClosingOrigin) -> Proxy {
    let mut config = config_to(origin.addr());
    config.admin = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    Proxy::start(config).await
}

/// The close rules `/status` shows for the one backend.
async fn rules(proxy: &Proxy) -> Vec<Value> {
    let (code, body) = admin_get(proxy.admin(), "/status").await;
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body).expect("status is JSON");
    let server = &status["upstreams"][0]["servers"][0];
    server["learned_closes"].as_array().cloned().unwrap_or_else(|| panic!("no rules in {server}"))
}

/// Connections holdfast retired by learned rules, from `/metrics`.
async fn retired_by_rules(proxy: &Proxy) -> u64 {
    let m = proxy.metrics().await;
    m.count("holdfast_backend_connections_closed_total", &[("reason", "learned")])
}

/// Sends `GET path` until `/status` shows a rule, checking after each request; every
/// GET must succeed (holdfast sends a GET again when a pooled connection fails under
/// it). Panics after `max` requests.
async fn learn_from_gets(proxy: &Proxy, paths: &[&str], max: usize) -> Vec<Value> {
    let mut client = proxy.client().await;
    // Bounded by `max` requests.
    for sent in 0..max {
        let path = paths[sent % paths.len()];
        let reply = client.get(path).await;
        let want = if path == "/missing" { StatusCode::NOT_FOUND } else { StatusCode::OK };
        assert_eq!(reply.status, want, "GET {path}: {}", reply.text());
        let rules = rules(proxy).await;
        if !rules.is_empty() {
            return rules;
        }
    }
    panic!("no rule learned after {max} requests");
}

/// Sends `count` POSTs one after another; how many got 200.
async fn post(proxy: &Proxy, count: usize) -> usize {
    let mut client = proxy.client().await;
    let mut ok = 0;
    for _ in 0..count {
        if client.request(Method::POST, "/submit", empty()).await.status == StatusCode::OK {
            ok += 1;
        }
    }
    ok
}

/// An origin that closes every connection 3 ms after its third response, unannounced:
/// holdfast learns "after 3 requests" from a few GETs (sent again when they fail), then
/// retires each connection after its third response itself, so a long run of POSTs
/// (which are never sent twice) gets no 502 and the origin no request on a closing
/// connection. Each retired connection it watches is seen closed by the origin, which
/// keeps the rule.
#[tokio::test]
async fn an_origin_closing_after_its_third_response_is_learned_and_posts_get_no_502() {
    const POSTS: usize = 120;
    let origin = ClosingOrigin::start(|_, number| match number {
        3 => Answer::then_close(OK, Duration::from_millis(3)),
        _ => Answer::keep(OK),
    })
    .await;
    let proxy = proxy_with_admin(&origin).await;
    let learned = learn_from_gets(&proxy, &["/"], 60).await;
    assert_eq!(learned.len(), 1, "{learned:?}");
    assert_eq!(
        (learned[0]["rule"].as_str(), learned[0]["requests"].as_u64()),
        (Some("after_requests"), Some(3))
    );
    let late = origin.late();
    assert_eq!(post(&proxy, POSTS).await, POSTS, "POSTs answered 200");
    assert_eq!(origin.late(), late, "requests sent on a connection the origin was closing");
    assert!(retired_by_rules(&proxy).await >= (POSTS / 3 - 1) as u64);
    let m = proxy.metrics().await;
    let in_force = |rule| m.count("holdfast_backend_learned_close_rules", &[("rule", rule)]);
    assert_eq!((in_force("after_requests"), in_force("after_response")), (1, 0));
    // Retired connections are watched one at a time, the origin's close confirming the
    // rule; POSTs go on (each third retires a connection) until one is seen.
    let start = Instant::now();
    // Bounded by DEADLINE; each round sends three POSTs and reads /status.
    loop {
        let learned = rules(&proxy).await;
        assert_eq!(learned.len(), 1, "the rule holds: {learned:?}");
        if learned[0]["confirmed"].as_u64() > Some(0) {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "no retired connection seen closed: {learned:?}");
        assert_eq!(post(&proxy, 3).await, 3);
    }
    assert_eq!(origin.late(), late);
}

/// An origin that closes a connection 2 ms after every 404 and after nothing else:
/// the count of requests before the close varies (2, 1, 3, ...), the kind of response
/// does not. holdfast learns "after a 404 with a length" and no count, then retires
/// every connection a 404 came on, so POSTs after 404s get no 502.
#[tokio::test]
async fn an_origin_closing_after_each_404_is_learned_by_the_kind_of_response() {
    let origin = ClosingOrigin::start(|line, _| {
        if line.contains("/missing") {
            Answer::then_close(NOT_FOUND, Duration::from_millis(2))
        } else {
            Answer::keep(OK)
        }
    })
    .await;
    let proxy = proxy_with_admin(&origin).await;
    // Cycles of 2, 1 and 3 requests, each ending with the 404: with the GET sent again
    // on a new connection after each close, connections close after 2, 1, 3, 2, ...
    let cycle = ["/", "/missing", "/missing", "/", "/", "/missing"];
    let learned = learn_from_gets(&proxy, &cycle, 60).await;
    assert_eq!(learned.len(), 1, "{learned:?}");
    let rule = &learned[0];
    assert_eq!(rule["rule"], "after_response", "{rule}");
    assert_eq!(
        (rule["status"].as_u64(), rule["declares_length"].as_bool()),
        (Some(404), Some(true))
    );
    let late = origin.late();
    let mut client = proxy.client().await;
    for _ in 0..30 {
        assert_eq!(client.get("/missing").await.status, StatusCode::NOT_FOUND);
        for _ in 0..2 {
            let reply = client.request(Method::POST, "/submit", empty()).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        }
    }
    assert_eq!(origin.late(), late, "requests sent on a connection the origin was closing");
    assert_eq!(rules(&proxy).await.len(), 1);
}

/// An origin that closes idle connections after 1 s without announcing it: each
/// request comes after that close, finds its pooled connection closed, and opens
/// another. Those closes are the origin's idle timeout, not closes after a response,
/// and teach no rule (they would, from the third on, if every close counted).
#[tokio::test]
async fn closes_after_an_idle_timeout_teach_no_rule() {
    const ROUNDS: usize = 4;
    let origin =
        ClosingOrigin::start_with_idle(Some(Duration::from_secs(1)), |_, _| Answer::keep(OK)).await;
    let proxy = proxy_with_admin(&origin).await;
    let mut client = proxy.client().await;
    for round in 1..=ROUNDS {
        assert_eq!(client.get("/").await.status, StatusCode::OK);
        wait_until("the origin closes the idle connection", DEADLINE, || origin.closed() == round)
            .await;
    }
    assert_eq!(client.get("/").await.status, StatusCode::OK);
    // Each request opened a connection: the pool found the last one closed each time.
    assert_eq!(origin.accepted(), ROUNDS + 1);
    assert_eq!(rules(&proxy).await, Vec::<Value>::new());
    assert_eq!(retired_by_rules(&proxy).await, 0);
}

/// An origin that closes a connection 2 ms after a response now and then, at random
/// (one response in 20): closes come after any number of requests, and connections
/// between them go on past each of those points, so no rule is learned.
#[tokio::test]
async fn rare_closes_at_random_points_teach_no_rule() {
    const REQUESTS: usize = 400;
    let state = Arc::new(AtomicU64::new(seed(0x1ea2_0000_0001)));
    let origin = ClosingOrigin::start(move |_, _| {
        // SplitMix64 over a shared state: responses are answered one at a time here.
        let mut z = state.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::SeqCst);
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        match (z ^ (z >> 31)) % 20 {
            0 => Answer::then_close(OK, Duration::from_millis(2)),
            _ => Answer::keep(OK),
        }
    })
    .await;
    let proxy = proxy_with_admin(&origin).await;
    let mut client = proxy.client().await;
    for _ in 0..REQUESTS {
        assert_eq!(client.get("/").await.status, StatusCode::OK);
    }
    assert!(origin.closed() >= 5, "too few closes to prove anything: {}", origin.closed());
    assert_eq!(rules(&proxy).await, Vec::<Value>::new());
    assert_eq!(retired_by_rules(&proxy).await, 0);
}

/// A rule is checked again on the connections it retires: once the origin stops
/// closing them, two retired connections that stay open past the window forget it,
/// and connections carry more than three requests again.
#[tokio::test]
async fn a_rule_is_forgotten_when_the_origin_stops_closing() {
    let closing = Arc::new(AtomicBool::new(true));
    let closes = Arc::clone(&closing);
    let origin = ClosingOrigin::start(move |_, number| {
        if number == 3 && closes.load(Ordering::SeqCst) {
            Answer::then_close(OK, Duration::from_millis(3))
        } else {
            Answer::keep(OK)
        }
    })
    .await;
    let proxy = proxy_with_admin(&origin).await;
    learn_from_gets(&proxy, &["/"], 60).await;
    closing.store(false, Ordering::SeqCst);
    let mut client = proxy.client().await;
    let start = Instant::now();
    // Bounded by DEADLINE; each round sends one GET and reads /status.
    while !rules(&proxy).await.is_empty() {
        assert!(start.elapsed() < DEADLINE, "the rule is still in force");
        assert_eq!(client.get("/").await.status, StatusCode::OK);
    }
    let opened = origin.accepted();
    for _ in 0..10 {
        assert_eq!(client.get("/").await.status, StatusCode::OK);
    }
    assert!(origin.accepted() <= opened + 1, "connections still retired after 3 requests");
}
