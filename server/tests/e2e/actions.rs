//! The rest of the action table: tabs, screenshots, viewport, load_html, pdf, widgets, batch.

use browserpool_client::{action, pb};
use serde_json::json;

use crate::helpers::{act, err_code, fixture_site, ok, png_size, TestServer};

/// Popups register as tabs shortly after the click that opens them: poll (bounded) for them.
async fn wait_tabs(client: &browserpool_client::Client, id: &str, n: usize) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let tabs = ok(&act(client, id, action("list_tabs", "", json!(null))).await);
        if tabs.as_array().unwrap().len() == n {
            return tabs;
        }
        assert!(std::time::Instant::now() < deadline, "expected {n} tabs, have {tabs}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tabs_popups_and_sticky_switching() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/popup"))).await);

    // A target=_blank link opens a tab the client can switch to.
    ok(&act(&client, &id, action("click", "#blank", json!(null))).await);
    let tabs = wait_tabs(&client, &id, 2).await;
    assert_eq!(tabs[0]["active"], json!(true));

    // By substring, and sticky: later actions go to the chosen tab.
    let switched = act(&client, &id, action("switch_tab", "", "about")).await;
    assert_eq!(ok(&switched)["tab_index"], json!(1));
    ok(&act(&client, &id, action("wait_for", "", json!({"text": "about page"}))).await);
    let title = act(&client, &id, action("title", "", json!(null))).await;
    assert_eq!((ok(&title), title.tab_index), (json!("About"), 1));

    // The legacy tab_index routes through switch_tab (and stays switched).
    let mut legacy = action("title", "", json!(null));
    legacy.tab_index = Some(0);
    assert_eq!(ok(&act(&client, &id, legacy).await), json!("Popup"));
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("Popup"));

    // window.open also becomes a tab.
    ok(&act(&client, &id, action("click", "#open", json!(null))).await);
    wait_tabs(&client, &id, 3).await;
    ok(&act(&client, &id, action("switch_tab", "", 2)).await);
    ok(&act(&client, &id, action("wait_for", "", json!({"url": "/second"}))).await);

    // close_tab of the active tab moves to a neighbour; the last tab cannot be closed.
    let closed = ok(&act(&client, &id, action("close_tab", "", json!(null))).await);
    assert_eq!(closed["tabs"], json!(2));
    ok(&act(&client, &id, action("close_tab", "", 1)).await);
    let last = act(&client, &id, action("close_tab", "", json!(null))).await;
    assert_eq!(err_code(&last), pb::ErrorCode::InvalidArgument);

    // new_tab opens and switches to it.
    let opened = ok(&act(&client, &id, action("new_tab", "", format!("{site}/about"))).await);
    assert_eq!(opened["tab_index"], json!(1));
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("About"));
    let bad = act(&client, &id, action("switch_tab", "", 9)).await;
    assert_eq!(err_code(&bad), pb::ErrorCode::InvalidArgument);
    let none = act(&client, &id, action("switch_tab", "", "no such tab")).await;
    assert_eq!(err_code(&none), pb::ErrorCode::InvalidArgument);
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tabs_are_capped_popups_included() {
    let server = TestServer::start_with(|a| a.max_tabs = 4).await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    for n in 1..4 {
        assert_eq!(ok(&act(&client, &id, action("new_tab", "", json!(null))).await)["tab_index"], json!(n));
    }
    let refused = act(&client, &id, action("new_tab", "", json!(null))).await;
    assert_eq!(err_code(&refused), pb::ErrorCode::BlockedByPolicy);
    let message = &refused.error.as_ref().unwrap().message;
    assert!(message.contains("4 tabs") && message.contains("--max-tabs"), "{message}");
    for _ in 1..4 {
        ok(&act(&client, &id, action("close_tab", "", json!(null))).await);
    }
    wait_tabs(&client, &id, 1).await;

    // A page opening popups in a loop gets to the cap and no further. Chromium lets a page
    // open one popup per user gesture (a script alone opens none), so each click opens one.
    let opener = "<title>Opener</title><button id=open onclick=\"for (let i = 0; i < 30; i++) window.open('about:blank')\">open</button>";
    ok(&act(&client, &id, action("load_html", "", opener)).await);
    for _ in 0..8 {
        ok(&act(&client, &id, action("click", "#open", json!(null))).await);
    }
    wait_tabs(&client, &id, 4).await;
    // Late popups would register within this wait; none may.
    ok(&act(&client, &id, action("wait_for", "", json!({"ms": 1000}))).await);
    let tabs = ok(&act(&client, &id, action("list_tabs", "", json!(null))).await);
    assert_eq!(tabs.as_array().unwrap().len(), 4, "{tabs}");
    let refused = act(&client, &id, action("new_tab", "", json!(null))).await;
    assert_eq!(err_code(&refused), pb::ErrorCode::BlockedByPolicy);
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots_viewport_and_pdf() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/widgets"))).await);

    let viewport = act(&client, &id, action("screenshot", "", json!(null))).await;
    assert_eq!(png_size(&viewport.data), (1280, 720));
    let full = act(&client, &id, action("screenshot", "", json!({"full_page": true}))).await;
    let (w, h) = png_size(&full.data);
    // The document is as wide as the viewport less its scrollbar, and 3000+ px tall.
    assert!(w >= 1200 && h > 3000, "full page is the whole document: {w}x{h}");
    let clip =
        act(&client, &id, action("screenshot", "", json!({"clip": {"x": 10, "y": 20, "width": 200, "height": 100}})))
            .await;
    assert_eq!(png_size(&clip.data), (200, 100));
    let element = act(&client, &id, action("screenshot", "#box", json!(null))).await;
    assert_eq!(png_size(&element.data), (120, 80));
    let jpeg = act(&client, &id, action("screenshot", "", json!({"format": "jpeg", "quality": 50}))).await;
    ok(&jpeg);
    assert_eq!((&jpeg.data[..2], jpeg.mime_type.as_str()), (&[0xFF, 0xD8][..], "image/jpeg"));

    let conflict =
        act(&client, &id, action("screenshot", "#box", json!({"clip": {"x": 0, "y": 0, "width": 10, "height": 10}})))
            .await;
    assert_eq!(err_code(&conflict), pb::ErrorCode::InvalidArgument);
    let huge =
        act(&client, &id, action("screenshot", "", json!({"clip": {"x": 0, "y": 0, "width": 20000, "height": 10}})))
            .await;
    assert_eq!(err_code(&huge), pb::ErrorCode::PayloadTooLarge);
    let quality_png = act(&client, &id, action("screenshot", "", json!({"quality": 50}))).await;
    assert_eq!(err_code(&quality_png), pb::ErrorCode::InvalidArgument);

    // Scale 2 doubles the pixels; bad scales name the value.
    ok(&act(&client, &id, action("viewport", "", json!({"width": 640, "height": 480, "scale": 2}))).await);
    let doubled = act(&client, &id, action("screenshot", "", json!(null))).await;
    assert_eq!(png_size(&doubled.data), (1280, 960));
    for (bad, named) in [(json!(0.5), "0.5"), (json!(4), "4"), (json!("NaN"), "NaN"), (json!("Infinity"), "Infinity")] {
        let r = act(&client, &id, action("set_viewport", "", json!({"width": 640, "height": 480, "scale": bad}))).await;
        assert_eq!(err_code(&r), pb::ErrorCode::InvalidArgument);
        assert!(r.error.unwrap().message.contains(named), "names {named}");
    }

    let pdf = act(&client, &id, action("pdf", "", json!({"landscape": true}))).await;
    ok(&pdf);
    assert_eq!((&pdf.data[..4], pdf.mime_type.as_str()), (&b"%PDF"[..], "application/pdf"));
    let bad_pdf = act(&client, &id, action("pdf", "", json!({"paper": "A4"}))).await;
    assert_eq!(err_code(&bad_pdf), pb::ErrorCode::InvalidArgument);
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_html_is_capped_survives_viewport_and_is_forgotten_on_navigation() {
    let server = TestServer::start_with(|a| a.max_html_bytes = 4096).await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;

    let loaded = act(
        &client,
        &id,
        action("setContent", "", "\u{feff}  \n<h1 id=t>from payload</h1><a id=go href=\"/about\">go</a>"),
    )
    .await;
    assert_eq!((loaded.action.as_str(), loaded.alias_of.as_str()), ("load_html", "setContent"));
    ok(&loaded);
    assert_eq!(ok(&act(&client, &id, action("extract", "#t", json!(null))).await), json!("from payload"));
    ok(&act(&client, &id, action("set_viewport", "", json!({"width": 400, "height": 300, "mobile": true}))).await);
    assert_eq!(ok(&act(&client, &id, action("extract", "#t", json!(null))).await), json!("from payload"));

    let not_markup = act(&client, &id, action("load_html", "", "just text")).await;
    assert_eq!(err_code(&not_markup), pb::ErrorCode::InvalidArgument);
    let too_big = act(&client, &id, action("load_html", "", format!("<p>{}</p>", "x".repeat(5000)))).await;
    assert_eq!(err_code(&too_big), pb::ErrorCode::PayloadTooLarge);

    // A real navigation forgets it: after a link click or a navigate, set_viewport does not
    // bring it back.
    ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);
    ok(&act(&client, &id, action("load_html", "", "<h1 id=t>again</h1><a id=go href=\"/about\">go</a>")).await);
    ok(&act(&client, &id, action("click", "#go", json!(null))).await);
    ok(&act(&client, &id, action("wait_for", "", json!({"text": "about page"}))).await);
    ok(&act(&client, &id, action("set_viewport", "", json!({"width": 500, "height": 300}))).await);
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("About"));
    ok(&act(&client, &id, action("load_html", "", "<h1 id=t>third</h1>")).await);
    ok(&act(&client, &id, action("navigate", "", format!("{site}/about"))).await);
    ok(&act(&client, &id, action("set_viewport", "", json!({"width": 600, "height": 300}))).await);
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("About"));
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widgets_history_and_wait_until() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;

    for wait in ["none", "domcontentloaded", "networkidle", "load"] {
        let r =
            act(&client, &id, action("navigate", "", json!({"url": format!("{site}/widgets"), "wait_until": wait})))
                .await;
        ok(&r);
    }
    ok(&act(&client, &id, action("wait_for", "#bottom", json!(null))).await);
    let bad_wait =
        act(&client, &id, action("goto", "", json!({"url": format!("{site}/"), "wait_until": "forever"}))).await;
    assert_eq!(err_code(&bad_wait), pb::ErrorCode::InvalidArgument);

    ok(&act(&client, &id, action("hover", "#box", json!(null))).await);
    assert_eq!(ok(&act(&client, &id, action("attr", "#box", "data-hovered")).await), json!("yes"));
    assert_eq!(ok(&act(&client, &id, action("attr", "#box", "data-kind")).await), json!("square"));
    ok(&act(&client, &id, action("focus", "#field", json!(null))).await);
    assert_eq!(ok(&act(&client, &id, action("attr", "#field", "data-focused")).await), json!("yes"));
    assert_eq!(ok(&act(&client, &id, action("select", "#color", "g")).await), json!(["g"]));
    assert_eq!(ok(&act(&client, &id, action("select", "#many", json!(["a", "c"]))).await), json!(["a", "c"]));
    assert_eq!(err_code(&act(&client, &id, action("select", "#color", "zz")).await), pb::ErrorCode::InvalidArgument);
    assert_eq!(err_code(&act(&client, &id, action("select", "#box", "a")).await), pb::ErrorCode::InvalidArgument);
    let scrolled = ok(&act(&client, &id, action("scroll", "", json!({"y": 1000}))).await);
    assert_eq!(scrolled["y"], json!(1000));
    let into_view = ok(&act(&client, &id, action("scroll", "#bottom", json!(null))).await);
    assert!(into_view["y"].as_f64().unwrap() > 1000.0);

    ok(&act(&client, &id, action("navigate", "", format!("{site}/about"))).await);
    ok(&act(&client, &id, action("back", "", json!(null))).await);
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("Widgets"));
    ok(&act(&client, &id, action("forward", "", json!(null))).await);
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("About"));
    ok(&act(&client, &id, action("reload", "", json!(null))).await);
    assert_eq!(ok(&act(&client, &id, action("title", "", json!(null))).await), json!("About"));
    let no_next = act(&client, &id, action("forward", "", json!(null))).await;
    assert_eq!(err_code(&no_next), pb::ErrorCode::InvalidArgument);
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_isolates_actions_and_checks_each_scope() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    let mut sessions = client.sessions();

    let missing = pb::Action { timeout_ms: 200, ..action("click", "#missing", json!(null)) };
    let actions = vec![action("navigate", "", format!("{site}/")), missing.clone(), action("title", "", json!(null))];
    let resp = sessions
        .batch(pb::BatchRequest { session_id: id.clone(), actions: actions.clone(), stop_on_error: false })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((resp.succeeded, resp.failed, resp.results.len()), (2, 1, 3));
    assert_eq!(err_code(&resp.results[1]), pb::ErrorCode::ElementNotFound);
    assert_eq!(ok(&resp.results[2]), json!("Greeter"));

    let stopped = sessions
        .batch(pb::BatchRequest { session_id: id.clone(), actions, stop_on_error: true })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((stopped.succeeded, stopped.failed, stopped.results.len()), (1, 1, 2));

    let too_many = vec![action("title", "", json!(null)); 51];
    let status = sessions
        .batch(pb::BatchRequest { session_id: id.clone(), actions: too_many, stop_on_error: false })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let nested = vec![action("title", "", json!(null)), action("batch", "", json!([]))];
    let status = sessions
        .batch(pb::BatchRequest { session_id: id.clone(), actions: nested, stop_on_error: false })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);

    // One scope check per action: a read-only token gets the reads and is denied the write.
    let reader = server.token("default", "admin", &["sessions:read"]).await;
    let mut reader = server.client(&reader).await.sessions();
    let mixed = vec![action("title", "", json!(null)), action("js", "", "1"), action("url", "", json!(null))];
    let resp = reader
        .batch(pb::BatchRequest { session_id: id.clone(), actions: mixed, stop_on_error: false })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((resp.succeeded, resp.failed), (2, 1));
    assert_eq!(err_code(&resp.results[1]), pb::ErrorCode::PermissionDenied);
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// After a popup opens, the opener (still the active tab) takes input at once: Chromium puts
/// the popup in front, and input to a tab in the background used to wait out its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opener_takes_input_after_a_popup() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/popup"))).await);
    ok(&act(&client, &id, action("click", "#blank", json!(null))).await);
    wait_tabs(&client, &id, 2).await;
    let mut again = action("click", "#open", json!(null));
    again.timeout_ms = 5_000;
    let r = act(&client, &id, again).await;
    assert!(r.ok, "the opener's click: {:?} after {} ms", r.error, r.duration_ms);
    assert_eq!(r.tab_index, 0);
    wait_tabs(&client, &id, 3).await;
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// `navigate` answers the main document's HTTP status, after redirects; `fail_on_status` turns
/// 4xx/5xx into NAVIGATION_FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigate_reports_the_http_status() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;

    let home = ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);
    assert_eq!((home["url"].as_str(), home["status"].as_u64()), (Some(&*format!("{site}/")), Some(200)));
    let missing = ok(&act(&client, &id, action("navigate", "", format!("{site}/missing"))).await);
    assert_eq!(missing["status"], json!(404), "{missing}");
    let broken = ok(&act(&client, &id, action("goto", "", json!({"url": format!("{site}/broken")}))).await);
    assert_eq!(broken["status"], json!(500), "{broken}");
    let moved = ok(&act(&client, &id, action("navigate", "", format!("{site}/moved"))).await);
    assert_eq!((moved["url"].as_str(), moved["status"].as_u64()), (Some(&*format!("{site}/about")), Some(200)));
    let blank = ok(&act(&client, &id, action("navigate", "", "about:blank")).await);
    assert_eq!(blank["status"], json!(null), "{blank}");

    let strict = |path: &str| action("navigate", "", json!({"url": format!("{site}{path}"), "fail_on_status": true}));
    let failed = act(&client, &id, strict("/missing")).await;
    assert_eq!(err_code(&failed), pb::ErrorCode::NavigationFailed);
    let message = failed.error.as_ref().unwrap().message.clone();
    assert!(message.contains("HTTP status 404") && message.contains("/missing"), "{message}");
    assert_eq!(err_code(&act(&client, &id, strict("/broken")).await), pb::ErrorCode::NavigationFailed);
    assert_eq!(ok(&act(&client, &id, strict("/about")).await)["status"], json!(200));
    // A 404 without a body is a 404 like any other in the headless shell the workers run. (The
    // full browser, `--chrome chromium`, shows its own error page there and fails either way.)
    let empty = ok(&act(&client, &id, action("navigate", "", format!("{site}/nothing-here"))).await);
    assert_eq!(empty["status"], json!(404), "{empty}");
    let failed = act(&client, &id, strict("/nothing-here")).await;
    assert_eq!(err_code(&failed), pb::ErrorCode::NavigationFailed);
    let message = failed.error.unwrap().message;
    assert!(message.contains("HTTP status 404") && message.contains("/nothing-here"), "{message}");
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// `--chrome chromium` runs the full browser instead of the headless shell: sessions work the
/// same, and an empty 404 is the full browser's own error page, a failed navigation either way
/// (the README's "Which Chromium").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_browser_runs_sessions_too() {
    let server = TestServer::start_with(|a| a.chrome = Some("chromium".into())).await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    let home = ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);
    assert_eq!(home["status"], json!(200), "{home}");
    let title = ok(&act(&client, &id, action("title", "", json!(null))).await);
    assert_eq!(title, json!("Greeter"));
    let empty = act(&client, &id, action("navigate", "", format!("{site}/nothing-here"))).await;
    assert_eq!(err_code(&empty), pb::ErrorCode::NavigationFailed);
    let message = empty.error.unwrap().message;
    assert!(message.contains("HTTP status 404") && message.contains("ERR_HTTP_RESPONSE_CODE_FAILURE"), "{message}");
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// Options are read one way: an unknown key is INVALID_ARGUMENT naming it, with the option it
/// was close to in `did_you_mean`; nothing is silently ignored; a wait that runs out says which
/// timeout and how long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_are_strict_and_waits_say_which_timeout_ran_out() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/"))).await);

    for (a, selector, payload, key, near) in [
        ("screenshot", "", json!({"fullPage": true}), "fullPage", vec!["full_page"]),
        ("click", "h1", json!({"clickCount": 2}), "clickCount", vec!["click_count"]),
        ("navigate", "", json!({"url": format!("{site}/"), "waitUntil": "load"}), "waitUntil", vec!["wait_until"]),
        ("pdf", "", json!({"paper": "A4"}), "paper", vec![]),
    ] {
        let r = act(&client, &id, action(a, selector, payload.clone())).await;
        assert_eq!(err_code(&r), pb::ErrorCode::InvalidArgument, "{a} {payload}");
        let error = r.error.unwrap();
        assert!(error.message.starts_with(&format!("payload.{key}: {a} has no option `{key}`")), "{}", error.message);
        assert_eq!(error.did_you_mean, near, "{a} {payload}");
    }
    let ignored = act(&client, &id, action("title", "", json!({"tab": 1}))).await;
    assert_eq!(err_code(&ignored), pb::ErrorCode::InvalidArgument);
    let selector = act(&client, &id, action("navigate", "#x", format!("{site}/"))).await;
    let said = selector.error.unwrap().message;
    assert_eq!(said, "selector: navigate takes no selector; see the `navigate` action in docs/actions.md");

    let mut click = action("click", "#nowhere", json!(null));
    click.timeout_ms = 400;
    let missing = act(&client, &id, click).await;
    assert_eq!(err_code(&missing), pb::ErrorCode::ElementNotFound);
    let said = missing.error.unwrap().message;
    assert!(
        said.starts_with("no element matches #nowhere within 400 ms (the action's timeout_ms); check the"),
        "{said}"
    );
    let mut wait = action("wait_for", "", json!({"text": "never on this page"}));
    wait.timeout_ms = 300;
    let waited = act(&client, &id, wait).await;
    assert_eq!(err_code(&waited), pb::ErrorCode::Timeout);
    assert_eq!(
        waited.error.unwrap().message,
        "text \"never on this page\" did not appear within 300 ms (the action's timeout_ms); raise timeout_ms if it \
         needs longer"
    );
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// A page to find things on by text, role, XPath and chains.
const FINDING: &str = r#"<form id="login"><label for="u">User name</label><input id="u">
<button id="b1" type="button" onclick="this.textContent = 'Signed in'">Sign in</button></form>
<div id="other"><button id="b2" aria-label="Close dialog">x</button><a id="l1" href="/x">Read more</a>
<button id="b3">Sign in later</button><span id="gone" style="display:none" role="button">Sign in</span></div>
<h2 id="h">Welcome back</h2>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_people_write_text_role_xpath_css_and_chains() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("load_html", "", FINDING)).await);
    let found = |selector: &'static str| {
        let (client, id) = (client.clone(), id.clone());
        async move {
            let mut a = action("attr", selector, "id");
            a.timeout_ms = 2_000;
            ok(&act(&client, &id, a).await)
        }
    };
    for (selector, want) in [
        ("text=sign IN", "b1"),
        ("text=\"Sign in later\"", "b3"),
        ("role=button[name=\"close\"]", "b2"),
        ("role=textbox[name=\"User name\"]", "u"),
        ("role=link", "l1"),
        ("role=heading[name=\"Welcome back\" s]", "h"),
        ("xpath=//h2", "h"),
        ("//button[@id='b2']", "b2"),
        ("css=#u", "u"),
        ("#other >> text=Sign in", "b3"),
        ("#other >> role=button[name=\"sign in\"]", "b3"),
    ] {
        assert_eq!(found(selector).await, json!(want), "{selector}");
    }
    // Found elements are acted on: a click by role and exact name, typing by the label.
    ok(&act(&client, &id, action("click", "role=button[name=\"Sign in\" s]", json!(null))).await);
    ok(&act(&client, &id, action("type", "role=textbox[name=\"user name\"]", "ada")).await);
    let after = ok(&act(&client, &id, action("evaluate", "", "[b1.textContent, u.value]")).await);
    assert_eq!(after, json!(["Signed in", "ada"]));
    // No match is ELEMENT_NOT_FOUND at the deadline (a hidden element has no role here).
    for selector in ["role=heading[name=\"welcome back\" s]", "#login >> text=Read more"] {
        let mut a = action("click", selector, json!(null));
        a.timeout_ms = 500;
        assert_eq!(err_code(&act(&client, &id, a).await), pb::ErrorCode::ElementNotFound, "{selector}");
    }
    // A selector nothing can read is named, with the syntaxes that are read.
    for (selector, why) in [("h1[", ""), ("role=button[", " (write role=NAME or role=NAME[name=\"TEXT\"])")] {
        let r = act(&client, &id, action("click", selector, json!(null))).await;
        assert_eq!(err_code(&r), pb::ErrorCode::InvalidArgument, "{selector}: {r:?}");
        let said = r.error.as_ref().unwrap().message.clone();
        let named = format!("selector: {selector:?} is not a valid selector{why}; selectors are CSS");
        assert!(said.starts_with(&named), "{selector}: {said}");
    }
    // The mark the lookup sets is gone after it.
    let marks =
        ok(&act(&client, &id, action("evaluate", "", "document.querySelectorAll('[data-browserpool-pick]').length"))
            .await);
    assert_eq!(marks, json!(0));
    client.release(&id).await.unwrap();
    server.stop().await;
}
