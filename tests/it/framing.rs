//! Request framing: smuggling attempts and oversized or slow request heads are refused
//! before anything reaches the origin.

use std::time::Duration;

use crate::support::{config_for, within_for, Origin, Proxy};

/// Sends `request` on a new connection and waits for the connection to close: the
/// status of the response that came before the close, if one did.
async fn status_before_close(proxy: &Proxy, request: &str) -> Option<u16> {
    let mut client = proxy.raw().await;
    client.send(request).await;
    client.response_then_close().await.map(|resp| resp.status)
}

/// A request on a fresh connection that the origin must see; once it has been answered,
/// anything holdfast forwarded before it has reached the origin too.
async fn barrier(proxy: &Proxy) {
    let mut client = proxy.raw().await;
    client.send("GET /barrier HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_is_refused_in_either_order() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let cl_te = status_before_close(
        &proxy,
        &format!(
            "POST /cl-te HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\
             Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
        ),
    )
    .await;
    let te_cl = status_before_close(
        &proxy,
        &format!(
            "POST /te-cl HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\
             Content-Length: 5\r\n\r\n0\r\n\r\n{smuggled}"
        ),
    )
    .await;
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/barrier"]);
    assert_eq!((cl_te, te_cl), (Some(400), Some(400)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differing_duplicate_content_length_is_refused() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let status = status_before_close(
        &proxy,
        "POST /cl-cl HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    )
    .await;
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/barrier"]);
    assert_eq!(status, Some(400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_chunk_size_never_completes_at_the_origin() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client
        .send(
            "POST /bad-chunk HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
             5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n\
             GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
        )
        .await;
    // Either a 400 and a close, or just a close.
    if let Some(resp) = client.response_then_close().await {
        assert_eq!(resp.status, 400, "{}", resp.body_text());
    }
    barrier(&proxy).await;
    let completed = origin.completed();
    assert_eq!(completed, ["/barrier"], "origin read these requests in full");
    assert!(!origin.paths().contains(&"/smuggled".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_request_headers_get_431() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.client_limits.max_headers = 20;
    let proxy = Proxy::start(config).await;
    let headers = |n: usize| (0..n).map(|i| format!("X-H{i}: v\r\n")).collect::<String>();
    // Under the limit: forwarded.
    let mut client = proxy.raw().await;
    client.send(format!("GET /few HTTP/1.1\r\nHost: a\r\n{}\r\n", headers(10))).await;
    assert_eq!(client.response().await.status, 200);
    // Over it: refused.
    let status = status_before_close(
        &proxy,
        &format!("GET /many HTTP/1.1\r\nHost: a\r\n{}\r\n", headers(30)),
    )
    .await;
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/few", "/barrier"]);
    assert_eq!(status, Some(431));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_head_over_max_header_bytes_gets_431() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.client_limits.max_header_bytes = 4096;
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client
        .send(format!("GET /small HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n", "b".repeat(2000)))
        .await;
    assert_eq!(client.response().await.status, 200);
    let status = status_before_close(
        &proxy,
        &format!("GET /large HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n", "b".repeat(8000)),
    )
    .await;
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/small", "/barrier"]);
    assert_eq!(status, Some(431));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_request_head_is_closed_after_the_client_header_timeout() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.timeouts.client_header = Duration::from_millis(300);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client.send("GET /never-finished HTTP/1.1\r\nHost: a\r\n").await;
    // Far below the 10 s default, so only the configured timeout can close it in time.
    let resp = within_for("the proxy closes the connection", Duration::from_secs(3), async {
        client.response_then_close().await
    })
    .await;
    if let Some(resp) = resp {
        assert_eq!(resp.status, 408, "{}", resp.body_text());
    }
    assert_eq!(origin.request_count(), 0);
}
