//! Telling a client's PING and SETTINGS frames from a flood of them. The `h2` crate
//! answers every one and shows none to its user, so the frame headers are followed in
//! the connection's bytes as they pass ([`FrameWatch`], which copes with any split of
//! the bytes), each non-ACK PING and SETTINGS is charged to a token bucket
//! ([`Bucket`]), and a client past its bucket trips the connection's [`FloodAlarm`]:
//! `serve` then sends GOAWAY `ENHANCE_YOUR_CALM` and closes it.
//!
//! # The numbers
//! What real clients send:
//! - Browsers, curl, nghttp and h2load send SETTINGS once at the start (some once more
//!   to change a window) and PING rarely, if ever (Chromium checks an idle connection
//!   with one before reusing it).
//! - gRPC keepalive pings are at least 10 s apart (servers refuse faster ones).
//! - gRPC's flow-control estimation (BDP) pings while data arrives, one outstanding at
//!   a time. grpc-core (Python's grpcio, C++, Ruby) waits at least 100 ms between them:
//!   at most 10 a second; measured, grpcio sent 23 PINGs and 2 SETTINGS over 15 s of
//!   downloads, uploads and streaming through holdfast (5 in its busiest second).
//!   grpc-go and grpc-java ping once per round trip while data arrives (until the
//!   estimate reaches its cap), which on a fast network is thousands a second; but
//!   such a ping answers DATA that holdfast wrote after the previous ping's ACK, so
//!   between two of them holdfast has written at least one DATA frame. grpc-go sends
//!   SETTINGS each time its estimate grows the window (by at least a third, from
//!   64 KiB to at most 16 MiB: about 20 over a connection's life).
//!
//! Hence, per connection: PING, a burst of [`PING_BURST`] and [`PINGS_PER_SECOND`],
//! and one more for every DATA or HEADERS frame holdfast writes (up to the burst);
//! SETTINGS, a burst of [`SETTINGS_BURST`] and [`SETTINGS_PER_SECOND`]. A flood of
//! thousands a second is cut off within its first hundred frames; a client within
//! these rates costs holdfast an ACK per frame.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use tokio::sync::Notify;
use tokio::time::Instant;

/// Non-ACK PINGs a client may send at once.
pub const PING_BURST: u32 = 50;
/// Non-ACK PINGs a second a client may keep sending: grpc-core's BDP pings at their
/// fastest (100 ms apart).
pub const PINGS_PER_SECOND: u32 = 10;
/// Non-ACK SETTINGS a client may send at once: grpc-go's window updates over a
/// connection's life, twice over.
pub const SETTINGS_BURST: u32 = 50;
/// Non-ACK SETTINGS a second a client may keep sending.
pub const SETTINGS_PER_SECOND: u32 = 5;

/// Frame types (RFC 9113, 6) the watch acts on.
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
/// The ACK flag of SETTINGS and PING.
const ACK: u8 = 0x1;

/// Bytes of a frame header: 24-bit length, type, flags, 32-bit stream id.
const HEADER_BYTES: usize = 9;

/// The header of one frame, as far as the watch needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    pub kind: u8,
    pub flags: u8,
    pub len: u32,
}

/// Where a watched byte stream is.
#[derive(Debug, Clone, Copy)]
enum At {
    /// Bytes to pass over: the client preface, or a frame's payload.
    Skip(u32),
    /// In a frame header: the bytes of it so far.
    Header { got: usize, head: [u8; HEADER_BYTES] },
}

/// Follows the frame headers of one direction of an HTTP/2 connection, whatever the
/// split of the bytes it is fed. It trusts nothing: lengths up to 2^24 - 1 are passed
/// over as they come, and bytes that are not HTTP/2 make the `h2` crate end the
/// connection anyway.
#[derive(Debug, Clone)]
pub struct FrameWatch {
    at: At,
}

impl FrameWatch {
    /// A client's bytes: the preface (`PRI * HTTP/2.0...`, RFC 9113, 3.4), then frames.
    pub fn client() -> FrameWatch {
        let preface = u32::try_from(crate::http2::PREFACE.len()).unwrap_or(u32::MAX);
        FrameWatch { at: At::Skip(preface) }
    }

    /// A server's bytes: frames from the first byte.
    pub fn server() -> FrameWatch {
        FrameWatch { at: At::Header { got: 0, head: [0; HEADER_BYTES] } }
    }

    /// Takes the next `bytes` of the stream, calling `on` for each frame header
    /// completed in them.
    pub fn feed(&mut self, mut bytes: &[u8], mut on: impl FnMut(FrameHead)) {
        while !bytes.is_empty() {
            match &mut self.at {
                At::Skip(left) => {
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(bytes.len());
                    bytes = bytes.get(take..).unwrap_or_default();
                    *left = left.saturating_sub(u32::try_from(take).unwrap_or(u32::MAX));
                    if *left == 0 {
                        self.at = At::Header { got: 0, head: [0; HEADER_BYTES] };
                    }
                }
                At::Header { got, head } => {
                    let want = HEADER_BYTES.saturating_sub(*got).min(bytes.len());
                    let (part, rest) = bytes.split_at_checked(want).unwrap_or((bytes, &[]));
                    if let Some(slot) = head.get_mut(*got..got.saturating_add(want)) {
                        slot.copy_from_slice(part);
                    }
                    *got = got.saturating_add(want);
                    bytes = rest;
                    if *got == HEADER_BYTES {
                        let [l0, l1, l2, kind, flags, ..] = *head;
                        let len = u32::from_be_bytes([0, l0, l1, l2]);
                        on(FrameHead { kind, flags, len });
                        self.at = match len {
                            0 => At::Header { got: 0, head: [0; HEADER_BYTES] },
                            n => At::Skip(n),
                        };
                    }
                }
            }
        }
    }
}

/// Thousandths of a token: refills are exact to the millisecond.
const MILLI: u64 = 1000;

/// A token bucket: `burst` at once, refilled at `per_second`, and by credit.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Thousandths of a token.
    milli: u64,
    burst: u32,
    per_second: u32,
    refilled: Instant,
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn new(burst: u32, per_second: u32, now: Instant) -> Bucket {
        Bucket { milli: u64::from(burst).saturating_mul(MILLI), burst, per_second, refilled: now }
    }

    fn full(&self) -> u64 {
        u64::from(self.burst).saturating_mul(MILLI)
    }

    /// Takes a token at `now`; false when there is none.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled);
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        if ms > 0 {
            // per_second tokens a second: per_second thousandths a millisecond.
            let earned = ms.saturating_mul(u64::from(self.per_second));
            self.milli = self.milli.saturating_add(earned).min(self.full());
            self.refilled = now;
        }
        match self.milli.checked_sub(MILLI) {
            Some(left) => {
                self.milli = left;
                true
            }
            None => false,
        }
    }

    /// Gives one token back (up to the burst).
    pub fn credit(&mut self) {
        self.milli = self.milli.saturating_add(MILLI).min(self.full());
    }
}

/// Which frames a client flooded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flooded {
    Ping,
    Settings,
}

impl Flooded {
    pub fn as_str(self) -> &'static str {
        match self {
            Flooded::Ping => "PING",
            Flooded::Settings => "SETTINGS",
        }
    }
}

/// Wakes a connection's serve loop once its client has flooded.
#[derive(Debug, Default)]
pub struct FloodAlarm {
    notify: Notify,
    /// 0 until tripped, then 1 + the [`Flooded`] kind.
    kind: AtomicU8,
}

impl FloodAlarm {
    /// Resolves once the alarm has tripped (at once if it has).
    pub async fn tripped(&self) {
        self.notify.notified().await;
    }

    /// What the client flooded, once tripped.
    pub fn flooded(&self) -> Option<Flooded> {
        match self.kind.load(Relaxed) {
            1 => Some(Flooded::Ping),
            2 => Some(Flooded::Settings),
            _ => None,
        }
    }

    fn trip(&self, what: Flooded) {
        let kind = match what {
            Flooded::Ping => 1,
            Flooded::Settings => 2,
        };
        self.kind.store(kind, Relaxed);
        // Stores a permit if the loop is not waiting: it sees it at its next look.
        self.notify.notify_one();
    }
}

/// One client connection's watch: the frames it reads and writes, the buckets, and the
/// alarm it trips.
#[derive(Debug)]
pub struct ControlWatch {
    read: FrameWatch,
    written: FrameWatch,
    pings: Bucket,
    settings: Bucket,
    tripped: bool,
    alarm: std::sync::Arc<FloodAlarm>,
}

impl ControlWatch {
    pub fn new(alarm: std::sync::Arc<FloodAlarm>) -> ControlWatch {
        let now = Instant::now();
        ControlWatch {
            read: FrameWatch::client(),
            written: FrameWatch::server(),
            pings: Bucket::new(PING_BURST, PINGS_PER_SECOND, now),
            settings: Bucket::new(SETTINGS_BURST, SETTINGS_PER_SECOND, now),
            tripped: false,
            alarm,
        }
    }

    /// Bytes read from the client: its non-ACK PINGs and SETTINGS are charged.
    pub fn on_read(&mut self, bytes: &[u8]) {
        if self.tripped {
            return;
        }
        let (pings, settings) = (&mut self.pings, &mut self.settings);
        let mut flooded = None;
        // The clock is read only for a PING or SETTINGS, not for every read.
        let mut now = None;
        self.read.feed(bytes, |frame| {
            let bucket = match frame.kind {
                PING if frame.flags & ACK == 0 => (&mut *pings, Flooded::Ping),
                SETTINGS if frame.flags & ACK == 0 => (&mut *settings, Flooded::Settings),
                _ => return,
            };
            let at = *now.get_or_insert_with(Instant::now);
            if !bucket.0.take(at) && flooded.is_none() {
                flooded = Some(bucket.1);
            }
        });
        if let Some(what) = flooded {
            self.tripped = true;
            self.alarm.trip(what);
        }
    }

    /// Bytes written to the client: each DATA or HEADERS frame gives a PING back, for
    /// the client that pings once per answer it gets (gRPC's BDP estimation).
    pub fn on_written(&mut self, bytes: &[u8]) {
        if self.tripped {
            return;
        }
        let pings = &mut self.pings;
        self.written.feed(bytes, |frame| {
            if frame.kind == DATA || frame.kind == HEADERS {
                pings.credit();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut out = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 0];
        out.extend_from_slice(payload);
        out
    }

    /// A client's bytes: the preface, then frames of every kind around PINGs and
    /// SETTINGS, with payloads that look like frame headers.
    fn client_bytes() -> Vec<u8> {
        let mut bytes = crate::http2::PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, &[0, 4, 0, 1, 0, 0]));
        bytes.extend(frame(SETTINGS, ACK, &[]));
        bytes.extend(frame(HEADERS, 0x5, &[0x82, 0x86, 0x84]));
        // A DATA payload that would read as a PING header if the length were lost.
        bytes.extend(frame(DATA, 0, &[0, 0, 8, PING, 0, 0, 0, 0, 0, 1, 2]));
        bytes.extend(frame(PING, 0, &[7; 8]));
        bytes.extend(frame(PING, ACK, &[7; 8]));
        bytes.extend(frame(0x8, 0, &[0, 0, 1, 0]));
        bytes.extend(frame(DATA, 0, &vec![PING; 70_000]));
        bytes.extend(frame(PING, 0, &[8; 8]));
        bytes
    }

    #[test]
    fn frame_headers_are_found_however_the_bytes_are_split() {
        let bytes = client_bytes();
        let mut want = Vec::new();
        FrameWatch::client().feed(&bytes, |f| want.push(f));
        let kinds: Vec<(u8, u8)> = want.iter().map(|f| (f.kind, f.flags)).collect();
        assert_eq!(
            kinds,
            [
                (SETTINGS, 0),
                (SETTINGS, ACK),
                (HEADERS, 0x5),
                (DATA, 0),
                (PING, 0),
                (PING, ACK),
                (0x8, 0),
                (DATA, 0),
                (PING, 0)
            ]
        );
        assert_eq!(want.get(7).map(|f| f.len), Some(70_000));
        for split in [1, 2, 3, 5, 8, 9, 10, 17, 24, 25, 1000, 65_536] {
            let mut got = Vec::new();
            let mut watch = FrameWatch::client();
            for piece in bytes.chunks(split) {
                watch.feed(piece, |f| got.push(f));
            }
            assert_eq!(got, want, "split every {split}");
        }
    }

    #[test]
    fn any_bytes_are_taken_without_a_panic() {
        // Bytes that are not HTTP/2, with lengths up to the largest.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut bytes = Vec::new();
        for _ in 0..100_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            bytes.push(seed.to_le_bytes()[0]);
        }
        bytes.extend([0xff; 64]);
        let alarm = Arc::new(FloodAlarm::default());
        let mut watch = ControlWatch::new(Arc::clone(&alarm));
        for piece in bytes.chunks(7) {
            watch.on_read(piece);
            watch.on_written(piece);
        }
    }

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(5, 10, start);
        for i in 0..5 {
            assert!(bucket.take(start), "token {i} of the burst");
        }
        assert!(!bucket.take(start), "past the burst");
        // 10 a second: one every 100 ms.
        assert!(!bucket.take(start + Duration::from_millis(99)));
        assert!(bucket.take(start + Duration::from_millis(100)));
        assert!(!bucket.take(start + Duration::from_millis(100)));
        // Refills stop at the burst.
        let later = start + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| bucket.take(later)).count(), 5);
        bucket.credit();
        assert!(bucket.take(later));
        assert!(!bucket.take(later));
    }

    #[test]
    fn a_ping_flood_trips_the_alarm_and_answered_pings_do_not() {
        let alarm = Arc::new(FloodAlarm::default());
        let mut watch = ControlWatch::new(Arc::clone(&alarm));
        let mut bytes = crate::http2::PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, &[]));
        watch.on_read(&bytes);
        let data = frame(DATA, 0, &[b'x'; 100]);
        let ping = frame(PING, 0, &[1; 8]);
        // A ping per DATA frame written, many times the burst: a gRPC download.
        for _ in 0..PING_BURST * 10 {
            watch.on_written(&data);
            watch.on_read(&ping);
        }
        assert_eq!(alarm.flooded(), None);
        // ACKs cost nothing.
        for _ in 0..PING_BURST * 10 {
            watch.on_read(&frame(PING, ACK, &[1; 8]));
        }
        assert_eq!(alarm.flooded(), None);
        // Pings with nothing written between them run out (twice the burst: the
        // clock's refill during the test is far less).
        for _ in 0..PING_BURST * 2 {
            watch.on_read(&ping);
        }
        assert_eq!(alarm.flooded(), Some(Flooded::Ping));
    }

    #[test]
    fn a_settings_flood_trips_the_alarm() {
        let alarm = Arc::new(FloodAlarm::default());
        let mut watch = ControlWatch::new(Arc::clone(&alarm));
        let mut bytes = crate::http2::PREFACE.to_vec();
        for _ in 0..SETTINGS_BURST {
            bytes.extend(frame(SETTINGS, 0, &[0, 4, 0, 1, 0, 0]));
            bytes.extend(frame(SETTINGS, ACK, &[]));
        }
        watch.on_read(&bytes);
        assert_eq!(alarm.flooded(), None);
        // Data written gives PINGs back, not SETTINGS.
        for _ in 0..SETTINGS_BURST {
            watch.on_written(&frame(DATA, 0, &[0; 10]));
            watch.on_read(&frame(SETTINGS, 0, &[]));
        }
        assert_eq!(alarm.flooded(), Some(Flooded::Settings));
    }
}
