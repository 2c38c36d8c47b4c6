//! Emulation at acquire: locale, time zone, user agent (and its client hints), geolocation,
//! colour scheme and extra headers, as a page served by the test sees them, on the first tab,
//! a new tab and a popup, in both isolations; echoed on the session; bad values refused.

use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::Html;
use axum::routing::get;
use browserpool_client::{action, pb, Client};
use serde_json::{json, Value};

use crate::helpers::{act, eventually, ok, TestServer};
use crate::isolation::context_tenant;

const UA: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) \
                  Chrome/120.0.0.0 Safari/537.36";

/// What the page reads at parse time, kept in `window.seen` (a popup's first document too).
const PAGE: &str = r#"<title>Seen</title><script>
window.seen = {
  lang: navigator.language,
  tz: Intl.DateTimeFormat().resolvedOptions().timeZone,
  dark: matchMedia('(prefers-color-scheme: dark)').matches,
  ua: navigator.userAgent,
  platform: navigator.userAgentData ? navigator.userAgentData.platform : null,
};
</script><p>seen</p>"#;

/// `/seen` (the page above, its request's headers in `window.headers`), `/popup` (a link
/// that opens `/seen` in a new window) and `/` (where an import lands).
async fn site() -> String {
    let seen = |headers: HeaderMap| async move {
        let pick = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let got = json!({
            "accept_language": pick("accept-language"),
            "user_agent": pick("user-agent"),
            "x_job": pick("x-job"),
            "ch_platform": pick("sec-ch-ua-platform"),
        });
        Html(format!("{PAGE}<script>window.headers = {got};</script>"))
    };
    let app = axum::Router::new()
        .route("/", get(|| async { Html("<title>Home</title>") }))
        .route("/seen", get(seen))
        .route("/popup", get(|| async { Html("<title>Opener</title><a id=open href=/seen target=_blank>open</a>") }));
    let addr = crate::helpers::serve_loopback(app).await;
    format!("http://{addr}")
}

fn emulated() -> pb::AcquireRequest {
    pb::AcquireRequest {
        wait_ms: 30_000,
        locale: "de-DE".into(),
        timezone: "Asia/Tokyo".into(),
        user_agent: UA.into(),
        geolocation: Some(pb::Geolocation { latitude: 52.52, longitude: 13.405, accuracy: 10.0 }),
        color_scheme: pb::ColorScheme::Dark as i32,
        extra_headers: [("X-Job".to_string(), "1234".to_string())].into(),
        ..Default::default()
    }
}

/// What the active tab's page saw, and its request's headers.
async fn seen_by(client: &Client, id: &str) -> (Value, Value) {
    let seen = ok(&act(client, id, action("evaluate", "", "JSON.stringify(window.seen)")).await);
    let headers = ok(&act(client, id, action("evaluate", "", "JSON.stringify(window.headers)")).await);
    let parse = |v: Value| serde_json::from_str::<Value>(v.as_str().unwrap_or("null")).unwrap();
    (parse(seen), parse(headers))
}

fn assert_emulated(what: &str, (seen, headers): (Value, Value)) {
    assert_eq!(seen["lang"], "de-DE", "{what}: {seen}");
    assert_eq!(seen["tz"], "Asia/Tokyo", "{what}: {seen}");
    assert_eq!(seen["dark"], true, "{what}: {seen}");
    assert_eq!(seen["ua"], UA, "{what}: {seen}");
    assert_eq!(seen["platform"], "Windows", "{what}: the client hints follow the user agent: {seen}");
    assert_eq!(headers["accept_language"], "de-DE,de;q=0.9", "{what}: {headers}");
    assert_eq!(headers["user_agent"], UA, "{what}: {headers}");
    assert_eq!(headers["x_job"], "1234", "{what}: {headers}");
    assert_eq!(headers["ch_platform"], "\"Windows\"", "{what}: {headers}");
}

async fn first_tab_new_tab_and_popup(client: &Client, site: &str, what: &str) {
    let session = client.acquire_with(emulated()).await.unwrap();
    let id = session.session_id.clone();
    ok(&act(client, &id, action("navigate", "", format!("{site}/seen"))).await);
    assert_emulated(&format!("{what}: first tab"), seen_by(client, &id).await);
    // Geolocation is granted: no permission dialog, the position given.
    let position = "new Promise(r => navigator.geolocation.getCurrentPosition(p => r([p.coords.latitude, \
                    p.coords.longitude, p.coords.accuracy]), e => r('error: ' + e.message)))";
    assert_eq!(ok(&act(client, &id, action("evaluate", "", position)).await), json!([52.52, 13.405, 10]), "{what}");

    ok(&act(client, &id, action("new_tab", "", format!("{site}/seen"))).await);
    assert_emulated(&format!("{what}: new tab"), seen_by(client, &id).await);

    ok(&act(client, &id, action("navigate", "", format!("{site}/popup"))).await);
    ok(&act(client, &id, action("click", "#open", json!(null))).await);
    eventually("the popup to be a tab", Duration::from_secs(10), || async {
        let tabs = ok(&act(client, &id, action("list_tabs", "", json!(null))).await);
        (tabs.as_array().map(Vec::len) == Some(3)).then_some(())
    })
    .await;
    ok(&act(client, &id, action("switch_tab", "", 2)).await);
    ok(&act(client, &id, action("wait_for", "", json!({"url": "/seen"}))).await);
    // Its first document already: the popup was set up before it ran.
    assert_emulated(&format!("{what}: popup"), seen_by(client, &id).await);

    // A page a CDP client opens (Playwright over cdp_url) is emulated too.
    let seen = crate::cdp::node("playwright_emulated.mjs", &session.cdp_url, None, site).await;
    // Playwright sets its pages' colour scheme itself (light unless told) while Chromium holds
    // the page, as the session's emulation does: which of the two holds is whichever Chromium
    // applied last (a clean run saw each), so only that it is one of them is checked.
    let mut page_seen = seen["seen"].clone();
    assert!(page_seen["dark"].is_boolean(), "{what}: {seen}");
    page_seen["dark"] = json!(true);
    assert_emulated(&format!("{what}: Playwright's page"), (page_seen, seen["headers"].clone()));

    // Echoed on the session.
    let got = client.get(&id).await.unwrap();
    assert_eq!((got.locale.as_str(), got.timezone.as_str(), got.user_agent.as_str()), ("de-DE", "Asia/Tokyo", UA));
    assert_eq!(got.color_scheme, pb::ColorScheme::Dark as i32);
    assert_eq!(got.extra_headers.get("X-Job").map(String::as_str), Some("1234"));
    assert_eq!(got.geolocation.map(|g| (g.latitude, g.longitude)), Some((52.52, 13.405)));
    client.release(&id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_presents_itself_as_acquired_on_every_tab_in_both_isolations() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let site = site().await;
    let admin = server.admin().await;
    first_tab_new_tab_and_popup(&admin, &site, "process isolation").await;
    let dense = context_tenant(&server, &admin, &[]).await;
    first_tab_new_tab_and_popup(&dense, &site, "context isolation").await;
    // A session without emulation in the same shared browser is Chromium's own.
    let plain = dense.acquire(30_000).await.unwrap().session_id;
    ok(&act(&dense, &plain, action("navigate", "", format!("{site}/seen"))).await);
    let (seen, headers) = seen_by(&dense, &plain).await;
    assert_ne!(seen["ua"], UA, "{seen}");
    assert_eq!(seen["dark"], false, "{seen}");
    assert_eq!(headers["x_job"], "", "{headers}");
    dense.release(&plain).await.unwrap();
    server.stop().await;
}

/// An offline session's pages reach nothing and know it; a throttled one waits its latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_and_a_slow_network_are_what_the_pages_get() {
    let server = TestServer::start().await;
    let site = site().await;
    let admin = server.admin().await;
    let offline = admin.acquire_with(pb::AcquireRequest { wait_ms: 30_000, offline: true, ..Default::default() }).await;
    let id = offline.unwrap().session_id;
    let r = act(&admin, &id, action("navigate", "", format!("{site}/seen"))).await;
    let e = r.error.expect("offline: the navigation fails");
    assert!(e.message.contains("ERR_INTERNET_DISCONNECTED"), "{}", e.message);
    assert_eq!(ok(&act(&admin, &id, action("evaluate", "", "navigator.onLine")).await), json!(false));
    assert!(admin.get(&id).await.unwrap().offline);
    admin.release(&id).await.unwrap();

    let slow = pb::NetworkConditions { latency_ms: 1500, download_bytes_per_s: 0, upload_bytes_per_s: 0 };
    let req = pb::AcquireRequest { wait_ms: 30_000, network: Some(slow), ..Default::default() };
    let id = admin.acquire_with(req).await.unwrap().session_id;
    let started = std::time::Instant::now();
    ok(&act(&admin, &id, action("navigate", "", format!("{site}/seen"))).await);
    // A lower bound (what the emulation adds), not a speed target.
    assert!(started.elapsed() >= Duration::from_millis(1500), "{:?}", started.elapsed());
    assert_eq!(admin.get(&id).await.unwrap().network.map(|n| n.latency_ms), Some(1500));
    admin.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_emulation_is_refused_naming_the_field() {
    let server = TestServer::start().await;
    let admin = server.admin().await;
    let refused = |req: pb::AcquireRequest| {
        let admin = admin.clone();
        async move {
            match admin.acquire_with(pb::AcquireRequest { wait_ms: 30_000, ..req }).await {
                Err(browserpool_client::Error::Status(s)) => {
                    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
                    s.message().to_string()
                }
                other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
            }
        }
    };
    let host = [("Host".to_string(), "evil.test".to_string())].into();
    assert!(refused(pb::AcquireRequest { extra_headers: host, ..Default::default() })
        .await
        .starts_with("extra_headers: Host"));
    let said = refused(pb::AcquireRequest { locale: "not a locale".into(), ..Default::default() }).await;
    assert!(said.starts_with("locale: "), "{said}");
    let said = refused(pb::AcquireRequest { color_scheme: 9, ..Default::default() }).await;
    assert!(said.starts_with("color_scheme: 9"), "{said}");
    let slow = Some(pb::NetworkConditions { latency_ms: 600_000, ..Default::default() });
    assert!(refused(pb::AcquireRequest { network: slow, ..Default::default() })
        .await
        .starts_with("network: latency_ms"));
    let far = Some(pb::Geolocation { latitude: 100.0, longitude: 0.0, accuracy: 0.0 });
    assert!(refused(pb::AcquireRequest { geolocation: far, ..Default::default() }).await.starts_with("geolocation: "));
    // Well formed but unknown to Chromium: refused when its browser is set up, which is then
    // not handed out; the next session is served.
    let said = refused(pb::AcquireRequest { timezone: "Mars/Olympus_Mons".into(), ..Default::default() }).await;
    assert!(said.starts_with("timezone: \"Mars/Olympus_Mons\""), "{said}");
    // The next session is served; through the Rust SDK's builder this time.
    let berlin = pb::AcquireRequest { timezone: "Europe/Berlin".into(), ..Default::default() };
    let next = admin.session().emulate(berlin).await.unwrap();
    assert_eq!(next.info().timezone, "Europe/Berlin");
    let tz =
        ok(&act(&admin, next.id(), action("evaluate", "", "Intl.DateTimeFormat().resolvedOptions().timeZone")).await);
    assert_eq!(tz, json!("Europe/Berlin"));
    admin.release(next.id()).await.unwrap();
    server.stop().await;
}

/// Sessions sharing one browser (context isolation) each get their own emulation on their
/// popups, and a session without one gets none: holding new pages paused for one session
/// never gives its set-up to another's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_sharing_a_browser_keep_their_own_emulation_on_popups() {
    let server = TestServer::start_with(|a| a.max_workers = 3).await;
    let site = site().await;
    let admin = server.admin().await;
    let dense = context_tenant(&server, &admin, &[]).await;
    let with_locale =
        |locale: &str| pb::AcquireRequest { wait_ms: 30_000, locale: locale.into(), ..Default::default() };
    let german = dense.acquire_with(with_locale("de-DE")).await.unwrap();
    let french = dense.acquire_with(with_locale("fr-FR")).await.unwrap();
    let plain = dense.acquire(30_000).await.unwrap();
    assert!(german.worker_id == french.worker_id && french.worker_id == plain.worker_id, "one shared browser");
    for (session, want) in [(&german, "de-DE"), (&french, "fr-FR"), (&plain, "en-US")] {
        let id = &session.session_id;
        ok(&act(&dense, id, action("navigate", "", format!("{site}/popup"))).await);
        ok(&act(&dense, id, action("click", "#open", json!(null))).await);
        eventually("the popup to be a tab", Duration::from_secs(10), || async {
            let tabs = ok(&act(&dense, id, action("list_tabs", "", json!(null))).await);
            (tabs.as_array().map(Vec::len) == Some(2)).then_some(())
        })
        .await;
        ok(&act(&dense, id, action("switch_tab", "", 1)).await);
        ok(&act(&dense, id, action("wait_for", "", json!({"url": "/seen"}))).await);
        let (seen, headers) = seen_by(&dense, id).await;
        assert_eq!(seen["lang"], want, "{want}: {seen}");
        assert!(headers["accept_language"].as_str().unwrap().starts_with(want), "{want}: {headers}");
    }
    for s in [german, french, plain] {
        dense.release(&s.session_id).await.unwrap();
    }
    server.stop().await;
}

/// An exported context carries who browses (locale, time zone, position, colour scheme; never
/// the headers): a session acquired with it presents itself the same way before its first
/// page, while a field the Acquire sets itself wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_context_carries_the_emulation_into_the_next_session() {
    let server = TestServer::start().await;
    let site = site().await;
    let admin = server.admin().await;
    let first = admin.acquire_with(emulated()).await.unwrap();
    ok(&act(&admin, &first.session_id, action("navigate", "", format!("{site}/seen"))).await);
    let req = pb::ExportContextRequest { session_id: first.session_id.clone(), ..Default::default() };
    let env = admin.sessions().export_context(req).await.unwrap().into_inner();
    assert_eq!((env.locale.as_str(), env.timezone.as_str()), ("de-DE", "Asia/Tokyo"));
    assert_eq!((env.color_scheme, env.geolocation.map(|g| g.latitude)), (pb::ColorScheme::Dark as i32, Some(52.52)));
    admin.release(&first.session_id).await.unwrap();

    let next = pb::AcquireRequest { wait_ms: 30_000, context: Some(env.clone()), ..Default::default() };
    let session = admin.acquire_with(next).await.unwrap();
    assert_eq!((session.locale.as_str(), session.timezone.as_str()), ("de-DE", "Asia/Tokyo"), "echoed");
    ok(&act(&admin, &session.session_id, action("navigate", "", format!("{site}/seen"))).await);
    let (seen, headers) = seen_by(&admin, &session.session_id).await;
    assert_eq!(
        (seen["lang"].as_str(), seen["tz"].as_str(), seen["dark"].as_bool()),
        (Some("de-DE"), Some("Asia/Tokyo"), Some(true))
    );
    assert_eq!(headers["x_job"], "", "extra headers are not carried: {headers}");
    admin.release(&session.session_id).await.unwrap();

    let own = pb::AcquireRequest {
        wait_ms: 30_000,
        context: Some(env),
        timezone: "Europe/Berlin".into(),
        ..Default::default()
    };
    let session = admin.acquire_with(own).await.unwrap();
    assert_eq!(
        (session.locale.as_str(), session.timezone.as_str()),
        ("de-DE", "Europe/Berlin"),
        "the Acquire's own wins"
    );
    admin.release(&session.session_id).await.unwrap();
    server.stop().await;
}
