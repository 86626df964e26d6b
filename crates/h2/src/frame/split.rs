//! Cuts whole frames out of a connection's read buffer, and checks the client
//! connection preface that comes before them (RFC 9113 sections 3.4 and 4).
//!
//! Payloads leave the buffer as `Bytes` that share its memory: nothing is copied.
//! What a payload holds is [`decode`](super::decode())'s business.

use bytes::{Buf, Bytes, BytesMut};

use super::header::{FrameHeader, HEADER_LEN};
use crate::error::{ErrorCode, H2Error};

/// The client connection preface (section 3.4): these 24 bytes, then a SETTINGS frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How far a server has read the client connection preface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefaceCheck {
    /// The bytes so far are the preface's beginning: read more.
    Partial,
    /// The buffer starts with the whole preface: the caller advances past
    /// [`PREFACE`]`.len()` bytes, and frames follow.
    Complete,
}

/// Checks the start of what a client sent against the connection preface. Bytes that
/// differ from it are a connection PROTOCOL_ERROR (section 3.4), found as soon as the
/// first wrong byte arrives; a GOAWAY may be left out, the peer not speaking HTTP/2.
pub fn check_preface(buf: &[u8]) -> Result<PrefaceCheck, H2Error> {
    match buf.split_at_checked(PREFACE.len()) {
        Some((start, _)) if start == PREFACE => Ok(PrefaceCheck::Complete),
        None if PREFACE.starts_with(buf) => Ok(PrefaceCheck::Partial),
        _ => Err(H2Error::Connection(ErrorCode::ProtocolError)),
    }
}

/// Takes the next whole frame off the front of `buf`: `Ok(None)` until all of it has
/// arrived (nothing is consumed then), else its header and its payload.
///
/// A header announcing a payload longer than `max_frame_size` (our
/// SETTINGS_MAX_FRAME_SIZE: after a change, the larger of the old and new values until
/// the peer acknowledges it) is a connection FRAME_SIZE_ERROR, returned as soon as the
/// header is in, without waiting for the payload. Section 4.2 makes it a connection
/// error for frames that can change connection state and lets it be one for all: a
/// frame too large to be read is never skipped.
pub fn split_frame(
    buf: &mut BytesMut,
    max_frame_size: u32,
) -> Result<Option<(FrameHeader, Bytes)>, H2Error> {
    let Some(header_bytes) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let header = FrameHeader::parse(header_bytes);
    // 4.2: a frame larger than SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR.
    if header.length > max_frame_size {
        return Err(H2Error::Connection(ErrorCode::FrameSizeError));
    }
    // The length is at most 2^24-1, so neither conversion nor sum can fail on the
    // platforms Rust supports; if one did, the frame could never be held anyway.
    let too_large = H2Error::Connection(ErrorCode::FrameSizeError);
    let length = usize::try_from(header.length).map_err(|_| too_large)?;
    let frame_len = length.checked_add(HEADER_LEN).ok_or(too_large)?;
    // Nothing is reserved for the rest: 9 bytes from a peer must not make us allocate
    // up to max_frame_size; the caller's reads decide how the buffer grows.
    if buf.len() < frame_len {
        return Ok(None);
    }
    buf.advance(HEADER_LEN);
    Ok(Some((header, buf.split_to(length).freeze())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FrameType, DEFAULT_MAX_FRAME_SIZE, END_STREAM};

    /// A xorshift64 generator with a fixed seed: the same chunk sizes every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Frames of several types and sizes, back to back, with their headers and
    /// payloads as `split_frame` must return them.
    fn stream_of_frames() -> (Vec<u8>, Vec<(FrameHeader, Vec<u8>)>) {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut wire = Vec::new();
        let mut frames = Vec::new();
        for i in 0..60_u32 {
            let length = [0, 1, 8, 100, 16_384][rng.below(5)];
            let kind = rng.below(12) as u8;
            let payload: Vec<u8> = (0..length).map(|j| (i as usize + j) as u8).collect();
            let header = FrameHeader {
                length: length as u32,
                kind: FrameType::from_u8(kind),
                flags: END_STREAM,
                stream_id: i * 2 + 1,
            };
            wire.extend_from_slice(&(length as u32).to_be_bytes()[1..]);
            wire.extend_from_slice(&[kind, END_STREAM]);
            wire.extend_from_slice(&header.stream_id.to_be_bytes());
            wire.extend_from_slice(&payload);
            frames.push((header, payload));
        }
        (wire, frames)
    }

    /// Feeds `wire` to `split_frame` in pieces of the sizes `next_chunk` picks, taking
    /// frames out whenever one is whole.
    fn split_in_chunks(
        wire: &[u8],
        mut next_chunk: impl FnMut() -> usize,
    ) -> Vec<(FrameHeader, Vec<u8>)> {
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        let mut fed = 0;
        while fed < wire.len() {
            let end = (fed + next_chunk()).min(wire.len());
            buf.extend_from_slice(&wire[fed..end]);
            fed = end;
            while let Some((header, payload)) =
                split_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE).unwrap()
            {
                frames.push((header, payload.to_vec()));
            }
        }
        assert!(buf.is_empty());
        frames
    }

    #[test]
    fn frames_come_out_the_same_whatever_the_read_boundaries() {
        let (wire, expected) = stream_of_frames();
        assert_eq!(split_in_chunks(&wire, || wire.len()), expected);
        assert_eq!(split_in_chunks(&wire, || 1), expected);
        let mut rng = Rng(42);
        assert_eq!(split_in_chunks(&wire, || 1 + rng.below(20_000)), expected);
        let mut rng = Rng(7);
        assert_eq!(split_in_chunks(&wire, || 1 + rng.below(12)), expected);
    }

    #[test]
    fn an_incomplete_frame_is_left_in_the_buffer() {
        let mut buf = BytesMut::from(&[0, 0, 3, 0x6, 0, 0, 0, 0][..]);
        assert_eq!(split_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE), Ok(None));
        buf.extend_from_slice(&[0, b'a', b'b']);
        assert_eq!(split_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE), Ok(None));
        assert_eq!(buf.len(), 11);
        buf.extend_from_slice(b"cd");
        let (header, payload) = split_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE).unwrap().unwrap();
        assert_eq!(header.length, 3);
        assert_eq!(&payload[..], b"abc");
        assert_eq!(&buf[..], b"d");
    }

    #[test]
    fn a_frame_over_the_max_size_is_refused_from_its_header_alone() {
        // 16,385 bytes announced, none of them here yet.
        let mut buf = BytesMut::from(&[0x00, 0x40, 0x01, 0x0, 0x0, 0, 0, 0, 1][..]);
        assert_eq!(
            split_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE),
            Err(H2Error::Connection(ErrorCode::FrameSizeError))
        );
        // Exactly the max is fine, and a larger max lets the same header through.
        let mut buf = BytesMut::from(&[0x00, 0x40, 0x00, 0x0, 0x0, 0, 0, 0, 1][..]);
        assert_eq!(split_frame(&mut buf, DEFAULT_MAX_FRAME_SIZE), Ok(None));
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1][..]);
        assert_eq!(split_frame(&mut buf, (1 << 24) - 1), Ok(None));
    }

    #[test]
    fn the_preface_is_partial_complete_or_wrong() {
        assert_eq!(check_preface(b""), Ok(PrefaceCheck::Partial));
        assert_eq!(check_preface(b"PRI * HTTP/2.0\r\n"), Ok(PrefaceCheck::Partial));
        assert_eq!(check_preface(&PREFACE[..23]), Ok(PrefaceCheck::Partial));
        assert_eq!(check_preface(PREFACE), Ok(PrefaceCheck::Complete));
        let mut with_settings = PREFACE.to_vec();
        with_settings.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        assert_eq!(check_preface(&with_settings), Ok(PrefaceCheck::Complete));

        let wrong = Err(H2Error::Connection(ErrorCode::ProtocolError));
        assert_eq!(check_preface(b"GET / HTTP/1.1\r\n"), wrong);
        assert_eq!(check_preface(b"PRI * HTTP/2.1"), wrong);
        assert_eq!(check_preface(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\r"), wrong);
    }
}
