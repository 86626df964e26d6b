//! Docker discovery as configured (`[docker]`, or `--docker` in quick mode), with the
//! defaults it starts from.

use std::time::Duration;

/// How often the whole container list is read again, beside the event stream.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(30);

/// Where holdfast finds the Docker Engine and which containers it routes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerConfig {
    /// The Engine API: `unix:///var/run/docker.sock`, `tcp://host:2375` or
    /// `http://host:2375`; `None`: `DOCKER_HOST`, else the local socket.
    pub endpoint: Option<String>,
    /// The network whose address a container is reached at, when it is on several;
    /// `None`: its only network (host-network containers are reached on 127.0.0.1).
    pub network: Option<String>,
    /// Whether a container with no `holdfast.*` or `traefik.enable` label of its own is
    /// routed too (by its group name); off by default, as Traefik's `exposedByDefault`
    /// should be.
    pub exposed_by_default: bool,
    /// How often every container is read again, in case an event was missed.
    pub resync: Duration,
    /// How long the upgraded connections (WebSockets) to a container that left may go
    /// on; requests in flight finish within their own timeouts.
    pub drain_timeout: Duration,
}

/// Default [`DockerConfig::drain_timeout`]: longer than Docker's own 10 s between
/// `docker stop`'s signal and its SIGKILL, so a container that is stopping closes its
/// WebSockets itself; one that turned unhealthy but runs on loses them after this.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for DockerConfig {
    fn default() -> DockerConfig {
        DockerConfig {
            endpoint: None,
            network: None,
            exposed_by_default: false,
            resync: DEFAULT_RESYNC,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// Checks an `endpoint` value: one of the schemes the client speaks.
pub fn check_endpoint(text: &str) -> Result<(), String> {
    let known = ["unix://", "tcp://", "http://"];
    match known.iter().find(|s| text.starts_with(**s)) {
        Some(scheme) if text.len() > scheme.len() => Ok(()),
        _ => Err(format!(
            "{text:?} is not a Docker endpoint (use \"unix:///var/run/docker.sock\", \
             \"tcp://HOST:PORT\" or \"http://HOST:PORT\")"
        )),
    }
}
