//! Every default in one place, each with the reason for its value.
//!
//! Pool defaults live with the pool (`holdfast_pool::PoolConfig::default`).

use std::time::Duration;

use super::{AccessLogFormat, AccessLogTarget, LogFormat};

/// The listen backlog: connections the kernel completes and holds for holdfast to
/// accept. 511 is nginx's default on Linux, enough to ride out a burst of new clients
/// while every worker is busy; Rust's standard library (and so tokio) uses 128, which a
/// burst of a few hundred connections overflows, and the kernel then drops connection
/// attempts, which clients retry only after a second. Linux silently caps the backlog at
/// `net.core.somaxconn` (4096 on current kernels, 128 before 5.4), so the default is the
/// smaller of the two: what the kernel really uses, and what `ss -ltn` shows.
pub fn listen_backlog() -> u32 {
    crate::listener::somaxconn().map_or(LISTEN_BACKLOG, |max| max.min(LISTEN_BACKLOG))
}

/// See [`listen_backlog`].
pub const LISTEN_BACKLOG: u32 = 511;

/// Upstream TCP connect. A backend on the same host or network answers a SYN in
/// milliseconds; 5 s covers a loaded kernel and a retransmitted SYN (1 s, then 3 s).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// From the end of the request to the response head (an upload that is still moving
/// restarts the clock). 60 s matches
/// nginx's `proxy_read_timeout`, so slow endpoints that work behind nginx work here.
pub const RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest pause between two reads of an upstream response body (nginx: 60 s).
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A client must send a complete request head within this time, counted from the
/// first byte of the head (and, on a new connection, from the accept), which bounds
/// what slow-header clients (slowloris) can hold. nginx's `client_header_timeout` is
/// 60 s; 10 s is generous for any real client.
pub const CLIENT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client's keep-alive connection may wait for its next request. nginx
/// keeps idle clients 75 s, AWS load balancers 60 s; an idle client connection costs
/// holdfast a socket and a few hundred bytes, no buffer.
pub const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Head start a client gets to move a request or response body before its average
/// rate counts (see `client_body_min_bytes_per_second`). nginx's `client_body_timeout`
/// and `send_timeout` are 60 s, but per read or write, so a byte a minute keeps a
/// connection forever; here the 60 s is a total a trickle cannot renew.
pub const CLIENT_BODY_GRACE: Duration = Duration::from_secs(60);

/// After the head start, a client must move a body at an average of at least this
/// many bytes per second, counting only the time holdfast waits on it (Apache httpd's
/// `mod_reqtimeout` asks for 500). 1 KiB/s is slower than any working connection, and a
/// slow-reading or slow-sending attacker holding a connection gets a minute at most.
pub const CLIENT_BODY_MIN_BYTES_PER_SECOND: u64 = 1024;

/// Request body size: no limit, as in HAProxy and Envoy. nginx's 1 MB default breaks
/// uploads behind it; `client_max_body` sets one where it is wanted.
pub const CLIENT_MAX_BODY: Option<u64> = None;

/// Bytes of the request line (method, target, version). nginx's
/// `large_client_header_buffers` allows 8 kB; longer URLs get 414.
pub const MAX_REQUEST_LINE_BYTES: usize = 8 * 1024;

/// Request header lines. Browsers send about 20; 100 is many servers' limit.
pub const MAX_REQUEST_HEADERS: usize = 100;

/// Bytes of request head (request line and headers). nginx allows 4 x 8 kB buffers.
pub const MAX_REQUEST_HEADER_BYTES: usize = 32 * 1024;

/// After SIGTERM, how long requests in flight get to finish before holdfast exits
/// anyway. 30 s is Kubernetes' default termination grace period.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Where access log lines go when `[access_log]` names no target: stdout. Writing the
/// table asks for a log, and stdout is where systemd and container runtimes collect it.
pub const ACCESS_LOG_TARGET: AccessLogTarget = AccessLogTarget::Stdout;

/// Access log lines are JSON unless `format` says otherwise: log pipelines parse JSON
/// without a pattern, and every field stays present and typed.
pub const ACCESS_LOG_FORMAT: AccessLogFormat = AccessLogFormat::Json;

/// holdfast's own log lines (stderr) are text unless `log_format` says otherwise: the
/// first reader is a person at a terminal or in `journalctl`; log shippers ask for JSON.
pub const LOG_FORMAT: LogFormat = LogFormat::Text;

/// How often server names are resolved again. Container platforms replace a
/// container's address within seconds; 5 s follows them quickly for the price of one
/// lookup per name every 5 s.
pub const RESOLVE_INTERVAL: Duration = Duration::from_secs(5);

/// Time between two active checks of one server: a dead server is noticed within a
/// couple of intervals even when no request goes to it.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// How long an active check may take before it counts as failed: a health endpoint
/// answers in milliseconds, and 2 s leaves room for a loaded server.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
