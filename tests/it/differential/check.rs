//! The invariants each case is checked against, and failures: what broke, how it is
//! shown, and the case cut down to the fewest bytes that still break it.

use super::*;

/// Everything one case produced.
#[derive(Debug, Clone)]
pub(super) struct Observed {
    /// Paths of the requests the reference found in the case's bytes.
    pub(super) reference: Vec<String>,
    /// Why the reference refused what it refused in the case's bytes.
    pub(super) reference_refused: Vec<String>,
    /// What came back on the case's connection.
    pub(super) received: Received,
    pub(super) replies: Vec<Reply>,
    pub(super) honest: Result<Reply, String>,
    /// Requests that reached the origin during the case, the honest one included.
    pub(super) seen: Vec<Arrival>,
    /// What the origin refused as malformed during the case.
    pub(super) malformed: Vec<String>,
    pub(super) panics: Vec<String>,
}

/// Most severe first: a case is filed under its most severe broken invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Invariant {
    /// 5: holdfast panicked.
    Panic,
    /// 2: the origin saw a request the reference did not find in the bytes.
    Smuggled,
    /// 3: a response went to the wrong request.
    WrongResponse,
    /// 2: the origin saw more requests than the case has request lines.
    TooManyRequests,
    /// 3: the honest request got no proper response.
    HonestFailed,
    /// 4: holdfast neither answered nor closed in time.
    Hang,
    /// 4: a request went unanswered.
    Unanswered,
    /// 1: the origin saw a malformed stream.
    OriginMalformed,
}

/// One broken invariant.
#[derive(Debug, Clone)]
pub(super) struct Violation {
    pub(super) invariant: Invariant,
    /// Names the way it broke, the same for cases that broke the same way.
    pub(super) key: String,
    pub(super) detail: String,
}

impl Violation {
    pub(super) fn new(
        invariant: Invariant,
        key: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Violation { invariant, key: key.into(), detail: detail.into() }
    }
}

/// Every invariant `observed` breaks for `case`, most severe first.
pub(super) fn check(case: &Case, observed: &Observed) -> Vec<Violation> {
    let honest_path = format!("/honest-{}", case.index);
    let (honest_seen, seen): (Vec<&Arrival>, Vec<&Arrival>) =
        observed.seen.iter().partition(|a| a.path == honest_path);
    let mut out = Vec::new();
    // 1
    for error in &observed.malformed {
        let key = format!("origin refused: {}", error_kind(error));
        out.push(Violation::new(Invariant::OriginMalformed, key, error.clone()));
    }
    for a in observed.seen.iter().filter(|a| a.host_lines != 1) {
        let key = if a.host_lines == 0 { "origin got no Host" } else { "origin got several Hosts" };
        let detail = format!("{} {} arrived with {} Host lines", a.method, a.path, a.host_lines);
        out.push(Violation::new(Invariant::OriginMalformed, key, detail));
    }
    for r in &observed.replies {
        let trailers = r.header("x-received-trailers").unwrap_or("").split(',');
        for name in trailers.filter(|n| FRAMING_FIELDS.contains(n)) {
            let key = format!("origin got a {name} trailer");
            let detail = format!("the origin got a {name} field after a chunked body");
            out.push(Violation::new(Invariant::OriginMalformed, key, detail));
        }
    }
    // 2
    let mut reference = observed.reference.clone();
    for a in &seen {
        match reference.iter().position(|p| *p == a.path) {
            Some(i) => {
                reference.remove(i);
            }
            None => {
                let key = match observed.reference_refused.first() {
                    _ if a.path.contains("smuggled") => {
                        "a request from inside a body reached the origin".to_string()
                    }
                    Some(why) => {
                        format!(
                            "the origin got a request the reference refused ({})",
                            error_kind(why)
                        )
                    }
                    None => "the origin got a target other than the reference read".to_string(),
                };
                let detail = format!(
                    "{} {} reached the origin; the reference found {:?} and refused {:?}",
                    a.method, a.path, observed.reference, observed.reference_refused
                );
                out.push(Violation::new(Invariant::Smuggled, key, detail));
            }
        }
    }
    // A mutation can turn a body's request into one in plain sight (a Content-Length
    // line removed): then the reference finds it too.
    let lines = case.paths.len().max(observed.reference.len());
    if seen.len() > lines {
        let detail = format!(
            "{} requests reached the origin ({:?}) from {lines} request lines",
            seen.len(),
            seen.iter().map(|a| &a.path).collect::<Vec<_>>(),
        );
        out.push(Violation::new(Invariant::TooManyRequests, "more requests than lines", detail));
    }
    // 3
    match &observed.honest {
        Ok(r) if r.status == 200 && r.header("x-path") == Some(honest_path.as_str()) => {}
        Ok(r) if r.header("x-path").is_some_and(|p| p != honest_path) => {
            let detail = format!("the honest request got the response to {:?}", r.header("x-path"));
            out.push(Violation::new(Invariant::WrongResponse, "honest got another's", detail));
        }
        Ok(r) => {
            let key = format!("honest got {}", r.status);
            let detail = format!("the honest request got {} {:?}", r.status, r.headers);
            out.push(Violation::new(Invariant::HonestFailed, key, detail));
        }
        Err(e) => {
            let key = format!("honest: {}", e.split(';').next().unwrap_or(e));
            out.push(Violation::new(Invariant::HonestFailed, key, format!("honest request: {e}")));
        }
    }
    if honest_seen.len() > 1 {
        let detail = format!("the honest request reached the origin {} times", honest_seen.len());
        out.push(Violation::new(Invariant::TooManyRequests, "honest sent twice", detail));
    }
    for r in &observed.replies {
        let path = r.header("x-path").map(comparable);
        if let Some(p) = path.filter(|p| !seen.iter().any(|a| a.path == *p)) {
            let detail = format!("the case's connection got a response for {p:?}");
            out.push(Violation::new(Invariant::WrongResponse, "case got another's", detail));
        }
    }
    // 4
    let finals = observed.replies.iter().filter(|r| r.status >= 200).count();
    if observed.received.end == End::TimedOut {
        let detail = format!("still open {CASE_DEADLINE:?} after the case was sent");
        out.push(Violation::new(Invariant::Hang, "hang", detail));
    } else if finals == 0 && has_complete_head(&case.bytes) {
        let detail = format!(
            "closed ({:?}) without a response, after a complete request head",
            observed.received.end
        );
        out.push(Violation::new(Invariant::Unanswered, "closed without an answer", detail));
    } else if finals < seen.len() {
        let detail = format!(
            "{} requests reached the origin, the client got {finals} responses",
            seen.len()
        );
        out.push(Violation::new(Invariant::Unanswered, "fewer answers than requests", detail));
    }
    // 5
    for p in &observed.panics {
        // `MESSAGE at FILE:LINE:COLUMN`: the place names the panic, the message varies.
        let place = p.rsplit_once(" at ").map_or(p.as_str(), |(_, place)| place);
        out.push(Violation::new(Invariant::Panic, format!("panic at {place}"), p.clone()));
    }
    out.sort_by_key(|v| v.invariant);
    out
}

/// Fields that frame or route a message: never valid as trailers (RFC 9110, 6.5.1).
pub(super) const FRAMING_FIELDS: [&str; 3] = ["content-length", "transfer-encoding", "host"];

/// Whether `bytes` hold a complete request head: after any empty lines before it, a line
/// end followed by an empty line.
pub(super) fn has_complete_head(bytes: &[u8]) -> bool {
    let start = bytes.iter().position(|b| *b != b'\r' && *b != b'\n').unwrap_or(bytes.len());
    let rest = &bytes[start..];
    find(rest, b"\n\n").is_some() || find(rest, b"\n\r\n").is_some()
}

/// Whether Node's error is its refusal of a method it does not know.
pub(super) fn is_method_refusal(error: &str) -> bool {
    error.starts_with("HPE_INVALID_METHOD") || error.contains("Expected HTTP/2 Connection Preface")
}

/// What kind of error an origin's error text names: without the request's path or the
/// bytes it stopped at, and without numbers.
pub(super) fn error_kind(text: &str) -> String {
    let kind = match text.strip_prefix("request body of ") {
        // `request body of PATH: error`: the path is the case's, not the kind's.
        Some(rest) => rest.split_once(": ").map_or(rest, |(_, error)| error),
        // Node's `CODE reason at "bytes"`.
        None => text.split_once(" at \"").map_or(text, |(kind, _)| kind),
    };
    digits_out(kind)
}

/// `text` with runs of digits (lengths, ports, case numbers) replaced by `N`, so failures
/// that differ only in numbers count as one kind.
pub(super) fn digits_out(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('N') {
                out.push('N');
            }
        } else {
            out.push(c);
        }
    }
    out
}
/// A case that broke invariants, and the fewest bytes found that still break the first.
pub(super) struct Failure {
    pub(super) case: Case,
    pub(super) observed: Observed,
    pub(super) violations: Vec<Violation>,
    pub(super) shrunk: Option<(Vec<u8>, Observed)>,
}

impl Failure {
    pub(super) fn report(&self, settings: &Settings, origin: &str) -> String {
        let mut out = String::new();
        let _ =
            writeln!(out, "differential test failed: case {} against {origin}", self.case.index);
        let _ = writeln!(out, "seed {:#x}; reproduce: {}", settings.seed, settings.reproduce());
        for v in &self.violations {
            let _ = writeln!(out, "broken: {:?}: {}", v.invariant, v.detail);
        }
        let _ = writeln!(out, "mutations: {:?}", self.case.mutations);
        let _ = writeln!(out, "case bytes: {}", escape(&self.case.bytes));
        describe(&mut out, &self.observed);
        if let Some((bytes, observed)) = &self.shrunk {
            let _ = writeln!(out, "--- cut down to {} bytes, same first invariant:", bytes.len());
            let _ = writeln!(out, "case bytes: {}", escape(bytes));
            describe(&mut out, observed);
        }
        out
    }
}

pub(super) fn describe(out: &mut String, o: &Observed) {
    let received = &o.received.bytes[..o.received.bytes.len().min(2000)];
    let _ = writeln!(out, "case connection got ({:?}): {}", o.received.end, escape(received));
    let _ = writeln!(out, "reference found: {:?}, refused: {:?}", o.reference, o.reference_refused);
    let seen: Vec<String> = o.seen.iter().map(|a| format!("{} {}", a.method, a.path)).collect();
    let _ = writeln!(out, "origin saw: {seen:?}");
    let _ = writeln!(out, "origin refused: {:?}", o.malformed);
    let _ = writeln!(out, "honest request: {:?}", o.honest.as_ref().map(|r| r.status));
    if !o.panics.is_empty() {
        let _ = writeln!(out, "panics: {:?}", o.panics);
    }
}

/// Cuts the failing case down: removes runs of bytes, longest first, keeping each cut
/// that still breaks the same first invariant the same way. Every attempt runs on a new
/// holdfast, so what one attempt leaves in the pool does not decide the next.
pub(super) async fn shrink(harness: &mut Harness, mut failure: Failure) -> Failure {
    let key = failure.violations[0].key.clone();
    let mut bytes = failure.case.bytes.clone();
    let mut best: Option<Observed> = None;
    let started = Instant::now();
    let mut attempts = 0;
    let mut run = (bytes.len() / 2).max(1);
    // Bounded by SHRINK_ATTEMPTS and SHRINK_TIME.
    while run >= 1 && attempts < SHRINK_ATTEMPTS && started.elapsed() < SHRINK_TIME {
        let mut at = 0;
        let mut cut_any = false;
        while at < bytes.len() && attempts < SHRINK_ATTEMPTS && started.elapsed() < SHRINK_TIME {
            let end = (at + run).min(bytes.len());
            let mut candidate = bytes.clone();
            candidate.drain(at..end);
            attempts += 1;
            let case = Case { bytes: candidate.clone(), ..failure.case.clone() };
            harness.restart_proxy().await;
            let observed = harness.observe(&case).await;
            if check(&case, &observed).iter().any(|v| v.key == key) {
                bytes = candidate;
                best = Some(observed);
                cut_any = true;
            } else {
                at += run;
            }
        }
        if !cut_any {
            run /= 2;
        }
    }
    failure.shrunk = best.map(|observed| (bytes, observed));
    failure
}
