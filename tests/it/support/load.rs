//! Steady traffic for tests that change things under load: clients, each on its own
//! keep-alive connection, sending `GET`s until stopped, and a tally of what came back.
//!
//! Unlike [`super::HttpClient`], a failed exchange does not panic: it is counted, and
//! the client connects again.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{header, Request};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Most requests one load client sends, and the longest it runs.
const MAX_REQUESTS: usize = 200_000;
const MAX_RUN: Duration = Duration::from_secs(60);
/// How long one exchange may take before it counts as failed.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Running load; [`Load::stop`] ends it and returns the tally.
pub struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    clients: Vec<JoinHandle<Tally>>,
}

/// What the clients got.
#[derive(Debug, Default)]
pub struct Tally {
    pub ok: usize,
    /// Every response that was not 2xx, and every exchange that failed, described.
    pub failures: Vec<String>,
    /// 2xx responses per origin (their `x-origin` header).
    pub by_origin: BTreeMap<String, usize>,
}

impl Tally {
    /// The share of 2xx responses `origin` served.
    pub fn share(&self, origin: SocketAddr) -> f64 {
        let n = self.by_origin.get(&origin.to_string()).copied().unwrap_or(0);
        n as f64 / self.ok.max(1) as f64
    }

    pub fn served_by(&self, origin: SocketAddr) -> usize {
        self.by_origin.get(&origin.to_string()).copied().unwrap_or(0)
    }
}

impl Load {
    /// Starts `clients` clients sending `GET path` with `Host: host` to `addr`.
    pub fn start(addr: SocketAddr, clients: usize, host: &str, path: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let clients = (0..clients)
            .map(|_| {
                let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
                let (host, path) = (host.to_string(), path.to_string());
                tokio::spawn(async move { run(addr, &host, &path, &stop, &done).await })
            })
            .collect();
        Load { stop, done, clients }
    }

    /// Exchanges finished so far, failed ones included.
    pub fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }

    /// Waits until `n` more exchanges have finished (bounded by `deadline`).
    pub async fn advance(&self, n: usize, deadline: Duration) {
        let target = self.done() + n;
        super::wait_until("the load to advance", deadline, || self.done() >= target).await;
    }

    pub async fn stop(self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        let mut total = Tally::default();
        for client in self.clients {
            let tally = super::within("a load client to stop", client).await.expect("load client");
            total.ok += tally.ok;
            total.failures.extend(tally.failures);
            for (origin, n) in tally.by_origin {
                *total.by_origin.entry(origin).or_default() += n;
            }
        }
        total
    }
}

async fn run(
    addr: SocketAddr,
    host: &str,
    path: &str,
    stop: &AtomicBool,
    done: &AtomicUsize,
) -> Tally {
    let mut tally = Tally::default();
    let started = Instant::now();
    let mut sender = None;
    for _ in 0..MAX_REQUESTS {
        if stop.load(Ordering::SeqCst) || started.elapsed() > MAX_RUN {
            break;
        }
        if sender.is_none() {
            match connect(addr).await {
                Ok(s) => sender = Some(s),
                Err(e) => {
                    tally.failures.push(format!("connect: {e}"));
                    done.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let s = sender.as_mut().expect("connected above");
        match tokio::time::timeout(EXCHANGE_TIMEOUT, exchange(s, host, path)).await {
            Ok(Ok((status, origin, close))) if (200..300).contains(&status) => {
                tally.ok += 1;
                *tally.by_origin.entry(origin).or_default() += 1;
                if close {
                    sender = None;
                }
            }
            Ok(Ok((status, _, close))) => {
                tally.failures.push(format!("status {status}"));
                if close {
                    sender = None;
                }
            }
            Ok(Err(e)) => {
                tally.failures.push(format!("exchange: {e}"));
                sender = None;
            }
            Err(_) => {
                tally.failures.push("exchange timed out".into());
                sender = None;
            }
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
    tally
}

type Sender = http1::SendRequest<Empty<bytes::Bytes>>;

async fn connect(addr: SocketAddr) -> Result<Sender, Box<dyn std::error::Error + Send + Sync>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One `GET`: the status, the origin that answered, and whether the connection closes.
async fn exchange(
    sender: &mut Sender,
    host: &str,
    path: &str,
) -> Result<(u16, String, bool), Box<dyn std::error::Error + Send + Sync>> {
    sender.ready().await?;
    let req = Request::get(path).header(header::HOST, host).body(Empty::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let origin =
        resp.headers().get("x-origin").and_then(|v| v.to_str().ok()).unwrap_or("-").to_string();
    let close = resp
        .headers()
        .get(header::CONNECTION)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    resp.into_body().collect().await?;
    Ok((status, origin, close))
}
