//! HTTP/2 on both sides: clients over h2c (prior knowledge) and TLS (ALPN `h2`) with
//! the `h2` crate, curl, nghttp and h2load; many streams on one client connection to an
//! HTTP/1.1 origin over pooled connections; HTTP/2 origins (h2c and TLS) multiplexed
//! within their SETTINGS_MAX_CONCURRENT_STREAMS, their GOAWAY and REFUSED_STREAM
//! retried; trailers; the config keys; and GOAWAY to clients on SIGTERM.
//!
//! Connection counts are taken at the origins, which count what they accept.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use holdfast::Config;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;

use crate::support::http2::{
    encode_frame, frame, h2_config, have_tool_with, hpack_indexed_name, H2Client, H2Origin,
    H2OriginOptions, RawEnd, RawH2,
};
use crate::support::refusing::{RefusingOptions, RefusingOrigin};
use crate::support::tls::{
    have_tool, run_tool, tls_connect, toml_path, Pki, TlsOrigin, TlsOriginOptions,
};
use crate::support::{
    wait_refused, wait_until, within, ChildProxy, ClientBody, ClosedPort, Fnv, HttpClient, Origin,
    Proxy, RawClient, ReservedPort, TempDir, DEADLINE,
};

/// An h2c listener in front of the HTTP/1.1 `origin`.
pub fn h2c_to_http1(origin: &Origin, rest: &str) -> Config {
    h2_config("h2c = true", &[origin.addr().to_string()], "", rest)
}

/// An h2c listener in front of the h2c `origin`, named by an `h2c://` URL.
fn h2c_to_h2c(origin: &H2Origin) -> Config {
    h2_config("h2c = true", &[format!("h2c://{}", origin.addr())], "", "")
}

/// Asserts every reply is a 200 carrying `x-path` equal to `path(i)`.
fn assert_each_own(
    replies: Vec<Result<crate::support::http2::H2Reply, h2::Error>>,
    path: impl Fn(usize) -> String,
) {
    for (i, reply) in replies.into_iter().enumerate() {
        let want = path(i);
        let reply = reply.unwrap_or_else(|e| panic!("request {want}: {e}"));
        assert_eq!(reply.status, StatusCode::OK, "{want}: {}", reply.text());
        assert_eq!(reply.header("x-path"), Some(want.as_str()), "a response for another request");
    }
}

// Clients: curl, nghttp, h2load.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_negotiates_h2_over_tls_and_http1_still_works() {
    if !have_tool_with("curl", "HTTP2") {
        return;
    }
    let pki = Pki::new("h2-curl-tls");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let upstream = origin.addr().to_string();
    let (cert, key) = (files.cert.display().to_string(), files.key.display().to_string());
    let proxy = ChildProxy::launch(|listen| {
        let args = ["--listen", &listen.to_string(), "--upstream", &upstream, "--threads", "2"];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["--tls-cert".into(), cert.clone(), "--tls-key".into(), key.clone()]);
        args
    })
    .await;
    let ca = pki.ca_file.display().to_string();
    let url = format!("https://localhost:{}/over/tls", proxy.addr().port());
    let resolve = format!("localhost:{}:127.0.0.1", proxy.addr().port());
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let args = [
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            &ca,
            "--resolve",
            &resolve,
            flag,
            "-w",
            "\n%{http_code} %{http_version}",
            &url,
        ];
        let out = run_tool("curl", &args, b"").await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "curl {flag}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.ends_with(&format!("\n200 {version}")), "curl {flag}: {text}");
        // The echo route lists the request headers as the origin got them.
        assert!(text.contains("host: localhost:"), "curl {flag}: {text}");
    }
    assert_eq!(origin.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_prior_knowledge_and_http1_share_an_h2c_port() {
    if !have_tool_with("curl", "HTTP2") {
        return;
    }
    let origin = Origin::start().await;
    let upstream = origin.addr().to_string();
    let proxy = ChildProxy::launch(|listen| {
        ["--listen", &listen.to_string(), "--upstream", &upstream, "--h2c", "--threads", "2"]
            .iter()
            .map(|a| a.to_string())
            .collect()
    })
    .await;
    let url = format!("http://{}/h2c/port", proxy.addr());
    for (flag, version) in [("--http2-prior-knowledge", "2"), ("--http1.1", "1.1")] {
        let args = ["-sS", "--max-time", "10", flag, "-w", "\n%{http_code} %{http_version}", &url];
        let out = run_tool("curl", &args, b"").await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "curl {flag}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.ends_with(&format!("\n200 {version}")), "curl {flag}: {text}");
    }
    // A plain HTTP/1.1 client, keep-alive, on the same port.
    let mut client = HttpClient::connect(proxy.addr()).await;
    for i in 0..3 {
        let reply = client.get(&format!("/h1/{i}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.header("x-path"), Some(format!("/h1/{i}").as_str()));
    }
    assert_eq!(origin.request_count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nghttp_fetches_several_uris_on_one_connection() {
    if !have_tool("nghttp") {
        return;
    }
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let urls: Vec<String> =
        (1..=3).map(|i| format!("http://{}/nghttp/{i}", proxy.addr())).collect();
    let mut args = vec!["-nv", "-t", "10"];
    args.extend(urls.iter().map(String::as_str));
    let out = run_tool("nghttp", &args, b"").await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "nghttp: {text}{}", String::from_utf8_lossy(&out.stderr));
    // Three streams, each answered 200, on one connection: one SETTINGS from holdfast.
    let statuses = text.lines().filter(|l| l.contains(":status: 200")).count();
    assert_eq!(statuses, 3, "{text}");
    let mut paths = origin.paths();
    paths.sort();
    assert_eq!(paths, ["/nghttp/1", "/nghttp/2", "/nghttp/3"]);
    let settings = text
        .lines()
        .filter(|l| l.contains("recv SETTINGS frame") && !l.contains("flags=0x01"))
        .count();
    assert_eq!(settings, 1, "{text}");
}

/// Reads h2load's `requests:` line: (done, succeeded, failed, errored).
fn h2load_counts(report: &str) -> (u64, u64, u64, u64) {
    let line = report
        .lines()
        .find(|l| l.starts_with("requests:"))
        .unwrap_or_else(|| panic!("no requests line in:\n{report}"));
    let count = |word: &str| -> u64 {
        let words: Vec<&str> = line.split([',', ':']).collect();
        let part = words.iter().find(|p| p.trim().ends_with(word)).expect("a count");
        part.split_whitespace().next().expect("a number").parse().expect("a number")
    };
    (count("done"), count("succeeded"), count("failed"), count("errored"))
}

/// Runs h2load for 2000 requests, 4 connections of 16 streams, through `proxy`; checks
/// that it ran and that every request succeeded, and returns its report.
async fn h2load_2000_without_failures(proxy: &Proxy) -> String {
    let url = format!("http://{}/h2load", proxy.addr());
    let out =
        run_tool("h2load", &["-n", "2000", "-c", "4", "-m", "16", "-T", "10", &url], b"").await;
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "h2load: {report}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(h2load_counts(&report), (2000, 2000, 0, 0), "{report}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2load_without_failures_over_few_upstream_connections() {
    if !have_tool("h2load") {
        return;
    }
    // To an HTTP/1.1 origin: at most one upstream connection per stream in flight
    // (4 connections x 16 streams).
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let report = h2load_2000_without_failures(&proxy).await;
    assert!(report.contains("2000 2xx"), "{report}");
    assert_eq!(origin.request_count(), 2000);
    // At most one open connection per stream in flight. A few more are opened over the
    // run: when the streams in flight dip below the recent peak, the pool closes idle
    // connections above demand (`above_demand`), and opens them again as the streams
    // come back (measured at 64-71 opened, up to 7 closed, on a 2-core machine).
    // Without reuse it would be one per request, 2000.
    let accepted = origin.accepted();
    assert!(accepted <= 64 + 16, "{accepted} upstream connections for 64 streams");
    let pool = proxy.pool();
    assert!(pool.idle + pool.active <= 64, "more connections kept than streams: {pool:?}");

    // To an h2c origin with no stream limit: the streams share a connection or two.
    let h2_origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c_to_h2c(&h2_origin)).await;
    h2load_2000_without_failures(&proxy).await;
    wait_until("the origin answered every stream", DEADLINE, || h2_origin.answered() == 2000).await;
    assert!(h2_origin.accepted() <= 4, "{} connections to the h2c origin", h2_origin.accepted());
}

// HTTP/2 clients to an HTTP/1.1 origin.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_streams_on_one_connection_each_get_their_own_response() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    // Four waves of 64 streams at once; each stays at the origin a little, so they
    // overlap there.
    for wave in 0..4 {
        let path = |i: usize| format!("/echo/{wave}/{i}?pause_ms=20");
        assert_each_own(client.concurrent(64, path).await, path);
    }
    assert_eq!(origin.request_count(), 256);
    let accepted = origin.accepted();
    assert!(accepted <= 64, "{accepted} upstream connections for 64 streams at a time");
    // Sequential streams after that reuse the pooled connections.
    for i in 0..32 {
        let reply = client.get(&format!("/after/{i}")).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    assert_eq!(origin.accepted(), accepted, "sequential streams opened connections");
    // The origin gets HTTP/1.1 requests with the stream's :authority as Host.
    let seen = origin.requests().pop().expect("a request");
    assert_eq!(seen.version, Version::HTTP_11);
    assert_eq!(seen.header("host"), Some("holdfast.test"), "{:?}", seen.headers);
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"), "{:?}", seen.headers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megabyte_bodies_both_ways_over_h2_to_an_http1_origin() {
    const MB: usize = 1 << 20;
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    let upload: Vec<u8> = (0..MB).map(|i| (i % 251) as u8).collect();
    let reply = client
        .request(Method::POST, "/upload", &[], Bytes::from(upload.clone()))
        .await
        .expect("POST 1 MB");
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-received-bytes"), Some(MB.to_string().as_str()));
    assert_eq!(reply.header("x-received-fnv"), Some(Fnv::of(&upload).as_str()));
    // With a Content-Length too.
    let len = MB.to_string();
    let reply = client
        .request(
            Method::PUT,
            "/upload-sized",
            &[("content-length", &len)],
            Bytes::from(upload.clone()),
        )
        .await
        .expect("PUT 1 MB");
    assert_eq!(reply.header("x-received-fnv"), Some(Fnv::of(&upload).as_str()));
    // Downloads with Content-Length and chunked from the origin.
    for path in [format!("/bytes/{MB}"), format!("/stream/{MB}")] {
        let reply = client.get(&path).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body.len(), MB, "{path}");
        assert!(reply.body.iter().all(|b| *b == b'x'), "{path}");
    }
    // Two at once on the one connection, each its own.
    let (a, b) = tokio::join!(client.get("/bytes/700000"), client.get("/bytes/300000"));
    assert_eq!((a.body.len(), b.body.len()), (700_000, 300_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_response_bodies_reach_h2_clients() {
    // Responses without a body byte: a 200 with Content-Length: 0, an empty chunked
    // body, a 204, a HEAD; from an HTTP/1.1 origin and from an h2c one.
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    for path in ["/bytes/0", "/stream/0", "/status/200", "/status/204"] {
        let reply = client.request(Method::GET, path, &[], Bytes::new()).await;
        let reply = reply.unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(reply.status.is_success(), "{path}: {}", reply.status);
        assert!(reply.body.is_empty(), "{path}");
    }
    let reply = client.request(Method::HEAD, "/bytes/100", &[], Bytes::new()).await.expect("HEAD");
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.is_empty());
    let raw =
        crate::support::RawOrigin::start(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
    let proxy = Proxy::start(h2_config("h2c = true", &[raw.addr().to_string()], "", "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    assert_eq!(client.get("/raw-empty").await.status, StatusCode::OK);
    let h2_origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c_to_h2c(&h2_origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let reply = client.get("/bytes/0").await;
    assert_eq!((reply.status, reply.body.len()), (StatusCode::OK, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_get_413_502_and_504_as_http1_requests_do() {
    let origin = Origin::start().await;
    let rest = "[limits]\nclient_max_body = \"1k\"\n\n[timeouts]\nresponse_header = \"300ms\"\n";
    let proxy = Proxy::start(h2c_to_http1(&origin, rest)).await;
    let client = H2Client::connect(proxy.addr()).await;
    // Over client_max_body, with and without a Content-Length.
    let big = Bytes::from(vec![b'b'; 2048]);
    let reply = client
        .request(Method::POST, "/too-big", &[("content-length", "2048")], big.clone())
        .await
        .expect("a response");
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    let reply = client.request(Method::POST, "/too-big", &[], big).await.expect("a response");
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(origin.completed().iter().all(|p| p != "/too-big"), "{:?}", origin.completed());
    // The early 413 ends the stream; a reset that stops the upload after it says
    // NO_ERROR (RFC 9113, 8.1), so the client keeps the response.
    let mut raw = RawH2::connect(proxy.addr()).await;
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    hpack_indexed_name(4, b"/too-big-raw", &mut block); // :path
    hpack_indexed_name(1, b"holdfast.test", &mut block); // :authority
    hpack_indexed_name(28, b"4096", &mut block); // content-length
    raw.send(&encode_frame(frame::HEADERS, frame::END_HEADERS, 1, &block)).await.expect("send");
    let head = raw.until(DEADLINE, |f| f.kind == frame::HEADERS && f.stream == 1).await;
    assert_eq!(head.expect("a response").status(), Some(413));
    let reset = raw.until(DEADLINE, |f| f.kind == frame::RST_STREAM && f.stream == 1).await;
    let reset = reset.expect("the upload the 413 refused is stopped with RST_STREAM");
    assert_eq!(reset.reset_code(), Some(0), "the 413's stream was reset with an error");
    // A slow origin: 504 naming the backend.
    let reply = client.get("/slow/3000").await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(reply.text().contains(&origin.addr().to_string()), "{}", reply.text());
    // The connection still serves.
    assert_eq!(client.get("/fine").await.status, StatusCode::OK);

    // A backend that refuses connections: 502 naming it.
    let port = ClosedPort::new();
    let proxy = Proxy::start(h2_config("h2c = true", &[port.addr().to_string()], "", "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    let reply = client.get("/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert!(reply.text().contains(&port.addr().to_string()), "{}", reply.text());
    assert_eq!(client.get("/again").await.status, StatusCode::BAD_GATEWAY);
}

// HTTP/2 origins.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_goaway_after_five_streams_loses_no_request() {
    let options = H2OriginOptions { goaway_after: Some(5), ..H2OriginOptions::default() };
    let origin = H2Origin::start_with(options).await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    // 200 requests, ten at a time, every other one a POST (retried all the same:
    // a refused stream never reached the origin).
    for batch in 0..20 {
        let tasks: Vec<_> = (0..10)
            .map(|i| {
                let client = client.clone();
                let n = batch * 10 + i;
                tokio::spawn(async move {
                    let path = format!("/goaway/{n}");
                    let (method, body) = if n % 2 == 0 {
                        (Method::GET, Bytes::new())
                    } else {
                        (Method::POST, Bytes::from(format!("body {n}")))
                    };
                    (path.clone(), client.request(method, &path, &[], body).await)
                })
            })
            .collect();
        for task in tasks {
            let (path, reply) = task.await.expect("request task");
            let reply = reply.unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text());
            assert_eq!(reply.header("x-path"), Some(path.as_str()));
        }
    }
    // Each request was answered exactly once: nothing the origin took was sent again.
    wait_until("the origin answered 200 streams", DEADLINE, || origin.answered() == 200).await;
    let requests = origin.requests();
    assert_eq!(requests.len(), 200, "requests sent twice");
    let posts: Vec<_> = requests.iter().filter(|r| r.method == Method::POST).collect();
    assert_eq!(posts.len(), 100);
    assert!(posts.iter().all(|r| r
        .path
        .trim_start_matches("/goaway/")
        .parse::<u32>()
        .is_ok_and(|n| n % 2 == 1)));
    // The origin did send GOAWAY (holdfast may learn to carry fewer streams per
    // connection, so how often is its business).
    assert!(origin.goaways() >= 1, "the origin never went away");
    assert!(origin.accepted() >= 2, "{} connections for 200 streams", origin.accepted());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_max_concurrent_streams_bounds_connections() {
    let options = H2OriginOptions {
        max_concurrent_streams: Some(10),
        delay: Some(Duration::from_millis(100)),
        ..H2OriginOptions::default()
    };
    let origin = H2Origin::start_with(options).await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let path = |i: usize| format!("/concurrent/{i}");
    assert_each_own(client.concurrent(100, path).await, path);
    wait_until("the origin answered 100 streams", DEADLINE, || origin.answered() == 100).await;
    assert_eq!(origin.request_count(), 100);
    // ceil(100 / 10): a new connection only when the open ones are full.
    assert!(origin.accepted() <= 10, "{} connections at 10 streams each", origin.accepted());
    assert!(origin.peak_streams_per_connection() <= 10);
    assert!(origin.errors().is_empty(), "{:?}", origin.errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_clients_through_to_an_h2c_origin_share_one_connection() {
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2_config("", &[format!("h2c://{}", origin.addr())], "", "")).await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    let reply = client.get("/first").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.text(), "h2 origin: /first\n");
    let body = vec![b'u'; 100_000];
    let reply = client.request(Method::POST, "/post", body_of(&body)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("x-received-bytes"), Some("100000"));
    assert_eq!(reply.header("x-received-fnv"), Some(Fnv::of(&body).as_str()));
    // Connection-specific headers of HTTP/1.1 never reach an HTTP/2 origin (which
    // would refuse the stream): a chunked upload with Connection and Keep-Alive.
    let mut raw = RawClient::connect(proxy.addr()).await;
    raw.send(
        "POST /chunked HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, x-hop\r\nX-Hop: 1\r\n\
         Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    .await;
    let resp = raw.response().await;
    assert_eq!(resp.status, 200, "{}", resp.body_text());
    assert_eq!(resp.header("x-received-bytes"), Some("5"));
    let seen = origin.requests().pop().expect("a request");
    assert!(seen.headers.get("x-hop").is_none(), "{:?}", seen.headers);
    // A declared length goes on as holdfast writes it, a chunked body without one.
    let post = origin.requests().into_iter().find(|r| r.path == "/post").expect("the POST");
    assert_eq!(post.headers.get("content-length").map(|v| v.as_bytes()), Some(&b"100000"[..]));
    assert!(seen.headers.get("content-length").is_none(), "{:?}", seen.headers);
    // Twenty HTTP/1.1 clients at once: streams on the one origin connection.
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let addr = proxy.addr();
            tokio::spawn(async move {
                let mut client = HttpClient::connect(addr).await;
                client.get(&format!("/many/{i}")).await
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.expect("client task").status, StatusCode::OK);
    }
    assert_eq!(origin.accepted(), 1, "the h2c origin got more than one connection");
    let requests = origin.requests();
    assert_eq!(requests.len(), 23);
    assert!(requests.iter().all(|r| r.conn == 1));
}

/// A body for [`HttpClient::request`] holding `bytes`.
fn body_of(bytes: &[u8]) -> ClientBody {
    Full::new(Bytes::copy_from_slice(bytes)).map_err(Into::into).boxed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_stream_is_retried_even_for_post() {
    let options = H2OriginOptions { refuse_first: 1, ..H2OriginOptions::default() };
    let origin = H2Origin::start_with(options).await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let reply = client
        .request(Method::POST, "/refused", &[], Bytes::from_static(b"payload"))
        .await
        .expect("a response");
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-received-bytes"), Some("7"));
    assert_eq!((origin.refused(), origin.streams(), origin.request_count()), (1, 2, 1));
    // And a POST without a body, refused in turn.
    let options = H2OriginOptions { refuse_first: 1, ..H2OriginOptions::default() };
    let origin = H2Origin::start_with(options).await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let reply =
        client.request(Method::POST, "/refused", &[], Bytes::new()).await.expect("a response");
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!((origin.refused(), origin.streams(), origin.request_count()), (1, 2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_and_te_pass_through_both_ways() {
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let mut trailers = HeaderMap::new();
    trailers.insert("x-request-trailer", HeaderValue::from_static("sent"));
    let reply = client
        .request_for(
            DEADLINE,
            Method::POST,
            "/trailers",
            &[("te", "trailers"), ("content-type", "application/grpc")],
            Bytes::from_static(b"\0\0\0\0\x03abc"),
            Some(trailers),
        )
        .await
        .expect("a response");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("x-te"), Some("trailers"));
    assert_eq!(reply.header("x-received-bytes"), Some("8"));
    assert_eq!(reply.header("x-received-trailers"), Some("x-request-trailer"));
    assert_eq!(reply.text(), "with trailers\n");
    let trailers = reply.trailers.expect("response trailers");
    assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
    assert_eq!(trailers.get("x-trailer").map(|v| v.as_bytes()), Some(&b"done"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_complete_before_the_upload_is_relayed() {
    // An origin may answer in full before the request body is in (a gRPC server
    // failing a call does): the client gets that answer, not a 502.
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    for size in [100, 100_000, 1 << 20] {
        let body = Bytes::from(vec![b'e'; size]);
        let reply = client.request(Method::POST, "/early", &[], body).await.expect("a response");
        assert_eq!(reply.status, StatusCode::OK, "{size} bytes: {}", reply.text());
        assert_eq!(reply.text(), "early\n");
    }
    // From an HTTP/1.1 client too.
    let mut h1 = HttpClient::connect(proxy.addr()).await;
    let reply = h1.request(Method::POST, "/early", body_of(&vec![b'e'; 200_000])).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.text(), "early\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_still_uploading_when_the_response_head_comes_reaches_the_origin_whole() {
    // A gRPC server may send a call's response head before it reads the request: the
    // body goes on while the response is relayed, and none of it may be lost at the
    // switch, not even a piece that was waiting for the origin's window.
    let options =
        RefusingOptions { answer_first: true, window: 1000, ..RefusingOptions::default() };
    let origin = RefusingOrigin::start(options).await;
    let proxy =
        Proxy::start(h2_config("h2c = true", &[format!("h2c://{}", origin.addr())], "", "")).await;
    let client = H2Client::connect(proxy.addr()).await;
    for size in [10_000usize, 100_000, 1 << 20] {
        let body: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let reply = client
            .request(Method::POST, "/stream", &[], Bytes::from(body.clone()))
            .await
            .expect("a response");
        assert_eq!(reply.status, StatusCode::OK, "{size} bytes: {}", reply.text());
        let trailers = reply.trailers.expect("trailers saying what arrived");
        let said = |name: &str| trailers.get(name).and_then(|v| v.to_str().ok()).map(String::from);
        assert_eq!(said("x-received-bytes"), Some(size.to_string()), "{size} bytes");
        assert_eq!(said("x-received-fnv"), Some(Fnv::of(&body)), "{size} bytes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_to_an_h2c_origin() {
    const MB: usize = 1 << 20;
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let upload: Vec<u8> = (0..MB).map(|i| (i % 253) as u8).collect();
    let up = client.request(Method::POST, "/upload", &[], Bytes::from(upload.clone()));
    let path = format!("/bytes/{MB}");
    let down = client.get(&path);
    let (up, down) = tokio::join!(up, down);
    let up = up.expect("POST 1 MB");
    assert_eq!(up.header("x-received-bytes"), Some(MB.to_string().as_str()));
    assert_eq!(up.header("x-received-fnv"), Some(Fnv::of(&upload).as_str()));
    assert_eq!(down.body.len(), MB);
    assert_eq!(origin.accepted(), 1);
}

// TLS: ALPN on the listener and to origins.

/// The protocol `addr` picks by ALPN when offered `offer`.
async fn alpn_chosen(addr: SocketAddr, pki: &Pki, offer: &[&[u8]]) -> Option<String> {
    let tls = tls_connect(addr, &pki.ca.client_config_alpn(offer), "localhost")
        .await
        .expect("TLS handshake");
    tls.get_ref().1.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener_offers_h2_first_unless_http2_is_off() {
    let pki = Pki::new("h2-alpn");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let tls = format!("\n[listener.tls]\n{}", files.toml());
    let proxy = Proxy::start(h2_config(&tls, &[origin.addr().to_string()], "", "")).await;
    let addr = proxy.addr();
    assert_eq!(alpn_chosen(addr, &pki, &[b"h2", b"http/1.1"]).await.as_deref(), Some("h2"));
    assert_eq!(alpn_chosen(addr, &pki, &[b"http/1.1", b"h2"]).await.as_deref(), Some("h2"));
    assert_eq!(alpn_chosen(addr, &pki, &[b"http/1.1"]).await.as_deref(), Some("http/1.1"));
    let client =
        H2Client::connect_tls(addr, &pki.ca.client_config_alpn(&[b"h2"]), "localhost").await;
    let path = |i: usize| format!("/tls/{i}");
    assert_each_own(client.concurrent(16, path).await, path);
    let seen = origin.requests().pop().expect("a request");
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"), "{:?}", seen.headers);

    // `http2 = false`: HTTP/1.1 only.
    let tls = format!("http2 = false\n\n[listener.tls]\n{}", files.toml());
    let proxy = Proxy::start(h2_config(&tls, &[origin.addr().to_string()], "", "")).await;
    let chosen = alpn_chosen(proxy.addr(), &pki, &[b"h2", b"http/1.1"]).await;
    assert_eq!(chosen.as_deref(), Some("http/1.1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_negotiates_h2_or_http1_by_alpn() {
    let pki = Pki::new("h2-origin-alpn");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    // An origin that speaks h2 only, and one that speaks HTTP/1.1 only.
    let tls = Some(leaf.server_config(&[b"h2"]));
    let h2_origin =
        H2Origin::start_with(H2OriginOptions { tls, ..H2OriginOptions::default() }).await;
    let h1_origin = TlsOrigin::start(&leaf, TlsOriginOptions::default()).await;
    let ca = pki.ca_file.display().to_string();
    for (origin, h2) in [(h2_origin.addr(), true), (h1_origin.addr(), false)] {
        let upstream = format!("https://{origin}");
        let proxy = ChildProxy::launch(|listen| {
            let args = ["--listen", &listen.to_string(), "--upstream", &upstream, "--h2c"];
            let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            args.extend(["--upstream-ca".into(), ca.clone(), "--threads".into(), "2".into()]);
            args
        })
        .await;
        let client = H2Client::connect(proxy.addr()).await;
        let path = |i: usize| format!("/alpn/{i}");
        assert_each_own(client.concurrent(20, path).await, path);
        let mut h1 = HttpClient::connect(proxy.addr()).await;
        assert_eq!(h1.get("/alpn/h1").await.status, StatusCode::OK);
        if h2 {
            wait_until("the h2 origin answered", DEADLINE, || h2_origin.answered() == 21).await;
            assert_eq!(h2_origin.accepted(), 1, "streams to an h2 origin share a connection");
            assert!(h2_origin.errors().is_empty(), "{:?}", h2_origin.errors());
        } else {
            assert_eq!(h1_origin.requests(), 21);
            assert!(h1_origin.failures().is_empty(), "{:?}", h1_origin.failures());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_key_chooses_how_to_speak_to_a_group() {
    let origin = H2Origin::start().await;
    // A plain ip:port with `protocol = "h2c"`, and a ping interval.
    let group = "protocol = \"h2c\"\nh2_ping_interval = \"1s\"";
    let config = h2_config("h2c = true", &[origin.addr().to_string()], group, "");
    let proxy = Proxy::start(config).await;
    let client = H2Client::connect(proxy.addr()).await;
    let path = |i: usize| format!("/protocol/{i}");
    assert_each_own(client.concurrent(10, path).await, path);
    assert_eq!(origin.accepted(), 1);
    // `protocol = "http1"` to an HTTP/1.1 origin, from an h2 client.
    let h1 = Origin::start().await;
    let config = h2_config("h2c = true", &[h1.addr().to_string()], "protocol = \"http1\"", "");
    let proxy = Proxy::start(config).await;
    let client = H2Client::connect(proxy.addr()).await;
    assert_eq!(client.get("/http1").await.status, StatusCode::OK);
    assert_eq!(h1.request_count(), 1);
}

/// `holdfast check FILE`: whether it passed, and its stderr.
fn check(file: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["check", file.to_str().expect("a UTF-8 path")])
        .env("NO_COLOR", "1")
        .output()
        .expect("run holdfast check");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn check_accepts_the_http2_keys_and_rejects_bad_values() {
    let pki = Pki::new("h2-check");
    let (_, files) = pki.localhost("server", "server");
    let ca = toml_path(&pki.ca_file);
    let good = pki.dir.write(
        "good.toml",
        &format!(
            "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\nh2c = true\n\n\
             [[listener]]\naddress = \"127.0.0.1:8443\"\nupstream = \"app\"\nhttp2 = false\n\n\
             [listener.tls]\n{}\n\n\
             [upstream.app]\nservers = [\"h2c://127.0.0.1:9000\"]\nh2_ping_interval = \"10s\"\n\n\
             [upstream.plain]\nservers = [\"127.0.0.1:9001\"]\nprotocol = \"h2c\"\n\n\
             [upstream.secure]\nservers = [\"https://127.0.0.1:9002\"]\nprotocol = \"h2\"\n\n\
             [upstream.secure.tls]\nca = {ca}\n\n\
             [upstream.either]\nservers = [\"https://127.0.0.1:9003\"]\nprotocol = \"auto\"\n\n\
             [upstream.old]\nservers = [\"127.0.0.1:9004\"]\nprotocol = \"http1\"\n\n\
             [limits]\nh2_max_concurrent_streams = 64\n",
            files.toml()
        ),
    );
    let (ok, stderr) = check(&good);
    assert!(ok, "{stderr}");
    let bad = pki.dir.write(
        "bad.toml",
        "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\n\n\
         [upstream.app]\nservers = [\"127.0.0.1:9000\"]\nprotocol = \"h3\"\n",
    );
    let (ok, stderr) = check(&bad);
    assert!(!ok, "check accepted protocol = \"h3\"");
    assert!(stderr.contains(":7: upstream.app.protocol"), "{stderr}");
}

#[test]
fn protocol_auto_written_out_accepts_h2c_servers() {
    // `auto` is the default, and `h2c://` servers mean h2c under it: writing the
    // default out changes nothing.
    let dir = TempDir::new("h2-check-auto");
    let file = dir.write(
        "auto.toml",
        "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\n\n\
         [upstream.app]\nservers = [\"h2c://127.0.0.1:9000\"]\nprotocol = \"auto\"\n",
    );
    let (ok, stderr) = check(&file);
    assert!(ok, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_h2_connections_and_streams() {
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let path = |i: usize| format!("/metrics/{i}");
    assert_each_own(client.concurrent(12, path).await, path);
    let metrics = proxy.metrics().await;
    let backend = origin.addr().to_string();
    let this = [("upstream", "app"), ("backend", backend.as_str())];
    assert_eq!(metrics.count("holdfast_backend_h2_connections", &this), 1, "{}", metrics.text);
    assert_eq!(metrics.count("holdfast_backend_h2_streams_total", &this), 12, "{}", metrics.text);
    assert_eq!(metrics.count_or_zero("holdfast_backend_h2_retried_streams_total", &this), 0);
    assert_eq!(origin.accepted(), 1);
    // A stream the origin refuses is counted as sent again.
    let options = H2OriginOptions { refuse_first: 1, ..H2OriginOptions::default() };
    let origin = H2Origin::start_with(options).await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    assert_eq!(client.get("/refused-once").await.status, StatusCode::OK);
    let metrics = proxy.metrics().await;
    let backend = origin.addr().to_string();
    let this = [("upstream", "app"), ("backend", backend.as_str())];
    let retried = metrics.count_or_zero("holdfast_backend_h2_retried_streams_total", &this);
    assert_eq!(retried, 1, "{}", metrics.text);
}

// Stopping.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_client_resets_stops_waiting_for_the_origin() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(h2c_to_http1(&origin, "")).await;
    let mut client = RawH2::connect(proxy.addr()).await;
    client.get(1, "/hold/cancelled").await.expect("send the request");
    wait_until("the origin has the request", DEADLINE, || origin.request_count() == 1).await;
    assert_eq!(origin.closed(), 0);
    // RST_STREAM(CANCEL): the client no longer wants the response.
    let cancel = encode_frame(frame::RST_STREAM, 0, 1, &8u32.to_be_bytes());
    client.send(&cancel).await.expect("send the reset");
    // The exchange ends at once: its upstream connection, mid-request, is closed.
    wait_until("the origin connection is closed", DEADLINE, || origin.closed() == 1).await;
    // The client's connection still serves.
    client.get(3, "/after").await.expect("send another request");
    let head = client.until(DEADLINE, |f| f.kind == frame::HEADERS && f.stream == 3).await;
    assert_eq!(head.expect("a response").status(), Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_the_listener_sends_goaway_and_finishes_the_stream() {
    let origin = Origin::start().await;
    let dir = TempDir::new("h2-reload-goaway");
    let text = |listen: &str| {
        format!(
            "[[listener]]\naddress = \"{listen}\"\nupstream = \"app\"\nh2c = true\n\n\
             [upstream.app]\nservers = [\"{}\"]\n",
            origin.addr()
        )
    };
    let path = dir.write("holdfast.toml", &text("127.0.0.1:0"));
    let proxy = Proxy::start_file(&path).await;
    let mut client = RawH2::connect(proxy.addr()).await;
    client.get(1, "/hold/reload").await.expect("send the request");
    wait_until("the origin has the request", DEADLINE, || origin.request_count() == 1).await;

    // The listener moves to another port: the old one and its connections stop.
    let reserved = ReservedPort::new();
    let spare = reserved.addr();
    dir.write("holdfast.toml", &text(&spare.to_string()));
    proxy.reload().await.expect("a valid config");
    let goaway = client.until(DEADLINE, |f| f.kind == frame::GOAWAY).await;
    let goaway = goaway
        .unwrap_or_else(|e| panic!("no GOAWAY after the reload ({e:?}): {:?}", client.kinds()));
    let (last, code) = goaway.goaway().expect("a GOAWAY payload");
    assert_eq!(code, 0, "GOAWAY with an error code");
    assert!(last >= 1, "the GOAWAY drops the stream in flight (last stream {last})");

    origin.release("reload");
    let head = client.until(DEADLINE, |f| f.kind == frame::HEADERS && f.stream == 1).await;
    let head = head.unwrap_or_else(|e| panic!("no response ({e:?}): {:?}", client.kinds()));
    assert_eq!(head.status(), Some(200));
    // The new listener serves HTTP/2 too.
    let fresh = H2Client::connect(spare).await;
    assert_eq!(fresh.get("/after").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_sends_goaway_and_lets_the_stream_in_flight_finish() {
    let origin = Origin::start().await;
    let upstream = origin.addr().to_string();
    let mut proxy = ChildProxy::launch(|listen| {
        ["--listen", &listen.to_string(), "--upstream", &upstream, "--h2c", "--threads", "2"]
            .iter()
            .map(|a| a.to_string())
            .collect()
    })
    .await;
    let mut client = RawH2::connect(proxy.addr()).await;
    client.get(1, "/hold/last").await.expect("send the request");
    wait_until("the origin has the request", DEADLINE, || origin.request_count() == 1).await;

    proxy.terminate();
    let goaway = client.until(DEADLINE, |f| f.kind == frame::GOAWAY).await;
    let goaway =
        goaway.unwrap_or_else(|e| panic!("no GOAWAY after SIGTERM ({e:?}): {:?}", client.kinds()));
    let (last, code) = goaway.goaway().expect("a GOAWAY payload");
    assert_eq!(code, 0, "GOAWAY with an error code");
    assert!(last >= 1, "the GOAWAY drops the stream in flight (last stream {last})");
    assert!(
        !client.seen.iter().any(|f| f.kind == frame::HEADERS && f.stream == 1),
        "the stream was answered before the origin released it"
    );
    wait_refused(proxy.addr(), DEADLINE).await;
    assert!(proxy.try_exit().is_none(), "exited with a stream in flight: {}", proxy.stderr());

    origin.release("last");
    let head = client.until(DEADLINE, |f| f.kind == frame::HEADERS && f.stream == 1).await;
    let head =
        head.unwrap_or_else(|e| panic!("no response after release ({e:?}): {:?}", client.kinds()));
    assert_eq!(head.status(), Some(200));
    if head.flags & frame::END_STREAM == 0 {
        // The body ends the stream (the HTTP/1.1 origin sends no trailers).
        let body_end = |f: &crate::support::http2::Frame| {
            f.stream == 1 && f.kind == frame::DATA && f.flags & frame::END_STREAM != 0
        };
        let end = client.until(DEADLINE, body_end).await;
        assert!(end.is_ok(), "the response did not end: {:?}", client.kinds());
    }
    let status = proxy.wait_exit(DEADLINE).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.stderr());
    // After the exit, the connection is closed.
    let end = Instant::now() + DEADLINE;
    // Bounded by the deadline; each round reads a frame.
    loop {
        match client.next_frame(end).await {
            Ok(_) => {}
            Err(RawEnd::Closed) => break,
            Err(RawEnd::TimedOut) => panic!("the connection is still open after the exit"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_shutdown_lets_h2_streams_finish() {
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2c_to_h2c(&origin)).await;
    let client = H2Client::connect(proxy.addr()).await;
    let held: Vec<_> = (0..3)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { client.get(&format!("/hold/all?{i}")).await })
        })
        .collect();
    wait_until("the origin has the streams", DEADLINE, || origin.request_count() == 3).await;
    let addr = proxy.addr();
    let shutdown = tokio::spawn(proxy.shutdown(Duration::from_secs(5)));
    wait_refused(addr, DEADLINE).await;
    origin.release("all");
    for task in held {
        let reply = within("a held stream", task).await.expect("request task");
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.text(), "held\n");
    }
    within("shutdown", shutdown).await.expect("shutdown task");
    wait_until("the origin connection closes", DEADLINE, || origin.closed() == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_origin_config_with_protocol_h2() {
    let pki = Pki::new("h2-origin-config");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    let tls = Some(leaf.server_config(&[b"h2"]));
    let origin = H2Origin::start_with(H2OriginOptions { tls, ..H2OriginOptions::default() }).await;
    let group =
        format!("protocol = \"h2\"\n\n[upstream.app.tls]\nca = {}", toml_path(&pki.ca_file));
    let config = h2_config("h2c = true", &[format!("https://{}", origin.addr())], &group, "");
    let proxy = Proxy::start(config).await;
    let client = H2Client::connect(proxy.addr()).await;
    let path = |i: usize| format!("/tls-h2/{i}");
    assert_each_own(client.concurrent(8, path).await, path);
    assert_eq!(origin.accepted(), 1);
}

/// A request HTTP/2 cannot carry (a percent-encoded `Host` is a valid HTTP/1.1 host
/// and no valid `:authority`) fails on holdfast's side: 502 `not_h2`, nothing sent, and
/// the origin's health, errors and responses untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_http2_cannot_carry_is_holdfasts_failure_not_the_origins() {
    let origin = H2Origin::start().await;
    let proxy = Proxy::start(h2_config("", &[format!("h2c://{}", origin.addr())], "", "")).await;
    let mut raw = RawClient::connect(proxy.addr()).await;
    raw.send("GET /x HTTP/1.1\r\nHost: a%41b\r\n\r\n").await;
    let resp = raw.response().await;
    assert_eq!(resp.status, 502, "{}", resp.body_text());
    assert!(resp.body_text().contains("cannot be sent as HTTP/2"), "{}", resp.body_text());
    // The same client and origin work for a request HTTP/2 can carry.
    let mut client = HttpClient::connect(proxy.addr()).await;
    assert_eq!(client.get("/fine").await.status, StatusCode::OK);
    assert_eq!(origin.request_count(), 1, "only the second request reached the origin");
    let m = proxy.metrics().await;
    assert_eq!(m.count("holdfast_errors_total", &[("reason", "not_h2")]), 1);
    assert_eq!(m.count_or_zero("holdfast_errors_total", &[("reason", "origin_closed")]), 0);
    let (_, status) = crate::support::scrape::admin_get(proxy.admin(), "/status").await;
    assert!(status.contains("\"health\":\"healthy\""), "{status}");
    assert!(!status.contains("server_errors"), "{status}");
}
