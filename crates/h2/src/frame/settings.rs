//! SETTINGS parameters (RFC 9113 section 6.5.2, RFC 8441 section 3): a SETTINGS
//! payload read in order, each known value checked, the last value of a repeated
//! parameter kept and unknown parameters ignored; and the payload written back.
//!
//! What a value means for the connection (window changes, table sizes, the ack, rules
//! by role) is the engine's.

use bytes::{BufMut, BytesMut};

use super::encode::EncodeError;
use super::header::{DEFAULT_MAX_FRAME_SIZE, MAX_PAYLOAD_LEN};
use crate::error::{ErrorCode, H2Error};

/// The largest flow-control window, and the largest SETTINGS_INITIAL_WINDOW_SIZE and
/// WINDOW_UPDATE increment: 2^31-1 (sections 6.5.2, 6.9).
pub const MAX_WINDOW_SIZE: u32 = (1 << 31) - 1;

/// The size of one parameter: a 16-bit identifier and a 32-bit value (section 6.5.1).
const ENTRY_LEN: usize = 6;

const HEADER_TABLE_SIZE: u16 = 0x1;
const ENABLE_PUSH: u16 = 0x2;
const MAX_CONCURRENT_STREAMS: u16 = 0x3;
const INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_FRAME_SIZE: u16 = 0x5;
const MAX_HEADER_LIST_SIZE: u16 = 0x6;
/// RFC 8441 section 3.
const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;

/// The parameters of one SETTINGS frame: `None` for a parameter the frame did not
/// carry (the receiver keeps its current value). The two on/off parameters are
/// `bool`, their only valid values being 0 and 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// SETTINGS_HEADER_TABLE_SIZE (0x1), bytes.
    pub header_table_size: Option<u32>,
    /// SETTINGS_ENABLE_PUSH (0x2).
    pub enable_push: Option<bool>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS (0x3).
    pub max_concurrent_streams: Option<u32>,
    /// SETTINGS_INITIAL_WINDOW_SIZE (0x4), bytes, at most [`MAX_WINDOW_SIZE`].
    pub initial_window_size: Option<u32>,
    /// SETTINGS_MAX_FRAME_SIZE (0x5), bytes, 2^14 to 2^24-1.
    pub max_frame_size: Option<u32>,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (0x6), bytes (advisory).
    pub max_header_list_size: Option<u32>,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (0x8, RFC 8441 section 3).
    pub enable_connect_protocol: Option<bool>,
}

impl Settings {
    /// Reads the parameters of a SETTINGS payload (no ACK), in the order they appear
    /// (section 6.5.3).
    pub(crate) fn decode(payload: &[u8]) -> Result<Settings, H2Error> {
        // 6.5: a length other than a multiple of 6 is a connection FRAME_SIZE_ERROR.
        if payload.len() % ENTRY_LEN != 0 {
            return Err(H2Error::Connection(ErrorCode::FrameSizeError));
        }
        let mut settings = Settings::default();
        for entry in payload.chunks_exact(ENTRY_LEN) {
            let Ok([i0, i1, v0, v1, v2, v3]) = <[u8; ENTRY_LEN]>::try_from(entry) else {
                continue;
            };
            // 6.5: each value replaces the one before it: the last one seen counts.
            settings.apply(u16::from_be_bytes([i0, i1]), u32::from_be_bytes([v0, v1, v2, v3]))?;
        }
        Ok(settings)
    }

    fn apply(&mut self, id: u16, value: u32) -> Result<(), H2Error> {
        match id {
            HEADER_TABLE_SIZE => self.header_table_size = Some(value),
            // 6.5.2: any value other than 0 or 1 is a connection PROTOCOL_ERROR.
            ENABLE_PUSH => self.enable_push = Some(flag_value(value)?),
            MAX_CONCURRENT_STREAMS => self.max_concurrent_streams = Some(value),
            INITIAL_WINDOW_SIZE => {
                // 6.5.2: above 2^31-1 is a connection FLOW_CONTROL_ERROR.
                if value > MAX_WINDOW_SIZE {
                    return Err(H2Error::Connection(ErrorCode::FlowControlError));
                }
                self.initial_window_size = Some(value);
            }
            MAX_FRAME_SIZE => {
                // 6.5.2: outside 2^14..=2^24-1 is a connection PROTOCOL_ERROR.
                if !(DEFAULT_MAX_FRAME_SIZE..=MAX_PAYLOAD_LEN).contains(&value) {
                    return Err(H2Error::Connection(ErrorCode::ProtocolError));
                }
                self.max_frame_size = Some(value);
            }
            MAX_HEADER_LIST_SIZE => self.max_header_list_size = Some(value),
            // RFC 8441 section 3: the value MUST be 0 or 1; a badly formed SETTINGS
            // frame is a connection PROTOCOL_ERROR (RFC 9113 section 6.5).
            ENABLE_CONNECT_PROTOCOL => self.enable_connect_protocol = Some(flag_value(value)?),
            // 6.5.2: an unknown or unsupported identifier is ignored.
            _ => {}
        }
        Ok(())
    }

    /// The parameters present, in the fixed order they are written: by identifier.
    fn entries(&self) -> [(u16, Option<u32>); 7] {
        [
            (HEADER_TABLE_SIZE, self.header_table_size),
            (ENABLE_PUSH, self.enable_push.map(u32::from)),
            (MAX_CONCURRENT_STREAMS, self.max_concurrent_streams),
            (INITIAL_WINDOW_SIZE, self.initial_window_size),
            (MAX_FRAME_SIZE, self.max_frame_size),
            (MAX_HEADER_LIST_SIZE, self.max_header_list_size),
            (ENABLE_CONNECT_PROTOCOL, self.enable_connect_protocol.map(u32::from)),
        ]
    }

    /// The values a receiver would refuse, refused before anything is written.
    pub(crate) fn check(&self) -> Result<(), EncodeError> {
        if let Some(value) = self.initial_window_size.filter(|&v| v > MAX_WINDOW_SIZE) {
            return Err(EncodeError::SettingValue { id: INITIAL_WINDOW_SIZE, value });
        }
        let frame_sizes = DEFAULT_MAX_FRAME_SIZE..=MAX_PAYLOAD_LEN;
        if let Some(value) = self.max_frame_size.filter(|v| !frame_sizes.contains(v)) {
            return Err(EncodeError::SettingValue { id: MAX_FRAME_SIZE, value });
        }
        Ok(())
    }

    /// The payload's length: 6 bytes per parameter present.
    pub(crate) fn payload_len(&self) -> u32 {
        let count = self.entries().iter().filter(|(_, value)| value.is_some()).count();
        u32::try_from(count.saturating_mul(ENTRY_LEN)).unwrap_or(u32::MAX)
    }

    /// Writes the payload: the parameters present, in identifier order.
    pub(crate) fn put_payload(&self, dst: &mut BytesMut) {
        for (id, value) in self.entries() {
            if let Some(value) = value {
                dst.put_u16(id);
                dst.put_u32(value);
            }
        }
    }
}

/// Reads an on/off parameter: 0 or 1, anything else a connection PROTOCOL_ERROR.
fn flag_value(value: u32) -> Result<bool, H2Error> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(H2Error::Connection(ErrorCode::ProtocolError)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u16, value: u32) -> Vec<u8> {
        let mut bytes = id.to_be_bytes().to_vec();
        bytes.extend_from_slice(&value.to_be_bytes());
        bytes
    }

    #[test]
    fn each_known_parameter_is_read() {
        let payload: Vec<u8> = [
            entry(0x1, 8192),
            entry(0x2, 0),
            entry(0x3, 100),
            entry(0x4, MAX_WINDOW_SIZE),
            entry(0x5, MAX_PAYLOAD_LEN),
            entry(0x6, 65536),
            entry(0x8, 1),
        ]
        .concat();
        assert_eq!(
            Settings::decode(&payload),
            Ok(Settings {
                header_table_size: Some(8192),
                enable_push: Some(false),
                max_concurrent_streams: Some(100),
                initial_window_size: Some(MAX_WINDOW_SIZE),
                max_frame_size: Some(MAX_PAYLOAD_LEN),
                max_header_list_size: Some(65536),
                enable_connect_protocol: Some(true),
            })
        );
    }

    #[test]
    fn a_repeated_parameter_keeps_its_last_value_and_unknown_ones_are_ignored() {
        let payload = [entry(0x4, 10), entry(0x7, 5), entry(0xffff, 9), entry(0x4, 20)].concat();
        assert_eq!(
            Settings::decode(&payload),
            Ok(Settings { initial_window_size: Some(20), ..Settings::default() })
        );
    }

    #[test]
    fn a_value_out_of_range_is_refused_even_when_a_later_one_would_be_valid() {
        // Section 6.5.3 processes values in order: the first bad one ends the frame.
        let payload = [entry(0x2, 2), entry(0x2, 1)].concat();
        assert_eq!(Settings::decode(&payload), Err(H2Error::Connection(ErrorCode::ProtocolError)));
    }

    #[test]
    fn writing_refuses_what_a_receiver_would_refuse() {
        let window = Settings { initial_window_size: Some(1 << 31), ..Settings::default() };
        assert_eq!(window.check(), Err(EncodeError::SettingValue { id: 0x4, value: 1 << 31 }));
        let small = Settings { max_frame_size: Some(16_383), ..Settings::default() };
        assert_eq!(small.check(), Err(EncodeError::SettingValue { id: 0x5, value: 16_383 }));
        let large = Settings { max_frame_size: Some(1 << 24), ..Settings::default() };
        assert_eq!(large.check(), Err(EncodeError::SettingValue { id: 0x5, value: 1 << 24 }));
    }
}
