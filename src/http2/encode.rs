//! Writing the request model out as the HTTP/2 request an origin gets: `:method`,
//! `:scheme`, `:authority` (the request's host, as `Host` would carry it) and `:path`,
//! the client's fields but those holdfast writes itself or HTTP/2 does not carry, the
//! forwarding headers, and `te: trailers` when the client asked for trailers. No
//! HTTP/1.1 text is made or parsed: the values are those the codec read (slices of an
//! HTTP/1.1 client's head, or the HTTP/2 client's own field values), not copies.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri};

use super::convert::{add_lines, header_lines};
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
/// origin refuses can be sent again (each try takes a [`OriginHead::request`]).
#[derive(Debug, Clone)]
pub struct OriginHead {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
}

impl OriginHead {
    /// The request for one try.
    pub fn request(&self) -> Request<()> {
        let mut request = Request::new(());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = http::Version::HTTP_2;
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// The HTTP/2 head for `req` to an origin reached over TLS or not (`tls`, for
/// `:scheme`). `source` is the head of an HTTP/2 client's stream, whose fields
/// `req.headers` are slices of, in order: its method, `:authority`, `:path`, names and
/// values are passed on as they are (shared, not copied).
pub fn origin_head(
    req: &RequestHead<'_, '_>,
    fwd: &Forwarding<'_>,
    source: Option<&http::request::Parts>,
    tls: bool,
) -> Result<OriginHead, NotH2> {
    // One copy of an HTTP/1.1 head: its values and target are slices of it.
    let shared = Bytes::copy_from_slice(req.raw);
    let (method, uri) = match source {
        Some(parts) if req.method == parts.method.as_str() => {
            (parts.method.clone(), passed_uri(req, parts, fwd, tls)?)
        }
        _ => {
            (Method::from_bytes(req.method.as_bytes()).map_err(bad)?, uri(req, fwd, &shared, tls)?)
        }
    };
    let mut headers = HeaderMap::with_capacity(req.headers.len().saturating_add(6));
    match source {
        Some(parts) => pass_fields(req, &parts.headers, &mut headers),
        None => copy_fields(req, &shared, &mut headers)?,
    }
    forwarding(req, fwd, &mut headers)?;
    // The declared length, as holdfast writes it (the client's line is not passed on
    // as it came): HTTP/2 frames the body itself, but an origin may use it.
    if let Framing::Length(n) = req.framing {
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    if req.te_trailers {
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    Ok(OriginHead { method, uri, headers })
}

/// `:scheme`, `:authority` and `:path`.
fn uri(
    req: &RequestHead<'_, '_>,
    fwd: &Forwarding<'_>,
    shared: &Bytes,
    tls: bool,
) -> Result<Uri, NotH2> {
    let authority = match req.host {
        Some(host) => http::uri::Authority::from_maybe_shared(slice_of(shared, host)),
        None => fwd.backend.to_string().parse(),
    }
    .map_err(bad)?;
    // `*` (OPTIONS) stays `*` (RFC 9113, 8.3.1).
    let path = match req.path.slash {
        true => Bytes::from([&b"/"[..], req.path.rest].concat()),
        false => slice_of(shared, req.path.rest),
    };
    let path = http::uri::PathAndQuery::from_maybe_shared(path).map_err(bad)?;
    uri_of(tls, authority, path)
}

/// `:scheme`, and an HTTP/2 client's own `:authority` and `:path` when the request
/// model kept them (it may have changed the target: an extended CONNECT's).
fn passed_uri(
    req: &RequestHead<'_, '_>,
    parts: &http::request::Parts,
    fwd: &Forwarding<'_>,
    tls: bool,
) -> Result<Uri, NotH2> {
    let (Some(authority), Some(path)) = (parts.uri.authority(), parts.uri.path_and_query()) else {
        return uri(req, fwd, &Bytes::new(), tls);
    };
    if req.host != Some(authority.as_str().as_bytes()) || req.target != path.as_str() {
        return uri(req, fwd, &Bytes::new(), tls);
    }
    uri_of(tls, authority.clone(), path.clone())
}

/// The URI of `authority` and `path` over TLS or not (`tls`).
fn uri_of(
    tls: bool,
    authority: http::uri::Authority,
    path: http::uri::PathAndQuery,
) -> Result<Uri, NotH2> {
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(if tls { http::uri::Scheme::HTTPS } else { http::uri::Scheme::HTTP });
    uri.authority = Some(authority);
    uri.path_and_query = Some(path);
    Uri::from_parts(uri).map_err(bad)
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
fn pass_fields(req: &RequestHead<'_, '_>, source: &HeaderMap, headers: &mut HeaderMap) {
    for (i, (name, value)) in source.iter().enumerate() {
        if !req.dropped.contains(i) {
            headers.append(name.clone(), value.clone());
        }
    }
}

/// An HTTP/1.1 client's fields, as slices of its head, but those not passed on and
/// those HTTP/2 does not carry.
fn copy_fields(
    req: &RequestHead<'_, '_>,
    shared: &Bytes,
    headers: &mut HeaderMap,
) -> Result<(), NotH2> {
    for (i, h) in req.headers.iter().enumerate() {
        if req.dropped.contains(i) || is_connection_specific(h.name) {
            continue;
        }
        let value = HeaderValue::from_maybe_shared(slice_of(shared, h.value)).map_err(bad)?;
        headers.append(HeaderName::from_bytes(h.name.as_bytes()).map_err(bad)?, value);
    }
    Ok(())
}

/// The names of the fields holdfast writes itself, made once, so that they cost no
/// allocation or parsing per request.
static OWN_NAMES: [HeaderName; 5] = [
    HeaderName::from_static("x-forwarded-for"),
    HeaderName::from_static("x-forwarded-proto"),
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-real-ip"),
    HeaderName::from_static("forwarded"),
];

/// The name of a forwarding header as `http1::encode` writes it (lowercase).
fn own_name(name: &[u8]) -> Option<&'static HeaderName> {
    OWN_NAMES.iter().find(|own| own.as_str().as_bytes() == name)
}

/// The forwarding headers, written as `http1::encode` writes them for any origin (one
/// set of rules) and taken as fields: each value a slice of that one text.
fn forwarding(
    req: &RequestHead<'_, '_>,
    fwd: &Forwarding<'_>,
    headers: &mut HeaderMap,
) -> Result<(), NotH2> {
    let mut text = Vec::with_capacity(192);
    forwarding_headers(req, fwd, &mut text);
    let text = Bytes::from(text);
    for (name, value) in header_lines(&text) {
        let name = own_name(name).ok_or_else(|| bad("a forwarding header of no known name"))?;
        let value = HeaderValue::from_maybe_shared(slice_of(&text, value)).map_err(bad)?;
        headers.append(name.clone(), value);
    }
    Ok(())
}

/// The fields of an origin's response as an HTTP/2 client gets them, from its head in
/// the response model (an HTTP/1.1 origin's; an HTTP/2 origin's head goes on as it
/// came): those holdfast passes on (not the hop-by-hop ones), `content-length` when the
/// body has one, and `extra` header lines (`Name: value\r\n`, e.g. HSTS). `Trailer`,
/// which announces trailer fields (RFC 9110, 6.6.2), stays only on a chunked body: no
/// other HTTP/1.1 body can have trailers.
pub fn client_response(resp: &ResponseHead<'_, '_>, extra: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(resp.headers.len().saturating_add(2));
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
        let value = HeaderValue::from_maybe_shared(slice_of(&shared, h.value));
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(h.name.as_bytes()), value) {
            map.append(name, value);
        }
    }
    if let Some(n) = resp.content_length {
        map.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    add_lines(&mut map, extra);
    map
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

    #[test]
    fn an_http1_head_becomes_an_http2_one_without_connection_fields() {
        let head = head_of(
            "GET /x?y=1 HTTP/1.1\r\nHost: app:8080\r\nConnection: close, x-hop\r\nX-Hop: 1\r\n\
             Keep-Alive: 5\r\nCookie: a=1\r\nX-Forwarded-For: 6.6.6.6\r\nAccept: */*\r\n\r\n",
            false,
        )
        .unwrap();
        assert_eq!(head.uri.to_string(), "http://app:8080/x?y=1");
        let names: Vec<&str> = head.headers.keys().map(|n| n.as_str()).collect();
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
        assert_eq!(head.headers.get("x-forwarded-for").unwrap(), "10.0.0.1");
        assert_eq!(
            head.headers.get("forwarded").unwrap(),
            "for=10.0.0.1;host=\"app:8080\";proto=http"
        );
        assert_eq!(head.request().version(), http::Version::HTTP_2);
    }

    #[test]
    fn a_declared_length_goes_on_as_holdfast_writes_it() {
        let head =
            head_of("POST /up HTTP/1.1\r\nHost: app\r\nContent-Length:  5\r\n\r\n", false).unwrap();
        assert_eq!(head.headers.get_all("content-length").iter().count(), 1);
        assert_eq!(head.headers.get("content-length").unwrap(), "5");
        let chunked =
            head_of("POST /up HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\n", false)
                .unwrap();
        assert!(chunked.headers.get("content-length").is_none());
        assert!(chunked.headers.get("transfer-encoding").is_none());
    }

    #[test]
    fn options_star_keeps_its_asterisk_and_an_absolute_target_its_path() {
        let head = head_of("OPTIONS * HTTP/1.1\r\nHost: app\r\n\r\n", true).unwrap();
        assert_eq!(head.uri.path(), "*");
        assert_eq!(head.uri.scheme_str(), Some("https"));
        let head = head_of("GET http://other?q HTTP/1.1\r\nHost: app\r\n\r\n", false).unwrap();
        assert_eq!(head.uri.to_string(), "http://other/?q");
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
