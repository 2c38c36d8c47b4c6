//! The browserpool service: config, auth, store, session management, gRPC adapters and the
//! HTTP side listener. See ARCHITECTURE.md for how the pieces fit.

pub mod admission;
pub mod audit;
pub mod auth;
pub mod cdp;
pub mod cli;
pub mod clock;
pub mod config;
pub mod convert;
pub mod deadlines;
pub mod envelope;
pub mod error;
pub mod forward;
pub mod grpc;
pub mod grpc_status;
pub mod http;
pub mod jcs;
pub mod metrics;
pub mod model;
pub mod redact;
pub mod server;
pub mod sessions;
pub mod store;
pub mod telemetry;
pub mod tenants;
pub mod throttle;
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

/// The layers of `server/src`, lowest first. A module may import only from layers below its
/// own (or from itself): leaves -> store -> audit writer -> errors, auth -> sessions ->
/// forwarding -> gRPC adapters and HTTP -> server -> command line.
#[cfg(test)]
const LAYERS: &[&[&str]] = &[
    &[
        "admission",
        "audit::chain",
        "cdp",
        "clock",
        "config",
        "grpc_status",
        "jcs",
        "metrics",
        "model",
        "redact",
        "throttle",
        "tls",
    ],
    &["deadlines", "telemetry"],
    &["store"],
    &["audit"],
    &["error"],
    &["auth", "envelope"],
    &["sessions"],
    &["forward", "tenants"],
    &["convert", "grpc", "http"],
    &["server"],
    &["cli", "run", "bind", "Bound"],
];

#[cfg(test)]
mod tests {
    use super::LAYERS;

    /// The layer of a module path (`audit::chain` is its own, below `audit`).
    fn layer(module: &str) -> Option<usize> {
        let mut best = None;
        for (i, layer) in LAYERS.iter().enumerate() {
            for name in *layer {
                let matches = module == *name || module.starts_with(&format!("{name}::"));
                if matches && best.is_none_or(|(len, _)| name.len() > len) {
                    best = Some((name.len(), i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    #[test]
    fn no_module_imports_from_a_layer_above_its_own() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let mut wrong = Vec::new();
        for file in files {
            let rel = file.strip_prefix(&src).unwrap().with_extension("");
            let module = rel.to_string_lossy().replace('/', "::").trim_end_matches("::mod").to_string();
            if matches!(module.as_str(), "lib" | "main") {
                continue;
            }
            let own = layer(&module).unwrap_or_else(|| panic!("{module} is in no layer of LAYERS"));
            let text = std::fs::read_to_string(&file).unwrap();
            // Only the code above a file's unit tests counts (tests may reach anywhere).
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (at, _) in code.match_indices("crate::") {
                let path: String = code[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let target = path.trim_end_matches(':');
                let Some(theirs) = layer(target) else { continue };
                if theirs > own {
                    wrong.push(format!("{module} (layer {own}) imports crate::{target} (layer {theirs})"));
                }
            }
        }
        assert!(wrong.is_empty(), "imports against the layer order:\n{}", wrong.join("\n"));
    }
}
