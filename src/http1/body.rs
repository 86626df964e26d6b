//! A message body on its way through holdfast: taken out of its sender's framing and
//! put into the framing its receiver gets ([`Relay`]), with no I/O.
//!
//! A length-delimited body goes on as it is; a chunked one is decoded and chunked
//! again by holdfast (extensions dropped, trailers checked and filtered, see
//! [`super::chunked`]), or decoded for an HTTP/1.0 client; a close-delimited response
//! is chunked for an HTTP/1.1 client. Nothing of the sender's framing is copied.
//! Payload is moved to the front of the buffer it arrived in, never copied elsewhere.

use super::chunked::{Chunked, InvalidChunk};
use super::encode::{self, LAST_CHUNK};
use super::Framing;

/// A body's framing on the way in, and how far it has got.
#[derive(Debug)]
enum Input {
    /// This many bytes to go.
    Length(u64),
    Chunked(Box<Chunked>),
    UntilClose,
}

/// One body on its way through holdfast: taken out of its sender's framing and put
/// into the framing its receiver gets.
#[derive(Debug)]
pub struct Relay {
    input: Input,
    /// The receiver gets chunk framing.
    chunked_out: bool,
    /// Payload bytes so far.
    payload: u64,
}

/// What one [`Relay::decode`] found at the start of a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Piece {
    /// Bytes of the buffer that belonged to the body.
    pub used: usize,
    /// Payload bytes, now at the start of the buffer.
    pub payload: usize,
    /// The body ended within `used`.
    pub done: bool,
}

/// The slices one write sends: at most a head, a chunk (size line, data, CRLF) and the
/// last chunk (its line, trailers, the empty line).
#[derive(Default)]
pub struct Parts<'a> {
    parts: [&'a [u8]; 7],
    len: usize,
}

impl<'a> Parts<'a> {
    pub fn new() -> Parts<'a> {
        Parts::default()
    }

    pub fn push(&mut self, part: &'a [u8]) {
        if let Some(slot) = self.parts.get_mut(self.len) {
            *slot = part;
            self.len = self.len.saturating_add(1);
        }
    }

    pub fn as_slice(&self) -> &[&'a [u8]] {
        self.parts.get(..self.len).unwrap_or_default()
    }

    pub fn bytes(&self) -> u64 {
        self.as_slice().iter().fold(0u64, |n, p| n.saturating_add(p.len() as u64))
    }
}

impl Relay {
    /// A body framed `framing` on the way in; `chunked_out`: the receiver gets chunk
    /// framing. A chunked body's trailer section may take `max_trailer_bytes` (RFC 9112,
    /// 7.1.2: it is a field section like a head, and is bounded like one: callers pass
    /// the head limit of the sender's side); past it the body is invalid.
    pub fn new(framing: Framing, chunked_out: bool, max_trailer_bytes: usize) -> Relay {
        let input = match framing {
            Framing::Length(n) => Input::Length(n),
            Framing::Chunked => Input::Chunked(Box::new(Chunked::new(max_trailer_bytes))),
            // Never read as HTTP/1.1 bytes: an HTTP/2 stream's body comes in frames.
            Framing::Stream => Input::UntilClose,
            Framing::UntilClose => Input::UntilClose,
            Framing::Empty => Input::Length(0),
        };
        Relay { input, chunked_out, payload: 0 }
    }

    pub fn is_done(&self) -> bool {
        match &self.input {
            Input::Length(n) => *n == 0,
            Input::Chunked(chunked) => chunked.is_done(),
            Input::UntilClose => false,
        }
    }

    /// Payload bytes so far.
    pub fn payload(&self) -> u64 {
        self.payload
    }

    /// Whether the receiver gets chunk framing.
    pub fn is_chunked_out(&self) -> bool {
        self.chunked_out
    }

    /// The trailer lines of a chunked body that may pass (`Name: value\r\n` each, those
    /// that may not be trailers dropped already), complete once the body is done; empty
    /// for other framings.
    pub fn trailers(&self) -> &[u8] {
        match &self.input {
            Input::Chunked(chunked) => chunked.trailers(),
            Input::Length(_) | Input::UntilClose => &[],
        }
    }

    /// Body bytes still to come, when the framing says.
    pub fn remaining(&self) -> Option<u64> {
        match self.input {
            Input::Length(n) => Some(n),
            Input::Chunked(_) | Input::UntilClose => None,
        }
    }

    /// Takes the payload out of the framing at the start of `data`, moving it to the
    /// front; bytes after the end of the body are left alone.
    pub fn decode(&mut self, data: &mut [u8]) -> Result<Piece, InvalidChunk> {
        let piece = match &mut self.input {
            Input::Length(remaining) => {
                let n = usize::try_from(*remaining).unwrap_or(usize::MAX).min(data.len());
                *remaining = remaining.saturating_sub(n as u64);
                Piece { used: n, payload: n, done: *remaining == 0 }
            }
            Input::Chunked(chunked) => {
                let d = chunked.decode_in_place(data)?;
                Piece { used: d.used, payload: d.payload, done: d.done }
            }
            Input::UntilClose => Piece { used: data.len(), payload: data.len(), done: false },
        };
        self.payload = self.payload.saturating_add(piece.payload as u64);
        Ok(piece)
    }

    /// Adds to `parts` what to write for a piece with this `payload` that `ended` the
    /// body: the payload, in chunk framing when the receiver gets it, then the last
    /// chunk and the trailers that may pass.
    pub fn frame<'a>(
        &'a self,
        payload: &'a [u8],
        ended: bool,
        size_line: &'a mut [u8; 18],
        parts: &mut Parts<'a>,
    ) {
        if !payload.is_empty() {
            if self.chunked_out {
                for part in encode::chunk(payload, size_line) {
                    parts.push(part);
                }
            } else {
                parts.push(payload);
            }
        }
        if ended && self.chunked_out {
            parts.push(LAST_CHUNK);
            parts.push(self.trailers());
            parts.push(b"\r\n");
        }
    }
}
