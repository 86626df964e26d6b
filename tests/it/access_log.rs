//! The access log through the real proxy: one line per request with the upstream
//! server, timings and the reused flag; JSON and text; reopened on SIGUSR1. And the
//! `holdfast stats` live view against a running binary.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast::{AccessLogConfig, AccessLogFormat, AccessLogTarget};
use http::Method;
use http_body_util::{BodyExt, Empty};
use serde_json::Value;

use crate::support::{
    config_for, config_to, request, wait_until, ChildProxy, ClosedPort, Origin, Proxy,
    ReservedPort, TempDir, DEADLINE,
};

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(String::from).collect()
}

async fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    wait_until(&format!("{n} access log lines"), DEADLINE, || read_lines(path).len() >= n).await;
    read_lines(path)
}

fn json_log(dir: &TempDir) -> AccessLogConfig {
    AccessLogConfig {
        target: AccessLogTarget::File(dir.path().join("access.log")),
        format: AccessLogFormat::Json,
    }
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

fn seconds(v: &Value, field: &str) -> f64 {
    v[field].as_f64().unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

#[tokio::test]
async fn json_lines_name_the_server_and_say_whether_the_connection_was_reused() {
    let origin = Origin::start().await;
    let dir = TempDir::new("access-json");
    let mut config = config_for(&origin);
    config.access_log = json_log(&dir);
    let proxy = Proxy::start(config).await;
    let mut client = proxy.client().await;
    assert_eq!(client.get("/first").await.status, 200);
    let mut second = request(Method::GET, "/second?x=1", Empty::new().map_err(Into::into).boxed());
    second.headers_mut().insert("user-agent", "access-log-test/1".parse().unwrap());
    second.headers_mut().insert("referer", "http://example.test/".parse().unwrap());
    let resp = client.send(second).await;
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(client.get("/bytes/1000").await.body.len(), 1000);

    let path = dir.path().join("access.log");
    let lines = wait_lines(&path, 3).await;
    assert_eq!(lines.len(), 3, "{lines:?}");
    let (first, second, third) = (parse(&lines[0]), parse(&lines[1]), parse(&lines[2]));
    let fields = [
        "time",
        "client",
        "method",
        "path",
        "protocol",
        "host",
        "status",
        "bytes",
        "referer",
        "user_agent",
        "upstream",
        "upstream_addr",
        "upstream_status",
        "reused",
        "retried",
        "upstream_connect_time",
        "upstream_header_time",
        "upstream_response_time",
        "request_time",
        "completed",
        "error",
        "tls_version",
        "alpn",
    ];
    for field in fields {
        assert!(first.get(field).is_some(), "{field} missing from {first}");
    }
    let origin_addr = origin.addr().to_string();
    assert_eq!(first["reused"], false);
    assert_eq!(second["reused"], true);
    assert_eq!(third["reused"], true);
    for line in [&first, &second, &third] {
        assert_eq!(line["upstream"], "default");
        assert_eq!(line["upstream_addr"], origin_addr.as_str());
        assert_eq!(
            (line["status"].as_u64(), line["upstream_status"].as_u64()),
            (Some(200), Some(200))
        );
        assert_eq!(line["method"], "GET");
        assert_eq!(line["protocol"], "HTTP/1.1");
        assert_eq!(line["completed"], true);
        assert_eq!(line["retried"], false);
        assert!(line["error"].is_null());
        assert!(line["client"].as_str().unwrap().starts_with("127.0.0.1:"));
        let (header, response, total) = (
            seconds(line, "upstream_header_time"),
            seconds(line, "upstream_response_time"),
            seconds(line, "request_time"),
        );
        assert!(seconds(line, "upstream_connect_time") <= header, "{line}");
        assert!(header <= response && response <= total, "{line}");
    }
    assert_eq!(second["path"], "/second?x=1");
    assert_eq!(second["user_agent"], "access-log-test/1");
    assert_eq!(second["referer"], "http://example.test/");
    assert_eq!(second["host"], "holdfast.test");
    assert_eq!(second["bytes"].as_u64(), Some(body.len() as u64));
    assert_eq!(third["bytes"].as_u64(), Some(1000));
}

#[tokio::test]
async fn a_failed_connect_is_logged_with_its_reason_and_no_connection() {
    let closed = ClosedPort::new();
    let dead = closed.addr();
    let dir = TempDir::new("access-error");
    let mut config = config_to(dead);
    config.access_log = json_log(&dir);
    let proxy = Proxy::start(config).await;
    assert_eq!(proxy.client().await.get("/nobody-home").await.status, 502);
    let line = parse(&wait_lines(&dir.path().join("access.log"), 1).await[0]);
    assert_eq!(line["status"], 502);
    assert_eq!(line["error"], "connect_refused");
    assert_eq!(line["upstream_addr"], dead.to_string());
    assert!(line["reused"].is_null() && line["upstream_status"].is_null(), "{line}");
    assert!(line["upstream_header_time"].is_null(), "{line}");
    assert_eq!(line["completed"], true);
}

#[cfg(unix)]
#[tokio::test]
async fn text_lines_from_the_binary_and_sigusr1_reopens_the_file() {
    let origin = Origin::start().await;
    let dir = TempDir::new("access-text");
    let path = dir.path().join("access.log");
    let (upstream, log) = (origin.addr().to_string(), path.display().to_string());
    let proxy = ChildProxy::launch(|listen| {
        let args = ["--listen", &listen.to_string(), "--upstream", &upstream, "--access-log", &log];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["--access-log-format".into(), "text".into()]);
        args
    })
    .await;
    let mut client = crate::support::HttpClient::connect(proxy.addr()).await;
    client.get("/t?q=1").await;
    client.get("/t?q=2").await;
    let lines = wait_lines(&path, 2).await;
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
    assert!(lines[0].contains("] \"GET /t?q=1 HTTP/1.1\" 200 "), "{}", lines[0]);
    for (line, reused) in lines.iter().zip(["reused=0", "reused=1"]) {
        assert!(line.contains(&format!("upstream_addr={upstream} ")), "{line}");
        assert!(line.contains(reused) && line.contains(" completed=1"), "{line}");
        assert!(
            line.contains(" uct=") && line.contains(" uht=") && line.contains(" rt="),
            "{line}"
        );
    }

    // Rotation: move the file away, signal, and new lines land in a new file.
    let rotated = dir.path().join("access.log.1");
    std::fs::rename(&path, &rotated).unwrap();
    proxy.signal(nix::sys::signal::Signal::SIGUSR1);
    let start = tokio::time::Instant::now();
    // Bounded by DEADLINE; each round sends one request. Signal delivery is
    // asynchronous, so a request or two may still go to the rotated file.
    while read_lines(&path).is_empty() && start.elapsed() < DEADLINE {
        client.get("/after-rotation").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(read_lines(&path)[0].contains("/after-rotation"));
    assert!(read_lines(&rotated).len() >= 2);
}

#[tokio::test]
async fn stats_shows_a_live_row_per_server_from_the_admin_listener() {
    let origin = Origin::start().await;
    let upstream = origin.addr().to_string();
    let reserved = ReservedPort::new();
    let admin = reserved.addr();
    let proxy = ChildProxy::launch(move |listen| {
        ["--listen", &listen.to_string(), "--upstream", &upstream, "--admin", &admin.to_string()]
            .iter()
            .map(|s| s.to_string())
            .collect()
    })
    .await;
    wait_until("the admin listener accepts", DEADLINE, || {
        std::net::TcpStream::connect(admin).is_ok()
    })
    .await;
    let mut client = crate::support::HttpClient::connect(proxy.addr()).await;
    client.get("/warm-up").await;
    let running = Arc::new(AtomicBool::new(true));
    let traffic = tokio::spawn({
        let running = Arc::clone(&running);
        async move {
            let start = tokio::time::Instant::now();
            // Bounded by DEADLINE; each round is one request.
            while running.load(Ordering::Relaxed) && start.elapsed() < DEADLINE {
                client.get("/load").await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args(["stats", "--admin", &admin.to_string(), "--count", "1", "--interval", "500ms"])
            .output()
            .expect("run holdfast stats")
    })
    .await
    .unwrap();
    running.store(false, Ordering::Relaxed);
    traffic.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stats failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("REUSE%"), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.contains(&origin.addr().to_string()))
        .unwrap_or_else(|| panic!("no row for the origin in:\n{stdout}"));
    // One keep-alive client, one pooled connection: every request in the interval
    // reused it.
    assert!(row.starts_with("default") && row.contains(" 100.0 "), "{row}");
}
