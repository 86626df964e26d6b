//! Reading a client's HTTP/2 request head into the request model: the stream's
//! pseudo-header fields and fields become a [`ClientHead`], then a [`RequestHead`] whose
//! fields are slices of the engine's own, checked by the same rules as an HTTP/1.1 head
//! (`http1::request::check`). No HTTP/1.1 text is made.
//!
//! The engine (`holdfast-h2`) has already refused what HTTP/2 itself forbids (RFC 9113,
//! 8.2 and 8.3): connection-specific fields, `te` other than `trailers`, uppercase names,
//! missing or repeated pseudo-header fields, and a `content-length` the DATA frames
//! contradict.

use bytes::Bytes;
use holdfast_h2::conn::Head;
use http::Method;

use super::fields::Fields;
use crate::http1::request::{self, HeadLimits, Line, Refusal};
use crate::message::{Framing, RequestHead, Version};

/// A client's HTTP/2 request head as the engine decoded it: the method and the target
/// (`:scheme` too, not kept) checked as the `http` crate checks a URI's parts, the fields as they came (shared
/// with the engine's buffer).
#[derive(Debug, Clone)]
pub struct ClientHead {
    pub method: Method,
    pub authority: Option<Bytes>,
    pub path: Option<Bytes>,
    pub fields: Fields,
}

impl ClientHead {
    /// A stream's head: its method (GET when it names none) and target checked.
    pub fn of(head: Head) -> Result<ClientHead, Refusal> {
        let Head { pseudo, fields, .. } = head;
        let method = pseudo.method.as_deref().unwrap_or(b"GET");
        let method = Method::from_bytes(method).map_err(|_| Refusal::Malformed)?;
        let path = check_target(pseudo.scheme.as_deref(), pseudo.authority.as_ref(), pseudo.path)?;
        Ok(ClientHead {
            method,
            authority: pseudo.authority,
            path,
            fields: Fields::from_engine(fields),
        })
    }

    /// A test's head, from an `http::Request`.
    #[cfg(test)]
    pub fn of_request(req: &http::Request<()>) -> ClientHead {
        let text = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        ClientHead {
            method: req.method().clone(),
            authority: req.uri().authority().map(|a| text(a.as_str())),
            path: req.uri().path_and_query().map(|p| text(p.as_str())),
            fields: Fields::of_map(req.headers()),
        }
    }

    /// The target as the request model reads it.
    fn target(&self) -> &str {
        match &self.path {
            Some(path) => std::str::from_utf8(path).unwrap_or("/"),
            None if self.method == Method::OPTIONS => "*",
            None => "/",
        }
    }
}

/// A stream's `:scheme`, `:authority` and `:path`, checked as the `http` crate checks a
/// URI made of them: each valid, a scheme with both of the others, no authority and
/// path without a scheme. The path as the model reads it: as `http` gives it back
/// (without a fragment, `/` when empty), shared when it came so.
fn check_target(
    scheme: Option<&[u8]>,
    authority: Option<&Bytes>,
    path: Option<Bytes>,
) -> Result<Option<Bytes>, Refusal> {
    let invalid = |_| Refusal::InvalidTarget;
    if let Some(scheme) = scheme {
        http::uri::Scheme::try_from(scheme).map_err(invalid)?;
        if authority.is_none() || path.is_none() {
            return Err(Refusal::InvalidTarget);
        }
    } else if authority.is_some() && path.is_some() {
        return Err(Refusal::InvalidTarget);
    }
    if let Some(authority) = authority {
        http::uri::Authority::from_maybe_shared(authority.clone()).map_err(invalid)?;
    }
    let Some(path) = path else { return Ok(None) };
    let checked = http::uri::PathAndQuery::from_maybe_shared(path.clone()).map_err(invalid)?;
    match checked.as_str().as_bytes() == &path[..] {
        true => Ok(Some(path)),
        false => Ok(Some(Bytes::copy_from_slice(checked.as_str().as_bytes()))),
    }
}

/// The request head of a client's stream (`client`, whose fields, by
/// [`Fields::headers`], are `fields`), with `max_headers` fields at most;
/// `body_ends`: the HEADERS frame ended the stream.
pub fn decode<'h, 'b>(
    client: &'b ClientHead,
    fields: &'h [httparse::Header<'b>],
    body_ends: bool,
    max_headers: usize,
    limits: &HeadLimits,
) -> Result<RequestHead<'h, 'b>, Refusal> {
    if fields.len() > max_headers {
        return Err(Refusal::TooManyHeaders);
    }
    let target = client.target();
    let line = Line {
        method: client.method.as_str(),
        target,
        version: Version::Http2,
        authority: client.authority.as_deref(),
    };
    let size = fields.iter().fold(target.len(), |n, f| {
        n.saturating_add(f.name.len()).saturating_add(f.value.len()).saturating_add(4)
    });
    let mut head = request::check(line, fields, b"", size, limits)?;
    head.upgrade = None;
    head.te_trailers =
        fields.iter().any(|f| f.name == "te" && f.value.eq_ignore_ascii_case(b"trailers"));
    if head.framing == Framing::Empty && !body_ends {
        head.framing = Framing::Stream;
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits { max_line_bytes: 8192, max_head_bytes: 16384 };

    fn parts(req: http::Request<()>) -> ClientHead {
        ClientHead::of_request(&req)
    }

    #[test]
    fn a_stream_becomes_a_request_head_with_its_authority_as_host() {
        let p = parts(
            http::Request::builder()
                .method("POST")
                .uri("https://example.com/a?b=1")
                .header("cookie", "a=1")
                .header("cookie", "b=2")
                .header("te", "trailers")
                .header("content-type", "application/grpc")
                .body(())
                .unwrap(),
        );
        let f = p.fields.headers();
        let head = decode(&p, &f, false, 100, &LIMITS).unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.target, "/a?b=1");
        assert_eq!(head.host, Some(&b"example.com"[..]));
        assert_eq!(head.version, Version::Http2);
        assert_eq!(head.framing, Framing::Stream);
        assert!(head.te_trailers);
        assert_eq!(head.headers.len(), 4);
        // `te` is hop-by-hop: not passed on as it is.
        assert!(head.dropped.contains(2));
        assert!(!head.dropped.contains(0));
    }

    #[test]
    fn a_declared_length_frames_the_body_and_an_ended_stream_has_none() {
        let p = parts(
            http::Request::builder()
                .method("PUT")
                .uri("http://app/x")
                .header("content-length", "5")
                .body(())
                .unwrap(),
        );
        let f = p.fields.headers();
        assert_eq!(decode(&p, &f, false, 100, &LIMITS).unwrap().framing, Framing::Length(5));
        let p = parts(http::Request::builder().uri("http://app/x").body(()).unwrap());
        let f = p.fields.headers();
        assert_eq!(decode(&p, &f, true, 100, &LIMITS).unwrap().framing, Framing::Empty);
    }

    #[test]
    fn the_checks_of_any_head_apply() {
        let refused = |req: http::Request<()>, max: usize| {
            let p = parts(req);
            let f = p.fields.headers();
            decode(&p, &f, true, max, &LIMITS).err()
        };
        let no_host = http::Request::builder().uri("/x").body(()).unwrap();
        assert!(matches!(refused(no_host, 100), Some(Refusal::Host(_))));
        let two_lengths = http::Request::builder()
            .uri("http://app/x")
            .header("content-length", "1")
            .header("content-length", "2")
            .body(())
            .unwrap();
        assert!(matches!(refused(two_lengths, 100), Some(Refusal::Framing(_))));
        let expect = http::Request::builder()
            .uri("http://app/x")
            .header("expect", "something")
            .body(())
            .unwrap();
        assert_eq!(refused(expect, 100), Some(Refusal::Expectation));
        let many = http::Request::builder()
            .uri("http://app/x")
            .header("a", "1")
            .header("b", "2")
            .body(())
            .unwrap();
        assert_eq!(refused(many, 1), Some(Refusal::TooManyHeaders));
        // A target the http crate takes is checked again, as an HTTP/1.1 one is.
        let quote = http::Request::builder().uri("http://app/a\"b").body(()).unwrap();
        assert_eq!(refused(quote, 100), Some(Refusal::InvalidTarget));
    }
}
