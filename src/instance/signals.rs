//! The signals that stop holdfast: SIGTERM and Ctrl-C (SIGINT), caught from the moment
//! they are installed, for `holdfast` runs and `holdfast demo --serve` alike.

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    match ShutdownSignal::install() {
        Ok(signal) => signal.recv().await,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// SIGTERM or Ctrl-C (SIGINT), caught from the moment this is created, so a signal
/// that arrives before anyone waits for it is kept, not lost or fatal.
pub struct ShutdownSignal {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    /// Installs the handlers; must run inside the runtime.
    pub fn install() -> std::io::Result<ShutdownSignal> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(ShutdownSignal {
                term: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignal {})
    }

    /// Resolves once a signal has arrived (at once, if one came already).
    pub async fn recv(self) {
        #[cfg(unix)]
        {
            let ShutdownSignal { mut term, mut interrupt } = self;
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}
