//! What the TLS listeners count: handshakes by version and by full or resumed, and
//! failed handshakes by reason, with the families they are exported as.
//!
//! Failed handshakes come from scanners and broken clients by the thousand, so each is
//! logged at debug only; at info a line at most once per [`LOG_EVERY`] says how many
//! failed since the last one and why the latest did.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use rustls::{HandshakeKind, ProtocolVersion, ServerConnection};
use tokio::time::Instant;

use crate::metrics::{Family, Report, Writer};

/// At most one info line about failed handshakes per this long.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// Why a client's handshake did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not finished within `client_header`.
    Timeout,
    /// The client sent an HTTP request to the HTTPS port.
    PlainHttp,
    /// The client closed the connection mid-handshake.
    Closed,
    /// The socket failed (a reset).
    Io,
    /// No certificate for the name the client asked for (or none at all yet).
    NoCertificate,
    /// No protocol version in common (an SSLv3 or TLS 1.0/1.1 client).
    ProtocolVersion,
    /// No cipher suite, key exchange group or signature scheme in common.
    Incompatible,
    /// The client offered ALPN protocols holdfast does not speak.
    NoAlpn,
    /// The client sent an alert: it refused the certificate, most often.
    ClientAlert,
    /// Bytes that are no TLS handshake, or out of order.
    BadMessage,
    /// Another error of the TLS library.
    Other,
}

impl HandshakeFailure {
    /// Every reason, in the order the counts are kept and exported.
    pub const ALL: [HandshakeFailure; 11] = [
        HandshakeFailure::Timeout,
        HandshakeFailure::PlainHttp,
        HandshakeFailure::Closed,
        HandshakeFailure::Io,
        HandshakeFailure::NoCertificate,
        HandshakeFailure::ProtocolVersion,
        HandshakeFailure::Incompatible,
        HandshakeFailure::NoAlpn,
        HandshakeFailure::ClientAlert,
        HandshakeFailure::BadMessage,
        HandshakeFailure::Other,
    ];

    /// A stable snake_case name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::PlainHttp => "plain_http",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::Io => "io",
            HandshakeFailure::NoCertificate => "no_certificate",
            HandshakeFailure::ProtocolVersion => "protocol_version",
            HandshakeFailure::Incompatible => "incompatible",
            HandshakeFailure::NoAlpn => "no_alpn",
            HandshakeFailure::ClientAlert => "client_alert",
            HandshakeFailure::BadMessage => "bad_message",
            HandshakeFailure::Other => "other",
        }
    }

    /// The reason of a handshake that `tokio-rustls` ended with `e`.
    pub fn of_io(e: &std::io::Error) -> HandshakeFailure {
        if let Some(tls) = crate::net::tls_error(e) {
            return HandshakeFailure::of_tls(tls);
        }
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof => HandshakeFailure::Closed,
            _ => HandshakeFailure::Io,
        }
    }

    /// The reason of a handshake rustls refused with `e`.
    pub fn of_tls(e: &rustls::Error) -> HandshakeFailure {
        use rustls::{Error, PeerIncompatible};
        match e {
            // rustls requires signature_algorithms (a TLS 1.2 extension, which TLS 1.2
            // clients send and TLS 1.3 requires) before it looks at the versions offered,
            // so a TLS 1.0/1.1 ClientHello fails there; one that has it fails with
            // `Tls12NotOffered`.
            Error::PeerIncompatible(
                PeerIncompatible::ServerDoesNotSupportTls12Or13
                | PeerIncompatible::SupportedVersionsExtensionRequired
                | PeerIncompatible::Tls12NotOffered
                | PeerIncompatible::Tls12NotOfferedOrEnabled
                | PeerIncompatible::Tls13RequiredForQuic
                | PeerIncompatible::SignatureAlgorithmsExtensionRequired,
            ) => HandshakeFailure::ProtocolVersion,
            Error::PeerIncompatible(_) => HandshakeFailure::Incompatible,
            Error::NoApplicationProtocol => HandshakeFailure::NoAlpn,
            Error::AlertReceived(_) => HandshakeFailure::ClientAlert,
            Error::InvalidMessage(_)
            | Error::InappropriateMessage { .. }
            | Error::InappropriateHandshakeMessage { .. }
            | Error::PeerMisbehaved(_)
            | Error::DecryptError => HandshakeFailure::BadMessage,
            Error::NoCertificatesPresented => HandshakeFailure::NoCertificate,
            Error::General(text) if text.contains("certificate") => HandshakeFailure::NoCertificate,
            _ => HandshakeFailure::Other,
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Counts of the TLS listeners, process-wide.
#[derive(Debug, Default)]
pub struct TlsMetrics {
    /// By version (TLS 1.2, 1.3) and session (full, resumed).
    handshakes: [[AtomicU64; 2]; 2],
    failures: [AtomicU64; 11],
    log: Mutex<LogState>,
}

/// What the throttled info line needs.
#[derive(Debug, Default)]
struct LogState {
    last_line: Option<Instant>,
    /// Failures since the last line.
    since: u64,
}

impl TlsMetrics {
    /// Counts a finished handshake.
    pub fn handshake(&self, conn: &ServerConnection) {
        let version = usize::from(conn.protocol_version() == Some(ProtocolVersion::TLSv1_3));
        let resumed = usize::from(conn.handshake_kind() == Some(HandshakeKind::Resumed));
        if let Some(n) = self.handshakes.get(version).and_then(|v| v.get(resumed)) {
            n.fetch_add(1, Relaxed);
        }
    }

    /// Counts a failed handshake and logs it (see the module doc).
    pub fn failed(&self, reason: HandshakeFailure, peer: SocketAddr) {
        if let Some(n) = self.failures.get(reason.index()) {
            n.fetch_add(1, Relaxed);
        }
        tracing::debug!(client = %peer, reason = reason.as_str(), "TLS handshake failed");
        if let Some(count) = self.due_line(Instant::now()) {
            tracing::info!(
                count,
                last_reason = reason.as_str(),
                last_client = %peer,
                "TLS handshakes failed since the last report (each is logged at debug)"
            );
        }
    }

    /// Counts one failure; the number to report when a line is due at `now`.
    fn due_line(&self, now: Instant) -> Option<u64> {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.since = log.since.saturating_add(1);
        let due = log.last_line.is_none_or(|at| now.saturating_duration_since(at) >= LOG_EVERY);
        if !due {
            return None;
        }
        log.last_line = Some(now);
        Some(std::mem::take(&mut log.since))
    }

    /// Failed handshakes so far for `reason`.
    pub fn failures(&self, reason: HandshakeFailure) -> u64 {
        self.failures.get(reason.index()).map_or(0, |n| n.load(Relaxed))
    }

    pub fn snapshot(&self) -> TlsSnapshot {
        let mut handshakes = Vec::new();
        for (v, version) in ["1.2", "1.3"].into_iter().enumerate() {
            for (s, session) in ["full", "resumed"].into_iter().enumerate() {
                let n =
                    self.handshakes.get(v).and_then(|x| x.get(s)).map_or(0, |n| n.load(Relaxed));
                handshakes.push((version, session, n));
            }
        }
        let failures =
            HandshakeFailure::ALL.iter().map(|r| (r.as_str(), self.failures(*r))).collect();
        TlsSnapshot { handshakes, failures }
    }
}

const HANDSHAKES: Family = Family {
    name: "holdfast_tls_handshakes",
    help: "Client TLS handshakes completed, by TLS version and session (full or resumed).",
};
const FAILURES: Family = Family {
    name: "holdfast_tls_handshake_failures",
    help: "Client TLS handshakes that failed, by reason.",
};

/// The TLS listeners' counts at one moment.
#[derive(Debug, Clone, Default)]
pub struct TlsSnapshot {
    pub handshakes: Vec<(&'static str, &'static str, u64)>,
    pub failures: Vec<(&'static str, u64)>,
}

impl Report for TlsSnapshot {
    fn report(&self, out: &mut Writer<'_>) -> std::fmt::Result {
        out.counter(
            &HANDSHAKES,
            self.handshakes.iter().map(|(v, s, n)| ([("version", *v), ("session", *s)], *n)),
        )?;
        out.counter(&FAILURES, self.failures.iter().map(|(r, n)| ([("reason", *r)], *n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_failures_logs_one_line_a_minute() {
        let metrics = TlsMetrics::default();
        let start = Instant::now();
        let mut lines = Vec::new();
        for i in 0..50u32 {
            let now = start + Duration::from_secs(u64::from(i) * 2);
            if let Some(n) = metrics.due_line(now) {
                lines.push(n);
            }
        }
        // 0 s: the first line (1 failure); 60 s: the 30 failures since; 98 s: none due.
        assert_eq!(lines, vec![1, 30]);
    }

    #[test]
    fn rustls_errors_map_to_reasons() {
        use rustls::{AlertDescription, Error, PeerIncompatible};
        let cases = [
            (Error::PeerIncompatible(PeerIncompatible::NoCipherSuitesInCommon), "incompatible"),
            (
                Error::PeerIncompatible(PeerIncompatible::SupportedVersionsExtensionRequired),
                "protocol_version",
            ),
            // A TLS 1.0/1.1 ClientHello, without and with signature_algorithms.
            (
                Error::PeerIncompatible(PeerIncompatible::SignatureAlgorithmsExtensionRequired),
                "protocol_version",
            ),
            (Error::PeerIncompatible(PeerIncompatible::Tls12NotOffered), "protocol_version"),
            (Error::NoApplicationProtocol, "no_alpn"),
            (Error::AlertReceived(AlertDescription::BadCertificate), "client_alert"),
            (Error::General("no server certificate chain resolved".into()), "no_certificate"),
        ];
        for (error, reason) in cases {
            assert_eq!(HandshakeFailure::of_tls(&error).as_str(), reason, "{error:?}");
        }
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert_eq!(HandshakeFailure::of_io(&eof), HandshakeFailure::Closed);
        let wrapped =
            std::io::Error::new(std::io::ErrorKind::InvalidData, Error::NoApplicationProtocol);
        assert_eq!(HandshakeFailure::of_io(&wrapped), HandshakeFailure::NoAlpn);
    }
}
