//! What `/metrics` shows, read at each scrape into one plain [`Snapshot`]: every
//! group's and backend's counters (their families are declared in
//! `upstream::metrics`), then the numbers about the whole process that this instance
//! keeps or gathers: client connections (`connections`), the access log
//! (`telemetry::access_log`), the proxy's own answers (`proxy::answers`), each written
//! by its owner, then reloads, draining and the build, which this instance owns, and
//! the certificate manager's orders and certificates (`acme`) when it runs.

use crate::acme::AcmeSnapshot;
use crate::connections::ConnectionsSnapshot;
use crate::docker::DockerSnapshot;
use crate::metrics::{Family, Report, Writer, NO_LABELS};
use crate::proxy::answers::AnswersSnapshot;
use crate::telemetry::access_log::AccessLog;
use crate::tls::failures::TlsSnapshot;
use crate::upstream::UpstreamsSnapshot;

/// Everything `/metrics` shows, read at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub upstreams: UpstreamsSnapshot,
    pub process: ProcessSnapshot,
    /// The TLS listeners' handshakes.
    pub tls: TlsSnapshot,
    /// HTTP/2 client connections and streams.
    pub h2: crate::client::h2::H2Snapshot,
    /// Bodies held for the slower side (response and request buffering).
    pub spool: crate::spool::SpoolSnapshot,
}

impl Report for Snapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        self.upstreams.report(out)?;
        self.process.report(out)?;
        self.tls.report(out)?;
        self.h2.report(out)?;
        self.spool.report(out)
    }
}

/// Process-wide numbers, read at each scrape.
#[derive(Debug, Clone, Default)]
pub struct ProcessSnapshot {
    pub connections: ConnectionsSnapshot,
    pub access_log_dropped: u64,
    /// Responses the proxy made itself, and requests it refused or could not route.
    pub answers: AnswersSnapshot,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    pub draining: bool,
    /// The certificate manager's orders and names, when `[acme]` is configured.
    pub acme: Option<AcmeSnapshot>,
    /// Docker discovery's connection and containers, when `[docker]` is configured.
    pub docker: Option<DockerSnapshot>,
    /// Bytes the allocator has handed out and not taken back (jemalloc's
    /// `stats.allocated`, the holdfast binary's allocator).
    pub allocated: Option<u64>,
}

/// jemalloc's count of bytes in use, brought up to date first.
#[cfg(target_os = "linux")]
pub fn allocated_bytes() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    tikv_jemalloc_ctl::stats::allocated::read().ok().map(|n| n as u64)
}

#[cfg(not(target_os = "linux"))]
pub fn allocated_bytes() -> Option<u64> {
    None
}

const CONFIG_RELOADS: Family = Family {
    name: "holdfast_config_reloads",
    help: "Config reloads, by result (a failed reload keeps the config in force).",
};
const DRAINING: Family = Family {
    name: "holdfast_draining",
    help: "1 while holdfast is shutting down and draining requests in flight.",
};
const ALLOCATED: Family = Family {
    name: "holdfast_memory_allocated_bytes",
    help: "Bytes of memory the allocator has handed out and not taken back (its per-thread caches included).",
};
const BUILD: Family = Family { name: "holdfast_build", help: "The running holdfast version." };

impl Report for ProcessSnapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        self.connections.report(out)?;
        AccessLog::report_dropped(self.access_log_dropped, out)?;
        self.answers.report(out)?;
        out.counter(
            &CONFIG_RELOADS,
            [([("result", "ok")], self.reloads_ok), ([("result", "failed")], self.reloads_failed)],
        )?;
        out.gauge(&DRAINING, [(NO_LABELS, u64::from(self.draining))])?;
        if let Some(acme) = &self.acme {
            acme.report(out)?;
        }
        if let Some(docker) = &self.docker {
            docker.report(out)?;
        }
        if let Some(bytes) = self.allocated {
            out.gauge(&ALLOCATED, [(NO_LABELS, bytes)])?;
        }
        out.info(&BUILD, [("version", env!("CARGO_PKG_VERSION"))])
    }
}
