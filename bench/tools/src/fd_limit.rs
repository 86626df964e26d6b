//! Raises the open-file limit (RLIMIT_NOFILE) so thousands of sockets fit in one process.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The open-file limit after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit and returns the limits now in force.
///
/// Raising the hard limit needs privileges we do not assume; the harness raises it
/// (`ulimit -Hn`) before starting the tools if it needs more.
pub fn raise_nofile_limit() -> nix::Result<NofileLimit> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(NofileLimit { soft: hard, hard })
}
