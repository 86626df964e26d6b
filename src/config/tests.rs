use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{
    AccessLogConfig, AccessLogFormat, AccessLogTarget, Config, LogFormat, DEFAULT_ADMIN_ADDR,
};

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
    assert_eq!(app.pool.max_idle, 8);
    assert_eq!(app.pool.max_lifetime, holdfast_pool::PoolConfig::default().max_lifetime);
    assert_eq!(config.timeouts.connect, Duration::from_secs(1));
    assert_eq!(config.timeouts.read, super::defaults::READ_TIMEOUT);
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
    assert_eq!(api.servers[0], super::ServerAddr::Name { host: "api.internal".into(), port: 3000 });
    assert_eq!(api.servers[1], super::ServerAddr::Ip("10.0.0.5:3000".parse().unwrap()));
    assert_eq!(api.balance, Policy::LeastOutstanding);
    assert_eq!(api.resolve_interval, Duration::from_secs(2));
    assert_eq!(api.health.max_connect_failures, 0);
    assert_eq!(api.health.ejection, Duration::from_secs(1));
    assert_eq!(api.health.slow_start, Duration::ZERO);
    assert_eq!(api.health.max_5xx, crate::upstream::health::PassiveHealth::default().max_5xx);
    let check = api.check.as_ref().expect("a health check");
    assert_eq!(check.path, "/healthz?full=1");
    assert_eq!(check.interval, Duration::from_secs(3));
    assert_eq!(check.timeout, super::defaults::CHECK_TIMEOUT);
    assert_eq!(check.expect_status, Some(204));
    let web = &config.upstreams[1];
    assert_eq!(web.balance, Policy::PowerOfTwoChoices);
    assert!(web.check.is_none());
    assert_eq!(web.resolve_interval, super::defaults::RESOLVE_INTERVAL);
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
