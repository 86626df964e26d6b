use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Config;
use crate::admin::DEFAULT_ADMIN_ADDR;
use crate::telemetry::access_log::{AccessLogConfig, AccessLogFormat, AccessLogTarget};
use crate::telemetry::LogFormat;
use crate::upstream::Server;

fn parse(text: &str) -> Result<Config, super::ConfigError> {
    Config::parse(text, Path::new("holdfast.toml"))
}

fn errors(text: &str) -> String {
    parse(text).expect_err("config should be rejected").to_string()
}

const GOOD: &str = r#"
threads = 2

[[listener]]
address = "127.0.0.1:8080"
upstream = "app"

[upstream.app]
servers = ["127.0.0.1:3000", "127.0.0.1:3001"]

[upstream.app.pool]
max_requests = 50

[pool]
idle_timeout = "2s"
max_idle_per_server = 8

[timeouts]
connect = "1s"

[limits]
max_request_headers = 50
"#;

#[test]
fn good_config_applies_precedence_and_defaults() {
    let config = parse(GOOD).unwrap();
    let app = &config.upstreams[0];
    assert_eq!(app.servers.len(), 2);
    // [upstream.app.pool] wins, then [pool], then the pool's defaults.
    assert_eq!(app.pool.max_requests, 50);
    assert_eq!(app.pool.idle_timeout, Duration::from_secs(2));
    assert_eq!(app.pool.max_idle, Some(8));
    assert_eq!(app.pool.max_lifetime, holdfast_pool::PoolConfig::default().max_lifetime);
    assert_eq!(config.timeouts.connect, Duration::from_secs(1));
    assert_eq!(config.timeouts.read, crate::proxy::settings::DEFAULT_READ_TIMEOUT);
    assert_eq!(config.client_limits.max_headers, 50);
    assert_eq!(config.threads, Some(2));
}

#[test]
fn each_problem_names_file_line_and_key() {
    let text = r#"
[[listener]]
address = "not-an-address"
upstream = "missing"

[upstream.app]
servers = []

[pool]
idle_timeout = "soon"
"#;
    let message = errors(text);
    assert!(message.contains("holdfast.toml:3: listener[0].address:"), "{message}");
    assert!(
        message.contains("holdfast.toml:4: listener[0].upstream: no upstream named \"missing\""),
        "{message}"
    );
    assert!(message.contains("holdfast.toml:7: upstream.app.servers:"), "{message}");
    assert!(message.contains("holdfast.toml:10: pool.idle_timeout:"), "{message}");
    assert_eq!(message.lines().count(), 4, "{message}");
}

#[test]
fn unknown_key_is_an_error_with_its_line() {
    let message = errors("[pool]\nidle_timout = \"4s\"\n");
    assert!(message.starts_with("holdfast.toml:2:"), "{message}");
    assert!(message.contains("idle_timout"), "{message}");
}

#[test]
fn toml_syntax_error_names_the_line() {
    let message = errors("[[listener]]\naddress = \"127.0.0.1:1\"\nupstream = \n");
    assert!(message.starts_with("holdfast.toml:3:"), "{message}");
}

#[test]
fn config_without_listener_is_rejected() {
    let message = errors("[upstream.app]\nservers = [\"127.0.0.1:1\"]\n");
    assert!(message.contains("listener: no [[listener]]"), "{message}");
}

#[test]
fn negative_and_zero_values_are_rejected() {
    let text = "threads = 0\n[pool]\nmax_requests = -1\n[timeouts]\nconnect = \"0s\"\n";
    let message = errors(text);
    assert!(message.contains(":1: threads: must be 1 or more"), "{message}");
    assert!(message.contains(":3: pool.max_requests: must be 0 or more"), "{message}");
    assert!(message.contains(":5: timeouts.connect: must be more than 0"), "{message}");
}

#[test]
fn missing_file_is_named() {
    let err = Config::load(Path::new("/nonexistent/holdfast.toml")).unwrap_err();
    assert!(err.to_string().starts_with("/nonexistent/holdfast.toml: "), "{err}");
}

/// A minimal valid config (one listener, one upstream on lines 1 to 5), then `extra`.
fn with(extra: &str) -> String {
    let base = "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\n\
                [upstream.app]\nservers = [\"127.0.0.1:3000\"]\n";
    format!("{base}{extra}")
}

/// [`with`] `extra` (an `[acme]` table), then an HTTPS listener that serves its
/// certificates.
fn with_acme(extra: &str) -> String {
    with(&format!("{extra}\n{ACME_LISTENER}"))
}

/// An HTTPS listener with ACME's certificates.
const ACME_LISTENER: &str =
    "[[listener]]\naddress = \"127.0.0.1:8443\"\nupstream = \"app\"\n[listener.tls]\nacme = true\n";

#[test]
fn admin_and_access_log_are_off_without_their_sections() {
    let config = parse(GOOD).unwrap();
    assert_eq!(config.admin, None);
    assert_eq!(config.access_log, AccessLogConfig::default());
    assert_eq!(config.access_log.target, AccessLogTarget::Off);
}

#[test]
fn admin_and_access_log_sections_are_parsed() {
    let text = with(
        "[admin]\naddress = \"127.0.0.1:9000\"\n\
         [access_log]\ntarget = \"/var/log/holdfast/access.log\"\nformat = \"text\"\n",
    );
    let config = parse(&text).unwrap();
    assert_eq!(config.admin, Some("127.0.0.1:9000".parse().unwrap()));
    assert_eq!(
        config.access_log,
        AccessLogConfig {
            target: AccessLogTarget::File(PathBuf::from("/var/log/holdfast/access.log")),
            format: AccessLogFormat::Text,
        }
    );
}

#[test]
fn empty_sections_turn_on_admin_and_access_log_with_defaults() {
    let config = parse(&with("[admin]\n[access_log]\n")).unwrap();
    assert_eq!(config.admin, Some(DEFAULT_ADMIN_ADDR));
    assert_eq!(
        config.access_log,
        AccessLogConfig { target: AccessLogTarget::Stdout, format: AccessLogFormat::Json }
    );
}

#[test]
fn access_log_target_can_be_off_or_stdout() {
    let config = parse(&with("[access_log]\ntarget = \"off\"\nformat = \"text\"\n")).unwrap();
    assert_eq!(config.access_log.target, AccessLogTarget::Off);
    let config = parse(&with("[access_log]\ntarget = \"stdout\"\n")).unwrap();
    assert_eq!(config.access_log.target, AccessLogTarget::Stdout);
}

#[test]
fn relative_access_log_path_is_resolved_from_the_config_directory() {
    let text = with("[access_log]\ntarget = \"logs/access.log\"\n");
    let config = Config::parse(&text, Path::new("/etc/holdfast/holdfast.toml")).unwrap();
    let expected = PathBuf::from("/etc/holdfast/logs/access.log");
    assert_eq!(config.access_log.target, AccessLogTarget::File(expected));

    // A config named relative to the working directory keeps the path relative to it too.
    let config = Config::parse(&text, Path::new("conf/holdfast.toml")).unwrap();
    let expected = PathBuf::from("conf/logs/access.log");
    assert_eq!(config.access_log.target, AccessLogTarget::File(expected));
    let config = parse(&text).unwrap();
    assert_eq!(config.access_log.target, AccessLogTarget::File("logs/access.log".into()));
}

#[test]
fn bad_admin_and_access_log_values_name_line_and_key() {
    let text = with(
        "[admin]\naddress = \"localhost\"\n\
         [access_log]\ntarget = \"\"\nformat = \"xml\"\n",
    );
    let message = errors(&text);
    assert!(message.contains("holdfast.toml:7: admin.address: \"localhost\" is not an ip:port"));
    assert!(
        message.contains("holdfast.toml:9: access_log.target: is empty: use \"off\", \"stdout\""),
        "{message}"
    );
    assert!(
        message.contains(
            "holdfast.toml:10: access_log.format: \"xml\" is not a format: use \"json\" or \"text\""
        ),
        "{message}"
    );
    assert_eq!(message.lines().count(), 3, "{message}");
}

#[test]
fn unknown_keys_in_admin_and_access_log_are_rejected() {
    let message = errors(&with("[admin]\nadress = \"127.0.0.1:9901\"\n"));
    assert!(message.starts_with("holdfast.toml:7:"), "{message}");
    assert!(message.contains("adress"), "{message}");
    let message = errors(&with("[access_log]\npath = \"access.log\"\n"));
    assert!(message.starts_with("holdfast.toml:7:"), "{message}");
    assert!(message.contains("path"), "{message}");
}

const ROUTED: &str = r#"
[[listener]]
address = "127.0.0.1:8080"

[[route]]
host = "*.Example.com"
path = "/api"
upstream = "api"

[[route]]
upstream = "web"

[upstream.api]
servers = ["api.internal:3000", "10.0.0.5:3000"]
balance = "least_outstanding"
resolve_interval = "2s"

[upstream.api.health]
max_connect_failures = 0
ejection = "1s"
slow_start = "0s"
panic_threshold = 50

[upstream.api.health_check]
path = "/healthz?full=1"
interval = "3s"
expect_status = 204

[upstream.web]
servers = ["127.0.0.1:4000"]
"#;

#[test]
fn routes_groups_health_and_names_parse_with_defaults_for_the_rest() {
    use crate::balance::Policy;
    use crate::route::HostPattern;

    let config = parse(ROUTED).unwrap();
    assert_eq!(config.listeners[0].upstream, None);
    assert_eq!(config.routes.len(), 2);
    assert_eq!(config.routes[0].host, HostPattern::Suffix(".example.com".into()));
    assert_eq!(config.routes[0].path, "/api");
    assert_eq!(
        (config.routes[1].host.clone(), config.routes[1].path.as_str()),
        (HostPattern::Any, "/")
    );
    let api = &config.upstreams[0];
    assert_eq!(api.servers[0], Server::Name { host: "api.internal".into(), port: 3000 });
    assert_eq!(api.servers[1], Server::Ip("10.0.0.5:3000".parse().unwrap()));
    assert_eq!(api.balance, Policy::LeastOutstanding);
    assert_eq!(api.resolve_interval, Duration::from_secs(2));
    assert_eq!(api.health.max_connect_failures, 0);
    assert_eq!(api.health.ejection, Duration::from_secs(1));
    assert_eq!(api.health.slow_start, Duration::ZERO);
    assert_eq!(api.health.panic_threshold, 50);
    assert_eq!(config.upstreams[1].health.panic_threshold, 0);
    assert_eq!(api.health.max_5xx, crate::upstream::health::PassiveHealth::default().max_5xx);
    let check = api.check.as_ref().expect("a health check");
    assert_eq!(check.path, "/healthz?full=1");
    assert_eq!(check.interval, Duration::from_secs(3));
    assert_eq!(check.timeout, crate::upstream::check::DEFAULT_TIMEOUT);
    assert_eq!(check.expect_status, Some(204));
    let web = &config.upstreams[1];
    assert_eq!(web.balance, Policy::PowerOfTwoChoices);
    assert!(web.check.is_none());
    assert_eq!(web.resolve_interval, crate::upstream::settings::DEFAULT_RESOLVE_INTERVAL);
}

#[test]
fn bad_routes_and_group_settings_name_their_line_and_key() {
    let text = r#"
[[listener]]
address = "127.0.0.1:8080"

[[route]]
host = "api.example.com:8080"
upstream = "api"

[[route]]
path = "api"
upstream = "nowhere"

[[route]]
host = "api.example.com:8080"
upstream = "api"

[upstream.api]
servers = ["localhost", "app.internal:99999", "10.0.0.1:80", "10.0.0.1:80"]
balance = "fastest"
resolve_interval = "0s"

[upstream.api.health_check]
path = "healthz"
expect_status = 42

[upstream.api.health]
panic_threshold = 101
"#;
    let message = errors(text);
    for expected in [
        "holdfast.toml:6: route[0].host: \"api.example.com:8080\"",
        "holdfast.toml:11: route[1].upstream: no upstream named \"nowhere\"",
        "holdfast.toml:10: route[1].path:",
        "holdfast.toml:18: upstream.api.servers: \"localhost\" is not a server: no port",
        "holdfast.toml:18: upstream.api.servers: \"app.internal:99999\" is not a server",
        "holdfast.toml:18: upstream.api.servers: 10.0.0.1:80 is listed twice",
        "holdfast.toml:19: upstream.api.balance: unknown balance policy \"fastest\"",
        "holdfast.toml:20: upstream.api.resolve_interval: must be more than 0",
        "holdfast.toml:23: upstream.api.health_check.path:",
        "holdfast.toml:24: upstream.api.health_check.expect_status: must be a status",
        "holdfast.toml:27: upstream.api.health.panic_threshold: must be a percentage from 0 to 100",
    ] {
        assert!(message.contains(expected), "missing {expected:?} in:\n{message}");
    }
}

#[test]
fn a_listener_without_upstream_needs_routes() {
    let text = r#"
[[listener]]
address = "127.0.0.1:8080"

[upstream.app]
servers = ["127.0.0.1:3000"]
"#;
    let message = errors(text);
    assert!(message.contains("holdfast.toml:3: listener[0]: has no `upstream`"), "{message}");
}

#[test]
fn unknown_keys_and_bad_values_in_different_tables_are_all_reported() {
    let text = r#"threads = 2
thread = 4

[[listener]]
address = "127.0.0.1:8080"
upstream = "app"
backlogg = 10

[upstream.app]
servers = ["127.0.0.1:3000"]
balance = "fastest"

[upstream.app.pool]
idle_timout = "4s"

[timeouts]
connect = "0s"
"#;
    let message = errors(text);
    for expected in [
        "holdfast.toml:2: thread: unknown key; did you mean `threads`?",
        "holdfast.toml:7: listener[0].backlogg: unknown key; did you mean `backlog`?",
        "holdfast.toml:11: upstream.app.balance: unknown balance policy \"fastest\"",
        "holdfast.toml:14: upstream.app.pool.idle_timout: unknown key; did you mean `idle_timeout`?",
        "holdfast.toml:17: timeouts.connect: must be more than 0",
    ] {
        assert!(message.contains(expected), "missing {expected:?} in:\n{message}");
    }
    assert_eq!(message.lines().count(), 5, "{message}");
    // In file order.
    let lines: Vec<&str> = message.lines().map(|l| l.split(':').nth(1).unwrap()).collect();
    assert_eq!(lines, ["2", "7", "11", "14", "17"]);
}

#[test]
fn an_unknown_key_far_from_any_known_one_lists_the_keys_of_its_table() {
    let message = errors(&with("idle_timeout = \"4s\"\n"));
    assert!(
        message.contains(
            "holdfast.toml:6: upstream.app.idle_timeout: unknown key; the keys here are servers,"
        ),
        "{message}"
    );
    assert!(message.contains("pool"), "{message}");
}

#[test]
fn values_of_the_wrong_type_are_all_reported_beside_other_problems() {
    let text = with(
        "resolve_interval = 5\n\
         [pool]\nmax_requests = \"many\"\nidle_timeout = \"soon\"\n\
         [limits]\nclient_max_body = true\nmax_request_headers = 0\n",
    );
    let message = errors(&text);
    for expected in [
        "holdfast.toml:6: upstream.app.resolve_interval: invalid type: integer `5`, expected a string",
        "holdfast.toml:8: pool.max_requests: invalid type: string \"many\"",
        "holdfast.toml:9: pool.idle_timeout: \"soon\" is not a duration",
        "holdfast.toml:11: limits.client_max_body: ",
        "holdfast.toml:12: limits.max_request_headers: must be 1 or more",
    ] {
        assert!(message.contains(expected), "missing {expected:?} in:\n{message}");
    }
    assert_eq!(message.lines().count(), 5, "{message}");
}

#[test]
fn an_unknown_table_is_one_problem_and_its_keys_are_not_more() {
    let text = with(
        "[upstream.app.poool]\nidle_timeout = \"1s\"\nmax_requests = 5\n\
         [[listners]]\naddress = \"127.0.0.1:1\"\n\
         [upstream.app.poool.deeper]\nx = 1\n",
    );
    let message = errors(&text);
    assert!(message.contains(":6: upstream.app.poool: unknown key; did you mean `pool`?"));
    assert!(message.contains(":9: listners: unknown key; did you mean `listener`?"), "{message}");
    assert_eq!(message.lines().count(), 2, "{message}");
}

#[test]
fn unknown_keys_in_inline_and_dotted_tables_are_found() {
    let text = with(
        "pool = { idle_timeout = \"1s\", max_reqs = 5 }\n\
         health.max_5xxx = 3\nhealth.ejection = \"0s\"\n",
    );
    let message = errors(&text);
    assert!(message.contains(":6: upstream.app.pool.max_reqs: unknown key"), "{message}");
    assert!(message.contains(":7: upstream.app.health.max_5xxx: unknown key"), "{message}");
    assert!(message.contains(":8: upstream.app.health.ejection: must be more than 0"), "{message}");
    assert_eq!(message.lines().count(), 3, "{message}");
}

#[test]
fn a_missing_required_key_ends_the_report_after_what_was_found() {
    // The listener has no address; the unknown key before it is still reported.
    let text = "bogus = 1\n[[listener]]\nupstream = \"app\"\n";
    let message = errors(text);
    assert!(message.contains("holdfast.toml:1: bogus: unknown key"), "{message}");
    assert!(message.contains("holdfast.toml:2: listener[0]: `address` is required here"));
    assert_eq!(message.lines().count(), 2, "{message}");
    // A required key with a value of the wrong type is reported once, as that.
    let message = errors("[[listener]]\naddress = 8080\n");
    assert!(message.contains(":2: listener[0].address: invalid type: integer"), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
}

#[test]
fn a_syntax_error_is_the_only_problem_reported() {
    let message = errors("bogus = 1\n[pool\nidle_timeout = \"soon\"\n");
    assert!(message.starts_with("holdfast.toml:2:"), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
}

#[test]
fn closest_known_key_allows_a_third_of_the_letters_wrong() {
    let known = ["idle_timeout", "max_requests", "queue_size"];
    assert_eq!(super::read::closest("idle_timout", &known), Some("idle_timeout"));
    assert_eq!(super::read::closest("Max_Request", &known), Some("max_requests"));
    assert_eq!(super::read::closest("queue", &known), None);
    assert_eq!(super::read::closest("x", &known), None);
}

#[test]
fn backlog_is_per_listener_with_a_default_the_kernel_allows() {
    let config = parse(&with(
        "[[listener]]\naddress = \"127.0.0.1:8081\"\nupstream = \"app\"\nbacklog = 4096\n",
    ))
    .unwrap();
    let default = crate::listener::default_backlog();
    assert!((1..=crate::listener::DEFAULT_BACKLOG).contains(&default), "{default}");
    assert_eq!(config.listeners[0].backlog, default);
    assert_eq!(config.listeners[1].backlog, 4096);
    let message = errors(&with(
        "[[listener]]\naddress = \"127.0.0.1:8081\"\nupstream = \"app\"\nbacklog = 0\n",
    ));
    assert!(
        message.contains("holdfast.toml:9: listener[1].backlog: must be from 1 to 2147483647"),
        "{message}"
    );
    let message =
        errors(&with("[[listener]]\naddress = \"127.0.0.1:8081\"\nbacklog = 4294967296\n"));
    assert!(message.contains(":8: listener[1].backlog: must be from 1"), "{message}");
}

#[test]
fn what_follows_from_a_value_of_the_wrong_type_is_not_reported_again() {
    // Without its `upstream`, the listener would also be "without upstream or routes".
    let message = errors("[[listener]]\naddress = \"127.0.0.1:1\"\nupstream = 5\n");
    assert_eq!(
        message,
        "holdfast.toml:3: listener[0].upstream: invalid type: integer `5`, expected a string"
    );
    let message = errors(&with("[limits]\nclient_max_body = [1]\n"));
    assert_eq!(
        message,
        "holdfast.toml:7: limits.client_max_body: a size: a number of bytes, or a string like \"10MB\""
    );
}

#[test]
fn a_file_of_many_problems_is_reported_up_to_a_bound() {
    let text: String = (0..150).map(|i| format!("bogus{i} = 1\n")).collect();
    let message = errors(&text);
    assert!(message.contains("holdfast.toml:100: bogus99: unknown key"), "{message}");
    assert!(!message.contains("bogus100"), "{message}");
    assert!(message.ends_with("holdfast.toml: stopped after 100 problems; there may be more"));
}

#[test]
fn log_format_is_text_unless_the_file_says_json() {
    assert_eq!(parse(&with("")).unwrap().log_format, LogFormat::Text);
    let config = parse(&format!("log_format = \"json\"\n{}", with(""))).unwrap();
    assert_eq!(config.log_format, LogFormat::Json);
    let config = parse(&format!("log_format = \"text\"\n{}", with(""))).unwrap();
    assert_eq!(config.log_format, LogFormat::Text);
}

#[test]
fn bad_log_format_names_line_and_key() {
    let message = errors(&format!("threads = 2\nlog_format = \"xml\"\n{}", with("")));
    assert_eq!(
        message,
        "holdfast.toml:2: log_format: \"xml\" is not a format: use \"text\" or \"json\""
    );
    let message = errors(&format!("log_format = 1\n{}", with("")));
    assert!(message.starts_with("holdfast.toml:1: log_format: "), "{message}");
}

#[test]
fn acme_is_off_without_its_section_and_defaults_with_an_empty_one() {
    assert_eq!(parse(&with("")).unwrap().acme, None);
    let text = with_acme("[[route]]\nhost = \"www.example.com\"\nupstream = \"app\"\n[acme]\n");
    let config = parse(&text).unwrap();
    let acme = config.acme.clone().unwrap();
    assert_eq!(acme, crate::acme::AcmeConfig::new());
    assert_eq!(config.acme_names(), vec!["www.example.com".to_string()]);
}

#[test]
fn acme_values_apply_with_paths_relative_to_the_file() {
    let text = with_acme(
        "[acme]\n\
         directory = \"letsencrypt-staging\"\n\
         contact = \"ops@example.com\"\n\
         storage = \"state/acme\"\n\
         names = [\"Example.com\", \"www.example.com.\"]\n\
         challenge = \"http-01\"\n\
         pending = \"refuse\"\n\
         ca = \"private-ca.pem\"\n\
         renew_at = 0.5\n",
    );
    let config = Config::parse(&text, Path::new("/etc/holdfast/holdfast.toml")).unwrap();
    let acme = config.acme.clone().unwrap();
    assert_eq!(acme.directory, "https://acme-staging-v02.api.letsencrypt.org/directory");
    assert_eq!(acme.contact.as_deref(), Some("mailto:ops@example.com"));
    assert_eq!(acme.storage, PathBuf::from("/etc/holdfast/state/acme"));
    assert_eq!(acme.ca, Some(PathBuf::from("/etc/holdfast/private-ca.pem")));
    assert_eq!(acme.challenge, crate::acme::Challenge::Http01);
    assert_eq!(acme.pending, crate::acme::Pending::Refuse);
    assert_eq!(acme.renew_at, crate::acme::RenewAt::new(0.5).unwrap());
    assert_eq!(config.acme_names(), vec!["example.com".to_string(), "www.example.com".into()]);
}

#[test]
fn each_bad_acme_value_names_its_line_and_key() {
    let message = errors(&with_acme(
        "[acme]\n\
         directory = \"http://ca.example/dir\"\n\
         contact = \"ops\"\n\
         names = [\"*.example.com\", \"a.example\", \"a.example\", \"10.0.0.1\"]\n\
         challenge = \"dns-01\"\n\
         pending = \"wait\"\n\
         renew_at = 1.5\n\
         storage = \"\"\n",
    ));
    for expected in [
        "holdfast.toml:7: acme.directory: \"http://ca.example/dir\" is not a directory URL: ACME needs https",
        "holdfast.toml:8: acme.contact: \"ops\" is not an email address",
        "holdfast.toml:9: acme.names: \"*.example.com\" cannot get a certificate: wildcard",
        "holdfast.toml:9: acme.names: a.example is listed twice",
        "holdfast.toml:9: acme.names: \"10.0.0.1\" cannot get a certificate: an IP address",
        "holdfast.toml:10: acme.challenge: \"dns-01\" is not a challenge: use \"tls-alpn-01\" or \"http-01\"",
        "holdfast.toml:11: acme.pending: \"wait\" is not a choice",
        "holdfast.toml:12: acme.renew_at: 1.5 is not a fraction",
        "holdfast.toml:13: acme.storage: is empty",
    ] {
        assert!(message.contains(expected), "no {expected:?} in\n{message}");
    }
    assert_eq!(message.lines().count(), 9, "{message}");
    let message = errors(&with("[acme]\nnames = []\nchallenge = 1\n"));
    assert!(message.contains("holdfast.toml:7: acme.names: is empty"), "{message}");
    assert!(message.contains("holdfast.toml:8: acme.challenge: invalid type"), "{message}");
    let message = errors(&with("[acme]\nchalenge = \"http-01\"\n"));
    assert!(
        message.contains("holdfast.toml:7: acme.chalenge: unknown key; did you mean `challenge`?"),
        "{message}"
    );
}

#[test]
fn acme_without_names_needs_a_route_with_an_exact_host() {
    let text = with_acme("[[route]]\nhost = \"*.example.com\"\nupstream = \"app\"\n[acme]\n");
    let message = errors(&text);
    assert_eq!(
        message,
        "holdfast.toml: acme: no name to get a certificate for: list them in `names`, or give \
         a [[route]] an exact `host` such as \"example.com\""
    );
}

#[test]
fn example_acme_keys_parse_when_uncommented() {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join("holdfast.toml"),
    )
    .unwrap();
    let section = &example[example.find("# [acme]\n").expect("an [acme] example")..];
    // The commented-out table and `key = value` lines, without the prose around them.
    let is_setting = |line: &&str| {
        *line == "# [acme]"
            || line.strip_prefix("# ").and_then(|l| l.split_once(" = ")).is_some_and(|(key, _)| {
                !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            })
    };
    let uncommented: Vec<&str> = section.lines().filter(is_setting).map(|l| &l[2..]).collect();
    assert_eq!(uncommented.len(), 9, "{uncommented:?}");
    let config = parse(&with_acme(&uncommented.join("\n"))).unwrap();
    let acme = config.acme.unwrap();
    assert_eq!(acme.directory, crate::acme::AcmeConfig::new().directory);
    assert_eq!(
        acme.names,
        crate::acme::AcmeNames::Listed(vec!["example.com".into(), "www.example.com".into()])
    );
}

#[test]
fn acme_and_its_listeners_need_each_other() {
    let message = errors(&with("[acme]\nnames = [\"a.example\"]\n"));
    assert!(message.contains("acme: no listener serves its certificates"), "{message}");
    let message = errors(&with(ACME_LISTENER));
    assert!(
        message.contains("holdfast.toml:10: listener[1].tls.acme: needs an [acme] section"),
        "{message}"
    );
}

#[test]
fn http2_keys_parse_with_their_defaults() {
    use crate::upstream::settings::{Protocol, Speaks};
    let config = parse(
        r#"
[[listener]]
address = "127.0.0.1:8080"
upstream = "grpc"
h2c = true

[upstream.grpc]
servers = ["h2c://127.0.0.1:50051"]
h2_ping_interval = "15s"

[upstream.web]
servers = ["https://127.0.0.1:8443"]

[upstream.plain]
servers = ["127.0.0.1:3000"]
protocol = "http1"

[limits]
h2_max_concurrent_streams = 64
"#,
    )
    .unwrap();
    assert!(config.listeners[0].h2c);
    let group = |name: &str| config.upstreams.iter().find(|u| u.name == name).unwrap();
    assert_eq!(group("grpc").protocol, Protocol::H2c);
    assert_eq!(group("grpc").speaks(), Speaks::H2);
    assert_eq!(group("grpc").h2_ping_interval, Some(Duration::from_secs(15)));
    assert_eq!(group("web").protocol, Protocol::Auto);
    assert_eq!(group("web").speaks(), Speaks::Either);
    assert_eq!(group("plain").speaks(), Speaks::Http1);
    assert_eq!(config.client_limits.h2_max_concurrent_streams, 64);
}

#[test]
fn http2_settings_that_contradict_the_servers_name_line_and_key() {
    let text = r#"
[[listener]]
address = "127.0.0.1:8080"
upstream = "a"
http2 = false

[[listener]]
address = "127.0.0.1:8443"
upstream = "a"
h2c = true
[listener.tls]
cert = "/nonexistent/cert.pem"
key = "/nonexistent/key.pem"

[upstream.a]
servers = ["127.0.0.1:3000"]
protocol = "h2"

[upstream.b]
servers = ["https://127.0.0.1:3000"]
protocol = "h2c"

[upstream.c]
servers = ["h2c://127.0.0.1:3000", "127.0.0.1:3001"]

[upstream.d]
servers = ["127.0.0.1:3000"]
protocol = "h3"
"#;
    let e = errors(text);
    assert!(e.contains("holdfast.toml:5: listener[0].http2:"), "{e}");
    assert!(e.contains("holdfast.toml:10: listener[1].h2c:"), "{e}");
    assert!(e.contains("holdfast.toml:17: upstream.a.protocol: h2 is HTTP/2 over TLS"), "{e}");
    assert!(e.contains("holdfast.toml:21: upstream.b.protocol: h2c is cleartext HTTP/2"), "{e}");
    assert!(e.contains("upstream.c.servers: mixes http://, https:// and h2c://"), "{e}");
    assert!(e.contains("upstream.d.protocol: \"h3\" is not a protocol"), "{e}");
}

#[test]
fn buffering_defaults_and_route_overrides() {
    let config = parse(
        "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\n\
         [[route]]\npath = \"/events\"\nupstream = \"app\"\nbuffer_responses = false\n\
         buffer_requests = true\n\
         [upstream.app]\nservers = [\"127.0.0.1:3000\"]\n\
         [timeouts]\nclient_buffered = \"5s\"\n\
         [buffering]\nmemory_per_exchange = \"16k\"\nfile_per_exchange = \"1M\"\n\
         memory_total = \"8M\"\nfile_total = \"100M\"\ntemp_dir = \"/tmp\"\n",
    )
    .expect("a valid config");
    assert_eq!(config.buffering, crate::proxy::Buffering { responses: true, requests: false });
    assert_eq!(config.routes[0].buffer_responses, Some(false));
    assert_eq!(config.routes[0].buffer_requests, Some(true));
    assert_eq!(config.timeouts.client_buffered, Duration::from_secs(5));
    let spool = &config.spool;
    assert_eq!((spool.memory_per_exchange, spool.file_per_exchange), (16 * 1024, 1 << 20));
    assert_eq!((spool.memory_total, spool.file_total), (8 << 20, Some(100 << 20)));
    assert_eq!(spool.dir, PathBuf::from("/tmp"));
    let auto = parse(
        "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\n\
         [upstream.app]\nservers = [\"127.0.0.1:3000\"]\n[buffering]\nfile_total = \"auto\"\n",
    )
    .expect("a valid config");
    assert_eq!(auto.spool.file_total, None, "auto: decided at start");
}

#[test]
fn bad_buffering_values_are_reported_with_their_keys() {
    let e = errors(
        "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\n\
         [upstream.app]\nservers = [\"127.0.0.1:3000\"]\n\
         [buffering]\ntemp_dir = \"spool\"\nmemory_total = 0\nresponses = \"yes\"\n",
    );
    assert!(e.contains("holdfast.toml:7: buffering.temp_dir: must be an absolute path"), "{e}");
    assert!(e.contains("holdfast.toml:8: buffering.memory_total: must be more than 0"), "{e}");
    assert!(e.contains("holdfast.toml:9: buffering.responses"), "{e}");
    let missing = errors(
        "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\n\
         [upstream.app]\nservers = [\"127.0.0.1:3000\"]\n\
         [buffering]\ntemp_dir = \"/no/such/dir\"\n",
    );
    assert!(missing.contains("/no/such/dir is not a directory"), "{missing}");
}

/// A directory of config files for one test, removed when it ends.
struct Files(PathBuf);

impl Files {
    fn new(name: &str) -> Files {
        let dir =
            std::env::temp_dir().join(format!("holdfast-config-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("apps")).unwrap();
        Files(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const MAIN_INCLUDING: &str = "include = [\"apps/*.toml\"]\n\n\
    [[listener]]\naddress = \"127.0.0.1:8080\"\n";

#[test]
fn included_files_add_groups_and_routes_in_name_order() {
    let files = Files::new("order");
    let main = files.write("holdfast.toml", MAIN_INCLUDING);
    files.write(
        "apps/b.toml",
        "[upstream.b]\nservers = [\"127.0.0.1:3002\"]\n\n[[route]]\nhost = \"b.example\"\nupstream = \"b\"\n",
    );
    files.write(
        "apps/a.toml",
        "[upstream.a]\nservers = [\"127.0.0.1:3001\"]\n\n[[route]]\nhost = \"a.example\"\nupstream = \"a\"\n",
    );
    // Not matched by the pattern: a file being written.
    files.write("apps/c.toml.tmp", "this is not toml");
    let config = Config::load(&main).unwrap();
    let names: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let upstreams: Vec<&str> = config.routes.iter().map(|r| r.upstream.as_str()).collect();
    assert_eq!(upstreams, ["a", "b"]);
}

#[test]
fn an_include_that_matches_nothing_yet_is_valid() {
    let files = Files::new("empty");
    let main = files.write("holdfast.toml", MAIN_INCLUDING);
    let config = Config::load(&main).unwrap();
    assert!(config.routes.is_empty());
}

#[test]
fn a_group_defined_twice_names_both_files_and_lines() {
    let files = Files::new("twice");
    let main = files.write(
        "holdfast.toml",
        &format!("{MAIN_INCLUDING}\n[upstream.web]\nservers = [\"127.0.0.1:3000\"]\n"),
    );
    let other =
        files.write("apps/web.toml", "\n\n[upstream.web]\nservers = [\"127.0.0.1:3009\"]\n");
    let e = Config::load(&main).expect_err("a name defined twice").to_string();
    let expected = format!(
        "{}:3: upstream.web: is defined twice: here and at {}:6",
        other.display(),
        main.display()
    );
    assert!(e.contains(&expected), "{e}");
}

#[test]
fn problems_in_included_files_name_their_file_line_and_key() {
    let files = Files::new("problems");
    let main = files.write("holdfast.toml", MAIN_INCLUDING);
    let app = files.write(
        "apps/app.toml",
        "[upstream.app]\nservers = [\"127.0.0.1:3000\"]\n\n[[route]]\nhost = \"a.example\"\n\
         upstream = \"nope\"\n\n[[listener]]\naddress = \"127.0.0.1:9\"\n",
    );
    let e = Config::load(&main).expect_err("bad included file").to_string();
    let shown = app.display();
    assert!(
        e.contains(&format!("{shown}:6: route[0].upstream: no upstream named \"nope\"")),
        "{e}"
    );
    assert!(e.contains(&format!("{shown}:8: listener: unknown key")), "{e}");
}

#[test]
fn routes_of_two_files_may_not_claim_the_same_host_and_path() {
    let files = Files::new("claim");
    let main = files.write("holdfast.toml", MAIN_INCLUDING);
    let route = |name: &str| {
        format!(
            "[upstream.{name}]\nservers = [\"127.0.0.1:3000\"]\n\n[[route]]\nhost = \"x.example\"\nupstream = \"{name}\"\n"
        )
    };
    let a = files.write("apps/a.toml", &route("a"));
    let b = files.write("apps/b.toml", &route("b"));
    let e = Config::load(&main).expect_err("one host, two apps").to_string();
    let expected = format!(
        "{}:6: route[0]: the same host and path as route[0] at {}:6",
        b.display(),
        a.display()
    );
    assert!(e.contains(&expected), "{e}");
}

#[test]
fn includes_nest_relative_to_their_file_and_a_cycle_reads_each_file_once() {
    let files = Files::new("nest");
    let main = files.write("holdfast.toml", MAIN_INCLUDING);
    files.write("apps/a.toml", "include = [\"../more/*.toml\", \"../holdfast.toml\"]\n");
    std::fs::create_dir_all(files.0.join("more")).unwrap();
    files.write(
        "more/m.toml",
        "include = [\"../apps/a.toml\"]\n[upstream.m]\nservers = [\"127.0.0.1:3000\"]\n\
         [[route]]\nhost = \"m.example\"\nupstream = \"m\"\n",
    );
    let config = Config::load(&main).unwrap();
    assert_eq!(config.upstreams.len(), 1);
}

#[test]
fn a_missing_literal_include_is_a_problem() {
    let files = Files::new("missing");
    let main = files.write(
        "holdfast.toml",
        "include = [\"extra.toml\"]\n[[listener]]\naddress = \"127.0.0.1:1\"\n",
    );
    let e = Config::load(&main).expect_err("missing file").to_string();
    assert!(e.contains("holdfast.toml:1: include:"), "{e}");
    assert!(e.contains("extra.toml does not exist"), "{e}");
}

#[test]
fn route_options_are_read_and_checked() {
    let config = parse(
        "[[listener]]\naddress = \"127.0.0.1:8080\"\n[[listener]]\naddress = \"127.0.0.1:8443\"\n\
         [upstream.app]\nservers = [\"127.0.0.1:3000\"]\n\
         [[route]]\nhost = \"a.example\"\nupstream = \"app\"\nlisteners = [\"127.0.0.1:8080\"]\n\
         redirect_https = 8443\nhsts = \"182d\"\nhsts_include_subdomains = true\n\
         connect_timeout = \"2s\"\nread_timeout = \"5m\"\naccess_log = \"/tmp/app.log\"\n",
    )
    .unwrap();
    let r = &config.routes[0];
    assert_eq!(r.listeners, vec!["127.0.0.1:8080".parse().unwrap()]);
    assert_eq!(r.redirect_https, Some(8443));
    let hsts = r.hsts.unwrap();
    assert_eq!(hsts.max_age, Duration::from_secs(182 * 86_400));
    assert!(hsts.include_subdomains && !hsts.preload);
    assert_eq!(r.connect_timeout, Some(Duration::from_secs(2)));
    assert_eq!(r.read_timeout, Some(Duration::from_secs(300)));
    assert_eq!(r.access_log, Some(AccessLogTarget::File("/tmp/app.log".into())));

    let e = errors(
        "[[listener]]\naddress = \"127.0.0.1:8080\"\n[upstream.app]\nservers = [\"127.0.0.1:3000\"]\n\
         [[route]]\nupstream = \"app\"\nlisteners = [\"127.0.0.1:9999\"]\nhsts_preload = true\n\
         access_log = \"stdout\"\nread_timeout = \"0s\"\n",
    );
    assert!(
        e.contains(":7: route[0].listeners: no [[listener]] has the address 127.0.0.1:9999"),
        "{e}"
    );
    assert!(e.contains(":8: route[0].hsts_preload: needs `hsts`"), "{e}");
    assert!(e.contains(":9: route[0].access_log: a route logs to a file"), "{e}");
    assert!(e.contains(":10: route[0].read_timeout: must be more than 0"), "{e}");
}

#[test]
fn acme_waits_for_the_first_included_host_and_its_listener() {
    let files = Files::new("acme-nameless");
    let main = files.write(
        "holdfast.toml",
        &format!("{MAIN_INCLUDING}\n[acme]\ncontact = \"ops@example.com\"\nstorage = \"acme\"\n"),
    );
    // No app yet: no name to order, no TLS listener needed.
    let config = Config::load(&main).unwrap();
    assert!(config.acme_names().is_empty());
    // An app's host without a listener to serve its certificate is a problem again.
    files.write(
        "apps/a.toml",
        "[upstream.a]\nservers = [\"127.0.0.1:3001\"]\n[[route]]\nhost = \"a.example\"\nupstream = \"a\"\n",
    );
    let e = Config::load(&main).expect_err("a name and no listener").to_string();
    assert!(e.contains("acme: no listener serves its certificates"), "{e}");
}

const DOCKER_ONLY: &str = "[[listener]]\naddress = \"127.0.0.1:8080\"\n";

#[test]
fn docker_table_turns_discovery_on_with_its_defaults() {
    let err = errors(DOCKER_ONLY);
    assert!(err.contains("every request would get 404"), "without [docker]: {err}");
    let config = parse(&format!("{DOCKER_ONLY}[docker]\n")).expect("valid");
    let docker = config.docker.expect("[docker] on");
    assert_eq!(docker, crate::docker::settings::DockerConfig::default());
    assert_eq!(docker.resync, Duration::from_secs(30));
    assert!(!docker.exposed_by_default);
    let text = format!(
        "{DOCKER_ONLY}[docker]\nendpoint = \"tcp://127.0.0.1:2375\"\nnetwork = \"web\"\n\
         exposed_by_default = true\nresync = \"5s\"\n"
    );
    let docker = parse(&text).expect("valid").docker.expect("on");
    assert_eq!(docker.endpoint.as_deref(), Some("tcp://127.0.0.1:2375"));
    assert_eq!(docker.network.as_deref(), Some("web"));
    assert!(docker.exposed_by_default);
    assert_eq!(docker.resync, Duration::from_secs(5));
}

#[test]
fn with_docker_a_group_may_wait_for_containers_to_fill_it() {
    let group = "[upstream.web]\nservers = []\n[[route]]\nhost = \"a.test\"\nupstream = \"web\"\n";
    let config = parse(&format!("{DOCKER_ONLY}[docker]\n{group}")).expect("valid");
    assert!(config.upstreams[0].servers.is_empty());
    let err = errors(&format!("{DOCKER_ONLY}{group}"));
    assert!(err.contains("needs at least one server"), "{err}");
}

#[test]
fn with_docker_acme_may_start_with_no_name_yet() {
    // The hosts come with containers' labels: none is known when the file is read.
    let tls = "[[listener]]\naddress = \"127.0.0.1:8443\"\n[listener.tls]\nacme = true\n";
    let text = format!("{DOCKER_ONLY}{tls}[acme]\n[docker]\n");
    let config = parse(&text).expect("valid");
    assert_eq!(config.acme.as_ref().expect("[acme]").names, crate::acme::AcmeNames::Routes);
    assert!(config.acme_names().is_empty());
    let err = errors(&format!(
        "{DOCKER_ONLY}{tls}[acme]\n[[route]]\nhost = \"*.a.test\"\nupstream = \"x\"\n"
    ));
    assert!(err.contains("no name to get a certificate for"), "without [docker]: {err}");
}

#[test]
fn bad_docker_values_name_line_and_key() {
    let err = errors(&format!(
        "{DOCKER_ONLY}[docker]\nendpoint = \"ssh://host\"\nresync = \"0s\"\nnetwork = \" \"\nport = 1\n"
    ));
    for expected in [
        "holdfast.toml:4: docker.endpoint",
        "is not a Docker endpoint",
        "holdfast.toml:5: docker.resync",
        "holdfast.toml:6: docker.network",
        "holdfast.toml:7",
        "port",
    ] {
        assert!(err.contains(expected), "{expected:?} in {err}");
    }
}
