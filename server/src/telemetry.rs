//! Logging: `RUST_LOG`-style filter from `BROWSERPOOL_LOG` (default `info`), to stderr.

/// Installs the global subscriber; safe to call more than once (later calls are no-ops).
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BROWSERPOOL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}
