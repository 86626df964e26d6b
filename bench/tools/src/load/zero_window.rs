//! Zero-window HTTP/2 clients: each connection opens many streams, each asking for a large
//! response, and never sends a WINDOW_UPDATE, so the server may send only the 65,535 bytes
//! of the connection's first window in all. The clients keep reading the socket (so TCP is
//! never what holds the server back; only HTTP/2 flow control is), ACK the server's
//! SETTINGS and answer its PINGs, as a live client does.
//!
//! Reported per connection: what arrived (response heads, DATA bytes, resets, GOAWAY) and
//! when the server closed it, in seconds from the start of the run; a connection still
//! open at the end of `duration` is closed by the client then.
//!
//! Bounded: everything ends at `duration`; the connects, and the wait for the server's
//! first SETTINGS, each within [`SETTINGS_WAIT`] of the start.

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::exchange;
use super::h2_frame::{self as frame, FrameHead, FrameType};
use super::target::Target;

/// How long a connection waits for the server's SETTINGS before opening its streams
/// anyway.
pub const SETTINGS_WAIT: Duration = Duration::from_secs(5);
/// Longest frame payload read (a server may raise nothing above 16,384 without being
/// asked to; this leaves room for any frame a broken one sends).
const MAX_PAYLOAD_BYTES: u32 = 1 << 24;

#[derive(Debug, Clone)]
pub struct ZeroWindowConfig {
    pub target: Target,
    pub connections: usize,
    /// Streams opened on each connection (fewer if the server allows fewer at once).
    pub streams: u32,
    pub duration: Duration,
    /// Local address the connections come from; None: the kernel picks.
    pub source: Option<IpAddr>,
}

/// How the server ended a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Close {
    /// A FIN: the server closed it.
    Eof,
    /// A reset (RST).
    Reset,
    /// Any other socket error.
    Error,
}

/// One connection as it went; times in seconds from the start of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConnectionReport {
    pub connected_s: Option<f64>,
    /// Why it never got going: the connect failed, or the preface could not be written.
    pub failed: Option<String>,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS, if it sent one.
    pub max_concurrent_streams: Option<u32>,
    pub streams_opened: u32,
    /// Response heads (HEADERS frames).
    pub responses: u64,
    /// Of them with `:status 200` (static index 8, one byte).
    pub responses_200: u64,
    /// Streams the server ended (END_STREAM on DATA or HEADERS).
    pub streams_ended: u64,
    pub data_bytes: u64,
    pub resets: u64,
    pub pings: u64,
    /// SETTINGS frames of the server this client acknowledged.
    pub settings_acked: u64,
    pub goaway_s: Option<f64>,
    /// The GOAWAY's error code (0: NO_ERROR).
    pub goaway_code: Option<u32>,
    /// When the server closed the connection; None: open until the end of the run.
    pub closed_s: Option<f64>,
    pub close: Option<Close>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ZeroWindowReport {
    pub mode: &'static str,
    pub source: Option<IpAddr>,
    pub duration_s: f64,
    pub connections: usize,
    pub connected: usize,
    pub streams_opened: u64,
    pub responses: u64,
    pub data_bytes: u64,
    pub resets: u64,
    pub goaways: u64,
    /// Connections the server closed before the end of the run.
    pub closed_by_peer: usize,
    pub first_close_s: Option<f64>,
    pub last_close_s: Option<f64>,
    pub per_connection: Vec<ConnectionReport>,
}

pub async fn run(config: ZeroWindowConfig) -> ZeroWindowReport {
    let start = Instant::now();
    let end = start + config.duration;
    let mut tasks = JoinSet::new();
    for index in 0..config.connections {
        let config = config.clone();
        tasks.spawn(async move { (index, one_connection(&config, start, end).await) });
    }
    let mut per_connection = vec![ConnectionReport::default(); config.connections];
    while let Some(joined) = tasks.join_next().await {
        let (index, report) = joined.expect("zero-window connections do not panic");
        per_connection[index] = report;
    }
    let closes: Vec<f64> = per_connection.iter().filter_map(|c| c.closed_s).collect();
    ZeroWindowReport {
        mode: "zero-window",
        source: config.source,
        duration_s: config.duration.as_secs_f64(),
        connections: config.connections,
        connected: per_connection.iter().filter(|c| c.connected_s.is_some()).count(),
        streams_opened: per_connection.iter().map(|c| u64::from(c.streams_opened)).sum(),
        responses: per_connection.iter().map(|c| c.responses).sum(),
        data_bytes: per_connection.iter().map(|c| c.data_bytes).sum(),
        resets: per_connection.iter().map(|c| c.resets).sum(),
        goaways: per_connection.iter().filter(|c| c.goaway_s.is_some()).count() as u64,
        closed_by_peer: closes.len(),
        first_close_s: closes.iter().copied().reduce(f64::min),
        last_close_s: closes.iter().copied().reduce(f64::max),
        per_connection,
    }
}

/// One connection from connect to `end` (or to the server's close).
async fn one_connection(
    config: &ZeroWindowConfig,
    start: Instant,
    end: Instant,
) -> ConnectionReport {
    let mut report = ConnectionReport::default();
    let connect = exchange::connect_tcp_from(config.target.addr, config.source);
    let stream = match tokio::time::timeout_at(start + SETTINGS_WAIT, connect).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            report.failed = Some(error.to_string());
            return report;
        }
        Err(_) => {
            report.failed = Some(format!("no connect within {SETTINGS_WAIT:?}"));
            return report;
        }
    };
    report.connected_s = Some(start.elapsed().as_secs_f64());
    let (reader, writer) = stream.into_split();
    let mut connection = StalledConnection { reader, writer, config, report, opened: false };
    let outcome = tokio::time::timeout_at(end, connection.drive(start)).await;
    let mut report = connection.report;
    if let Ok(Err(error)) = outcome {
        report.closed_s = Some(start.elapsed().as_secs_f64());
        report.close = Some(match error.kind() {
            io::ErrorKind::UnexpectedEof => Close::Eof,
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => Close::Reset,
            _ => Close::Error,
        });
    }
    // Past `end` (or after the server's close) the connection is dropped: closed here.
    report
}

/// A connection that opens its streams and then only reads, acknowledges and answers pings.
struct StalledConnection<'a> {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    config: &'a ZeroWindowConfig,
    report: ConnectionReport,
    opened: bool,
}

impl StalledConnection<'_> {
    /// Runs until the server closes the connection (an error) or the caller's deadline.
    async fn drive(&mut self, start: Instant) -> io::Result<()> {
        let mut hello = frame::PREFACE.to_vec();
        frame::write_settings(&mut hello, &[(frame::SETTINGS_ENABLE_PUSH, 0)]);
        self.writer.write_all(&hello).await?;
        let settings_deadline = start + SETTINGS_WAIT;
        let mut payload = Vec::new();
        loop {
            let head = if self.opened {
                self.read_frame(&mut payload).await?
            } else {
                match tokio::time::timeout_at(settings_deadline, self.read_frame(&mut payload))
                    .await
                {
                    Ok(head) => head?,
                    Err(_) => {
                        self.open_streams().await?;
                        continue;
                    }
                }
            };
            self.handle(head, &payload, start).await?;
        }
    }

    async fn read_frame(&mut self, payload: &mut Vec<u8>) -> io::Result<FrameHead> {
        let mut head = [0; frame::HEAD_BYTES];
        self.reader.read_exact(&mut head).await?;
        let head = FrameHead::parse(head);
        if head.length > MAX_PAYLOAD_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "frame over 16 MiB"));
        }
        payload.resize(head.length as usize, 0);
        self.reader.read_exact(payload).await?;
        Ok(head)
    }

    async fn handle(&mut self, head: FrameHead, payload: &[u8], start: Instant) -> io::Result<()> {
        let report = &mut self.report;
        match head.kind {
            FrameType::Data => {
                report.data_bytes += u64::from(head.length);
                report.streams_ended += u64::from(head.has(frame::FLAG_END_STREAM));
            }
            FrameType::Headers => {
                report.responses += 1;
                let block = frame::header_block(&head, payload).unwrap_or_default();
                report.responses_200 +=
                    u64::from(block.first() == Some(&frame::STATUS_200_INDEXED));
                report.streams_ended += u64::from(head.has(frame::FLAG_END_STREAM));
            }
            FrameType::RstStream => report.resets += 1,
            FrameType::Settings if !head.has(frame::FLAG_ACK) => {
                if let Some(limit) = frame::setting(payload, frame::SETTINGS_MAX_CONCURRENT_STREAMS)
                {
                    report.max_concurrent_streams = Some(limit);
                }
                let mut ack = Vec::with_capacity(frame::HEAD_BYTES);
                frame::write_frame(&mut ack, FrameType::Settings, frame::FLAG_ACK, 0, &[]);
                self.writer.write_all(&ack).await?;
                self.report.settings_acked += 1;
                if !self.opened {
                    self.open_streams().await?;
                }
            }
            FrameType::Ping if !head.has(frame::FLAG_ACK) => {
                let mut pong = Vec::with_capacity(frame::HEAD_BYTES + payload.len());
                frame::write_frame(&mut pong, FrameType::Ping, frame::FLAG_ACK, 0, payload);
                self.writer.write_all(&pong).await?;
                self.report.pings += 1;
            }
            FrameType::GoAway if report.goaway_s.is_none() => {
                report.goaway_s = Some(start.elapsed().as_secs_f64());
                report.goaway_code = payload
                    .get(4..8)
                    .map(|code| u32::from_be_bytes([code[0], code[1], code[2], code[3]]));
            }
            // WINDOW_UPDATE, PRIORITY, CONTINUATION, SETTINGS and PING ACKs, PUSH_PROMISE
            // (refused by ENABLE_PUSH 0) and unknown types change nothing here.
            _ => {}
        }
        Ok(())
    }

    /// Sends a GET on each of the streams, as many as the server allows at once.
    async fn open_streams(&mut self) -> io::Result<()> {
        self.opened = true;
        let count = self.config.streams.min(self.report.max_concurrent_streams.unwrap_or(u32::MAX));
        let target = &self.config.target;
        let mut requests = Vec::new();
        for n in 0..count {
            frame::write_get(
                &mut requests,
                2 * n + 1,
                target.authority(),
                target.path_and_query().as_bytes(),
            );
        }
        self.writer.write_all(&requests).await?;
        self.report.streams_opened = count;
        Ok(())
    }
}
