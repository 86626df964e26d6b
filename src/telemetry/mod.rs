//! Logging: a `tracing` subscriber writing to stderr, filtered like `RUST_LOG`, as
//! text (coloured only on a terminal) or JSON ([`LogFormat`]); upstream failures counted
//! into a line per kind and second (`failures`); and the per-request access log
//! (`access_log`).

pub mod access_log;
pub mod failures;

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter when `RUST_LOG` is not set: holdfast's own lifecycle and warnings.
pub const DEFAULT_FILTER: &str = "holdfast=info";

/// The shape of holdfast's own log lines (stderr), as opposed to the access log's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `key=value` text, coloured on a terminal. The default: the first reader is a
    /// person at a terminal or in `journalctl`; log shippers ask for JSON.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the subscriber, once per process (later calls change nothing). `RUST_LOG`
/// wins over `default_filter` when set.
pub fn init(default_filter: &str, format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => {
            let colour = use_colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR"));
            builder.with_ansi(colour).try_init()
        }
        // Fields at the top level of each object, beside `timestamp`, `level`, `target`
        // and `message`, where log shippers look for them.
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Text gets colour only on a terminal, and not even there when `NO_COLOR` is set to
/// anything but the empty string (no-color.org): escape codes in a file or a pipe
/// are noise to whoever reads it.
fn use_colour(is_terminal: bool, no_color: Option<impl AsRef<OsStr>>) -> bool {
    is_terminal && no_color.is_none_or(|value| value.as_ref().is_empty())
}

#[cfg(test)]
mod tests {
    use super::use_colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None::<&str>));
        assert!(!use_colour(false, None::<&str>));
        assert!(!use_colour(true, Some("1")));
        assert!(!use_colour(true, Some("false")), "any non-empty value turns colour off");
        assert!(use_colour(true, Some("")), "an empty NO_COLOR is as if unset");
        assert!(!use_colour(false, Some("")));
    }
}
