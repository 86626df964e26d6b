//! What Docker discovery adds to the config as read: its groups (or more servers for
//! groups the file defines) and a route for each host and path prefix they claim that
//! the file's routes leave free.

use crate::config::{Config, RouteConfig};
use crate::docker::Discovered;
use crate::route::HostPattern;
use crate::upstream::UpstreamConfig;

/// `file` with the discovered groups and routes added. A group the file defines gets
/// the containers as more servers and keeps its settings; a claim the file's routes
/// (or an earlier group, by name) already make is left out, with a warning.
pub fn merge(file: &Config, found: &Discovered) -> Config {
    let mut config = file.clone();
    let settings = file.docker.as_ref();
    for (name, group) in &found.groups {
        match config.upstreams.iter_mut().find(|u| u.name == *name) {
            Some(defined) => defined.servers.extend(group.servers.iter().cloned()),
            None => {
                let mut made = UpstreamConfig::new(name, group.servers.clone());
                made.pool = file.pool.clone();
                made.protocol = group.protocol;
                config.upstreams.push(made);
            }
        }
        if let Some(u) = config.upstreams.iter_mut().find(|u| u.name == *name) {
            u.drain_timeout = settings.map(|s| s.drain_timeout);
        }
        for claim in &group.claims {
            let host = claim.host.as_deref().map_or(Ok(HostPattern::Any), HostPattern::parse);
            let Ok(host) = host else { continue };
            let taken = config.routes.iter().find(|r| r.host == host && r.path == claim.path);
            if let Some(route) = taken {
                if route.upstream != *name {
                    tracing::warn!(
                        group = %name,
                        host = %claim.host.as_deref().unwrap_or("*"),
                        path = %claim.path,
                        taken_by = %route.upstream,
                        "docker: a container claims a host and path another group has; left out"
                    );
                }
                continue;
            }
            config.routes.push(RouteConfig::to(host, claim.path.clone(), name.clone()));
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use crate::docker::labels::{Health, Inspected};
    use crate::docker::settings::DockerConfig;
    use crate::docker::table::Table;

    use super::*;

    fn container(id: &str, labels: &[(&str, &str)]) -> Inspected {
        Inspected::example(id, labels, Health::Healthy)
    }

    const WEB: [(&str, &str); 2] = [("holdfast.host", "a.test"), ("holdfast.group", "web")];

    #[test]
    fn merged_groups_add_servers_and_routes_and_leave_the_files_claims_alone() {
        let file = Config::parse(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[docker]\n\
             [upstream.web]\nservers = []\nbalance = \"round_robin\"\n\
             [upstream.other]\nservers = [\"127.0.0.1:9\"]\n\
             [[route]]\nhost = \"taken.test\"\nupstream = \"other\"\n",
            std::path::Path::new("holdfast.toml"),
        )
        .expect("valid config");
        let mut table = Table::default();
        table.update(&container("a", &WEB), &DockerConfig::default()).expect("valid");
        let api = [("holdfast.host", "api.test,taken.test"), ("holdfast.path", "/v1")];
        table.update(&container("b", &api), &DockerConfig::default()).expect("valid");
        let taken = [("holdfast.host", "taken.test")];
        table.update(&container("c", &taken), &DockerConfig::default()).expect("valid");
        let merged = merge(&file, &table.discovered());
        let web = merged.upstreams.iter().find(|u| u.name == "web").expect("web");
        assert_eq!(web.servers.len(), 1);
        assert_eq!(web.balance.as_str(), "round_robin", "the file's settings stay");
        let made = merged.upstreams.iter().find(|u| u.name == "c-b").expect("made");
        assert_eq!(made.servers.len(), 1);
        let routes: Vec<(String, &str, &str)> = merged
            .routes
            .iter()
            .map(|r| (format!("{:?}", r.host), r.path.as_str(), r.upstream.as_str()))
            .collect();
        assert_eq!(routes.len(), 4, "{routes:?}");
        assert!(routes
            .iter()
            .any(|(h, p, u)| h.contains("api.test") && *p == "/v1" && *u == "c-b"));
        assert!(routes
            .iter()
            .any(|(h, p, u)| h.contains("taken.test") && *p == "/" && *u == "other"));
        assert!(
            !routes.iter().any(|(h, p, u)| h.contains("taken.test") && *p == "/" && *u == "c-c"),
            "the file's route wins: {routes:?}"
        );
    }
}
