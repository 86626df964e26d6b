//! Answers a listener gives on its own behalf, before routing: the key authorization
//! of an ACME HTTP-01 challenge (on every listener, before redirects, so a redirecting
//! port can still be validated), the redirect of a cleartext listener to HTTPS, and the
//! `Strict-Transport-Security` line an HTTPS listener adds to responses.
//!
//! It decides from the request head alone; the exchange sends the answer.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use std::time::Duration;

use crate::http1::request::Request;
use crate::route;
use crate::tls::store::DynamicCerts;

/// The path prefix of ACME HTTP-01 challenges (RFC 8555, 8.3).
const CHALLENGE_PREFIX: &[u8] = b"/.well-known/acme-challenge/";

/// An answer the listener gives itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalAnswer {
    /// 200 with the key authorization of an HTTP-01 challenge.
    Challenge(String),
    /// 308 to this URL over HTTPS.
    Redirect(String),
    /// 400: the request has no host to redirect to (HTTP/1.0 without `Host`).
    NoHost,
}

impl LocalAnswer {
    /// Status, reason (for metrics and the access log), body, and extra header lines.
    pub fn response(&self) -> (u16, &'static str, String, String) {
        match self {
            LocalAnswer::Challenge(key) => (200, "acme_challenge", key.clone(), String::new()),
            LocalAnswer::Redirect(url) => {
                let body = format!("holdfast: this site is served over HTTPS: {url}\n");
                (308, "https_redirect", body, format!("location: {url}\r\n"))
            }
            LocalAnswer::NoHost => {
                let body = "holdfast: no Host header: cannot redirect to HTTPS\n".to_string();
                (400, "https_redirect_no_host", body, String::new())
            }
        }
    }
}

/// A `Strict-Transport-Security` announcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hsts {
    pub max_age: Duration,
    pub include_subdomains: bool,
    pub preload: bool,
}

impl Hsts {
    /// Just a max-age, as a listener's `hsts` says.
    pub fn max_age(max_age: Duration) -> Hsts {
        Hsts { max_age, include_subdomains: false, preload: false }
    }

    /// The header's value: `max-age=3600; includeSubDomains; preload`.
    pub fn value(&self) -> String {
        let mut value = format!("max-age={}", self.max_age.as_secs());
        if self.include_subdomains {
            value.push_str("; includeSubDomains");
        }
        if self.preload {
            value.push_str("; preload");
        }
        value
    }

    /// The header line, CRLF included.
    fn line(&self) -> Box<[u8]> {
        format!("strict-transport-security: {}\r\n", self.value()).into_bytes().into()
    }
}

/// What a listener answers itself: ACME's challenges, and where to redirect.
#[derive(Debug, Default, Clone)]
pub struct LocalRules {
    /// The HTTP-01 answers `[acme]` keeps (`None`: no ACME).
    pub acme: Option<std::sync::Arc<DynamicCerts>>,
    /// Redirect every other request to HTTPS on this port.
    pub redirect_https: Option<u16>,
    /// The `Strict-Transport-Security` line for responses (an HTTPS listener's only).
    pub hsts: Option<Box<[u8]>>,
}

impl LocalRules {
    /// The rules of a listener (or of a route on it): `hsts` is announced on an
    /// HTTPS listener only (`tls`), and a redirect made on a cleartext one only.
    pub fn new(
        acme: Option<std::sync::Arc<DynamicCerts>>,
        redirect_https: Option<u16>,
        hsts: Option<Hsts>,
        tls: bool,
    ) -> LocalRules {
        let hsts = hsts.filter(|_| tls).map(|h| h.line());
        let redirect_https = redirect_https.filter(|_| !tls);
        LocalRules { acme, redirect_https, hsts }
    }

    /// The answer the listener gives `req` itself, if it does.
    pub fn answer(&self, req: &Request<'_, '_>) -> Option<LocalAnswer> {
        if let Some(acme) = &self.acme {
            let token = req.path.rest.strip_prefix(CHALLENGE_PREFIX).filter(|_| !req.path.slash);
            if let Some(key) =
                token.and_then(|t| std::str::from_utf8(t).ok()).and_then(|t| acme.http_challenge(t))
            {
                return Some(LocalAnswer::Challenge(key));
            }
        }
        let port = self.redirect_https?;
        let Some(host) = req.host.filter(|h| !h.is_empty()) else {
            return Some(LocalAnswer::NoHost);
        };
        Some(LocalAnswer::Redirect(https_url(host, port, req)))
    }

    /// The HSTS line for a response, unless the origin's response has its own
    /// (`origin_has`).
    pub fn hsts_line(&self, origin_has: impl FnOnce() -> bool) -> &[u8] {
        match &self.hsts {
            Some(line) if !origin_has() => line,
            _ => b"",
        }
    }
}

/// `https://HOST[:PORT]PATH?QUERY` for `req`: the host without the port it came on,
/// the HTTPS port unless it is 443, and the target (`/` for `OPTIONS *`).
fn https_url(host: &[u8], port: u16, req: &Request<'_, '_>) -> String {
    let name = String::from_utf8_lossy(route::strip_port(host));
    let target = if req.path.slash {
        format!("/{}", String::from_utf8_lossy(req.path.rest))
    } else if req.path.rest == b"*" {
        "/".to_string()
    } else {
        String::from_utf8_lossy(req.path.rest).into_owned()
    };
    match port {
        443 => format!("https://{name}{target}"),
        port => format!("https://{name}:{port}{target}"),
    }
}
