//! Active health checks: every `interval`, `GET path` to each server of a group that
//! has a `[upstream.NAME.health_check]`, on a pooled connection like any request, and
//! the result told to the server's `Health`.
//!
//! A check that connects, gets a complete response head with the expected status
//! (any 2xx or 3xx unless `expect_status` says) within `timeout` passes; anything else
//! fails. The connection goes back to the pool when the response had a length and the
//! origin keeps it open, so checks add no connections to a busy server.
//!
//! [`CheckConfig`] is what `[upstream.NAME.health_check]` sets, with its defaults here.

use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::CloseReason;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::h2::StreamLease;
use super::health::CheckThresholds;
use super::{Backend, Lease, Upstream};
use crate::http1::head::HeadScan;
use crate::http1::response;
use crate::http1::Framing;
use crate::http2::encode::OriginHead;
use crate::net::{self, Deadline, InBuf};

/// An active health check: `GET path` to every server each `interval`, on a pooled
/// connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckConfig {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// The status a passing check returns; `None`: any 2xx or 3xx.
    pub expect_status: Option<u16>,
    /// The check's `Host` header; `None`: the server's address.
    pub host: Option<String>,
    pub thresholds: CheckThresholds,
}

impl CheckConfig {
    /// Whether a check answered with `status` passes.
    fn passes(&self, status: u16) -> bool {
        self.expect_status.map_or((200..400).contains(&status), |s| s == status)
    }

    /// The check's host for the server at `addr`.
    fn host_for(&self, addr: std::net::SocketAddr) -> String {
        self.host.clone().unwrap_or_else(|| addr.to_string())
    }
}

/// Default [`CheckConfig::interval`], the time between two checks of one server: a dead
/// server is noticed within a couple of intervals even when no request goes to it.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// Default [`CheckConfig::timeout`], how long a check may take before it counts as
/// failed: a health endpoint answers in milliseconds, and 2 s leaves room for a loaded
/// server.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why one check failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("no connection: {0}")]
    Lease(#[from] super::LeaseError),
    #[error("{0}")]
    Io(std::io::Error),
    #[error("no complete response within the timeout")]
    Timeout,
    #[error("unexpected status {0}")]
    Status(u16),
    #[error("invalid response: {0}")]
    Response(#[from] response::BadResponse),
}

/// Checks every server of the group each interval, until the group is removed.
pub async fn run(upstream: Arc<Upstream>) {
    loop {
        // Made before the removal is looked at, so a removal after the look wakes it.
        let changed = upstream.changed.notified();
        if upstream.is_removed() {
            return;
        }
        let interval = upstream.with_state(|m| m.config.check.as_ref().map(|c| c.interval));
        tokio::select! {
            () = tokio::time::sleep(interval.unwrap_or(Duration::from_secs(3600))) => {}
            () = changed => continue,
        }
        if upstream.is_removed() {
            return;
        }
        let members = upstream.state();
        let Some(check) = members.config.check.clone() else { continue };
        let check = Arc::new(check);
        let mut running = JoinSet::new();
        for backend in &members.backends {
            running.spawn(check_one(Arc::clone(backend), Arc::clone(&check)));
        }
        while running.join_next().await.is_some() {}
    }
}

/// Runs one check of `backend` and tells its health the result.
pub async fn check_one(backend: Arc<Backend>, check: Arc<CheckConfig>) {
    let result = match tokio::time::timeout(check.timeout, probe(&backend, &check)).await {
        Ok(result) => result,
        Err(_) => Err(CheckError::Timeout),
    };
    if let Err(e) = &result {
        tracing::debug!(backend = %backend.addr, error = %e, "health check failed");
    }
    let transition = backend.health.on_check(result.is_ok(), Instant::now(), &check.thresholds);
    backend.act_on(transition);
}

async fn probe(backend: &Backend, check: &CheckConfig) -> Result<(), CheckError> {
    if let Some(stream) = backend.lease_stream(check.timeout).await? {
        return probe_h2(backend, stream, check).await;
    }
    let mut lease = match backend.conns.try_idle(Instant::now()) {
        Some(lease) => lease,
        None => backend.conns.lease(check.timeout, holdfast_pool::Priority::First).await?,
    };
    let host = check.host_for(backend.addr);
    let (status, buf, rest) = ask(&mut lease.conn().stream, &host, check).await?;
    let passed = check.passes(status);
    finish(lease, buf, rest, check.timeout).await;
    if passed {
        Ok(())
    } else {
        Err(CheckError::Status(status))
    }
}

/// One check of the HTTP/1.1 server at `addr` on a connection of its own, closed
/// after: for a server that is not a backend yet (a container before it joins its
/// group).
pub async fn probe_new(addr: std::net::SocketAddr, check: &CheckConfig) -> Result<(), CheckError> {
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.map_err(CheckError::Io)?;
        let mut stream = net::Stream::from(tcp);
        let (status, _, _) = ask(&mut stream, &check.host_for(addr), check).await?;
        if check.passes(status) {
            Ok(())
        } else {
            Err(CheckError::Status(status))
        }
    };
    tokio::time::timeout(check.timeout, attempt).await.map_err(|_| CheckError::Timeout)?
}

/// Sends the check's request on `stream` and reads the response head: its status,
/// the buffer holding what came after the head, and what the body is.
async fn ask(
    stream: &mut net::Stream,
    host: &str,
    check: &CheckConfig,
) -> Result<(u16, InBuf, Rest), CheckError> {
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: holdfast-health-check\r\n\r\n",
        check.path
    );
    net::write_all(stream, &[request.as_bytes()], check.timeout)
        .await
        .map_err(|(_, e)| CheckError::Io(e.into_io()))?;
    let mut buf = InBuf::new(net::ORIGIN_BUF);
    let mut deadline = Deadline::after(check.timeout);
    let mut scan = HeadScan::default();
    loop {
        if let Some((status, rest)) = parse_head(&mut buf, &mut scan)? {
            return Ok((status, buf, rest));
        }
        match buf.fill(stream, &mut deadline).await {
            Ok(0) => return Err(CheckError::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) => return Err(CheckError::Io(e.into_io())),
        }
    }
}

/// The check over HTTP/2: a GET on a stream of a pooled connection, and its status.
async fn probe_h2(
    backend: &Backend,
    stream: StreamLease,
    check: &CheckConfig,
) -> Result<(), CheckError> {
    let host = check.host_for(backend.addr);
    let scheme = if backend.conns.is_tls() { "https" } else { "http" };
    let request = http::Request::get(format!("{scheme}://{host}{}", check.path))
        .header(http::header::USER_AGENT, "holdfast-health-check")
        .body(())
        .map_err(|e| CheckError::Io(std::io::Error::other(e)))?;
    let io = |e: crate::http2::origin::Error| CheckError::Io(std::io::Error::other(e));
    let (response, _) =
        stream.sender().send_request(&OriginHead::of_request(&request), true).map_err(io)?;
    let response = tokio::time::timeout(check.timeout, response).await;
    let status = response.map_err(|_| CheckError::Timeout)?.map_err(io)?.status;
    stream.answered();
    if check.passes(status) {
        Ok(())
    } else {
        Err(CheckError::Status(status))
    }
}

/// What remains of a response after its head: a known number of body bytes, or
/// nothing worth reading (the connection then closes).
enum Rest {
    Body(u64),
    Unknown,
}

/// The status and body framing of a complete final response head in `buf`, consuming
/// the head; `scan` follows the head across reads.
fn parse_head(buf: &mut InBuf, scan: &mut HeadScan) -> Result<Option<(u16, Rest)>, CheckError> {
    loop {
        let mut storage = [const { MaybeUninit::uninit() }; response::MAX_HEADERS];
        let Some(resp) = response::read(scan, buf.data(), &mut storage, false)? else {
            return Ok(None);
        };
        let len = resp.head_len;
        if resp.is_interim() {
            buf.consume(len);
            *scan = HeadScan::default();
            continue;
        }
        // A connection that switched protocols (101) or whose body has no known end
        // is never reused.
        let rest = match resp.framing {
            _ if !resp.is_reusable() => Rest::Unknown,
            Framing::Empty => Rest::Body(0),
            Framing::Length(n) => Rest::Body(n),
            _ => Rest::Unknown,
        };
        let status = resp.status;
        buf.consume(len);
        return Ok(Some((status, rest)));
    }
}

/// Reads the rest of a small body and returns the connection to the pool; anything
/// else closes it.
async fn finish(mut lease: Lease, mut buf: InBuf, rest: Rest, limit: Duration) {
    /// Bodies of health endpoints are a few bytes; a bigger one is not worth keeping
    /// the connection for.
    const MAX_BODY: u64 = 64 * 1024;
    let Rest::Body(remaining) = rest else {
        return lease.discard(CloseReason::OriginClosed);
    };
    if remaining > MAX_BODY {
        return lease.discard(CloseReason::Error);
    }
    let buffered = (buf.len() as u64).min(remaining);
    buf.consume(buffered as usize);
    // Bytes past the body are bytes nobody asked for.
    let clean =
        buf.is_empty() && net::drain(&mut lease.conn().stream, remaining - buffered, limit).await;
    if clean {
        lease.release(Instant::now());
    } else {
        lease.discard(CloseReason::Error);
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A server that answers every connection's first request with `status`, and
    /// hands back what it was asked.
    async fn answering(status: u16) -> (std::net::SocketAddr, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let served = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.expect("accept");
            let mut asked = vec![0u8; 1024];
            let n = conn.read(&mut asked).await.expect("read");
            let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n");
            conn.write_all(answer.as_bytes()).await.expect("write");
            String::from_utf8_lossy(&asked[..n]).into_owned()
        });
        (addr, served)
    }

    fn check(path: &str) -> CheckConfig {
        CheckConfig {
            path: path.into(),
            interval: DEFAULT_INTERVAL,
            timeout: Duration::from_secs(2),
            expect_status: None,
            host: Some("app.test".into()),
            thresholds: CheckThresholds::default(),
        }
    }

    #[tokio::test]
    async fn a_check_on_a_connection_of_its_own_passes_on_2xx_and_fails_otherwise() {
        let (addr, served) = answering(204).await;
        probe_new(addr, &check("/ready")).await.expect("204 passes");
        let asked = served.await.expect("served");
        assert!(asked.starts_with("GET /ready HTTP/1.1\r\nHost: app.test\r\n"), "{asked:?}");

        let (addr, _served) = answering(503).await;
        let failed = probe_new(addr, &check("/ready")).await;
        assert!(matches!(failed, Err(CheckError::Status(503))), "{failed:?}");

        let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = closed.local_addr().expect("addr");
        drop(closed);
        assert!(matches!(probe_new(addr, &check("/")).await, Err(CheckError::Io(_))));
    }
}
