//! gRPC end to end: Python's grpcio client and server (`tests/it/fixtures/grpc_*.py`,
//! generic handlers on raw bytes) with holdfast between them, over h2c and over TLS on
//! either side. Unary, server, client and bidirectional streaming, a deadline that
//! expires, and an error status with trailing metadata, as the client sees them.
//!
//! Needs `python3` with the `grpc` module (`pip install grpcio`); the tests skip
//! without it, and fail under CI=true.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::tls::{run_tool, PemFiles, Pki};
use crate::support::{fixture, have_python_module, within, ChildProxy};

/// Every case the client runs, by the name it prints.
const CASES: [&str; 8] = [
    "unary",
    "server_streaming",
    "client_streaming",
    "bidi_streaming",
    "deadline",
    "error_status",
    "large_messages",
    "many_at_once",
];

/// The Python gRPC server, serving until it is dropped (its stdin then closes, and it
/// is killed besides).
struct GrpcServer {
    _child: Child,
    port: u16,
}

impl GrpcServer {
    /// Starts it, with TLS from `tls` if given, and waits for its port.
    async fn start(tls: Option<&PemFiles>) -> GrpcServer {
        let mut command = Command::new("python3");
        command.arg(fixture("grpc_server.py"));
        if let Some(files) = tls {
            command.arg("--tls").arg(&files.cert).arg(&files.key);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("run the gRPC server");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = within("the gRPC server's port", lines.next_line())
            .await
            .expect("read the gRPC server's stdout")
            .expect("the gRPC server printed its port");
        let port = line
            .strip_prefix("port ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the gRPC server said {line:?}"));
        GrpcServer { _child: child, port }
    }
}

/// Runs the client against `target` (with `--tls CA NAME` when given) and asserts every
/// case passed; a failure shows `proxy`'s log, if there is one.
async fn assert_client_passes(target: &str, tls: Option<(&str, &str)>, proxy: Option<&ChildProxy>) {
    let script = fixture("grpc_client.py");
    let mut args = vec![script.as_str(), target];
    if let Some((ca, name)) = tls {
        args.extend(["--tls", ca, name]);
    }
    let out = run_tool("python3", &args, b"").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = proxy.map(|p| format!("\nholdfast's log:\n{}", p.stderr())).unwrap_or_default();
    let report = format!("{stdout}{}{log}", String::from_utf8_lossy(&out.stderr));
    for case in CASES {
        assert!(stdout.lines().any(|l| l == format!("ok {case}")), "case {case}:\n{report}");
    }
    assert!(out.status.success(), "{report}");
}

/// holdfast (the binary) listening with `listen_args`, to `upstream`, with `extra`.
async fn holdfast(listen_args: &[String], upstream: &str, extra: &[String]) -> ChildProxy {
    ChildProxy::launch(|listen| {
        let mut args = vec!["--listen".to_string(), listen.to_string()];
        args.extend(listen_args.iter().cloned());
        args.extend(["--upstream".to_string(), upstream.to_string()]);
        args.extend(extra.iter().cloned());
        args.extend(["--threads".to_string(), "2".to_string()]);
        args
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_h2c_both_sides() {
    if !have_python_module("grpc", "grpcio") {
        return;
    }
    let server = GrpcServer::start(None).await;
    // The client straight to the server first: the cases hold without holdfast.
    assert_client_passes(&format!("127.0.0.1:{}", server.port), None, None).await;
    let upstream = format!("h2c://127.0.0.1:{}", server.port);
    let proxy = holdfast(&["--h2c".to_string()], &upstream, &[]).await;
    assert_client_passes(&proxy.addr().to_string(), None, Some(&proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_both_sides() {
    if !have_python_module("grpc", "grpcio") {
        return;
    }
    let pki = Pki::new("grpc-tls");
    let (_, origin_files) = pki.localhost("origin", "origin");
    let (_, listener_files) = pki.localhost("listener", "listener");
    let ca = pki.ca_file.display().to_string();
    let server = GrpcServer::start(Some(&origin_files)).await;
    let direct = format!("127.0.0.1:{}", server.port);
    assert_client_passes(&direct, Some((&ca, "localhost")), None).await;
    let listen_args = [
        "--tls-cert".to_string(),
        listener_files.cert.display().to_string(),
        "--tls-key".to_string(),
        listener_files.key.display().to_string(),
    ];
    let upstream = format!("https://127.0.0.1:{}", server.port);
    let proxy = holdfast(&listen_args, &upstream, &["--upstream-ca".to_string(), ca.clone()]).await;
    assert_client_passes(&proxy.addr().to_string(), Some((&ca, "localhost")), Some(&proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_from_a_tls_client_to_an_h2c_origin() {
    if !have_python_module("grpc", "grpcio") {
        return;
    }
    let pki = Pki::new("grpc-tls-h2c");
    let (_, listener_files) = pki.localhost("listener", "listener");
    let ca = pki.ca_file.display().to_string();
    let server = GrpcServer::start(None).await;
    let listen_args = [
        "--tls-cert".to_string(),
        listener_files.cert.display().to_string(),
        "--tls-key".to_string(),
        listener_files.key.display().to_string(),
    ];
    let upstream = format!("h2c://127.0.0.1:{}", server.port);
    let proxy = holdfast(&listen_args, &upstream, &[]).await;
    assert_client_passes(&proxy.addr().to_string(), Some((&ca, "localhost")), Some(&proxy)).await;
}
