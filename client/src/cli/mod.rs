//! `browserpool session ...` and `browserpool admin ...`: the command line as a client of a
//! running server, over [`Client`]. The server's binary holds [`SessionArgs`] and
//! [`AdminArgs`] in its own command enum and calls their `run`; what they print is human text
//! (tables) by default and stable JSON with `--json`, and a failure is a [`CliError`] carrying
//! the exit code (see [`EXIT_CODES`]).

mod admin;
mod emulate;
mod events;
mod evidence;
mod files;
mod live;
mod proxies;
mod render;
mod session;
mod steps;
mod wait;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use browserpool_proto::tonic::{Code, Status};
use clap::{Args, ValueEnum};

pub use admin::AdminCommand;
pub use session::SessionCommand;

use crate::{Client, Error, TlsOptions};

/// The exit codes, as `--help` shows them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  the server answered with a failure: a failed action or step, NOT_FOUND, PERMISSION_DENIED,
     UNAUTHENTICATED, DEADLINE_EXCEEDED (no browser within --wait), a broken audit chain...
  2  usage: bad arguments, an unreadable or malformed file, no token found
  3  the server could not be reached: connection refused or timed out (--connect-timeout),
     TLS handshake failed, or the connection lost mid-call";

/// A command that did not succeed: what to tell the user and the process's exit code.
#[derive(Debug)]
pub struct CliError {
    exit: u8,
    message: String,
}

impl CliError {
    /// Exit code 1: the server answered with a failure.
    pub fn failed(message: impl Into<String>) -> CliError {
        CliError { exit: 1, message: message.into() }
    }

    /// Exit code 1 with nothing more to say: the output already showed the failure.
    pub fn reported() -> CliError {
        CliError { exit: 1, message: String::new() }
    }

    /// Exit code 2: the command line or a file it names is wrong.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError { exit: 2, message: message.into() }
    }

    /// Exit code 3: the server could not be reached.
    pub fn unreachable(message: impl Into<String>) -> CliError {
        CliError { exit: 3, message: message.into() }
    }

    /// The process's exit code.
    pub fn exit_code(&self) -> u8 {
        self.exit
    }

    /// What to print on stderr; empty when the output already said it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Where the server is and how to prove who we are; shared by every client command (and
/// accepted before or after the subcommand).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection and output")]
pub struct ConnectArgs {
    /// Server: http://HOST:PORT, or https://HOST:PORT with --ca-file. A bare HOST:PORT means
    /// http://.
    #[arg(long, env = "BROWSERPOOL_SERVER", default_value = "http://127.0.0.1:50051", global = true)]
    pub server: String,
    /// Bearer token (a JWT). Without it: --token-file, else the BROWSERPOOL_TOKEN variable,
    /// else <data-dir>/admin.token (the admin token a server writes in its data dir).
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// File holding the token.
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// The server's data dir, where the default token file is.
    #[arg(long, env = "BROWSERPOOL_DATA_DIR", default_value = ".browserpool", global = true)]
    pub data_dir: PathBuf,
    /// CA certificate(s) (PEM) an https:// server's certificate must chain to.
    #[arg(long, env = "BROWSERPOOL_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for a server with mutual TLS; with --key-file.
    #[arg(long, env = "BROWSERPOOL_CERT_FILE", global = true)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "BROWSERPOOL_KEY_FILE", global = true)]
    pub key_file: Option<PathBuf>,
    /// How long to try to connect before giving up (exit code 3).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, global = true)]
    pub connect_timeout: Duration,
    /// Print JSON for scripts: one object, or one object a line for lists and steps.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `browserpool session`: lease and drive browsers.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES, mut_subcommands = |sub: clap::Command| sub.after_help(EXIT_CODES))]
pub struct SessionArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    pub command: SessionCommand,
}

impl SessionArgs {
    pub async fn run(self) -> Result<(), CliError> {
        let ctx = self.connect.connect().await?;
        session::run(&ctx, self.command).await
    }
}

/// `browserpool admin`: operate the service (needs a token with scope `admin`).
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES, mut_subcommands = |sub: clap::Command| sub.after_help(EXIT_CODES))]
pub struct AdminArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    pub command: AdminCommand,
}

impl AdminArgs {
    pub async fn run(self) -> Result<(), CliError> {
        let ctx = self.connect.connect().await?;
        admin::run(&ctx, self.command).await
    }
}

/// A session state, as filters take it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StateArg {
    Queued,
    Ready,
    Closed,
    Crashed,
    Expired,
    Killed,
}

impl StateArg {
    fn wire(state: Option<StateArg>) -> i32 {
        use crate::pb::SessionState as S;
        (match state {
            None => S::Unspecified,
            Some(StateArg::Queued) => S::Queued,
            Some(StateArg::Ready) => S::Ready,
            Some(StateArg::Closed) => S::Closed,
            Some(StateArg::Crashed) => S::Crashed,
            Some(StateArg::Expired) => S::Expired,
            Some(StateArg::Killed) => S::Killed,
        }) as i32
    }
}

/// A connected client and how to report.
struct Ctx {
    client: Client,
    server: String,
    /// Where the token came from, named when the server refuses it.
    token_from: String,
    json: bool,
}

impl Ctx {
    /// A refused call; see [`status_error`].
    fn status(&self, s: Status) -> CliError {
        status_error(&self.server, &self.token_from, s)
    }

    /// Prints `text` on stdout as is.
    fn print(&self, text: &str) -> Result<(), CliError> {
        let mut out = std::io::stdout().lock();
        // A reader that went away (`| head`) ends the command quietly.
        out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(|_| CliError::reported())
    }

    /// Prints one line.
    fn line(&self, text: &str) -> Result<(), CliError> {
        self.print(&format!("{text}\n"))
    }

    /// Prints `value` as one JSON line.
    fn json_line(&self, value: &serde_json::Value) -> Result<(), CliError> {
        self.line(&value.to_string())
    }
}

impl ConnectArgs {
    /// The token and where it came from: --token, --token-file, BROWSERPOOL_TOKEN, then
    /// <data-dir>/admin.token.
    pub fn token(&self) -> Result<(String, String), CliError> {
        if let Some(token) = &self.token {
            return Ok((token.clone(), "--token".into()));
        }
        if let Some(path) = &self.token_file {
            return read_token(path).map(|t| (t, path.display().to_string()));
        }
        if let Some(token) = std::env::var("BROWSERPOOL_TOKEN").ok().filter(|t| !t.trim().is_empty()) {
            return Ok((token, "BROWSERPOOL_TOKEN".into()));
        }
        let default = self.data_dir.join("admin.token");
        if !default.exists() {
            return Err(CliError::usage(format!(
                "no token: give --token, --token-file or BROWSERPOOL_TOKEN ({} does not exist; a server writes it \
                 in its data dir, which --data-dir or BROWSERPOOL_DATA_DIR names)",
                default.display()
            )));
        }
        read_token(&default).map(|t| (t, default.display().to_string()))
    }

    /// The server's URL: http:// or https://, a bare HOST:PORT taken as http://.
    pub fn server_url(&self) -> Result<String, CliError> {
        let server = self.server.trim().trim_end_matches('/');
        match server.split_once("://") {
            None => Ok(format!("http://{server}")),
            Some(("http" | "https", rest)) if !rest.is_empty() => Ok(server.to_string()),
            Some(_) => Err(CliError::usage(format!("--server {server:?}: give http://HOST:PORT or https://HOST:PORT"))),
        }
    }

    /// The trust (and identity) for an https:// server; `None` for http://.
    fn tls(&self, https: bool) -> Result<Option<TlsOptions>, CliError> {
        let identity = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Some((read_file(cert, "--cert-file")?, read_file(key, "--key-file")?)),
            (None, None) => None,
            _ => return Err(CliError::usage("--cert-file and --key-file go together")),
        };
        if !https {
            if self.ca_file.is_some() || identity.is_some() {
                return Err(CliError::usage("--ca-file, --cert-file and --key-file are for an https:// --server"));
            }
            return Ok(None);
        }
        let Some(ca) = &self.ca_file else {
            return Err(CliError::usage("an https:// server needs --ca-file: the CA its certificate chains to"));
        };
        Ok(Some(TlsOptions { ca_pem: read_file(ca, "--ca-file")?, identity, domain: None }))
    }

    async fn connect(&self) -> Result<Ctx, CliError> {
        let server = self.server_url()?;
        let tls = self.tls(server.starts_with("https://"))?;
        let (token, token_from) = self.token()?;
        let connecting = async {
            match tls {
                Some(tls) => Client::connect_tls(server.clone(), &token, tls).await,
                None => Client::connect(server.clone(), &token).await,
            }
        };
        let client = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(client)) => client,
            Err(_) => {
                return Err(CliError::unreachable(format!(
                    "could not reach {server}: no connection within {}",
                    humantime::format_duration(self.connect_timeout)
                )))
            }
            Ok(Err(Error::Connect(e))) => {
                let why = with_sources(&e.to_string(), std::error::Error::source(&e));
                return Err(CliError::unreachable(format!("could not reach {server}: {why}")));
            }
            Ok(Err(Error::BadToken)) => {
                return Err(CliError::usage(format!("the token from {token_from} is not a valid header value")))
            }
            Ok(Err(e)) => return Err(CliError::failed(e.to_string())),
        };
        Ok(Ctx { client, server, token_from, json: self.json })
    }
}

/// A call that failed: exit code 3 when the transport failed (the server's own answers carry
/// no source error; a connection refused on reconnect is UNAVAILABLE, one lost mid-call
/// UNKNOWN), else 1 with the code, naming the token's origin when it was refused.
fn status_error(server: &str, token_from: &str, s: Status) -> CliError {
    let source = std::error::Error::source(&s);
    if source.is_some() && matches!(s.code(), Code::Unavailable | Code::Unknown) {
        return CliError::unreachable(format!(
            "lost the connection to {server}: {}",
            with_sources(s.message(), source)
        ));
    }
    let mut message = format!("{}: {}", code_name(s.code()), s.message());
    if s.code() == Code::Unauthenticated {
        message.push_str(&format!(" (token from {token_from})"));
    }
    CliError::failed(message)
}

fn read_token(path: &Path) -> Result<String, CliError> {
    let token = String::from_utf8(read_file(path, "token file")?)
        .map_err(|_| CliError::usage(format!("token file {}: not text", path.display())))?;
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(CliError::usage(format!("token file {} is empty", path.display())));
    }
    Ok(token)
}

/// Reads a file the command line names (`what`: the flag); `-` is stdin.
fn read_file(path: &Path, what: &str) -> Result<Vec<u8>, CliError> {
    let read = if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map(|_| buf)
    } else {
        std::fs::read(path)
    };
    read.map_err(|e| CliError::usage(format!("{what} {}: {e}", path.display())))
}

/// `message: source: source...`, each cause once.
fn with_sources(message: &str, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = message.to_string();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}

/// A gRPC code as the protocol names it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A duration as whole milliseconds on the wire (u32, saturating).
fn millis(d: Duration) -> u32 {
    d.as_millis().min(u32::MAX as u128) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        connect: ConnectArgs,
    }

    fn args(argv: &[&str]) -> ConnectArgs {
        Cli::try_parse_from(std::iter::once("browserpool").chain(argv.iter().copied())).unwrap().connect
    }

    #[test]
    fn servers_are_http_or_https_urls() {
        assert_eq!(args(&["--server", "127.0.0.1:9"]).server_url().unwrap(), "http://127.0.0.1:9");
        assert_eq!(args(&["--server", "https://pool:443/"]).server_url().unwrap(), "https://pool:443");
        assert_eq!(args(&["--server", "ftp://x"]).server_url().unwrap_err().exit_code(), 2);
    }

    #[test]
    fn tls_files_go_with_https() {
        let https = args(&["--server", "https://x:1"]);
        let e = https.tls(true).unwrap_err();
        assert!(e.message().contains("--ca-file"), "{e}");
        let e = args(&["--ca-file", "ca.pem"]).tls(false).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let e = args(&["--cert-file", "c.pem"]).tls(true).unwrap_err();
        assert!(e.message().contains("go together"), "{e}");
    }

    #[test]
    fn tokens_come_from_the_flag_then_the_file_then_the_data_dir() {
        let dir = std::env::temp_dir().join(format!("bp-cli-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("admin.token"), "from-data-dir\n").unwrap();
        std::fs::write(dir.join("other"), "  from-file \n").unwrap();
        let data_dir = dir.to_str().unwrap();
        let other = dir.join("other");
        let flag = args(&["--token", "t", "--token-file", other.to_str().unwrap()]).token().unwrap();
        assert_eq!(flag, ("t".to_string(), "--token".to_string()));
        let file = args(&["--token-file", other.to_str().unwrap(), "--data-dir", data_dir]).token().unwrap();
        assert_eq!(file.0, "from-file");
        // BROWSERPOOL_TOKEN sits between these two; tests leave the environment alone.
        if std::env::var_os("BROWSERPOOL_TOKEN").is_none() {
            let default = args(&["--data-dir", data_dir]).token().unwrap();
            assert_eq!(default.0, "from-data-dir");
            let missing = args(&["--data-dir", dir.join("nope").to_str().unwrap()]).token().unwrap_err();
            assert_eq!(missing.exit_code(), 2);
            assert!(missing.message().starts_with("no token"), "{missing}");
        }
        std::fs::write(dir.join("empty"), "\n").unwrap();
        let empty = args(&["--token-file", dir.join("empty").to_str().unwrap()]).token().unwrap_err();
        assert!(empty.message().contains("is empty"), "{empty}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn transport_failures_are_unreachable_and_answers_are_failures() {
        let lost = Status::from_error(Box::new(std::io::Error::other("connection reset")));
        let e = status_error("http://x:1", "--token", lost);
        assert_eq!(e.exit_code(), 3, "{e}");
        assert!(e.message().starts_with("lost the connection to http://x:1: ") && e.message().contains("reset"), "{e}");
        let draining = status_error("http://x:1", "--token", Status::unavailable("server is draining"));
        assert_eq!((draining.exit_code(), draining.message()), (1, "UNAVAILABLE: server is draining"));
        let refused = status_error("http://x:1", "BROWSERPOOL_TOKEN", Status::unauthenticated("invalid token"));
        assert_eq!(refused.message(), "UNAUTHENTICATED: invalid token (token from BROWSERPOOL_TOKEN)");
        assert_eq!(status_error("s", "t", Status::not_found("session")).exit_code(), 1);
    }

    #[test]
    fn causes_are_listed_once() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let inner = E("tcp connect error", Some(Box::new(E("Connection refused (os error 111)", None))));
        assert_eq!(
            with_sources("transport error: tcp connect error", Some(&inner)),
            "transport error: tcp connect error: Connection refused (os error 111)"
        );
    }
}
