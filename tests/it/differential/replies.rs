//! What comes back on a connection: sending a case and reading to the end, the honest
//! request, and responses read leniently.

use super::*;
use crate::support::client::{response_framing, Framing};

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Closed,
    Reset,
    /// Still open at the deadline.
    TimedOut,
}

/// Everything that came back on a connection.
#[derive(Debug, Clone)]
pub(super) struct Received {
    pub(super) bytes: Vec<u8>,
    pub(super) end: End,
}

/// Sends `bytes` on a new connection to `addr`, shuts down the sending side, and reads
/// until the peer closes, within [`CASE_DEADLINE`].
pub(super) async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Received {
    let deadline = Instant::now() + CASE_DEADLINE;
    let connect = tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await;
    let mut stream = connect.expect("connect in time").expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    // The peer may close before taking everything (a refused head): still read.
    let _ = tokio::time::timeout_at(deadline, stream.write_all(bytes)).await;
    let _ = stream.shutdown().await;
    read_to_end(&mut stream, deadline, Vec::new()).await
}

pub(super) async fn read_to_end(
    stream: &mut TcpStream,
    deadline: Instant,
    mut bytes: Vec<u8>,
) -> Received {
    let mut chunk = [0u8; 16 * 1024];
    // Each round reads at least one byte, or ends.
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => return Received { bytes, end: End::TimedOut },
            Ok(Ok(0)) => return Received { bytes, end: End::Closed },
            Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
            Ok(Err(_)) => return Received { bytes, end: End::Reset },
        }
    }
}

/// The honest request after case `index`, on a connection of its own: its one response,
/// or what went wrong.
pub(super) async fn honest(addr: SocketAddr, index: u64) -> Result<Reply, String> {
    let deadline = Instant::now() + CASE_DEADLINE;
    let request = format!("GET /honest-{index} HTTP/1.1\r\nHost: honest\r\n\r\n");
    let mut stream = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    // Each round reads at least one byte, or ends.
    let (reply, used) = loop {
        if let Some(done) = complete_reply(&buf) {
            break done;
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => return Err(format!("no response in time; got {}", escape(&buf))),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(format!("closed; got {}", escape(&buf))),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    // Exactly one: nothing may follow the response before holdfast closes.
    let _ = stream.shutdown().await;
    let rest = read_to_end(&mut stream, deadline, buf.split_off(used)).await;
    if !rest.bytes.is_empty() {
        return Err(format!("bytes after the response: {}", escape(&rest.bytes)));
    }
    Ok(reply)
}
/// A response head.
#[derive(Debug, Clone)]
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
}

impl Reply {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Parses a response head at the start of `bytes`: the reply and the head's length.
pub(super) fn head(bytes: &[u8]) -> Option<(Reply, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(len)) = parsed.parse(bytes) else { return None };
    let reply = Reply {
        status: parsed.code.unwrap_or(0),
        headers: parsed
            .headers
            .iter()
            .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
            .collect(),
    };
    Some((reply, len))
}

/// How the body after `reply`'s head is delimited; a `Content-Length` that is not a
/// number is read as a body that runs until the close.
pub(super) fn body_end(reply: &Reply) -> Framing {
    let (te, cl) = (reply.header("transfer-encoding"), reply.header("content-length"));
    response_framing(reply.status, false, te, cl).unwrap_or(Framing::UntilClose)
}

/// The length of the complete chunked body at the start of `bytes`, if it is complete.
pub(super) fn chunked_len(bytes: &[u8]) -> Option<usize> {
    let mut pos = 0;
    // Each round passes one chunk.
    loop {
        let line_end = pos + find(bytes.get(pos..)?, b"\r\n")?;
        let line = std::str::from_utf8(&bytes[pos..line_end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                let end = pos + find(bytes.get(pos..)?, b"\r\n")?;
                let empty = end == pos;
                pos = end + 2;
                if empty {
                    return Some(pos);
                }
            }
        }
        pos = pos.checked_add(size)?.checked_add(2)?;
        if pos > bytes.len() {
            return None;
        }
    }
}

/// One complete response at the start of `bytes` (a response to a request that is not
/// HEAD): the reply and the bytes it took.
pub(super) fn complete_reply(bytes: &[u8]) -> Option<(Reply, usize)> {
    let (reply, len) = head(bytes)?;
    let body = &bytes[len..];
    let used = match body_end(&reply) {
        Framing::None => 0,
        Framing::Length(n) if n <= body.len() => n,
        Framing::Chunked => chunked_len(body)?,
        Framing::Length(_) | Framing::UntilClose => return None,
    };
    Some((reply, len + used))
}

/// Every response head in `bytes`, read leniently: a body is skipped by its framing where
/// it can be, and anything that is not a response is passed over to the next status line.
/// A response to HEAD announces a body it does not have: a status line right after a
/// head is taken for the next response.
pub(super) fn replies(bytes: &[u8]) -> Vec<Reply> {
    let mut out = Vec::new();
    let mut pos = 0;
    // Each round moves past one response or at least one byte.
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let Some((reply, len)) = head(rest) else {
            match find(rest.get(1..).unwrap_or_default(), b"HTTP/1.") {
                Some(at) => {
                    pos += at + 1;
                    continue;
                }
                None => break,
            }
        };
        let body = &rest[len..];
        let used = if body.starts_with(b"HTTP/1.") {
            0
        } else {
            match body_end(&reply) {
                Framing::None => 0,
                Framing::Length(n) => n.min(body.len()),
                Framing::Chunked => chunked_len(body).unwrap_or(body.len()),
                Framing::UntilClose => body.len(),
            }
        };
        out.push(reply);
        pos += len + used;
    }
    out
}

pub(super) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
