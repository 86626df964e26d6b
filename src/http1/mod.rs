//! HTTP/1.1 message syntax as the proxy path needs it: reading request and response
//! heads from bytes, following chunked bodies, and writing the heads holdfast sends.
//!
//! No sockets and no policy live here: `client` and `proxy` decide what to do with what
//! is parsed. Heads are parsed with `httparse` straight from the connection's read
//! buffer and re-written field by field into the head that goes on, so a request costs
//! no header map and no per-header allocation. Bodies are never decoded on the way
//! through; [`chunked::Chunked`] only follows their framing so the proxy knows where a
//! body ends (and refuses a malformed one).

pub mod chunked;
pub mod date;
pub mod encode;
pub mod request;
pub mod response;

#[cfg(test)]
mod tests;

/// The HTTP version of a message. HTTP/0.9 and 2 never reach this code: `httparse`
/// refuses anything but 1.0 and 1.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

impl Version {
    fn from_minor(minor: u8) -> Version {
        if minor == 0 {
            Version::Http10
        } else {
            Version::Http11
        }
    }

    /// As written on a request or status line.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// How a message body is delimited on the wire (RFC 9112, section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    Empty,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// `Transfer-Encoding` ending in `chunked`.
    Chunked,
    /// Everything until the sender closes the connection (responses only).
    UntilClose,
}

/// Header names the proxy path treats specially; everything else is [`Name::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Name {
    Connection,
    ContentLength,
    Date,
    Expect,
    Host,
    KeepAlive,
    ProxyConnection,
    Te,
    Trailer,
    TransferEncoding,
    Upgrade,
    XForwardedFor,
    XForwardedHost,
    XForwardedProto,
    Other,
}

impl Name {
    /// Classifies a header name, case-insensitively. The length narrows the candidates
    /// to one or two before any byte is compared.
    pub(crate) fn of(name: &str) -> Name {
        let is = |known: &str| name.eq_ignore_ascii_case(known);
        match name.len() {
            2 if is("te") => Name::Te,
            4 if is("host") => Name::Host,
            4 if is("date") => Name::Date,
            6 if is("expect") => Name::Expect,
            7 if is("upgrade") => Name::Upgrade,
            7 if is("trailer") => Name::Trailer,
            10 if is("connection") => Name::Connection,
            10 if is("keep-alive") => Name::KeepAlive,
            14 if is("content-length") => Name::ContentLength,
            15 if is("x-forwarded-for") => Name::XForwardedFor,
            16 if is("proxy-connection") => Name::ProxyConnection,
            16 if is("x-forwarded-host") => Name::XForwardedHost,
            17 if is("transfer-encoding") => Name::TransferEncoding,
            17 if is("x-forwarded-proto") => Name::XForwardedProto,
            _ => Name::Other,
        }
    }

    /// Request headers not copied into the head that goes upstream: hop-by-hop ones,
    /// `Expect` (holdfast answers it), and the `X-Forwarded-*` it writes itself.
    /// `Transfer-Encoding` stays: the body keeps its chunked framing.
    pub(crate) fn is_dropped_upstream(self) -> bool {
        match self {
            Name::TransferEncoding => false,
            Name::Expect | Name::XForwardedFor | Name::XForwardedHost | Name::XForwardedProto => {
                true
            }
            name => name.is_hop_by_hop(),
        }
    }

    /// Headers about one connection, never passed on (RFC 9110, 7.6.1).
    /// `Transfer-Encoding` is among them: each side writes its own.
    pub(crate) fn is_hop_by_hop(self) -> bool {
        matches!(
            self,
            Name::Connection
                | Name::KeepAlive
                | Name::ProxyConnection
                | Name::Te
                | Name::TransferEncoding
                | Name::Upgrade
        )
    }
}

/// A set of header line indices: the lines of a head that are not copied on as they
/// are. The first 64 live in a bit mask; a head with more lines spills into a list.
#[derive(Debug, Default, Clone)]
pub struct Lines {
    low: u64,
    rest: Vec<usize>,
}

impl Lines {
    pub(crate) fn add(&mut self, i: usize) {
        if i < 64 {
            self.low |= 1 << i;
        } else {
            self.rest.push(i);
        }
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        if i < 64 {
            self.low >> i & 1 == 1
        } else {
            self.rest.contains(&i)
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.low == 0 && self.rest.is_empty()
    }
}

/// Copies the header lines of `head` (the raw bytes of a parsed head) for which `keep`
/// is true, each ending in CRLF.
///
/// Lines are copied as they were received, consecutive kept lines in one copy. A head
/// whose lines do not all end in CRLF (`httparse` also accepts a bare LF) is written
/// line by line instead, so what goes on always ends its lines in CRLF.
pub(crate) fn copy_headers(
    head: &[u8],
    headers: &[httparse::Header<'_>],
    keep: impl Fn(usize) -> bool,
    out: &mut Vec<u8>,
) {
    let offset = |s: &[u8]| s.as_ptr() as usize - head.as_ptr() as usize;
    let crlf_before = |at: usize| at >= 2 && &head[at - 2..at] == b"\r\n";
    let starts_ok = headers.iter().all(|h| crlf_before(offset(h.name.as_bytes())));
    if !starts_ok || !head.ends_with(b"\r\n\r\n") {
        for (i, h) in headers.iter().enumerate() {
            if keep(i) {
                for part in [h.name.as_bytes(), b": ", h.value, b"\r\n"] {
                    out.extend_from_slice(part);
                }
            }
        }
        return;
    }
    let end = head.len() - 2;
    let mut run: Option<usize> = None;
    for (i, h) in headers.iter().enumerate() {
        let start = offset(h.name.as_bytes());
        match (keep(i), run) {
            (true, None) => run = Some(start),
            (false, Some(from)) => {
                out.extend_from_slice(&head[from..start]);
                run = None;
            }
            _ => {}
        }
    }
    if let Some(from) = run {
        out.extend_from_slice(&head[from..end]);
    }
}

/// The comma-separated elements of a list header, trimmed, empty ones skipped.
pub(crate) fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|b| *b == b',').map(<[u8]>::trim_ascii).filter(|t| !t.is_empty())
}

/// What the `Connection` headers of a message say.
#[derive(Debug, Default)]
pub struct ConnectionHeader<'b> {
    pub close: bool,
    pub keep_alive: bool,
    pub upgrade: bool,
    /// Other header names it lists: they describe this connection only and are removed.
    pub named: Vec<&'b [u8]>,
}

impl<'b> ConnectionHeader<'b> {
    /// Adds one `Connection` header line's tokens.
    pub(crate) fn add(&mut self, value: &'b [u8]) {
        for token in tokens(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            } else {
                self.named.push(token);
            }
        }
    }

    /// Whether `name` is one of the headers this `Connection` header lists.
    pub(crate) fn names(&self, name: &str) -> bool {
        !self.named.is_empty() && self.named.iter().any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
    }
}

/// A `Content-Length` value: digits only, no sign, no list.
pub(crate) fn parse_content_length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |n, d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

/// Whether the last coding of a `Transfer-Encoding` list is `chunked`.
pub(crate) fn ends_in_chunked(value: &[u8]) -> bool {
    tokens(value).last().is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"))
}
