//! Reading an origin's response head: the parse, how its body is framed (which also
//! depends on the request: a response to HEAD has none), and whether the connection
//! may carry another request afterwards.
//!
//! The origin is trusted no more than a client: a response whose framing could be read
//! two ways is refused (the client gets 502 and the connection closes), and what is
//! accepted goes on with framing holdfast writes itself (`encode::client_response`).

use std::mem::MaybeUninit;

use super::head::{HeadScan, Look};
use super::{Codings, ConnectionHeader, ContentLength, Framing, Lines, Name, Version};

/// Header lines an origin's response may have. hyper allows 100; real responses with
/// many `Set-Cookie` lines need more.
pub const MAX_HEADERS: usize = 256;

/// Bytes an origin's response head may take. nginx's `proxy_buffer_size` is 4 or 8 kB;
/// 64 kB leaves room for large cookies and redirects.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Why an origin's response head cannot be passed on (the client gets 502).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadResponse {
    #[error("invalid response head from upstream ({0})")]
    Malformed(httparse::Error),
    #[error("response head from upstream is larger than {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("response from upstream has more than {MAX_HEADERS} header lines")]
    TooManyHeaders,
    #[error("response from upstream has an invalid or conflicting Content-Length")]
    InvalidContentLength,
    #[error("response from upstream has both Content-Length and Transfer-Encoding")]
    AmbiguousLength,
    #[error("response from upstream has an invalid Transfer-Encoding")]
    InvalidTransferEncoding,
    #[error("HTTP/1.0 response from upstream has a Transfer-Encoding")]
    TransferEncodingInHttp10,
    #[error("upstream switched protocols (101) for a request that did not ask to")]
    UnrequestedUpgrade,
    /// The origin switched to WebSocket without the `Sec-WebSocket-Accept` that answers
    /// holdfast's key (RFC 6455, 4.1: the connection must fail).
    #[error(
        "upstream switched to WebSocket with a Sec-WebSocket-Accept that does not answer \
         holdfast's Sec-WebSocket-Key (or none)"
    )]
    WebSocketAccept,
}

pub use crate::message::ResponseHead as Response;

/// Parses the response head at the start of `buf` once `scan` says it is worth it:
/// `Ok(None)` while it is not complete. `head_request`: the request was HEAD.
pub fn read<'h, 'b>(
    scan: &mut HeadScan,
    buf: &'b [u8],
    storage: &'h mut [MaybeUninit<httparse::Header<'b>>],
    head_request: bool,
) -> Result<Option<Response<'h, 'b>>, BadResponse> {
    let look = scan.look(buf);
    let parsed = match look {
        Look::Wait => None,
        Look::First | Look::Complete => parse(buf, storage, head_request)?,
    };
    if parsed.is_some() {
        return Ok(parsed);
    }
    if !scan.agrees_incomplete(look, buf) {
        return Err(BadResponse::Malformed(httparse::Error::NewLine));
    }
    if buf.len() > MAX_HEAD_BYTES {
        return Err(BadResponse::HeadTooLarge);
    }
    Ok(None)
}

/// What the start of a response that arrives while a request body is still being
/// sent is: an interim response (`100 Continue`, `103 Early Hints`), after which the
/// body goes on, or the final answer, which ends the upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Early {
    /// A complete interim head of this many bytes.
    Interim(usize),
    /// Too little has arrived to tell.
    Unknown,
    /// A final response (or something that is not a response head at all).
    Final,
}

/// Classifies the bytes at the start of `buf` (see [`Early`]).
pub fn early(scan: &mut HeadScan, buf: &[u8]) -> Result<Early, BadResponse> {
    // `HTTP/1.1 1xx`: the status code is bytes 9 to 11.
    let Some(code) = buf.get(9..12) else { return Ok(Early::Unknown) };
    let interim = buf.starts_with(b"HTTP/1.") && code.first() == Some(&b'1') && code != b"101";
    if !interim {
        return Ok(Early::Final);
    }
    let mut storage = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    Ok(match read(scan, buf, &mut storage, false)? {
        None => Early::Unknown,
        Some(resp) if resp.is_interim() => Early::Interim(resp.head_len),
        Some(_) => Early::Final,
    })
}

/// Parses the response head at the start of `buf`; `Ok(None)` when it is not
/// complete. `head_request`: the request was HEAD, so no body follows.
pub fn parse<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut [MaybeUninit<httparse::Header<'b>>],
    head_request: bool,
) -> Result<Option<Response<'h, 'b>>, BadResponse> {
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, storage);
    let head_len = match parsed {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD_BYTES => len,
        Ok(httparse::Status::Complete(_)) => return Err(BadResponse::HeadTooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(BadResponse::TooManyHeaders),
        Err(e) => return Err(BadResponse::Malformed(e)),
    };
    let raw = buf.get(..head_len).ok_or(BadResponse::HeadTooLarge)?;
    let status = resp.code.ok_or(BadResponse::Malformed(httparse::Error::Status))?;
    let version =
        Version::from_minor(resp.version.ok_or(BadResponse::Malformed(httparse::Error::Version))?);
    let line = StatusLine { status, reason: resp.reason.unwrap_or(""), version };
    check(line, resp.headers, raw, head_len, head_request).map(Some)
}

/// The start of a response, whichever codec read it: the status line of HTTP/1.1, or
/// an HTTP/2 stream's `:status`.
pub struct StatusLine<'b> {
    pub status: u16,
    /// The reason phrase (empty over HTTP/2).
    pub reason: &'b str,
    pub version: Version,
}

/// The checks every response head gets, whichever codec read it (RFC 9112 and 9110):
/// the body framing, `Connection` and `Keep-Alive`; and which fields are not passed on
/// as they are. `raw` is the HTTP/1.1 head the fields are slices of (empty for
/// HTTP/2); `head_request`: the request was HEAD.
pub fn check<'h, 'b>(
    line: StatusLine<'b>,
    headers: &'h [httparse::Header<'b>],
    raw: &'b [u8],
    head_len: usize,
    head_request: bool,
) -> Result<Response<'h, 'b>, BadResponse> {
    let StatusLine { status, reason, version } = line;
    let mut response = Response {
        status,
        reason,
        version,
        headers,
        raw,
        head_len,
        dropped: Lines::default(),
        trailer_lines: Lines::default(),
        framing: Framing::Empty,
        content_length: None,
        codings: Vec::new(),
        declares_length: false,
        ends_with_close: false,
        close: false,
        keep_alive: None,
        has_date: false,
    };
    let mut connection = ConnectionHeader::default();
    let mut content_length = ContentLength::default();
    let mut codings = Codings::default();
    for (i, h) in headers.iter().enumerate() {
        match Name::of(h.name) {
            Name::ContentLength => {
                content_length.add(h.value);
                response.dropped.add(i);
            }
            Name::TransferEncoding => {
                codings.add(h.value);
                response.dropped.add(i);
            }
            Name::Trailer => response.trailer_lines.add(i),
            Name::Connection => {
                connection.add(h.value);
                response.dropped.add(i);
            }
            Name::KeepAlive => {
                response.keep_alive = Some(h.value);
                response.dropped.add(i);
            }
            Name::Upgrade if status == 101 => {}
            name if name.is_hop_by_hop() => response.dropped.add(i),
            Name::Date => response.has_date = true,
            _ => {}
        }
    }
    if !connection.named.is_empty() {
        for (i, h) in headers.iter().enumerate() {
            if connection.names(h.name) {
                response.dropped.add(i);
            }
        }
    }
    response.close = connection.close;
    codings.finish();
    if content_length.invalid {
        return Err(BadResponse::InvalidContentLength);
    }
    response.content_length = content_length.value;
    response.declares_length = content_length.value.is_some() || codings.present;
    response.framing = body_framing(status, head_request, version, content_length, &codings)?;
    response.ends_with_close = if head_request {
        // RFC 9112, 6.3: a response without Content-Length or chunked coding is
        // delimited by the close, and a response to HEAD carries the GET response's
        // header fields without its body (RFC 9110, 9.3.2). Such a head says that the
        // origin ends the exchange by closing, though no body follows: reusing the
        // connection would send the next request into that close. Framing that the
        // GET response could not have is not this case; it is left as it was.
        body_framing(status, false, version, content_length, &codings) == Ok(Framing::UntilClose)
    } else {
        response.framing == Framing::UntilClose
    };
    response.codings = codings.before_chunked;
    Ok(response)
}

/// RFC 9112, 6.3: responses to HEAD and 1xx, 204 and 304 responses have no body; then
/// `Transfer-Encoding`, then `Content-Length`, else the body runs until the close.
/// Both headers at once could be read two ways by the hops behind holdfast, so that
/// response is refused, as nginx does; so is a `Transfer-Encoding` in HTTP/1.0 (6.1:
/// faulty framing) or one that is not a list of tokens with at most a final chunked.
fn body_framing(
    status: u16,
    head_request: bool,
    version: Version,
    content_length: ContentLength,
    codings: &Codings<'_>,
) -> Result<Framing, BadResponse> {
    if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Framing::Empty);
    }
    if codings.present {
        if version == Version::Http10 {
            return Err(BadResponse::TransferEncodingInHttp10);
        }
        if content_length.value.is_some() {
            return Err(BadResponse::AmbiguousLength);
        }
        if codings.malformed {
            return Err(BadResponse::InvalidTransferEncoding);
        }
        return Ok(if codings.chunked { Framing::Chunked } else { Framing::UntilClose });
    }
    Ok(content_length.value.map_or(Framing::UntilClose, Framing::Length))
}
