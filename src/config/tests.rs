use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{AccessLogConfig, AccessLogFormat, AccessLogTarget, Config, DEFAULT_ADMIN_ADDR};

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
