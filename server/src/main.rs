//! `browserpool`: parse, start telemetry, run the chosen command until a signal.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = browserpool_server::config::Cli::parse();
    browserpool_server::telemetry::init();
    match browserpool_server::cli::run(cli, browserpool_server::shutdown_signal()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
