//! The TOML file exactly as written: serde structs, nothing else reads them.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// A `holdfast.toml` before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub threads: Option<Spanned<i64>>,
    #[serde(default)]
    pub listener: Vec<FileListener>,
    #[serde(default)]
    pub route: Vec<FileRoute>,
    #[serde(default)]
    pub upstream: BTreeMap<Spanned<String>, FileUpstream>,
    pub pool: Option<FilePool>,
    pub timeouts: Option<FileTimeouts>,
    pub limits: Option<FileLimits>,
    pub buffering: Option<FileBuffering>,
    /// Present (even empty): the admin listener is on.
    pub admin: Option<FileAdmin>,
    pub access_log: Option<FileAccessLog>,
    /// `"text"` or `"json"`: how holdfast's own log lines (stderr) look.
    pub log_format: Option<Spanned<String>>,
    /// Networks (`"10.0.0.0/8"`) whose forwarding headers are believed.
    pub trusted_proxies: Option<Spanned<Vec<Spanned<String>>>>,
    /// Present (even empty): certificates from an ACME CA.
    pub acme: Option<FileAcme>,
    /// Files to take in: glob patterns relative to this file's directory.
    pub include: Option<Spanned<Vec<Spanned<String>>>>,
    /// Certificates every TLS listener serves, picked by SNI.
    #[serde(default)]
    pub certificate: Vec<FileCertPair>,
    /// Present (even empty): groups and routes from the labels of Docker containers.
    pub docker: Option<FileDocker>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDocker {
    pub endpoint: Option<Spanned<String>>,
    pub network: Option<Spanned<String>>,
    pub exposed_by_default: Option<Spanned<bool>>,
    pub resync: Option<Spanned<String>>,
    pub drain_timeout: Option<Spanned<String>>,
}

/// A file that another one `include`s: groups, routes and certificates only.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileIncluded {
    pub include: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub upstream: BTreeMap<Spanned<String>, FileUpstream>,
    #[serde(default)]
    pub route: Vec<FileRoute>,
    #[serde(default)]
    pub certificate: Vec<FileCertPair>,
}

/// A byte size as written: a number of bytes, or text with a unit (`"10MB"`).
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a size: a number of bytes, or a string like \"10MB\"")]
pub enum FileSize {
    Bytes(i64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileListener {
    pub address: Spanned<String>,
    /// Where requests no `[[route]]` matches go; without it they get 404.
    pub upstream: Option<Spanned<String>>,
    pub client_max_body: Option<Spanned<FileSize>>,
    /// Connections the kernel may hold for holdfast to accept (`listen()`'s backlog).
    pub backlog: Option<Spanned<i64>>,
    /// HTTPS on this listener.
    pub tls: Option<FileListenerTls>,
    /// `true` (port 443) or a port: answer every request with a 308 to HTTPS.
    pub redirect_https: Option<Spanned<FileRedirect>>,
    /// `Strict-Transport-Security` max-age on HTTPS responses (`"365d"`).
    pub hsts: Option<Spanned<String>>,
    /// Accept HTTP/2 with prior knowledge on this cleartext listener.
    pub h2c: Option<Spanned<bool>>,
    /// Offer HTTP/2 by ALPN on this TLS listener (default true).
    pub http2: Option<Spanned<bool>>,
}

/// `[listener.tls]`: one pair (`cert`, `key`), several (`certificates`), and/or the
/// certificates `[acme]` obtains.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileListenerTls {
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    #[serde(default)]
    pub certificates: Vec<FileCertPair>,
    pub acme: Option<Spanned<bool>>,
}

/// A certificate chain file and its key file (PEM).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCertPair {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
}

/// `redirect_https = true` or `= 8443`.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "true, or the HTTPS port to redirect to")]
pub enum FileRedirect {
    On(bool),
    Port(i64),
}

/// An upstream's `tls`: `true` (verify against the system roots), or a table.
#[derive(Debug)]
pub enum FileUpstreamTls {
    On(bool),
    Table(FileUpstreamTlsTable),
}

/// By hand rather than `untagged`: an untagged enum buffers its input and so loses the
/// positions the table's `Spanned` keys need; this hands the table on as it came.
impl<'de> Deserialize<'de> for FileUpstreamTls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UpstreamTlsVisitor)
    }
}

struct UpstreamTlsVisitor;

impl<'de> serde::de::Visitor<'de> for UpstreamTlsVisitor {
    type Value = FileUpstreamTls;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "true, or a table with server_name, ca, insecure_skip_verify, client_cert, client_key",
        )
    }

    fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<FileUpstreamTls, E> {
        Ok(FileUpstreamTls::On(on))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<FileUpstreamTls, A::Error> {
        let table =
            FileUpstreamTlsTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        Ok(FileUpstreamTls::Table(table))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileUpstreamTlsTable {
    pub server_name: Option<Spanned<String>>,
    pub ca: Option<Spanned<String>>,
    pub insecure_skip_verify: Option<Spanned<bool>>,
    pub client_cert: Option<Spanned<String>>,
    pub client_key: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRoute {
    /// `"api.example.com"`, `"*.example.com"`; absent: any host.
    pub host: Option<Spanned<String>>,
    /// A path prefix; absent: `"/"`.
    pub path: Option<Spanned<String>>,
    pub upstream: Spanned<String>,
    pub client_max_body: Option<Spanned<FileSize>>,
    /// Response buffering on this route (over `[buffering] responses`).
    pub buffer_responses: Option<Spanned<bool>>,
    /// Request buffering on this route (over `[buffering] requests`).
    pub buffer_requests: Option<Spanned<bool>>,
    pub listeners: Option<Spanned<Vec<Spanned<String>>>>,
    pub redirect_https: Option<Spanned<FileRedirect>>,
    pub hsts: Option<Spanned<String>>,
    pub hsts_include_subdomains: Option<Spanned<bool>>,
    pub hsts_preload: Option<Spanned<bool>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub read_timeout: Option<Spanned<String>>,
    pub access_log: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileUpstream {
    pub servers: Spanned<Vec<Spanned<String>>>,
    pub source_address: Option<Spanned<String>>,
    /// `"p2c"`, `"least_outstanding"` or `"round_robin"`.
    pub balance: Option<Spanned<String>>,
    /// How often server names are resolved again.
    pub resolve_interval: Option<Spanned<String>>,
    pub pool: Option<FilePool>,
    pub health: Option<FileHealth>,
    pub health_check: Option<FileHealthCheck>,
    pub tls: Option<Spanned<FileUpstreamTls>>,
    /// `"http1"`, `"h2"`, `"h2c"` or `"auto"`.
    pub protocol: Option<Spanned<String>>,
    /// How often an idle HTTP/2 connection is pinged (off when absent).
    pub h2_ping_interval: Option<Spanned<String>>,
}

/// Passive health: what takes a server out of service, and for how long.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileHealth {
    pub max_connect_failures: Option<Spanned<i64>>,
    pub max_5xx: Option<Spanned<i64>>,
    pub ejection: Option<Spanned<String>>,
    pub max_ejection: Option<Spanned<String>>,
    pub slow_start: Option<Spanned<String>>,
    /// A percentage, 0 to 100.
    pub panic_threshold: Option<Spanned<i64>>,
}

/// Active health checks: a request holdfast sends each server on its own.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileHealthCheck {
    pub path: Spanned<String>,
    pub interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub expect_status: Option<Spanned<i64>>,
    pub host: Option<Spanned<String>>,
    pub healthy: Option<Spanned<i64>>,
    pub unhealthy: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePool {
    pub idle_timeout: Option<Spanned<String>>,
    pub max_requests: Option<Spanned<i64>>,
    pub max_lifetime: Option<Spanned<String>>,
    pub max_idle_per_server: Option<Spanned<i64>>,
    pub max_connections_per_server: Option<Spanned<i64>>,
    pub queue_size: Option<Spanned<i64>>,
    pub queue_timeout: Option<Spanned<String>>,
    /// Only in the top-level `[pool]`: idle connections across all backends.
    pub max_idle_total: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTimeouts {
    pub connect: Option<Spanned<String>>,
    pub response_header: Option<Spanned<String>>,
    pub read: Option<Spanned<String>>,
    pub client_header: Option<Spanned<String>>,
    pub client_idle: Option<Spanned<String>>,
    pub client_body: Option<Spanned<String>>,
    pub client_buffered: Option<Spanned<String>>,
    pub drain: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileLimits {
    pub max_request_headers: Option<Spanned<i64>>,
    pub max_request_header_bytes: Option<Spanned<i64>>,
    pub max_request_line_bytes: Option<Spanned<i64>>,
    pub client_max_body: Option<Spanned<FileSize>>,
    pub client_body_min_bytes_per_second: Option<Spanned<i64>>,
    /// Streams one HTTP/2 client connection may have open at once.
    pub h2_max_concurrent_streams: Option<Spanned<i64>>,
}

/// `[buffering]`: which bodies holdfast holds for the slower side, and where.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileBuffering {
    pub responses: Option<Spanned<bool>>,
    pub requests: Option<Spanned<bool>>,
    pub memory_per_exchange: Option<Spanned<FileSize>>,
    pub file_per_exchange: Option<Spanned<FileSize>>,
    pub memory_total: Option<Spanned<FileSize>>,
    /// A size, or `"auto"`.
    pub file_total: Option<Spanned<FileSize>>,
    pub temp_dir: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAdmin {
    pub address: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAccessLog {
    /// `"off"`, `"stdout"` or a file path.
    pub target: Option<Spanned<String>>,
    /// `"json"` or `"text"`.
    pub format: Option<Spanned<String>>,
}

/// Certificates from an ACME CA.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAcme {
    /// An `https://` directory URL, `"letsencrypt"` or `"letsencrypt-staging"`.
    pub directory: Option<Spanned<String>>,
    /// An email address for the CA.
    pub contact: Option<Spanned<String>>,
    /// Where the account and certificates are kept.
    pub storage: Option<Spanned<String>>,
    /// The names to get certificates for; absent: the routes' exact hosts.
    pub names: Option<Spanned<Vec<Spanned<String>>>>,
    /// `"tls-alpn-01"` or `"http-01"`.
    pub challenge: Option<Spanned<String>>,
    /// `"placeholder"` or `"refuse"`: what a name serves until issuance.
    pub pending: Option<Spanned<String>>,
    /// A root certificate (PEM file) to trust for the directory, besides the system's.
    pub ca: Option<Spanned<String>>,
    /// The fraction of a certificate's lifetime after which it is renewed.
    pub renew_at: Option<Spanned<f64>>,
}
