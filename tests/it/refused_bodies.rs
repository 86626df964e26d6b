//! Every way holdfast holds an HTTP/1.1 client's body for an HTTP/2 origin, sent again
//! whole when the origin refuses the stream (REFUSED_STREAM, or a GOAWAY whose last
//! stream is below it): a chunked body with trailers streamed with its copy (empty
//! ones too), a small body read whole beforehand (`PUT` with a Content-Length, kept),
//! bodies on a route that buffers requests (to an HTTP/2 origin they stream with a
//! copy as well), a body that waited for `100 Continue`, and a body the origin answers
//! before it has read (the copy goes on the new stream while the response comes).
//! Each time the client gets the origin's answer about the body it received, and the
//! origin processed it exactly once. A body too large to keep still gets the 502 that
//! says so. `refused.rs` covers streamed bodies with a Content-Length and chunked ones
//! without trailers.

use std::net::SocketAddr;

use holdfast::Config;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::client::RawResponse;
use crate::support::http2::h2_config;
use crate::support::incoming::Incoming;
use crate::support::refusing::{Refusal, RefuseAt, RefusingOptions, RefusingOrigin};
use crate::support::{within, Fnv, Proxy, RawClient};

/// The most of a body holdfast keeps to send again (`body_copy::MAX_BYTES`).
const KEEP_LIMIT: usize = 1024 * 1024;

/// Both ways a stream is refused without being processed.
const REFUSALS: [Refusal; 2] = [Refusal::GoAway, Refusal::Reset];

/// holdfast in front of `origin`; with `buffered`, its one route buffers requests.
fn config(origin: &RefusingOrigin, buffered: bool) -> Config {
    let route = match buffered {
        true => "[[route]]\npath = \"/\"\nupstream = \"app\"\nbuffer_requests = true\n",
        false => "",
    };
    h2_config("", &[format!("h2c://{}", origin.addr())], "", route)
}

/// A body of `len` bytes that starts with `id=ID;` (the origin's name for the request)
/// when there is room for it.
fn body(id: &str, len: usize) -> Vec<u8> {
    let mut body: Vec<u8> = format!("id={id};").into_bytes();
    body.truncate(len);
    let start = body.len();
    body.extend((start..len).map(|i| (i % 251) as u8));
    body
}

/// How the client frames its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// With a Content-Length.
    Length,
    /// Chunked, in 16 KiB chunks, with a trailer section when `trailers`.
    Chunked { trailers: bool },
}

impl Sent {
    fn has_trailers(self) -> bool {
        self == Sent::Chunked { trailers: true }
    }

    /// The request head's framing line.
    fn head_line(self, len: usize) -> String {
        match self {
            Sent::Length => format!("Content-Length: {len}\r\n"),
            Sent::Chunked { .. } => "Transfer-Encoding: chunked\r\n".to_string(),
        }
    }

    /// `body` in this framing.
    fn frame(self, body: &[u8]) -> Vec<u8> {
        let Sent::Chunked { trailers } = self else { return body.to_vec() };
        let mut out = Vec::new();
        for chunk in body.chunks(16 * 1024) {
            out.extend(format!("{:x}\r\n", chunk.len()).into_bytes());
            out.extend_from_slice(chunk);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n");
        if trailers {
            out.extend(format!("x-checksum: {}\r\n", Fnv::of(body)).into_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// The request `METHOD /upload` with `body` framed as `sent`.
fn request(method: &str, sent: Sent, body: &[u8], expect: bool) -> (Vec<u8>, Vec<u8>) {
    let expect = if expect { "Expect: 100-continue\r\n" } else { "" };
    let head = format!(
        "{method} /upload HTTP/1.1\r\nHost: refused.test\r\n{}{expect}\r\n",
        sent.head_line(body.len())
    );
    (head.into_bytes(), sent.frame(body))
}

/// Asserts a 200 from the origin that received exactly `body`, with trailers when
/// `trailers`.
fn assert_received(resp: &RawResponse, body: &[u8], trailers: bool, what: &str) {
    assert_eq!(resp.status, 200, "{what}: {}", resp.body_text());
    let len = body.len().to_string();
    assert_eq!(resp.header("x-received-bytes"), Some(len.as_str()), "{what}");
    assert_eq!(resp.header("x-received-fnv"), Some(Fnv::of(body).as_str()), "{what}");
    let t = if trailers { "1" } else { "0" };
    assert_eq!(resp.header("x-received-trailers"), Some(t), "{what}: trailers");
}

/// Sends `method` with `len` bytes framed as `sent` through holdfast (its route
/// buffering requests when `buffered`) to an origin that turns the first stream away
/// as `how` and `at` say, over a window of `window`: the client gets the origin's 200
/// for the whole body, which it processed once; the stream turned away had `at`'s bytes.
async fn resent_once(
    (method, sent, len): (&str, Sent, usize),
    (how, at, window): (Refusal, RefuseAt, u32),
    buffered: bool,
) {
    let what = format!("{method} {sent:?} {len} bytes, {how:?} at {at:?}, buffered {buffered}");
    let options = RefusingOptions { how, at, times: 1, window, ..RefusingOptions::default() };
    let origin = RefusingOrigin::start(options).await;
    let proxy = Proxy::start(config(&origin, buffered)).await;
    let body = body("only", len);
    let (head, framed) = request(method, sent, &body, false);
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send([head, framed].concat()).await;
    let resp = client.response().await;
    assert_received(&resp, &body, sent.has_trailers(), &what);
    // An empty body carries no id.
    let id = if len == 0 { "" } else { "only" };
    assert_eq!(origin.processed(), [id], "{what}: processed once");
    let turned_away = match at {
        RefuseAt::Headers | RefuseAt::Start => 0,
        RefuseAt::Bytes(n) => n,
        RefuseAt::End => len as u64,
    };
    assert_eq!(origin.turned_away(), [turned_away], "{what}: where the refusal came");
    assert!(origin.errors().is_empty(), "{what}: {:?}", origin.errors());
    // The connection carries the next request.
    client.send("GET /next HTTP/1.1\r\nHost: refused.test\r\n\r\n").await;
    assert_received(&client.response().await, b"", false, &format!("{what}: the next request"));
}

/// Where a body of `len` bytes is turned away, with the window that puts it there.
fn points(len: usize) -> Vec<(RefuseAt, u32)> {
    let mut points = vec![(RefuseAt::Headers, 0), (RefuseAt::End, 65_535)];
    if len > 16_384 {
        // Refused while the rest waits for a window that never comes.
        points.push((RefuseAt::Bytes(16_384), 16_384));
    }
    points
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_chunked_body_is_resent_with_its_trailers() {
    for how in REFUSALS {
        for len in [200_000, 100, 0] {
            for (at, window) in points(len) {
                let sent = Sent::Chunked { trailers: true };
                resent_once(("POST", sent, len), (how, at, window), false).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_body_read_whole_beforehand_is_resent_whole() {
    // A PUT of at most 64 KiB with a Content-Length is read whole before it goes
    // (`retry::should_keep_body`), and sent again from what was read.
    for how in REFUSALS {
        for len in [65_536, 20_000, 0] {
            for (at, window) in points(len) {
                resent_once(("PUT", Sent::Length, len), (how, at, window), false).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_bodies_on_a_route_that_buffers_requests_are_resent_whole() {
    let bodies = [
        ("POST", Sent::Length, 300_000),
        ("POST", Sent::Chunked { trailers: true }, 200_000),
        ("POST", Sent::Chunked { trailers: false }, 200_000),
        ("PUT", Sent::Length, 20_000),
        ("PUT", Sent::Chunked { trailers: true }, 20_000),
    ];
    for how in REFUSALS {
        for request in bodies {
            for (at, window) in points(request.2) {
                resent_once(request, (how, at, window), true).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_body_too_large_to_keep_on_a_route_that_buffers_requests_gets_a_502() {
    // Request buffering does not apply to HTTP/2 origins (their uploads stream), so a
    // body past what holdfast keeps to send again cannot go again there either.
    for how in REFUSALS {
        for sent in [Sent::Length, Sent::Chunked { trailers: true }] {
            let what = format!("{how:?}, {sent:?}");
            let options =
                RefusingOptions { how, at: RefuseAt::End, times: 1, ..RefusingOptions::default() };
            let origin = RefusingOrigin::start(options).await;
            let proxy = Proxy::start(config(&origin, true)).await;
            let (head, framed) = request("POST", sent, &body("large", KEEP_LIMIT + 1), false);
            let mut client = RawClient::connect(proxy.addr()).await;
            client.send([head, framed].concat()).await;
            let resp = client.response().await;
            assert_eq!(resp.status, 502, "{what}: {}", resp.body_text());
            let text = resp.body_text();
            assert!(text.contains("could not send it again"), "{what}: {text}");
            assert!(text.contains("too large to keep"), "{what}: {text}");
            assert!(origin.processed().is_empty(), "{what}");
            assert_eq!(origin.streams(), 1, "{what}: sent once");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_body_that_waited_for_100_continue_is_resent_whole() {
    for how in REFUSALS {
        for sent in [Sent::Length, Sent::Chunked { trailers: true }] {
            let what = format!("{how:?}, {sent:?}");
            let options = RefusingOptions {
                how,
                at: RefuseAt::Bytes(16_384),
                times: 1,
                window: 16_384,
                ..RefusingOptions::default()
            };
            let origin = RefusingOrigin::start(options).await;
            let proxy = Proxy::start(config(&origin, false)).await;
            let body = body("continued", 100_000);
            let (head, framed) = request("POST", sent, &body, true);
            let mut client = RawClient::connect(proxy.addr()).await;
            client.send(head).await;
            assert_eq!(client.response().await.status, 100, "{what}");
            client.send(framed).await;
            // One 100 Continue, however often the request goes: the final answer next.
            let resp = client.response().await;
            assert_received(&resp, &body, sent.has_trailers(), &what);
            assert_eq!(origin.processed(), ["continued"], "{what}");
            assert_eq!(origin.turned_away(), [16_384], "{what}");
        }
    }
}

/// POSTs `body` framed as `sent` to holdfast at `addr`; the response as it came.
async fn post_incoming(addr: SocketAddr, sent: Sent, body: &[u8]) -> Incoming {
    let tcp = within("connect", TcpStream::connect(addr)).await.expect("connect");
    let (rd, mut wr) = tcp.into_split();
    let (head, framed) = request("POST", sent, body, false);
    let writing = tokio::spawn(async move {
        wr.write_all(&[head, framed].concat()).await.expect("write the request");
        wr
    });
    let mut incoming = Incoming::new(rd);
    incoming.until_ended().await;
    within("the request written", writing).await.expect("the writer");
    incoming
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_body_is_resent_whole_to_an_origin_that_answers_before_reading_it() {
    // The second stream's response head comes at once, before any of the body: what
    // the copy holds, and the rest from the client, go on while the response is
    // relayed, and the origin says in its trailers what arrived.
    for how in REFUSALS {
        for sent in [Sent::Length, Sent::Chunked { trailers: true }] {
            let what = format!("{how:?}, {sent:?}");
            let options = RefusingOptions {
                how,
                at: RefuseAt::Bytes(16_384),
                times: 1,
                window: 16_384,
                answer_first: true,
                ..RefusingOptions::default()
            };
            let origin = RefusingOrigin::start(options).await;
            let proxy = Proxy::start(config(&origin, false)).await;
            let body = body("first", 300_000);
            let incoming = post_incoming(proxy.addr(), sent, &body).await;
            assert_eq!(incoming.status, Some(200), "{what}");
            assert_eq!(incoming.body, b"ok\n", "{what}");
            let len = body.len().to_string();
            assert_eq!(incoming.trailer("x-received-bytes"), Some(len.as_str()), "{what}");
            let fnv = Fnv::of(&body);
            assert_eq!(incoming.trailer("x-received-fnv"), Some(fnv.as_str()), "{what}");
            assert_eq!(origin.processed(), ["first"], "{what}");
            assert_eq!(origin.turned_away(), [16_384], "{what}");
        }
    }
}
