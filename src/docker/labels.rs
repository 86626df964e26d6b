//! What a container's labels ask for: whether it is routed at all, its group, the hosts
//! and path prefixes it claims, the port and protocol it serves, and the address it is
//! reached at. Reads holdfast's own labels and the Traefik subset (`traefik.rs`). Pure:
//! it works on [`Inspected`], what the provider read of the container.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::settings::DockerConfig;
use super::traefik::{self, Claim};
use crate::route::{parse_path_prefix, HostPattern};
use crate::upstream::settings::Protocol;

/// The label that names the compose service a container belongs to.
const COMPOSE_SERVICE: &str = "com.docker.compose.service";

/// What the provider read of one container (`GET /containers/{id}/json`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inspected {
    pub id: String,
    /// Without Docker's leading `/`.
    pub name: String,
    /// `State.StartedAt`.
    pub started: String,
    pub running: bool,
    /// Paused: it answers nothing until unpaused.
    pub paused: bool,
    pub labels: HashMap<String, String>,
    /// The TCP ports it exposes (`EXPOSE`, `--expose`).
    pub exposed_ports: Vec<u16>,
    /// `--network host`: it is reached on 127.0.0.1.
    pub host_network: bool,
    /// Each network it is on, with its address there.
    pub networks: Vec<(String, Option<IpAddr>)>,
    pub health: Health,
    /// The signal `docker stop` sends it (`StopSignal`; SIGTERM when unset).
    pub stop_signal: Option<String>,
}

#[cfg(test)]
impl Inspected {
    /// A running container `c-ID` on the host network that exposes port 8080.
    pub fn example(id: &str, labels: &[(&str, &str)], health: Health) -> Inspected {
        Inspected {
            id: id.into(),
            name: format!("c-{id}"),
            started: "t0".into(),
            running: true,
            paused: false,
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            exposed_ports: vec![8080],
            host_network: true,
            networks: Vec::new(),
            health,
            stop_signal: None,
        }
    }
}

/// A container's Docker health state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Health {
    /// It has no `HEALTHCHECK`: holdfast checks it itself before it joins.
    #[default]
    None,
    Starting,
    Healthy,
    Unhealthy,
}

/// A container that asks to be routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub group: String,
    /// The hosts and path prefixes it claims (none: its group is reached only through
    /// routes of the config file).
    pub claims: Vec<Claim>,
    pub addr: SocketAddr,
    pub protocol: Protocol,
}

/// What `c`'s labels ask for: `Ok(None)` when it is not routed, an error (for the
/// log) when it asks to be but its labels cannot be followed.
pub fn read(c: &Inspected, settings: &DockerConfig) -> Result<Option<Wanted>, String> {
    if !opted_in(&c.labels, settings)? {
        return Ok(None);
    }
    let group = group(c)?;
    let claims = claims(c)?;
    let port = port(c)?;
    let addr = SocketAddr::new(address(c, settings)?, port);
    Ok(Some(Wanted { group, claims, addr, protocol: protocol(c)? }))
}

/// The value of the label `key`, trimmed.
fn label<'a>(labels: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    labels.get(key).map(|v| v.trim())
}

/// Whether a container with `labels` asks to be routed: `holdfast.enable` decides when
/// set; else a `holdfast.host` or `holdfast.path` label, `traefik.enable=true` or
/// `exposed_by_default` opts in. (The container list has the labels: a container that
/// does not opt in is never inspected.)
pub fn opted_in(labels: &HashMap<String, String>, settings: &DockerConfig) -> Result<bool, String> {
    let flag = |key: &str| match label(labels, key) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(format!("label {key}={other:?}: use true or false")),
    };
    if let Some(enabled) = flag("holdfast.enable")? {
        return Ok(enabled);
    }
    if label(labels, "holdfast.host").is_some() || label(labels, "holdfast.path").is_some() {
        return Ok(true);
    }
    Ok(flag("traefik.enable")?.unwrap_or(settings.exposed_by_default))
}

/// `holdfast.group`, else the compose service, else the container's name.
fn group(c: &Inspected) -> Result<String, String> {
    let (key, name) = match (label(&c.labels, "holdfast.group"), label(&c.labels, COMPOSE_SERVICE))
    {
        (Some(g), _) => ("label holdfast.group", g),
        (None, Some(service)) => ("the compose service", service),
        (None, None) => ("the container name", c.name.as_str()),
    };
    let valid = |ch: char| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.');
    if name.is_empty() || !name.chars().all(valid) {
        return Err(format!(
            "{key} {name:?} is not a group name (letters, digits, '-', '_' and '.')"
        ));
    }
    Ok(name.to_string())
}

/// The claims of `holdfast.host` and `holdfast.path`, then of every Traefik router
/// rule, each host and path checked as a config file's route would be.
fn claims(c: &Inspected) -> Result<Vec<Claim>, String> {
    let mut out = Vec::new();
    let hosts = label(&c.labels, "holdfast.host");
    let path = label(&c.labels, "holdfast.path");
    if hosts.is_some() || path.is_some() {
        let path = path.unwrap_or("/").to_string();
        match hosts {
            None => out.push(Claim { host: None, path }),
            Some(list) => {
                for host in list.split(',').map(str::trim).filter(|h| !h.is_empty()) {
                    out.push(Claim { host: Some(host.to_string()), path: path.clone() });
                }
            }
        }
    }
    let mut rules: Vec<(&String, &String)> = c
        .labels
        .iter()
        .filter(|(k, _)| k.starts_with("traefik.http.routers.") && k.ends_with(".rule"))
        .collect();
    rules.sort();
    for (key, rule) in rules {
        out.extend(traefik::claims(rule).map_err(|e| format!("label {key}: {e}"))?);
    }
    for claim in &mut out {
        if let Some(host) = &claim.host {
            match HostPattern::parse(&host.to_ascii_lowercase()) {
                Ok(HostPattern::Any) => claim.host = None,
                Ok(_) => claim.host = Some(host.to_ascii_lowercase()),
                Err(e) => return Err(format!("host: {e}")),
            }
        }
        parse_path_prefix(&claim.path).map_err(|e| format!("path: {e}"))?;
    }
    out.dedup();
    Ok(out)
}

/// `holdfast.port`, else the port of the Traefik services, else the one port the
/// container exposes.
fn port(c: &Inspected) -> Result<u16, String> {
    let parse = |key: &str, v: &str| match v.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("label {key}={v:?} is not a port (1 to 65535)")),
    };
    if let Some(v) = label(&c.labels, "holdfast.port") {
        return parse("holdfast.port", v);
    }
    let mut traefik: Vec<u16> = Vec::new();
    for (key, v) in &c.labels {
        if key.starts_with("traefik.http.services.") && key.ends_with(".loadbalancer.server.port") {
            traefik.push(parse(key, v.trim())?);
        }
    }
    traefik.sort_unstable();
    traefik.dedup();
    match (traefik.as_slice(), c.exposed_ports.as_slice()) {
        ([one], _) => Ok(*one),
        ([], [one]) => Ok(*one),
        ([], []) => Err("no port: it exposes none; set the label holdfast.port".into()),
        ([], many) => Err(format!("it exposes {} ports; set the label holdfast.port", many.len())),
        (many, _) => Err(format!(
            "its Traefik services name {} ports; set the label holdfast.port",
            many.len()
        )),
    }
}

/// 127.0.0.1 on the host network; else its address on `[docker] network`, or on its
/// only network.
fn address(c: &Inspected, settings: &DockerConfig) -> Result<IpAddr, String> {
    if c.host_network {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let addresses: Vec<(&str, IpAddr)> =
        c.networks.iter().filter_map(|(name, ip)| ip.map(|ip| (name.as_str(), ip))).collect();
    match (&settings.network, addresses.as_slice()) {
        (Some(wanted), found) => found
            .iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, ip)| *ip)
            .ok_or_else(|| format!("it has no address on the network {wanted:?}")),
        (None, [(_, ip)]) => Ok(*ip),
        (None, []) => Err("it has no network address".into()),
        (None, several) => Err(format!(
            "it is on {} networks; name the one to use with [docker] network",
            several.len()
        )),
    }
}

/// `holdfast.protocol`, else a Traefik service's `scheme=h2c`, else HTTP/1.1.
fn protocol(c: &Inspected) -> Result<Protocol, String> {
    match label(&c.labels, "holdfast.protocol") {
        Some("http1") => return Ok(Protocol::Http1),
        Some("h2c") => return Ok(Protocol::H2c),
        Some(other) => {
            return Err(format!("label holdfast.protocol={other:?}: use http1 or h2c"));
        }
        None => {}
    }
    let h2c = c.labels.iter().any(|(k, v)| {
        k.starts_with("traefik.http.services.")
            && k.ends_with(".loadbalancer.server.scheme")
            && v.trim() == "h2c"
    });
    Ok(if h2c { Protocol::H2c } else { Protocol::Http1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(labels: &[(&str, &str)]) -> Inspected {
        Inspected::example("1", labels, Health::None)
    }

    fn wanted(labels: &[(&str, &str)]) -> Result<Option<Wanted>, String> {
        read(&container(labels), &DockerConfig::default())
    }

    fn claim(host: Option<&str>, path: &str) -> Claim {
        Claim { host: host.map(str::to_string), path: path.into() }
    }

    #[test]
    fn holdfast_labels_give_group_hosts_path_port_and_protocol() {
        let w = wanted(&[
            ("holdfast.host", "a.test, B.test"),
            ("holdfast.path", "/api"),
            ("holdfast.port", "3000"),
            ("holdfast.protocol", "h2c"),
            ("holdfast.group", "api"),
        ])
        .expect("valid")
        .expect("routed");
        assert_eq!(w.group, "api");
        assert_eq!(w.claims, [claim(Some("a.test"), "/api"), claim(Some("b.test"), "/api")]);
        assert_eq!(w.addr, "127.0.0.1:3000".parse().expect("addr"));
        assert_eq!(w.protocol, Protocol::H2c);
    }

    #[test]
    fn unlabelled_containers_are_not_routed_unless_exposed_by_default() {
        assert_eq!(wanted(&[]), Ok(None));
        let exposed = DockerConfig { exposed_by_default: true, ..DockerConfig::default() };
        let w = read(&container(&[]), &exposed).expect("valid").expect("routed");
        assert_eq!((w.group.as_str(), w.claims.len()), ("c-1", 0));
        let off = [("holdfast.enable", "false"), ("holdfast.host", "a.test")];
        assert_eq!(read(&container(&off), &exposed), Ok(None));
        assert_eq!(wanted(&[("traefik.enable", "false")]), Ok(None));
    }

    #[test]
    fn the_compose_service_is_the_default_group() {
        let w = wanted(&[("holdfast.host", "a.test"), (COMPOSE_SERVICE, "shop")]);
        assert_eq!(w.expect("valid").expect("routed").group, "shop");
    }

    #[test]
    fn a_traefik_compose_file_is_read_unchanged() {
        let w = wanted(&[
            ("traefik.enable", "true"),
            ("traefik.http.routers.web.rule", "Host(`a.test`) || Host(`b.test`)"),
            ("traefik.http.routers.api.rule", "Host(`a.test`) && PathPrefix(`/api`)"),
            ("traefik.http.services.web.loadbalancer.server.port", "5000"),
        ])
        .expect("valid")
        .expect("routed");
        let expected =
            [claim(Some("a.test"), "/api"), claim(Some("a.test"), "/"), claim(Some("b.test"), "/")];
        assert_eq!(w.claims, expected);
        assert_eq!(w.addr.port(), 5000);
    }

    #[test]
    fn labels_that_cannot_be_followed_say_why() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (&[("holdfast.enable", "yes")], "use true or false"),
            (&[("holdfast.host", "a b")], "not a valid host"),
            (&[("holdfast.host", "a.test"), ("holdfast.port", "0")], "not a port"),
            (&[("holdfast.host", "a.test"), ("holdfast.protocol", "h3")], "use http1 or h2c"),
            (&[("holdfast.host", "a.test"), ("holdfast.path", "api")], "must start with '/'"),
        ];
        for (labels, expected) in cases {
            let err = wanted(labels).expect_err(expected);
            assert!(err.contains(expected), "{labels:?}: {err}");
        }
    }

    #[test]
    fn the_port_comes_from_the_only_exposed_port_or_must_be_named() {
        let mut c = container(&[("holdfast.host", "a.test")]);
        c.exposed_ports = vec![80, 443];
        let err = read(&c, &DockerConfig::default()).expect_err("two ports");
        assert!(err.contains("set the label holdfast.port"), "{err}");
        c.exposed_ports.clear();
        assert!(read(&c, &DockerConfig::default()).is_err());
    }

    #[test]
    fn a_bridge_container_is_reached_on_its_network() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().expect("ip"));
        let mut c = container(&[("holdfast.host", "a.test")]);
        c.host_network = false;
        c.networks = vec![("front".into(), ip("10.0.1.5")), ("back".into(), ip("10.0.2.5"))];
        let err = read(&c, &DockerConfig::default()).expect_err("two networks");
        assert!(err.contains("[docker] network"), "{err}");
        let back = DockerConfig { network: Some("back".into()), ..DockerConfig::default() };
        let w = read(&c, &back).expect("valid").expect("routed");
        assert_eq!(w.addr, "10.0.2.5:8080".parse().expect("addr"));
        c.networks.truncate(1);
        let w = read(&c, &DockerConfig::default()).expect("valid").expect("routed");
        assert_eq!(w.addr, "10.0.1.5:8080".parse().expect("addr"));
    }
}
