//! The pool's error enum; the server maps it to gRPC codes in one place.

use std::time::Duration;

/// What can go wrong while booting, leasing or releasing a worker.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// No Chromium executable was found on PATH and none was configured.
    #[error("no chromium executable found: tried {tried}; install one (apt-get install -y chromium) or pass --chrome")]
    NoChromium { tried: String },
    /// The configured Chromium path does not exist or is not executable.
    #[error("chromium executable {0} not found or not executable")]
    BadChromium(String),
    /// Every port of the range is locked by this or another server.
    #[error("no free cdp port in {0}")]
    NoFreePort(String),
    /// Chromium started but did not print its DevTools endpoint in time, or exited.
    #[error("chromium failed to start: {0}")]
    Launch(String),
    /// A CDP call failed.
    #[error("cdp: {0}")]
    Cdp(String),
    /// Chromium refused the session's emulation (the message names the field).
    #[error("{0}")]
    Emulation(String),
    /// A CDP call did not answer within its deadline.
    #[error("cdp call {what} timed out after {after:?}")]
    CdpTimeout { what: &'static str, after: Duration },
    /// No worker became free before the caller's deadline.
    #[error("no worker free within {0:?}")]
    Exhausted(Duration),
    /// Workers fail to boot: the last boot's error.
    #[error("workers fail to boot: {0}")]
    BootFailing(String),
    /// A slot was free, but no worker finished booting within a boot's time limits.
    #[error("no worker finished booting within {0:?}")]
    NotBooted(Duration),
    /// The first worker's check found Chromium's sandbox off, and `--allow-unsandboxed` was
    /// not given: no worker is run.
    #[error("workers would run without chromium's sandbox ({0}); refusing to run them (--allow-unsandboxed runs them anyway, see the README's Security section)")]
    Unsandboxed(String),
    /// A leased worker's memory limit could not be set (below what the fresh browser already
    /// uses, on a v1 hierarchy).
    #[error("the memory limit could not be set to {0}; raise the tenant's max_memory_mb")]
    MemoryLimit(String),
    /// The pool is shutting down.
    #[error("pool is shutting down")]
    ShuttingDown,
    /// Filesystem trouble (profiles, locks).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
