//! Reading a client's request head: the parse, the checks that refuse a faulty,
//! ambiguous or oversized request before any of it is forwarded, and what the rest of
//! the path needs to know about it (target, Host, framing, keep-alive, upgrade,
//! `Expect`).
//!
//! Request smuggling defence lives here. Each rule names its RFC section where it is
//! applied; a refused request gets its status ([`Refusal::status`]) and the client
//! connection closes, since nothing after a faulty head can be trusted to be framed
//! right. What is accepted is normalised: holdfast writes the framing and `Host` that
//! go upstream itself (see `encode::upstream_request`), so the origin sees one
//! `Content-Length` or `Transfer-Encoding: chunked` and one `Host`, whatever the client
//! sent.

use std::mem::MaybeUninit;

use super::{Codings, ConnectionHeader, ContentLength, Framing, Lines, Name, Version};

/// Header lines the parser has room for; `limits.max_request_headers` may not exceed it.
pub const MAX_HEADERS: usize = 1024;

/// Why a request is refused before anything of it is forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Ambiguous or invalid body framing (400).
    Framing(FramingViolation),
    /// Not HTTP/1.x syntax (400).
    Malformed,
    /// A request target that is not origin-form, absolute-form or `*` for OPTIONS (400).
    InvalidTarget,
    /// No `Host` in HTTP/1.1, more than one, or an invalid one (400).
    Host(HostViolation),
    /// `Connection` names `Content-Length`, `Transfer-Encoding` or `Host` (400).
    NominatedField,
    /// A `Transfer-Encoding` holdfast does not implement: only `chunked` is (501).
    UnknownCoding,
    /// An `Expect` other than `100-continue` (417).
    Expectation,
    /// The request line is longer than `max_request_line_bytes` (414).
    RequestLineTooLong,
    /// The head is longer than `max_request_header_bytes` (431).
    HeadTooLarge,
    /// More header lines than `max_request_headers` (431).
    TooManyHeaders,
    /// The head did not arrive within `client_header` (408).
    HeadTimeout,
    /// `CONNECT`: holdfast is a reverse proxy, not a tunnel (405).
    Connect,
}

impl Refusal {
    /// The status the client gets.
    pub fn status(self) -> u16 {
        match self {
            Refusal::Framing(_)
            | Refusal::Malformed
            | Refusal::InvalidTarget
            | Refusal::Host(_)
            | Refusal::NominatedField => 400,
            Refusal::Connect => 405,
            Refusal::HeadTimeout => 408,
            Refusal::RequestLineTooLong => 414,
            Refusal::Expectation => 417,
            Refusal::HeadTooLarge | Refusal::TooManyHeaders => 431,
            Refusal::UnknownCoding => 501,
        }
    }

    /// A stable snake_case name for the access log.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Framing(_) => "bad_framing",
            Refusal::Malformed => "malformed",
            Refusal::InvalidTarget => "bad_target",
            Refusal::Host(_) => "bad_host",
            Refusal::NominatedField => "connection_names_framing",
            Refusal::UnknownCoding => "unknown_coding",
            Refusal::Expectation => "unknown_expectation",
            Refusal::RequestLineTooLong => "request_line_too_long",
            Refusal::HeadTooLarge => "head_too_large",
            Refusal::TooManyHeaders => "too_many_headers",
            Refusal::HeadTimeout => "head_timeout",
            Refusal::Connect => "connect",
        }
    }

    /// Text for the response body and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Framing(v) => v.as_str(),
            Refusal::Malformed => "malformed request head",
            Refusal::InvalidTarget => "invalid request target",
            Refusal::Host(v) => v.as_str(),
            Refusal::NominatedField => "Connection names Content-Length, Transfer-Encoding or Host",
            Refusal::UnknownCoding => "request Transfer-Encoding other than chunked",
            Refusal::Expectation => "unsupported Expect (only 100-continue is)",
            Refusal::RequestLineTooLong => "request line too long",
            Refusal::HeadTooLarge => "request head too large",
            Refusal::TooManyHeaders => "too many request headers",
            Refusal::HeadTimeout => "request head not received in time",
            Refusal::Connect => "CONNECT is not supported",
        }
    }
}

/// Why a request's body framing was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingViolation {
    ContentLengthWithTransferEncoding,
    InvalidContentLength,
    TransferEncodingInHttp10,
    MalformedTransferEncoding,
    InvalidChunk,
}

impl FramingViolation {
    /// Text for the 400 body and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            FramingViolation::ContentLengthWithTransferEncoding => {
                "request has both Content-Length and Transfer-Encoding"
            }
            FramingViolation::InvalidContentLength => {
                "request has an invalid or conflicting Content-Length"
            }
            FramingViolation::TransferEncodingInHttp10 => {
                "HTTP/1.0 request has a Transfer-Encoding"
            }
            FramingViolation::MalformedTransferEncoding => {
                "request Transfer-Encoding is not a list ending in one chunked"
            }
            FramingViolation::InvalidChunk => "request has an invalid chunked body",
        }
    }
}

/// Why a request's `Host` was refused (RFC 9112, 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostViolation {
    Missing,
    Duplicate,
    Invalid,
}

impl HostViolation {
    fn as_str(self) -> &'static str {
        match self {
            HostViolation::Missing => "HTTP/1.1 request without Host",
            HostViolation::Duplicate => "request with more than one Host",
            HostViolation::Invalid => "request with an invalid Host",
        }
    }
}

/// Limits on a request head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_line_bytes: usize,
    pub max_head_bytes: usize,
}

pub use crate::message::{Connection, OriginForm, RequestHead as Request};

/// Checks an incomplete head at the start of `buf` against the limits: the request
/// line (`first_line` is its length once its end has been seen) and the whole head.
pub fn check_partial(
    buf: &[u8],
    first_line: Option<usize>,
    limits: &HeadLimits,
) -> Result<(), Refusal> {
    match first_line {
        Some(len) if len > limits.max_line_bytes => Err(Refusal::RequestLineTooLong),
        None if buf.len() > limits.max_line_bytes => Err(Refusal::RequestLineTooLong),
        _ if buf.len() > limits.max_head_bytes => Err(Refusal::HeadTooLarge),
        _ => Ok(()),
    }
}

/// Parses the request head at the start of `buf`; `Ok(None)` when it is not complete.
/// `storage` has room for the header lines allowed.
pub fn parse<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut [MaybeUninit<httparse::Header<'b>>],
    limits: &HeadLimits,
) -> Result<Option<Request<'h, 'b>>, Refusal> {
    let mut req = httparse::Request::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, storage);
    let head_len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooManyHeaders),
        Err(_) => return Err(Refusal::Malformed),
    };
    if head_len > limits.max_head_bytes {
        return Err(Refusal::HeadTooLarge);
    }
    let raw = buf.get(..head_len).ok_or(Refusal::Malformed)?;
    let method = req.method.ok_or(Refusal::Malformed)?;
    let target = req.path.ok_or(Refusal::Malformed)?;
    let version = Version::from_minor(req.version.ok_or(Refusal::Malformed)?);
    let line = Line { method, target, version, authority: None };
    let mut request = check(line, req.headers, raw, head_len, limits)?;
    if version != Version::Http11 {
        request.upgrade = None;
    }
    Ok(Some(request))
}

/// The start of a request, whichever codec read it: the request line of HTTP/1.1, or
/// an HTTP/2 stream's pseudo-header fields.
pub struct Line<'b> {
    pub method: &'b str,
    /// The target as sent: origin-form, absolute-form or `*` (HTTP/2's `:path`).
    pub target: &'b str,
    pub version: Version,
    /// HTTP/2's `:authority`, which stands where HTTP/1.1's absolute-form target's
    /// authority does (RFC 9113, 8.3.1).
    pub authority: Option<&'b [u8]>,
}

/// The checks every request head gets, whichever codec read it (RFC 9112 and 9110):
/// the method and target, `Host`, the body framing, `Connection` and `Expect`; and
/// which fields are not passed on as they are. `raw` is the HTTP/1.1 head the fields
/// are slices of (empty for HTTP/2), `head_len` its length or an estimate.
pub fn check<'h, 'b>(
    line: Line<'b>,
    headers: &'h [httparse::Header<'b>],
    raw: &'b [u8],
    head_len: usize,
    limits: &HeadLimits,
) -> Result<Request<'h, 'b>, Refusal> {
    let Line { method, target, version, authority } = line;
    if method.eq_ignore_ascii_case("CONNECT") {
        return Err(Refusal::Connect);
    }
    // The request line: method, target, `HTTP/1.x`, two spaces and a line end.
    let line = method.len().saturating_add(target.len()).saturating_add(10);
    if line > limits.max_line_bytes {
        return Err(Refusal::RequestLineTooLong);
    }
    let (in_target, path) = split_target(method, target)?;
    if authority.is_some_and(|a| !is_valid_host(a)) {
        return Err(Refusal::Host(HostViolation::Invalid));
    }
    let authority = authority.or(in_target);
    let mut request = Request {
        method,
        target,
        path,
        version,
        headers,
        raw,
        head_len,
        dropped: Lines::default(),
        framing: Framing::Empty,
        connection: Connection::default(),
        upgrade: None,
        expect_continue: false,
        host: None,
        te_trailers: false,
    };
    let mut fields = Fields::default();
    for (i, h) in headers.iter().enumerate() {
        let name = Name::of(h.name);
        fields.add(name, h.value);
        if name.is_dropped_upstream() {
            request.dropped.add(i);
        }
    }
    let connection = &fields.connection;
    if connection.malformed {
        return Err(Refusal::Malformed);
    }
    // RFC 9110, 7.6.1: the fields holdfast needs may not be made hop-by-hop.
    if connection.nominates_framing() {
        return Err(Refusal::NominatedField);
    }
    if !connection.named.is_empty() {
        for (i, h) in headers.iter().enumerate() {
            if connection.names(h.name) {
                request.dropped.add(i);
            }
        }
    }
    request.connection = Connection { close: connection.close, keep_alive: connection.keep_alive };
    request.host = fields.host(version, authority)?;
    request.framing = fields.framing(version)?;
    request.expect_continue = fields.expectation(version)?;
    // An upgrade is asked by `Upgrade` with `Connection: upgrade` (RFC 9110, 7.8).
    request.upgrade = fields.upgrade.filter(|_| fields.connection.upgrade);
    Ok(request)
}

/// The fields of one request that decide how it is handled, collected before deciding.
#[derive(Default)]
struct Fields<'b> {
    connection: ConnectionHeader<'b>,
    content_length: ContentLength,
    codings: Codings<'b>,
    hosts: usize,
    host: Option<&'b [u8]>,
    upgrade: Option<&'b [u8]>,
    /// Every `Expect` element was `100-continue`, and there was one.
    expect_continue: bool,
    expect_other: bool,
}

impl<'b> Fields<'b> {
    fn add(&mut self, name: Name, value: &'b [u8]) {
        match name {
            Name::ContentLength => self.content_length.add(value),
            Name::TransferEncoding => self.codings.add(value),
            Name::Connection => self.connection.add(value),
            Name::Upgrade => self.upgrade = Some(value),
            Name::Expect => self.add_expect(value),
            Name::Host => {
                self.hosts = self.hosts.saturating_add(1);
                self.host = Some(value);
            }
            _ => {}
        }
    }

    fn add_expect(&mut self, value: &[u8]) {
        let mut any = false;
        for e in super::elements(value) {
            any = true;
            if e.eq_ignore_ascii_case(b"100-continue") {
                self.expect_continue = true;
            } else {
                self.expect_other = true;
            }
        }
        if !any {
            self.expect_other = true;
        }
    }

    /// RFC 9112, 3.2: HTTP/1.1 requests have exactly one valid `Host`; an
    /// absolute-form target's authority replaces it (3.2.2).
    fn host(
        &self,
        version: Version,
        authority: Option<&'b [u8]>,
    ) -> Result<Option<&'b [u8]>, Refusal> {
        match (self.hosts, version) {
            (0, Version::Http11) => return Err(Refusal::Host(HostViolation::Missing)),
            // RFC 9113, 8.3.1: `:authority`, or else `Host`.
            (0, Version::Http2) if authority.is_none() => {
                return Err(Refusal::Host(HostViolation::Missing))
            }
            (0 | 1, _) => {}
            _ => return Err(Refusal::Host(HostViolation::Duplicate)),
        }
        // httparse has trimmed the value's surrounding whitespace.
        let host = self.host;
        if host.is_some_and(|h| !is_valid_host(h)) {
            return Err(Refusal::Host(HostViolation::Invalid));
        }
        Ok(authority.or(host))
    }

    /// RFC 9112, 6.1 and 6.3: how the body is framed, or why it cannot be trusted.
    fn framing(&mut self, version: Version) -> Result<Framing, Refusal> {
        self.codings.finish();
        let violation = |v| Err(Refusal::Framing(v));
        if self.content_length.invalid {
            return violation(FramingViolation::InvalidContentLength);
        }
        if !self.codings.present {
            return Ok(self.content_length.value.map_or(Framing::Empty, Framing::Length));
        }
        // 6.1: Transfer-Encoding in HTTP/1.0 is faulty framing.
        if version == Version::Http10 {
            return violation(FramingViolation::TransferEncodingInHttp10);
        }
        // 6.1: both may be an attempt at smuggling; a server may reject it, and does.
        if self.content_length.value.is_some() {
            return violation(FramingViolation::ContentLengthWithTransferEncoding);
        }
        // 6.1: chunked must be the final coding, else 400.
        if self.codings.malformed || !self.codings.chunked {
            return violation(FramingViolation::MalformedTransferEncoding);
        }
        // 6.1: a coding the server does not understand gets 501.
        if !self.codings.before_chunked.is_empty() {
            return Err(Refusal::UnknownCoding);
        }
        Ok(Framing::Chunked)
    }

    /// RFC 9110, 10.1.1: an expectation other than 100-continue gets 417; an HTTP/1.0
    /// client's 100-continue is ignored.
    fn expectation(&self, version: Version) -> Result<bool, Refusal> {
        if self.expect_other {
            return Err(Refusal::Expectation);
        }
        Ok(self.expect_continue && version != Version::Http10)
    }
}

/// Splits a request target into the authority of an absolute-form target and the
/// origin-form rest (RFC 9112, 3.2). `*` is only for OPTIONS; authority-form only for
/// CONNECT, which is refused before this.
fn split_target<'b>(
    method: &str,
    target: &'b str,
) -> Result<(Option<&'b [u8]>, OriginForm<'b>), Refusal> {
    let bytes = target.as_bytes();
    // Only the characters a URI may hold (RFC 3986, 2), and a few clients send
    // unencoded: a byte one parser takes and another refuses is refused here. A fragment
    // is not part of any request-target form.
    if !bytes.iter().all(|b| TARGET_CHAR.get(usize::from(*b)).copied().unwrap_or(false)) {
        return Err(Refusal::InvalidTarget);
    }
    if bytes.first() == Some(&b'/') {
        return Ok((None, OriginForm { slash: false, rest: bytes }));
    }
    if bytes == b"*" {
        if method == "OPTIONS" {
            return Ok((None, OriginForm { slash: false, rest: bytes }));
        }
        return Err(Refusal::InvalidTarget);
    }
    let rest = strip_scheme(bytes).ok_or(Refusal::InvalidTarget)?;
    let end = rest.iter().position(|b| matches!(b, b'/' | b'?')).unwrap_or(rest.len());
    let (authority, path) = rest.split_at_checked(end).ok_or(Refusal::InvalidTarget)?;
    // RFC 9110, 4.2.4: userinfo in an http(s) URI is an error; an empty host invalid.
    if authority.is_empty() || authority.contains(&b'@') || !is_valid_host(authority) {
        return Err(Refusal::InvalidTarget);
    }
    let slash = path.first() != Some(&b'/');
    Ok((Some(authority), OriginForm { slash, rest: path }))
}

/// What follows `http://` or `https://` (any case) in an absolute-form target.
fn strip_scheme(target: &[u8]) -> Option<&[u8]> {
    ["http://", "https://"].iter().find_map(|scheme| {
        let (head, rest) = target.split_at_checked(scheme.len())?;
        head.eq_ignore_ascii_case(scheme.as_bytes()).then_some(rest)
    })
}

/// Whether `value` is a valid `Host`: `uri-host [ ":" port ]` (RFC 9110, 7.2; RFC 3986,
/// 3.2.2), where the host is an IP literal in brackets or a reg-name (IPv4 included).
/// An empty host is not valid: an http URI must have one (RFC 9110, 4.2.1).
pub fn is_valid_host(value: &[u8]) -> bool {
    if value.is_empty() || value.first() == Some(&b':') {
        return false;
    }
    // The usual host, a name or IPv4 address with perhaps a port, in one quick pass.
    if value.iter().all(|b| PLAIN_HOST.get(usize::from(*b)).copied().unwrap_or(false)) {
        return match value.iter().position(|b| *b == b':') {
            None => true,
            Some(colon) => value
                .get(colon.saturating_add(1)..)
                .unwrap_or_default()
                .iter()
                .all(u8::is_ascii_digit),
        };
    }
    let rest = match value.strip_prefix(b"[") {
        Some(literal) => {
            let Some(close) = literal.iter().position(|b| *b == b']') else { return false };
            let (inner, rest) = literal.split_at(close);
            let valid = !inner.is_empty()
                && inner.iter().all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'));
            if !valid {
                return false;
            }
            // Past the `]`: nothing, or a port.
            match rest.get(1..) {
                Some([]) | None => return true,
                Some(after) => after,
            }
        }
        None => value,
    };
    // A reg-name holds no colon, so the first one starts the port.
    let mut in_port = false;
    let mut bytes = rest.iter();
    while let Some(&b) = bytes.next() {
        let ok = match b {
            _ if in_port => b.is_ascii_digit(),
            b':' => {
                in_port = true;
                true
            }
            b'%' => matches!(
                (bytes.next(), bytes.next()),
                (Some(h), Some(l)) if h.is_ascii_hexdigit() && l.is_ascii_hexdigit()
            ),
            b => REG_NAME.get(usize::from(b)).copied().unwrap_or(false),
        };
        if !ok {
            return false;
        }
    }
    // After an IP literal, only a port may follow.
    value.first() != Some(&b'[') || rest.first() == Some(&b':')
}

/// The bytes a request target may hold: RFC 3986's unreserved and reserved characters
/// but `#`, and `%`; and `{`, `}`, `|` and `^`, which clients send unencoded (JSON in a
/// query string) and common servers accept. Not `"`, `<`, `>`, `\`, `` ` ``, spaces,
/// controls or bytes past ASCII.
static TARGET_CHAR: [bool; 256] = byte_table(b"-._~:/?[]@!$&'()*+,;=%{}|^");

/// The bytes of a host name or IPv4 address and its port: letters, digits, `-`, `.`,
/// `_` and `:`.
static PLAIN_HOST: [bool; 256] = byte_table(b"-._:");

/// The bytes a reg-name may hold besides percent-encodings: unreserved characters and
/// sub-delims.
static REG_NAME: [bool; 256] = byte_table(b"-._~!$&'()*+,;=");

/// A table of the bytes that are letters, digits or in `extra`, for the statics above:
/// built at compile time, with indexes below 256.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
const fn byte_table(extra: &[u8]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        table[extra[i] as usize] = true;
        i += 1;
    }
    table
}
