//! Store faults (a full disk, a database locked by another process, PostgreSQL connections
//! cut, a COMMIT whose answer is lost) fail closed and heal by themselves, recording each action
//! once; streams are audited with the status they end with.

use std::future::Future;
use std::time::{Duration, Instant};

use browserpool_client::{action, pb, Client};
use serde_json::json;
use tokio_stream::StreamExt;

use crate::helpers::{eventually, fixture_site, ok, ready_again, BinaryServer, TestServer};

/// How long any single call of these tests may take (a write may wait out SQLite's 5 s busy
/// timeout more than once).
const CALL: Duration = Duration::from_secs(20);

/// How soon after a fault clears the server must serve again.
const RECOVERY: Duration = Duration::from_secs(10);

/// `fut`, or a panic naming `what` after [`CALL`].
async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(CALL, fut).await.unwrap_or_else(|_| panic!("{what}: no answer within {CALL:?}"))
}

/// `/readyz`: status code and body.
async fn readyz(http: &str) -> (u16, String) {
    let answer = bounded("readyz", crate::lifecycle::http_get(&format!("http://{http}/readyz"))).await;
    let code = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default().trim().to_string();
    (code, body)
}

/// What one `Act` answered: the action ran (and how it went), or the call was refused.
async fn navigate(client: &Client, id: &str, url: &str) -> Result<pb::ActionResult, tonic::Status> {
    match bounded("act", client.act(id, action("navigate", "", url))).await {
        Ok(r) => Ok(r),
        Err(browserpool_client::Error::Status(s)) => Err(s),
        Err(other) => panic!("not a status: {other}"),
    }
}

/// Navigations that answered ok, and what the refused ones said.
#[derive(Default)]
struct Tally {
    ok: usize,
    refused: Vec<String>,
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ok, {} refused", self.ok, self.refused.len())?;
        match self.refused.first() {
            Some(first) => write!(f, " (first: {first:?})"),
            None => Ok(()),
        }
    }
}

impl Tally {
    /// Counts one `Act`. A fault may only refuse the call (UNAVAILABLE: fail closed); an
    /// action that ran must have worked (the browser is not what is broken).
    fn count(&mut self, acted: Result<pb::ActionResult, tonic::Status>) {
        match acted {
            Ok(r) => {
                ok(&r);
                self.ok += 1;
            }
            Err(s) => {
                assert_eq!(s.code(), tonic::Code::Unavailable, "a fault must fail closed: {s:?}");
                self.refused.push(s.message().to_string());
            }
        }
    }
}

/// The `navigate` records of session `id`, once there are at least `want` of them (the
/// writer appends off the hot path), polled for at most [`RECOVERY`].
async fn navigate_records(client: &Client, id: &str, want: usize) -> Vec<pb::AuditRecord> {
    let deadline = Instant::now() + RECOVERY;
    loop {
        let got = bounded("query audit", crate::helpers::action_records(client, id, "navigate")).await;
        if got.len() >= want || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// After the fault cleared: `/readyz` 200, an action on the old session and on a newly
/// acquired one, all within [`RECOVERY`]; returns how long that took.
async fn recovers(client: &Client, http: &str, id: &str, url: &str, tally: &mut Tally) -> Duration {
    let cleared = Instant::now();
    ready_again(http, cleared, RECOVERY).await;
    loop {
        match navigate(client, id, url).await {
            Ok(r) => {
                tally.count(Ok(r));
                break;
            }
            Err(s) => {
                assert!(cleared.elapsed() < RECOVERY, "actions still refused after the fault cleared: {s:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let fresh = bounded("acquire", client.acquire(30_000)).await.expect("acquire works again");
    tally.count(navigate(client, &fresh.session_id, url).await);
    bounded("release", client.release(&fresh.session_id)).await.unwrap();
    cleared.elapsed()
}

/// Every navigation that answered ok has its record, and the chain verifies.
async fn every_ok_action_is_recorded(client: &Client, id: &str, ok_on_id: usize) {
    let records = navigate_records(client, id, ok_on_id).await;
    assert_eq!(records.len(), ok_on_id, "one record per navigation that answered ok");
    assert!(records.iter().all(|r| r.outcome == "ok"), "{records:?}");
    let verified =
        bounded("verify", client.admin().verify_audit(pb::VerifyAuditRequest {})).await.unwrap().into_inner();
    assert!(verified.ok, "{verified:?}");
}

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size: &str) -> Tmpfs {
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs failed ({}): this test fills a small disk and needs root (CAP_SYS_ADMIN), \
             as the suite has in CI: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs(dir.to_path_buf())
    }

    /// Writes zeros until the filesystem is full; returns the file that holds them.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 16 << 10];
        loop {
            if let Err(e) = file.write_all(&chunk) {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
        // What no longer fits in a full chunk, byte by byte.
        while file.write_all(&[0]).is_ok() {}
        path
    }
}

/// Whether `test` may mount the small tmpfs it fills (root, CAP_SYS_ADMIN); says it skips when not.
fn may_mount(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        crate::helpers::skip(test, "mounting the small tmpfs it fills needs root (CAP_SYS_ADMIN)");
    }
    root
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The SQLite file and the audit spool are on a tmpfs that fills up, then is freed: with
/// nowhere to keep a record, actions are refused and `/readyz` answers 503 while it is full;
/// once freed the server serves again within seconds (no restart, no lock left held), and
/// every action that answered ok has its record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_closed_and_recovers_with_every_record() {
    if !may_mount("faults::a_full_disk_fails_closed_and_recovers_with_every_record") {
        return;
    }
    let db_dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(db_dir.path(), "4m");
    let db = db_dir.path().join("browserpool.db");
    let url = format!("sqlite://{}", db.display());
    let spool = db_dir.path().join("audit-spool.jsonl");
    let server = TestServer::start_with(|args| {
        args.store.database_url = Some(url.clone());
        args.store.audit_spool = Some(spool.clone());
    })
    .await;
    let http = server.http.to_string();
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = bounded("acquire", client.acquire(30_000)).await.unwrap().session_id;
    let page = format!("{site}/");
    let mut tally = Tally::default();
    tally.count(navigate(&client, &id, &page).await);

    let filler = disk.fill();
    // Actions go on until a record fails to write; from then on they are refused.
    let full_since = Instant::now();
    let mut not_ready = None;
    while tally.refused.is_empty() || not_ready.is_none() {
        assert!(full_since.elapsed() < Duration::from_secs(30), "the full disk was never noticed: {tally:?}");
        if tally.refused.is_empty() {
            tally.count(navigate(&client, &id, &page).await);
        }
        let (code, body) = readyz(&http).await;
        if code == 503 {
            not_ready = Some(body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reason = not_ready.unwrap();
    assert!(reason.contains("full"), "readyz names the fault: {reason}");
    assert!(tally.refused[0].contains("audit"), "{:?}", tally.refused);
    // Still full: still refused.
    let before = tally.ok;
    tally.count(navigate(&client, &id, &page).await);
    assert_eq!(tally.ok, before, "no action runs while its record cannot be written");
    // Nor can a session start: its rows cannot be written.
    for _ in 0..3 {
        let refused = bounded("acquire", client.acquire(5_000)).await.expect_err("no session while the disk is full");
        assert_eq!(crate::helpers::status_code(refused), tonic::Code::Unavailable);
    }

    std::fs::remove_file(filler).unwrap();
    let took = recovers(&client, &http, &id, &page, &mut tally).await;
    eprintln!("recovered {took:?} after the disk was freed; {tally:?}");
    // The fresh session's navigation is recorded under its own id.
    every_ok_action_is_recorded(&client, &id, tally.ok - 1).await;

    // No connection of the server still holds the write lock.
    let mut other = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url).await.unwrap();
    sqlx::query("PRAGMA busy_timeout = 3000").execute(&mut other).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE").execute(&mut other).await.expect("the write lock is free");
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    sqlx::Connection::close(other).await.unwrap();

    bounded("release", client.release(&id)).await.unwrap();
    server.stop().await;
    drop(disk);
}

/// The disk that keeps ended sessions' files fills up: a session's end keeps what fits and no
/// part of what does not, `Get` says why in words about the server's disk (not the session's
/// `--worker-disk-mb`), and the next session of the tenant works and keeps its files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_artifacts_disk_keeps_no_part_of_a_file_and_says_why() {
    if !may_mount("faults::a_full_artifacts_disk_keeps_no_part_of_a_file_and_says_why") {
        return;
    }
    let server = TestServer::start().await;
    let artifacts = server.data_dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let disk = Tmpfs::mount(&artifacts, "1m");
    let client = server.admin().await;
    let id = bounded("acquire", client.acquire(30_000)).await.unwrap().session_id;
    client.put_file(&id, "small.txt", b"fits").await.unwrap();
    client.put_file(&id, "big.bin", &vec![7u8; 2 << 20]).await.unwrap();
    bounded("release", client.release(&id)).await.unwrap();

    // A read waits for the teardown, which kept what it could.
    let ended = bounded("get", client.get(&id)).await.unwrap();
    assert_eq!(
        ended.artifacts_refused,
        "no room left for \"big.bin\" on the server's disk for kept artifacts (--data-dir) (1 other file kept)"
    );
    let kept: Vec<(String, u64)> =
        client.list_files(&id).await.unwrap().into_iter().map(|f| (f.name, f.size)).collect();
    // What fits is kept, whole; the file that did not fit left nothing.
    assert_eq!(kept, [("small.txt".to_string(), 4)]);
    let names: Vec<String> = std::fs::read_dir(artifacts.join(&id))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with(".upload-") || n == "big.bin"), "{names:?}");

    // With room again, the tenant's next session keeps its files.
    std::fs::remove_dir_all(artifacts.join(&id)).unwrap();
    let next = bounded("acquire", client.acquire(30_000)).await.unwrap().session_id;
    client.put_file(&next, "next.txt", b"kept").await.unwrap();
    bounded("release", client.release(&next)).await.unwrap();
    assert_eq!(bounded("get file", client.get_file(&next, "next.txt")).await.unwrap().1, b"kept");
    assert!(bounded("get", client.get(&next)).await.unwrap().artifacts_refused.is_empty());
    server.stop().await;
    drop(disk);
}

/// Another process holds `BEGIN EXCLUSIVE` on the server's SQLite file for longer than the
/// busy timeout: the live session keeps answering actions, their records wait in the local
/// audit spool, `/readyz` answers 503 and names the lock; once it lets go the server serves
/// again by itself and the spool's records are in the chain, every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_locked_by_another_process_keeps_sessions_working_and_loses_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("browserpool.db").display());
    let spool = dir.path().join("audit-spool.jsonl");
    // The server is a process of its own, so the lock below is another process's.
    let mut server = BinaryServer::spawn_in(dir, url.clone(), Vec::new());
    let site = fixture_site().await;
    let client = server.client().await;
    let id = bounded("acquire", client.acquire(30_000)).await.unwrap().session_id;
    let page = format!("{site}/");
    let mut tally = Tally::default();
    tally.count(navigate(&client, &id, &page).await);

    let mut holder = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url).await.unwrap();
    sqlx::query("PRAGMA busy_timeout = 10000").execute(&mut holder).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE").execute(&mut holder).await.expect("take the write lock");
    let locked_since = Instant::now();
    // Every reason /readyz gave while locked: the last failed write names the fault, which is
    // "database is locked", or, on a loaded host, the wait for a connection that all those
    // writes hold.
    let mut not_ready: Vec<String> = Vec::new();
    let mut ok_while_locked = 0;
    // Past the busy timeout (5 s) and the first write that gave up on it.
    while locked_since.elapsed() < Duration::from_secs(12) || not_ready.is_empty() {
        assert!(locked_since.elapsed() < Duration::from_secs(45), "the lock was never noticed: {tally:?}");
        let before = tally.ok;
        tally.count(navigate(&client, &id, &page).await);
        ok_while_locked += tally.ok - before;
        let (code, body) = readyz(&server.http).await;
        if code == 503 && !not_ready.contains(&body) {
            not_ready.push(body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(not_ready.iter().any(|r| r.contains("locked")), "readyz names the fault: {not_ready:?}");
    assert!(tally.refused.is_empty(), "the live session kept working: {tally:?}");
    assert!(ok_while_locked >= 10, "{ok_while_locked} actions answered while locked");
    let spooled = std::fs::read_to_string(&spool).unwrap_or_default().lines().count();
    assert!(spooled > 0, "records wait in {}", spool.display());
    // No session starts meanwhile: its rows cannot be written.
    let refused = bounded("acquire", client.acquire(5_000)).await.expect_err("no new session while locked");
    assert_eq!(crate::helpers::status_code(refused), tonic::Code::Unavailable);
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    sqlx::Connection::close(holder).await.unwrap();
    eprintln!(
        "held the lock for {:?}: {ok_while_locked} actions answered, {spooled} records spooled",
        locked_since.elapsed()
    );

    let took = recovers(&client, &server.http, &id, &page, &mut tally).await;
    eprintln!("recovered {took:?} after the lock was let go; {tally:?}");
    every_ok_action_is_recorded(&client, &id, tally.ok - 1).await;
    assert_eq!(std::fs::read_to_string(&spool).unwrap(), "", "the spool is empty once in the chain");
    bounded("release", client.release(&id)).await.unwrap();
    let (status, _) = server.terminate();
    assert!(status.success(), "{status}");
}

/// Every connection the server has to its PostgreSQL database is cut, again and again while
/// actions run: the pool replaces them, the server serves again within seconds without a
/// restart, and no action that answered ok lacks its record. PostgreSQL half only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_postgres_connections_heal_without_losing_a_record() {
    let Some(admin_url) = std::env::var("BROWSERPOOL_TEST_POSTGRES").ok().filter(|u| !u.is_empty()) else {
        crate::helpers::skip(
            "faults::lost_postgres_connections_heal_without_losing_a_record",
            "needs BROWSERPOOL_TEST_POSTGRES (scripts/test.sh sets it for the PostgreSQL half, where it runs); \
             the SQLite faults are a_full_disk_* and a_database_locked_*",
        );
        return;
    };
    let server = TestServer::start().await;
    let database = url::Url::parse(&server.database_url).unwrap().path().trim_start_matches('/').to_string();
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = bounded("acquire", client.acquire(30_000)).await.unwrap().session_id;
    let page = format!("{site}/");
    let mut tally = Tally::default();
    tally.count(navigate(&client, &id, &page).await);

    // Actions keep coming while the connections are cut under them.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let actor = {
        let (client, id, page) = (client.clone(), id.clone(), page.clone());
        tokio::spawn(async move {
            let mut tally = Tally::default();
            while !*stop_rx.borrow_and_update() {
                let refused = tally.refused.len();
                tally.count(navigate(&client, &id, &page).await);
                if tally.refused.len() > refused {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            tally
        })
    };
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url).await.unwrap();
    let mut cut = 0i64;
    for _ in 0..5 {
        let n: i64 = sqlx::query_scalar(
            // The server's own connections (its role; not autovacuum's, for one), chosen before
            // any is terminated.
            "WITH server AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE datname = $1 \
             AND pid <> pg_backend_pid() AND usename = current_user AND backend_type = 'client backend') \
             SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM server",
        )
        .bind(&database)
        .fetch_one(&mut admin)
        .await
        .unwrap();
        cut += n;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    sqlx::Connection::close(admin).await.unwrap();
    assert!(cut > 0, "the server had connections to cut");
    stop_tx.send(true).unwrap();
    let during = bounded("actor", actor).await.unwrap();
    eprintln!("cut {cut} connections; during the cuts: {during:?}");
    tally.ok += during.ok;

    let took = recovers(&client, &server.http.to_string(), &id, &page, &mut tally).await;
    eprintln!("recovered {took:?} after the last cut; {tally:?}");
    // A batch whose COMMIT answer was lost with its connection is offered again and skipped
    // if it went in: each record once (the last navigation counted went to a new session).
    every_ok_action_is_recorded(&client, &id, tally.ok - 1).await;
    bounded("release", client.release(&id)).await.unwrap();
    server.stop().await;
}

/// The database commits a batch of audit records but its answer never comes back (the
/// connection cut while the COMMIT was on its way): the server cannot know, keeps the batch in
/// its spool, offers it again once the database is back, and the chain has each record once.
/// PostgreSQL half only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_commit_whose_answer_was_lost_is_recorded_once() {
    let test = "faults::an_audit_commit_whose_answer_was_lost_is_recorded_once";
    let Some((gate, server)) = crate::helpers::behind_a_gate(test).await else { return };
    let client = server.client().await;
    let id = bounded("acquire", client.acquire(30_000)).await.unwrap().session_id;
    let evaluate = || bounded("act", client.act(&id, action("evaluate", "", json!("1 + 1"))));
    ok(&evaluate().await.unwrap());
    assert_eq!(crate::helpers::ok_records(&client, &id, "evaluate", 1).await, 1);

    // The next batch carrying an `evaluate` record is cut at its COMMIT.
    gate.cut_at_commit(b"evaluate");
    ok(&evaluate().await.unwrap());
    let what = "a transaction with an evaluate record to commit through the gate";
    eventually(what, CALL, || async { gate.sprung().then_some(()) }).await;
    // The writer saw its write fail and kept the batch.
    eventually("the cut batch to reach the spool", RECOVERY, || async {
        let metrics = bounded("metrics", crate::lifecycle::http_get(&format!("http://{}/metrics", server.http))).await;
        let spooled = metrics.lines().find_map(|l| l.strip_prefix("browserpool_audit_spooled ")).unwrap_or("0");
        (spooled.trim() != "0").then_some(())
    })
    .await;
    gate.set_up(true);
    // Ready: the spool is in the chain.
    ready_again(&server.http, Instant::now(), RECOVERY).await;
    // A record of another action, written after the spool's (the writer keeps the order): once
    // it is in, everything before it is.
    ok(&bounded("act", client.act(&id, action("title", "", json!(null)))).await.unwrap());
    assert_eq!(crate::helpers::ok_records(&client, &id, "title", 1).await, 1);
    let records = bounded("query audit", crate::helpers::action_records(&client, &id, "evaluate")).await;
    assert_eq!(records.len(), 2, "one record per action: {records:?}");
    let verified =
        bounded("verify", client.admin().verify_audit(pb::VerifyAuditRequest {})).await.unwrap().into_inner();
    assert!(verified.ok, "{verified:?}");
    bounded("release", client.release(&id)).await.unwrap();
}

/// An acquire whose session row the database commits but whose answer is lost fails (the
/// caller retries), and the row it left is ended once the database is back: no replica lists a
/// session nobody holds. PostgreSQL half only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_commit_answer_was_lost_leaves_no_live_session() {
    let test = "faults::an_acquire_whose_commit_answer_was_lost_leaves_no_live_session";
    let Some((gate, server)) = crate::helpers::behind_a_gate(test).await else { return };
    let client = server.client().await;
    // The session row's transition carries the reason `acquired`.
    gate.cut_at_commit(b"acquired");
    let refused = bounded("acquire", client.acquire(30_000)).await.expect_err("its record was cut");
    assert!(gate.sprung(), "the acquire's COMMIT went through the gate");
    let browserpool_client::Error::Status(refused) = refused else { panic!("not a status: {refused}") };
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("retry"), "the answer says what to do: {refused:?}");
    gate.set_up(true);
    ready_again(&server.http, Instant::now(), RECOVERY).await;
    eventually("the row of a session nobody holds to be ended", RECOVERY, || async {
        let all = pb::AdminListSessionsRequest::default();
        let rows = bounded("list", client.admin().list_sessions(all)).await.unwrap().into_inner().sessions;
        assert_eq!(rows.len(), 1, "the row the cut commit left: {rows:?}");
        (rows[0].state == pb::SessionState::Crashed as i32).then_some(())
    })
    .await;
    // And the tenant is served again.
    let id = bounded("acquire", client.acquire(30_000)).await.unwrap().session_id;
    bounded("release", client.release(&id)).await.unwrap();
}

/// RPC-level records are written when the call ends: a `Drive` stream that starts well and
/// then fails is recorded as an error with its code; an `Events` stream that ends well, ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_audited_with_the_status_they_end_with() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let id = bounded("acquire", client.acquire(30_000)).await.unwrap().session_id;
    let mut events = client.sessions().events(pb::EventsRequest { session_id: id.clone() }).await.unwrap().into_inner();

    let (tx, rx) = tokio::sync::mpsc::channel::<pb::DriveRequest>(4);
    tx.send(pb::DriveRequest { session_id: id.clone(), action: Some(action("title", "", json!(null))) }).await.unwrap();
    let mut drive =
        client.sessions().drive(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    // The stream starts well: attached, then the action's result.
    let mut result = None;
    while result.is_none() {
        match bounded("drive event", drive.next()).await.expect("drive goes on").expect("no error yet").kind {
            Some(pb::drive_event::Kind::Result(r)) => result = Some(r),
            _ => continue,
        }
    }
    ok(&result.unwrap());
    // Then fails: a message naming another session ends it with INVALID_ARGUMENT.
    tx.send(pb::DriveRequest { session_id: "s-another".into(), action: Some(action("title", "", json!(null))) })
        .await
        .unwrap();
    let failed = loop {
        match bounded("drive end", drive.next()).await {
            Some(Ok(_)) => continue,
            Some(Err(status)) => break status,
            None => panic!("the stream ended without its error"),
        }
    };
    assert_eq!(failed.code(), tonic::Code::InvalidArgument, "{failed:?}");

    // Releasing ends the events stream cleanly.
    bounded("release", client.release(&id)).await.unwrap();
    while let Some(event) = bounded("events end", events.next()).await {
        event.expect("the events stream ends without an error");
    }

    let rpc_records = |records: &[pb::AuditRecord], rpc: &str| -> Vec<(String, String)> {
        records
            .iter()
            .filter(|r| r.action.is_empty() && r.rpc == format!("/browserpool.v1.Sessions/{rpc}"))
            .map(|r| (r.outcome.clone(), r.code.clone()))
            .collect()
    };
    let deadline = Instant::now() + RECOVERY;
    let records = loop {
        let query = pb::QueryAuditRequest { session_id: id.clone(), limit: 100, ..Default::default() };
        let mut stream = bounded("query audit", client.admin().query_audit(query)).await.unwrap().into_inner();
        let mut got = Vec::new();
        while let Some(r) = bounded("audit record", stream.message()).await.unwrap() {
            got.push(r);
        }
        if !rpc_records(&got, "Drive").is_empty() && !rpc_records(&got, "Events").is_empty() {
            break got;
        }
        assert!(Instant::now() < deadline, "the streams' records never came: {got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(rpc_records(&records, "Drive"), [("error".to_string(), "InvalidArgument".to_string())]);
    assert_eq!(rpc_records(&records, "Events"), [("ok".to_string(), String::new())]);
    // The action the stream ran before it failed has its own record.
    assert!(
        records.iter().any(|r| r.action == "title" && r.rpc.ends_with("/Drive") && r.outcome == "ok"),
        "{records:?}"
    );
    server.stop().await;
}
