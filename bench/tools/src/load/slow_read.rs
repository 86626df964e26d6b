//! Slow readers: many HTTP/1.1 clients, each GETs a large response and reads it at a
//! trickle: a small receive buffer set before the connect (so the window the server sees
//! stays small from the handshake on), then one read of at most `read_bytes` every
//! `interval`. What a proxy does about them (keeps the upstream response waiting, spools
//! it, cuts the client off) is what the drill watches.
//!
//! Reported per connection: the response's status (from its head, once read), bytes read,
//! and when the server closed it, in seconds from the start of the run. A close that comes
//! while a reader waits between reads is seen at its next read, up to `interval` late.
//!
//! Bounded: every connection ends at `duration` (closed by the client then); connects are
//! made at most [`super::DEFAULT_CONNECTS_IN_FLIGHT`] at a time, each within
//! [`CONNECT_TIMEOUT`].

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::exchange;
use super::target::Target;
use super::zero_window::Close;

/// How long one connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest response head kept for parsing; a longer one leaves the status unknown.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header fields parsed in a response head.
const MAX_HEADERS: usize = 64;

#[derive(Debug, Clone)]
pub struct SlowReadConfig {
    pub target: Target,
    pub connections: usize,
    /// SO_RCVBUF set before the connect (Linux doubles it for its own bookkeeping).
    pub receive_buffer_bytes: u32,
    /// Most bytes taken by one read.
    pub read_bytes: usize,
    /// Time between the starts of two reads.
    pub interval: Duration,
    pub duration: Duration,
    /// Local address the connections come from; None: the kernel picks.
    pub source: Option<IpAddr>,
    pub connects_in_flight: usize,
}

/// One reader as it went; times in seconds from the start of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReaderReport {
    pub connected_s: Option<f64>,
    /// Why it never got going: the connect failed, or the request could not be written.
    pub failed: Option<String>,
    pub status: Option<u16>,
    /// Response bytes read, head included.
    pub bytes_read: u64,
    /// The whole response was read (its `Content-Length` reached).
    pub complete: bool,
    /// When the server closed the connection; None: open until the end (or complete).
    pub closed_s: Option<f64>,
    pub close: Option<Close>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SlowReadReport {
    pub mode: &'static str,
    pub source: Option<IpAddr>,
    pub duration_s: f64,
    pub connections: usize,
    pub connected: usize,
    pub failed: usize,
    /// Responses by status, for the readers whose head arrived.
    pub statuses: BTreeMap<u16, u64>,
    pub bytes_read: u64,
    pub complete: usize,
    /// Readers the server closed before the end of the run (and before completing).
    pub closed_by_peer: usize,
    pub first_close_s: Option<f64>,
    pub last_close_s: Option<f64>,
    /// The first failure to connect, if any, for stderr.
    #[serde(skip)]
    pub first_failure: Option<String>,
    pub per_connection: Vec<ReaderReport>,
}

pub async fn run(config: SlowReadConfig) -> SlowReadReport {
    let start = Instant::now();
    let end = start + config.duration;
    let limit = super::connect_limit(config.connects_in_flight);
    let request: Arc<[u8]> = config.target.get_bytes().into();
    let mut tasks = JoinSet::new();
    for index in 0..config.connections {
        let (config, limit, request) = (config.clone(), Arc::clone(&limit), Arc::clone(&request));
        tasks.spawn(async move {
            let connected = {
                let _permit = limit.acquire_owned().await.expect("the semaphore is never closed");
                tokio::time::timeout_at(end.min(Instant::now() + CONNECT_TIMEOUT), connect(&config))
                    .await
                    .unwrap_or_else(|_| {
                        Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
                    })
            };
            let report = match connected {
                Ok(stream) => read_slowly(stream, &config, &request, start, end).await,
                Err(error) => {
                    ReaderReport { failed: Some(error.to_string()), ..ReaderReport::default() }
                }
            };
            (index, report)
        });
    }
    let mut per_connection = vec![ReaderReport::default(); config.connections];
    while let Some(joined) = tasks.join_next().await {
        let (index, report) = joined.expect("slow readers do not panic");
        per_connection[index] = report;
    }
    summarize(&config, per_connection)
}

fn summarize(config: &SlowReadConfig, per_connection: Vec<ReaderReport>) -> SlowReadReport {
    let mut statuses = BTreeMap::new();
    for status in per_connection.iter().filter_map(|r| r.status) {
        *statuses.entry(status).or_insert(0) += 1;
    }
    let closes: Vec<f64> = per_connection.iter().filter_map(|r| r.closed_s).collect();
    SlowReadReport {
        mode: "slow-read",
        source: config.source,
        duration_s: config.duration.as_secs_f64(),
        connections: config.connections,
        connected: per_connection.iter().filter(|r| r.connected_s.is_some()).count(),
        failed: per_connection.iter().filter(|r| r.failed.is_some()).count(),
        statuses,
        bytes_read: per_connection.iter().map(|r| r.bytes_read).sum(),
        complete: per_connection.iter().filter(|r| r.complete).count(),
        closed_by_peer: closes.len(),
        first_close_s: closes.iter().copied().reduce(f64::min),
        last_close_s: closes.iter().copied().reduce(f64::max),
        first_failure: per_connection.iter().find_map(|r| r.failed.clone()),
        per_connection,
    }
}

/// Connects with the small receive buffer set first, from `source` if given.
async fn connect(config: &SlowReadConfig) -> io::Result<TcpStream> {
    let addr: SocketAddr = config.target.addr;
    let socket = exchange::unbound_socket(addr)?;
    socket.set_recv_buffer_size(config.receive_buffer_bytes)?;
    if let Some(source) = config.source {
        socket.bind(SocketAddr::new(source, 0))?;
    }
    socket.connect(addr).await
}

/// Sends the GET, then reads at most `read_bytes` every `interval` until the server closes,
/// the response is complete, or `end`.
async fn read_slowly(
    mut stream: TcpStream,
    config: &SlowReadConfig,
    request: &[u8],
    start: Instant,
    end: Instant,
) -> ReaderReport {
    let mut report = ReaderReport {
        connected_s: Some(start.elapsed().as_secs_f64()),
        ..ReaderReport::default()
    };
    if let Err(error) = stream.write_all(request).await {
        report.failed = Some(format!("writing the request: {error}"));
        return report;
    }
    let mut head = ResponseHead::default();
    let mut buffer = vec![0; config.read_bytes.max(1)];
    let mut next_read = Instant::now();
    let reading = async {
        loop {
            tokio::time::sleep_until(next_read).await;
            next_read += config.interval;
            let read = stream.read(&mut buffer).await?;
            if read == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            report.bytes_read += read as u64;
            head.feed(&buffer[..read]);
            report.status = head.status;
            if head.total_bytes.is_some_and(|total| report.bytes_read >= total) {
                report.complete = true;
                return Ok(());
            }
        }
    };
    let outcome = tokio::time::timeout_at(end, reading).await;
    if let Ok(Err(error)) = outcome {
        report.closed_s = Some(start.elapsed().as_secs_f64());
        report.close = Some(match error.kind() {
            io::ErrorKind::UnexpectedEof => Close::Eof,
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => Close::Reset,
            _ => Close::Error,
        });
    }
    report
}

/// The response head as it trickles in: the first bytes kept until they parse.
#[derive(Debug, Default)]
struct ResponseHead {
    bytes: Vec<u8>,
    parsed: bool,
    status: Option<u16>,
    /// Head plus `Content-Length`: the response's size, when the head says.
    total_bytes: Option<u64>,
}

impl ResponseHead {
    fn feed(&mut self, read: &[u8]) {
        if self.parsed || self.bytes.len() >= MAX_HEAD_BYTES {
            return;
        }
        let room = MAX_HEAD_BYTES - self.bytes.len();
        self.bytes.extend_from_slice(&read[..read.len().min(room)]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&self.bytes) {
            Ok(httparse::Status::Complete(head_length)) => {
                self.parsed = true;
                self.status = response.code;
                let length = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<u64>().ok());
                self.total_bytes = length.map(|length| length + head_length as u64);
                self.bytes = Vec::new();
            }
            Ok(httparse::Status::Partial) => {}
            Err(_) => {
                self.parsed = true;
                self.bytes = Vec::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_parsed_across_reads() {
        let mut head = ResponseHead::default();
        head.feed(b"HTTP/1.1 200 OK\r\nContent-Le");
        assert_eq!(head.status, None);
        head.feed(b"ngth: 10\r\n\r\nabc");
        assert_eq!(head.status, Some(200));
        assert_eq!(head.total_bytes, Some(39 + 10), "head and body");
        head.feed(b"HTTP/1.1 500 later bytes are body");
        assert_eq!(head.status, Some(200));
    }

    #[test]
    fn a_head_without_length_or_with_garbage_leaves_the_size_unknown() {
        let mut head = ResponseHead::default();
        head.feed(b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!((head.status, head.total_bytes), (Some(503), None));
        let mut garbage = ResponseHead::default();
        garbage.feed(b"\x00\x01 not http\r\n\r\n");
        assert_eq!((garbage.status, garbage.total_bytes), (None, None));
    }
}
