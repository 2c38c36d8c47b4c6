//! Artifacts in an S3-compatible object store (`--artifact-store`): moto's server, installed
//! from PyPI by `scripts/test.sh` and run on loopback (`BROWSERPOOL_TEST_MOTO` names it). What a
//! session leaves is copied there at its end, served by another replica once the one that made
//! it is gone, deleted there by `DeleteArtifacts` and at expiry, and copied later when the
//! store was down at the end. A bad store URL or a missing bucket stops the server at start.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use browserpool_client::{action, pb};
use browserpool_server::objects::ObjectStore;
use sha2::Digest;

use crate::files::http_fetch;
use crate::helpers::{act, eventually, ok, skip, status_code, BinaryServer};

const BUCKET: &str = "bp-artifacts";

/// moto's S3 server on 127.0.0.1 (`port` 0: any), killed when dropped.
struct Moto {
    child: std::process::Child,
    endpoint: String,
}

impl Moto {
    fn start(test: &str, port: u16) -> Option<Moto> {
        let Ok(bin) = std::env::var("BROWSERPOOL_TEST_MOTO") else {
            skip(test, "BROWSERPOOL_TEST_MOTO is not set (scripts/test.sh installs moto and sets it)");
            return None;
        };
        let mut child = std::process::Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("moto_server starts");
        // Werkzeug says where it listens: ` * Running on http://127.0.0.1:PORT`.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let endpoint = loop {
            let line = lines.next().expect("moto says where it listens").unwrap();
            if let Some(at) = line.split("Running on ").nth(1) {
                break at.trim().to_string();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Some(Moto { child, endpoint })
    }

    fn port(&self) -> u16 {
        self.endpoint.rsplit(':').next().unwrap().parse().unwrap()
    }

    async fn make_bucket(&self) {
        // reqwest's rustls takes the process's provider, as in the server.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let made = reqwest::Client::new().put(format!("{}/{BUCKET}", self.endpoint)).send().await.unwrap();
        assert!(made.status().is_success(), "create bucket: {}", made.status());
    }

    /// The variables a server is given to use it.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "moto-s3cr3t".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// Every key under `prefix` of the store `url`, as the server sees them.
    async fn keys(&self, url: &str) -> Vec<String> {
        let env = self.env();
        let store = ObjectStore::new(url, |name| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())).unwrap();
        store.list("").await.unwrap().into_iter().map(|o| o.key).collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn env_pairs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

const PAGE: &str = r#"<body style="margin:0;background:#0a0"><h1 id="t">stored</h1></body>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_outlive_their_replica_in_the_object_store_until_deleted() {
    let test = "artifacts_outlive_their_replica_in_the_object_store_until_deleted";
    let Some(moto) = Moto::start(test, 0) else { return };
    moto.make_bucket().await;
    let url = format!("s3://{BUCKET}/fleet");
    let env = moto.env();
    let mut a = BinaryServer::spawn_env(&["--artifact-store", &url], &env_pairs(&env)).await;
    let mut b = BinaryServer::replica_of_with(&a, &["--artifact-store", &url]);
    let client = a.client().await;

    let req = pb::AcquireRequest { wait_ms: 30_000, record: pb::Record::On as i32, ..Default::default() };
    let id = client.acquire_with(req).await.unwrap().session_id;
    let binary: Vec<u8> = (0..300_000).map(|i| (i * 13 % 251) as u8).collect();
    client.put_file(&id, "input.bin", &binary).await.unwrap();
    ok(&act(&client, &id, action("load_html", "", PAGE)).await);
    tokio::time::sleep(Duration::from_millis(800)).await;
    client.release(&id).await.unwrap();

    // Copied at the end: the files, the recording, the manifest and the expiry key.
    let keys = eventually("the artifacts reach the store", Duration::from_secs(60), || async {
        let keys = moto.keys(&url).await;
        keys.iter().any(|k| k == &format!("{id}/manifest.json")).then_some(keys)
    })
    .await;
    for want in [format!("{id}/files/input.bin"), format!("{id}/recording.webm")] {
        assert!(keys.contains(&want), "{want} not in {keys:?}");
    }
    assert!(keys.iter().any(|k| k.starts_with("expiry/") && k.ends_with(&id)), "{keys:?}");
    let (_, local_video) = client.get_recording(&id).await.unwrap();

    // The replica that made them dies (SIGKILL, still registered); once its heartbeat is
    // stale the other serves them from the store.
    a.kill_hard();
    let other = b.client().await;
    let session = eventually("replica b answers for the dead one", Duration::from_secs(40), || async {
        other.get(&id).await.ok().filter(|s| !s.artifacts.is_empty())
    })
    .await;
    let mut listed: Vec<(String, i32)> = session.artifacts.iter().map(|a| (a.name.clone(), a.kind)).collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("input.bin".to_string(), pb::ArtifactKind::Upload as i32),
            ("recording.webm".to_string(), pb::ArtifactKind::Recording as i32)
        ],
        "{:?}",
        session.artifacts
    );
    // List shows them too, as the replica that kept them recorded them at the end.
    let page = pb::ListSessionsRequest { page_size: 100, ..Default::default() };
    let rows = other.sessions().list(page).await.unwrap().into_inner().sessions;
    let row = rows.iter().find(|s| s.session_id == id).expect("the session is listed");
    let mut names: Vec<&str> = row.artifacts.iter().map(|a| a.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["input.bin", "recording.webm"], "{:?}", row.artifacts);
    let (artifact, content) = other.get_file(&id, "input.bin").await.unwrap();
    assert_eq!(content, binary);
    assert_eq!(artifact.sha256, sha256(&binary));
    assert!(artifact.expires_at.is_some());
    let (artifact, video) = other.get_recording(&id).await.unwrap();
    assert_eq!(video, local_video, "the same video, from the store");
    assert_eq!(artifact.sha256, sha256(&video));
    let files = other.list_files(&id).await.unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    // Over HTTP too, with the same token; a name it does not hold is NOT_FOUND.
    let (status, _, body) = http_fetch(&b.http, &format!("/sessions/{id}/files/input.bin"), Some(&b.token)).await;
    assert!(status.contains("200"), "{status}");
    assert_eq!(body, binary);
    assert_eq!(status_code(other.get_file(&id, "other.txt").await.unwrap_err()), tonic::Code::NotFound);

    // Another tenant sees nothing of it.
    let foreign = pb::IssueTokenRequest {
        tenant: "intruder".into(),
        subject: "x".into(),
        scopes: vec!["sessions:read".into()],
        ttl_s: 600,
    };
    other
        .admin()
        .put_tenant(pb::PutTenantRequest {
            tenant: Some(pb::Tenant { id: "intruder".into(), max_slots: 1, ..Default::default() }),
        })
        .await
        .unwrap();
    let token = other.admin().issue_token(foreign).await.unwrap().into_inner().token;
    let intruder = browserpool_client::Client::connect(format!("http://{}", b.grpc), &token).await.unwrap();
    assert_eq!(status_code(intruder.get_file(&id, "input.bin").await.unwrap_err()), tonic::Code::NotFound);

    // Deleted through the replica that is left: gone from the store too.
    assert_eq!(other.delete_artifacts(&id).await.unwrap(), 2);
    let keys = moto.keys(&url).await;
    assert!(!keys.iter().any(|k| k.contains(&id)), "left in the store: {keys:?}");
    assert_eq!(status_code(other.get_recording(&id).await.unwrap_err()), tonic::Code::NotFound);
    assert!(other.get(&id).await.unwrap().artifacts.is_empty());
    let rows = other.sessions().list(pb::ListSessionsRequest { page_size: 100, ..Default::default() }).await.unwrap();
    let row = rows.into_inner().sessions.into_iter().find(|s| s.session_id == id).unwrap();
    assert!(row.artifacts.is_empty(), "listed after deletion: {:?}", row.artifacts);
    let (status, _) = b.terminate();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_artifacts_leave_the_store_and_a_store_that_was_down_is_caught_up() {
    let test = "expired_artifacts_leave_the_store_and_a_store_that_was_down_is_caught_up";
    let Some(moto) = Moto::start(test, 0) else { return };
    moto.make_bucket().await;
    let url = format!("s3://{BUCKET}/ttl");
    let env = moto.env();

    // A short TTL: copied at the end, deleted from the store once expired.
    let mut short =
        BinaryServer::spawn_env(&["--artifact-store", &url, "--artifact-ttl", "3s"], &env_pairs(&env)).await;
    let client = short.client().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    client.put_file(&id, "note.txt", b"kept for three seconds").await.unwrap();
    client.release(&id).await.unwrap();
    eventually("the file reaches the store", Duration::from_secs(30), || async {
        moto.keys(&url).await.contains(&format!("{id}/files/note.txt")).then_some(())
    })
    .await;
    eventually("the store forgets it after the TTL", Duration::from_secs(30), || async {
        moto.keys(&url).await.is_empty().then_some(())
    })
    .await;
    assert!(short.terminate().0.success());

    // The store is down when the session ends: kept here, counted as failed, and copied once
    // the store is back (the sweep tries again every 5 s).
    let port = moto.port();
    drop(moto);
    let mut down_env = env.clone();
    let down = format!("http://127.0.0.1:{port}");
    down_env[0].1 = down.clone();
    let mut server =
        BinaryServer::spawn_env(&["--artifact-store", &url, "--artifact-ttl", "20s"], &env_pairs(&down_env)).await;
    assert!(
        server.startup_log.iter().any(|l| l.contains("does not answer yet")),
        "a store down at start is warned about: {:?}",
        server.startup_log
    );
    let client = server.client().await;
    let id = client.acquire(30_000).await.unwrap().session_id;
    client.put_file(&id, "late.txt", b"copied later").await.unwrap();
    client.release(&id).await.unwrap();
    let metrics_url = format!("http://{}/metrics", server.http);
    eventually("the failed copy is counted", Duration::from_secs(30), || async {
        let metrics = crate::lifecycle::http_get(&metrics_url).await;
        metrics.contains("browserpool_artifact_uploads_total{outcome=\"failed\"}").then_some(())
    })
    .await;
    // Served from this replica's disk meanwhile.
    assert_eq!(client.get_file(&id, "late.txt").await.unwrap().1, b"copied later");
    let Some(moto) = Moto::start(test, port) else { return };
    moto.make_bucket().await;
    eventually("the sweep copies it once the store is back", Duration::from_secs(30), || async {
        moto.keys(&url).await.contains(&format!("{id}/manifest.json")).then_some(())
    })
    .await;
    let metrics = crate::lifecycle::http_get(&metrics_url).await;
    assert!(metrics.contains("browserpool_artifact_uploads_total{outcome=\"stored\"} 1"), "{metrics}");
    assert!(server.terminate().0.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_store_url_a_missing_bucket_or_no_ttl_stop_the_server_at_start() {
    let test = "a_bad_store_url_a_missing_bucket_or_no_ttl_stop_the_server_at_start";
    let Some(moto) = Moto::start(test, 0) else { return };
    let env = moto.env();
    let cases: [(&[&str], &str); 4] = [
        (&["--artifact-store", "https://bucket/p"], "not s3"),
        (&["--artifact-store", "s3://"], "names no bucket"),
        (&["--artifact-store", "s3://no-such-bucket/p"], "does not exist"),
        (&["--artifact-store", "s3://no-such-bucket/p", "--artifact-ttl", "0s"], "--artifact-ttl 0s"),
    ];
    for (flags, says) in cases {
        let (status, stderr, data) = crate::helpers::serve_stops(flags, &env_pairs(&env)).await;
        assert!(!status.success(), "{flags:?}: started anyway");
        assert!(stderr.contains(says) && stderr.contains("--artifact-"), "{flags:?} should say {says:?}: {stderr}");
        assert!(!stderr.contains("moto-s3cr3t"), "a credential reached the log: {stderr}");
        assert!(
            !browserpool_server::server::profiles_dir(data.path()).exists(),
            "{flags:?}: the server went on to start a pool"
        );
    }
}
