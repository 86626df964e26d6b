//! gRPC calls over HTTP/2 with prior knowledge (h2c), closed loop, on the `h2` crate's
//! client: `connections` connections, each carrying `streams` calls at once, each call
//! followed by the next on its stream slot until `duration` has passed.
//!
//! A call is a POST to the target's path with `content-type: application/grpc` and
//! `te: trailers`. It sends `messages` messages ([`grpc_message::encode`]), one at a time:
//! each goes out once the echo of the one before has come back, the last one with the
//! end of the stream. With one message that is a unary call; with more, a bidirectional
//! stream in lockstep. A call is good when every echo came back byte for byte, the
//! response said status 200, and its trailers `grpc-status: 0`.
//!
//! Latency is each message's round trip: from its send to the last byte of its echo.
//! Calls under way when `duration` ends are finished, each within [`CALL_TIMEOUT`]
//! (past it the stream is reset and the call counts as timed out); a connection that
//! breaks is made again after [`RECONNECT_PAUSE`] until `duration` ends.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use h2::RecvStream;
use http::header::{HeaderValue, CONTENT_TYPE, TE};
use http::{HeaderMap, Method, Request, StatusCode};
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::grpc_message::{self, PREFIX_BYTES};
use super::target::Target;
use crate::histogram::{Histogram, LatencySummary};

/// Longest one call may take, all its messages included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a connect and the HTTP/2 handshake may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Wait before making a broken connection again, so a refusing server is not hammered.
pub const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// The media type of every call.
const CONTENT_TYPE_GRPC: &str = "application/grpc";

#[derive(Debug, Clone)]
pub struct GrpcConfig {
    /// Where to connect, and the call's path (`/package.Service/Method`).
    pub target: Target,
    pub connections: usize,
    /// Calls in flight at once on each connection.
    pub streams: usize,
    /// Messages each call sends (1: a unary call).
    pub messages: u32,
    /// Bytes of each message after gRPC's 5-byte prefix.
    pub payload_bytes: usize,
    /// No call starts after this.
    pub duration: Duration,
}

/// Why a call failed; the JSON names of `errors_by_kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallErrorKind {
    /// The TCP connect or the HTTP/2 handshake failed.
    Connect,
    /// The stream was reset or the connection broke under it.
    Stream,
    /// The response's status was not 200.
    HttpStatus,
    /// `grpc-status` was missing or not 0.
    GrpcStatus,
    /// An echo came back different, short, or with bytes after the last one.
    Echo,
    /// The call took longer than [`CALL_TIMEOUT`].
    Timeout,
}

impl CallErrorKind {
    const ALL: [CallErrorKind; 6] = [
        CallErrorKind::Connect,
        CallErrorKind::Stream,
        CallErrorKind::HttpStatus,
        CallErrorKind::GrpcStatus,
        CallErrorKind::Echo,
        CallErrorKind::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CallErrorKind::Connect => "connect",
            CallErrorKind::Stream => "stream",
            CallErrorKind::HttpStatus => "http_status",
            CallErrorKind::GrpcStatus => "grpc_status",
            CallErrorKind::Echo => "echo",
            CallErrorKind::Timeout => "timeout",
        }
    }

    /// Failures below gRPC: the transport, not an answer.
    fn is_socket_error(self) -> bool {
        matches!(self, CallErrorKind::Connect | CallErrorKind::Stream | CallErrorKind::Timeout)
    }

    /// An answer that said no: an HTTP or gRPC status.
    fn is_status_error(self) -> bool {
        matches!(self, CallErrorKind::HttpStatus | CallErrorKind::GrpcStatus)
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|&kind| kind == self).expect("every kind is in ALL")
    }
}

/// A failed call: its kind and what happened, in words.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", kind.as_str())]
pub struct CallError {
    pub kind: CallErrorKind,
    pub message: String,
}

impl CallError {
    fn new(kind: CallErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

impl From<h2::Error> for CallError {
    fn from(error: h2::Error) -> Self {
        CallError::new(CallErrorKind::Stream, error.to_string())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct GrpcReport {
    pub mode: &'static str,
    /// `unary` (one message per call) or `streaming`.
    pub kind: &'static str,
    pub connections: usize,
    pub streams: usize,
    pub messages_per_call: u32,
    pub payload_bytes: usize,
    /// From the start until the last call ended.
    pub duration_s: f64,
    /// Calls that ended, good or failed (connect failures, which start no call, apart).
    pub requests: u64,
    /// Calls that were good.
    pub ok: u64,
    /// Messages whose echo came back byte for byte, in good and failed calls.
    pub messages: u64,
    /// Calls per second.
    pub rps: f64,
    pub messages_per_s: f64,
    /// Calls answered with an HTTP status other than 200 or a `grpc-status` other than 0.
    pub non_2xx: u64,
    /// Failed connects, broken streams and timeouts.
    pub socket_errors: u64,
    /// Every failure: `non_2xx` + `socket_errors` + wrong echoes.
    pub errors: u64,
    pub errors_by_kind: BTreeMap<&'static str, u64>,
    /// Connections made (one per connection unless one broke).
    pub connects: u64,
    /// Each message's round trip, microseconds.
    pub latency_us: LatencySummary,
    /// The first failure of each kind, in words.
    pub first_errors: Vec<(CallErrorKind, String)>,
}

/// What every call of a run counted, shared by all of them.
#[derive(Debug, Default)]
struct GrpcTally {
    ok: AtomicU64,
    messages: AtomicU64,
    connects: AtomicU64,
    errors: [AtomicU64; CallErrorKind::ALL.len()],
    first_errors: [OnceLock<String>; CallErrorKind::ALL.len()],
    round_trip_us: Mutex<Histogram>,
}

impl GrpcTally {
    fn record_error(&self, error: &CallError) {
        let index = error.kind.index();
        self.errors[index].fetch_add(1, Ordering::Relaxed);
        let _ = self.first_errors[index].set(error.message.clone());
    }

    fn record_round_trip(&self, round_trip: Duration) {
        let micros = u64::try_from(round_trip.as_micros()).unwrap_or(u64::MAX);
        self.round_trip_us.lock().unwrap_or_else(PoisonError::into_inner).record(micros);
        self.messages.fetch_add(1, Ordering::Relaxed);
    }

    fn error_count(&self, kind: CallErrorKind) -> u64 {
        self.errors[kind.index()].load(Ordering::Relaxed)
    }

    fn report(&self, config: &GrpcConfig, elapsed: Duration) -> GrpcReport {
        let count = |filter: fn(CallErrorKind) -> bool| -> u64 {
            CallErrorKind::ALL.into_iter().filter(|&k| filter(k)).map(|k| self.error_count(k)).sum()
        };
        let errors = count(|_| true);
        let connect_errors = self.error_count(CallErrorKind::Connect);
        let ok = self.ok.load(Ordering::Relaxed);
        let messages = self.messages.load(Ordering::Relaxed);
        let requests = ok + errors - connect_errors;
        let seconds = elapsed.as_secs_f64();
        let per_second = |n: u64| if seconds > 0.0 { n as f64 / seconds } else { 0.0 };
        let histogram = self.round_trip_us.lock().unwrap_or_else(PoisonError::into_inner);
        GrpcReport {
            mode: "grpc",
            kind: if config.messages == 1 { "unary" } else { "streaming" },
            connections: config.connections,
            streams: config.streams,
            messages_per_call: config.messages,
            payload_bytes: config.payload_bytes,
            duration_s: seconds,
            requests,
            ok,
            messages,
            rps: per_second(requests),
            messages_per_s: per_second(messages),
            non_2xx: count(CallErrorKind::is_status_error),
            socket_errors: count(CallErrorKind::is_socket_error),
            errors,
            errors_by_kind: CallErrorKind::ALL
                .into_iter()
                .map(|kind| (kind.as_str(), self.error_count(kind)))
                .collect(),
            connects: self.connects.load(Ordering::Relaxed),
            latency_us: histogram.summary(),
            first_errors: CallErrorKind::ALL
                .into_iter()
                .filter_map(|kind| Some((kind, self.first_errors[kind.index()].get()?.clone())))
                .collect(),
        }
    }
}

/// Runs the calls of `config` until its duration has passed and every call under way has
/// ended; returns what they counted.
pub async fn run(config: GrpcConfig) -> GrpcReport {
    let config = Arc::new(config);
    let tally = Arc::new(GrpcTally::default());
    let started = Instant::now();
    let deadline = started + config.duration;
    let mut connections = JoinSet::new();
    for _ in 0..config.connections {
        connections.spawn(drive_connection(Arc::clone(&config), Arc::clone(&tally), deadline));
    }
    while connections.join_next().await.is_some() {}
    tally.report(&config, started.elapsed())
}

/// One connection slot: connects, runs `streams` call loops on the connection until the
/// deadline, and connects again (after a pause) if the connection broke before it.
async fn drive_connection(config: Arc<GrpcConfig>, tally: Arc<GrpcTally>, deadline: Instant) {
    while Instant::now() < deadline {
        match connect(&config.target).await {
            Ok(sender) => {
                tally.connects.fetch_add(1, Ordering::Relaxed);
                let mut loops = JoinSet::new();
                for _ in 0..config.streams {
                    loops.spawn(call_loop(
                        sender.clone(),
                        Arc::clone(&config),
                        Arc::clone(&tally),
                        deadline,
                    ));
                }
                drop(sender);
                while loops.join_next().await.is_some() {}
            }
            Err(error) => tally.record_error(&error),
        }
        if Instant::now() < deadline {
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }
}

/// A new HTTP/2 connection (prior knowledge) to `target`, its driver on a task of its
/// own that ends once every handle to it is gone and its streams are done.
async fn connect(target: &Target) -> Result<SendRequest<Bytes>, CallError> {
    let handshake = async {
        let stream = TcpStream::connect(target.addr).await?;
        // Small messages must not wait for Nagle; failing only costs latency.
        let _ = stream.set_nodelay(true);
        h2::client::handshake(stream).await.map_err(io::Error::other)
    };
    let (sender, connection) = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| CallError::new(CallErrorKind::Connect, "connect timed out"))?
        .map_err(|error| CallError::new(CallErrorKind::Connect, error.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Calls one after another on one stream slot of a connection until the deadline; ends
/// early when the connection can take no more streams (it broke).
async fn call_loop(
    sender: SendRequest<Bytes>,
    config: Arc<GrpcConfig>,
    tally: Arc<GrpcTally>,
    deadline: Instant,
) {
    let request = call_request(&config.target);
    while Instant::now() < deadline {
        let Ok(mut ready) = sender.clone().ready().await else {
            return;
        };
        match tokio::time::timeout(CALL_TIMEOUT, call(&mut ready, &request, &config, &tally)).await
        {
            Ok(Ok(())) => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(error)) => tally.record_error(&error),
            Err(_) => tally.record_error(&CallError::new(
                CallErrorKind::Timeout,
                format!("no end of the call within {CALL_TIMEOUT:?}"),
            )),
        }
    }
}

/// The head of every call: POST to the target's path, `content-type:
/// application/grpc`, `te: trailers`.
fn call_request(target: &Target) -> Request<()> {
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = target.absolute_uri();
    let headers = request.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_GRPC));
    headers.insert(TE, HeaderValue::from_static("trailers"));
    request
}

/// One call: its messages in lockstep with their echoes, then the end of the response
/// and its `grpc-status`. Each echoed message is counted as it comes back.
async fn call(
    sender: &mut SendRequest<Bytes>,
    head: &Request<()>,
    config: &GrpcConfig,
    tally: &GrpcTally,
) -> Result<(), CallError> {
    let (response, mut send) = sender.send_request(clone_head(head), false)?;
    let mut response = Some(response);
    let mut body: Option<RecvStream> = None;
    let mut inbox = BytesMut::new();
    for number in 0..config.messages {
        let message = grpc_message::encode(u64::from(number), config.payload_bytes);
        let sent = Instant::now();
        send.send_data(message.clone(), number + 1 == config.messages)?;
        // The response head comes after the first message at the latest, as a proxy
        // may hold the call until the request's first DATA arrives.
        if let Some(response) = response.take() {
            body = Some(check_head(response.await?)?);
        }
        let body = body.as_mut().expect("set from the head above");
        read_echo(body, &mut inbox, &message).await?;
        tally.record_round_trip(sent.elapsed());
    }
    let body = body.as_mut().expect("a call sends at least one message");
    expect_end(body, &inbox).await?;
    check_grpc_status(body.trailers().await?.as_ref())
}

/// `Request<()>` is not `Clone`; a call's head is copied field by field.
fn clone_head(head: &Request<()>) -> Request<()> {
    let mut request = Request::new(());
    *request.method_mut() = head.method().clone();
    *request.uri_mut() = head.uri().clone();
    *request.headers_mut() = head.headers().clone();
    request
}

/// The response's body, if its head says status 200 and no `grpc-status` already (a
/// "trailers-only" response: the call failed before any message).
fn check_head(response: http::Response<RecvStream>) -> Result<RecvStream, CallError> {
    if response.status() != StatusCode::OK {
        return Err(CallError::new(
            CallErrorKind::HttpStatus,
            format!("response status {}", response.status()),
        ));
    }
    if let Some(status) = response.headers().get("grpc-status") {
        return Err(CallError::new(
            CallErrorKind::GrpcStatus,
            format!("grpc-status {status:?} in the response head, before any message"),
        ));
    }
    Ok(response.into_body())
}

/// Reads until `inbox` holds `message`'s length, gives the window back for what it read,
/// and takes the echo off `inbox`; an error unless it equals `message`.
async fn read_echo(
    body: &mut RecvStream,
    inbox: &mut BytesMut,
    message: &Bytes,
) -> Result<(), CallError> {
    while inbox.len() < message.len() {
        let Some(chunk) = body.data().await else {
            return Err(CallError::new(
                CallErrorKind::Echo,
                format!("the response ended after {} of {} bytes", inbox.len(), message.len()),
            ));
        };
        let chunk = chunk?;
        body.flow_control().release_capacity(chunk.len())?;
        inbox.extend_from_slice(&chunk);
    }
    let echo = inbox.split_to(message.len());
    if echo != message[..] {
        let prefix = &echo[..PREFIX_BYTES.min(echo.len())];
        return Err(CallError::new(
            CallErrorKind::Echo,
            format!("the echo of a {}-byte message differs (prefix {prefix:?})", message.len()),
        ));
    }
    Ok(())
}

/// After the last echo the response body must end with nothing more.
async fn expect_end(body: &mut RecvStream, inbox: &BytesMut) -> Result<(), CallError> {
    let mut extra = inbox.len();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        body.flow_control().release_capacity(chunk.len())?;
        extra += chunk.len();
    }
    if extra > 0 {
        return Err(CallError::new(
            CallErrorKind::Echo,
            format!("{extra} bytes after the last echo"),
        ));
    }
    Ok(())
}

/// The call's trailers must say `grpc-status: 0`.
fn check_grpc_status(trailers: Option<&HeaderMap>) -> Result<(), CallError> {
    match trailers.and_then(|t| t.get("grpc-status")) {
        Some(status) if status == "0" => Ok(()),
        Some(status) => Err(CallError::new(
            CallErrorKind::GrpcStatus,
            format!("grpc-status {status:?} ({:?})", trailers.and_then(|t| t.get("grpc-message"))),
        )),
        None => Err(CallError::new(CallErrorKind::GrpcStatus, "no grpc-status in the trailers")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_head_is_a_grpc_post_to_the_target() {
        let target = Target::parse("http://127.0.0.1:9/bench.Echo/Unary").expect("target");
        let head = call_request(&target);
        assert_eq!(head.method(), Method::POST);
        assert_eq!(head.uri(), "http://127.0.0.1:9/bench.Echo/Unary");
        assert_eq!(head.headers()[CONTENT_TYPE], "application/grpc");
        assert_eq!(head.headers()[TE], "trailers");
        let copy = clone_head(&head);
        assert_eq!(
            (copy.method(), copy.uri(), copy.headers()),
            (head.method(), head.uri(), head.headers())
        );
    }

    #[test]
    fn only_grpc_status_zero_is_good() {
        let mut trailers = HeaderMap::new();
        assert_eq!(
            check_grpc_status(Some(&trailers)).expect_err("none").kind,
            CallErrorKind::GrpcStatus
        );
        assert!(check_grpc_status(None).is_err());
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
        assert!(check_grpc_status(Some(&trailers)).is_err());
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(check_grpc_status(Some(&trailers)).is_ok());
    }

    #[test]
    fn the_report_splits_failures_as_the_harness_reads_them() {
        let tally = GrpcTally::default();
        tally.ok.fetch_add(10, Ordering::Relaxed);
        for kind in CallErrorKind::ALL {
            tally.record_error(&CallError::new(kind, kind.as_str()));
        }
        tally.record_round_trip(Duration::from_micros(50));
        let config = GrpcConfig {
            target: Target::parse("http://127.0.0.1:9/x").expect("target"),
            connections: 1,
            streams: 1,
            messages: 100,
            payload_bytes: 100,
            duration: Duration::from_secs(1),
        };
        let report = tally.report(&config, Duration::from_secs(2));
        assert_eq!(report.kind, "streaming");
        // a failed connect starts no call
        assert_eq!((report.requests, report.ok, report.errors), (15, 10, 6));
        assert_eq!((report.non_2xx, report.socket_errors), (2, 3));
        assert_eq!(report.errors_by_kind["timeout"], 1);
        assert_eq!(report.rps, 7.5);
        assert_eq!(report.messages, 1);
        assert_eq!(report.first_errors.len(), 6);
    }
}
