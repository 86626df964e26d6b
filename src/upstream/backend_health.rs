//! A backend's health as its group applies it: the [`Health`] state machine read with
//! the group's passive settings (a reload may change them) and the exemption of a
//! group's only backend; and what the backend does when its health changes: log it,
//! count an ejection, close its idle connections, and probe a backend ejected for
//! failed connects until it accepts one again.
//!
//! The rules of ejection and slow start are [`Health`]'s; this file only feeds it and
//! acts on its answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use holdfast_pool::CloseReason;
use tokio::time::Instant;

use super::health::{self, CheckThresholds, Health, HealthSnapshot, PassiveHealth, Transition};
use super::Backend;

/// The health of one backend, with the settings it is judged by.
pub struct BackendHealth {
    state: Health,
    /// The group's passive health settings (they may change on reload).
    passive: ArcSwap<PassiveHealth>,
    /// The only server of its group: it is never ejected (nowhere else could take its
    /// requests, so an ejection would only turn a blip into an outage).
    alone: AtomicBool,
}

impl BackendHealth {
    /// A healthy backend, judged by `passive`.
    pub(super) fn new(passive: PassiveHealth) -> BackendHealth {
        BackendHealth {
            state: Health::new(),
            passive: ArcSwap::from_pointee(passive),
            alone: AtomicBool::new(false),
        }
    }

    /// Whether it is the only server of its group: then it is never ejected, since
    /// nowhere else could take its requests.
    pub fn is_alone(&self) -> bool {
        self.alone.load(Ordering::Relaxed)
    }

    /// Tells the backend whether it is the only one of its group.
    pub(super) fn set_alone(&self, alone: bool) {
        self.alone.store(alone, Ordering::Relaxed);
    }

    /// The group's passive settings changed (a reload).
    pub(super) fn set_passive(&self, passive: PassiveHealth) {
        self.passive.store(Arc::new(passive));
    }

    /// Share of traffic health allows now: `FULL_WEIGHT` in service, 0 out, in between
    /// while re-admitted.
    pub fn weight(&self, now: Instant) -> u32 {
        if self.state.is_healthy() {
            return health::FULL_WEIGHT;
        }
        self.state.weight(now, &self.passive.load())
    }

    /// Whether health says the backend must get no requests now.
    pub fn is_down(&self, now: Instant) -> bool {
        self.weight(now) == 0
    }

    /// Where its health stands now, for status output.
    pub fn snapshot(&self, now: Instant) -> HealthSnapshot {
        self.state.snapshot(now, &self.passive.load())
    }

    /// A response that is not a 5xx: failure streaks end.
    fn on_success(&self) {
        self.state.on_success();
    }

    /// A 5xx response (see [`Health::on_server_error`]); ignored for a lone backend.
    fn on_server_error(&self, now: Instant) -> Option<Transition> {
        if self.is_alone() {
            return None;
        }
        self.state.on_server_error(now, &self.passive.load())
    }

    /// A failed connect (see [`Health::on_connect_failure`]); ignored for a lone
    /// backend.
    fn on_connect_failure(&self, now: Instant) -> Option<Transition> {
        if self.is_alone() {
            return None;
        }
        self.state.on_connect_failure(now, &self.passive.load())
    }

    /// The result of one active check (see [`Health::on_check`]).
    pub fn on_check(
        &self,
        passed: bool,
        now: Instant,
        thresholds: &CheckThresholds,
    ) -> Option<Transition> {
        self.state.on_check(passed, now, thresholds)
    }
}

impl Backend {
    /// A response (or holdfast's own answer for a failed one) came back with `status`:
    /// health and latency learn from it. `answered_in` is what the origin took to
    /// answer (see `proxy::record::Record::origin_time`), when it answered.
    pub fn observe(self: &Arc<Self>, status: u16, answered_in: Option<Duration>, now: Instant) {
        if let Some(answered_in) = answered_in {
            self.load.latency.observe(answered_in, now);
        }
        if status >= 500 {
            let transition = self.health.on_server_error(now);
            self.act_on(transition);
        } else {
            self.health.on_success();
        }
    }

    /// A connect to this backend failed. Its latency is forgotten: it was measured on a
    /// process that no longer takes connections, and a slow answer from before must not
    /// keep the balancer away from it, or it would never get the requests that show
    /// whether it is dead (and is ejected) or back.
    pub fn connect_failed(self: &Arc<Self>, now: Instant) {
        self.load.latency.forget();
        let transition = self.health.on_connect_failure(now);
        self.act_on(transition);
    }

    /// Logs a health change and, when the backend left service, closes its idle
    /// connections (they lead to a server that is failing or gone) and forgets its
    /// latency (it comes back measured afresh, in slow start).
    pub fn act_on(self: &Arc<Self>, transition: Option<Transition>) {
        let Some(transition) = transition else { return };
        match transition {
            Transition::Ejected { cause, for_ } => {
                let ejected_for = humantime::format_duration(for_);
                tracing::warn!(backend = %self.addr, cause = %cause.as_str(), ejected_for = %ejected_for, "backend ejected");
                self.metrics.ejections.fetch_add(1, Ordering::Relaxed);
                self.conns.clear_for(CloseReason::Ejected);
                self.load.latency.forget();
                if cause == health::Cause::ConnectFailures {
                    self.start_probing();
                }
            }
            Transition::Reachable => {
                tracing::info!(backend = %self.addr, "backend accepts connections again; back in service");
            }
            Transition::CheckFailed => {
                tracing::warn!(backend = %self.addr, "backend failed its health checks");
                self.metrics.ejections.fetch_add(1, Ordering::Relaxed);
                self.conns.clear_for(CloseReason::Ejected);
                self.load.latency.forget();
            }
            Transition::CheckPassed => {
                tracing::info!(backend = %self.addr, "backend passed its health checks");
            }
        }
    }

    /// Tries a connect now and then while the backend is ejected for failed connects,
    /// and ends the ejection at the first that gets through (see
    /// [`health::PROBE_FIRST_WAIT`]). Ends by itself when the ejection ends or the
    /// backend leaves its group.
    fn start_probing(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        tokio::spawn(async move {
            let mut wait = health::PROBE_FIRST_WAIT;
            // Bounded by the ejection: each round first checks that it still runs.
            loop {
                tokio::time::sleep(wait).await;
                let Some(backend) = me.upgrade() else { return };
                if backend.conns.is_retired() || !backend.health.state.awaits_probe(Instant::now())
                {
                    return;
                }
                if backend.conns.can_connect(health::PROBE_TIMEOUT).await {
                    let transition = backend.health.state.on_probe_connected(Instant::now());
                    backend.act_on(transition);
                    return;
                }
                wait = (wait * 2).min(health::PROBE_MAX_WAIT);
            }
        });
    }
}
