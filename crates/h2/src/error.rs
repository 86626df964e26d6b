//! The error codes of RFC 9113 section 7, and the two scopes an error can have (section
//! 5.4): the whole connection (GOAWAY) or one stream (RST_STREAM).

/// An error code as sent in RST_STREAM and GOAWAY (RFC 9113 section 7). Codes this
/// list does not name are kept as they came: "unknown or unsupported error codes MUST
/// NOT trigger any special behavior" and may be treated as `INTERNAL_ERROR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    NoError,
    ProtocolError,
    InternalError,
    FlowControlError,
    SettingsTimeout,
    StreamClosed,
    FrameSizeError,
    RefusedStream,
    Cancel,
    CompressionError,
    ConnectError,
    EnhanceYourCalm,
    InadequateSecurity,
    Http11Required,
    /// A code RFC 9113 does not define.
    Other(u32),
}

impl ErrorCode {
    /// The code as it goes on the wire.
    pub fn to_u32(self) -> u32 {
        match self {
            ErrorCode::NoError => 0x0,
            ErrorCode::ProtocolError => 0x1,
            ErrorCode::InternalError => 0x2,
            ErrorCode::FlowControlError => 0x3,
            ErrorCode::SettingsTimeout => 0x4,
            ErrorCode::StreamClosed => 0x5,
            ErrorCode::FrameSizeError => 0x6,
            ErrorCode::RefusedStream => 0x7,
            ErrorCode::Cancel => 0x8,
            ErrorCode::CompressionError => 0x9,
            ErrorCode::ConnectError => 0xa,
            ErrorCode::EnhanceYourCalm => 0xb,
            ErrorCode::InadequateSecurity => 0xc,
            ErrorCode::Http11Required => 0xd,
            ErrorCode::Other(code) => code,
        }
    }

    /// The code read from the wire.
    pub fn from_u32(code: u32) -> ErrorCode {
        match code {
            0x0 => ErrorCode::NoError,
            0x1 => ErrorCode::ProtocolError,
            0x2 => ErrorCode::InternalError,
            0x3 => ErrorCode::FlowControlError,
            0x4 => ErrorCode::SettingsTimeout,
            0x5 => ErrorCode::StreamClosed,
            0x6 => ErrorCode::FrameSizeError,
            0x7 => ErrorCode::RefusedStream,
            0x8 => ErrorCode::Cancel,
            0x9 => ErrorCode::CompressionError,
            0xa => ErrorCode::ConnectError,
            0xb => ErrorCode::EnhanceYourCalm,
            0xc => ErrorCode::InadequateSecurity,
            0xd => ErrorCode::Http11Required,
            other => ErrorCode::Other(other),
        }
    }

    /// The name RFC 9113 gives the code, for logs; `UNKNOWN` for others.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NoError => "NO_ERROR",
            ErrorCode::ProtocolError => "PROTOCOL_ERROR",
            ErrorCode::InternalError => "INTERNAL_ERROR",
            ErrorCode::FlowControlError => "FLOW_CONTROL_ERROR",
            ErrorCode::SettingsTimeout => "SETTINGS_TIMEOUT",
            ErrorCode::StreamClosed => "STREAM_CLOSED",
            ErrorCode::FrameSizeError => "FRAME_SIZE_ERROR",
            ErrorCode::RefusedStream => "REFUSED_STREAM",
            ErrorCode::Cancel => "CANCEL",
            ErrorCode::CompressionError => "COMPRESSION_ERROR",
            ErrorCode::ConnectError => "CONNECT_ERROR",
            ErrorCode::EnhanceYourCalm => "ENHANCE_YOUR_CALM",
            ErrorCode::InadequateSecurity => "INADEQUATE_SECURITY",
            ErrorCode::Http11Required => "HTTP_1_1_REQUIRED",
            ErrorCode::Other(_) => "UNKNOWN",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorCode::Other(code) => write!(f, "UNKNOWN({code:#x})"),
            known => f.write_str(known.as_str()),
        }
    }
}

/// What a receiver must do about an error it found (RFC 9113 section 5.4): end the
/// connection with GOAWAY, or end one stream with RST_STREAM and go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum H2Error {
    /// A connection error (section 5.4.1): GOAWAY with this code, then close.
    Connection(ErrorCode),
    /// A stream error (section 5.4.2): RST_STREAM on this stream with this code.
    Stream { stream: u32, code: ErrorCode },
}

impl H2Error {
    /// The code that goes in the GOAWAY or RST_STREAM.
    pub fn code(self) -> ErrorCode {
        match self {
            H2Error::Connection(code) | H2Error::Stream { code, .. } => code,
        }
    }
}

impl std::fmt::Display for H2Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            H2Error::Connection(code) => write!(f, "connection error {code}"),
            H2Error::Stream { stream, code } => write!(f, "stream {stream} error {code}"),
        }
    }
}

impl std::error::Error for H2Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_goes_to_the_wire_and_back() {
        for code in 0..=0xe_u32 {
            assert_eq!(ErrorCode::from_u32(code).to_u32(), code);
        }
        assert_eq!(ErrorCode::from_u32(0xe), ErrorCode::Other(0xe));
        assert_eq!(ErrorCode::from_u32(0x7).to_string(), "REFUSED_STREAM");
        assert_eq!(ErrorCode::Other(0x1234).to_string(), "UNKNOWN(0x1234)");
    }
}
