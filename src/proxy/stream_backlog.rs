//! Response buffering on an HTTP/2 client stream: what the client's flow-control window
//! does not take yet waits in a [`Spool`](crate::spool::Spool), so the download goes on
//! reading the origin and the origin's connection (or stream, and its window) is free
//! once the origin has finished, however slowly the client grants window. The HTTP/1.1
//! twin is `backlog`.
//!
//! Bytes go to the stream as far as its window allows at once; the rest goes to the
//! spool, and from then on everything goes through the spool, in order. The end of the
//! stream (its last DATA frame, or trailers) waits behind them. When the spool can
//! take no more, the download waits for window, as it does when buffering is off.
//!
//! Once the origin is done, each wait for window is paced ([`Pace`], with the head
//! start cut to `client_buffered`): a client that grants nothing loses the stream, and
//! a client that loses many streams so is cut off by its connection.

use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;

use super::backlog::{charge, Held, Serve};
use super::pace::Pace;
use crate::http2::flow;
use crate::http2::halves::SendHalf;
use crate::http2::session::ResponseBody;
use crate::net::{self, Deadline, WaitError};
use crate::spool::Spools;

/// Bytes of the spool sent in one DATA frame at most, whatever window the client
/// grants: the read-back chunk.
const SERVE_BYTES: usize = crate::spool::READ_CHUNK;

/// How a stream ends once its body has gone.
#[derive(Debug)]
pub enum Ending {
    /// An empty DATA frame with END_STREAM.
    Data,
    /// The trailers, in a HEADERS frame with END_STREAM.
    Trailers(HeaderMap),
}

/// One HTTP/2 client stream's side of a download: the bytes it was given, its pace,
/// and what it has not taken yet.
pub struct StreamBacklog {
    held: Held,
    pace: Pace,
    /// Payload bytes handed to the stream.
    bytes: u64,
    /// Longest wait for window while the origin still sends and the spool is full (or
    /// off).
    stall: Duration,
}

impl StreamBacklog {
    pub fn new(pace: Pace, stall: Duration, spools: Option<Arc<Spools>>) -> StreamBacklog {
        StreamBacklog { held: Held::new(spools), pace, bytes: 0, stall }
    }

    /// The response is `len` bytes long (see [`Held::expecting`]).
    pub fn expecting(mut self, len: Option<u64>) -> StreamBacklog {
        self.held.expecting(len);
        self
    }

    /// Payload bytes handed to the stream so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether bytes wait for the client.
    pub fn is_behind(&self) -> bool {
        self.held.is_behind()
    }

    /// Sends `data` on `client`: what its window takes now, the rest into the spool;
    /// waits for window only when there is no spool or it is full.
    pub async fn send(&mut self, client: &mut ResponseBody, mut data: Bytes) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if !self.held.is_on() {
            return self.send_waiting(client, data).await;
        }
        if let Some(spool) = self.held.waiting() {
            if spool.push(&[&data]).await.is_ok() {
                return Ok(());
            }
            // Full: the client gets what waits first, then this.
            self.catch_up(client).await?;
            return self.send_waiting(client, data).await;
        }
        self.send_now(client, &mut data)?;
        if data.is_empty() {
            return Ok(());
        }
        if let Some(spool) = self.held.spool() {
            if spool.push(&[&data]).await.is_ok() {
                return Ok(());
            }
        }
        self.send_waiting(client, data).await
    }

    /// Sends `data`, the last of the body, and ends the stream as `ending` says; when
    /// the client is behind, the end waits behind what it has not taken (returned).
    pub async fn send_last(
        &mut self,
        client: &mut ResponseBody,
        data: Bytes,
        ending: Ending,
    ) -> io::Result<Option<Ending>> {
        let n = data.len();
        if !self.is_behind() && matches!(ending, Ending::Data) {
            client.reserve_capacity(n);
            if client.capacity() >= n {
                // All of it fits: the last DATA frame ends the stream, no empty frame
                // after it.
                client.send_data(data, true)?;
                self.sent(n);
                return Ok(None);
            }
        }
        self.send(client, data).await?;
        if self.is_behind() {
            return Ok(Some(ending));
        }
        end(client, ending)?;
        Ok(None)
    }

    /// `n` payload bytes went to the stream.
    fn sent(&mut self, n: usize) {
        self.bytes = self.bytes.saturating_add(n as u64);
        self.pace.moved(n as u64);
    }

    /// Sends what the stream's window takes of `data` now, without waiting.
    fn send_now(&mut self, client: &mut ResponseBody, data: &mut Bytes) -> io::Result<()> {
        client.reserve_capacity(data.len());
        let room = client.capacity().min(data.len());
        if room > 0 {
            let piece = data.split_to(room);
            client.send_data(piece, false)?;
            self.sent(room);
        }
        Ok(())
    }

    /// Sends all of `data`, waiting for window within `stall` each time.
    async fn send_waiting(&mut self, client: &mut ResponseBody, data: Bytes) -> io::Result<()> {
        let n = data.len();
        flow::send(client, data, false, self.stall).await?;
        self.sent(n);
        Ok(())
    }

    /// Waits until the client grants window, then sends what it takes of the spool:
    /// what a download does while it waits for the origin. Not paced: the download is
    /// waiting for the origin, not for the client.
    pub async fn serve(&mut self, client: &mut ResponseBody) -> io::Result<()> {
        let want = self.held.waiting().map_or(0, |s| s.len());
        client.reserve_capacity(usize::try_from(want).unwrap_or(usize::MAX).min(SERVE_BYTES));
        if client.capacity() == 0 {
            granted(poll_fn(|cx| client.poll_capacity(cx)).await)?;
        }
        self.send_ready(client)
    }

    /// Sends what the stream's window takes now of the spool, without waiting.
    fn send_ready(&mut self, client: &mut ResponseBody) -> io::Result<()> {
        let Some(spool) = self.held.waiting() else { return Ok(()) };
        let mut sent = 0usize;
        // Bounded: each round sends bytes or ends.
        while !spool.is_empty() {
            let front = spool.front()?;
            client.reserve_capacity(front.len().min(SERVE_BYTES));
            let room = client.capacity().min(front.len());
            if room == 0 {
                break;
            }
            let piece = Bytes::copy_from_slice(front.get(..room).unwrap_or_default());
            client.send_data(piece, false)?;
            spool.consume(room);
            sent = sent.saturating_add(room);
        }
        self.sent(sent);
        Ok(())
    }

    /// Gives the client everything the spool holds, waiting for window within its pace.
    pub async fn catch_up(&mut self, client: &mut ResponseBody) -> io::Result<()> {
        // Bounded: each round sends bytes, or the pace runs out.
        while self.is_behind() {
            self.send_ready(client)?;
            if !self.is_behind() {
                break;
            }
            let mut deadline = Deadline::after(self.pace.allowance());
            let waited = net::wait(poll_fn(|cx| client.poll_capacity(cx)), &mut deadline).await;
            charge(&mut self.pace, &deadline);
            match waited {
                Ok(capacity) => {
                    granted(capacity)?;
                }
                Err(WaitError::TimedOut) => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "the client took nothing"))
                }
                Err(WaitError::Io(e)) => return Err(e),
            }
        }
        self.held.shrink();
        Ok(())
    }

    /// The origin is done: what waits for the client is all it holds now, and the
    /// client's head start shrinks to `grace`.
    pub async fn origin_done(&mut self, grace: Duration) {
        self.held.settle().await;
        self.pace.cut_grace(grace);
    }
}

/// What a wait for window said: more window, or the stream gone.
fn granted(capacity: Option<io::Result<usize>>) -> io::Result<usize> {
    capacity.unwrap_or_else(|| Err(io::ErrorKind::BrokenPipe.into()))
}

/// Ends `client`'s stream as `ending` says.
pub fn end(client: &mut ResponseBody, ending: Ending) -> io::Result<()> {
    match ending {
        Ending::Data => client.send_data(Bytes::new(), true),
        Ending::Trailers(trailers) => client.send_trailers(trailers),
    }
}

/// An HTTP/2 client stream and its backlog, to serve while the download waits (see
/// `backlog::while_serving`).
pub struct ServeH2<'a> {
    pub to: &'a mut StreamBacklog,
    pub client: &'a mut ResponseBody,
}

impl Serve for ServeH2<'_> {
    type Error = io::Error;

    fn is_behind(&self) -> bool {
        self.to.is_behind()
    }

    async fn serve(&mut self) -> io::Result<()> {
        self.to.serve(self.client).await
    }
}

/// A stream whose origin is done and whose client is not: the rest waits here for
/// [`StreamBacklog::catch_up`].
pub struct Behind {
    pub client: ResponseBody,
    pub to: StreamBacklog,
    pub ending: Ending,
}
