//! HTTP/2 frames (RFC 9113 sections 4 and 6): bytes from the connection cut into
//! frames, each frame's payload decoded with every check a receiver can make on the
//! frame alone, and frames written.
//!
//! - `header.rs`: the 9-byte header, frame types and flags.
//! - `split.rs`: frames cut out of the connection's read buffer (payloads are not
//!   copied), frame sizes checked against our SETTINGS_MAX_FRAME_SIZE, and the client
//!   connection preface.
//! - `decode.rs`: a payload turned into a [`Frame`], or the [`H2Error`] with the code
//!   and scope RFC 9113 gives the fault.
//! - `settings.rs`: SETTINGS parameters, their values checked and applied in order.
//! - `encode.rs`: writers for every type; what they write, [`decode()`] accepts.
//!
//! A frame's data and field block fragments are `Bytes` slices of the read buffer.
//!
//! # Checked by the engine
//! These rules need connection or stream state, so this module leaves them to the
//! connection engine; the list is here so that no rule falls between the two.
//! - 3.4: the first frame after the client preface, and the server's first frame, is
//!   SETTINGS, else connection PROTOCOL_ERROR.
//! - 4.3, 6.2, 6.6, 6.10: a HEADERS or PUSH_PROMISE without END_HEADERS is followed
//!   only by CONTINUATIONs on the same stream until END_HEADERS; any other frame
//!   (unknown types included, 5.5) or a CONTINUATION out of such a sequence is a
//!   connection PROTOCOL_ERROR. Every field block is reassembled and decompressed, even
//!   for a stream being refused or reset, else COMPRESSION_ERROR; a HEADERS frame's
//!   [`Headers::stream_error`] is raised after its block is decoded.
//! - 4.3.1, 6.5.3: a new SETTINGS_HEADER_TABLE_SIZE takes effect at the ack; settings
//!   are applied and acked at once; an ack that does not come may be a
//!   SETTINGS_TIMEOUT.
//! - 5.1: frames against stream state: on an idle stream only HEADERS and PRIORITY
//!   (else connection PROTOCOL_ERROR, RST_STREAM included, 6.4); on a half-closed
//!   (remote) stream only WINDOW_UPDATE, PRIORITY and RST_STREAM (else stream
//!   STREAM_CLOSED; DATA per 6.1); closed streams; reserved streams.
//! - 5.1.1: stream id parity (odd from clients, even from servers) and increase;
//!   PUSH_PROMISE's promised id must name an idle stream (6.6); HEADERS opening a
//!   server-initiated stream.
//! - 5.1.2: SETTINGS_MAX_CONCURRENT_STREAMS, stream PROTOCOL_ERROR or REFUSED_STREAM.
//! - 6.5.2, 6.6, 8.4: by role, a client refuses SETTINGS_ENABLE_PUSH = 1; a server
//!   refuses any PUSH_PROMISE, and so does a client that disabled push and had it acked
//!   (connection PROTOCOL_ERROR).
//! - RFC 8441 section 3: SETTINGS_ENABLE_CONNECT_PROTOCOL does not go from 1 back to 0.
//! - 6.7: a PING without ACK is answered with an ACK carrying the same 8 bytes; an ACK
//!   is never answered.
//! - 6.8: after a GOAWAY, frames of streams above the last stream id are still
//!   processed as far as compression state and connection flow control need.
//! - 6.9, 6.9.1, 6.9.2: flow control: DATA beyond a window, a WINDOW_UPDATE that takes
//!   a window past 2^31-1 (stream or connection FLOW_CONTROL_ERROR), a new
//!   SETTINGS_INITIAL_WINDOW_SIZE that does (connection FLOW_CONTROL_ERROR); every DATA
//!   frame counts against the connection window ([`Data::flow_controlled_len`]), even
//!   on a stream in error.
//! - 8.1.1: malformed messages (content-length against the DATA received, fields).
//!
//! Padding octets are not checked for zero: section 6.1 lets a receiver skip that.

mod decode;
mod encode;
mod header;
mod settings;
mod split;

#[cfg(test)]
mod tests;

use bytes::Bytes;

use crate::error::{ErrorCode, H2Error};

pub use decode::decode;
pub use encode::{
    write_data_header, write_frame, write_goaway, write_headers, write_ping, write_ping_ack,
    write_priority, write_rst_stream, write_settings, write_settings_ack, write_window_update,
    EncodeError,
};
pub use header::{
    FrameHeader, FrameType, ACK, DEFAULT_MAX_FRAME_SIZE, END_HEADERS, END_STREAM, HEADER_LEN,
    MAX_PAYLOAD_LEN, MAX_STREAM_ID, PADDED, PRIORITY,
};
pub use settings::{Settings, MAX_WINDOW_SIZE};
pub use split::{check_preface, split_frame, PrefaceCheck, PREFACE};

/// One decoded frame (section 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data(Data),
    Headers(Headers),
    Priority(Priority),
    RstStream(RstStream),
    /// A SETTINGS frame without ACK: the peer's parameters.
    Settings(Settings),
    /// A SETTINGS frame with ACK: the peer applied our last unacknowledged SETTINGS.
    SettingsAck,
    PushPromise(PushPromise),
    Ping(Ping),
    GoAway(GoAway),
    WindowUpdate(WindowUpdate),
    Continuation(Continuation),
    /// A frame of a type RFC 9113 does not define: its payload is dropped (section
    /// 5.5). Kept (not skipped) so the engine can refuse one inside a field block.
    Unknown {
        kind: u8,
        stream_id: u32,
    },
}

impl Frame {
    /// The frame's stream identifier; 0 for frames about the whole connection.
    pub fn stream_id(&self) -> u32 {
        match self {
            Frame::Data(f) => f.stream_id,
            Frame::Headers(f) => f.stream_id,
            Frame::Priority(f) => f.stream_id,
            Frame::RstStream(f) => f.stream_id,
            Frame::PushPromise(f) => f.stream_id,
            Frame::WindowUpdate(f) => f.stream_id,
            Frame::Continuation(f) => f.stream_id,
            Frame::Unknown { stream_id, .. } => *stream_id,
            Frame::Settings(_) | Frame::SettingsAck | Frame::Ping(_) | Frame::GoAway(_) => 0,
        }
    }

    /// The frame's type.
    pub fn kind(&self) -> FrameType {
        match self {
            Frame::Data(_) => FrameType::Data,
            Frame::Headers(_) => FrameType::Headers,
            Frame::Priority(_) => FrameType::Priority,
            Frame::RstStream(_) => FrameType::RstStream,
            Frame::Settings(_) | Frame::SettingsAck => FrameType::Settings,
            Frame::PushPromise(_) => FrameType::PushPromise,
            Frame::Ping(_) => FrameType::Ping,
            Frame::GoAway(_) => FrameType::GoAway,
            Frame::WindowUpdate(_) => FrameType::WindowUpdate,
            Frame::Continuation(_) => FrameType::Continuation,
            Frame::Unknown { kind, .. } => FrameType::from_u8(*kind),
        }
    }
}

/// DATA (section 6.1): a piece of a message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    pub stream_id: u32,
    pub end_stream: bool,
    /// The Pad Length when PADDED was set: that many padding bytes followed the data.
    pub pad_length: Option<u8>,
    /// The data, padding removed.
    pub data: Bytes,
}

impl Data {
    /// The bytes this frame counts against the flow-control windows: the whole payload,
    /// Pad Length byte and padding included (sections 6.1, 6.9.1).
    pub fn flow_controlled_len(&self) -> u32 {
        let padding = self.pad_length.map_or(0, |pad| u32::from(pad).saturating_add(1));
        u32::try_from(self.data.len()).unwrap_or(u32::MAX).saturating_add(padding)
    }
}

/// The exclusive bit, stream dependency and weight of HEADERS (with PRIORITY) and
/// PRIORITY frames (sections 6.2, 6.3). RFC 9113 deprecates their meaning (section
/// 5.3.2; it is in RFC 7540 section 5.3) but keeps their format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamDependency {
    pub exclusive: bool,
    /// The stream this one depends on (31 bits).
    pub depends_on: u32,
    /// The weight as sent: the weight is this plus one (1 to 256).
    pub weight: u8,
}

/// HEADERS (section 6.2): opens a stream or carries trailers; the first fragment of a
/// field block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headers {
    pub stream_id: u32,
    pub end_stream: bool,
    /// No CONTINUATION follows: the fragment is the whole field block.
    pub end_headers: bool,
    /// The priority fields, when PRIORITY was set.
    pub priority: Option<StreamDependency>,
    /// The Pad Length when PADDED was set.
    pub pad_length: Option<u8>,
    /// The field block fragment, padding and priority fields removed.
    pub fragment: Bytes,
}

impl Headers {
    /// The stream error this frame calls for once its field block is decoded: a stream
    /// that depends on itself is a stream PROTOCOL_ERROR (RFC 7540 section 5.3.1,
    /// whose priority rules RFC 9113 section 5.3.2 keeps for interoperability).
    ///
    /// `decode` returns this frame rather than the error because the fragment must
    /// still reach HPACK (section 4.3): a block skipped would leave the connection's
    /// decoder out of step with the peer's encoder.
    pub fn stream_error(&self) -> Option<H2Error> {
        match self.priority {
            Some(dependency) if dependency.depends_on == self.stream_id => {
                Some(H2Error::Stream { stream: self.stream_id, code: ErrorCode::ProtocolError })
            }
            _ => None,
        }
    }
}

/// PRIORITY (section 6.3): a stream's priority, deprecated (section 5.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    pub stream_id: u32,
    pub dependency: StreamDependency,
}

/// RST_STREAM (section 6.4): the peer ends a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RstStream {
    pub stream_id: u32,
    pub code: ErrorCode,
}

/// PUSH_PROMISE (section 6.6): the server reserves a stream for a response it will
/// push; the first fragment of the promised request's field block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushPromise {
    /// The stream the promise is made on (the request it relates to).
    pub stream_id: u32,
    /// The stream reserved for the pushed response (31 bits, reserved bit masked).
    pub promised_stream_id: u32,
    pub end_headers: bool,
    pub pad_length: Option<u8>,
    /// The field block fragment, padding and promised stream id removed.
    pub fragment: Bytes,
}

/// PING (section 6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    /// ACK was set: this answers one of our PINGs.
    pub ack: bool,
    pub opaque_data: [u8; 8],
}

/// GOAWAY (section 6.8): the peer is closing the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// The highest stream id the peer may have acted on (reserved bit masked).
    pub last_stream_id: u32,
    pub code: ErrorCode,
    /// Diagnostic bytes, no semantics (may hold sensitive data: log with care).
    pub debug_data: Bytes,
}

/// WINDOW_UPDATE (section 6.9): more room in a flow-control window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowUpdate {
    /// The stream, or 0 for the connection's window.
    pub stream_id: u32,
    /// 1 to 2^31-1 (reserved bit masked).
    pub increment: u32,
}

/// CONTINUATION (section 6.10): a further fragment of a field block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    pub stream_id: u32,
    pub end_headers: bool,
    pub fragment: Bytes,
}
