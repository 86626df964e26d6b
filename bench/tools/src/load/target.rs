//! Parses `http://IP:PORT/path` (or `https://` for the modes that speak TLS) into where to
//! connect and what to request.
//!
//! Only loopback addresses are accepted: these tools are for benchmarks on one machine and
//! must not put load on anything else. No DNS: the host is an IP literal.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http::header::{HeaderValue, CONNECTION, HOST};
use http::{Request, Uri};
use http_body_util::Empty;

/// Where the load goes: one loopback address and one request target.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    path_and_query: Uri,
    host: HeaderValue,
}

/// Why a `--url` was rejected.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("invalid URL {url:?}: {source}")]
    Syntax { url: String, source: http::uri::InvalidUri },
    #[error("URL {url:?} must start with {scheme}://")]
    Scheme { url: String, scheme: &'static str },
    #[error("URL {url:?} must name an IP address (no DNS), e.g. http://127.0.0.1:8080/tiny")]
    NotAnIp { url: String },
    #[error("URL {url:?} is not a loopback address; bench-load only sends to 127.0.0.0/8 or ::1")]
    NotLoopback { url: String },
}

impl Target {
    /// An `http://` URL.
    pub fn parse(url: &str) -> Result<Self, TargetError> {
        Self::parse_scheme(url, "http", 80)
    }

    /// An `https://` URL; the TLS server name is the address ([`Target::addr`]).
    pub fn parse_https(url: &str) -> Result<Self, TargetError> {
        Self::parse_scheme(url, "https", 443)
    }

    fn parse_scheme(url: &str, scheme: &'static str, port: u16) -> Result<Self, TargetError> {
        let uri: Uri =
            url.parse().map_err(|source| TargetError::Syntax { url: url.to_owned(), source })?;
        let wrong_scheme = || TargetError::Scheme { url: url.to_owned(), scheme };
        if uri.scheme_str() != Some(scheme) {
            return Err(wrong_scheme());
        }
        let authority = uri.authority().ok_or_else(wrong_scheme)?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = host.parse().map_err(|_| TargetError::NotAnIp { url: url.to_owned() })?;
        if !ip.is_loopback() {
            return Err(TargetError::NotLoopback { url: url.to_owned() });
        }
        let addr = SocketAddr::new(ip, authority.port_u16().unwrap_or(port));
        let path_and_query = uri.path_and_query().map_or("/", |pq| pq.as_str());
        Ok(Self {
            addr,
            path_and_query: path_and_query.parse().expect("a part of a valid URI is a valid URI"),
            host: HeaderValue::from_str(authority.as_str())
                .expect("a valid authority is a valid header value"),
        })
    }

    /// The same target with another path, e.g. `/__origin/stats`.
    pub fn with_path(&self, path_and_query: &str) -> Result<Self, TargetError> {
        Self::parse(&format!("http://{}{path_and_query}", self.addr))
    }

    /// A keep-alive GET for this target as it goes on the wire, for the raw client
    /// ([`super::raw`]): `GET {path} HTTP/1.1`, the URL's `Host`, and nothing else.
    pub fn get_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_get(self.host.as_bytes(), &mut out);
        out
    }

    /// Appends a keep-alive GET for this target with `host` as its `Host` header to `out`;
    /// with a reused `out`, nothing is allocated once it is large enough.
    pub fn write_get(&self, host: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(self.path_and_query().as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(host);
        out.extend_from_slice(b"\r\n\r\n");
    }

    /// The URL as an absolute URI (`http://IP:PORT/path`), as an HTTP/2 request carries
    /// it (`:scheme`, `:authority`, `:path`).
    pub fn absolute_uri(&self) -> Uri {
        let host = self.host.to_str().expect("built from a valid authority, so ASCII");
        format!("http://{host}{}", self.path_and_query())
            .parse()
            .expect("a scheme, a valid authority and a valid path make a valid URI")
    }

    /// The URL's authority (`IP:PORT` as written).
    pub fn authority(&self) -> &[u8] {
        self.host.as_bytes()
    }

    /// The request target: the URL's path and query, `/` if it has none.
    pub fn path_and_query(&self) -> &str {
        self.path_and_query.path_and_query().map_or("/", |pq| pq.as_str())
    }

    /// A GET for this target; `close` adds `Connection: close`.
    pub fn request(&self, close: bool) -> Request<Empty<Bytes>> {
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = self.path_and_query.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        if close {
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_loopback_url_with_path_and_query() {
        let target = Target::parse("http://127.0.0.1:8080/slow?ms=20").expect("valid");
        assert_eq!(target.addr, "127.0.0.1:8080".parse().expect("addr"));
        let request = target.request(true);
        assert_eq!(request.uri(), "/slow?ms=20");
        assert_eq!(request.headers()[HOST], "127.0.0.1:8080");
        assert_eq!(request.headers()[CONNECTION], "close");
    }

    #[test]
    fn defaults_to_port_80_and_root_path() {
        let target = Target::parse("http://[::1]").expect("valid");
        assert_eq!(target.addr, "[::1]:80".parse().expect("addr"));
        assert_eq!(target.request(false).uri(), "/");
    }

    #[test]
    fn get_bytes_are_the_request_line_and_host_only() {
        let target = Target::parse("http://127.0.0.1:8080/slow?ms=20").expect("valid");
        assert_eq!(target.get_bytes(), b"GET /slow?ms=20 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
        let root = Target::parse("http://[::1]:81").expect("valid");
        assert_eq!(root.get_bytes(), b"GET / HTTP/1.1\r\nHost: [::1]:81\r\n\r\n");
    }

    #[test]
    fn write_get_appends_a_request_with_another_host() {
        let target = Target::parse("http://127.0.0.1:8080/tiny").expect("valid");
        let mut out = b"before".to_vec();
        target.write_get(b"app7.bench", &mut out);
        assert_eq!(out, b"beforeGET /tiny HTTP/1.1\r\nHost: app7.bench\r\n\r\n");
    }

    #[test]
    fn rejects_names_other_schemes_and_remote_addresses() {
        assert!(matches!(Target::parse("http://localhost:80/"), Err(TargetError::NotAnIp { .. })));
        assert!(matches!(Target::parse("https://127.0.0.1/"), Err(TargetError::Scheme { .. })));
        assert!(matches!(Target::parse("http://10.0.0.1/"), Err(TargetError::NotLoopback { .. })));
    }

    #[test]
    fn https_urls_default_to_port_443_and_stay_on_loopback() {
        let target = Target::parse_https("https://127.0.0.1/tiny").expect("valid");
        assert_eq!(target.addr, "127.0.0.1:443".parse().expect("addr"));
        assert_eq!(target.request(true).uri(), "/tiny");
        let refused = Target::parse_https("http://127.0.0.1/");
        assert!(matches!(refused, Err(TargetError::Scheme { scheme: "https", .. })));
        let remote = Target::parse_https("https://192.0.2.1/");
        assert!(matches!(remote, Err(TargetError::NotLoopback { .. })));
    }
}
