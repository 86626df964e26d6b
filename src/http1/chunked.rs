//! Follows a chunked body (RFC 9112, 7.1) through the bytes that carry it, without
//! buffering them: where it ends, which bytes are payload, and whether it is valid.
//!
//! The proxy passes chunked bodies on as they are, framing and trailers included, so it
//! needs only the end of the body. The payload ranges serve the one case that decodes:
//! an HTTP/1.0 client, which does not understand chunked encoding.
//!
//! Line ends must be CRLF: a bare LF, accepted by some parsers and not by others, is how
//! two hops come to disagree about where a body ends.

use std::ops::Range;

/// Longest chunk-size line (size and extensions) accepted.
const MAX_SIZE_LINE: usize = 4096;
/// Hex digits of a chunk size: 15 of them overflow nothing (2^60).
const MAX_SIZE_DIGITS: u8 = 15;

/// The chunked body is not valid; the message must not be passed on further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked body")]
pub struct InvalidChunk;

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the hex digits of a chunk size.
    Size {
        size: u64,
        digits: u8,
    },
    /// After the digits: whitespace or a `;` extension, up to the CR.
    SizeExt {
        size: u64,
        len: usize,
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
    /// Trailer bytes so far, bounded by `max_trailer_bytes`.
    trailer_bytes: usize,
    max_trailer_bytes: usize,
}

/// What one [`Chunked::step`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Bytes of the input that belong to the body (framing and payload).
    pub used: usize,
    /// Payload within `used`; empty when the step saw only framing.
    pub data: Range<usize>,
    /// The body ended within `used`.
    pub done: bool,
}

impl Chunked {
    /// A body about to start; trailers may take up to `max_trailer_bytes`.
    pub fn new(max_trailer_bytes: usize) -> Chunked {
        Chunked { phase: Phase::Size { size: 0, digits: 0 }, trailer_bytes: 0, max_trailer_bytes }
    }

    /// Whether the last byte of the body has been seen.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Consumes framing from `bytes` up to the next payload, returning that payload
    /// (as much as is in `bytes`) or stopping at the end of the body or of `bytes`.
    pub fn step(&mut self, bytes: &[u8]) -> Result<Step, InvalidChunk> {
        let mut i = 0;
        while i < bytes.len() {
            if let Phase::Data(remaining) = self.phase {
                let n = remaining.min((bytes.len() - i) as u64) as usize;
                self.phase = if n as u64 == remaining {
                    Phase::DataCr
                } else {
                    Phase::Data(remaining - n as u64)
                };
                return Ok(Step { used: i + n, data: i..i + n, done: false });
            }
            if self.phase == Phase::Done {
                break;
            }
            self.phase = self.advance(bytes[i])?;
            i += 1;
        }
        Ok(Step { used: i, data: i..i, done: self.is_done() })
    }

    /// How many bytes of `bytes` belong to the body, and whether it ended there.
    pub fn scan(&mut self, bytes: &[u8]) -> Result<(usize, bool), InvalidChunk> {
        let mut used = 0;
        while used < bytes.len() && !self.is_done() {
            used += self.step(&bytes[used..])?.used;
        }
        Ok((used, self.is_done()))
    }

    /// The phase after one framing byte.
    fn advance(&mut self, b: u8) -> Result<Phase, InvalidChunk> {
        let next = match self.phase {
            Phase::Size { size, digits } => match hex(b) {
                Some(d) if digits < MAX_SIZE_DIGITS => {
                    Phase::Size { size: size << 4 | u64::from(d), digits: digits + 1 }
                }
                None if digits > 0 && b == b'\r' => Phase::SizeLf { size },
                None if digits > 0 && matches!(b, b';' | b' ' | b'\t') => {
                    Phase::SizeExt { size, len: usize::from(digits) + 1 }
                }
                _ => return Err(InvalidChunk),
            },
            Phase::SizeExt { size, len } => match b {
                b'\r' => Phase::SizeLf { size },
                b'\n' => return Err(InvalidChunk),
                _ if len >= MAX_SIZE_LINE => return Err(InvalidChunk),
                _ => Phase::SizeExt { size, len: len + 1 },
            },
            Phase::SizeLf { size: 0 } if b == b'\n' => Phase::TrailerStart,
            Phase::SizeLf { size } if b == b'\n' => Phase::Data(size),
            Phase::DataCr if b == b'\r' => Phase::DataLf,
            Phase::DataLf if b == b'\n' => Phase::Size { size: 0, digits: 0 },
            Phase::TrailerStart if b == b'\r' => Phase::FinalLf,
            Phase::TrailerStart | Phase::TrailerLine if b != b'\r' && b != b'\n' => {
                self.trailer_bytes += 1;
                if self.trailer_bytes > self.max_trailer_bytes {
                    return Err(InvalidChunk);
                }
                Phase::TrailerLine
            }
            Phase::TrailerLine if b == b'\r' => Phase::TrailerLf,
            Phase::TrailerLf if b == b'\n' => Phase::TrailerStart,
            Phase::FinalLf if b == b'\n' => Phase::Done,
            _ => return Err(InvalidChunk),
        };
        Ok(next)
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
