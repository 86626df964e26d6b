//! Header rewriting: hop-by-hop headers removed both ways, X-Forwarded-* added, Host kept.

use crate::support::{config_for, Origin, Proxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_request_headers_are_not_forwarded() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client
        .send(
            "GET /hop-in HTTP/1.1\r\n\
             Host: example.test\r\n\
             Connection: close, X-Secret\r\n\
             X-Secret: s3cret\r\n\
             Keep-Alive: timeout=5\r\n\
             TE: trailers\r\n\
             Proxy-Connection: keep-alive\r\n\
             Upgrade: websocket\r\n\
             X-Kept: yes\r\n\r\n",
        )
        .await;
    assert_eq!(client.response().await.status, 200);
    let requests = origin.requests();
    assert_eq!(requests.len(), 1);
    let got = &requests[0];
    for name in ["connection", "x-secret", "keep-alive", "te", "proxy-connection", "upgrade"] {
        assert!(!got.headers.contains_key(name), "origin received {name}: {:?}", got.headers);
    }
    assert_eq!(got.header("x-kept"), Some("yes"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_are_added_and_host_is_kept() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client
        .send(
            "GET /fwd HTTP/1.1\r\nHost: example.test:8080\r\n\
             X-Forwarded-For: 10.0.0.1\r\n\r\n",
        )
        .await;
    assert_eq!(client.response().await.status, 200);
    client.send("GET /fwd2 HTTP/1.1\r\nHost: second.test\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    let requests = origin.requests();
    let (first, second) = (&requests[0], &requests[1]);
    assert_eq!(first.header("host"), Some("example.test:8080"));
    assert_eq!(first.header("x-forwarded-for"), Some("10.0.0.1, 127.0.0.1"));
    assert_eq!(first.header("x-forwarded-proto"), Some("http"));
    assert_eq!(first.header("x-forwarded-host"), Some("example.test:8080"));
    assert_eq!(second.header("host"), Some("second.test"));
    assert_eq!(second.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(second.header("x-forwarded-host"), Some("second.test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_response_headers_are_not_passed_to_the_client() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    client.send("GET /hop HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-end"), Some("1"), "headers: {:?}", resp.headers);
    assert_eq!(resp.header("x-hop"), None, "headers: {:?}", resp.headers);
    assert_eq!(resp.header("keep-alive"), None, "headers: {:?}", resp.headers);
    assert!(
        !resp.header("connection").is_some_and(|v| v.to_ascii_lowercase().contains("x-hop")),
        "headers: {:?}",
        resp.headers
    );
    // Stripping them does not cost the connection either side.
    client.send("GET /again HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    assert_eq!(origin.accepted(), 1);
}
