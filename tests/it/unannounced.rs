//! Origins that close a connection after some responses without saying so (no
//! `Connection: close`), a few milliseconds after the response: a response to HEAD that
//! has no length, and the close rules holdfast learns from such origins.
//!
//! The origin here is hand-written, so the moment of each close is the test's choice:
//! after a response its script marks, it reads on but answers nothing for a few
//! milliseconds (a request arriving then is one the origin never answers, as a request
//! crossing a close on a real network), then sends its FIN and keeps reading, so that a
//! request holdfast sends afterwards is seen and counted too.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::{BodyExt, Empty};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::{config_to, ClientBody, Proxy};

/// What the origin does with one request: the response, and how long after it the
/// connection closes (`None`: it stays open).
#[derive(Debug, Clone, Copy)]
struct Answer {
    response: &'static [u8],
    close_after: Option<Duration>,
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

impl Answer {
    fn keep(response: &'static [u8]) -> Answer {
        Answer { response, close_after: None }
    }

    fn then_close(response: &'static [u8], lag: Duration) -> Answer {
        Answer { response, close_after: Some(lag) }
    }
}

/// How the origin answers a request head, given its request line and its number on its
/// connection (1 for the first).
type Script = Arc<dyn Fn(&str, usize) -> Answer + Send + Sync>;

/// Counts shared by the origin's connections.
#[derive(Default)]
struct Counts {
    accepted: AtomicUsize,
    answered: AtomicUsize,
    /// Requests that arrived on a connection after the origin had decided to close it:
    /// each would be lost (a 502 for a POST).
    late: AtomicUsize,
    /// Connections the origin closed itself.
    closed: AtomicUsize,
}

/// The hand-written origin: answers request heads (requests without a body) as its
/// script says, on as many keep-alive connections as it is given.
struct ClosingOrigin {
    addr: SocketAddr,
    counts: Arc<Counts>,
    accept: JoinHandle<()>,
}

impl Drop for ClosingOrigin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl ClosingOrigin {
    /// Closes connections only as `script` says.
    async fn start(script: impl Fn(&str, usize) -> Answer + Send + Sync + 'static) -> Self {
        ClosingOrigin::start_with_idle(None, script).await
    }

    /// Also closes a connection that has idled for `idle_close`, as a keep-alive timeout
    /// does, without announcing the timeout.
    async fn start_with_idle(
        idle_close: Option<Duration>,
        script: impl Fn(&str, usize) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let addr = listener.local_addr().expect("origin addr");
        let counts = Arc::new(Counts::default());
        let script: Script = Arc::new(script);
        let shared = Arc::clone(&counts);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                let (script, counts) = (Arc::clone(&script), Arc::clone(&shared));
                tokio::spawn(serve(stream, script, counts, idle_close));
            }
        });
        ClosingOrigin { addr, counts, accept }
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn accepted(&self) -> usize {
        self.counts.accepted.load(Ordering::SeqCst)
    }

    fn late(&self) -> usize {
        self.counts.late.load(Ordering::SeqCst)
    }
}

/// One connection: answers heads until the script or the idle limit closes it; ends
/// when the peer closes.
async fn serve(mut stream: TcpStream, script: Script, counts: Arc<Counts>, idle: Option<Duration>) {
    let mut pending = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut number = 0;
    // Each round reads at least one byte, or ends the connection.
    let lag = loop {
        let read = match idle {
            Some(limit) => match tokio::time::timeout(limit, stream.read(&mut chunk)).await {
                Ok(read) => read,
                Err(_) => break Duration::ZERO,
            },
            None => stream.read(&mut chunk).await,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
        let mut close = None;
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = pending.drain(..end + 4).collect();
            if close.is_some() {
                // Pipelined behind the response that closes: never answered.
                counts.late.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            number += 1;
            let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
            let answer = script(&line, number);
            if stream.write_all(answer.response).await.is_err() {
                return;
            }
            counts.answered.fetch_add(1, Ordering::SeqCst);
            close = answer.close_after;
        }
        if let Some(lag) = close {
            break lag;
        }
    };
    // Decided to close: nothing more is answered. What arrives during the lag and
    // after the FIN is a request sent on a connection the origin closed.
    let fin_at = Instant::now() + lag;
    let mut fin_sent = false;
    // Each round reads at least one byte, sends the FIN once, or ends.
    loop {
        let read = if fin_sent {
            stream.read(&mut chunk).await
        } else {
            match tokio::time::timeout_at(fin_at, stream.read(&mut chunk)).await {
                Ok(read) => read,
                Err(_) => {
                    fin_sent = true;
                    counts.closed.fetch_add(1, Ordering::SeqCst);
                    if stream.shutdown().await.is_err() {
                        return;
                    }
                    continue;
                }
            }
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                counts.late.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

fn empty() -> ClientBody {
    Empty::new().map_err(Into::into).boxed()
}

/// The field report: an origin answers HEAD with 200 and neither `Content-Length` nor
/// `Transfer-Encoding`, and closes 1 to 5 ms later. Such a head describes a GET response
/// delimited by the close (RFC 9112, 6.3), so the connection is not pooled: each POST
/// that follows goes on another connection and succeeds (it got 502 `not_replayed` when
/// the POST went out on the closing connection), and the origin never sees a request
/// on a connection it closed.
#[tokio::test]
async fn a_head_response_without_a_length_is_not_followed_by_a_request_on_its_connection() {
    const ROUNDS: usize = 10;
    let lags = Arc::new(AtomicUsize::new(0));
    let origin = ClosingOrigin::start(move |line, _| {
        if line.starts_with("HEAD ") {
            let lag = 1 + lags.fetch_add(1, Ordering::SeqCst) % 5;
            let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n";
            Answer::then_close(head, Duration::from_millis(lag as u64))
        } else {
            Answer::keep(OK)
        }
    })
    .await;
    let proxy = Proxy::start(config_to(origin.addr())).await;
    let mut client = proxy.client().await;
    let mut posted = 0;
    for _ in 0..ROUNDS {
        let head = client.request(Method::HEAD, "/file", empty()).await;
        assert_eq!(head.status, StatusCode::OK);
        let post = client.request(Method::POST, "/submit", empty()).await;
        if post.status == StatusCode::OK {
            posted += 1;
        }
    }
    assert_eq!(posted, ROUNDS, "POSTs answered 200");
    assert_eq!(origin.late(), 0, "requests sent on a connection the origin closed");
    // Each HEAD's connection is closed by holdfast; each POST's is the next HEAD's.
    assert_eq!(origin.accepted(), ROUNDS + 1);
}
