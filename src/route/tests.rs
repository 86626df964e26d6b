use super::*;

/// A router from `(host, path, target)` rows, parsed as the config would.
fn router(rows: &[(&str, &str, &'static str)]) -> Router<&'static str> {
    let routes = rows
        .iter()
        .map(|&(host, path, target)| Route {
            host: HostPattern::parse(host).expect("test host is valid"),
            path: parse_path_prefix(path).expect("test path is valid"),
            target,
        })
        .collect();
    Router::new(routes)
}

fn find(router: &Router<&'static str>, host: &str, target: &str) -> Option<&'static str> {
    router.find(Some(host.as_bytes()), target.as_bytes()).copied()
}

#[test]
fn exact_host_beats_wildcard_beats_any() {
    // Listed least specific first, so config order cannot be what decides.
    let r = router(&[
        ("*", "/", "any"),
        ("*.example.com", "/", "wildcard"),
        ("api.example.com", "/", "exact"),
    ]);
    assert_eq!(find(&r, "api.example.com", "/x"), Some("exact"));
    assert_eq!(find(&r, "www.example.com", "/x"), Some("wildcard"));
    assert_eq!(find(&r, "example.org", "/x"), Some("any"));
}

#[test]
fn longest_wildcard_wins() {
    let r = router(&[("*.example.com", "/", "short"), ("*.eu.example.com", "/", "long")]);
    assert_eq!(find(&r, "a.eu.example.com", "/"), Some("long"));
    assert_eq!(find(&r, "a.b.eu.example.com", "/"), Some("long"));
    assert_eq!(find(&r, "a.us.example.com", "/"), Some("short"));
    assert_eq!(find(&r, "eu.example.com", "/"), Some("short"));
}

#[test]
fn wildcard_does_not_match_bare_domain_or_a_longer_label() {
    let r = router(&[("*.example.com", "/", "wildcard")]);
    assert_eq!(find(&r, "example.com", "/"), None);
    assert_eq!(find(&r, "badexample.com", "/"), None);
    assert_eq!(find(&r, ".example.com", "/"), None);
    assert_eq!(find(&r, "a.example.com", "/"), Some("wildcard"));
}

#[test]
fn host_case_trailing_dot_and_port_are_ignored() {
    let r = router(&[("API.example.com.", "/", "exact"), ("*.Example.COM", "/", "wildcard")]);
    assert_eq!(find(&r, "api.example.com", "/"), Some("exact"));
    assert_eq!(find(&r, "API.Example.Com.:8443", "/"), Some("exact"));
    assert_eq!(find(&r, "WWW.EXAMPLE.COM.", "/"), Some("wildcard"));
    assert_eq!(find(&r, "www.example.com:80", "/"), Some("wildcard"));
    assert_eq!(find(&r, " api.example.com ", "/"), Some("exact"));
}

#[test]
fn ip_literal_hosts_match_with_and_without_port() {
    let r = router(&[("[::1]", "/", "v6"), ("10.0.0.1", "/", "v4"), ("*", "/", "any")]);
    assert_eq!(find(&r, "[::1]:8080", "/"), Some("v6"));
    assert_eq!(find(&r, "[::1]", "/"), Some("v6"));
    assert_eq!(find(&r, "[::2]:8080", "/"), Some("any"));
    assert_eq!(find(&r, "10.0.0.1:80", "/"), Some("v4"));
    assert_eq!(find(&r, "10.0.0.2", "/"), Some("any"));
}

#[test]
fn ipv6_hosts_match_in_any_spelling_of_the_address() {
    let r = router(&[("[2001:DB8:0:0::1]", "/", "v6"), ("*", "/", "any")]);
    assert_eq!(find(&r, "[2001:db8::1]", "/"), Some("v6"));
    assert_eq!(find(&r, "[2001:0DB8:0000:0000:0000:0000:0000:0001]:443", "/"), Some("v6"));
    assert_eq!(find(&r, "[2001:db8::2]", "/"), Some("any"));
}

#[test]
fn prefix_matches_on_segment_boundaries() {
    let r = router(&[("*", "/api", "api"), ("*", "/", "root")]);
    assert_eq!(find(&r, "h", "/api"), Some("api"));
    assert_eq!(find(&r, "h", "/api/"), Some("api"));
    assert_eq!(find(&r, "h", "/api/x"), Some("api"));
    assert_eq!(find(&r, "h", "/api?x=1"), Some("api"));
    assert_eq!(find(&r, "h", "/apix"), Some("root"));
    assert_eq!(find(&r, "h", "/ap"), Some("root"));
}

#[test]
fn prefix_ending_in_slash_does_not_match_the_bare_segment() {
    let r = router(&[("*", "/api/", "api"), ("*", "/", "root")]);
    assert_eq!(find(&r, "h", "/api/"), Some("api"));
    assert_eq!(find(&r, "h", "/api/x"), Some("api"));
    assert_eq!(find(&r, "h", "/api"), Some("root"));
    assert_eq!(find(&r, "h", "/apix"), Some("root"));
}

#[test]
fn query_is_not_part_of_the_path() {
    let r = router(&[("*", "/a", "a"), ("*", "/", "root")]);
    assert_eq!(find(&r, "h", "/?x=/a"), Some("root"));
    assert_eq!(find(&r, "h", "/a?x"), Some("a"));
}

#[test]
fn longest_prefix_wins_whatever_the_config_order() {
    let r = router(&[("*", "/", "root"), ("*", "/a", "a"), ("*", "/a/b", "ab")]);
    assert_eq!(find(&r, "h", "/a/b/c"), Some("ab"));
    assert_eq!(find(&r, "h", "/a/c"), Some("a"));
    assert_eq!(find(&r, "h", "/b"), Some("root"));
    let r = router(&[("*", "/a/b", "ab"), ("*", "/a", "a"), ("*", "/", "root")]);
    assert_eq!(find(&r, "h", "/a/b"), Some("ab"));
    assert_eq!(find(&r, "h", "/a/bc"), Some("a"));
}

#[test]
fn unmatched_path_falls_through_to_less_specific_host_class() {
    let r = router(&[
        ("api.example.com", "/v1", "exact"),
        ("*.eu.example.com", "/eu", "long-wildcard"),
        ("*.example.com", "/v2", "wildcard"),
        ("*", "/", "any"),
    ]);
    assert_eq!(find(&r, "api.example.com", "/v1"), Some("exact"));
    assert_eq!(find(&r, "api.example.com", "/v2"), Some("wildcard"));
    assert_eq!(find(&r, "api.example.com", "/other"), Some("any"));
    assert_eq!(find(&r, "a.eu.example.com", "/v2"), Some("wildcard"));
    assert_eq!(find(&r, "a.eu.example.com", "/eu"), Some("long-wildcard"));
}

#[test]
fn more_specific_host_wins_over_a_longer_prefix() {
    let r = router(&[("*", "/v1/users", "any"), ("api.example.com", "/", "exact")]);
    assert_eq!(find(&r, "api.example.com", "/v1/users"), Some("exact"));
}

#[test]
fn no_matching_route_returns_none() {
    let r = router(&[("api.example.com", "/v1", "api")]);
    assert_eq!(find(&r, "api.example.com", "/v2"), None);
    assert_eq!(find(&r, "other.example", "/v1"), None);
    assert_eq!(r.find(None, b"/v1"), None);
    assert_eq!(Router::<()>::new(Vec::new()).find(Some(b"h"), b"/"), None);
}

#[test]
fn missing_or_empty_host_matches_only_any_routes() {
    let r = router(&[
        ("api.example.com", "/", "exact"),
        ("*.example.com", "/", "wildcard"),
        ("*", "/", "any"),
    ]);
    assert_eq!(r.find(None, b"/"), Some(&"any"));
    for host in ["", ":80", ".", "  "] {
        assert_eq!(find(&r, host, "/"), Some("any"), "host {host:?}");
    }
    let without_any = router(&[("api.example.com", "/", "exact")]);
    assert_eq!(without_any.find(None, b"/"), None);
}

#[test]
fn host_longer_than_the_buffer_matches_only_any_routes() {
    let r = router(&[("*.example.com", "/", "wildcard"), ("*", "/", "any")]);
    let long = format!("{}.example.com", "a".repeat(MAX_HOST_BYTES));
    assert_eq!(find(&r, &long, "/"), Some("any"));
    let fits = format!("{}.example.com", "a".repeat(MAX_HOST_BYTES - ".example.com".len()));
    assert_eq!(find(&r, &fits, "/"), Some("wildcard"));
}

#[test]
fn asterisk_form_routes_as_root_by_host_header() {
    let r = router(&[("api.example.com", "/", "api"), ("*", "/", "root"), ("*", "/x", "x")]);
    assert_eq!(find(&r, "api.example.com", "*"), Some("api"));
    assert_eq!(find(&r, "other.example", "*"), Some("root"));
}

#[test]
fn target_without_a_path_matches_nothing() {
    let r = router(&[("*", "/", "root")]);
    assert_eq!(find(&r, "h", "example.com:443"), None);
    assert_eq!(find(&r, "h", ""), None);
    assert_eq!(find(&r, "h", "http://h/"), None, "absolute-form is reduced before routing");
}

#[test]
fn paths_are_compared_as_raw_bytes() {
    let r = router(&[("*", "/admin", "admin"), ("*", "/", "root")]);
    assert_eq!(find(&r, "h", "/%61dmin"), Some("root"));
    assert_eq!(find(&r, "h", "/x/../admin"), Some("root"));
    assert_eq!(find(&r, "h", "/Admin"), Some("root"));
}

#[test]
fn first_duplicate_route_wins() {
    let r = router(&[("*", "/a", "first"), ("*", "/a", "second"), ("*", "/b", "b")]);
    assert_eq!(find(&r, "h", "/a"), Some("first"));
    assert_eq!(r.len(), 2);
    let r = router(&[("api.example.com", "/", "first"), ("API.example.com.", "/", "second")]);
    assert_eq!(find(&r, "api.example.com", "/"), Some("first"));
    let r = router(&[("*.example.com", "/", "first"), ("*.EXAMPLE.com", "/", "second")]);
    assert_eq!(find(&r, "a.example.com", "/"), Some("first"));
    assert_eq!(r.len(), 1);
}

#[test]
fn len_counts_routes_in_every_class() {
    let r = router(&[
        ("api.example.com", "/", "a"),
        ("api.example.com", "/v1", "b"),
        ("*.example.com", "/", "c"),
        ("*", "/", "d"),
    ]);
    assert_eq!(r.len(), 4);
    assert!(!r.is_empty());
    assert!(Router::<()>::new(Vec::new()).is_empty());
}

#[test]
fn only_is_some_for_a_single_catch_all() {
    assert_eq!(router(&[("*", "/", "all")]).only(), Some(&"all"));
    assert_eq!(router(&[("*", "/", "all"), ("*", "/", "again")]).only(), Some(&"all"));
    assert_eq!(router(&[("*", "/", "all"), ("*", "/api", "api")]).only(), None);
    assert_eq!(router(&[("*", "/", "all"), ("a.example", "/", "a")]).only(), None);
    assert_eq!(router(&[("*", "/", "all"), ("*.example", "/", "a")]).only(), None);
    assert_eq!(router(&[("*", "/api", "api")]).only(), None);
    assert_eq!(router(&[("a.example", "/", "a")]).only(), None);
    assert_eq!(router(&[]).only(), None);
}

#[test]
fn host_pattern_parse_accepts_names_wildcards_and_ip_literals() {
    let exact = |s: &str| HostPattern::Exact(s.to_owned());
    let suffix = |s: &str| HostPattern::Suffix(s.to_owned());
    let cases = [
        ("*", HostPattern::Any),
        ("api.example.com", exact("api.example.com")),
        ("API.Example.com.", exact("api.example.com")),
        ("my_host-1", exact("my_host-1")),
        ("*.example.com", suffix(".example.com")),
        ("*.Example.COM.", suffix(".example.com")),
        ("*.a.b.example.com", suffix(".a.b.example.com")),
        ("10.0.0.1", exact("10.0.0.1")),
        ("[::1]", exact("[::1]")),
        ("[2001:DB8:0::1]", exact("[2001:db8::1]")),
    ];
    for (text, expected) in cases {
        assert_eq!(HostPattern::parse(text), Ok(expected), "{text:?}");
    }
}

#[test]
fn host_pattern_parse_rejects_with_a_reason() {
    let too_long = format!("{}.com", "a".repeat(MAX_NAME_BYTES));
    let cases = [
        ("", "empty"),
        ("example.com:8080", "ports are not part of a host route (write \"example.com\""),
        ("*.example.com:8080", "(write \"*.example.com\";"),
        ("[::1]:8080", "ports are not part of a host route (write \"[::1]\""),
        (":8080", "ports are not part of a host route"),
        ("::1", "in brackets, as in \"[::1]\""),
        ("a:b:c", "':' is not allowed"),
        ("[::1", "closing ']'"),
        ("[::1]x", "unexpected \"x\""),
        ("[zz]", "\"zz\" is not an IPv6 address"),
        ("*example.com", "'*' can only be the whole first label"),
        ("a.*.com", "'*' can only be the whole first label"),
        ("api.*", "'*' can only be the whole first label"),
        ("*.*.example.com", "'*' can only be the whole first label"),
        ("exa mple.com", "' ' is not allowed in a host name"),
        ("example.com/api", "'/' is not allowed in a host name"),
        ("café.example", "\"xn--\" form"),
        ("a..b", "empty label"),
        ("example.com..", "empty label"),
        ("*.", "empty label"),
        (".", "empty label"),
        (".example.com", "write \"*.example.com\""),
        (too_long.as_str(), "at most 253 characters"),
    ];
    for (text, reason) in cases {
        let err = HostPattern::parse(text).expect_err(text);
        assert!(err.contains(reason), "{text:?}: {err:?} should say {reason:?}");
        assert!(text.is_empty() || err.contains(&format!("{text:?}")), "{err:?} names {text:?}");
    }
}

#[test]
fn parse_path_prefix_returns_valid_prefixes_unchanged() {
    for text in ["/", "/api", "/api/", "/a%20b/c.d", "/Mixed-Case_~"] {
        assert_eq!(parse_path_prefix(text).as_deref(), Ok(text));
    }
}

#[test]
fn parse_path_prefix_rejects_with_a_reason() {
    let cases = [
        ("", "empty"),
        ("api", "must start with '/', as in \"/api\""),
        ("*", "must start with '/'"),
        ("/a?b", "cannot contain '?'"),
        ("/a#b", "cannot contain '#'"),
        ("/a b", "' ' cannot appear in a request path"),
        ("/a\tb", "'\\t' cannot appear"),
        ("/a\u{7f}", "'\\u{7f}' cannot appear"),
        ("/café", "'é' cannot appear"),
    ];
    for (text, reason) in cases {
        let err = parse_path_prefix(text).expect_err(text);
        assert!(err.contains(reason), "{text:?}: {err:?} should say {reason:?}");
    }
}

#[test]
fn ports_come_off_hosts() {
    assert_eq!(strip_port(b"example.com:8080"), b"example.com");
    assert_eq!(strip_port(b"example.com"), b"example.com");
    assert_eq!(strip_port(b"[::1]:8080"), b"[::1]");
    assert_eq!(strip_port(b"[::1]"), b"[::1]");
}
