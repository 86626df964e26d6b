//! One HTTP/2 connection to an origin on holdfast's own engine (`holdfast-h2`, client
//! role): the task that drives it, and the handles the exchanges of many client
//! connections use to send requests on it and read the responses.
//!
//! Unlike a client connection, whose streams are all run by its own task
//! (`http2::session`), an origin connection is shared: streams from any task go on
//! it. Its engine and its streams' inboxes sit behind one mutex, held only to hand
//! bytes and events across (no I/O, no waking under it): the driver task reads the
//! socket outside it, hands what it read to the engine, wakes the streams that got
//! something, and writes the engine's output outside it again. A handle that queues
//! something wakes the driver.
//!
//! The handles keep the names and shapes of the `h2` crate's client API, which the
//! proxy path was first written against ([`SendRequest`], [`ResponseFuture`],
//! [`RecvStream`], [`SendStream`], [`Error`]). A stream whose handles are all dropped before its end is
//! reset (CANCEL), so the origin stops work nobody waits for.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use holdfast_h2::conn::ids::StreamMap;
use holdfast_h2::conn::{Config, Connection, Event, Head, SendError};
use holdfast_h2::error::ErrorCode;
use holdfast_h2::hpack::{Field, FieldRef};
use http::HeaderMap;

use super::encode::OriginHead;
use super::fields::Fields;
use super::halves::{RecvHalf, SendHalf};
use super::session::{to_fields, to_header_map};
use super::socket::{Read, Socket, WRITE_PIECES};
use crate::net::Stream;

/// Rounds of reading and writing in one poll before the driver lets others run.
const ROUNDS: usize = 16;

/// Why a stream or the connection failed, in the terms the proxy path asks of it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", self.describe())]
pub struct Error {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// The stream was reset: by the origin (`remote`), or by holdfast.
    Reset { code: ErrorCode, remote: bool },
    /// The connection went away with GOAWAY: sent by the origin (`remote`), or by
    /// holdfast. A stream above a graceful GOAWAY's last never reached the origin.
    GoAway { code: ErrorCode, remote: bool },
    /// The socket failed or closed.
    Io(io::ErrorKind),
    /// The request could not be sent (no stream could be opened, or a send after the
    /// end).
    User(&'static str),
}

impl Error {
    fn reset(code: ErrorCode, remote: bool) -> Error {
        Error { kind: Kind::Reset { code, remote } }
    }

    fn go_away(code: ErrorCode, remote: bool) -> Error {
        Error { kind: Kind::GoAway { code, remote } }
    }

    fn io(kind: io::ErrorKind) -> Error {
        Error { kind: Kind::Io(kind) }
    }

    fn user(what: &'static str) -> Error {
        Error { kind: Kind::User(what) }
    }

    /// The stream or connection ended with GOAWAY.
    pub fn is_go_away(&self) -> bool {
        matches!(self.kind, Kind::GoAway { .. })
    }

    /// The origin, not holdfast, reset the stream or sent the GOAWAY.
    pub fn is_remote(&self) -> bool {
        matches!(self.kind, Kind::Reset { remote: true, .. } | Kind::GoAway { remote: true, .. })
    }

    /// The code of the reset or GOAWAY.
    pub fn reason(&self) -> Option<ErrorCode> {
        match self.kind {
            Kind::Reset { code, .. } | Kind::GoAway { code, .. } => Some(code),
            Kind::Io(_) | Kind::User(_) => None,
        }
    }

    /// The stream was reset.
    pub fn is_reset(&self) -> bool {
        matches!(self.kind, Kind::Reset { .. })
    }

    /// The socket failed or closed.
    pub fn is_io(&self) -> bool {
        matches!(self.kind, Kind::Io(_))
    }

    fn describe(&self) -> String {
        match &self.kind {
            Kind::Reset { code, remote: true } => {
                format!("stream reset by the origin: {}", code.as_str())
            }
            Kind::Reset { code, remote: false } => format!("stream reset: {}", code.as_str()),
            Kind::GoAway { code, remote: true } => {
                format!("the origin sent GOAWAY: {}", code.as_str())
            }
            Kind::GoAway { code, remote: false } => format!("connection closed: {}", code.as_str()),
            Kind::Io(kind) => format!("the HTTP/2 connection to the origin failed: {kind}"),
            Kind::User(what) => what.to_string(),
        }
    }

    /// The error as an I/O error: the kind of a socket failure, else this error inside
    /// one (so `halves::reset_code` finds a reset's code).
    pub fn into_io(self) -> io::Error {
        match self.kind {
            Kind::Io(kind) => io::Error::new(kind, self),
            _ => io::Error::other(self),
        }
    }
}

/// What the connection and its streams share.
struct Shared {
    inner: Mutex<Inner>,
    /// [`SendRequest`] handles alive: none left and no stream, the connection closes.
    senders: AtomicUsize,
}

struct Inner {
    conn: Connection,
    slots: StreamMap<Slot>,
    /// The driver's waker, to send what a handle queued.
    driver: Option<Waker>,
    /// Why the connection ended, once it has.
    ended: Option<Error>,
    /// A PING went unanswered: no new stream goes on the connection.
    stale: bool,
}

/// One stream as its handles see it.
#[derive(Default)]
struct Slot {
    /// The final response head, once it came (1xx are passed over).
    head: Option<(Head, bool)>,
    data: VecDeque<Bytes>,
    /// END_STREAM came (after `data`).
    ended: bool,
    trailers: Option<Vec<Field>>,
    failed: Option<Error>,
    waker: Option<Waker>,
    /// Handles alive: the response's future or body, and the request's sending side.
    handles: u8,
}

impl Slot {
    fn park(&mut self, cx: &Context<'_>) {
        match &self.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => self.waker = Some(cx.waker().clone()),
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Inner> {
    shared.inner.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    /// Wakes the driver once a handle queued something.
    fn kick(&mut self) -> Option<Waker> {
        self.driver.take()
    }

    /// The slot of a live stream to read the response from, or the error that ended it.
    fn slot(&mut self, stream: u32) -> Result<&mut Slot, Error> {
        self.slot_for(stream, true)
    }

    /// The slot of a live stream to send the request on, or the error that ended it.
    fn send_slot(&mut self, stream: u32) -> Result<&mut Slot, Error> {
        self.slot_for(stream, false)
    }

    fn slot_for(&mut self, stream: u32, reading: bool) -> Result<&mut Slot, Error> {
        let ended = self.ended.clone();
        let slot = self.slots.get_mut(&stream).ok_or_else(|| Error::user("stream gone"))?;
        if let Some(e) = &slot.failed {
            // RST_STREAM NO_ERROR after the whole response: the origin wants no more of
            // the request (RFC 9113, 8.1), and the response stands.
            let answered = slot.ended && e.is_remote() && e.reason() == Some(ErrorCode::NoError);
            if !(reading && answered) {
                return Err(e.clone());
            }
        }
        // A stream whose end came may still be read after the connection ended.
        match ended {
            Some(e) if !slot.ended => Err(e),
            _ => Ok(slot),
        }
    }
}

fn wake(waker: Option<Waker>) {
    if let Some(w) = waker {
        w.wake();
    }
}

fn send_failed(e: SendError) -> Error {
    match e {
        SendError::Full => Error::user("more DATA than the stream had room for"),
        SendError::Refused => Error::reset(ErrorCode::RefusedStream, false),
        SendError::NoStream | SendError::Ended => Error::user("the HTTP/2 stream has ended"),
    }
}

/// Sends requests on the connection; clones share it.
pub struct SendRequest {
    shared: Arc<Shared>,
}

impl Clone for SendRequest {
    fn clone(&self) -> SendRequest {
        self.shared.senders.fetch_add(1, Ordering::AcqRel);
        SendRequest { shared: Arc::clone(&self.shared) }
    }
}

impl Drop for SendRequest {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last: the driver closes the connection once its streams are done.
            let waker = lock(&self.shared).kick();
            wake(waker);
        }
    }
}

/// The connection's settings for holdfast's side.
pub struct Settings {
    pub stream_window: u32,
    pub connection_window: u32,
    pub max_header_list_size: u32,
}

/// Starts a connection on `io` (the preface and SETTINGS are queued); its driver runs
/// in a task of its own until the connection ends. `ping`: how often the origin must
/// answer a PING for the connection to stay open.
pub fn start(io: Stream, settings: &Settings, ping: Option<Duration>) -> SendRequest {
    let config = Config {
        stream_window: settings.stream_window,
        connection_window: settings.connection_window,
        max_header_list_size: settings.max_header_list_size,
        ..Config::default()
    };
    let shared = Arc::new(Shared {
        inner: Mutex::new(Inner {
            conn: Connection::client(config),
            slots: StreamMap::default(),
            driver: None,
            ended: None,
            stale: false,
        }),
        senders: AtomicUsize::new(1),
    });
    let driver = Driver {
        shared: Arc::clone(&shared),
        socket: Socket::new(io, BytesMut::new()),
        broken: false,
        ping: ping.map(|every| (every, Box::pin(tokio::time::sleep(every)))),
    };
    tokio::spawn(driver.run());
    SendRequest { shared }
}

impl SendRequest {
    /// Waits until the origin's first SETTINGS came (what it allows is known) and it
    /// answered a PING sent after them (it is alive), or the connection ended first.
    pub async fn ready(&self) -> Result<(), Error> {
        let waker = {
            let mut inner = lock(&self.shared);
            inner.conn.ping();
            inner.kick()
        };
        wake(waker);
        poll_fn(|cx| {
            let mut inner = lock(&self.shared);
            if let Some(e) = &inner.ended {
                return Poll::Ready(Err(e.clone()));
            }
            if inner.conn.is_ready() && inner.conn.unanswered_pings() == 0 {
                return Poll::Ready(Ok(()));
            }
            // Woken by the driver when the SETTINGS come: it holds no stream waker for
            // this, so this waits as a stream of id 0 would.
            let slot = inner.slots.entry(0).or_default();
            slot.park(cx);
            Poll::Pending
        })
        .await?;
        lock(&self.shared).slots.remove(&0);
        Ok(())
    }

    /// Whether the connection takes new streams: not ended, and no GOAWAY from the
    /// origin.
    pub fn is_open(&self) -> bool {
        let inner = lock(&self.shared);
        inner.ended.is_none()
            && !inner.stale
            && !inner.conn.peer_went_away()
            && !inner.conn.is_closed()
    }

    /// Whether the origin sent a graceful GOAWAY (NO_ERROR).
    pub fn went_away(&self) -> bool {
        lock(&self.shared).conn.peer_goaway_code() == Some(ErrorCode::NoError)
    }

    /// Streams the origin takes at once, as its SETTINGS say.
    pub fn current_max_send_streams(&self) -> usize {
        usize::try_from(lock(&self.shared).conn.peer_max_concurrent_streams()).unwrap_or(usize::MAX)
    }

    /// Whether the origin allows extended CONNECT (RFC 8441).
    pub fn is_extended_connect_protocol_enabled(&self) -> bool {
        lock(&self.shared).conn.peer_allows_connect_protocol()
    }

    /// Opens a stream with `head` (its `protocol`: an extended CONNECT's); `end`: no
    /// body follows. The response, and the request's sending side.
    pub fn send_request(
        &mut self,
        head: &OriginHead,
        end: bool,
    ) -> Result<(ResponseFuture, SendStream), Error> {
        let head_request = head.method == http::Method::HEAD;
        // A CONNECT that is not an extended one has neither `:scheme` nor `:path`
        // (RFC 9113, 8.5).
        let plain_connect = head.method == http::Method::CONNECT && head.protocol.is_none();
        let method = FieldRef::new(b":method", head.method.as_str().as_bytes());
        let scheme = FieldRef::new(b":scheme", head.scheme());
        let authority = FieldRef::new(b":authority", &head.authority);
        let path = FieldRef::new(b":path", &head.path);
        let pseudo = [
            Some(method),
            (!plain_connect).then_some(scheme),
            Some(authority),
            (!plain_connect).then_some(path),
            head.protocol.as_ref().map(|p| FieldRef::new(b":protocol", p)),
        ];
        let fields = pseudo.into_iter().flatten().chain(head.fields.refs());
        let mut inner = lock(&self.shared);
        if let Some(e) = &inner.ended {
            return Err(e.clone());
        }
        let stream = inner.conn.open_of(fields, end, head_request).map_err(send_failed)?;
        inner.slots.insert(stream, Slot { handles: 2, ..Slot::default() });
        let waker = inner.kick();
        drop(inner);
        wake(waker);
        let response = ResponseFuture { handle: Handle::new(&self.shared, stream) };
        let send = SendStream { handle: Handle::new(&self.shared, stream) };
        Ok((response, send))
    }
}

/// A handle on one stream: the last one dropped finishes the stream.
struct Handle {
    shared: Arc<Shared>,
    stream: u32,
}

impl Handle {
    fn new(shared: &Arc<Shared>, stream: u32) -> Handle {
        Handle { shared: Arc::clone(shared), stream }
    }

    /// Another handle on the same stream.
    fn another(&self) -> Handle {
        let mut inner = lock(&self.shared);
        if let Some(slot) = inner.slots.get_mut(&self.stream) {
            slot.handles = slot.handles.saturating_add(1);
        }
        Handle { shared: Arc::clone(&self.shared), stream: self.stream }
    }

    /// Acts on the engine and the stream's slot; wakes the driver afterwards if asked.
    fn with<R>(&self, f: impl FnOnce(&mut Inner, u32) -> (R, bool)) -> R {
        let mut inner = lock(&self.shared);
        let (result, kick) = f(&mut inner, self.stream);
        let waker = if kick { inner.kick() } else { None };
        drop(inner);
        wake(waker);
        result
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut inner = lock(&self.shared);
        let Some(slot) = inner.slots.get_mut(&self.stream) else { return };
        slot.handles = slot.handles.saturating_sub(1);
        if slot.handles > 0 {
            return;
        }
        inner.slots.remove(&self.stream);
        inner.conn.finish(self.stream);
        let waker = inner.kick();
        drop(inner);
        wake(waker);
    }
}

/// The origin's response to a stream: its final head, then its body.
pub struct ResponseFuture {
    handle: Handle,
}

/// An origin's final response head (`:status` and its fields, shared with the
/// engine's buffer), and its body.
pub struct OriginResponse {
    pub status: u16,
    pub fields: Fields,
    pub body: RecvStream,
}

impl Future for ResponseFuture {
    type Output = Result<OriginResponse, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = self.handle.with(|inner, stream| {
            let slot = match inner.slot(stream) {
                Ok(slot) => slot,
                Err(e) => return (Poll::Ready(Err(e)), false),
            };
            match slot.head.take() {
                Some(head) => (Poll::Ready(Ok(head)), false),
                None => {
                    slot.park(cx);
                    (Poll::Pending, false)
                }
            }
        });
        let (head, ended) = match polled {
            Poll::Ready(Ok(head)) => head,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        let Head { pseudo, fields, .. } = head;
        // The engine checked `:status` (three digits); 502 stands for one it let by.
        let status = pseudo.status.filter(|s| (100..=999).contains(s)).unwrap_or(502);
        let body = RecvStream { handle: self.handle.another(), ended };
        Poll::Ready(Ok(OriginResponse { status, fields: Fields::from_engine(fields), body }))
    }
}

/// A response's body from the origin.
pub struct RecvStream {
    handle: Handle,
    /// The response's head ended the stream.
    ended: bool,
}

impl RecvStream {
    /// Whether the stream's end has come and nothing waits to be read.
    pub fn is_end_stream(&self) -> bool {
        RecvHalf::is_end_stream(self)
    }

    /// The next DATA frame's bytes; `None` at the end.
    pub async fn data(&mut self) -> Option<Result<Bytes, Error>> {
        poll_fn(|cx| self.poll_data_raw(cx)).await
    }

    fn poll_data_raw(&mut self, cx: &Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        self.handle.with(|inner, stream| {
            let slot = match inner.slot(stream) {
                Ok(slot) => slot,
                Err(e) => return (Poll::Ready(Some(Err(e))), false),
            };
            if let Some(data) = slot.data.pop_front() {
                return (Poll::Ready(Some(Ok(data))), false);
            }
            if slot.ended {
                return (Poll::Ready(None), false);
            }
            slot.park(cx);
            (Poll::Pending, false)
        })
    }

    /// Gives `n` bytes of window back to the origin.
    pub fn release_capacity(&mut self, n: usize) {
        self.handle.with(|inner, stream| {
            inner.conn.release(stream, n);
            ((), true)
        });
    }
}

impl RecvHalf for RecvStream {
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        self.poll_data_raw(cx).map(|d| d.map(|d| d.map_err(Error::into_io)))
    }

    fn poll_trailers(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<HeaderMap>>> {
        if self.ended {
            return Poll::Ready(Ok(None));
        }
        let polled = self.handle.with(|inner, stream| {
            let slot = match inner.slot(stream) {
                Ok(slot) => slot,
                Err(e) => return (Poll::Ready(Err(e)), false),
            };
            if slot.ended && slot.data.is_empty() {
                return (Poll::Ready(Ok(slot.trailers.take())), false);
            }
            if !slot.data.is_empty() {
                return (Poll::Ready(Ok(None)), false);
            }
            slot.park(cx);
            (Poll::Pending, false)
        });
        polled.map(|t| t.map(|t| t.map(to_header_map)).map_err(Error::into_io))
    }

    fn release(&mut self, n: usize) {
        self.release_capacity(n);
    }

    fn is_end_stream(&self) -> bool {
        if self.ended {
            return true;
        }
        self.handle.with(|inner, stream| {
            let end = inner
                .slots
                .get(&stream)
                .is_none_or(|s| s.ended && s.data.is_empty() && s.trailers.is_none());
            (end, false)
        })
    }
}

/// The request's sending side: its body as DATA within the origin's window, then
/// trailers or the end.
pub struct SendStream {
    handle: Handle,
}

impl SendStream {
    /// Sends DATA; `end` ends the stream.
    pub fn send_data(&mut self, data: Bytes, end: bool) -> Result<(), Error> {
        self.handle.with(|inner, stream| match inner.send_slot(stream) {
            Err(e) => (Err(e), false),
            Ok(_) => (inner.conn.send_data(stream, data, end).map_err(send_failed), true),
        })
    }

    /// Sends trailers, which end the stream.
    pub fn send_trailers(&mut self, trailers: HeaderMap) -> Result<(), Error> {
        let fields = to_fields(&trailers);
        self.handle.with(|inner, stream| match inner.send_slot(stream) {
            Err(e) => (Err(e), false),
            Ok(_) => (inner.conn.send_trailers(stream, fields).map_err(send_failed), true),
        })
    }

    /// Resets the stream.
    pub fn send_reset(&mut self, code: ErrorCode) {
        self.handle.with(|inner, stream| {
            inner.conn.reset(stream, code);
            if let Some(slot) = inner.slots.get_mut(&stream) {
                slot.failed.get_or_insert(Error::reset(code, false));
            }
            ((), true)
        });
    }
}

impl SendHalf for SendStream {
    fn reserve_capacity(&mut self, _n: usize) {}

    fn capacity(&self) -> usize {
        self.handle.with(|inner, stream| (inner.conn.capacity(stream), false))
    }

    fn poll_capacity(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<usize>>> {
        self.handle.with(|inner, stream| {
            if let Err(e) = inner.send_slot(stream) {
                return (Poll::Ready(Some(Err(e.into_io()))), false);
            }
            if !inner.conn.is_open_stream(stream) {
                return (Poll::Ready(None), false);
            }
            let room = inner.conn.capacity(stream);
            if room > 0 {
                return (Poll::Ready(Some(Ok(room))), false);
            }
            if let Some(slot) = inner.slots.get_mut(&stream) {
                slot.park(cx);
            }
            (Poll::Pending, false)
        })
    }

    fn send_data(&mut self, data: Bytes, end: bool) -> io::Result<()> {
        SendStream::send_data(self, data, end).map_err(Error::into_io)
    }

    fn send_trailers(&mut self, trailers: HeaderMap) -> io::Result<()> {
        SendStream::send_trailers(self, trailers).map_err(Error::into_io)
    }

    fn send_reset(&mut self, code: ErrorCode) {
        SendStream::send_reset(self, code);
    }

    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ErrorCode>> {
        self.handle.with(|inner, stream| {
            let ended = inner.ended.clone();
            let Some(slot) = inner.slots.get_mut(&stream) else {
                return (Poll::Ready(Err(Error::user("stream gone").into_io())), false);
            };
            if let Some(e) = &slot.failed {
                return match e.reason() {
                    Some(code) if e.is_reset() => (Poll::Ready(Ok(code)), false),
                    _ => (Poll::Ready(Err(e.clone().into_io())), false),
                };
            }
            if let Some(e) = ended {
                return (Poll::Ready(Err(e.into_io())), false);
            }
            slot.park(cx);
            (Poll::Pending, false)
        })
    }
}

/// The task that drives one connection: reads into the engine, tells the streams,
/// writes the engine's output.
struct Driver {
    shared: Arc<Shared>,
    socket: Socket,
    /// The socket failed or closed: nothing more is read or written.
    broken: bool,
    /// How often the origin must answer a PING, and the timer to the next.
    ping: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
}

impl Driver {
    async fn run(mut self) {
        poll_fn(|cx| self.poll(cx)).await;
        self.socket.io.shutdown_write();
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut inner = lock(&self.shared);
            match &inner.driver {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => inner.driver = Some(cx.waker().clone()),
            }
        }
        self.poll_ping(cx);
        for _ in 0..ROUNDS {
            let mut progress = self.poll_read(cx);
            self.close_if_unused();
            progress |= self.poll_write(cx);
            if self.is_over() {
                let why = self.why_closed();
                self.end(why);
                return Poll::Ready(());
            }
            if !progress {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Closes a connection no one can send on any more (no [`SendRequest`] left) once
    /// its streams are done: GOAWAY, then the end.
    fn close_if_unused(&mut self) {
        if self.shared.senders.load(Ordering::Acquire) > 0 {
            return;
        }
        let mut inner = lock(&self.shared);
        if inner.slots.keys().all(|&id| id == 0) && !inner.conn.is_closed() {
            inner.conn.abort(ErrorCode::NoError);
        }
    }

    /// Why a connection that is over closed, for streams that try it afterwards: the
    /// origin's GOAWAY (a graceful one refuses them, so they go again elsewhere),
    /// holdfast's own, or the socket.
    fn why_closed(&self) -> Error {
        // A broken socket told its streams already (`poll_read`, `poll_write`).
        if self.broken {
            return Error::io(io::ErrorKind::ConnectionAborted);
        }
        let inner = lock(&self.shared);
        // An error the engine found: streams in flight failed with it (not a refusal).
        if let Some(code) = inner.conn.error() {
            return Error::go_away(code, false);
        }
        // The origin went away and every stream it kept is done.
        if let Some(code) = inner.conn.peer_goaway_code() {
            return Error::go_away(code, true);
        }
        // Holdfast closed it: unused, or a PING went unanswered.
        Error::go_away(ErrorCode::NoError, false)
    }

    /// Whether the connection is done: broken, or closed by the engine with all its
    /// output written ([`Driver::poll_write`] takes it all unless the socket is full).
    fn is_over(&self) -> bool {
        self.broken || (!self.socket.has_pending() && lock(&self.shared).conn.is_closed())
    }

    /// Every stream hears the connection ended with `error`.
    fn end(&mut self, error: Error) {
        let mut inner = lock(&self.shared);
        let error = inner.ended.get_or_insert(error).clone();
        let mut wakers = Vec::new();
        for slot in inner.slots.values_mut() {
            // A stream whose end came is whole: what it holds is still read.
            if !slot.ended {
                slot.failed.get_or_insert_with(|| error.clone());
            }
            wakers.extend(slot.waker.take());
        }
        drop(inner);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Pings the origin every `every`; one not answered by the next marks the
    /// connection ended, so no new stream goes on it.
    fn poll_ping(&mut self, cx: &mut Context<'_>) {
        let Some((every, timer)) = self.ping.as_mut() else { return };
        if timer.as_mut().poll(cx).is_pending() {
            return;
        }
        let every = *every;
        timer.as_mut().reset(crate::net::later(tokio::time::Instant::now(), every));
        let _ = timer.as_mut().poll(cx);
        let mut inner = lock(&self.shared);
        if inner.conn.unanswered_pings() > 0 {
            if !inner.stale {
                tracing::info!("HTTP/2 connection did not answer a ping; closing it");
            }
            // No new stream; those in flight finish or fail by their own timeouts.
            inner.stale = true;
            inner.conn.go_away();
        } else {
            inner.conn.ping();
        }
    }

    /// Reads what the socket has into the engine and tells the streams; true if
    /// anything came.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> bool {
        if self.broken {
            return false;
        }
        match self.socket.poll_read(cx) {
            Read::Nothing => false,
            Read::Bytes => {
                self.receive();
                true
            }
            Read::Closed(error) => {
                let kind = match error {
                    Some(e) => {
                        tracing::debug!(error = %e, "HTTP/2 connection to the origin failed");
                        e.kind()
                    }
                    None => io::ErrorKind::UnexpectedEof,
                };
                self.broken = true;
                self.end(Error::io(kind));
                true
            }
        }
    }

    /// Hands the bytes read to the engine, and its events to the streams.
    fn receive(&mut self) {
        let mut inner = lock(&self.shared);
        let received = inner.conn.receive(&mut self.socket.read);
        let mut wakers = Vec::new();
        dispatch_events(&mut inner, &mut wakers);
        // The handshake waits on slot 0 for SETTINGS and a PING's answer.
        if let Some(slot) = inner.slots.get_mut(&0) {
            wakers.extend(slot.waker.take());
        }
        drop(inner);
        wakers.into_iter().for_each(Waker::wake);
        if let Err(code) = received {
            tracing::debug!(
                error = code.as_str(),
                "HTTP/2 connection to the origin closed for an error"
            );
            self.end(Error::go_away(code, false));
        }
    }

    /// Writes what the engine produced; true if anything was written.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> bool {
        if self.broken {
            return false;
        }
        let shared = &self.shared;
        let written = self.socket.poll_write(cx, |pending| {
            let mut inner = lock(shared);
            let mut wakers = Vec::new();
            while pending.len() < WRITE_PIECES {
                let Some(piece) = inner.conn.next_output() else { break };
                pending.push_back(piece);
            }
            // Taking output makes room on streams (Writable).
            dispatch_events(&mut inner, &mut wakers);
            drop(inner);
            wakers.into_iter().for_each(Waker::wake);
        });
        written.unwrap_or_else(|_| {
            self.broken = true;
            self.socket.discard();
            self.end(Error::io(io::ErrorKind::BrokenPipe));
            true
        })
    }
}

/// Acts on every event the engine has, in order.
fn dispatch_events(inner: &mut Inner, wakers: &mut Vec<Waker>) {
    // Bounded by the events the last receive or output made.
    while let Some(event) = inner.conn.next_event() {
        dispatch(inner, event, wakers);
    }
}

/// Acts on one engine event: the stream it names gets it, and its waker is kept to
/// wake once the lock is let go.
fn dispatch(inner: &mut Inner, event: Event, wakers: &mut Vec<Waker>) {
    let stream = match &event {
        Event::Head { stream, .. }
        | Event::Data { stream, .. }
        | Event::Trailers { stream, .. }
        | Event::Reset { stream, .. }
        | Event::Writable { stream }
        | Event::TooLarge { stream, .. } => *stream,
        Event::Ready => 0,
        Event::GoAway { code, .. } => {
            // A graceful one only stops new streams (the engine refuses those above its
            // last); one with an error ends the connection.
            if *code != ErrorCode::NoError {
                inner.ended.get_or_insert(Error::go_away(*code, true));
                for slot in inner.slots.values_mut() {
                    wakers.extend(slot.waker.take());
                }
            }
            return;
        }
    };
    let goaway = inner.conn.peer_goaway_code();
    let Some(slot) = inner.slots.get_mut(&stream) else {
        // Bytes for a stream no one reads any more go back at once.
        if let Event::Data { data, .. } = event {
            inner.conn.release(stream, data.len());
        }
        return;
    };
    match event {
        Event::Head { head, end_stream, .. } => {
            // Interim responses (1xx) are passed over: the exchange waits for the final one.
            if head.pseudo.status.is_some_and(|s| s < 200) {
                return;
            }
            slot.ended |= end_stream;
            slot.head = Some((head, end_stream));
        }
        Event::Data { data, end_stream, .. } => {
            if !data.is_empty() {
                slot.data.push_back(data);
            }
            slot.ended |= end_stream;
        }
        Event::Trailers { fields, .. } => {
            slot.trailers = Some(fields);
            slot.ended = true;
        }
        Event::Reset { code, by_peer, .. } => {
            // A stream above the last of the origin's GOAWAY: refused if that GOAWAY
            // was graceful; after one with an error, the origin may have been working
            // on it (see `flow::refused`).
            let error = match goaway {
                Some(goaway) if by_peer && code == ErrorCode::RefusedStream => {
                    Error::go_away(goaway, true)
                }
                _ => Error::reset(code, by_peer),
            };
            slot.failed.get_or_insert(error);
        }
        Event::TooLarge { .. } => {
            slot.failed.get_or_insert(Error::reset(ErrorCode::ProtocolError, false));
        }
        Event::Writable { .. } | Event::Ready | Event::GoAway { .. } => {}
    }
    wakers.extend(slot.waker.take());
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    const SETTINGS: Settings =
        Settings { stream_window: 65_535, connection_window: 65_535, max_header_list_size: 16_384 };

    /// A connection to an `h2` crate server that goes away gracefully at once, once it
    /// has closed.
    async fn gone_away_gracefully() -> SendRequest {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut conn = h2::server::handshake(tcp).await.expect("handshake");
            conn.graceful_shutdown();
            // Bounded: the connection ends once the GOAWAY is out and no stream is open.
            while let Some(Ok(_)) = conn.accept().await {}
        });
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let send = start(Stream::from(tcp), &SETTINGS, None);
        let ended = async {
            // Bounded by the timeout around it.
            while lock(&send.shared).ended.is_none() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), ended).await.expect("the connection ended");
        send
    }

    #[tokio::test]
    async fn a_stream_asked_of_a_connection_the_origin_closed_gracefully_counts_as_refused() {
        let mut send = gone_away_gracefully().await;
        assert!(!send.is_open());
        let request = http::Request::post("http://origin.test/").body(()).expect("a request");
        let Err(e) = send.send_request(&OriginHead::of_request(&request), true) else {
            panic!("a stream was opened")
        };
        // So any request, a POST too, goes again on another connection.
        assert!(super::super::flow::refused(&e), "{e}");
    }
}
