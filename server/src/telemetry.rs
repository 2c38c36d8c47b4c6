//! Logging to stderr: a `RUST_LOG`-style filter from `BROWSERPOOL_LOG` (default `info`), in
//! the format `BROWSERPOOL_LOG_FORMAT` names: `text` (default) or `json` (one object a line,
//! for cluster log pipelines).

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// The format `BROWSERPOOL_LOG_FORMAT` names, or why it names none.
    pub fn from_env() -> Result<LogFormat, String> {
        match std::env::var("BROWSERPOOL_LOG_FORMAT").as_deref() {
            Err(_) | Ok("") | Ok("text") => Ok(LogFormat::Text),
            Ok("json") => Ok(LogFormat::Json),
            Ok(other) => Err(format!("BROWSERPOOL_LOG_FORMAT: `{other}` is not text or json")),
        }
    }
}

/// Installs the global subscriber; safe to call more than once (later calls are no-ops).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BROWSERPOOL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
}
