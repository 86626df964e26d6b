//! The access log: one line per request, formatted on the proxy path and written by a
//! background thread so that a slow disk or a full pipe never blocks a request.
//!
//! [`AccessLog::log`] formats the line on the caller's thread and hands it to the
//! `holdfast-access-log` thread over a bounded channel. When that channel is full the
//! line is dropped and counted ([`AccessLog::dropped`]); the proxy never waits for the
//! log. The writer batches whatever is queued, writes it through one buffer, and flushes
//! whenever the queue runs empty. It exits, after a last flush, when every handle is
//! dropped.
//!
//! Two formats ([`AccessLogFormat`]): JSON (one object per line, every field always
//! present) and text (combined-log-like, with upstream fields appended as `key=value`).
//! Client-supplied values are escaped in both, so a request can never break or forge a
//! line. [`AccessLogConfig`] says where the lines go and in which format.

use std::fmt::{self, Write as _};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::metrics::{self, Family, NO_LABELS};

const DROPPED: Family = Family {
    name: "holdfast_access_log_dropped",
    help: "Access log lines dropped because the writer was behind.",
};

/// Lines that may wait for the writer. At a few hundred bytes a line this bounds the
/// queue to a few MiB, and covers well over a second of a busy proxy's lines while the
/// disk stalls.
const CHANNEL_LINES: usize = 16384;

/// The writer's buffer: large enough that a burst becomes a few big `write`s.
const BUFFER_BYTES: usize = 64 * 1024;

/// Where access log lines go and how they look. The default is no access log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessLogConfig {
    pub target: AccessLogTarget,
    pub format: AccessLogFormat,
}

/// Where access log lines go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AccessLogTarget {
    /// No access log (the default: it costs CPU on every request).
    #[default]
    Off,
    Stdout,
    File(PathBuf),
}

/// Where access log lines go when `[access_log]` is written (which turns the log on) but
/// names no target: stdout. Writing the table asks for a log, and stdout is where systemd
/// and container runtimes collect it.
pub const DEFAULT_ENABLED_TARGET: AccessLogTarget = AccessLogTarget::Stdout;

/// The shape of one access log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// One JSON object per line. The default: log pipelines parse JSON without a
    /// pattern, and every field stays present and typed.
    #[default]
    Json,
    /// Combined-log-like text with upstream fields appended.
    Text,
}

/// Everything one access log line says about a request.
#[derive(Debug, Clone)]
pub struct AccessEntry<'a> {
    /// When the request head arrived.
    pub time: SystemTime,
    pub client: SocketAddr,
    pub method: &'a str,
    /// Path and query, as the client sent them.
    pub target: &'a str,
    pub version: http::Version,
    pub host: Option<&'a str>,
    /// The status the client got.
    pub status: u16,
    /// Response body bytes sent to the client.
    pub bytes: u64,
    pub referer: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    /// The upstream group the request was for.
    pub upstream: Option<&'a str>,
    /// The server the request went to (`None`: refused before one was chosen).
    pub upstream_addr: Option<SocketAddr>,
    /// The status the upstream answered (`None`: no response head came).
    pub upstream_status: Option<u16>,
    /// The request went out on a pooled connection (`None`: no connection was had).
    pub reused: Option<bool>,
    /// A pooled connection failed under the request and it was sent again.
    pub retried: bool,
    /// The client's TLS version (`TLSv1.3`), `None` for cleartext.
    pub tls_version: Option<&'a str>,
    /// The ALPN protocol the client's TLS session negotiated (`-`: none offered).
    pub alpn: Option<&'a str>,
    /// Time to get a connection (queue and TCP connect; near zero when reused).
    pub upstream_connect_time: Option<Duration>,
    /// From asking for a connection to the upstream's response head.
    pub upstream_header_time: Option<Duration>,
    /// From asking for a connection to the end of the upstream's response body.
    pub upstream_response_time: Option<Duration>,
    /// From the request head arriving to the response ending.
    pub request_time: Duration,
    /// The whole response reached the client (false: the client left early, or the
    /// upstream body failed).
    pub completed: bool,
    /// Why holdfast answered by itself, if it did (for example `connect_refused`).
    pub error: Option<&'a str>,
}

/// A handle to the access log writer; cheap to clone.
#[derive(Debug, Clone)]
pub struct AccessLog {
    format: AccessLogFormat,
    lines: SyncSender<Vec<u8>>,
    shared: Arc<Shared>,
}

/// State the handles and the writer thread share.
#[derive(Debug, Default)]
struct Shared {
    dropped: AtomicU64,
    /// Set by [`AccessLog::reopen`], cleared by the writer when it acts on it.
    reopen: AtomicBool,
}

impl AccessLog {
    /// Starts the writer for `config`; `None` when the log is off. A file that cannot
    /// be opened is an error naming it.
    pub fn open(config: &AccessLogConfig) -> io::Result<Option<AccessLog>> {
        // The writer thread runs detached: it ends by itself once every handle is gone.
        Ok(AccessLog::start(config, CHANNEL_LINES)?.map(|(log, _writer)| log))
    }

    /// Formats `entry` and hands it to the writer; never blocks. When the writer is
    /// behind, the line is dropped and counted.
    pub fn log(&self, entry: &AccessEntry<'_>) {
        let line = match self.format {
            AccessLogFormat::Json => json_line(entry),
            AccessLogFormat::Text => text_line(entry),
        };
        // A full channel and a writer that is gone (it cannot panic, so only at
        // process exit) both lose the line; neither may hold up the request.
        if line.and_then(|line| self.lines.try_send(line).ok()).is_none() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lines dropped because the writer was behind, or because writing them failed.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Writes `holdfast_access_log_dropped` for `dropped` lines (0 without a log).
    pub fn report_dropped(dropped: u64, out: &mut metrics::Writer<'_>) -> std::fmt::Result {
        out.counter(&DROPPED, [(NO_LABELS, dropped)])
    }

    /// Makes the writer reopen its file before the next line (for log rotation).
    ///
    /// # Races
    /// Lines this thread logs after `reopen` returns go to the new file. Lines already
    /// queued may go to either: the writer checks the request before each line it takes.
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Relaxed);
    }

    /// Opens the target and starts the writer thread with room for `capacity` queued
    /// lines; returns the thread's handle too, so tests can wait for it to finish.
    fn start(
        config: &AccessLogConfig,
        capacity: usize,
    ) -> io::Result<Option<(AccessLog, JoinHandle<()>)>> {
        let (out, path): (Box<dyn Write + Send>, _) = match &config.target {
            AccessLogTarget::Off => return Ok(None),
            AccessLogTarget::Stdout => (Box::new(io::stdout()), None),
            AccessLogTarget::File(path) => (Box::new(open_append(path)?), Some(path.clone())),
        };
        let (log, lines) = AccessLog::channel(config.format, capacity);
        let writer = Writer {
            out: BufWriter::with_capacity(BUFFER_BYTES, out),
            path,
            shared: Arc::clone(&log.shared),
            failing: None,
        };
        let thread = std::thread::Builder::new()
            .name("holdfast-access-log".into())
            .spawn(move || writer.run(lines))?;
        Ok(Some((log, thread)))
    }

    /// A handle and the receiving end of its channel, with no writer yet.
    fn channel(format: AccessLogFormat, capacity: usize) -> (AccessLog, Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::sync_channel(capacity);
        (AccessLog { format, lines: tx, shared: Arc::default() }, rx)
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path).map_err(|e| {
        io::Error::new(e.kind(), format!("cannot open access log {}: {e}", path.display()))
    })
}

/// The writer thread's state.
struct Writer {
    out: BufWriter<Box<dyn Write + Send>>,
    /// The file being written (`None`: stdout), for reopening and for warnings.
    path: Option<PathBuf>,
    shared: Arc<Shared>,
    /// The kind of the last error reported, until a flush succeeds again; a run of
    /// failures of one kind gives one warning, not one per line.
    failing: Option<io::ErrorKind>,
}

impl Writer {
    fn run(mut self, lines: Receiver<Vec<u8>>) {
        // `recv` fails only when every `AccessLog` handle has been dropped.
        while let Ok(first) = lines.recv() {
            let mut line = first;
            loop {
                if self.shared.reopen.load(Ordering::Relaxed)
                    && self.shared.reopen.swap(false, Ordering::Relaxed)
                {
                    self.reopen();
                }
                self.write(&line);
                match lines.try_recv() {
                    Ok(next) => line = next,
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.flush();
        }
    }

    fn write(&mut self, line: &[u8]) {
        if let Err(e) = self.out.write_all(line) {
            let lost = 1 + self.discard_buffer();
            self.report(&e, lost, "access log write failed, dropping lines");
        }
    }

    fn flush(&mut self) {
        match self.out.flush() {
            Ok(()) => self.failing = None,
            Err(e) => {
                let lost = self.discard_buffer();
                self.report(&e, lost, "access log write failed, dropping lines");
            }
        }
    }

    /// Reopens the file at the same path, so that after a rotation (rename, then
    /// `reopen`) new lines go to a fresh file. On failure the old file stays in use.
    fn reopen(&mut self) {
        let Some(path) = &self.path else { return };
        match open_append(path) {
            Ok(file) => {
                // Lines before the reopen belong in the old file.
                self.flush();
                self.out = BufWriter::with_capacity(BUFFER_BYTES, Box::new(file));
            }
            Err(e) => self.report(&e, 0, "access log reopen failed, keeping the old file"),
        }
    }

    /// Throws away buffered bytes a failed write left behind, so a stuck buffer cannot
    /// turn every later line into an error; returns how many lines they held (a line
    /// partly written counts as lost).
    fn discard_buffer(&mut self) -> u64 {
        let empty: Box<dyn Write + Send> = Box::new(io::sink());
        let out = std::mem::replace(&mut self.out, BufWriter::with_capacity(0, empty));
        let (inner, buffered) = out.into_parts();
        self.out = BufWriter::with_capacity(BUFFER_BYTES, inner);
        let buffered = buffered.unwrap_or_default();
        buffered.iter().filter(|&&b| b == b'\n').count() as u64
    }

    fn report(&mut self, error: &io::Error, lost: u64, message: &'static str) {
        self.shared.dropped.fetch_add(lost, Ordering::Relaxed);
        if self.failing != Some(error.kind()) {
            self.failing = Some(error.kind());
            let target = self.path.as_deref().map_or("stdout".into(), Path::to_string_lossy);
            tracing::warn!(%target, %error, "{message}");
        }
    }
}

/// One JSON line. Fields appear in this order, each always present.
#[derive(Serialize)]
struct JsonLine<'a> {
    time: Rfc3339,
    client: SocketAddr,
    method: &'a str,
    path: &'a str,
    protocol: &'static str,
    host: Option<&'a str>,
    status: u16,
    bytes: u64,
    referer: Option<&'a str>,
    user_agent: Option<&'a str>,
    upstream: Option<&'a str>,
    upstream_addr: Option<SocketAddr>,
    upstream_status: Option<u16>,
    reused: Option<bool>,
    retried: bool,
    upstream_connect_time: Option<f64>,
    upstream_header_time: Option<f64>,
    upstream_response_time: Option<f64>,
    request_time: f64,
    completed: bool,
    error: Option<&'a str>,
    tls_version: Option<&'a str>,
    alpn: Option<&'a str>,
}

fn json_line(e: &AccessEntry<'_>) -> Option<Vec<u8>> {
    let secs = |d: Duration| d.as_micros() as f64 / 1e6;
    let line = JsonLine {
        time: Rfc3339(e.time),
        client: e.client,
        method: e.method,
        path: e.target,
        protocol: protocol(e.version),
        host: e.host,
        status: e.status,
        bytes: e.bytes,
        referer: e.referer,
        user_agent: e.user_agent,
        upstream: e.upstream,
        upstream_addr: e.upstream_addr,
        upstream_status: e.upstream_status,
        reused: e.reused,
        retried: e.retried,
        upstream_connect_time: e.upstream_connect_time.map(secs),
        upstream_header_time: e.upstream_header_time.map(secs),
        upstream_response_time: e.upstream_response_time.map(secs),
        request_time: secs(e.request_time),
        tls_version: e.tls_version,
        alpn: e.alpn,
        completed: e.completed,
        error: e.error,
    };
    let mut out = Vec::with_capacity(512);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, SecondsFormatter);
    line.serialize(&mut serializer).ok()?;
    out.push(b'\n');
    Some(out)
}

/// Compact JSON, with floats (the times, in seconds) written as fixed-point with six
/// decimals: `0.000003`, where the default would give `3e-6`.
struct SecondsFormatter;

impl serde_json::ser::Formatter for SecondsFormatter {
    fn write_f64<W: ?Sized + Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        write!(writer, "{value:.6}")
    }
}

/// A timestamp that serializes as RFC 3339 UTC with milliseconds.
struct Rfc3339(SystemTime);

impl Serialize for Rfc3339 {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_rfc3339_millis(clamp_time(self.0)))
    }
}

/// `time` within what `humantime` formats (1970 to 9999): it panics before the epoch
/// and fails after 9999, and a wrong system clock must not lose or crash a request.
fn clamp_time(time: SystemTime) -> SystemTime {
    const LAST: Duration = Duration::from_millis(253_402_300_799_999);
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) if since <= LAST => time,
        Ok(_) => UNIX_EPOCH + LAST,
        Err(_) => UNIX_EPOCH,
    }
}

/// The protocol as a request line spells it (what `Version`'s `Debug` prints).
fn protocol(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    }
}

fn text_line(e: &AccessEntry<'_>) -> Option<Vec<u8>> {
    let mut out = String::with_capacity(256);
    write_text(&mut out, e).ok()?;
    out.push('\n');
    Some(out.into_bytes())
}

/// `client - - [time] "request" status bytes "referer" "user_agent"`, then the upstream
/// fields as `key=value`; `-` for a missing value.
fn write_text(out: &mut String, e: &AccessEntry<'_>) -> fmt::Result {
    let time = humantime::format_rfc3339_millis(clamp_time(e.time));
    write!(out, "{} - - [{time}] \"", e.client.ip())?;
    escape(out, e.method, false);
    out.push(' ');
    escape(out, e.target, false);
    write!(out, " {}\" {} {} ", protocol(e.version), e.status, e.bytes)?;
    quoted(out, e.referer);
    out.push(' ');
    quoted(out, e.user_agent);
    out.push_str(" upstream=");
    match e.upstream {
        Some(name) => escape(out, name, true),
        None => out.push('-'),
    }
    out.push_str(" upstream_addr=");
    option(out, e.upstream_addr)?;
    out.push_str(" upstream_status=");
    option(out, e.upstream_status)?;
    out.push_str(" reused=");
    option(out, e.reused.map(u8::from))?;
    write!(out, " retried={}", u8::from(e.retried))?;
    for (key, time) in [
        ("uct", e.upstream_connect_time),
        ("uht", e.upstream_header_time),
        ("urt", e.upstream_response_time),
        ("rt", Some(e.request_time)),
    ] {
        write!(out, " {key}=")?;
        option(out, time.map(Seconds))?;
    }
    write!(out, " completed={}", u8::from(e.completed))?;
    // Only requests over TLS have these.
    if let Some(version) = e.tls_version {
        write!(out, " tls={version} alpn={}", e.alpn.unwrap_or("-"))?;
    }
    if let Some(error) = e.error {
        out.push_str(" error=");
        escape(out, error, true);
    }
    Ok(())
}

/// Seconds with three decimals (milliseconds), as nginx logs times.
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}", self.0.as_secs_f64())
    }
}

fn option(out: &mut String, value: Option<impl fmt::Display>) -> fmt::Result {
    match value {
        Some(v) => write!(out, "{v}"),
        None => {
            out.push('-');
            Ok(())
        }
    }
}

/// `"value"`, escaped, or `"-"` when missing.
fn quoted(out: &mut String, value: Option<&str>) {
    out.push('"');
    escape(out, value.unwrap_or("-"), false);
    out.push('"');
}

/// Appends `value` with `"`, `\` and every byte outside printable ASCII written as
/// `\xHH` (as nginx does), and spaces too when `space` is set (for unquoted values), so
/// that no value can end a field or a line early.
fn escape(out: &mut String, value: &str, space: bool) {
    for &b in value.as_bytes() {
        let plain = matches!(b, 0x21..=0x7e) && b != b'"' && b != b'\\' || b == b' ' && !space;
        if plain {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\x{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests;
