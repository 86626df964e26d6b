//! Fetches `GET /metrics` from the admin listener with a minimal blocking HTTP/1.1
//! client and parses the OpenMetrics / Prometheus text into samples.
//!
//! It knows nothing of holdfast's metric names: any well-formed exposition parses.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Connect, read and write timeout for one scrape.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// Far above any metrics page holdfast writes (a few KiB per server); the cap keeps a
/// wrong address from filling memory.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Fetches and parses the metrics page of the admin listener at `admin`.
pub(super) fn fetch(admin: SocketAddr) -> Result<Vec<Sample>, ScrapeError> {
    Ok(parse(&get_metrics(admin)?)?)
}

/// Why a scrape gave no metrics.
#[derive(Debug, thiserror::Error)]
pub(super) enum ScrapeError {
    #[error("connecting: {0}")]
    Connect(io::Error),
    #[error("sending the request or reading the response: {0}")]
    Io(io::Error),
    #[error("GET /metrics answered {0}, expected 200")]
    Status(u16),
    #[error("malformed HTTP response: {0}")]
    Http(String),
    #[error("malformed metrics, {0}")]
    Parse(#[from] ParseError),
}

fn get_metrics(admin: SocketAddr) -> Result<String, ScrapeError> {
    let mut stream =
        TcpStream::connect_timeout(&admin, SCRAPE_TIMEOUT).map_err(ScrapeError::Connect)?;
    stream.set_read_timeout(Some(SCRAPE_TIMEOUT)).map_err(ScrapeError::Io)?;
    stream.set_write_timeout(Some(SCRAPE_TIMEOUT)).map_err(ScrapeError::Io)?;
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: {admin}\r\n\
         Accept: application/openmetrics-text; version=1.0.0, text/plain;q=0.5\r\n\
         User-Agent: holdfast-stats/{}\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    stream.write_all(request.as_bytes()).map_err(ScrapeError::Io)?;
    let body = read_response(&mut stream)?;
    String::from_utf8(body).map_err(|_| ScrapeError::Http("the body is not UTF-8".into()))
}

/// How the response says where its body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFraming {
    Length(usize),
    Chunked,
    UntilClose,
}

/// Reads one response and returns its body, if the status is 200.
pub(super) fn read_response(stream: &mut impl Read) -> Result<Vec<u8>, ScrapeError> {
    let mut buf = Vec::with_capacity(16 * 1024);
    let (head_len, framing) = loop {
        if read_more(stream, &mut buf)? == 0 {
            return Err(ScrapeError::Http("the connection closed inside the response head".into()));
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf) {
            Ok(httparse::Status::Partial) => continue,
            Ok(httparse::Status::Complete(head_len)) => {
                let status = response.code.unwrap_or_default();
                if status != 200 {
                    return Err(ScrapeError::Status(status));
                }
                break (head_len, body_framing(response.headers)?);
            }
            Err(e) => return Err(ScrapeError::Http(e.to_string())),
        }
    };
    match framing {
        BodyFraming::Length(len) => {
            while buf.len() - head_len < len {
                if read_more(stream, &mut buf)? == 0 {
                    let got = buf.len() - head_len;
                    let message = format!("the body ended after {got} of {len} bytes");
                    return Err(ScrapeError::Http(message));
                }
            }
            Ok(buf[head_len..head_len + len].to_vec())
        }
        BodyFraming::Chunked | BodyFraming::UntilClose => {
            while read_more(stream, &mut buf)? != 0 {}
            let body = &buf[head_len..];
            match framing {
                BodyFraming::Chunked => decode_chunked(body),
                _ => Ok(body.to_vec()),
            }
        }
    }
}

fn body_framing(headers: &[httparse::Header<'_>]) -> Result<BodyFraming, ScrapeError> {
    let value = |name: &str| {
        headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    if value("transfer-encoding").is_some_and(|te| te.ends_with("chunked")) {
        return Ok(BodyFraming::Chunked);
    }
    match value("content-length") {
        Some(len) => match len.parse::<usize>() {
            Ok(len) if len <= MAX_RESPONSE_BYTES => Ok(BodyFraming::Length(len)),
            Ok(len) => Err(ScrapeError::Http(format!("a {len}-byte body is too large"))),
            Err(_) => Err(ScrapeError::Http(format!("bad Content-Length {len:?}"))),
        },
        None => Ok(BodyFraming::UntilClose),
    }
}

/// Appends what one read returns to `buf`; 0 means the peer closed.
fn read_more(stream: &mut impl Read, buf: &mut Vec<u8>) -> Result<usize, ScrapeError> {
    if buf.len() > MAX_RESPONSE_BYTES {
        let message = format!("the response is larger than {MAX_RESPONSE_BYTES} bytes");
        return Err(ScrapeError::Http(message));
    }
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk) {
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ScrapeError::Io(e)),
        }
    }
}

/// Decodes a complete `Transfer-Encoding: chunked` body; trailers are ignored.
fn decode_chunked(mut data: &[u8]) -> Result<Vec<u8>, ScrapeError> {
    let ended_early = || ScrapeError::Http("the chunked body ended early".into());
    let mut body = Vec::new();
    loop {
        let (size_len, size) = match httparse::parse_chunk_size(data) {
            Ok(httparse::Status::Complete(parsed)) => parsed,
            Ok(httparse::Status::Partial) => return Err(ended_early()),
            Err(_) => return Err(ScrapeError::Http("bad chunk size line".into())),
        };
        data = &data[size_len..];
        if size == 0 {
            return Ok(body);
        }
        let size = usize::try_from(size).ok().filter(|s| *s <= MAX_RESPONSE_BYTES);
        let size = size.ok_or_else(|| ScrapeError::Http("chunk too large".into()))?;
        let chunk = data.get(..size).ok_or_else(ended_early)?;
        body.extend_from_slice(chunk);
        data = data[size..].strip_prefix(b"\r\n").ok_or_else(ended_early)?;
    }
}

/// A sample line that is not `name{labels} value`.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub(super) struct ParseError {
    pub(super) line: usize,
    pub(super) message: String,
}

/// One line of the exposition: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub(super) name: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) value: f64,
}

/// Parses exposition text; `#` lines (HELP, TYPE, UNIT, EOF) and blank lines are
/// skipped, and a timestamp or exemplar after the value is ignored.
pub(super) fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = parse_sample(line).map_err(|message| ParseError { line: i + 1, message })?;
        samples.push(sample);
    }
    Ok(samples)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(|c: char| c == '{' || c.is_ascii_whitespace()).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return Err("no metric name".into());
    }
    let (labels, rest) = match line[name_end..].strip_prefix('{') {
        Some(inside) => parse_labels(inside)?,
        None => (BTreeMap::new(), &line[name_end..]),
    };
    let value = rest.split_ascii_whitespace().next().ok_or("no value")?;
    // f64's parser takes "+Inf", "-Inf" and "NaN" as written by Prometheus clients.
    let value = value.parse().map_err(|_| format!("{value:?} is not a number"))?;
    Ok(Sample { name: name.to_string(), labels, value })
}

/// Parses `a="x",b="y"}` (the text after `{`); returns the labels and the text after `}`.
fn parse_labels(mut text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(rest) = text.strip_prefix('}') {
            return Ok((labels, rest));
        }
        if text.is_empty() {
            return Err("the label set has no closing '}'".into());
        }
        let (name, rest) = text.split_once('=').ok_or("a label has no '='")?;
        let name = name.trim();
        let quoted = rest.trim_start().strip_prefix('"');
        let quoted = quoted.ok_or_else(|| format!("label {name} has no quoted value"))?;
        let (value, rest) = unquote(quoted).map_err(|e| format!("label {name}: {e}"))?;
        labels.insert(name.to_string(), value);
        text = rest;
    }
}

/// Reads a label value up to its closing quote, undoing the `\"`, `\\` and `\n`
/// escapes; returns the value and the text after the quote.
fn unquote(text: &str) -> Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, escaped @ ('"' | '\\'))) => value.push(escaped),
                Some((_, other)) => {
                    value.push('\\');
                    value.push(other);
                }
                None => break,
            },
            c => value.push(c),
        }
    }
    Err("the value has no closing quote".into())
}
