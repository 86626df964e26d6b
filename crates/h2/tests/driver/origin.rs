//! An origin made of the engine's server role: it answers the interop tests' routes on
//! every connection it accepts (each connection on a task of its own) and keeps what
//! the tests assert on: connections accepted, requests seen, how each connection ended.
//!
//! Routes: `GET /size/N` answers N bytes of the pattern; `POST /echo` streams the
//! request body back as it arrives; `GET /trailers` answers a short body, then trailers
//! (`grpc-status: 0`); `POST /interop.Echo/*` is a gRPC echo service (the request's
//! messages back, `content-type: application/grpc`, then `grpc-status: 0`); anything
//! else is 404, and a request head over the header list
//! limit is 431.
//!
//! `POST /echo` is the end-to-end flow control a proxy does: a received chunk is
//! released to the engine (which then opens the client's window) only once it is
//! queued on the way back, and the engine takes it only up to the client's window plus
//! its send buffer. A client that stops reading stops its own upload.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use holdfast_h2::conn::{Config, Connection, Event, Head};
use holdfast_h2::hpack::Field;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{field, pattern_chunk, run, text_fields, Application, End, PATTERN_CHUNK_MAX};

/// The body `GET /trailers` sends before its trailers.
pub const TRAILERS_BODY_LEN: usize = 1_000;

/// A running origin on `127.0.0.1`, on a port of the system's choosing.
pub struct Origin {
    pub addr: SocketAddr,
    seen: Arc<Seen>,
    accept: JoinHandle<()>,
}

/// A request as the origin saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The regular fields, in order.
    pub fields: Vec<(String, String)>,
}

/// What every connection of the origin adds to.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: Mutex<Vec<Request>>,
    /// How each connection's run ended: an I/O error, or the engine's end.
    ends: Mutex<Vec<Result<End, String>>>,
}

impl Origin {
    /// Binds `127.0.0.1:0` and serves every connection with an engine made with `config`.
    pub async fn start(config: Config) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("the bound address");
        let seen = Arc::new(Seen::default());
        let accept = tokio::spawn(accept(listener, config, Arc::clone(&seen)));
        Origin { addr, seen, accept }
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.seen.connections.load(Ordering::SeqCst)
    }

    /// Requests seen so far, in the order their heads arrived.
    pub fn requests(&self) -> Vec<Request> {
        self.seen.requests.lock().expect("requests lock").clone()
    }

    /// Connections that ended in an I/O error or a connection error of the engine, as
    /// text for the assertion's message.
    pub fn failures(&self) -> Vec<String> {
        let ends = self.seen.ends.lock().expect("ends lock");
        ends.iter()
            .filter_map(|end| match end {
                Ok(End { error: None, .. }) => None,
                Ok(End { error: Some(code), .. }) => Some(format!("connection error {code}")),
                Err(e) => Some(format!("I/O error {e}")),
            })
            .collect()
    }

    /// Connections whose run has ended.
    pub fn ended(&self) -> usize {
        self.seen.ends.lock().expect("ends lock").len()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept(listener: TcpListener, config: Config, seen: Arc<Seen>) {
    while let Ok((socket, _)) = listener.accept().await {
        seen.connections.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(serve(socket, config.clone(), Arc::clone(&seen)));
    }
}

/// Serves one connection to its end and records how it ended.
async fn serve(socket: TcpStream, config: Config, seen: Arc<Seen>) {
    let _ = socket.set_nodelay(true);
    let mut routes = Routes { answers: HashMap::new(), seen: Arc::clone(&seen) };
    let end: io::Result<End> = run(Connection::server(config), socket, &mut routes).await;
    seen.ends.lock().expect("ends lock").push(end.map_err(|e| e.to_string()));
}

/// The answer still being sent on a stream.
struct Answer {
    body: Body,
    /// Trailers to send after the body (the body then does not end the stream).
    trailers: Option<Vec<Field>>,
}

enum Body {
    /// The pattern: `sent` of `len` bytes queued.
    Pattern { sent: usize, len: usize },
    /// The request body, queued back as it arrives; `ended`: the request's end came.
    Echo { queue: VecDeque<Bytes>, ended: bool },
}

/// The origin's application: one connection's answers in progress.
struct Routes {
    answers: HashMap<u32, Answer>,
    seen: Arc<Seen>,
}

impl Application for Routes {
    fn on_event(&mut self, conn: &mut Connection, event: Event) {
        match event {
            Event::Head { stream, head, end_stream } => {
                self.answer(conn, stream, &head, end_stream)
            }
            Event::Data { stream, data, end_stream } => {
                self.on_body(conn, stream, data, end_stream)
            }
            Event::Trailers { stream, .. } => self.on_body(conn, stream, Bytes::new(), true),
            Event::TooLarge { stream, .. } => {
                let _ = conn.send_head(stream, &[field(":status", "431")], true);
            }
            Event::Writable { stream } => self.push(conn, stream),
            Event::Reset { stream, .. } => {
                self.answers.remove(&stream);
            }
            Event::GoAway { .. } | Event::Ready => {}
        }
    }
}

impl Routes {
    /// Routes a request and starts its answer.
    fn answer(&mut self, conn: &mut Connection, stream: u32, head: &Head, end_stream: bool) {
        let text =
            |v: &Option<Bytes>| String::from_utf8_lossy(v.as_deref().unwrap_or(b"")).into_owned();
        let method = text(&head.pseudo.method);
        let path = text(&head.pseudo.path);
        let request = Request { method, path, fields: text_fields(&head.fields) };
        let (status, length, answer) = route(&request, end_stream);
        let grpc = is_grpc(&request.path);
        self.seen.requests.lock().expect("requests lock").push(request);
        let Some(answer) = answer else {
            let _ = conn.send_head(stream, &[field(":status", status)], true);
            return;
        };
        let mut fields = vec![field(":status", status)];
        if let Some(length) = length {
            fields.push(field("content-length", &length.to_string()));
        }
        if grpc {
            fields.push(field("content-type", "application/grpc"));
        }
        if conn.send_head(stream, &fields, false).is_ok() {
            self.answers.insert(stream, answer);
            self.push(conn, stream);
        }
    }

    /// Request body bytes: echoed, or released at once when the route ignores them.
    fn on_body(&mut self, conn: &mut Connection, stream: u32, data: Bytes, end_stream: bool) {
        let Some(Answer { body: Body::Echo { queue, ended }, .. }) = self.answers.get_mut(&stream)
        else {
            conn.release(stream, data.len());
            return;
        };
        if !data.is_empty() {
            queue.push_back(data);
        }
        *ended = end_stream;
        self.push(conn, stream);
    }

    /// Queues as much of a stream's answer as the engine takes now; the rest waits for
    /// [`Event::Writable`] (or, for an echo, for more of the request).
    fn push(&mut self, conn: &mut Connection, stream: u32) {
        let Some(answer) = self.answers.get_mut(&stream) else { return };
        let end_with_body = answer.trailers.is_none();
        let done = match &mut answer.body {
            Body::Pattern { sent, len } => push_pattern(conn, stream, sent, *len, end_with_body),
            Body::Echo { queue, ended } => push_echo(conn, stream, queue, *ended, end_with_body),
        };
        if done {
            if let Some(trailers) = self.answers.remove(&stream).and_then(|a| a.trailers) {
                let _ = conn.send_trailers(stream, trailers);
            }
        }
    }
}

/// The status, `content-length` and answer of a request; no answer: the head ends it.
fn route(request: &Request, end_stream: bool) -> (&'static str, Option<usize>, Option<Answer>) {
    let pattern = |len| Body::Pattern { sent: 0, len };
    let size = request.path.strip_prefix("/size/").and_then(|n| n.parse::<usize>().ok());
    match (request.method.as_str(), request.path.as_str(), size) {
        ("GET", _, Some(len)) => {
            ("200", Some(len), Some(Answer { body: pattern(len), trailers: None }))
        }
        ("POST", "/echo", _) => {
            let body = Body::Echo { queue: VecDeque::new(), ended: end_stream };
            ("200", None, Some(Answer { body, trailers: None }))
        }
        // gRPC, any method of the echo service: the request's messages come back as they
        // came (their framing is the body's), then the trailers' status.
        ("POST", path, _) if is_grpc(path) => {
            let body = Body::Echo { queue: VecDeque::new(), ended: end_stream };
            let trailers = Some(vec![field("grpc-status", "0")]);
            ("200", None, Some(Answer { body, trailers }))
        }
        ("GET", "/trailers", _) => {
            let trailers = Some(vec![field("grpc-status", "0")]);
            ("200", None, Some(Answer { body: pattern(TRAILERS_BODY_LEN), trailers }))
        }
        _ => ("404", None, None),
    }
}

/// Queues the pattern from `sent` while the engine has room; whether it is all queued.
fn push_pattern(
    conn: &mut Connection,
    stream: u32,
    sent: &mut usize,
    len: usize,
    end_with_body: bool,
) -> bool {
    if len == 0 {
        if end_with_body {
            let _ = conn.send_data(stream, Bytes::new(), true);
        }
        return true;
    }
    while *sent < len {
        let room = conn.capacity(stream);
        if room == 0 {
            return false;
        }
        let n = room.min(len - *sent).min(PATTERN_CHUNK_MAX);
        let last = *sent + n == len && end_with_body;
        if conn.send_data(stream, pattern_chunk(*sent, n), last).is_err() {
            return true;
        }
        *sent += n;
    }
    true
}

/// A path of the gRPC echo service the origin serves.
fn is_grpc(path: &str) -> bool {
    path.starts_with("/interop.Echo/")
}

/// Queues received chunks back while the engine has room, releasing each once queued;
/// whether the echo is complete. `end_with_body`: the last DATA ends the stream (else
/// trailers follow).
fn push_echo(
    conn: &mut Connection,
    stream: u32,
    queue: &mut VecDeque<Bytes>,
    ended: bool,
    end_with_body: bool,
) -> bool {
    while let Some(front) = queue.front_mut() {
        let room = conn.capacity(stream);
        if room == 0 {
            return false;
        }
        let piece = if front.len() <= room {
            queue.pop_front().unwrap_or_default()
        } else {
            front.split_to(room)
        };
        let n = piece.len();
        let last = ended && queue.is_empty();
        if conn.send_data(stream, piece, last && end_with_body).is_err() {
            return true;
        }
        conn.release(stream, n);
        if last {
            return true;
        }
    }
    if ended && end_with_body {
        let _ = conn.send_data(stream, Bytes::new(), true);
    }
    ended
}
