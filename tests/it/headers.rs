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

/// Sends a request with forwarding headers a client made up, through holdfast that
/// trusts `trusted_proxies`, and returns the request the origin got.
async fn forwarded_through(trusted_proxies: &[&str]) -> crate::support::origin::RecordedRequest {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.trusted_proxies =
        trusted_proxies.iter().map(|n| holdfast::Cidr::parse(n).unwrap()).collect();
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client
        .send(
            "GET /fwd HTTP/1.1\r\nHost: example.test:8080\r\n\
             X-Forwarded-For: 203.0.113.9, 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\
             X-Forwarded-Host: forged.test\r\nForwarded: for=198.51.100.1\r\n\
             X-Real-IP: 6.6.6.6\r\n\r\n",
        )
        .await;
    assert_eq!(client.response().await.status, 200);
    origin.requests().remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_from_an_untrusted_peer_are_replaced() {
    // Regression: X-Forwarded-For was appended to, so its first entry was the client's to choose.
    let got = forwarded_through(&[]).await;
    assert_eq!(got.header("host"), Some("example.test:8080"));
    assert_eq!(got.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(got.header("x-forwarded-proto"), Some("http"));
    assert_eq!(got.header("x-forwarded-host"), Some("example.test:8080"));
    assert_eq!(
        got.header("forwarded"),
        Some("for=127.0.0.1;host=\"example.test:8080\";proto=http")
    );
    assert_eq!(got.header("x-real-ip"), Some("127.0.0.1"));
    for name in
        ["x-forwarded-for", "forwarded", "x-real-ip", "x-forwarded-proto", "x-forwarded-host"]
    {
        assert_eq!(got.headers.get_all(name).iter().count(), 1, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_from_a_trusted_proxy_are_extended() {
    let got = forwarded_through(&["127.0.0.0/8", "10.0.0.0/8"]).await;
    assert_eq!(got.header("x-forwarded-for"), Some("203.0.113.9, 10.0.0.1, 127.0.0.1"));
    assert_eq!(got.header("x-forwarded-proto"), Some("https"));
    assert_eq!(got.header("x-forwarded-host"), Some("forged.test"));
    assert_eq!(
        got.header("forwarded"),
        Some("for=198.51.100.1, for=127.0.0.1;host=\"example.test:8080\";proto=http")
    );
    // The rightmost address that is not a trusted proxy, as nginx's real_ip finds it.
    assert_eq!(got.header("x-real-ip"), Some("203.0.113.9"));
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
