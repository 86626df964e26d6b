use std::path::Path;

use super::ConfigDiff;
use crate::config::Config;

/// A config with a listener in front of `app` (servers `app_servers`), then `extra`.
fn config(app_servers: &str, extra: &str) -> Config {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:8080\"\nupstream = \"app\"\nbacklog = 100\n\n\
         [upstream.app]\nservers = [{app_servers}]\n{extra}"
    );
    Config::parse(&text, Path::new("holdfast.toml")).expect("a valid config")
}

fn lines(old: &Config, new: &Config) -> Vec<String> {
    ConfigDiff::between(old, new).changes.iter().map(ToString::to_string).collect()
}

const ONE: &str = "\"127.0.0.1:3001\"";

#[test]
fn the_same_config_has_no_changes() {
    let diff = ConfigDiff::between(&config(ONE, ""), &config(ONE, ""));
    assert!(diff.is_empty());
    assert_eq!(diff.to_string(), "no changes");
}

#[test]
fn servers_added_and_removed_are_named_on_their_group() {
    let old = config("\"127.0.0.1:3001\", \"app.internal:3000\"", "");
    let new = config("\"app.internal:3000\", \"127.0.0.1:3002\"", "");
    assert_eq!(
        lines(&old, &new),
        ["upstream app: added server 127.0.0.1:3002; removed server 127.0.0.1:3001"]
    );
    // The order of servers is not a change.
    let reordered = config("\"127.0.0.1:3002\", \"app.internal:3000\"", "");
    assert!(ConfigDiff::between(&new, &reordered).is_empty());
}

#[test]
fn groups_added_removed_and_their_settings_changed() {
    let old = config(ONE, "[upstream.old]\nservers = [\"127.0.0.1:4000\"]\n");
    let new = config(
        ONE,
        "balance = \"round_robin\"\n[upstream.app.pool]\nidle_timeout = \"1500ms\"\n\
         [upstream.app.health_check]\npath = \"/healthz\"\n\
         [upstream.api]\nservers = [\"127.0.0.1:5000\", \"api.internal:80\"]\n",
    );
    assert_eq!(
        lines(&old, &new),
        [
            // Upstreams in name order, as the file's tables are read.
            "upstream api: added with servers 127.0.0.1:5000, api.internal:80",
            "upstream app: changed balance p2c -> round_robin; \
             changed pool.idle_timeout 4s -> 1.5s; added health_check GET /healthz",
            "upstream old: removed (its servers drain)",
        ]
    );
}

#[test]
fn routes_are_known_by_host_and_path() {
    let groups = "[upstream.web]\nservers = [\"127.0.0.1:4000\"]\n";
    let route = |host: &str, path: &str, upstream: &str| {
        format!("[[route]]\nhost = \"{host}\"\npath = \"{path}\"\nupstream = \"{upstream}\"\n")
    };
    let old = config(
        ONE,
        &format!("{}{}{groups}", route("example.com", "/api", "web"), route("*", "/old", "web")),
    );
    let new = config(
        ONE,
        &format!(
            "{}{}{groups}",
            route("example.com", "/api", "app"),
            route("*.example.com", "/", "web")
        ),
    );
    assert_eq!(
        lines(&old, &new),
        [
            "route example.com/api: changed upstream web -> app",
            "route *.example.com/: added (upstream web)",
            "route /old: removed",
        ]
    );
}

#[test]
fn routes_on_some_listeners_are_known_by_them_too_and_their_own_settings_show() {
    let two = "[[listener]]\naddress = \"127.0.0.1:8081\"\n";
    let route = |on: &str, own: &str| {
        format!(
            "[[route]]\nhost = \"a.example\"\nupstream = \"app\"\nlisteners = [\"{on}\"]\n{own}"
        )
    };
    let old = config(
        ONE,
        &format!("{two}{}{}", route("127.0.0.1:8080", ""), route("127.0.0.1:8081", "")),
    );
    let own = "redirect_https = 8443\nhsts = \"1h\"\nhsts_preload = true\n\
               read_timeout = \"5m\"\naccess_log = \"/tmp/a.log\"\n";
    let new = config(
        ONE,
        &format!("{two}{}{}", route("127.0.0.1:8080", ""), route("127.0.0.1:8081", own)),
    );
    assert_eq!(
        lines(&old, &new),
        ["route a.example/ on 127.0.0.1:8081: changed redirect_https none -> 8443; \
             changed hsts none -> max-age=3600; preload; changed read_timeout none -> 300s; \
             changed access_log none -> /tmp/a.log"]
    );
}

#[test]
fn listener_changes_say_which_wait_for_a_restart() {
    let old = config(ONE, "");
    let text = "[[listener]]\naddress = \"127.0.0.1:8080\"\nbacklog = 1024\n\
                client_max_body = 1024\n\
                [[listener]]\naddress = \"127.0.0.1:8081\"\nupstream = \"app\"\n\
                [[route]]\nupstream = \"app\"\n\
                [upstream.app]\nservers = [\"127.0.0.1:3001\"]\n";
    let new = Config::parse(text, Path::new("holdfast.toml")).expect("valid");
    assert_eq!(
        lines(&old, &new),
        [
            "listener 127.0.0.1:8080: changed upstream app -> none; \
             changed client_max_body none -> 1024; \
             changed backlog 100 -> 1024 (takes effect at restart)",
            "listener 127.0.0.1:8081: added (upstream app)",
            "route /: added (upstream app)",
        ]
    );
    let back = lines(&new, &old);
    assert_eq!(back[1], "listener 127.0.0.1:8081: removed", "{back:?}");
}

#[test]
fn settings_for_everything_and_those_read_only_at_start() {
    let old = config(ONE, "");
    let new = config(
        ONE,
        "[timeouts]\nconnect = \"1s\"\n[limits]\nmax_request_headers = 50\n\
         [admin]\n[pool]\nmax_idle_total = 10\n",
    );
    let diff = ConfigDiff::between(&old, &new);
    assert_eq!(
        diff.to_string(),
        "4 changes\n\
         timeouts: changed connect 5s -> 1s\n\
         limits: changed max_request_headers 100 -> 50\n\
         admin: changed none -> 127.0.0.1:9901 (takes effect at restart)\n\
         pool.max_idle_total: changed none -> 10 (takes effect at restart)"
    );
}

#[test]
fn acme_changes_take_effect_at_restart() {
    let https = "[[listener]]\naddress = \"127.0.0.1:8443\"\nupstream = \"app\"\n\
                 [listener.tls]\nacme = true\n";
    let off = config(ONE, "");
    let on = config(ONE, &format!("[acme]\nnames = [\"a.example\"]\n{https}"));
    assert_eq!(
        lines(&off, &on),
        [
            "listener 127.0.0.1:8443: added (upstream app)",
            "acme: changed off -> https://acme-v02.api.letsencrypt.org/directory tls-alpn-01 for \
          a.example (takes effect at restart)"
        ]
    );
    let contact = config(
        ONE,
        &format!("[acme]\nnames = [\"a.example\"]\ncontact = \"ops@example.com\"\n{https}"),
    );
    assert_eq!(lines(&on, &contact), ["acme: changed (takes effect at restart)"]);
    assert!(ConfigDiff::between(&on, &on.clone()).is_empty());
}

#[test]
fn acme_names_follow_the_reload_and_other_settings_wait_for_a_restart() {
    let https = "[[listener]]\naddress = \"127.0.0.1:8443\"\nupstream = \"app\"\n\
                 [listener.tls]\nacme = true\n";
    let route = |host: &str| format!("[[route]]\nhost = \"{host}\"\nupstream = \"app\"\n");
    let routes = config(ONE, &format!("[acme]\n{https}{}", route("a.example")));
    let more = config(ONE, &format!("[acme]\n{https}{}{}", route("a.example"), route("b.example")));
    assert_eq!(
        lines(&routes, &more),
        ["route b.example/: added (upstream app)", "acme: added name b.example"]
    );
    assert_eq!(
        lines(&more, &routes),
        ["route b.example/: removed", "acme: removed name b.example"]
    );
    let listed = config(
        ONE,
        &format!(
            "[acme]\nnames = [\"c.example\"]\nchallenge = \"http-01\"\n{https}{}",
            route("a.example")
        ),
    );
    assert_eq!(
        lines(&routes, &listed),
        ["acme: changed https://acme-v02.api.letsencrypt.org/directory tls-alpn-01 -> \
             https://acme-v02.api.letsencrypt.org/directory http-01 (takes effect at restart); \
             changed names the routes' hosts -> c.example; added name c.example; removed name \
             a.example"]
    );
}
