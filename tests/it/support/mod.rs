//! Shared test machinery: a counting origin, holdfast started in-process or as a child
//! process, raw and keep-alive clients, generated request cases, and bounded waiting.
//!
//! Nothing here sleeps for a fixed time to let something happen: waits poll a condition
//! against a deadline, and every network operation has a deadline of its own, so a broken
//! proxy fails a test instead of hanging it.

pub mod client;
pub mod fuzz;
pub mod h2_origin_wire;
pub mod h2_wire;
pub mod http2;
pub mod incoming;
pub mod load;
pub mod netns;
pub mod node;
pub mod origin;
pub mod port;
pub mod proxy;
pub mod refusing;
pub mod scrape;
pub mod tap;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::net::TcpStream;
use tokio::time::Instant;

pub use client::{request, ClientBody, HttpClient, RawClient, RawError};
pub use load::Load;
pub use origin::{Origin, OriginOptions, RawAnswer, RawOrigin};
pub use port::{ClosedPort, ReservedPort};
pub use proxy::{config_for, config_to, config_with_admin, group_config, ChildProxy, Proxy};
pub use scrape::{admin_get, wait_for_count, Metrics};
pub use tap::Tap;

/// The longest any single step of a test may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Polls `cond` until it holds; panics naming `what` if it does not within `deadline`.
pub async fn wait_until(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    // Bounded: at most deadline / 5 ms rounds.
    loop {
        if cond() {
            return;
        }
        assert!(start.elapsed() < deadline, "timed out after {deadline:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls until a connect to `addr` is refused; panics if it still connects after
/// `deadline`.
pub async fn wait_refused(addr: SocketAddr, deadline: Duration) {
    let start = Instant::now();
    // Bounded by `deadline`; each round waits 10 ms.
    while TcpStream::connect(addr).await.is_ok() {
        assert!(start.elapsed() < deadline, "{addr} still accepts {deadline:?} later");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `fut`, panicking naming `what` if it takes longer than [`DEADLINE`].
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    within_for(what, DEADLINE, fut).await
}

/// Runs `fut`, panicking naming `what` if it takes longer than `deadline`.
pub async fn within_for<F: Future>(what: &str, deadline: Duration, fut: F) -> F::Output {
    match tokio::time::timeout(deadline, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {deadline:?}: {what}"),
    }
}

/// Whether this is a CI run (`CI=true`), where a test may not skip.
pub fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The one way a test skips: it cannot run here because of `why` (no namespaces, not
/// root, a tool missing). Prints `skipped: why` for the caller to return after; under
/// `CI=true` it fails the test instead, so a CI run never passes without testing.
#[track_caller]
pub fn skip_or_fail(why: &str) {
    if on_ci() {
        panic!("CI=true, so this test may not skip: {why}");
    }
    println!("skipped: {why}");
}

/// The path of `tests/it/fixtures/NAME`.
pub fn fixture(name: &str) -> String {
    let path: std::path::PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests", "it", "fixtures", name].iter().collect();
    path.display().to_string()
}

/// Whether `python3` can `import MODULE`; if not, the test skips (fails under
/// `CI=true`), naming `package` as what to install.
#[track_caller]
pub fn have_python_module(module: &str, package: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip_or_fail(&format!("python3 with {package} (`pip install {package}`) is not installed"));
    }
    ok
}

/// The seed of a test's random choices: `HOLDFAST_TEST_SEED` (decimal or `0x` hex) when
/// set, else `default`, so runs repeat. Printed, so a failing run can be repeated.
pub fn seed(default: u64) -> u64 {
    let seed = match std::env::var("HOLDFAST_TEST_SEED") {
        Ok(text) if !text.is_empty() => {
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("HOLDFAST_TEST_SEED={text:?} is not a number"))
        }
        _ => default,
    };
    eprintln!("seed: {seed} (HOLDFAST_TEST_SEED={seed} repeats it)");
    seed
}

/// The bytes every generated body is made of; shared so large bodies allocate nothing.
static FILLER: [u8; 64 * 1024] = [b'x'; 64 * 1024];

/// A body of `len` bytes of `x`, produced in 64 KiB chunks without allocating them.
///
/// `sized` bodies announce their length (so hyper frames them with Content-Length);
/// unsized ones do not (so hyper uses chunked encoding).
pub struct Generated {
    remaining: u64,
    sized: bool,
}

impl Generated {
    pub fn sized(len: u64) -> Self {
        Generated { remaining: len, sized: true }
    }

    pub fn chunked(len: u64) -> Self {
        Generated { remaining: len, sized: false }
    }
}

impl Body for Generated {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(FILLER.len() as u64) as usize;
        self.remaining -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&FILLER[..n])))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        if self.sized {
            SizeHint::with_exact(self.remaining)
        } else {
            SizeHint::default()
        }
    }
}

/// FNV-1a, 64 bit: a cheap fingerprint of body bytes, computed as they stream.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn update(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    pub fn of(bytes: &[u8]) -> String {
        let mut f = Fnv::default();
        f.update(bytes);
        f.hex()
    }

    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("holdfast-it-{}-{n}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// Writes `text` to `name` in this directory and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
