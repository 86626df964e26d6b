//! `holdfast health`: one `GET /healthz` to a running holdfast's admin listener, for a
//! container's `HEALTHCHECK` (the image has no shell and no curl) or a script.
//!
//! Healthy means the admin listener answered 200 within [`PROBE_TIMEOUT`]: holdfast
//! runs and is not draining. It says nothing about the origins: an upstream with every
//! server down is holdfast doing its job (answering 502/503), not holdfast failing, and
//! a container restarted for it would not bring the origins back.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use http::StatusCode;

use super::admin_client::{AdminClient, AdminError};

/// How long the probe waits for the whole answer, connecting included. `/healthz`
/// answers from memory in microseconds, so 2 s means holdfast is stuck or gone; it is
/// also well under Docker's default HEALTHCHECK timeout (30 s), so the probe's own
/// reason, not Docker's timeout, is what the health log shows.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// `holdfast health` options.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// The admin listener of the running holdfast (default 127.0.0.1:9901).
    #[arg(long, value_name = "ADDR", conflicts_with = "config")]
    pub admin: Option<SocketAddr>,
    /// Read the admin address from this config file instead.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Why holdfast is not healthy; each message is one line that names the address.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No answer: nothing listens, or no complete response in time.
    #[error(transparent)]
    Unanswered(#[from] AdminError),
    /// An answer other than 200 (503 while draining).
    #[error("GET /healthz to the admin listener at {addr} answered {status}{}", said(.body))]
    Unhealthy { addr: SocketAddr, status: StatusCode, body: String },
}

/// Asks `client`'s admin listener whether holdfast serves.
pub async fn probe(client: &AdminClient) -> Result<(), ProbeError> {
    let response = client.get("/healthz").await?;
    if response.status == StatusCode::OK {
        return Ok(());
    }
    Err(ProbeError::Unhealthy {
        addr: client.addr(),
        status: response.status,
        body: response.text().into_owned(),
    })
}

/// `: draining` from the body's first line, kept short: the reason must stay one line
/// even when something other than holdfast answers on the address.
fn said(body: &str) -> String {
    const MAX_CHARS: usize = 80;
    let line = body.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return String::new();
    }
    let mut short: String = line.chars().take(MAX_CHARS).collect();
    if line.chars().nth(MAX_CHARS).is_some() {
        short.push_str("...");
    }
    format!(": {short}")
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// An admin address that answers every connection with `response`, then closes.
    async fn answering(response: &'static [u8]) -> AdminClient {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                // The request head fits one read on loopback; its bytes do not matter.
                let _ = stream.read(&mut buf).await;
                let _ = stream.write_all(response).await;
            }
        });
        AdminClient::new(addr, PROBE_TIMEOUT)
    }

    #[tokio::test]
    async fn a_200_is_healthy() {
        let client = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n").await;
        probe(&client).await.expect("healthy");
    }

    #[tokio::test]
    async fn a_503_is_unhealthy_and_says_why_on_one_line() {
        let client =
            answering(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 9\r\n\r\ndraining\n")
                .await;
        let error = probe(&client).await.expect_err("unhealthy");
        assert_eq!(
            error.to_string(),
            format!(
                "GET /healthz to the admin listener at {} answered 503 Service Unavailable: \
                 draining",
                client.addr()
            )
        );
    }

    #[tokio::test]
    async fn a_long_or_empty_body_keeps_the_reason_to_one_short_line() {
        let client = answering(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").await;
        let error = probe(&client).await.expect_err("unhealthy").to_string();
        assert!(error.ends_with("answered 404 Not Found"), "{error}");
        assert_eq!(
            said(&format!("{}\nsecond line\n", "x".repeat(200))),
            format!(": {}...", "x".repeat(80))
        );
    }

    #[tokio::test]
    async fn a_listener_that_never_answers_is_unhealthy_after_the_timeout() {
        // Accepted by the kernel (backlog), never read.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        let client = AdminClient::new(addr, Duration::from_millis(200));
        let error = probe(&client).await.expect_err("unhealthy").to_string();
        assert!(error.contains("no complete response within 200ms"), "{error}");
        drop(listener);
    }

    #[tokio::test]
    async fn nothing_listening_is_unhealthy_naming_the_address() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        drop(listener);
        let error = probe(&AdminClient::new(addr, PROBE_TIMEOUT)).await.expect_err("unhealthy");
        assert!(matches!(error, ProbeError::Unanswered(_)), "{error:?}");
        let text = error.to_string();
        assert!(text.contains(&addr.to_string()) && text.contains("refused"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
}
