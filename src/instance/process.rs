//! What `/metrics` shows, read at each scrape into one plain [`Snapshot`]: every
//! group's and backend's counters (their families are declared in
//! `upstream::metrics`), then the numbers about the whole process that this instance
//! keeps or gathers (client connections, the access log, the proxy's own answers,
//! reloads, draining), whose families are declared here or beside their owner.

use crate::metrics::{Family, Report, Writer, NO_LABELS};
use crate::proxy::answers::AnswersSnapshot;
use crate::upstream::UpstreamsSnapshot;

/// Everything `/metrics` shows, read at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub upstreams: UpstreamsSnapshot,
    pub process: ProcessSnapshot,
}

impl Report for Snapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        self.upstreams.report(out)?;
        self.process.report(out)
    }
}

/// Process-wide numbers, read at each scrape.
#[derive(Debug, Clone, Default)]
pub struct ProcessSnapshot {
    /// Client connections open now, across listeners.
    pub client_connections: usize,
    pub client_connections_accepted: u64,
    pub access_log_dropped: u64,
    /// Responses the proxy made itself, and requests it refused or could not route.
    pub answers: AnswersSnapshot,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    pub draining: bool,
}

const LISTENER_CONNECTIONS: Family =
    Family { name: "holdfast_listener_connections", help: "Client connections open now." };
const LISTENER_CONNECTIONS_ACCEPTED: Family =
    Family { name: "holdfast_listener_connections_accepted", help: "Client connections accepted." };
const ACCESS_LOG_DROPPED: Family = Family {
    name: "holdfast_access_log_dropped",
    help: "Access log lines dropped because the writer was behind.",
};
const CONFIG_RELOADS: Family = Family {
    name: "holdfast_config_reloads",
    help: "Config reloads, by result (a failed reload keeps the config in force).",
};
const DRAINING: Family = Family {
    name: "holdfast_draining",
    help: "1 while holdfast is shutting down and draining requests in flight.",
};
const BUILD: Family = Family { name: "holdfast_build", help: "The running holdfast version." };

impl Report for ProcessSnapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        out.gauge(&LISTENER_CONNECTIONS, [(NO_LABELS, self.client_connections as u64)])?;
        out.counter(
            &LISTENER_CONNECTIONS_ACCEPTED,
            [(NO_LABELS, self.client_connections_accepted)],
        )?;
        out.counter(&ACCESS_LOG_DROPPED, [(NO_LABELS, self.access_log_dropped)])?;
        self.answers.report(out)?;
        out.counter(
            &CONFIG_RELOADS,
            [([("result", "ok")], self.reloads_ok), ([("result", "failed")], self.reloads_failed)],
        )?;
        out.gauge(&DRAINING, [(NO_LABELS, u64::from(self.draining))])?;
        out.info(&BUILD, [("version", env!("CARGO_PKG_VERSION"))])
    }
}
