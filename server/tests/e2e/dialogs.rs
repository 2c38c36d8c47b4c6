//! Dialogs never hang an action: they end it with DIALOG_OPEN and are answered with the
//! selector grammar.

use std::time::{Duration, Instant};

use browserpool_client::{action, pb, Client};
use serde_json::json;

use crate::helpers::{act, err_code, eventually, fixture_site, ok, TestServer};

fn dialog_of(r: &pb::ActionResult) -> pb::Dialog {
    assert_eq!(err_code(r), pb::ErrorCode::DialogOpen, "{:?}", r.error);
    r.error.as_ref().unwrap().dialog.clone().expect("DIALOG_OPEN carries the dialog")
}

fn kind(d: &pb::Dialog) -> pb::DialogKind {
    pb::DialogKind::try_from(d.kind).unwrap()
}

/// The actions below have a 20 s budget: ending well before it proves they did not wait behind
/// the dialog. How fast dialogs surface is measured by the bench, not asserted here.
const NO_HANG: Duration = Duration::from_secs(10);

/// Runs an action that should surface a dialog; returns it and how long it took.
async fn surfaces(client: &Client, id: &str, a: pb::Action) -> (pb::Dialog, Duration) {
    let started = Instant::now();
    let r = act(client, id, pb::Action { timeout_ms: 20_000, ..a }).await;
    let took = started.elapsed();
    (dialog_of(&r), took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_dismiss_then_accept_without_a_second_click() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/dialogs"))).await);

    let (dialog, took) = surfaces(&client, &id, action("click", "#confirm", json!(null))).await;
    assert!(took < NO_HANG, "dialog surfaced in {took:?}: the action waited instead of ending");
    assert_eq!(kind(&dialog), pb::DialogKind::Confirm);
    assert_eq!(dialog.message, "Proceed?");
    assert!(dialog.grammar.contains(&"click dialog::dismiss".to_string()), "{:?}", dialog.grammar);
    // Any other action while it is open answers DIALOG_OPEN with the same dialog.
    let again = dialog_of(&act(&client, &id, action("title", "", json!(null))).await);
    assert_eq!(again, dialog);

    ok(&act(&client, &id, action("click", "dialog::dismiss", json!(null))).await);
    assert_eq!(ok(&act(&client, &id, action("extract", "#out", json!(null))).await), json!("answer=false"));

    let (dialog, _) = surfaces(&client, &id, action("click", "#confirm", json!(null))).await;
    assert_eq!(kind(&dialog), pb::DialogKind::Confirm);
    let mut events = client.sessions().events(pb::EventsRequest { session_id: id.clone() }).await.unwrap().into_inner();
    ok(&act(&client, &id, action("click", "dialog::accept", json!(null))).await);
    // No new dialog opens after the accept: a queued synthetic click would re-open it. Nothing
    // announces that something will not happen, so a one-second window on the event stream is
    // the only way to observe it.
    let closed = async {
        while let Some(event) = events.message().await.unwrap() {
            if matches!(event.kind, Some(pb::event::Kind::DialogClosed(c)) if c.accepted) {
                return;
            }
        }
        panic!("the event stream ended before the dialog closed");
    };
    tokio::time::timeout(NO_HANG, closed).await.expect("the accepted dialog closes");
    let reopened = async {
        while let Some(event) = events.message().await.unwrap() {
            if let Some(pb::event::Kind::DialogOpened(d)) = event.kind {
                return d;
            }
        }
        std::future::pending().await
    };
    let reopened = tokio::time::timeout(Duration::from_secs(1), reopened).await;
    assert!(reopened.is_err(), "a dialog opened again after the accept: {reopened:?}");
    let r = act(&client, &id, action("extract", "#out", json!(null))).await;
    assert_eq!(ok(&r), json!("answer=true"));
    let count = act(&client, &id, action("evaluate", "", "window.confirms")).await;
    assert_eq!(ok(&count), json!(2), "exactly two confirm() calls for two clicks");

    // Grammar errors are precise.
    let none = act(&client, &id, action("click", "dialog::accept", json!(null))).await;
    assert_eq!(err_code(&none), pb::ErrorCode::InvalidArgument);
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_takes_text_and_alert_on_load_surfaces() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/dialogs"))).await);

    let (dialog, _) = surfaces(&client, &id, action("click", "#prompt", json!(null))).await;
    assert_eq!(kind(&dialog), pb::DialogKind::Prompt);
    assert_eq!(dialog.default_prompt, "anon");
    let wrong = act(&client, &id, action("type", "dialog::username", "x")).await;
    assert_eq!(err_code(&wrong), pb::ErrorCode::InvalidArgument, "username does not apply to a prompt");
    ok(&act(&client, &id, action("type", "dialog::prompt", "Ada")).await);
    ok(&act(&client, &id, action("click", "dialog::accept", json!(null))).await);
    assert_eq!(ok(&act(&client, &id, action("extract", "#out", json!(null))).await), json!("name=Ada"));

    let (dialog, took) = surfaces(&client, &id, action("navigate", "", format!("{site}/alert-on-load"))).await;
    assert!(took < NO_HANG, "alert surfaced in {took:?}: the action waited instead of ending");
    assert_eq!(kind(&dialog), pb::DialogKind::Alert);
    assert_eq!(dialog.message, "loaded!");
    assert!(dialog.url.contains("/alert-on-load"), "{}", dialog.url);
    ok(&act(&client, &id, action("click", "dialog::accept", json!(null))).await);
    ok(&act(&client, &id, action("wait_for", "", json!({"text": "after"}))).await);
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beforeunload_on_navigate_away() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/leave"))).await);
    // beforeunload only asks after the user touched the page.
    ok(&act(&client, &id, action("click", "#touch", json!(null))).await);

    let (dialog, _) = surfaces(&client, &id, action("navigate", "", format!("{site}/about"))).await;
    assert_eq!(kind(&dialog), pb::DialogKind::Beforeunload);
    ok(&act(&client, &id, action("click", "dialog::dismiss", json!(null))).await);
    let url = ok(&act(&client, &id, action("url", "", json!(null))).await);
    assert!(url.as_str().unwrap().ends_with("/leave"), "dismiss stays: {url}");
    // Touched again, as a user who stayed would: the next navigation asks again.
    ok(&act(&client, &id, action("click", "#touch", json!(null))).await);

    let (dialog, _) = surfaces(&client, &id, action("navigate", "", format!("{site}/about"))).await;
    assert_eq!(kind(&dialog), pb::DialogKind::Beforeunload);
    ok(&act(&client, &id, action("click", "dialog::accept", json!(null))).await);
    ok(&act(&client, &id, action("wait_for", "", json!({"url": "/about"}))).await);
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_wrong_then_right_password_and_remembered() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;

    let (dialog, took) = surfaces(&client, &id, action("navigate", "", format!("{site}/auth"))).await;
    assert!(took < NO_HANG, "auth surfaced in {took:?}: the action waited instead of ending");
    assert_eq!(kind(&dialog), pb::DialogKind::BasicAuth);
    assert!(dialog.url.ends_with("/auth"), "{}", dialog.url);
    assert!(dialog.grammar.contains(&"type dialog::password <secret>".to_string()));

    ok(&act(&client, &id, action("type", "dialog::username", "alice")).await);
    ok(&act(&client, &id, action("type", "dialog::password", "wrong")).await);
    let r =
        act(&client, &id, pb::Action { timeout_ms: 10_000, ..action("click", "dialog::accept", json!(null)) }).await;
    let again = dialog_of(&r);
    assert_eq!(kind(&again), pb::DialogKind::BasicAuth, "a wrong password is challenged again");

    ok(&act(&client, &id, action("type", "dialog::username", "alice")).await);
    ok(&act(&client, &id, action("type", "dialog::password", "secret")).await);
    ok(&act(&client, &id, pb::Action { timeout_ms: 10_000, ..action("click", "dialog::accept", json!(null)) }).await);
    assert_eq!(ok(&act(&client, &id, action("extract", "h1", json!(null))).await), json!("welcome alice"));

    // The credentials are remembered for the origin for the rest of the session.
    ok(&act(&client, &id, action("navigate", "", format!("{site}/about"))).await);
    ok(&act(&client, &id, action("navigate", "", format!("{site}/auth"))).await);
    assert_eq!(ok(&act(&client, &id, action("extract", "h1", json!(null))).await), json!("welcome alice"));

    // Dismissing a challenge shows the server's 401 page.
    let other = client.acquire(30_000).await.unwrap().session_id;
    let (dialog, _) = surfaces(&client, &other, action("navigate", "", format!("{site}/auth"))).await;
    assert_eq!(kind(&dialog), pb::DialogKind::BasicAuth);
    ok(&act(&client, &other, pb::Action { timeout_ms: 10_000, ..action("click", "dialog::dismiss", json!(null)) })
        .await);
    ok(&act(&client, &other, action("wait_for", "", json!({"text": "denied"}))).await);
    client.release(&other).await.unwrap();
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_arrive_in_order_and_end_with_session_ended() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    let mut events = client.sessions().events(pb::EventsRequest { session_id: id.clone() }).await.unwrap().into_inner();

    ok(&act(&client, &id, action("navigate", "", format!("{site}/widgets"))).await);
    ok(&act(&client, &id, action("navigate", "", format!("{site}/dialogs"))).await);
    dialog_of(&act(&client, &id, action("click", "#alert", json!(null))).await);
    ok(&act(&client, &id, action("click", "dialog::accept", json!(null))).await);
    client.release(&id).await.unwrap();

    use pb::event::Kind;
    let mut seen = Vec::new();
    while let Some(event) =
        tokio::time::timeout(Duration::from_secs(10), events.message()).await.expect("events keep flowing").unwrap()
    {
        assert_eq!(event.session_id, id);
        assert_eq!(event.dropped, 0);
        let tag = match event.kind.unwrap() {
            Kind::Navigated(n) => format!("navigated {}", n.url.rsplit('/').next().unwrap()),
            Kind::Console(c) => format!("console {}", c.text),
            Kind::DialogOpened(d) => format!("dialog opened {}", d.dialog.unwrap().message),
            Kind::DialogClosed(c) => format!("dialog closed {}", c.accepted),
            Kind::SessionEnded(e) => format!("ended {}", e.reason),
            other => format!("{other:?}"),
        };
        seen.push(tag);
    }
    let expected = [
        "navigated widgets",
        "console widgets ready 42",
        "navigated dialogs",
        "dialog opened hi there",
        "dialog closed true",
        "ended released",
    ];
    let mut at = 0;
    for tag in &seen {
        if at < expected.len() && tag == expected[at] {
            at += 1;
        }
    }
    assert_eq!(at, expected.len(), "events in order: {seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("ended released"), "session ended is last: {seen:?}");
    server.stop().await;
}

/// The click that asks may finish first (the request is asynchronous); then a later action
/// meets the dialog. Either way it surfaces with DIALOG_OPEN.
async fn permission_prompt(client: &Client, id: &str) -> pb::Dialog {
    let click = act(client, id, action("click", "#notify", json!(null))).await;
    if !click.ok {
        return dialog_of(&click);
    }
    let r = eventually("the permission prompt to surface", Duration::from_secs(5), || async {
        let r = act(client, id, action("title", "", json!(null))).await;
        (!r.ok).then_some(r)
    })
    .await;
    dialog_of(&r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_prompts_are_dialogs() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/permissions"))).await);
    let dialog = permission_prompt(&client, &id).await;
    assert_eq!(kind(&dialog), pb::DialogKind::Permission);
    assert!(dialog.message.contains("notifications"), "{}", dialog.message);
    ok(&act(&client, &id, action("click", "dialog::accept", json!(null))).await);
    ok(&act(&client, &id, action("wait_for", "", json!({"text": "perm=granted"}))).await);
    // The grant is the context's: the Permissions API reads it. (`Notification.permission` is
    // always "denied" in the headless shell, which has no notifications to show.)
    let state = "navigator.permissions.query({ name: 'notifications' }).then(s => s.state)";
    assert_eq!(ok(&act(&client, &id, action("evaluate", "", state)).await), json!("granted"));

    let other = client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&client, &other, action("navigate", "", format!("{site}/permissions"))).await);
    let dialog = permission_prompt(&client, &other).await;
    assert_eq!(kind(&dialog), pb::DialogKind::Permission);
    ok(&act(&client, &other, action("click", "dialog::dismiss", json!(null))).await);
    ok(&act(&client, &other, action("wait_for", "", json!({"text": "perm=denied"}))).await);
    client.release(&other).await.unwrap();
    client.release(&id).await.unwrap();
    server.stop().await;
}
