//! Decodes a chunked body (RFC 9112, 7.1) as it passes through, without buffering it:
//! which bytes are payload, where the body ends, its trailer fields, and whether it is
//! valid.
//!
//! holdfast never passes chunk framing on as it came: [`Chunked::decode_in_place`]
//! takes the payload out of its framing, and the sender writes framing of its own
//! (`encode::chunk_size_line`). Chunk extensions are checked against their grammar and
//! dropped; trailer lines are checked and those that may not be trailers (framing,
//! routing, authentication and the like, [`is_forbidden_trailer`]) are dropped, the
//! rest kept for the sender to write after the last chunk.
//!
//! Line ends must be CRLF: a bare LF, accepted by some parsers and not by others, is how
//! two hops come to disagree about where a body ends.

/// Longest chunk-size line (size and extensions) accepted.
const MAX_SIZE_LINE: usize = 4096;
/// Hex digits of a chunk size: 15 of them overflow nothing (2^60).
const MAX_SIZE_DIGITS: u8 = 15;

/// The chunked body is not valid; the message must not be passed on further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked body")]
pub struct InvalidChunk;

/// Where in a chunk extension (`;name=value`, RFC 9112, 7.1.1) the size line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ext {
    /// Whitespace that must be followed by `;` (BWS).
    Bws,
    /// After `;`: whitespace, then a name.
    NameStart,
    Name,
    /// Whitespace after a name: `=` or `;` must follow.
    AfterName,
    /// After `=`: whitespace, then a token or a quoted string.
    ValueStart,
    Token,
    Quoted,
    QuotedEscape,
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the hex digits of a chunk size.
    Size {
        size: u64,
        digits: u8,
    },
    /// After the digits, in the extensions; `len` bytes of the line so far.
    Ext {
        size: u64,
        len: usize,
        at: Ext,
    },
    /// Expecting the LF of the size line.
    SizeLf {
        size: u64,
    },
    /// This many payload bytes to go in the current chunk.
    Data(u64),
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the empty line that ends the body).
    TrailerStart,
    TrailerLine,
    TrailerLf,
    FinalLf,
    Done,
}

/// The state of one chunked body.
#[derive(Debug, Clone)]
pub struct Chunked {
    phase: Phase,
    /// The trailer line being read.
    line: Vec<u8>,
    /// Trailer lines kept, each ending in CRLF.
    kept: Vec<u8>,
    /// Trailer bytes so far, bounded by `max_trailer_bytes`.
    trailer_bytes: usize,
    max_trailer_bytes: usize,
}

/// What one [`Chunked::decode_in_place`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Bytes of the input that belong to the body (framing and payload).
    pub used: usize,
    /// Payload bytes, now at the start of the input.
    pub payload: usize,
    /// The body ended within `used`.
    pub done: bool,
}

impl Chunked {
    /// A body about to start; trailers may take up to `max_trailer_bytes`.
    pub fn new(max_trailer_bytes: usize) -> Chunked {
        Chunked {
            phase: Phase::Size { size: 0, digits: 0 },
            line: Vec::new(),
            kept: Vec::new(),
            trailer_bytes: 0,
            max_trailer_bytes,
        }
    }

    /// Whether the last byte of the body has been seen.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The trailer lines to pass on, each ending in CRLF (complete once
    /// [`Chunked::is_done`]).
    pub fn trailers(&self) -> &[u8] {
        &self.kept
    }

    /// Decodes what `bytes` holds of the body: the payload is moved to the start of
    /// `bytes`, the framing consumed. Stops at the end of the body; bytes after it are
    /// not the body's.
    pub fn decode_in_place(&mut self, bytes: &mut [u8]) -> Result<Decoded, InvalidChunk> {
        let mut used = 0usize;
        let mut payload = 0usize;
        while used < bytes.len() && !self.is_done() {
            if let Phase::Data(remaining) = self.phase {
                let available = bytes.len().saturating_sub(used);
                let n = usize::try_from(remaining).unwrap_or(usize::MAX).min(available);
                let end = used.saturating_add(n);
                if payload != used {
                    bytes.copy_within(used..end, payload);
                }
                payload = payload.saturating_add(n);
                used = end;
                let left = remaining.saturating_sub(n as u64);
                self.phase = if left == 0 { Phase::DataCr } else { Phase::Data(left) };
                continue;
            }
            let Some(&b) = bytes.get(used) else { break };
            self.phase = self.advance(b)?;
            used = used.saturating_add(1);
        }
        Ok(Decoded { used, payload, done: self.is_done() })
    }

    /// The phase after one framing byte.
    fn advance(&mut self, b: u8) -> Result<Phase, InvalidChunk> {
        let next = match self.phase {
            Phase::Size { size, digits } => match hex(b) {
                Some(d) if digits < MAX_SIZE_DIGITS => {
                    Phase::Size { size: size << 4 | u64::from(d), digits: digits.saturating_add(1) }
                }
                None if digits > 0 => {
                    let len = usize::from(digits);
                    match b {
                        b'\r' => Phase::SizeLf { size },
                        b';' => Phase::Ext { size, len, at: Ext::NameStart },
                        b' ' | b'\t' => Phase::Ext { size, len, at: Ext::Bws },
                        _ => return Err(InvalidChunk),
                    }
                }
                _ => return Err(InvalidChunk),
            },
            Phase::Ext { size, len, at } => {
                if len >= MAX_SIZE_LINE {
                    return Err(InvalidChunk);
                }
                match extension(at, b)? {
                    Some(at) => Phase::Ext { size, len: len.saturating_add(1), at },
                    None => Phase::SizeLf { size },
                }
            }
            Phase::SizeLf { size: 0 } if b == b'\n' => Phase::TrailerStart,
            Phase::SizeLf { size } if b == b'\n' => Phase::Data(size),
            Phase::DataCr if b == b'\r' => Phase::DataLf,
            Phase::DataLf if b == b'\n' => Phase::Size { size: 0, digits: 0 },
            Phase::TrailerStart if b == b'\r' => Phase::FinalLf,
            // A line starting with whitespace would be obsolete line folding.
            Phase::TrailerStart if b == b' ' || b == b'\t' => return Err(InvalidChunk),
            Phase::TrailerStart | Phase::TrailerLine if b != b'\r' && b != b'\n' => {
                self.trailer_bytes = self.trailer_bytes.saturating_add(1);
                if self.trailer_bytes > self.max_trailer_bytes {
                    return Err(InvalidChunk);
                }
                self.line.push(b);
                Phase::TrailerLine
            }
            Phase::TrailerLine if b == b'\r' => Phase::TrailerLf,
            Phase::TrailerLf if b == b'\n' => {
                self.end_trailer_line()?;
                Phase::TrailerStart
            }
            Phase::FinalLf if b == b'\n' => Phase::Done,
            _ => return Err(InvalidChunk),
        };
        Ok(next)
    }

    /// Checks the trailer line just read and keeps it unless it is forbidden.
    fn end_trailer_line(&mut self) -> Result<(), InvalidChunk> {
        let line = std::mem::take(&mut self.line);
        let name = trailer_name(&line).ok_or(InvalidChunk)?;
        if !is_forbidden_trailer(name) {
            self.kept.extend_from_slice(&line);
            self.kept.extend_from_slice(b"\r\n");
        }
        self.line = line;
        self.line.clear();
        Ok(())
    }
}

/// The next place in an extension after byte `b`; `None` at the CR that ends the line.
fn extension(at: Ext, b: u8) -> Result<Option<Ext>, InvalidChunk> {
    let ws = b == b' ' || b == b'\t';
    let tchar = super::is_tchar(b);
    let next = match at {
        Ext::Bws if ws => Ext::Bws,
        Ext::Bws if b == b';' => Ext::NameStart,
        Ext::NameStart if ws => Ext::NameStart,
        Ext::NameStart if tchar => Ext::Name,
        Ext::Name if tchar => Ext::Name,
        Ext::Name | Ext::AfterName if ws => Ext::AfterName,
        Ext::Name | Ext::AfterName if b == b'=' => Ext::ValueStart,
        Ext::Name | Ext::AfterName if b == b';' => Ext::NameStart,
        Ext::ValueStart if ws => Ext::ValueStart,
        Ext::ValueStart if b == b'"' => Ext::Quoted,
        Ext::ValueStart if tchar => Ext::Token,
        Ext::Token if tchar => Ext::Token,
        Ext::Token if ws => Ext::Bws,
        Ext::Token if b == b';' => Ext::NameStart,
        Ext::Quoted if b == b'"' => Ext::Bws,
        Ext::Quoted if b == b'\\' => Ext::QuotedEscape,
        // qdtext: HTAB, SP, and visible characters but `"` and `\`, obs-text.
        Ext::Quoted if b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80 => Ext::Quoted,
        Ext::QuotedEscape if b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80 => Ext::Quoted,
        // The line may end after a name or a value, not after whitespace or `;`.
        Ext::Name | Ext::Token if b == b'\r' => return Ok(None),
        _ => return Err(InvalidChunk),
    };
    Ok(Some(next))
}

/// The field name of a trailer line `name: value`, if the line is one: a token, a
/// colon right after it, and a value of visible characters, spaces and tabs.
fn trailer_name(line: &[u8]) -> Option<&[u8]> {
    let colon = line.iter().position(|b| *b == b':')?;
    let (name, rest) = line.split_at_checked(colon)?;
    let value = rest.get(1..)?;
    let value_ok =
        value.iter().all(|b| *b == b'\t' || *b == b' ' || (0x21..=0x7e).contains(b) || *b >= 0x80);
    (super::is_token(name) && value_ok).then_some(name)
}

/// Fields that may not be sent as trailers (RFC 9110, 6.5.1): framing, routing,
/// hop-by-hop, request modifiers, authentication, and what decides how the content is
/// processed, plus the forwarding headers holdfast writes. They are dropped.
pub fn is_forbidden_trailer(name: &[u8]) -> bool {
    const FORBIDDEN: &[&[u8]] = &[
        b"content-length",
        b"transfer-encoding",
        b"trailer",
        b"te",
        b"host",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"upgrade",
        b"expect",
        b"max-forwards",
        b"range",
        b"cache-control",
        b"pragma",
        b"authorization",
        b"proxy-authorization",
        b"www-authenticate",
        b"proxy-authenticate",
        b"cookie",
        b"set-cookie",
        b"content-encoding",
        b"content-type",
        b"content-range",
        b"age",
        b"date",
        b"expires",
        b"location",
        b"retry-after",
        b"vary",
        b"forwarded",
        b"x-real-ip",
    ];
    let starts = |prefix: &[u8]| {
        name.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    };
    FORBIDDEN.iter().any(|f| f.eq_ignore_ascii_case(name))
        || starts(b"if-")
        || starts(b"x-forwarded-")
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => b.checked_sub(b'0'),
        b'a'..=b'f' => b.checked_sub(b'a' - 10),
        b'A'..=b'F' => b.checked_sub(b'A' - 10),
        _ => None,
    }
}
