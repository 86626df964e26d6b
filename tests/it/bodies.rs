//! Request and response bodies: chunked uploads, and 100 MB streamed each way through the
//! real binary with bounded memory.

use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::{BodyExt, Empty};

use crate::support::{
    config_for, config_to, request, wait_until, within_for, ChildProxy, ClientBody, Fnv, Generated,
    HttpClient, Origin, Proxy, RawOrigin, DEADLINE,
};

const HUNDRED_MB: u64 = 100 * 1024 * 1024;
/// A proxy that buffers a 100 MB body would pass this by far; a streaming one (with its
/// runtime, in a debug build) stays well under it.
const MEMORY_BOUND_BYTES: u64 = 64 * 1024 * 1024;
/// A 100 MB transfer through debug builds on two cores takes seconds, not minutes.
const TRANSFER_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_upload_arrives_complete_and_keeps_the_upstream_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    let big = vec![b'z'; 1024];
    let mut body = Vec::new();
    client.send("POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n").await;
    client.send("5\r\nhello\r\n").await;
    body.extend_from_slice(b"hello");
    client.send("1a;name=value\r\nabcdefghijklmnopqrstuvwxyz\r\n").await;
    body.extend_from_slice(b"abcdefghijklmnopqrstuvwxyz");
    let mut chunk = b"400\r\n".to_vec();
    chunk.extend_from_slice(&big);
    chunk.extend_from_slice(b"\r\n0\r\n\r\n");
    client.send(&chunk).await;
    body.extend_from_slice(&big);
    let resp = client.response().await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-received-bytes"), Some("1055"));
    assert_eq!(resp.header("x-received-fnv"), Some(Fnv::of(&body).as_str()));
    client.send("GET /after HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    assert_eq!(origin.completed(), ["/upload", "/after"]);
    assert_eq!(origin.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_mb_download_streams_through_the_binary_in_bounded_memory() {
    let origin = Origin::start().await;
    let proxy = ChildProxy::quick(origin.addr()).await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    let path = format!("/stream/{HUNDRED_MB}");
    let empty: ClientBody = Empty::new().map_err(Into::into).boxed();
    let resp = client.send(request(Method::GET, &path, empty)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut received = 0u64;
    let mut paused = false;
    within_for("reading 100 MB", TRANSFER_DEADLINE, async {
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("body frame");
            received += frame.data_ref().map_or(0, |d| d.len() as u64);
            // A slow reader at first: a proxy that reads ahead of its client without
            // bound would now pull the rest of the 100 MB into memory.
            if !paused && received >= 1024 * 1024 {
                paused = true;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    })
    .await;
    assert_eq!(received, HUNDRED_MB);
    let peak = proxy.peak_rss_bytes();
    assert!(peak < MEMORY_BOUND_BYTES, "holdfast peak RSS {} MiB", peak / (1024 * 1024));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_mb_upload_streams_through_the_binary_in_bounded_memory() {
    let origin = Origin::start().await;
    let proxy = ChildProxy::quick(origin.addr()).await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    client.set_deadline(TRANSFER_DEADLINE);
    // The origin waits before reading: a proxy that reads its client without bound would
    // now pull the whole upload into memory.
    let body = Generated::sized(HUNDRED_MB).map_err(Into::into).boxed();
    let reply = client.request(Method::POST, "/upload?pause_ms=500", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-received-bytes"), Some(HUNDRED_MB.to_string().as_str()));
    assert_eq!(origin.completed(), ["/upload?pause_ms=500"]);
    let peak = proxy.peak_rss_bytes();
    assert!(peak < MEMORY_BOUND_BYTES, "holdfast peak RSS {} MiB", peak / (1024 * 1024));
    // The binary keeps its upstream connection too.
    let reply = client.get("/after").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(origin.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_upload_with_trailers_arrives_complete_and_keeps_the_connection() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client
        .send(
            "POST /upload-trailers HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\n0\r\nX-Checksum: 1\r\n\r\n",
        )
        .await;
    let resp = client.response().await;
    assert_eq!((resp.status, resp.header("x-received-bytes")), (200, Some("5")));
    client.send("GET /after HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let after = client.response().await;
    assert_eq!((after.status, after.header("x-path")), (200, Some("/after")));
    assert_eq!(origin.completed(), ["/upload-trailers", "/after"]);
    assert_eq!(origin.accepted(), 1, "{:?}", proxy.pool());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_trailers_reach_the_client_and_keep_the_upstream_connection() {
    // hyper sends response trailers only when the request says `TE: trailers`, which is
    // hop-by-hop; this origin sends them regardless, as many servers do.
    let origin = RawOrigin::start(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-checksum\r\n\r\n\
          5\r\nhello\r\n0\r\nx-checksum: 1\r\n\r\n",
    )
    .await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.raw().await;
    for i in 0..2 {
        client.send("GET /with-trailers HTTP/1.1\r\nHost: a\r\n\r\n").await;
        let raw = String::from_utf8(client.read_through(b"\r\n0\r\nx-checksum: 1\r\n\r\n").await)
            .expect("text");
        assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "response {i}: {raw}");
        assert!(raw.contains("Trailer: x-checksum\r\n"), "response {i}: {raw}");
        assert!(raw.contains("\r\n\r\n5\r\nhello\r\n"), "response {i}: {raw}");
    }
    assert_eq!(origin.accepted(), 1, "{:?}", proxy.pool());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_until_close_reaches_an_http11_client_chunked_on_a_connection_that_stays() {
    // An HTTP/1.0-style origin: no length, the close ends the body.
    let origin =
        RawOrigin::start_closing(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close")
            .await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.raw().await;
    for i in 0..2 {
        client.send("GET /old HTTP/1.1\r\nHost: a\r\n\r\n").await;
        let resp = client.response().await;
        assert_eq!((resp.status, resp.body_text().as_str()), (200, "until close"), "{i}");
        assert_eq!(resp.header("transfer-encoding"), Some("chunked"));
    }
    // The body ended with the close, so each request needed a connection of its own.
    assert_eq!(origin.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_body_reaches_an_http10_client_decoded_and_the_connection_then_closes() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client.send("GET /stream/100000 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("transfer-encoding"), None);
    assert_eq!(resp.body, vec![b'x'; 100_000]);
    // The response could end only with the close; the upstream connection stays.
    assert_eq!(origin.accepted(), 1);
    wait_until("the upstream connection is back in the pool", DEADLINE, || proxy.pool().idle == 1)
        .await;
}
