//! A TLS session over a TCP socket with the socket's own non-blocking surface: reads
//! and writes that try now and say `WouldBlock`, and readiness. It serves
//! [`super::Stream::Tls`] for client and origin connections alike, after the handshake
//! (done by `tokio-rustls`) has finished.
//!
//! # Reads
//! A read hands out plaintext rustls has already decrypted; only when it has none does
//! it read records from the socket. Readiness says "ready" while decrypted plaintext
//! waits, so a request that arrived with the handshake's last flight is read at once,
//! without a socket event. A `WouldBlock` always comes from the socket, which tokio
//! then marks not ready, so the next wait is for new bytes.
//!
//! # Writes
//! Bytes count as written only once their records are on the socket. A write encrypts
//! what it is given and sends the records; if the socket fills midway, it reports
//! `WouldBlock` and remembers how many bytes it took. The caller's retry (with the same
//! bytes, as every write loop does) sends the rest of the records and is told those
//! bytes were written, without encrypting them again. So nothing sits in a buffer
//! after a caller thinks it sent it, and no flush step exists.
//!
//! # End of stream
//! A peer that closes without `close_notify` ends the stream like TCP's FIN: HTTP's
//! framing, not TLS, decides whether a message was complete.

use std::io::{self, IoSlice, Read, Write};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

use rustls::Connection;
use tokio::net::TcpStream;

/// The TLS library's error inside an I/O error from a TLS stream or handshake, if the
/// failure was TLS's (an alert, a certificate refused) rather than the socket's.
pub fn tls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// What the access log says of a client's TLS session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsFacts {
    /// `TLSv1.3` or `TLSv1.2`.
    pub version: &'static str,
    /// The negotiated ALPN protocol (`http/1.1`), or `-` when the client offered none.
    pub alpn: &'static str,
}

/// A TLS session and the socket under it.
pub struct TlsStream {
    tcp: TcpStream,
    session: Mutex<Session>,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream").field("tcp", &self.tcp).finish_non_exhaustive()
    }
}

/// The session's state beside rustls' own.
struct Session {
    conn: Connection,
    /// Plaintext bytes of the last `write` whose records are not all on the socket yet:
    /// reported written once they are.
    accepted: usize,
    /// Decrypted plaintext (or the end of the stream) waits to be read.
    readable: bool,
    /// The socket said end of stream.
    eof: bool,
    /// `close_notify` has been queued.
    closing: bool,
}

/// The socket seen as `io::Read`/`io::Write` that never waits, for rustls.
struct Nonblocking<'a>(&'a TcpStream);

impl Read for Nonblocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Nonblocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Session {
    /// Sends queued records until none is left; `WouldBlock` when the socket fills.
    fn send(&mut self, tcp: &TcpStream) -> io::Result<()> {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut Nonblocking(tcp))? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    /// Reads records from the socket once and decrypts them. `WouldBlock` when the
    /// socket had nothing.
    fn receive(&mut self, tcp: &TcpStream) -> io::Result<()> {
        if self.conn.read_tls(&mut Nonblocking(tcp))? == 0 {
            self.eof = true;
        }
        let state = self.conn.process_new_packets().map_err(|e| {
            // The alert rustls queued tells the peer why; best effort.
            let _ = self.send(tcp);
            io::Error::new(io::ErrorKind::InvalidData, e)
        })?;
        self.readable = state.plaintext_bytes_to_read() > 0 || self.eof || state.peer_has_closed();
        // Session housekeeping (a key update's answer) goes out now.
        if self.conn.wants_write() {
            match self.send(tcp) {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Plaintext now: `Ok(0)` at the end of the stream (with or without
    /// `close_notify`), `WouldBlock` when none is decrypted.
    fn plaintext(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.conn.reader().read(buf) {
            Ok(n) => {
                // rustls fills `buf` while it has plaintext: a short read drained it.
                if n < buf.len() && !self.eof {
                    self.readable = false;
                }
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                if self.eof {
                    return Ok(0);
                }
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}

impl TlsStream {
    /// The session that a finished handshake left on `tcp`.
    pub fn new(tcp: TcpStream, mut conn: Connection) -> TlsStream {
        // The handshake may have decrypted the first request already (it came with the
        // client's last flight). An error is kept by rustls and surfaces on the read.
        let readable = conn
            .process_new_packets()
            .map_or(true, |state| state.plaintext_bytes_to_read() > 0 || state.peer_has_closed());
        let session = Session { conn, accepted: 0, readable, eof: false, closing: false };
        TlsStream { tcp, session: Mutex::new(session) }
    }

    /// The TCP socket under the session.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    fn session(&self) -> MutexGuard<'_, Session> {
        // A poisoned lock only means a panic elsewhere; the session state is still
        // consistent (every change is one assignment).
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f` with the rustls connection (ALPN, version, SNI, resumption).
    pub fn with_connection<T>(&self, f: impl FnOnce(&Connection) -> T) -> T {
        f(&self.session().conn)
    }

    /// The session's version and ALPN protocol.
    pub fn facts(&self) -> TlsFacts {
        self.with_connection(|conn| TlsFacts {
            version: match conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "TLS",
            },
            alpn: match conn.alpn_protocol() {
                Some(b"http/1.1") => "http/1.1",
                Some(b"h2") => "h2",
                Some(_) => "other",
                None => "-",
            },
        })
    }

    /// Whether decrypted plaintext (or the end of the stream) waits to be read.
    pub fn has_buffered(&self) -> bool {
        self.session().readable
    }

    /// Reads plaintext: decrypted bytes if there are some, else one read of records
    /// from the socket. `WouldBlock` when the socket has nothing.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut s = self.session();
        // Bounded: each round either returns or consumes socket bytes, and the socket
        // says WouldBlock once it has none.
        loop {
            match s.plaintext(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return done,
            }
            s.receive(&self.tcp)?;
        }
    }

    /// Writes `buf`: see the module doc for when bytes count as written.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.write_with(buf.len(), |conn| conn.writer().write(buf))
    }

    /// [`TlsStream::try_write`] from several slices.
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let len = bufs.iter().fold(0usize, |sum, b| sum.saturating_add(b.len()));
        self.write_with(len, |conn| conn.writer().write_vectored(bufs))
    }

    fn write_with(
        &self,
        len: usize,
        encrypt: impl FnOnce(&mut Connection) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut s = self.session();
        s.send(&self.tcp)?;
        if s.accepted > 0 {
            let done = std::mem::take(&mut s.accepted);
            return Ok(done.min(len));
        }
        if len == 0 {
            return Ok(0);
        }
        let n = encrypt(&mut s.conn)?;
        match s.send(&self.tcp) {
            Ok(()) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                s.accepted = n;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Sends what is queued; `WouldBlock` while the socket is full.
    pub fn try_flush(&self) -> io::Result<()> {
        self.session().send(&self.tcp)
    }

    /// Queues `close_notify` (once) and sends it if the socket takes it now.
    pub fn close_notify(&self) -> io::Result<()> {
        let mut s = self.session();
        if !s.closing {
            s.closing = true;
            s.conn.send_close_notify();
        }
        s.send(&self.tcp)
    }

    /// Ready to read when plaintext waits, else when the socket is.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_buffered() {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }
}

#[cfg(test)]
mod tests;
