//! HTTP/2 clients that abuse the protocol: rapid reset (CVE-2023-44487), CONTINUATION
//! floods, header lists over the limit, more concurrent streams than announced, and
//! PING and SETTINGS floods. Each gets its own connection closed or its streams
//! refused, nothing of it reaches the origin, and a well-behaved client on another
//! connection is served throughout. Clients that ping as real ones do are not cut off.
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

/// GOAWAY's ENHANCE_YOUR_CALM.
const ENHANCE_YOUR_CALM: u32 = 0xb;
/// The WINDOW_UPDATE frame type.
const WINDOW_UPDATE: u8 = 0x8;
/// The counter of connections cut off, and the label of those cut off for a flood.
const CONNECTION_ERRORS: &str = "holdfast_h2_client_connection_errors_total";
const CALM: [(&str, &str); 1] = [("reason", "enhance_your_calm")];

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
    let eight = || origin.count_path("/hold/all") == 8;
    wait_until("the eight streams within the limit reach the origin", DEADLINE, eight).await;
    let at_origin = 8;
    origin.release("all");
    // Twelve refusals are far below the resets that end a connection: the streams over
    // the limit are refused one by one, the connection stays, and the eight within the
    // limit are answered on it.
    assert!(goaway.is_none(), "the connection went away: GOAWAY {goaway:?}");
    assert_eq!(refused.len(), 12, "streams over the limit not refused: {refused:?}");
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
    let fresh = H2Client::connect(proxy.addr()).await;
    assert_eq!(fresh.get("/after").await.status, StatusCode::OK);
}

/// Floods a fresh connection with `batch(i)` (at most 100 batches of 1000 frames):
/// holdfast answers GOAWAY `ENHANCE_YOUR_CALM` and closes the connection long before
/// the end, counts it, and serves a well-behaved client throughout.
async fn flood_is_cut_off(what: &str, batch: impl FnMut(usize) -> Vec<u8>) {
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let bystander = Bystander::start(&proxy).await;
    bystander.wait_more(5).await;
    let before = proxy.metrics().await.count_or_zero(CONNECTION_ERRORS, &CALM);

    let mut attacker = RawH2::connect(proxy.addr()).await;
    let started = Instant::now();
    let sent = flood(&mut attacker, 100, batch).await;
    let goaway = match attacker.seen.iter().find(|f| f.kind == frame::GOAWAY) {
        Some(goaway) => goaway.clone(),
        None => {
            attacker.until(CLOSE_DEADLINE, |f| f.kind == frame::GOAWAY).await.unwrap_or_else(|e| {
                panic!("{what} flood: no GOAWAY ({e:?}); frames {:?}", attacker.kinds())
            })
        }
    };
    let (_, code) = goaway.goaway().expect("a GOAWAY with a code");
    assert_eq!(code, ENHANCE_YOUR_CALM, "{what} flood: GOAWAY code {code:#x}");
    // Then the connection closes.
    match attacker.until(CLOSE_DEADLINE, |_| false).await {
        Err(RawEnd::Closed) => {}
        other => panic!("{what} flood: the connection is still open after its GOAWAY: {other:?}"),
    }
    eprintln!("{what} flood: {sent} batches of 1000 sent, closed after {:?}", started.elapsed());
    assert!(sent < 100, "holdfast took 100,000 {what} frames on one connection");
    // Counted (other tests in this process may count too, never less).
    let after = proxy.metrics().await.count_or_zero(CONNECTION_ERRORS, &CALM);
    assert!(after > before, "{what} flood not counted: {before} before, {after} after");
    // The well-behaved client goes on being served, during and after.
    bystander.wait_more(5).await;
    bystander.stop().await;
    let fresh = H2Client::connect(proxy.addr()).await;
    assert_eq!(fresh.get("/after").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_flood_gets_enhance_your_calm_and_is_closed() {
    flood_is_cut_off("PING", |b| {
        (0..1000u64)
            .flat_map(|i| encode_frame(frame::PING, 0, 0, &(b as u64 * 1000 + i).to_be_bytes()))
            .collect()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_flood_gets_enhance_your_calm_and_is_closed() {
    // SETTINGS_MAX_CONCURRENT_STREAMS = 100, again and again.
    let setting = [0, 3, 0, 0, 0, 100];
    flood_is_cut_off("SETTINGS", |_| {
        (0..1000).flat_map(|_| encode_frame(frame::SETTINGS, 0, 0, &setting)).collect()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_at_a_normal_rate_are_answered_and_not_cut_off() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let mut client = RawH2::connect(proxy.addr()).await;
    // 8 a second for 8 seconds (a keepalive pinging hard), each answered: more pings
    // than holdfast's burst, at a rate it keeps up with.
    let mut tick = tokio::time::interval(Duration::from_millis(125));
    for i in 0..64u64 {
        tick.tick().await;
        let ping = encode_frame(frame::PING, 0, 0, &i.to_be_bytes());
        client.send(&ping).await.unwrap_or_else(|e| panic!("ping {i}: {e}"));
        let answer = client
            .until(DEADLINE, |f| {
                (f.kind == frame::PING && f.flags & frame::ACK != 0) || f.kind == frame::GOAWAY
            })
            .await
            .unwrap_or_else(|e| panic!("ping {i} unanswered: {e:?}"));
        assert_eq!((answer.kind, answer.payload), (frame::PING, i.to_be_bytes().to_vec()));
    }
    client.get(1, "/after-pings").await.expect("send a request");
    let response = client
        .until(DEADLINE, |f| f.kind == frame::HEADERS || f.kind == frame::GOAWAY)
        .await
        .expect("a response");
    assert_eq!((response.kind, response.status()), (frame::HEADERS, Some(200)));
    assert_eq!(origin.count_path("/after-pings"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_per_answer_while_data_arrives_is_not_cut_off() {
    // gRPC's flow-control estimation (grpc-go, grpc-java) pings whenever DATA arrives
    // and no ping is outstanding: once per round trip for as long as data flows.
    const SIZE: usize = 8 << 20;
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let mut client = RawH2::connect(proxy.addr()).await;
    client.get(1, &format!("/bytes/{SIZE}")).await.expect("send a request");
    let (mut received, mut pings, mut outstanding) = (0usize, 0u64, false);
    let end = Instant::now() + DEADLINE * 3;
    // Bounded by the deadline; each round reads one frame.
    loop {
        let f = client
            .next_frame(end)
            .await
            .unwrap_or_else(|e| panic!("{received} of {SIZE} bytes, {pings} pings, then {e:?}"));
        match f.kind {
            frame::DATA if f.stream == 1 => {
                received += f.payload.len();
                // The default windows (64 KiB) keep a round trip short: the window
                // goes back as the data is taken.
                if let Ok(n) = u32::try_from(f.payload.len()) {
                    if n > 0 {
                        let mut update = encode_frame(WINDOW_UPDATE, 0, 0, &n.to_be_bytes());
                        update.extend(encode_frame(WINDOW_UPDATE, 0, 1, &n.to_be_bytes()));
                        client.send(&update).await.expect("send WINDOW_UPDATE");
                    }
                }
                if !outstanding {
                    let ping = encode_frame(frame::PING, 0, 0, &pings.to_be_bytes());
                    client.send(&ping).await.expect("send a PING");
                    pings += 1;
                    outstanding = true;
                }
                if f.flags & frame::END_STREAM != 0 {
                    break;
                }
            }
            frame::PING if f.flags & frame::ACK != 0 => outstanding = false,
            frame::GOAWAY => panic!("cut off after {pings} pings: {:?}", f.goaway()),
            _ => {}
        }
    }
    assert_eq!(received, SIZE);
    eprintln!("{pings} pings while {SIZE} bytes arrived");
    // Far more than holdfast's burst of 50, so the rule, not the burst, let them by.
    assert!(pings > 100, "only {pings} pings: the test did not test the rule");
}
