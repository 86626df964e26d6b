//! Reading an origin's response head: the parse, how its body is framed (which also
//! depends on the request: a response to HEAD has none), and whether the connection
//! may carry another request afterwards.

use std::mem::MaybeUninit;

use super::{
    ends_in_chunked, parse_content_length, ConnectionHeader, Framing, Lines, Name, Version,
};

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
    #[error("upstream switched protocols (101) for a request that did not ask to")]
    UnrequestedUpgrade,
}

/// A parsed response head, borrowing from the upstream read buffer.
pub struct Response<'h, 'b> {
    pub status: u16,
    pub reason: &'b str,
    pub version: Version,
    pub headers: &'h [httparse::Header<'b>],
    /// The head as received, including the empty line that ends it.
    pub raw: &'b [u8],
    /// Bytes of the head, including the empty line that ends it.
    pub head_len: usize,
    /// Header lines never passed on: hop-by-hop ones (but `Transfer-Encoding`, and
    /// `Upgrade` in a 101) and those `Connection` names.
    pub dropped: Lines,
    /// The `Transfer-Encoding` lines.
    pub encoding_lines: Lines,
    /// The `Content-Length` and `Trailer` lines.
    pub length_lines: Lines,
    pub framing: Framing,
    pub connection: ConnectionHeader<'b>,
    /// The `Keep-Alive` header's value (`timeout=N, max=M`), if any.
    pub keep_alive: Option<&'b [u8]>,
    pub has_date: bool,
}

impl Response<'_, '_> {
    /// An interim response (1xx) other than 101: another head follows.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }

    /// Whether the origin lets the connection carry another request after this
    /// response: HTTP/1.1, no `Connection: close`, and a body whose end is known.
    pub fn is_reusable(&self) -> bool {
        self.version == Version::Http11
            && !self.connection.close
            && self.framing != Framing::UntilClose
    }
}

/// Parses the response head at the start of `buf`; `Ok(None)` means it is not
/// complete yet. `head_request`: the request was HEAD, so no body follows.
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
        Ok(httparse::Status::Partial) if buf.len() <= MAX_HEAD_BYTES => return Ok(None),
        Ok(_) => return Err(BadResponse::HeadTooLarge),
        Err(httparse::Error::TooManyHeaders) => return Err(BadResponse::TooManyHeaders),
        Err(e) => return Err(BadResponse::Malformed(e)),
    };
    let status = resp.code.ok_or(BadResponse::Malformed(httparse::Error::Status))?;
    let version =
        Version::from_minor(resp.version.ok_or(BadResponse::Malformed(httparse::Error::Version))?);
    let headers: &'h [httparse::Header<'b>] = resp.headers;
    let mut response = Response {
        status,
        reason: resp.reason.unwrap_or(""),
        version,
        headers,
        raw: &buf[..head_len],
        head_len,
        dropped: Lines::default(),
        encoding_lines: Lines::default(),
        length_lines: Lines::default(),
        framing: Framing::Empty,
        connection: ConnectionHeader::default(),
        keep_alive: None,
        has_date: false,
    };
    let mut content_length = None;
    let mut transfer_encoding = None;
    for (i, h) in headers.iter().enumerate() {
        match Name::of(h.name) {
            Name::ContentLength => {
                let n = parse_content_length(h.value).ok_or(BadResponse::InvalidContentLength)?;
                if content_length.is_some_and(|prev| prev != n) {
                    return Err(BadResponse::InvalidContentLength);
                }
                content_length = Some(n);
                response.length_lines.add(i);
            }
            Name::TransferEncoding => {
                transfer_encoding = Some(h.value);
                response.encoding_lines.add(i);
            }
            Name::Trailer => response.length_lines.add(i),
            Name::Connection => {
                response.connection.add(h.value);
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
    if !response.connection.named.is_empty() {
        for (i, h) in headers.iter().enumerate() {
            if response.connection.names(h.name) {
                response.dropped.add(i);
            }
        }
    }
    response.framing = body_framing(status, head_request, content_length, transfer_encoding)?;
    Ok(Some(response))
}

/// RFC 9112, 6.3: responses to HEAD and 1xx, 204 and 304 responses have no body; then
/// `Transfer-Encoding`, then `Content-Length`, else the body runs until the close.
/// Both headers at once could be read two ways by the hops behind holdfast, so that
/// response is refused, as nginx does.
fn body_framing(
    status: u16,
    head_request: bool,
    content_length: Option<u64>,
    transfer_encoding: Option<&[u8]>,
) -> Result<Framing, BadResponse> {
    if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Framing::Empty);
    }
    match (content_length, transfer_encoding) {
        (Some(_), Some(_)) => Err(BadResponse::AmbiguousLength),
        (None, Some(te)) if ends_in_chunked(te) => Ok(Framing::Chunked),
        (None, Some(_)) => Ok(Framing::UntilClose),
        (Some(0), None) => Ok(Framing::Empty),
        (Some(n), None) => Ok(Framing::Length(n)),
        (None, None) => Ok(Framing::UntilClose),
    }
}
