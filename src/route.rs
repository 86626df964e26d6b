//! Decides which upstream a request goes to, from its host and path: a pure lookup, no I/O.
//!
//! # Matching rules
//!
//! - **Host.** The host the request is for, as the request parser resolved it: an
//!   absolute-form target's authority, which RFC 9112 section 3.2.2 says overrides
//!   `Host`, else the `Host` header. Compared ASCII case-insensitively, without its
//!   `:port` and without one trailing dot. A bracketed IPv6 literal is compared in its
//!   canonical text form (RFC 5952), so `[0:0::1]` and `[::1]` are one host. A missing or
//!   empty host, or one longer than 256 bytes, matches only routes for any host.
//! - **Path.** The origin-form target (`/a/b?q`, which an absolute-form target has been
//!   reduced to) up to `?` (or `#`); for `*` (`OPTIONS *`), `/`. Other targets match no
//!   route.
//! - **Prefixes end on segment boundaries.** `/api` matches `/api`, `/api/` and `/api/x`,
//!   never `/apix`. A prefix ending in `/` (`/api/`) matches paths that start with it, so
//!   not `/api`. `/` matches every path.
//! - **Precedence.** Host classes are tried from most specific to least: the exact host,
//!   then wildcard suffixes from longest to shortest, then any host. The first class with
//!   a route whose prefix matches the path decides, and within it the longest matching
//!   prefix wins. A class whose host matches but whose paths do not passes the request on
//!   to the next class, so `api.example.com` with `/v1` plus a catch-all sends
//!   `api.example.com/other` to the catch-all.
//! - **Duplicates.** Of two routes with the same host pattern and prefix, the first one
//!   configured wins; the config validator reports the duplicate.
//!
//! Routing is not access control. Paths are compared as raw bytes, without percent-decoding
//! or dot-segment removal, so a route for `/admin` does not catch `/%61dmin` or
//! `/x/../admin`, which another route then forwards and an origin that decodes them may
//! serve as `/admin`. Checks on who may reach a path belong in the origin, on the decoded
//! path.
//!
//! A lookup allocates nothing: the host is lowercased into a stack buffer and looked up
//! in a map of exact hosts, then checked against the wildcard suffixes, and each class's
//! prefixes are kept longest first so the first match is the longest.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::net::Ipv6Addr;

/// Room for a normalized request host. DNS names stop at 253 bytes, so a longer host can
/// name no configured route and is treated as absent.
const MAX_HOST_BYTES: usize = 256;

/// The longest host name a route may name: the DNS limit for a name in text form.
const MAX_NAME_BYTES: usize = 253;

/// How a route matches the request's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Any host (route without `host`, or host = "*").
    Any,
    /// One host name, stored lowercase without trailing dot, e.g. `api.example.com`; may be
    /// an IP literal (`10.0.0.1`, `[::1]`), IPv6 in its canonical form.
    Exact(String),
    /// `*.example.com`: stored as the suffix `.example.com` (lowercase). Matches
    /// `a.example.com` and `a.b.example.com`, never `example.com` itself.
    Suffix(String),
}

impl HostPattern {
    /// Parses a configured host: `api.example.com`, `*.example.com`, `*`, `10.0.0.1` or
    /// `[::1]`. The error says what is wrong, in words for the operator.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let bad = |why: String| format!("{text:?} is not a valid host: {why}");
        if text.is_empty() {
            return Err("the host is empty (write \"*\" to match any host)".to_owned());
        }
        if text == "*" {
            return Ok(HostPattern::Any);
        }
        if text.starts_with('[') {
            return parse_ipv6_literal(text).map(HostPattern::Exact).map_err(bad);
        }
        if text.contains(':') {
            return Err(bad(colon_message(text)));
        }
        let (is_wildcard, name) = match text.strip_prefix("*.") {
            Some(domain) => (true, domain),
            None => (false, text),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        check_name(name).map_err(bad)?;
        let name = name.to_ascii_lowercase();
        Ok(if is_wildcard {
            HostPattern::Suffix(format!(".{name}"))
        } else {
            HostPattern::Exact(name)
        })
    }
}

/// Checks a bracketed IPv6 literal and returns it in canonical form, the form lookups
/// compare against (see `write_canonical_ipv6`).
fn parse_ipv6_literal(text: &str) -> Result<String, String> {
    let Some(end) = text.find(']') else {
        return Err("an IPv6 address in brackets needs the closing ']'".to_owned());
    };
    let (literal, rest) = text.split_at(end + 1);
    if rest.starts_with(':') {
        return Err(port_message(literal));
    }
    if !rest.is_empty() {
        return Err(format!("unexpected {rest:?} after the IPv6 address"));
    }
    let inner = &literal[1..literal.len() - 1];
    let addr: Ipv6Addr = inner.parse().map_err(|_| format!("{inner:?} is not an IPv6 address"))?;
    Ok(format!("[{addr}]"))
}

/// Checks a host name (without any leading "*." and trailing dot).
fn check_name(name: &str) -> Result<(), String> {
    if let Some(c) = name.chars().find(|&c| !is_name_char(c)) {
        return Err(char_message(c));
    }
    if name.split('.').any(str::is_empty) {
        return Err(if name.starts_with('.') && name.len() > 1 {
            format!("it has an empty label (to match subdomains, write \"*{name}\")")
        } else {
            "it has an empty label (nothing between two dots)".to_owned()
        });
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!("a host name is at most {MAX_NAME_BYTES} characters long"));
    }
    Ok(())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')
}

/// Explains a ':' in a host: a port, or an IPv6 address without brackets.
fn colon_message(text: &str) -> String {
    match text.split_once(':') {
        Some((host, port)) if !port.contains(':') => port_message(host),
        _ if text.parse::<Ipv6Addr>().is_ok() => {
            format!("IPv6 addresses are written in brackets, as in \"[{text}]\"")
        }
        _ => char_message(':'),
    }
}

fn port_message(host: &str) -> String {
    if host.is_empty() {
        return "ports are not part of a host route".to_owned();
    }
    format!("ports are not part of a host route (write {host:?}; it matches every port)")
}

fn char_message(c: char) -> String {
    match c {
        '*' => "'*' can only be the whole first label, as in \"*.example.com\"".to_owned(),
        c if !c.is_ascii() => {
            format!("{c:?} is not allowed in a host name (write the name in its \"xn--\" form)")
        }
        c => format!("{c:?} is not allowed in a host name (use letters, digits, '-', '.' and '_')"),
    }
}

/// Checks a configured path prefix: must start with '/', no '?', '#', spaces or control
/// chars. Returns it unchanged on success.
///
/// Non-ASCII characters are refused too: clients send them percent-encoded, so a prefix
/// containing them as is could never match.
pub fn parse_path_prefix(text: &str) -> Result<String, String> {
    let bad = |why: String| format!("{text:?} is not a valid path prefix: {why}");
    if text.is_empty() {
        return Err("the path prefix is empty (write \"/\" to match every path)".to_owned());
    }
    if !text.starts_with('/') {
        return Err(bad(format!("it must start with '/', as in \"/{text}\"")));
    }
    let refused = |c: char| matches!(c, '?' | '#') || c.is_whitespace() || c.is_control();
    match text.chars().find(|&c| refused(c) || !c.is_ascii()) {
        Some('?') => Err(bad("routes match the path only, so it cannot contain '?'".to_owned())),
        Some('#') => {
            Err(bad("clients never send a '#' fragment, so it cannot contain '#'".to_owned()))
        }
        Some(c) => Err(bad(format!(
            "{c:?} cannot appear in a request path; write it percent-encoded, as clients send it"
        ))),
        None => Ok(text.to_owned()),
    }
}

/// One configured route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route<T> {
    /// The hosts the route serves.
    pub host: HostPattern,
    /// A path prefix as `parse_path_prefix` accepts it.
    pub path: String,
    /// What a matching request goes to.
    pub target: T,
}

/// All routes, compiled for lookup.
#[derive(Debug)]
pub struct Router<T> {
    /// Keyed by the host as `HostPattern::Exact` stores it, which is also the form
    /// `normalize_host` produces, so a lookup needs no conversion.
    exact: HashMap<Box<[u8]>, Class<T>>,
    /// Longest suffix first, so the most specific wildcard is tried first.
    suffixes: Vec<SuffixClass<T>>,
    any: Class<T>,
    len: usize,
}

/// The routes of one wildcard host pattern.
#[derive(Debug)]
struct SuffixClass<T> {
    /// Lowercase, with its leading dot: ".example.com".
    suffix: Box<[u8]>,
    class: Class<T>,
}

impl<T> SuffixClass<T> {
    /// The host must be longer than the suffix: "*.example.com" names subdomains only.
    fn matches(&self, host: &[u8]) -> bool {
        host.len() > self.suffix.len() && host.ends_with(&self.suffix)
    }
}

/// The routes that share one host pattern.
#[derive(Debug)]
struct Class<T> {
    /// Longest prefix first, so the first match is the longest; no two share a prefix.
    routes: Vec<PathRoute<T>>,
}

#[derive(Debug)]
struct PathRoute<T> {
    prefix: Box<[u8]>,
    target: T,
}

impl<T> Class<T> {
    fn empty() -> Class<T> {
        Class { routes: Vec::new() }
    }

    /// Orders the routes longest prefix first and keeps only the first configured of
    /// routes with equal prefixes. Breaking length ties by the bytes puts equal prefixes
    /// next to each other for `dedup_by`, and the stable sort keeps the first one first.
    fn compile(&mut self) {
        let routes = &mut self.routes;
        routes.sort_by(|a, b| b.prefix.len().cmp(&a.prefix.len()).then(a.prefix.cmp(&b.prefix)));
        routes.dedup_by(|later, earlier| later.prefix == earlier.prefix);
    }

    fn find(&self, path: &[u8]) -> Option<&T> {
        let route = self.routes.iter().find(|r| is_prefix_match(&r.prefix, path))?;
        Some(&route.target)
    }
}

/// Whether `prefix` covers `path`, ending on a segment boundary.
fn is_prefix_match(prefix: &[u8], path: &[u8]) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with(b"/") || path.len() == prefix.len() || path[prefix.len()] == b'/')
}

impl<T> Router<T> {
    /// Compiles `routes`. When two routes have the same host pattern and path, the first
    /// one wins (the config validator reports duplicates separately). Host patterns are
    /// expected in the form `HostPattern::parse` returns.
    pub fn new(routes: Vec<Route<T>>) -> Router<T> {
        let mut router =
            Router { exact: HashMap::new(), suffixes: Vec::new(), any: Class::empty(), len: 0 };
        for route in routes {
            let path_route =
                PathRoute { prefix: route.path.into_bytes().into(), target: route.target };
            router.class_mut(route.host).routes.push(path_route);
        }
        router.exact.values_mut().for_each(Class::compile);
        router.suffixes.iter_mut().for_each(|s| s.class.compile());
        router.any.compile();
        // Two different suffixes of equal length never both match one host, so their
        // order does not matter.
        router.suffixes.sort_by_key(|s| Reverse(s.suffix.len()));
        let exact = router.exact.values();
        let classes = exact.chain(router.suffixes.iter().map(|s| &s.class)).chain([&router.any]);
        router.len = classes.map(|c| c.routes.len()).sum();
        router
    }

    /// The class for `host`, created empty if it is the first route with that pattern.
    fn class_mut(&mut self, host: HostPattern) -> &mut Class<T> {
        match host {
            HostPattern::Any => &mut self.any,
            HostPattern::Exact(host) => {
                self.exact.entry(host.into_bytes().into()).or_insert_with(Class::empty)
            }
            HostPattern::Suffix(suffix) => {
                let found = self.suffixes.iter().position(|s| *s.suffix == *suffix.as_bytes());
                let index = found.unwrap_or_else(|| {
                    let suffix = suffix.into_bytes().into();
                    self.suffixes.push(SuffixClass { suffix, class: Class::empty() });
                    self.suffixes.len() - 1
                });
                &mut self.suffixes[index].class
            }
        }
    }

    /// The target for a request for `host` (raw bytes as received, may be None) with the
    /// origin-form request target `target` ("/a/b?q", or "*").
    pub fn find(&self, host: Option<&[u8]>, target: &[u8]) -> Option<&T> {
        let path = route_path(target)?;
        let mut buf = [0; MAX_HOST_BYTES];
        let host = host.and_then(|h| normalize_host(h, &mut buf));
        self.lookup(host, path)
    }

    /// Tries the classes whose host pattern matches `host`, most specific first.
    fn lookup(&self, host: Option<&[u8]>, path: &[u8]) -> Option<&T> {
        if let Some(host) = host {
            let exact = self.exact.get(host).into_iter();
            let suffixes = self.suffixes.iter().filter(|s| s.matches(host)).map(|s| &s.class);
            if let Some(target) = exact.chain(suffixes).find_map(|class| class.find(path)) {
                return Some(target);
            }
        }
        self.any.find(path)
    }

    /// When the router has exactly one route and it is Any host with path "/", its
    /// target: callers use it to skip the lookup entirely (the fast path for a single
    /// upstream).
    pub fn only(&self) -> Option<&T> {
        if !self.exact.is_empty() || !self.suffixes.is_empty() {
            return None;
        }
        match self.any.routes.as_slice() {
            [route] if *route.prefix == *b"/" => Some(&route.target),
            _ => None,
        }
    }

    /// Number of routes, not counting duplicates that lost to an earlier route.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no routes, so every lookup returns None.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The path of an origin-form target that routing reads: before any query; `/` for
/// `*`; None for other forms.
fn route_path(target: &[u8]) -> Option<&[u8]> {
    if target == b"*" {
        return Some(b"/");
    }
    if !target.starts_with(b"/") {
        return None;
    }
    let end = target.iter().position(|&b| matches!(b, b'?' | b'#')).unwrap_or(target.len());
    Some(&target[..end])
}

/// Brings a raw host into the form routes store: lowercase, without port or trailing dot,
/// IPv6 canonical. Returns None for an empty host or one too long for `buf`.
fn normalize_host<'b>(raw: &[u8], buf: &'b mut [u8; MAX_HOST_BYTES]) -> Option<&'b [u8]> {
    let name = strip_port(raw.trim_ascii());
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty() || name.len() > buf.len() {
        return None;
    }
    if let Some(len) = write_canonical_ipv6(name, buf) {
        return Some(&buf[..len]);
    }
    let out = &mut buf[..name.len()];
    out.copy_from_slice(name);
    out.make_ascii_lowercase();
    Some(out)
}

/// A host without its `:port`. The colons inside a bracketed IPv6 literal belong to the
/// address, so there the port can only follow the closing bracket.
pub fn strip_port(host: &[u8]) -> &[u8] {
    let end = if host.starts_with(b"[") {
        host.iter().position(|&b| b == b']').map(|bracket| bracket + 1)
    } else {
        host.iter().position(|&b| b == b':')
    };
    &host[..end.unwrap_or(host.len())]
}

/// Writes a bracketed IPv6 literal in the canonical form `HostPattern::parse` stores
/// (`Ipv6Addr`'s display: RFC 5952, lowercase) and returns its length; None if `name` is
/// not one. Formatting an `Ipv6Addr` does not allocate.
fn write_canonical_ipv6(name: &[u8], buf: &mut [u8]) -> Option<usize> {
    let inner = name.strip_prefix(b"[")?.strip_suffix(b"]")?;
    let addr: Ipv6Addr = std::str::from_utf8(inner).ok()?.parse().ok()?;
    let mut out = SliceWriter { buf, len: 0 };
    write!(out, "[{addr}]").ok()?;
    Some(out.len)
}

/// Formats into a borrowed buffer, failing when it is full.
struct SliceWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let dest = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dest.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
