//! Writing the heads holdfast sends: the request head for the origin (rewritten from
//! the client's), the response head for the client (rewritten from the origin's), and
//! holdfast's own short responses.
//!
//! Rewriting copies every header line except the ones that describe a single
//! connection (hop-by-hop: `Connection` and the headers it names, `Keep-Alive`,
//! `Proxy-Connection`, `TE`, `Upgrade`, `Transfer-Encoding` unless the body keeps its
//! chunked framing), then adds what this hop must say.

use std::net::SocketAddr;

use super::request::Request;
use super::response::Response;
use super::{copy_headers, date, Framing, Name, Version};

/// The interim response a client waiting on `Expect: 100-continue` gets.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The end of a chunked body with no trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// What the origin gets to know about the client, and the backend the request goes to.
pub struct Forwarding<'a> {
    /// The client's IP address, appended to `X-Forwarded-For`.
    pub client_ip: &'a str,
    /// The backend's address, the `Host` of last resort (an HTTP/1.0 request without one).
    pub backend: SocketAddr,
}

/// Writes the head of `req` as it goes to the origin: origin-form target, HTTP/1.1,
/// hop-by-hop headers and `Expect` removed, `Host` kept (or supplied), and
/// `X-Forwarded-For`, `-Proto` and `-Host` added. The body keeps its framing, so a
/// chunked request keeps its `Transfer-Encoding` line.
pub fn upstream_request(req: &Request<'_, '_>, fwd: &Forwarding<'_>, out: &mut Vec<u8>) {
    let (authority, path) = split_target(req.target);
    out.reserve(req.head_len + 160);
    put(out, &[req.method.as_bytes(), b" ", path.as_bytes(), b" HTTP/1.1\r\n"]);
    copy_headers(req.raw, req.headers, |i| !req.dropped.contains(i), out);
    let mut forwarded_for: Option<Vec<u8>> = None;
    if !req.dropped.is_empty() {
        let prior =
            req.headers.iter().enumerate().filter(|(i, h)| {
                req.dropped.contains(*i) && Name::of(h.name) == Name::XForwardedFor
            });
        for (_, h) in prior {
            let list = forwarded_for.get_or_insert_with(Vec::new);
            if !list.is_empty() {
                list.extend_from_slice(b", ");
            }
            list.extend_from_slice(h.value.trim_ascii());
        }
    }
    let host = req.host.or(authority.map(str::as_bytes));
    match host {
        Some(host) if req.host.is_none() => header(out, b"host", host),
        Some(_) => {}
        None => {
            out.extend_from_slice(b"host: ");
            // A socket address is always valid header text.
            out.extend_from_slice(fwd.backend.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"x-forwarded-for: ");
    if let Some(prior) = forwarded_for.filter(|p| !p.is_empty()) {
        put(out, &[&prior, b", "]);
    }
    put(out, &[fwd.client_ip.as_bytes(), b"\r\nx-forwarded-proto: http\r\n"]);
    if let Some(host) = host {
        header(out, b"x-forwarded-host", host);
    }
    if let Some(protocol) = req.upgrade {
        put(out, &[b"connection: upgrade\r\nupgrade: ", protocol, b"\r\n"]);
    }
    out.extend_from_slice(b"\r\n");
}

/// An absolute-form target (`http://host/path?q`) split into its authority and the
/// origin-form rest; any other target is already origin-form (or `*`).
fn split_target(target: &str) -> (Option<&str>, &str) {
    let scheme_len = ["http://", "https://"]
        .iter()
        .find(|s| target.len() > s.len() && target[..s.len()].eq_ignore_ascii_case(s))
        .map(|s| s.len());
    let Some(scheme_len) = scheme_len else { return (None, target) };
    let rest = &target[scheme_len..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let authority = (!authority.is_empty()).then_some(authority);
    match path {
        "" => (authority, "/"),
        p if p.starts_with('?') => (authority, "/"),
        p => (authority, p),
    }
}

/// How the response body travels to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyOut {
    /// Framed as the origin framed it: its `Content-Length`, or its chunked encoding
    /// (trailers included) passed through.
    Same,
    /// The origin's body runs until it closes; the client (HTTP/1.1) gets it chunked so
    /// its own connection can stay open.
    Rechunked,
    /// Raw bytes, ended by closing the client connection: an HTTP/1.0 client, which
    /// knows no chunked encoding, getting a body without a known length.
    CloseDelimited,
}

impl BodyOut {
    /// The framing towards a client of `version` for an origin body framed `upstream`.
    pub fn choose(upstream: Framing, version: Version) -> BodyOut {
        match (upstream, version) {
            (Framing::Empty | Framing::Length(_), _) => BodyOut::Same,
            (Framing::Chunked, Version::Http11) => BodyOut::Same,
            (Framing::UntilClose, Version::Http11) => BodyOut::Rechunked,
            (Framing::Chunked | Framing::UntilClose, Version::Http10) => BodyOut::CloseDelimited,
        }
    }
}

/// What the response says about the client's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionOut {
    /// HTTP/1.1 keep-alive: nothing to say.
    KeepAlive,
    /// An HTTP/1.0 client that asked for keep-alive gets it confirmed.
    KeepAlive10,
    /// The client connection closes after this response.
    Close,
    /// A 101: the connection switches to the protocol in the origin's `Upgrade`.
    Upgrade,
}

impl ConnectionOut {
    /// What a response that is not a 101 says to a client of `version`: `keep` its
    /// connection for another request, or close it.
    pub fn for_client(keep: bool, version: Version) -> ConnectionOut {
        match (keep, version) {
            (false, _) => ConnectionOut::Close,
            (true, Version::Http10) => ConnectionOut::KeepAlive10,
            (true, Version::Http11) => ConnectionOut::KeepAlive,
        }
    }
}

/// Writes the head of the origin's `resp` as the client gets it.
pub fn client_response(
    resp: &Response<'_, '_>,
    body: BodyOut,
    connection: ConnectionOut,
    out: &mut Vec<u8>,
) {
    out.reserve(resp.head_len + 64);
    let line_end = resp.raw.iter().position(|b| *b == b'\n').map_or(0, |at| at + 1);
    match &resp.raw[..line_end] {
        // An HTTP/1.1 status line goes on as it came.
        line if line.starts_with(b"HTTP/1.1 ") && line.ends_with(b"\r\n") => {
            out.extend_from_slice(line)
        }
        _ => status_line(out, resp.status, resp.reason),
    }
    // The body's framing lines stay only where the body keeps its framing.
    let same = body == BodyOut::Same;
    let drop_encoding = !(same && resp.framing == Framing::Chunked);
    let keep = |i| {
        let dropped = resp.dropped.contains(i)
            || (drop_encoding && resp.encoding_lines.contains(i))
            || (!same && resp.length_lines.contains(i));
        !dropped
    };
    copy_headers(resp.raw, resp.headers, keep, out);
    if body == BodyOut::Rechunked {
        let encoding = (0..resp.headers.len())
            .rev()
            .find(|i| resp.encoding_lines.contains(*i))
            .map(|i| resp.headers[i].value);
        match encoding {
            // A coding such as gzip stays; chunked goes on top of it.
            Some(codings) => put(out, &[b"transfer-encoding: ", codings, b", chunked\r\n"]),
            None => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        }
    }
    end_head(out, !resp.has_date, connection);
}

/// Ends a response head: a `Date` if it needs one, what `connection` says, and the
/// empty line.
fn end_head(out: &mut Vec<u8>, add_date: bool, connection: ConnectionOut) {
    if add_date {
        out.extend_from_slice(b"date: ");
        date::append_now(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(match connection {
        ConnectionOut::KeepAlive => b"\r\n".as_slice(),
        ConnectionOut::KeepAlive10 => b"connection: keep-alive\r\n\r\n",
        ConnectionOut::Close => b"connection: close\r\n\r\n",
        ConnectionOut::Upgrade => b"connection: upgrade\r\n\r\n",
    });
}

/// Writes a response of holdfast's own: `status` with `text` as a plain-text body.
pub fn local_response(status: u16, text: &str, connection: ConnectionOut, out: &mut Vec<u8>) {
    let reason =
        http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    status_line(out, status, reason);
    out.extend_from_slice(b"content-type: text/plain; charset=utf-8\r\ncontent-length: ");
    out.extend_from_slice(itoa(text.len() as u64, &mut [0; 20]));
    out.extend_from_slice(b"\r\n");
    end_head(out, true, connection);
    out.extend_from_slice(text.as_bytes());
}

/// The size line that starts a chunk of `len` bytes.
pub fn chunk_size_line(len: usize, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    put(out, &[&digits[i..], b"\r\n"]);
}

fn status_line(out: &mut Vec<u8>, status: u16, reason: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa(u64::from(status), &mut [0; 20]));
    put(out, &[b" ", reason.as_bytes(), b"\r\n"]);
}

fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    put(out, &[name, b": ", value, b"\r\n"]);
}

fn put(out: &mut Vec<u8>, parts: &[&[u8]]) {
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// Decimal digits of `n`, written into the end of `buf`.
fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}
