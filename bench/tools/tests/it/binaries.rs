//! `bench-origin` and `bench-load` end to end, with the command lines the harness uses.

use std::process::{Command, Stdio};

use holdfast_bench_tools::origin::StatsSnapshot;

use crate::support::{raw_get, spawn_listening, Spawned, TestCerts, ERROR_KINDS};

/// Starts `bench-origin` on port 0 and returns it with the address it printed.
fn start_origin() -> (Spawned, String) {
    start_origin_with(&[])
}

/// Like `start_origin`, with more arguments (`--tls-cert`, `--tls-key`).
fn start_origin_with(args: &[&str]) -> (Spawned, String) {
    let args = [&["--listen", "127.0.0.1:0"], args].concat();
    let (origin, addr) = spawn_listening(env!("CARGO_BIN_EXE_bench-origin"), &args);
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    (origin, addr)
}

fn bench_load(args: &[&str]) -> Vec<serde_json::Value> {
    let output =
        Command::new(env!("CARGO_BIN_EXE_bench-load")).args(args).output().expect("run bench-load");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?}: {:?}\n{stderr}", output.status);
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect()
}

#[test]
fn binaries_run_as_the_harness_drives_them() {
    let (origin, addr) = start_origin();

    let rate = bench_load(&[
        "rate",
        "--url",
        &format!("http://{addr}/tiny"),
        "--rate",
        "100",
        "--duration",
        "300ms",
        "--connections",
        "2",
        "--warmup",
        "100ms",
    ]);
    assert_eq!(rate.len(), 1);
    assert_eq!((rate[0]["mode"].as_str(), rate[0]["ok"].as_u64()), (Some("rate"), Some(30)));

    let hold = bench_load(&[
        "--threads",
        "2",
        "hold",
        "--url",
        &format!("http://{addr}/tiny"),
        "--connections",
        "5",
        "--hold",
        "50ms",
    ]);
    assert_eq!(hold.len(), 2, "the holding line, then the result");
    assert_eq!(hold[0]["event"], "holding");
    assert_eq!((hold[1]["mode"].as_str(), hold[1]["failed"].as_u64()), (Some("hold"), Some(0)));
    stop(origin);
}

/// `bench-load rate` for a second against `bench-origin`, with /tiny and with /50k (a body
/// over several reads): every request due in the window is answered with a 2xx on the
/// connections opened up front, and the origin saw those requests and no others.
#[tokio::test]
async fn rate_answers_every_request_due_over_its_keep_alive_connections() {
    let (origin, addr) = start_origin();
    let mut sent = 0;
    for (path, rate) in [("/tiny", 1_000_u64), ("/50k", 500)] {
        let report = rate_for_a_second(&addr, path, rate);
        assert_eq!(report["mode"], "rate");
        assert_eq!(report["requests"], rate, "{path}: {report}");
        assert_eq!(report["ok"], rate, "{path}: {report}");
        assert_eq!((report["unsent"].as_u64(), report["connects"].as_u64()), (Some(0), Some(8)));
        for kind in ERROR_KINDS {
            assert_eq!(report["errors_by_kind"][kind], 0, "{path}: {kind}: {report}");
        }
        assert!(report["latency_us"]["p99"].as_u64() > Some(0), "{report}");
        assert!(report["max_send_lag_us"].is_u64(), "{report}");
        sent += rate + rate / 5;
    }
    let stats = raw_get(addr.parse().expect("the origin's address"), "/__origin/stats").await;
    let stats: StatsSnapshot = serde_json::from_slice(&stats.body).expect("stats JSON");
    assert_eq!(stats.requests, sent, "warm-up and window, nothing more: {stats:?}");
    assert_eq!(stats.connections, 2 * 8 + 1, "8 per run, and this stats request's: {stats:?}");
    stop(origin);
}

/// `bench-load rate` on `path` at `rate` for 1 s after a 200 ms warm-up, 8 connections.
fn rate_for_a_second(addr: &str, path: &str, rate: u64) -> serde_json::Value {
    let url = format!("http://{addr}{path}");
    let rate = rate.to_string();
    let mut lines = bench_load(&[
        "rate",
        "--url",
        &url,
        "--rate",
        &rate,
        "--duration",
        "1s",
        "--connections",
        "8",
        "--warmup",
        "200ms",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines.remove(0)
}

/// SIGTERM, then the exit status must be 0.
fn stop(origin: Spawned) {
    let status = origin.stop();
    assert!(status.success(), "{status:?}");
}

#[test]
fn tls_origin_and_handshakes_run_as_the_harness_drives_them() {
    let certs = TestCerts::make();
    let cert = certs.server_cert.to_str().expect("UTF-8 path");
    let key = certs.server_key.to_str().expect("UTF-8 path");
    let (origin, addr) = start_origin_with(&["--tls-cert", cert, "--tls-key", key]);

    let url = format!("https://{addr}/tiny");
    let ca = certs.ca.to_str().expect("UTF-8 path");
    let common = ["handshakes", "--url", &url, "--ca", ca, "--connections", "2"];
    let full = bench_load(&[&common[..], &["--duration", "200ms"]].concat());
    assert_eq!(full.len(), 1);
    assert_eq!(full[0]["mode"], "handshakes");
    assert_eq!(full[0]["errors"], 0, "{}", full[0]);
    assert_eq!(full[0]["handshakes_full"], full[0]["ok"], "{}", full[0]);
    let resumed = bench_load(&[&common[..], &["--duration", "200ms", "--resume"]].concat());
    assert_eq!(resumed[0]["handshakes_full"], 2, "{}", resumed[0]);
    assert!(resumed[0]["handshakes_resumed"].as_u64() > Some(0), "{}", resumed[0]);
    stop(origin);
}

#[test]
fn bad_arguments_exit_with_status_2() {
    for args in [
        &[
            "rate",
            "--url",
            "http://10.1.2.3/",
            "--rate",
            "1",
            "--duration",
            "1s",
            "--connections",
            "1",
        ][..],
        &[
            "mixed",
            "--url",
            "http://127.0.0.1:1/",
            "--keepalive",
            "0",
            "--closing",
            "0",
            "--duration",
            "1s",
        ],
        &["burst", "--url", "http://127.0.0.1:1/", "--connections", "0"],
        &["handshakes", "--url", "http://127.0.0.1:1/", "--ca", "ca.pem", "--connections", "1"],
    ] {
        let status = Command::new(env!("CARGO_BIN_EXE_bench-load"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run bench-load");
        assert_eq!(status.code(), Some(2), "{args:?}");
    }
    let status = Command::new(env!("CARGO_BIN_EXE_bench-origin"))
        .args(["--listen", "127.0.0.1:0", "--tls-cert", "server.pem"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run bench-origin");
    assert_eq!(status.code(), Some(2), "--tls-cert needs --tls-key");
}
