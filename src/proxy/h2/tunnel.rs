//! The bytes of a tunnel on an HTTP/2 client's stream (a WebSocket opened with an
//! extended CONNECT, RFC 8441), both ways at once until both have ended: the stream's
//! DATA frames to the origin, and the origin's bytes back as DATA frames. The origin's
//! end is an HTTP/1.1 connection that switched protocols ([`to_connection`]) or a
//! stream of an HTTP/2 origin ([`to_stream`]).
//!
//! Flow-control credit goes back to a sender as its bytes are written on, so neither
//! side can make holdfast hold more than a window of the other's bytes. An end goes on
//! as an end: the client's END_STREAM shuts the origin connection's sending side (or
//! ends the origin's stream), the origin's EOF (or END_STREAM) ends the client's
//! stream. A failure on either side resets the client's stream (`CANCEL`) and closes
//! the origin's side.
//!
//! # Time
//! Like an HTTP/1.1 upgraded connection, a tunnel has no idle limit: it stays while
//! neither side ends it. What is bounded by `stall` (`timeouts.read`, which bounds
//! the HTTP/1.1 tunnel's first writes too): each wait for a side to take bytes (a
//! flow-control window, room in the origin's socket), and, once one direction has
//! ended, the other: it must move a byte every `stall` or the tunnel closes, so a side
//! that ended and left the other open does not hold the stream for good.
//!
//! A stream reset with `NO_ERROR` is an end, not a failure: an HTTP/2 peer that has
//! sent all it will says so to stop the other side sending (RFC 9113, 8.1).

use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use holdfast_h2::error::ErrorCode;

use crate::http2::flow;
use crate::http2::halves::{reset_code, RecvHalf, SendHalf};
use crate::net::{self, InBuf, Stream};

/// What a tunnel carried, and how it ended.
#[derive(Debug)]
pub(super) struct Tunnelled {
    pub to_client: u64,
    pub to_origin: u64,
    pub end: End,
}

/// How a tunnel ended.
#[derive(Debug)]
pub(super) enum End {
    /// Both directions ended.
    Both,
    Failed(TunnelError),
    /// Its `stop` came first (the backend left its group and its drain time is over).
    Stopped,
}

/// Which end of a tunnel failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Client,
    Origin,
}

impl Side {
    fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Origin => "origin",
        }
    }
}

/// Why a tunnel ended before both directions did.
#[derive(Debug, thiserror::Error)]
#[error("the {} side failed: {error}", side.as_str())]
pub(super) struct TunnelError {
    pub side: Side,
    pub error: io::Error,
}

fn failed(side: Side) -> impl FnOnce(io::Error) -> TunnelError {
    move |error| TunnelError { side, error }
}

/// What a stream's peer resetting it means for the direction toward it: `Ok` (it ends)
/// for `NO_ERROR`, else the failure of `side`.
fn reset(reset: io::Result<ErrorCode>, side: Side) -> Result<(), TunnelError> {
    match reset {
        Ok(ErrorCode::NoError) => Ok(()),
        Ok(code) => Err(failed(side)(io::Error::other(format!("stream reset: {}", code.as_str())))),
        Err(e) => Err(failed(side)(e)),
    }
}

/// Whether a stream's DATA stopped for a reset with `NO_ERROR`: its sender is done.
fn is_no_error(e: &io::Error) -> bool {
    reset_code(e) == Some(ErrorCode::NoError)
}

/// The counts both directions add to as they go.
#[derive(Default)]
struct Counts {
    to_client: AtomicU64,
    to_origin: AtomicU64,
}

impl Counts {
    fn total(&self) -> u64 {
        self.to_client.load(Relaxed).saturating_add(self.to_origin.load(Relaxed))
    }

    fn tunnelled(&self, end: End) -> Tunnelled {
        let (to_client, to_origin) = (self.to_client.load(Relaxed), self.to_origin.load(Relaxed));
        Tunnelled { to_client, to_origin, end }
    }
}

/// Tunnels the client's stream (`from_client`, `to_client`) through `origin`, an
/// HTTP/1.1 connection that switched protocols, until both directions end, one fails,
/// or `stop` completes; `origin_buf` holds what the origin sent after its `101`, which
/// the client gets first, and is the reads' buffer. The caller closes the connection.
pub(super) async fn to_connection(
    from_client: &mut impl RecvHalf,
    to_client: &mut impl SendHalf,
    origin: &Stream,
    origin_buf: &mut InBuf,
    stall: Duration,
    stop: impl Future<Output = ()> + Send,
) -> Tunnelled {
    let counts = Counts::default();
    let up = stream_to_socket(from_client, origin, stall, &counts.to_origin);
    let down = socket_to_stream(origin, origin_buf, to_client, stall, &counts.to_client);
    let end = until_stopped(both_ways(up, down, &counts, stall), stop).await;
    if !matches!(end, End::Both) {
        to_client.send_reset(ErrorCode::Cancel);
    }
    counts.tunnelled(end)
}

/// Tunnels the client's stream (`from_client`, `to_client`) through a stream of an
/// HTTP/2 origin (`from_origin`, `to_origin`) that accepted the extended CONNECT, until
/// both directions end, one fails, or `stop` completes.
pub(super) async fn to_stream(
    from_client: &mut impl RecvHalf,
    to_client: &mut impl SendHalf,
    from_origin: &mut impl RecvHalf,
    to_origin: &mut impl SendHalf,
    stall: Duration,
    stop: impl Future<Output = ()> + Send,
) -> Tunnelled {
    let counts = Counts::default();
    let up = stream_to_stream(from_client, to_origin, Side::Client, stall, &counts.to_origin);
    let down = stream_to_stream(from_origin, to_client, Side::Origin, stall, &counts.to_client);
    let end = until_stopped(both_ways(up, down, &counts, stall), stop).await;
    if !matches!(end, End::Both) {
        to_client.send_reset(ErrorCode::Cancel);
        to_origin.send_reset(ErrorCode::Cancel);
    }
    counts.tunnelled(end)
}

/// How `tunnel` ended, or [`End::Stopped`] if `stop` came first.
async fn until_stopped(
    tunnel: impl Future<Output = Result<(), TunnelError>>,
    stop: impl Future<Output = ()>,
) -> End {
    tokio::select! {
        ended = tunnel => match ended {
            Ok(()) => End::Both,
            Err(e) => End::Failed(e),
        },
        () = stop => End::Stopped,
    }
}

type Direction<'a> = Pin<&'a mut (dyn Future<Output = Result<(), TunnelError>> + Send + 'a)>;

/// Runs both directions until both have ended, or one fails; once one has ended, the
/// other must move a byte every `stall` (see the module doc).
async fn both_ways(
    up: impl Future<Output = Result<(), TunnelError>> + Send,
    down: impl Future<Output = Result<(), TunnelError>> + Send,
    counts: &Counts,
    stall: Duration,
) -> Result<(), TunnelError> {
    let (mut up, mut down) = (pin!(up), pin!(down));
    // What is left, and the side whose bytes it carries.
    let (mut rest, from): (Direction<'_>, Side) = tokio::select! {
        ended = up.as_mut() => {
            ended?;
            (down, Side::Origin)
        }
        ended = down.as_mut() => {
            ended?;
            (up, Side::Client)
        }
    };
    // Each round either ends the tunnel or saw bytes move within `stall`.
    loop {
        let before = counts.total();
        match tokio::time::timeout(stall, rest.as_mut()).await {
            Ok(ended) => return ended,
            Err(_) if counts.total() != before => {}
            Err(_) => {
                let error = io::Error::new(
                    io::ErrorKind::TimedOut,
                    "moved nothing for the read timeout after the other direction ended",
                );
                return Err(TunnelError { side: from, error });
            }
        }
    }
}

/// The client's DATA frames to the origin's socket; its END_STREAM shuts the socket's
/// sending side.
async fn stream_to_socket(
    from: &mut impl RecvHalf,
    to: &Stream,
    stall: Duration,
    count: &AtomicU64,
) -> Result<(), TunnelError> {
    // Each round takes one DATA frame; bounded by the stream.
    while let Some(data) = flow::data(from).await {
        let data = match data {
            Ok(data) => data,
            Err(e) if is_no_error(&e) => break,
            Err(e) => return Err(failed(Side::Client)(e)),
        };
        if !data.is_empty() {
            net::write_all(to, &[&data], stall)
                .await
                .map_err(|(_, e)| failed(Side::Origin)(e.into_io()))?;
            count.fetch_add(data.len() as u64, Relaxed);
        }
        // The window goes back once the origin's socket took the bytes.
        flow::release(from, data.len());
    }
    to.shutdown_write();
    Ok(())
}

/// The origin's bytes to the client's stream as DATA frames, what `buf` holds (read
/// after the `101`) first; the origin's EOF ends the stream. `buf` holds storage only
/// while bytes wait in it, so an idle tunnel holds no buffer.
async fn socket_to_stream(
    from: &Stream,
    buf: &mut InBuf,
    to: &mut impl SendHalf,
    stall: Duration,
    count: &AtomicU64,
) -> Result<(), TunnelError> {
    // Each round sends what was read, then reads once or waits; bounded by the
    // connection.
    loop {
        if !buf.is_empty() {
            let data = Bytes::copy_from_slice(buf.data());
            let n = data.len();
            buf.consume(n);
            buf.release();
            flow::send(to, data, false, stall).await.map_err(failed(Side::Client))?;
            count.fetch_add(n as u64, Relaxed);
        }
        // A client that resets its stream is noticed here too, not only when the
        // next bytes go to it.
        let readable = tokio::select! {
            biased;
            r = poll_fn(|cx| to.poll_reset(cx)) => return reset(r, Side::Client),
            readable = from.readable() => readable,
        };
        readable.map_err(failed(Side::Origin))?;
        match buf.try_fill(from) {
            Ok(0) => break,
            Ok(_) => {}
            // Readiness was stale (or a TLS record is not whole yet).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => buf.release(),
            Err(e) => return Err(failed(Side::Origin)(e)),
        }
    }
    buf.release();
    to.send_data(Bytes::new(), true).map_err(failed(Side::Client))
}

/// One HTTP/2 stream's DATA frames to another's; the end of the one ends the other.
/// `from_side` is the end `from` belongs to.
async fn stream_to_stream(
    from: &mut impl RecvHalf,
    to: &mut impl SendHalf,
    from_side: Side,
    stall: Duration,
    count: &AtomicU64,
) -> Result<(), TunnelError> {
    let to_side = match from_side {
        Side::Client => Side::Origin,
        Side::Origin => Side::Client,
    };
    // Each round takes one DATA frame, or ends; bounded by the stream.
    loop {
        // The receiving end resetting its stream is noticed here too, not only when
        // the next bytes go to it.
        let next = tokio::select! {
            biased;
            r = poll_fn(|cx| to.poll_reset(cx)) => return reset(r, to_side),
            next = flow::data(from) => next,
        };
        let data = match next {
            None => break,
            Some(Ok(data)) => data,
            // Its sender is done: the other end hears of it as the end of the stream.
            Some(Err(e)) if is_no_error(&e) => break,
            Some(Err(e)) => return Err(failed(from_side)(e)),
        };
        let n = data.len();
        if n > 0 {
            flow::send(to, data, false, stall).await.map_err(failed(to_side))?;
            count.fetch_add(n as u64, Relaxed);
        }
        flow::release(from, n);
    }
    to.send_data(Bytes::new(), true).map_err(failed(to_side))
}

#[cfg(test)]
mod tests {
    use super::*;
    use h2::{Reason, RecvStream, SendStream};

    /// One end of an HTTP/2 stream.
    struct End2 {
        recv: RecvStream,
        send: SendStream<Bytes>,
    }

    /// One HTTP/2 stream in memory: its server's end (what holdfast holds of a client's
    /// stream) and its client's (what holdfast holds of an origin's).
    async fn stream() -> (End2, End2) {
        let (near, far) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(near).await.expect("server handshake");
            let (req, mut respond) = conn.accept().await.expect("a stream").expect("ok");
            let send = respond.send_response(http::Response::new(()), false).expect("answer");
            // The connection runs on: dropping it would end the stream.
            tokio::spawn(async move { while conn.accept().await.is_some() {} });
            End2 { recv: req.into_body(), send }
        });
        let (client, conn) = h2::client::handshake(far).await.expect("client handshake");
        tokio::spawn(conn);
        let mut client = client.ready().await.expect("ready");
        let req = http::Request::post("http://test/").body(()).expect("request");
        let (response, send) = client.send_request(req, false).expect("sent");
        let server = server.await.expect("the server's end");
        let recv = response.await.expect("a response").into_body();
        (server, End2 { recv, send })
    }

    /// The next DATA frame's bytes, skipping empty ones (the END_STREAM that ends a
    /// stream may come in one).
    async fn next(recv: &mut RecvStream) -> Option<Result<Bytes, h2::Error>> {
        loop {
            match recv.data().await? {
                Ok(data) if data.is_empty() => {}
                Ok(data) => {
                    let _ = recv.flow_control().release_capacity(data.len());
                    return Some(Ok(data));
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// A tunnel between a client's stream and an origin's, in a task; the client's and
    /// the origin's own ends.
    async fn tunnel(
        stall: Duration,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> (End2, End2, tokio::task::JoinHandle<Tunnelled>) {
        let (mut from_client, client) = stream().await;
        let (origin, mut from_origin) = stream().await;
        let task = tokio::spawn(async move {
            let (client, origin) = (&mut from_client, &mut from_origin);
            to_stream(
                &mut client.recv,
                &mut client.send,
                &mut origin.recv,
                &mut origin.send,
                stall,
                stop,
            )
            .await
        });
        (client, origin, task)
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_the_ends_go_on() {
        let (mut client, mut origin, task) =
            tunnel(Duration::from_secs(5), std::future::pending()).await;
        client.send.send_data(Bytes::from_static(b"ping"), false).unwrap();
        assert_eq!(next(&mut origin.recv).await.unwrap().unwrap(), "ping");
        origin.send.send_data(Bytes::from_static(b"pong!"), false).unwrap();
        assert_eq!(next(&mut client.recv).await.unwrap().unwrap(), "pong!");
        client.send.send_data(Bytes::new(), true).unwrap();
        let n = next(&mut origin.recv).await;
        assert!(n.is_none(), "the client's END_STREAM goes on: {n:?}");
        origin.send.send_data(Bytes::new(), true).unwrap();
        assert!(next(&mut client.recv).await.is_none(), "the origin's END_STREAM goes on");
        let done = task.await.unwrap();
        assert!(matches!(done.end, End::Both), "{done:?}");
        assert_eq!((done.to_client, done.to_origin), (5, 4));
    }

    #[tokio::test]
    async fn stop_resets_both_streams() {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = async move {
            let _ = stopped.await;
        };
        let (mut client, mut origin, task) = tunnel(Duration::from_secs(5), stopped).await;
        client.send.send_data(Bytes::from_static(b"a"), false).unwrap();
        assert_eq!(next(&mut origin.recv).await.unwrap().unwrap(), "a");
        stop.send(()).unwrap();
        let done = task.await.unwrap();
        assert!(matches!(done.end, End::Stopped), "{done:?}");
        let reset = next(&mut client.recv).await.expect("an error").expect_err("a reset");
        assert_eq!(reset.reason(), Some(Reason::CANCEL));
        let reset = next(&mut origin.recv).await.expect("an error").expect_err("a reset");
        assert_eq!(reset.reason(), Some(Reason::CANCEL));
    }

    #[tokio::test(start_paused = true)]
    async fn once_one_side_ended_the_other_must_keep_moving() {
        let stall = Duration::from_secs(30);
        let (client, mut origin, task) = tunnel(stall, std::future::pending()).await;
        let mut client = client;
        client.send.send_data(Bytes::new(), true).unwrap();
        assert!(next(&mut origin.recv).await.is_none());
        // The origin sends a byte now and then, then stops without ending.
        for _ in 0..3 {
            tokio::time::sleep(stall / 2).await;
            origin.send.send_data(Bytes::from_static(b"."), false).unwrap();
            assert_eq!(next(&mut client.recv).await.unwrap().unwrap(), ".");
        }
        assert!(!task.is_finished(), "a direction that moves is not cut off");
        let done = task.await.unwrap();
        match done.end {
            End::Failed(e) => assert_eq!(e.side, Side::Origin),
            other => panic!("{other:?}"),
        }
        let reset = next(&mut client.recv).await.expect("an error").expect_err("a reset");
        assert_eq!(reset.reason(), Some(Reason::CANCEL));
    }

    #[tokio::test]
    async fn a_reset_with_no_error_is_an_end() {
        let (mut client, mut origin, task) =
            tunnel(Duration::from_secs(5), std::future::pending()).await;
        // An HTTP/2 origin that has said all it will, and stops the client sending.
        origin.send.send_data(Bytes::from_static(b"bye"), true).unwrap();
        assert_eq!(next(&mut client.recv).await.unwrap().unwrap(), "bye");
        origin.send.send_reset(Reason::NO_ERROR);
        let done = task.await.unwrap();
        assert!(matches!(done.end, End::Both), "{done:?}");
        let n = next(&mut client.recv).await;
        assert!(n.is_none(), "an end, not a reset: {n:?}");
    }
}
