//! HTTP/2 clients that abuse the protocol: rapid reset (CVE-2023-44487), CONTINUATION
//! floods, header lists over the limit, and more concurrent streams than announced.
//! Each gets its own connection closed or its streams refused, nothing of it reaches
//! the origin, and a well-behaved client on another connection is served throughout.
//!
//! The abusive clients write frames by hand ([`RawH2`]); the well-behaved one is the
//! `h2` crate's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::h2::h2c_to_http1;
use crate::support::http2::{
    encode_frame, frame, get_block, h2_config, hpack_literal, H2Client, RawEnd, RawH2,
};
use crate::support::{wait_until, Origin, Proxy, DEADLINE};

/// How long holdfast may take to close an abusive connection once the abuse is
/// unmistakable.
const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// RST_STREAM's CANCEL, as a browser sends for a request it no longer wants.
const CANCEL: u32 = 0x8;
/// REFUSED_STREAM.
const REFUSED_STREAM: u32 = 0x7;

/// A well-behaved client sending one request after another on its own connection
/// until stopped; the task returns how many got a 200, and panics on any other outcome.
struct Bystander {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    task: JoinHandle<usize>,
}

impl Bystander {
    async fn start(proxy: &Proxy) -> Bystander {
        let client = H2Client::connect(proxy.addr()).await;
        let (stop, ok) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let task = {
            let (stop, ok) = (Arc::clone(&stop), Arc::clone(&ok));
            tokio::spawn(async move {
                let mut i = 0;
                // Bounded by the test: it stops the loop, and each request has a deadline.
                while !stop.load(Ordering::SeqCst) {
                    let path = format!("/bystander/{i}");
                    let reply = client
                        .request(Method::GET, &path, &[], Bytes::new())
                        .await
                        .unwrap_or_else(|e| panic!("the well-behaved client's {path}: {e}"));
                    assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text());
                    ok.fetch_add(1, Ordering::SeqCst);
                    i += 1;
                }
                i
            })
        };
        Bystander { stop, ok, task }
    }

    /// Waits until it has had `n` more 200s than now.
    async fn wait_more(&self, n: usize) {
        let from = self.ok.load(Ordering::SeqCst);
        wait_until("the well-behaved client is served", DEADLINE, || {
            self.ok.load(Ordering::SeqCst) >= from + n
        })
        .await;
    }

    /// Stops it; how many requests it had answered.
    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        crate::support::within("the well-behaved client", self.task).await.expect("its task")
    }
}

/// Sends `batches` of bytes that `batch(i)` makes, reading what arrives after each,
/// until the connection is closed or gets a GOAWAY: how many batches went out.
async fn flood(
    attacker: &mut RawH2,
    batches: usize,
    mut batch: impl FnMut(usize) -> Vec<u8>,
) -> usize {
    for i in 0..batches {
        if attacker.send(&batch(i)).await.is_err() {
            return i;
        }
        if attacker.drain_ready().await.is_err()
            || attacker.seen.iter().any(|f| f.kind == frame::GOAWAY)
        {
            return i + 1;
        }
    }
    batches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_closes_only_the_offending_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let bystander = Bystander::start(&proxy).await;
    bystander.wait_more(5).await;

    // 1000 streams a batch, each opened and cancelled at once; at most 50,000.
    let mut attacker = RawH2::connect(proxy.addr()).await;
    let sent = flood(&mut attacker, 50, |b| {
        let mut bytes = Vec::new();
        for s in 0..1000u32 {
            let stream = 1 + 2 * (b as u32 * 1000 + s);
            let flags = frame::END_HEADERS | frame::END_STREAM;
            bytes.extend(encode_frame(frame::HEADERS, flags, stream, &get_block("/rapid")));
            bytes.extend(encode_frame(frame::RST_STREAM, 0, stream, &CANCEL.to_be_bytes()));
        }
        bytes
    })
    .await;
    let ended = attacker.goaway_or_close(CLOSE_DEADLINE).await;
    eprintln!("rapid reset: {sent} batches of 1000 streams sent; GOAWAY {ended:?}");
    // The well-behaved client goes on being served, during and after.
    bystander.wait_more(5).await;
    let served = bystander.stop().await;
    assert!(served >= 10);
    let fresh = H2Client::connect(proxy.addr()).await;
    assert_eq!(fresh.get("/after").await.status, StatusCode::OK);
    // The connection ended before the whole flood was taken in.
    assert!(sent < 50, "holdfast took 50,000 reset streams on one connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuation_flood_closes_the_connection_quickly() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let bystander = Bystander::start(&proxy).await;
    bystander.wait_more(5).await;

    let mut attacker = RawH2::connect(proxy.addr()).await;
    // HEADERS without END_HEADERS, then CONTINUATION frames that never end the block:
    // 1000 frames of a 24-byte header field each per batch, 100 batches at most
    // (2.4 MB of header block, 75 times the default limit).
    let started = Instant::now();
    let opening = encode_frame(frame::HEADERS, frame::END_STREAM, 1, &get_block("/flood"));
    attacker.send(&opening).await.expect("send HEADERS");
    let sent = flood(&mut attacker, 100, |b| {
        let mut bytes = Vec::new();
        for i in 0..1000 {
            let mut field = Vec::new();
            hpack_literal(format!("x-f{:07}", b * 1000 + i).as_bytes(), b"0123456789", &mut field);
            bytes.extend(encode_frame(frame::CONTINUATION, 0, 1, &field));
        }
        bytes
    })
    .await;
    let ended = attacker.goaway_or_close(CLOSE_DEADLINE).await;
    eprintln!(
        "CONTINUATION flood: {sent} batches sent in {:?}; GOAWAY {ended:?}",
        started.elapsed()
    );
    assert!(sent < 100, "holdfast took 100,000 CONTINUATION frames of one header block");
    assert_eq!(origin.count_path("/flood"), 0);
    // holdfast is still up and serving.
    bystander.wait_more(5).await;
    bystander.stop().await;
    let fresh = H2Client::connect(proxy.addr()).await;
    assert_eq!(fresh.get("/after").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_list_over_the_limit_is_refused_before_the_origin() {
    let origin = Origin::start().await;
    // The default limit on a request head, 32 KiB, applies to the header list.
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    assert_eq!(client.get("/before").await.status, StatusCode::OK);
    let big = "a".repeat(40_000);
    match client.request(Method::GET, "/big-headers", &[("x-big", &big)], Bytes::new()).await {
        Ok(reply) => assert_eq!(reply.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
        // A stream or connection error refuses it too.
        Err(e) => eprintln!("refused with {e}"),
    }
    // Many small fields adding up to more than the limit.
    let fields: Vec<(String, String)> =
        (0..400).map(|i| (format!("x-field-{i}"), "v".repeat(100))).collect();
    let headers: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let fresh = H2Client::connect(proxy.addr()).await;
    match fresh.request(Method::GET, "/many-headers", &headers, Bytes::new()).await {
        Ok(reply) => assert_eq!(reply.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
        Err(e) => eprintln!("refused with {e}"),
    }
    assert_eq!(origin.count_path("/big-headers"), 0);
    assert_eq!(origin.count_path("/many-headers"), 0);
    let after = H2Client::connect(proxy.addr()).await;
    assert_eq!(after.get("/after").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_h2_max_concurrent_streams_are_refused() {
    let origin = Origin::start().await;
    let config = h2_config(
        "h2c = true",
        &[origin.addr().to_string()],
        "",
        "[limits]\nh2_max_concurrent_streams = 8\n",
    );
    let proxy = Proxy::start(config).await;
    let mut client = RawH2::connect(proxy.addr()).await;
    let settings = client
        .until(DEADLINE, |f| f.kind == frame::SETTINGS && f.flags & frame::ACK == 0)
        .await
        .expect("holdfast's SETTINGS");
    let announced = settings.settings();
    assert!(
        announced.contains(&(frame::MAX_CONCURRENT_STREAMS, 8)),
        "SETTINGS announce {announced:?}"
    );
    // 20 streams held at the origin, ignoring the limit.
    for i in 0..20u32 {
        client.get(1 + 2 * i, &format!("/hold/all?{i}")).await.expect("send a request");
    }
    // The twelve over the limit are reset (or the connection goes away).
    let mut refused = Vec::new();
    let end = Instant::now() + DEADLINE;
    let mut goaway = None;
    // Bounded by the deadline; each round reads a frame.
    while refused.len() < 12 && goaway.is_none() {
        match client.next_frame(end).await {
            Ok(f) if f.kind == frame::RST_STREAM => refused.push((f.stream, f.reset_code())),
            Ok(f) if f.kind == frame::GOAWAY => goaway = f.goaway(),
            Ok(_) => {}
            Err(RawEnd::Closed) => break,
            Err(RawEnd::TimedOut) => {
                panic!("extra streams neither refused nor closed: {refused:?}")
            }
        }
    }
    eprintln!("refused {refused:?}, GOAWAY {goaway:?}");
    for (stream, code) in &refused {
        assert!(
            matches!(*code, Some(REFUSED_STREAM) | Some(0x1)),
            "stream {stream} reset with {code:?}"
        );
    }
    // Never more than 8 at the origin. A bound that must hold, not a condition to wait
    // for: a short grace lets any stream holdfast wrongly forwarded arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let at_origin = origin.count_path("/hold/all");
    assert!(at_origin <= 8, "{at_origin} streams reached the origin, over the limit of 8");
    origin.release("all");
    if goaway.is_none() && refused.len() == 12 {
        // The eight within the limit are answered.
        let mut answered = 0;
        let end = Instant::now() + DEADLINE;
        // Bounded by the deadline; each round reads a frame.
        while answered < at_origin {
            match client.next_frame(end).await {
                Ok(f) if f.kind == frame::HEADERS => {
                    assert_eq!(f.status(), Some(200));
                    answered += 1;
                }
                Ok(_) => {}
                Err(e) => panic!("{answered} of {at_origin} streams answered: {e:?}"),
            }
        }
    }
    let fresh = H2Client::connect(proxy.addr()).await;
    assert_eq!(fresh.get("/after").await.status, StatusCode::OK);
}
