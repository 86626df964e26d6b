//! Config sets: a main file that includes one file per app, reloaded as a whole (a new
//! app, a bad file, an app's servers replaced), and the settings a route carries of its
//! own: the listeners it applies on, its redirect to HTTPS, HSTS, timeouts and access
//! log, and certificates every TLS listener serves.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::support::tls::{presented, toml_path, Pki};
use crate::support::{
    wait_until, within, Origin, Proxy, RawClient, ReservedPort, TempDir, DEADLINE,
};

/// The main file: an admin listener, one cleartext listener at `listen`, and the apps.
fn main_file(listen: &str) -> String {
    format!(
        "include = [\"apps/*.toml\"]\n\n[admin]\naddress = \"127.0.0.1:0\"\n\n\
         [[listener]]\naddress = \"{listen}\"\n"
    )
}

/// One app's file: its group at `servers`, routed by `host`, with `extra` route keys.
fn app_file(name: &str, host: &str, servers: &[std::net::SocketAddr], extra: &str) -> String {
    let servers: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[upstream.{name}]\nservers = [{}]\n\n[[route]]\nhost = \"{host}\"\nupstream = \"{name}\"\n{extra}",
        servers.join(", ")
    )
}

async fn get(proxy: &Proxy, host: &str, path: &str) -> crate::support::client::RawResponse {
    let mut client = RawClient::connect(proxy.addr()).await;
    client.send(&format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")).await;
    client.response().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_app_file_is_applied_by_a_reload_and_a_bad_one_changes_nothing() {
    let (a, b) = (Origin::start().await, Origin::start().await);
    let dir = TempDir::new("include-apps");
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    let main = dir.write("holdfast.toml", &main_file("127.0.0.1:0"));
    dir.write("apps/a.toml", &app_file("a", "a.test", &[a.addr()], ""));
    let proxy = Proxy::start_file(&main).await;
    assert_eq!(get(&proxy, "a.test", "/").await.status, 200);
    assert_eq!(get(&proxy, "b.test", "/").await.status, 404);

    dir.write("apps/b.toml", &app_file("b", "b.test", &[b.addr()], ""));
    let report = proxy.reload().await.expect("the set is valid");
    assert!(report.contains("route b.test/: added (upstream b)"), "{report}");
    assert_eq!(get(&proxy, "b.test", "/").await.status, 200);
    assert_eq!(b.request_count(), 1);

    // A bad app file rejects the whole set: every app keeps the config in force.
    dir.write("apps/b.toml", "[upstream.b]\nservers = []\n");
    let e = proxy.reload().await.expect_err("an empty server list").to_string();
    assert!(e.contains("apps/b.toml:2: upstream.b.servers: needs at least one server"), "{e}");
    assert_eq!(get(&proxy, "b.test", "/").await.status, 200);
    assert_eq!(get(&proxy, "a.test", "/").await.status, 200);

    // Removing the file removes the app.
    std::fs::remove_file(dir.path().join("apps/b.toml")).unwrap();
    proxy.reload().await.expect("valid");
    assert_eq!(get(&proxy, "b.test", "/").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_returns_in_a_later_reload_is_a_new_server_with_an_empty_pool() {
    let (old, new) = (Origin::start().await, Origin::start().await);
    let dir = TempDir::new("include-return");
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    let main = dir.write("holdfast.toml", &main_file("127.0.0.1:0"));
    dir.write("apps/app.toml", &app_file("app", "app.test", &[old.addr()], ""));
    let proxy = Proxy::start_file(&main).await;
    assert_eq!(get(&proxy, "app.test", "/").await.status, 200);
    assert_eq!(old.accepted(), 1);

    // A deploy: the new instance replaces the old one, whose pooled connection closes.
    dir.write("apps/app.toml", &app_file("app", "app.test", &[new.addr()], ""));
    proxy.reload().await.expect("valid");
    wait_until("the retired server's idle connection closes", DEADLINE, || old.closed() == 1).await;
    assert_eq!(get(&proxy, "app.test", "/").await.status, 200);
    assert_eq!(new.request_count(), 1);

    // The old address comes back (Docker gives addresses out again): a new server,
    // reached on a new connection, never on one made before it left.
    dir.write("apps/app.toml", &app_file("app", "app.test", &[old.addr()], ""));
    proxy.reload().await.expect("valid");
    assert_eq!(get(&proxy, "app.test", "/").await.status, 200);
    assert_eq!(old.accepted(), 2);
    assert_eq!(old.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_stays_open_across_reloads_that_replace_its_apps_servers() {
    let (first, second) = (Origin::start().await, Origin::start().await);
    let dir = TempDir::new("include-websocket");
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    let main = dir.write("holdfast.toml", &main_file("127.0.0.1:0"));
    dir.write("apps/app.toml", &app_file("app", "ws.test", &[first.addr()], ""));
    let proxy = Proxy::start_file(&main).await;
    let tcp = TcpStream::connect(proxy.addr()).await.expect("connect");
    let (mut ws, _) =
        within("handshake", tokio_tungstenite::client_async("ws://ws.test/upgrade", tcp))
            .await
            .expect("websocket handshake through holdfast");
    for (i, servers) in [[second.addr()], [first.addr()], [second.addr()]].iter().enumerate() {
        dir.write("apps/app.toml", &app_file("app", "ws.test", servers, ""));
        proxy.reload().await.expect("valid");
        let text = format!("after reload {i}");
        within("send", ws.send(Message::text(text.clone()))).await.expect("send");
        let echoed = within("echo", ws.next()).await.expect("a message").expect("ok");
        assert_eq!(echoed, Message::text(text));
    }
    within("close", ws.close(None)).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_applies_only_on_its_listeners() {
    let (web, admin) = (Origin::start().await, Origin::start().await);
    let (public, private) = (ReservedPort::new(), ReservedPort::new());
    let dir = TempDir::new("include-listeners");
    let text = format!(
        "[[listener]]\naddress = \"{}\"\n[[listener]]\naddress = \"{}\"\n\
         [upstream.web]\nservers = [\"{}\"]\n[upstream.admin]\nservers = [\"{}\"]\n\
         [[route]]\nupstream = \"web\"\nlisteners = [\"{}\"]\n\
         [[route]]\nupstream = \"admin\"\nlisteners = [\"{}\"]\n",
        public.addr(),
        private.addr(),
        web.addr(),
        admin.addr(),
        public.addr(),
        private.addr()
    );
    let proxy = Proxy::start_file(&dir.write("holdfast.toml", &text)).await;
    let addrs = proxy.server().local_addrs().to_vec();
    for (addr, origin) in addrs.iter().zip([&web, &admin]) {
        let mut client = RawClient::connect(*addr).await;
        client.send("GET /x HTTP/1.1\r\nHost: any\r\n\r\n").await;
        assert_eq!(client.response().await.status, 200);
        assert_eq!(origin.request_count(), 1, "each listener reaches its own route");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_carry_their_own_redirect_timeouts_and_access_log() {
    let origin = Origin::start().await;
    let dir = TempDir::new("include-route-options");
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    let global_log = dir.path().join("access.log");
    let own_log = dir.path().join("secure.log");
    let main = dir.write(
        "holdfast.toml",
        &format!(
            "{}\n[access_log]\ntarget = {}\n",
            main_file("127.0.0.1:0"),
            toml_path(&global_log)
        ),
    );
    dir.write(
        "apps/plain.toml",
        &app_file("plain", "plain.test", &[origin.addr()], "read_timeout = \"200ms\"\n"),
    );
    dir.write(
        "apps/secure.toml",
        &app_file(
            "secure",
            "secure.test",
            &[origin.addr()],
            &format!("redirect_https = 8443\naccess_log = {}\n", toml_path(&own_log)),
        ),
    );
    let proxy = Proxy::start_file(&main).await;

    let redirected = get(&proxy, "secure.test", "/a?b=1").await;
    assert_eq!(redirected.status, 308);
    assert_eq!(redirected.header("location"), Some("https://secure.test:8443/a?b=1"));
    assert_eq!(get(&proxy, "plain.test", "/slow/50").await.status, 200);
    // The route's read timeout, not the default 60 s, bounds the wait for the head.
    let started = std::time::Instant::now();
    assert_eq!(get(&proxy, "plain.test", "/slow/3000").await.status, 504);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());

    let read = |path: &std::path::Path| std::fs::read_to_string(path).unwrap_or_default();
    wait_until("the route's own log has its line", DEADLINE, || read(&own_log).contains("/a?b=1"))
        .await;
    wait_until("the global log has the others", DEADLINE, || {
        read(&global_log).lines().count() == 2
    })
    .await;
    assert!(!read(&global_log).contains("secure.test"), "{}", read(&global_log));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn included_certificates_are_served_by_sni_with_each_routes_hsts() {
    let origin = Origin::start().await;
    let pki = Pki::new("include-certificates");
    std::fs::create_dir_all(pki.dir.path().join("apps")).unwrap();
    let a = pki.ca.leaf("cert-a", &["a.test"]).write(&pki.dir, "a");
    let b = pki.ca.leaf("cert-b", &["b.test"]).write(&pki.dir, "b");
    let main = pki.dir.write(
        "holdfast.toml",
        "include = [\"apps/*.toml\"]\n[[listener]]\naddress = \"127.0.0.1:0\"\ntls = {}\n",
    );
    for (name, files, extra) in
        [("a", &a, "hsts = \"1h\"\nhsts_include_subdomains = true\n"), ("b", &b, "")]
    {
        let host = format!("{name}.test");
        let text = format!(
            "{}\n[[certificate]]\n{}\n",
            app_file(name, &host, &[origin.addr()], extra),
            files.toml()
        );
        pki.dir.write(&format!("apps/{name}.toml"), &text);
    }
    let proxy = Proxy::start_file(&main).await;
    assert_eq!(presented(proxy.addr(), "a.test").await, "cert-a");
    assert_eq!(presented(proxy.addr(), "b.test").await, "cert-b");

    let config = pki.ca.client_config();
    for (host, hsts) in [("a.test", Some("max-age=3600; includeSubDomains")), ("b.test", None)] {
        let mut client =
            crate::support::tls::HttpsClient::connect(proxy.addr(), &config, host).await;
        let reply = client.get_host(host, "/").await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("strict-transport-security"), hsts, "{host}");
    }
}
