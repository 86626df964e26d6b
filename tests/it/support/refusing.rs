//! An HTTP/2 origin written frame by frame ([`RefusingOrigin`]), for what the `h2`
//! crate's server cannot do: refuse a stream by GOAWAY after its HEADERS arrived (`h2`
//! counts every stream it received as processed), at a chosen point of its upload, and
//! send GOAWAY with a last stream below streams already in flight, as nginx does at
//! `keepalive_requests`. It reads request heads no further than their frames, so it
//! tells requests apart by the id each carries at the start of its body (`id=ID;`).
//!
//! Every stream it neither refuses nor ignores (above the last stream of a GOAWAY it
//! sent) is processed: its body read to the end, then answered 200 with
//! `x-received-bytes`, `x-received-fnv` (FNV-1a of the body), `x-received-trailers`
//! (`1` when trailers ended the body, else `0`), `x-conn` (the connection's number,
//! from 1) and the body `ok\n`. With [`RefusingOptions::answer_first`], the response
//! head comes first and those fields come as trailers once the body has arrived.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::http2::{encode_frame, frame, hpack_literal, Frame, PREFACE};
use super::Fnv;

const WINDOW_UPDATE: u8 = 0x8;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const NO_ERROR: u32 = 0x0;
const INTERNAL_ERROR: u32 = 0x2;
const REFUSED_STREAM: u32 = 0x7;
/// The window a processed stream gets when its HEADERS arrive: its whole body may come.
const OPEN_WINDOW: u32 = 1 << 30;

/// How a stream is turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// GOAWAY (NO_ERROR) whose last stream is below it: never processed.
    GoAway,
    /// RST_STREAM with REFUSED_STREAM: never processed.
    Reset,
    /// GOAWAY with INTERNAL_ERROR (last stream below it): the origin may have
    /// processed streams it was working on, so this one does not count as refused.
    GoAwayWithError,
    /// RST_STREAM with INTERNAL_ERROR: the stream failed, perhaps processed.
    ResetWithError,
    /// GOAWAY (NO_ERROR) whose last stream is this one, then the connection closes
    /// before an answer: processed, perhaps, and failed.
    GoAwayIncludingThenClose,
}

/// Where in its upload a stream is turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefuseAt {
    /// GOAWAY (last stream 0) once the connection's SETTINGS and first PING are
    /// answered, before any HEADERS came: every stream sent on it is refused.
    Start,
    /// When its HEADERS arrive, before any of its body.
    Headers,
    /// Once this many bytes of its body arrived.
    Bytes(u64),
    /// Once its whole body arrived, before a response.
    End,
}

/// How a [`RefusingOrigin`] behaves.
#[derive(Debug, Clone)]
pub struct RefusingOptions {
    pub how: Refusal,
    pub at: RefuseAt,
    /// How many streams (connections, for [`RefuseAt::Start`]) are turned away: the
    /// first ones, over all connections. `usize::MAX`: all of them.
    pub times: usize,
    /// SETTINGS_INITIAL_WINDOW_SIZE it announces: how much of a body may come before
    /// it grants more. Every stream but one turned away at [`RefuseAt::Bytes`] is
    /// granted [`OPEN_WINDOW`] when its HEADERS arrive.
    pub window: u32,
    /// After this many streams on a connection, GOAWAY (NO_ERROR) naming the last of
    /// them: later streams on that connection are refused.
    pub goaway_every: Option<usize>,
    /// Every this many streams (over all connections, the refusals above aside) is
    /// turned away as `how` says, at a point that goes round [`CYCLE`].
    pub refuse_every: Option<usize>,
    /// Answer each stream's HEADERS at once, before its body (as gRPC servers may),
    /// then grant window only as the body arrives, and end the response with trailers
    /// saying what arrived.
    pub answer_first: bool,
}

/// The points [`RefusingOptions::refuse_every`] goes round: on the HEADERS, early in
/// the body, when the default window is used up (waiting for more, if the body is
/// larger), at the end.
pub const CYCLE: [RefuseAt; 4] =
    [RefuseAt::Headers, RefuseAt::Bytes(1_000), RefuseAt::Bytes(65_535), RefuseAt::End];

impl Default for RefusingOptions {
    fn default() -> Self {
        RefusingOptions {
            how: Refusal::GoAway,
            at: RefuseAt::End,
            times: 0,
            window: 65_535,
            goaway_every: None,
            refuse_every: None,
            answer_first: false,
        }
    }
}

#[derive(Default)]
struct State {
    accepted: AtomicUsize,
    /// Streams whose HEADERS arrived, over all connections.
    streams: AtomicUsize,
    /// Refusals left to make.
    left: AtomicUsize,
    goaways: AtomicUsize,
    /// Body bytes each turned-away stream had sent when it was turned away, and the
    /// streams sent above the last stream of a GOAWAY (0 bytes when their HEADERS came
    /// after it).
    turned_away: Mutex<Vec<u64>>,
    /// The id of each request processed, in order (empty when its body had none).
    processed: Mutex<Vec<String>>,
    errors: Mutex<Vec<String>>,
}

impl State {
    fn take_refusal(&self) -> bool {
        self.left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }
}

/// A frame-by-frame HTTP/2 origin on `127.0.0.1:0`; stops accepting when dropped.
pub struct RefusingOrigin {
    addr: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl Drop for RefusingOrigin {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl RefusingOrigin {
    pub async fn start(options: RefusingOptions) -> RefusingOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the refusing origin");
        let addr = listener.local_addr().expect("refusing origin address");
        let state = Arc::new(State { left: AtomicUsize::new(options.times), ..State::default() });
        let accept = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let number = state.accepted.fetch_add(1, Ordering::SeqCst) + 1;
                    let (state, options) = (Arc::clone(&state), options.clone());
                    tokio::spawn(async move {
                        if let Err(e) = serve(tcp, number, &state, &options).await {
                            state.errors.lock().unwrap().push(format!("connection {number}: {e}"));
                        }
                    });
                }
            })
        };
        RefusingOrigin { addr, state, accept }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Streams whose HEADERS arrived, turned away or not.
    pub fn streams(&self) -> usize {
        self.state.streams.load(Ordering::SeqCst)
    }

    /// GOAWAY frames sent.
    pub fn goaways(&self) -> usize {
        self.state.goaways.load(Ordering::SeqCst)
    }

    /// For each stream turned away, how many body bytes had arrived on it.
    pub fn turned_away(&self) -> Vec<u64> {
        self.state.turned_away.lock().unwrap().clone()
    }

    /// The ids of the requests processed, in order.
    pub fn processed(&self) -> Vec<String> {
        self.state.processed.lock().unwrap().clone()
    }

    /// Why connections ended with an error (a peer that closes is not one).
    pub fn errors(&self) -> Vec<String> {
        self.state.errors.lock().unwrap().clone()
    }
}

/// One request stream as the origin sees it.
#[derive(Default)]
struct Upload {
    received: u64,
    fnv: Fnv,
    /// The first bytes of the body, for its id.
    start: Vec<u8>,
    trailers: bool,
    /// Turned away when it reaches this point (or its end, if sooner).
    refuse: Option<RefuseAt>,
    /// Its response head went before its body came ([`RefusingOptions::answer_first`]).
    answered: bool,
}

/// One connection's streams.
struct Conn<'a> {
    number: usize,
    state: &'a State,
    options: &'a RefusingOptions,
    uploads: HashMap<u32, Upload>,
    /// Streams to ignore: refused, reset, or above the last stream of our GOAWAY.
    gone: HashSet<u32>,
    /// The last stream of the GOAWAY sent, if one was.
    last: Option<u32>,
    /// The highest stream that arrived.
    highest: u32,
    /// Streams that arrived on this connection.
    count: usize,
    /// Frames to write once this one is handled.
    out: Vec<u8>,
    /// Close the connection after writing `out`.
    close: bool,
}

/// Serves one connection until the peer closes it.
async fn serve(
    tcp: TcpStream,
    number: usize,
    state: &State,
    options: &RefusingOptions,
) -> io::Result<()> {
    tcp.set_nodelay(true)?;
    let (mut rd, mut wr) = tcp.into_split();
    let mut preface = [0u8; 24];
    rd.read_exact(&mut preface).await?;
    if preface != PREFACE {
        return Err(io::Error::other("no HTTP/2 preface"));
    }
    let mut settings = SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes().to_vec();
    settings.extend_from_slice(&options.window.to_be_bytes());
    wr.write_all(&encode_frame(frame::SETTINGS, 0, 0, &settings)).await?;
    let refuse_at_start = options.at == RefuseAt::Start && state.take_refusal();
    let mut conn = Conn {
        number,
        state,
        options,
        uploads: HashMap::new(),
        gone: HashSet::new(),
        last: None,
        highest: 0,
        count: 0,
        out: Vec::new(),
        close: false,
    };
    let mut buf = Vec::new();
    // Ends when the peer closes; each round handles one frame.
    while let Some(f) = read_frame(&mut rd, &mut buf).await? {
        match f.kind {
            frame::SETTINGS if f.flags & frame::ACK == 0 => {
                conn.out.extend(encode_frame(frame::SETTINGS, frame::ACK, 0, &[]));
            }
            frame::PING if f.flags & frame::ACK == 0 => {
                conn.out.extend(encode_frame(frame::PING, frame::ACK, 0, &f.payload));
                if refuse_at_start && conn.last.is_none() {
                    conn.go_away(0, NO_ERROR);
                }
            }
            frame::HEADERS => conn.on_headers(&f),
            frame::DATA => conn.on_data(&f),
            frame::RST_STREAM => {
                conn.uploads.remove(&f.stream);
                conn.gone.insert(f.stream);
            }
            _ => {}
        }
        if !conn.out.is_empty() {
            wr.write_all(&std::mem::take(&mut conn.out)).await?;
        }
        if conn.close {
            return Ok(());
        }
    }
    Ok(())
}

/// The next frame, or `None` when the peer closed the connection.
async fn read_frame(rd: &mut OwnedReadHalf, buf: &mut Vec<u8>) -> io::Result<Option<Frame>> {
    // Each round reads more bytes or returns a frame.
    loop {
        if buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() >= 9 + len {
                let stream = u32::from_be_bytes(buf[5..9].try_into().unwrap()) & 0x7fff_ffff;
                let f = Frame {
                    kind: buf[3],
                    flags: buf[4],
                    stream,
                    payload: buf[9..9 + len].to_vec(),
                };
                buf.drain(..9 + len);
                return Ok(Some(f));
            }
        }
        let mut chunk = [0u8; 64 * 1024];
        match rd.read(&mut chunk).await {
            Ok(0) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

impl Conn<'_> {
    /// A request's HEADERS, or the trailers that end its body.
    fn on_headers(&mut self, f: &Frame) {
        let id = f.stream;
        let ended = f.flags & frame::END_STREAM != 0;
        if let Some(upload) = self.uploads.get_mut(&id) {
            upload.trailers = true;
            if ended {
                self.on_end(id);
            }
            return;
        }
        if self.gone.contains(&id) {
            return;
        }
        self.highest = self.highest.max(id);
        let number = self.state.streams.fetch_add(1, Ordering::SeqCst) + 1;
        if self.last.is_some_and(|last| id > last) {
            // Sent before the client read our GOAWAY: refused by it.
            self.state.turned_away.lock().unwrap().push(0);
            self.gone.insert(id);
            return;
        }
        self.count += 1;
        let refuse = match self.options.refuse_every {
            Some(every) if number % every == 0 => Some(CYCLE[number / every % CYCLE.len()]),
            _ if self.options.at == RefuseAt::Start => None,
            _ => self.state.take_refusal().then_some(self.options.at),
        };
        self.uploads.insert(id, Upload { refuse, ..Upload::default() });
        if refuse == Some(RefuseAt::Headers) {
            self.turn_away(id);
            return;
        }
        if self.options.answer_first && refuse.is_none() {
            let block = [0x88]; // :status 200
            self.out.extend(encode_frame(frame::HEADERS, frame::END_HEADERS, id, &block));
            if let Some(upload) = self.uploads.get_mut(&id) {
                upload.answered = true;
            }
        } else if !matches!(refuse, Some(RefuseAt::Bytes(_))) {
            // A stream turned away mid-body keeps the announced window, so the test
            // knows where its upload stands; any other may send its whole body.
            self.out.extend(window_update(id, OPEN_WINDOW));
        }
        if self.options.goaway_every == Some(self.count) {
            self.go_away(id, NO_ERROR);
        }
        if ended {
            self.on_end(id);
        }
    }

    fn on_data(&mut self, f: &Frame) {
        // The connection's window comes back whatever becomes of the stream.
        if !f.payload.is_empty() {
            self.out.extend(window_update(0, f.payload.len() as u32));
        }
        let Some(upload) = self.uploads.get_mut(&f.stream) else { return };
        if upload.answered && !f.payload.is_empty() {
            self.out.extend(window_update(f.stream, f.payload.len() as u32));
        }
        upload.received += f.payload.len() as u64;
        upload.fnv.update(&f.payload);
        let room = 64usize.saturating_sub(upload.start.len());
        upload.start.extend(f.payload.iter().take(room));
        if let Some(RefuseAt::Bytes(n)) = upload.refuse {
            if upload.received >= n {
                self.turn_away(f.stream);
                return;
            }
        }
        if f.flags & frame::END_STREAM != 0 {
            self.on_end(f.stream);
        }
    }

    /// The body ended: the stream is turned away or processed.
    fn on_end(&mut self, id: u32) {
        if self.uploads.get(&id).is_some_and(|u| u.refuse.is_some()) {
            self.turn_away(id);
            return;
        }
        let Some(upload) = self.uploads.remove(&id) else { return };
        let text = String::from_utf8_lossy(&upload.start);
        let request_id = text
            .strip_prefix("id=")
            .and_then(|rest| rest.split_once(';'))
            .map_or(String::new(), |(id, _)| id.to_string());
        self.state.processed.lock().unwrap().push(request_id);
        if upload.answered {
            let mut trailers = Vec::new();
            let received = upload.received.to_string();
            hpack_literal(b"x-received-bytes", received.as_bytes(), &mut trailers);
            hpack_literal(b"x-received-fnv", upload.fnv.hex().as_bytes(), &mut trailers);
            self.out.extend(encode_frame(frame::DATA, 0, id, b"ok\n"));
            let flags = frame::END_HEADERS | frame::END_STREAM;
            self.out.extend(encode_frame(frame::HEADERS, flags, id, &trailers));
            return;
        }
        let mut block = vec![0x88]; // :status 200
        hpack_literal(b"content-length", b"3", &mut block);
        hpack_literal(b"x-received-bytes", upload.received.to_string().as_bytes(), &mut block);
        hpack_literal(b"x-received-fnv", upload.fnv.hex().as_bytes(), &mut block);
        let trailers: &[u8] = if upload.trailers { b"1" } else { b"0" };
        hpack_literal(b"x-received-trailers", trailers, &mut block);
        hpack_literal(b"x-conn", self.number.to_string().as_bytes(), &mut block);
        self.out.extend(encode_frame(frame::HEADERS, frame::END_HEADERS, id, &block));
        self.out.extend(encode_frame(frame::DATA, frame::END_STREAM, id, b"ok\n"));
    }

    /// Turns the stream away as the options say.
    fn turn_away(&mut self, id: u32) {
        let Some(upload) = self.uploads.remove(&id) else { return };
        self.state.turned_away.lock().unwrap().push(upload.received);
        self.gone.insert(id);
        // The last stream below this one: the streams before it stand.
        let below = self.highest_below(id);
        match self.options.how {
            Refusal::GoAway => self.go_away(below, NO_ERROR),
            Refusal::GoAwayWithError => self.go_away(below, INTERNAL_ERROR),
            Refusal::Reset => self.reset(id, REFUSED_STREAM),
            Refusal::ResetWithError => self.reset(id, INTERNAL_ERROR),
            Refusal::GoAwayIncludingThenClose => {
                self.go_away(id, NO_ERROR);
                self.close = true;
            }
        }
    }

    /// The stream before `id`: a client opens its streams in order, odd ids up.
    fn highest_below(&self, id: u32) -> u32 {
        id.saturating_sub(2).min(self.highest)
    }

    fn reset(&mut self, id: u32, code: u32) {
        self.out.extend(encode_frame(frame::RST_STREAM, 0, id, &code.to_be_bytes()));
    }

    /// GOAWAY with `last` as its last stream: streams above it are ignored from now.
    fn go_away(&mut self, last: u32, code: u32) {
        let mut payload = last.to_be_bytes().to_vec();
        payload.extend_from_slice(&code.to_be_bytes());
        self.out.extend(encode_frame(frame::GOAWAY, 0, 0, &payload));
        self.state.goaways.fetch_add(1, Ordering::SeqCst);
        let last = self.last.map_or(last, |before| before.min(last));
        self.last = Some(last);
        let above: Vec<u32> = self.uploads.keys().copied().filter(|s| *s > last).collect();
        for id in above {
            let upload = self.uploads.remove(&id).unwrap_or_default();
            self.state.turned_away.lock().unwrap().push(upload.received);
            self.gone.insert(id);
        }
    }
}

fn window_update(stream: u32, n: u32) -> Vec<u8> {
    encode_frame(WINDOW_UPDATE, 0, stream, &n.to_be_bytes())
}
