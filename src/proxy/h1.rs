//! The HTTP/1.1 wire of an exchange: a client connection and an origin connection
//! that both speak HTTP/1.1. Writes the request head holdfast prepared and the body in
//! holdfast's framing, reads the origin's response head (skipping interim responses)
//! and writes the client's version of it, relays the body, tunnels an upgraded
//! connection, and writes holdfast's own responses. It decides nothing: `exchange`
//! does, from what this reports.

use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;

use holdfast_pool::CloseReason;
use http::Method;
use tokio::time::Instant;

use super::backlog::{self, Backlog};
use super::error::ProxyErrorKind;
use super::pace::Pace;
use super::retry::SendOutcome;
use super::transfer::{self, DownloadError, DownloadLimits, Downloaded, Upload, UploadError};
use super::wire::{Attempt, ResponseStart, Wire};
use super::{pace_config, upload_limits, Client, Outbound};
use crate::http1::encode::{self, BodyOut, ConnectionOut};
use crate::http1::head::HeadScan;
use crate::http1::response::{self, BadResponse, Response};
use crate::net::{self, Deadline, InBuf, Stream, WaitError};
use crate::spool::Spool;
use crate::upstream::{keepalive, Lease, OriginConn};

/// How long a background drain may take before the connection is closed instead.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// One exchange between an HTTP/1.1 client connection and HTTP/1.1 origin
/// connections: the client's side, and the buffers for the origin's side, which outlive
/// a retry on another connection.
pub(crate) struct H1Wire<'a> {
    pub(super) client: Client<'a>,
    /// What was read from the origin connection and not yet passed on.
    origin_buf: InBuf,
    /// The response head as the client gets it.
    pub(super) response_head: Vec<u8>,
    /// An exchange with an HTTP/2 origin: its response, and where the client's body
    /// is (see `h1_to_h2`). Boxed: rare.
    pub(super) to_h2: Option<Box<super::h1_to_h2::H1ToH2>>,
    /// Response bytes that wait for the client after the origin is done. Boxed: only
    /// responses to clients that fell behind have one.
    pub(super) behind: Option<Box<Backlog>>,
    /// The request body, read whole before it is sent (request buffering).
    request_body: Option<Box<Spool>>,
}

impl<'a> H1Wire<'a> {
    pub(crate) fn new(client: Client<'a>) -> Self {
        H1Wire {
            client,
            origin_buf: InBuf::new(net::ORIGIN_BUF),
            response_head: net::scratch(),
            to_h2: None,
            behind: None,
            request_body: None,
        }
    }
}

impl Drop for H1Wire<'_> {
    fn drop(&mut self) {
        self.origin_buf.release();
        net::recycle(std::mem::take(&mut self.response_head));
    }
}

impl Wire for H1Wire<'_> {
    async fn client_gone(&mut self) {
        // A peek that finds the end of the stream (or an error): the client closed.
        // Bytes instead (a body, a pipelined request) say nothing more: wait no longer.
        let mut byte = [0u8; 1];
        match self.client.stream.tcp().peek(&mut byte).await {
            Ok(0) | Err(_) => {}
            Ok(_) => std::future::pending().await,
        }
    }

    async fn buffer_request(&mut self, out: &mut Outbound) -> Result<(), Attempt> {
        let limits = upload_limits(out);
        let mut spool = Box::new(out.route.site.spools.spool());
        let (framing, expect) = (out.request.framing, &mut out.progress.expect_continue);
        let (client, buf) = (&mut *self.client.stream, &mut *self.client.buf);
        let read = transfer::buffer_request(client, buf, framing, expect, &limits, &mut spool);
        read.await.map_err(|e| upload_error(e, limits.upstream_stall))?;
        spool.settle().await;
        out.progress.body_consumed = true;
        self.request_body = Some(spool);
        Ok(())
    }

    async fn read_kept(&mut self, out: &mut Outbound, len: u64) -> Result<Vec<u8>, Attempt> {
        let limits = upload_limits(out);
        let expect = &mut out.progress.expect_continue;
        transfer::read_kept(self.client.stream, self.client.buf, len, expect, &limits)
            .await
            .map_err(|e| upload_error(e, limits.upstream_stall))
    }

    async fn attempt(
        &mut self,
        out: &mut Outbound,
        conn: &mut OriginConn,
        head: &[u8],
        kept: Option<&[u8]>,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let limit = out.route.timeouts.response_header;
        let stream = &mut conn.stream;
        send_head(stream, head, kept, limit).await?;
        // `response_header` counts from the end of the request: its arrival when it had
        // no body or one read beforehand, else the end of the upload.
        let (upload, sent_at) = if let Some(mut body) = self.request_body.take() {
            send_buffered(stream, &mut body, limit).await?;
            (Upload::Complete, Instant::now())
        } else if out.progress.body_consumed {
            (Upload::Complete, out.record.started())
        } else {
            let limits = upload_limits(out);
            let (framing, expect) = (out.request.framing, &mut out.progress.expect_continue);
            let sent = transfer::upload(
                self.client.stream,
                self.client.buf,
                stream,
                &mut self.origin_buf,
                framing,
                expect,
                &limits,
            );
            (sent.await.map_err(|e| upload_error(e, limit))?, Instant::now())
        };
        if upload == Upload::Complete {
            out.progress.body_consumed = true;
        }
        // The origin may take long to answer: the client's buffer, unless it holds a
        // pipelined request, goes back meanwhile.
        self.client.buf.release();
        let mut deadline = Deadline::on(self.client.timer, net::later(sent_at, limit));
        let start = read_response_head(
            out,
            upload,
            stream,
            &mut self.origin_buf,
            &mut deadline,
            &mut self.response_head,
        )
        .await?;
        Ok((upload, start))
    }

    fn forget_origin(&mut self) {
        self.origin_buf.consume(self.origin_buf.len());
    }

    async fn relay(
        &mut self,
        out: &Outbound,
        conn: &mut OriginConn,
        start: &ResponseStart,
    ) -> Result<Downloaded, DownloadError> {
        let site = &out.route.site;
        let limits = DownloadLimits {
            upstream_stall: out.route.timeouts.read,
            then_close: start.connection == ConnectionOut::Close,
        };
        let spools = start.buffer.then(|| Arc::clone(&site.spools));
        let pace = Pace::new(pace_config(site), out.route.timeouts.read);
        let mut to = Backlog::new(pace, spools).expecting(start.framing.length());
        let downloaded = transfer::download(
            &mut conn.stream,
            &mut self.origin_buf,
            self.client.stream,
            &self.response_head,
            start.framing,
            start.body_out,
            &limits,
            &mut to,
        )
        .await;
        if downloaded.is_ok() && to.is_behind() {
            self.behind = Some(Box::new(to));
        }
        downloaded
    }

    fn is_behind(&self) -> bool {
        self.behind.is_some()
    }

    async fn finish(&mut self, out: &Outbound) -> Result<u64, DownloadError> {
        let Some(mut to) = self.behind.take() else { return Ok(0) };
        to.origin_done(out.route.timeouts.client_buffered).await;
        let caught_up = to.catch_up(self.client.stream).await;
        caught_up.map_err(|error| DownloadError::Client {
            error,
            bytes: to.bytes(),
            remaining: None,
        })?;
        Ok(to.bytes())
    }

    fn origin_has_extra(&self) -> bool {
        !self.origin_buf.is_empty()
    }

    async fn switch(&mut self, out: &Outbound) -> bool {
        let stall = out.route.timeouts.read;
        net::write_all(self.client.stream, &[&self.response_head], stall).await.is_ok()
    }

    async fn tunnel(&mut self, conn: OriginConn, stall: Duration) {
        let (client, buf) = (&mut *self.client.stream, &mut *self.client.buf);
        let tunnel = transfer::tunnel(client, buf, conn.stream, &mut self.origin_buf, stall);
        if let Err(e) = tunnel.await {
            tracing::debug!(error = %e, "upgraded connection ended with an error");
        }
    }

    fn drain_later(&self, lease: Lease, remaining: u64) {
        drain_later(lease, remaining);
    }

    async fn answer_local(
        &mut self,
        out: &Outbound,
        status: u16,
        text: &str,
        extra: &[u8],
        keep: bool,
    ) -> bool {
        let connection = ConnectionOut::for_client(keep, out.request.version);
        let mut response = Vec::with_capacity(text.len().saturating_add(256));
        let hsts = out.hsts(|| false);
        let extra = [extra, hsts].concat();
        encode::local_response_with(status, text, &extra, connection, &mut response);
        let stall = out.route.timeouts.read;
        net::write_all(self.client.stream, &[&response], stall).await.is_ok()
    }
}

/// Where the client's version of an HTTP/1.1 origin's response head goes: HTTP/1.1
/// bytes, or an HTTP/2 head.
pub(super) trait HeadOut {
    /// Takes the head of `resp`, with the framing and connection the client gets and
    /// `extra` header lines to add.
    fn head(&mut self, resp: &Response<'_, '_>, body: BodyOut, conn: ConnectionOut, extra: &[u8]);
}

impl HeadOut for Vec<u8> {
    fn head(&mut self, resp: &Response<'_, '_>, body: BodyOut, conn: ConnectionOut, extra: &[u8]) {
        self.clear();
        encode::client_response(resp, body, conn, extra, self);
    }
}

/// Reads the origin's response head (skipping interim 1xx responses) and gives the
/// client's version of it to `response_head`.
pub(super) async fn read_response_head(
    out: &Outbound,
    upload: Upload,
    stream: &mut Stream,
    buf: &mut InBuf,
    deadline: &mut Deadline<'_>,
    response_head: &mut impl HeadOut,
) -> Result<ResponseStart, Attempt> {
    let mut received_any = false;
    let mut scan = HeadScan::default();
    loop {
        if !buf.is_empty() {
            received_any = true;
            match parse_response(out, upload, buf, &mut scan, response_head) {
                Ok(Some(start)) => return Ok(start),
                Ok(None) if buf.is_full() && !buf.grow(response::MAX_HEAD_BYTES) => {
                    return Err(Attempt::Failed(BadResponse::HeadTooLarge.into()));
                }
                Ok(None) => {}
                Err(e) => return Err(Attempt::Failed(e.into())),
            }
        }
        match buf.fill(stream, deadline).await {
            Ok(0) => {
                let error = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the origin closed the connection",
                );
                return Err(closed(received_any, error));
            }
            Ok(_) => {}
            Err(WaitError::TimedOut) => {
                let limit = out.route.timeouts.response_header;
                return Err(Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit)));
            }
            Err(WaitError::Io(error)) => return Err(closed(received_any, error)),
        }
    }
}

/// Parses a complete response head in `buf`, if there is one, consuming it.
fn parse_response(
    out: &Outbound,
    upload: Upload,
    buf: &mut InBuf,
    scan: &mut HeadScan,
    response_head: &mut impl HeadOut,
) -> Result<Option<ResponseStart>, BadResponse> {
    loop {
        let mut storage = [const { MaybeUninit::uninit() }; response::MAX_HEADERS];
        let head_request = out.request.method == Method::HEAD;
        let Some(resp) = response::read(scan, buf.data(), &mut storage, head_request)? else {
            return Ok(None);
        };
        let len = resp.head_len;
        if resp.is_interim() {
            // 100 Continue and other interim responses are not passed on; holdfast
            // answered `Expect` itself.
            buf.consume(len);
            *scan = HeadScan::default();
            if buf.is_empty() {
                return Ok(None);
            }
            continue;
        }
        let upgrade = resp.status == 101;
        if upgrade && !out.request.upgrade {
            return Err(BadResponse::UnrequestedUpgrade);
        }
        let body_out = BodyOut::choose(resp.framing, out.request.version);
        let close = !out.request.keep_alive
            || body_out == BodyOut::CloseDelimited
            || upload == Upload::Interrupted;
        let connection = if upgrade {
            ConnectionOut::Upgrade
        } else {
            ConnectionOut::for_client(!close, out.request.version)
        };
        // The origin's own policy is looked for only where holdfast would add one.
        let hsts = out.hsts(|| {
            resp.headers.iter().any(|h| h.name.eq_ignore_ascii_case("strict-transport-security"))
        });
        response_head.head(&resp, body_out, connection, hsts);
        let buffer = out.route.buffering.responses && !upgrade && {
            let value = |name: &str| {
                resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value)
            };
            !backlog::must_stream(value("content-type"), value("x-accel-buffering"))
        };
        let start = ResponseStart {
            status: resp.status,
            framing: resp.framing,
            body_out,
            reusable: resp.is_reusable() && !upgrade,
            declares_length: resp.declares_length,
            limits: keepalive::origin_limits(resp.keep_alive),
            connection,
            buffer,
        };
        let len = resp.head_len;
        buf.consume(len);
        return Ok(Some(start));
    }
}

/// Writes the request head and the `kept` body; `limit` is the response-header timeout.
pub(super) async fn send_head(
    stream: &Stream,
    head: &[u8],
    kept: Option<&[u8]>,
    limit: Duration,
) -> Result<(), Attempt> {
    let parts = [head, kept.unwrap_or_default()];
    net::write_all(stream, &parts, limit).await.map_err(|(n, e)| write_failed(n, e, limit))
}

/// Sends a request body read whole beforehand (request buffering) after its head, within
/// `limit` (the response-header timeout) for each wait.
pub(super) async fn send_buffered(
    stream: &Stream,
    body: &mut Spool,
    limit: Duration,
) -> Result<(), Attempt> {
    let sent = transfer::send_spooled(stream, body, limit).await;
    // The head went: a failure now may have reached the origin.
    sent.map_err(|(_, e)| origin_write_failed(e, limit))
}

/// What a failed write of a request body to the origin means for the attempt: the
/// head went, so the origin may have received the request; `limit` is the
/// response-header timeout.
pub(super) fn origin_write_failed(error: WaitError, limit: Duration) -> Attempt {
    upload_error(UploadError::Upstream(error), limit)
}

/// Writes one piece of a body's payload: as a chunk when `chunked`, else as it is.
pub(super) async fn write_payload(
    stream: &Stream,
    data: &[u8],
    chunked: bool,
    stall: Duration,
) -> Result<(), (u64, WaitError)> {
    if chunked {
        let mut size_line = [0u8; 18];
        net::write_all(stream, &encode::chunk(data, &mut size_line), stall).await
    } else {
        net::write_all(stream, &[data], stall).await
    }
}

/// What a failed write of the request head means for the attempt: nothing written, the
/// request may go again; some written, `retry` decides; `limit` is the response-header
/// timeout.
pub(super) fn write_failed(written: u64, error: WaitError, limit: Duration) -> Attempt {
    match error {
        WaitError::TimedOut => Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit)),
        WaitError::Io(error) if written == 0 => {
            Attempt::Closed { outcome: SendOutcome::Unsent, error }
        }
        WaitError::Io(error) => Attempt::Closed { outcome: SendOutcome::MaybeReceived, error },
    }
}

/// Reads the unread `remaining` bytes of a response nobody wants, in the background,
/// then returns the connection to its pool (or closes it).
pub(super) fn drain_later(mut lease: Lease, remaining: u64) {
    tokio::spawn(async move {
        if net::drain(&mut lease.conn().stream, remaining, DRAIN_TIMEOUT).await {
            lease.release(Instant::now());
        } else {
            lease.discard(CloseReason::Error);
        }
    });
}

/// What a failed upload means for the attempt: the origin's side failing is the retry
/// policy's to judge; the client's side failing is the client's error. `limit` is the
/// response-header timeout.
fn upload_error(e: UploadError, limit: Duration) -> Attempt {
    match e {
        UploadError::Client(e) => Attempt::Failed(ProxyErrorKind::ClientBody(e)),
        UploadError::ClientStalled => Attempt::Failed(ProxyErrorKind::ClientTimeout),
        UploadError::TooLarge(max) => Attempt::Failed(ProxyErrorKind::BodyTooLarge(max)),
        UploadError::Spool(full) => Attempt::Failed(full.into()),
        // An origin that stops taking the body fails like a response that does not come.
        UploadError::Upstream(WaitError::TimedOut) => {
            Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit))
        }
        UploadError::Upstream(WaitError::Io(error)) => {
            Attempt::Closed { outcome: SendOutcome::MaybeReceived, error }
        }
    }
}

/// A connection that failed with `error`: before any response byte, the retry policy
/// decides; after some, the response is broken and nothing is retried.
fn closed(received_any: bool, error: std::io::Error) -> Attempt {
    if received_any {
        Attempt::Failed(ProxyErrorKind::Closed(error))
    } else {
        Attempt::Closed { outcome: SendOutcome::MaybeReceived, error }
    }
}
