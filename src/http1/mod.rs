//! HTTP/1.1 message syntax as the proxy path needs it: finding and parsing request and
//! response heads, following body framing, and writing the heads and framing holdfast
//! sends.
//!
//! No sockets and no policy live here: `client` and `proxy` decide what to do with what
//! is parsed. Heads are parsed with `httparse` straight from the connection's read
//! buffer, once the head is complete ([`head::HeadScan`] finds its end looking at each
//! byte once), and re-written field by field into the head that goes on, so a request
//! costs no header map and no per-header allocation.
//!
//! # The framing rule
//! holdfast writes the framing of every message it sends itself, from what it parsed:
//! `content-length: N`, `transfer-encoding: chunked` or nothing, and exactly one `Host`.
//! The `Content-Length`, `Transfer-Encoding`, `Host` and hop-by-hop lines a peer sent are
//! never copied, and chunked bodies are decoded and encoded again ([`chunked`],
//! [`encode::chunk_size_line`]), so chunk extensions and forbidden trailer fields stop
//! here. Two hops can then only disagree about where a message ends if holdfast itself
//! is wrong about it.
//!
//! # No panic from input
//! Everything in this module takes bytes from the network. It uses no `&str` slicing,
//! no indexing and no unchecked arithmetic (the lints below deny them; tests may), so no
//! input reaches a panic: positions come from `get`, `split_at_checked` and iterators,
//! and sums are checked or saturating.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

pub mod body;
pub mod chunked;
pub mod date;
pub mod encode;
pub mod head;
pub mod request;
pub mod response;
pub mod websocket;

#[cfg(test)]
mod tests;

pub use crate::message::{Framing, Lines, Version};

/// Header names the proxy path treats specially; everything else is [`Name::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Name {
    Connection,
    ContentLength,
    Date,
    Expect,
    Forwarded,
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
    XRealIp,
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
            9 if is("forwarded") => Name::Forwarded,
            9 if is("x-real-ip") => Name::XRealIp,
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

    /// Request headers never copied into the head that goes upstream: the framing
    /// and `Host` (holdfast writes its own), hop-by-hop ones, `Expect` (holdfast
    /// answers it), and the forwarding headers holdfast writes itself.
    pub(crate) fn is_dropped_upstream(self) -> bool {
        match self {
            Name::ContentLength
            | Name::Host
            | Name::Expect
            | Name::Forwarded
            | Name::XForwardedFor
            | Name::XForwardedHost
            | Name::XForwardedProto
            | Name::XRealIp => true,
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

    /// Fields a `Connection` header may not name (RFC 9110, 7.6.1: senders must not
    /// list fields "that are needed by the recipient to process the message"): the
    /// framing and `Host`, which holdfast must read itself.
    pub(crate) fn may_not_be_nominated(name: &[u8]) -> bool {
        [&b"content-length"[..], b"transfer-encoding", b"host"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// Where `part` (a slice of `whole`) starts in `whole`, if it is a slice of it.
fn offset_in(whole: &[u8], part: &[u8]) -> Option<usize> {
    let at = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (at <= whole.len()).then_some(at)
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
    if !copy_header_runs(head, headers, &keep, out) {
        for (i, h) in headers.iter().enumerate() {
            if keep(i) {
                for part in [h.name.as_bytes(), b": ", h.value, b"\r\n"] {
                    out.extend_from_slice(part);
                }
            }
        }
    }
}

/// [`copy_headers`] in runs of raw lines; false (having written nothing) when the head
/// does not end every line in CRLF.
fn copy_header_runs(
    head: &[u8],
    headers: &[httparse::Header<'_>],
    keep: &impl Fn(usize) -> bool,
    out: &mut Vec<u8>,
) -> bool {
    if !head.ends_with(b"\r\n\r\n") {
        return false;
    }
    let written = out.len();
    // Where the last line's CRLF ends: before the empty line.
    let end = head.len().saturating_sub(2);
    let mut run: Option<usize> = None;
    for (i, h) in headers.iter().enumerate() {
        // Where the line starts, if the line before it ends in CRLF.
        let start = offset_in(head, h.name.as_bytes()).filter(|at| {
            at.checked_sub(2).and_then(|before| head.get(before..*at)) == Some(b"\r\n")
        });
        let Some(start) = start else {
            out.truncate(written);
            return false;
        };
        match (keep(i), run) {
            (true, None) => run = Some(start),
            (false, Some(from)) => {
                out.extend_from_slice(head.get(from..start).unwrap_or_default());
                run = None;
            }
            _ => {}
        }
    }
    if let Some(from) = run {
        out.extend_from_slice(head.get(from..end).unwrap_or_default());
    }
    true
}

/// Whether `b` may appear in a token (RFC 9110, 5.6.2): header names, methods, codings.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether `s` is a non-empty token.
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|b| is_tchar(*b))
}

/// Optional whitespace (RFC 9110, 5.6.3) trimmed from both ends.
pub(crate) fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(s.len());
    let rest = s.get(start..).unwrap_or_default();
    let end =
        rest.iter().rposition(|b| !matches!(b, b' ' | b'\t')).map_or(0, |i| i.saturating_add(1));
    rest.get(..end).unwrap_or_default()
}

/// The elements of a list header (RFC 9110, 5.6.1), trimmed; empty elements, which a
/// recipient must accept and ignore, are skipped.
pub(crate) fn elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|b| *b == b',').map(trim_ows).filter(|t| !t.is_empty())
}

/// What the `Connection` headers of a message say.
#[derive(Debug, Default)]
pub struct ConnectionHeader<'b> {
    pub close: bool,
    pub keep_alive: bool,
    pub upgrade: bool,
    /// Other header names it lists: they describe this connection only and are removed.
    pub named: Vec<&'b [u8]>,
    /// An element that is not a token.
    pub malformed: bool,
}

impl<'b> ConnectionHeader<'b> {
    /// Adds one `Connection` header line's elements.
    pub(crate) fn add(&mut self, value: &'b [u8]) {
        for token in elements(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            } else if is_token(token) {
                self.named.push(token);
            } else {
                self.malformed = true;
            }
        }
    }

    /// Whether `name` is one of the headers this `Connection` header lists.
    pub(crate) fn names(&self, name: &str) -> bool {
        !self.named.is_empty() && self.named.iter().any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
    }

    /// Whether it lists a field that may not be listed ([`Name::may_not_be_nominated`]).
    pub(crate) fn nominates_framing(&self) -> bool {
        self.named.iter().any(|n| Name::may_not_be_nominated(n))
    }
}

/// A `Content-Length` value: digits only, no sign, no list, at most 19 digits.
pub(crate) fn parse_content_length(value: &[u8]) -> Option<u64> {
    let value = trim_ows(value);
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value
        .iter()
        .try_fold(0u64, |n, d| n.checked_mul(10)?.checked_add(u64::from(d.checked_sub(b'0')?)))
}

/// The `Content-Length` lines of one message, collected: equal repeats are one value
/// (RFC 9112, 6.3 allows a recipient to accept them), differing ones are invalid.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ContentLength {
    pub value: Option<u64>,
    pub invalid: bool,
}

impl ContentLength {
    pub(crate) fn add(&mut self, value: &[u8]) {
        match parse_content_length(value) {
            Some(n) if self.value.is_none_or(|prev| prev == n) => self.value = Some(n),
            _ => self.invalid = true,
        }
    }
}

/// The transfer codings of a message's `Transfer-Encoding` lines, taken together as
/// one list (RFC 9112, 6.1).
#[derive(Debug, Default, Clone)]
pub struct Codings<'b> {
    /// The codings before a final `chunked`, or all of them when the last is not
    /// `chunked`, in order.
    pub before_chunked: Vec<&'b [u8]>,
    /// The last coding is `chunked`.
    pub chunked: bool,
    /// Some element is empty or not a bare token (parameters, quotes, stray bytes),
    /// `chunked` appears twice or not last, or the list is empty.
    pub malformed: bool,
    /// Some line was seen at all.
    pub present: bool,
}

impl<'b> Codings<'b> {
    /// Adds one `Transfer-Encoding` line. Framing gets the strictest reading: an
    /// empty list element, which RFC 9110, 5.6.1 lets other lists have, is malformed
    /// here, since parsers differ on it.
    pub(crate) fn add(&mut self, value: &'b [u8]) {
        self.present = true;
        for coding in value.split(|b| *b == b',').map(trim_ows) {
            if !is_token(coding) || self.chunked {
                // Anything after `chunked` makes it not the final coding, and chunked
                // may be applied only once (RFC 9112, 7).
                self.malformed = true;
            } else if coding.eq_ignore_ascii_case(b"chunked") {
                self.chunked = true;
            } else {
                self.before_chunked.push(coding);
            }
        }
    }

    /// Ends the collection: a list with no coding at all is malformed.
    pub(crate) fn finish(&mut self) {
        if self.present && !self.chunked && self.before_chunked.is_empty() {
            self.malformed = true;
        }
    }
}
