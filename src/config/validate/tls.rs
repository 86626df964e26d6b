//! The TLS parts of a config file: a listener's `[listener.tls]`, `redirect_https` and
//! `hsts`, and an upstream's `tls` (with `https://` servers). Certificate files are
//! read here, so a file that cannot be served is a problem of the config that names it,
//! with its line and key, and a reload that names one keeps the config in force.

use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::file::{FileConfig, FileListenerTls, FileRedirect, FileUpstreamTls};
use super::Validator;
use crate::listener::ListenerConfig;
use crate::tls::certs::{self, CertPair};
use crate::tls::origin::{OriginTls, OriginTlsSettings};
use crate::tls::server::ListenerTls;

impl Validator<'_> {
    /// A listener's `[listener.tls]`; `None` after a problem.
    /// `shared`: the top-level `[[certificate]]`s, served after the listener's own.
    pub(super) fn listener_tls(
        &mut self,
        key: &str,
        raw: &FileListenerTls,
        shared: &[CertPair],
    ) -> Option<ListenerTls> {
        let key = format!("{key}.tls");
        let mut pairs = Vec::new();
        match (&raw.cert, &raw.key) {
            (Some(cert), Some(k)) => pairs.push(self.cert_pair(&key, ["cert", "key"], cert, k)?),
            (Some(v), None) => self.problem(v.span(), format!("{key}.key"), "`cert` needs `key`"),
            (None, Some(v)) => self.problem(v.span(), format!("{key}.cert"), "`key` needs `cert`"),
            (None, None) => {}
        }
        for (i, pair) in raw.certificates.iter().enumerate() {
            pairs.push(self.cert_pair(
                &format!("{key}.certificates[{i}]"),
                ["cert", "key"],
                &pair.cert,
                &pair.key,
            )?);
        }
        pairs.extend(shared.iter().cloned());
        let acme = raw.acme.as_ref().is_some_and(|v| *v.get_ref());
        if pairs.is_empty() && !acme {
            self.problems.push(super::ConfigProblem {
                line: None,
                key: key.clone(),
                message: "no certificate: give `cert` and `key`, `certificates`, `acme = true`, \
                          or a top-level [[certificate]]"
                    .into(),
            });
            return None;
        }
        Some(ListenerTls { certificates: pairs, acme, http2: true })
    }

    /// `acme = true` on a listener needs `[acme]`, and `[acme]` needs a listener that
    /// serves its certificates, unless it has no name yet (`nameless`: a config set whose
    /// included files name no host so far; the listener may come with the first one).
    pub(super) fn acme_listeners(
        &mut self,
        raw: &FileConfig,
        listeners: &[ListenerConfig],
        nameless: bool,
    ) {
        let flags = raw.listener.iter().enumerate().filter_map(|(i, l)| {
            let flag = l.tls.as_ref()?.acme.as_ref()?;
            Some((i, flag.span(), *flag.get_ref()))
        });
        let flags: Vec<_> = flags.collect();
        if raw.acme.is_none() {
            for (i, span, _) in flags.iter().filter(|f| f.2) {
                let message = "needs an [acme] section (directory, contact, storage, names)";
                self.problem(span.clone(), format!("listener[{i}].tls.acme"), message);
            }
            return;
        }
        let serves = listeners.iter().any(|l| l.tls.as_ref().is_some_and(|t| t.acme));
        if !serves && !flags.iter().any(|f| f.2) && !nameless {
            self.problems.push(super::ConfigProblem {
                line: None,
                key: "acme".into(),
                message: "no listener serves its certificates: add `acme = true` to a \
                          listener's [listener.tls]"
                    .into(),
            });
        }
    }

    /// A certificate and key file, read and checked now. `names` are the keys the two
    /// files are given under in `key`'s table (`cert` and `key`, or `client_cert` and
    /// `client_key`), which a problem names.
    pub(super) fn cert_pair(
        &mut self,
        key: &str,
        names: [&str; 2],
        cert: &Spanned<String>,
        private: &Spanned<String>,
    ) -> Option<CertPair> {
        let pair = CertPair { cert: self.path(cert), key: self.path(private) };
        match certs::load(&pair) {
            Ok(_) => Some(pair),
            Err(e) => {
                let [cert_name, key_name] = names;
                let which = match e {
                    certs::CertError::BadKey { .. } | certs::CertError::Mismatch { .. } => {
                        (private.span(), format!("{key}.{key_name}"))
                    }
                    certs::CertError::Read { ref path, .. } if *path == pair.key => {
                        (private.span(), format!("{key}.{key_name}"))
                    }
                    _ => (cert.span(), format!("{key}.{cert_name}")),
                };
                self.problem(which.0, which.1, e.to_string());
                None
            }
        }
    }

    /// A path in the file, relative to the file's directory.
    fn path(&self, value: &Spanned<String>) -> PathBuf {
        self.dir.join(value.get_ref())
    }

    /// `redirect_https`: the HTTPS port to redirect to.
    pub(super) fn redirect_https(&mut self, key: &str, raw: &Spanned<FileRedirect>) -> Option<u16> {
        match raw.get_ref() {
            FileRedirect::On(true) => Some(443),
            FileRedirect::On(false) => None,
            FileRedirect::Port(port) => match u16::try_from(*port) {
                Ok(port @ 1..) => Some(port),
                _ => {
                    self.problem(raw.span(), key, "must be true or a port from 1 to 65535");
                    None
                }
            },
        }
    }

    /// `hsts`: the max-age, at least a second.
    pub(super) fn hsts(&mut self, key: &str, raw: &Spanned<String>) -> Option<Duration> {
        let age = self.duration(raw, key)?;
        if age < Duration::from_secs(1) {
            self.problem(raw.span(), key, "must be at least 1s (\"365d\" is usual)");
            return None;
        }
        Some(age)
    }

    /// An upstream's TLS: from its `tls` and whether its servers say `https://`.
    pub(super) fn upstream_tls(
        &mut self,
        key: &str,
        raw: Option<&Spanned<FileUpstreamTls>>,
        https_servers: bool,
    ) -> Option<OriginTls> {
        let key = format!("{key}.tls");
        let settings = match raw.map(Spanned::get_ref) {
            None if !https_servers => return None,
            None | Some(FileUpstreamTls::On(true)) => OriginTlsSettings::default(),
            Some(FileUpstreamTls::On(false)) => {
                if let (true, Some(v)) = (https_servers, raw) {
                    self.problem(v.span(), key, "is false, but servers are https://");
                }
                return None;
            }
            Some(FileUpstreamTls::Table(t)) => {
                let client_cert = match (&t.client_cert, &t.client_key) {
                    (Some(cert), Some(k)) => {
                        Some(self.cert_pair(&key, ["client_cert", "client_key"], cert, k)?)
                    }
                    (None, None) => None,
                    (Some(v), None) | (None, Some(v)) => {
                        let message = "`client_cert` and `client_key` go together";
                        self.problem(v.span(), format!("{key}.client_cert"), message);
                        return None;
                    }
                };
                OriginTlsSettings {
                    server_name: t.server_name.as_ref().map(|v| v.get_ref().clone()),
                    ca: t.ca.as_ref().map(|v| self.path(v)),
                    insecure_skip_verify: t
                        .insecure_skip_verify
                        .as_ref()
                        .is_some_and(|v| *v.get_ref()),
                    client_cert,
                }
            }
        };
        match OriginTls::build(settings) {
            Ok(tls) => Some(tls),
            Err(message) => {
                let span = raw.map_or(0..0, Spanned::span);
                self.problem(span, key, message);
                None
            }
        }
    }
}
