//! Request cases for the differential test: valid HTTP/1.1 and 1.0 requests, alone or two
//! pipelined, and the same requests mutated the ways parsers come to disagree (framing
//! headers duplicated, reordered, re-cased and re-spaced; `Connection` lists; odd
//! `Transfer-Encoding` and `Content-Length` values; bad chunk lines and trailers; folded
//! lines, bare CR and LF, non-ASCII and control bytes; bytes flipped, inserted, deleted).
//!
//! Deterministic: [`case`] gives the same bytes for the same seed and index, on any
//! machine, so a failure is reproduced from the two numbers it prints. Each request line
//! of case `i` has its own path, `/c{i}-r{n}`, and some bodies carry a complete request
//! of their own (`GET /smuggled-{i}`), the classic smuggling payload.

/// SplitMix64: small, fast and good enough to pick mutations; no dependency.
pub struct Rng(u64);

impl Rng {
    /// The generator of one case: independent of every other case of the same seed,
    /// so a case can be made again alone.
    pub fn for_case(seed: u64, index: u64) -> Rng {
        let mut mix = Rng(seed ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03));
        Rng(mix.next())
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; `n` must not be 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// One case: the bytes a client sends on one connection.
#[derive(Debug, Clone)]
pub struct Case {
    pub index: u64,
    pub bytes: Vec<u8>,
    /// The paths of the request lines written, in order, before any mutation.
    pub paths: Vec<String>,
    /// What was done to the valid requests, in words (empty: the case is valid).
    pub mutations: Vec<String>,
}

/// The request every case may carry inside a body.
pub fn smuggled_request(index: u64) -> String {
    format!("GET /smuggled-{index} HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// Case `index` of the stream `seed`.
pub fn case(seed: u64, index: u64) -> Case {
    let mut rng = Rng::for_case(seed, index);
    let count = if rng.chance(25) { 2 } else { 1 };
    let mut messages: Vec<Message> =
        (0..count).map(|n| Message::valid(&mut rng, index, n, n + 1 < count)).collect();
    let paths = messages.iter().map(|m| m.path.clone()).collect();
    let mut mutations = Vec::new();
    // About a third of the cases stay valid; the rest get one to three changes to
    // their structure, or bytes changed after they are written, or both.
    let roll = rng.below(100);
    if roll >= 33 {
        let structural = if roll < 85 { 1 + rng.below(3) } else { 0 };
        for _ in 0..structural {
            let m = rng.below(messages.len());
            let what = mutate(&mut rng, &mut messages[m]);
            mutations.push(format!("r{m}: {what}"));
        }
    }
    let mut bytes: Vec<u8> = messages.iter().flat_map(Message::to_bytes).collect();
    if roll >= 70 {
        for _ in 0..1 + rng.below(3) {
            mutations.push(mutate_bytes(&mut rng, &mut bytes));
        }
    }
    Case { index, bytes, paths, mutations }
}

/// One request, kept in parts until it is written, so mutations can reach its pieces.
#[derive(Debug, Clone)]
struct Message {
    method: Vec<u8>,
    target: Vec<u8>,
    version: Vec<u8>,
    /// Header lines without their line end.
    headers: Vec<Vec<u8>>,
    /// The line end of the request line and every header line.
    eol: Vec<u8>,
    body: Body,
    /// The path of the request line as generated.
    path: String,
}

#[derive(Debug, Clone)]
enum Body {
    None,
    /// Sent as it is (its length announced by `Content-Length`, or not at all).
    Fixed(Vec<u8>),
    Chunked(Chunks),
}

#[derive(Debug, Clone)]
struct Chunks {
    chunks: Vec<Chunk>,
    /// The last chunk's line, with its line end (`0\r\n`).
    last: Vec<u8>,
    /// Trailer lines, each with its line end.
    trailers: Vec<Vec<u8>>,
    /// The empty line that ends the body.
    end: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Chunk {
    /// The chunk-size line with its line end (`5;ext\r\n`).
    size_line: Vec<u8>,
    data: Vec<u8>,
    /// What follows the data (`\r\n`).
    end: Vec<u8>,
}

impl Chunks {
    fn of(rng: &mut Rng, data: &[u8]) -> Chunks {
        let mut chunks = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            let n = if rng.chance(50) { rest.len() } else { 1 + rng.below(rest.len()) };
            let (chunk, after) = rest.split_at(n);
            let mut size_line = if rng.chance(50) {
                format!("{n:x}").into_bytes()
            } else {
                format!("{n:X}").into_bytes()
            };
            if rng.chance(15) {
                const EXTENSIONS: [&[u8]; 3] = [b";ext=1", b";name=\"q\"", b";a"];
                let extension = *rng.pick::<&[u8]>(&EXTENSIONS);
                size_line.extend_from_slice(extension);
            }
            size_line.extend_from_slice(b"\r\n");
            chunks.push(Chunk { size_line, data: chunk.to_vec(), end: b"\r\n".to_vec() });
            rest = after;
        }
        let mut trailers = Vec::new();
        if rng.chance(20) {
            trailers.push(b"X-Checksum: 1\r\n".to_vec());
        }
        Chunks { chunks, last: b"0\r\n".to_vec(), trailers, end: b"\r\n".to_vec() }
    }

    fn data(&self) -> Vec<u8> {
        self.chunks.iter().flat_map(|c| c.data.clone()).collect()
    }
}

const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"];

impl Message {
    /// Request `n` of case `index`, valid; `pipelined` requests keep the connection open
    /// for the one after them.
    fn valid(rng: &mut Rng, index: u64, n: usize, pipelined: bool) -> Message {
        let http10 = rng.chance(15);
        let method = *rng.pick(&METHODS);
        let path = format!("/c{index}-r{n}");
        let mut target = path.clone();
        if rng.chance(20) {
            target.push_str(&format!("?q={}", rng.below(1000)));
        }
        if rng.chance(15) {
            target = format!("http://h.test{target}");
        }
        let mut headers: Vec<Vec<u8>> = Vec::new();
        if !http10 || rng.chance(50) {
            headers.push(b"Host: h.test".to_vec());
        }
        if rng.chance(40) {
            headers.push(b"User-Agent: differential/1".to_vec());
        }
        if rng.chance(30) {
            headers.push(b"Accept: */*".to_vec());
        }
        for k in 0..rng.below(3) {
            headers.push(format!("X-R{k}: {}", word(rng)).into_bytes());
        }
        match (http10, pipelined) {
            (true, true) => headers.push(b"Connection: keep-alive".to_vec()),
            (true, false) if rng.chance(50) => headers.push(b"Connection: keep-alive".to_vec()),
            (false, false) if rng.chance(15) => headers.push(b"Connection: close".to_vec()),
            (false, _) if rng.chance(10) => headers.push(b"Connection: keep-alive".to_vec()),
            _ => {}
        }
        let wants_body = matches!(method, "POST" | "PUT") && rng.chance(80) || rng.chance(10);
        let body = if wants_body {
            let data = body_data(rng, index);
            if !http10 && rng.chance(45) {
                headers.push(b"Transfer-Encoding: chunked".to_vec());
                Body::Chunked(Chunks::of(rng, &data))
            } else {
                headers.push(format!("Content-Length: {}", data.len()).into_bytes());
                Body::Fixed(data)
            }
        } else {
            Body::None
        };
        if wants_body && !http10 && rng.chance(15) {
            headers.push(b"Expect: 100-continue".to_vec());
        }
        let version: &[u8] = if http10 { b"HTTP/1.0" } else { b"HTTP/1.1" };
        Message {
            method: method.as_bytes().to_vec(),
            target: target.into_bytes(),
            version: version.to_vec(),
            headers,
            eol: b"\r\n".to_vec(),
            body,
            path,
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for part in [&self.method[..], b" ", &self.target, b" ", &self.version, &self.eol] {
            out.extend_from_slice(part);
        }
        for h in &self.headers {
            out.extend_from_slice(h);
            out.extend_from_slice(&self.eol);
        }
        out.extend_from_slice(&self.eol);
        match &self.body {
            Body::None => {}
            Body::Fixed(data) => out.extend_from_slice(data),
            Body::Chunked(c) => {
                for chunk in &c.chunks {
                    for part in [&chunk.size_line, &chunk.data, &chunk.end] {
                        out.extend_from_slice(part);
                    }
                }
                out.extend_from_slice(&c.last);
                for t in &c.trailers {
                    out.extend_from_slice(t);
                }
                out.extend_from_slice(&c.end);
            }
        }
        out
    }

    /// The index of the first header line named `name` (case-insensitively).
    fn find(&self, name: &str) -> Option<usize> {
        self.headers.iter().position(|h| is_named(h, name))
    }

    fn remove_all(&mut self, name: &str) {
        self.headers.retain(|h| !is_named(h, name));
    }

    fn insert_anywhere(&mut self, rng: &mut Rng, line: Vec<u8>) {
        let at = rng.below(self.headers.len() + 1);
        self.headers.insert(at, line);
    }

    /// Makes the body chunked (if it is not), with one `Transfer-Encoding: chunked` line.
    fn make_chunked(&mut self, rng: &mut Rng) -> &mut Chunks {
        if !matches!(self.body, Body::Chunked(_)) {
            let data = match &self.body {
                Body::Fixed(data) => data.clone(),
                _ => b"hello".to_vec(),
            };
            self.remove_all("content-length");
            self.body = Body::Chunked(Chunks::of(rng, &data));
        }
        if self.find("transfer-encoding").is_none() {
            self.insert_anywhere(rng, b"Transfer-Encoding: chunked".to_vec());
        }
        match &mut self.body {
            Body::Chunked(c) => c,
            _ => unreachable!("the body was made chunked above"),
        }
    }

    /// Makes the body a fixed one with a `Content-Length` line (if it is not already).
    fn make_fixed(&mut self, rng: &mut Rng) -> usize {
        let data = match &self.body {
            Body::Fixed(data) => data.clone(),
            Body::Chunked(c) => c.data(),
            Body::None => b"hello".to_vec(),
        };
        if !matches!(self.body, Body::Fixed(_)) || self.find("content-length").is_none() {
            self.remove_all("transfer-encoding");
            self.remove_all("content-length");
            self.insert_anywhere(rng, format!("Content-Length: {}", data.len()).into_bytes());
        }
        let len = data.len();
        self.body = Body::Fixed(data);
        len
    }
}

fn is_named(line: &[u8], name: &str) -> bool {
    line.len() > name.len()
        && line[..name.len()].eq_ignore_ascii_case(name.as_bytes())
        && line[name.len()] == b':'
}

fn word(rng: &mut Rng) -> String {
    const WORDS: [&str; 8] = ["alpha", "beta", "gamma", "x", "1", "a b", "v=1; w=2", "/p"];
    (*rng.pick(&WORDS)).to_string()
}

/// A request body: filler, and in some bodies the smuggling payload.
fn body_data(rng: &mut Rng, index: u64) -> Vec<u8> {
    let filler = |rng: &mut Rng| -> Vec<u8> {
        (0..rng.below(24)).map(|i| b"abcdefghijklmnopqrstuvwxyz0123456789"[i % 36]).collect()
    };
    let mut data = filler(rng);
    if rng.chance(30) {
        data.extend_from_slice(smuggled_request(index).as_bytes());
        data.extend(filler(rng));
    }
    data
}

/// Applies one random mutation to `m`; returns what it did.
fn mutate(rng: &mut Rng, m: &mut Message) -> String {
    match rng.below(23) {
        0 | 1 => duplicate_framing(rng, m),
        2 => {
            // Fisher-Yates.
            for i in (1..m.headers.len()).rev() {
                let j = rng.below(i + 1);
                m.headers.swap(i, j);
            }
            "headers reordered".into()
        }
        3 => change_case(rng, m),
        4 | 5 => whitespace(rng, m),
        6 | 7 => connection_list(rng, m),
        8 | 9 => transfer_encoding(rng, m),
        10 | 11 => content_length(rng, m),
        12 => {
            let len = m.make_fixed(rng);
            m.insert_anywhere(rng, b"Transfer-Encoding: chunked".to_vec());
            format!("Content-Length: {len} and Transfer-Encoding: chunked")
        }
        13 | 14 => chunk_line(rng, m),
        15 => trailer(rng, m),
        16 => fold(rng, m),
        17 => line_ends(rng, m),
        18 | 22 => odd_bytes(rng, m),
        19 => request_line(rng, m),
        20 => {
            let name = *rng.pick(&["host", "content-length", "transfer-encoding"]);
            m.remove_all(name);
            format!("{name} removed")
        }
        _ => extra_header(rng, m),
    }
}

fn duplicate_framing(rng: &mut Rng, m: &mut Message) -> String {
    let name = *rng.pick(&["Content-Length", "Transfer-Encoding", "Host"]);
    let line = match m.find(name) {
        Some(i) if rng.chance(50) => m.headers[i].clone(),
        _ => {
            let value = match name {
                "Content-Length" => rng.pick(&["0", "1", "5", "38", "100"]).to_string(),
                "Transfer-Encoding" => rng.pick(&["chunked", "identity", "gzip"]).to_string(),
                _ => rng.pick(&["other.test", "h.test", "evil.test:80"]).to_string(),
            };
            format!("{name}: {value}").into_bytes()
        }
    };
    let text = format!("{} line added", escape(&line));
    m.insert_anywhere(rng, line);
    text
}

fn change_case(rng: &mut Rng, m: &mut Message) -> String {
    let upper = rng.chance(50);
    for h in &mut m.headers {
        let colon = h.iter().position(|b| *b == b':').unwrap_or(h.len());
        let values_too = rng.chance(30);
        for (i, b) in h.iter_mut().enumerate() {
            if i < colon || values_too {
                *b = if upper { b.to_ascii_uppercase() } else { b.to_ascii_lowercase() };
            }
        }
    }
    format!("header case changed ({})", if upper { "upper" } else { "lower" })
}

fn whitespace(rng: &mut Rng, m: &mut Message) -> String {
    let framing = ["content-length", "transfer-encoding", "host", "connection"];
    let i = framing
        .iter()
        .find_map(|name| m.find(name).filter(|_| rng.chance(60)))
        .unwrap_or_else(|| rng.below(m.headers.len().max(1)));
    let Some(line) = m.headers.get(i).cloned() else { return "no header to re-space".into() };
    let colon = line.iter().position(|b| *b == b':').unwrap_or(line.len());
    let (name, rest) = line.split_at(colon);
    let value = rest.get(1..).unwrap_or_default().trim_ascii();
    let variants: [&[&[u8]]; 10] = [
        &[name, b" :", b" ", value],
        &[name, b":", value],
        &[name, b":\t", value],
        &[name, b": ", value, b"  "],
        &[name, b": ", value, b"\t"],
        &[name, b":   ", value],
        &[b" ", name, b": ", value],
        &[b"\t", name, b": ", value],
        &[name, b"\t: ", value],
        &[name, b": ", value, b" x"],
    ];
    let pick = rng.below(variants.len());
    let mut new: Vec<u8> = variants[pick].concat();
    if pick == 9 && value.len() > 1 {
        // Whitespace inside the value instead of after it.
        let mid = 1 + rng.below(value.len() - 1);
        new = [name, b": ", &value[..mid], b" ", &value[mid..]].concat();
    }
    let text = format!("{} re-spaced as {}", escape(&line), escape(&new));
    m.headers[i] = new;
    text
}

fn connection_list(rng: &mut Rng, m: &mut Message) -> String {
    const TOKENS: [&str; 11] = [
        "content-length",
        "transfer-encoding",
        "host",
        "keep-alive",
        "close",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "Content-Length",
        "x-random",
    ];
    let n = 1 + rng.below(3);
    let tokens: Vec<&str> = (0..n).map(|_| *rng.pick(&TOKENS)).collect();
    let sep = if rng.chance(50) { ", " } else { "," };
    let line = format!("Connection: {}", tokens.join(sep)).into_bytes();
    if rng.chance(50) {
        m.remove_all("connection");
    }
    let text = format!("{} added", escape(&line));
    m.insert_anywhere(rng, line);
    text
}

fn transfer_encoding(rng: &mut Rng, m: &mut Message) -> String {
    const VALUES: [&str; 16] = [
        "chunked, ",
        ",chunked",
        "gzip, chunked",
        "chunked, chunked",
        "xchunked",
        "\"chunked\"",
        "chunked;q=1",
        "CHUNKED",
        "chunked\t",
        "identity",
        "gzip",
        " chunked",
        "chunked , identity",
        "identity, chunked",
        "chunked\x0b",
        "ch\u{fc}nked",
    ];
    m.make_chunked(rng);
    let i = m.find("transfer-encoding").expect("make_chunked adds the line");
    if rng.chance(15) {
        m.headers[i] = b"Transfer-Encoding: chunked".to_vec();
        m.headers.insert(i, b"Transfer-Encoding: identity".to_vec());
        return "Transfer-Encoding: identity line before the chunked one".into();
    }
    let value = *rng.pick(&VALUES);
    m.headers[i] = format!("Transfer-Encoding: {value}").into_bytes();
    format!("Transfer-Encoding: {value:?}")
}

fn content_length(rng: &mut Rng, m: &mut Message) -> String {
    let n = m.make_fixed(rng);
    let variants = [
        format!("+{n}"),
        format!("0{n}"),
        format!("{n} {n}"),
        format!("{n},{n}"),
        format!("{n}, {n}"),
        format!("-{n}"),
        "99999999999999999999".to_string(),
        "18446744073709551616".to_string(),
        format!("{n}.0"),
        format!("0x{n:x}"),
        String::new(),
        format!(" {n} "),
        format!("{n}\t"),
        format!("{}", n + 1),
        format!("{}", n.saturating_sub(1)),
        "\u{ff11}".to_string(),
    ];
    let value = rng.pick(&variants).clone();
    let i = m.find("content-length").expect("make_fixed adds the line");
    m.headers[i] = format!("Content-Length: {value}").into_bytes();
    format!("Content-Length: {value:?} for {n} bytes")
}

fn chunk_line(rng: &mut Rng, m: &mut Message) -> String {
    let c = m.make_chunked(rng);
    if c.chunks.is_empty() {
        c.chunks.push(Chunk {
            size_line: b"5\r\n".to_vec(),
            data: b"hello".to_vec(),
            end: b"\r\n".to_vec(),
        });
    }
    let k = rng.below(c.chunks.len());
    let chunk = &mut c.chunks[k];
    let n = chunk.data.len();
    let what = match rng.below(12) {
        0 => {
            chunk.size_line = b"ffffffffffffffffffff\r\n".to_vec();
            "size overflows"
        }
        1 => {
            chunk.size_line = b"10000000000000005\r\n".to_vec();
            "size wraps to the real size modulo 2^64"
        }
        2 => {
            chunk.size_line = format!("0x{n:x}\r\n").into_bytes();
            "size with 0x"
        }
        3 => {
            chunk.size_line = format!(" {n:x}\r\n").into_bytes();
            "space before size"
        }
        4 => {
            chunk.size_line = format!("{n:x} \r\n").into_bytes();
            "space after size"
        }
        5 => {
            chunk.size_line = format!("{n:x}\n").into_bytes();
            "size line ends in bare LF"
        }
        6 => {
            chunk.end = Vec::new();
            "no CRLF after data"
        }
        7 => {
            chunk.end = b"\n".to_vec();
            "bare LF after data"
        }
        8 => {
            chunk.size_line = format!("{n:x};a=\x01b\r\n").into_bytes();
            "control byte in chunk extension"
        }
        9 => {
            chunk.size_line = format!("{:x}\r\n", n + 1).into_bytes();
            "size one more than the data"
        }
        10 => {
            chunk.size_line = format!("-{n:x}\r\n").into_bytes();
            "negative size"
        }
        _ => {
            c.last = b"0\n".to_vec();
            c.end = b"\n".to_vec();
            "last chunk and end in bare LF"
        }
    };
    format!("chunk {k}: {what}")
}

fn trailer(rng: &mut Rng, m: &mut Message) -> String {
    const LINES: [&str; 7] = [
        "BadTrailer\r\n",
        "Content-Length: 5\r\n",
        "Transfer-Encoding: chunked\r\n",
        "Host: evil.test\r\n",
        "X-T: v\r\n",
        " folded\r\n",
        "X-T: a\rb\r\n",
    ];
    let line = *rng.pick(&LINES);
    let c = m.make_chunked(rng);
    c.trailers.push(line.as_bytes().to_vec());
    format!("trailer {line:?}")
}

fn fold(rng: &mut Rng, m: &mut Message) -> String {
    if m.headers.is_empty() {
        return "no header to fold".into();
    }
    let i = m
        .find("transfer-encoding")
        .or(m.find("content-length"))
        .filter(|_| rng.chance(50))
        .unwrap_or_else(|| rng.below(m.headers.len()));
    const CONTINUATIONS: [&[u8]; 4] = [b" chunked", b"\tx", b" 5", b" "];
    let cont = rng.pick(&CONTINUATIONS).to_vec();
    let text = format!("{} folded onto {}", escape(&cont), escape(&m.headers[i]));
    m.headers.insert(i + 1, cont);
    text
}

fn line_ends(rng: &mut Rng, m: &mut Message) -> String {
    match rng.below(4) {
        0 => {
            m.eol = b"\n".to_vec();
            "head lines end in bare LF".into()
        }
        1 if !m.headers.is_empty() => {
            let i = rng.below(m.headers.len());
            m.headers[i].extend_from_slice(b"\nX-After-LF: 1");
            "one head line ends in bare LF".into()
        }
        2 if !m.headers.is_empty() => {
            let i = rng.below(m.headers.len());
            m.headers[i].extend_from_slice(b"\rX-After-CR: 1");
            "one head line ends in bare CR".into()
        }
        _ => {
            m.eol = b"\r\r\n".to_vec();
            "head lines end in CR CR LF".into()
        }
    }
}

/// Non-ASCII and control bytes in the target, a header name or a header value.
fn odd_bytes(rng: &mut Rng, m: &mut Message) -> String {
    const BYTES: [&[u8]; 10] = [
        b"\xc3\xa9",
        b"\xc3\xa9",
        b"\xc3\xa9",
        b"\xff",
        b"\x80",
        b"\x00",
        b"\x01",
        b"\x7f",
        b"\x0b",
        b"\x0c",
    ];
    let odd = *rng.pick(&BYTES);
    // The target half the time, a header name or value otherwise.
    let place = if m.headers.is_empty() || rng.chance(50) { 0 } else { 1 + rng.below(2) };
    let (field, at, where_) = if place == 0 {
        // Half the time near the start, where a parser looks for `*`, `/` or a scheme.
        let span = if rng.chance(50) { m.target.len().min(10) } else { m.target.len() };
        let at = 1 + rng.below(span.max(1));
        (&mut m.target, at, "target".to_string())
    } else {
        let i = rng.below(m.headers.len());
        let line = &mut m.headers[i];
        let colon = line.iter().position(|b| *b == b':').unwrap_or(line.len());
        if place == 1 {
            (line, rng.below(colon + 1), format!("header line {i}'s name"))
        } else {
            let from = (colon + 1).min(line.len());
            let at = from + rng.below(line.len() - from + 1);
            (line, at, format!("header line {i}'s value"))
        }
    };
    let at = at.min(field.len());
    field.splice(at..at, odd.iter().copied());
    format!("{} inserted in {where_} at {at}", escape(odd))
}

fn request_line(rng: &mut Rng, m: &mut Message) -> String {
    match rng.below(3) {
        0 => {
            let v = *rng.pick(&[
                "HTTP/1.0",
                "HTTP/1.1",
                "HTTP/1.2",
                "HTTP/2.0",
                "http/1.1",
                "HTTP/1.10",
                "HTTP/01.1",
                "HTTP/1.1 ",
                "",
            ]);
            m.version = v.as_bytes().to_vec();
            format!("version {v:?}")
        }
        1 => {
            let method = *rng.pick(&[
                "get", "G ET", "GET\t", "PRI", "CONNECT", "TRACE", "PATCH", "M-SEARCH", "GET ", "",
            ]);
            m.method = method.as_bytes().to_vec();
            format!("method {method:?}")
        }
        _ => {
            let path = m.path.clone();
            let targets = [
                "*".to_string(),
                format!("/{path}"),
                "http://h.test".to_string(),
                path.trim_start_matches('/').to_string(),
                format!("http://a@h.test{path}"),
                format!("https://h.test{path}"),
                format!("HTTP://H.TEST{path}"),
                format!("http://h.test:99999{path}"),
                format!("{path}#frag"),
                format!("{path} x"),
            ];
            let target = rng.pick(&targets).clone();
            m.target = target.clone().into_bytes();
            format!("target {target:?}")
        }
    }
}

fn extra_header(rng: &mut Rng, m: &mut Message) -> String {
    const LINES: [&[u8]; 13] = [
        b"Expect: 100-continue",
        b"Expect: 100-Continue",
        b"Expect: 100-continue, foo",
        b"Upgrade: websocket",
        b"Upgrade: h2c",
        b"TE: trailers",
        b"Trailer: X-Checksum",
        b"Proxy-Connection: keep-alive",
        b"Keep-Alive: timeout=5",
        b"X-Forwarded-For: 10.0.0.1",
        b": no-name",
        b"No-Value:",
        b"Bad Name: x",
    ];
    let line = *rng.pick(&LINES);
    let mut text = format!("{} added", escape(line));
    m.insert_anywhere(rng, line.to_vec());
    if line.starts_with(b"Upgrade") && rng.chance(70) {
        m.insert_anywhere(rng, b"Connection: upgrade".to_vec());
        text.push_str(" with Connection: upgrade");
    }
    text
}

/// Flips, inserts or deletes bytes anywhere in the written requests.
fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>) -> String {
    const INSERTS: [&[u8]; 10] =
        [b"\r", b"\n", b"\r\n", b" ", b"\t", b":", b",", b"\x00", b"\xc3\xa9", b"0"];
    if bytes.is_empty() {
        bytes.push(b'\n');
        return "byte added to nothing".into();
    }
    let at = rng.below(bytes.len());
    match rng.below(3) {
        0 => {
            let old = bytes[at];
            bytes[at] = if rng.chance(50) { old ^ (1 << rng.below(8)) } else { rng.next() as u8 };
            format!("byte {at} flipped from {}", escape(&[old]))
        }
        1 => {
            let insert = *rng.pick(&INSERTS);
            bytes.splice(at..at, insert.iter().copied());
            format!("{} inserted at {at}", escape(insert))
        }
        _ => {
            let n = (1 + rng.below(4)).min(bytes.len() - at);
            let gone: Vec<u8> = bytes.drain(at..at + n).collect();
            format!("{} deleted at {at}", escape(&gone))
        }
    }
}

/// Bytes as text a reader can tell apart: printable ASCII as is, `\r`, `\n`, `\t`,
/// `\\`, `\"`, and `\xNN` for everything else.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}
