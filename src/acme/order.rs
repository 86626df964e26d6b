//! One certificate order for one name (RFC 8555 section 7.4): create the order, answer
//! its challenge through `DynamicCerts` (and take the answer away again however the
//! order ends), wait for the CA to validate, finalize with a CSR for a fresh key, and
//! fetch the chain. Failures say what the CA said: its problem document's detail.

use std::time::Duration;

use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, NewOrder, Order, OrderStatus, Problem,
    RetryPolicy,
};

use super::certificate::{self, CertificateError, Issued};
use super::settings::Challenge;
use crate::tls::store::DynamicCerts;

/// How long the CA may take to validate a challenge, and then to issue: Let's Encrypt
/// takes seconds; a minute and a half covers a slow validation from several vantage
/// points. Past it the order counts as failed and is tried again later.
const POLL_TIMEOUT: Duration = Duration::from_secs(90);

/// Why an order did not end in a certificate.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// The CA tried the challenge and it failed: the detail the CA gave.
    #[error("the CA could not validate the challenge: {0}")]
    Challenge(String),
    #[error("the CA offers no {0} challenge for this name")]
    NoChallenge(Challenge),
    #[error("the CA says the authorization is {0:?}")]
    Authorization(AuthorizationStatus),
    #[error("the order ended {0:?}")]
    Order(OrderStatus),
    #[error("{}", describe_error(.0))]
    Ca(#[from] instant_acme::Error),
    #[error("the issued certificate cannot be used: {0}")]
    Certificate(#[from] CertificateError),
}

impl OrderError {
    /// Whether the CA tried the challenge and it failed (as opposed to the CA being
    /// unreachable, or refusing the order before any validation).
    pub fn is_challenge_failure(&self) -> bool {
        matches!(self, OrderError::Challenge(_))
    }

    /// Whether the CA no longer knows the account (a test CA restarted, or the account
    /// was deactivated): a new account is needed.
    pub fn is_unknown_account(&self) -> bool {
        match self {
            OrderError::Ca(instant_acme::Error::Api(problem)) => {
                problem.r#type.as_deref().is_some_and(|t| t.ends_with(":accountDoesNotExist"))
            }
            _ => false,
        }
    }
}

/// A CA's problem document in words: its detail, then its type.
pub fn describe_problem(problem: &Problem) -> String {
    let detail = problem.detail.as_deref().unwrap_or("no detail given");
    match &problem.r#type {
        Some(kind) => format!("{detail} ({kind})"),
        None => detail.to_string(),
    }
}

fn describe_error(error: &instant_acme::Error) -> String {
    match error {
        instant_acme::Error::Api(problem) => {
            format!("the CA refused: {}", describe_problem(problem))
        }
        other => format!("talking to the CA failed: {}", with_sources(other)),
    }
}

/// An error and its sources, outermost first: `client error (Connect): tcp connect
/// error: Connection refused (os error 111)`. HTTP errors keep their cause there.
pub fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some errors repeat their source's text in their own.
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Orders a certificate for `name` and proves control of it with `challenge`, whose
/// answers it puts into `certs` for the listeners to give, and removes afterwards.
pub async fn issue(
    account: &Account,
    name: &str,
    challenge: Challenge,
    certs: &DynamicCerts,
) -> Result<Issued, OrderError> {
    let identifiers = [Identifier::Dns(name.to_string())];
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let answers = Answers { certs, tokens: Vec::new(), alpn_names: Vec::new() };
    let validated = validate(&mut order, name, challenge, answers).await;
    validated?;
    let key = certificate::new_key()?;
    order.finalize_csr(&certificate::csr(name, &key)?).await?;
    let chain = order.poll_certificate(&retry_policy()).await?;
    Ok(Issued::from_pem(name, &chain, &key.serialize_pem())?)
}

/// Answers every pending authorization of `order` and waits until the CA has
/// validated them. `answers` is dropped on return, taking the answers away.
async fn validate(
    order: &mut Order,
    name: &str,
    challenge: Challenge,
    mut answers: Answers<'_>,
) -> Result<(), OrderError> {
    let kind = challenge_type(challenge);
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization?;
        match authorization.status {
            // A name this account proved recently: the CA may reuse the proof.
            AuthorizationStatus::Valid => continue,
            AuthorizationStatus::Pending => {}
            other => return Err(OrderError::Authorization(other)),
        }
        let mut handle =
            authorization.challenge(kind.clone()).ok_or(OrderError::NoChallenge(challenge))?;
        let key_authorization = handle.key_authorization();
        match challenge {
            Challenge::Http01 => answers.http(&handle.token, key_authorization.as_str()),
            Challenge::TlsAlpn01 => {
                let digest = key_authorization.digest();
                answers.alpn(name, certificate::alpn_challenge(name, digest.as_ref())?);
            }
        }
        handle.set_ready().await?;
    }
    let status = order.poll_ready(&retry_policy()).await;
    match status {
        Ok(OrderStatus::Ready) => Ok(()),
        other => match challenge_problem(order, &kind).await {
            Some(detail) => Err(OrderError::Challenge(detail)),
            None => Err(other.map_or_else(OrderError::Ca, OrderError::Order)),
        },
    }
}

/// The problem the CA reported for the challenge of `kind`, read afresh from the
/// order's authorizations.
async fn challenge_problem(order: &mut Order, kind: &ChallengeType) -> Option<String> {
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authorization)) = authorizations.next().await {
        let Ok(state) = authorization.refresh().await else { continue };
        let failed = state.challenges.iter().filter(|c| &c.r#type == kind);
        if let Some(problem) = failed.filter_map(|c| c.error.as_ref()).next() {
            return Some(describe_problem(problem));
        }
    }
    None
}

fn challenge_type(challenge: Challenge) -> ChallengeType {
    match challenge {
        Challenge::Http01 => ChallengeType::Http01,
        Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
    }
}

fn retry_policy() -> RetryPolicy {
    RetryPolicy::new().initial_delay(Duration::from_millis(250)).backoff(1.5).timeout(POLL_TIMEOUT)
}

/// The challenge answers an order put into `DynamicCerts`; they go when it is dropped,
/// whether the order succeeded, failed or was cancelled.
struct Answers<'a> {
    certs: &'a DynamicCerts,
    tokens: Vec<String>,
    alpn_names: Vec<String>,
}

impl Answers<'_> {
    fn http(&mut self, token: &str, key_authorization: &str) {
        self.certs.set_http_challenge(token, Some(key_authorization.to_string()));
        self.tokens.push(token.to_string());
    }

    fn alpn(&mut self, name: &str, cert: std::sync::Arc<rustls::sign::CertifiedKey>) {
        self.certs.set_alpn_challenge(name, Some(cert));
        self.alpn_names.push(name.to_string());
    }
}

impl Drop for Answers<'_> {
    fn drop(&mut self) {
        for token in &self.tokens {
            self.certs.set_http_challenge(token, None);
        }
        for name in &self.alpn_names {
            self.certs.set_alpn_challenge(name, None);
        }
    }
}
