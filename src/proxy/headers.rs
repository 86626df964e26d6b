//! Header rewriting on the proxy path: hop-by-hop removal and X-Forwarded-*.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one connection, never forwarded (RFC 9110 7.6.1), plus the
/// names a `Connection` header lists.
static HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers and those named in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names (cheap comparisons for standard headers) finds the few
    // hop-by-hop headers a message carries, usually none or `Connection` alone.
    let mut present = [false; 7];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[i] = true;
        }
    }
    if !present.contains(&true) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        // `keep-alive` is removed anyway and `close` names no header.
        .filter(|t| !t.eq_ignore_ascii_case("keep-alive") && !t.eq_ignore_ascii_case("close"))
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    let hop = HOP_BY_HOP.iter().zip(present).filter_map(|(name, here)| here.then_some(name));
    for name in named.iter().chain(hop) {
        headers.remove(name);
    }
}

/// Whether a `Connection` header carries `token` (case-insensitive).
pub fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The `Upgrade` value of a request that asks to switch protocols, if it does.
pub fn upgrade_request(headers: &HeaderMap) -> Option<HeaderValue> {
    let upgrade = headers.get(header::UPGRADE)?;
    connection_has(headers, "upgrade").then(|| upgrade.clone())
}

/// Restores the two headers an upgrade needs after hop-by-hop removal.
pub fn set_upgrade(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, protocol);
}

/// Adds `X-Forwarded-For` (appending to a client-sent list), `-Proto` and `-Host`.
/// `client_ip` is the client's IP address as text.
pub fn add_forwarded(headers: &mut HeaderMap, client_ip: &HeaderValue, host: Option<&HeaderValue>) {
    let value = match headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prior) => {
            HeaderValue::try_from(format!("{prior}, {}", client_ip.to_str().unwrap_or("")))
        }
        None => Ok(client_ip.clone()),
    };
    if let Ok(value) = value {
        headers.insert(X_FORWARDED_FOR, value);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    if let Some(host) = host {
        headers.insert(X_FORWARDED_HOST, host.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn strips_hop_by_hop_and_connection_named_headers() {
        let mut h = map(&[
            ("connection", "close, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("trailer", "x"),
            ("accept", "*/*"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.keys().map(|k| k.as_str()).collect::<Vec<_>>(), vec!["accept"]);
    }

    #[test]
    fn forwarded_for_appends_to_existing_list() {
        let mut h = map(&[("x-forwarded-for", "10.0.0.1")]);
        let host = HeaderValue::from_static("example.com");
        add_forwarded(&mut h, &HeaderValue::from_static("127.0.0.9"), Some(&host));
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.9");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "example.com");
    }

    #[test]
    fn upgrade_needs_both_headers() {
        assert!(upgrade_request(&map(&[("upgrade", "websocket")])).is_none());
        let h = map(&[("connection", "keep-alive, Upgrade"), ("upgrade", "websocket")]);
        assert_eq!(upgrade_request(&h).unwrap(), "websocket");
    }
}
