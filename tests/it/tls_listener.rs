//! HTTPS listeners with real clients (rustls, curl, openssl): requests through with
//! `X-Forwarded-Proto: https`, keep-alive, certificates by SNI, session resumption,
//! certificate files replaced (on reload and on their own), and failed handshakes
//! counted by reason and logged as counts.
//!
//! Certificates are made per test (`support::tls`); nothing leaves loopback.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use rustls::version::{TLS12, TLS13};
use rustls::{HandshakeKind, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use crate::support::tls::{
    have_tool, parse_config, presented, replace_file, run_tool, s_client, tls_connect, toml_path,
    Ca, HttpsClient, Pki, TlsOrigin, TlsOriginOptions,
};
use crate::support::{
    wait_for_count, wait_until, within, ChildProxy, Generated, HttpClient, Origin, Proxy,
    RawClient, ReservedPort, DEADLINE,
};

/// How long a certificate file change may take to be served: the watch interval (5 s)
/// twice over, as a change may land just after a check, plus the machine's slack.
const WATCH_DEADLINE: Duration = Duration::from_secs(15);

/// `holdfast_tls_handshake_failures_total` by reason.
const FAILURES: &str = "holdfast_tls_handshake_failures_total";
/// `holdfast_tls_handshakes_total` by version and session.
const HANDSHAKES: &str = "holdfast_tls_handshakes_total";

/// A config: an admin listener, and an HTTPS listener on `127.0.0.1:0` whose
/// `[listener.tls]` holds `tls`, in front of the group `app` of `servers` (TOML strings,
/// comma-separated), with `group` written after the group's `servers`.
fn https_listener(tls: &str, servers: &str, group: &str) -> String {
    format!(
        "[admin]\naddress = \"127.0.0.1:0\"\n\n[[listener]]\naddress = \"127.0.0.1:0\"\n\
         upstream = \"app\"\n\n[listener.tls]\n{tls}\n\n[upstream.app]\nservers = [{servers}]\n\
         {group}\n"
    )
}

/// Polls, with a handshake every 100 ms, until `addr` presents the certificate labelled
/// `label` for `name`; panics after `deadline` naming the one it presents.
async fn wait_presented(addr: SocketAddr, name: &str, label: &str, deadline: Duration) {
    let start = Instant::now();
    // Bounded by `deadline`; each round is one handshake and a 100 ms wait.
    loop {
        let now = presented(addr, name).await;
        if now == label {
            return;
        }
        assert!(start.elapsed() < deadline, "still presenting {now:?}, not {label:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// The HTTPS listener, end to end.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_listener_proxies_and_tells_the_origin_the_client_used_https() {
    let pki = Pki::new("https-e2e");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let text = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), "");
    let proxy = Proxy::start(parse_config(&text)).await;
    let config = pki.ca.client_config();

    let mut client = HttpsClient::connect(proxy.addr(), &config, "localhost").await;
    assert_eq!(client.kind, HandshakeKind::Full);
    assert_eq!(client.certificate, "server");
    let reply = client.get("/hello").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-path"), Some("/hello"));
    let seen = origin.requests().pop().expect("the origin got the request");
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"), "{:?}", seen.headers);
    let forwarded = seen.header("forwarded").unwrap_or_default();
    assert!(forwarded.contains("proto=https"), "Forwarded: {forwarded}");

    // Keep-alive over TLS: many requests, one TLS connection, one upstream connection.
    for i in 0..49 {
        let reply = client.get(&format!("/again/{i}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    }
    // Idle long enough to park (a second): the TLS session is kept and served again.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let reply = client.get("/after-parking").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.count_or_zero(HANDSHAKES, &[]), 1, "{}", metrics.text);
    assert_eq!(metrics.count_or_zero(FAILURES, &[]), 0, "{}", metrics.text);
    assert_eq!(origin.accepted(), 1);
    assert_eq!(origin.request_count(), 51);

    // An IP address is verified against the certificate's IP SAN (and sends no SNI).
    let mut by_ip = HttpsClient::connect(proxy.addr(), &config, "127.0.0.1").await;
    assert_eq!(by_ip.get("/by-ip").await.status, StatusCode::OK);
    // The upstream connection is still the one.
    assert_eq!(origin.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_stream_through_tls_on_both_sides() {
    const DOWN: u64 = 16 << 20;
    const UP: u64 = 8 << 20;
    let pki = Pki::new("tls-bodies");
    let (_, files) = pki.localhost("server", "server");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    let origin = TlsOrigin::start(&leaf, TlsOriginOptions::default()).await;
    let group = format!("[upstream.app.tls]\nca = {}", toml_path(&pki.ca_file));
    let servers = format!("\"https://{}\"", origin.addr());
    let proxy = Proxy::start(parse_config(&https_listener(&files.toml(), &servers, &group))).await;
    let mut client = HttpsClient::connect(proxy.addr(), &pki.ca.client_config(), "localhost").await;

    // Far more than the sockets hold: writes on both TLS sessions fill them and resume.
    let reply = client.get(&format!("/bytes/{DOWN}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.body.len() as u64, DOWN);
    assert!(reply.body.iter().all(|b| *b == b'x'), "the body is not all x");
    for (framing, body) in [("sized", Generated::sized(UP)), ("chunked", Generated::chunked(UP))] {
        let body = body.map_err(Into::into).boxed();
        let reply = client.request(Method::POST, "/upload", body).await;
        assert_eq!(reply.status, StatusCode::OK, "{framing}: {}", reply.text());
        assert_eq!(reply.header("x-received-bytes"), Some(UP.to_string().as_str()), "{framing}");
    }
    // Both sessions are still in step: one more exchange on the same connections.
    assert_eq!(client.get("/after").await.text(), "tls origin: /after\n");
    assert_eq!(origin.accepted(), 1);
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.count_or_zero(HANDSHAKES, &[]), 1, "{}", metrics.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_echoes_through_the_https_listener() {
    let pki = Pki::new("tls-websocket");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let text = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), "");
    let proxy = Proxy::start(parse_config(&text)).await;
    let tls = tls_connect(proxy.addr(), &pki.ca.client_config(), "localhost")
        .await
        .expect("TLS handshake with holdfast");
    let (mut ws, resp) = within(
        "websocket handshake",
        tokio_tungstenite::client_async("wss://localhost/upgrade", tls),
    )
    .await
    .expect("websocket handshake through holdfast");
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    for text in ["hello", "second message"] {
        within("websocket send", ws.send(Message::text(text))).await.expect("send");
        let echoed = within("websocket echo", ws.next()).await.expect("a message").expect("ok");
        assert_eq!(echoed, Message::text(text));
    }
    // Many TLS records each way, through the tunnel.
    let blob = vec![7u8; 1 << 20];
    within("websocket send", ws.send(Message::binary(blob.clone()))).await.expect("send");
    let echoed = within("websocket echo", ws.next()).await.expect("a message").expect("ok");
    assert_eq!(echoed, Message::binary(blob));
    within("websocket close", ws.close(None)).await.expect("close");
    let upgrade = origin.requests().first().cloned().expect("the upgrade request");
    assert_eq!(upgrade.header("x-forwarded-proto"), Some("https"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_reaches_the_https_listener_and_reuses_its_connection() {
    if !have_tool("curl") {
        return;
    }
    let pki = Pki::new("https-curl");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let text = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), "");
    let proxy = Proxy::start(parse_config(&text)).await;
    let port = proxy.addr().port();
    let ca = pki.ca_file.display().to_string();
    let resolve = format!("localhost:{port}:127.0.0.1");

    // The echo route answers with the request headers the origin got.
    let url = format!("https://localhost:{port}/curl");
    let args = ["-sS", "--max-time", "10", "--cacert", &ca, "--resolve", &resolve, &url];
    let out = run_tool("curl", &args, b"").await;
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    assert!(body.contains("x-forwarded-proto: https\n"), "{body}");
    assert!(body.contains("proto=https"), "{body}");

    // By IP address (the certificate's IP SAN), ten URLs in one run: curl reuses its
    // connection, so one new connection in all.
    let urls: Vec<String> = (0..10).map(|i| format!("https://127.0.0.1:{port}/n/{i}")).collect();
    let mut args = vec!["-sS", "--max-time", "10", "--cacert", &ca];
    args.extend(["-w", "%{http_code} %{num_connects}\\n"]);
    for url in &urls {
        args.extend(["-o", "/dev/null", url.as_str()]);
    }
    let out = run_tool("curl", &args, b"").await;
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    let report = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), 10, "{report}");
    assert!(lines.iter().all(|l| l.starts_with("200 ")), "{report}");
    let connects: u64 = lines.iter().map(|l| l[4..].parse::<u64>().expect("a number")).sum();
    assert_eq!(connects, 1, "{report}");
    // Two curl runs: two handshakes; the upstream connection is shared by both.
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.count_or_zero(HANDSHAKES, &[]), 2, "{}", metrics.text);
    assert_eq!(origin.accepted(), 1);
}

// Certificates by SNI.

/// Five certificates: the default (listed first), two names, a wildcard, and an exact
/// name under the wildcard listed after it; the `certificates` lines.
fn sni_certificates(pki: &Pki) -> String {
    let pairs = [
        ("default", vec!["default.test"]),
        ("a", vec!["a.test"]),
        ("b", vec!["b.test"]),
        ("wild", vec!["*.wild.test"]),
        ("exact", vec!["exact.wild.test"]),
    ];
    let tables: Vec<String> = pairs
        .iter()
        .map(|(label, names)| pki.ca.leaf(label, names).write(&pki.dir, label).toml_inline())
        .collect();
    format!("certificates = [\n  {},\n]", tables.join(",\n  "))
}

/// SNI name (`None`: none sent) and the certificate it must get.
const SNI_CASES: [(Option<&str>, &str); 8] = [
    (Some("a.test"), "a"),
    (Some("B.Test"), "b"),
    (Some("x.wild.test"), "wild"),
    // An exact name wins over the wildcard, whatever the order.
    (Some("exact.wild.test"), "exact"),
    // A wildcard covers one label only.
    (Some("deep.x.wild.test"), "default"),
    (Some("unknown.test"), "default"),
    (Some("default.test"), "default"),
    (None, "default"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_picks_the_exact_name_then_the_wildcard_then_the_first_certificate() {
    let pki = Pki::new("sni-rustls");
    let origin = Origin::start().await;
    let text = https_listener(&sni_certificates(&pki), &format!("\"{}\"", origin.addr()), "");
    let proxy = Proxy::start(parse_config(&text)).await;
    for (name, label) in SNI_CASES {
        // An IP address sends no SNI.
        let got = presented(proxy.addr(), name.unwrap_or("127.0.0.1")).await;
        assert_eq!(got, label, "SNI {name:?}");
    }
    // A verifying client gets through with each name its certificate is for.
    let config = pki.ca.client_config();
    for name in ["a.test", "b.test", "x.wild.test", "exact.wild.test", "default.test"] {
        let mut client = HttpsClient::connect(proxy.addr(), &config, name).await;
        assert_eq!(client.get("/").await.status, StatusCode::OK, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_gets_the_certificate_for_the_name_it_sends() {
    if !have_tool("openssl") {
        return;
    }
    let pki = Pki::new("sni-openssl");
    let origin = Origin::start().await;
    let text = https_listener(&sni_certificates(&pki), &format!("\"{}\"", origin.addr()), "");
    let proxy = Proxy::start(parse_config(&text)).await;
    let ca = pki.ca_file.display().to_string();
    for (name, label) in SNI_CASES {
        let mut args = vec!["-CAfile", ca.as_str()];
        match name {
            Some(name) => args.extend(["-servername", name]),
            None => args.push("-noservername"),
        }
        let out = s_client(proxy.addr(), &args, b"").await;
        assert!(out.contains(&format!("subject=CN = {label}\n")), "SNI {name:?}:\n{out}");
        // The chain verifies against the CA (whatever the name).
        assert!(out.contains("Verify return code: 0 (ok)"), "SNI {name:?}:\n{out}");
    }
}

// Session resumption.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connection_resumes_the_first_ones_session() {
    let pki = Pki::new("resume-rustls");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let text = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), "");
    let proxy = Proxy::start(parse_config(&text)).await;

    for (versions, version, label) in
        [(&[&TLS13], ProtocolVersion::TLSv1_3, "1.3"), (&[&TLS12], ProtocolVersion::TLSv1_2, "1.2")]
    {
        // One client config: its session cache carries the session across connections.
        let config = pki.ca.client_config_for(versions);
        let mut first = HttpsClient::connect(proxy.addr(), &config, "localhost").await;
        assert_eq!((first.kind, first.version), (HandshakeKind::Full, version));
        // A request, so the session tickets sent after the handshake have been read.
        assert_eq!(first.get("/first").await.status, StatusCode::OK);
        let mut second = HttpsClient::connect(proxy.addr(), &config, "localhost").await;
        assert_eq!((second.kind, second.version), (HandshakeKind::Resumed, version), "TLS {label}");
        assert_eq!(second.get("/second").await.status, StatusCode::OK);
        // A new config knows no session: a full handshake.
        let mut fresh =
            HttpsClient::connect(proxy.addr(), &pki.ca.client_config_for(versions), "localhost")
                .await;
        assert_eq!(fresh.kind, HandshakeKind::Full);
        assert_eq!(fresh.get("/fresh").await.status, StatusCode::OK);

        let full = [("version", label), ("session", "full")];
        wait_for_count(proxy.admin(), HANDSHAKES, &full, 2).await;
        let resumed = [("version", label), ("session", "resumed")];
        wait_for_count(proxy.admin(), HANDSHAKES, &resumed, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_resume_across_a_reload() {
    let pki = Pki::new("resume-reload");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let path = pki.dir.write(
        "holdfast.toml",
        &https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), ""),
    );
    let proxy = Proxy::start_file(&path).await;
    let config = pki.ca.client_config();
    let mut first = HttpsClient::connect(proxy.addr(), &config, "localhost").await;
    assert_eq!(first.get("/first").await.status, StatusCode::OK);
    // The listener's server (its ticket keys and session cache) outlives the reload.
    proxy.reload().await.expect("reload");
    let mut second = HttpsClient::connect(proxy.addr(), &config, "localhost").await;
    assert_eq!(second.kind, HandshakeKind::Resumed);
    assert_eq!(second.get("/second").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_resumes_a_saved_session() {
    if !have_tool("openssl") {
        return;
    }
    let pki = Pki::new("resume-openssl");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let text = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), "");
    let proxy = Proxy::start(parse_config(&text)).await;
    let ca = pki.ca_file.display().to_string();
    let session = pki.dir.path().join("session.pem").display().to_string();
    // A request that closes the connection, and -ign_eof: s_client reads until holdfast
    // closes, so it has the TLS 1.3 session tickets sent after the handshake.
    let request = b"GET /openssl HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let common = ["-CAfile", ca.as_str(), "-servername", "localhost", "-ign_eof"];

    let mut args = common.to_vec();
    args.extend(["-sess_out", session.as_str()]);
    let out = s_client(proxy.addr(), &args, request).await;
    assert!(out.contains("\nNew, TLSv1.3"), "{out}");
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}");

    let mut args = common.to_vec();
    args.extend(["-sess_in", session.as_str()]);
    let out = s_client(proxy.addr(), &args, request).await;
    assert!(out.contains("\nReused, TLSv1.3"), "{out}");
    assert!(out.contains("HTTP/1.1 200 OK"), "{out}");

    wait_for_count(proxy.admin(), HANDSHAKES, &[("version", "1.3"), ("session", "full")], 1).await;
    wait_for_count(proxy.admin(), HANDSHAKES, &[("version", "1.3"), ("session", "resumed")], 1)
        .await;
}

// Certificate files replaced while holdfast runs.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_serves_replaced_certificate_files_and_refuses_broken_ones() {
    let pki = Pki::new("cert-reload");
    let (old, files) = pki.localhost("old", "server");
    let origin = Origin::start().await;
    let path = pki.dir.write(
        "holdfast.toml",
        &https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), ""),
    );
    let proxy = Proxy::start_file(&path).await;
    assert_eq!(presented(proxy.addr(), "localhost").await, "old");
    let mut before = HttpsClient::connect(proxy.addr(), &pki.ca.client_config(), "localhost").await;
    assert_eq!(before.get("/before").await.status, StatusCode::OK);

    // Not PEM at all.
    replace_file(&files.cert, "this is not a certificate\n");
    let e = proxy.reload().await.expect_err("a reload with a broken certificate file");
    let message = e.to_string();
    assert!(message.contains(&files.cert.display().to_string()), "{message}");
    assert!(message.contains("no PEM certificate"), "{message}");
    assert_eq!(presented(proxy.addr(), "localhost").await, "old");

    // A key that belongs to another certificate.
    old.replace(&files);
    let other = pki.ca.leaf("other", &["localhost"]);
    replace_file(&files.key, &other.key_pem);
    let e = proxy.reload().await.expect_err("a reload with a key that does not match");
    let message = e.to_string();
    assert!(message.contains(&files.key.display().to_string()), "{message}");
    assert!(message.contains("does not belong to the certificate"), "{message}");
    assert_eq!(presented(proxy.addr(), "localhost").await, "old");

    // A good new pair: served from the next handshake on.
    let new = pki.ca.leaf("new", &["localhost", "127.0.0.1"]);
    new.replace(&files);
    proxy.reload().await.expect("a reload with a good new certificate");
    assert_eq!(presented(proxy.addr(), "localhost").await, "new");
    let mut after = HttpsClient::connect(proxy.addr(), &pki.ca.client_config(), "localhost").await;
    assert_eq!(after.certificate, "new");
    assert_eq!(after.get("/after").await.status, StatusCode::OK);
    // The connection made before the change carries on.
    assert_eq!(before.get("/before-again").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_turns_tls_on_and_off_on_a_listener() {
    let pki = Pki::new("tls-on-off");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let https = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), "");
    // The same listener without its [listener.tls].
    let cleartext = https.replace(&format!("[listener.tls]\n{}\n", files.toml()), "");
    assert_ne!(https, cleartext);
    let path = pki.dir.write("holdfast.toml", &cleartext);
    let proxy = Proxy::start_file(&path).await;
    let mut plain = HttpClient::connect(proxy.addr()).await;
    assert_eq!(plain.get("/plain").await.status, StatusCode::OK);

    pki.dir.write("holdfast.toml", &https);
    proxy.reload().await.expect("reload turning TLS on");
    let mut client = HttpsClient::connect(proxy.addr(), &pki.ca.client_config(), "localhost").await;
    assert_eq!(client.get("/tls").await.status, StatusCode::OK);
    let mut raw = RawClient::connect(proxy.addr()).await;
    raw.send("GET /plain-again HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let resp = raw.response().await;
    assert_eq!(resp.status, 400, "{}", resp.body_text());
    // A connection accepted before the change stays as it was.
    assert_eq!(plain.get("/plain-kept").await.status, StatusCode::OK);

    pki.dir.write("holdfast.toml", &cleartext);
    proxy.reload().await.expect("reload turning TLS off");
    let mut plain = HttpClient::connect(proxy.addr()).await;
    assert_eq!(plain.get("/plain-after").await.status, StatusCode::OK);
    assert_eq!(client.get("/tls-kept").await.status, StatusCode::OK);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_serves_replaced_certificate_files() {
    let pki = Pki::new("cert-sighup");
    let (_, files) = pki.localhost("old", "server");
    let origin = Origin::start().await;
    let proxy = ChildProxy::launch(|listen| {
        let text = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), "")
            .replace("127.0.0.1:0\"\nupstream", &format!("{listen}\"\nupstream"))
            .replace("[admin]\naddress = \"127.0.0.1:0\"\n\n", "");
        let path = pki.dir.write("holdfast.toml", &text);
        vec!["--config".to_string(), path.display().to_string()]
    })
    .await;
    assert_eq!(presented(proxy.addr(), "localhost").await, "old");
    pki.ca.leaf("new", &["localhost"]).replace(&files);
    proxy.signal(nix::sys::signal::Signal::SIGHUP);
    wait_until("the reload is logged", DEADLINE, || proxy.stderr().contains("config reloaded"))
        .await;
    // Served once the reload is done, not a watch interval later.
    assert_eq!(presented(proxy.addr(), "localhost").await, "new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_certificate_files_are_served_without_a_reload() {
    let pki = Pki::new("cert-watch");
    let (_, files) = pki.localhost("old", "server");
    let origin = Origin::start().await;
    let proxy = ChildProxy::launch(|listen| {
        let upstream = origin.addr().to_string();
        let (cert, key) = (files.cert.display().to_string(), files.key.display().to_string());
        let args = ["--listen", &listen.to_string(), "--upstream", &upstream, "--threads", "2"];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["--tls-cert".into(), cert, "--tls-key".into(), key]);
        args
    })
    .await;
    assert_eq!(presented(proxy.addr(), "localhost").await, "old");

    // A broken file is logged, naming it and why, and the old certificate stays.
    replace_file(&files.cert, "this is not a certificate\n");
    let cert = files.cert.display().to_string();
    wait_until("the broken certificate file is logged", WATCH_DEADLINE, || {
        let stderr = proxy.stderr();
        stderr.lines().any(|l| {
            l.contains("cannot be served") && l.contains(&cert) && l.contains("no PEM certificate")
        })
    })
    .await;
    assert_eq!(presented(proxy.addr(), "localhost").await, "old");

    // A good new pair is served, with no reload.
    pki.ca.leaf("new", &["localhost"]).replace(&files);
    wait_presented(proxy.addr(), "localhost", "new", WATCH_DEADLINE).await;
    let stderr = proxy.stderr();
    assert!(stderr.contains("certificate files changed; now serving them"), "{stderr}");
}

// Failed handshakes.

/// Writes `bytes` on a new connection to `addr`, then reads until holdfast closes it.
async fn send_and_wait_close(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    within("a connection holdfast closes", async {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        if !bytes.is_empty() {
            tcp.write_all(bytes).await.expect("write");
        }
        let mut got = Vec::new();
        // Until end of stream, or a reset (which also ends it).
        let _ = tcp.read_to_end(&mut got).await;
        got
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_handshakes_are_counted_by_reason() {
    let pki = Pki::new("tls-failures");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let group = "\n[timeouts]\nclient_header = \"300ms\"";
    let text = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), group);
    let proxy = Proxy::start(parse_config(&text)).await;
    let admin = proxy.admin();

    // Plain HTTP: a 400 that says to use https://, then the connection closes.
    let mut raw = RawClient::connect(proxy.addr()).await;
    raw.send("GET /plain HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    let resp = raw.response().await;
    assert_eq!(resp.status, 400);
    assert!(resp.body_text().contains("use https://"), "{}", resp.body_text());
    raw.expect_closed().await;
    wait_for_count(admin, FAILURES, &[("reason", "plain_http")], 1).await;

    // Bytes that are no TLS record.
    send_and_wait_close(proxy.addr(), b"\x00\x01\x02\x03 garbage\r\n\r\n").await;
    wait_for_count(admin, FAILURES, &[("reason", "bad_message")], 1).await;

    // Connected, and gone without a byte.
    drop(TcpStream::connect(proxy.addr()).await.expect("connect"));
    wait_for_count(admin, FAILURES, &[("reason", "closed")], 1).await;

    // A client that does not trust the certificate says so with an alert.
    let stranger = Ca::new("another CA").client_config();
    let refused = tls_connect(proxy.addr(), &stranger, "localhost").await;
    assert!(refused.is_err(), "a client trusting another CA finished the handshake");
    wait_for_count(admin, FAILURES, &[("reason", "client_alert")], 1).await;

    // A client that speaks only a protocol holdfast does not: none in common.
    let mut other_only = (*pki.ca.client_config()).clone();
    other_only.alpn_protocols = vec![b"spdy/3.1".to_vec()];
    let refused = tls_connect(proxy.addr(), &std::sync::Arc::new(other_only), "localhost").await;
    assert!(refused.is_err(), "a client offering only spdy/3.1 finished the handshake");
    wait_for_count(admin, FAILURES, &[("reason", "no_alpn")], 1).await;

    // Connected and silent past `client_header`.
    send_and_wait_close(proxy.addr(), b"").await;
    wait_for_count(admin, FAILURES, &[("reason", "timeout")], 1).await;

    // Nothing else was counted, and no handshake finished.
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.count_or_zero(FAILURES, &[]), 6, "{}", metrics.text);
    assert_eq!(metrics.count_or_zero(HANDSHAKES, &[]), 0, "{}", metrics.text);
    assert_eq!(origin.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_1_1_client_is_counted_as_protocol_version() {
    if !have_tool("openssl") {
        return;
    }
    let pki = Pki::new("tls-1-1");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let text = https_listener(&files.toml(), &format!("\"{}\"", origin.addr()), "");
    let proxy = Proxy::start(parse_config(&text)).await;
    for version in ["-tls1_1", "-tls1"] {
        // SECLEVEL=0: OpenSSL 3's default level leaves out what an old client offers.
        let args = [version, "-cipher", "DEFAULT@SECLEVEL=0", "-servername", "localhost"];
        let out = s_client(proxy.addr(), &args, b"").await;
        // Refused with an alert: no cipher, no certificate.
        assert!(out.contains("Cipher is (NONE)") && out.contains(" alert "), "{version}: {out}");
    }
    // rustls refuses these hellos for lacking signature_algorithms (TLS 1.2's) before it
    // looks at their version; they once counted as `incompatible`.
    wait_for_count(proxy.admin(), FAILURES, &[("reason", "protocol_version")], 2).await;
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.count_or_zero(FAILURES, &[]), 2, "{}", metrics.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_failed_handshakes_logs_at_most_two_lines() {
    const FLOOD: u64 = 50;
    let pki = Pki::new("tls-flood");
    let (_, files) = pki.localhost("server", "server");
    let origin = Origin::start().await;
    let admin = ReservedPort::new();
    let proxy = ChildProxy::launch(|listen| {
        let upstream = origin.addr().to_string();
        let (cert, key) = (files.cert.display().to_string(), files.key.display().to_string());
        let admin = admin.addr().to_string();
        let args = ["--listen", &listen.to_string(), "--upstream", &upstream, "--admin", &admin];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["--tls-cert".into(), cert, "--tls-key".into(), key]);
        args
    })
    .await;
    for i in 0..FLOOD {
        if i % 2 == 0 {
            send_and_wait_close(proxy.addr(), b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
        } else {
            send_and_wait_close(proxy.addr(), b"\x00\x01\x02\x03 garbage\r\n\r\n").await;
        }
    }
    wait_for_count(admin.addr(), FAILURES, &[("reason", "plain_http")], FLOOD / 2).await;
    wait_for_count(admin.addr(), FAILURES, &[("reason", "bad_message")], FLOOD / 2).await;
    let stderr = proxy.stderr();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("TLS handshakes failed since the last report"))
        .collect();
    // The start's own probe connection and the flood: one line, two at most.
    assert!((1..=2).contains(&lines.len()), "{} lines:\n{stderr}", lines.len());
    assert!(lines.iter().all(|l| l.contains(" INFO ")), "{stderr}");
    // Each failure on its own is a debug line, not shown at info.
    assert!(!stderr.contains("TLS handshake failed"), "{stderr}");
}
