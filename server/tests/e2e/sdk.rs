//! The Rust SDK as a user meets it: a `Session` that releases on drop, typed actions with
//! typed results and typed failures, `drive()`, context export/import, and `Acquire` retried
//! while the tenant's queue is full.

use std::time::Duration;

use browserpool_client::{action, pb, Error, Retry, Session, WaitUntil};
use serde_json::json;

use crate::helpers::{eventually, fixture_site, TestServer};

fn state(s: &pb::Session) -> pb::SessionState {
    pb::SessionState::try_from(s.state).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_actions_give_typed_results_and_typed_failures() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let session = client.session().wait(Duration::from_secs(30)).label("job", "sdk-test").await.unwrap();
    assert_eq!(state(session.info()), pb::SessionState::Ready);
    assert_eq!(session.info().labels.get("job").map(String::as_str), Some("sdk-test"));
    assert!(session.cdp_url().contains(session.id()), "{}", session.cdp_url());

    let page = session.navigate(&format!("{site}/")).wait_until(WaitUntil::Load).await.unwrap();
    assert_eq!((page.url.as_str(), page.status), (&*format!("{site}/"), Some(200)));
    assert_eq!(session.title().await.unwrap(), "Greeter");
    session.type_text("#name", "Ada").await.unwrap();
    session.click("#go").await.unwrap();
    assert_eq!(session.extract("#greeting").await.unwrap().as_deref(), Some("Hello, Ada"));
    assert_eq!(session.evaluate("({a: 6 * 7})").await.unwrap(), json!({"a": 42}));
    let png = session.screenshot().full_page().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let jpeg = session.screenshot().jpeg(40).await.unwrap();
    assert_eq!(&jpeg[..2], b"\xff\xd8");
    let pdf = session.pdf().landscape().await.unwrap();
    assert!(pdf.starts_with(b"%PDF"));
    let tabs = session.list_tabs().await.unwrap();
    assert_eq!((tabs.len(), tabs[0].active, tabs[0].title.as_str()), (1, true, "Greeter"));
    let missing = session.navigate(&format!("{site}/missing")).await.unwrap();
    assert_eq!(missing.status, Some(404));

    // A failed action is Error::Action with its code and message.
    let err = session.click("#nowhere").timeout(Duration::from_millis(300)).await.unwrap_err();
    let Error::Action(failure) = err else { panic!("expected an action error, got {err:?}") };
    assert_eq!((failure.action.as_str(), failure.code), ("click", pb::ErrorCode::ElementNotFound));
    assert_eq!(
        failure.to_string(),
        "click failed: ELEMENT_NOT_FOUND: no element matches #nowhere within 300 ms (the action's timeout_ms); check the \
         selector against the page (a screenshot or extract shows it), or raise timeout_ms if the element comes later"
    );
    let strict = session.navigate(&format!("{site}/missing")).fail_on_status().await.unwrap_err();
    assert!(matches!(&strict, Error::Action(e) if e.code == pb::ErrorCode::NavigationFailed), "{strict}");
    // ... with did_you_mean for an option spelled another way.
    let err = session.act(action("screenshot", "", json!({"fullPage": true}))).await.unwrap_err();
    let Error::Action(failure) = err else { panic!("{err:?}") };
    assert_eq!(
        (failure.code, failure.did_you_mean.clone()),
        (pb::ErrorCode::InvalidArgument, vec!["full_page".into()])
    );
    // ... and the dialog blocking the page.
    session.navigate(&format!("{site}/dialogs")).await.unwrap();
    let err = session.click("#confirm").await.unwrap_err();
    let Error::Action(failure) = err else { panic!("{err:?}") };
    assert_eq!(failure.code, pb::ErrorCode::DialogOpen);
    let dialog = failure.dialog.expect("the dialog comes with DIALOG_OPEN");
    assert!(dialog.grammar.contains(&"click dialog::accept".to_string()), "{dialog:?}");
    session.click("dialog::accept").await.unwrap();

    let released = session.release().await.unwrap();
    assert!(released.released);
    server.stop().await;
}

/// The bug this handle exists for: an early `?` used to leave the browser to its idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_session_is_released() {
    let server = TestServer::start().await;
    let client = server.admin().await;

    async fn job(client: &browserpool_client::Client) -> Result<String, Error> {
        let session = client.session().await?;
        let id = session.id().to_string();
        session.click("#not-on-a-blank-page").timeout(Duration::from_millis(200)).await?;
        Ok(id)
    }
    assert!(matches!(job(&client).await, Err(Error::Action(_))));
    let listed = client.sessions().list(pb::ListSessionsRequest::default()).await.unwrap().into_inner();
    let id = listed.sessions.first().expect("the job's session is listed").session_id.clone();
    eventually("the dropped session to be released", Duration::from_secs(10), || async {
        (state(&client.get(&id).await.unwrap()) == pb::SessionState::Closed).then_some(())
    })
    .await;

    // renew, refresh, and the raw adopt path.
    let raw = client.acquire(30_000).await.unwrap();
    let mut adopted = Session::adopt(client.clone(), raw);
    let before = adopted.renew(Duration::from_secs(10)).await.unwrap().idle_deadline.unwrap();
    let renewed = adopted.renew(Duration::from_secs(100)).await.unwrap().idle_deadline.unwrap();
    assert!(renewed.seconds > before.seconds, "{before:?} -> {renewed:?}");
    assert_eq!(state(adopted.refresh().await.unwrap()), pb::SessionState::Ready);
    let id = adopted.id().to_string();
    drop(adopted);
    eventually("the adopted session to be released", Duration::from_secs(10), || async {
        (state(&client.get(&id).await.unwrap()) == pb::SessionState::Closed).then_some(())
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_and_context_envelopes_through_the_handle() {
    let server = TestServer::start().await;
    let site = fixture_site().await;
    let client = server.admin().await;
    let session = client.session().await.unwrap();

    let (tx, mut events) = session.drive().await.unwrap();
    tx.send(action("navigate", "", format!("{site}/set-cookies"))).await.unwrap();
    tx.send(session.title().id("t").into_action()).await.unwrap();
    let mut results = Vec::new();
    while results.len() < 2 {
        match events.message().await.unwrap().expect("the stream goes on").kind {
            Some(pb::drive_event::Kind::Result(r)) => results.push(r),
            _ => continue,
        }
    }
    assert!(results.iter().all(|r| r.ok), "{results:?}");
    assert_eq!(results[1].id, "t");
    drop(tx);

    let envelope = session.export_context("").await.unwrap();
    assert!(!envelope.cookies.is_empty(), "the fixture sets cookies: {envelope:?}");
    let fresh = client.session().context(envelope.clone()).await.unwrap();
    let cookies = fresh.cookies().await.unwrap();
    assert_eq!(cookies.as_array().map(Vec::len), Some(envelope.cookies.len()), "{cookies}");
    let mut tampered = envelope;
    tampered.cookies[0].value = "forged".into();
    let err = fresh.import_context(tampered).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    session.release().await.unwrap();
    fresh.release().await.unwrap();
    server.stop().await;
}

/// A full queue is retried with backoff until a slot frees; `Retry::never()` fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_is_retried_while_the_queue_is_full() {
    let server = TestServer::start_with(|a| a.max_workers = 2).await;
    let admin = server.admin().await;
    let burst = pb::Tenant {
        id: "burst".into(),
        max_slots: 1,
        max_queue: 0,
        max_session_ttl_ms: 600_000,
        idle_timeout_ms: 60_000,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(burst) }).await.unwrap();
    let client = server.client(&server.token("burst", "ci", &["sessions:read", "sessions:write"]).await).await;
    let first = client.session().await.unwrap();

    let refused = client.session().wait(Duration::from_secs(5)).retry(Retry::never()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused}");

    let patient = Retry {
        overall: Duration::from_secs(30),
        first_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(300),
    };
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client.session().wait(Duration::from_secs(5)).retry(patient).await.map(|s| s.id().to_string())
        })
    };
    // With max_queue 0 every attempt before the release is refused at once (and audited):
    // once two of the waiter's attempts were refused, only a retry can get it through.
    eventually("the waiter to be refused twice", Duration::from_secs(20), || async {
        (refused_acquires(&admin).await >= 3).then_some(())
    })
    .await;
    assert!(!waiter.is_finished(), "the retrying acquire must still be waiting");
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(30), waiter).await.unwrap().unwrap().unwrap();
    assert!(!second.is_empty());
    server.stop().await;
}

/// `Acquire` calls of tenant `burst` refused with RESOURCE_EXHAUSTED, from the audit trail.
async fn refused_acquires(admin: &browserpool_client::Client) -> usize {
    let query = pb::QueryAuditRequest { tenant: "burst".into(), limit: 10_000, ..Default::default() };
    let mut stream = admin.admin().query_audit(query).await.unwrap().into_inner();
    let mut n = 0;
    while let Some(record) = stream.message().await.unwrap() {
        if record.rpc.ends_with("/Acquire") && record.code.to_ascii_uppercase().contains("RESOURCE") {
            n += 1;
        }
    }
    n
}
