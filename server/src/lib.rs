//! The browserpool service: config, auth, store, session management, gRPC adapters and the
//! HTTP side listener. See ARCHITECTURE.md for how the pieces fit.

pub mod admission;
pub mod audit;
pub mod auth;
pub mod cdp;
pub mod cli;
pub mod config;
pub mod context;
pub mod convert;
pub mod error;
pub mod forward;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod reaper;
pub mod server;
pub mod sessions;
pub mod store;
pub mod telemetry;
pub mod tls;

pub use server::{bind, run, Bound};

/// This build's version and the git revision it was built from (see `build.rs`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const REVISION: &str = env!("BROWSERPOOL_GIT_REV");
/// `--version`: `0.1.0 (rev 1a2b3c4d5e6f)`.
pub const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (rev ", env!("BROWSERPOOL_GIT_REV"), ")");

/// Resolves on SIGTERM or SIGINT: the shutdown future `main` passes to [`run`]. The handlers
/// are installed when this is called, not when the future is first polled, so a signal that
/// arrives while the server starts (right after it logs `serving`, say) still shuts it down
/// cleanly instead of killing it.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = term.recv() => tracing::info!("sigterm received, shutting down"),
                _ = int.recv() => tracing::info!("sigint received, shutting down"),
            },
            (term, int) => {
                let e = term.err().or(int.err()).map(|e| e.to_string()).unwrap_or_default();
                tracing::error!(error = %e, "cannot listen for signals; waiting for ctrl-c only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
