//! Running the external peers of the interop tests (curl, nghttp, h2load, node, Python's
//! h2 and grpcio): whether
//! one is installed (a test without it skips, or fails under `CI=true`), running one to
//! its end within the tests' wait bound, and the scratch files they read and write.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use crate::driver::within;

/// Whether `tool` runs here. If not, the test prints that it skipped, or fails under
/// `CI=true`.
#[track_caller]
pub fn have(tool: &str) -> bool {
    let runs = std::process::Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        skip_or_fail(&format!("`{tool}` is not installed"));
    }
    runs
}

/// Whether python3 can import `module` (pip's `package`). If not, the test prints that
/// it skipped, or fails under `CI=true` (`.ci/run` installs grpcio and h2).
#[track_caller]
pub fn have_python_module(module: &str, package: &str) -> bool {
    let imports = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !imports {
        skip_or_fail(&format!("python3 cannot import {module} (pip install {package})"));
    }
    imports
}

/// The one way a test skips: it prints `skipped: why`; under `CI=true` it fails instead,
/// so a CI run never passes without testing.
#[track_caller]
pub fn skip_or_fail(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true, so this test may not skip: {why}");
    }
    println!("skipped: {why}");
}

/// Runs `program` with `args` to its end (killed if it takes longer than the wait
/// bound) and checks it succeeded.
pub async fn run_tool(program: &str, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(program);
    command.args(args).stdin(Stdio::null()).kill_on_drop(true);
    let out = within(program, command.output()).await;
    let out = out.unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\nstderr: {}\nstdout (end): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout[out.stdout.len().saturating_sub(2000)..]),
    );
    out
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An empty directory of this test's own under Cargo's temporary directory for tests.
pub fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}
