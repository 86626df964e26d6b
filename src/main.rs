//! The `holdfast` binary: parse the command line, run it (which starts logging).

use std::process::ExitCode;

use clap::Parser;

/// jemalloc rather than glibc's allocator (Linux): a proxy frees memory in bursts, when
/// thousands of connections close at once, and glibc keeps what they held in its
/// per-thread arenas for good (10,000 silent connections left 28 MB behind). jemalloc,
/// built with a background thread and a 1 s decay (`.cargo/config.toml`), gives it back
/// to the kernel within seconds, and its size classes waste less per connection.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = holdfast::cmd::cli::Cli::parse();
    match holdfast::cmd::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("holdfast: {e:#}");
            ExitCode::FAILURE
        }
    }
}
