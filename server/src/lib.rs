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
pub mod grpc;
pub mod http;
pub mod reaper;
pub mod server;
pub mod sessions;
pub mod store;
pub mod telemetry;
pub mod tls;

pub use server::{bind, run, Bound};

/// Resolves on SIGTERM or SIGINT: the shutdown future `main` passes to [`run`].
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for sigterm; waiting for ctrl-c only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("sigterm received, shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("sigint received, shutting down"),
    }
}
