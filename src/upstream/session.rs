//! One checkout on a backend, whatever it speaks: the [`Session`] a request is sent on
//! is a pooled HTTP/1.1 connection of its own, or a stream on a pooled HTTP/2
//! connection. The protocol is decided here, from what the backend speaks (configured,
//! or negotiated by ALPN on its first TLS connection), and nowhere else on the origin
//! side.

use std::time::Duration;

use holdfast_pool::Priority;
use tokio::time::Instant;

use super::h2::StreamLease;
use super::settings::Speaks;
use super::{Backend, Lease, LeaseError};

/// Where one request goes on a backend.
pub enum Session {
    /// An HTTP/1.1 connection, the request's alone until it is settled.
    H1(Lease),
    /// A stream on an HTTP/2 connection that other requests share.
    H2(StreamLease),
}

impl Session {
    /// Whether the connection carried a request before this one.
    pub fn is_reused(&self) -> bool {
        match self {
            Session::H1(lease) => lease.is_reused(),
            Session::H2(lease) => lease.is_reused(),
        }
    }
}

/// What a request asks of [`Backend::checkout`].
#[derive(Debug, Clone, Copy)]
pub struct Want {
    /// A new HTTP/1.1 connection, not an idle one: a pooled one just failed under the
    /// request.
    pub fresh: bool,
    /// When the request asked for a connection: an idle one is checked against it.
    pub asked: Instant,
    /// The request's place in the HTTP/1.1 queue (its client's share of a crowded
    /// backend, `share`).
    pub priority: Priority,
    /// HTTP/1.1 only: the request's head was written as HTTP/1.1 text for a backend
    /// that spoke HTTP/1.1 when it arrived.
    pub h1_only: bool,
    /// How long a new connection may take to open.
    pub connect: Duration,
}

impl Backend {
    /// A session for one request, and how long opening a connection took (zero for a
    /// pooled one): a stream on an HTTP/2 connection when the backend speaks HTTP/2 (or
    /// may, and its ALPN then says it does), else an HTTP/1.1 connection: an idle
    /// pooled one (unless `fresh`; a request of second priority takes one only while
    /// the backend is not crowded), a new one, or a place in the queue.
    pub async fn checkout(&self, want: Want) -> Result<(Session, Duration), LeaseError> {
        if !want.h1_only && self.speaks() != Speaks::Http1 {
            let started = Instant::now();
            if let Some(stream) = self.lease_stream(want.connect).await? {
                return Ok((Session::H2(stream), started.elapsed()));
            }
        }
        let second = want.priority == Priority::Second;
        if !want.fresh && (!second || self.conns.second_may_take()) {
            if let Some(lease) = self.conns.try_idle(want.asked) {
                return Ok((Session::H1(lease), Duration::ZERO));
            }
        }
        let started = if want.fresh { Instant::now() } else { want.asked };
        let lease = if want.fresh {
            self.conns.connect_fresh(want.connect).await?
        } else {
            self.conns.lease(want.connect, want.priority).await?
        };
        Ok((Session::H1(lease), started.elapsed()))
    }
}
