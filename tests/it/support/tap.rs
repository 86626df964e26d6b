//! A wiretap between holdfast and an origin: a TCP relay on `127.0.0.1:0` that passes
//! bytes both ways unchanged and records, per connection, what went to the origin, so
//! tests can assert the exact bytes holdfast sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running relay; stops accepting when dropped.
pub struct Tap {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    accept: JoinHandle<()>,
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Tap {
    /// Relays every connection it accepts to `origin`.
    pub async fn start(origin: SocketAddr) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind tap");
        let addr = listener.local_addr().expect("tap addr");
        let sent: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let record = Arc::clone(&sent);
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(origin).await else { continue };
                let index = {
                    let mut sent = record.lock().unwrap();
                    sent.push(Vec::new());
                    sent.len() - 1
                };
                tokio::spawn(relay(inbound, outbound, Arc::clone(&record), index));
            }
        });
        Tap { addr, sent, accept }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What went to the origin, one entry per connection, in accept order.
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.sent.lock().unwrap().clone()
    }

    /// Everything that went to the origin, as text, connections in accept order.
    pub fn sent_text(&self) -> String {
        self.sent().iter().map(|c| String::from_utf8_lossy(c).into_owned()).collect()
    }
}

/// Copies both ways until either side closes, recording what goes to the origin.
async fn relay(
    inbound: TcpStream,
    outbound: TcpStream,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    index: usize,
) {
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let up = async move {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match in_read.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    sent.lock().unwrap()[index].extend_from_slice(&chunk[..n]);
                    if out_write.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = out_write.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut out_read, &mut in_write).await;
        let _ = in_write.shutdown().await;
    };
    tokio::join!(up, down);
}
