//! What every bench binary needs around its own work: the tokio runtime it runs on, the
//! future that says "stop", the `listening on` lines the harness waits for, and the exit
//! status of its result.

use std::future::Future;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::ExitCode;

use anyhow::Context;

/// A current-thread runtime for one thread (no cross-thread wake-ups), otherwise a
/// multi-thread runtime with `threads` workers.
pub fn build(threads: NonZeroUsize) -> io::Result<tokio::runtime::Runtime> {
    if threads.get() == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.get())
            .enable_all()
            .build()
    }
}

/// Installs SIGTERM and SIGINT handlers and returns a future that resolves on either.
///
/// Call it early and inside the runtime: from then on those signals no longer kill the
/// process, they are delivered to the future (even if it is polled only later).
pub fn stop_signal() -> io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// `listening on IP:PORT` on stdout, one line per bound address, flushed: the harness
/// and the tests read the addresses from there.
pub fn print_listening(addrs: &[SocketAddr]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    for addr in addrs {
        writeln!(stdout, "listening on {addr}").context("writing to stdout")?;
    }
    stdout.flush().context("writing to stdout")
}

/// The exit status of `program`'s `result`; an error is printed to stderr first.
pub fn exit_code(program: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{program}: {error:#}");
            ExitCode::FAILURE
        }
    }
}
