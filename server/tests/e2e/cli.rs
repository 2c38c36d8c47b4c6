//! The `browserpool session|admin` command line, run as a user runs it (the built binary, its
//! stdout, stderr and exit code) against a real server and a real Chromium: a session driven
//! from acquire to release, batches with a failing step, envelopes through files, the admin
//! commands, and the exit codes of an unreachable server and a refused token.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{fixture_site, TestServer};

/// What one command did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {:?}\n{}", self.stdout, self.stderr))
    }

    fn json_lines(&self) -> Vec<Value> {
        self.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect()
    }

    /// Asserts the exit code, showing the output when it differs.
    fn expect(self, code: i32) -> Run {
        assert_eq!(self.code, code, "exit code\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        self
    }
}

/// The binary, pointed at a server by its environment, run in a directory of its own (so no
/// `.browserpool/admin.token` is found by accident).
struct Cli {
    server: String,
    token: String,
    dir: tempfile::TempDir,
}

impl Cli {
    fn new(server: &TestServer) -> Cli {
        Cli { server: server.endpoint(), token: server.admin_token.clone(), dir: tempfile::tempdir().unwrap() }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    async fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, None).await
    }

    async fn run_with(&self, args: &[&str], stdin: Option<&str>) -> Run {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserpool"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env_remove("BROWSERPOOL_DATA_DIR")
            .env("BROWSERPOOL_SERVER", &self.server)
            .env("BROWSERPOOL_TOKEN", &self.token)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or_default().as_bytes()).await.unwrap();
        drop(input);
        let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("browserpool {args:?} did not finish within 2 minutes"))
            .unwrap();
        Run {
            code: out.status.code().expect("exited, not killed by a signal"),
            stdout: String::from_utf8(out.stdout).expect("stdout is text"),
            stderr: String::from_utf8(out.stderr).expect("stderr is text"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_drives_a_session_from_acquire_to_release() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let cli = Cli::new(&server);

    let acquired = cli.run(&["session", "acquire", "--json", "--label", "job=cli-e2e"]).await.expect(0).json();
    assert_eq!(acquired["state"], "SESSION_STATE_READY", "{acquired}");
    assert_eq!(acquired["labels"], json!({"job": "cli-e2e"}));
    let s = acquired["session_id"].as_str().unwrap().to_string();
    assert!(acquired["cdp_url"].as_str().unwrap().starts_with("ws://"), "{acquired}");

    // One action at a time: the payload is a string when it is not JSON.
    let nav = cli.run(&["session", "act", &s, "navigate", "", &format!("{site}/")]).await.expect(0);
    assert!(nav.stdout.starts_with("ok  navigate  {"), "{}", nav.stdout);
    assert!(nav.stdout.contains(r#""status":200"#), "{}", nav.stdout);
    let text = cli.run(&["session", "act", &s, "extract", "#greeting", "--json"]).await.expect(0).json();
    assert_eq!((text["ok"].clone(), text["value"].clone()), (json!(true), json!("Hello, nobody")), "{text}");
    let sum = cli.run(&["session", "act", &s, "evaluate", "", "[1, 2].length + 1"]).await.expect(0);
    assert_eq!(sum.stdout, "ok  evaluate  3\n");

    // Bytes go to --out, never to the terminal or the report.
    let shot = cli.path("shot.png");
    let taken = cli.run(&["session", "act", &s, "screenshot", "--out", &shot]).await.expect(0);
    assert!(taken.stdout.starts_with("ok  screenshot  image/png, "), "{}", taken.stdout);
    assert!(taken.stdout.trim_end().ends_with(&format!("-> {shot}")), "{}", taken.stdout);
    assert_eq!(&std::fs::read(&shot).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    let unwritten = cli.run(&["session", "act", &s, "screenshot", "--json"]).await.expect(0).json();
    assert!(unwritten["data_bytes"].as_u64().unwrap() > 8 && unwritten["out"].is_null(), "{unwritten}");

    // A failed action is exit code 1, with the code and the names it may have meant.
    let missing = cli.run(&["session", "act", &s, "click", "#nope", "--timeout-ms", "300"]).await.expect(1);
    assert!(missing.stdout.starts_with("ERR click  ELEMENT_NOT_FOUND: "), "{}", missing.stdout);
    let typo = cli.run(&["session", "act", &s, "naviagte", "", &site]).await.expect(1);
    assert!(
        typo.stdout.contains("UNKNOWN_ACTION") && typo.stdout.contains("did you mean: navigate"),
        "{}",
        typo.stdout
    );

    // A batch from a file: one line per step, every step run, exit code 1 for the failure.
    let steps = cli.path("steps.json");
    std::fs::write(
        &steps,
        json!([
            {"action": "fill", "selector": "#name", "payload": "Ada"},
            {"action": "click", "selector": "#go"},
            {"action": "extract", "selector": "#greeting", "id": "greeting"},
            {"action": "click", "selector": "#nope", "timeout_ms": 300},
            {"action": "title"},
        ])
        .to_string(),
    )
    .unwrap();
    let batch = cli.run(&["session", "batch", &s, "--file", &steps]).await.expect(1);
    let lines: Vec<_> = batch.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", batch.stdout);
    assert!(lines[0].starts_with("ok  1 fill"), "{}", lines[0]);
    assert_eq!(lines[2], r#"ok  3 extract  "Hello, Ada""#);
    assert!(lines[3].starts_with("ERR 4 click  ELEMENT_NOT_FOUND: "), "{}", lines[3]);
    assert_eq!(lines[4], r#"ok  5 title  "Greeter""#);
    assert!(batch.stderr.contains("4 ok, 1 failed, 0 not run"), "{}", batch.stderr);

    // From stdin, as JSON, stopping at the failure: the step after it is reported not run.
    let stdin =
        json!([{"action": "url"}, {"action": "click", "selector": "#nope", "timeout_ms": 300}, {"action": "title"}]);
    let stopped = cli
        .run_with(&["session", "batch", &s, "--file", "-", "--stop-on-error", "--json"], Some(&stdin.to_string()))
        .await
        .expect(1)
        .json_lines();
    assert_eq!(stopped.len(), 3, "{stopped:?}");
    assert_eq!((stopped[0]["step"].clone(), stopped[0]["ok"].clone()), (json!(1), json!(true)));
    assert_eq!(stopped[0]["value"], json!(format!("{site}/")));
    assert_eq!(stopped[1]["error"]["code"], "ERROR_CODE_ELEMENT_NOT_FOUND");
    assert_eq!((stopped[2]["run"].clone(), stopped[2]["action"].clone()), (json!(false), json!("title")));
    let bad_file = cli.run_with(&["session", "batch", &s, "--file", "-"], Some(r#"[{"actoin": "url"}]"#)).await;
    assert!(bad_file.expect(2).stderr.contains(r#"step 1: unknown key "actoin""#));

    // Files: put one, list it, get it back to a file, delete it; a bad name is exit code 1.
    let upload = cli.path("invoice.txt");
    std::fs::write(&upload, "total: 42\n").unwrap();
    let put = cli.run(&["session", "files", &s, "put", &upload]).await.expect(0);
    assert!(put.stdout.starts_with("uploaded invoice.txt (10 bytes, sha256 "), "{}", put.stdout);
    let renamed = cli.run(&["session", "files", &s, "put", &upload, "--name", "copy.txt", "--json"]).await.expect(0);
    assert_eq!((renamed.json()["name"].clone(), renamed.json()["kind"].clone()), (json!("copy.txt"), json!("upload")));
    let files = cli.run(&["session", "files", &s]).await.expect(0);
    let names: Vec<&str> = files.stdout.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(names, ["copy.txt", "invoice.txt"], "{}", files.stdout);
    let back = cli.path("back.txt");
    cli.run(&["session", "files", &s, "get", "invoice.txt", "--out", &back]).await.expect(0);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "total: 42\n");
    assert_eq!(cli.run(&["session", "files", &s, "delete", "copy.txt"]).await.expect(0).stdout, "deleted copy.txt\n");
    let bad = cli.run(&["session", "files", &s, "put", &upload, "--name", "../x"]).await.expect(1);
    assert!(bad.stderr.contains("INVALID_ARGUMENT") && bad.stderr.contains("path separator"), "{}", bad.stderr);

    // Listing, reading, the operator's view.
    let listed = cli.run(&["session", "list", "--json"]).await.expect(0).json_lines();
    assert!(listed.iter().any(|l| l["session_id"] == s.as_str()), "{listed:?}");
    let got = cli.run(&["session", "get", &s]).await.expect(0);
    let field = |name: &str| got.stdout.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_default();
    assert_eq!((field("session "), field("state ")), (s.as_str(), "READY"), "{}", got.stdout);
    let status = cli.run(&["admin", "status", "--json"]).await.expect(0).json();
    assert!(status["leased"].as_u64().unwrap() >= 1, "{status}");
    assert!(status["workers"].as_array().unwrap().iter().any(|w| w["session_id"] == s.as_str()), "{status}");
    let table = cli.run(&["admin", "status"]).await.expect(0);
    assert!(table.stdout.contains("WORKER") && table.stdout.contains("LEASED"), "{}", table.stdout);
    let everyone = cli.run(&["admin", "sessions", "--json", "--state", "ready"]).await.expect(0).json_lines();
    assert!(everyone.iter().any(|l| l["session_id"] == s.as_str()), "{everyone:?}");

    // Release, idempotent; the session is then CLOSED, and an unknown one NOT_FOUND.
    let released = cli.run(&["session", "release", &s]).await.expect(0);
    assert_eq!(released.stdout, format!("released {s} (CLOSED)\n"));
    let again = cli.run(&["session", "release", &s]).await.expect(0);
    assert_eq!(again.stdout, format!("{s} had already ended (CLOSED)\n"));
    let closed = cli.run(&["session", "get", &s, "--json"]).await.expect(0).json();
    assert_eq!(closed["state"], "SESSION_STATE_CLOSED");
    let unknown = cli.run(&["session", "get", "no-such-session"]).await.expect(1);
    assert!(unknown.stderr.starts_with("error: NOT_FOUND: "), "{}", unknown.stderr);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_carries_an_envelope_through_a_file() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let cli = Cli::new(&server);
    let acquire = || async { cli.run(&["session", "acquire", "-q"]).await.expect(0).stdout.trim().to_string() };

    let a = acquire().await;
    cli.run(&["session", "act", &a, "navigate", "", &format!("{site}/set-cookies")]).await.expect(0);
    let file = cli.path("ctx.json");
    let exported = cli.run(&["session", "export", &a, "--out", &file, "--json"]).await.expect(0).json();
    assert_eq!((exported["origin"].clone(), exported["cookies"].clone()), (json!(site), json!(2)), "{exported}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "an envelope is a secret");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(written["capturedAtMs"].is_string() && written["cookies"][0]["httpOnly"].is_boolean(), "{written}");
    cli.run(&["session", "release", &a]).await.expect(0);

    // Imported into another session: the cookies reach the site.
    let b = acquire().await;
    let imported = cli.run(&["session", "import", &b, "--file", &file]).await.expect(0);
    assert_eq!(imported.stdout, format!("imported {site}: 2 cookies, 1 storage keys\n"));
    cli.run(&["session", "act", &b, "navigate", "", &format!("{site}/echo-cookies")]).await.expect(0);
    let echoed = cli.run(&["session", "act", &b, "extract", "#cookies", "--json"]).await.expect(0).json();
    let echoed = echoed["value"].as_str().unwrap();
    assert!(echoed.contains("session=abc123") && echoed.contains("user=alice"), "{echoed}");

    // A file edited by hand fails the integrity check: exit code 1, nothing applied.
    let tampered = std::fs::read_to_string(&file).unwrap().replace("abc123", "abc124");
    let tampered_file = cli.path("tampered.json");
    std::fs::write(&tampered_file, tampered).unwrap();
    let refused = cli.run(&["session", "import", &b, "--file", &tampered_file]).await.expect(1);
    assert!(refused.stderr.contains("integrity mismatch"), "{}", refused.stderr);
    cli.run(&["session", "release", &b]).await.expect(0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_admin_commands_and_exit_codes() {
    let server = TestServer::start().await;
    let cli = Cli::new(&server);

    // Tenants and tokens: create, list, mint a token for it, use it, revoke it.
    let put = cli.run(&["admin", "tenants", "put", "ci", "--max-slots", "2", "--json"]).await.expect(0).json();
    assert_eq!(put["created"], true);
    assert_eq!((put["tenant"]["max_slots"].clone(), put["tenant"]["max_queue"].clone()), (json!(2), json!(100)));
    let changed = cli.run(&["admin", "tenants", "put", "ci", "--max-queue", "5", "--json"]).await.expect(0).json();
    assert_eq!((changed["tenant"]["max_slots"].clone(), changed["tenant"]["max_queue"].clone()), (json!(2), json!(5)));
    let tenants = cli.run(&["admin", "tenants", "--json"]).await.expect(0).json_lines();
    assert_eq!(tenants.iter().map(|t| t["id"].as_str().unwrap()).collect::<Vec<_>>(), ["ci", "default"]);
    let issued = cli
        .run(&["admin", "tokens", "issue", "--tenant", "ci", "--subject", "job", "--scopes", "sessions:read", "--json"])
        .await
        .expect(0)
        .json();
    let (ci_token, jti) = (issued["token"].as_str().unwrap(), issued["jti"].as_str().unwrap());
    let listed = cli.run(&["session", "list", "--json", "--token", ci_token]).await.expect(0);
    assert_eq!(listed.stdout, "", "the new tenant has no sessions");
    // A token without scope admin: PERMISSION_DENIED, exit code 1.
    let denied = cli.run(&["admin", "status", "--token", ci_token]).await.expect(1);
    assert!(denied.stderr.starts_with("error: PERMISSION_DENIED: "), "{}", denied.stderr);
    assert_eq!(cli.run(&["admin", "tokens", "revoke", jti]).await.expect(0).stdout, format!("revoked {jti}\n"));
    // Revocations reach the auth layer within a second (its deny-list cache).
    let refused = {
        let cli = &cli;
        crate::helpers::eventually("the revoked token to be refused", Duration::from_secs(5), || async move {
            let run = cli.run(&["session", "list", "--token", ci_token]).await;
            (run.code == 1).then_some(run)
        })
        .await
    };
    assert!(refused.stderr.starts_with("error: UNAUTHENTICATED: "), "{}", refused.stderr);
    let deleted = cli.run(&["admin", "tenants", "delete", "ci"]).await.expect(0);
    assert_eq!(deleted.stdout, "deleted tenant ci\n");

    // The audit trail saw all of it, and its chain holds.
    let records = cli.run(&["admin", "audit", "--json", "--limit", "5"]).await.expect(0).json_lines();
    assert_eq!(records.len(), 5);
    assert!(records.windows(2).all(|w| w[0]["seq"].as_u64() > w[1]["seq"].as_u64()), "newest first");
    let verified = cli.run(&["admin", "verify"]).await.expect(0);
    assert!(verified.stdout.starts_with("audit chain ok: "), "{}", verified.stdout);

    // A token the server refuses: UNAUTHENTICATED, exit code 1, naming where it came from.
    let forged = cli.run(&["admin", "status", "--token", "not-a-jwt"]).await.expect(1);
    assert!(forged.stderr.starts_with("error: UNAUTHENTICATED: "), "{}", forged.stderr);
    assert!(forged.stderr.contains("(token from --token)"), "{}", forged.stderr);

    // Nothing listening: exit code 3 with the cause.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let down = cli.run(&["admin", "status", "--server", &format!("http://{closed}")]).await.expect(3);
    assert!(
        down.stderr.starts_with(&format!("error: could not reach http://{closed}: "))
            && down.stderr.contains("refused"),
        "{}",
        down.stderr
    );

    // No token anywhere (the environment's removed, no data dir here): a usage error.
    let mut bare = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserpool"));
    bare.args(["session", "list", "--server", &server.endpoint()])
        .current_dir(cli.dir.path())
        .env_remove("BROWSERPOOL_TOKEN")
        .env_remove("BROWSERPOOL_DATA_DIR");
    let out = bare.output().await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: no token"));
    // The data dir's admin token is the default.
    let data_dir = server.data_dir.path().display().to_string();
    bare.args(["--data-dir", &data_dir]);
    assert_eq!(bare.output().await.unwrap().status.code(), Some(0));
    assert!(Path::new(&data_dir).join("admin.token").exists());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_records_on_failure_and_fetches_the_video_and_a_zip_of_the_files() {
    let server = TestServer::start().await;
    let cli = Cli::new(&server);
    let s = cli.run(&["session", "acquire", "-q", "--record", "on-failure"]).await.expect(0).stdout.trim().to_string();
    cli.run(&["session", "act", &s, "load_html", "", "<h1>recorded</h1>"]).await.expect(0);
    let upload = cli.path("a.txt");
    std::fs::write(&upload, "alpha").unwrap();
    cli.run(&["session", "files", &s, "put", &upload]).await.expect(0);
    cli.run(&["session", "files", &s, "put", &upload, "--name", "b.txt"]).await.expect(0);
    // Live: no video yet, and nothing to delete yet (exit 1 with the reason).
    let early = cli.run(&["session", "recording", &s]).await.expect(1);
    assert!(
        early.stderr.contains("FAILED_PRECONDITION") && early.stderr.contains("made when it ends"),
        "{}",
        early.stderr
    );
    cli.run(&["session", "release", &s, "--failed"]).await.expect(0);

    let video = cli.path("job.webm");
    let fetched = cli.run(&["session", "recording", &s, "--out", &video, "--json"]).await.expect(0).json();
    assert_eq!((fetched["file"]["kind"].clone(), fetched["out"].clone()), (json!("recording"), json!(video)));
    assert!(std::fs::read(&video).unwrap().starts_with(&[0x1A, 0x45, 0xDF, 0xA3]), "a WebM file");
    let zipped = cli.path("files.zip");
    let done = cli.run(&["session", "files", &s, "zip", "--out", &zipped]).await.expect(0);
    assert!(done.stdout.starts_with("2 files ("), "{}", done.stdout);
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&zipped).unwrap()).unwrap();
    let mut names: Vec<String> = zip.file_names().map(str::to_string).collect();
    names.sort();
    assert_eq!(names, ["a.txt", "b.txt"]);
    let mut alpha = String::new();
    std::io::Read::read_to_string(&mut zip.by_name("b.txt").unwrap(), &mut alpha).unwrap();
    assert_eq!(alpha, "alpha");

    let deleted = cli.run(&["session", "delete-artifacts", &s]).await.expect(0);
    assert_eq!(deleted.stdout, format!("deleted 3 artifacts of {s}\n"));
    let gone = cli.run(&["session", "recording", &s, "--out", &video]).await.expect(1);
    assert!(gone.stderr.contains("NOT_FOUND"), "{}", gone.stderr);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_in_a_ci_log_says_it_waits_and_streams_a_session_s_events() {
    let server = TestServer::start_with(|a| a.max_workers = 1).await;
    let site = fixture_site().await;
    let cli = Cli::new(&server);
    let id = cli.run(&["session", "acquire", "-q"]).await.expect(0).stdout.trim().to_string();
    // Connection flags are taken before the command too, as the README says.
    let got = cli.run(&["--token", &server.admin_token, "--json", "session", "get", &id]).await.expect(0).json();
    assert_eq!(got["session_id"], id.as_str());
    // The events, read by another process as the session lives.
    let watcher = Cli::new(&server);
    let watched = id.clone();
    let events = tokio::spawn(async move { watcher.run(&["session", "events", &watched, "--json"]).await });

    // The only browser is leased: a second acquire waits, and says so in the log (stderr is a
    // pipe here, as in CI) every 5 s, then gives up at --wait.
    let waited = cli.run(&["session", "acquire", "--wait", "6s"]).await.expect(1);
    let line = "waiting for a browser: 5s so far (waits up to 6s); place 1 of 1 in tenant default's queue; ";
    assert!(waited.stderr.contains(line), "{}", waited.stderr);
    assert!(waited.stderr.contains("--max-workers 1 browsers in use"), "{}", waited.stderr);
    assert!(waited.stderr.contains("DEADLINE_EXCEEDED"), "{}", waited.stderr);

    cli.run(&["session", "act", &id, "evaluate", "", "console.error('boom\\nat line 2')"]).await.expect(0);
    cli.run(&["session", "act", &id, "navigate", "", &format!("{site}/about")]).await.expect(0);
    // A batch whose step fails leaves the page behind for the log.
    let steps = cli.path("steps.json");
    std::fs::write(&steps, r##"[{"action": "click", "selector": "#missing", "timeout_ms": 300}]"##).unwrap();
    let evidence = cli.path("evidence");
    let failed = cli.run(&["session", "batch", &id, "--file", &steps, "--on-failure", "screenshot", &evidence]).await;
    let failed = failed.expect(1);
    assert!(
        failed.stderr.contains(&format!("a step failed: the page ({site}/about) is in {evidence}/failure.png")),
        "{}",
        failed.stderr
    );
    let png = std::fs::read(format!("{evidence}/failure.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    assert_eq!(std::fs::read_to_string(format!("{evidence}/failure-url.txt")).unwrap(), format!("{site}/about\n"));
    let wrong = cli.run(&["session", "batch", &id, "--file", &steps, "--on-failure", "video", &evidence]).await;
    assert!(wrong.expect(2).stderr.contains("give `--on-failure screenshot DIR`"));
    cli.run(&["session", "release", &id]).await.expect(0);
    let events = tokio::time::timeout(Duration::from_secs(30), events).await.expect("events ends with the session");
    let lines = events.unwrap().expect(0).json_lines();
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    let console = lines.iter().find(|l| l["kind"] == "console").unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!((console["level"].as_str(), console["text"].as_str()), (Some("error"), Some("boom\nat line 2")));
    assert!(lines.iter().any(|l| l["kind"] == "navigated" && l["url"] == format!("{site}/about")), "{lines:?}");
    let last = lines.last().unwrap();
    assert_eq!((last["kind"].as_str(), last["state"].as_str()), (Some("session_ended"), Some("CLOSED")), "{kinds:?}");
    assert!(lines.iter().all(|l| l["session_id"] == id.as_str()));
    server.stop().await;
}

/// `session acquire`'s emulation flags reach the session (echoed in its JSON); a refused
/// value is the server's precise error, a malformed one a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_takes_the_emulation_flags() {
    let server = TestServer::start().await;
    let cli = Cli::new(&server);
    let flags = [
        "session",
        "acquire",
        "--locale",
        "de-DE",
        "--timezone",
        "Europe/Berlin",
        "--color-scheme",
        "dark",
        "--geolocation",
        "52.52,13.405",
        "--header",
        "X-Job=7",
        "--user-agent",
        "Mozilla/5.0 test",
        "--json",
    ];
    let got = cli.run(&flags).await.expect(0).json();
    assert_eq!((got["locale"].as_str(), got["timezone"].as_str()), (Some("de-DE"), Some("Europe/Berlin")));
    assert_eq!(
        (got["color_scheme"].as_str(), got["user_agent"].as_str()),
        (Some("COLOR_SCHEME_DARK"), Some("Mozilla/5.0 test"))
    );
    assert_eq!(
        (got["geolocation"]["latitude"].as_f64(), got["extra_headers"]["X-Job"].as_str()),
        (Some(52.52), Some("7"))
    );
    let id = got["session_id"].as_str().unwrap().to_string();
    let host = cli.run(&["session", "acquire", "--header", "Host=evil.test"]).await.expect(1);
    assert!(host.stderr.contains("extra_headers: Host may not be set"), "{}", host.stderr);
    let usage = cli.run(&["session", "acquire", "--geolocation", "52"]).await.expect(2);
    assert!(usage.stderr.contains("is not LAT,LON"), "{}", usage.stderr);
    // --proxy: an unknown id is refused naming it; a known one is echoed with the bytes.
    let unknown = cli.run(&["session", "acquire", "--proxy", "nope"]).await.expect(1);
    assert!(unknown.stderr.contains("proxy \"nope\" does not exist"), "{}", unknown.stderr);
    cli.run(&["admin", "proxies", "put", "eu-1", "--url", "http://127.0.0.1:9"]).await.expect(0);
    let through = cli.run(&["session", "acquire", "--proxy", "eu-1", "--json"]).await.expect(0).json();
    assert_eq!((through["proxy_id"].as_str(), through["bytes_received"].as_u64()), (Some("eu-1"), Some(0)));
    cli.run(&["session", "release", through["session_id"].as_str().unwrap()]).await.expect(0);
    cli.run(&["session", "release", &id]).await.expect(0);
    server.stop().await;
}

/// `admin proxies`: the password from stdin, never printed; list, replace, delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_proxies_put_list_and_delete() {
    let server = TestServer::start().await;
    let cli = Cli::new(&server);
    let put = ["admin", "proxies", "put", "eu-1", "--url", "http://127.0.0.1:3128", "--username", "ci"];
    let args: Vec<&str> = put.iter().copied().chain(["--password-file", "-", "--tenant", "default"]).collect();
    let created = cli.run_with(&args, Some("pr0xy-pass\n")).await.expect(0);
    assert!(
        created.stdout.starts_with("created proxy eu-1\n") && !created.stdout.contains("pr0xy-pass"),
        "{}",
        created.stdout
    );
    let listed = cli.run(&["admin", "proxies", "list", "--json"]).await.expect(0).json();
    assert_eq!((listed["id"].as_str(), listed["has_password"].as_bool()), (Some("eu-1"), Some(true)), "{listed}");
    // Replaced without --password-file: the stored password stays.
    let updated = cli.run(&put).await.expect(0);
    assert!(updated.stdout.contains("updated proxy eu-1") && updated.stdout.contains("stored"), "{}", updated.stdout);
    let bad = cli.run(&["admin", "proxies", "put", "eu-2", "--url", "ftp://127.0.0.1:21"]).await.expect(1);
    assert!(bad.stderr.contains("proxy.url: scheme \"ftp\" is not http, https or socks5"), "{}", bad.stderr);
    assert_eq!(cli.run(&["admin", "proxies", "delete", "eu-1"]).await.expect(0).stdout, "deleted proxy eu-1\n");
    assert_eq!(cli.run(&["admin", "proxies", "delete", "eu-1"]).await.expect(0).stdout, "no proxy eu-1\n");
    server.stop().await;
}
