//! A differential test of the HTTP/1.1 request path. Random requests, valid and
//! mutated (see `support::fuzz`), go through holdfast to an origin whose HTTP/1.1 parser
//! is not holdfast's: hyper's server for most cases, Node's strict llhttp for some. The
//! same bytes also go straight to a second hyper server, the reference, which says what a
//! correct parser finds in them. After each case, an honest request on another client
//! connection checks that the upstream connection holdfast pooled is still in step.
//!
//! Invariants, checked after every case:
//! 1. The origin never sees a malformed stream: nothing its parser refuses, no request
//!    head with other than one `Host` line (RFC 9112, 3.2), and no trailer field that
//!    frames or routes a message (RFC 9110, 6.5.1), which a parser may not check.
//! 2. The origin never sees more requests than holdfast accepted: no request the
//!    reference did not find in the same bytes (a smuggled one), and no more requests
//!    than the case has request lines.
//! 3. Every honest request gets its own response (`x-path` names it), and no response on
//!    the case's connection belongs to another request.
//! 4. holdfast never closes a connection without an answer except where the RFC allows
//!    it (no complete request head arrived), answers every request it passed on, and
//!    never leaves a connection hanging.
//! 5. No panic in holdfast's code.
//!
//! Cases run one after another through one holdfast, so each case's pooled upstream
//! connection carries the next honest request. A failure prints the seed, the case, its
//! bytes, what came back, and the case cut down to the fewest bytes that still break the
//! same invariant.
//!
//! Knobs (environment variables):
//! - `HOLDFAST_DIFF_SEED`: the stream of cases (default `HOLDFAST_TEST_SEED`, the seed
//!   every seeded test takes, or else a fixed one, so CI is deterministic; `random` takes
//!   one from the clock); printed at the start and on failure.
//! - `HOLDFAST_DIFF_CASES`: cases against hyper (default 3000); Node gets an eighth as
//!   many more (`HOLDFAST_DIFF_NODE_CASES` overrides).
//! - `HOLDFAST_DIFF_KEEP_GOING=1`: run every case, then report each distinct failure once
//!   (cut down) instead of stopping at the first.
//!
//! The longer run:
//! `HOLDFAST_DIFF_CASES=200000 HOLDFAST_DIFF_SEED=random cargo test --release --test it differential -- --nocapture`
//!
//! Without Node.js the Node half fails when `CI=true` and is skipped otherwise.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::{Mutex, Once, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::support::fuzz::{self, escape, Case};
use crate::support::node::{NodeOrigin, NodeStats};
use crate::support::origin::RecordedRequest;
use crate::support::{config_to, skip_or_fail, Origin, OriginOptions, Proxy};

mod check;
mod replies;

use check::*;
use replies::*;

/// The seed when none is given: any fixed value keeps CI runs identical.
const DEFAULT_SEED: u64 = 0x0013_d1ff;
const DEFAULT_CASES: u64 = 3000;
/// How long one connection of a case may take to answer and close.
const CASE_DEADLINE: Duration = Duration::from_secs(3);
/// How long the origin may take to close the connections holdfast closed.
const SETTLE_DEADLINE: Duration = Duration::from_secs(1);
/// Most attempts, and longest time, spent cutting a failing case down.
const SHRINK_ATTEMPTS: usize = 400;
const SHRINK_TIME: Duration = Duration::from_secs(30);

#[test]
fn hyper_origin_sees_only_what_holdfast_accepted() {
    let settings = Settings::get();
    let thread = "diff-hyper";
    runtime(thread).block_on(async {
        let origin = Origin::start().await;
        run(settings, Backend::Hyper(origin), 0..settings.cases, thread).await;
    });
}

#[test]
fn node_origin_sees_only_what_holdfast_accepted() {
    let settings = Settings::get();
    if !node_available() {
        skip_or_fail("the Node half of the differential test needs `node` on PATH");
        return;
    }
    let thread = "diff-node";
    // Cases after the hyper ones, so the two halves test different requests.
    let cases = settings.cases..settings.cases + settings.node_cases;
    runtime(thread).block_on(async {
        let node = NodeOrigin::start("strict_origin.js", &[]).await;
        let methods = node.text("/__methods").await.lines().map(str::to_string).collect();
        let backend = Backend::Node { node: Box::new(node), methods };
        run(settings, backend, cases, thread).await;
    });
}

#[test]
fn cases_are_reproducible_and_a_third_stay_valid() {
    let a: Vec<Vec<u8>> = (0..200).map(|i| fuzz::case(7, i).bytes).collect();
    let b: Vec<Vec<u8>> = (0..200).map(|i| fuzz::case(7, i).bytes).collect();
    assert_eq!(a, b, "same seed, same cases");
    assert_ne!(fuzz::case(7, 3).bytes, fuzz::case(8, 3).bytes, "another seed, other cases");
    let valid = (0..1000).filter(|i| fuzz::case(7, *i).mutations.is_empty()).count();
    assert!((250..450).contains(&valid), "{valid} of 1000 cases valid");
}

#[test]
fn a_request_the_reference_did_not_find_counts_as_smuggled() {
    // The check itself, on made-up observations: an origin that saw the smuggled
    // request, where the reference saw only the one in plain sight.
    let case = Case {
        index: 5,
        bytes: b"POST /c5-r0 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
        paths: vec!["/c5-r0".into()],
        mutations: Vec::new(),
    };
    let reply = |path: &str| Reply { status: 200, headers: vec![("x-path".into(), path.into())] };
    let observed = Observed {
        reference: vec!["/c5-r0".into()],
        reference_refused: Vec::new(),
        received: Received { bytes: Vec::new(), end: End::Closed },
        replies: vec![reply("/c5-r0"), reply("/smuggled-5")],
        honest: Ok(reply("/honest-5")),
        seen: ["/c5-r0", "/smuggled-5", "/honest-5"]
            .map(|p| Arrival { method: "GET".into(), path: p.into(), host_lines: 1 })
            .into(),
        malformed: Vec::new(),
        panics: Vec::new(),
    };
    let broken: Vec<Invariant> = check(&case, &observed).iter().map(|v| v.invariant).collect();
    assert_eq!(broken, [Invariant::Smuggled, Invariant::TooManyRequests]);
}

#[test]
fn responses_are_read_leniently() {
    let head = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-path: /a\r\n\r\n";
    let chunked = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nHT\r\n0\r\n\r\n";
    let close = "HTTP/1.1 400 Bad Request\r\n\r\nHTTP/1.1 200 OK";
    // A response to HEAD (no body after its head), a chunked one, one ended by the close.
    let bytes = format!("{head}{head}hello{chunked}junk{close}");
    let statuses: Vec<u16> = replies(bytes.as_bytes()).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 400]);
    assert_eq!(replies(bytes.as_bytes())[0].header("X-Path"), Some("/a"));
    assert!(complete_reply(head.as_bytes()).is_none(), "the body has not come");
}

#[test]
fn targets_compare_without_scheme_authority_and_fragment() {
    assert_eq!(comparable("/a?b"), "/a?b");
    assert_eq!(comparable("http://h.test/a?b#f"), "/a?b");
    assert_eq!(comparable("HTTt://H/a"), "/a");
    assert_eq!(comparable("http://h?q=1"), "/?q=1");
    assert_eq!(comparable("http://h"), "/");
    assert_eq!(comparable("*"), "*");
}

#[test]
fn a_complete_head_ends_in_an_empty_line() {
    assert!(has_complete_head(b"\r\nGET / HTTP/1.1\r\n\r\n"));
    assert!(has_complete_head(b"GET / HTTP/1.1\nHost: a\n\n"));
    assert!(!has_complete_head(b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n"));
    assert!(!has_complete_head(b"GET / HTTP/1.1\r\r"));
}

/// What the environment asks for.
struct Settings {
    seed: u64,
    cases: u64,
    node_cases: u64,
    keep_going: bool,
}

impl Settings {
    /// The settings of this run: read once, so both halves share a `random` seed.
    fn get() -> &'static Settings {
        static SETTINGS: OnceLock<Settings> = OnceLock::new();
        SETTINGS.get_or_init(Settings::from_env)
    }

    fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let number = |name: &str, text: &str| -> u64 {
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={text:?} is not a number"))
        };
        let seed = match var("HOLDFAST_DIFF_SEED").or_else(|| var("HOLDFAST_TEST_SEED")).as_deref()
        {
            None => DEFAULT_SEED,
            Some("random") => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            Some(text) => number("HOLDFAST_DIFF_SEED or HOLDFAST_TEST_SEED", text),
        };
        let cases =
            var("HOLDFAST_DIFF_CASES").map_or(DEFAULT_CASES, |t| number("HOLDFAST_DIFF_CASES", &t));
        let node_cases = var("HOLDFAST_DIFF_NODE_CASES")
            .map_or(cases.div_ceil(8), |t| number("HOLDFAST_DIFF_NODE_CASES", &t));
        let keep_going = var("HOLDFAST_DIFF_KEEP_GOING").is_some_and(|v| v != "0");
        Settings { seed, cases, node_cases, keep_going }
    }

    /// The command that runs the same cases again.
    fn reproduce(&self) -> String {
        format!(
            "HOLDFAST_DIFF_SEED={:#x} HOLDFAST_DIFF_CASES={} HOLDFAST_DIFF_NODE_CASES={} \
             cargo test --test it differential",
            self.seed, self.cases, self.node_cases
        )
    }
}

/// A runtime whose worker threads are named `thread`, so a panic in holdfast's tasks can
/// be told apart from one in the other half of the test running alongside.
fn runtime(thread: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(thread)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn node_available() -> bool {
    std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

// ---------------------------------------------------------------------------------------
// Panics

/// Panics in holdfast's own code (`src/`, `crates/`), with the thread they happened on.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Records holdfast's panics; the hook before it (the test harness's) still runs.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(at) = info.location() {
                if at.file().starts_with("src/") || at.file().starts_with("crates/") {
                    let thread = std::thread::current().name().unwrap_or("").to_string();
                    let payload = info.payload();
                    let message = payload
                        .downcast_ref::<&str>()
                        .copied()
                        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                        .unwrap_or("");
                    PANICS.lock().unwrap().push((thread, format!("{message} at {at}")));
                }
            }
            previous(info);
        }));
    });
}

/// The panics on `thread`'s workers recorded since the last call, taken away.
fn take_panics(thread: &str) -> Vec<String> {
    let mut all = PANICS.lock().unwrap();
    let (mine, others): (Vec<_>, Vec<_>) = all.drain(..).partition(|(t, _)| t == thread);
    *all = others;
    mine.into_iter().map(|(_, text)| text).collect()
}
// ---------------------------------------------------------------------------------------
// Origins

/// The origin behind holdfast.
enum Backend {
    Hyper(Origin),
    Node {
        node: Box<NodeOrigin>,
        /// The methods llhttp knows: it refuses any other, though any token is a valid
        /// method (RFC 9110, 9.1).
        methods: Vec<String>,
    },
}

/// A request as the origin received it.
#[derive(Debug, Clone)]
struct Arrival {
    method: String,
    /// Path and query, as [`comparable`] gives them.
    path: String,
    host_lines: usize,
}

impl Arrival {
    fn of(req: &RecordedRequest) -> Arrival {
        Arrival {
            method: req.method.to_string(),
            // As the origin's `x-path` has it: `/` for a target without a path.
            path: comparable(req.uri.path_and_query().map_or("/", |p| p.as_str())),
            host_lines: req.headers.get_all(http::header::HOST).iter().count(),
        }
    }
}

/// A request target as the origins can be compared on it: path and query, without a
/// scheme and authority, without a fragment, `/` for an empty path. hyper's `Uri` and
/// Node's `url` tell the same target apart in these ways only.
fn comparable(target: &str) -> String {
    let target = target.split('#').next().unwrap_or(target);
    let scheme_end = target.find("://").filter(|at| {
        target[..*at].bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    });
    let rest = match scheme_end {
        Some(at) => {
            let after = &target[at + 3..];
            after.find(['/', '?']).map_or("", |path| &after[path..])
        }
        None => target,
    };
    match rest {
        "" => "/".to_string(),
        query if query.starts_with('?') => format!("/{query}"),
        path => path.to_string(),
    }
}

/// What the origin saw since the last look.
#[derive(Default)]
struct News {
    arrivals: Vec<Arrival>,
    malformed: Vec<String>,
}

/// How far the previous look got, for origins that only list everything.
#[derive(Default)]
struct Cursor {
    requests: usize,
    malformed: usize,
}

impl Backend {
    fn addr(&self) -> SocketAddr {
        match self {
            Backend::Hyper(origin) => origin.addr(),
            Backend::Node { node, .. } => node.addr(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Hyper(_) => "hyper",
            Backend::Node { .. } => "node",
        }
    }

    /// Connections open at the origin now (Node does not count those that asked it for
    /// its lists).
    async fn open(&self) -> u64 {
        match self {
            Backend::Hyper(origin) => origin.accepted().saturating_sub(origin.closed()) as u64,
            Backend::Node { node, .. } => node.stats().await.counter("open"),
        }
    }

    /// Whether the origin's parser may refuse a request the reference accepted because
    /// of its method: llhttp knows a fixed list of methods, and takes `PRI` for the start
    /// of HTTP/2.
    fn refuses_method(&self, method: &str) -> bool {
        match self {
            Backend::Hyper(_) => false,
            Backend::Node { methods, .. } => {
                method == "PRI" || !methods.iter().any(|m| m == method)
            }
        }
    }

    /// The requests and malformed streams the origin saw after `cursor`; moves it on.
    async fn news(&self, cursor: &mut Cursor) -> News {
        match self {
            Backend::Hyper(origin) => {
                let arrivals = origin.take_requests().iter().map(Arrival::of).collect();
                let malformed = origin.malformed_errors_since(cursor.malformed);
                cursor.malformed += malformed.len();
                News { arrivals, malformed }
            }
            Backend::Node { node, .. } => {
                let listed = node.text(&format!("/__requests?from={}", cursor.requests)).await;
                let arrivals: Vec<Arrival> = listed.lines().map(node_arrival).collect();
                cursor.requests += arrivals.len();
                let stats: NodeStats = node.stats().await;
                let mut malformed = Vec::new();
                if stats.counter("malformed") as usize > cursor.malformed {
                    let listed = node.text(&format!("/__errors?from={}", cursor.malformed)).await;
                    malformed = listed.lines().map(str::to_string).collect();
                    cursor.malformed += malformed.len();
                }
                News { arrivals, malformed }
            }
        }
    }
}

/// A `/__requests` line of the Node origin: the method, the target in hex and the number
/// of Host lines, separated by spaces.
fn node_arrival(line: &str) -> Arrival {
    let mut words = line.split(' ');
    let method = words.next().unwrap_or("");
    let hex = words.next().unwrap_or("");
    let host_lines = words.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    let path = comparable(&String::from_utf8_lossy(&bytes));
    Arrival { method: method.to_string(), path, host_lines }
}
// ---------------------------------------------------------------------------------------
// The run

/// holdfast in front of the origin, and the reference beside it.
struct Harness {
    backend: Backend,
    reference: Origin,
    proxy: Proxy,
    cursor: Cursor,
    /// Connections open at the origin that no holdfast holds and that outlasted a
    /// settle (see [`Harness::settle`]).
    stray: u64,
    /// The worker threads' name, for panics.
    thread: &'static str,
}

impl Harness {
    async fn start(backend: Backend, thread: &'static str) -> Harness {
        let options = OriginOptions { half_close: true, ..OriginOptions::default() };
        let reference = Origin::start_with(options).await;
        let proxy = Proxy::start(config_to(backend.addr())).await;
        let mut cursor = Cursor::default();
        backend.news(&mut cursor).await;
        Harness { backend, reference, proxy, cursor, stray: 0, thread }
    }

    /// A new holdfast, so a failure does not leave its pool to the cases after it.
    async fn restart_proxy(&mut self) {
        let fresh = Proxy::start(config_to(self.backend.addr())).await;
        let old = std::mem::replace(&mut self.proxy, fresh);
        old.shutdown(Duration::ZERO).await;
        self.settle("a new holdfast started").await;
        self.backend.news(&mut self.cursor).await;
        take_panics(self.thread);
    }

    /// Waits (boundedly) until the origin has no more connections open than holdfast
    /// holds: a request head holdfast wrote just before it gave up on a connection
    /// reaches the origin a moment later, and belongs to this case, not the next. The
    /// origin closes such a connection only after reading what was on it.
    ///
    /// Connections the origin keeps that no holdfast holds any more (one a replaced
    /// holdfast left mid-exchange, which the origin keeps until its own timeouts) would
    /// make every case wait out the deadline; after one wait they count as `stray`.
    async fn settle(&mut self, after: &str) {
        let deadline = Instant::now() + SETTLE_DEADLINE;
        let held = |proxy: &Proxy| {
            let pool = proxy.pool();
            pool.idle + pool.active
        };
        // Bounded by the deadline; each round waits 1 ms.
        loop {
            let open = self.backend.open().await;
            let excess = open.saturating_sub(held(&self.proxy));
            self.stray = self.stray.min(excess);
            if excess <= self.stray {
                return;
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "differential ({}): after {after}, the origin keeps {excess} connection(s) \
                     holdfast does not hold; counted as stray from now on",
                    self.backend.name()
                );
                self.stray = excess;
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Runs one case: the reference's view, the case through holdfast, the honest
    /// request after it, and what the origin saw meanwhile.
    async fn observe(&mut self, case: &Case) -> Observed {
        let (reference, reference_refused) = self.reference_view(&case.bytes).await;
        let received = exchange(self.proxy.addr(), &case.bytes).await;
        let honest = honest(self.proxy.addr(), case.index).await;
        self.settle(&format!("case {}", case.index)).await;
        let mut news = self.backend.news(&mut self.cursor).await;
        if reference.iter().any(|a| self.backend.refuses_method(&a.method)) {
            news.malformed.retain(|e| !is_method_refusal(e));
        }
        Observed {
            reference: reference.into_iter().map(|a| a.path).collect(),
            reference_refused,
            replies: replies(&received.bytes),
            received,
            honest,
            seen: news.arrivals,
            malformed: news.malformed,
            panics: take_panics(self.thread),
        }
    }

    /// The requests the reference finds in `bytes`, and why it refused what it refused.
    async fn reference_view(&self, bytes: &[u8]) -> (Vec<Arrival>, Vec<String>) {
        self.reference.take_requests();
        let refused_before = self.reference.malformed();
        exchange(self.reference.addr(), bytes).await;
        let paths = self.reference.take_requests().iter().map(Arrival::of).collect();
        let refused = self.reference.malformed_errors_since(refused_before);
        (paths, refused)
    }
}

/// Runs cases `range` of the settings' seed against `backend`; panics with a report on
/// failure.
async fn run(settings: &Settings, backend: Backend, range: Range<u64>, thread: &'static str) {
    install_panic_hook();
    let name = backend.name();
    eprintln!(
        "differential ({name}): seed {:#x}, cases {}..{} ({})",
        settings.seed,
        range.start,
        range.end,
        settings.reproduce()
    );
    let started = Instant::now();
    let mut harness = Harness::start(backend, thread).await;
    let mut tally = Tally::default();
    let total = range.end - range.start;
    for index in range {
        let case = fuzz::case(settings.seed, index);
        let observed = harness.observe(&case).await;
        let violations = check(&case, &observed);
        if violations.is_empty() {
            continue;
        }
        let failure = Failure { case, observed, violations, shrunk: None };
        if !settings.keep_going {
            let failure = shrink(&mut harness, failure).await;
            panic!("{}", failure.report(settings, name));
        }
        eprintln!(
            "differential ({name}): case {index} failed: {} (mutations {:?})",
            failure.violations.iter().map(|v| v.key.as_str()).collect::<Vec<_>>().join("; "),
            failure.case.mutations
        );
        tally.add(failure);
        harness.restart_proxy().await;
    }
    eprintln!(
        "differential ({name}): {total} cases in {:.1} s, {} failed",
        started.elapsed().as_secs_f64(),
        tally.failed
    );
    if tally.kinds.is_empty() {
        return;
    }
    let mut report = format!(
        "differential ({name}): {} cases failed, {} distinct ways (seed {:#x}; {})\n",
        tally.failed,
        tally.kinds.len(),
        settings.seed,
        settings.reproduce()
    );
    for kind in tally.kinds {
        let failure = shrink(&mut harness, kind.example).await;
        let report_of = failure.report(settings, name);
        let _ = writeln!(report, "\n=== {} cases like this ===\n{report_of}", kind.count);
    }
    panic!("{report}");
}

/// The failing cases of a run, one kept per way of failing (the first broken invariant's
/// key): the shortest, with how many failed that way.
#[derive(Default)]
struct Tally {
    failed: usize,
    kinds: Vec<Kind>,
}

struct Kind {
    key: String,
    count: usize,
    example: Failure,
}

impl Tally {
    fn add(&mut self, failure: Failure) {
        self.failed += 1;
        let key = &failure.violations[0].key;
        match self.kinds.iter_mut().find(|k| k.key == *key) {
            Some(kind) => {
                kind.count += 1;
                if failure.case.bytes.len() < kind.example.case.bytes.len() {
                    kind.example = failure;
                }
            }
            None => self.kinds.push(Kind { key: key.clone(), count: 1, example: failure }),
        }
    }
}
