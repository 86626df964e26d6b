//! What the certificate manager is configured with (`[acme]`): which CA, which names,
//! how to prove control of them, what to serve until a certificate is issued, where to
//! keep the account and certificates, and when to renew; each default with the reason
//! for its value, and the parsers `config` checks the file's values with.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Let's Encrypt's production directory: the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Let's Encrypt's staging directory, for trying a setup out: its certificates are not
/// trusted by browsers, and its rate limits are far higher. `directory =
/// "letsencrypt-staging"` is short for it.
pub const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";

/// Default [`AcmeConfig::storage`]: the state directory a service manager gives a
/// daemon (systemd's `StateDirectory=holdfast`), which outlives restarts and upgrades.
/// Certificates must outlive restarts: CAs limit how often the same name is ordered.
pub const DEFAULT_STORAGE: &str = "/var/lib/holdfast/acme";

/// Default [`AcmeConfig::renew_at`]: renew once two thirds of the lifetime have passed,
/// as Let's Encrypt recommends (day 60 of 90), which leaves a month of retries before
/// the certificate expires.
pub const DEFAULT_RENEW_AT: RenewAt = RenewAt(2.0 / 3.0);

/// Default [`AcmeConfig::retry_base`]: the first wait after a failed order. A minute
/// lets a DNS change or a listener that was still starting catch up, and stays far
/// below the CA's rate limits on failed validations (Let's Encrypt: 5 an hour per name).
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_secs(60);

/// The longest wait between two attempts after failures (the wait doubles from
/// [`AcmeConfig::retry_base`] up to this), unless the certificate expires sooner.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(60 * 60);

/// The certificate manager's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AcmeConfig {
    /// The CA's ACME directory URL (HTTPS).
    pub directory: String,
    /// An email address the CA may write to about the account's certificates.
    pub contact: Option<String>,
    /// Where the account and certificates are kept, one folder per CA.
    pub storage: PathBuf,
    pub names: AcmeNames,
    pub challenge: Challenge,
    pub pending: Pending,
    /// An extra root certificate (PEM) to trust for the directory's HTTPS, besides the
    /// system's roots: a private CA's, or a test CA's such as pebble's.
    pub ca: Option<PathBuf>,
    pub renew_at: RenewAt,
    /// The first wait after a failed order; each failure in a row doubles it, up to
    /// [`MAX_RETRY_DELAY`].
    pub retry_base: Duration,
}

impl AcmeConfig {
    /// Settings with every default: Let's Encrypt, TLS-ALPN-01, a placeholder until
    /// issuance, certificates for the routes' host names.
    pub fn new() -> AcmeConfig {
        AcmeConfig {
            directory: LETS_ENCRYPT.to_string(),
            contact: None,
            storage: PathBuf::from(DEFAULT_STORAGE),
            names: AcmeNames::Routes,
            challenge: Challenge::default(),
            pending: Pending::default(),
            ca: None,
            renew_at: DEFAULT_RENEW_AT,
            retry_base: DEFAULT_RETRY_BASE,
        }
    }
}

impl Default for AcmeConfig {
    fn default() -> Self {
        AcmeConfig::new()
    }
}

/// Which names get certificates: one certificate per name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcmeNames {
    /// These names (lowercase, validated by [`parse_name`]).
    Listed(Vec<String>),
    /// Every exact DNS host name a `[[route]]` names; wildcard hosts, IP addresses and
    /// routes for any host get none (a CA validates names one by one over HTTP or TLS).
    Routes,
}

impl AcmeNames {
    /// The names to keep certificates for, given the hosts the routes name (as
    /// written, or as `route::HostPattern::Exact` stores them), each once, in order.
    pub fn resolve<'a>(&self, route_hosts: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let candidates: Vec<String> = match self {
            AcmeNames::Listed(names) => names.clone(),
            AcmeNames::Routes => {
                route_hosts.into_iter().filter_map(|h| parse_name(h).ok()).collect()
            }
        };
        let mut out: Vec<String> = Vec::with_capacity(candidates.len());
        for name in candidates {
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }
}

/// How the CA checks that holdfast answers for a name (RFC 8555 section 8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Challenge {
    /// TLS-ALPN-01 (RFC 8737): the CA connects to port 443 offering ALPN `acme-tls/1`
    /// and expects a certificate made for the challenge. The default: it needs only the
    /// TLS listener the certificate is for.
    #[default]
    TlsAlpn01,
    /// HTTP-01: the CA fetches `http://NAME/.well-known/acme-challenge/TOKEN` on port
    /// 80, so a cleartext listener must be there.
    Http01,
}

impl Challenge {
    /// Both, in the order the metrics list them.
    pub const ALL: [Challenge; 2] = [Challenge::Http01, Challenge::TlsAlpn01];

    /// The challenge's name in RFC 8555, the config file and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Challenge::TlsAlpn01 => "tls-alpn-01",
            Challenge::Http01 => "http-01",
        }
    }

    pub fn parse(text: &str) -> Result<Challenge, String> {
        match text {
            "tls-alpn-01" => Ok(Challenge::TlsAlpn01),
            "http-01" => Ok(Challenge::Http01),
            other => {
                Err(format!("{other:?} is not a challenge: use \"tls-alpn-01\" or \"http-01\""))
            }
        }
    }
}

impl std::fmt::Display for Challenge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What TLS clients get for a name before its first certificate is issued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pending {
    /// A self-signed certificate for the name: clients see a certificate error rather
    /// than a failed handshake, which tells the operator more. The default.
    #[default]
    Placeholder,
    /// No certificate: the handshake fails.
    Refuse,
}

impl Pending {
    pub fn as_str(self) -> &'static str {
        match self {
            Pending::Placeholder => "placeholder",
            Pending::Refuse => "refuse",
        }
    }

    pub fn parse(text: &str) -> Result<Pending, String> {
        match text {
            "placeholder" => Ok(Pending::Placeholder),
            "refuse" => Ok(Pending::Refuse),
            other => Err(format!("{other:?} is not a choice: use \"placeholder\" or \"refuse\"")),
        }
    }
}

/// The fraction of a certificate's lifetime after which its renewal is ordered, more
/// than 0 and less than 1.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct RenewAt(f64);

impl RenewAt {
    pub fn new(fraction: f64) -> Result<RenewAt, String> {
        if fraction > 0.0 && fraction < 1.0 {
            Ok(RenewAt(fraction))
        } else {
            Err(format!("{fraction} is not a fraction of the lifetime: use a number between 0 and 1 such as 0.667"))
        }
    }

    pub fn fraction(self) -> f64 {
        self.0
    }
}

/// The directory URL `text` names: `"letsencrypt"`, `"letsencrypt-staging"`, or an
/// `https://` URL with a host.
pub fn parse_directory(text: &str) -> Result<String, String> {
    match text {
        "letsencrypt" => return Ok(LETS_ENCRYPT.to_string()),
        "letsencrypt-staging" => return Ok(LETS_ENCRYPT_STAGING.to_string()),
        _ => {}
    }
    let bad = |why: &str| {
        format!(
            "{text:?} is not a directory URL: {why} (use an https:// URL, \"letsencrypt\" or \
             \"letsencrypt-staging\")"
        )
    };
    let uri: http::Uri = text.parse().map_err(|_| bad("it does not parse"))?;
    if uri.scheme_str() != Some("https") {
        // RFC 8555 section 6.1: ACME runs over HTTPS only.
        return Err(bad("ACME needs https"));
    }
    match uri.host() {
        Some(host) if !host.is_empty() => Ok(text.to_string()),
        _ => Err(bad("it has no host")),
    }
}

/// A name a certificate can be ordered for: a DNS name, lowercased, without a trailing
/// dot; not an IP address, not a wildcard (those need DNS-01, which holdfast does not
/// answer).
pub fn parse_name(text: &str) -> Result<String, String> {
    let bad = |why: &str| format!("{text:?} cannot get a certificate: {why}");
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    if name.is_empty() {
        return Err(bad("the name is empty"));
    }
    if name.starts_with("*.") {
        return Err(bad(
            "wildcard names need the DNS-01 challenge, which holdfast does not answer",
        ));
    }
    let unbracketed = name.trim_start_matches('[').trim_end_matches(']');
    if unbracketed.parse::<IpAddr>().is_ok() {
        return Err(bad("an IP address, not a DNS name"));
    }
    if name.len() > 253 {
        return Err(bad("longer than 253 bytes"));
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if !name.split('.').all(label_ok) {
        return Err(bad("not a DNS name (letters, digits and '-' in dot-separated labels)"));
    }
    Ok(name)
}

/// An email address for the CA: `ops@example.com` (or `mailto:ops@example.com`), as
/// the `mailto:` URL ACME wants.
pub fn parse_contact(text: &str) -> Result<String, String> {
    let address = text.strip_prefix("mailto:").unwrap_or(text);
    let valid = address
        .split_once('@')
        .is_some_and(|(user, host)| !user.is_empty() && host.contains('.') && !host.contains('@'))
        && !address.contains(|c: char| c.is_whitespace() || c == ',');
    if valid {
        Ok(format!("mailto:{address}"))
    } else {
        Err(format!("{text:?} is not an email address like \"ops@example.com\""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_shorthands_and_urls() {
        assert_eq!(parse_directory("letsencrypt-staging").unwrap(), LETS_ENCRYPT_STAGING);
        assert_eq!(parse_directory("letsencrypt").unwrap(), LETS_ENCRYPT);
        let url = "https://127.0.0.1:14000/dir";
        assert_eq!(parse_directory(url).unwrap(), url);
        assert!(parse_directory("http://ca.example/dir").unwrap_err().contains("needs https"));
        assert!(parse_directory("lets encrypt").is_err());
        assert!(parse_directory("https:///dir").is_err());
    }

    #[test]
    fn names_are_dns_names_without_wildcards_or_addresses() {
        assert_eq!(parse_name("Example.COM.").unwrap(), "example.com");
        assert!(parse_name("*.example.com").unwrap_err().contains("DNS-01"));
        assert!(parse_name("10.0.0.1").unwrap_err().contains("IP address"));
        assert!(parse_name("[::1]").unwrap_err().contains("IP address"));
        assert!(parse_name("").is_err());
        assert!(parse_name("a..b").is_err());
        assert!(parse_name("-a.example").is_err());
        assert!(parse_name("a_b.example").is_err());
    }

    #[test]
    fn route_names_keep_exact_dns_hosts_once() {
        let hosts = ["api.example.com", "*.example.com", "10.0.0.1", "API.example.com", "[::1]"];
        assert_eq!(AcmeNames::Routes.resolve(hosts), vec!["api.example.com".to_string()]);
        let listed = AcmeNames::Listed(vec!["a.example".into(), "a.example".into()]);
        assert_eq!(listed.resolve(hosts), vec!["a.example".to_string()]);
    }

    #[test]
    fn contacts_become_mailto_urls() {
        assert_eq!(parse_contact("ops@example.com").unwrap(), "mailto:ops@example.com");
        assert_eq!(parse_contact("mailto:ops@example.com").unwrap(), "mailto:ops@example.com");
        assert!(parse_contact("ops").is_err());
        assert!(parse_contact("a@b@example.com").is_err());
    }

    #[test]
    fn renew_at_is_a_fraction() {
        assert!(RenewAt::new(0.5).is_ok());
        assert!(RenewAt::new(0.0).is_err());
        assert!(RenewAt::new(1.0).is_err());
        assert!(RenewAt::new(f64::NAN).is_err());
    }
}
