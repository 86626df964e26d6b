//! TLS to origins, against a rustls origin that counts connections and handshakes:
//! one pooled TLS connection for sequential requests, a resumed session after the origin
//! closes an idle one, few handshakes under concurrency, verification failures as 502s
//! (and health), `insecure_skip_verify`, `server_name`, client certificates, pools kept
//! apart by name; and the config errors of TLS settings.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use holdfast::Config;
use http::{header, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Empty};

use crate::support::client::Reply;
use crate::support::tls::{
    parse_config, run_tool, toml_path, Ca, Pki, TlsOrigin, TlsOriginOptions,
};
use crate::support::{
    request, wait_for_count, wait_until, within, ChildProxy, HttpClient, Metrics, Proxy,
    ReservedPort, DEADLINE,
};

/// `holdfast_backend_tls_handshakes_total` by upstream, backend and session.
const BACKEND_HANDSHAKES: &str = "holdfast_backend_tls_handshakes_total";

/// A config: an admin listener, and a cleartext listener on `127.0.0.1:0` in front of
/// the group `app` of one `https://` server, `origin`, with `group` written after its
/// `servers` (its `[upstream.app.tls]`, ...).
fn to_tls_origin(origin: SocketAddr, group: &str) -> Config {
    parse_config(&format!(
        "[admin]\naddress = \"127.0.0.1:0\"\n\n[[listener]]\naddress = \"127.0.0.1:0\"\n\
         upstream = \"app\"\n\n[upstream.app]\nservers = [\"https://{origin}\"]\n{group}\n"
    ))
}

/// `GET path` with `Host: host` on `client`: the status, the response headers, the body.
async fn get_host(client: &mut HttpClient, host: &str, path: &str) -> Reply {
    let mut req = request(Method::GET, path, Empty::<Bytes>::new().map_err(Into::into).boxed());
    req.headers_mut().insert(header::HOST, HeaderValue::from_str(host).expect("a host"));
    let resp = client.send(req).await;
    let (parts, body) = resp.into_parts();
    let body = within("response body", body.collect()).await.expect("body").to_bytes();
    Reply { status: parts.status, headers: parts.headers, body }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_mode_https_upstream_keeps_one_tls_connection() {
    let pki = Pki::new("origin-quick");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    let origin = TlsOrigin::start(&leaf, TlsOriginOptions::default()).await;
    let admin = ReservedPort::new();
    let proxy = ChildProxy::launch(|listen| {
        let upstream = format!("https://{}", origin.addr());
        let ca = pki.ca_file.display().to_string();
        let admin = admin.addr().to_string();
        let args = ["--listen", &listen.to_string(), "--upstream", &upstream, "--upstream-ca", &ca];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["--admin".into(), admin, "--threads".into(), "2".into()]);
        args
    })
    .await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    for i in 0..20 {
        let reply = client.get(&format!("/seq/{i}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.text(), format!("tls origin: /seq/{i}\n"));
        // An IP address: verified against the IP SAN, no SNI sent.
        assert_eq!(reply.header("x-sni"), Some("-"));
    }
    // A bug once had the liveness probe discard every pooled TLS connection (the session
    // tickets after the handshake looked like stray bytes): 20 requests made 20.
    assert_eq!(origin.accepted(), 1, "handshakes: {:?}", origin.handshakes());
    assert_eq!(origin.handshakes().len(), 1);
    let labels = [("upstream", "default"), ("session", "full")];
    wait_for_count(admin.addr(), BACKEND_HANDSHAKES, &labels, 1).await;
    let metrics = Metrics::scrape(admin.addr()).await;
    assert_eq!(metrics.count_or_zero(BACKEND_HANDSHAKES, &[("session", "resumed")]), 0);
    let durations = "holdfast_backend_tls_handshake_duration_seconds_count";
    assert_eq!(metrics.count_or_zero(durations, &[]), 1, "{}", metrics.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_update_on_an_idle_pooled_connection_does_not_discard_it() {
    let pki = Pki::new("origin-key-update");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    let options = TlsOriginOptions { key_update_when_idle: true, ..Default::default() };
    let origin = TlsOrigin::start(&leaf, options).await;
    let tls = format!("[upstream.app.tls]\nca = {}", toml_path(&pki.ca_file));
    let proxy = Proxy::start(to_tls_origin(origin.addr(), &tls)).await;
    let mut client = proxy.client().await;
    for i in 1..=5 {
        let reply = client.get(&format!("/{i}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.header("x-conn"), Some("1"), "request {i}");
        // The origin's KeyUpdate is in holdfast's socket before the next request.
        wait_until("the origin updates its keys", DEADLINE, || origin.key_updates() == i).await;
    }
    // Session housekeeping, not stray bytes: the pooled connection carried on.
    assert_eq!(origin.accepted(), 1);
    assert_eq!(origin.requests(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_closing_an_idle_tls_connection_gets_a_resumed_one_next() {
    let pki = Pki::new("origin-resume");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    let options =
        TlsOriginOptions { idle_close: Some(Duration::from_millis(300)), ..Default::default() };
    let origin = TlsOrigin::start(&leaf, options).await;
    let tls = format!("[upstream.app.tls]\nca = {}", toml_path(&pki.ca_file));
    let proxy = Proxy::start(to_tls_origin(origin.addr(), &tls)).await;
    let mut client = proxy.client().await;

    let reply = client.get("/first").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-conn"), Some("1"));
    wait_until("the origin closes the idle connection", DEADLINE, || origin.closed() == 1).await;

    // The next request goes out on a new connection, which resumes the session.
    let reply = client.get("/second").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-conn"), Some("2"));
    let handshakes = origin.handshakes();
    assert_eq!(handshakes.len(), 2, "{handshakes:?}");
    assert!(!handshakes[0].resumed && handshakes[1].resumed, "{handshakes:?}");
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.count_or_zero(BACKEND_HANDSHAKES, &[("session", "full")]),
        1,
        "{}",
        metrics.text
    );
    assert_eq!(metrics.count_or_zero(BACKEND_HANDSHAKES, &[("session", "resumed")]), 1);
    assert_eq!(metrics.count_or_zero("holdfast_errors_total", &[]), 0, "{}", metrics.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_clients_share_few_upstream_tls_connections() {
    const CLIENTS: usize = 20;
    const REQUESTS: usize = 50;
    let pki = Pki::new("origin-concurrency");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    let origin = TlsOrigin::start(&leaf, TlsOriginOptions::default()).await;
    let tls = format!("[upstream.app.tls]\nca = {}", toml_path(&pki.ca_file));
    let proxy = Proxy::start(to_tls_origin(origin.addr(), &tls)).await;
    let addr = proxy.addr();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            tokio::spawn(async move {
                let mut client = HttpClient::connect(addr).await;
                let mut failed = Vec::new();
                for i in 0..REQUESTS {
                    let reply = client.get(&format!("/c{c}/{i}")).await;
                    if reply.status != StatusCode::OK {
                        failed.push(format!("{}: {}", reply.status, reply.text()));
                    }
                }
                failed
            })
        })
        .collect();
    for client in clients {
        let failed = within("a client's requests", client).await.expect("client task");
        assert!(failed.is_empty(), "{failed:?}");
    }
    assert_eq!(origin.requests(), CLIENTS * REQUESTS);
    let handshakes = origin.handshakes().len();
    assert!(
        handshakes <= 2 * CLIENTS,
        "{handshakes} upstream TLS handshakes for {CLIENTS} clients"
    );
    assert_eq!(origin.accepted(), handshakes, "failures: {:?}", origin.failures());
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.count_or_zero("holdfast_errors_total", &[]), 0, "{}", metrics.text);
    assert_eq!(metrics.count_or_zero(BACKEND_HANDSHAKES, &[]) as usize, handshakes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_origin_certificate_gives_502_naming_the_backend_and_the_tls_error() {
    let pki = Pki::new("origin-untrusted");
    let rogue = Ca::new("rogue CA").leaf("rogue", &["127.0.0.1"]);
    let origin = TlsOrigin::start(&rogue, TlsOriginOptions::default()).await;
    let group = format!("[upstream.app.tls]\nca = {}", toml_path(&pki.ca_file));
    let proxy = Proxy::start(to_tls_origin(origin.addr(), &group)).await;
    let mut client = proxy.client().await;
    let reply = client.get("/").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let text = reply.text();
    assert!(text.contains("app") && text.contains(&origin.addr().to_string()), "{text}");
    assert!(text.contains("TLS handshake failed"), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");
    assert_eq!(origin.requests(), 0);
    let metrics = proxy.metrics().await;
    let labels = [("upstream", "app"), ("reason", "tls_handshake"), ("status", "502")];
    assert_eq!(metrics.count_or_zero("holdfast_errors_total", &labels), 1, "{}", metrics.text);

    // Passive health counts it like a refused connect: with a good server beside it (a
    // lone backend is never ejected), two failures in a row take it out of service.
    let good = TlsOrigin::start(&pki.ca.leaf("good", &["127.0.0.1"]), Default::default()).await;
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nupstream = \"app\"\n\n[upstream.app]\n\
         servers = [\"https://{}\", \"https://{}\"]\nbalance = \"round_robin\"\n\
         [upstream.app.health]\nmax_connect_failures = 2\n[upstream.app.tls]\nca = {}\n",
        origin.addr(),
        good.addr(),
        toml_path(&pki.ca_file)
    );
    let proxy = Proxy::start(parse_config(&text)).await;
    let mut client = proxy.client().await;
    let rogue_ejections = || {
        let stats = proxy.stats();
        stats.iter().find(|s| s.backend == origin.addr()).expect("the rogue backend").ejections
    };
    // Round robin: every other request tries the rogue server; bounded by 10 requests.
    for _ in 0..10 {
        client.get("/").await;
        if rogue_ejections() > 0 {
            break;
        }
    }
    assert_eq!(rogue_ejections(), 1);
    // Out of service: every request now goes to the good server.
    let before = good.requests();
    for _ in 0..4 {
        assert_eq!(client.get("/").await.status, StatusCode::OK);
    }
    assert_eq!(good.requests(), before + 4);
    assert_eq!(origin.requests(), 0);

    // insecure_skip_verify takes the same certificate.
    let group = "[upstream.app.tls]\ninsecure_skip_verify = true";
    let insecure = Proxy::start(to_tls_origin(origin.addr(), group)).await;
    let reply = insecure.client().await.get("/insecure").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(origin.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_name_sets_the_name_verified_and_sent() {
    let pki = Pki::new("origin-server-name");
    // For a name only: not for the address it is served on.
    let leaf = pki.ca.leaf("origin", &["origin.test"]);
    let origin = TlsOrigin::start(&leaf, TlsOriginOptions::default()).await;
    let ca = toml_path(&pki.ca_file);

    let named = format!("[upstream.app.tls]\nca = {ca}\nserver_name = \"origin.test\"");
    let proxy = Proxy::start(to_tls_origin(origin.addr(), &named)).await;
    let reply = proxy.client().await.get("/named").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("x-sni"), Some("origin.test"));

    let unnamed = format!("[upstream.app.tls]\nca = {ca}");
    let proxy = Proxy::start(to_tls_origin(origin.addr(), &unnamed)).await;
    let reply = proxy.client().await.get("/unnamed").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let text = reply.text();
    assert!(text.contains(&origin.addr().to_string()), "{text}");
    assert!(text.contains("TLS handshake failed") && text.contains("not valid for name"), "{text}");
    assert_eq!(origin.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_is_presented_to_an_origin_that_requires_one() {
    let pki = Pki::new("origin-mtls");
    let leaf = pki.ca.leaf("origin", &["127.0.0.1"]);
    let client_ca = Ca::new("client CA");
    let client = client_ca.leaf("holdfast-client", &["holdfast.test"]).write(&pki.dir, "client");
    let options = TlsOriginOptions { client_roots: Some(client_ca.roots()), ..Default::default() };
    let origin = TlsOrigin::start(&leaf, options).await;
    let ca = toml_path(&pki.ca_file);

    let group = format!(
        "[upstream.app.tls]\nca = {ca}\nclient_cert = {}\nclient_key = {}",
        toml_path(&client.cert),
        toml_path(&client.key)
    );
    let proxy = Proxy::start(to_tls_origin(origin.addr(), &group)).await;
    let mut with_cert = proxy.client().await;
    for _ in 0..3 {
        let reply = with_cert.get("/mtls").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    }
    let handshakes = origin.handshakes();
    assert_eq!(handshakes.len(), 1, "{handshakes:?}");
    assert_eq!(handshakes[0].client.as_deref(), Some("holdfast-client"));

    let group = format!("[upstream.app.tls]\nca = {ca}");
    let proxy = Proxy::start(to_tls_origin(origin.addr(), &group)).await;
    let reply = proxy.client().await.get("/no-cert").await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let text = reply.text();
    assert!(text.contains(&origin.addr().to_string()), "{text}");
    // TLS 1.3: the origin refuses after holdfast's side of the handshake has finished,
    // so the refusal comes as an alert where the response was awaited.
    assert!(text.contains("CertificateRequired"), "{text}");
    // Counted as the failed handshake it is, not as an origin closing.
    let metrics = proxy.metrics().await;
    let labels = [("upstream", "app"), ("reason", "tls_handshake"), ("status", "502")];
    assert_eq!(metrics.count_or_zero("holdfast_errors_total", &labels), 1, "{}", metrics.text);
    assert_eq!(origin.requests(), 3);
    let failures = origin.failures();
    assert!(failures.iter().any(|f| f.contains("no certificates")), "{failures:?}");
}

// Pool identity.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_with_different_server_names_never_share_a_connection() {
    let pki = Pki::new("origin-pool-identity");
    let leaf = pki.ca.leaf("origin", &["a.test", "b.test", "c.test"]);
    let origin = TlsOrigin::start(&leaf, TlsOriginOptions::default()).await;
    let ca = toml_path(&pki.ca_file);
    let config = |a_name: &str| {
        format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n\n\
             [[route]]\nhost = \"a.example\"\nupstream = \"a\"\n\n\
             [[route]]\nhost = \"b.example\"\nupstream = \"b\"\n\n\
             [upstream.a]\nservers = [\"https://{o}\"]\n\
             [upstream.a.tls]\nca = {ca}\nserver_name = \"{a_name}\"\n\n\
             [upstream.b]\nservers = [\"https://{o}\"]\n\
             [upstream.b.tls]\nca = {ca}\nserver_name = \"b.test\"\n",
            o = origin.addr()
        )
    };
    let path = pki.dir.write("holdfast.toml", &config("a.test"));
    let proxy = Proxy::start_file(&path).await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    let mut conns = std::collections::BTreeMap::new();
    for i in 0..10 {
        let (host, sni) =
            if i % 2 == 0 { ("a.example", "a.test") } else { ("b.example", "b.test") };
        let reply = get_host(&mut client, host, &format!("/{i}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.header("x-sni"), Some(sni), "request {i} for {host}");
        let conn = reply.header("x-conn").expect("x-conn").to_string();
        let first = conns.entry(host).or_insert_with(|| conn.clone()).clone();
        assert_eq!(first, conn, "request {i} for {host} changed connection");
    }
    assert_eq!(origin.accepted(), 2);

    // A reload that changes a's name: a's next request goes out on a new connection with
    // the new name; b keeps its warm connection.
    std::fs::write(&path, config("c.test")).expect("rewrite the config");
    proxy.reload().await.expect("reload");
    let reply = get_host(&mut client, "a.example", "/after").await;
    assert_eq!(reply.header("x-sni"), Some("c.test"));
    assert_eq!(reply.header("x-conn"), Some("3"));
    let reply = get_host(&mut client, "b.example", "/after").await;
    assert_eq!(reply.header("x-sni"), Some("b.test"));
    assert_eq!(reply.header("x-conn").map(String::from), conns.get("b.example").cloned());
    let snis: Vec<Option<String>> = origin.handshakes().into_iter().map(|h| h.sni).collect();
    let expected = ["a.test", "b.test", "c.test"].map(|n| Some(n.to_string()));
    assert_eq!(snis, expected);
}

// Config errors.

/// The 1-based number of the line of `text` that is `line`.
fn line_of(text: &str, line: &str) -> usize {
    text.lines().position(|l| l == line).expect("the line is in the text") + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_file_line_and_key_of_bad_tls_settings() {
    let pki = Pki::new("tls-check");
    let (_, _good) = pki.localhost("server", "server");
    pki.ca.leaf("other", &["localhost"]).write(&pki.dir, "other");
    pki.ca.expired_leaf("expired", &["localhost"]).write(&pki.dir, "expired");
    // Paths are relative to the file's directory.
    let text = r#"[[listener]]
address = "127.0.0.1:0"
upstream = "app"
[listener.tls]
cert = "missing.pem"
key = "server.key"

[[listener]]
address = "127.0.0.1:0"
upstream = "app"
[listener.tls]
cert = "server.pem"
key = "other.key"

[[listener]]
address = "127.0.0.1:0"
upstream = "app"
[listener.tls]
cert = "expired.pem"
key = "expired.key"

[upstream.app]
servers = [
  "https://127.0.0.1:9443",
  "127.0.0.1:9000",
]

[upstream.other]
servers = ["https://127.0.0.1:9444"]
[upstream.other.tls]
server_nme = "other.test"

[upstream.mtls]
servers = ["https://127.0.0.1:9445"]
[upstream.mtls.tls]
client_cert = "server.pem"
client_key = "other.key"

[upstream.absent]
servers = ["https://127.0.0.1:9446"]
tls = { client_cert = "absent.pem", client_key = "server.key" }
"#;
    let path = pki.dir.write("holdfast.toml", text);
    let out =
        run_tool(env!("CARGO_BIN_EXE_holdfast"), &["check", &path.display().to_string()], b"")
            .await;
    assert!(!out.status.success(), "check accepted it");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = path.display();
    let dir = pki.dir.path().display();
    let at = |line: &str| line_of(text, line);
    let expect = [
        format!("{file}:{}: listener[0].tls.cert: {dir}/missing.pem: ", at(r#"cert = "missing.pem""#)),
        format!(
            "{file}:{}: listener[1].tls.key: {dir}/other.key does not belong to the certificate in {dir}/server.pem",
            at(r#"key = "other.key""#)
        ),
        format!(
            "{file}:{}: listener[2].tls.cert: {dir}/expired.pem: the certificate expired ",
            at(r#"cert = "expired.pem""#)
        ),
        format!(
            "{file}:{}: upstream.app.servers: mixes http://, https:// and h2c:// servers",
            at(r#"  "127.0.0.1:9000","#)
        ),
        format!(
            "{file}:{}: upstream.other.tls.server_nme: unknown key; did you mean `server_name`?",
            at(r#"server_nme = "other.test""#)
        ),
        // The client certificate's problems name its own keys.
        format!(
            "{file}:{}: upstream.mtls.tls.client_key: {dir}/other.key does not belong to the certificate in {dir}/server.pem",
            at(r#"client_key = "other.key""#)
        ),
        format!(
            "{file}:{}: upstream.absent.tls.client_cert: {dir}/absent.pem: ",
            at(r#"tls = { client_cert = "absent.pem", client_key = "server.key" }"#)
        ),
    ];
    for line in &expect {
        assert!(stderr.contains(line.as_str()), "expected {line:?} in:\n{stderr}");
    }
    // The same problems from the library's parse, one each.
    let e = Config::load(&path).expect_err("a config with seven problems");
    assert_eq!(e.problems.len(), expect.len(), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_mode_refuses_an_expired_certificate_and_mixed_upstreams() {
    let pki = Pki::new("tls-quick-errors");
    let expired = pki.ca.expired_leaf("expired", &["localhost"]).write(&pki.dir, "expired");
    let binary = env!("CARGO_BIN_EXE_holdfast");
    let (cert, key) = (expired.cert.display().to_string(), expired.key.display().to_string());
    let args = ["--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--tls-cert", &cert];
    let mut args = args.to_vec();
    args.extend(["--tls-key", &key]);
    let out = run_tool(binary, &args, b"").await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{cert}: the certificate expired")), "{stderr}");

    let args = ["--listen", "127.0.0.1:0", "--upstream", "https://127.0.0.1:9"];
    let mut args = args.to_vec();
    args.extend(["--upstream", "127.0.0.1:10"]);
    let out = run_tool(binary, &args, b"").await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("a mix of http://, https:// and h2c:// servers"), "{stderr}");
}
