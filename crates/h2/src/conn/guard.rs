//! Flood limits of one connection: what a peer may make the engine do without asking
//! for anything in return. Each is a count against a bound; past it the connection
//! ends with ENHANCE_YOUR_CALM.
//!
//! - PING and SETTINGS (answered by the engine): token buckets, a burst and a rate per
//!   second (see "The numbers" below).
//! - Streams the peer reset before their answer (rapid reset, CVE-2023-44487).
//! - Streams the engine reset for the peer's errors.
//! - Streams refused for the concurrency limit before the peer acknowledged our
//!   SETTINGS: not its errors (it may not know the limit yet), but each still makes the
//!   engine write an RST_STREAM, so they have a bound of their own.
//! - Empty DATA frames without END_STREAM (CVE-2019-9518).
//! - Header blocks cut into more CONTINUATION frames, or grown larger, than any field
//!   section under the list limit needs (CONTINUATION floods, 2024).

use std::time::Instant;

use crate::error::ErrorCode;

/// The bounds; defaults suit any real client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub ping_burst: u32,
    pub pings_per_second: u32,
    pub settings_burst: u32,
    pub settings_per_second: u32,
    /// Streams reset by the peer before their answer, more than answered streams.
    pub max_peer_resets: u32,
    /// Streams the engine reset for the peer's errors.
    pub max_error_resets: u32,
    /// Streams refused for the concurrency limit before the peer acknowledged our
    /// SETTINGS.
    pub max_early_refusals: u32,
    /// Empty DATA frames without END_STREAM.
    pub max_empty_frames: u32,
    /// Frames one header block may be cut into.
    pub max_block_frames: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            ping_burst: 50,
            pings_per_second: 10,
            settings_burst: 50,
            settings_per_second: 5,
            max_peer_resets: 100,
            max_error_resets: 256,
            // A client with a queue of requests may open them all at once before our
            // SETTINGS arrive (the h2 crate does): thousands are honest, and 10,000
            // RST_STREAM frames are 130 KB.
            max_early_refusals: 10_000,
            max_empty_frames: 100,
            max_block_frames: 64,
        }
    }
}

/// The counts of one connection.
#[derive(Debug)]
pub(super) struct Guard {
    limits: Limits,
    pings: Bucket,
    settings: Bucket,
    peer_resets: u32,
    error_resets: u32,
    early_refusals: u32,
    empty_frames: u32,
}

const CALM: ErrorCode = ErrorCode::EnhanceYourCalm;

impl Guard {
    pub fn new(limits: Limits) -> Guard {
        Guard {
            pings: Bucket::new(limits.ping_burst, limits.pings_per_second),
            settings: Bucket::new(limits.settings_burst, limits.settings_per_second),
            peer_resets: 0,
            error_resets: 0,
            early_refusals: 0,
            empty_frames: 0,
            limits,
        }
    }

    pub fn on_ping(&mut self) -> Result<(), ErrorCode> {
        self.pings.take(Instant::now()).then_some(()).ok_or(CALM)
    }

    pub fn on_settings(&mut self) -> Result<(), ErrorCode> {
        self.settings.take(Instant::now()).then_some(()).ok_or(CALM)
    }

    /// A PING may answer a frame we wrote (gRPC's BDP pings): one more in the bucket.
    pub fn on_frame_written(&mut self) {
        self.pings.give();
    }

    pub fn on_peer_reset(&mut self) -> Result<(), ErrorCode> {
        self.peer_resets = self.peer_resets.saturating_add(1);
        (self.peer_resets <= self.limits.max_peer_resets).then_some(()).ok_or(CALM)
    }

    /// A stream answered: it offsets one reset, so a long-lived connection that
    /// cancels some of many streams is never cut off.
    pub fn on_answered(&mut self) {
        self.peer_resets = self.peer_resets.saturating_sub(1);
    }

    pub fn on_error_reset(&mut self) -> Result<(), ErrorCode> {
        self.error_resets = self.error_resets.saturating_add(1);
        (self.error_resets <= self.limits.max_error_resets).then_some(()).ok_or(CALM)
    }

    pub fn on_early_refusal(&mut self) -> Result<(), ErrorCode> {
        self.early_refusals = self.early_refusals.saturating_add(1);
        (self.early_refusals <= self.limits.max_early_refusals).then_some(()).ok_or(CALM)
    }

    pub fn on_empty_frame(&mut self) -> Result<(), ErrorCode> {
        self.empty_frames = self.empty_frames.saturating_add(1);
        (self.empty_frames <= self.limits.max_empty_frames).then_some(()).ok_or(CALM)
    }

    /// A header block `len` bytes long so far, in `frames` frames. Its encoded size may
    /// exceed the list it decodes to only by HPACK's overhead; twice the list limit
    /// plus a frame is past anything honest.
    pub fn check_block(&self, len: usize, frames: usize, max_list: u32) -> Result<(), ErrorCode> {
        let max_len = usize::try_from(max_list)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            .saturating_add(16_384);
        if frames > self.limits.max_block_frames || len > max_len {
            return Err(CALM);
        }
        Ok(())
    }
}

/// A token bucket: `burst` tokens, refilled at `per_second`.
#[derive(Debug)]
struct Bucket {
    burst: u32,
    per_second: u32,
    tokens: f64,
    at: Option<Instant>,
}

impl Bucket {
    fn new(burst: u32, per_second: u32) -> Bucket {
        Bucket { burst, per_second, tokens: f64::from(burst), at: None }
    }

    fn take(&mut self, now: Instant) -> bool {
        if let Some(at) = self.at {
            let refill =
                now.saturating_duration_since(at).as_secs_f64() * f64::from(self.per_second);
            self.tokens = (self.tokens + refill).min(f64::from(self.burst));
        }
        self.at = Some(now);
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }

    fn give(&mut self) {
        self.tokens = (self.tokens + 1.0).min(f64::from(self.burst));
    }
}
