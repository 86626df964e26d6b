//! An HTTP/2 client's extended CONNECT (RFC 8441): a WebSocket opened on a stream.
//!
//! The stream's head becomes the upgrade an HTTP/1.1 WebSocket client sends (RFC 8441,
//! 5): `GET`, with a `Sec-WebSocket-Key` holdfast makes, since an HTTP/2 client sends
//! none, and the client's other fields (`Sec-WebSocket-Version`, `-Protocol`,
//! `-Extensions`, cookies...) as they are ([`extended`]); once decoded into the request
//! model, it asks to upgrade to `websocket` ([`upgrade`]), which an HTTP/1.1 origin
//! gets as `Connection: upgrade` and `Upgrade: websocket`. It is checked, routed and
//! rewritten like any request, and the stream's `H2Wire` answers the origin's `101`
//! with `200` and tunnels the stream (`proxy/h2/connect.rs`).
//!
//! Only `websocket` is taken (RFC 8441 defines no other); another `:protocol` gets
//! 501. A plain CONNECT (no `:protocol`) is not this module's: it goes on as it is,
//! and is refused like any CONNECT (405).

use bytes::Bytes;
use http::{Method, StatusCode};

use crate::http1::websocket::WebSocketKey;
use crate::http2::request::ClientHead;
use crate::http2::session::Responder;
use crate::message::RequestHead;
use crate::proxy::Proxy;

/// What a stream's head asked for, as far as extended CONNECT goes.
pub(super) enum Extended {
    /// Not an extended CONNECT: the head goes on as it came.
    No,
    /// A WebSocket: the head now asks an HTTP/1.1 origin to upgrade, with this key.
    WebSocket(WebSocketKey),
    /// Answered here instead of forwarded.
    Refused(Refused),
}

/// Why an extended CONNECT is answered by holdfast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// A `:protocol` other than `websocket` (501).
    Protocol,
    /// The system's random source gave no bytes for the key (503).
    NoKey,
}

impl Refused {
    fn status(self) -> StatusCode {
        match self {
            Refused::Protocol => StatusCode::NOT_IMPLEMENTED,
            Refused::NoKey => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The rule's name in `holdfast_refused_requests_total`.
    fn name(self) -> &'static str {
        match self {
            Refused::Protocol => "connect_protocol",
            Refused::NoKey => "websocket_key",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Refused::Protocol => "extended CONNECT is supported for the websocket protocol only",
            Refused::NoKey => "no random bytes for a Sec-WebSocket-Key",
        }
    }
}

/// Looks at a stream's head (`head`, and its `:protocol`) for an extended CONNECT, and
/// makes a WebSocket one the `GET` it stands for (see the module doc); [`upgrade`]
/// finishes it once decoded.
pub(super) fn extended(head: &mut ClientHead, protocol: Option<&[u8]>) -> Extended {
    if head.method != Method::CONNECT {
        return Extended::No;
    }
    let Some(protocol) = protocol else { return Extended::No };
    // RFC 8441, 4: the `:protocol` names an upgrade token (RFC 9110, 7.8), which is
    // case-insensitive.
    if !protocol.eq_ignore_ascii_case(b"websocket") {
        return Extended::Refused(Refused::Protocol);
    }
    let Some(key) = WebSocketKey::generate() else { return Extended::Refused(Refused::NoKey) };
    head.method = Method::GET;
    let fields = &mut head.fields;
    // The stream's DATA frames are the tunnel, not a body (RFC 9110, 9.3.6: a CONNECT's
    // content has no meaning), and the key and its answer are holdfast's.
    fields.remove("content-length");
    fields.remove("sec-websocket-accept");
    fields.insert("sec-websocket-key", Bytes::copy_from_slice(key.as_str().as_bytes()));
    Extended::WebSocket(key)
}

/// Makes the decoded head of a WebSocket's stream ask to upgrade to `websocket`, as an
/// HTTP/1.1 client's `Upgrade` with `Connection: upgrade` does: its body is then empty
/// (the stream's DATA frames are the tunnel), and an HTTP/1.1 origin gets both fields.
pub(super) fn upgrade(req: &mut RequestHead<'_, '_>) {
    req.upgrade = Some(b"websocket");
}

/// Answers an extended CONNECT holdfast does not forward; only the stream ends.
pub(super) fn refuse(
    proxy: &Proxy,
    addr: std::net::SocketAddr,
    respond: &mut Responder,
    refused: Refused,
) {
    tracing::debug!(client = %addr, reason = refused.text(), "refused HTTP/2 extended CONNECT");
    let status = refused.status().as_u16();
    proxy.refused(addr, status, refused.name());
    respond.answer_text(status, &format!("holdfast: {}\n", refused.text()));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing)]

    use super::*;
    use crate::http1::encode::{upstream_request, Forwarding, PeerText};
    use crate::http1::request::HeadLimits;
    use crate::message::Framing;

    fn parts(method: Method) -> ClientHead {
        let req = http::Request::builder()
            .method(method)
            .uri("https://example.com/chat?room=1")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .header("sec-websocket-key", "from-the-client")
            .header("content-length", "5")
            .body(())
            .unwrap();
        ClientHead::of_request(&req)
    }

    #[test]
    fn a_websocket_connect_becomes_an_upgrade_with_a_key_of_holdfasts() {
        let mut p = parts(Method::CONNECT);
        let Extended::WebSocket(key) = extended(&mut p, Some(b"WebSocket")) else {
            panic!("not a WebSocket")
        };
        assert_eq!(p.method, Method::GET);
        assert_eq!(p.fields.get("sec-websocket-key"), Some(key.as_str().as_bytes()));
        assert_eq!(p.fields.get("sec-websocket-protocol"), Some(&b"chat"[..]));
        assert_eq!(p.fields.get("sec-websocket-version"), Some(&b"13"[..]));
        assert!(p.fields.get("content-length").is_none());
        // Decoded and upgraded, it is what an HTTP/1.1 WebSocket client sends.
        let f = p.fields.headers();
        let limits = HeadLimits { max_line_bytes: 8192, max_head_bytes: 16384 };
        let mut req = crate::http2::request::decode(&p, &f, true, 100, &limits).unwrap();
        upgrade(&mut req);
        assert_eq!((req.method, req.target), ("GET", "/chat?room=1"));
        assert_eq!(req.framing, Framing::Empty);
        let peer = PeerText::new([127, 0, 0, 1].into(), false);
        let backend = "127.0.0.1:80".parse().unwrap();
        let fwd = Forwarding { peer: &peer, trusted: false, real_ip: peer.ip(), backend };
        let mut head = Vec::new();
        upstream_request(&req, &fwd, &mut head);
        let text = String::from_utf8(head).unwrap();
        assert!(text.starts_with("GET /chat?room=1 HTTP/1.1\r\n"), "{text}");
        assert!(text.contains("host: example.com\r\n"), "{text}");
        assert!(text.contains(&format!("sec-websocket-key: {}\r\n", key.as_str())), "{text}");
        assert!(text.contains("connection: upgrade\r\nupgrade: websocket\r\n"), "{text}");
        assert!(!text.contains("transfer-encoding") && !text.contains("content-length"), "{text}");
    }

    #[test]
    fn another_protocol_is_refused_and_a_plain_connect_is_left_alone() {
        let mut p = parts(Method::CONNECT);
        assert!(matches!(
            extended(&mut p, Some(b"connect-udp")),
            Extended::Refused(Refused::Protocol)
        ));
        let mut p = parts(Method::CONNECT);
        assert!(matches!(extended(&mut p, None), Extended::No));
        assert_eq!(p.method, Method::CONNECT);
        let mut p = parts(Method::GET);
        assert!(matches!(extended(&mut p, Some(b"websocket")), Extended::No));
        assert_eq!(p.fields.get("sec-websocket-key"), Some(&b"from-the-client"[..]));
    }
}
