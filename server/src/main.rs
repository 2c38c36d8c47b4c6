//! `browserpool`: parse, start telemetry, run the chosen command until a signal, then flush
//! the traces.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = browserpool_server::config::Cli::parse_noting_sources();
    let setup = browserpool_server::telemetry::LogFormat::from_env()
        .and_then(|format| Ok((format, cli.otlp_endpoint()?)))
        .and_then(|(format, otlp)| {
            browserpool_server::telemetry::init(format, otlp.as_deref()).map_err(|e| format!("{e:#}"))
        });
    let telemetry = match setup {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let result = browserpool_server::cli::run(cli, browserpool_server::shutdown_signal()).await;
    // The server has stopped: the spans still queued are exported before the process exits.
    telemetry.shutdown().await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
