//! Reading a client's request head: the parse, the checks that refuse an ambiguous or
//! oversized request before any of it is forwarded, and what the rest of the path needs
//! to know about it (framing, keep-alive, upgrade, `Expect`).
//!
//! Request smuggling defence lives here. A request with both `Content-Length` and
//! `Transfer-Encoding`, with conflicting or invalid `Content-Length`, or with a
//! `Transfer-Encoding` whose last coding is not `chunked` could be framed differently
//! by the origin than by holdfast, so it is refused with 400 and the connection closes.

use std::mem::MaybeUninit;

use super::{
    ends_in_chunked, parse_content_length, ConnectionHeader, Framing, Lines, Name, Version,
};

/// Header lines the parser has room for; `limits.max_request_headers` may not exceed it.
pub const MAX_HEADERS: usize = 1024;

/// Why a request is refused before anything of it is forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Ambiguous or invalid body framing (400).
    Framing(FramingViolation),
    /// Not HTTP/1.x syntax (400).
    Malformed,
    /// The head is longer than `max_request_header_bytes` (431).
    HeadTooLarge,
    /// More header lines than `max_request_headers` (431).
    TooManyHeaders,
    /// `CONNECT`: holdfast is a reverse proxy, not a tunnel (405).
    Connect,
}

impl Refusal {
    /// The status the client gets.
    pub fn status(self) -> u16 {
        match self {
            Refusal::Framing(_) | Refusal::Malformed => 400,
            Refusal::HeadTooLarge | Refusal::TooManyHeaders => 431,
            Refusal::Connect => 405,
        }
    }

    /// Text for the response body and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Framing(v) => v.as_str(),
            Refusal::Malformed => "malformed request head",
            Refusal::HeadTooLarge => "request head too large",
            Refusal::TooManyHeaders => "too many request headers",
            Refusal::Connect => "CONNECT is not supported",
        }
    }
}

/// Why a request's body framing was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingViolation {
    ContentLengthWithTransferEncoding,
    ConflictingContentLength,
    InvalidContentLength,
    TransferEncodingNotChunked,
    InvalidChunk,
}

impl FramingViolation {
    /// Text for the 400 body and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            FramingViolation::ContentLengthWithTransferEncoding => {
                "request has both Content-Length and Transfer-Encoding"
            }
            FramingViolation::ConflictingContentLength => {
                "request has conflicting Content-Length headers"
            }
            FramingViolation::InvalidContentLength => "request has an invalid Content-Length",
            FramingViolation::TransferEncodingNotChunked => {
                "request Transfer-Encoding does not end in chunked"
            }
            FramingViolation::InvalidChunk => "request has an invalid chunked body",
        }
    }
}

/// A parsed request head, borrowing from the connection's read buffer.
pub struct Request<'h, 'b> {
    pub method: &'b str,
    /// The request target as sent (origin-form, absolute-form or `*`).
    pub target: &'b str,
    pub version: Version,
    pub headers: &'h [httparse::Header<'b>],
    /// The head as received, including the empty line that ends it.
    pub raw: &'b [u8],
    /// Bytes of the head, including the empty line that ends it.
    pub head_len: usize,
    /// Header lines not passed on as they are: hop-by-hop, those `Connection` names,
    /// `Expect`, and the `X-Forwarded-*` lines holdfast writes itself.
    pub dropped: Lines,
    pub framing: Framing,
    pub connection: ConnectionHeader<'b>,
    /// The `Upgrade` value of an HTTP/1.1 request that asks to switch protocols
    /// (`Upgrade` plus `Connection: upgrade`).
    pub upgrade: Option<&'b [u8]>,
    /// `Expect: 100-continue`: the client waits for an interim response before its body.
    pub expect_continue: bool,
    pub host: Option<&'b [u8]>,
}

impl Request<'_, '_> {
    /// Whether the client's connection may carry another request after this one:
    /// HTTP/1.1 unless it says `close`, HTTP/1.0 only if it says `keep-alive`.
    pub fn keep_alive(&self) -> bool {
        match self.version {
            Version::Http11 => !self.connection.close,
            Version::Http10 => self.connection.keep_alive && !self.connection.close,
        }
    }

    /// A header's value by exact name match, case-insensitively (first line only).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value)
    }
}

/// Parses the request head at the start of `buf`.
///
/// `Ok(None)`: the head is not complete yet (read more). `max_headers` header lines
/// fit in `storage`; a head longer than `max_head_bytes` is refused whether complete
/// or not.
pub fn parse<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut [MaybeUninit<httparse::Header<'b>>],
    max_head_bytes: usize,
) -> Result<Option<Request<'h, 'b>>, Refusal> {
    let mut req = httparse::Request::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, storage);
    let head_len = match parsed {
        Ok(httparse::Status::Complete(len)) if len <= max_head_bytes => len,
        Ok(httparse::Status::Complete(_)) => return Err(Refusal::HeadTooLarge),
        Ok(httparse::Status::Partial) if buf.len() <= max_head_bytes => return Ok(None),
        Ok(httparse::Status::Partial) => return Err(Refusal::HeadTooLarge),
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooManyHeaders),
        Err(_) => return Err(Refusal::Malformed),
    };
    let method = req.method.ok_or(Refusal::Malformed)?;
    if method.eq_ignore_ascii_case("CONNECT") {
        return Err(Refusal::Connect);
    }
    let target = req.path.ok_or(Refusal::Malformed)?;
    let version = Version::from_minor(req.version.ok_or(Refusal::Malformed)?);
    let headers: &'h [httparse::Header<'b>] = req.headers;
    let mut request = Request {
        method,
        target,
        version,
        headers,
        raw: &buf[..head_len],
        head_len,
        dropped: Lines::default(),
        framing: Framing::Empty,
        connection: ConnectionHeader::default(),
        upgrade: None,
        expect_continue: false,
        host: None,
    };
    let mut framing = FramingHeaders::default();
    let mut upgrade = None;
    for (i, h) in headers.iter().enumerate() {
        let name = Name::of(h.name);
        match name {
            Name::ContentLength => framing.content_length(h.value)?,
            // Kept: a valid request's body keeps its chunked framing on the way up.
            Name::TransferEncoding => framing.transfer_encoding = Some(h.value),
            Name::Connection => request.connection.add(h.value),
            Name::Upgrade => upgrade = Some(h.value),
            Name::Expect => {
                request.expect_continue |=
                    h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue")
            }
            Name::Host if request.host.is_none() => request.host = Some(h.value),
            _ => {}
        }
        if name.is_dropped_upstream() {
            request.dropped.add(i);
        }
    }
    if !request.connection.named.is_empty() {
        for (i, h) in headers.iter().enumerate() {
            if request.connection.names(h.name) {
                request.dropped.add(i);
            }
        }
    }
    request.framing = framing.decide().map_err(Refusal::Framing)?;
    if version == Version::Http11 && request.connection.upgrade {
        request.upgrade = upgrade;
    }
    if request.version == Version::Http10 {
        // Only HTTP/1.1 may switch protocols or wait for 100 Continue.
        request.expect_continue = false;
    }
    Ok(Some(request))
}

/// The framing headers of one request, collected before deciding.
#[derive(Default)]
struct FramingHeaders<'b> {
    content_length: Option<u64>,
    /// The last `Transfer-Encoding` line: several lines form one list, and only the
    /// last coding counts.
    transfer_encoding: Option<&'b [u8]>,
}

impl FramingHeaders<'_> {
    fn content_length(&mut self, value: &[u8]) -> Result<(), Refusal> {
        let v = parse_content_length(value)
            .ok_or(Refusal::Framing(FramingViolation::InvalidContentLength))?;
        if self.content_length.is_some_and(|prev| prev != v) {
            return Err(Refusal::Framing(FramingViolation::ConflictingContentLength));
        }
        self.content_length = Some(v);
        Ok(())
    }

    fn decide(&self) -> Result<Framing, FramingViolation> {
        match (self.content_length, self.transfer_encoding) {
            (Some(_), Some(_)) => Err(FramingViolation::ContentLengthWithTransferEncoding),
            (None, Some(te)) if ends_in_chunked(te) => Ok(Framing::Chunked),
            (None, Some(_)) => Err(FramingViolation::TransferEncodingNotChunked),
            (Some(0), None) | (None, None) => Ok(Framing::Empty),
            (Some(n), None) => Ok(Framing::Length(n)),
        }
    }
}
