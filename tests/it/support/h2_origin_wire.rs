//! A scripted HTTP/2 origin for the origin-side conformance suite: a listener on
//! `127.0.0.1:0` ([`ScriptedOrigin`]) whose connections, opened by holdfast speaking as
//! a client, are handed to the test one by one as [`Wire`]s, so that the test writes
//! whatever frames its rule needs (well-formed ones through holdfast-h2's writers and
//! the wire's own HPACK encoder, or raw bytes) and reads exactly what holdfast sent.
//!
//! What an origin does on every connection lives here too: reading a request
//! ([`Wire::request`]), with the window its body needs granted as it comes, and
//! answering one ([`Wire::answer`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use holdfast_h2::frame::Settings;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::h2_wire::{Event, Wire, ANSWER};

/// A listener whose connections the test drives itself; stops accepting when dropped.
pub struct ScriptedOrigin {
    addr: SocketAddr,
    /// Connections accepted and not yet taken by the test, in order (out of it while
    /// a take waits).
    incoming: Mutex<Option<mpsc::Receiver<TcpStream>>>,
    accepted: Arc<AtomicUsize>,
    /// Connections the test took.
    taken: AtomicUsize,
    accept: JoinHandle<()>,
}

impl Drop for ScriptedOrigin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl ScriptedOrigin {
    pub async fn start() -> ScriptedOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the scripted origin");
        let addr = listener.local_addr().expect("scripted origin address");
        let (tx, rx) = mpsc::channel(64);
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let accept = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                if tx.send(tcp).await.is_err() {
                    return;
                }
            }
        });
        ScriptedOrigin {
            addr,
            incoming: Mutex::new(Some(rx)),
            accepted,
            taken: AtomicUsize::new(0),
            accept,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections holdfast opened that the test has not taken (yet).
    pub fn untaken(&self) -> usize {
        self.accepted.load(Ordering::SeqCst) - self.taken.load(Ordering::SeqCst)
    }

    /// The next connection holdfast opens, its connection preface read; nothing sent.
    pub async fn accept_raw(&self) -> Wire {
        Wire::accept(self.next_tcp().await).await
    }

    /// The next connection, past its start: empty SETTINGS both ways, acknowledged.
    pub async fn accept(&self) -> Wire {
        self.accept_with(&Settings::default()).await
    }

    /// The next connection, past its start with `settings` as our SETTINGS.
    pub async fn accept_with(&self, settings: &Settings) -> Wire {
        Wire::accept_with(self.next_tcp().await, settings).await
    }

    async fn next_tcp(&self) -> TcpStream {
        let taken = self.incoming.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut incoming = taken.expect("one connection taken at a time");
        let next = tokio::time::timeout(ANSWER, incoming.recv()).await;
        *self.incoming.lock().unwrap_or_else(|e| e.into_inner()) = Some(incoming);
        match next {
            Ok(Some(tcp)) => {
                self.taken.fetch_add(1, Ordering::SeqCst);
                tcp
            }
            Ok(None) => panic!("the scripted origin stopped accepting"),
            Err(_) => panic!("holdfast opened no connection to the origin within {ANSWER:?}"),
        }
    }
}

/// A request as the origin read it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub stream: u32,
    /// The header section, pseudo-header fields included, in order.
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The trailer section, if one ended the request.
    pub trailers: Option<Vec<(String, String)>>,
}

impl Request {
    /// The first value of the field `name`.
    pub fn field(&self, name: &str) -> Option<&str> {
        field(&self.fields, name)
    }
}

/// The first value of the field `name` in `fields`.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The origin's side of a connection.
impl Wire {
    /// Reads until a request head opens a new stream: its stream, its fields, and
    /// whether it ended the stream. A GOAWAY, a reset, or the connection's end first
    /// fails, naming `rule`.
    pub async fn request_head(&mut self, rule: &str) -> (u32, Vec<(String, String)>, bool) {
        let opened: Vec<u32> = self.seen.iter().filter_map(head_stream).collect();
        let head = self
            .until(rule, |e| {
                head_stream(e).is_some_and(|stream| !opened.contains(&stream))
                    || matches!(e, Event::Undecodable { .. })
            })
            .await;
        match head {
            Event::Fields { stream, fields, end_stream } => (stream, fields, end_stream),
            other => panic!("{rule}: holdfast sent {other:?}: {:?}", self.seen),
        }
    }

    /// Reads the next request to its end: head, body (granting the window it needs as
    /// it comes) and trailers.
    pub async fn request(&mut self, rule: &str) -> Request {
        let (stream, fields, end_stream) = self.request_head(rule).await;
        let mut request = Request { stream, fields, ..Request::default() };
        let mut ended = end_stream;
        // Bounded by `until`'s deadline per event.
        while !ended {
            let event = self.until(rule, |e| on_stream(e, stream)).await;
            match event {
                Event::Data { data, end_stream, .. } => {
                    request.body.extend_from_slice(&data);
                    self.grant(stream, &data, end_stream).await;
                    ended = end_stream;
                }
                Event::Fields { fields, end_stream, .. } => {
                    request.trailers = Some(fields);
                    ended = end_stream;
                }
                other => panic!("{rule}: holdfast sent {other:?}: {:?}", self.seen),
            }
        }
        request
    }

    /// Gives back the window `data` took, on the connection and, unless the stream
    /// ended, on `stream`.
    async fn grant(&mut self, stream: u32, data: &Bytes, end_stream: bool) {
        if data.is_empty() {
            return;
        }
        let n = u32::try_from(data.len()).expect("a frame's length");
        self.window_update(0, n).await;
        if !end_stream {
            self.window_update(stream, n).await;
        }
    }

    /// Answers `stream` with a 200 whose `x-path` is `path` and whose body is
    /// `served PATH` ([`served`]).
    pub async fn answer(&mut self, stream: u32, path: &str) {
        let body = served(path);
        let length = body.len().to_string();
        let head = [(":status", "200"), ("content-length", length.as_str()), ("x-path", path)];
        self.headers(stream, &head, false).await;
        self.data(stream, body.as_bytes(), true).await;
    }
}

/// The body [`Wire::answer`] sends for `path`.
pub fn served(path: &str) -> String {
    format!("served {path}")
}

/// Whether `event` is DATA or a field block on `stream`, or bytes that are not frames.
fn on_stream(event: &Event, stream: u32) -> bool {
    match event {
        Event::Data { stream: s, .. } | Event::Fields { stream: s, .. } => *s == stream,
        Event::Undecodable { .. } => true,
        _ => false,
    }
}

/// The stream a request head opens, for an event that is one.
fn head_stream(event: &Event) -> Option<u32> {
    match event {
        Event::Fields { stream, fields, .. } if fields.iter().any(|(n, _)| n == ":method") => {
            Some(*stream)
        }
        _ => None,
    }
}
