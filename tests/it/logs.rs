//! holdfast's own log lines, read from the real binary's stderr: plain values, colour
//! only on a terminal, JSON when asked, an outage as counts rather than a line per
//! request, and client mistakes kept out of the warnings.

use http::StatusCode;
use tokio::time::Instant;

use crate::support::{wait_until, ChildProxy, ClosedPort, HttpClient, Origin, TempDir, DEADLINE};

/// The upstream failure lines in `stderr` (text format), as the `count` each carries.
fn failure_counts(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter(|line| line.contains(" WARN holdfast::proxy: "))
        .map(|line| {
            let count = line.split(" count=").nth(1).expect("a failure line has a count");
            let digits = count.split(|c: char| !c.is_ascii_digit()).next().unwrap_or_default();
            digits.parse().unwrap_or_else(|_| panic!("count is not a number: {line}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_logged_as_counts_not_a_line_per_request() {
    const REQUESTS: u64 = 200;
    let port = ClosedPort::new();
    let closed = port.addr();
    let proxy = ChildProxy::quick(closed).await;
    let started = Instant::now();
    let mut client = HttpClient::connect(proxy.addr()).await;
    for i in 0..REQUESTS {
        let reply = client.get(&format!("/down/{i}")).await;
        assert_eq!(reply.status, StatusCode::BAD_GATEWAY, "{}", reply.text());
    }
    // The last failures are counted, not yet written: the server's tick writes them.
    wait_until("every failure is counted in the log", DEADLINE, || {
        failure_counts(&proxy.stderr()).iter().sum::<u64>() >= REQUESTS
    })
    .await;
    let elapsed = started.elapsed().as_secs();
    let stderr = proxy.stderr();
    let counts = failure_counts(&stderr);
    assert_eq!(counts.iter().sum::<u64>(), REQUESTS, "{stderr}");
    // Two keys at most (the refused connects, then no server while it is ejected),
    // each writing its first failure and at most one line a second after it.
    let most = 2 * (elapsed + 2);
    assert!(counts.len() as u64 <= most, "{} lines in {elapsed} s: {stderr}", counts.len());
    assert!((counts.len() as u64) * 4 < REQUESTS, "{} lines: {stderr}", counts.len());
    let backend = format!("upstream=default backend={closed} reason=connect_refused status=502");
    assert!(stderr.contains(&backend), "{stderr}");
    // Plain values: no Debug quoting, no `Some(..)`.
    assert!(stderr.contains("listening listen="), "{stderr}");
    assert!(stderr.contains(" upstream=default\n"), "{stderr}");
    assert!(!stderr.contains("=\"") && !stderr.contains("Some("), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_that_is_not_a_terminal_gets_no_colour() {
    let port = ClosedPort::new();
    let closed = port.addr();
    // NO_COLOR unset: a pipe alone turns colour off.
    let env = [("NO_COLOR", None)];
    let proxy = ChildProxy::launch_env(&env, |listen| quick_args(listen, closed)).await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    assert_eq!(client.get("/").await.status, StatusCode::BAD_GATEWAY);
    wait_until("the failure is logged", DEADLINE, || proxy.stderr().contains("count=1")).await;
    let stderr = proxy.stderr();
    assert!(!stderr.contains('\x1b'), "escape codes in a pipe: {stderr:?}");
}

/// Runs quick mode with stderr on a new terminal until it has logged that it listens;
/// returns what it wrote there.
#[cfg(unix)]
fn terminal_output(no_color: Option<&str>) -> String {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    use std::process::{Command, Stdio};
    use std::sync::{mpsc, Arc, Mutex};

    use nix::fcntl::OFlag;
    use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};

    // Close-on-exec, so holdfast processes other tests start meanwhile do not inherit it.
    let mut master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .expect("open a pseudo-terminal");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOCTTY)
        .open(ptsname_r(&master).expect("the terminal's name"))
        .expect("open the terminal");
    let upstream = ClosedPort::new();
    let mut command = Command::new(env!("CARGO_BIN_EXE_holdfast"));
    command
        .args(["--listen", "127.0.0.1:0", "--upstream", &upstream.addr().to_string()])
        .args(["--threads", "1"])
        .env("RUST_LOG", "holdfast=info")
        .env_remove("NO_COLOR");
    if let Some(value) = no_color {
        command.env("NO_COLOR", value);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(terminal))
        .spawn()
        .expect("spawn holdfast binary");
    // Our copy of the terminal goes with `command`: reads end once the child exits.
    drop(command);
    let output = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&output);
    let (listening_tx, listening) = mpsc::sync_channel(1);
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        let mut told = false;
        // Ends with an error (EIO) or 0 once no process holds the terminal open.
        while let Ok(n @ 1..) = master.read(&mut chunk) {
            let mut text = sink.lock().unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk[..n]));
            if !told && text.contains("listening") {
                told = true;
                let _ = listening_tx.send(());
            }
        }
    });
    // Bounded by DEADLINE. The reader says when the line shows up; it hangs up instead
    // when holdfast exits first, since that closes the terminal.
    if let Err(mpsc::RecvTimeoutError::Disconnected) = listening.recv_timeout(DEADLINE) {
        let status = child.wait().expect("wait for holdfast");
        panic!("holdfast exited with {status}: {}", output.lock().unwrap());
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    let text = output.lock().unwrap().clone();
    assert!(text.contains("listening"), "nothing logged on the terminal: {text:?}");
    text
}

#[cfg(unix)]
#[test]
fn a_terminal_gets_colour_unless_no_color_is_set() {
    let coloured = terminal_output(None);
    assert!(coloured.contains("\x1b["), "no colour on a terminal: {coloured:?}");
    let plain = terminal_output(Some("1"));
    assert!(!plain.contains('\x1b'), "colour despite NO_COLOR: {plain:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_writes_one_json_object_per_line() {
    let port = ClosedPort::new();
    let closed = port.addr();
    let dir = TempDir::new("log-json");
    let proxy = ChildProxy::launch(|listen| {
        let path = dir.write(
            "holdfast.toml",
            &format!(
                "log_format = \"json\"\nthreads = 1\n\n[[listener]]\naddress = \"{listen}\"\n\
                 upstream = \"app\"\n\n[upstream.app]\nservers = [\"{closed}\"]\n"
            ),
        );
        vec!["--config".to_string(), path.display().to_string()]
    })
    .await;
    let mut client = HttpClient::connect(proxy.addr()).await;
    assert_eq!(client.get("/").await.status, StatusCode::BAD_GATEWAY);
    wait_until("the failure is logged", DEADLINE, || proxy.stderr().contains("\"count\":1")).await;
    let stderr = proxy.stderr();
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
        .collect();
    for line in &lines {
        for field in ["timestamp", "level", "target", "message"] {
            assert!(line.get(field).is_some_and(|v| v.is_string()), "no {field}: {line}");
        }
    }
    let listening = lines.iter().find(|l| l["message"] == "listening").expect("a listening line");
    assert_eq!(listening["upstream"], "app", "{listening}");
    let failure = lines.iter().find(|l| l.get("count").is_some()).expect("a failure line");
    assert_eq!(failure["level"], "WARN", "{failure}");
    assert_eq!(failure["upstream"], "app", "{failure}");
    assert_eq!(failure["backend"], closed.to_string(), "{failure}");
    assert_eq!(failure["reason"], "connect_refused", "{failure}");
    assert_eq!((failure["status"].as_u64(), failure["count"].as_u64()), (Some(502), Some(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_mistakes_are_logged_at_debug_not_warn() {
    let origin = Origin::start().await;
    let upstream = origin.addr();
    let dir = TempDir::new("log-client");
    let env = [("RUST_LOG", Some("holdfast=debug"))];
    let proxy = ChildProxy::launch_env(&env, |listen| {
        let path = dir.write(
            "holdfast.toml",
            &format!(
                "threads = 1\n\n[[listener]]\naddress = \"{listen}\"\nupstream = \"app\"\n\
                 client_max_body = 16\n\n[upstream.app]\nservers = [\"{upstream}\"]\n"
            ),
        );
        vec!["--config".to_string(), path.display().to_string()]
    })
    .await;
    let head = "POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    // A malformed chunk size: 400.
    let mut client = crate::support::RawClient::connect(proxy.addr()).await;
    client.send(format!("{head}zz\r\nhello\r\n0\r\n\r\n")).await;
    assert_eq!(client.response_then_close().await.map(|r| r.status), Some(400));
    // More than client_max_body, in chunks (so only counting finds it): 413.
    let mut client = crate::support::RawClient::connect(proxy.addr()).await;
    client.send(format!("{head}20\r\n{}\r\n0\r\n\r\n", "x".repeat(32))).await;
    assert_eq!(client.response_then_close().await.map(|r| r.status), Some(413));
    // More than client_max_body, announced: 413 before anything is read.
    let mut client = crate::support::RawClient::connect(proxy.addr()).await;
    client.send("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n").await;
    assert_eq!(client.response_then_close().await.map(|r| r.status), Some(413));
    // A client that closes halfway through its body.
    let mut client = crate::support::RawClient::connect(proxy.addr()).await;
    client.send("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhalf").await;
    drop(client);
    let logged = |what: &str| {
        let stderr = proxy.stderr();
        stderr.lines().filter(|l| l.contains(" DEBUG ") && l.contains(what)).count()
    };
    wait_until("the four mistakes are logged", DEADLINE, || {
        logged("invalid chunked body") == 1
            && logged("larger than client_max_body") == 2
            && logged("before the body ended") == 1
    })
    .await;
    let stderr = proxy.stderr();
    assert!(!stderr.contains(" WARN "), "a client mistake logged as a warning: {stderr}");
}

fn quick_args(listen: std::net::SocketAddr, upstream: std::net::SocketAddr) -> Vec<String> {
    ["--listen", &listen.to_string(), "--upstream", &upstream.to_string(), "--threads", "1"]
        .map(String::from)
        .into()
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_log_format_says_it_waits_for_a_restart() {
    let origin = Origin::start().await;
    let dir = TempDir::new("log-reload");
    let write = |listen: std::net::SocketAddr, format: &str| {
        dir.write(
            "holdfast.toml",
            &format!(
                "log_format = \"{format}\"\nthreads = 1\n\n[[listener]]\naddress = \"{listen}\"\n\
                 upstream = \"app\"\n\n[upstream.app]\nservers = [\"{}\"]\n",
                origin.addr()
            ),
        )
    };
    let proxy = ChildProxy::launch(|listen| {
        vec!["--config".to_string(), write(listen, "text").display().to_string()]
    })
    .await;
    write(proxy.addr(), "json");
    proxy.signal(nix::sys::signal::Signal::SIGHUP);
    wait_until("the reload is logged", DEADLINE, || proxy.stderr().contains("config reloaded"))
        .await;
    let stderr = proxy.stderr();
    let warning = "WARN holdfast::instance: changed in the config file; takes effect at the next \
                   restart key=log_format";
    assert!(stderr.contains(warning), "{stderr}");
    // Still text until the restart.
    assert!(stderr.lines().all(|line| !line.starts_with('{')), "{stderr}");
}
