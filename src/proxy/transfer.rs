//! Moving bodies between the two sockets of an exchange: the request body up, the
//! response body down, the rest of a response nobody reads (drain), and the bytes of
//! an upgraded connection both ways.
//!
//! Bodies pass through as they are framed. A chunked body keeps its chunks and
//! trailers; [`Chunked`] only follows them to find the end. The two exceptions: an
//! HTTP/1.0 client gets a chunked response decoded (it does not know chunked
//! encoding), and an HTTP/1.1 client gets a close-delimited response chunked (so its
//! connection can stay open).

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;

use super::error::ClientBodyError;
use crate::http1::chunked::{Chunked, InvalidChunk};
use crate::http1::encode::{self, BodyOut, CONTINUE, LAST_CHUNK};
use crate::http1::request::FramingViolation;
use crate::http1::Framing;
use crate::net::{self, Deadline, InBuf, WaitError};

/// Trailer bytes accepted at the end of a chunked body.
const MAX_TRAILER_BYTES: usize = 32 * 1024;

/// How far a request body got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upload {
    /// Sent to its last byte.
    Complete,
    /// The origin answered (or closed) before the body was all sent: the response
    /// comes first, and neither connection can carry another request afterwards.
    Interrupted,
}

/// Why a request body could not be sent.
#[derive(Debug)]
pub enum UploadError {
    /// Reading it from the client failed, or it was malformed.
    Client(ClientBodyError),
    /// The client sent nothing for the stall limit.
    ClientStalled,
    /// Writing it to the origin failed; the origin may have received part of it.
    Upstream(WaitError),
}

/// Where a body is in its framing.
enum Progress {
    Length(u64),
    Chunked(Chunked),
    Done,
}

impl Progress {
    fn new(framing: Framing) -> Progress {
        match framing {
            Framing::Length(n) if n > 0 => Progress::Length(n),
            Framing::Chunked => Progress::Chunked(Chunked::new(MAX_TRAILER_BYTES)),
            _ => Progress::Done,
        }
    }

    /// How many bytes at the start of `data` belong to the body.
    fn take(&mut self, data: &[u8]) -> Result<usize, InvalidChunk> {
        match self {
            Progress::Length(remaining) => {
                let n = (*remaining).min(data.len() as u64);
                *remaining -= n;
                if *remaining == 0 {
                    *self = Progress::Done;
                }
                Ok(n as usize)
            }
            Progress::Chunked(chunked) => {
                let (used, done) = chunked.scan(data)?;
                if done {
                    *self = Progress::Done;
                }
                Ok(used)
            }
            Progress::Done => Ok(0),
        }
    }

    fn is_done(&self) -> bool {
        matches!(self, Progress::Done)
    }
}

/// Sends the client's request body (`framing`) to the origin: what is buffered first,
/// then as it arrives. A client waiting on `Expect: 100-continue` gets its interim
/// response before holdfast waits for the body. Stops early if the origin answers
/// or closes meanwhile.
pub async fn upload(
    client: &mut TcpStream,
    buf: &mut InBuf,
    upstream: &TcpStream,
    framing: Framing,
    expect_continue: &mut bool,
    stall: Duration,
) -> Result<Upload, UploadError> {
    let mut body = Progress::new(framing);
    loop {
        let take = body.take(buf.data()).map_err(invalid)?;
        if take > 0 {
            let sent = write_watching(upstream, &buf.data()[..take], stall).await?;
            buf.consume(take);
            if sent == Upload::Interrupted {
                return Ok(Upload::Interrupted);
            }
        }
        if body.is_done() {
            return Ok(Upload::Complete);
        }
        answer_continue(client, expect_continue, stall).await?;
        let mut deadline = Deadline::after(stall);
        tokio::select! {
            biased;
            ready = upstream.readable() => {
                ready.map_err(|e| UploadError::Upstream(WaitError::Io(e)))?;
                return Ok(Upload::Interrupted);
            }
            read = buf.fill(client, &mut deadline) => { read_some(read)?; }
        }
    }
}

/// Reads a request body of `len` bytes into memory, so the request can be sent again
/// if a pooled connection fails under it (see `retry::should_keep_body`).
pub async fn read_kept(
    client: &mut TcpStream,
    buf: &mut InBuf,
    len: u64,
    expect_continue: &mut bool,
    stall: Duration,
) -> Result<Vec<u8>, UploadError> {
    let len = usize::try_from(len).expect("kept bodies are small");
    let mut kept = Vec::with_capacity(len);
    loop {
        let take = (len - kept.len()).min(buf.len());
        kept.extend_from_slice(&buf.data()[..take]);
        buf.consume(take);
        if kept.len() == len {
            return Ok(kept);
        }
        answer_continue(client, expect_continue, stall).await?;
        read_some(buf.fill(client, &mut Deadline::after(stall)).await)?;
    }
}

/// Sends `100 Continue` to a client that waits for it, once.
async fn answer_continue(
    client: &TcpStream,
    expect_continue: &mut bool,
    stall: Duration,
) -> Result<(), UploadError> {
    if std::mem::take(expect_continue) {
        net::write_all(client, &[CONTINUE], stall)
            .await
            .map_err(|(_, e)| UploadError::Client(ClientBodyError::Io(e.into_io())))?;
    }
    Ok(())
}

fn read_some(read: Result<usize, WaitError>) -> Result<(), UploadError> {
    match read {
        Ok(0) => Err(UploadError::Client(ClientBodyError::Closed)),
        Ok(_) => Ok(()),
        Err(WaitError::TimedOut) => Err(UploadError::ClientStalled),
        Err(WaitError::Io(e)) => Err(UploadError::Client(ClientBodyError::Io(e))),
    }
}

fn invalid(_: InvalidChunk) -> UploadError {
    UploadError::Client(ClientBodyError::Invalid(FramingViolation::InvalidChunk))
}

/// Writes `bytes` to the origin, giving up early if the origin answers or closes
/// while the write waits for room.
async fn write_watching(
    upstream: &TcpStream,
    bytes: &[u8],
    stall: Duration,
) -> Result<Upload, UploadError> {
    let mut written = 0;
    while written < bytes.len() {
        match upstream.try_write(&bytes[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::select! {
                    biased;
                    ready = upstream.readable() => {
                        ready.map_err(|e| UploadError::Upstream(WaitError::Io(e)))?;
                        return Ok(Upload::Interrupted);
                    }
                    room = tokio::time::timeout(stall, upstream.writable()) => match room {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return Err(UploadError::Upstream(WaitError::Io(e))),
                        Err(_) => return Err(UploadError::Upstream(WaitError::TimedOut)),
                    },
                }
            }
            Err(e) => return Err(UploadError::Upstream(WaitError::Io(e))),
        }
    }
    Ok(Upload::Complete)
}

/// A response body that reached the client in full.
#[derive(Debug)]
pub struct Downloaded {
    /// Body bytes written to the client (framing included when it was passed through).
    pub bytes: u64,
    /// The origin sent bytes past the end of the body: the connection is not fit for
    /// another request.
    pub extra: bool,
}

/// Why a response body did not reach the client in full.
#[derive(Debug)]
pub enum DownloadError {
    /// Writing to the client failed (it left, or stopped reading for the stall
    /// limit). `remaining`: body bytes the origin still has to send, when known.
    Client { error: WaitError, bytes: u64, remaining: Option<u64> },
    /// The origin's body failed: closed early, reset, stalled or malformed.
    Upstream { error: io::Error, bytes: u64 },
}

/// The client side of a download: the head goes out with the first body bytes.
struct ToClient<'a> {
    stream: &'a TcpStream,
    head: Option<&'a [u8]>,
    bytes: u64,
    stall: Duration,
}

impl ToClient<'_> {
    async fn send(&mut self, parts: &[&[u8]]) -> Result<(), WaitError> {
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let result = match self.head {
            Some(head) => {
                let mut all = [head, &[], &[], &[]];
                all[1..=parts.len()].copy_from_slice(parts);
                net::write_all(self.stream, &all[..=parts.len()], self.stall).await
            }
            None => net::write_all(self.stream, parts, self.stall).await,
        };
        result.map_err(|(_, e)| e)?;
        self.head = None;
        self.bytes += body as u64;
        Ok(())
    }
}

/// Sends the client its response: `head`, then the body the origin frames with
/// `framing`, framed towards the client as `out` says.
#[allow(clippy::too_many_arguments)]
pub async fn download(
    upstream: &mut TcpStream,
    buf: &mut InBuf,
    client: &TcpStream,
    head: &[u8],
    framing: Framing,
    out: BodyOut,
    read_stall: Duration,
    write_stall: Duration,
) -> Result<Downloaded, DownloadError> {
    let mut to = ToClient { stream: client, head: Some(head), bytes: 0, stall: write_stall };
    let mut body = Progress::new(framing);
    let mut decoder = (out == BodyOut::CloseDelimited && framing == Framing::Chunked)
        .then(|| Chunked::new(MAX_TRAILER_BYTES));
    let until_close = framing == Framing::UntilClose;
    loop {
        let sent = match (&mut decoder, out) {
            (Some(decoder), _) => send_decoded(&mut to, buf, decoder).await,
            (None, BodyOut::Rechunked) if !buf.is_empty() => {
                let data = buf.data();
                let mut line = Vec::with_capacity(18);
                encode::chunk_size_line(data.len(), &mut line);
                let len = data.len();
                let sent = to.send(&[&line, data, b"\r\n"]).await;
                buf.consume(len);
                sent.map_err(Fault::Client)
            }
            (None, _) => match body.take(buf.data()) {
                Ok(framed) => {
                    let take = if until_close { buf.len() } else { framed };
                    let sent = to.send(&[&buf.data()[..take]]).await;
                    buf.consume(take);
                    sent.map_err(Fault::Client)
                }
                Err(_) => Err(Fault::Upstream(invalid_data())),
            },
        };
        let done = decoder.as_ref().map_or(body.is_done(), Chunked::is_done) && !until_close;
        match sent {
            Err(Fault::Client(error)) => {
                let remaining = match body {
                    Progress::Length(n) => Some(n),
                    Progress::Done => Some(0),
                    Progress::Chunked(_) => None,
                };
                return Err(DownloadError::Client { error, bytes: to.bytes, remaining });
            }
            Err(Fault::Upstream(error)) => {
                return Err(DownloadError::Upstream { error, bytes: to.bytes })
            }
            Ok(()) if done => {
                return Ok(Downloaded { bytes: to.bytes, extra: !buf.is_empty() });
            }
            Ok(()) => {}
        }
        match buf.fill(upstream, &mut Deadline::after(read_stall)).await {
            Ok(0) if until_close => {
                if out == BodyOut::Rechunked {
                    to.send(&[LAST_CHUNK]).await.map_err(|error| DownloadError::Client {
                        error,
                        bytes: to.bytes,
                        remaining: None,
                    })?;
                }
                return Ok(Downloaded { bytes: to.bytes, extra: false });
            }
            Ok(0) => {
                let error = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the origin closed the connection before the body ended",
                );
                return Err(DownloadError::Upstream { error, bytes: to.bytes });
            }
            Ok(_) => {}
            Err(e) => return Err(DownloadError::Upstream { error: e.into_io(), bytes: to.bytes }),
        }
    }
}

/// Which side a step of a download failed on.
enum Fault {
    Client(WaitError),
    Upstream(io::Error),
}

/// Sends the payload of the chunked bytes in `buf` to the client, without framing.
async fn send_decoded(
    to: &mut ToClient<'_>,
    buf: &mut InBuf,
    decoder: &mut Chunked,
) -> Result<(), Fault> {
    loop {
        let step = decoder.step(buf.data()).map_err(|_| Fault::Upstream(invalid_data()))?;
        if !step.data.is_empty() || to.head.is_some() {
            let sent = to.send(&[&buf.data()[step.data.clone()]]).await;
            sent.map_err(Fault::Client)?;
        }
        buf.consume(step.used);
        if step.done || buf.is_empty() {
            return Ok(());
        }
    }
}

fn invalid_data() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "invalid chunked body from the origin")
}

/// Copies bytes both ways between an upgraded client connection and its upstream
/// connection until either side ends; bytes already read on either side go first.
pub async fn tunnel(
    client: &mut TcpStream,
    client_buf: &mut InBuf,
    mut upstream: TcpStream,
    upstream_buf: &mut InBuf,
    stall: Duration,
) -> io::Result<()> {
    if !upstream_buf.is_empty() {
        net::write_all(client, &[upstream_buf.data()], stall)
            .await
            .map_err(|(_, e)| e.into_io())?;
        upstream_buf.consume(upstream_buf.len());
    }
    if !client_buf.is_empty() {
        net::write_all(&upstream, &[client_buf.data()], stall)
            .await
            .map_err(|(_, e)| e.into_io())?;
        client_buf.consume(client_buf.len());
    }
    client_buf.release();
    upstream_buf.release();
    tokio::io::copy_bidirectional(client, &mut upstream).await.map(|_| ())
}
