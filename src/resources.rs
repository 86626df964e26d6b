//! What the machine lets holdfast hold: open files and local ports, read once at start,
//! and the process-wide idle-connection budget derived from them.
//!
//! Idle upstream connections are kept by demand (see `holdfast_pool`); this budget
//! is only the backstop that keeps many backends' idle connections together from
//! taking the descriptors clients need or the ports new connections need.

use std::ops::RangeInclusive;

use serde_json::{json, Value};

/// Limits read at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    /// The soft limit on open files, after [`raise_open_file_limit`].
    pub open_files: Option<u64>,
    /// `net.ipv4.ip_local_port_range`: the source ports one destination can use.
    pub local_ports: Option<RangeInclusive<u16>>,
}

impl Resources {
    /// Reads both limits from `/proc` (Linux); either is `None` where unknown.
    pub fn read() -> Self {
        Resources { open_files: open_file_limit(), local_ports: local_port_range() }
    }

    /// How many source ports the local range holds.
    pub fn port_count(&self) -> Option<u64> {
        self.local_ports.as_ref().map(|r| u64::from(*r.end()) - u64::from(*r.start()) + 1)
    }

    /// The idle connections all backends together may keep, `configured` if set:
    ///
    /// - half the open-file limit, because each idle upstream connection is one
    ///   descriptor and each client being served needs one more, so a proxy serving
    ///   N clients with N idle connections ready for them uses 2N;
    /// - no more than the local port range, since idle connections beyond that many
    ///   could not even have been opened to one origin.
    ///
    /// With neither known, 4096.
    pub fn idle_budget(&self, configured: Option<usize>) -> usize {
        if let Some(n) = configured {
            return n;
        }
        let by_files = self.open_files.map(|n| n / 2);
        let bound = match (by_files, self.port_count()) {
            (Some(f), Some(p)) => f.min(p),
            (Some(n), None) | (None, Some(n)) => n,
            (None, None) => 4096,
        };
        usize::try_from(bound).unwrap_or(usize::MAX).max(64)
    }

    /// The `/status` view, with the budget in use and how much of it is spent.
    pub fn status(&self, budget: &holdfast_pool::IdleBudget) -> Value {
        json!({
            "open_files": self.open_files,
            "local_ports": self.local_ports.as_ref().map(|r| [*r.start(), *r.end()]),
            "idle_budget": budget.limit(),
            "idle_now": budget.idle(),
        })
    }
}

/// Raises the soft open-file limit to the hard one, as Go's runtime does at start:
/// the soft limit (often 1024) is a leftover from `select()`, and a proxy holds two
/// descriptors per request in flight plus its idle connections. Returns the limits
/// before and after when it changed them.
#[cfg(target_os = "linux")]
pub fn raise_open_file_limit() -> Option<(u64, u64)> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= hard {
        return None;
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).ok()?;
    Some((soft, hard))
}

/// Raises the soft open-file limit (Linux only).
#[cfg(not(target_os = "linux"))]
pub fn raise_open_file_limit() -> Option<(u64, u64)> {
    None
}

/// The soft limit on open files, from `/proc/self/limits`.
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_files(&limits)
}

fn parse_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn local_port_range() -> Option<RangeInclusive<u16>> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    parse_port_range(&text)
}

fn parse_port_range(text: &str) -> Option<RangeInclusive<u16>> {
    let mut parts = text.split_whitespace().map(str::parse::<u16>);
    let (low, high) = (parts.next()?.ok()?, parts.next()?.ok()?);
    (low <= high).then_some(low..=high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_formats() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            20000                20000                files\n";
        assert_eq!(parse_open_files(limits), Some(20000));
        assert_eq!(parse_port_range("32768\t60999\n"), Some(32768..=60999));
        assert_eq!(parse_port_range("9000 8000"), None);
    }

    #[test]
    fn budget_is_the_smaller_of_half_the_files_and_the_ports() {
        let r = Resources { open_files: Some(20000), local_ports: Some(32768..=60999) };
        assert_eq!(r.idle_budget(None), 10000);
        let narrow = Resources { open_files: Some(1 << 20), local_ports: Some(20000..=20999) };
        assert_eq!(narrow.idle_budget(None), 1000);
        assert_eq!(narrow.idle_budget(Some(7)), 7);
        let unknown = Resources { open_files: None, local_ports: None };
        assert_eq!(unknown.idle_budget(None), 4096);
    }
}
