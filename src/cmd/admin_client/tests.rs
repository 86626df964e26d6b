//! The admin client against real sockets on 127.0.0.1:0. A raw responder writes exact
//! response bytes, so each framing (Content-Length, chunked, until close) and each way a
//! response can break off is pinned byte for byte.

use std::net::TcpListener as StdListener;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::*;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts one connection, reads a request head, writes `response` and closes. The task
/// returns the request head as received.
async fn respond_once(response: &'static [u8]) -> (AdminClient, JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        // Each round reads at least one byte or fails the test.
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.expect("read the request");
            assert!(n > 0, "the client closed inside its request head");
            head.extend_from_slice(&buf[..n]);
        }
        stream.write_all(response).await.expect("write the response");
        String::from_utf8(head).expect("a text request head")
    });
    (AdminClient::new(addr, TIMEOUT), task)
}

#[tokio::test]
async fn get_reads_a_content_length_body_on_a_connection_of_its_own() {
    let (admin, server) = respond_once(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\na 1\n").await;
    let response = admin.get("/metrics").await.expect("a response");
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.body, "a 1\n");
    let head = server.await.expect("served");
    assert!(head.starts_with("GET /metrics HTTP/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("host: {}\r\n", admin.addr())), "{head}");
    assert!(head.contains("connection: close\r\n"), "{head}");
    assert!(!head.contains("content-length"), "a GET has no body: {head}");
}

#[tokio::test]
async fn get_decodes_a_chunked_body_with_extensions_and_trailers() {
    let (admin, _server) = respond_once(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
          4\r\na 1\n\r\n5;ext=1\r\nb 22\n\r\n0\r\nx-trailer: 1\r\n\r\n",
    )
    .await;
    let response = admin.get("/metrics").await.expect("a response");
    assert_eq!(response.body, "a 1\nb 22\n");
}

#[tokio::test]
async fn get_reads_a_body_that_ends_with_the_connection() {
    let (admin, _server) = respond_once(b"HTTP/1.1 200 OK\r\n\r\nc 3\n").await;
    assert_eq!(admin.get("/metrics").await.expect("a response").body, "c 3\n");
}

#[tokio::test]
async fn post_sends_an_empty_body_and_returns_any_status_with_its_body() {
    let (admin, server) = respond_once(
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 16\r\n\r\nreload rejected\n",
    )
    .await;
    let response = admin.post("/reload").await.expect("a response, even a 500");
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(response.text(), "reload rejected\n");
    let head = server.await.expect("served");
    assert!(head.starts_with("POST /reload HTTP/1.1\r\n"), "{head}");
    assert!(head.contains("content-length: 0\r\n"), "{head}");
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_naming_the_request_and_address() {
    let (admin, _server) = respond_once(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nab").await;
    let err = admin.get("/metrics").await.expect_err("two of ten bytes");
    assert!(matches!(err.kind, AdminErrorKind::Http(_)), "{err}");
    let expected = format!("GET /metrics to the admin listener at {} failed: ", admin.addr());
    assert!(err.to_string().starts_with(&expected), "{err}");

    let (admin, _server) =
        respond_once(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\nab").await;
    let err = admin.get("/metrics").await.expect_err("a cut chunk");
    assert!(matches!(err.kind, AdminErrorKind::Http(_)), "{err}");
}

#[tokio::test]
async fn a_response_that_is_not_http_is_an_error() {
    let (admin, _server) = respond_once(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").await;
    let err = admin.get("/metrics").await.expect_err("not HTTP");
    assert!(matches!(err.kind, AdminErrorKind::Http(_)), "{err}");
}

#[tokio::test]
async fn refused_connection_names_the_address_and_says_what_to_check() {
    let addr = StdListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port");
    // The listener is gone: connecting is refused.
    let err = AdminClient::new(addr, TIMEOUT).post("/reload").await.expect_err("refused");
    assert!(matches!(err.kind, AdminErrorKind::Refused), "{err}");
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("POST /reload to the admin listener at {addr} failed: ")),
        "{message}"
    );
    assert!(message.contains("holdfast may not be running"), "{message}");
    assert!(message.contains("--admin ADDR"), "{message}");
}

#[tokio::test]
async fn a_listener_that_never_answers_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let admin = AdminClient::new(listener.local_addr().expect("addr"), Duration::from_millis(100));
    let silent = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        // Holds the connection open without a byte until the test ends.
        std::future::pending::<()>().await;
        drop(stream);
    });
    let err = admin.get("/metrics").await.expect_err("no answer");
    assert!(matches!(err.kind, AdminErrorKind::ResponseTimeout(_)), "{err}");
    assert!(err.to_string().ends_with("no complete response within 100ms"), "{err}");
    silent.abort();
}
