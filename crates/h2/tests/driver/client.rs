//! A client made of the engine's client role: it runs a list of exchanges over one
//! connection, opening streams as the server's limit allows, sending each request body
//! as the windows let it out, and collecting each response (status, body checked
//! against what it should be, trailers). What the server did not process (streams it
//! refused with REFUSED_STREAM, by RST_STREAM or by GOAWAY, and exchanges never opened
//! because it went away) is reported as such, for the caller to send again on a new
//! connection.

use std::collections::HashMap;
use std::net::SocketAddr;

use bytes::Bytes;
use holdfast_h2::conn::{Config, Connection, Event, Head};
use holdfast_h2::error::ErrorCode;
use holdfast_h2::hpack::Field;
use tokio::net::TcpStream;

use super::{field, pattern_chunk, run, text_fields, Application, End, PATTERN_CHUNK_MAX};

/// One request to make and what its response body must be.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: &'static str,
    pub path: String,
    /// Regular fields after the pseudo-header fields.
    pub fields: Vec<Field>,
    pub body: Bytes,
    pub expect: Expect,
}

impl Exchange {
    pub fn get(path: &str, expect: Expect) -> Exchange {
        Exchange {
            method: "GET",
            path: path.to_owned(),
            fields: Vec::new(),
            body: Bytes::new(),
            expect,
        }
    }

    /// A POST whose response body must be its own body (an echo).
    pub fn echo(path: &str, body: Bytes) -> Exchange {
        let expect = Expect::Bytes(body.clone());
        Exchange { method: "POST", path: path.to_owned(), fields: Vec::new(), body, expect }
    }
}

/// What a response body must be.
#[derive(Debug, Clone)]
pub enum Expect {
    Bytes(Bytes),
    /// `GET /size/N`'s pattern, N bytes.
    Pattern(usize),
}

impl Expect {
    fn len(&self) -> usize {
        match self {
            Expect::Bytes(b) => b.len(),
            Expect::Pattern(n) => *n,
        }
    }

    /// Whether `data` is what the body has at `offset`.
    fn matches(&self, offset: usize, data: &[u8]) -> bool {
        match self {
            Expect::Bytes(b) => b.get(offset..offset + data.len()) == Some(data),
            Expect::Pattern(n) => {
                offset + data.len() <= *n
                    && data.chunks(PATTERN_CHUNK_MAX).enumerate().all(|(i, chunk)| {
                        chunk == pattern_chunk(offset + i * PATTERN_CHUNK_MAX, chunk.len())
                    })
            }
        }
    }
}

/// A response as the client got it.
#[derive(Debug, Clone, Default)]
pub struct Response {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    /// Body bytes received.
    pub len: usize,
    /// Where the first DATA frame that differed from the expected body started.
    pub mismatch_at: Option<usize>,
    /// Whether the length matched the expected body's.
    pub complete: bool,
    pub trailers: Vec<(String, String)>,
}

impl Response {
    /// The body is exactly the expected one.
    pub fn body_ok(&self) -> bool {
        self.mismatch_at.is_none() && self.complete
    }
}

/// What became of one exchange on one connection.
#[derive(Debug, Clone)]
pub enum Outcome {
    Answered(Response),
    /// The server refused the stream (REFUSED_STREAM by RST_STREAM or GOAWAY): it was
    /// not processed and may be sent again.
    Refused,
    /// Never opened: the server went away first. May be sent again.
    NotSent,
    /// Reset with another code: it may have been processed.
    Reset(#[allow(dead_code, reason = "read in failure messages, through Debug")] ErrorCode),
    /// The connection ended before the response did.
    Unfinished,
}

impl Outcome {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Outcome::Refused | Outcome::NotSent)
    }
}

/// One connection's run of exchanges.
#[derive(Debug)]
pub struct Report {
    /// Per exchange, in the order given.
    pub outcomes: Vec<Outcome>,
    pub end: End,
    /// The GOAWAY frames the server sent: their last stream.
    pub go_aways: Vec<u32>,
}

/// Connects to `addr` and runs `exchanges` over one connection, up to
/// `max_open` streams at a time (and the server's limit).
pub async fn exchange(
    addr: SocketAddr,
    config: Config,
    exchanges: Vec<Exchange>,
    max_open: usize,
) -> Report {
    let socket = TcpStream::connect(addr).await.expect("connect to the server");
    let _ = socket.set_nodelay(true);
    let count = exchanges.len();
    let mut app = Exchanges {
        exchanges,
        max_open,
        next: 0,
        streams: HashMap::new(),
        outcomes: vec![None; count],
        go_aways: Vec::new(),
        finished: false,
    };
    let end = run(Connection::client(config), socket, &mut app).await.expect("client I/O");
    let outcomes = app
        .outcomes
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            o.unwrap_or(if i < app.next { Outcome::Unfinished } else { Outcome::NotSent })
        })
        .collect();
    Report { outcomes, end, go_aways: app.go_aways }
}

/// A stream in flight: which exchange, how much of its body went, its response so far.
struct InFlight {
    index: usize,
    sent: usize,
    response: Option<Response>,
}

/// The client's application: the exchanges of one connection.
struct Exchanges {
    exchanges: Vec<Exchange>,
    max_open: usize,
    /// The next exchange to open.
    next: usize,
    streams: HashMap<u32, InFlight>,
    outcomes: Vec<Option<Outcome>>,
    go_aways: Vec<u32>,
    /// Our GOAWAY went: nothing more to do.
    finished: bool,
}

impl Application for Exchanges {
    fn on_event(&mut self, conn: &mut Connection, event: Event) {
        match event {
            Event::Head { stream, head, end_stream } => {
                self.on_head(stream, &head);
                if end_stream {
                    self.finish(conn, stream);
                }
            }
            Event::Data { stream, data, end_stream } => {
                conn.release(stream, data.len());
                self.on_data(stream, &data);
                if end_stream {
                    self.finish(conn, stream);
                }
            }
            Event::Trailers { stream, fields } => {
                if let Some(r) = self.streams.get_mut(&stream).and_then(|s| s.response.as_mut()) {
                    r.trailers = text_fields(&fields);
                }
                self.finish(conn, stream);
            }
            Event::Reset { stream, code, .. } => {
                if let Some(s) = self.streams.remove(&stream) {
                    let outcome = match code {
                        ErrorCode::RefusedStream => Outcome::Refused,
                        code => Outcome::Reset(code),
                    };
                    self.outcomes[s.index] = Some(outcome);
                }
            }
            Event::Writable { stream } => self.push_body(conn, stream),
            Event::GoAway { last_stream, .. } => self.go_aways.push(last_stream),
            Event::TooLarge { .. } | Event::Ready => {}
        }
    }

    fn act(&mut self, conn: &mut Connection) {
        if self.finished {
            return;
        }
        while self.next < self.exchanges.len()
            && self.streams.len() < self.max_open
            && conn.can_open()
        {
            self.open(conn);
        }
        // Done when nothing is in flight and nothing more can be opened here.
        let gone = !self.go_aways.is_empty();
        if self.streams.is_empty() && (self.next == self.exchanges.len() || gone) {
            conn.go_away();
            self.finished = true;
        }
    }
}

impl Exchanges {
    fn open(&mut self, conn: &mut Connection) {
        let index = self.next;
        let exchange = &self.exchanges[index];
        let mut fields = vec![
            field(":method", exchange.method),
            field(":scheme", "http"),
            field(":authority", "127.0.0.1"),
            field(":path", &exchange.path),
        ];
        fields.extend(exchange.fields.iter().cloned());
        if !exchange.body.is_empty() {
            fields.push(field("content-length", &exchange.body.len().to_string()));
        }
        let id = conn.open(&fields, exchange.body.is_empty(), false).expect("can_open said yes");
        self.next += 1;
        self.streams.insert(id, InFlight { index, sent: 0, response: None });
        self.push_body(conn, id);
    }

    /// Queues as much of the request body as the engine takes now.
    fn push_body(&mut self, conn: &mut Connection, stream: u32) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let body = &self.exchanges[s.index].body;
        while s.sent < body.len() {
            let room = conn.capacity(stream);
            if room == 0 {
                return;
            }
            let end = (s.sent + room).min(body.len());
            let last = end == body.len();
            if conn.send_data(stream, body.slice(s.sent..end), last).is_err() {
                return;
            }
            s.sent = end;
        }
    }

    /// A response head: informational ones are passed over.
    fn on_head(&mut self, stream: u32, head: &Head) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let status = head.pseudo.status.unwrap_or(0);
        if (100..200).contains(&status) {
            return;
        }
        s.response =
            Some(Response { status, fields: text_fields(&head.fields), ..Response::default() });
    }

    /// Response body bytes, checked against the expected body where they fall.
    fn on_data(&mut self, stream: u32, data: &[u8]) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if let Some(r) = s.response.as_mut() {
            let expect = &self.exchanges[s.index].expect;
            if r.mismatch_at.is_none() && !expect.matches(r.len, data) {
                r.mismatch_at = Some(r.len);
            }
            r.len += data.len();
        }
    }

    /// The response ended: the exchange is answered. A request body not all sent by
    /// then is no longer wanted (RFC 9113 section 8.1 lets a server answer early): the
    /// stream is cancelled rather than left open.
    fn finish(&mut self, conn: &mut Connection, stream: u32) {
        let Some(s) = self.streams.remove(&stream) else { return };
        if s.sent < self.exchanges[s.index].body.len() {
            conn.reset(stream, ErrorCode::Cancel);
        }
        let mut response = s.response.unwrap_or_default();
        response.complete = response.len == self.exchanges[s.index].expect.len();
        self.outcomes[s.index] = Some(Outcome::Answered(response));
    }
}
