//! The streams of one HTTP/2 client connection as the proxy path holds them: what each
//! received and not yet taken, and handles ([`Responder`], [`RequestBody`],
//! [`ResponseBody`]) that act on the connection's engine.
//!
//! A connection's task owns its [`Session`] and polls all its streams' exchanges
//! itself. While it polls them ([`enter`]), the session is the thread's current one, and
//! the handles, which hold only their stream's id, act on it. So there is no lock, no
//! channel and no task per stream: a handle used outside its connection's poll finds no
//! session and reports the stream gone.
//!
//! Each stream keeps one waker, its exchange's: any event on the stream (DATA,
//! trailers, a reset, room to send) wakes it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use holdfast_h2::conn::ids::StreamMap;
use holdfast_h2::conn::{Connection, SendError};
use holdfast_h2::error::ErrorCode;
use holdfast_h2::hpack::{Field, FieldRef};
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

use super::fields::Fields;
use super::halves::{reset_error, RecvHalf, SendHalf};

scoped_tls::scoped_thread_local!(static CURRENT: RefCell<Session>);

/// One client connection's engine and its streams' inboxes.
pub struct Session {
    pub conn: Connection,
    slots: StreamMap<Slot>,
    /// The connection is gone: every stream's next action fails.
    gone: bool,
}

/// What one stream received and its exchange has not taken yet.
#[derive(Default)]
struct Slot {
    data: VecDeque<Bytes>,
    /// END_STREAM came (after `data`).
    ended: bool,
    trailers: Option<Vec<Field>>,
    /// The stream was reset (by the peer, or by the engine for an error of the peer's).
    reset: Option<ErrorCode>,
    waker: Option<Waker>,
}

impl Slot {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    fn park(&mut self, cx: &Context<'_>) {
        match &self.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => self.waker = Some(cx.waker().clone()),
        }
    }
}

impl Session {
    pub fn new(conn: Connection) -> Session {
        Session { conn, slots: StreamMap::default(), gone: false }
    }

    /// A stream whose exchange starts; `ended`: its HEADERS ended it.
    pub fn open(&mut self, stream: u32, ended: bool) {
        self.slots.insert(stream, Slot { ended, ..Slot::default() });
    }

    /// DATA for a stream; false when no exchange takes it (its bytes go back at once).
    pub fn data(&mut self, stream: u32, data: Bytes, end: bool) -> bool {
        let Some(slot) = self.slots.get_mut(&stream) else { return false };
        if !data.is_empty() {
            slot.data.push_back(data);
        }
        slot.ended |= end;
        slot.wake();
        true
    }

    /// Trailers, which end the stream.
    pub fn trailers(&mut self, stream: u32, fields: Vec<Field>) {
        if let Some(slot) = self.slots.get_mut(&stream) {
            slot.trailers = Some(fields);
            slot.ended = true;
            slot.wake();
        }
    }

    /// The stream was reset.
    pub fn reset(&mut self, stream: u32, code: ErrorCode) {
        if let Some(slot) = self.slots.get_mut(&stream) {
            slot.reset = Some(code);
            slot.wake();
        }
    }

    /// There is room to send on the stream again.
    pub fn writable(&mut self, stream: u32) {
        if let Some(slot) = self.slots.get_mut(&stream) {
            slot.wake();
        }
    }

    /// The stream's exchange is over: the engine finishes it (see
    /// [`Connection::finish`]).
    pub fn close(&mut self, stream: u32) {
        self.slots.remove(&stream);
        self.conn.finish(stream);
    }

    /// The connection is gone: every stream hears of it.
    pub fn end(&mut self) {
        self.gone = true;
        for slot in self.slots.values_mut() {
            slot.wake();
        }
    }
}

/// Runs `f` with `session` as the one the handles act on: the connection's task wraps
/// each poll of its streams in it.
pub fn enter<R>(session: &RefCell<Session>, f: impl FnOnce() -> R) -> R {
    CURRENT.set(session, f)
}

/// Acts on the current session, if a poll of its connection is under way.
fn with<R>(f: impl FnOnce(&mut Session) -> R) -> Option<R> {
    if !CURRENT.is_set() {
        return None;
    }
    CURRENT.with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the HTTP/2 client connection is gone")
}

/// Acts on a stream's slot; an error when the connection or the stream is gone, or the
/// stream was reset.
fn with_slot<R>(
    stream: u32,
    f: impl FnOnce(&mut Slot, &mut Connection) -> io::Result<R>,
) -> io::Result<R> {
    with(|s| {
        if s.gone {
            return Err(gone());
        }
        let Session { conn, slots, .. } = s;
        let slot = slots.get_mut(&stream).ok_or_else(gone)?;
        if let Some(code) = slot.reset {
            return Err(reset_error(code));
        }
        f(slot, conn)
    })
    .unwrap_or_else(|| Err(gone()))
}

fn send_failed(e: SendError) -> io::Error {
    match e {
        SendError::Full => io::Error::other("more DATA than the stream had room for"),
        SendError::NoStream | SendError::Ended | SendError::Refused => {
            io::Error::new(io::ErrorKind::BrokenPipe, "the HTTP/2 stream has ended")
        }
    }
}

/// Resolves when the stream is reset or its connection is gone.
fn poll_reset(stream: u32, cx: &Context<'_>) -> Poll<io::Result<ErrorCode>> {
    let polled = with(|s| {
        if s.gone {
            return Poll::Ready(Err(gone()));
        }
        let Some(slot) = s.slots.get_mut(&stream) else { return Poll::Ready(Err(gone())) };
        match slot.reset {
            Some(code) => Poll::Ready(Ok(code)),
            None => {
                slot.park(cx);
                Poll::Pending
            }
        }
    });
    polled.unwrap_or_else(|| Poll::Ready(Err(gone())))
}

/// Trailers as the engine keeps them until they go out.
pub fn to_fields(headers: &HeaderMap) -> Vec<Field> {
    Fields::of_map(headers).into_engine()
}

/// Received fields as a header map (the engine checked names and values, RFC 9113
/// section 8.2.1; any it let through that `http` refuses are left out).
pub fn to_header_map(fields: Vec<Field>) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let Ok(name) = HeaderName::from_bytes(&field.name) else { continue };
        let Ok(mut value) = HeaderValue::from_maybe_shared(field.value) else { continue };
        value.set_sensitive(field.sensitive);
        map.append(name, value);
    }
    map
}

/// Answers a client's stream: its response head, and interim responses before it.
pub struct Responder {
    stream: u32,
}

impl Responder {
    pub fn new(stream: u32) -> Responder {
        Responder { stream }
    }

    /// Sends the response head (`:status` and `headers`); `end`: no body follows.
    pub fn send_response(
        &mut self,
        status: u16,
        fields: &Fields,
        end: bool,
    ) -> io::Result<ResponseBody> {
        self.send_head(status, fields, end)?;
        Ok(ResponseBody { stream: self.stream })
    }

    /// Sends an interim (1xx) response.
    pub fn send_informational(&mut self, status: u16) -> io::Result<()> {
        self.send_head(status, &Fields::default(), false)
    }

    fn send_head(&mut self, status: u16, fields: &Fields, end: bool) -> io::Result<()> {
        let code = status_text(status);
        let stream = self.stream;
        with_slot(stream, |_, conn| {
            let status = std::iter::once(FieldRef::new(b":status", &code));
            conn.send_head_of(stream, status.chain(fields.refs()), end).map_err(send_failed)
        })
    }

    /// Resolves when the client resets the stream (or its connection is gone).
    pub fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ErrorCode>> {
        poll_reset(self.stream, cx)
    }

    /// Answers with `status` and a short `text/plain` body (holdfast's own answers);
    /// best effort, as the stream may be gone.
    pub fn answer_text(&mut self, status: u16, text: &str) {
        let stream = self.stream;
        let _ = with_slot(stream, |_, conn| {
            answer_text(conn, stream, status, text);
            Ok(())
        });
    }
}

/// Answers `stream` with `status` and a short `text/plain` body.
pub fn answer_text(conn: &mut Connection, stream: u32, status: u16, text: &str) {
    let fields = super::convert::local_headers(b"", text.len());
    let code = status_text(status);
    let fields = std::iter::once(FieldRef::new(b":status", &code)).chain(fields.refs());
    if conn.send_head_of(stream, fields, false).is_ok() {
        let _ = conn.send_data(stream, Bytes::copy_from_slice(text.as_bytes()), true);
    }
}

/// A status code's three digits.
fn status_text(status: u16) -> [u8; 3] {
    let digit = |n: u16| b'0'.saturating_add(u8::try_from(n % 10).unwrap_or(0));
    [digit(status / 100), digit(status / 10), digit(status)]
}

/// A client's request body: the stream's DATA frames, then its trailers.
pub struct RequestBody {
    stream: u32,
}

impl RequestBody {
    pub fn new(stream: u32) -> RequestBody {
        RequestBody { stream }
    }
}

impl RecvHalf for RequestBody {
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        let polled = with_slot(self.stream, |slot, _| {
            if let Some(data) = slot.data.pop_front() {
                return Ok(Poll::Ready(Some(data)));
            }
            if slot.ended {
                return Ok(Poll::Ready(None));
            }
            slot.park(cx);
            Ok(Poll::Pending)
        });
        match polled {
            Ok(Poll::Ready(data)) => Poll::Ready(data.map(Ok)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn poll_trailers(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<HeaderMap>>> {
        let polled = with_slot(self.stream, |slot, _| {
            if slot.ended && slot.data.is_empty() {
                return Ok(Poll::Ready(slot.trailers.take()));
            }
            // DATA not yet taken comes before the trailers: the caller reads it first.
            if !slot.data.is_empty() {
                return Ok(Poll::Ready(None));
            }
            slot.park(cx);
            Ok(Poll::Pending)
        });
        match polled {
            Ok(Poll::Ready(fields)) => Poll::Ready(Ok(fields.map(to_header_map))),
            Ok(Poll::Pending) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn release(&mut self, n: usize) {
        let stream = self.stream;
        with(|s| s.conn.release(stream, n));
    }

    fn is_end_stream(&self) -> bool {
        let stream = self.stream;
        // Trailers still to take are part of the stream.
        let ended = with(|s| {
            s.slots
                .get(&stream)
                .is_some_and(|t| t.ended && t.data.is_empty() && t.trailers.is_none())
        });
        ended.unwrap_or(true)
    }
}

/// A response's body on a client's stream: DATA as the client's window allows, then
/// trailers or the end.
pub struct ResponseBody {
    stream: u32,
}

impl SendHalf for ResponseBody {
    fn reserve_capacity(&mut self, _n: usize) {
        // The engine's room is the window plus a bounded buffer, asked or not.
    }

    fn capacity(&self) -> usize {
        let stream = self.stream;
        with_slot(stream, |_, conn| Ok(conn.capacity(stream))).unwrap_or(0)
    }

    fn poll_capacity(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<usize>>> {
        let stream = self.stream;
        let polled = with_slot(stream, |slot, conn| {
            // A stream whose sending side is over takes nothing more.
            if !conn.is_open_stream(stream) {
                return Ok(None);
            }
            let room = conn.capacity(stream);
            if room == 0 {
                slot.park(cx);
            }
            Ok(Some(room))
        });
        match polled {
            Ok(None) => Poll::Ready(None),
            Ok(Some(0)) => Poll::Pending,
            Ok(Some(room)) => Poll::Ready(Some(Ok(room))),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn send_data(&mut self, data: Bytes, end: bool) -> io::Result<()> {
        let stream = self.stream;
        with_slot(stream, |_, conn| conn.send_data(stream, data, end).map_err(send_failed))
    }

    fn send_trailers(&mut self, trailers: HeaderMap) -> io::Result<()> {
        let stream = self.stream;
        let fields = to_fields(&trailers);
        with_slot(stream, |_, conn| conn.send_trailers(stream, fields).map_err(send_failed))
    }

    fn send_reset(&mut self, code: ErrorCode) {
        let stream = self.stream;
        with(|s| s.conn.reset(stream, code));
    }

    fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ErrorCode>> {
        poll_reset(self.stream, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_are_their_three_digits() {
        assert_eq!(&status_text(200), b"200");
        assert_eq!(&status_text(431), b"431");
        assert_eq!(&status_text(103), b"103");
    }

    #[test]
    fn a_handle_outside_its_connections_poll_finds_the_stream_gone() {
        let mut responder = Responder::new(1);
        let e = responder.send_informational(100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert!(RequestBody::new(1).is_end_stream());
    }
}
