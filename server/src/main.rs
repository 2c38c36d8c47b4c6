//! `browserpool`: parse, start telemetry, run the chosen command until a signal, then flush
//! the traces. The client commands (`session`, `admin`) run without either.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = browserpool_server::config::Cli::parse_noting_sources();
    if cli.is_client() {
        // A client keeps the default signal handling, so Ctrl-C ends it at once (and with it
        // its pending call, which the server then cancels).
        return ExitCode::from(exit_code(browserpool_server::cli::run(cli, std::future::pending()).await));
    }
    let setup = browserpool_server::telemetry::LogFormat::from_env()
        .and_then(|format| Ok((format, cli.otlp_endpoint()?)))
        .and_then(|(format, otlp)| {
            browserpool_server::telemetry::init(format, otlp.as_deref()).map_err(|e| format!("{e:#}"))
        });
    let telemetry = match setup {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = browserpool_server::cli::run(cli, browserpool_server::shutdown_signal()).await;
    // The server has stopped: the spans still queued are exported before the process exits.
    telemetry.shutdown().await;
    // Everything is closed and flushed, so the exit need not wait for the runtime's threads to
    // wind down one by one (on a busy host each waits for a turn: about a second in all).
    std::process::exit(exit_code(result).into())
}

/// 0, or the error on stderr and its exit code: a client command's own (see
/// `browserpool_client::cli::EXIT_CODES`), else 1.
fn exit_code(result: anyhow::Result<()>) -> u8 {
    let Err(e) = result else { return 0 };
    match e.downcast_ref::<browserpool_client::cli::CliError>() {
        Some(client) => {
            if !client.message().is_empty() {
                eprintln!("error: {}", client.message());
            }
            client.exit_code()
        }
        None => {
            eprintln!("error: {e:#}");
            1
        }
    }
}
