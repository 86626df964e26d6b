//! A Node.js origin: a script from `tests/it/fixtures/` run by `node` as a child process,
//! for tests where the way Node handles (and drops) connections is the point.
//!
//! The script listens on `127.0.0.1:0` and prints `{"port":N}` on its first stdout line;
//! its counters come back as a flat JSON object from `GET /__stats`, asked directly, not
//! through holdfast. The child is killed when the [`NodeOrigin`] is dropped, and exits by
//! itself when its stdin closes (if the test process dies first).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use http::StatusCode;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::{within, HttpClient};

/// A running Node.js origin.
pub struct NodeOrigin {
    /// Spawned with `kill_on_drop`: dropping it kills the process (tokio reaps it).
    _child: Child,
    /// Held open: the script exits when it closes.
    _stdin: ChildStdin,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl NodeOrigin {
    /// Runs `node tests/it/fixtures/<script> <args...>` and waits for its port.
    pub async fn start(script: &str, args: &[&str]) -> NodeOrigin {
        let path: PathBuf =
            [env!("CARGO_MANIFEST_DIR"), "tests", "it", "fixtures", script].iter().collect();
        let mut child = Command::new("node")
            .arg(&path)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run `node` ({e}); these tests need Node.js on PATH (.ci/run installs it)")
            });
        let stdin = child.stdin.take().expect("piped stdin");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("piped stderr");
        let sink = Arc::clone(&stderr);
        // Ends when the child exits and its stderr closes.
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        within("node prints its port", stdout.read_line(&mut line)).await.expect("read stdout");
        let port = line
            .trim()
            .strip_prefix("{\"port\":")
            .and_then(|rest| rest.strip_suffix('}'))
            .and_then(|port| port.parse::<u16>().ok())
            .unwrap_or_else(|| {
                let status = child.try_wait().ok().flatten();
                panic!(
                    "node {} printed {line:?} instead of its port (exit status {status:?}); \
                     stderr: {}",
                    path.display(),
                    stderr.lock().unwrap()
                )
            });
        NodeOrigin {
            _child: child,
            _stdin: stdin,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            stderr,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The script's counters, from `GET /__stats` on a connection of their own.
    pub async fn stats(&self) -> NodeStats {
        let mut client = HttpClient::connect(self.addr).await;
        let reply = client.get("/__stats").await;
        assert_eq!(reply.status, StatusCode::OK, "node stats: {}", reply.text());
        NodeStats::parse(&reply.text())
            .unwrap_or_else(|| panic!("node stats are not a flat JSON object: {}", reply.text()))
    }

    /// The body of `GET path`, asked directly on a connection of its own (for scripts
    /// that list what they saw as text).
    pub async fn text(&self, path: &str) -> String {
        let mut client = HttpClient::connect(self.addr).await;
        let reply = client.get(path).await;
        assert_eq!(reply.status, StatusCode::OK, "node {path}: {}", reply.text());
        reply.text()
    }

    /// What the script has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

/// The counters of a Node origin: named counters (`accepted`, `closed`, ...) and one
/// `"METHOD /path"` entry per request target with the number of times it arrived.
#[derive(Debug)]
pub struct NodeStats(HashMap<String, u64>);

impl NodeStats {
    /// A named counter; panics if the script has no such counter.
    pub fn counter(&self, name: &str) -> u64 {
        *self.0.get(name).unwrap_or_else(|| panic!("node stats have no counter {name:?}"))
    }

    /// How many times `method path` arrived (0 if never).
    pub fn arrivals(&self, method: &str, path: &str) -> u64 {
        self.0.get(&format!("{method} {path}")).copied().unwrap_or(0)
    }

    /// Every request that arrived, whatever its target.
    pub fn total_arrivals(&self) -> u64 {
        self.requests().map(|(_, n)| n).sum()
    }

    /// The `"METHOD /path"` entries.
    pub fn requests(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().filter(|(k, _)| k.contains(' ')).map(|(k, n)| (k.as_str(), *n))
    }

    /// Parses `{"key":123,...}` (string keys, non-negative integer values, nothing
    /// nested), which is all the script writes.
    fn parse(text: &str) -> Option<NodeStats> {
        let mut rest = text.trim().strip_prefix('{')?.strip_suffix('}')?.trim();
        let mut map = HashMap::new();
        // Each round consumes one `"key":value` pair and its comma.
        while !rest.is_empty() {
            let (key, after) = json_string(rest)?;
            let after = after.trim_start().strip_prefix(':')?.trim_start();
            let digits = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
            map.insert(key, after[..digits].parse().ok()?);
            rest = after[digits..].trim_start();
            rest = rest.strip_prefix(',').map_or(rest, str::trim_start);
        }
        Some(NodeStats(map))
    }
}

/// A JSON string at the start of `text` (only the `\"` and `\\` escapes, which are all a
/// request target can need), and the text after it.
fn json_string(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => out.push(chars.next()?.1),
            c => out.push(c),
        }
    }
    None
}

#[test]
fn node_stats_parse_a_flat_object() {
    let stats = NodeStats::parse(r#"{"accepted":3, "closed":0,"GET /a?b=\"c\"":2,"PUT /x":10}"#)
        .expect("parses");
    assert_eq!(stats.counter("accepted"), 3);
    assert_eq!(stats.counter("closed"), 0);
    assert_eq!(stats.arrivals("GET", "/a?b=\"c\""), 2);
    assert_eq!(stats.total_arrivals(), 12);
    assert!(NodeStats::parse("{}").is_some());
    assert!(NodeStats::parse(r#"{"a":{"b":1}}"#).is_none());
}
