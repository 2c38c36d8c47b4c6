//! Context isolation: a tenant's sessions are browser contexts of one Chromium only that
//! tenant's sessions share. What one session leaves behind (cookies, storage, IndexedDB, the
//! HTTP cache, service workers, permissions, tabs) must never reach another, whether they
//! run side by side or one after the other; a crash of the shared Chromium ends that
//! tenant's sessions and no one else's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::response::{Html, IntoResponse};
use axum::routing::get;
use browserpool_client::{action, pb, Client};
use serde_json::{json, Value};

use crate::cdp::node;
use crate::helpers::{act, eventually, fixture_site, group_members, ok, TestServer};

const PAGE: &str = r#"<!doctype html><title>Isolation</title><p id="out">none</p>
<button id="notify" onclick="Notification.requestPermission().then(p => document.getElementById('out').textContent = 'perm=' + p)">notify</button>"#;

/// A site of its own: a page, a service worker script, and a response the HTTP cache keeps
/// for an hour, counting how often it is really fetched.
async fn site() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route(
            "/sw.js",
            get(|| async {
                ([("content-type", "text/javascript")], "self.addEventListener('fetch', () => {});").into_response()
            }),
        )
        .route(
            "/cached",
            get(move || {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move { ([("cache-control", "max-age=3600")], format!("fetch {n}")).into_response() }
            }),
        );
    let addr = crate::helpers::serve_loopback(app).await;
    (format!("http://{addr}"), hits)
}

async fn eval(client: &Client, id: &str, js: &str) -> Value {
    ok(&act(client, id, action("evaluate", "", js)).await)
}

/// Everything a session can leave behind in its browser, as its pages see it.
const TRACES: &str = r#"(async () => ({
    cookie: document.cookie,
    local: localStorage.getItem('k'),
    idb: (await indexedDB.databases()).map(d => d.name),
    workers: (await navigator.serviceWorker.getRegistrations()).length,
    notifications: (await navigator.permissions.query({ name: 'notifications' })).state,
}))()"#;

fn clean() -> Value {
    json!({ "cookie": "", "local": null, "idb": [], "workers": 0, "notifications": "prompt" })
}

/// Leaves every kind of trace in session `id`'s context, and checks each is really there.
async fn leave_traces(client: &Client, id: &str, site: &str) {
    ok(&act(client, id, action("navigate", "", format!("{site}/"))).await);
    eval(client, id, "document.cookie = 'c=1; max-age=3600'; localStorage.setItem('k', 'v'); 1").await;
    eval(
        client,
        id,
        "new Promise((ok, no) => { const r = indexedDB.open('left-behind'); r.onupgradeneeded = () => r.result.createObjectStore('s'); r.onsuccess = () => { r.result.close(); ok(1) }; r.onerror = no })",
    )
    .await;
    eval(
        client,
        id,
        "navigator.serviceWorker.register('/sw.js').then(() => navigator.serviceWorker.ready).then(() => 1)",
    )
    .await;
    // The permission prompt surfaces as a dialog, on the click or on the next action.
    let click = act(client, id, action("click", "#notify", json!(null))).await;
    if click.ok {
        eventually("the permission prompt to surface", Duration::from_secs(5), || async {
            let r = act(client, id, action("title", "", json!(null))).await;
            (!r.ok).then_some(())
        })
        .await;
    }
    ok(&act(client, id, action("click", "dialog::accept", json!(null))).await);
    ok(&act(client, id, action("wait_for", "", json!({"text": "perm=granted"}))).await);
    ok(&act(client, id, action("new_tab", "", json!(null))).await);
    ok(&act(client, id, action("switch_tab", "", json!(0))).await);
    let traces = eval(client, id, TRACES).await;
    assert_eq!(
        traces,
        json!({ "cookie": "c=1", "local": "v", "idb": ["left-behind"], "workers": 1, "notifications": "granted" }),
        "the traces were left"
    );
}

/// Makes tenant `dense` (3 slots, loopback allowed, context isolation) and a client of it
/// with `sessions:read`, `sessions:write` and `scopes`.
pub(crate) async fn context_tenant(server: &TestServer, admin: &Client, scopes: &[&str]) -> Client {
    let dense = pb::Tenant {
        id: "dense".into(),
        max_slots: 3,
        max_queue: 3,
        allow_private_networks: true,
        isolation: pb::Isolation::Context as i32,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(dense) }).await.unwrap();
    let scopes: Vec<&str> = ["sessions:read", "sessions:write"].iter().chain(scopes).copied().collect();
    let token = server.token("dense", "ci", &scopes).await;
    server.client(&token).await
}

fn tabs(r: &Value) -> usize {
    r.as_array().map(Vec::len).unwrap_or_else(|| panic!("list_tabs answered {r}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_sessions_share_a_browser_and_nothing_else() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let (site, hits) = site().await;
    let admin = server.admin().await;
    let client = context_tenant(&server, &admin, &["context:export"]).await;
    let listed = admin.admin().list_tenants(pb::ListTenantsRequest {}).await.unwrap().into_inner();
    let stored = listed.tenants.iter().find(|t| t.id == "dense").unwrap();
    assert_eq!(stored.isolation, pb::Isolation::Context as i32);
    // Another tenant's session, in a Chromium of its own: the shared browser's crash below
    // must not touch it.
    let bystander = admin.acquire(30_000).await.unwrap();

    let a = client.acquire(30_000).await.unwrap();
    let b = client.acquire(30_000).await.unwrap();
    assert_eq!(a.worker_id, b.worker_id, "the tenant's sessions share one browser");
    assert_ne!(a.worker_id, bystander.worker_id, "never another tenant's");

    // Side by side: A leaves traces, B sees none of them.
    leave_traces(&client, &a.session_id, &site).await;
    assert_eq!(eval(&client, &a.session_id, "fetch('/cached').then(r => r.text())").await, json!("fetch 1"));
    assert_eq!(eval(&client, &a.session_id, "fetch('/cached').then(r => r.text())").await, json!("fetch 1"), "cached");
    ok(&act(&client, &b.session_id, action("navigate", "", format!("{site}/"))).await);
    assert_eq!(eval(&client, &b.session_id, TRACES).await, clean());
    assert_eq!(eval(&client, &b.session_id, "fetch('/cached').then(r => r.text())").await, json!("fetch 2"));
    assert_eq!(tabs(&ok(&act(&client, &b.session_id, action("list_tabs", "", json!(null))).await)), 1);
    assert_eq!(tabs(&ok(&act(&client, &a.session_id, action("list_tabs", "", json!(null))).await)), 2);
    // Cookies read through the session's own API are its own too.
    let jar = ok(&act(&client, &b.session_id, action("cookies", "", json!({"op": "get"}))).await);
    assert_eq!(jar, json!([]), "B's cookie jar");

    // One after the other: A's context is disposed at release; the next session gets the same
    // browser and a clean context.
    client.release(&a.session_id).await.unwrap();
    let c = client.acquire(30_000).await.unwrap();
    assert_eq!(c.worker_id, b.worker_id, "the shared browser is reused");
    ok(&act(&client, &c.session_id, action("navigate", "", format!("{site}/"))).await);
    assert_eq!(eval(&client, &c.session_id, TRACES).await, clean());
    assert_eq!(eval(&client, &c.session_id, "fetch('/cached').then(r => r.text())").await, json!("fetch 3"));
    assert_eq!(tabs(&ok(&act(&client, &c.session_id, action("list_tabs", "", json!(null))).await)), 1);
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    // The shared browser crashes: the tenant's sessions end CRASHED, the bystander lives on.
    let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let shared = status.workers.iter().find(|w| w.worker_id == b.worker_id).expect("the shared browser is listed");
    // SAFETY: kill has no memory preconditions; the pid is the shared browser's.
    unsafe { libc::kill(shared.pid as i32, libc::SIGKILL) };
    for id in [&b.session_id, &c.session_id] {
        eventually("the tenant's sessions to end CRASHED", Duration::from_secs(15), || async {
            let s = client.get(id).await.unwrap();
            (s.state == pb::SessionState::Crashed as i32).then_some(())
        })
        .await;
    }
    assert_eq!(admin.get(&bystander.session_id).await.unwrap().state, pb::SessionState::Ready as i32);
    ok(&act(&admin, &bystander.session_id, action("title", "", json!(null))).await);
    // The tenant gets a fresh shared browser.
    let d = client.acquire(30_000).await.unwrap();
    assert_ne!(d.worker_id, b.worker_id);
    assert_eq!(eval(&client, &d.session_id, "1 + 1").await, json!(2));
    client.release(&d.session_id).await.unwrap();
    admin.release(&bystander.session_id).await.unwrap();
    server.stop().await;
}

/// Sessions that start at once: one takes the spare context (or waits for the one being
/// made), the others make their own meanwhile; each gets a context no other session has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_sessions_starting_at_once_each_get_a_context_of_their_own() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let (site, _) = site().await;
    let admin = server.admin().await;
    let client = context_tenant(&server, &admin, &[]).await;
    // The shared browser made, and its next context being made (or made) as these start.
    let first = client.acquire(30_000).await.unwrap();
    client.release(&first.session_id).await.unwrap();
    for round in 0..2 {
        let acquired = futures::future::join_all((0..3).map(|_| client.acquire(30_000))).await;
        let sessions: Vec<_> = acquired.into_iter().map(|s| s.unwrap()).collect();
        for s in &sessions {
            assert_eq!(s.worker_id, first.worker_id, "round {round}: the tenant's one browser");
        }
        for (i, s) in sessions.iter().enumerate() {
            ok(&act(&client, &s.session_id, action("navigate", "", format!("{site}/"))).await);
            eval(&client, &s.session_id, &format!("document.cookie = 'who={i}'")).await;
        }
        for (i, s) in sessions.iter().enumerate() {
            let cookie = eval(&client, &s.session_id, "document.cookie").await;
            assert_eq!(cookie, json!(format!("who={i}")), "round {round}: session {i} sees only its own cookie");
            assert_eq!(tabs(&ok(&act(&client, &s.session_id, action("list_tabs", "", json!(null))).await)), 1);
        }
        for s in &sessions {
            client.release(&s.session_id).await.unwrap();
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdp_client_sees_only_its_own_context() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let site = fixture_site().await;
    let admin = server.admin().await;
    let client = context_tenant(&server, &admin, &[]).await;
    let a = client.acquire(30_000).await.unwrap();
    let b = client.acquire(30_000).await.unwrap();
    assert_eq!(a.worker_id, b.worker_id);
    // A's page is at /about with a cookie: B's client must see neither.
    ok(&act(&client, &a.session_id, action("navigate", "", format!("{site}/about"))).await);
    eval(&client, &a.session_id, "document.cookie = 'mine=a'; 1").await;

    // Puppeteer and Playwright work on B as on a browser of its own.
    let seen = node("puppeteer_flow.mjs", &b.cdp_url, None, &site).await;
    assert_eq!(seen["heading"], "Hello, puppeteer", "{seen}");
    let seen = node("playwright_flow.mjs", &b.cdp_url, None, &site).await;
    assert_eq!(seen["heading"], "Hello, playwright", "{seen}");

    let seen = node("scope_probe.mjs", &b.cdp_url, None, &site).await;
    let text = seen.to_string();
    assert!(!text.contains("/about"), "B's client saw A's page: {seen}");
    assert!(
        seen["targets"].as_array().unwrap().iter().all(|t| !t.as_str().unwrap().starts_with("page ")
            || t.as_str().unwrap().contains(&site)
            || t.as_str().unwrap().ends_with("about:blank")),
        "{seen}"
    );
    assert!(seen["newContext"].as_str().unwrap().contains("browserpool refuses Target.createBrowserContext"), "{seen}");
    assert_eq!(seen["cookie"], "", "{seen}");
    assert!(seen["after"].as_array().unwrap().iter().any(|u| u.as_str().unwrap().ends_with("/second")), "{seen}");

    // A client of B that auto-attaches (waiting for the debugger on new targets) and stays
    // attached does not hold A's new pages back: the proxy detaches it from them.
    let mut hold = tokio::process::Command::new("node")
        .arg("hold.mjs")
        .current_dir(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cdp"))
        .env("CDP_URL", &b.cdp_url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(hold.stdout.take().unwrap()));
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.unwrap().unwrap();
    assert!(ready.as_deref().is_some_and(|l| l.contains("\"ready\":true")), "{ready:?}");
    let mut opened = action("new_tab", "", format!("{site}/second"));
    opened.timeout_ms = 10_000;
    let opened = act(&client, &a.session_id, opened).await;
    ok(&opened);
    assert_eq!(ok(&act(&client, &a.session_id, action("title", "", json!(null))).await), json!("Second"));
    ok(&act(&client, &a.session_id, action("close_tab", "", json!(1))).await);
    drop(hold.stdin.take());
    let held = tokio::time::timeout(Duration::from_secs(30), hold.wait()).await.unwrap().unwrap();
    assert!(held.success(), "hold.mjs ended with {held}");

    // The pages B's clients opened are B's tabs; A still has its one tab, untouched.
    let b_tabs = ok(&act(&client, &b.session_id, action("list_tabs", "", json!(null))).await);
    assert_eq!(tabs(&b_tabs), 4, "B's blank tab and the three its clients opened: {b_tabs}");
    let a_tabs = ok(&act(&client, &a.session_id, action("list_tabs", "", json!(null))).await);
    assert_eq!(tabs(&a_tabs), 1, "{a_tabs}");
    assert!(a_tabs[0]["url"].as_str().unwrap().ends_with("/about"), "{a_tabs}");
    client.release(&a.session_id).await.unwrap();
    client.release(&b.session_id).await.unwrap();
    server.stop().await;
}

/// The pid of worker `id`, while the pool lists it.
async fn worker_pid(admin: &Client, id: &str) -> Option<u32> {
    let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    status.workers.iter().find(|w| w.worker_id == id).map(|w| w.pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_browser_is_replaced_after_its_sessions_and_goes_when_idle() {
    let server = TestServer::start_with(|a| {
        a.max_workers = 3;
        a.context_recycle_after = 2;
        a.context_idle = Duration::from_secs(1);
    })
    .await;
    let admin = server.admin().await;
    let client = context_tenant(&server, &admin, &[]).await;
    let first = client.acquire(30_000).await.unwrap();
    let second = client.acquire(30_000).await.unwrap();
    assert_eq!(first.worker_id, second.worker_id);
    let old = worker_pid(&admin, &first.worker_id).await.expect("the shared browser is listed");
    // Its second session was its last: the third gets a fresh browser, and the old one goes
    // once its sessions have ended, not before.
    let third = client.acquire(30_000).await.unwrap();
    assert_ne!(third.worker_id, first.worker_id, "replaced after 2 sessions");
    client.release(&first.session_id).await.unwrap();
    assert_eq!(eval(&client, &second.session_id, "1 + 1").await, json!(2), "still serving its last session");
    assert!(worker_pid(&admin, &first.worker_id).await.is_some());
    client.release(&second.session_id).await.unwrap();
    eventually("the replaced browser to be killed", Duration::from_secs(15), || async {
        (worker_pid(&admin, &first.worker_id).await.is_none() && !browserpool_pool::lock::pid_alive(old)).then_some(())
    })
    .await;
    // With no session for --context-idle, the current one goes too.
    client.release(&third.session_id).await.unwrap();
    eventually("the idle shared browser to be killed", Duration::from_secs(15), || async {
        worker_pid(&admin, &third.worker_id).await.is_none().then_some(())
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_browser_is_replaced_past_its_memory_ceiling() {
    // Its cgroup's anonymous and shared memory, read as each session ends: an idle headless
    // shell holds well under 128 MiB.
    replaced_past_its_memory_ceiling(false, 128, 256).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cgroups_the_shared_browser_s_pss_is_held_against_its_ceiling() {
    // Without a cgroup to read, its processes' PSS, read at most once a second: with two tabs
    // the headless shell (the suite's Chromium) is about 160 MiB.
    replaced_past_its_memory_ceiling(true, 400, 512).await;
}

/// A shared browser under its ceiling of `ceiling_mib` is kept as a session ends; once a page
/// holds `hold_mib` it is past it, and the next session to end retires it: it is killed when
/// the page's session ends too, and the next session gets another browser.
async fn replaced_past_its_memory_ceiling(no_cgroups: bool, ceiling_mib: u64, hold_mib: u32) {
    let server = TestServer::start_with(move |a| {
        a.max_workers = 3;
        a.no_worker_cgroups = no_cgroups;
        a.context_memory_ceiling_mib = ceiling_mib;
    })
    .await;
    let admin = server.admin().await;
    let client = context_tenant(&server, &admin, &[]).await;
    let hog = client.acquire(30_000).await.unwrap();
    let first = client.acquire(30_000).await.unwrap();
    assert_eq!(hog.worker_id, first.worker_id, "one shared browser");
    client.release(&first.session_id).await.unwrap();
    let second = client.acquire(30_000).await.unwrap();
    assert_eq!(second.worker_id, hog.worker_id, "under its ceiling the browser is kept");
    let hold = format!("(window.held = new Uint8Array({hold_mib} << 20).fill(1)).length");
    assert_eq!(eval(&client, &hog.session_id, &hold).await, json!(hold_mib << 20));
    // Without cgroups the last read was at the first session's end: the next is due a second
    // after it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    client.release(&second.session_id).await.unwrap();
    assert!(worker_pid(&admin, &hog.worker_id).await.is_some(), "the hog's session still runs in it");
    client.release(&hog.session_id).await.unwrap();
    eventually("the browser past its ceiling to be killed", Duration::from_secs(15), || async {
        worker_pid(&admin, &hog.worker_id).await.is_none().then_some(())
    })
    .await;
    let next = client.acquire(30_000).await.unwrap();
    assert_ne!(next.worker_id, hog.worker_id);
    client.release(&next.session_id).await.unwrap();
    server.stop().await;
}

/// Registers six service workers one after another and waits for each to be activated: each
/// start is a chance for the worker to be left paused by a dropped resume (see
/// `resume_worker` in the pool), which hung about one registration in four before.
const SIX_WORKERS: &str = r#"(async () => {
    for (let i = 0; i < 6; i++) {
        const r = await navigator.serviceWorker.register('/sw.js?n=' + i, { scope: '/s' + i + '/' });
        const w = r.installing || r.waiting || r.active;
        if (w.state !== 'activated') {
            await new Promise(ok => w.addEventListener('statechange', () => w.state === 'activated' && ok()));
        }
    }
    return (await navigator.serviceWorker.getRegistrations()).length;
})()"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_worker_starts_in_either_isolation() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let (site, _) = site().await;
    let admin = server.admin().await;
    let client = context_tenant(&server, &admin, &[]).await;
    let own = admin.acquire(30_000).await.unwrap();
    let shared = client.acquire(30_000).await.unwrap();
    for (client, id) in [(&admin, &own.session_id), (&client, &shared.session_id)] {
        ok(&act(client, id, action("navigate", "", format!("{site}/"))).await);
        let mut run = action("evaluate", "", SIX_WORKERS);
        run.timeout_ms = 15_000;
        assert_eq!(ok(&act(client, id, run).await), json!(6), "every worker activated");
    }
    admin.release(&own.session_id).await.unwrap();
    client.release(&shared.session_id).await.unwrap();
    server.stop().await;
}

/// The renderer processes of process group `pgid` once their set has stayed the same for a
/// second (a spare context's tab may still be starting one).
async fn settled_renderers(pgid: i32) -> Vec<i32> {
    let mut last = group_members(pgid, "--type=renderer");
    let mut since = tokio::time::Instant::now();
    let deadline = since + Duration::from_secs(20);
    while since.elapsed() < Duration::from_secs(1) {
        assert!(tokio::time::Instant::now() < deadline, "the renderers of {pgid} never settled: {last:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = group_members(pgid, "--type=renderer");
        if now != last {
            (last, since) = (now, tokio::time::Instant::now());
        }
    }
    last
}

/// A session's Chromium runs renderers for its pages only: no omnibox popup WebUI for each
/// window (a context session opens one; about 300 ms of CPU each, more than the page), and
/// the first navigation runs in the renderer its tab already has, with no spare renderer
/// started beside it (thrown away when the next session's context navigates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_starts_no_renderer_but_its_pages() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let site = fixture_site().await;
    let admin = server.admin().await;
    let client = context_tenant(&server, &admin, &[]).await;
    let own = admin.acquire(30_000).await.unwrap();
    let first = client.acquire(30_000).await.unwrap();
    let second = client.acquire(30_000).await.unwrap();
    for (client, lease) in [(&admin, &own), (&client, &first), (&client, &second)] {
        let pgid = worker_pid(&admin, &lease.worker_id).await.expect("the worker is listed") as i32;
        let before = settled_renderers(pgid).await;
        ok(&act(client, &lease.session_id, action("navigate", "", format!("{site}/"))).await);
        assert_eq!(settled_renderers(pgid).await, before, "the navigation started a renderer");
        assert_eq!(group_members(pgid, "--top-chrome-webui"), Vec::<i32>::new(), "a WebUI renderer runs");
    }
    for (client, lease) in [(&admin, &own), (&client, &first), (&client, &second)] {
        client.release(&lease.session_id).await.unwrap();
    }
    server.stop().await;
}
