//! What a listener's [`Site`](super::Site) is configured with: the time limits on both
//! sides of an exchange (`[timeouts]`) and the limits on what a client may send
//! (`[limits]`), each default with the reason for its value.
//!
//! The client connection reads its share (head limits, `client_header`, `client_idle`)
//! from the same `Site` the proxy reads the rest from, so these types live here, where
//! both can see them without the proxy depending on the client.

use std::time::Duration;

/// Time limits on both sides of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub response_header: Duration,
    pub read: Duration,
    pub client_header: Duration,
    /// How long a client connection may sit idle between requests.
    pub client_idle: Duration,
    /// The head start a client gets to move a body before its average rate counts
    /// (see `proxy::pace`).
    pub client_body: Duration,
    /// The head start a client gets, in place of `client_body`, once holdfast holds the
    /// rest of its response and the origin is done with it (see `proxy::backlog`).
    pub client_buffered: Duration,
    /// After SIGTERM or Ctrl-C: how long requests in flight may take to finish. The
    /// instance's shutdown reads it, not the proxy; it is written in `[timeouts]` with
    /// the rest.
    pub drain: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: DEFAULT_CONNECT_TIMEOUT,
            response_header: DEFAULT_RESPONSE_HEADER_TIMEOUT,
            read: DEFAULT_READ_TIMEOUT,
            client_header: DEFAULT_CLIENT_HEADER_TIMEOUT,
            client_idle: DEFAULT_CLIENT_IDLE_TIMEOUT,
            client_body: DEFAULT_CLIENT_BODY_GRACE,
            client_buffered: DEFAULT_CLIENT_BUFFERED_GRACE,
            drain: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// Default [`Timeouts::connect`], the upstream TCP connect. A backend on the same host or
/// network answers a SYN in milliseconds; 5 s covers a loaded kernel and a retransmitted
/// SYN (1 s, then 3 s).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Default [`Timeouts::response_header`]: from the end of the request to the response
/// head (an upload that is still moving restarts the clock). 60 s matches nginx's
/// `proxy_read_timeout`, so slow endpoints that work behind nginx work here.
pub const DEFAULT_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);

/// Default [`Timeouts::read`]: the longest pause between two reads of an upstream
/// response body (nginx: 60 s).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Default [`Timeouts::client_header`]: a client must send a complete request head within
/// this time, counted from the first byte of the head (and, on a new connection, from the
/// accept), which bounds what slow-header clients (slowloris) can hold. nginx's
/// `client_header_timeout` is 60 s; 10 s is generous for any real client.
pub const DEFAULT_CLIENT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Default [`Timeouts::client_idle`]: how long a client's keep-alive connection may wait
/// for its next request. nginx keeps idle clients 75 s, AWS load balancers 60 s; an idle
/// client connection costs holdfast a socket and a few hundred bytes, no buffer.
pub const DEFAULT_CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default [`Timeouts::client_body`]: the head start a client gets to move a request or
/// response body before its average rate counts (see
/// [`ClientLimits::body_min_bytes_per_second`]). nginx's `client_body_timeout` and
/// `send_timeout` are 60 s, but per read or write, so a byte a minute keeps a connection
/// forever; here the 60 s is a total a trickle cannot renew.
pub const DEFAULT_CLIENT_BODY_GRACE: Duration = Duration::from_secs(60);

/// Default [`Timeouts::client_buffered`]: once the origin has sent a whole response and
/// holdfast holds what the client has not taken, the client has 15 s of waiting left at
/// most (earned back by reading, as with `client_body`). It no longer holds the origin,
/// only holdfast's memory or disk, but a client that takes nothing for that long is not
/// reading at all: a browser on a working link takes a byte within seconds, and an
/// attacker that opens streams and never grants window is cut in a quarter of the
/// minute `client_body` gives.
pub const DEFAULT_CLIENT_BUFFERED_GRACE: Duration = Duration::from_secs(15);

/// Default [`Timeouts::drain`]: after SIGTERM, how long requests in flight get to finish
/// before holdfast exits anyway. 30 s is Kubernetes' default termination grace period.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Which bodies holdfast holds for a side slower than the other, on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffering {
    /// Response buffering: while a client reads slower than its origin sends, holdfast
    /// holds the rest of the response (memory, then a temporary file) so the upstream
    /// connection is free once the origin is done. Responses that must stream (event
    /// streams, gRPC, `X-Accel-Buffering: no`) pass through whatever this says.
    pub responses: bool,
    /// Request buffering: the whole request body is read before anything goes to the
    /// origin, so a slow upload holds no upstream connection (nginx's
    /// `proxy_request_buffering`).
    pub requests: bool,
}

/// Default [`Buffering`]: responses are buffered, as nginx does by default
/// (`proxy_buffering on`): a slow client must not hold an application worker. Requests
/// are not: streaming uploads reach the origin as they arrive, and an origin that wants
/// whole bodies asks for them per route.
impl Default for Buffering {
    fn default() -> Self {
        Buffering { responses: true, requests: false }
    }
}

/// Limits on what a client may send in a request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    pub max_headers: usize,
    pub max_header_bytes: usize,
    /// Bytes of the request line (414 beyond).
    pub max_line_bytes: usize,
    /// Request body bytes (413 beyond); `None`: no limit.
    pub max_body: Option<u64>,
    /// The average rate a client must keep a body moving at, after `client_body`.
    pub body_min_bytes_per_second: u64,
    /// Streams one HTTP/2 client connection may have open at once.
    pub h2_max_concurrent_streams: u32,
}

/// Default [`ClientLimits::h2_max_concurrent_streams`]: RFC 9113 asks for at least 100;
/// browsers open a few dozen at most.
pub const DEFAULT_H2_MAX_CONCURRENT_STREAMS: u32 = 128;

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_headers: DEFAULT_MAX_REQUEST_HEADERS,
            max_header_bytes: DEFAULT_MAX_REQUEST_HEADER_BYTES,
            max_line_bytes: DEFAULT_MAX_REQUEST_LINE_BYTES,
            max_body: DEFAULT_CLIENT_MAX_BODY,
            body_min_bytes_per_second: DEFAULT_CLIENT_BODY_MIN_BYTES_PER_SECOND,
            h2_max_concurrent_streams: DEFAULT_H2_MAX_CONCURRENT_STREAMS,
        }
    }
}

/// Default [`ClientLimits::max_headers`], request header lines. Browsers send about 20;
/// 100 is many servers' limit.
pub const DEFAULT_MAX_REQUEST_HEADERS: usize = 100;

/// Default [`ClientLimits::max_header_bytes`], bytes of request head (request line and
/// headers). nginx allows 4 x 8 kB buffers.
pub const DEFAULT_MAX_REQUEST_HEADER_BYTES: usize = 32 * 1024;

/// Default [`ClientLimits::max_line_bytes`], bytes of the request line (method, target,
/// version). nginx's `large_client_header_buffers` allows 8 kB; longer URLs get 414.
pub const DEFAULT_MAX_REQUEST_LINE_BYTES: usize = 8 * 1024;

/// Default [`ClientLimits::max_body`], the request body size: no limit, as in HAProxy and
/// Envoy. nginx's 1 MB default breaks uploads behind it; `client_max_body` sets one where
/// it is wanted.
pub const DEFAULT_CLIENT_MAX_BODY: Option<u64> = None;

/// Default [`ClientLimits::body_min_bytes_per_second`]: after the head start, a client
/// must move a body at an average of at least this many bytes per second, counting only
/// the time holdfast waits on it (Apache httpd's `mod_reqtimeout` asks for 500). 1 KiB/s
/// is slower than any working connection, and a slow-reading or slow-sending attacker
/// holding a connection gets a minute at most.
pub const DEFAULT_CLIENT_BODY_MIN_BYTES_PER_SECOND: u64 = 1024;
