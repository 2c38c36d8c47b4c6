//! A session's files over real gRPC: uploads, a page's downloads, names judged, and what a
//! hostile page may plant in the directory never opened.

use browserpool_client::{action, pb, Client};
use sha2::Digest;
use std::time::Duration;

use crate::helpers::{act, eventually, ok, TestServer};

fn sha256(data: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(data))
}

fn code(e: browserpool_client::Error) -> (tonic::Code, String) {
    match e {
        browserpool_client::Error::Status(s) => (s.code(), s.message().to_string()),
        other => panic!("not a status: {other}"),
    }
}

/// The session's files directory, the only one while the server holds one session.
fn files_dir(server: &TestServer) -> std::path::PathBuf {
    let dirs: Vec<_> = std::fs::read_dir(server.profiles_dir().join("files")).unwrap().flatten().collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].path()
}

/// A file `name` of the session once a page's download of it is complete.
async fn downloaded(client: &Client, id: &str, name: &str) -> pb::Artifact {
    eventually(&format!("{name} to be downloaded"), Duration::from_secs(15), || async {
        // Chromium reserves the name with an empty file, then moves the download over it.
        client.list_files(id).await.unwrap().into_iter().find(|f| f.name == name && f.size > 0)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_and_a_page_s_downloads_round_trip_with_their_hashes() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    assert!(client.list_files(&id).await.unwrap().is_empty());

    // 3 MiB and a bit: several chunks each way.
    let content: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
    let put = client.put_file(&id, "data.bin", &content).await.unwrap();
    assert_eq!((put.size, put.sha256.as_str()), (content.len() as u64, sha256(&content).as_str()));
    assert_eq!(put.kind, pb::ArtifactKind::Upload as i32);
    let (got, bytes) = client.get_file(&id, "data.bin").await.unwrap();
    assert_eq!(got.sha256, put.sha256);
    assert!(bytes == content, "the content came back changed ({} bytes)", bytes.len());
    let (empty, nothing) = {
        client.put_file(&id, "empty.txt", b"").await.unwrap();
        client.get_file(&id, "empty.txt").await.unwrap()
    };
    assert_eq!((empty.size, nothing.len()), (0, 0));

    // A page's download lands among them.
    let page = r#"<a id="d" href="data:text/csv,a%2Cb%0A1%2C2" download="report.csv">get</a>"#;
    ok(&act(&client, &id, action("load_html", "", page)).await);
    ok(&act(&client, &id, action("click", "#d", serde_json::Value::Null)).await);
    let report = downloaded(&client, &id, "report.csv").await;
    assert_eq!((report.kind, report.mime_type.as_str()), (pb::ArtifactKind::Download as i32, "text/csv"));
    assert_eq!(client.get_file(&id, "report.csv").await.unwrap().1, b"a,b\n1,2");
    let names: Vec<String> = client.list_files(&id).await.unwrap().into_iter().map(|f| f.name).collect();
    assert_eq!(names, ["data.bin", "empty.txt", "report.csv"]);

    client.delete_file(&id, "data.bin").await.unwrap();
    assert_eq!(code(client.delete_file(&id, "data.bin").await.unwrap_err()).0, tonic::Code::NotFound);
    assert_eq!(code(client.get_file(&id, "data.bin").await.unwrap_err()).0, tonic::Code::NotFound);

    // Bad names, each with what is wrong.
    for (name, why) in [
        ("../escape", "path separator"),
        ("/etc/passwd", "path separator"),
        (".hidden", "starts with a dot"),
        ("a\nb", "control character"),
        ("", "is empty"),
    ] {
        let (c, message) = code(client.put_file(&id, name, b"x").await.unwrap_err());
        assert_eq!(c, tonic::Code::InvalidArgument, "{name:?}: {message}");
        assert!(message.contains(why), "{name:?}: {message}");
    }

    // Audit: names and sizes, never contents.
    let records = crate::helpers::eventually("the file records", Duration::from_secs(10), || async {
        let q = pb::QueryAuditRequest { session_id: id.clone(), limit: 1000, ..Default::default() };
        let mut stream = client.admin().query_audit(q).await.unwrap().into_inner();
        let mut got = Vec::new();
        while let Some(r) = stream.message().await.unwrap() {
            if r.target.starts_with("name=") {
                got.push(format!("{} {}", r.rpc.rsplit('/').next().unwrap(), r.target));
            }
        }
        (got.len() >= 5).then_some(got)
    })
    .await;
    let put_record = format!("PutFile name=data.bin size={} sha256={}", content.len(), sha256(&content));
    assert!(records.contains(&put_record), "{records:?}");
    assert!(records.iter().any(|r| r.starts_with("GetFile name=report.csv size=7 ")), "{records:?}");
    assert!(records.contains(&"DeleteFile name=data.bin".to_string()), "{records:?}");

    client.release(&id).await.unwrap();
    // Its files go with it (until artifacts outlive sessions).
    let (c, _) = code(client.list_files(&id).await.unwrap_err());
    assert_eq!(c, tonic::Code::FailedPrecondition);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_s_or_a_reader_s_calls_and_planted_links_reach_nothing() {
    let server = TestServer::start().await;
    let owner = server.client(&server.token("default", "ci", &["sessions:read", "sessions:write"]).await).await;
    let reader = server.client(&server.token("default", "ci", &["sessions:read"]).await).await;
    let other = pb::Tenant { id: "other-tenant".into(), max_slots: 1, max_queue: 1, ..Default::default() };
    server.admin().await.admin().put_tenant(pb::PutTenantRequest { tenant: Some(other) }).await.unwrap();
    let foreign = server.client(&server.token("other-tenant", "ci", &["sessions:read", "sessions:write"]).await).await;
    let id = owner.acquire(30_000).await.unwrap().session_id;
    owner.put_file(&id, "mine.txt", b"owner's").await.unwrap();

    for (c, what) in [
        (code(foreign.list_files(&id).await.unwrap_err()).0, "foreign list"),
        (code(foreign.get_file(&id, "mine.txt").await.unwrap_err()).0, "foreign get"),
        (code(foreign.put_file(&id, "x.txt", b"x").await.unwrap_err()).0, "foreign put"),
        (code(foreign.delete_file(&id, "mine.txt").await.unwrap_err()).0, "foreign delete"),
    ] {
        assert_eq!(c, tonic::Code::NotFound, "{what}");
    }
    // A reader may list and fetch, not change.
    assert_eq!(reader.get_file(&id, "mine.txt").await.unwrap().1, b"owner's");
    assert_eq!(code(reader.put_file(&id, "x.txt", b"x").await.unwrap_err()).0, tonic::Code::PermissionDenied);
    assert_eq!(code(reader.delete_file(&id, "mine.txt").await.unwrap_err()).0, tonic::Code::PermissionDenied);

    // What the browser's uid may put in its directory: a link to the server's signing key, a
    // hard link, a directory. Listed never, opened never.
    let dir = files_dir(&server);
    let key = std::fs::read_dir(server.data_dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("jwt-"))
        .expect("the server's signing key");
    std::os::unix::fs::symlink(&key, dir.join("key.txt")).unwrap();
    let outside = tempfile::NamedTempFile::new_in(server.data_dir.path()).unwrap();
    std::fs::write(outside.path(), "outside").unwrap();
    std::fs::hard_link(outside.path(), dir.join("hard.txt")).unwrap();
    std::fs::create_dir(dir.join("sub.txt")).unwrap();
    let names: Vec<String> = owner.list_files(&id).await.unwrap().into_iter().map(|f| f.name).collect();
    assert_eq!(names, ["mine.txt"]);
    for name in ["key.txt", "hard.txt", "sub.txt"] {
        let (c, message) = code(owner.get_file(&id, name).await.unwrap_err());
        assert_eq!(c, tonic::Code::FailedPrecondition, "{name}: {message}");
        assert!(message.contains("never opened"), "{name}: {message}");
    }
    // An upload over the link replaces the link; the key is untouched.
    let before = std::fs::read(&key).unwrap();
    owner.put_file(&id, "key.txt", b"replaced").await.unwrap();
    assert_eq!(std::fs::read(&key).unwrap(), before);
    assert_eq!(owner.get_file(&id, "key.txt").await.unwrap().1, b"replaced");

    owner.release(&id).await.unwrap();
    server.stop().await;
}
