//! The binary's command line: `holdfast check`, quick mode, `--config`, `--backlog`,
//! `holdfast reload` and `holdfast health`.

use std::process::{Command, Output};

use http::StatusCode;

use crate::support::{
    skip_or_fail, wait_until, ChildProxy, HttpClient, Origin, RawClient, ReservedPort, TempDir,
    DEADLINE,
};

fn holdfast(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run holdfast")
}

#[test]
fn check_rejects_a_bad_config_naming_file_line_and_key() {
    let dir = TempDir::new("check-bad");
    let path = dir.write(
        "holdfast.toml",
        r#"[[listener]]
address = "127.0.0.1:8080"
upstream = "app"

[upstream.app]
servers = ["127.0.0.1:9000"]

[pool]
idle_timeout = "soon"

[timeouts]
connect = "0s"
"#,
    );
    let out = holdfast(&["check", path.to_str().unwrap()]);
    assert!(!out.status.success(), "check accepted a bad config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = path.display();
    // Every problem, each with file:line: key.
    assert!(stderr.contains(&format!("{file}:9: pool.idle_timeout: ")), "stderr: {stderr}");
    assert!(stderr.contains(&format!("{file}:12: timeouts.connect: ")), "stderr: {stderr}");
}

#[test]
fn check_rejects_an_unknown_key_naming_its_line() {
    let dir = TempDir::new("check-unknown");
    let path = dir.write(
        "holdfast.toml",
        r#"[[listener]]
address = "127.0.0.1:8080"
upstream = "app"

[upstream.app]
servers = ["127.0.0.1:9000"]
idle_timout = "4s"
"#,
    );
    let out = holdfast(&["check", path.to_str().unwrap()]);
    assert!(!out.status.success(), "check accepted an unknown key");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{}:7:", path.display())), "stderr: {stderr}");
    assert!(stderr.contains("idle_timout"), "stderr: {stderr}");
}

#[test]
fn check_reports_every_unknown_key_and_bad_value_in_one_run() {
    let dir = TempDir::new("check-all");
    let path = dir.write(
        "holdfast.toml",
        r#"[[listener]]
address = "127.0.0.1:8080"
upstream = "app"
adress = "127.0.0.1:8081"

[upstream.app]
servers = ["127.0.0.1:9000"]
balance = "fastest"

[upstream.app.pool]
idle_timout = "4s"

[timeouts]
connect = "0s"
"#,
    );
    let out = holdfast(&["check", path.to_str().unwrap()]);
    assert!(!out.status.success(), "check accepted a bad config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = path.display();
    for expected in [
        format!("{file}:4: listener[0].adress: unknown key; did you mean `address`?"),
        format!("{file}:8: upstream.app.balance: unknown balance policy \"fastest\""),
        format!(
            "{file}:11: upstream.app.pool.idle_timout: unknown key; did you mean `idle_timeout`?"
        ),
        format!("{file}:14: timeouts.connect: must be more than 0"),
    ] {
        assert!(stderr.contains(&expected), "missing {expected:?} in:\n{stderr}");
    }
    assert_eq!(stderr.lines().count(), 4, "{stderr}");
}

#[test]
fn check_accepts_a_good_config() {
    let dir = TempDir::new("check-good");
    let path = dir.write(
        "holdfast.toml",
        r#"threads = 2

[[listener]]
address = "127.0.0.1:8080"
upstream = "app"

[upstream.app]
servers = ["127.0.0.1:9000", "127.0.0.1:9001"]

[upstream.app.pool]
idle_timeout = "2s"
max_requests = 1000

[timeouts]
connect = "1s"
response_header = "30s"

[limits]
max_request_headers = 50
"#,
    );
    let out = holdfast(&["check", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "check refused a good config: {stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn running_without_listen_or_config_exits_with_a_hint() {
    let out = holdfast(&[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_mode_binary_proxies_and_reuses_its_upstream_connection() {
    let origin = Origin::start().await;
    let proxy = ChildProxy::quick(origin.addr()).await;
    for i in 0..3 {
        // A new client connection each time; the upstream connection stays. The client
        // asks holdfast to close its connection and reads to the end: holdfast closes
        // only after the upstream connection went back to its pool, so the next request
        // cannot race the return.
        let mut client = RawClient::connect(proxy.addr()).await;
        client
            .send(format!("GET /quick/{i} HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n"))
            .await;
        let reply = client.response_then_close().await.expect("a response");
        assert_eq!(reply.status, 200, "{}", proxy.stderr());
        assert_eq!(reply.header("x-path"), Some(format!("/quick/{i}").as_str()));
        // The echo route lists the headers the origin received.
        let text = reply.body_text();
        assert!(text.contains("x-forwarded-for: 127.0.0.1\n"), "{text}");
    }
    assert_eq!(origin.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_binary_proxies_with_its_pool_settings() {
    let origin = Origin::start().await;
    let dir = TempDir::new("config-run");
    let upstream = origin.addr();
    let proxy = ChildProxy::launch(|listen| {
        let path = dir.write(
            "holdfast.toml",
            &format!(
                "threads = 2\n\n[[listener]]\naddress = \"{listen}\"\nupstream = \"app\"\n\n\
                 [upstream.app]\nservers = [\"{upstream}\"]\n\n\
                 [upstream.app.pool]\nmax_requests = 2\n"
            ),
        );
        vec!["--config".to_string(), path.display().to_string()]
    })
    .await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    for i in 0..4 {
        assert_eq!(client.get(&format!("/cfg/{i}")).await.status, StatusCode::OK);
    }
    // max_requests = 2 from the file: 4 requests need 2 connections.
    assert_eq!(origin.accepted(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_mode_resolves_a_host_name_upstream() {
    let origin = Origin::start().await;
    let upstream = format!("localhost:{}", origin.addr().port());
    let proxy = ChildProxy::launch(|listen| {
        let args = ["--listen", &listen.to_string(), "--upstream", &upstream, "--threads", "2"];
        args.map(String::from).into()
    })
    .await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    let reply = client.get("/by-name").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", proxy.stderr());
    assert_eq!(reply.header("x-path"), Some("/by-name"));
}

#[test]
fn quick_mode_refuses_an_upstream_without_a_port() {
    let out = holdfast(&["--listen", "127.0.0.1:1", "--upstream", "localhost"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"localhost\" is not a server: no port"), "{stderr}");
}

/// The backlog of the socket listening on `addr`, as `ss -ltn` shows it (the Send-Q
/// column of a listening socket). `None` without `ss` (see [`skip_or_fail`]).
fn listen_backlog(addr: std::net::SocketAddr) -> Option<u32> {
    let filter = format!("sport = :{}", addr.port());
    let out = match Command::new("ss").args(["-ltn", &filter]).output() {
        Ok(out) => out,
        Err(e) => {
            skip_or_fail(&format!("this test needs `ss` (iproute2): {e}"));
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // State Recv-Q Send-Q Local-Address:Port Peer-Address:Port
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(3) == Some(addr.to_string().as_str()))
        .unwrap_or_else(|| panic!("no listening socket on {addr} in:\n{text}"));
    let send_q = line.split_whitespace().nth(2).expect("a Send-Q column");
    Some(send_q.parse().expect("Send-Q is a number"))
}

/// The backlog holdfast uses by default: nginx's 511, or less if the kernel allows less.
fn default_backlog() -> u32 {
    let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|t| t.trim().parse().ok());
    somaxconn.map_or(511, |max: u32| max.min(511))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_listen_with_the_configured_or_default_backlog() {
    let origin = Origin::start().await;
    let dir = TempDir::new("backlog");
    let reserved = ReservedPort::new();
    let other = reserved.addr();
    let upstream = origin.addr();
    let proxy = ChildProxy::launch(|listen| {
        let path = dir.write(
            "holdfast.toml",
            &format!(
                "[[listener]]\naddress = \"{listen}\"\nupstream = \"app\"\nbacklog = 37\n\n\
                 [[listener]]\naddress = \"{other}\"\nupstream = \"app\"\n\n\
                 [upstream.app]\nservers = [\"{upstream}\"]\n"
            ),
        );
        vec!["--config".to_string(), path.display().to_string(), "--threads".into(), "1".into()]
    })
    .await;
    let Some(configured) = listen_backlog(proxy.addr()) else { return };
    assert_eq!(configured, 37, "{}", proxy.stderr());
    assert_eq!(listen_backlog(other), Some(default_backlog()));
    drop(proxy);

    // --backlog sets it in quick mode.
    let proxy = ChildProxy::launch(|listen| {
        let args = ["--listen", &listen.to_string(), "--upstream", &upstream.to_string()];
        let flags = ["--backlog", "42", "--threads", "1"];
        args.iter().chain(&flags).map(|a| a.to_string()).collect()
    })
    .await;
    assert_eq!(listen_backlog(proxy.addr()), Some(42), "{}", proxy.stderr());
}

/// Parses "N opened" from the demo's "upstream connections" line of one path.
fn opened_in(report: &str, path_heading: &str) -> u64 {
    let section = report.split(path_heading).nth(1).expect("path section in the report");
    let line =
        section.lines().find(|l| l.contains("upstream connections")).expect("connections line");
    let n = line.split_whitespace().nth(2).expect("a count").replace(',', "");
    n.parse().expect("a number of connections")
}

#[test]
fn demo_shows_reuse_against_a_no_reuse_path() {
    let out = holdfast(&["demo", "--seconds", "1", "--concurrency", "4"]);
    assert!(out.status.success(), "demo failed: {}", String::from_utf8_lossy(&out.stderr));
    let report = String::from_utf8_lossy(&out.stdout);
    // Four keep-alive clients need about four pooled upstream connections (a loaded
    // machine may retire and replace one or two)...
    let reused_path = opened_in(&report, "\nreuse (");
    assert!((1..=8).contains(&reused_path), "reuse path opened {reused_path}: {report}");
    // ...while the no-reuse path opens one per request.
    let no_reuse_path = opened_in(&report, "\nno reuse (");
    assert!(no_reuse_path > 100, "no-reuse path opened {no_reuse_path}: {report}");
    assert_eq!(report.matches(", 0 errors").count(), 2, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_the_reload_command_apply_a_changed_config_file() {
    let (first, second) = (Origin::start().await, Origin::start().await);
    let dir = TempDir::new("reload-binary");
    // Held for the whole test, as the file names the same admin address each time.
    let reserved = ReservedPort::new();
    let admin = reserved.addr();
    let write = |listen: std::net::SocketAddr, server: std::net::SocketAddr, extra: &str| {
        dir.write(
            "holdfast.toml",
            &format!(
                "threads = 2\n\n[admin]\naddress = \"{admin}\"\n\n[[listener]]\n\
                 address = \"{listen}\"\nupstream = \"app\"\n\n[upstream.app]\n\
                 servers = [\"{server}\"]\n{extra}"
            ),
        )
    };
    let proxy = ChildProxy::launch(|listen| {
        let path = write(listen, first.addr(), "");
        vec!["--config".to_string(), path.display().to_string()]
    })
    .await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    let origin_of =
        |reply: crate::support::client::Reply| reply.header("x-origin").map(String::from);
    assert_eq!(origin_of(client.get("/").await), Some(first.addr().to_string()));

    // SIGHUP: the change is logged, as `holdfast reload` would print it, once the new
    // config is in force...
    write(proxy.addr(), second.addr(), "");
    proxy.signal(nix::sys::signal::Signal::SIGHUP);
    let logged = format!(
        "config reloaded: upstream app: added server {}; removed server {}",
        second.addr(),
        first.addr()
    );
    wait_until("the reload is logged", DEADLINE, || proxy.stderr().contains(&logged)).await;
    // ...and the same client connection's next request follows the new file.
    assert_eq!(origin_of(client.get("/").await), Some(second.addr().to_string()));

    // `holdfast reload --config FILE` finds the admin listener in the file.
    let path = write(proxy.addr(), first.addr(), "");
    let out = holdfast(&["reload", "--config", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("reloaded: "));
    assert_eq!(origin_of(client.get("/").await), Some(first.addr().to_string()));

    // A broken file: the command fails naming the line and key; nothing changes.
    let path = write(proxy.addr(), second.addr(), "balance = \"fastest\"\n");
    let out = holdfast(&["reload", "--admin", &admin.to_string()]);
    assert!(!out.status.success(), "a broken file was accepted");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{}:", path.display())), "{stderr}");
    assert!(stderr.contains("upstream.app.balance"), "{stderr}");
    assert_eq!(origin_of(client.get("/").await), Some(first.addr().to_string()));
    // holdfast logs the rejection before it answers the command, but the test reads
    // the child's stderr on a thread of its own, which may not have got there yet.
    wait_until("the rejection is logged", DEADLINE, || proxy.stderr().contains("reload rejected"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_command_prints_the_servers_added_and_removed() {
    let (first, second) = (Origin::start().await, Origin::start().await);
    let dir = TempDir::new("reload-diff");
    // Held for the whole test, as the file names the same admin address each time.
    let reserved = ReservedPort::new();
    let admin = reserved.addr();
    let write = |listen: std::net::SocketAddr, server: std::net::SocketAddr| {
        dir.write(
            "holdfast.toml",
            &format!(
                "threads = 1\n\n[admin]\naddress = \"{admin}\"\n\n[[listener]]\n\
                 address = \"{listen}\"\nupstream = \"app\"\n\n[upstream.app]\n\
                 servers = [\"{server}\"]\n"
            ),
        )
    };
    let proxy = ChildProxy::launch(|listen| {
        let path = write(listen, first.addr());
        vec!["--config".to_string(), path.display().to_string()]
    })
    .await;
    write(proxy.addr(), second.addr());
    let out = holdfast(&["reload", "--admin", &admin.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "reloaded: 1 change\nupstream app: added server {}; removed server {}\n",
            second.addr(),
            first.addr()
        )
    );
    // The running holdfast logs the same.
    let logged = format!("config reloaded: upstream app: added server {}", second.addr());
    wait_until("the reload is logged", DEADLINE, || proxy.stderr().contains(&logged)).await;

    let out = holdfast(&["reload", "--admin", &admin.to_string()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "reloaded: no changes\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_command_exits_0_while_holdfast_serves_and_1_when_nothing_listens() {
    let origin = Origin::start().await;
    let dir = TempDir::new("health");
    // Held for the whole test, as the file names the admin address.
    let reserved = ReservedPort::new();
    let admin = reserved.addr().to_string();
    let proxy = ChildProxy::launch(|listen| {
        let path = dir.write(
            "holdfast.toml",
            &format!(
                "threads = 1\n\n[admin]\naddress = \"{admin}\"\n\n[[listener]]\n\
                 address = \"{listen}\"\nupstream = \"app\"\n\n[upstream.app]\n\
                 servers = [\"{}\"]\n",
                origin.addr()
            ),
        );
        vec!["--config".to_string(), path.display().to_string()]
    })
    .await;
    let path = dir.path().join("holdfast.toml");
    for args in [["health", "--admin", &admin], ["health", "--config", path.to_str().unwrap()]] {
        let out = holdfast(&args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!((out.stdout.len(), out.stderr.len()), (0, 0), "{args:?} is silent");
    }
    drop(proxy);

    // Nothing listens there any more: exit 1, one line naming the address and why.
    let out = holdfast(&["health", "--admin", &admin]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("holdfast health: GET /healthz"), "{stderr}");
    assert!(stderr.contains(&admin) && stderr.contains("connection refused"), "{stderr}");

    // A config file without [admin]: there is nothing to ask.
    let path = dir.write(
        "no-admin.toml",
        &format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\nupstream = \"app\"\n\n\
             [upstream.app]\nservers = [\"{}\"]\n",
            origin.addr()
        ),
    );
    let out = holdfast(&["health", "--config", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("has no [admin] section"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_command_exits_1_while_holdfast_drains() {
    let origin = Origin::start().await;
    let proxy = crate::support::Proxy::start(crate::support::config_with_admin(&origin)).await;
    let admin = proxy.admin().to_string();
    let health = |admin: String| async move {
        tokio::task::spawn_blocking(move || holdfast(&["health", "--admin", &admin]))
            .await
            .expect("holdfast health ran")
    };
    assert!(health(admin.clone()).await.status.success());
    let mut client = proxy.client().await;
    // Held at the origin until the probe below has run: draining lasts that long.
    let slow = tokio::spawn(async move { client.get("/hold/slow").await });
    wait_until("the slow request reaches the origin", DEADLINE, || origin.request_count() == 1)
        .await;
    let shutdown = tokio::spawn(proxy.shutdown(std::time::Duration::from_secs(5)));
    let mut out = health(admin.clone()).await;
    let start = tokio::time::Instant::now();
    // Shutdown marks draining on its own task: until then the probe may still pass.
    // Bounded by DEADLINE; each round runs the probe once.
    while out.status.success() && start.elapsed() < DEADLINE {
        out = health(admin.clone()).await;
    }
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "holdfast health: GET /healthz to the admin listener at {admin} answered \
             503 Service Unavailable: draining\n"
        )
    );
    origin.release("slow");
    assert_eq!(crate::support::within("the slow request", slow).await.unwrap().status, 200);
    crate::support::within("shutdown", shutdown).await.unwrap();
}

#[test]
fn every_example_config_passes_check() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&examples).expect("examples/") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = holdfast(&["check", path.to_str().unwrap()]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            checked += 1;
        }
    }
    assert!(checked >= 2, "only {checked} example configs found");
}
