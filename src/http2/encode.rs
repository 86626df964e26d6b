//! Writing the request model out as the HTTP/2 request an origin gets: `:method`,
//! `:scheme`, `:authority` (the request's host, as `Host` would carry it) and `:path`,
//! the client's fields but those holdfast writes itself or HTTP/2 does not carry, the
//! forwarding headers, and `te: trailers` when the client asked for trailers. No
//! HTTP/1.1 text is made or parsed: the values are those the codec read (slices of an
//! HTTP/1.1 client's head, or the HTTP/2 client's own field values), not copies.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::Method;

use super::convert::{add_lines, header_lines};
use super::fields::Fields;
use super::request::ClientHead;
use crate::http1::encode::{forwarding_headers, Forwarding};
use crate::message::{is_connection_specific, Framing, RequestHead, ResponseHead};

/// Why a request head could not become an HTTP/2 request: a field or target that
/// HTTP/1.1 allows and HTTP/2 does not. holdfast's side of the exchange, never the
/// origin's.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the request cannot be sent as HTTP/2: {0}")]
pub struct NotH2(pub String);

fn bad(what: impl std::fmt::Display) -> NotH2 {
    NotH2(what.to_string())
}

/// The head of a request as an HTTP/2 origin gets it, kept whole so that a stream the
/// origin refuses can be sent again: each try encodes it from here, by reference.
#[derive(Debug, Clone)]
pub struct OriginHead {
    pub method: Method,
    /// `:scheme`: the origin is reached over TLS.
    pub tls: bool,
    pub authority: Bytes,
    /// `:path`; none on a CONNECT that is not an extended one (RFC 9113, 8.5).
    pub path: Bytes,
    /// An extended CONNECT's `:protocol` (RFC 8441).
    pub protocol: Option<Bytes>,
    pub fields: Fields,
}

impl Default for OriginHead {
    /// `GET /`, with no authority and no fields.
    fn default() -> OriginHead {
        OriginHead {
            method: Method::GET,
            tls: false,
            authority: Bytes::new(),
            path: Bytes::from_static(b"/"),
            protocol: None,
            fields: Fields::default(),
        }
    }
}

impl OriginHead {
    /// The head of an `http::Request` made by holdfast itself (health checks), its
    /// fields copied.
    pub fn of_request(request: &http::Request<()>) -> OriginHead {
        let uri = request.uri();
        OriginHead {
            method: request.method().clone(),
            tls: uri.scheme() == Some(&http::uri::Scheme::HTTPS),
            authority: uri.authority().map_or_else(Bytes::new, |a| text(a.as_str())),
            path: uri.path_and_query().map_or_else(|| text("/"), |p| text(p.as_str())),
            protocol: None,
            fields: Fields::of_map(request.headers()),
        }
    }

    /// `:scheme` as it goes out.
    pub fn scheme(&self) -> &'static [u8] {
        if self.tls {
            b"https"
        } else {
            b"http"
        }
    }
}

fn text(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The HTTP/2 head for `req` to an origin reached over TLS or not (`tls`, for
/// `:scheme`). `source` is the head of an HTTP/2 client's stream, whose fields
/// `req.headers` are slices of, in order: its method, `:authority`, `:path`, names and
/// values are passed on as they are (shared, not copied).
pub fn origin_head(
    req: &RequestHead<'_, '_>,
    fwd: &Forwarding<'_>,
    source: Option<&ClientHead>,
    tls: bool,
) -> Result<OriginHead, NotH2> {
    // One copy of an HTTP/1.1 head: its values and target are slices of it.
    let shared = Bytes::copy_from_slice(req.raw);
    let (method, (authority, path)) = match source {
        Some(client) if req.method == client.method.as_str() => {
            (client.method.clone(), passed_target(req, client, fwd)?)
        }
        _ => (Method::from_bytes(req.method.as_bytes()).map_err(bad)?, target(req, fwd, &shared)?),
    };
    let mut fields = Fields::with_capacity(req.headers.len().saturating_add(7));
    match source {
        Some(client) => pass_fields(req, &client.fields, &mut fields),
        None => copy_fields(req, &shared, &mut fields)?,
    }
    forwarding(req, fwd, &mut fields)?;
    // The declared length, as holdfast writes it (the client's line is not passed on
    // as it came): HTTP/2 frames the body itself, but an origin may use it.
    if let Framing::Length(n) = req.framing {
        fields.insert("content-length", Bytes::from(n.to_string()));
    }
    if req.te_trailers {
        fields.insert("te", Bytes::from_static(b"trailers"));
    }
    Ok(OriginHead { method, tls, authority, path, protocol: None, fields })
}

/// `:authority` and `:path`, checked as the `http` crate checks a URI's.
fn target(
    req: &RequestHead<'_, '_>,
    fwd: &Forwarding<'_>,
    shared: &Bytes,
) -> Result<(Bytes, Bytes), NotH2> {
    let authority = match req.host {
        Some(host) => slice_of(shared, host),
        None => Bytes::from(fwd.backend.to_string()),
    };
    http::uri::Authority::from_maybe_shared(authority.clone()).map_err(bad)?;
    // `*` (OPTIONS) stays `*` (RFC 9113, 8.3.1).
    let path = match req.path.slash {
        true => Bytes::from([&b"/"[..], req.path.rest].concat()),
        false => slice_of(shared, req.path.rest),
    };
    let checked = http::uri::PathAndQuery::from_maybe_shared(path).map_err(bad)?;
    Ok((authority, text(checked.as_str())))
}

/// An HTTP/2 client's own `:authority` and `:path` when the request model kept them
/// (it may have changed the target: an extended CONNECT's).
fn passed_target(
    req: &RequestHead<'_, '_>,
    client: &ClientHead,
    fwd: &Forwarding<'_>,
) -> Result<(Bytes, Bytes), NotH2> {
    match (&client.authority, &client.path) {
        (Some(authority), Some(path))
            if req.host == Some(&authority[..]) && req.target.as_bytes() == &path[..] =>
        {
            Ok((authority.clone(), path.clone()))
        }
        _ => target(req, fwd, &Bytes::new()),
    }
}

/// `part` as a slice of `shared` when it is one, else a copy of it.
fn slice_of(shared: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).checked_sub(shared.as_ptr() as usize);
    let end = start.and_then(|s| s.checked_add(part.len()));
    match (start, end) {
        (Some(start), Some(end)) if end <= shared.len() && !part.is_empty() => {
            shared.slice(start..end)
        }
        _ => Bytes::copy_from_slice(part),
    }
}

/// An HTTP/2 client's fields, passed on as they are (names and values shared, not
/// copied), but those not passed on.
fn pass_fields(req: &RequestHead<'_, '_>, source: &Fields, fields: &mut Fields) {
    for (i, field) in source.iter().enumerate() {
        if !req.dropped.contains(i) {
            fields.push_field(field.clone());
        }
    }
}

/// An HTTP/1.1 client's fields, as slices of its head (names lowercased), but those
/// not passed on and those HTTP/2 does not carry.
fn copy_fields(
    req: &RequestHead<'_, '_>,
    shared: &Bytes,
    fields: &mut Fields,
) -> Result<(), NotH2> {
    for (i, h) in req.headers.iter().enumerate() {
        if req.dropped.contains(i) || is_connection_specific(h.name) {
            continue;
        }
        let value = slice_of(shared, h.value);
        HeaderValue::from_maybe_shared(value.clone()).map_err(bad)?;
        fields.push(lowercase_name(shared, h.name)?, value);
    }
    Ok(())
}

/// A field name of an HTTP/1.1 head as HTTP/2 writes it: a slice of the head when it
/// is lowercase already, else a lowercased copy; a name that is not a token is refused.
fn lowercase_name(shared: &Bytes, name: &str) -> Result<Bytes, NotH2> {
    let checked = HeaderName::from_bytes(name.as_bytes()).map_err(bad)?;
    match checked.as_str() == name {
        true => Ok(slice_of(shared, name.as_bytes())),
        false => Ok(text(checked.as_str())),
    }
}

/// The names of the fields holdfast writes itself.
const OWN_NAMES: [&str; 5] =
    ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip", "forwarded"];

/// The name of a forwarding header as `http1::encode` writes it (lowercase).
fn own_name(name: &[u8]) -> Option<&'static str> {
    OWN_NAMES.iter().find(|own| own.as_bytes() == name).copied()
}

/// The forwarding headers, written as `http1::encode` writes them for any origin (one
/// set of rules) and taken as fields: each value a slice of that one text.
fn forwarding(
    req: &RequestHead<'_, '_>,
    fwd: &Forwarding<'_>,
    fields: &mut Fields,
) -> Result<(), NotH2> {
    let mut text = Vec::with_capacity(192);
    forwarding_headers(req, fwd, &mut text);
    let text = Bytes::from(text);
    for (name, value) in header_lines(&text) {
        let name = own_name(name).ok_or_else(|| bad("a forwarding header of no known name"))?;
        fields.push_static(name, slice_of(&text, value));
    }
    Ok(())
}

/// The fields of an origin's response as an HTTP/2 client gets them, from its head in
/// the response model (an HTTP/1.1 origin's; an HTTP/2 origin's head goes on as it
/// came): those holdfast passes on (not the hop-by-hop ones), `content-length` when the
/// body has one, and `extra` header lines (`Name: value\r\n`, e.g. HSTS). `Trailer`,
/// which announces trailer fields (RFC 9110, 6.6.2), stays only on a chunked body: no
/// other HTTP/1.1 body can have trailers.
pub fn client_response(resp: &ResponseHead<'_, '_>, extra: &[u8]) -> Fields {
    let mut fields = Fields::with_capacity(resp.headers.len().saturating_add(2));
    // One copy of the head: the values are slices of it.
    let shared = Bytes::copy_from_slice(resp.raw);
    let chunked = resp.framing == Framing::Chunked;
    for (i, h) in resp.headers.iter().enumerate() {
        if resp.dropped.contains(i)
            || (!chunked && resp.trailer_lines.contains(i))
            || is_connection_specific(h.name)
        {
            continue;
        }
        let value = slice_of(&shared, h.value);
        if HeaderValue::from_maybe_shared(value.clone()).is_err() {
            continue;
        }
        if let Ok(name) = lowercase_name(&shared, h.name) {
            fields.push(name, value);
        }
    }
    if let Some(n) = resp.content_length {
        fields.insert("content-length", Bytes::from(n.to_string()));
    }
    add_lines(&mut fields, extra);
    fields
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::*;
    use crate::http1::encode::PeerText;
    use crate::http1::request::{parse, HeadLimits};

    const LIMITS: HeadLimits = HeadLimits { max_line_bytes: 8192, max_head_bytes: 16384 };

    fn head_of(text: &str, tls: bool) -> Result<OriginHead, NotH2> {
        let mut storage = [MaybeUninit::uninit(); 64];
        let req = parse(text.as_bytes(), &mut storage, &LIMITS).unwrap().unwrap();
        let peer = PeerText::new("10.0.0.1".parse().unwrap(), false);
        let fwd = Forwarding {
            peer: &peer,
            trusted: false,
            real_ip: peer.ip(),
            backend: "127.0.0.1:9".parse().unwrap(),
        };
        origin_head(&req, &fwd, None, tls)
    }

    /// The head's `:scheme`, `:authority` and `:path` as one URI.
    fn uri(head: &OriginHead) -> String {
        let scheme = String::from_utf8_lossy(head.scheme());
        let authority = String::from_utf8_lossy(&head.authority);
        format!("{scheme}://{authority}{}", String::from_utf8_lossy(&head.path))
    }

    fn value<'h>(head: &'h OriginHead, name: &str) -> Option<&'h str> {
        head.fields.get(name).map(|v| std::str::from_utf8(v).unwrap())
    }

    #[test]
    fn an_http1_head_becomes_an_http2_one_without_connection_fields() {
        let head = head_of(
            "GET /x?y=1 HTTP/1.1\r\nHost: app:8080\r\nConnection: close, x-hop\r\nX-Hop: 1\r\n\
             Keep-Alive: 5\r\nCookie: a=1\r\nX-Forwarded-For: 6.6.6.6\r\nAccept: */*\r\n\r\n",
            false,
        )
        .unwrap();
        assert_eq!(uri(&head), "http://app:8080/x?y=1");
        let names: Vec<&str> = head.fields.headers().iter().map(|h| h.name).collect();
        assert_eq!(
            names,
            [
                "cookie",
                "accept",
                "x-forwarded-for",
                "x-forwarded-proto",
                "x-real-ip",
                "x-forwarded-host",
                "forwarded"
            ]
        );
        // The client's X-Forwarded-For is replaced: it is not a trusted proxy.
        assert_eq!(value(&head, "x-forwarded-for"), Some("10.0.0.1"));
        assert_eq!(value(&head, "forwarded"), Some("for=10.0.0.1;host=\"app:8080\";proto=http"));
    }

    #[test]
    fn a_declared_length_goes_on_as_holdfast_writes_it() {
        let head =
            head_of("POST /up HTTP/1.1\r\nHost: app\r\nContent-Length:  5\r\n\r\n", false).unwrap();
        assert_eq!(head.fields.iter().filter(|f| f.name == "content-length").count(), 1);
        assert_eq!(value(&head, "content-length"), Some("5"));
        let chunked =
            head_of("POST /up HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\n", false)
                .unwrap();
        assert!(value(&chunked, "content-length").is_none());
        assert!(value(&chunked, "transfer-encoding").is_none());
    }

    #[test]
    fn options_star_keeps_its_asterisk_and_an_absolute_target_its_path() {
        let head = head_of("OPTIONS * HTTP/1.1\r\nHost: app\r\n\r\n", true).unwrap();
        assert_eq!(&head.path[..], b"*");
        assert_eq!(head.scheme(), b"https");
        let head = head_of("GET http://other?q HTTP/1.1\r\nHost: app\r\n\r\n", false).unwrap();
        assert_eq!(uri(&head), "http://other/?q");
    }

    #[test]
    fn what_http2_cannot_carry_is_said_and_the_rest_passes() {
        for text in [
            "GET /a^b{c}|d HTTP/1.1\r\nHost: app\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a_b!(c);d=e\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
        ] {
            assert!(head_of(text, false).is_ok(), "{text:?}");
        }
        // A percent-encoded host is a valid HTTP/1.1 Host, not an `:authority`.
        let e = head_of("GET / HTTP/1.1\r\nHost: a%41b\r\n\r\n", false).unwrap_err();
        assert!(e.to_string().contains("cannot be sent as HTTP/2"), "{e}");
    }
}
