//! `browserpool`: parse, start telemetry, run the chosen command until a signal.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = browserpool_server::config::Cli::parse();
    let format = match browserpool_server::telemetry::LogFormat::from_env() {
        Ok(format) => format,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    browserpool_server::telemetry::init(format);
    match browserpool_server::cli::run(cli, browserpool_server::shutdown_signal()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
