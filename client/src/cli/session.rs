//! `browserpool session ...`: acquire, act, batch, release, list, get, export, import, files,
//! recording, delete-artifacts.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::render::{self, result_json, result_line, session_fields, session_json, sessions_table};
use super::steps::{parse_steps, payload_arg};
use super::wait::{self, Show};
use super::{millis, read_file, CliError, Ctx, StateArg};
use crate::pb;
use browserpool_proto::envelope_json as envelope;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Lease a browser, waiting up to --wait in the tenant's queue (a timer on stderr while
    /// it waits on a terminal; in a log, a line every 5 s); prints the session.
    Acquire(AcquireArgs),
    /// Run one action (docs/actions.md lists them): navigate, click, type, extract,
    /// screenshot, evaluate...
    Act(ActArgs),
    /// Run the steps of a JSON file in one call (at most 50), one line per step.
    Batch(BatchArgs),
    /// End a session and destroy its browser (idempotent).
    Release {
        /// Session id.
        session: String,
        /// The job failed: a recording made with `--record on-failure` is kept.
        #[arg(long)]
        failed: bool,
    },
    /// The sessions of the token's tenant.
    List {
        /// Only sessions in this state.
        #[arg(long, value_enum)]
        state: Option<StateArg>,
    },
    /// One session.
    Get {
        /// Session id.
        session: String,
    },
    /// Save one origin's cookies and storage as an envelope file (protobuf JSON; it is a
    /// secret, written with mode 0600).
    Export(ExportArgs),
    /// Replace one origin's cookies and storage with an envelope file (its integrity is
    /// checked first).
    Import(ImportArgs),
    /// The session's files (its downloads and uploads): list them, or get, put or delete one.
    Files(super::files::FilesArgs),
    /// Download an ended session's recording (WebM, see `acquire --record`) to --out
    /// (default: `<session>.webm`; `-` for stdout).
    Recording {
        /// Session id.
        session: String,
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// Delete what was kept of an ended session (its files and recording) now.
    DeleteArtifacts {
        /// Session id.
        session: String,
    },
    /// Print the session's events as they happen (console, dialogs, navigations, tabs, its
    /// end), one line each (--json: one object each), until the session ends.
    Events {
        /// Session id.
        session: String,
    },
    /// Print a link to watch the live session in a web browser (--control: to take its mouse
    /// and keyboard too). Whoever holds the link may use it until --ttl, the session's end, or
    /// `session live S --revoke`.
    Live {
        /// Session id.
        session: String,
        /// A link that drives the session, not only views it (scope sessions:write).
        #[arg(long)]
        control: bool,
        /// How long the link works (default 15m; never past the session's end).
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<Duration>,
        /// Revoke the session's links instead (all of them, or the one --link names).
        #[arg(long, conflicts_with_all = ["control", "ttl"])]
        revoke: bool,
        /// With --revoke: the link id to revoke.
        #[arg(long, requires = "revoke")]
        link: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// Longest wait in the queue for a free browser (e.g. 500ms, 30s, 2m; 0 = do not wait).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    wait: Duration,
    /// Lease lifetime (default and cap: the tenant's max TTL).
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Option<Duration>,
    /// Close the session after this long without a call (default: the tenant's).
    #[arg(long, value_parser = humantime::parse_duration)]
    idle_timeout: Option<Duration>,
    /// Initial viewport, WIDTHxHEIGHT in CSS pixels (e.g. 1280x720).
    #[arg(long, value_parser = parse_viewport)]
    viewport: Option<(u32, u32)>,
    /// Device scale factor, 1..3.
    #[arg(long)]
    scale: Option<f64>,
    /// Emulate a mobile device.
    #[arg(long)]
    mobile: bool,
    /// A label stored on the session, KEY=VALUE (repeat for more).
    #[arg(long = "label", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// An envelope file (`session export`) to import at start; needs scope context:import.
    #[arg(long)]
    context: Option<PathBuf>,
    /// Record the session as a video: on, off, or on-failure (kept only when the session
    /// crashed, expired or was killed, an action failed, or `release --failed`). Fetch it
    /// with `session recording` once the session has ended.
    #[arg(long, value_enum)]
    record: Option<RecordArg>,
    #[command(flatten)]
    emulation: super::emulate::EmulationArgs,
    /// Print only the session id.
    #[arg(short, long)]
    quiet: bool,
}

/// `acquire --record`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum RecordArg {
    On,
    Off,
    OnFailure,
}

impl RecordArg {
    pub(super) fn wire(record: Option<RecordArg>) -> i32 {
        (match record {
            None => pb::Record::Unspecified,
            Some(RecordArg::On) => pb::Record::On,
            Some(RecordArg::Off) => pb::Record::Off,
            Some(RecordArg::OnFailure) => pb::Record::RetainOnFailure,
        }) as i32
    }
}

#[derive(Debug, Args)]
pub struct ActArgs {
    /// Session id.
    session: String,
    /// Action name or alias.
    action: String,
    /// Selector: CSS, text=, role=, xpath= (docs/actions.md), or the dialog grammar (dialog::accept...); "" for none.
    selector: Option<String>,
    /// Payload: JSON when it parses (`{"full_page":true}`, `3`), else the text as a string
    /// (`http://127.0.0.1:8000/`, `document.title`).
    #[arg(allow_hyphen_values = true)]
    payload: Option<String>,
    /// Send the payload as a string even when it parses as JSON.
    #[arg(long)]
    string: bool,
    /// The action's own timeout in ms; 0 = the server's default (30000).
    #[arg(long, default_value_t = 0)]
    timeout_ms: u32,
    /// Switch to this tab first (sticky, as switch_tab).
    #[arg(long)]
    tab: Option<i32>,
    /// Write the result's bytes (screenshot, pdf) to FILE; `-` for stdout when it is not a
    /// terminal. Binary data is never printed otherwise.
    #[arg(short, long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Session id.
    session: String,
    /// JSON file of steps (`-` for stdin): a list of {"action", "selector", "payload",
    /// "timeout_ms", "id", "tab_index"}, only "action" required, e.g.
    /// [{"action": "navigate", "payload": "http://127.0.0.1:8000/"}, {"action": "click", "selector": "#go"}].
    #[arg(short, long)]
    file: PathBuf,
    /// Stop at the first failed step; the steps after it do not run.
    #[arg(long)]
    stop_on_error: bool,
    /// Write each step's bytes (screenshots, pdfs) to DIR/step-<N>.<png|jpg|pdf>.
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// When a step fails, save the page as the batch left it: `--on-failure screenshot DIR`
    /// writes DIR/failure.png (the active tab) and DIR/failure-url.txt.
    #[arg(long, num_args = 2, value_names = ["screenshot", "DIR"])]
    on_failure: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Session id.
    session: String,
    /// Envelope file to write (mode 0600); `-` for stdout.
    #[arg(short, long)]
    out: PathBuf,
    /// Origin to capture, scheme://host[:port]; default: the active tab's.
    #[arg(long)]
    origin: Option<String>,
    /// Leave localStorage and sessionStorage out.
    #[arg(long)]
    no_storage: bool,
    /// Include the basic-auth credentials known for the origin (in plaintext).
    #[arg(long)]
    http_auth: bool,
    /// Record the browser's user agent.
    #[arg(long)]
    user_agent: bool,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Session id.
    session: String,
    /// Envelope file (`session export`); `-` for stdin.
    #[arg(short, long)]
    file: PathBuf,
    /// The active tab must already be on the envelope's origin (else FAILED_PRECONDITION);
    /// without it the tab navigates there first.
    #[arg(long)]
    strict_origin: bool,
}

fn parse_viewport(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(|| format!("{s:?} is not WIDTHxHEIGHT"))?;
    let dim = |d: &str| d.trim().parse::<u32>().map_err(|_| format!("{s:?} is not WIDTHxHEIGHT"));
    Ok((dim(w)?, dim(h)?))
}

pub(super) fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    Ok((k.to_string(), v.to_string()))
}

pub(super) async fn run(ctx: &Ctx, command: SessionCommand) -> Result<(), CliError> {
    match command {
        SessionCommand::Acquire(args) => acquire(ctx, args).await,
        SessionCommand::Act(args) => act(ctx, args).await,
        SessionCommand::Batch(args) => batch(ctx, args).await,
        SessionCommand::Release { session, failed } => {
            let req = pb::ReleaseRequest { session_id: session.clone(), failed };
            let r = ctx.client.sessions().release(req).await.map_err(|s| ctx.status(s))?.into_inner();
            let state = render::session_state(r.state);
            if ctx.json {
                return ctx.json_line(&json!({"session_id": session, "released": r.released, "state": state}));
            }
            let state = render::short(&state, "SESSION_STATE_");
            match r.released {
                true => ctx.line(&format!("released {session} ({state})")),
                false => ctx.line(&format!("{session} had already ended ({state})")),
            }
        }
        SessionCommand::List { state } => {
            let mut sessions = Vec::new();
            let mut page_token = String::new();
            loop {
                let req = pb::ListSessionsRequest { page_size: 0, page_token, state: StateArg::wire(state) };
                let page = ctx.client.sessions().list(req).await.map_err(|s| ctx.status(s))?.into_inner();
                sessions.extend(page.sessions);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            print_sessions(ctx, &sessions)
        }
        SessionCommand::Get { session } => {
            let req = pb::GetSessionRequest { session_id: session };
            let s = ctx.client.sessions().get(req).await.map_err(|s| ctx.status(s))?.into_inner();
            print_session(ctx, &s)
        }
        SessionCommand::Export(args) => export(ctx, args).await,
        SessionCommand::Import(args) => import(ctx, args).await,
        SessionCommand::Files(args) => super::files::run(ctx, args).await,
        SessionCommand::Recording { session, out } => super::files::recording(ctx, session, out).await,
        SessionCommand::DeleteArtifacts { session } => super::files::delete_artifacts(ctx, session).await,
        SessionCommand::Events { session } => super::events::run(ctx, session).await,
        SessionCommand::Live { session, control, ttl, revoke, link } => match revoke {
            true => super::live::revoke(ctx, session, link.unwrap_or_default()).await,
            false => super::live::link(ctx, session, control, ttl).await,
        },
    }
}

/// Sessions as a table, or one JSON object a line.
pub(super) fn print_sessions(ctx: &Ctx, sessions: &[pb::Session]) -> Result<(), CliError> {
    if ctx.json {
        return sessions.iter().try_for_each(|s| ctx.json_line(&session_json(s)));
    }
    ctx.print(&sessions_table(sessions))
}

fn print_session(ctx: &Ctx, s: &pb::Session) -> Result<(), CliError> {
    if ctx.json {
        return ctx.json_line(&session_json(s));
    }
    ctx.print(&session_fields(s))
}

async fn acquire(ctx: &Ctx, args: AcquireArgs) -> Result<(), CliError> {
    let context = match &args.context {
        Some(path) => Some(read_envelope(path)?),
        None => None,
    };
    let viewport = (args.viewport.is_some() || args.scale.is_some() || args.mobile).then(|| {
        let (width, height) = args.viewport.unwrap_or((0, 0));
        pb::Viewport { width, height, scale: args.scale.unwrap_or(0.0), mobile: args.mobile }
    });
    let req = args.emulation.onto(pb::AcquireRequest {
        wait_ms: millis(args.wait),
        ttl_ms: args.ttl.map_or(0, millis),
        idle_timeout_ms: args.idle_timeout.map_or(0, millis),
        viewport,
        labels: args.labels.into_iter().collect::<HashMap<_, _>>(),
        context,
        record: RecordArg::wire(args.record),
        ..Default::default()
    });
    let show = if !ctx.json && std::io::stderr().is_terminal() { Show::Spinner } else { Show::Lines };
    let session = wait::acquire(&ctx.client, show, args.wait, req).await.map_err(|s| ctx.status(s))?;
    if args.quiet && !ctx.json {
        return ctx.line(&session.session_id);
    }
    print_session(ctx, &session)
}

/// Where bytes go: a file, or stdout (never a terminal).
pub(super) enum Out {
    File(PathBuf),
    Stdout,
}

impl Out {
    pub(super) fn new(path: &Path) -> Result<Out, CliError> {
        if path != Path::new("-") {
            return Ok(Out::File(path.to_path_buf()));
        }
        if std::io::stdout().is_terminal() {
            return Err(CliError::usage("--out -: stdout is a terminal; binary data goes to a file or a pipe"));
        }
        Ok(Out::Stdout)
    }

    pub(super) fn name(&self) -> String {
        match self {
            Out::File(path) => path.display().to_string(),
            Out::Stdout => "-".into(),
        }
    }

    pub(super) fn write(&self, data: &[u8]) -> Result<(), CliError> {
        use std::io::Write;
        match self {
            Out::File(path) => {
                std::fs::write(path, data).map_err(|e| CliError::usage(format!("--out {}: {e}", path.display())))
            }
            Out::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(data).and_then(|()| out.flush()).map_err(|_| CliError::reported())
            }
        }
    }
}

async fn act(ctx: &Ctx, args: ActArgs) -> Result<(), CliError> {
    let out = args.out.as_deref().map(Out::new).transpose()?;
    let action = pb::Action {
        action: args.action,
        selector: args.selector.unwrap_or_default(),
        payload: payload_arg(args.payload.as_deref(), args.string).as_ref().map(crate::from_json),
        timeout_ms: args.timeout_ms,
        tab_index: args.tab,
        id: String::new(),
    };
    let req = pb::ActRequest { session_id: args.session, action: Some(action) };
    let result = ctx.client.sessions().act(req).await.map_err(|s| ctx.status(s))?.into_inner();
    let mut written = None;
    match &out {
        Some(out) if !result.data.is_empty() => {
            out.write(&result.data)?;
            written = Some(out.name());
        }
        Some(out) if result.ok => {
            eprintln!("note: {} returned no bytes; nothing written to {}", result.action, out.name())
        }
        _ => {}
    }
    // With the bytes on stdout, the report goes to stderr.
    let report = if ctx.json {
        result_json(&result, written.as_deref()).to_string()
    } else {
        result_line(&result, None, written.as_deref())
    };
    match out {
        Some(Out::Stdout) => eprintln!("{report}"),
        _ => ctx.line(&report)?,
    }
    if result.ok {
        Ok(())
    } else {
        Err(CliError::reported())
    }
}

/// The file extension for a result's bytes.
fn extension(mime: &str) -> &'static str {
    match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "application/pdf" => "pdf",
        _ => "bin",
    }
}

async fn batch(ctx: &Ctx, args: BatchArgs) -> Result<(), CliError> {
    let name = args.file.display().to_string();
    let text = String::from_utf8(read_file(&args.file, "--file")?)
        .map_err(|_| CliError::usage(format!("--file {name}: not UTF-8 text")))?;
    let steps = parse_steps(&text).map_err(|e| CliError::usage(format!("--file {name}: {e}")))?;
    let on_failure = super::evidence::parse(&args.on_failure)?;
    if let Some(dir) = &args.out_dir {
        std::fs::create_dir_all(dir).map_err(|e| CliError::usage(format!("--out-dir {}: {e}", dir.display())))?;
    }
    let session = args.session.clone();
    let req = pb::BatchRequest { session_id: args.session, actions: steps.clone(), stop_on_error: args.stop_on_error };
    let response = ctx.client.sessions().batch(req).await.map_err(|s| ctx.status(s))?.into_inner();
    for (i, step) in steps.iter().enumerate() {
        let n = i + 1;
        let Some(result) = response.results.get(i) else {
            // Not run: an earlier step failed under --stop-on-error.
            if ctx.json {
                ctx.json_line(&json!({"step": n, "run": false, "id": step.id, "action": step.action, "ok": false}))?;
            } else {
                ctx.line(&format!("--  {n} {}  not run", step.action))?;
            }
            continue;
        };
        let mut written = None;
        if let (Some(dir), false) = (&args.out_dir, result.data.is_empty()) {
            let path = dir.join(format!("step-{n}.{}", extension(&result.mime_type)));
            Out::File(path.clone()).write(&result.data)?;
            written = Some(path.display().to_string());
        }
        if ctx.json {
            let mut line = json!({"step": n, "run": true});
            if let (Some(line), serde_json::Value::Object(fields)) =
                (line.as_object_mut(), result_json(result, written.as_deref()))
            {
                line.extend(fields);
            }
            ctx.json_line(&line)?;
        } else {
            ctx.line(&result_line(result, Some(n), written.as_deref()))?;
        }
    }
    let not_run = steps.len().saturating_sub(response.results.len());
    if !ctx.json {
        eprintln!(
            "{} ok, {} failed, {not_run} not run in {} ms",
            response.succeeded, response.failed, response.duration_ms
        );
    }
    if response.failed == 0 {
        return Ok(());
    }
    if let Some((_, dir)) = on_failure {
        super::evidence::save(ctx, &session, &dir).await?;
    }
    Err(CliError::reported())
}

fn read_envelope(path: &Path) -> Result<pb::ContextEnvelope, CliError> {
    let name = path.display();
    let value: serde_json::Value = serde_json::from_slice(&read_file(path, "envelope file")?)
        .map_err(|e| CliError::usage(format!("envelope file {name}: not JSON: {e}")))?;
    envelope::from_json(&value).map_err(|e| CliError::usage(format!("envelope file {name}: {e}")))
}

/// Writes a file only its owner may read: an envelope holds cookies and maybe passwords.
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // `mode` applies only to a new file; an existing one is narrowed too.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(data)
}

async fn export(ctx: &Ctx, args: ExportArgs) -> Result<(), CliError> {
    let req = pb::ExportContextRequest {
        session_id: args.session,
        origin: args.origin.unwrap_or_default(),
        include_storage: Some(!args.no_storage),
        include_http_auth: args.http_auth,
        capture_user_agent: args.user_agent,
    };
    let env = ctx.client.sessions().export_context(req).await.map_err(|s| ctx.status(s))?.into_inner();
    let text = format!("{}\n", serde_json::to_string_pretty(&envelope::to_json(&env)).unwrap_or_default());
    let to_stdout = args.out == Path::new("-");
    if to_stdout {
        ctx.print(&text)?;
    } else {
        write_private(&args.out, text.as_bytes())
            .map_err(|e| CliError::usage(format!("--out {}: {e}", args.out.display())))?;
    }
    let summary = json!({
        "origin": env.origin,
        "cookies": env.cookies.len(),
        "local_storage_keys": env.local_storage.len(),
        "session_storage_keys": env.session_storage.len(),
        "http_auth": env.http_auth.is_some(),
        "integrity": env.integrity,
        "out": args.out.display().to_string(),
    });
    let report = if ctx.json {
        summary.to_string()
    } else {
        format!(
            "exported {}: {} cookies, {} local and {} session storage keys -> {}",
            env.origin,
            env.cookies.len(),
            env.local_storage.len(),
            env.session_storage.len(),
            args.out.display()
        )
    };
    // The envelope itself holds stdout when it went there.
    if to_stdout {
        eprintln!("{report}");
        Ok(())
    } else {
        ctx.line(&report)
    }
}

async fn import(ctx: &Ctx, args: ImportArgs) -> Result<(), CliError> {
    let envelope = read_envelope(&args.file)?;
    let origin = envelope.origin.clone();
    let req = pb::ImportContextRequest {
        session_id: args.session,
        envelope: Some(envelope),
        strict_origin: args.strict_origin,
    };
    let r = ctx.client.sessions().import_context(req).await.map_err(|s| ctx.status(s))?.into_inner();
    if ctx.json {
        ctx.json_line(&json!({
            "ok": r.ok,
            "origin": origin,
            "applied_cookies": r.applied_cookies,
            "applied_storage_keys": r.applied_storage_keys,
            "integrity_error": r.integrity_error,
        }))?;
    } else if r.ok {
        ctx.line(&format!(
            "imported {origin}: {} cookies, {} storage keys",
            r.applied_cookies, r.applied_storage_keys
        ))?;
    }
    if r.ok {
        Ok(())
    } else {
        Err(CliError::failed(format!("envelope refused, nothing applied: {}", r.integrity_error)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viewports_and_labels_parse() {
        assert_eq!(parse_viewport("1280x720").unwrap(), (1280, 720));
        assert!(parse_viewport("1280").is_err());
        assert!(parse_viewport("wide x tall").is_err());
        assert_eq!(parse_label("job=7=8").unwrap(), ("job".into(), "7=8".into()));
        assert!(parse_label("job").is_err());
    }

    #[test]
    fn private_files_are_0600_even_when_they_existed() {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("bp-cli-envelope-{}", std::process::id()));
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, b"{}").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        std::fs::remove_file(&path).unwrap();
    }
}
