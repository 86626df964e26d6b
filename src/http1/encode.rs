//! Writing the heads holdfast sends: the request head for the origin (rewritten from
//! the client's), the response head for the client (rewritten from the origin's),
//! holdfast's own short responses, and chunk framing.
//!
//! Rewriting copies every header line except the framing, `Host`, the ones that
//! describe a single connection (hop-by-hop: `Connection` and the headers it names,
//! `Keep-Alive`, `Proxy-Connection`, `TE`, `Upgrade`, `Transfer-Encoding`) and, on
//! requests, the forwarding headers; then writes what this hop must say: the framing
//! and `Host` from what was parsed, and the forwarding headers (see [`Forwarding`]).

use std::net::SocketAddr;

use super::request::Request;
use super::response::Response;
use super::{copy_headers, date, Framing, Name, Version};

/// The interim response a client waiting on `Expect: 100-continue` gets.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The last chunk of a chunked body; trailer lines and an empty line follow.
pub const LAST_CHUNK: &[u8] = b"0\r\n";

/// Longest text of an IP address: an IPv6 address with an embedded IPv4 one.
const IP_TEXT_MAX: usize = 45;

/// `ip` as text in `out`, without allocating: an IPv4 address (the common case, once per
/// client connection) digit by digit, an IPv6 one through its `Display`.
fn ip_text(ip: std::net::IpAddr, out: &mut [u8; IP_TEXT_MAX]) -> &[u8] {
    let len = match ip {
        std::net::IpAddr::V4(v4) => dotted_quad(v4.octets(), out),
        std::net::IpAddr::V6(v6) => {
            let mut rest = &mut out[..];
            // `Display` of an IPv6 address fits IP_TEXT_MAX, so the write cannot fail.
            let _ = std::io::Write::write_fmt(&mut rest, format_args!("{v6}"));
            IP_TEXT_MAX.saturating_sub(rest.len())
        }
    };
    out.get(..len).unwrap_or_default()
}

/// Writes `octets` as dotted decimal at the start of `out`; returns its length.
fn dotted_quad(octets: [u8; 4], out: &mut [u8; IP_TEXT_MAX]) -> usize {
    let mut len = 0usize;
    for (i, octet) in octets.into_iter().enumerate() {
        if i > 0 {
            push_byte(out, &mut len, b'.');
        }
        if octet >= 100 {
            push_byte(out, &mut len, digit(octet / 100));
        }
        if octet >= 10 {
            push_byte(out, &mut len, digit(octet / 10));
        }
        push_byte(out, &mut len, digit(octet));
    }
    len
}

/// The last decimal digit of `n`, as text.
fn digit(n: u8) -> u8 {
    b"0123456789".get(usize::from(n % 10)).copied().unwrap_or(b'0')
}

/// Puts `byte` at `out[len]` and moves `len` on (nothing past the end of `out`).
fn push_byte(out: &mut [u8; IP_TEXT_MAX], len: &mut usize, byte: u8) {
    if let Some(slot) = out.get_mut(*len) {
        *slot = byte;
        *len = len.saturating_add(1);
    }
}

/// The forwarding header text that depends only on a client's address, written once
/// per client connection: its address, the lines an untrusted peer's requests carry
/// whatever the host (`X-Forwarded-For`, `-Proto`, `X-Real-IP`), and its `Forwarded`
/// `for=` parameter. The scheme the client used (`http`, or `https` on a TLS listener)
/// is a fact of the connection too, so it is written here once.
#[derive(Debug, Clone)]
pub struct PeerText {
    bytes: Vec<u8>,
    ip_end: usize,
    lines_end: usize,
    /// `http`, or `https` for a client connected over TLS.
    scheme: &'static [u8],
}

impl PeerText {
    /// The text for a client at `ip`, connected over TLS when `tls`.
    pub fn new(ip: std::net::IpAddr, tls: bool) -> PeerText {
        let mut text = [0u8; IP_TEXT_MAX];
        let ip = ip_text(ip.to_canonical(), &mut text);
        let scheme: &'static [u8] = if tls { b"https" } else { b"http" };
        let mut bytes = Vec::with_capacity(ip.len().saturating_mul(3).saturating_add(80));
        bytes.extend_from_slice(ip);
        let ip_end = bytes.len();
        put(&mut bytes, &[b"x-forwarded-for: ", ip, b"\r\nx-forwarded-proto: ", scheme, b"\r\n"]);
        header(&mut bytes, b"x-real-ip", ip);
        let lines_end = bytes.len();
        // RFC 7239, 6: an IPv6 address is quoted and bracketed.
        match ip.contains(&b':') {
            true => put(&mut bytes, &[b"for=\"[", ip, b"]\""]),
            false => put(&mut bytes, &[b"for=", ip]),
        }
        PeerText { bytes, ip_end, lines_end, scheme }
    }

    /// The address as text.
    pub fn ip(&self) -> &[u8] {
        self.bytes.get(..self.ip_end).unwrap_or_default()
    }

    fn lines(&self) -> &[u8] {
        self.bytes.get(self.ip_end..self.lines_end).unwrap_or_default()
    }

    fn for_param(&self) -> &[u8] {
        self.bytes.get(self.lines_end..).unwrap_or_default()
    }
}

/// What the origin gets to know about the client, and the backend the request goes to.
pub struct Forwarding<'a> {
    /// The peer that sent the request.
    pub peer: &'a PeerText,
    /// The peer is a trusted proxy: the forwarding headers it sent are extended, not
    /// replaced.
    pub trusted: bool,
    /// From a trusted proxy, the client's address as far as trusted proxies say, for
    /// `X-Real-IP` (otherwise the peer's own goes there).
    pub real_ip: &'a [u8],
    /// The backend's address, the `Host` of last resort (an HTTP/1.0 request without one).
    pub backend: SocketAddr,
}

/// Writes the head of `req` as it goes to the origin: origin-form target, HTTP/1.1,
/// the client's own header lines but those holdfast writes itself, then `Host`, the
/// framing, the forwarding headers and, for an upgrade, `Connection` and `Upgrade`.
pub fn upstream_request(req: &Request<'_, '_>, fwd: &Forwarding<'_>, out: &mut Vec<u8>) {
    out.reserve(req.head_len.saturating_add(256));
    put(out, &[req.method.as_bytes(), b" "]);
    if req.path.slash {
        out.push(b'/');
    }
    put(out, &[req.path.rest, b" HTTP/1.1\r\n"]);
    if req.version == Version::Http2 {
        h2_fields(req, out);
    } else {
        copy_headers(req.raw, req.headers, |i| !req.dropped.contains(i), out);
    }
    match req.host {
        Some(host) => header(out, b"host", host),
        None => {
            out.extend_from_slice(b"host: ");
            // A socket address is always valid header text.
            out.extend_from_slice(fwd.backend.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    body_framing(req.framing, out);
    forwarding_headers(req, fwd, out);
    if let Some(protocol) = req.upgrade {
        put(out, &[b"connection: upgrade\r\nupgrade: ", protocol, b"\r\n"]);
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes, as HTTP/1.1 text, a request head made for an HTTP/2 origin whose backend
/// turned out to speak HTTP/1.1 (ALPN chose it): its fields are already those the
/// origin gets, the forwarding headers included; `host` from `:authority`, the body
/// `framing` holdfast writes, `cookie` fields joined (RFC 9113, 8.2.3) and `te` left
/// out (it is hop-by-hop).
pub fn request_from_h2<'f>(
    method: &str,
    authority: &[u8],
    path: &[u8],
    fields: impl Iterator<Item = (&'f [u8], &'f [u8])> + Clone,
    framing: Framing,
    out: &mut Vec<u8>,
) {
    out.clear();
    let target = if path.is_empty() { b"/" } else { path };
    put(out, &[method.as_bytes(), b" ", target, b" HTTP/1.1\r\n"]);
    if !authority.is_empty() {
        header(out, b"host", authority);
    }
    cookie_line(fields.clone().filter(|(name, _)| *name == b"cookie").map(|(_, v)| v), out);
    for (name, value) in fields {
        if name != b"cookie" && name != b"te" {
            header(out, name, value);
        }
    }
    body_framing(framing.for_http1(), out);
    out.extend_from_slice(b"\r\n");
}

/// The fields of a request that came over HTTP/2, as HTTP/1.1 lines: its `cookie`
/// fields joined into one (RFC 9113, 8.2.3).
fn h2_fields(req: &Request<'_, '_>, out: &mut Vec<u8>) {
    let mut cookies_written = false;
    for (i, h) in req.headers.iter().enumerate() {
        if req.dropped.contains(i) {
            continue;
        }
        if h.name != "cookie" {
            header(out, h.name.as_bytes(), h.value);
        } else if !std::mem::replace(&mut cookies_written, true) {
            // All of them, where the first was.
            let all = req.headers.iter().filter(|c| c.name == "cookie").map(|c| c.value);
            cookie_line(all, out);
        }
    }
}

/// One `cookie` line of `values` joined by `; ` (RFC 9113, 8.2.3), if there are any.
fn cookie_line<'v>(mut values: impl Iterator<Item = &'v [u8]>, out: &mut Vec<u8>) {
    let Some(first) = values.next() else { return };
    put(out, &[b"cookie: ", first]);
    for more in values {
        put(out, &[b"; ", more]);
    }
    out.extend_from_slice(b"\r\n");
}

/// The framing header of a body framed as `framing` (never `UntilClose` here).
fn body_framing(framing: Framing, out: &mut Vec<u8>) {
    match framing {
        Framing::Length(n) => content_length(n, out),
        Framing::Chunked | Framing::Stream => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n")
        }
        Framing::Empty | Framing::UntilClose => {}
    }
}

fn content_length(n: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let digits = decimal(n, &mut buf);
    // One reservation for the three pieces: this line is on most responses.
    out.reserve(digits.len().saturating_add(18));
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(digits);
    out.extend_from_slice(b"\r\n");
}

/// `X-Forwarded-For`, `-Proto`, `-Host`, `Forwarded` and `X-Real-IP`. From a peer that
/// is not a trusted proxy, what it sent is replaced: every value names this hop's
/// view. From a trusted proxy, the lists (`X-Forwarded-For`, `Forwarded`) are extended
/// with this hop, its `-Proto` and `-Host` are kept, and `X-Real-IP` names the client
/// the trusted proxies name (see `proxy::forwarded`).
pub(crate) fn forwarding_headers(req: &Request<'_, '_>, fwd: &Forwarding<'_>, out: &mut Vec<u8>) {
    let peer = fwd.peer;
    if fwd.trusted {
        extended_forwarding_headers(req, fwd, out);
    } else {
        out.extend_from_slice(peer.lines());
        if let Some(host) = req.host {
            header(out, b"x-forwarded-host", host);
        }
        out.extend_from_slice(b"forwarded: ");
    }
    out.extend_from_slice(peer.for_param());
    if let Some(host) = req.host.filter(|h| !h.is_empty()) {
        // A valid Host holds no quote or backslash, so it needs no escaping.
        put(out, &[b";host=\"", host, b"\""]);
    }
    put(out, &[b";proto=", fwd.peer.scheme, b"\r\n"]);
}

/// The forwarding headers of a request from a trusted proxy, up to this hop's
/// `Forwarded` element: its lists extended, its `-Proto` and `-Host` kept.
fn extended_forwarding_headers(req: &Request<'_, '_>, fwd: &Forwarding<'_>, out: &mut Vec<u8>) {
    let prior = |name: Name| {
        req.headers
            .iter()
            .filter(move |h| Name::of(h.name) == name)
            .map(|h| super::trim_ows(h.value))
    };
    out.extend_from_slice(b"x-forwarded-for: ");
    for value in prior(Name::XForwardedFor).filter(|v| !v.is_empty()) {
        put(out, &[value, b", "]);
    }
    put(out, &[fwd.peer.ip(), b"\r\nx-forwarded-proto: "]);
    let kept = |name| prior(name).find(|v| !v.is_empty());
    put(out, &[kept(Name::XForwardedProto).unwrap_or(fwd.peer.scheme), b"\r\n"]);
    header(out, b"x-real-ip", fwd.real_ip);
    if let Some(host) = kept(Name::XForwardedHost).or(req.host) {
        header(out, b"x-forwarded-host", host);
    }
    out.extend_from_slice(b"forwarded: ");
    for value in prior(Name::Forwarded).filter(|v| !v.is_empty()) {
        put(out, &[value, b", "]);
    }
}

/// How the response body travels to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyOut {
    /// In its own framing: its length, or chunked (with holdfast's chunk framing and
    /// the trailers that may pass).
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
            (Framing::Chunked, Version::Http11 | Version::Http2) => BodyOut::Same,
            (Framing::UntilClose | Framing::Stream, Version::Http11 | Version::Http2) => {
                BodyOut::Rechunked
            }
            (Framing::Chunked | Framing::UntilClose | Framing::Stream, Version::Http10) => {
                BodyOut::CloseDelimited
            }
        }
    }

    /// Whether the client gets chunk framing.
    pub fn is_chunked(self, upstream: Framing) -> bool {
        match self {
            BodyOut::Same => matches!(upstream, Framing::Chunked | Framing::Stream),
            BodyOut::Rechunked => true,
            BodyOut::CloseDelimited => false,
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
            (true, Version::Http11 | Version::Http2) => ConnectionOut::KeepAlive,
        }
    }
}

/// Writes the head of the origin's `resp` as the client gets it: its status line and
/// end-to-end header lines, then the framing holdfast writes (RFC 9112, 6.3 and RFC
/// 9110, 8.6: none for 1xx and 204; for a response to HEAD and a 304 the origin's
/// `Content-Length`, which there describes the representation).
/// The head of the origin's response `resp` as the client gets it; `extra` header
/// lines (each ending in CRLF) are added.
pub fn client_response(
    resp: &Response<'_, '_>,
    body: BodyOut,
    connection: ConnectionOut,
    extra: &[u8],
    out: &mut Vec<u8>,
) {
    out.reserve(resp.head_len.saturating_add(64));
    let line_end = resp.raw.iter().position(|b| *b == b'\n').map_or(0, |at| at.saturating_add(1));
    match resp.raw.get(..line_end) {
        // An HTTP/1.1 status line goes on as it came.
        Some(line) if line.starts_with(b"HTTP/1.1 ") && line.ends_with(b"\r\n") => {
            out.extend_from_slice(line)
        }
        // HTTP/2 has no reason phrase: the status's own name goes with it.
        _ if resp.reason.is_empty() => {
            let status = http::StatusCode::from_u16(resp.status).ok();
            let reason = status.and_then(|s| s.canonical_reason()).unwrap_or("");
            status_line(out, resp.status, reason)
        }
        _ => status_line(out, resp.status, resp.reason),
    }
    let chunked = body.is_chunked(resp.framing);
    let keep = |i| !resp.dropped.contains(i) && (chunked || !resp.trailer_lines.contains(i));
    copy_headers(resp.raw, resp.headers, keep, out);
    match resp.framing {
        _ if chunked => {
            out.extend_from_slice(b"transfer-encoding: ");
            // A coding such as gzip stays; chunked is holdfast's own.
            for coding in &resp.codings {
                put(out, &[coding, b", "]);
            }
            out.extend_from_slice(b"chunked\r\n");
        }
        Framing::Length(n) => content_length(n, out),
        Framing::Empty if resp.status == 204 || (100..200).contains(&resp.status) => {}
        Framing::Empty => {
            if let Some(n) = resp.content_length {
                content_length(n, out);
            }
        }
        Framing::Chunked | Framing::UntilClose | Framing::Stream => {}
    }
    out.extend_from_slice(extra);
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
    local_response_with(status, text, b"", connection, out);
}

/// [`local_response`] with `extra` header lines (each ending in CRLF), such as a
/// `Location` or `Strict-Transport-Security`.
pub fn local_response_with(
    status: u16,
    text: &str,
    extra: &[u8],
    connection: ConnectionOut,
    out: &mut Vec<u8>,
) {
    let reason =
        http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    status_line(out, status, reason);
    out.extend_from_slice(extra);
    out.extend_from_slice(b"content-type: text/plain; charset=utf-8\r\n");
    content_length(text.len() as u64, out);
    end_head(out, true, connection);
    out.extend_from_slice(text.as_bytes());
}

/// `data` as one chunk of a chunked body (RFC 9112, 7.1): its size line (written into
/// `size_line`), the data, and the line end that closes it.
pub fn chunk<'a>(data: &'a [u8], size_line: &'a mut [u8; 18]) -> [&'a [u8]; 3] {
    [chunk_size_line(data.len(), size_line), data, b"\r\n"]
}

/// The size line that starts a chunk of `len` bytes, written into `buf`.
pub fn chunk_size_line(len: usize, buf: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut n = len;
    let mut start = 16usize;
    for slot in buf.iter_mut().take(16).rev() {
        *slot = HEX.get(n & 0xf).copied().unwrap_or(b'0');
        start = start.saturating_sub(1);
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    if let Some(end) = buf.get_mut(16..) {
        end.copy_from_slice(b"\r\n");
    }
    buf.get(start..).unwrap_or_default()
}

fn status_line(out: &mut Vec<u8>, status: u16, reason: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    put_decimal(u64::from(status), out);
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

/// Appends the decimal digits of `n`.
fn put_decimal(n: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(decimal(n, &mut digits));
}

/// The decimal digits of `n`, written at the end of `buf`.
fn decimal<const N: usize>(mut n: u64, buf: &mut [u8; N]) -> &[u8] {
    let mut len = 0usize;
    for slot in buf.iter_mut().rev() {
        // A digit is below 10, so the OR adds it to b'0' (0x30).
        *slot = b'0' | (n % 10) as u8;
        len = len.saturating_add(1);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.get(N.saturating_sub(len)..).unwrap_or_default()
}
