//! The containers holdfast knows, which of them are in service, and the groups they
//! make: one per `holdfast.group` (or compose service, or name) with a server for each
//! container in service, and the hosts and path prefixes its containers claim.
//!
//! A container is in service when Docker says it is `healthy` or, without a
//! `HEALTHCHECK`, once holdfast's own first check passed; never after it was sent a
//! stop signal. Routes stay while the group has containers at all, so a group whose
//! containers are all starting answers 502 (no server in service), not 404.

use std::collections::BTreeMap;

use super::labels::{self, Health, Inspected, Wanted};
use super::settings::DockerConfig;
use super::traefik::Claim;
use crate::upstream::settings::Protocol;
use crate::upstream::{ContainerRef, Server};

/// What one known container is and asks for.
#[derive(Debug, Clone)]
struct Entry {
    reference: ContainerRef,
    wanted: Wanted,
    health: Health,
    /// holdfast's own first check passed (for a container without `HEALTHCHECK`).
    checked: bool,
    /// It was sent a stop signal: it leaves now, whatever it answers meanwhile.
    stopping: bool,
    /// The signal `docker stop` sends it, when not SIGTERM.
    stop_signal: Option<String>,
    /// Paused: out of service until unpaused.
    paused: bool,
}

impl Entry {
    fn in_service(&self) -> bool {
        !self.stopping
            && !self.paused
            && match self.health {
                Health::Healthy => true,
                Health::None => self.checked,
                Health::Starting | Health::Unhealthy => false,
            }
    }
}

/// What a container's new state asks of the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Nothing: it is in service, out of it, or not routed.
    Nothing,
    /// holdfast must check it before it joins (it has no `HEALTHCHECK`).
    Check(Wanted, ContainerRef),
}

/// The containers that ask to be routed, by ID.
#[derive(Debug, Default)]
pub struct Table {
    entries: BTreeMap<String, Entry>,
}

impl Table {
    /// Takes in what was just read of a container. Labels that cannot be followed are
    /// returned as the error, for the log; the container is then not routed.
    pub fn update(&mut self, c: &Inspected, settings: &DockerConfig) -> Result<Next, String> {
        if !c.running {
            self.entries.remove(&c.id);
            return Ok(Next::Nothing);
        }
        let wanted = match labels::read(c, settings) {
            Ok(Some(wanted)) => wanted,
            Ok(None) => {
                self.entries.remove(&c.id);
                return Ok(Next::Nothing);
            }
            Err(e) => {
                self.entries.remove(&c.id);
                return Err(e);
            }
        };
        let reference = ContainerRef {
            id: c.id.as_str().into(),
            name: c.name.as_str().into(),
            started: c.started.as_str().into(),
        };
        // The same process keeps what holdfast learned of it; a restart starts over.
        let same = self.entries.get(&c.id).filter(|e| e.reference == reference);
        let checked = same.is_some_and(|e| e.checked && e.wanted.addr == wanted.addr);
        let stopping = same.is_some_and(|e| e.stopping);
        let stop_signal = c.stop_signal.clone();
        let entry = Entry {
            reference,
            wanted,
            health: c.health,
            checked,
            stopping,
            stop_signal,
            paused: c.paused,
        };
        let next = if entry.health == Health::None && !checked && !stopping && !c.paused {
            Next::Check(entry.wanted.clone(), entry.reference.clone())
        } else {
            Next::Nothing
        };
        self.entries.insert(c.id.clone(), entry);
        Ok(next)
    }

    /// The container is gone (died, stopped, removed).
    pub fn remove(&mut self, id: &str) -> bool {
        self.entries.remove(id).is_some()
    }

    /// The container was sent `signal` (a number, as Docker's `kill` event says it):
    /// when that asks it to stop, it is out of service from now on.
    pub fn stopping(&mut self, id: &str, signal: &str) -> bool {
        match self.entries.get_mut(id) {
            Some(e) if !e.stopping && is_stop_signal(signal, e.stop_signal.as_deref()) => {
                e.stopping = true;
                true
            }
            _ => false,
        }
    }

    /// holdfast's first check of the container `reference` passed; false when that
    /// process is no longer the one known.
    pub fn checked(&mut self, reference: &ContainerRef) -> bool {
        match self.entries.get_mut(&*reference.id) {
            Some(e) if e.reference == *reference && !e.checked => {
                e.checked = true;
                true
            }
            _ => false,
        }
    }

    /// Whether the container `reference` still waits for its first check.
    #[cfg(test)]
    fn waits_for_check(&self, reference: &ContainerRef) -> bool {
        self.entries.get(&*reference.id).is_some_and(|e| {
            e.reference == *reference && e.health == Health::None && !e.checked && !e.stopping
        })
    }

    /// Keeps only the containers in `running` (IDs), after a full listing.
    pub fn retain(&mut self, running: &[String]) {
        self.entries.retain(|id, _| running.contains(id));
    }

    /// How many containers are in service, waiting to be, and leaving.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for e in self.entries.values() {
            match (e.in_service(), e.stopping) {
                (true, _) => counts.in_service += 1,
                (false, true) => counts.stopping += 1,
                (false, false) => counts.waiting += 1,
            }
        }
        counts
    }

    /// The groups the known containers make.
    pub fn discovered(&self) -> Discovered {
        let mut groups: BTreeMap<String, Found> = BTreeMap::new();
        let mut entries: Vec<&Entry> = self.entries.values().collect();
        entries.sort_by(|a, b| a.reference.name.cmp(&b.reference.name));
        for e in entries {
            let found = groups.entry(e.wanted.group.clone()).or_insert_with(|| Found {
                protocol: e.wanted.protocol,
                servers: Vec::new(),
                claims: Vec::new(),
            });
            for claim in &e.wanted.claims {
                if !found.claims.contains(claim) {
                    found.claims.push(claim.clone());
                }
            }
            if e.in_service() {
                let container = e.reference.clone();
                found.servers.push(Server::Container { addr: e.wanted.addr, container });
            }
        }
        Discovered { groups }
    }
}

/// Whether `signal` ends a process: SIGINT, SIGQUIT, SIGKILL, SIGTERM, or the
/// container's own stop signal (`STOPSIGNAL`, as a name or a number). `docker kill -s
/// HUP` and the like leave a container in service.
fn is_stop_signal(signal: &str, own: Option<&str>) -> bool {
    const STOPPING: [(&str, &str); 4] =
        [("2", "SIGINT"), ("3", "SIGQUIT"), ("9", "SIGKILL"), ("15", "SIGTERM")];
    let named = |s: &str| {
        let s = s.trim().to_ascii_uppercase();
        if s.starts_with("SIG") {
            s
        } else {
            format!("SIG{s}")
        }
    };
    if STOPPING.iter().any(|(n, _)| *n == signal) {
        return true;
    }
    own.is_some_and(|own| {
        own == signal
            || STOPPING.iter().any(|(n, name)| *n == signal && named(own) == *name)
            || own.parse::<u32>().is_err() && signal_number(&named(own)) == Some(signal)
    })
}

/// The number of a few signals a `STOPSIGNAL` names beyond the usual ones.
fn signal_number(name: &str) -> Option<&'static str> {
    match name {
        "SIGHUP" => Some("1"),
        "SIGUSR1" => Some("10"),
        "SIGUSR2" => Some("12"),
        "SIGWINCH" => Some("28"),
        "SIGPWR" => Some("30"),
        _ => None,
    }
}

/// Containers by state, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub in_service: usize,
    pub waiting: usize,
    pub stopping: usize,
}

/// The groups and routes the containers make, by group name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovered {
    pub groups: BTreeMap<String, Found>,
}

/// One group's containers in service, and what its containers claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// What its first container (by name) speaks.
    pub protocol: Protocol,
    pub servers: Vec<Server>,
    pub claims: Vec<Claim>,
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    fn container(id: &str, labels: &[(&str, &str)], health: Health) -> Inspected {
        Inspected::example(id, labels, health)
    }

    fn settings() -> DockerConfig {
        DockerConfig::default()
    }

    fn servers(table: &Table, group: &str) -> Vec<SocketAddr> {
        let discovered = table.discovered();
        let Some(found) = discovered.groups.get(group) else { return Vec::new() };
        found
            .servers
            .iter()
            .map(|s| match s {
                Server::Container { addr, .. } => *addr,
                other => panic!("not a container: {other:?}"),
            })
            .collect()
    }

    const WEB: [(&str, &str); 2] = [("holdfast.host", "a.test"), ("holdfast.group", "web")];

    #[test]
    fn a_container_with_a_healthcheck_joins_when_healthy_and_leaves_when_not() {
        let mut table = Table::default();
        let mut c = container("a", &WEB, Health::Starting);
        assert_eq!(table.update(&c, &settings()), Ok(Next::Nothing));
        assert!(servers(&table, "web").is_empty(), "starting: not in service");
        assert_eq!(table.discovered().groups["web"].claims.len(), 1, "its route is there");
        c.health = Health::Healthy;
        table.update(&c, &settings()).expect("valid");
        assert_eq!(servers(&table, "web").len(), 1);
        c.health = Health::Unhealthy;
        table.update(&c, &settings()).expect("valid");
        assert!(servers(&table, "web").is_empty());
    }

    #[test]
    fn a_container_without_a_healthcheck_joins_after_holdfasts_first_check() {
        let mut table = Table::default();
        let c = container("a", &WEB, Health::None);
        let Ok(Next::Check(_, reference)) = table.update(&c, &settings()) else {
            panic!("a check is asked for")
        };
        assert!(servers(&table, "web").is_empty());
        assert!(table.waits_for_check(&reference));
        assert!(table.checked(&reference));
        assert_eq!(servers(&table, "web").len(), 1);
        // Read again (a resync): it stays checked.
        assert_eq!(table.update(&c, &settings()), Ok(Next::Nothing));
        assert_eq!(servers(&table, "web").len(), 1);
        // A restart is a new process: checked again.
        let mut restarted = c.clone();
        restarted.started = "t1".into();
        assert!(matches!(table.update(&restarted, &settings()), Ok(Next::Check(..))));
        assert!(servers(&table, "web").is_empty());
        assert!(!table.checked(&reference), "the old process's check counts for nothing");
    }

    #[test]
    fn a_stop_signal_takes_a_container_out_until_it_is_gone() {
        let mut table = Table::default();
        let c = container("a", &WEB, Health::Healthy);
        table.update(&c, &settings()).expect("valid");
        assert!(!table.stopping("a", "1"), "SIGHUP asks no container to stop");
        assert!(table.stopping("a", "15"));
        assert!(servers(&table, "web").is_empty());
        table.update(&c, &settings()).expect("valid");
        assert!(servers(&table, "web").is_empty(), "still healthy, still leaving");
        assert!(table.remove("a"));
        assert!(table.discovered().groups.is_empty());
        assert_eq!(table.counts(), Counts::default());
    }

    #[test]
    fn a_paused_container_is_out_of_service_and_keeps_its_routes() {
        let mut table = Table::default();
        let mut c = container("a", &WEB, Health::Healthy);
        table.update(&c, &settings()).expect("valid");
        c.paused = true;
        table.update(&c, &settings()).expect("valid");
        assert!(servers(&table, "web").is_empty());
        assert_eq!(table.discovered().groups["web"].claims.len(), 1, "502, not 404");
        c.paused = false;
        table.update(&c, &settings()).expect("valid");
        assert_eq!(servers(&table, "web").len(), 1);
    }

    #[test]
    fn a_stopsignal_of_its_own_counts_as_a_stop() {
        assert!(is_stop_signal("15", None));
        assert!(is_stop_signal("9", Some("SIGQUIT")));
        assert!(is_stop_signal("28", Some("SIGWINCH")));
        assert!(is_stop_signal("28", Some("WINCH")));
        assert!(is_stop_signal("10", Some("10")));
        assert!(!is_stop_signal("1", None));
        assert!(!is_stop_signal("10", Some("SIGWINCH")));
    }
}
