//! A WebSocket on an HTTP/2 client's stream (extended CONNECT, RFC 8441) through the
//! stream's [`H2Wire`]. `client/h2/connect.rs` made the stream's head the upgrade an
//! HTTP/1.1 client sends, with a `Sec-WebSocket-Key` of holdfast's, so it is routed,
//! balanced and rewritten like any request; then, by the origin's protocol:
//!
//! - **HTTP/1.1**: the exchange's upgrade path. The origin's `101` must carry the
//!   `Sec-WebSocket-Accept` that answers the key, or the client gets 502 (a bad
//!   response; the connection closes). The client gets `200` with the origin's other
//!   fields (`Sec-WebSocket-Protocol`, `-Extensions`...), never the accept, and the
//!   stream is tunnelled through the connection ([`tunnel::to_connection`]), which
//!   left the pool for good when it switched, and which `exchange` closes once its
//!   backend has left its group and its drain time is over.
//! - **HTTP/2**: the request goes on as an extended CONNECT if the origin sent
//!   `SETTINGS_ENABLE_CONNECT_PROTOCOL` (else 501, saying so); a 2xx is relayed as it
//!   is and the stream tunnelled through the origin's ([`tunnel::to_stream`]), closed
//!   too when the backend is cut off.
//!
//! Any other answer (400, 403, 426...) goes to the client as a response, body and all,
//! but a 2xx from an HTTP/1.1 origin that did not switch: the client would take it for
//! an open WebSocket, so it gets 502 instead.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;

use super::tunnel::{self, End, Tunnelled};
use super::{abandoned, client_reset, stream_failed, stream_not_opened, H2Wire};
use crate::http1::encode::ConnectionOut;
use crate::http1::response::BadResponse;
use crate::http1::websocket::WebSocketKey;
use crate::http2::encode::OriginHead;
use crate::http2::fields::Fields;
use crate::http2::origin::{SendRequest, SendStream};
use crate::http2::session::ResponseBody;
use crate::net::WaitError;
use crate::proxy::error::ProxyErrorKind;
use crate::proxy::transfer::{DownloadError, Downloaded, Upload};
use crate::proxy::wire::{Attempt, ResponseStart};
use crate::proxy::Outbound;
use crate::upstream::OriginConn;
use holdfast_h2::error::ErrorCode;

/// A stream that is a WebSocket, as far as it got.
pub(super) struct WebSocket {
    /// The `Sec-WebSocket-Key` an HTTP/1.1 origin gets.
    key: WebSocketKey,
    /// The client's stream, once answered `200` for an HTTP/1.1 origin's `101`.
    client: Option<ResponseBody>,
    /// The sending side of an HTTP/2 origin's stream that accepted the tunnel.
    upload: Option<SendStream>,
}

impl H2Wire {
    /// Makes the stream a WebSocket: its head asked an HTTP/1.1 origin to upgrade with
    /// `key` (see `client/h2/connect.rs`).
    pub(crate) fn open_websocket(&mut self, key: WebSocketKey) {
        self.websocket = Some(Box::new(WebSocket { key, client: None, upload: None }));
    }

    /// After an HTTP/1.1 origin's response head: a switch to WebSocket must answer
    /// holdfast's key (RFC 6455, 4.1), or the connection fails; a 2xx that is not a
    /// switch cannot go to the client, which would take it for an open WebSocket
    /// (RFC 8441, 5).
    pub(super) fn check_switch(&self, start: &ResponseStart) -> Result<(), Attempt> {
        let Some(ws) = self.websocket.as_deref() else { return Ok(()) };
        if start.connection != ConnectionOut::Upgrade {
            return match start.status {
                200..=299 => {
                    Err(Attempt::Failed(ProxyErrorKind::WebSocketNotSwitched(start.status)))
                }
                _ => Ok(()),
            };
        }
        let mut accepts =
            self.head.headers.iter().filter(|f| f.name == "sec-websocket-accept").map(|f| &f.value);
        match (accepts.next(), accepts.next()) {
            (Some(accept), None) if ws.key.is_answered_by(accept) => Ok(()),
            _ => Err(Attempt::Failed(BadResponse::WebSocketAccept.into())),
        }
    }

    /// Answers an HTTP/1.1 origin's `101` with `200`; true when it went out.
    pub(super) fn answer_switch(&mut self) -> bool {
        if self.websocket.is_none() {
            return false;
        }
        let headers = tunnel_fields(std::mem::take(&mut self.head.headers));
        let answered = self.start_response(200, headers, false);
        match (answered, self.websocket.as_deref_mut()) {
            (Ok(stream), Some(ws)) => {
                ws.client = Some(stream);
                true
            }
            _ => {
                self.client_failed = true;
                false
            }
        }
    }

    /// Tunnels the stream through an HTTP/1.1 origin's connection after
    /// [`H2Wire::answer_switch`], until either side ends it; the connection closes.
    pub(super) async fn tunnel_h1(&mut self, conn: OriginConn, stall: Duration) {
        let Some(mut client) = self.websocket.as_deref_mut().and_then(|ws| ws.client.take()) else {
            return;
        };
        // `exchange` closes the tunnel when the backend is cut off.
        let stop = std::future::pending();
        let (body, origin_buf) = (&mut self.body, &mut self.origin_buf);
        let tunnelled =
            tunnel::to_connection(body, &mut client, &conn.stream, origin_buf, stall, stop).await;
        log_end(&tunnelled);
    }

    /// [`crate::proxy::wire::H2OriginWire::attempt_h2`] for a WebSocket: the request as an
    /// extended CONNECT, if the origin takes them, and its response head.
    pub(super) async fn websocket_attempt(
        &mut self,
        out: &mut Outbound,
        mut send: SendRequest,
        head: &OriginHead,
    ) -> Result<(Upload, ResponseStart), Attempt> {
        // Known once the connection's first SETTINGS are in, which they are before a
        // stream is leased (`upstream::h2`).
        if !send.is_extended_connect_protocol_enabled() {
            return Err(Attempt::Failed(ProxyErrorKind::NoWebSocketOverH2));
        }
        let head = extended_connect(head);
        let (response, upload) = send.send_request(&head, false).map_err(stream_not_opened)?;
        let limit = out.route.timeouts.response_header;
        // A client that resets the stream meanwhile ends the exchange; the origin's
        // stream is reset too when the response future drops.
        let waited = tokio::select! {
            biased;
            waited = tokio::time::timeout(limit, response) => waited,
            () = client_reset(&mut self.respond) => return Err(abandoned()),
        };
        let answered = match waited {
            Err(_) => return Err(Attempt::Failed(ProxyErrorKind::HeaderTimeout(limit))),
            Ok(Err(e)) => return Err(stream_failed(e)),
            Ok(Ok(answered)) => answered,
        };
        // RFC 8441, 5: a 2xx opens the tunnel; anything else is a response.
        let accepted = (200..=299).contains(&answered.status);
        let start = self.start_h2(out, answered, None)?;
        if let (true, Some(ws)) = (accepted, self.websocket.as_deref_mut()) {
            ws.upload = Some(upload);
        }
        Ok(start)
    }

    /// [`crate::proxy::wire::H2OriginWire::relay_h2`] for a WebSocket an HTTP/2 origin
    /// accepted: the response head, then the tunnel until either side ends it or the
    /// backend is cut off. `None` when the origin did not accept it: its response is
    /// relayed as any other.
    pub(super) async fn websocket_relay(
        &mut self,
        out: &Outbound,
        start: &ResponseStart,
    ) -> Option<Result<Downloaded, DownloadError>> {
        let mut upload = self.websocket.as_deref_mut()?.upload.take()?;
        let Some(mut from_origin) = self.origin_body.take() else {
            upload.send_reset(ErrorCode::Cancel);
            return None;
        };
        let headers = tunnel_fields(std::mem::take(&mut self.head.headers));
        let mut client = match self.start_response(start.status, headers, false) {
            Ok(client) => client,
            Err(e) => {
                upload.send_reset(ErrorCode::Cancel);
                self.client_failed = true;
                let error = WaitError::Io(e);
                return Some(Err(DownloadError::Client { error, bytes: 0, remaining: None }));
            }
        };
        let stall = out.route.timeouts.read;
        let backend = Arc::clone(out.backend());
        let tunnelled = tunnel::to_stream(
            &mut self.body,
            &mut client,
            &mut from_origin,
            &mut upload,
            stall,
            backend.cut_off(),
        )
        .await;
        if let End::Stopped = tunnelled.end {
            tracing::info!(backend = %backend.addr, container = backend.container_name(), "upgraded connection closed: its server left and the drain time is over");
        } else {
            log_end(&tunnelled);
        }
        // However it ended, the tunnel was the response: it is logged as delivered,
        // as an HTTP/1.1 upgrade is.
        Some(Ok(Downloaded { bytes: tunnelled.to_client, extra: false }))
    }
}

/// The HTTP/2 request for a WebSocket's stream (the `GET` `prepare` made of it, see
/// `http2::encode::origin_head`) as the extended CONNECT it came as (RFC 8441, 4):
/// method CONNECT with `:protocol` `websocket`, without the key, which only an HTTP/1.1
/// origin needs.
fn extended_connect(head: &OriginHead) -> OriginHead {
    let mut head = head.clone();
    head.method = Method::CONNECT;
    head.protocol = Some(Bytes::from_static(b"websocket"));
    head.fields.remove("sec-websocket-key");
    head
}

/// The fields of the origin's answer that go to the client with the tunnel's 2xx:
/// all but `Sec-WebSocket-Accept` (the answer to holdfast's key, not the client's) and
/// the framing (a 2xx to CONNECT has none, RFC 9110, 9.3.6). `Upgrade` and
/// `Connection` never get here: HTTP/2 does not carry them.
fn tunnel_fields(mut headers: Fields) -> Fields {
    headers.remove("sec-websocket-accept");
    headers.remove("content-length");
    headers
}

/// Logs the end of a tunnel.
fn log_end(tunnelled: &Tunnelled) {
    let (to_client, to_origin) = (tunnelled.to_client, tunnelled.to_origin);
    match &tunnelled.end {
        End::Failed(e) => {
            tracing::debug!(to_client, to_origin, error = %e, "WebSocket over HTTP/2 ended with an error");
        }
        End::Both | End::Stopped => {
            tracing::debug!(to_client, to_origin, "WebSocket over HTTP/2 closed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upgrade_goes_to_an_http2_origin_as_an_extended_connect_without_the_key() {
        // As `http2::encode::origin_head` makes it: HTTP/2 carries no `Upgrade`.
        let request = http::Request::get("http://app/chat")
            .header("sec-websocket-key", "abc")
            .header("sec-websocket-version", "13")
            .body(())
            .unwrap();
        let head = extended_connect(&OriginHead::of_request(&request));
        assert_eq!(head.method, Method::CONNECT);
        assert_eq!((&head.authority[..], &head.path[..]), (&b"app"[..], &b"/chat"[..]));
        assert_eq!(head.protocol.as_deref(), Some(&b"websocket"[..]));
        assert!(head.fields.get("sec-websocket-key").is_none());
        assert_eq!(head.fields.get("sec-websocket-version"), Some(&b"13"[..]));
    }

    #[test]
    fn the_client_never_gets_the_accept_or_a_length() {
        let mut headers = Fields::default();
        headers.push_static("sec-websocket-accept", Bytes::from_static(b"x"));
        headers.push_static("sec-websocket-protocol", Bytes::from_static(b"chat"));
        headers.push_static("content-length", Bytes::from_static(b"0"));
        let passed = tunnel_fields(headers);
        let names: Vec<&str> = passed.headers().iter().map(|h| h.name).collect();
        assert_eq!(names, ["sec-websocket-protocol"]);
    }
}
