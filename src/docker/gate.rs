//! A container without a Docker `HEALTHCHECK` joins its group only after holdfast's
//! own first check of it passed: its group's active check (`[upstream.NAME.health_check]`)
//! when the config file defines one, else a TCP connect. The check repeats every
//! [`EVERY`] until it passes or the provider stops it (the container left).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::labels::Wanted;
use crate::upstream::check::{self, CheckConfig};
use crate::upstream::settings::Protocol;
use crate::upstream::ContainerRef;

/// How often a container that does not answer yet is checked again: it joins within
/// this long of being ready.
const EVERY: Duration = Duration::from_millis(100);
/// How long one connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Checks the container until a check passes, then tells `passed`.
pub async fn first_check(
    wanted: Wanted,
    reference: ContainerRef,
    check: Option<Arc<CheckConfig>>,
    passed: mpsc::Sender<ContainerRef>,
) {
    // The active check speaks HTTP/1.1; an h2c container gets the connect.
    let check = check.filter(|_| wanted.protocol != Protocol::H2c);
    let mut tries = 0u64;
    loop {
        let result = match &check {
            Some(check) => check::probe_new(wanted.addr, check).await.map_err(|e| e.to_string()),
            None => connects(wanted.addr).await,
        };
        match result {
            Ok(()) => {
                let _ = passed.send(reference).await;
                return;
            }
            Err(e) => {
                tries += 1;
                // Said once after a while, not every 100 ms.
                if tries == 50 {
                    tracing::info!(container = %reference.name, addr = %wanted.addr, error = %e, "docker: waiting for the container's first check to pass");
                }
            }
        }
        tokio::time::sleep(EVERY).await;
    }
}

async fn connects(addr: std::net::SocketAddr) -> Result<(), String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("connect timed out".into()),
    }
}
