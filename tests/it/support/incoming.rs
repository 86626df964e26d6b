//! An HTTP/1.1 response read as it arrives on a raw connection ([`Incoming`]), for
//! tests that write a request body while its response comes back: interim responses,
//! the head, then the body (chunked or of a length) and the trailers, piece by piece.

use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::time::Instant;

use super::{within, DEADLINE};

/// One response on the reading half of a raw connection, as far as it has come.
pub struct Incoming {
    rd: OwnedReadHalf,
    /// Bytes read and not yet taken.
    buf: Vec<u8>,
    /// The final status, once the head came.
    pub status: Option<u16>,
    pub headers: Vec<(String, String)>,
    /// The statuses of the interim responses before the head, in order.
    pub interim: Vec<u16>,
    /// The body so far, out of its framing.
    pub body: Vec<u8>,
    /// The chunked body's trailer section, once it ended.
    pub trailers: Vec<(String, String)>,
    /// The body's length when the head gave one (else it is chunked).
    length: Option<usize>,
    /// The whole body (and its trailers) came.
    pub ended: bool,
}

impl Incoming {
    pub fn new(rd: OwnedReadHalf) -> Incoming {
        Incoming {
            rd,
            buf: Vec::new(),
            status: None,
            headers: Vec::new(),
            interim: Vec::new(),
            body: Vec::new(),
            trailers: Vec::new(),
            length: None,
            ended: false,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Reads until `done` holds, within [`DEADLINE`]; panics naming `what` if the
    /// connection ends or the deadline passes first.
    pub async fn until(&mut self, what: &str, done: impl Fn(&Incoming) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        // Bounded by the deadline; each round parses what came, then reads more.
        loop {
            self.parse();
            if done(self) {
                return;
            }
            let mut chunk = [0u8; 64 * 1024];
            let read = tokio::time::timeout_at(deadline, self.rd.read(&mut chunk)).await;
            match read {
                Err(_) => panic!(
                    "timed out after {DEADLINE:?} waiting for {what}: status {:?}, {} body \
                     bytes, ended {}",
                    self.status,
                    self.body.len(),
                    self.ended
                ),
                Ok(Ok(0)) | Ok(Err(_)) => panic!(
                    "the connection ended before {what}: status {:?}, {} body bytes",
                    self.status,
                    self.body.len()
                ),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The whole response, to its end.
    pub async fn until_ended(&mut self) {
        self.until("the end of the response", |r| r.ended).await;
    }

    /// Asserts the connection ends cleanly (EOF, not a reset) with nothing more.
    pub async fn assert_closed(&mut self) {
        let mut chunk = [0u8; 1024];
        let read = within("the connection's close", self.rd.read(&mut chunk)).await;
        match read {
            Ok(0) => {}
            Ok(n) => panic!("bytes after the response: {:?}", String::from_utf8_lossy(&chunk[..n])),
            Err(e) => panic!("the connection ended with an error, not a close: {e}"),
        }
    }

    /// Reads what still comes until the connection ends (a close or a reset), within
    /// [`DEADLINE`]; panics if it is still open then.
    pub async fn until_gone(&mut self) {
        let deadline = Instant::now() + DEADLINE;
        // Bounded by the deadline; each round reads once.
        loop {
            self.parse();
            let mut chunk = [0u8; 64 * 1024];
            match tokio::time::timeout_at(deadline, self.rd.read(&mut chunk)).await {
                Err(_) => panic!("the connection is still open {DEADLINE:?} later"),
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Takes what `buf` holds of the response.
    fn parse(&mut self) {
        // Each round takes one interim response, the head, or one chunk.
        loop {
            if self.status.is_none() {
                let mut headers = [httparse::EMPTY_HEADER; 64];
                let mut head = httparse::Response::new(&mut headers);
                let len = match head.parse(&self.buf).expect("a response head") {
                    httparse::Status::Complete(len) => len,
                    httparse::Status::Partial => return,
                };
                let status = head.code.expect("a status");
                let fields: Vec<(String, String)> = head
                    .headers
                    .iter()
                    .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                self.buf.drain(..len);
                if (100..200).contains(&status) {
                    self.interim.push(status);
                    continue;
                }
                self.status = Some(status);
                self.headers = fields;
                self.length = self.header("content-length").map(|v| v.parse().expect("a length"));
                continue;
            }
            if self.ended {
                return;
            }
            if let Some(length) = self.length {
                let take = (length - self.body.len()).min(self.buf.len());
                self.body.extend(self.buf.drain(..take));
                self.ended = self.body.len() == length;
                return;
            }
            let Some(line) = self.buf.windows(2).position(|w| w == b"\r\n") else { return };
            let text = std::str::from_utf8(&self.buf[..line]).expect("a chunk size line");
            let size = usize::from_str_radix(text.trim(), 16).expect("a chunk size");
            if size == 0 {
                let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    // The last chunk with no trailers: "0\r\n\r\n".
                    return;
                };
                let section = String::from_utf8_lossy(&self.buf[line + 2..end + 2]).into_owned();
                self.trailers = section
                    .split("\r\n")
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                    .collect();
                self.buf.drain(..end + 4);
                self.ended = true;
                return;
            }
            if self.buf.len() < line + 2 + size + 2 {
                return;
            }
            self.body.extend_from_slice(&self.buf[line + 2..line + 2 + size]);
            assert_eq!(&self.buf[line + 2 + size..line + 4 + size], b"\r\n", "chunk framing");
            self.buf.drain(..line + 4 + size);
        }
    }
}
