//! Streams an HTTP/2 origin refused go again, whatever their method and wherever their
//! body was when the refusal came: before the HEADERS went, on the HEADERS, mid-body
//! (waiting for the origin's window, or for the client), after the whole body. From
//! HTTP/2 and HTTP/1.1 clients, by GOAWAY and by REFUSED_STREAM; each POST is processed
//! exactly once. A body too large to keep gets a 502 that says so; a stream the origin
//! may have processed is not sent again; an origin that refuses every stream fails the
//! request after a bounded number of tries. The drill: 4,000 POSTs of 100 B to 1 MB
//! through an origin that sends GOAWAY every 7 or 100 streams, and 2,000 through one
//! that refuses every fifth stream.
//!
//! The origin is written frame by frame ([`RefusingOrigin`]): `h2`'s server cannot
//! refuse a stream by GOAWAY once its HEADERS arrived.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use holdfast::Config;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::support::http2::{h2_config, H2Client};
use crate::support::refusing::{Refusal, RefuseAt, RefusingOptions, RefusingOrigin};
use crate::support::{
    wait_until, within, within_for, ClientBody, Fnv, HttpClient, Proxy, RawClient, DEADLINE,
};

/// The most of a body holdfast keeps to send again (`body_copy::MAX_BYTES`).
const KEEP_LIMIT: usize = 1024 * 1024;

/// An h2c listener (HTTP/1.1 clients welcome too) in front of `origin`.
fn config(origin: &RefusingOrigin) -> Config {
    h2_config("h2c = true", &[format!("h2c://{}", origin.addr())], "", "")
}

/// How the test's client speaks to holdfast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    H2,
    H1,
}

const CLIENTS: [Client; 2] = [Client::H2, Client::H1];

/// A body of `len` bytes that starts with `id=ID;` when there is room for it.
fn body(id: &str, len: usize) -> Vec<u8> {
    let mut body: Vec<u8> = format!("id={id};").into_bytes();
    body.truncate(len);
    let start = body.len();
    body.extend((start..len).map(|i| (i % 251) as u8));
    body
}

/// What a client got back.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a 200 from the origin that received exactly `body` (and trailers when
    /// `trailers`).
    fn assert_received(&self, body: &[u8], trailers: bool, what: &str) {
        assert_eq!(self.status, StatusCode::OK, "{what}: {}", self.text);
        let len = body.len().to_string();
        assert_eq!(self.header("x-received-bytes"), Some(len.as_str()), "{what}");
        assert_eq!(self.header("x-received-fnv"), Some(Fnv::of(body).as_str()), "{what}");
        let t = if trailers { "1" } else { "0" };
        assert_eq!(self.header("x-received-trailers"), Some(t), "{what}: trailers");
    }
}

/// A body for [`HttpClient::request`] holding `bytes`, with Content-Length.
fn sized(bytes: &[u8]) -> ClientBody {
    Full::new(Bytes::copy_from_slice(bytes)).map_err(Into::into).boxed()
}

/// A body for [`HttpClient::request`] holding `bytes`, chunked, in 16 KiB pieces.
fn chunked(bytes: &[u8]) -> ClientBody {
    let pieces: Vec<Result<Frame<Bytes>, std::io::Error>> =
        bytes.chunks(16 * 1024).map(|c| Ok(Frame::data(Bytes::copy_from_slice(c)))).collect();
    StreamBody::new(futures_util::stream::iter(pieces)).map_err(Into::into).boxed()
}

/// POSTs `body` through holdfast at `addr` from a client of the `client` kind, on a
/// connection of its own.
async fn post(addr: SocketAddr, client: Client, body: &[u8]) -> Answer {
    match client {
        Client::H2 => {
            let h2 = H2Client::connect(addr).await;
            let reply = h2
                .request(Method::POST, "/upload", &[], Bytes::copy_from_slice(body))
                .await
                .expect("a response over HTTP/2");
            Answer { status: reply.status, text: reply.text(), headers: reply.headers }
        }
        Client::H1 => {
            let mut h1 = HttpClient::connect(addr).await;
            let reply = h1.request(Method::POST, "/upload", sized(body)).await;
            Answer { status: reply.status, text: reply.text(), headers: reply.headers }
        }
    }
}

/// Starts an origin that turns streams away as `options` say, and holdfast before it.
async fn refusing(options: RefusingOptions) -> (RefusingOrigin, Proxy) {
    let origin = RefusingOrigin::start(options).await;
    let proxy = Proxy::start(config(&origin)).await;
    (origin, proxy)
}

/// POSTs `len` bytes from each kind of client through an origin that turns the first
/// stream away as `how` and `at` say, over an origin window of `window`: each gets
/// its 200, the origin processed each exactly once, and the stream turned away had
/// `sent` body bytes when it was.
async fn resent_once(how: Refusal, at: RefuseAt, window: u32, len: usize, sent: Option<u64>) {
    for client in CLIENTS {
        let what = format!("{how:?} at {at:?}, {len} bytes from {client:?}");
        let options = RefusingOptions { how, at, times: 1, window, ..RefusingOptions::default() };
        let (origin, proxy) = refusing(options).await;
        let body = body("only", len);
        let answer = post(proxy.addr(), client, &body).await;
        answer.assert_received(&body, false, &what);
        // An empty body carries no id.
        let id = if len == 0 { "" } else { "only" };
        assert_eq!(origin.processed(), [id], "{what}: processed once");
        if let Some(sent) = sent {
            assert_eq!(origin.turned_away(), [sent], "{what}: where the refusal came");
        }
        assert!(origin.errors().is_empty(), "{what}: {:?}", origin.errors());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_before_the_headers_went_is_resent() {
    // GOAWAY (last stream 0) as soon as the connection is up: holdfast either sees it
    // before it picks the connection, or its stream goes out on it and is refused.
    for client in CLIENTS {
        let options = RefusingOptions {
            how: Refusal::GoAway,
            at: RefuseAt::Start,
            times: 1,
            ..RefusingOptions::default()
        };
        let (origin, proxy) = refusing(options).await;
        let body = body("start", 10_000);
        let answer = post(proxy.addr(), client, &body).await;
        answer.assert_received(&body, false, &format!("{client:?}"));
        assert_eq!(answer.header("x-conn"), Some("2"), "{client:?}: on the second connection");
        assert_eq!(origin.processed(), ["start"]);
        assert_eq!(origin.goaways(), 1);
        assert!(origin.turned_away().iter().all(|bytes| *bytes == 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_on_its_headers_before_any_body_is_resent() {
    // A window of 0: not a byte of the body can go before the refusal.
    for how in [Refusal::GoAway, Refusal::Reset] {
        resent_once(how, RefuseAt::Headers, 0, 10_000, Some(0)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_mid_body_waiting_on_the_origins_window_is_resent() {
    // The drill's case: 65,536 bytes against the default window of 65,535, refused
    // while the last byte waits for a window that never comes.
    for how in [Refusal::GoAway, Refusal::Reset] {
        resent_once(how, RefuseAt::Bytes(65_535), 65_535, 65_536, Some(65_535)).await;
        resent_once(how, RefuseAt::Bytes(16_384), 16_384, 300_000, Some(16_384)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_mid_body_while_the_client_still_sends_is_resent() {
    const FIRST: usize = 40_000;
    const LEN: usize = 100_000;
    for how in [Refusal::GoAway, Refusal::Reset] {
        for client in CLIENTS {
            let what = format!("{how:?} from {client:?}");
            // A window wider than the body: holdfast waits for the client, not the
            // origin, when the refusal comes.
            let options = RefusingOptions {
                how,
                at: RefuseAt::Bytes(FIRST as u64),
                times: 1,
                window: 1 << 20,
                ..RefusingOptions::default()
            };
            let (origin, proxy) = refusing(options).await;
            let body = body("halves", LEN);
            let (first, rest) = body.split_at(FIRST);
            let refused = || origin.turned_away().len() == 1;
            let answer = match client {
                Client::H2 => post_h2_in_two(proxy.addr(), first, rest, refused).await,
                Client::H1 => post_h1_in_two(proxy.addr(), first, rest, refused).await,
            };
            answer.assert_received(&body, false, &what);
            assert_eq!(origin.processed(), ["halves"], "{what}");
            assert_eq!(origin.turned_away(), [FIRST as u64], "{what}");
        }
    }
}

/// POSTs `first`, then `rest` once `between` holds, over HTTP/2.
async fn post_h2_in_two(
    addr: SocketAddr,
    first: &[u8],
    rest: &[u8],
    between: impl FnMut() -> bool,
) -> Answer {
    let tcp = within("connect", TcpStream::connect(addr)).await.expect("connect");
    let (send, conn) = within("h2 handshake", h2::client::handshake(tcp)).await.expect("handshake");
    tokio::spawn(conn);
    let mut send = within("ready", send.ready()).await.expect("ready");
    let request = Request::post("http://holdfast.test/upload").body(()).expect("a request");
    let (response, mut upload) = send.send_request(request, false).expect("a stream");
    upload.send_data(Bytes::copy_from_slice(first), false).expect("the first part");
    wait_until("the origin refused the stream", DEADLINE, between).await;
    upload.send_data(Bytes::copy_from_slice(rest), true).expect("the rest");
    let response = within("response", response).await.expect("a response");
    let (parts, mut data) = response.into_parts();
    let mut text = Vec::new();
    // Bounded by the response body; each round takes one DATA frame.
    while let Some(chunk) = within("response body", data.data()).await {
        let chunk = chunk.expect("response body");
        text.extend_from_slice(&chunk);
        let _ = data.flow_control().release_capacity(chunk.len());
    }
    Answer {
        status: parts.status,
        headers: parts.headers,
        text: String::from_utf8_lossy(&text).into_owned(),
    }
}

/// POSTs `first`, then `rest` once `between` holds, over HTTP/1.1 with
/// Content-Length.
async fn post_h1_in_two(
    addr: SocketAddr,
    first: &[u8],
    rest: &[u8],
    between: impl FnMut() -> bool,
) -> Answer {
    let mut raw = RawClient::connect(addr).await;
    let len = first.len() + rest.len();
    let mut head =
        format!("POST /upload HTTP/1.1\r\nHost: holdfast.test\r\nContent-Length: {len}\r\n\r\n")
            .into_bytes();
    head.extend_from_slice(first);
    raw.send(&head).await;
    wait_until("the origin refused the stream", DEADLINE, between).await;
    raw.send(rest).await;
    let resp = raw.response().await;
    let mut headers = HeaderMap::new();
    for name in ["x-received-bytes", "x-received-fnv", "x-received-trailers", "x-conn"] {
        if let Some(value) = resp.header(name) {
            headers.insert(name, HeaderValue::from_str(value).expect("a header value"));
        }
    }
    Answer {
        status: StatusCode::from_u16(resp.status).expect("a status"),
        headers,
        text: resp.body_text(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_after_the_whole_body_is_resent() {
    for how in [Refusal::GoAway, Refusal::Reset] {
        resent_once(how, RefuseAt::End, 65_535, 0, Some(0)).await;
        resent_once(how, RefuseAt::End, 65_535, 100_000, Some(100_000)).await;
        // As large as a kept body gets.
        resent_once(how, RefuseAt::End, 65_535, KEEP_LIMIT, Some(KEEP_LIMIT as u64)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_and_bodies_with_trailers_are_resent_whole() {
    for how in [Refusal::GoAway, Refusal::Reset] {
        for at in [RefuseAt::Bytes(16_384), RefuseAt::End] {
            let what = format!("{how:?} at {at:?}");
            let options =
                RefusingOptions { how, at, times: 2, window: 16_384, ..RefusingOptions::default() };
            let (origin, proxy) = refusing(options).await;
            // HTTP/1.1, chunked.
            let chunked_body = body("chunked", 200_000);
            let mut h1 = HttpClient::connect(proxy.addr()).await;
            let reply = h1.request(Method::POST, "/upload", chunked(&chunked_body)).await;
            let answer =
                Answer { status: reply.status, text: reply.text(), headers: reply.headers };
            answer.assert_received(&chunked_body, false, &format!("{what}, chunked"));
            // HTTP/2 with trailers and no length.
            let trailed_body = body("trailed", 200_000);
            let mut trailers = HeaderMap::new();
            trailers.insert("x-checksum", HeaderValue::from_static("abc"));
            let h2 = H2Client::connect(proxy.addr()).await;
            let reply = h2
                .request_for(
                    DEADLINE,
                    Method::POST,
                    "/upload",
                    &[],
                    Bytes::from(trailed_body.clone()),
                    Some(trailers),
                )
                .await
                .expect("a response over HTTP/2");
            let answer =
                Answer { status: reply.status, text: reply.text(), headers: reply.headers };
            answer.assert_received(&trailed_body, true, &format!("{what}, trailers"));
            assert_eq!(origin.processed(), ["chunked", "trailed"], "{what}");
            assert_eq!(origin.turned_away().len(), 2, "{what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_body_too_large_to_keep_gets_a_502_that_says_so() {
    for how in [Refusal::GoAway, Refusal::Reset] {
        for client in CLIENTS {
            let what = format!("{how:?} from {client:?}");
            let options =
                RefusingOptions { how, at: RefuseAt::End, times: 1, ..RefusingOptions::default() };
            let (origin, proxy) = refusing(options).await;
            let body = body("large", KEEP_LIMIT + 1);
            let answer = post(proxy.addr(), client, &body).await;
            assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{what}: {}", answer.text);
            let text = &answer.text;
            assert!(text.contains("refused the stream"), "{what}: {text}");
            assert!(text.contains("could not send it again"), "{what}: {text}");
            assert!(text.contains("too large to keep"), "{what}: {text}");
            assert!(text.contains("1024 KiB"), "{what}: {text}");
            assert!(origin.processed().is_empty(), "{what}");
            assert_eq!(origin.streams(), 1, "{what}: sent once");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_origin_may_have_processed_is_not_sent_again() {
    for how in
        [Refusal::GoAwayWithError, Refusal::ResetWithError, Refusal::GoAwayIncludingThenClose]
    {
        for client in CLIENTS {
            let what = format!("{how:?} from {client:?}");
            let options =
                RefusingOptions { how, at: RefuseAt::End, times: 1, ..RefusingOptions::default() };
            let (origin, proxy) = refusing(options).await;
            let answer = post(proxy.addr(), client, &body("once", 1000)).await;
            assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{what}: {}", answer.text);
            assert!(!answer.text.contains("refused the stream"), "{what}: {}", answer.text);
            assert_eq!(origin.streams(), 1, "{what}: sent again");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_refuses_every_stream_fails_the_request_after_a_bounded_number() {
    // REFUSED_STREAM leaves the connection open, so every try is on a reused one.
    let options = RefusingOptions {
        how: Refusal::Reset,
        at: RefuseAt::End,
        times: usize::MAX,
        ..RefusingOptions::default()
    };
    let (origin, proxy) = refusing(options).await;
    for client in CLIENTS {
        let before = origin.streams();
        let answer = post(proxy.addr(), client, &body("never", 1000)).await;
        assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{client:?}: {}", answer.text);
        let tries = origin.streams() - before;
        // The first try and `mux::MAX_REFUSED` (25) more.
        assert_eq!(tries, 26, "{client:?}");
    }
    assert!(origin.processed().is_empty());
}

// The drill.

/// Requests in flight at once, half from HTTP/2 clients, half from HTTP/1.1 ones.
const DRILL_LANES: usize = 32;

/// The body size of request `i` of `posts`: from 100 B to 1 MB, evenly spread over the
/// powers of ten between (each decade holds as many requests), in a scrambled order.
fn drill_size(i: usize, posts: usize) -> usize {
    // The multiplier shares no factor with 2 or 5: the spots are a permutation.
    let spot = (i * 2_654_435_761) % posts;
    let exponent = 4.0 * spot as f64 / (posts - 1) as f64;
    (100.0 * 10f64.powf(exponent)).round() as usize
}

/// One lane's client connection to holdfast.
enum Lane {
    H2(H2Client),
    H1(HttpClient),
}

/// Sends request `i` of `posts` (a POST whose body carries its id) on `lane`; what
/// went wrong, if anything.
async fn drill_post(i: usize, posts: usize, lane: &mut Lane) -> Option<String> {
    let id = format!("r{i}");
    let body = body(&id, drill_size(i, posts));
    let path = format!("/drill/{id}");
    let answer = match lane {
        Lane::H2(h2) => {
            match h2.request(Method::POST, &path, &[], Bytes::copy_from_slice(&body)).await {
                Ok(reply) => {
                    Answer { status: reply.status, text: reply.text(), headers: reply.headers }
                }
                Err(e) => return Some(format!("{id} over HTTP/2: {e}")),
            }
        }
        Lane::H1(h1) => {
            // Every fifth HTTP/1.1 body is chunked.
            let sent = if i % 5 == 0 { chunked(&body) } else { sized(&body) };
            let reply = h1.request(Method::POST, &path, sent).await;
            Answer { status: reply.status, text: reply.text(), headers: reply.headers }
        }
    };
    let fnv = Fnv::of(&body);
    let len = body.len().to_string();
    let ok = answer.status == StatusCode::OK
        && answer.header("x-received-bytes") == Some(len.as_str())
        && answer.header("x-received-fnv") == Some(fnv.as_str());
    (!ok).then(|| format!("{id} ({} bytes): {} {}", body.len(), answer.status, answer.text.trim()))
}

/// `posts` POSTs through an origin that turns streams away as `options` say: none
/// fails, none is processed twice.
async fn drill(options: RefusingOptions, posts: usize) {
    let what = format!("{options:?}");
    let (origin, proxy) = refusing(options).await;
    let started = Instant::now();
    let lanes: Vec<_> = (0..DRILL_LANES)
        .map(|lane| {
            let addr = proxy.addr();
            tokio::spawn(async move {
                let mut client = if lane % 2 == 0 {
                    Lane::H2(H2Client::connect(addr).await)
                } else {
                    Lane::H1(HttpClient::connect(addr).await)
                };
                let mut failed = Vec::new();
                // Bounded: this lane's share of the requests.
                for i in (lane..posts).step_by(DRILL_LANES) {
                    if let Some(why) = drill_post(i, posts, &mut client).await {
                        failed.push(why);
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = Vec::new();
    for lane in lanes {
        failed.extend(within_for("a drill lane", Duration::from_secs(300), lane).await.unwrap());
    }
    let processed = origin.processed();
    let mut ids = processed.clone();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    eprintln!(
        "drill, {what}: {posts} POSTs in {:.1} s, {} failed, \
         {} processed ({} twice), {} streams refused, {} GOAWAYs, {} connections",
        started.elapsed().as_secs_f64(),
        failed.len(),
        processed.len(),
        before - ids.len(),
        origin.turned_away().len(),
        origin.goaways(),
        origin.accepted(),
    );
    assert!(failed.is_empty(), "{} failed: {:?}", failed.len(), &failed[..failed.len().min(10)]);
    assert_eq!(before, ids.len(), "requests processed twice");
    assert_eq!(processed.len(), posts);
    // Whether streams were in flight when a GOAWAY came is timing's to say; that it came
    // is not.
    let turned_away = origin.goaways() > 0 || !origin.turned_away().is_empty();
    assert!(turned_away, "the origin turned nothing away: not a drill");
    assert!(origin.errors().is_empty(), "{:?}", origin.errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_goaway_every_7_streams_loses_and_repeats_no_post() {
    drill(RefusingOptions { goaway_every: Some(7), ..RefusingOptions::default() }, 4_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_goaway_every_100_streams_loses_and_repeats_no_post() {
    let options = RefusingOptions { goaway_every: Some(100), ..RefusingOptions::default() };
    drill(options, 4_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_refused_stream_every_5_streams_loses_and_repeats_no_post() {
    // After a GOAWAY holdfast carries fewer streams per connection, so refusals by
    // GOAWAY dwindle; REFUSED_STREAM teaches it nothing, so here every fifth stream
    // is refused, at each point of its upload in turn (about 500 refusals).
    let options = RefusingOptions {
        how: Refusal::Reset,
        refuse_every: Some(5),
        ..RefusingOptions::default()
    };
    drill(options, 2_000).await;
}
