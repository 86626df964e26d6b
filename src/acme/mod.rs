//! Automatic certificates from an ACME CA (RFC 8555): keeps a certificate for each
//! configured name in `tls::store::DynamicCerts`, where the TLS listeners read it.
//!
//! [`Acme::start`] installs what can be served at once (a stored certificate that is
//! still valid, else a self-signed placeholder, or nothing with `pending = "refuse"`)
//! and returns; a task per name then orders in the background: it creates or loads
//! the account, orders a certificate for the name alone, answers the challenge by
//! putting it into `DynamicCerts` (HTTP-01 key authorizations by token, TLS-ALPN-01
//! certificates by name) and taking it away after, finalizes with a CSR for a fresh
//! key, serves the chain, stores it, and sleeps until the renewal point of its
//! lifetime. A failed order is tried again after a wait that doubles from
//! `retry_base` up to an hour, never past the certificate's expiry.
//!
//! The names follow reloads ([`Acme::follow`]): a new name gets a task that starts as
//! above, a name no longer wanted loses its task and its certificate leaves
//! `DynamicCerts` (its stored files stay, for a name that comes back), and a name kept
//! keeps its task. The other settings apply at start.
//!
//! It does not serve anything itself: the listeners answer handshakes and
//! `/.well-known/acme-challenge/` requests from `DynamicCerts`.
//!
//! # Modules
//!
//! `settings` (what `[acme]` configures), `schedule` (when the next order is due),
//! `order` (one order), `certificate` (keys, CSRs, placeholder and challenge
//! certificates, reading issued ones), `storage` (account and certificates on disk),
//! `client` (HTTPS to the CA), `metrics` (counts and per-name status), `tasks` (one
//! task per name, and which a change of names starts and stops).

mod certificate;
mod client;
mod metrics;
mod order;
mod schedule;
mod settings;
mod storage;
mod tasks;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use instant_acme::{Account, NewAccount};
use rustls::RootCertStore;
use tokio::sync::OnceCell;

use crate::tls::store::DynamicCerts;
use certificate::Issued;
use order::OrderError;
use schedule::Backoff;
use storage::{Storage, StoredCertificate};
use tasks::Tasks;

pub use client::ClientError;
pub use metrics::{AcmeSnapshot, NameStatus, Serving};
pub use schedule::Clock;
pub use settings::{
    parse_contact, parse_directory, parse_name, AcmeConfig, AcmeNames, Challenge, Pending, RenewAt,
};
pub use storage::StorageError;
pub use tasks::NameChanges;

/// The longest a whole order (account, order, validation, issuance) may take before it
/// counts as failed and waits for its retry: a CA that stops answering mid-order must
/// not stall the name for good.
const ORDER_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The longest single sleep before the manager reads the clock again: wall-clock time
/// can jump (a suspended machine, a corrected clock), and a renewal is due by the
/// certificate's dates, not by how long the process slept.
const MAX_SLEEP: Duration = Duration::from_secs(60 * 60);

/// Why the manager could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("acme storage: {0}")]
    Storage(#[from] StorageError),
    #[error("acme directory TLS: {0}")]
    Client(#[from] ClientError),
}

/// Why an order for a name failed, in the operator's words: the name, the challenge,
/// and what went wrong (the CA's problem detail when it gave one).
#[derive(Debug, thiserror::Error)]
#[error("{name} ({challenge}): {kind}")]
pub struct AcmeError {
    pub name: String,
    pub challenge: Challenge,
    pub kind: AcmeErrorKind,
}

/// What failed in an order.
#[derive(Debug, thiserror::Error)]
pub enum AcmeErrorKind {
    #[error("no ACME account: {0}")]
    Account(String),
    #[error(transparent)]
    Order(#[from] OrderError),
    #[error("the order took longer than {0:?}")]
    Timeout(Duration),
}

impl AcmeError {
    fn is_challenge_failure(&self) -> bool {
        matches!(&self.kind, AcmeErrorKind::Order(e) if e.is_challenge_failure())
    }
}

/// The running certificate manager. Dropping it stops its tasks (an order under way
/// is abandoned and its challenge answers removed); what it installed stays served.
pub struct Acme {
    shared: Arc<Shared>,
    tasks: Tasks,
}

impl std::fmt::Debug for Acme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acme").field("directory", &self.shared.config.directory).finish()
    }
}

impl Acme {
    /// Starts keeping certificates for `names` (see [`AcmeNames::resolve`]) in `certs`.
    /// Installs stored or placeholder certificates before it returns; orders run in
    /// tasks of its own. Must be called within a tokio runtime.
    pub fn start(
        config: AcmeConfig,
        names: Vec<String>,
        certs: Arc<DynamicCerts>,
    ) -> Result<Acme, StartError> {
        Acme::start_with_clock(config, names, certs, Clock::system())
    }

    /// [`Acme::start`] with the wall-clock time read from `clock`.
    pub fn start_with_clock(
        config: AcmeConfig,
        names: Vec<String>,
        certs: Arc<DynamicCerts>,
        clock: Clock,
    ) -> Result<Acme, StartError> {
        let storage = Storage::open(&config.storage, &config.directory)?;
        let roots = client::roots(config.ca.as_deref())?;
        let shared = Arc::new(Shared {
            config,
            certs,
            storage,
            roots,
            clock,
            metrics: metrics::AcmeMetrics::default(),
            status: Mutex::new(Vec::with_capacity(names.len())),
            account: Mutex::new(Arc::new(OnceCell::new())),
        });
        let mut acme = Acme { shared, tasks: Tasks::default() };
        for name in &names {
            acme.start_name(name);
        }
        Ok(acme)
    }

    /// Keeps certificates for `names` from now on, as a reload wants them: a new name
    /// starts as at [`Acme::start`] (its stored certificate, else what `pending` says,
    /// and an order when one is due); a name no longer wanted stops being ordered and
    /// served (its stored files stay, so it is served at once if it comes back); a name
    /// kept is left alone and orders nothing new. Says what changed.
    ///
    /// # Races
    /// `&mut self` serialises changes of names (the instance holds the manager under
    /// its reload lock). A removed name's task has ended before its certificate leaves
    /// `DynamicCerts`, so the task cannot serve it again afterwards.
    pub async fn follow(&mut self, names: &[String]) -> NameChanges {
        let changes = NameChanges::between(&self.tasks.names(), names);
        for name in &changes.removed {
            self.stop_name(name).await;
        }
        for name in &changes.added {
            tracing::info!(name, "a new name to keep a certificate for");
            self.start_name(name);
        }
        self.shared.sort_statuses(names);
        changes
    }

    /// What the admin listener and the metrics read, apart from the manager itself.
    pub fn view(&self) -> AcmeView {
        AcmeView { shared: Arc::clone(&self.shared) }
    }

    /// Every name's state and the counters, now.
    #[cfg(test)]
    pub fn snapshot(&self) -> AcmeSnapshot {
        self.view().snapshot()
    }

    /// The state of one name, if it is one of the manager's.
    #[cfg(test)]
    pub fn status(&self, name: &str) -> Option<NameStatus> {
        self.shared.statuses().into_iter().find(|s| s.name == name)
    }

    /// Serves what can be served for `name` at once, and starts the task that orders
    /// its certificate when due.
    fn start_name(&mut self, name: &str) {
        let start = self.shared.install_initial(name, self.shared.clock.now());
        let shared = Arc::clone(&self.shared);
        let owned = name.to_string();
        self.tasks.push(name, tokio::spawn(async move { shared.keep(owned, start).await }));
    }

    /// Ends the task of `name`, then stops serving its certificate.
    async fn stop_name(&mut self, name: &str) {
        self.tasks.stop(name).await;
        self.shared.forget(name);
    }
}

/// A running manager's numbers and names' states, for the admin listener and the
/// metrics: readable at any time, while the [`Acme`] itself stays with whoever
/// changes its names.
#[derive(Clone)]
pub struct AcmeView {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AcmeView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeView").field("directory", &self.shared.config.directory).finish()
    }
}

impl AcmeView {
    /// Every name's state and the counters, now.
    pub fn snapshot(&self) -> AcmeSnapshot {
        AcmeSnapshot::read(&self.shared.metrics, self.shared.statuses())
    }
}

/// What the per-name tasks share.
struct Shared {
    config: AcmeConfig,
    certs: Arc<DynamicCerts>,
    storage: Storage,
    roots: RootCertStore,
    clock: Clock,
    metrics: metrics::AcmeMetrics,
    status: Mutex<Vec<NameStatus>>,
    /// The account, made or loaded by the first order that needs it; replaced by an
    /// empty cell when the CA no longer knows it.
    account: Mutex<Arc<OnceCell<Account>>>,
}

/// Where a name's task starts: when its first order is due, and when the certificate
/// served now expires (if one is).
struct Start {
    due: SystemTime,
    expires: Option<SystemTime>,
}

impl Shared {
    fn statuses(&self) -> Vec<NameStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lists the names' states in the order of `names` (the others last).
    fn sort_statuses(&self, names: &[String]) {
        let mut statuses = self.status.lock().unwrap_or_else(|e| e.into_inner());
        statuses.sort_by_key(|s| names.iter().position(|n| *n == s.name).unwrap_or(usize::MAX));
    }

    /// Stops serving `name`'s certificate and forgets its state; its stored files stay.
    fn forget(&self, name: &str) {
        self.certs.set_issued(name, None);
        self.status.lock().unwrap_or_else(|e| e.into_inner()).retain(|s| s.name != name);
        tracing::info!(
            name,
            "no longer a name to keep a certificate for: not served or renewed from now on (its stored files stay)"
        );
    }

    fn update(&self, name: &str, change: impl FnOnce(&mut NameStatus)) {
        let mut statuses = self.status.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(status) = statuses.iter_mut().find(|s| s.name == name) {
            change(status);
        }
    }

    /// Serves the stored certificate for `name` if it is still valid at `now`, else the
    /// placeholder (or nothing), and says when the first order is due.
    fn install_initial(&self, name: &str, now: SystemTime) -> Start {
        let stored = self.stored(name).filter(|issued| {
            let valid = issued.validity.is_valid_at(now);
            if !valid {
                tracing::info!(name, "the stored certificate has expired; ordering a new one");
            }
            valid
        });
        let (status, start) = match stored {
            Some(issued) => {
                self.certs.set_issued(name, Some(Arc::clone(&issued.key)));
                let renewal = issued.validity.renewal_time(self.config.renew_at);
                tracing::info!(
                    name,
                    expires = %humantime::format_rfc3339_seconds(issued.validity.not_after),
                    renewal = %humantime::format_rfc3339_seconds(renewal),
                    "serving the stored certificate"
                );
                let mut status = NameStatus::new(name, Serving::Issued);
                status.not_after = Some(issued.validity.not_after);
                (status, Start { due: renewal, expires: Some(issued.validity.not_after) })
            }
            None => {
                let serving = self.install_pending(name);
                (NameStatus::new(name, serving), Start { due: now, expires: None })
            }
        };
        let mut statuses = self.status.lock().unwrap_or_else(|e| e.into_inner());
        statuses.push(NameStatus { next_order: Some(start.due), ..status });
        start
    }

    /// The stored certificate for `name`, if there is a readable one for it.
    fn stored(&self, name: &str) -> Option<Issued> {
        let stored = match self.storage.load_certificate(name) {
            Ok(stored) => stored?,
            Err(error) => {
                tracing::warn!(name, %error, "ignoring the stored certificate; ordering a new one");
                return None;
            }
        };
        match Issued::from_pem(name, &stored.chain_pem, &stored.key_pem) {
            Ok(issued) => Some(issued),
            Err(error) => {
                let path = self.storage.dir().join("certs");
                tracing::warn!(
                    name,
                    %error,
                    folder = %path.display(),
                    "ignoring a broken stored certificate; ordering a new one"
                );
                None
            }
        }
    }

    /// What `pending` says to serve for `name` until issuance.
    fn install_pending(&self, name: &str) -> Serving {
        match self.config.pending {
            Pending::Refuse => {
                self.certs.set_issued(name, None);
                Serving::Nothing
            }
            Pending::Placeholder => match certificate::placeholder(name) {
                Ok(placeholder) => {
                    self.certs.set_issued(name, Some(placeholder));
                    Serving::Placeholder
                }
                Err(error) => {
                    tracing::error!(name, %error, "cannot make the placeholder certificate");
                    self.certs.set_issued(name, None);
                    Serving::Nothing
                }
            },
        }
    }

    /// Orders `name`'s certificate when due, again and again: at the renewal point after
    /// a success, after a growing wait after a failure.
    async fn keep(self: Arc<Self>, name: String, start: Start) {
        let Start { mut due, mut expires } = start;
        let backoff = Backoff { base: self.config.retry_base };
        let mut failures: u32 = 0;
        loop {
            self.sleep_until(due).await;
            let attempted = self.clock.now();
            self.update(&name, |s| s.last_attempt = Some(attempted));
            match self.order(&name).await {
                Ok(issued) => {
                    failures = 0;
                    expires = Some(issued.validity.not_after);
                    // A CA that backdates far enough could put the renewal point in the
                    // past: wait at least `retry_base` so that never becomes a loop.
                    let floor = self.clock.now() + self.config.retry_base;
                    due = issued.validity.renewal_time(self.config.renew_at).max(floor);
                    self.serve(&name, issued, due).await;
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    due = backoff.retry_time(attempted, failures, expires);
                    self.failed(&error, failures, attempted, due);
                }
            }
        }
    }

    /// Sleeps until the clock reads `due`.
    async fn sleep_until(&self, due: SystemTime) {
        while let Ok(left) = due.duration_since(self.clock.now()) {
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.min(MAX_SLEEP)).await;
        }
    }

    /// One order for `name`, counted.
    async fn order(&self, name: &str) -> Result<Issued, AcmeError> {
        let challenge = self.config.challenge;
        let error = |kind| AcmeError { name: name.to_string(), challenge, kind };
        tracing::info!(name, %challenge, directory = %self.config.directory, "ordering a certificate");
        let attempt = async {
            let account = self.account().await.map_err(AcmeErrorKind::Account)?;
            order::issue(&account, name, challenge, &self.certs).await.map_err(|e| {
                if e.is_unknown_account() {
                    self.forget_account();
                }
                AcmeErrorKind::Order(e)
            })
        };
        let result = match tokio::time::timeout(ORDER_TIMEOUT, attempt).await {
            Ok(result) => result.map_err(error),
            Err(_) => Err(error(AcmeErrorKind::Timeout(ORDER_TIMEOUT))),
        };
        match &result {
            Ok(_) => self.metrics.order_succeeded(),
            Err(e) => self.metrics.order_failed(challenge, e.is_challenge_failure()),
        }
        result
    }

    /// Serves a new certificate for `name`, then stores it.
    async fn serve(&self, name: &str, issued: Issued, next: SystemTime) {
        self.certs.set_issued(name, Some(Arc::clone(&issued.key)));
        self.update(name, |s| {
            s.serving = Serving::Issued;
            s.not_after = Some(issued.validity.not_after);
            s.next_order = Some(next);
            s.failures = 0;
            s.last_error = None;
        });
        tracing::info!(
            name,
            expires = %humantime::format_rfc3339_seconds(issued.validity.not_after),
            renewal = %humantime::format_rfc3339_seconds(next),
            "certificate issued"
        );
        let stored = StoredCertificate { chain_pem: issued.chain_pem, key_pem: issued.key_pem };
        let storage = self.storage.clone();
        let owned = name.to_string();
        let saved = tokio::task::spawn_blocking(move || storage.save_certificate(&owned, &stored))
            .await
            .unwrap_or_else(|e| {
                Err(StorageError::Write { path: "certs".into(), source: e.into() })
            });
        if let Err(error) = saved {
            tracing::error!(name, %error, "cannot store the issued certificate; a restart orders it again");
            let message = format!("{name}: issued, but not stored: {error}");
            self.update(name, |s| s.last_error = Some(message));
        }
    }

    /// Records and logs a failed order.
    fn failed(&self, error: &AcmeError, failures: u32, attempted: SystemTime, next: SystemTime) {
        let retry_in = next.duration_since(attempted).unwrap_or_default();
        tracing::warn!(
            name = %error.name,
            challenge = %error.challenge,
            %error,
            failures,
            retry_in = %humantime::format_duration(retry_in),
            "certificate order failed"
        );
        self.update(&error.name, |s| {
            s.failures = failures;
            s.next_order = Some(next);
            s.last_error = Some(error.to_string());
        });
    }

    /// The account, loaded from storage or created at the CA the first time.
    async fn account(&self) -> Result<Account, String> {
        let cell = Arc::clone(&self.account.lock().unwrap_or_else(|e| e.into_inner()));
        cell.get_or_try_init(|| self.load_or_create_account()).await.cloned()
    }

    /// Drops the account the CA no longer knows; the next order creates one.
    fn forget_account(&self) {
        tracing::warn!(directory = %self.config.directory, "the CA does not know the stored account; creating a new one");
        *self.account.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(OnceCell::new());
    }

    async fn load_or_create_account(&self) -> Result<Account, String> {
        let http = || client::http_client(self.roots.clone()).map_err(|e| e.to_string());
        let stored = match self.storage.load_account() {
            Ok(stored) => stored,
            Err(error) => {
                tracing::warn!(%error, "ignoring the stored account; creating a new one");
                None
            }
        };
        if let Some(credentials) = stored {
            let account = Account::builder_with_http(http()?).from_credentials(credentials).await;
            let directory = &self.config.directory;
            return account.map_err(|e| {
                format!("cannot load the account from {directory}: {}", describe(&e))
            });
        }
        let contact: Vec<&str> = self.config.contact.as_deref().into_iter().collect();
        let new = NewAccount {
            contact: &contact,
            terms_of_service_agreed: true,
            only_return_existing: false,
        };
        let (account, credentials) = Account::builder_with_http(http()?)
            .create(&new, self.config.directory.clone(), None)
            .await
            .map_err(|e| {
                let directory = &self.config.directory;
                format!("cannot create an account at {directory}: {}", describe(&e))
            })?;
        tracing::info!(directory = %self.config.directory, id = account.id(), "ACME account created");
        let storage = self.storage.clone();
        let saved = tokio::task::spawn_blocking(move || storage.save_account(&credentials)).await;
        match saved {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(%error, "cannot store the ACME account; a restart creates another")
            }
            Err(error) => {
                tracing::error!(%error, "cannot store the ACME account; a restart creates another")
            }
        }
        Ok(account)
    }
}

/// What the CA said (its problem document), or why it could not be asked.
fn describe(error: &instant_acme::Error) -> String {
    match error {
        instant_acme::Error::Api(problem) => order::describe_problem(problem),
        other => order::with_sources(other),
    }
}

#[cfg(test)]
mod tests;
