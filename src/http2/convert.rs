//! Between HTTP/2 messages and HTTP/1.1 heads: a client's stream as the HTTP/1.1 head
//! `http1::request` parses ([`request_head`]), the head holdfast wrote for an origin as
//! an HTTP/2 request ([`origin_request`]), an HTTP/1.1 origin's response head as
//! an HTTP/2 one ([`response_from_h1`]), and trailers from either protocol as the
//! other carries them ([`trailers_from_h1`], [`h1_chunked_end`],
//! [`passable_trailers`]).
//!
//! HTTP/2 forbids the connection-specific fields (RFC 9113, 8.2.2): the `h2` crate
//! refuses them from peers, and they are left out of what holdfast sends.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri};

use crate::http1::chunked::is_forbidden_trailer;
use crate::http1::encode::LAST_CHUNK;
use crate::http1::response::Response;
use crate::http1::Framing;

/// Fields HTTP/2 does not carry (RFC 9113, 8.2.2), besides `TE` other than `trailers`.
const CONNECTION_SPECIFIC: [&str; 6] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"];

/// Whether a field is one HTTP/2 does not carry.
pub fn is_connection_specific(name: &str) -> bool {
    CONNECTION_SPECIFIC.iter().any(|c| name.eq_ignore_ascii_case(c))
}

/// What a client's HTTP/2 request head said besides its fields, for the exchange.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamFacts {
    /// The client sent `te: trailers` (gRPC does): passed on to HTTP/2 origins.
    pub te_trailers: bool,
}

/// Writes the HTTP/1.1 head of a client's HTTP/2 request into `out`: request line,
/// `Host` from `:authority` (or the `host` field), the fields (cookies joined into one,
/// RFC 9113, 8.2.3), and `transfer-encoding: chunked` for a body of no declared length
/// (`body_ends` false). The head is parsed like any HTTP/1.1 head after this.
pub fn request_head(
    parts: &http::request::Parts,
    body_ends: bool,
    out: &mut Vec<u8>,
) -> StreamFacts {
    out.clear();
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let target = match parts.uri.path_and_query() {
        Some(pq) => pq.as_str(),
        None if parts.method == Method::OPTIONS => "*",
        None => "/",
    };
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(authority) = parts.uri.authority() {
        line(out, b"host", authority.as_str().as_bytes());
    }
    let mut facts = StreamFacts::default();
    let mut cookies: Vec<&[u8]> = Vec::new();
    let mut has_length = false;
    for (name, value) in &parts.headers {
        match name.as_str() {
            // `:authority` wins over `host` (RFC 9113, 8.3.1).
            "host" if parts.uri.authority().is_some() => {}
            "te" => facts.te_trailers |= value.as_bytes().eq_ignore_ascii_case(b"trailers"),
            "cookie" => cookies.push(value.as_bytes()),
            n => {
                has_length |= n == "content-length";
                line(out, name.as_str().as_bytes(), value.as_bytes());
            }
        }
    }
    if !cookies.is_empty() {
        line(out, b"cookie", &cookies.join(&b"; "[..]));
    }
    if !body_ends && !has_length {
        line(out, b"transfer-encoding", b"chunked");
    }
    out.extend_from_slice(b"\r\n");
    facts
}

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Why a head could not become an HTTP/2 request.
#[derive(Debug, thiserror::Error)]
#[error("the request cannot be sent as HTTP/2: {0}")]
pub struct NotH2(String);

/// The HTTP/2 request for the HTTP/1.1 head holdfast wrote for an origin (`head`,
/// from `encode::upstream_request`): `:authority` from `Host`, `:scheme` `https` or
/// `http`, the fields but the connection-specific ones and the framing (HTTP/2 frames
/// the body itself), and `te: trailers` when the client asked for trailers.
pub fn origin_request(head: &[u8], tls: bool, te_trailers: bool) -> Result<Request<()>, NotH2> {
    // One copy of the head: every value and the path are slices of it, not copies.
    let shared = Bytes::copy_from_slice(head);
    // Most heads fit the slots on the stack; a longer one gets a slot per line.
    let mut few = [httparse::EMPTY_HEADER; FEW_FIELDS];
    match parse_into(&shared, &mut few, tls, te_trailers) {
        Err(Parse::TooMany) => {
            let lines = head.iter().filter(|b| **b == b'\n').count();
            let mut many = vec![httparse::EMPTY_HEADER; lines];
            parse_into(&shared, &mut many, tls, te_trailers)
        }
        done => done,
    }
    .map_err(|e| match e {
        Parse::TooMany => NotH2("too many fields".into()),
        Parse::Bad(e) => e,
    })
}

/// Fields a head can have before parsing it needs slots off the stack.
const FEW_FIELDS: usize = 32;

/// Why parsing a head into given slots stopped.
enum Parse {
    TooMany,
    Bad(NotH2),
}

fn parse_into<'a>(
    shared: &'a Bytes,
    slots: &mut [httparse::Header<'a>],
    tls: bool,
    te_trailers: bool,
) -> Result<Request<()>, Parse> {
    let mut req = httparse::Request::new(slots);
    match req.parse(shared) {
        Ok(httparse::Status::Complete(_)) => {
            from_parsed(&req, shared, tls, te_trailers).map_err(Parse::Bad)
        }
        Ok(httparse::Status::Partial) => Err(Parse::Bad(NotH2("incomplete head".into()))),
        Err(httparse::Error::TooManyHeaders) => Err(Parse::TooMany),
        Err(e) => Err(Parse::Bad(NotH2(e.to_string()))),
    }
}

/// The names of the fields holdfast writes itself, made once, so that they cost no
/// allocation or parsing per request.
static OWN_NAMES: [HeaderName; 4] = [
    HeaderName::from_static("x-forwarded-for"),
    HeaderName::from_static("x-forwarded-proto"),
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-real-ip"),
];

fn header_name(name: &str) -> Result<HeaderName, NotH2> {
    match OWN_NAMES.iter().find(|own| name.eq_ignore_ascii_case(own.as_str())) {
        Some(own) => Ok(own.clone()),
        None => HeaderName::from_bytes(name.as_bytes()).map_err(|e| NotH2(e.to_string())),
    }
}

fn from_parsed(
    req: &httparse::Request<'_, '_>,
    shared: &Bytes,
    tls: bool,
    te_trailers: bool,
) -> Result<Request<()>, NotH2> {
    let bad = |what: &str| NotH2(what.to_string());
    let method = req.method.ok_or_else(|| bad("no method"))?;
    let path = req.path.ok_or_else(|| bad("no target"))?;
    let host = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| h.value)
        .ok_or_else(|| bad("no host"))?;
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(if tls { http::uri::Scheme::HTTPS } else { http::uri::Scheme::HTTP });
    uri.authority = Some(
        http::uri::Authority::from_maybe_shared(shared.slice_ref(host))
            .map_err(|e| bad(&e.to_string()))?,
    );
    // `*` (OPTIONS) stays `*` (RFC 9113, 8.3.1).
    uri.path_and_query = Some(
        http::uri::PathAndQuery::from_maybe_shared(shared.slice_ref(path.as_bytes()))
            .map_err(|e| bad(&e.to_string()))?,
    );
    let mut request = Request::new(());
    *request.method_mut() =
        Method::from_bytes(method.as_bytes()).map_err(|e| bad(&e.to_string()))?;
    *request.uri_mut() = Uri::from_parts(uri).map_err(|e| bad(&e.to_string()))?;
    *request.version_mut() = http::Version::HTTP_2;
    let headers = request.headers_mut();
    headers.reserve(req.headers.len().saturating_add(1));
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") || is_connection_specific(h.name) {
            continue;
        }
        let value = HeaderValue::from_maybe_shared(shared.slice_ref(h.value))
            .map_err(|e| bad(&e.to_string()))?;
        headers.append(header_name(h.name)?, value);
    }
    if te_trailers {
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    Ok(request)
}

/// The fields of an HTTP/1.1 origin's response as an HTTP/2 client gets them: those
/// holdfast passes on (not the hop-by-hop ones), `content-length` when the body has
/// one, and `extra` header lines (`Name: value\r\n`, e.g. HSTS). `Trailer`, which
/// announces trailer fields (RFC 9110, 6.6.2), stays only on a chunked body: no other
/// HTTP/1.1 body can have trailers.
pub fn response_from_h1(resp: &Response<'_, '_>, extra: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(resp.headers.len().saturating_add(2));
    // One copy of the head: the values are slices of it.
    let shared = Bytes::copy_from_slice(resp.raw);
    let chunked = resp.framing == Framing::Chunked;
    for (i, h) in resp.headers.iter().enumerate() {
        if resp.dropped.contains(i)
            || (!chunked && resp.trailer_lines.contains(i))
            || is_connection_specific(h.name)
            || h.name.eq_ignore_ascii_case("content-length")
        {
            continue;
        }
        let value = match within(resp.raw, h.value) {
            Some(at) => HeaderValue::from_maybe_shared(shared.slice(at)),
            None => HeaderValue::from_bytes(h.value),
        };
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

/// Whether a trailer field named `name` may be passed on. RFC 9110, 6.5.1: fields that
/// frame the message, route it, authenticate, modify the request, or say how to
/// process the content (`Content-Length`, `Transfer-Encoding`, `Host`,
/// `Authorization`, `Content-Encoding`, `Content-Type`, `Range`, `Trailer` itself and
/// the like, [`is_forbidden_trailer`]) may not be trailers; nor may the
/// connection-specific fields (RFC 9113, 8.2.2). holdfast writes framing itself, so
/// these are dropped on the way through, never forwarded.
pub fn may_pass_trailer(name: &str) -> bool {
    !is_forbidden_trailer(name.as_bytes()) && !is_connection_specific(name)
}

/// The trailer lines of an HTTP/1.1 chunked body (`Name: value\r\n` each, RFC 9112,
/// 7.1.2, as `http1::chunked` keeps them) as HTTP/2 trailers, which go out in a
/// HEADERS frame that ends the stream (RFC 9113, 8.1). Names are lowercased (RFC 9113,
/// 8.2.1); values lose the whitespace around them (RFC 9112, 5); fields that may not
/// pass ([`may_pass_trailer`]) or are not valid HTTP/2 fields are dropped. A
/// pseudo-header cannot come out (RFC 9113, 8.1 forbids them in trailers): a name
/// that starts with `:` is not a valid field name.
pub fn trailers_from_h1(lines: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for l in lines.split(|b| *b == b'\n') {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        let Some(colon) = l.iter().position(|b| *b == b':') else { continue };
        let Some((name, value)) = l.split_at_checked(colon) else { continue };
        let value = value.get(1..).unwrap_or_default().trim_ascii();
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            continue;
        };
        // The section is bounded in bytes (the sender's head limit), so the map stays
        // far below its capacity; past it, the rest is dropped rather than panic.
        if may_pass_trailer(name.as_str()) && map.try_append(name, value).is_err() {
            break;
        }
    }
    map
}

/// Writes HTTP/2 trailers as the trailer section of a chunked body for an HTTP/1.1
/// peer (RFC 9112, 7.1.2): one `name: value\r\n` line for each field that may pass
/// ([`may_pass_trailer`]). The `h2` crate has checked the values (no CR, LF or NUL).
pub fn write_h1_trailers(trailers: &HeaderMap, out: &mut Vec<u8>) {
    for (name, value) in trailers {
        if may_pass_trailer(name.as_str()) {
            line(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
}

/// The end of a chunked body for an HTTP/1.1 peer (RFC 9112, 7.1): the last chunk, the
/// HTTP/2 `trailers` that may pass as its trailer section ([`write_h1_trailers`]), and
/// the empty line.
pub fn h1_chunked_end(trailers: Option<&HeaderMap>) -> Vec<u8> {
    let mut end = LAST_CHUNK.to_vec();
    if let Some(trailers) = trailers {
        write_h1_trailers(trailers, &mut end);
    }
    end.extend_from_slice(b"\r\n");
    end
}

/// HTTP/2 trailers as they go on to an HTTP/2 peer: without the fields that may not
/// pass ([`may_pass_trailer`]). The `h2` crate keeps pseudo-headers out of trailers
/// both ways (RFC 9113, 8.1).
pub fn passable_trailers(mut trailers: HeaderMap) -> HeaderMap {
    let refused: Vec<HeaderName> =
        trailers.keys().filter(|name| !may_pass_trailer(name.as_str())).cloned().collect();
    for name in refused {
        trailers.remove(name);
    }
    trailers
}

/// Where `part`, a slice of `whole`, lies in it.
fn within(whole: &[u8], part: &[u8]) -> Option<std::ops::Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= whole.len()).then_some(start..end)
}

/// Adds header lines (`Name: value\r\n`) to `map`.
pub fn add_lines(map: &mut HeaderMap, lines: &[u8]) {
    for l in lines.split(|b| *b == b'\n') {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        let Some(colon) = l.iter().position(|b| *b == b':') else { continue };
        let (name, value) = l.split_at(colon);
        let value = value.get(1..).unwrap_or_default().trim_ascii();
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name.trim_ascii()), HeaderValue::from_bytes(value))
        {
            map.append(name, value);
        }
    }
}

/// The fields of a response holdfast makes itself (as `encode::local_response` writes
/// them for HTTP/1.1): `extra` header lines, then plain text of `len` bytes.
pub fn local_headers(extra: &[u8], len: usize) -> HeaderMap {
    let mut headers = HeaderMap::new();
    add_lines(&mut headers, extra);
    headers
        .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
    headers
}

/// The body of a local answer as one frame's worth.
pub fn text_body(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_becomes_an_http1_head_with_host_and_joined_cookies() {
        let req = Request::builder()
            .method("POST")
            .uri("https://example.com/a?b=1")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("te", "trailers")
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        let facts = request_head(&parts, false, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(facts.te_trailers);
        assert!(text.starts_with("POST /a?b=1 HTTP/1.1\r\nhost: example.com\r\n"), "{text}");
        assert!(text.contains("cookie: a=1; b=2\r\n"), "{text}");
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert!(!text.contains("te:"), "{text}");
        assert!(text.ends_with("\r\n\r\n"));
    }

    #[test]
    fn a_head_with_more_fields_than_the_stack_slots_keeps_them_all() {
        let mut head =
            String::from("GET /many HTTP/1.1\r\nHost: app\r\nX-Forwarded-For: 10.0.0.1\r\n");
        for i in 0..FEW_FIELDS * 2 {
            head.push_str(&format!("x-field-{i}: {i}\r\n"));
        }
        head.push_str("\r\n");
        let req = origin_request(head.as_bytes(), false, false).unwrap();
        assert_eq!(req.headers().len(), FEW_FIELDS * 2 + 1);
        assert_eq!(req.headers()["x-field-63"], "63");
        assert_eq!(req.headers()["x-forwarded-for"], "10.0.0.1");
        assert_eq!(req.uri(), "http://app/many");
    }

    #[test]
    fn options_star_keeps_its_asterisk() {
        let head = b"OPTIONS * HTTP/1.1\r\nhost: app\r\n\r\n";
        let req = origin_request(head, true, false).unwrap();
        assert_eq!(req.uri().path(), "*");
        assert_eq!(req.uri().scheme_str(), Some("https"));
    }

    #[test]
    fn an_origin_head_becomes_an_http2_request_without_connection_fields() {
        let head = b"GET /x HTTP/1.1\r\nhost: app:8080\r\nconnection: close\r\ntransfer-encoding: chunked\r\nx-forwarded-for: 1.2.3.4\r\n\r\n";
        let req = origin_request(head, false, true).unwrap();
        assert_eq!(req.uri().to_string(), "http://app:8080/x");
        assert!(req.headers().get("connection").is_none());
        assert!(req.headers().get("transfer-encoding").is_none());
        assert!(req.headers().get("host").is_none());
        assert_eq!(req.headers()["te"], "trailers");
        assert_eq!(req.headers()["x-forwarded-for"], "1.2.3.4");
    }

    #[test]
    fn h1_trailer_lines_become_lowercase_http2_trailers_without_forbidden_fields() {
        let lines = b"Grpc-Status: 0\r\ngrpc-message:  not%20found \r\nX-Sum:1\r\n\
                      Content-Length: 5\r\nConnection: close\r\nTE: trailers\r\n\
                      Trailer: x\r\nContent-Type: text/html\r\n:status: 200\r\n\
                      bad name: 1\r\nX-Sum: 2\r\n";
        let map = trailers_from_h1(lines);
        let fields: Vec<(&str, &[u8])> =
            map.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
        assert_eq!(
            fields,
            [
                ("grpc-status", &b"0"[..]),
                ("grpc-message", b"not%20found"),
                ("x-sum", b"1"),
                ("x-sum", b"2"),
            ]
        );
    }

    #[test]
    fn http2_trailers_lose_the_fields_that_may_not_be_trailers() {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("5"));
        t.insert("grpc-message", HeaderValue::from_static("gone"));
        t.insert("content-length", HeaderValue::from_static("0"));
        t.insert("host", HeaderValue::from_static("evil"));
        t.insert("authorization", HeaderValue::from_static("Bearer x"));
        t.insert("te", HeaderValue::from_static("trailers"));
        t.insert("trailer", HeaderValue::from_static("grpc-status"));
        let mut lines = Vec::new();
        write_h1_trailers(&t, &mut lines);
        assert_eq!(lines, b"grpc-status: 5\r\ngrpc-message: gone\r\n");
        let passed = passable_trailers(t);
        let names: Vec<&str> = passed.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["grpc-status", "grpc-message"]);
    }

    #[test]
    fn the_preface_is_told_from_three_bytes() {
        assert!(super::super::starts_preface(b"PRI * HTTP/2.0\r\n"));
        assert!(super::super::starts_preface(b"PRI"));
        assert!(!super::super::starts_preface(b"POST / HTTP/1.1\r\n"));
        assert!(!super::super::starts_preface(b"PR"));
    }
}
