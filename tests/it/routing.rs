//! Routing by host and path prefix to upstream groups, the listener's default group,
//! and 404 for requests nothing matches.

use std::net::SocketAddr;

use holdfast::Config;

use crate::support::{Origin, Proxy, RawClient};

/// `GET path` with `Host: host` on a new connection: the status, the origin that
/// answered (`-` for holdfast's own answers) and the body.
async fn get(proxy: SocketAddr, host: &str, path: &str) -> (u16, String, String) {
    let mut client = RawClient::connect(proxy).await;
    client.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")).await;
    let resp = client.response().await;
    let origin = resp.header("x-origin").unwrap_or("-").to_string();
    (resp.status, origin, resp.body_text())
}

fn parse(text: &str) -> Config {
    Config::parse(text, std::path::Path::new("routes.toml")).expect("a valid config")
}

#[tokio::test]
async fn host_and_path_pick_the_most_specific_route() {
    let (api, wild, assets, default) = (
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
        Origin::start().await,
    );
    let config = parse(&format!(
        r#"
        [[listener]]
        address = "127.0.0.1:0"
        upstream = "default"

        [[route]]
        host = "api.example.com"
        path = "/v1"
        upstream = "api"

        [[route]]
        host = "*.example.com"
        upstream = "wild"

        [[route]]
        path = "/static/"
        upstream = "assets"

        [upstream.api]
        servers = ["{}"]
        [upstream.wild]
        servers = ["{}"]
        [upstream.assets]
        servers = ["{}"]
        [upstream.default]
        servers = ["{}"]
        "#,
        api.addr(),
        wild.addr(),
        assets.addr(),
        default.addr()
    ));
    let proxy = Proxy::start(config).await;
    let cases = [
        ("api.example.com", "/v1/users?page=2", &api),
        ("API.Example.COM:8443", "/v1", &api),
        // Same host, a path the exact host has no route for: the wildcard takes it.
        ("api.example.com", "/v2/users", &wild),
        // A prefix matches whole segments only.
        ("api.example.com", "/v1beta", &wild),
        ("shop.example.com", "/", &wild),
        ("deep.shop.example.com.", "/cart", &wild),
        // The wildcard does not cover the bare domain.
        ("example.com", "/static/app.css", &assets),
        ("example.com", "/static", &default),
        ("other.test", "/", &default),
    ];
    for (host, path, want) in cases {
        let (status, origin, _) = get(proxy.addr(), host, path).await;
        assert_eq!(status, 200, "{host}{path}");
        assert_eq!(origin, want.addr().to_string(), "{host}{path} went to the wrong group");
    }
}

#[tokio::test]
async fn a_request_no_route_matches_gets_404_saying_so_and_the_connection_stays_usable() {
    let app = Origin::start().await;
    let config = parse(&format!(
        r#"
        [admin]
        address = "127.0.0.1:0"

        [[listener]]
        address = "127.0.0.1:0"

        [[route]]
        host = "app.test"
        upstream = "app"

        [upstream.app]
        servers = ["{}"]
        "#,
        app.addr()
    ));
    let proxy = Proxy::start(config).await;
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send("GET /x HTTP/1.1\r\nHost: unknown.test\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 404);
    assert!(resp.body_text().contains("no route for this host and path"), "{}", resp.body_text());
    client.send("GET /x HTTP/1.1\r\nHost: app.test\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 200, "the same connection carries the next request");
    assert_eq!(app.request_count(), 1, "the unrouted request never reached an origin");
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.sum("holdfast_unrouted_requests_total", &[]), 1.0);
}

#[tokio::test]
async fn a_request_without_host_matches_only_routes_for_any_host() {
    let (named, any) = (Origin::start().await, Origin::start().await);
    let config = parse(&format!(
        r#"
        [[listener]]
        address = "127.0.0.1:0"

        [[route]]
        host = "app.test"
        upstream = "named"

        [[route]]
        path = "/"
        upstream = "any"

        [upstream.named]
        servers = ["{}"]
        [upstream.any]
        servers = ["{}"]
        "#,
        named.addr(),
        any.addr()
    ));
    let proxy = Proxy::start(config).await;
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send("GET / HTTP/1.0\r\n\r\n").await;
    let resp = client.response().await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-origin"), Some(any.addr().to_string().as_str()));
}
