//! Docker discovery: groups and routes from the labels of the containers of a Docker
//! Engine, followed as containers start, turn healthy, get a stop signal, die and go.
//!
//! The provider ([`run`]) talks to the Engine API with `bollard` at the API version
//! the daemon offers (negotiated at each connect, never fixed), reads every running
//! container at start and every `resync`, and re-reads one container when an event
//! says it changed. It keeps a [`table::Table`] of the containers that ask to be
//! routed (`labels.rs` reads what they ask, `traefik.rs` Traefik's rules) and
//! publishes what they make, [`Discovered`], whenever that changes; the instance adds
//! it to the file's config and applies the whole, as a reload does: groups
//! swapped whole, backends that stay keeping their pools, listeners untouched.
//!
//! A container joins its group only when it is in service (`table.rs` says when):
//! `healthy` for one with a `HEALTHCHECK`, else once holdfast's own first check of it
//! passed (`gate.rs`). A stop signal (the `kill` event `docker stop` causes), `die`,
//! `stop`, `destroy` or `unhealthy` takes it out at once. A backend is the address and
//! the container together (`upstream::ContainerRef`), so a container that takes over
//! an address starts with an empty pool.
//!
//! When the daemon goes away (restart, upgrade) the provider keeps the last table,
//! so nothing stops being routed, and connects again with growing pauses.

mod gate;
pub mod labels;
pub mod settings;
pub mod table;
mod traefik;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::models::{ContainerInspectResponse, EventMessage, HealthStatusEnum};
use bollard::query_parameters::{EventsOptionsBuilder, ListContainersOptionsBuilder};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::metrics::{Family, Report, Writer, NO_LABELS};
use crate::upstream::{ContainerRef, Upstreams};
use labels::{Health, Inspected};
use settings::DockerConfig;
use table::{Counts, Next, Table};

pub use table::Discovered;

/// How long one API request may take before the connection counts as broken.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The first pause before connecting again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How far before a listing the events subscription after it starts: the events
/// are stamped by the daemon's clock, which may be a little behind this one (a remote
/// Engine).
const SINCE_MARGIN: Duration = Duration::from_secs(2);

/// The container events that may change what a container asks or whether it is in
/// service; `health_status` matches each `health_status: STATE`. A paused container
/// answers nothing: it is out of service until unpaused.
const EVENTS: [&str; 9] =
    ["start", "die", "stop", "destroy", "kill", "health_status", "rename", "pause", "unpause"];

/// What the provider shows on `/metrics`.
#[derive(Debug, Default)]
pub struct DockerState {
    connected: AtomicBool,
    events: AtomicU64,
    connects: AtomicU64,
    counts: Mutex<Counts>,
}

impl DockerState {
    pub fn snapshot(&self) -> DockerSnapshot {
        DockerSnapshot {
            connected: self.connected.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
            connects: self.connects.load(Ordering::Relaxed),
            counts: *self.counts.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// The provider's numbers at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct DockerSnapshot {
    pub connected: bool,
    pub events: u64,
    pub connects: u64,
    pub counts: Counts,
}

const CONNECTED: Family = Family {
    name: "holdfast_docker_connected",
    help: "1 while the Docker event stream is up (routes are kept while it is down).",
};
const CONNECTS: Family =
    Family { name: "holdfast_docker_connects", help: "Connections made to the Docker Engine." };
const EVENTS_SEEN: Family =
    Family { name: "holdfast_docker_events", help: "Container events read from Docker." };
const CONTAINERS: Family = Family {
    name: "holdfast_docker_containers",
    help: "Routed containers by state: in_service, waiting (starting or not checked yet), \
           stopping.",
};

impl Report for DockerSnapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        out.gauge(&CONNECTED, [(NO_LABELS, u64::from(self.connected))])?;
        out.counter(&CONNECTS, [(NO_LABELS, self.connects)])?;
        out.counter(&EVENTS_SEEN, [(NO_LABELS, self.events)])?;
        let c = self.counts;
        out.gauge(
            &CONTAINERS,
            [
                ([("state", "in_service")], c.in_service as u64),
                ([("state", "waiting")], c.waiting as u64),
                ([("state", "stopping")], c.stopping as u64),
            ],
        )
    }
}

/// Follows the Engine until `stop`, publishing each new [`Discovered`] on `publish`.
/// `groups` are the groups in force, whose active checks a new container's first
/// check uses.
pub async fn run(
    settings: DockerConfig,
    groups: Arc<Upstreams>,
    state: Arc<DockerState>,
    publish: watch::Sender<Arc<Discovered>>,
    mut stop: watch::Receiver<bool>,
) {
    let (checked_tx, checked_rx) = mpsc::channel(64);
    let mut provider = Provider {
        settings,
        groups,
        state,
        publish,
        table: Table::default(),
        warned: HashMap::new(),
        gates: HashMap::new(),
        checked_tx,
        checked_rx,
    };
    let mut backoff = FIRST_BACKOFF;
    // Failed connects since the last session that ran: the first is logged, then one
    // in every `QUIET` (a minute apart once the pauses reach their longest).
    let mut failures = 0u64;
    const QUIET: u64 = 12;
    loop {
        tokio::select! {
            ended = provider.session() => {
                // A session that got as far as following events starts the pauses over.
                if provider.state.connected.swap(false, Ordering::Relaxed) {
                    backoff = FIRST_BACKOFF;
                    failures = 0;
                }
                match ended {
                    Ok(()) => tracing::warn!("docker: the event stream ended; connecting again"),
                    Err(e) => {
                        if failures % QUIET == 0 {
                            let endpoint = provider.endpoint();
                            let error = with_causes(&e);
                            tracing::warn!(endpoint, error, failures = failures + 1, "docker: cannot follow the Engine; the routes found so far stay");
                        }
                        failures += 1;
                    }
                }
            }
            _ = stop.changed() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

struct Provider {
    settings: DockerConfig,
    groups: Arc<Upstreams>,
    state: Arc<DockerState>,
    publish: watch::Sender<Arc<Discovered>>,
    table: Table,
    /// The label problem last logged for each container, so it is said once.
    warned: HashMap<String, String>,
    /// The first checks running, by container ID.
    gates: HashMap<String, (ContainerRef, tokio::task::AbortHandle)>,
    checked_tx: mpsc::Sender<ContainerRef>,
    checked_rx: mpsc::Receiver<ContainerRef>,
}

/// Why a session with the Engine ended.
type SessionError = bollard::errors::Error;

/// An error and every cause under it: the client's own message alone ("client error
/// (Connect)") does not say that the socket refused holdfast's user.
fn with_causes(e: &SessionError) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    if text.contains("ermission denied") {
        text.push_str(
            " (holdfast's user cannot open the Docker socket: add it to the socket's group, \
             e.g. compose's group_add with `stat -c %g /var/run/docker.sock`)",
        );
    }
    text
}

impl Provider {
    /// Where the Engine is looked for, as the log says it.
    fn endpoint(&self) -> String {
        match &self.settings.endpoint {
            Some(endpoint) => endpoint.clone(),
            None => std::env::var("DOCKER_HOST")
                .unwrap_or_else(|_| "unix:///var/run/docker.sock".into()),
        }
    }

    /// One connection to the Engine: read every container, then follow events from
    /// just before that reading (and resync every `resync`) until the stream breaks.
    async fn session(&mut self) -> Result<(), SessionError> {
        let docker = connect(&self.settings).await?;
        let mut filters = HashMap::new();
        filters.insert("type", vec!["container"]);
        filters.insert("event", EVENTS.to_vec());
        // The events stream asks nothing of the daemon until it is first read, which is
        // after the listing: it asks for the events from before the listing on, so a
        // container that starts between the two is not missed until the next resync.
        // Events the listing already saw come again and are read again, in order: they
        // end where the listing was.
        let since = events_since();
        self.resync(&docker).await?;
        let options = EventsOptionsBuilder::default().since(&since).filters(&filters).build();
        let mut events = docker.events(Some(options));
        self.state.connects.fetch_add(1, Ordering::Relaxed);
        self.state.connected.store(true, Ordering::Relaxed);
        tracing::info!(api = %docker.client_version(), "docker: following container events");
        let mut resync = tokio::time::interval(self.settings.resync);
        resync.reset();
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => self.on_event(&docker, event).await?,
                    Some(Err(e)) => return Err(e),
                    None => return Ok(()),
                },
                Some(reference) = self.checked_rx.recv() => {
                    self.gates.remove(&*reference.id);
                    if self.table.checked(&reference) {
                        tracing::info!(container = %reference.name, "docker: first check passed");
                        self.publish();
                    }
                }
                _ = resync.tick() => self.resync(&docker).await?,
            }
        }
    }

    /// Reads every running container again and publishes what changed.
    async fn resync(&mut self, docker: &Docker) -> Result<(), SessionError> {
        let options = ListContainersOptionsBuilder::default().all(false).build();
        let listed = docker.list_containers(Some(options)).await?;
        let mut running = Vec::new();
        for summary in listed {
            let Some(id) = summary.id else { continue };
            let labels = summary.labels.unwrap_or_default();
            if labels::opted_in(&labels, &self.settings) == Ok(false) {
                continue;
            }
            match docker.inspect_container(&id, None).await {
                Ok(found) => {
                    self.take_in(inspected(found));
                    running.push(id);
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        self.table.retain(&running);
        self.gates.retain(|id, (_, gate)| {
            let keep = running.contains(id);
            if !keep {
                gate.abort();
            }
            keep
        });
        self.warned.retain(|id, _| running.contains(id));
        self.publish();
        Ok(())
    }

    async fn on_event(&mut self, docker: &Docker, event: EventMessage) -> Result<(), SessionError> {
        self.state.events.fetch_add(1, Ordering::Relaxed);
        let action = event.action.unwrap_or_default();
        let actor = event.actor.unwrap_or_default();
        let Some(id) = actor.id else { return Ok(()) };
        let attributes = actor.attributes.unwrap_or_default();
        let name = attributes.get("name").map_or("", String::as_str);
        match action.as_str() {
            "kill" => {
                let signal = attributes.get("signal").map_or("", String::as_str);
                if self.table.stopping(&id, signal) {
                    tracing::info!(container = %name, signal, "docker: stop signal; out of service");
                    self.publish();
                }
            }
            "die" | "stop" | "destroy" => self.forget(&id, name, &action),
            _ => match docker.inspect_container(&id, None).await {
                Ok(found) => {
                    self.take_in(inspected(found));
                    self.publish();
                }
                Err(e) if is_not_found(&e) => self.forget(&id, name, "gone"),
                Err(e) => return Err(e),
            },
        }
        Ok(())
    }

    /// The container `id` is gone or going: out of its group now.
    fn forget(&mut self, id: &str, name: &str, why: &str) {
        if let Some((_, gate)) = self.gates.remove(id) {
            gate.abort();
        }
        self.warned.remove(id);
        if self.table.remove(id) {
            tracing::info!(container = %name, event = %why, "docker: out of service");
            self.publish();
        }
    }

    /// Takes in what was read of one container: its table entry, a first check when
    /// it needs one, a warning when its labels cannot be followed.
    fn take_in(&mut self, c: Inspected) {
        match self.table.update(&c, &self.settings) {
            Ok(Next::Nothing) => {
                self.warned.remove(&c.id);
            }
            Ok(Next::Check(wanted, reference)) => {
                self.warned.remove(&c.id);
                let running = self.gates.get(&c.id).is_some_and(|(r, _)| *r == reference);
                if !running {
                    let check = self.groups.check_of(&wanted.group);
                    let gate = tokio::spawn(gate::first_check(
                        wanted,
                        reference.clone(),
                        check,
                        self.checked_tx.clone(),
                    ));
                    if let Some((_, old)) =
                        self.gates.insert(c.id.clone(), (reference, gate.abort_handle()))
                    {
                        old.abort();
                    }
                }
            }
            Err(problem) => {
                if self.warned.get(&c.id) != Some(&problem) {
                    tracing::warn!(container = %c.name, problem = %problem, "docker: labels not followed; the container is not routed");
                    self.warned.insert(c.id.clone(), problem);
                }
            }
        }
    }

    /// Sends what the table makes now, when it differs from what was sent.
    fn publish(&mut self) {
        *self.state.counts.lock().unwrap_or_else(|e| e.into_inner()) = self.table.counts();
        let discovered = self.table.discovered();
        self.publish.send_if_modified(|current| {
            if **current == discovered {
                return false;
            }
            *current = Arc::new(discovered);
            true
        });
    }
}

/// A client for the Engine at `settings.endpoint` (else `DOCKER_HOST`, else the local
/// socket), at the API version the daemon offers.
async fn connect(settings: &DockerConfig) -> Result<Docker, SessionError> {
    let docker = match &settings.endpoint {
        Some(endpoint) => Docker::connect_with_host(endpoint)?,
        None => Docker::connect_with_defaults()?,
    };
    docker.with_timeout(REQUEST_TIMEOUT).negotiate_version().await
}

/// The `since` of an events subscription made after a listing that starts now:
/// [`SINCE_MARGIN`] ago, as Unix seconds and nanoseconds.
fn events_since() -> String {
    let now = std::time::SystemTime::now();
    let since = now.checked_sub(SINCE_MARGIN).unwrap_or(now);
    let since_epoch = since.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:09}", since_epoch.as_secs(), since_epoch.subsec_nanos())
}

fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
}

/// The facts of an inspected container that routing needs.
fn inspected(found: ContainerInspectResponse) -> Inspected {
    let state = found.state.unwrap_or_default();
    let config = found.config.unwrap_or_default();
    let health = match state.health.and_then(|h| h.status) {
        Some(HealthStatusEnum::HEALTHY) => Health::Healthy,
        Some(HealthStatusEnum::STARTING) => Health::Starting,
        Some(HealthStatusEnum::UNHEALTHY) => Health::Unhealthy,
        _ => Health::None,
    };
    let exposed_ports = config
        .exposed_ports
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.strip_suffix("/tcp").unwrap_or(p).parse().ok())
        .collect();
    let network_mode = found.host_config.and_then(|h| h.network_mode).unwrap_or_default();
    let networks = found
        .network_settings
        .and_then(|n| n.networks)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, endpoint)| {
            let ip = endpoint.ip_address.and_then(|ip| ip.parse::<IpAddr>().ok());
            (name, ip)
        })
        .collect();
    Inspected {
        id: found.id.unwrap_or_default(),
        name: found.name.unwrap_or_default().trim_start_matches('/').to_string(),
        started: state.started_at.unwrap_or_default(),
        running: state.running.unwrap_or(false),
        paused: state.paused.unwrap_or(false),
        labels: config.labels.unwrap_or_default(),
        exposed_ports,
        host_network: network_mode == "host",
        networks,
        health,
        stop_signal: config.stop_signal,
    }
}
