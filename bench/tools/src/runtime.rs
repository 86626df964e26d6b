//! Builds the tokio runtime both binaries run on, and the future that says "stop".

use std::future::Future;
use std::io;
use std::num::NonZeroUsize;

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
