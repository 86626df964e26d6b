//! A network namespace a test creates for itself: its own loopback, port range and
//! TIME_WAIT rules, so port exhaustion is cheap to reproduce without touching the host.
//!
//! Creating one needs root (`ip netns add`). Where that is not permitted a test may
//! skip, except under `CI=true`, where [`Namespace::create_or_skip`] fails it instead
//! (through [`super::skip_or_fail`]).

use std::fs::File;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::sched::{setns, CloneFlags};

/// A network namespace of this test's own, deleted on drop.
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// Creates a namespace with loopback up; `Err` says why namespaces are not
    /// available here (not root, no `ip`, no permission).
    pub fn create() -> Result<Namespace, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("holdfast-test-{}-{n}", std::process::id());
        run("ip", &["netns", "add", &name])?;
        let ns = Namespace { name };
        run("ip", &["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `ip netns exec NAME program args...`, which must succeed.
    pub fn exec(&self, program: &str, args: &[&str]) -> Output {
        let mut all = vec!["netns", "exec", &self.name, program];
        all.extend_from_slice(args);
        let out = Command::new("ip").args(&all).output().expect("run ip netns exec");
        assert!(out.status.success(), "ip {all:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    pub fn sysctl(&self, key: &str, value: &str) {
        self.exec("sysctl", &["-q", "-w", &format!("{key}={value}")]);
    }

    /// Moves the calling thread into the namespace: sockets it creates from now on, and
    /// threads it spawns, live there.
    pub fn enter(&self) {
        let file = File::open(format!("/var/run/netns/{}", self.name)).expect("open netns file");
        setns(file, CloneFlags::CLONE_NEWNET).expect("setns into the test namespace");
    }

    /// TCP sockets in `state` (as `ss` names it) whose `side` (`sport` or `dport`) is
    /// `port`.
    pub fn sockets(&self, state: &str, side: &str, port: u16) -> usize {
        let filter = format!("( {side} = :{port} )");
        let out = self.exec("ss", &["-Htan", "state", state, &filter]);
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
    }
}

impl Namespace {
    /// A namespace, or `None` after printing why there can be none here; under
    /// `CI=true` a missing namespace fails the test instead of skipping it.
    #[track_caller]
    pub fn create_or_skip() -> Option<Namespace> {
        match Namespace::create() {
            Ok(ns) => Some(ns),
            Err(why) => {
                super::skip_or_fail(&format!(
                    "this test needs a network namespace of its own ({why})"
                ));
                None
            }
        }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}
