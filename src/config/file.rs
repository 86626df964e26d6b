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
    pub upstream: BTreeMap<Spanned<String>, FileUpstream>,
    pub pool: Option<FilePool>,
    pub timeouts: Option<FileTimeouts>,
    pub limits: Option<FileLimits>,
    /// Present (even empty): the admin listener is on.
    pub admin: Option<FileAdmin>,
    pub access_log: Option<FileAccessLog>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileListener {
    pub address: Spanned<String>,
    pub upstream: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileUpstream {
    pub servers: Spanned<Vec<Spanned<String>>>,
    pub source_address: Option<Spanned<String>>,
    pub pool: Option<FilePool>,
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
    pub drain: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileLimits {
    pub max_request_headers: Option<Spanned<i64>>,
    pub max_request_header_bytes: Option<Spanned<i64>>,
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
