//! The origin over real loopback sockets, with a raw client: connection counts, accept
//! order, keep-alive, stop, kill and the error hook.

use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

const DEADLINE: Duration = Duration::from_secs(5);

/// An origin whose every response body is the connection's number in accept order.
fn numbering(options: Options) -> Origin {
    let listener = bind_loopback().expect("bind loopback");
    Origin::serve(listener, Arc::default(), options, |accepted: Accepted| {
        service_fn(move |_req| async move {
            let body = Full::new(Bytes::from(format!("{}\n", accepted.number)));
            Ok::<_, Infallible>(Response::new(body))
        })
    })
    .expect("serve")
}

/// Sends `GET /` on `stream` and returns the body of the response (a line).
async fn get(stream: &mut TcpStream) -> String {
    stream.write_all(b"GET / HTTP/1.1\r\nHost: origin\r\n\r\n").await.expect("write");
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    // Each round reads at least one byte or fails the test.
    while !(response.ends_with(b"\n") && response.windows(4).any(|w| w == b"\r\n\r\n")) {
        let n = tokio::time::timeout(DEADLINE, stream.read(&mut buf))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(n > 0, "the origin closed before answering");
        response.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(response).expect("text");
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    text.split_once("\r\n\r\n").expect("a head").1.to_string()
}

async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    // Bounded by DEADLINE.
    while !condition() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads (and drops) what arrives until the origin closes the connection; true if it
/// did within the deadline.
async fn closed_by_origin(stream: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    tokio::time::timeout(DEADLINE, stream.read_to_end(&mut rest)).await.is_ok()
}

#[tokio::test]
async fn keep_alive_requests_share_a_connection_counted_once() {
    let origin = numbering(Options::default());
    let mut stream = TcpStream::connect(origin.addr()).await.expect("connect");
    assert_eq!(get(&mut stream).await, "1\n");
    assert_eq!(get(&mut stream).await, "1\n");
    assert_eq!((origin.connections().accepted(), origin.connections().open()), (1, 1));
    drop(stream);
    wait_until("the connection is counted closed", || origin.connections().closed() == 1).await;
    assert_eq!(origin.connections().open(), 0);
}

#[tokio::test]
async fn connections_are_numbered_in_accept_order() {
    let origin = numbering(Options::default());
    for expected in ["1\n", "2\n", "3\n"] {
        let mut stream = TcpStream::connect(origin.addr()).await.expect("connect");
        assert_eq!(get(&mut stream).await, expected);
    }
    assert_eq!(origin.connections().accepted(), 3);
}

#[tokio::test]
async fn stop_ends_accepting_and_open_connections_go_on() {
    let origin = numbering(Options { killable: true, ..Options::default() });
    let mut stream = TcpStream::connect(origin.addr()).await.expect("connect");
    assert_eq!(get(&mut stream).await, "1\n");
    origin.stop();
    let addr = origin.addr();
    drop(origin);
    assert_eq!(get(&mut stream).await, "1\n", "a stopped or dropped origin keeps serving it");
    let refused = || std::net::TcpStream::connect(addr).is_err();
    wait_until("connecting is refused", refused).await;
}

#[tokio::test]
async fn kill_drops_every_open_connection() {
    let origin = numbering(Options { killable: true, ..Options::default() });
    let mut first = TcpStream::connect(origin.addr()).await.expect("connect");
    let mut second = TcpStream::connect(origin.addr()).await.expect("connect");
    assert_eq!(get(&mut first).await, "1\n");
    assert_eq!(get(&mut second).await, "2\n");
    origin.kill();
    assert!(closed_by_origin(&mut first).await && closed_by_origin(&mut second).await);
    wait_until("both are counted closed", || origin.connections().closed() == 2).await;
}

#[tokio::test]
async fn idle_close_closes_an_idle_connection() {
    let origin =
        numbering(Options { idle_close: Some(Duration::from_millis(100)), ..Options::default() });
    let mut stream = TcpStream::connect(origin.addr()).await.expect("connect");
    assert_eq!(get(&mut stream).await, "1\n");
    assert!(closed_by_origin(&mut stream).await, "still open after the idle timeout");
}

#[tokio::test]
async fn on_error_sees_what_hyper_could_not_parse() {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&errors);
    let on_error: ErrorHook =
        Arc::new(move |e: &hyper::Error| seen.lock().expect("not poisoned").push(e.is_parse()));
    let origin = numbering(Options { on_error: Some(on_error), ..Options::default() });
    let mut stream = TcpStream::connect(origin.addr()).await.expect("connect");
    stream.write_all(b"GET / HTTP/1.1\r\nHost origin\r\n\r\n").await.expect("write");
    assert!(closed_by_origin(&mut stream).await);
    wait_until("the error is reported", || !errors.lock().expect("not poisoned").is_empty()).await;
    assert_eq!(*errors.lock().expect("not poisoned"), [true]);
}
