//! The wire of an exchange between an HTTP/1.1 client and an HTTP/2 origin: the
//! client's body, taken out of its HTTP/1.1 framing, goes out as DATA frames (its
//! trailer section as trailing HEADERS); the origin's response comes back as an
//! HTTP/1.1 head and body in the framing the client gets (trailers in a chunked one).
//! The body goes up before the response is awaited: an HTTP/1.1 client sends its
//! whole request first. A stream the origin refused mid-body goes again from a copy
//! of what went (and the trailers, once read), then on from where the client's body
//! stopped.

use std::sync::Arc;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};

use super::backlog::{while_serving, Backlog, ServeH1};
use super::body_copy::BodyCopy;
use super::error::{ClientBodyError, ProxyErrorKind};
use super::h1::H1Wire;
use super::h2::{send_again, start_of, stream_failed, upload_failed};
use super::pace::Pace;
use super::retry::SendOutcome;
use super::transfer::{DownloadError, Downloaded, Upload};
use super::wire::{Attempt, MuxWire, ResponseStart};
use super::{pace_config, Outbound};
use crate::http1::body::{Parts, Relay};
use crate::http1::encode::{self, ConnectionOut, CONTINUE};
use crate::http1::request::FramingViolation;
use crate::http2::{convert, flow};
use crate::net::{self, Deadline, WaitError};

/// What an exchange with an HTTP/2 origin keeps in its [`H1Wire`] (boxed there: rare).
#[derive(Default)]
pub(super) struct H1Mux {
    /// Where the client's body is in its framing, kept from one try to the next: a
    /// stream refused mid-body goes on from where the client's body stopped.
    relay: Option<Relay>,
    /// The origin's response, for [`MuxWire::mux_relay`].
    response: Option<(http::response::Parts, RecvStream)>,
    /// The client's trailers, once its body was read to its end: a refused stream
    /// sends them again.
    trailers: Option<http::HeaderMap>,
}

impl MuxWire for H1Wire<'_> {
    async fn mux_attempt(
        &mut self,
        out: &mut Outbound,
        mut send: SendRequest<Bytes>,
        request: http::Request<()>,
        kept: Option<&[u8]>,
        copy: &mut BodyCopy,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        let streaming = !out.progress.body_consumed;
        // After a refused try, what went on it goes first.
        let again = kept.is_none() && copy.len() > 0;
        let end = kept.is_none() && !streaming && !again;
        let (response, mut upload) = send.send_request(request, end).map_err(stream_failed)?;
        let stall = out.route.timeouts.read;
        let limit = out.route.timeouts.response_header;
        let sent = match kept {
            Some(kept) => flow::send(&mut upload, Bytes::copy_from_slice(kept), true, stall).await,
            None if again => {
                let trailers = self.mux.as_ref().and_then(|m| m.trailers.as_ref());
                send_again(&mut upload, copy, trailers, !streaming, stall).await
            }
            None => Ok(()),
        };
        let sent = match sent {
            Ok(()) if streaming => self.upload_h2(out, &mut upload, copy).await,
            Ok(()) => Ok(()),
            Err(error) => Err(Attempt::Closed { outcome: SendOutcome::MaybeReceived, error }),
        };
        match sent {
            Ok(()) => out.progress.body_consumed = true,
            // The origin stopped taking the body: its response, if it sent one before
            // (RFC 9113, 8.1), stands, and the client's connection closes after it
            // unless the body was read to its end.
            Err(Attempt::Closed { error, .. }) => {
                let answered = upload_failed(response, limit, error).await?;
                let upload =
                    if out.progress.body_consumed { Upload::Complete } else { Upload::Interrupted };
                return Ok(self.start_mux(out, answered, upload));
            }
            Err(failed) => return Err(failed),
        }
        self.client.buf.release();
        match tokio::time::timeout(limit, response).await {
            Err(_) => Err(Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit))),
            Ok(Err(e)) => Err(stream_failed(e)),
            Ok(Ok(answered)) => Ok(self.start_mux(out, answered, Upload::Complete)),
        }
    }

    async fn mux_relay(
        &mut self,
        out: &Outbound,
        start: &ResponseStart,
    ) -> Result<Downloaded, DownloadError> {
        let site = &out.route.site;
        let stall = out.route.timeouts.read;
        let Some((parts, mut body)) = self.mux.take().and_then(|mux| mux.response) else {
            return Ok(Downloaded { bytes: 0, extra: false });
        };
        let has_hsts = parts.headers.contains_key(http::header::STRICT_TRANSPORT_SECURITY);
        let hsts = out.hsts(|| has_hsts);
        let head = &mut self.response_head;
        head.clear();
        let (status, framing, body_out) = (start.status, start.framing, start.body_out);
        encode::client_response_from(
            status,
            &parts.headers,
            framing,
            body_out,
            start.connection,
            hsts,
            head,
        );
        let stream = &*self.client.stream;
        let spools = start.buffer.then(|| Arc::clone(&site.spools));
        let pace = Pace::new(pace_config(site), stall);
        let mut to = Backlog::new(pace, spools).expecting(framing.length());
        let to_client = |error, to: &Backlog| DownloadError::Client {
            error,
            bytes: to.bytes(),
            remaining: None,
        };
        let mut head_only = Parts::new();
        head_only.push(head);
        to.send(stream, &head_only, head.len(), false).await.map_err(|e| to_client(e, &to))?;
        if framing != crate::http1::Framing::Empty {
            let chunked = body_out.is_chunked(framing);
            loop {
                let next = next_for_h1(&mut body, stream, &mut to, stall).await;
                let data = match next.map_err(|e| to_client(e, &to))? {
                    Ok(Some(data)) => data,
                    Ok(None) => break,
                    Err(error) => return Err(DownloadError::Upstream { error, bytes: to.bytes() }),
                };
                if data.is_empty() {
                    continue;
                }
                let mut size_line = [0u8; 18];
                let mut parts = Parts::new();
                if chunked {
                    for part in encode::chunk(&data, &mut size_line) {
                        parts.push(part);
                    }
                } else {
                    parts.push(&data);
                }
                to.send(stream, &parts, 0, false).await.map_err(|e| to_client(e, &to))?;
                // Sent on, or held for the client: holdfast has the bytes, and the
                // origin its window back.
                flow::release(&mut body, data.len());
            }
            // Trailers (gRPC's `grpc-status`, say) go in the chunked ending (RFC 9112,
            // 7.1.2). A client that gets the origin's Content-Length, or an HTTP/1.0
            // client (close-delimited), has no trailer section: trailers are not read,
            // and dropped.
            if chunked {
                let trailers = match flow::trailers(&mut body, stall).await {
                    Ok(trailers) => trailers,
                    Err(error) => return Err(DownloadError::Upstream { error, bytes: to.bytes() }),
                };
                let end = convert::h1_chunked_end(trailers.as_ref());
                let mut parts = Parts::new();
                parts.push(&end);
                to.send(stream, &parts, 0, false).await.map_err(|e| to_client(e, &to))?;
            }
        }
        let bytes = to.bytes();
        if to.is_behind() {
            self.behind = Some(Box::new(to));
        }
        Ok(Downloaded { bytes, extra: false })
    }
}

/// The next DATA frame's bytes from an HTTP/2 origin's `body`, within `stall` (`None`
/// at its end); an HTTP/1.1 `client` is given what waits for it meanwhile. The outer
/// error is the client's.
async fn next_for_h1(
    body: &mut RecvStream,
    client: &net::Stream,
    to: &mut Backlog,
    stall: std::time::Duration,
) -> Result<std::io::Result<Option<Bytes>>, WaitError> {
    let mut deadline = Deadline::after(stall);
    let next = flow::next_by(body, &mut deadline);
    while_serving(next, &mut ServeH1 { to, client }).await
}

impl H1Wire<'_> {
    /// Keeps an HTTP/2 origin's response for [`MuxWire::mux_relay`]; after an
    /// interrupted upload the client's connection closes after it.
    fn start_mux(
        &mut self,
        out: &Outbound,
        answered: http::Response<RecvStream>,
        upload: Upload,
    ) -> (Upload, ResponseStart) {
        let (parts, body) = answered.into_parts();
        let mut start = start_of(out, &parts, body.is_end_stream());
        if upload == Upload::Interrupted {
            start.connection = ConnectionOut::for_client(false, out.request.version);
        }
        self.mux.get_or_insert_with(Box::default).response = Some((parts, body));
        (upload, start)
    }

    /// Streams the client's body, out of its HTTP/1.1 framing, to an HTTP/2 origin,
    /// within the route's limit, from where it stopped on a refused stream; what goes
    /// is copied into `copy` first.
    async fn upload_h2(
        &mut self,
        out: &mut Outbound,
        upload: &mut SendStream<Bytes>,
        copy: &mut BodyCopy,
    ) -> Result<(), Attempt> {
        let stall = out.route.timeouts.read;
        let max = out.route.max_body;
        // The client's trailer section is bounded as its head is (RFC 9112, 7.1.2).
        let max_trailer_bytes = out.route.site.limits.max_header_bytes;
        let framing = out.request.framing;
        let mux = self.mux.get_or_insert_with(Box::default);
        let relay = mux.relay.get_or_insert_with(|| Relay::new(framing, false, max_trailer_bytes));
        let client = &mut self.client;
        loop {
            if !client.buf.is_empty() {
                let piece = relay.decode(client.buf.data_mut()).map_err(|_| {
                    let invalid = ClientBodyError::Invalid(FramingViolation::InvalidChunk);
                    Attempt::Failed(ProxyErrorKind::ClientBody(invalid))
                })?;
                let payload = client.buf.data().get(..piece.payload).unwrap_or_default();
                let data = Bytes::copy_from_slice(payload);
                client.buf.consume(piece.used);
                if let Some(max) = max.filter(|max| relay.payload() > *max) {
                    return Err(Attempt::Failed(ProxyErrorKind::BodyTooLarge(max)));
                }
                copy.push(&data);
                // Read to its end: a try refused from here on sends it all from the
                // copy, and the trailers kept here.
                out.progress.body_consumed |= piece.done;
                // A chunked body's trailers end the stream in a HEADERS frame of their
                // own (RFC 9113, 8.1); without any, the last DATA frame ends it.
                let trailers = match piece.done {
                    true => convert::trailers_from_h1(relay.trailers()),
                    false => http::HeaderMap::new(),
                };
                let end = piece.done && trailers.is_empty();
                let failed = |error| Attempt::Closed { outcome: SendOutcome::MaybeReceived, error };
                if !data.is_empty() || end {
                    flow::send(upload, data, end, stall).await.map_err(failed)?;
                }
                if !trailers.is_empty() {
                    mux.trailers = Some(trailers.clone());
                    upload.send_trailers(trailers).map_err(|e| failed(flow::to_io(e)))?;
                }
                if piece.done {
                    return Ok(());
                }
                // A partial chunk line stays in the buffer until more arrives.
                if piece.used > 0 && !client.buf.is_empty() {
                    continue;
                }
            }
            if std::mem::take(&mut out.progress.expect_continue) {
                net::write_all(client.stream, &[CONTINUE], stall).await.map_err(|(_, e)| {
                    Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Io(e.into_io())))
                })?;
            }
            let mut deadline = Deadline::after(stall);
            match client.buf.fill(client.stream, &mut deadline).await {
                Ok(0) => {
                    return Err(Attempt::Failed(ProxyErrorKind::ClientBody(
                        ClientBodyError::Closed,
                    )))
                }
                Ok(_) => {}
                Err(WaitError::TimedOut) => {
                    return Err(Attempt::Failed(ProxyErrorKind::ClientTimeout))
                }
                Err(WaitError::Io(e)) => {
                    return Err(Attempt::Failed(ProxyErrorKind::ClientBody(ClientBodyError::Io(e))))
                }
            }
        }
    }
}
