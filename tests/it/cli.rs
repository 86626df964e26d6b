//! The binary's command line: `holdfast check`, quick mode and `--config`.

use std::process::{Command, Output};

use http::StatusCode;

use crate::support::{ChildProxy, HttpClient, Origin, TempDir};

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
        // A new client connection each time; the upstream connection stays.
        let mut client = HttpClient::connect(proxy.addr()).await;
        let reply = client.get(&format!("/quick/{i}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", proxy.stderr());
        assert_eq!(reply.header("x-path"), Some(format!("/quick/{i}").as_str()));
        // The echo route lists the headers the origin received.
        assert!(reply.text().contains("x-forwarded-for: 127.0.0.1\n"), "{}", reply.text());
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
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
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

    // SIGHUP: the same client connection's next requests follow the new file.
    write(proxy.addr(), second.addr(), "");
    proxy.signal(nix::sys::signal::Signal::SIGHUP);
    let mut moved = false;
    for _ in 0..200 {
        if origin_of(client.get("/").await) == Some(second.addr().to_string()) {
            moved = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(moved, "SIGHUP did not apply the new file: {}", proxy.stderr());

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
    assert!(proxy.stderr().contains("reload rejected"), "{}", proxy.stderr());
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
