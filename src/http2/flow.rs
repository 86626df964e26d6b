//! Moving bytes on an HTTP/2 stream within its flow-control window, with a bound on
//! each wait: what every direction of every HTTP/2 exchange uses.

use std::future::poll_fn;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use holdfast_h2::error::ErrorCode;

use super::halves::{RecvHalf, SendHalf};
use crate::net::{self, Deadline};

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "timed out")
}

/// `fut`'s output, or `None` after `limit`. A future that is ready at once (the
/// common case: a frame that came with the one before) costs no timer ([`net::wait`]).
async fn within<F: std::future::Future>(limit: Duration, fut: F) -> Option<F::Output> {
    net::wait(fut, &mut Deadline::after(limit)).await.ok()
}

/// Sends `data` on `stream` as the peer's window allows, waiting at most `stall` for
/// each grant; `end` ends the stream with the last of it.
pub async fn send(
    stream: &mut impl SendHalf,
    mut data: Bytes,
    end: bool,
    stall: Duration,
) -> io::Result<()> {
    send_from(stream, &mut data, end, stall).await
}

/// [`send`], taking the bytes from `data` as they go: what did not go stays there, so a
/// caller that drops the send midway (something else came first) can send the rest
/// later.
pub async fn send_from(
    stream: &mut impl SendHalf,
    data: &mut Bytes,
    end: bool,
    stall: Duration,
) -> io::Result<()> {
    if data.is_empty() {
        return stream.send_data(Bytes::new(), end);
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let mut room = stream.capacity();
        while room == 0 {
            let granted = within(stall, poll_fn(|cx| stream.poll_capacity(cx)));
            room = match granted.await {
                None => return Err(timed_out()),
                Some(None) => return Err(io::ErrorKind::BrokenPipe.into()),
                Some(Some(Err(e))) => return Err(e),
                Some(Some(Ok(n))) => n,
            };
        }
        let piece = data.split_to(room.min(data.len()));
        stream.send_data(piece, end && data.is_empty())?;
    }
    Ok(())
}

/// The next DATA frame's bytes from `body` within `stall`; `None` at the end of the
/// stream. The caller gives the window back ([`release`]) once it has passed them on.
pub async fn next(body: &mut impl RecvHalf, stall: Duration) -> io::Result<Option<Bytes>> {
    match within(stall, data(body)).await {
        None => Err(timed_out()),
        Some(None) => Ok(None),
        Some(Some(Ok(data))) => Ok(Some(data)),
        Some(Some(Err(e))) => Err(e),
    }
}

/// The next DATA frame's bytes from `body`, with no bound on the wait.
pub async fn data(body: &mut impl RecvHalf) -> Option<io::Result<Bytes>> {
    poll_fn(|cx| body.poll_data(cx)).await
}

/// [`next`], within `deadline`: one deadline for several reads.
pub async fn next_by(
    body: &mut impl RecvHalf,
    deadline: &mut Deadline<'_>,
) -> io::Result<Option<Bytes>> {
    match net::wait(data(body), deadline).await {
        Err(_) => Err(timed_out()),
        Ok(None) => Ok(None),
        Ok(Some(Ok(data))) => Ok(Some(data)),
        Ok(Some(Err(e))) => Err(e),
    }
}

/// Gives `n` bytes of window back to the sender of `body`.
pub fn release(body: &mut impl RecvHalf, n: usize) {
    body.release(n);
}

/// The trailers that end `body`, if any, within `stall`.
pub async fn trailers(
    body: &mut impl RecvHalf,
    stall: Duration,
) -> io::Result<Option<http::HeaderMap>> {
    match within(stall, poll_fn(|cx| body.poll_trailers(cx))).await {
        None => Err(timed_out()),
        Some(t) => t,
    }
}

/// Whether a stream that failed with `e` never reached the origin's application: it
/// was refused (`REFUSED_STREAM`), or it was above the last stream of a graceful
/// GOAWAY (RFC 9113, 6.8). A GOAWAY with an error code may also end streams the origin
/// was working on, so it does not count.
pub fn refused(e: &super::origin::Error) -> bool {
    e.reason() == Some(ErrorCode::RefusedStream)
        || (e.is_go_away() && e.is_remote() && e.reason() == Some(ErrorCode::NoError))
}
