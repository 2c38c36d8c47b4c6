//! Three real server processes on one database behind a TCP round-robin proxy, as behind a
//! Kubernetes Service: every new connection goes to the next replica, and every call works
//! whichever replica holds the session it names.

use std::time::{Duration, Instant};

use browserpool_client::{action, pb, Client};
use futures::StreamExt;
use serde_json::json;

use crate::helpers::{eventually, fixture_site, ok, status_code, BinaryServer, Db};

/// A TCP proxy on 127.0.0.1:0 sending each new connection to the next of `targets`.
async fn round_robin(targets: Vec<String>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        for next in 0.. {
            let Ok((mut inbound, _)) = listener.accept().await else { return };
            let target = targets[next % targets.len()].clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    addr
}

/// A client of tenant `team` on a new connection to `addr`.
async fn client(addr: &str, token: &str) -> Client {
    Client::connect(format!("http://{addr}"), token).await.unwrap()
}

/// Replica A holding one session, replica B beside it on the same database, a client of each
/// (the admin's), and the session's id.
async fn a_session_on_a() -> (BinaryServer, BinaryServer, Client, Client, String) {
    let a = BinaryServer::spawn().await;
    let b = BinaryServer::replica_of(&a);
    let (on_a, on_b) = (a.client().await, b.client().await);
    let id = on_a.acquire(30_000).await.unwrap().session_id;
    (a, b, on_a, on_b, id)
}

async fn state_of(admin: &Client, id: &str) -> i32 {
    admin.get(id).await.unwrap().state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_behind_a_round_robin_proxy_serve_any_session() {
    let site = fixture_site().await;
    let mut a = BinaryServer::spawn().await;
    let mut b = BinaryServer::replica_of(&a);
    let mut c = BinaryServer::replica_of(&a);
    let grpc_lb = round_robin(vec![a.grpc.clone(), b.grpc.clone(), c.grpc.clone()]).await;
    let http_lb = round_robin(vec![a.http.clone(), b.http.clone(), c.http.clone()]).await;
    let (admin_a, admin_b, admin_c) = (a.client().await, b.client().await, c.client().await);
    let team = pb::Tenant {
        id: "team".into(),
        max_slots: 6,
        max_queue: 4,
        allow_private_networks: true,
        ..Default::default()
    };
    admin_a.admin().put_tenant(pb::PutTenantRequest { tenant: Some(team) }).await.unwrap();
    let scopes = ["sessions:read", "sessions:write", "context:export", "context:import"];
    let issue = pb::IssueTokenRequest {
        tenant: "team".into(),
        subject: "ci".into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        ttl_s: 600,
    };
    let token = admin_a.admin().issue_token(issue).await.unwrap().into_inner().token;
    // Every replica takes the new tenant's token once it refreshed its tenant epochs.
    let direct = [client(&a.grpc, &token).await, client(&b.grpc, &token).await, client(&c.grpc, &token).await];
    for replica in &direct {
        eventually("every replica to take the new tenant's token", Duration::from_secs(3), || async {
            replica.sessions().list(pb::ListSessionsRequest::default()).await.ok()
        })
        .await;
    }

    // One session held by each replica.
    let mut held = Vec::new();
    for replica in &direct {
        held.push(replica.acquire(30_000).await.unwrap());
    }
    let owners: std::collections::BTreeSet<_> = held.iter().map(|s| s.replica.clone()).collect();
    assert_eq!(owners.len(), 3, "each replica holds one: {owners:?}");

    // Three connections through the proxy land on A, B and C in turn: each session is called
    // through its owner once and through each of the two others once.
    for round in 0..3 {
        let lb = client(&grpc_lb, &token).await;
        for (i, s) in held.iter().enumerate() {
            let id = &s.session_id;
            let got = lb.get(id).await.unwrap();
            assert_eq!((got.state, got.replica.as_str()), (pb::SessionState::Ready as i32, s.replica.as_str()));
            assert!(got.cdp_url.contains("?ticket="), "Get through any replica gives the cdp_url: {got:?}");
            let renewed =
                lb.sessions().renew(pb::RenewRequest { session_id: id.clone(), idle_timeout_ms: 120_000 }).await;
            assert_eq!(renewed.unwrap().into_inner().session_id, *id);
            let page = format!("{site}/about?round={round}&session={i}");
            ok(&lb.act(id, action("navigate", "", page.as_str())).await.unwrap());
            assert_eq!(ok(&lb.act(id, action("title", "", json!(null))).await.unwrap()), json!("About"));
            let batch = pb::BatchRequest {
                session_id: id.clone(),
                actions: vec![action("evaluate", "", "6 * 7"), action("extract", "p", json!(null))],
                ..Default::default()
            };
            let results = lb.sessions().batch(batch).await.unwrap().into_inner().results;
            assert_eq!(results.iter().map(ok).collect::<Vec<_>>(), vec![json!(42), json!("about page")]);
            let origin = site.clone();
            let export = pb::ExportContextRequest { session_id: id.clone(), origin, ..Default::default() };
            let envelope = lb.sessions().export_context(export).await.unwrap().into_inner();
            let import =
                pb::ImportContextRequest { session_id: id.clone(), envelope: Some(envelope), strict_origin: false };
            assert!(lb.sessions().import_context(import).await.unwrap().into_inner().ok, "round {round} session {i}");
            // Files: the upload (a client stream) and the download (a server stream) too.
            let name = format!("round-{round}.txt");
            let put = lb.put_file(id, &name, name.as_bytes()).await.unwrap();
            assert_eq!(put.size, name.len() as u64);
            assert_eq!(lb.get_file(id, &name).await.unwrap().1, name.as_bytes());
            let files = lb.list_files(id).await.unwrap();
            assert_eq!(files.len(), round + 1, "round {round} session {i}: {files:?}");
        }
        // List is answered from the database, every replica's sessions in it.
        let listed = lb.sessions().list(pb::ListSessionsRequest::default()).await.unwrap().into_inner().sessions;
        let live: Vec<_> = listed.iter().filter(|s| s.state == pb::SessionState::Ready as i32).collect();
        assert_eq!(live.len(), 3, "{listed:?}");
    }
    // A file over HTTP through a replica that does not hold the session: relayed to its owner.
    let http = [a.http.clone(), b.http.clone(), c.http.clone()];
    for (i, s) in held.iter().enumerate() {
        let path = format!("/sessions/{}/files/round-2.txt", s.session_id);
        let (status, head, body) = crate::files::http_fetch(&http[(i + 1) % 3], &path, Some(&token)).await;
        assert_eq!((status.as_str(), body.as_slice()), ("HTTP/1.1 200 OK", b"round-2.txt".as_slice()), "{head}");
    }

    // Streams: Events and Drive through each replica, for a session held by another.
    for (i, s) in held.iter().enumerate() {
        let through = &direct[(i + 1) % 3];
        let mut events = through
            .sessions()
            .events(pb::EventsRequest { session_id: s.session_id.clone() })
            .await
            .unwrap()
            .into_inner();
        let page = format!("{site}/second");
        ok(&direct[i].act(&s.session_id, action("navigate", "", page.as_str())).await.unwrap());
        let navigated = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(event) = events.next().await {
                if let Some(pb::event::Kind::Navigated(n)) = event.unwrap().kind {
                    if n.url.ends_with("/second") {
                        return true;
                    }
                }
            }
            false
        });
        assert!(navigated.await.unwrap(), "Events through a non-owner saw the navigation");

        // Drive as tonic invites: await the call, then send. The non-owner answers the headers
        // before the first message, which it needs to find the owner.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut stub = through.sessions();
        let call = stub.drive(tokio_stream::wrappers::ReceiverStream::new(rx));
        let mut drive = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("Drive answers its headers before the first message")
            .unwrap()
            .into_inner();
        tx.send(pb::DriveRequest { session_id: s.session_id.clone(), action: Some(action("evaluate", "", "6 * 7")) })
            .await
            .unwrap();
        let first = drive.next().await.unwrap().unwrap();
        assert!(
            matches!(first.kind, Some(pb::drive_event::Kind::Attached(ref a)) if a.session_id == s.session_id),
            "{first:?}"
        );
        let result = loop {
            match drive.next().await.unwrap().unwrap().kind {
                Some(pb::drive_event::Kind::Result(r)) => break r,
                _ => continue,
            }
        };
        assert_eq!(ok(&result), json!(42));
        drop(tx);
    }

    // Another tenant's token naming these sessions gets NOT_FOUND from every replica, as for an
    // unknown id: nothing is forwarded for it.
    let rival = pb::Tenant { id: "rival".into(), max_slots: 1, max_queue: 1, ..Default::default() };
    admin_a.admin().put_tenant(pb::PutTenantRequest { tenant: Some(rival) }).await.unwrap();
    let issue = pb::IssueTokenRequest {
        tenant: "rival".into(),
        subject: "intruder".into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        ttl_s: 600,
    };
    let rival_token = admin_a.admin().issue_token(issue).await.unwrap().into_inner().token;
    for replica in [&a, &b, &c] {
        let intruder = client(&replica.grpc, &rival_token).await;
        eventually("every replica to take the rival tenant's token", Duration::from_secs(3), || async {
            intruder.sessions().list(pb::ListSessionsRequest::default()).await.ok()
        })
        .await;
        for s in &held {
            assert_eq!(status_code(intruder.get(&s.session_id).await.unwrap_err()), tonic::Code::NotFound);
            let act = intruder.act(&s.session_id, action("title", "", json!(null))).await.unwrap_err();
            assert_eq!(status_code(act), tonic::Code::NotFound);
        }
    }

    // CDP: the websocket through the proxy reaches the session's browser from any replica.
    for s in &held {
        let path = s.cdp_url.split_once("/cdp/").map(|(_, rest)| rest.to_string()).unwrap();
        for _ in 0..3 {
            let mut ws = crate::cdp::connect(&format!("ws://{http_lb}/cdp/{path}")).await;
            let version = crate::cdp::answer_to(&mut ws, json!({"id": 1, "method": "Browser.getVersion"})).await;
            assert!(version["result"]["product"].as_str().unwrap().contains("Chrom"), "{version}");
            let title = crate::cdp::answer_to(&mut ws, json!({"id": 2, "method": "Target.getTargets"})).await;
            assert!(title.to_string().contains("/second"), "the session's own page: {title}");
        }
    }
    // A wrong ticket is refused by the owner, through any replica, as it is directly.
    let foreign = format!("ws://{http_lb}/cdp/{}?ticket=nope", held[1].session_id);
    for _ in 0..3 {
        // A ticket that is not the session's is answered like an unknown session (cdp_open).
        match async_tungstenite::tokio::connect_async(foreign.as_str()).await {
            Err(async_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 404),
            other => panic!("a wrong ticket: {:?}", other.map(|_| ())),
        }
    }

    // The whole service from any replica: PoolStatus asks every replica; ListSessions names them.
    let lb_admin = Client::connect(format!("http://{grpc_lb}"), &a.token).await.unwrap();
    let status = lb_admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let answered: std::collections::BTreeSet<_> =
        status.replicas.iter().filter(|r| r.error.is_empty()).map(|r| r.replica.clone()).collect();
    assert_eq!(answered, owners, "{status:?}");
    assert!(status.leased >= 3 && status.capacity == 6, "{status:?}");
    for s in &held {
        let worker = status.workers.iter().find(|w| w.session_id == s.session_id).expect("its worker is listed");
        assert_eq!(worker.replica, s.replica);
    }
    let team_usage = status.tenants.iter().find(|t| t.tenant == "team").unwrap();
    assert_eq!(team_usage.active, 3, "{team_usage:?}");
    let listed = admin_b
        .admin()
        .list_sessions(pb::AdminListSessionsRequest { tenant: "team".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    for s in &held {
        assert!(listed.iter().any(|l| l.session_id == s.session_id && l.replica == s.replica), "{listed:?}");
    }

    // Drain every replica from one: Acquire is refused everywhere; then resume.
    let drained = admin_c
        .admin()
        .drain(pb::DrainRequest { drain: true, all_replicas: true, replica: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert!(drained.draining && drained.replicas.len() == 3, "{drained:?}");
    for replica in &direct {
        assert_eq!(status_code(replica.acquire(1_000).await.unwrap_err()), tonic::Code::Unavailable);
    }
    let named = held[0].replica.clone();
    let resumed = admin_c
        .admin()
        .drain(pb::DrainRequest { drain: false, all_replicas: false, replica: named.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((resumed.draining, resumed.replicas[0].replica.as_str()), (false, named.as_str()));
    let extra = direct[0].acquire(10_000).await.expect("the resumed replica takes sessions again");
    assert_eq!(status_code(direct[1].acquire(1_000).await.unwrap_err()), tonic::Code::Unavailable);
    admin_a.admin().drain(pb::DrainRequest { drain: false, all_replicas: true, replica: String::new() }).await.unwrap();
    let unknown = pb::DrainRequest { drain: true, all_replicas: false, replica: "r-nope".into() };
    assert_eq!(admin_a.admin().drain(unknown).await.unwrap_err().code(), tonic::Code::NotFound);

    // KillSession and Release through a replica that does not hold the session.
    let killed = admin_b
        .admin()
        .kill_session(pb::KillSessionRequest { session_id: held[0].session_id.clone(), reason: "test".into() })
        .await
        .unwrap()
        .into_inner();
    assert!(killed.killed);
    assert_eq!(state_of(&admin_c, &held[0].session_id).await, pb::SessionState::Killed as i32);
    let released = direct[2].release(&held[1].session_id).await.unwrap();
    assert!(released.released);
    assert_eq!(state_of(&admin_a, &held[1].session_id).await, pb::SessionState::Closed as i32);
    // Ended, their files are kept where they were held, and read through any replica.
    for (s, through) in [(&held[0], &direct[2]), (&held[1], &direct[0])] {
        let kept = through.list_files(&s.session_id).await.unwrap();
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert!(kept.iter().all(|f| f.expires_at.is_some()), "{kept:?}");
        assert_eq!(through.get_file(&s.session_id, "round-1.txt").await.unwrap().1, b"round-1.txt");
        let path = format!("/sessions/{}/files/round-0.txt", s.session_id);
        let (status, _, body) = crate::files::http_fetch(&http[2], &path, Some(&token)).await;
        assert_eq!((status.as_str(), body.as_slice()), ("HTTP/1.1 200 OK", b"round-0.txt".as_slice()));
    }

    // The owner is registered but cannot be reached: UNAVAILABLE naming it, at once.
    let db = Db::connect(&a.database_url).await;
    let owner_of_extra = extra.replica.clone();
    let moved = format!("UPDATE replicas SET grpc_addr = '127.0.0.1:1' WHERE id = '{owner_of_extra}'");
    db.exec(&moved, &moved).await.unwrap();
    let started = Instant::now();
    let refused = direct[1].act(&extra.session_id, action("title", "", json!(null))).await.unwrap_err().to_string();
    assert!(refused.contains("Unavailable") || refused.contains("unavailable"), "{refused}");
    assert!(refused.contains(&owner_of_extra) && refused.contains("cannot be reached"), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let back = format!("UPDATE replicas SET grpc_addr = '{}' WHERE id = '{owner_of_extra}'", a.grpc);
    db.exec(&back, &back).await.unwrap();
    db.close().await;
    ok(&direct[1].act(&extra.session_id, action("title", "", json!(null))).await.unwrap());

    // Deleting the tenant with force on B ends its sessions on every replica.
    let deleted = admin_b.admin().delete_tenant(pb::DeleteTenantRequest { id: "team".into(), force: true }).await;
    assert!(deleted.unwrap().into_inner().deleted);
    for id in [&held[2].session_id, &extra.session_id] {
        assert_eq!(state_of(&admin_b, id).await, pb::SessionState::Killed as i32, "{id}");
    }

    // C dies without a word: its sessions are CRASHED within the staleness window, the others
    // go on.
    let on_c = admin_c.acquire(30_000).await.unwrap();
    let on_a = admin_a.acquire(30_000).await.unwrap();
    c.kill_hard();
    let started = Instant::now();
    eventually("C's session to be marked CRASHED", Duration::from_secs(20), || async {
        (state_of(&admin_a, &on_c.session_id).await == pb::SessionState::Crashed as i32).then_some(())
    })
    .await;
    eprintln!("forwarding: a SIGKILLed replica's session CRASHED after {:?}", started.elapsed());
    // Through B, A's session still works.
    ok(&admin_b.act(&on_a.session_id, action("evaluate", "", "1 + 1")).await.unwrap());
    admin_b.release(&on_a.session_id).await.unwrap();
    let (sa, _) = a.terminate();
    let (sb, _) = b.terminate();
    assert_eq!((sa.code(), sb.code()), (Some(0), Some(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_froze_gives_unavailable_never_a_hang() {
    let (mut a, _b, _on_a, on_b, id) = a_session_on_a().await;
    ok(&on_b.act(&id, action("evaluate", "", "1 + 1")).await.unwrap());
    // A stops answering (its sockets stay open): B's call through the open connection fails
    // once the connection's keepalive goes unanswered.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(a.pid() as i32, libc::SIGSTOP) };
    crate::helpers::until_stopped(a.pid()).await;
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(30), on_b.act(&id, action("evaluate", "", "2 + 2"))).await;
    let waited = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(a.pid() as i32, libc::SIGCONT) };
    let refused = answer.expect("no hang").unwrap_err().to_string();
    eprintln!("forwarding: a frozen owner answered UNAVAILABLE after {waited:?}");
    assert!(refused.contains("cannot be reached"), "{refused}");
    assert!(waited < Duration::from_secs(15), "{waited:?}");
    let (status, _) = a.terminate();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_scaled_down_keeps_serving_its_session_through_the_others_until_released() {
    let a = BinaryServer::spawn().await;
    let mut b = BinaryServer::replica_of_with(&a, &["--drain-timeout", "60s", "--shutdown-grace", "2s"]);
    let (on_a, on_b) = (a.client().await, b.client().await);
    let id = on_b.acquire(30_000).await.unwrap().session_id;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(b.pid() as i32, libc::SIGTERM) };
    // B drains: no new session there; clients retry on A and get one.
    eventually("B to start draining", Duration::from_secs(5), || async {
        match on_b.acquire(1_000).await.map_err(status_code) {
            Err(tonic::Code::Unavailable) => Some(()),
            Ok(extra) => on_b.release(&extra.session_id).await.map(|_| None).unwrap(),
            Err(code) => panic!("{code:?}"),
        }
    })
    .await;
    let elsewhere = on_a.acquire(10_000).await.unwrap();
    on_a.release(&elsewhere.session_id).await.unwrap();
    // B's live session keeps working, reached through A, while B drains. Nothing announces
    // that the drain will not end it, so it is watched over a window: acting every 100 ms, it
    // must still be READY when the window closes.
    let ended = tokio::time::timeout(Duration::from_millis(600), async {
        loop {
            ok(&on_a.act(&id, action("evaluate", "", "6 * 7")).await.unwrap());
            let state = state_of(&on_a, &id).await;
            if state != pb::SessionState::Ready as i32 {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(ended.is_err(), "B's drain ended its session: state {ended:?}");
    // Released through A: B finishes its stop and exits 0.
    on_a.release(&id).await.unwrap();
    let released = Instant::now();
    let (status, _) = tokio::task::spawn_blocking(move || b.terminate_wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(released.elapsed() < Duration::from_secs(10), "{:?}", released.elapsed());
    assert_eq!(state_of(&on_a, &id).await, pb::SessionState::Closed as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_through_a_replica_whose_owner_dies_ends_unavailable_never_internal() {
    let (mut a, b, _on_a, on_b, id) = a_session_on_a().await;
    let mut events = on_b.sessions().events(pb::EventsRequest { session_id: id.clone() }).await.unwrap().into_inner();
    // The stream is relayed: an event of the session comes through B.
    let logged = on_b.act(&id, action("evaluate", "", "console.log('through b'); 1")).await.unwrap();
    ok(&logged);
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.message().await.unwrap() {
            if matches!(event.kind, Some(pb::event::Kind::Console(ref c)) if c.text == "through b") {
                return;
            }
        }
        panic!("the stream ended early");
    });
    seen.await.expect("the console event through B");

    a.kill_hard();
    let killed = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match events.message().await {
                Ok(Some(event)) => {
                    if let Some(pb::event::Kind::SessionEnded(e)) = event.kind {
                        return Ok(e);
                    }
                }
                Ok(None) => panic!("the stream ended without SessionEnded or a status"),
                Err(status) => return Err(status),
            }
        }
    })
    .await
    .expect("the stream ends after its owner died");
    eprintln!("Events through B, owner A killed -> {end:?} after {:?}", killed.elapsed());
    match end {
        Ok(ended) => assert_eq!(ended.state, pb::SessionState::Crashed as i32, "{ended:?}"),
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            assert!(status.message().contains(&id) && status.message().contains("retry"), "{status:?}");
        }
    }
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_view_link_works_through_any_replica_and_dies_when_revoked_through_another() {
    use async_tungstenite::tungstenite::Message;
    let (mut a, b, on_a, on_b, id) = a_session_on_a().await;
    ok(&on_a.act(&id, action("load_html", "", "<h1>seen through another replica</h1>")).await.unwrap());
    // Asked through B, for A's session; opened through B too (as a load balancer may).
    let link = on_b.live_view(&id, false, None).await.unwrap();
    let path = link.url.split_once("/live/").map(|(_, rest)| format!("/live/{rest}")).unwrap();
    let (head, _, body) = crate::files::http_fetch(&b.http, &path, None).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("<html"), "the live view page through B");
    let ws = format!("ws://{}{path}/ws", b.http);
    let (mut viewer, _) = async_tungstenite::tokio::connect_async(ws).await.unwrap();
    let mut hello = false;
    let frame = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(Ok(message)) = viewer.next().await {
            match message {
                Message::Text(t) if t.contains("\"hello\"") => hello = true,
                Message::Binary(jpeg) => return jpeg,
                _ => {}
            }
        }
        panic!("the viewer's socket through B closed before a frame");
    })
    .await
    .expect("a frame through B within 15 s");
    assert!(hello && frame.starts_with(&[0xFF, 0xD8]), "a hello, then a JPEG of A's session");

    // Revoked through B (A holds the link): the viewer is closed, and the page is gone.
    assert_eq!(on_b.revoke_live_view(&id, None).await.unwrap(), 1);
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(message)) = viewer.next().await {
            if let Message::Close(frame) = message {
                return frame.map(|f| u16::from(f.code));
            }
        }
        None
    })
    .await
    .expect("the viewer is closed within 5 s of the revocation");
    assert_eq!(closed, Some(4003), "closed as revoked");
    let (head, _, _) = crate::files::http_fetch(&b.http, &path, None).await;
    assert!(head.starts_with("HTTP/1.1 404"), "a revoked link's page through B: {head}");
    on_a.release(&id).await.unwrap();
    let (status, _) = a.terminate();
    assert_eq!(status.code(), Some(0));
}
