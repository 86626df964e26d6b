//! The request path: one client request in, one upstream exchange, one response out.
//!
//! For each request: route it to an upstream group, pick a backend and rewrite the
//! head for it ([`Proxy::prepare`]), lease a connection (pooled or new), send the head
//! and body (once more on a new connection if a pooled one failed under the request
//! and `retry` allows it; to another backend of the group when the connect failed, or
//! the backend failed a request that may be sent again), read the response head, and
//! stream the response to the client. The connection goes back to its pool when the
//! exchange ended cleanly; otherwise it is closed.
//!
//! The files split deciding from moving bytes: this file starts a request
//! ([`Proxy::prepare`]); `exchange` holds the rules (retry, failover, early answers,
//! upgrades, accounting, settling the connection); `wire` is the seam a protocol
//! implements, and `h1` (over `transfer`) is HTTP/1.1 on both sides. `record`
//! observes each request for metrics and the access log and decides nothing.
//!
//! One task does all of it: the client connection's. It owns the upstream connection
//! for the length of the exchange, so a request costs no channel, no second task and no
//! wake-up between them.
//!
//! The request path carries bytes from clients and origins: this module and its
//! submodules use no indexing and no unchecked arithmetic (the lints below deny them;
//! tests may), so no input can make them panic.

#![deny(clippy::string_slice, clippy::indexing_slicing, clippy::arithmetic_side_effects)]

pub mod answers;
mod backlog;
mod body_copy;
pub mod error;
mod exchange;
pub mod forwarded;
mod h1;
mod h1_to_h2;
mod h2;
pub mod local;
pub mod pace;
pub mod record;
pub mod retry;
pub mod settings;
mod stream_backlog;
pub mod transfer;
mod wire;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::Method;
use tokio::time::Instant;

use answers::Answers;
use error::{ProxyError, ProxyErrorKind};
use forwarded::TrustedProxies;
pub(crate) use h1::H1Wire;
pub(crate) use h2::H2Wire;
use pace::PaceConfig;
use record::{Delivery, Record};
use retry::Decision;
pub use settings::{Buffering, ClientLimits, Timeouts};
use transfer::UploadLimits;

use crate::http1::encode::{self, Forwarding, PeerText};
use crate::http1::{Framing, Version};
use crate::http2::encode as h2_encode;
use crate::message::RequestHead;
use crate::net::{self, InBuf, Stream, Timer, TlsFacts};
use crate::route::Router;
use crate::spool::Spools;
use crate::telemetry::access_log::AccessLog;
use crate::upstream::settings::Speaks;
use crate::upstream::share::Claimant;
use crate::upstream::{Assigned, Backend, Upstream};
use local::LocalAnswer;
pub use local::{Hsts, LocalRules};

/// Serves requests for one listener, by the routes and settings of the config in force.
pub struct Proxy {
    site: ArcSwap<Site>,
    access_log: Option<AccessLog>,
    /// Every response holdfast makes itself, by group, reason and status, across
    /// listeners.
    answers: Arc<Answers>,
}

/// What a listener serves with: its routes and the settings of one config. A reload
/// replaces it whole; a request keeps the one it started with.
pub struct Site {
    pub router: Router<Destination>,
    /// The listener's own upstream group, which counts requests refused before they
    /// could be routed.
    pub fallback: Option<Arc<Upstream>>,
    pub timeouts: Timeouts,
    pub limits: ClientLimits,
    pub trusted: TrustedProxies,
    /// ACME challenges, the redirect to HTTPS and HSTS.
    pub local: LocalRules,
    /// A cleartext listener accepts HTTP/2 with prior knowledge too.
    pub h2c: bool,
    /// Where buffered bodies are held, shared by every listener.
    pub spools: Arc<Spools>,
}

/// Where a route sends requests, and the limits that go with the route.
pub struct Destination {
    pub upstream: Arc<Upstream>,
    /// Request body bytes allowed (413 beyond); `None`: no limit.
    pub max_body: Option<u64>,
    pub buffering: Buffering,
    /// The site's, or the route's own where it sets any.
    pub timeouts: Timeouts,
    /// The route's own redirect to HTTPS and HSTS, over the listener's (`None`: the
    /// listener's).
    pub local: Option<Arc<LocalRules>>,
    /// The route's own access log (`Some(None)`: none), over the listener's.
    pub access_log: Option<Option<AccessLog>>,
}

/// The client side of an exchange: its socket and the bytes read from it that have
/// not been used (the rest of the request body, pipelined requests).
pub struct Client<'a> {
    pub stream: &'a mut Stream,
    pub buf: &'a mut InBuf,
    /// The connection's timer, for the waits of the exchange.
    pub timer: &'a mut Timer,
}

/// How an exchange ended for the client connection.
#[derive(Debug, Clone, Copy)]
pub struct Done {
    pub next: Next,
    /// When it ended: the client connection's idle time counts from here.
    pub at: Instant,
}

/// A request whose head has been read and rewritten for its backend: what it is,
/// where it goes, who serves it, how far it got, and the record that reports on it.
pub struct Outbound {
    request: RequestFacts,
    route: RouteChoice,
    /// The backend the request goes to; `None` when there is none (no route when
    /// `route.upstream` is `None` too, else no server that may take it).
    backend: Option<Assigned>,
    progress: Progress,
    /// Who the request is for, as the backends' shares count it.
    claimant: Claimant,
    /// The head an HTTP/2 origin gets, when the backend speaks HTTP/2 or may.
    h2_head: H2Head,
    /// Observes the request for metrics and the access log; decides nothing.
    record: Record,
}

/// The head of a request to a backend that speaks HTTP/2 (or may: `auto` before its
/// first TLS handshake), written once by [`Proxy::prepare`]. Boxed: an HTTP/1.1
/// exchange carries only the tag.
enum H2Head {
    /// The backend speaks HTTP/1.1: the head is HTTP/1.1 text.
    None,
    Ready(Box<h2_encode::OriginHead>),
    /// The request has something HTTP/2 cannot carry: holdfast's side fails it.
    Failed(Box<h2_encode::NotH2>),
}

/// What the request head said, as the exchange needs it.
struct RequestFacts {
    method: Method,
    version: Version,
    framing: Framing,
    upgrade: bool,
    /// The client's connection may carry another request after this one.
    keep_alive: bool,
}

/// Where the request goes and under which settings.
struct RouteChoice {
    /// The settings in force when the request arrived.
    site: Arc<Site>,
    /// The group the request was routed to (`None`: no route matched).
    upstream: Option<Arc<Upstream>>,
    /// Request body bytes allowed on its route.
    max_body: Option<u64>,
    /// Which bodies are buffered on its route.
    buffering: Buffering,
    /// The timeouts of its route.
    timeouts: Timeouts,
    /// Its route's redirect and HSTS rules, where the route has its own.
    rules: Option<Arc<LocalRules>>,
    /// The listener answers the request itself (no route is looked up). Boxed: rare,
    /// and every request's `Outbound` is moved a few times.
    local: Option<Box<LocalAnswer>>,
}

/// How far the exchange got with the client's side of it.
struct Progress {
    /// The client asked for `100 Continue` and has not had it yet.
    expect_continue: bool,
    /// The request body has been read from the client to its end.
    body_consumed: bool,
}

/// What the client connection does after an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read the next request.
    KeepOpen,
    Close,
    /// Close, but first let the client finish sending what it was sending (a request
    /// body holdfast did not read), so the response is not lost to a reset.
    Linger,
}

impl Proxy {
    /// Each request is recorded into the metrics of its upstream group, and logged to
    /// `access_log` if there is one; the answers holdfast makes itself (404s for
    /// requests no route matches included) count in `answers`.
    pub fn new(site: Site, access_log: Option<AccessLog>, answers: Arc<Answers>) -> Self {
        Proxy { site: ArcSwap::from_pointee(site), access_log, answers }
    }

    /// The routes and settings in force now.
    pub fn site(&self) -> Arc<Site> {
        self.site.load_full()
    }

    /// `client_header` of the settings in force now: read at every accept, without
    /// taking a reference to the whole site.
    pub fn client_header(&self) -> std::time::Duration {
        self.site.load().timeouts.client_header
    }

    /// Serves new requests with `site` (a reload); requests in flight finish with the
    /// one they started with.
    pub fn replace(&self, site: Site) {
        self.site.store(Arc::new(site));
    }

    /// Starts a request: routes it, picks its backend and writes the head the origin
    /// gets in the protocol the backend speaks: HTTP/1.1 text into `head` (see
    /// [`encode::upstream_request`]), or an HTTP/2 head kept in the [`Outbound`] (see
    /// [`h2_encode::origin_head`]). `source` is the head of an HTTP/2 client's stream,
    /// whose fields `req`'s are slices of.
    pub fn prepare(
        &self,
        req: &RequestHead<'_, '_>,
        client: SocketAddr,
        peer: &PeerText,
        tls: Option<TlsFacts>,
        source: Option<&crate::http2::request::ClientHead>,
        head: &mut Vec<u8>,
    ) -> Outbound {
        let site = self.site.load_full();
        let routed = match site.router.only() {
            Some(only) => Some(only),
            None => site.router.find(req.host, req.path.route_path()),
        };
        let rules = routed.and_then(|d| d.local.clone());
        let local = rules.as_deref().unwrap_or(&site.local).answer(req).map(Box::new);
        let destination = routed.filter(|_| local.is_none());
        let upstream = destination.map(|d| Arc::clone(&d.upstream));
        let max_body = destination.map_or(site.limits.max_body, |d| d.max_body);
        let buffering = destination.map_or_else(Buffering::default, |d| d.buffering);
        let timeouts = routed.map_or(site.timeouts, |d| d.timeouts);
        let log = match routed.and_then(|d| d.access_log.as_ref()) {
            Some(own) => own.as_ref(),
            None => self.access_log.as_ref(),
        };
        let mut record = Record::begin(req, client, tls, log);
        let backend = upstream.as_ref().and_then(|u| pick(u, &[], record.started()));
        if head.capacity() == 0 {
            *head = net::scratch();
        }
        head.clear();
        let mut claimant = Claimant { address: address_key(client.ip()), connection: 0 };
        let mut h2_head = H2Head::None;
        if let Some(backend) = &backend {
            record.chose(backend.backend());
            let trusted = site.trusted.contains(client.ip());
            let real_ip = trusted.then(|| {
                let forwarded_for = req
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
                    .map(|h| h.value);
                let real = site.trusted.real_client(client.ip(), forwarded_for);
                claimant.address = address_key(real);
                real.to_string()
            });
            let real_ip = real_ip.as_ref().map_or(peer.ip(), String::as_bytes);
            let fwd = Forwarding { peer, trusted, real_ip, backend: backend.addr };
            let backend = backend.backend();
            h2_head = match backend.speaks() {
                Speaks::Http1 => {
                    encode::upstream_request(req, &fwd, head);
                    H2Head::None
                }
                // HTTP/2, or not known yet (`auto`, before a TLS handshake told).
                speaks @ (Speaks::H2 | Speaks::Either) => {
                    // An upgrade has no HTTP/2 form to make the HTTP/1.1 head from, should
                    // ALPN pick HTTP/1.1: that head is written now.
                    if speaks == Speaks::Either && req.upgrade.is_some() {
                        encode::upstream_request(req, &fwd, head);
                    }
                    match h2_encode::origin_head(req, &fwd, source, backend.conns.is_tls()) {
                        Ok(h2) => H2Head::Ready(Box::new(h2)),
                        Err(e) => H2Head::Failed(Box::new(e)),
                    }
                }
            };
        }
        Outbound {
            request: RequestFacts {
                method: Method::from_bytes(req.method.as_bytes()).unwrap_or(Method::GET),
                version: req.version,
                framing: req.framing,
                upgrade: req.upgrade.is_some(),
                keep_alive: req.keep_alive(),
            },
            route: RouteChoice { upstream, site, max_body, buffering, timeouts, rules, local },
            backend,
            progress: Progress {
                expect_continue: req.expect_continue,
                body_consumed: req.framing.is_bodyless(),
            },
            claimant,
            h2_head,
            record,
        }
    }

    /// Counts and logs a request refused before it could be parsed or forwarded; the
    /// caller answers it.
    pub fn refused(&self, client: SocketAddr, status: u16, reason: &'static str) {
        let site = self.site.load();
        let mut record = Record::refused(client, self.access_log.as_ref());
        self.answers.refusals.record(reason);
        self.answers.record(
            site.fallback.as_ref().map(|u| &u.name),
            refusal_reason(status),
            status,
        );
        record.failed(reason);
        let delivery = Delivery { status, bytes: 0, ended: Some(Instant::now()) };
        record.finish(site.fallback.as_deref(), delivery);
    }
}

impl Outbound {
    /// The request came on a stream of the HTTP/2 client connection numbered
    /// `connection`: the access log says so, and the backends' shares count the
    /// connection's streams together.
    pub fn over_http2(&mut self, connection: u64) {
        self.record.over_http2();
        self.claimant.connection = connection;
    }

    /// The `Strict-Transport-Security` line for the response, unless the origin's has
    /// one (`origin_has`, asked only when the listener has a line to add).
    fn hsts(&self, origin_has: impl FnOnce() -> bool) -> &[u8] {
        let rules = self.route.rules.as_deref().unwrap_or(&self.route.site.local);
        rules.hsts_line(origin_has)
    }

    /// The backend the request goes to; only called once one was picked.
    fn backend(&self) -> &Arc<Backend> {
        self.backend.as_ref().expect("the request has a backend").backend()
    }
}

/// The least loaded backend of `upstream` that may take a request, by its balancer,
/// other than those at the addresses in `tried`; counted as assigned until the request
/// ends.
fn pick(upstream: &Upstream, tried: &[SocketAddr], now: Instant) -> Option<Assigned> {
    upstream.with_state(|m| {
        let i = if tried.is_empty() {
            m.choose(&[], now)?
        } else {
            let exclude: Vec<usize> = (m.backends.iter().enumerate())
                .filter(|(_, b)| tried.contains(&b.addr))
                .map(|(i, _)| i)
                .collect();
            m.choose(&exclude, now)?
        };
        Some(Assigned::new(Arc::clone(m.backends.get(i)?)))
    })
}

/// The key a client's address counts under in the backends' shares: an IPv4 address,
/// or the /64 an IPv6 address is in (what one subscriber is usually given), so that a
/// client does not get more shares by using more addresses of its own network.
fn address_key(ip: std::net::IpAddr) -> u64 {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => u64::from(u32::from(v4)),
        std::net::IpAddr::V6(v6) => {
            let [a, b, c, d, ..] = v6.segments();
            // Tagged, so no /64 shares a key with an IPv4 address.
            (u64::from(a) << 48 | u64::from(b) << 32 | u64::from(c) << 16 | u64::from(d)) | 1 << 63
        }
    }
}

/// The reason a refused request is counted under in `holdfast_errors`, from its
/// status (the rule it broke is counted apart, in `holdfast_refused_requests`).
fn refusal_reason(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        405 => "method_not_allowed",
        408 => "request_timeout",
        414 => "uri_too_long",
        417 => "expectation_failed",
        431 => "headers_too_large",
        501 => "not_implemented",
        _ => "refused",
    }
}

/// The failure of a request to its backend, as the client hears of it.
fn error(out: &Outbound, kind: ProxyErrorKind, reused: bool) -> ProxyError {
    let upstream =
        out.route.upstream.as_ref().map_or_else(|| Arc::from("-"), |u| Arc::clone(&u.name));
    ProxyError { upstream, backend: out.backend().addr, kind, reused }
}

/// Counts a retry decision for `backend`.
fn record(backend: &Backend, decision: Decision) {
    let counter = match decision {
        Decision::Replay => &backend.metrics.retries,
        Decision::NotReplayed(_) => &backend.metrics.not_replayed,
        Decision::Fail => return,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The client's pace rule under `site`.
fn pace_config(site: &Site) -> PaceConfig {
    PaceConfig {
        grace: site.timeouts.client_body,
        min_rate_bytes_per_second: site.limits.body_min_bytes_per_second,
    }
}

/// The limits the request body of `out` moves under.
fn upload_limits(out: &Outbound) -> UploadLimits {
    let site = &out.route.site;
    UploadLimits {
        upstream_stall: out.route.timeouts.response_header,
        client_stall: out.route.timeouts.read,
        pace: pace_config(site),
        max_body: out.route.max_body,
        max_trailer_bytes: site.limits.max_header_bytes,
    }
}
