//! Unit tests of the session lifecycle on the in-memory browsers ([`FakeBrowsers`]) and a
//! real SQLite file: its races (release against acquire, kill against the TTL, a crash during
//! an action, a drain with callers queued, the stop's grace, a store that fails mid-acquire)
//! in milliseconds, with no Chromium on the machine.

use serde_json::json;

use super::*;
use crate::browsers::fake::FakeBrowsers;
use crate::model::Isolation;

#[test]
fn viewport_defaults_and_bounds() {
    assert_eq!(validate_viewport(None).unwrap(), Viewport::default());
    let v = validate_viewport(Some(Viewport { width: 0, height: 0, scale: 0.0, mobile: false })).unwrap();
    assert_eq!(v, Viewport::default());
    for bad in [0.5, 4.0, f64::NAN, f64::INFINITY] {
        let err = validate_viewport(Some(Viewport { width: 100, height: 100, scale: bad, mobile: false })).unwrap_err();
        assert!(err.to_string().contains("viewport.scale"), "{err}");
    }
    assert!(validate_viewport(Some(Viewport { width: 20000, height: 10, scale: 1.0, mobile: false })).is_err());
}

#[test]
fn states_round_trip() {
    for s in ["QUEUED", "READY", "CLOSED", "CRASHED", "EXPIRED", "KILLED"] {
        assert_eq!(SessionState::parse(s).unwrap().as_str(), s);
    }
    assert!(SessionState::parse("ready").is_none());
    assert!(SessionState::Closed.is_terminal() && !SessionState::Ready.is_terminal());
}

/// Sessions on `capacity` fake browsers and a SQLite file of their own, the reaper and the
/// audit writer running.
struct Harness {
    sessions: Sessions,
    fake: FakeBrowsers,
    store: Store,
    audit: AuditLog,
    database: String,
    reaper: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// Tenants `a` and `b`, each with `slots` sessions at once and a queue of 8.
    async fn start(capacity: usize, slots: u32) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let database = format!("sqlite://{}", dir.path().join("browserpool.db").display());
        let store = Store::open(&database).await.unwrap();
        for id in ["a", "b"] {
            store.put_tenant(&tenant(id, slots), now_ms()).await.unwrap();
        }
        let (audit, writer) = AuditLog::new(store.clone(), None);
        let fake = FakeBrowsers::new(capacity);
        let limits = Limits {
            max_session_ttl: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            keep_files: None,
            cannot_record: Some("not in these tests".into()),
        };
        let metrics = Arc::default();
        let sealer = Arc::new(crate::secrets::Sealer::from_key(&[7; 32]));
        let sessions = Sessions::new(
            store.clone(),
            Arc::new(fake.clone()),
            limits,
            capacity as u32,
            audit.clone(),
            metrics,
            sealer,
        );
        sessions.recover(None, ReplicaAddrs::default()).await.unwrap();
        let reaper = CancellationToken::new();
        tokio::spawn(sessions.clone().reap_loop(reaper.clone()));
        tokio::spawn(writer.run(reaper.clone()));
        Harness { sessions, fake, store, audit, database, reaper, _dir: dir }
    }

    async fn acquire(&self, who: &Claims, wait_ms: u32) -> Result<SessionRecord> {
        self.sessions.acquire(who, AcquireSpec { wait_ms, ..AcquireSpec::default() }).await
    }

    /// Runs one action whose payload tells the fake what to do.
    async fn act(&self, who: &Claims, id: &str, payload: Value, timeout_ms: u32) -> ActionReport {
        let input = ActionInput { action: "evaluate".into(), payload, timeout_ms, ..ActionInput::default() };
        let place = self.audit.reserve().unwrap();
        self.sessions.act(who, id, input, "/browserpool.v1.Sessions/Act", place).await
    }

    /// The session's row in the database.
    async fn stored(&self, id: &str) -> SessionRecord {
        self.store.session(id).await.unwrap().expect("the session has a row")
    }

    async fn stop(self) {
        self.sessions.close_all("the test ends").await;
        self.reaper.cancel();
        assert!(self.fake.state().leased.is_empty(), "browsers left: {:?}", self.fake.state().leased.keys());
        self.store.close().await;
    }
}

fn tenant(id: &str, max_slots: u32) -> TenantRecord {
    TenantRecord {
        id: id.into(),
        max_slots,
        max_queue: 8,
        max_session_ttl_ms: 0,
        idle_timeout_ms: 0,
        allow_hosts: Vec::new(),
        allow_private_networks: false,
        isolation: Isolation::Process,
        max_memory_mb: 0,
        default_record: Default::default(),
        max_file_mb: 0,
        max_artifact_mb: 0,
        artifact_ttl_s: 0,
        default_proxy: String::new(),
        max_session_bytes: 0,
    }
}

fn caller(tenant: &str, sub: &str) -> Claims {
    Claims {
        iss: "test".into(),
        aud: "test".into(),
        sub: sub.into(),
        tenant: tenant.into(),
        tenant_epoch: String::new(),
        scopes: vec![Scope::SessionsRead.as_str().into(), Scope::SessionsWrite.as_str().into()],
        exp: u64::MAX,
        nbf: 0,
        iat: 0,
        jti: uuid::Uuid::new_v4().to_string(),
    }
}

/// Waits (at most 5 s) until `f` holds.
async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_callers_are_served_in_the_order_they_came() {
    let h = Arc::new(Harness::start(1, 8).await);
    let a = caller("a", "first");
    let first = h.acquire(&a, 1000).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    for n in 0..4u32 {
        let (h2, served) = (h.clone(), served.clone());
        waiting.push(tokio::spawn(async move {
            let who = caller("a", &format!("caller-{n}"));
            let record = h2.acquire(&who, 5000).await.unwrap();
            served.lock().unwrap().push(n);
            h2.sessions.release(&who, &record.id, false).await.unwrap();
        }));
        // Each is in the queue before the next comes.
        until("the caller to queue", || h.sessions.usage("a").1 == n + 1).await;
    }
    h.sessions.release(&a, &first.id, false).await.unwrap();
    for w in waiting {
        w.await.unwrap();
    }
    assert_eq!(*served.lock().unwrap(), [0, 1, 2, 3]);
    assert_eq!(h.fake.state().most_at_once, 1);
    Arc::into_inner(h).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_at_its_quota_holds_up_no_other_tenant() {
    let h = Harness::start(2, 1).await;
    let (a, b) = (caller("a", "x"), caller("b", "y"));
    let held = h.acquire(&a, 1000).await.unwrap();
    let err = h.acquire(&a, 100).await.unwrap_err();
    assert!(matches!(err, ServiceError::WaitElapsed { .. }), "{err}");
    // The server has a browser left: tenant b gets it at once.
    let other = h.acquire(&b, 0).await.unwrap();
    assert_eq!(h.fake.state().leased.len(), 2);
    h.sessions.release(&a, &held.id, false).await.unwrap();
    h.sessions.release(&b, &other.id, false).await.unwrap();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_racing_an_acquire_never_lets_a_tenant_past_its_quota() {
    let h = Arc::new(Harness::start(4, 1).await);
    let a = caller("a", "x");
    let mut id = h.acquire(&a, 1000).await.unwrap().id;
    for _ in 0..20 {
        let (h1, a1, old) = (h.clone(), a.clone(), id.clone());
        let release = tokio::spawn(async move { h1.sessions.release(&a1, &old, false).await });
        let next = h.acquire(&a, 3000).await.unwrap();
        assert_eq!(release.await.unwrap().unwrap(), (true, SessionState::Closed));
        id = next.id;
    }
    // The slot is freed only once the browser is gone: never two of the tenant's at once.
    assert_eq!(h.fake.state().most_at_once, 1);
    assert_eq!(h.fake.state().released.len(), 20);
    h.sessions.release(&a, &id, false).await.unwrap();
    Arc::into_inner(h).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_that_dies_during_an_action_fails_it_as_crashed_and_ends_the_session() {
    let h = Arc::new(Harness::start(2, 2).await);
    let a = caller("a", "x");
    // Killed with nobody calling, while an action waits on it.
    let one = h.acquire(&a, 1000).await.unwrap();
    let acting = {
        let (h, a, id) = (h.clone(), a.clone(), one.id.clone());
        tokio::spawn(async move { h.act(&a, &id, json!({"sleep_ms": 30_000}), 60_000).await })
    };
    until("the action to run", || h.sessions.inner.acting.len() == 1).await;
    h.fake.kill(&one.worker_id, "out of memory");
    let report = tokio::time::timeout(Duration::from_secs(2), acting).await.expect("the action answers").unwrap();
    assert_eq!(report.outcome.unwrap_err().code, FailureCode::SessionCrashed);
    let row = h.stored(&one.id).await;
    assert_eq!(row.state, SessionState::Crashed);
    assert_eq!(row.end_reason.as_deref(), Some("chromium died: out of memory"));

    // Dies under the action itself: the action's own failure becomes SESSION_CRASHED.
    let two = h.acquire(&a, 1000).await.unwrap();
    let report = h.act(&a, &two.id, json!({"die": "segfault"}), 5000).await;
    assert_eq!(report.outcome.unwrap_err().code, FailureCode::SessionCrashed);
    assert_eq!(h.stored(&two.id).await.state, SessionState::Crashed);
    // Both slots are free again.
    assert_eq!(h.sessions.usage("a"), (0, 0));
    Arc::into_inner(h).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_and_ttl_expire_a_session_and_a_kill_racing_them_ends_it_once() {
    let h = Arc::new(Harness::start(2, 2).await);
    let a = caller("a", "x");
    let spec =
        |ttl_ms, idle_timeout_ms| AcquireSpec { wait_ms: 1000, ttl_ms, idle_timeout_ms, ..AcquireSpec::default() };

    // Idle: nothing runs on it for 100 ms.
    let idle = h.sessions.acquire(&a, spec(60_000, 100)).await.unwrap();
    // TTL: busy all along, it ends at 300 ms all the same.
    let busy = h.sessions.acquire(&a, spec(300, 60_000)).await.unwrap();
    let started = Instant::now();
    while h.act(&a, &busy.id, json!(1), 1000).await.outcome.is_ok() {
        assert!(started.elapsed() < Duration::from_secs(3), "the TTL never ended the session");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The action answers as soon as the end begins; its record is written beside the kill.
    until("both ends to be recorded", || !h.sessions.holds(&idle.id) && !h.sessions.holds(&busy.id)).await;
    let (idle_row, busy_row) = (h.stored(&idle.id).await, h.stored(&busy.id).await);
    assert_eq!(
        (idle_row.state, idle_row.end_reason.as_deref()),
        (SessionState::Expired, Some("idle for 0.1 s; idle_timeout_ms 100"))
    );
    assert_eq!(
        (busy_row.state, busy_row.end_reason.as_deref()),
        (SessionState::Expired, Some("ttl reached: 0.3 s after acquire; ttl_ms 300"))
    );
    assert!(started.elapsed() >= Duration::from_millis(250), "ended early: {:?}", started.elapsed());

    // An admin's kill at the TTL's own moment: one of them ends it, once.
    for _ in 0..10 {
        let raced = h.sessions.acquire(&a, spec(50, 60_000)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let killed = h.sessions.end_detached(&raced.id, SessionState::Killed, "killed by an admin").await;
        until("the end to be recorded", || !h.sessions.holds(&raced.id)).await;
        let row = h.stored(&raced.id).await;
        assert_eq!(killed, row.state == SessionState::Killed, "{row:?}");
        assert!(matches!(row.state, SessionState::Killed | SessionState::Expired), "{row:?}");
        let released = h.fake.state().released.iter().filter(|w| **w == raced.worker_id).count();
        assert_eq!(released, 1, "its browser released once");
    }
    until("every slot to be free", || h.sessions.usage("a") == (0, 0)).await;
    Arc::into_inner(h).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_turns_queued_callers_away_and_keeps_live_sessions_working() {
    let h = Arc::new(Harness::start(1, 4).await);
    let a = caller("a", "x");
    let live = h.acquire(&a, 1000).await.unwrap();
    let queued = {
        let (h, a) = (h.clone(), a.clone());
        tokio::spawn(async move { h.acquire(&a, 30_000).await })
    };
    until("the caller to queue", || h.sessions.usage("a").1 == 1).await;
    h.sessions.set_draining(true);
    let turned_away = tokio::time::timeout(Duration::from_secs(1), queued)
        .await
        .expect("the queued caller answered at once")
        .unwrap();
    assert!(matches!(turned_away, Err(ServiceError::Draining)), "{turned_away:?}");
    assert!(matches!(h.acquire(&a, 0).await, Err(ServiceError::Draining)));
    // The live session goes on.
    assert!(h.act(&a, &live.id, json!("still here"), 1000).await.outcome.is_ok());
    assert_eq!(h.sessions.usage("a"), (1, 0));
    h.sessions.set_draining(false);
    h.sessions.release(&a, &live.id, false).await.unwrap();
    assert!(h.acquire(&a, 1000).await.is_ok(), "served again once the drain is off");
    Arc::into_inner(h).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_s_grace_lets_a_short_action_finish_and_kills_only_the_session_of_a_long_one() {
    let h = Arc::new(Harness::start(2, 2).await);
    let a = caller("a", "x");
    let (short, long) = (h.acquire(&a, 1000).await.unwrap(), h.acquire(&a, 1000).await.unwrap());
    let run = |id: &str, ms: u64| {
        let (h, a, id) = (h.clone(), a.clone(), id.to_string());
        tokio::spawn(async move { h.act(&a, &id, json!({ "sleep_ms": ms }), 60_000).await })
    };
    let (short_action, long_action) = (run(&short.id, 100), run(&long.id, 30_000));
    until("both actions to run", || h.sessions.inner.acting.len() == 2).await;

    let still_running = h.sessions.wait_actions(Duration::from_millis(500)).await;
    assert_eq!(still_running, 1);
    assert!(short_action.await.unwrap().outcome.is_ok(), "the short action finished within the grace");
    h.sessions.end_busy(SessionState::Killed, "server shutdown: the grace period ran out").await;
    let cut = tokio::time::timeout(Duration::from_secs(1), long_action).await.expect("cut at once").unwrap();
    assert_eq!(cut.outcome.unwrap_err().code, FailureCode::SessionClosed);
    h.sessions.close_all("server shutdown").await;
    assert_eq!(h.stored(&long.id).await.state, SessionState::Killed);
    assert_eq!(h.stored(&short.id).await.state, SessionState::Closed);
    Arc::into_inner(h).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_mid_acquire_leaks_no_browser_and_no_slot() {
    use sqlx::Connection;
    let h = Harness::start(1, 1).await;
    let a = caller("a", "x");
    // Another connection makes the session's insert fail, after the tenant is read and the
    // browser leased.
    let mut db = sqlx::SqliteConnection::connect(&h.database).await.unwrap();
    sqlx::query("CREATE TRIGGER refuse BEFORE INSERT ON sessions BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
        .execute(&mut db)
        .await
        .unwrap();
    let err = h.acquire(&a, 1000).await.unwrap_err();
    assert!(err.to_string().contains("disk says no"), "{err}");
    assert_eq!(h.fake.state().lease_order.len(), 1, "it got as far as a browser");
    until("the browser to be released", || h.fake.state().leased.is_empty()).await;
    assert_eq!(h.sessions.usage("a"), (0, 0));
    assert_eq!(h.sessions.live_count(), 0);

    // Its tenant slot (max_slots 1) is free too: the next caller gets the session.
    sqlx::query("DROP TRIGGER refuse").execute(&mut db).await.unwrap();
    db.close().await.unwrap();
    let record = h.acquire(&a, 2000).await.unwrap();
    assert_eq!(h.stored(&record.id).await.state, SessionState::Ready);
    h.sessions.release(&a, &record.id, false).await.unwrap();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_while_queued_or_leasing_leaks_nothing() {
    let h = Arc::new(Harness::start(1, 4).await);
    let a = caller("a", "x");
    let held = h.acquire(&a, 1000).await.unwrap();
    let queued = {
        let (h, a) = (h.clone(), a.clone());
        tokio::spawn(async move { h.acquire(&a, 30_000).await })
    };
    until("the caller to queue", || h.sessions.usage("a").1 == 1).await;
    queued.abort();
    until("the queue to empty", || h.sessions.usage("a") == (1, 0)).await;
    h.sessions.release(&a, &held.id, false).await.unwrap();
    // Nothing was held for the caller that left: the next one is served at once.
    let next = h.acquire(&a, 1000).await.unwrap();
    assert_eq!(h.fake.state().lease_order.len(), 2);
    h.sessions.release(&a, &next.id, false).await.unwrap();
    Arc::into_inner(h).unwrap().stop().await;
}
