//! Between HTTP/2 and HTTP/1.1 messages: trailers from either protocol as the other
//! carries them ([`trailers_from_h1`], [`h1_chunked_end`], [`passable_trailers`]), and
//! the fields of holdfast's own responses.
//!
//! HTTP/2 forbids the connection-specific fields (RFC 9113, 8.2.2): the engine refuses
//! them from peers, and they are left out of what holdfast sends.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::fields::Fields;
use crate::http1::chunked::is_forbidden_trailer;
use crate::http1::encode::LAST_CHUNK;
use crate::message::is_connection_specific;

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
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
    for (name, value) in header_lines(lines) {
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

/// The `Name: value` lines of `text` (each ending in LF or CRLF) as name and value, the
/// value without the whitespace around it (RFC 9112, 5); lines without a colon are
/// skipped. Both are slices of `text`.
pub fn header_lines(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    text.split(|b| *b == b'\n').filter_map(|l| {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        let colon = l.iter().position(|b| *b == b':')?;
        let (name, value) = l.split_at_checked(colon)?;
        Some((name, value.get(1..).unwrap_or_default().trim_ascii()))
    })
}

/// Writes HTTP/2 trailers as the trailer section of a chunked body for an HTTP/1.1
/// peer (RFC 9112, 7.1.2): one `name: value\r\n` line for each field that may pass
/// ([`may_pass_trailer`]). The engine has checked the values (no CR, LF or NUL).
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
/// pass ([`may_pass_trailer`]). The engine keeps pseudo-headers out of trailers both
/// ways (RFC 9113, 8.1).
pub fn passable_trailers(mut trailers: HeaderMap) -> HeaderMap {
    let refused: Vec<HeaderName> =
        trailers.keys().filter(|name| !may_pass_trailer(name.as_str())).cloned().collect();
    for name in refused {
        trailers.remove(name);
    }
    trailers
}

/// Adds header lines (`Name: value\r\n`) to `fields`, names lowercased.
pub fn add_lines(fields: &mut Fields, lines: &[u8]) {
    for (name, value) in header_lines(lines) {
        if let (Ok(name), Ok(_)) =
            (HeaderName::from_bytes(name.trim_ascii()), HeaderValue::from_bytes(value))
        {
            let name = Bytes::copy_from_slice(name.as_str().as_bytes());
            fields.push(name, Bytes::copy_from_slice(value));
        }
    }
}

/// The fields of a response holdfast makes itself (as `encode::local_response` writes
/// them for HTTP/1.1): `extra` header lines, then plain text of `len` bytes.
pub fn local_headers(extra: &[u8], len: usize) -> Fields {
    let mut fields = Fields::default();
    add_lines(&mut fields, extra);
    fields.insert("content-type", Bytes::from_static(b"text/plain; charset=utf-8"));
    fields.insert("content-length", Bytes::from(len.to_string()));
    fields
}

/// The body of a local answer as one frame's worth.
pub fn text_body(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

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
