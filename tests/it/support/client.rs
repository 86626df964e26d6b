//! Clients: [`RawClient`] writes hand-written bytes and parses what comes back, for
//! requests no well-behaved client would send; [`HttpClient`] is one keep-alive hyper
//! connection, for ordinary traffic.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{within, within_for, DEADLINE};

/// The state number of a socket in CLOSE_WAIT in `/proc/net/tcp` (see the kernel's
/// `tcp_states.h`).
const TCP_CLOSE_WAIT: u8 = 0x08;

/// The state of this network namespace's IPv4 TCP socket from local port `local` to
/// remote port `remote` (both on loopback in these tests), as `/proc/net/tcp` says.
fn tcp_state(local: u16, remote: u16) -> Option<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let port = |addr: &str| addr.split_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
    table.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace().skip(1);
        let (from, to, state) = (fields.next()?, fields.next()?, fields.next()?);
        (port(from) == Some(local) && port(to) == Some(remote))
            .then(|| u8::from_str_radix(state, 16).ok())
            .flatten()
    })
}

/// What a raw response read ended with, when it did not end with a response.
#[derive(Debug)]
pub enum RawError {
    /// The peer closed (or reset) the connection; `partial` is what arrived before.
    Closed {
        partial: Vec<u8>,
    },
    TimedOut,
    /// What could not be parsed; shown through `Debug` when a test fails.
    Malformed(#[allow(dead_code)] String),
}

/// A response as it came off the wire.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A TCP connection driven by hand.
pub struct RawClient {
    stream: TcpStream,
    /// Bytes read but not yet consumed by a parsed response.
    buf: Vec<u8>,
}

impl RawClient {
    pub async fn connect(addr: SocketAddr) -> RawClient {
        let stream =
            within("raw client connect", TcpStream::connect(addr)).await.expect("raw connect");
        stream.set_nodelay(true).expect("nodelay");
        RawClient { stream, buf: Vec::new() }
    }

    /// Takes over a connection a test has driven by hand so far.
    pub fn from_stream(stream: TcpStream) -> RawClient {
        RawClient { stream, buf: Vec::new() }
    }

    /// Writes `bytes` in one write call (as one segment where the kernel allows).
    pub async fn send(&mut self, bytes: impl AsRef<[u8]>) {
        within("raw client write", self.stream.write_all(bytes.as_ref())).await.expect("raw write");
    }

    /// Waits, reading nothing, until the peer has closed its sending side: everything
    /// it sent before has arrived, and its FIN after it (this socket is in CLOSE_WAIT).
    /// Panics if that does not happen within [`DEADLINE`], for example because the peer
    /// reset the connection instead. Linux only: it reads `/proc/net/tcp`.
    pub async fn wait_peer_shutdown(&self) {
        let local = self.stream.local_addr().expect("local addr").port();
        let peer = self.stream.peer_addr().expect("peer addr").port();
        super::wait_until("the peer closes its sending side", DEADLINE, || {
            tcp_state(local, peer) == Some(TCP_CLOSE_WAIT)
        })
        .await;
    }

    /// Reads one response to a request that is not HEAD; panics if none arrives.
    pub async fn response(&mut self) -> RawResponse {
        match self.try_response(false).await {
            Ok(resp) => resp,
            Err(e) => panic!("expected a response, got {e:?}"),
        }
    }

    /// Reads one response to a HEAD request (no body whatever the headers say).
    pub async fn head_response(&mut self) -> RawResponse {
        match self.try_response(true).await {
            Ok(resp) => resp,
            Err(e) => panic!("expected a response to HEAD, got {e:?}"),
        }
    }

    /// Reads one response (an interim 1xx counts as one), within [`DEADLINE`].
    pub async fn try_response(&mut self, to_head: bool) -> Result<RawResponse, RawError> {
        let deadline = Instant::now() + DEADLINE;
        let (mut resp, head_len, framing) = loop {
            if let Some(parsed) = parse_head(&self.buf, to_head)? {
                break parsed;
            }
            self.fill(deadline).await?;
        };
        self.buf.drain(..head_len);
        match framing {
            Framing::None => {}
            Framing::Length(n) => {
                while self.buf.len() < n {
                    self.fill(deadline).await?;
                }
                resp.body = self.buf.drain(..n).collect();
            }
            Framing::Chunked => loop {
                if let Some((body, used)) = decode_chunked(&self.buf)? {
                    resp.body = body;
                    self.buf.drain(..used);
                    break;
                }
                self.fill(deadline).await?;
            },
            Framing::UntilClose => loop {
                match self.fill(deadline).await {
                    Ok(_) => {}
                    Err(RawError::Closed { partial }) => {
                        resp.body = partial;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            },
        }
        Ok(resp)
    }

    /// Reads until exactly `n` more bytes have arrived (for upgraded connections).
    pub async fn read_exact(&mut self, n: usize) -> Vec<u8> {
        let deadline = Instant::now() + DEADLINE;
        while self.buf.len() < n {
            if let Err(e) = self.fill(deadline).await {
                panic!("wanted {n} bytes, have {:?}: {e:?}", String::from_utf8_lossy(&self.buf));
            }
        }
        self.buf.drain(..n).collect()
    }

    /// Reads until `marker` has arrived; returns everything up to and including it.
    pub async fn read_through(&mut self, marker: &[u8]) -> Vec<u8> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(at) = self.buf.windows(marker.len()).position(|w| w == marker) {
                return self.buf.drain(..at + marker.len()).collect();
            }
            if let Err(e) = self.fill(deadline).await {
                panic!(
                    "wanted {:?}, have {:?}: {e:?}",
                    String::from_utf8_lossy(marker),
                    String::from_utf8_lossy(&self.buf)
                );
            }
        }
    }

    /// Waits for the peer to close the connection; panics if it sends anything more or
    /// is still open at the deadline.
    pub async fn expect_closed(&mut self) {
        let deadline = Instant::now() + DEADLINE;
        match self.fill(deadline).await {
            Err(RawError::Closed { partial }) if partial.is_empty() => {}
            Err(RawError::Closed { partial }) => {
                panic!("expected close, got {:?}", String::from_utf8_lossy(&partial))
            }
            Err(e) => panic!("expected the peer to close the connection, got {e:?}"),
            Ok(_) => panic!(
                "expected the peer to close the connection, got bytes {:?}",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Whether the peer closes the connection, or sends a response and then closes it,
    /// within [`DEADLINE`]. Returns the response, if one came.
    pub async fn response_then_close(&mut self) -> Option<RawResponse> {
        let resp = match self.try_response(false).await {
            Ok(resp) => Some(resp),
            Err(RawError::Closed { partial }) if partial.is_empty() => return None,
            Err(e) => panic!("expected a response or a close, got {e:?}"),
        };
        self.expect_closed().await;
        resp
    }

    /// Reads more bytes into the buffer; `Closed` on EOF or reset.
    async fn fill(&mut self, deadline: Instant) -> Result<usize, RawError> {
        let mut chunk = [0u8; 16 * 1024];
        match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
            Err(_) => Err(RawError::TimedOut),
            Ok(Ok(0)) => Err(RawError::Closed { partial: std::mem::take(&mut self.buf) }),
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Ok(Err(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                Err(RawError::Closed { partial: std::mem::take(&mut self.buf) })
            }
            Ok(Err(e)) => Err(RawError::Malformed(format!("read failed: {e}"))),
        }
    }
}

/// How a response body is delimited.
pub enum Framing {
    None,
    Length(usize),
    Chunked,
    UntilClose,
}

/// How the body of a response with `status` and these framing headers is delimited
/// (`to_head`: it answers HEAD); an error names a `Content-Length` that is not a number.
pub fn response_framing(
    status: u16,
    to_head: bool,
    transfer_encoding: Option<&str>,
    content_length: Option<&str>,
) -> Result<Framing, String> {
    if to_head || (100..200).contains(&status) || status == 204 || status == 304 {
        Ok(Framing::None)
    } else if transfer_encoding
        .is_some_and(|te| te.to_ascii_lowercase().trim_end().ends_with("chunked"))
    {
        Ok(Framing::Chunked)
    } else if let Some(cl) = content_length {
        cl.trim().parse().map(Framing::Length).map_err(|_| format!("content-length {cl}"))
    } else {
        Ok(Framing::UntilClose)
    }
}

/// Parses a response head from the front of `buf`, if it is complete.
fn parse_head(
    buf: &[u8],
    to_head: bool,
) -> Result<Option<(RawResponse, usize, Framing)>, RawError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(RawError::Malformed(format!(
                "{e}: {:?}",
                String::from_utf8_lossy(&buf[..buf.len().min(200)])
            )))
        }
    };
    let status = parsed.code.unwrap_or(0);
    let resp = RawResponse {
        status,
        headers: parsed
            .headers
            .iter()
            .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
            .collect(),
        body: Vec::new(),
    };
    let te = resp.header("transfer-encoding");
    let framing = response_framing(status, to_head, te, resp.header("content-length"))
        .map_err(RawError::Malformed)?;
    Ok(Some((resp, len, framing)))
}

/// Decodes a complete chunked body at the front of `buf`: the data and the bytes used.
pub fn decode_chunked(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, RawError> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let Some(nl) = buf[pos..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&buf[pos..pos + nl])
            .map_err(|_| RawError::Malformed("chunk size line".into()))?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(hex, 16)
            .map_err(|_| RawError::Malformed(format!("chunk size {line:?}")))?;
        pos += nl + 2;
        if size == 0 {
            // Trailers (if any) end with an empty line.
            loop {
                let Some(nl) = buf[pos..].windows(2).position(|w| w == b"\r\n") else {
                    return Ok(None);
                };
                pos += nl + 2;
                if nl == 0 {
                    return Ok(Some((body, pos)));
                }
            }
        }
        if buf.len() < pos + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size;
        if &buf[pos..pos + 2] != b"\r\n" {
            return Err(RawError::Malformed("chunk not followed by CRLF".into()));
        }
        pos += 2;
    }
}

/// The body type [`HttpClient`] sends.
pub type ClientBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A response read to its end.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 keep-alive connection: every request goes over the same TCP connection.
pub struct HttpClient {
    sender: http1::SendRequest<ClientBody>,
    conn: JoinHandle<()>,
    /// How long one step (response head, or the whole body) may take.
    deadline: Duration,
}

impl Drop for HttpClient {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl HttpClient {
    pub async fn connect(addr: SocketAddr) -> HttpClient {
        let stream = within("client connect", TcpStream::connect(addr)).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (sender, conn) = within("client handshake", http1::handshake(TokioIo::new(stream)))
            .await
            .expect("handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        HttpClient { sender, conn, deadline: DEADLINE }
    }

    /// Allows each step of a request more (or less) than [`DEADLINE`].
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    /// `GET path`, read to the end.
    pub async fn get(&mut self, path: &str) -> Reply {
        self.request(Method::GET, path, Empty::new().map_err(Into::into).boxed()).await
    }

    /// Sends a request and reads the whole response.
    pub async fn request(&mut self, method: Method, path: &str, body: ClientBody) -> Reply {
        let resp = self.send(request(method, path, body)).await;
        let (parts, body) = resp.into_parts();
        let body = within_for("reading a response body", self.deadline, body.collect())
            .await
            .expect("response body")
            .to_bytes();
        Reply { status: parts.status, headers: parts.headers, body }
    }

    /// Sends a request and returns the response with its body unread.
    pub async fn send(&mut self, req: Request<ClientBody>) -> Response<Incoming> {
        within_for("client ready", self.deadline, self.sender.ready())
            .await
            .expect("client connection ready");
        within_for("response head", self.deadline, self.sender.send_request(req))
            .await
            .expect("response")
    }
}

/// A request with a Host header, as hyper's connection-level client sends none itself.
pub fn request(method: Method, path: &str, body: ClientBody) -> Request<ClientBody> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "holdfast.test")
        .body(body)
        .expect("valid request")
}
