//! Response buffering on an HTTP/1.1 client connection: what the client has not taken
//! yet waits in a [`Spool`], so the download goes on reading the origin at the origin's
//! pace and the upstream connection is free once the origin has finished, however slowly
//! the client reads.
//!
//! Bytes go to the client's socket directly while it takes them: a client that keeps up
//! costs no copy. Only what the socket does not take at once goes to the spool, and
//! from then on everything goes through the spool, in order, until the client has
//! caught up. When the spool can take no more (its bounds, see `spool`), the download
//! waits for the client, as it does when buffering is off.
//!
//! Waits on the client are paced ([`Pace`]) whether or not a spool is in use; while the
//! origin still sends, the client's socket is served between the origin's reads and no
//! wait is charged to the client. Once the origin is done, the rest is the client's to
//! take at the pace, with its head start cut to what `client_buffered` allows: it holds
//! only holdfast's memory or disk now, and a client that takes nothing loses it soon.

use std::io;
use std::sync::Arc;

use super::pace::Pace;
use crate::http1::body::Parts;
use crate::net::{self, Deadline, Stream, WaitError};
use crate::spool::{Spool, Spools};

/// How often a client that has fallen behind is tried with a write while no readiness
/// comes. A TCP socket is reported writable only once a third of its send buffer is
/// free, which a client reading 1 KiB/s from a large buffer reaches once every half
/// minute or so; a write succeeds as soon as any room is free. Without these tries,
/// such a client would look as if it took nothing, and be cut off.
const PROGRESS_TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// The client's side of one download: how much of it went out, its pace, and what it
/// has not taken yet.
pub struct Backlog {
    held: Held,
    pace: Pace,
    /// Body bytes written to the client (framing included, head not).
    bytes: u64,
    /// Head bytes not yet written: the first bytes to go are the head's.
    head_left: u64,
}

/// What a client that fell behind has not taken, and where a spool for it comes from:
/// the part of a download's client side both protocols share ([`Backlog`] and
/// `stream_backlog::StreamBacklog`).
pub(super) struct Held {
    /// Where a spool comes from; `None`: response buffering is off, and the download
    /// waits for the client.
    spools: Option<Arc<Spools>>,
    /// What the client has not taken, once it fell behind. Boxed: most downloads never
    /// need one, and every exchange's future carries this field.
    spool: Option<Box<Spool>>,
    /// The response's length, when its head gave one (see [`Spools::spool_for`]).
    expected: Option<u64>,
}

impl Held {
    /// Nothing held yet; spools from `spools`, when response buffering is on.
    pub(super) fn new(spools: Option<Arc<Spools>>) -> Held {
        Held { spools, spool: None, expected: None }
    }

    /// The response is `len` bytes long: a spool for it goes straight to its file when
    /// that is more than an exchange keeps in memory.
    pub(super) fn expecting(&mut self, len: Option<u64>) {
        self.expected = len;
    }

    /// Whether response buffering is on.
    pub(super) fn is_on(&self) -> bool {
        self.spools.is_some()
    }

    /// Whether bytes wait for the client.
    pub(super) fn is_behind(&self) -> bool {
        self.spool.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// The spool, when bytes wait in it.
    pub(super) fn waiting(&mut self) -> Option<&mut Spool> {
        self.spool.as_deref_mut().filter(|s| !s.is_empty())
    }

    /// The spool, made when first needed; `None` when buffering is off.
    pub(super) fn spool(&mut self) -> Option<&mut Spool> {
        if self.spool.is_none() {
            let expected = self.expected;
            self.spool = self.spools.as_ref().map(|s| Box::new(s.spool_for(expected)));
        }
        self.spool.as_deref_mut()
    }

    /// The client caught up: the spool's memory goes back.
    pub(super) fn shrink(&mut self) {
        if let Some(spool) = self.spool.as_mut() {
            spool.shrink();
        }
    }

    /// The origin is done: what waits for the client is all the spool will hold.
    pub(super) async fn settle(&mut self) {
        if let Some(spool) = self.spool.as_mut() {
            spool.settle().await;
        }
    }
}

impl Backlog {
    /// A download's client side: paced by `pace`, with a spool from `spools` for what
    /// the client does not take at once, if response buffering is on for it.
    pub fn new(pace: Pace, spools: Option<Arc<Spools>>) -> Backlog {
        Backlog { held: Held::new(spools), pace, bytes: 0, head_left: 0 }
    }

    /// The response is `len` bytes long (see [`Held::expecting`]).
    pub fn expecting(mut self, len: Option<u64>) -> Backlog {
        self.held.expecting(len);
        self
    }

    /// Body bytes the client has been sent so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether bytes wait for the client.
    pub fn is_behind(&self) -> bool {
        self.held.is_behind()
    }

    /// `n` bytes went to the client.
    fn wrote(&mut self, n: usize) {
        let n = n as u64;
        let of_head = n.min(self.head_left);
        self.head_left = self.head_left.saturating_sub(of_head);
        self.bytes = self.bytes.saturating_add(n.saturating_sub(of_head));
        self.pace.moved(n);
    }

    /// Sends `parts` (the first `head` bytes of which are the response head) to
    /// `client`: what its socket takes now, the rest into the spool; waits for the
    /// client only when there is no spool or it is full. `last`: the connection closes
    /// after these bytes.
    pub async fn send(
        &mut self,
        client: &Stream,
        parts: &Parts<'_>,
        head: usize,
        last: bool,
    ) -> Result<(), WaitError> {
        self.head_left = self.head_left.saturating_add(head as u64);
        if !self.held.is_on() {
            return self.send_waiting(client, parts.as_slice(), 0, last).await;
        }
        if let Some(spool) = self.held.waiting() {
            if spool.push(parts.as_slice()).await.is_ok() {
                return Ok(());
            }
            // Full: the client gets what waits first, then these.
            self.catch_up(client).await?;
            return self.send_waiting(client, parts.as_slice(), 0, last).await;
        }
        let now = match last {
            true => net::write_now_last(client, parts.as_slice()),
            false => net::write_now(client, parts.as_slice(), 0),
        };
        let written = match now {
            Ok(n) => n,
            Err((n, e)) => {
                self.wrote(n);
                return Err(WaitError::Io(e));
            }
        };
        self.wrote(written);
        let total = usize::try_from(parts.bytes()).unwrap_or(usize::MAX);
        if written >= total {
            return Ok(());
        }
        let mut rest = Parts::new();
        skip(parts.as_slice(), written, &mut rest);
        if let Some(spool) = self.held.spool() {
            if spool.push(rest.as_slice()).await.is_ok() {
                return Ok(());
            }
        }
        self.send_waiting(client, parts.as_slice(), written, last).await
    }

    /// Writes `parts` from byte `from` on, waiting on the client within its pace.
    async fn send_waiting(
        &mut self,
        client: &Stream,
        parts: &[&[u8]],
        from: usize,
        last: bool,
    ) -> Result<(), WaitError> {
        let mut rest = Parts::new();
        skip(parts, from, &mut rest);
        let mut deadline = Deadline::after(self.pace.allowance());
        let written = match last {
            true => net::write_last_by(client, rest.as_slice(), &mut deadline).await,
            false => net::write_all_by(client, rest.as_slice(), &mut deadline).await,
        };
        charge(&mut self.pace, &deadline);
        match written {
            Ok(()) => {
                self.wrote(usize::try_from(rest.bytes()).unwrap_or(usize::MAX));
                Ok(())
            }
            Err((n, e)) => {
                self.wrote(usize::try_from(n).unwrap_or(usize::MAX));
                Err(e)
            }
        }
    }

    /// Waits until the client's socket takes more, then gives it what it takes of the
    /// spool: what a download does while it waits for the origin. Not paced: the
    /// download is waiting for the origin, not for the client.
    pub async fn serve(&mut self, client: &Stream) -> Result<(), WaitError> {
        client.writable().await.map_err(WaitError::Io)?;
        self.write_ready(client, false)
    }

    /// Writes what the client's socket takes now of the spool, without waiting; `ask`:
    /// the first write asks the socket itself, whatever tokio last saw of it.
    fn write_ready(&mut self, client: &Stream, mut ask: bool) -> Result<(), WaitError> {
        let Some(spool) = self.held.waiting() else { return Ok(()) };
        let mut wrote = 0usize;
        // Bounded: each round writes bytes or ends.
        let result = loop {
            let front = match spool.front() {
                Ok([]) => break Ok(()),
                Ok(front) => front,
                Err(e) => break Err(WaitError::Io(e)),
            };
            let written = match std::mem::take(&mut ask) {
                true => client.try_write_unready(front),
                false => client.try_write(front),
            };
            match written {
                Ok(0) => break Err(WaitError::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    spool.consume(n);
                    wrote = wrote.saturating_add(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) => break Err(WaitError::Io(e)),
            }
        };
        self.wrote(wrote);
        result
    }

    /// Gives the client everything the spool holds, waiting on it within its pace.
    pub async fn catch_up(&mut self, client: &Stream) -> Result<(), WaitError> {
        // Bounded: each round writes bytes, or a tick passes and the pace drains by it.
        let mut tick = false;
        while self.is_behind() {
            self.write_ready(client, std::mem::take(&mut tick))?;
            if !self.is_behind() {
                break;
            }
            let allowance = self.pace.allowance();
            let mut deadline = Deadline::after(allowance.min(PROGRESS_TICK));
            let ready = net::wait(client.writable(), &mut deadline).await;
            charge(&mut self.pace, &deadline);
            match ready {
                Ok(ready) => ready.map_err(WaitError::Io)?,
                // A tick: the next round tries a write (see `PROGRESS_TICK`).
                Err(WaitError::TimedOut) if allowance > PROGRESS_TICK => tick = true,
                Err(e) => return Err(e),
            }
        }
        self.held.shrink();
        Ok(())
    }

    /// The origin is done: what waits for the client is all it holds now, and the
    /// client's head start shrinks to `grace`.
    pub async fn origin_done(&mut self, grace: std::time::Duration) {
        self.held.settle().await;
        self.pace.cut_grace(grace);
    }
}

/// A client's side of a download that can be given what waits for it (see
/// [`while_serving`]).
pub(super) trait Serve {
    type Error;
    fn is_behind(&self) -> bool;
    /// Waits until the client takes more, then gives it what it takes.
    fn serve(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>>;
}

/// An HTTP/1.1 client and its backlog, to serve while the download waits.
pub(super) struct ServeH1<'a> {
    pub to: &'a mut Backlog,
    pub client: &'a Stream,
}

impl Serve for ServeH1<'_> {
    type Error = WaitError;

    fn is_behind(&self) -> bool {
        self.to.is_behind()
    }

    async fn serve(&mut self) -> Result<(), WaitError> {
        self.to.serve(self.client).await
    }
}

/// `next` (the origin's next bytes, within a deadline of its own), while `client` is
/// given what waits for it: a download that waits for its origin need not leave its
/// client idle. The outer error is the client's. Not paced: the download is waiting
/// for the origin, not for the client.
pub(super) async fn while_serving<F: std::future::Future, S: Serve>(
    next: F,
    client: &mut S,
) -> Result<F::Output, S::Error> {
    let mut next = std::pin::pin!(next);
    // Bounded by `next`'s deadline: each round gives the client bytes, or ends.
    loop {
        if !client.is_behind() {
            return Ok(next.await);
        }
        tokio::select! {
            biased;
            out = &mut next => return Ok(out),
            served = client.serve() => served?,
        }
    }
}

/// Whether a response with these header values must reach its client as the origin
/// sends it, never held back: an event stream (each event is news when it is sent),
/// gRPC (messages both ways on one exchange, and flow control end to end), or an
/// origin that asks for it with `X-Accel-Buffering: no`, as it would of nginx.
pub fn must_stream(content_type: Option<&[u8]>, accel_buffering: Option<&[u8]>) -> bool {
    let media = content_type.unwrap_or_default();
    let is =
        |prefix: &[u8]| media.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix));
    is(b"text/event-stream")
        || is(b"application/grpc")
        || accel_buffering.is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"no"))
}

/// `parts` from byte `from` on, into `out`.
fn skip<'a>(parts: &[&'a [u8]], mut from: usize, out: &mut Parts<'a>) {
    for part in parts {
        if from >= part.len() {
            from = from.saturating_sub(part.len());
            continue;
        }
        out.push(part.get(from..).unwrap_or_default());
        from = 0;
    }
}

/// Charges `pace` with the time a wait on the client under `deadline` took.
pub(super) fn charge(pace: &mut Pace, deadline: &Deadline<'_>) {
    if let Some(began) = deadline.first_wait() {
        pace.waited(began.elapsed());
    }
}
