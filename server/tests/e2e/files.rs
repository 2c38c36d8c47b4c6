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

/// The session's files directory: the one holding `file`, which the test put there (warm
/// workers have theirs made ahead, empty).
fn files_dir(server: &TestServer, file: &str) -> std::path::PathBuf {
    let dirs: Vec<_> = std::fs::read_dir(server.profiles_dir().join("files"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|dir| dir.join(file).exists())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
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
        // Written behind the calls (later on PostgreSQL): wait for the last one, the delete.
        got.iter().any(|r| r == "DeleteFile name=data.bin").then_some(got)
    })
    .await;
    let put_record = format!("PutFile name=data.bin size={} sha256={}", content.len(), sha256(&content));
    assert!(records.contains(&put_record), "{records:?}");
    assert!(records.iter().any(|r| r.starts_with("GetFile name=report.csv size=7 ")), "{records:?}");
    assert!(records.contains(&"DeleteFile name=data.bin".to_string()), "{records:?}");

    // Ended, its files are kept (24 h by default), read-only, with when they go.
    let released = std::time::SystemTime::now();
    client.release(&id).await.unwrap();
    let kept = client.list_files(&id).await.unwrap();
    assert_eq!(kept.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["empty.txt", "report.csv"]);
    assert_eq!(kept[1].kind, pb::ArtifactKind::Download as i32);
    assert_eq!(kept[0].kind, pb::ArtifactKind::Upload as i32);
    let expires = kept[0].expires_at.expect("an ended session's file expires");
    let in_secs = expires.seconds - released.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((86_390..=86_410).contains(&in_secs), "expires in {in_secs} s");
    assert_eq!(client.get_file(&id, "report.csv").await.unwrap().1, b"a,b\n1,2");
    for refused in
        [client.put_file(&id, "late.txt", b"x").await.map(|_| ()), client.delete_file(&id, "empty.txt").await]
    {
        assert_eq!(code(refused.unwrap_err()).0, tonic::Code::FailedPrecondition);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_session_s_files_are_kept_until_their_ttl_then_swept() {
    use std::os::unix::fs::PermissionsExt;
    let server = TestServer::start_with(|a| a.artifact_ttl = Duration::from_secs(3)).await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    client.put_file(&id, "kept.txt", b"after the end").await.unwrap();
    let bare = client.acquire(30_000).await.unwrap().session_id;
    client.release(&id).await.unwrap();
    client.release(&bare).await.unwrap();

    // A read waits for the teardown, which keeps the files once the browser is gone.
    assert_eq!(client.get_file(&id, "kept.txt").await.unwrap().1, b"after the end");
    let kept_dir = server.data_dir.path().join("artifacts").join(&id);
    let mode = std::fs::metadata(&kept_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", kept_dir.display());
    let (status, _, body) =
        http_fetch(&server.http.to_string(), &format!("/sessions/{id}/files/kept.txt"), Some(&server.admin_token))
            .await;
    assert_eq!((status.as_str(), body.as_slice()), ("HTTP/1.1 200 OK", b"after the end".as_slice()));
    // A session without files keeps nothing.
    assert_eq!(code(client.list_files(&bare).await.unwrap_err()).0, tonic::Code::FailedPrecondition);
    assert!(!server.data_dir.path().join("artifacts").join(&bare).exists());

    // Past the TTL: gone from the answers at once, and from the disk at the next sweep.
    eventually("the kept files to expire", Duration::from_secs(10), || async {
        client.list_files(&id).await.err().map(code).filter(|(c, _)| *c == tonic::Code::FailedPrecondition)
    })
    .await;
    eventually("the sweep to delete them", Duration::from_secs(10), || async { (!kept_dir.exists()).then_some(()) })
        .await;
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
    let dir = files_dir(&server, "mine.txt");
    let key = std::fs::read_dir(server.data_dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("jwt-"))
        .expect("the server's signing key");
    std::os::unix::fs::symlink(&key, dir.join("key.txt")).unwrap();
    let outside = tempfile::NamedTempFile::new_in(server.data_dir.path()).unwrap();
    std::fs::write(outside.path(), "outside").unwrap();
    if let Err(e) = std::fs::hard_link(outside.path(), dir.join("hard.txt")) {
        // A root server's files directory is a tmpfs of its own: no link can reach out of it,
        // so the link is to a file of its own (a dot name, never listed).
        assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{e}");
        std::fs::write(dir.join(".inside"), "inside").unwrap();
        std::fs::hard_link(dir.join(".inside"), dir.join("hard.txt")).unwrap();
    }
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

/// A page with a file input that shows what it was given: `window.got` is the names and the
/// text of each file, once read.
const FILE_INPUT: &str = r#"<input type="file" id="f" multiple><input type="file" id="one"><p id="p">x</p>
<script>
  window.got = null;
  document.getElementById('f').addEventListener('change', async (e) => {
    const files = Array.from(e.target.files);
    window.got = await Promise.all(files.map(async (f) => f.name + '=' + await f.text()));
  });
</script>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_input_files_gives_a_page_the_session_s_files_and_nothing_else() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    client.put_file(&id, "note.txt", b"uploaded through PutFile").await.unwrap();
    client.put_file(&id, "second.csv", b"a,b").await.unwrap();
    ok(&act(&client, &id, action("load_html", "", FILE_INPUT)).await);

    let set =
        ok(&act(&client, &id, action("set_input_files", "#f", serde_json::json!(["note.txt", "second.csv"]))).await);
    assert_eq!(set, serde_json::json!(["note.txt", "second.csv"]));
    let got = eventually("the page to read its files", Duration::from_secs(10), || async {
        let v = ok(&act(&client, &id, action("evaluate", "", "window.got")).await);
        (!v.is_null()).then_some(v)
    })
    .await;
    assert_eq!(got, serde_json::json!(["note.txt=uploaded through PutFile", "second.csv=a,b"]));

    // Refused, each saying why: an unknown file, a planted link, not a file input, two files
    // for a single input, a path.
    std::os::unix::fs::symlink("/etc/hostname", files_dir(&server, "note.txt").join("link.txt")).unwrap();
    for (selector, payload, why) in [
        ("#f", serde_json::json!("missing.txt"), "no file \"missing.txt\" among the session's files"),
        ("#f", serde_json::json!("link.txt"), "is not a plain file of the session"),
        ("#p", serde_json::json!("note.txt"), "is not an <input type=file>"),
        ("#one", serde_json::json!(["note.txt", "second.csv"]), "several files for an input without `multiple`"),
        ("#f", serde_json::json!("/etc/passwd"), "has a path separator"),
    ] {
        let r = act(&client, &id, action("set_input_files", selector, payload.clone())).await;
        assert_eq!(crate::helpers::err_code(&r), pb::ErrorCode::InvalidArgument, "{payload}");
        let message = &r.error.as_ref().unwrap().message;
        assert!(message.contains(why), "{payload}: {message}");
    }
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// Over CDP, `DOM.setFileInputFiles` takes the session's own files, by bare name, and nothing
/// outside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdp_client_sets_the_session_s_files_on_an_input_by_name() {
    use serde_json::json;
    let server = TestServer::start().await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let id = session.session_id.clone();
    client.put_file(&id, "note.txt", b"through cdp").await.unwrap();
    ok(&act(&client, &id, action("load_html", "", FILE_INPUT)).await);

    let mut ws = crate::cdp::connect(&session.cdp_url).await;
    let targets = crate::cdp::reply_to(&mut ws, json!({"id": 1, "method": "Target.getTargets"})).await;
    let page = targets["result"]["targetInfos"].as_array().unwrap().iter().find(|t| t["type"] == "page").unwrap()
        ["targetId"]
        .clone();
    let attach = json!({"id": 2, "method": "Target.attachToTarget", "params": {"targetId": page, "flatten": true}});
    let sid = crate::cdp::reply_to(&mut ws, attach).await["result"]["sessionId"].clone();
    let doc = crate::cdp::reply_to(&mut ws, json!({"id": 3, "sessionId": sid, "method": "DOM.getDocument"})).await;
    let root = doc["result"]["root"]["nodeId"].clone();
    let query =
        json!({"id": 4, "sessionId": sid, "method": "DOM.querySelector", "params": {"nodeId": root, "selector": "#f"}});
    let node = crate::cdp::reply_to(&mut ws, query).await["result"]["nodeId"].clone();
    let set = |n: u64, files: serde_json::Value| json!({"id": n, "sessionId": sid, "method": "DOM.setFileInputFiles", "params": {"files": files, "nodeId": node}});
    let answer = crate::cdp::reply_to(&mut ws, set(5, json!(["note.txt"]))).await;
    assert!(answer.get("error").is_none(), "{answer}");
    let got = eventually("the page to read the file", Duration::from_secs(10), || async {
        let v = ok(&act(&client, &id, action("evaluate", "", "window.got")).await);
        (!v.is_null()).then_some(v)
    })
    .await;
    assert_eq!(got, json!(["note.txt=through cdp"]));
    let key = server.data_dir.path().join("jwt-hs256.key");
    for (n, files) in [(6, json!([key.to_str().unwrap()])), (7, json!(["../../etc/passwd"]))] {
        let answer = crate::cdp::reply_to(&mut ws, set(n, files.clone())).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("only the session's own files"), "{files}: {answer}");
    }
    drop(ws);
    client.release(&id).await.unwrap();
    server.stop().await;
}

/// One HTTP/1.1 GET of `path` on `addr` with an optional Bearer token: the status line, the
/// head, and the body as bytes (the server sends a length).
pub(crate) async fn http_fetch(addr: &str, path: &str, token: Option<&str>) -> (String, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let status = head.lines().next().unwrap_or_default().to_string();
    (status, head.to_ascii_lowercase(), out[end..].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_over_http_one_by_one_and_zipped_with_the_token_s_rules() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    let binary: Vec<u8> = (0..200_000).map(|i| (i * 7 % 256) as u8).collect();
    client.put_file(&id, "a b.txt", b"alpha").await.unwrap();
    client.put_file(&id, "data.bin", &binary).await.unwrap();
    let http = server.http.to_string();
    let token = server.admin_token.clone();

    let (status, head, body) = http_fetch(&http, &format!("/sessions/{id}/files/a%20b.txt"), Some(&token)).await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{head}");
    assert_eq!(body, b"alpha");
    assert!(head.contains("content-type: text/plain"), "{head}");
    assert!(head.contains(&format!("x-checksum-sha256: {}", sha256(b"alpha"))), "{head}");
    assert!(head.contains("content-disposition: attachment; filename*=utf-8''a%20b.txt"), "{head}");

    let (status, head, body) = http_fetch(&http, &format!("/sessions/{id}/files.zip"), Some(&token)).await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{head}");
    assert!(head.contains("content-type: application/zip"), "{head}");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(body)).unwrap();
    let mut found = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap();
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut content).unwrap();
        found.push((entry.name().to_string(), sha256(&content)));
    }
    assert_eq!(found, [("a b.txt".to_string(), sha256(b"alpha")), ("data.bin".to_string(), sha256(&binary))]);

    // No token, a bad one, another tenant's, an unknown file, a bad name: each its status.
    let other = pb::Tenant { id: "other-tenant".into(), max_slots: 1, max_queue: 1, ..Default::default() };
    client.admin().put_tenant(pb::PutTenantRequest { tenant: Some(other) }).await.unwrap();
    let foreign = server.token("other-tenant", "ci", &["sessions:read"]).await;
    for (path, token, want) in [
        (format!("/sessions/{id}/files/a%20b.txt"), None, "HTTP/1.1 401 Unauthorized"),
        (format!("/sessions/{id}/files/a%20b.txt"), Some("not-a-token"), "HTTP/1.1 401 Unauthorized"),
        (format!("/sessions/{id}/files/a%20b.txt"), Some(foreign.as_str()), "HTTP/1.1 404 Not Found"),
        (format!("/sessions/{id}/files.zip"), Some(foreign.as_str()), "HTTP/1.1 404 Not Found"),
        (format!("/sessions/{id}/files/nope.txt"), Some(token.as_str()), "HTTP/1.1 404 Not Found"),
        (format!("/sessions/{id}/files/..%2Fkey"), Some(token.as_str()), "HTTP/1.1 400 Bad Request"),
    ] {
        let (status, head, body) = http_fetch(&http, &path, token).await;
        assert_eq!(status, want, "{path} {token:?}: {head}{}", String::from_utf8_lossy(&body));
    }
    let (_, head, _) = http_fetch(&http, &format!("/sessions/{id}/files/a%20b.txt"), None).await;
    assert!(head.contains("www-authenticate: bearer"), "{head}");

    // Each fetch is a record with the names, sizes and hashes.
    let records = eventually("the http fetch records", Duration::from_secs(10), || async {
        let q = pb::QueryAuditRequest { session_id: id.clone(), limit: 1000, ..Default::default() };
        let mut stream = client.admin().query_audit(q).await.unwrap().into_inner();
        let mut got = Vec::new();
        while let Some(r) = stream.message().await.unwrap() {
            if r.rpc.starts_with("GET /sessions/") && r.outcome == "ok" {
                got.push(r.target);
            }
        }
        (got.len() >= 2).then_some(got)
    })
    .await;
    assert!(records.contains(&format!("name=a b.txt size=5 sha256={}", sha256(b"alpha"))), "{records:?}");
    assert!(records.iter().any(|r| r.contains("; name=data.bin size=200000 ")), "{records:?}");
    client.release(&id).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playwright_s_download_lands_under_its_name_and_a_buffer_fills_a_file_input() {
    let server = TestServer::start().await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let url = crate::cdp::without_ticket(&session.cdp_url);
    let seen = crate::cdp::node("playwright_files.mjs", &url, Some(&server.admin_token), "").await;
    assert_eq!(seen["suggested"], "report.csv", "{seen}");
    assert_eq!(seen["failure"], serde_json::Value::Null, "Playwright saw the download finish: {seen}");
    assert_eq!(seen["read"], "note.txt:from a buffer", "{seen}");
    // The download is the session's file of that name (Playwright's own saveAs would copy it
    // from a directory of the client's machine, where it never is).
    let report = downloaded(&client, &session.session_id, "report.csv").await;
    assert_eq!(report.kind, pb::ArtifactKind::Download as i32);
    assert_eq!(client.get_file(&session.session_id, "report.csv").await.unwrap().1, b"a,b\n1,2");
    client.release(&session.session_id).await.unwrap();
    server.stop().await;
}
