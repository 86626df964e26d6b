//! Request framing: smuggling attempts and oversized or slow request heads are refused
//! before anything reaches the origin, and what is accepted reaches it with framing and
//! `Host` written by holdfast. Each test sends the exact bytes of one attack.

use std::time::Duration;

use crate::support::{config_for, config_to, within_for, Origin, Proxy, Tap};

/// A request line an attacker hides in a body, and its length.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";

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
    // RFC 9110, 15.5.9: a head that started and did not finish gets 408.
    let resp = resp.expect("a 408 before the close");
    assert_eq!(resp.status, 408, "{}", resp.body_text());
    assert_eq!(origin.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_naming_content_length_transfer_encoding_or_host_is_refused() {
    // Regression: holdfast dropped the named Content-Length but sent the 35 body bytes, which
    // the origin took for a second request.
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let cl = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nConnection: Content-Length\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
        SMUGGLED.len()
    );
    let te = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{SMUGGLED}\r\n0\r\n\r\n",
        SMUGGLED.len()
    );
    let host = "GET /no-host HTTP/1.1\r\nHost: a\r\nConnection: host\r\n\r\n".to_string();
    for attack in [cl, te, host] {
        assert_eq!(status_before_close(&proxy, &attack).await, Some(400), "{attack:?}");
    }
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/barrier"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multibyte_character_in_the_target_does_not_panic() {
    // Regression: slicing the target at a byte index inside 'é' panicked; the client got nothing.
    // A URI is ASCII (RFC 3986, 2): raw bytes past it are refused, as strict origins do.
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    for target in ["/aaaaaé", "/é", "http://h/aé?é"] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(status_before_close(&proxy, &request).await, Some(400), "{target}");
    }
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/barrier"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_encoding_in_http10_is_refused_and_the_connection_closed() {
    // Regression: the chunked HTTP/1.0 body was forwarded, and what followed it reached the
    // origin as another request on a kept-alive connection.
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let attack = format!(
        "POST /ten HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
    );
    assert_eq!(status_before_close(&proxy, &attack).await, Some(400));
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/barrier"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_encoding_lists_are_written_again_or_refused() {
    // Regression: the values were forwarded as received, for each origin to read its own way.
    let origin = Origin::start().await;
    let tap = Tap::start(origin.addr()).await;
    let proxy = Proxy::start(config_to(tap.addr())).await;
    for (i, te) in ["chunked", "Chunked", "CHUNKED"].iter().enumerate() {
        let mut client = proxy.raw().await;
        client
            .send(format!(
                "POST /te/{i} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {te}\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            ))
            .await;
        let resp = client.response().await;
        assert_eq!(resp.status, 200, "{te:?}: {}", resp.body_text());
        assert_eq!(resp.header("x-received-bytes"), Some("5"), "{te:?}");
    }
    let sent = tap.sent_text();
    assert_eq!(sent.matches("transfer-encoding: chunked\r\n").count(), 3, "{sent}");
    assert_eq!(sent.to_ascii_lowercase().matches("transfer-encoding").count(), 3, "{sent}");
    // An unknown coding before chunked: 501; chunked twice or not last, or an empty
    // list element: 400.
    let refused = [
        ("Transfer-Encoding: chunked, \r\n", 400),
        ("Transfer-Encoding: ,chunked\r\n", 400),
        ("Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n", 501),
        ("Transfer-Encoding: gzip, chunked\r\n", 501),
        ("Transfer-Encoding: chunked, chunked\r\n", 400),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", 400),
    ];
    for (lines, status) in refused {
        let attack = format!("POST /bad-te HTTP/1.1\r\nHost: a\r\n{lines}\r\n0\r\n\r\n{SMUGGLED}");
        assert_eq!(status_before_close(&proxy, &attack).await, Some(status), "{lines:?}");
    }
    barrier(&proxy).await;
    assert!(origin.paths().iter().all(|p| !p.contains("bad-te") && !p.contains("smuggled")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chunk_extensions_and_trailer_lines_are_refused() {
    // Regression: chunk extensions with control bytes and trailer lines without a colon went on.
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    for body in [
        "5;ext=\x01\r\nhello\r\n0\r\n\r\n",
        "5;a=\"b\x7f\"\r\nhello\r\n0\r\n\r\n",
        "5\r\nhello\r\n0\r\nno colon here\r\n\r\n",
    ] {
        let attack = format!(
            "POST /bad-chunk HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{body}{SMUGGLED}"
        );
        assert_eq!(status_before_close(&proxy, &attack).await, Some(400), "{body:?}");
    }
    barrier(&proxy).await;
    assert_eq!(
        origin.completed(),
        ["/barrier"],
        "the origin read no request in full but the barrier"
    );
    assert!(origin.paths().iter().all(|p| !p.contains("smuggled")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_trailer_fields_are_dropped_and_extensions_not_forwarded() {
    // Regression: trailers named Content-Length, Transfer-Encoding or Host were forwarded.
    let origin = Origin::start().await;
    let tap = Tap::start(origin.addr()).await;
    let proxy = Proxy::start(config_to(tap.addr())).await;
    let mut client = proxy.raw().await;
    client
        .send(
            "POST /trailers HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
             5;name=value\r\nhello\r\n0\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\
             Host: evil\r\nX-Checksum: 1\r\n\r\n",
        )
        .await;
    let resp = client.response().await;
    assert_eq!(resp.status, 200, "{}", resp.body_text());
    assert_eq!(resp.header("x-received-bytes"), Some("5"));
    let sent = tap.sent_text();
    assert!(sent.ends_with("\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: 1\r\n\r\n"), "{sent}");
    assert!(!sent.contains("evil") && !sent.contains("name=value"), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_authority_replaces_host_and_keeps_the_query() {
    // Regression: routed by public.test but sent with Host: internal.test; `?q=1` was lost.
    let public = Origin::start().await;
    let internal = Origin::start().await;
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
         [[route]]\nhost = \"public.test\"\nupstream = \"public\"\n\n\
         [[route]]\nhost = \"internal.test\"\nupstream = \"internal\"\n\n\
         [upstream.public]\nservers = [\"{}\"]\n\n[upstream.internal]\nservers = [\"{}\"]\n",
        public.addr(),
        internal.addr()
    );
    let config = holdfast::Config::parse(&text, std::path::Path::new("abs.toml")).unwrap();
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client.send("GET http://public.test/p HTTP/1.1\r\nHost: internal.test\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    client.send("GET http://public.test?q=1 HTTP/1.1\r\nHost: internal.test\r\n\r\n").await;
    assert_eq!(client.response().await.status, 200);
    assert_eq!(internal.request_count(), 0);
    let seen = public.requests();
    let hosts: Vec<_> = seen.iter().map(|r| r.headers.get_all("host").iter().count()).collect();
    assert_eq!(hosts, [1, 1], "exactly one Host each");
    assert!(seen.iter().all(|r| r.header("host") == Some("public.test")));
    assert_eq!(public.paths(), ["/p", "/?q=1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_or_missing_host_is_refused() {
    // Regression: two Host lines were forwarded, and a request without one got the backend's.
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let two = "GET /two HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n";
    let none = "GET /none HTTP/1.1\r\nAccept: */*\r\n\r\n";
    let bad = "GET /bad HTTP/1.1\r\nHost: a.test/../x\r\n\r\n";
    for attack in [two, none, bad] {
        assert_eq!(status_before_close(&proxy, attack).await, Some(400), "{attack:?}");
    }
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/barrier"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlong_request_line_gets_414() {
    let origin = Origin::start().await;
    let mut config = config_for(&origin);
    config.client_limits.max_line_bytes = 1024;
    let proxy = Proxy::start(config).await;
    let mut client = proxy.raw().await;
    client.send(format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(900))).await;
    assert_eq!(client.response().await.status, 200);
    // Refused before the line has even ended.
    let long = format!("GET /{}", "a".repeat(2000));
    assert_eq!(status_before_close(&proxy, &long).await, Some(414));
    barrier(&proxy).await;
    assert_eq!(origin.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_expectation_gets_417() {
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let attack = "PUT /expect HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\nhi";
    assert_eq!(status_before_close(&proxy, attack).await, Some(417));
    barrier(&proxy).await;
    assert_eq!(origin.paths(), ["/barrier"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_arriving_a_byte_at_a_time_is_parsed_once_complete() {
    // Regression: the head was parsed again from its start on every read. Now a head that does
    // not arrive whole is scanned for its end a byte at a time and parsed once; the
    // linear bound itself is pinned in the unit tests (`http1::tests`).
    let origin = Origin::start().await;
    let proxy = Proxy::start(config_for(&origin)).await;
    let mut client = proxy.raw().await;
    let filler: String = (0..90).map(|i| format!("X-Filler-{i}: {}\r\n", "v".repeat(40))).collect();
    let head = format!("GET /trickled HTTP/1.1\r\nHost: a\r\n{filler}\r\n");
    for byte in head.as_bytes() {
        client.send([*byte]).await;
    }
    let resp = client.response().await;
    assert_eq!(resp.status, 200, "{}", resp.body_text());
    assert_eq!(origin.paths(), ["/trickled"]);
    assert_eq!(origin.requests()[0].header("x-filler-89"), Some("v".repeat(40).as_str()));
}
