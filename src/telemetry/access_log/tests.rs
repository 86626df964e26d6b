use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{
    AccessEntry, AccessLog, AccessLogConfig, AccessLogFormat, AccessLogTarget, CHANNEL_LINES,
};

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("test address")
}

/// A proxied request with every field set; 2026-11-22T07:30:07.123Z.
fn entry() -> AccessEntry<'static> {
    AccessEntry {
        time: UNIX_EPOCH + Duration::from_millis(1_795_332_607_123),
        client: addr("127.0.0.1:54321"),
        method: "GET",
        target: "/path?q=1",
        version: http::Version::HTTP_11,
        host: Some("example.com"),
        status: 200,
        bytes: 1234,
        referer: Some("referer"),
        user_agent: Some("user-agent"),
        upstream: Some("default"),
        upstream_addr: Some(addr("127.0.0.1:8080")),
        upstream_status: Some(200),
        reused: Some(true),
        retried: false,
        upstream_connect_time: Some(Duration::from_micros(153)),
        upstream_header_time: Some(Duration::from_micros(1_200)),
        upstream_response_time: Some(Duration::from_micros(2_400)),
        request_time: Duration::from_micros(3_100),
        completed: true,
        error: None,
        tls_version: None,
        alpn: None,
    }
}

/// A request holdfast answered itself, before any upstream connection.
fn refused_entry() -> AccessEntry<'static> {
    AccessEntry {
        version: http::Version::HTTP_10,
        host: None,
        status: 502,
        bytes: 0,
        referer: None,
        user_agent: None,
        upstream_addr: None,
        upstream_status: None,
        reused: None,
        upstream_connect_time: None,
        upstream_header_time: None,
        upstream_response_time: None,
        completed: false,
        error: Some("connect_refused"),
        ..entry()
    }
}

fn json(entry: &AccessEntry<'_>) -> String {
    String::from_utf8(super::json_line(entry).expect("formats")).expect("JSON is UTF-8")
}

fn text(entry: &AccessEntry<'_>) -> String {
    String::from_utf8(super::text_line(entry).expect("formats")).expect("text is ASCII")
}

const JSON_FIELDS: [&str; 23] = [
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

#[test]
fn json_line_has_every_field_in_order() {
    let line = json(&entry());
    assert!(line.ends_with("}\n") && line.matches('\n').count() == 1, "{line}");
    let positions: Vec<usize> = JSON_FIELDS
        .iter()
        .map(|f| line.find(&format!("\"{f}\":")).unwrap_or_else(|| panic!("{f} in {line}")))
        .collect();
    assert!(positions.is_sorted(), "{line}");

    let v: serde_json::Value = serde_json::from_str(&line).expect("valid JSON");
    assert_eq!(v.as_object().expect("an object").len(), JSON_FIELDS.len());
    assert_eq!(v["time"], "2026-11-22T07:30:07.123Z");
    assert_eq!(v["client"], "127.0.0.1:54321");
    assert_eq!(v["method"], "GET");
    assert_eq!(v["path"], "/path?q=1");
    assert_eq!(v["protocol"], "HTTP/1.1");
    assert_eq!(v["host"], "example.com");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes"], 1234);
    assert_eq!(v["referer"], "referer");
    assert_eq!(v["user_agent"], "user-agent");
    assert_eq!(v["upstream"], "default");
    assert_eq!(v["upstream_addr"], "127.0.0.1:8080");
    assert_eq!(v["upstream_status"], 200);
    assert_eq!(v["reused"], true);
    assert_eq!(v["retried"], false);
    assert_eq!(v["upstream_connect_time"], 0.000153);
    assert_eq!(v["upstream_header_time"], 0.0012);
    assert_eq!(v["upstream_response_time"], 0.0024);
    assert_eq!(v["request_time"], 0.0031);
    assert_eq!(v["completed"], true);
    assert_eq!(v["error"], serde_json::Value::Null);
}

#[test]
fn json_line_writes_null_for_missing_values() {
    let v: serde_json::Value = serde_json::from_str(&json(&refused_entry())).expect("valid JSON");
    for field in [
        "host",
        "referer",
        "user_agent",
        "upstream_addr",
        "upstream_status",
        "reused",
        "upstream_connect_time",
        "upstream_header_time",
        "upstream_response_time",
    ] {
        assert_eq!(v[field], serde_json::Value::Null, "{field}");
    }
    assert_eq!(v["protocol"], "HTTP/1.0");
    assert_eq!(v["status"], 502);
    assert_eq!(v["completed"], false);
    assert_eq!(v["error"], "connect_refused");
}

#[test]
fn json_times_are_fixed_point_seconds() {
    let e = AccessEntry {
        upstream_connect_time: Some(Duration::from_nanos(3_999)),
        request_time: Duration::from_secs(2),
        ..entry()
    };
    let line = json(&e);
    assert!(line.contains("\"upstream_connect_time\":0.000003,"), "{line}");
    assert!(line.contains("\"request_time\":2.000000,"), "{line}");
}

#[test]
fn text_line_matches_combined_format_with_upstream_fields() {
    assert_eq!(
        text(&entry()),
        "127.0.0.1 - - [2026-11-22T07:30:07.123Z] \"GET /path?q=1 HTTP/1.1\" 200 1234 \
         \"referer\" \"user-agent\" upstream=default upstream_addr=127.0.0.1:8080 \
         upstream_status=200 reused=1 retried=0 uct=0.000 uht=0.001 urt=0.002 rt=0.003 \
         completed=1\n"
    );
}

#[test]
fn text_line_writes_dash_for_missing_values() {
    let e = AccessEntry { upstream: None, retried: true, ..refused_entry() };
    assert_eq!(
        text(&e),
        "127.0.0.1 - - [2026-11-22T07:30:07.123Z] \"GET /path?q=1 HTTP/1.0\" 502 0 \"-\" \"-\" \
         upstream=- upstream_addr=- upstream_status=- reused=- retried=1 uct=- uht=- urt=- \
         rt=0.003 completed=0 error=connect_refused\n"
    );
}

#[test]
fn hostile_values_cannot_break_or_forge_a_line() {
    let agent = "evil\" \"x\\\n127.0.0.1 - - [forged] \u{e9}\r";
    let e = AccessEntry { user_agent: Some(agent), target: "/a\"b", ..entry() };

    let line = text(&e);
    assert_eq!(line.matches('\n').count(), 1, "{line}");
    assert!(line.contains("\"GET /a\\x22b HTTP/1.1\""), "{line}");
    assert!(
        line.contains(
            "\"evil\\x22 \\x22x\\x5C\\x0A127.0.0.1 - - [forged] \\xC3\\xA9\\x0D\" upstream="
        ),
        "{line}"
    );

    let line = json(&e);
    assert_eq!(line.matches('\n').count(), 1, "{line}");
    let v: serde_json::Value = serde_json::from_str(&line).expect("valid JSON");
    assert_eq!(v["user_agent"], agent);
    assert_eq!(v["path"], "/a\"b");
}

#[test]
fn unquoted_text_values_escape_spaces() {
    let e = AccessEntry { upstream: Some("my app"), error: Some("a b"), ..entry() };
    let line = text(&e);
    assert!(line.contains(" upstream=my\\x20app "), "{line}");
    assert!(line.ends_with(" error=a\\x20b\n"), "{line}");
}

#[test]
fn times_outside_the_calendar_range_do_not_panic() {
    for time in [UNIX_EPOCH - Duration::from_secs(1), UNIX_EPOCH + Duration::from_secs(1 << 40)] {
        let e = AccessEntry { time, ..entry() };
        assert!(!json(&e).is_empty());
        assert!(!text(&e).is_empty());
    }
}

/// A fresh directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        let dir = std::env::temp_dir()
            .join(format!("holdfast-access-log-{}-{nanos}-{name}", std::process::id()));
        fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn file_config(path: &Path, format: AccessLogFormat) -> AccessLogConfig {
    AccessLogConfig { target: AccessLogTarget::File(path.to_path_buf()), format }
}

fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path).unwrap_or_default().lines().map(String::from).collect()
}

/// Waits until `path` holds `count` lines; panics after 10 s.
// A plain #[test] thread polling a file the writer thread fills: no runtime to block.
#[allow(clippy::disallowed_methods)]
fn wait_for_lines(path: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while read_lines(path).len() < count {
        assert!(Instant::now() < deadline, "{} never reached {count} lines", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn file_target_receives_every_line() {
    let dir = TempDir::new("lines");
    let path = dir.0.join("access.log");
    let config = file_config(&path, AccessLogFormat::Text);
    let (log, writer) = AccessLog::start(&config, CHANNEL_LINES).expect("opens").expect("on");
    for i in 0..1000 {
        let target = format!("/{i}");
        log.log(&AccessEntry { target: &target, ..entry() });
    }
    let shared = Arc::clone(&log.shared);
    drop(log);
    writer.join().expect("writer thread ends cleanly");

    let lines = read_lines(&path);
    assert_eq!(lines.len(), 1000);
    assert!(lines[999].contains("\"GET /999 HTTP/1.1\""), "{}", lines[999]);
    assert_eq!(shared.dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn lines_appear_without_dropping_the_handle() {
    let dir = TempDir::new("prompt");
    let path = dir.0.join("access.log");
    let log = AccessLog::open(&file_config(&path, AccessLogFormat::Json)).expect("opens");
    let log = log.expect("on");
    log.log(&entry());
    log.clone().log(&entry());
    wait_for_lines(&path, 2);
    assert_eq!(log.dropped(), 0);
}

#[test]
fn open_appends_to_an_existing_file() {
    let dir = TempDir::new("append");
    let path = dir.0.join("access.log");
    fs::write(&path, "earlier\n").expect("write");
    let config = file_config(&path, AccessLogFormat::Json);
    let (log, writer) = AccessLog::start(&config, CHANNEL_LINES).expect("opens").expect("on");
    log.log(&entry());
    drop(log);
    writer.join().expect("writer thread ends cleanly");
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0], "earlier");
}

#[test]
fn off_target_starts_no_writer() {
    let config = AccessLogConfig { target: AccessLogTarget::Off, format: AccessLogFormat::Json };
    assert!(AccessLog::open(&config).expect("off is fine").is_none());
}

#[test]
fn open_in_missing_directory_names_the_path() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("no-such-dir").join("access.log");
    let err = AccessLog::open(&file_config(&path, AccessLogFormat::Json)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    let message = err.to_string();
    assert!(message.starts_with("cannot open access log "), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
}

#[test]
fn reopen_after_rename_writes_to_a_fresh_file() {
    let dir = TempDir::new("reopen");
    let path = dir.0.join("access.log");
    let rotated = dir.0.join("access.log.1");
    let config = file_config(&path, AccessLogFormat::Text);
    let (log, writer) = AccessLog::start(&config, CHANNEL_LINES).expect("opens").expect("on");
    log.log(&AccessEntry { target: "/before", ..entry() });
    wait_for_lines(&path, 1);

    fs::rename(&path, &rotated).expect("rename");
    log.reopen();
    log.log(&AccessEntry { target: "/after", ..entry() });
    drop(log);
    writer.join().expect("writer thread ends cleanly");

    let old = read_lines(&rotated);
    assert_eq!(old.len(), 1);
    assert!(old[0].contains(" /before "), "{}", old[0]);
    let new = read_lines(&path);
    assert_eq!(new.len(), 1);
    assert!(new[0].contains(" /after "), "{}", new[0]);
}

#[test]
fn full_channel_drops_and_counts_lines() {
    let (log, queued) = AccessLog::channel(AccessLogFormat::Json, 2);
    for _ in 0..5 {
        log.log(&entry());
    }
    assert_eq!(log.dropped(), 3);
    assert_eq!(queued.try_iter().count(), 2);

    // A writer that is gone loses lines too, without panicking.
    drop(queued);
    log.log(&entry());
    assert_eq!(log.dropped(), 4);
}

#[test]
fn write_errors_count_lines_as_dropped() {
    let path = Path::new("/dev/full");
    if !path.exists() {
        return;
    }
    let config = file_config(path, AccessLogFormat::Json);
    let (log, writer) = AccessLog::start(&config, CHANNEL_LINES).expect("opens").expect("on");
    let shared = Arc::clone(&log.shared);
    for _ in 0..3 {
        log.log(&entry());
    }
    drop(log);
    writer.join().expect("a failing disk does not stop the writer");
    assert_eq!(shared.dropped.load(std::sync::atomic::Ordering::Relaxed), 3);
}

#[test]
fn tls_requests_say_their_version_and_alpn() {
    let tls = AccessEntry { tls_version: Some("TLSv1.3"), alpn: Some("http/1.1"), ..entry() };
    let v: serde_json::Value = serde_json::from_str(&json(&tls)).expect("JSON");
    assert_eq!(
        (v["tls_version"].as_str(), v["alpn"].as_str()),
        (Some("TLSv1.3"), Some("http/1.1"))
    );
    assert!(text(&tls).ends_with(" completed=1 tls=TLSv1.3 alpn=http/1.1\n"), "{}", text(&tls));
    let plain: serde_json::Value = serde_json::from_str(&json(&entry())).expect("JSON");
    assert!(plain["tls_version"].is_null() && plain["alpn"].is_null());
    assert!(!text(&entry()).contains(" tls="));
}
