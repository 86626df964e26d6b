//! The request head model: one description of a client's request, whichever protocol
//! brought it, with the body framing as a typed value. The codecs produce it
//! (`http1::request::parse` from HTTP/1.1 text, `http2::request::decode` from an HTTP/2
//! stream's HEADERS) and write it out (`http1::encode`, `http2::encode`); everything
//! between (routing, the checks, limits, `Host`, the forwarding headers, the access
//! record) works on it once.
//!
//! Syntax only: this module imports no protocol, proxy or client module.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

/// Fields about one connection, which HTTP/2 does not carry (RFC 9113, 8.2.2), besides `TE` other than `trailers`.
const CONNECTION_SPECIFIC: [&str; 6] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"];

/// Whether a field is one HTTP/2 does not carry.
pub fn is_connection_specific(name: &str) -> bool {
    CONNECTION_SPECIFIC.iter().any(|c| name.eq_ignore_ascii_case(c))
}

/// The HTTP version a message came in. HTTP/0.9 never reaches this code: `httparse`
/// refuses anything but 1.0 and 1.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    /// A stream of an HTTP/2 connection.
    Http2,
}

impl Version {
    /// The version of an HTTP/1.x message by the minor digit of its `HTTP/1.x`.
    pub fn from_minor(minor: u8) -> Version {
        if minor == 0 {
            Version::Http10
        } else {
            Version::Http11
        }
    }
}

/// How a message body is delimited on the wire (RFC 9112, section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body, and nothing says there is one (no `Content-Length`).
    Empty,
    /// Exactly this many bytes (`Content-Length`, which may be 0).
    Length(u64),
    /// `Transfer-Encoding` ending in `chunked`.
    Chunked,
    /// Everything until the sender closes the connection (responses only).
    UntilClose,
    /// The DATA frames of an HTTP/2 stream that declared no length: an HTTP/1.1 peer
    /// gets it chunked.
    Stream,
}

impl Framing {
    /// Whether the message has no body bytes at all.
    pub fn is_bodyless(self) -> bool {
        matches!(self, Framing::Empty | Framing::Length(0))
    }

    /// How the body goes to an HTTP/1.1 peer: an HTTP/2 stream of no declared length
    /// goes chunked.
    pub fn for_http1(self) -> Framing {
        match self {
            Framing::Stream => Framing::Chunked,
            other => other,
        }
    }

    /// The length the sender declared (`Content-Length`), if it did.
    pub fn declared(self) -> Option<u64> {
        match self {
            Framing::Length(n) => Some(n),
            _ => None,
        }
    }

    /// The body's length, when the framing says it.
    pub fn length(self) -> Option<u64> {
        match self {
            Framing::Length(n) => Some(n),
            Framing::Empty => Some(0),
            _ => None,
        }
    }
}

/// A client's request head, whichever protocol brought it: what the HTTP/1.1 parser
/// (`http1::request::parse`) and the HTTP/2 decoder (`http2::request::decode`) both
/// produce, borrowing from the bytes they read. Routing, the checks, limits, `Host`,
/// the forwarding headers and the access record work on it; `http1::encode` writes it
/// out as HTTP/1.1 text and `http2::encode` as an HTTP/2 request.
pub struct RequestHead<'h, 'b> {
    pub method: &'b str,
    /// The request target as sent (origin-form, absolute-form or `*`).
    pub target: &'b str,
    /// The target in origin-form (or `*`), as the origin gets it: an absolute-form
    /// target without its scheme and authority.
    pub path: OriginForm<'b>,
    pub version: Version,
    /// The header fields, each a slice of what the codec read where it allows.
    pub headers: &'h [httparse::Header<'b>],
    /// The HTTP/1.1 head as received, including the empty line that ends it (empty for
    /// HTTP/2: its fields are not one run of text).
    pub raw: &'b [u8],
    /// Bytes of the head, including the empty line that ends it.
    pub head_len: usize,
    /// Header lines not passed on as they are: framing, `Host`, hop-by-hop, those
    /// `Connection` names, `Expect`, and the forwarding headers holdfast writes itself.
    pub dropped: Lines,
    pub framing: Framing,
    /// What the client's `Connection` header says of its connection.
    pub connection: Connection,
    /// The `Upgrade` value of an HTTP/1.1 request that asks to switch protocols
    /// (`Upgrade` plus `Connection: upgrade`).
    pub upgrade: Option<&'b [u8]>,
    /// `Expect: 100-continue`: the client waits for an interim response before its body.
    pub expect_continue: bool,
    /// The host the request is for: an absolute-form target's authority, else the
    /// `Host` header's value (RFC 9112, 3.2.2). `None` only for HTTP/1.0 without either.
    pub host: Option<&'b [u8]>,
    /// The client asked for trailers (`te: trailers`, which gRPC sends over HTTP/2):
    /// passed on to HTTP/2 origins.
    pub te_trailers: bool,
}

/// A request target in origin-form: `/path?query`, or `*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OriginForm<'b> {
    /// An absolute-form target with no path (`http://h?q`) gets its `/` in front.
    pub slash: bool,
    pub rest: &'b [u8],
}

impl<'b> OriginForm<'b> {
    /// The path without its query, for routing: `/` when there is none.
    pub fn route_path(&self) -> &'b [u8] {
        if self.slash {
            b"/"
        } else {
            self.rest
        }
    }
}

impl RequestHead<'_, '_> {
    /// Whether the client's connection may carry another request after this one:
    /// HTTP/1.1 unless it says `close`, HTTP/1.0 only if it says `keep-alive`.
    pub fn keep_alive(&self) -> bool {
        match self.version {
            Version::Http11 | Version::Http2 => !self.connection.close,
            Version::Http10 => self.connection.keep_alive && !self.connection.close,
        }
    }

    /// A header's value by exact name match, case-insensitively (first line only).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value)
    }
}

/// An origin's response head, whichever protocol brought it: what the HTTP/1.1
/// parser (`http1::response::parse`) and the HTTP/2 decoder (`http2::response::decode`)
/// both produce, borrowing from what they read. `http1::encode::client_response` writes
/// it out for an HTTP/1.1 client, `http2::encode::client_response` for an HTTP/2 one.
pub struct ResponseHead<'h, 'b> {
    pub status: u16,
    pub reason: &'b str,
    pub version: Version,
    pub headers: &'h [httparse::Header<'b>],
    /// The HTTP/1.1 head as received, including the empty line that ends it (empty for
    /// HTTP/2).
    pub raw: &'b [u8],
    /// Bytes of the head, including the empty line that ends it.
    pub head_len: usize,
    /// Header lines never passed on: the framing (holdfast writes its own),
    /// hop-by-hop ones (but `Upgrade` in a 101) and those `Connection` names.
    pub dropped: Lines,
    /// The `Trailer` lines: passed on only with a chunked body.
    pub trailer_lines: Lines,
    pub framing: Framing,
    /// `Content-Length` as the origin sent it, also where it frames nothing (a
    /// response to HEAD, a 304): there it describes the representation.
    pub content_length: Option<u64>,
    /// The transfer codings applied besides `chunked` (gzip, say), in order.
    pub codings: Vec<&'b [u8]>,
    /// The response says where its body ends, or for a response to HEAD where the GET
    /// response's body would: it has `Content-Length` or `Transfer-Encoding`.
    pub declares_length: bool,
    /// The body ends only when the origin closes the connection (RFC 9112, 6.3, rule
    /// 8). For a response to HEAD, it is the body of the GET response that the head
    /// describes (RFC 9110, 9.3.2): the origin closes after this response as well.
    pub ends_with_close: bool,
    /// `Connection: close`.
    pub close: bool,
    /// The `Keep-Alive` header's value (`timeout=N, max=M`), if any.
    pub keep_alive: Option<&'b [u8]>,
    pub has_date: bool,
}

impl ResponseHead<'_, '_> {
    /// An interim response (1xx) other than 101: another head follows.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }

    /// Whether the origin lets the connection carry another request after this
    /// response: HTTP/1.1, no `Connection: close`, not a switch of protocols, and a
    /// body whose end is known, also for a response to HEAD (see `ends_with_close`).
    pub fn is_reusable(&self) -> bool {
        self.version == Version::Http11
            && !self.close
            && self.status != 101
            && !self.ends_with_close
    }
}

/// What a request's `Connection` header says of the client's connection.
#[derive(Debug, Default, Clone, Copy)]
pub struct Connection {
    /// `close`: the connection ends after this exchange.
    pub close: bool,
    /// `keep-alive`: an HTTP/1.0 client asks to keep it.
    pub keep_alive: bool,
}

/// A set of header line indices: the lines of a head that are not copied on as they
/// are. The first 64 live in one word, the rest in more words as needed.
#[derive(Debug, Default, Clone)]
pub struct Lines {
    low: u64,
    rest: Vec<u64>,
}

impl Lines {
    pub fn add(&mut self, i: usize) {
        let (word, bit) = (i / 64, i % 64);
        match word.checked_sub(1) {
            None => self.low |= 1 << bit,
            Some(w) => {
                if self.rest.len() <= w {
                    self.rest.resize(w.saturating_add(1), 0);
                }
                if let Some(slot) = self.rest.get_mut(w) {
                    *slot |= 1 << bit;
                }
            }
        }
    }

    pub fn contains(&self, i: usize) -> bool {
        let (word, bit) = (i / 64, i % 64);
        let bits = match word.checked_sub(1) {
            None => self.low,
            Some(w) => self.rest.get(w).copied().unwrap_or(0),
        };
        bits >> bit & 1 == 1
    }
}
