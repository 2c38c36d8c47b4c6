//! Where a worker's directories live: `--profiles-in` a tmpfs puts its profile there, while
//! its HTTP cache and its session's files stay on the disk; release and stop leave nothing in
//! either; a `--profiles-in` that is not a directory stops the server before it starts; what a
//! server killed without cleaning up left is removed by the next one to start; a page stores
//! no more than its worker's `--worker-disk-mb`; a root server without `CAP_SYS_ADMIN` stops at
//! start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::response::IntoResponse;
use browserpool_client::{action, pb};

use crate::helpers::{act, eventually, fixture_site, ok, skip, TestServer};

/// The mount points at or below `dir` (paths without spaces, as the tests' are).
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().filter_map(|l| l.split(' ').nth(4)).map(PathBuf::from).filter(|p| p.starts_with(dir)).collect()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The size in MiB of the tmpfs `dir` is, `None` when it is not a tmpfs.
fn tmpfs_mib(dir: &Path) -> Option<u64> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut st) }, 0, "{}", dir.display());
    (st.f_type == libc::TMPFS_MAGIC).then(|| (st.f_blocks as u64 * st.f_bsize as u64) >> 20)
}

/// Writes up to `mib` MiB to a file of the origin-private file system, a MiB at a time, as
/// fast as the page can; answers how many it wrote and the error that stopped it, if any.
fn fill_opfs(mib: u32) -> String {
    format!(
        r#"(async () => {{
    const dir = await navigator.storage.getDirectory();
    const w = await (await dir.getFileHandle('fill', {{ create: true }})).createWritable();
    const chunk = new Uint8Array(1 << 20);
    for (let at = 0; at < chunk.length; at += 65536) crypto.getRandomValues(chunk.subarray(at, at + 65536));
    let n = 0;
    try {{ for (; n < {mib}; n++) await w.write(chunk); await w.close(); return {{ wrote: n }}; }}
    catch (e) {{ return {{ wrote: n, error: e.name }}; }}
}})()"#
    )
}

/// Session `id`'s page, on `site`, writes `mib` MiB to the origin-private file system and stops
/// with a quota error inside `room` MiB.
async fn fills_to_quota(client: &browserpool_client::Client, id: &str, site: &str, mib: u32, room: u64) {
    ok(&act(client, id, action("navigate", "", format!("{site}/about"))).await);
    let filled = ok(&act(client, id, action("evaluate", "", fill_opfs(mib))).await);
    let wrote = filled["wrote"].as_u64().unwrap();
    assert!(wrote < room, "stopped inside {room} MiB: {filled}");
    assert_eq!(filled["error"], "QuotaExceededError", "{filled}");
}

/// A page the browser may cache for an hour, 512 KiB, served from the test on loopback.
async fn cacheable_site() -> String {
    let body = "cacheable ".repeat(512 * 1024 / 10);
    let app = axum::Router::new().route(
        "/cached",
        axum::routing::get(move || {
            let body = body.clone();
            async move {
                ([("cache-control", "public, max-age=3600"), ("content-type", "text/plain")], body).into_response()
            }
        }),
    );
    let addr = crate::helpers::serve_loopback(app).await;
    format!("http://{addr}")
}

/// The sizes of the files under `dir`, none when it is gone.
fn sizes_under(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .flat_map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => sizes_under(&e.path()),
            _ => vec![e.metadata().map(|m| m.len()).unwrap_or(0)],
        })
        .collect()
}

/// The memory cgroup of `pid` (cgroup v1's `memory` controller, else v2) and the shmem bytes
/// charged to it (a tmpfs's pages are), or `None` where that cannot be read.
fn memory_cgroup_shmem(pid: u32) -> Option<(String, u64)> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let v1 = cgroups.lines().find_map(|l| {
        let (controllers, path) = l.split_once(':')?.1.split_once(':')?;
        controllers.split(',').any(|c| c == "memory").then(|| format!("/sys/fs/cgroup/memory{path}"))
    });
    let dir = v1.or_else(|| {
        let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
        Some(format!("/sys/fs/cgroup{path}"))
    })?;
    let stat = std::fs::read_to_string(format!("{dir}/memory.stat")).ok()?;
    let shmem = stat.lines().find_map(|l| l.strip_prefix("shmem "))?.trim().parse().ok()?;
    Some((dir, shmem))
}

/// Stores `mib` MiB of random bytes in the page's IndexedDB, a MiB a transaction.
fn store_mib(mib: u32) -> String {
    format!(
        r#"(async () => {{
    const db = await new Promise((ok, no) => {{ const r = indexedDB.open('big', 1);
        r.onupgradeneeded = () => r.result.createObjectStore('s'); r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error); }});
    for (let i = 0; i < {mib}; i++) {{
        const chunk = new Uint8Array(1 << 20);
        for (let at = 0; at < chunk.length; at += 65536) crypto.getRandomValues(chunk.subarray(at, at + 65536));
        await new Promise((ok, no) => {{ const t = db.transaction('s', 'readwrite'); t.objectStore('s').put(chunk, i);
            t.oncomplete = ok; t.onerror = () => no(t.error); }});
    }}
    db.close();
    return {mib};
}})()"#
    )
}

fn on_tmpfs(path: &Path) -> bool {
    browserpool_server::server::tmpfs_free(path).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_on_a_tmpfs_keep_the_cache_and_the_files_on_the_disk() {
    let test = "profiles_on_a_tmpfs_keep_the_cache_and_the_files_on_the_disk";
    if !on_tmpfs(Path::new("/dev/shm")) {
        return skip(test, "/dev/shm is not a tmpfs here");
    }
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let server = TestServer::start_with(|a| {
        a.profiles_in = Some(shm.path().to_path_buf());
        // A worker of the session's own, deleted at its release (whatever the suite's pass).
        a.default_isolation = Some("process".into());
        a.warm = 0;
        a.max_workers = 1;
    })
    .await;
    let profiles = browserpool_server::server::profiles_dir_in(shm.path(), server.data_dir.path());
    let disk = server.profiles_dir();
    assert!(!on_tmpfs(&disk), "the test's temp dir must be a disk: {}", disk.display());
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let id = session.session_id.clone();
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let worker =
        status.workers.iter().find(|w| w.worker_id == session.worker_id).expect("the session's worker").clone();
    let profile = profiles.join(format!("port-{}", worker.cdp_port));
    let cache = disk.join(format!("cache-{}", worker.cdp_port));

    // Chromium was told so, and wrote its profile on the tmpfs.
    let cmdline = String::from_utf8(std::fs::read(format!("/proc/{}/cmdline", worker.pid)).unwrap()).unwrap();
    let args: Vec<&str> = cmdline.split('\0').collect();
    let user_data_dir = format!("--user-data-dir={}", profile.join("chrome").display());
    let disk_cache_dir = format!("--disk-cache-dir={}", cache.display());
    assert!(args.contains(&user_data_dir.as_str()), "{args:?}");
    assert!(args.contains(&disk_cache_dir.as_str()), "{args:?}");
    assert!(profile.join("chrome").join("Default").is_dir() && on_tmpfs(&profile));
    // The cache is the worker's own, as its profile is: its uid's, owner only.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let (cache_meta, profile_meta) = (std::fs::metadata(&cache).unwrap(), std::fs::metadata(&profile).unwrap());
    assert_eq!(cache_meta.permissions().mode() & 0o777, 0o700);
    assert_eq!((cache_meta.uid(), cache_meta.gid()), (profile_meta.uid(), profile_meta.gid()));
    let worker_uid = browserpool_pool::sandbox::process_uid(worker.pid).unwrap();
    assert_eq!(cache_meta.uid(), worker_uid, "the worker's uid");

    // A cached page lands in the cache on the disk, not in the profile.
    let site = cacheable_site().await;
    ok(&act(&client, &id, action("navigate", "", format!("{site}/cached"))).await);
    let page_bytes = 512 * 1024;
    eventually("the page to be in the disk cache", Duration::from_secs(15), || async {
        sizes_under(&cache).into_iter().any(|n| n >= page_bytes).then_some(())
    })
    .await;
    let in_profile = sizes_under(&profile);
    assert!(in_profile.iter().all(|n| *n < page_bytes), "the profile holds no copy of the page: {in_profile:?}");

    // What the page stores in its profile is on the tmpfs, charged to its worker's memory
    // cgroup (where the worker has one of its own): its memory limit bounds it.
    let before = memory_cgroup_shmem(worker.pid);
    let stored_before = sizes_under(&profile).iter().sum::<u64>();
    assert_eq!(ok(&act(&client, &id, action("evaluate", "", store_mib(32))).await), serde_json::json!(32));
    eventually("32 MiB more in the profile", Duration::from_secs(10), || async {
        (sizes_under(&profile).iter().sum::<u64>() >= stored_before + (30 << 20)).then_some(())
    })
    .await;
    match (before, memory_cgroup_shmem(std::process::id())) {
        (Some((worker_cgroup, shmem_before)), Some((ours, _))) if worker_cgroup != ours => {
            eventually(&format!("{worker_cgroup}'s shmem to grow by 32 MiB"), Duration::from_secs(10), || async {
                let (_, shmem) = memory_cgroup_shmem(worker.pid)?;
                (shmem >= shmem_before + (30 << 20)).then_some(())
            })
            .await;
        }
        _ => skip(test, "the worker has no memory cgroup of its own here: the charge is not checked"),
    }

    // A download lands in the session's files directory, on the disk.
    let page = r#"<a id="d" href="data:text/csv,a%2Cb%0A1%2C2" download="report.csv">get</a>"#;
    ok(&act(&client, &id, action("load_html", "", page)).await);
    ok(&act(&client, &id, action("click", "#d", serde_json::Value::Null)).await);
    let landed: PathBuf = eventually("report.csv to be downloaded", Duration::from_secs(15), || async {
        let files = std::fs::read_dir(disk.join("files")).ok()?;
        files.flatten().map(|e| e.path().join("report.csv")).find(|p| p.metadata().is_ok_and(|m| m.len() > 0))
    })
    .await;
    assert_eq!(std::fs::read(&landed).unwrap(), b"a,b\n1,2");
    assert!(client.list_files(&id).await.unwrap().iter().any(|f| f.name == "report.csv"));

    // Release deletes the profile and the cache; stop, both directories.
    assert!(client.release(&id).await.unwrap().released);
    eventually("the profile and the cache to be deleted", Duration::from_secs(10), || async {
        (!profile.exists() && !cache.exists()).then_some(())
    })
    .await;
    server.stop().await;
    assert!(!profiles.exists(), "the tmpfs profiles dir is removed at stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_in_a_missing_directory_stop_the_server_at_once() {
    let missing = tempfile::tempdir().unwrap().path().join("nowhere");
    let (status, stderr, _data) =
        crate::helpers::serve_stops(&[std::ffi::OsStr::new("--profiles-in"), missing.as_os_str()], &[]).await;
    assert!(!status.success());
    let said = format!("--profiles-in {}: not a directory", missing.display());
    assert!(stderr.contains(&said), "{stderr}");
    assert!(!missing.exists(), "nothing made in its place");
}

/// A server killed with SIGKILL whose data dir is then removed (a CI job's temp dir, say)
/// leaves its profiles where no server on that data dir will ever reap them: the next server
/// to start on the host (its lock dir) removes them, and leaves a live server's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_servers_profiles_are_removed_by_the_next_server_to_start() {
    use crate::helpers::BinaryServer;
    let has_profiles = |dir: &Path| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("port-"))
    };
    let live = BinaryServer::spawn().await;
    let mut gone = BinaryServer::spawn().await;
    let (live_client, gone_client) = (live.client().await, gone.client().await);
    live_client.acquire(30_000).await.unwrap();
    gone_client.acquire(30_000).await.unwrap();
    let live_profiles = browserpool_server::server::profiles_dir(live.dir.path());
    let gone_profiles = browserpool_server::server::profiles_dir(gone.dir.path());
    assert!(has_profiles(&live_profiles) && has_profiles(&gone_profiles), "both servers' workers have profiles");

    // A root server's profiles are tmpfs mounts, which outlive it: unmounted by the next too.
    let mounted = !mounts_under(&gone_profiles).is_empty();
    assert_eq!(mounted, is_root(), "{} holds the profiles' mounts when root", gone_profiles.display());

    gone.kill_server_only();
    drop(std::mem::replace(&mut gone.dir, tempfile::tempdir().unwrap()));
    assert_eq!(!mounts_under(&gone_profiles).is_empty(), mounted, "a killed server's mounts stay");
    // (Any server starting now would do it; this test starts one.)
    let next = TestServer::start().await;
    assert!(!gone_profiles.exists(), "the next server removed {}", gone_profiles.display());
    assert_eq!(mounts_under(&gone_profiles), Vec::<PathBuf>::new(), "and unmounted its profiles");
    assert!(has_profiles(&live_profiles), "a live server's profiles are kept");
    let id = live_client.acquire(30_000).await.unwrap().session_id;
    ok(&act(&live_client, &id, action("evaluate", "", "1 + 1")).await);
    next.stop().await;
}

/// Set once `/big`'s body is done with: handed to the connection whole, or the browser hung up.
static BIG_SENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Serves `/big`, 48 MiB, and `/small`, 1 KiB, each an attachment named after itself.
async fn downloads_site() -> String {
    let attachment = |name: &'static str, bytes: usize| {
        let headers = [
            ("content-type", "application/octet-stream".to_string()),
            ("content-disposition", format!("attachment; filename={name}.bin")),
        ];
        (headers, vec![7u8; bytes])
    };
    let app = axum::Router::new()
        .route(
            "/big",
            axum::routing::get(move || async move {
                /// Sets [`BIG_SENT`] when the body is done with: sent whole, or the browser gone.
                struct Done;
                impl Drop for Done {
                    fn drop(&mut self) {
                        BIG_SENT.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                let done = Done;
                let chunks = (0..48).map(|_| Ok::<_, std::io::Error>(vec![7u8; 1 << 20]));
                let body = futures::StreamExt::map(futures::stream::iter(chunks), move |chunk| {
                    let _ = &done;
                    chunk
                });
                let headers = [
                    ("content-type", "application/octet-stream"),
                    ("content-disposition", "attachment; filename=big.bin"),
                ];
                (headers, axum::body::Body::from_stream(body)).into_response()
            }),
        )
        .route("/small", axum::routing::get(move || async move { attachment("small", 1024).into_response() }));
    let addr = crate::helpers::serve_loopback(app).await;
    format!("http://{addr}")
}

/// A page writing as much as it can (the origin-private file system, IndexedDB) stops at its
/// worker's `--worker-disk-mb` with a quota error, not at the disk's end (Chromium's own quota
/// is most of the disk), and its session goes on; release unmounts the profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_stores_no_more_than_its_worker_s_disk_and_its_session_goes_on() {
    let test = "a_page_stores_no_more_than_its_worker_s_disk_and_its_session_goes_on";
    if !is_root() {
        return skip(test, "only a root server mounts a tmpfs for each profile");
    }
    let server = TestServer::start_with(|a| {
        a.worker_disk_mb = 32;
        a.default_isolation = Some("process".into());
        a.warm = 0;
        a.max_workers = 1;
    })
    .await;
    let client = server.admin().await;
    let session = client.acquire(30_000).await.unwrap();
    let id = session.session_id.clone();
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let worker = status.workers.iter().find(|w| w.worker_id == session.worker_id).expect("the session's worker");
    let profile = server.profiles_dir().join(format!("port-{}", worker.cdp_port));
    let fence = &status.replicas[0].resource_fence;
    assert!(fence.contains("profile: a tmpfs of 32 MiB"), "the status says so: {fence}");

    // The profile is a tmpfs of 32 MiB of its own, the worker's uid's.
    assert_eq!(mounts_under(&profile), vec![profile.clone()]);
    assert_eq!(tmpfs_mib(&profile), Some(32));
    use std::os::unix::fs::MetadataExt;
    let worker_uid = browserpool_pool::sandbox::process_uid(worker.pid).unwrap();
    assert_eq!(std::fs::metadata(&profile).unwrap().uid(), worker_uid);

    let site = fixture_site().await;
    fills_to_quota(&client, &id, &site, 256, 32).await;
    let stored = act(&client, &id, action("evaluate", "", store_mib(64))).await;
    assert!(!stored.ok, "IndexedDB is refused too: {stored:?}");
    let held = sizes_under(&profile).iter().sum::<u64>();
    assert!(held <= 32 << 20, "the profile holds {held} bytes");
    // The session goes on: its page answers, and a new document loads.
    ok(&act(&client, &id, action("navigate", "", format!("{site}/second"))).await);
    assert_eq!(ok(&act(&client, &id, action("title", "", "")).await), "Second");

    // Its downloads land in its files directory, a tmpfs of 32 MiB of its own too: one of 48
    // MiB is cut off there and leaves nothing; a small one lands, and is kept past the release.
    let files = server.profiles_dir().join("files").join(&session.worker_id);
    assert_eq!(mounts_under(&files), vec![files.clone()]);
    let downloads = downloads_site().await;
    let page = format!(
        r#"<a id="big" href="{downloads}/big" download>big</a><a id="small" href="{downloads}/small" download>small</a>"#
    );
    ok(&act(&client, &id, action("load_html", "", page)).await);
    ok(&act(&client, &id, action("click", "#big", serde_json::Value::Null)).await);
    eventually("the big download to be cut off", Duration::from_secs(20), || async {
        // Chromium removes what it wrote of an interrupted download.
        let names: Vec<String> =
            std::fs::read_dir(&files).ok()?.flatten().map(|e| e.file_name().to_string_lossy().into()).collect();
        (names.is_empty() && BIG_SENT.load(std::sync::atomic::Ordering::SeqCst)).then_some(())
    })
    .await;
    ok(&act(&client, &id, action("click", "#small", serde_json::Value::Null)).await);
    eventually("small.bin to be downloaded", Duration::from_secs(15), || async {
        let listed = client.list_files(&id).await.ok()?;
        listed.iter().any(|f| f.name == "small.bin" && f.size == 1024).then_some(())
    })
    .await;
    assert!(client.list_files(&id).await.unwrap().iter().all(|f| f.name != "big.bin"), "nothing of the big one");
    // An upload shares that room: one larger than it is refused, saying so, and leaves nothing.
    let refused = client.put_file(&id, "upload.bin", &vec![1u8; 40 << 20]).await.unwrap_err();
    let browserpool_client::Error::Status(status) = refused else { panic!("a status: {refused:?}") };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("no room left for \"upload.bin\"") && status.message().contains("--worker-disk-mb"),
        "{status:?}"
    );
    let names: Vec<String> = client.list_files(&id).await.unwrap().into_iter().map(|f| f.name).collect();
    assert_eq!(names, ["small.bin"]);
    let left: Vec<_> = std::fs::read_dir(&files).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 1, "no partial upload left: {left:?}");

    assert!(client.release(&id).await.unwrap().released);
    eventually("the profile and the files directory to be unmounted and removed", Duration::from_secs(10), || async {
        (mounts_under(&profile).is_empty() && !profile.exists() && mounts_under(&files).is_empty() && !files.exists())
            .then_some(())
    })
    .await;
    let kept = client.list_files(&id).await.unwrap();
    assert!(kept.iter().any(|f| f.name == "small.bin" && f.size == 1024), "kept past the release: {kept:?}");
    let profiles = server.profiles_dir();
    server.stop().await;
    assert_eq!(mounts_under(&profiles), Vec::<PathBuf>::new());
}

/// A tenant's small memory limit makes its worker's disk smaller too (a quarter of the limit,
/// for its profile and its files directory each): what its page stores ends in a quota error
/// before its tab would be killed at the limit, and the session goes on; a session of the
/// server's default limit keeps the server's size; a context tenant's shared browser and its
/// contexts' files directories take a quarter of that tenant's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_s_small_memory_limit_shrinks_its_worker_s_disk_and_its_session_goes_on() {
    let test = "a_tenant_s_small_memory_limit_shrinks_its_worker_s_disk_and_its_session_goes_on";
    if !is_root() {
        return skip(test, "only a root server mounts a tmpfs for each profile");
    }
    let server = TestServer::start_with(|a| {
        a.default_isolation = Some("process".into());
        a.max_workers = 2;
    })
    .await;
    let admin = server.admin().await;
    let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
    let fence = status.replicas[0].resource_fence.clone();
    if !fence.contains("memory 1536 MiB") {
        server.stop().await;
        return skip(test, "no cgroup per worker on this host");
    }
    assert!(
        fence.contains("profile: a tmpfs of 384 MiB (a quarter of the worker's memory limit, at most 512 MiB)"),
        "{fence}"
    );
    let tenant = pb::Tenant {
        id: "small".into(),
        max_slots: 1,
        allow_private_networks: true,
        isolation: pb::Isolation::Process as i32,
        max_memory_mb: 256,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    let small = server.client(&server.token("small", "ci", &["sessions:read", "sessions:write"]).await).await;

    let (admin, profiles) = (&admin, server.profiles_dir());
    let dirs = |worker_id: String| {
        let profiles = profiles.clone();
        async move {
            let status = admin.admin().pool_status(pb::PoolStatusRequest {}).await.unwrap().into_inner();
            let worker = status.workers.iter().find(|w| w.worker_id == worker_id).expect("the session's worker");
            (profiles.join(format!("port-{}", worker.cdp_port)), profiles.join("files").join(&worker_id))
        }
    };
    let session = small.acquire(30_000).await.unwrap();
    let id = session.session_id.clone();
    let (profile, files) = dirs(session.worker_id.clone()).await;
    assert_eq!((tmpfs_mib(&profile), tmpfs_mib(&files)), (Some(64), Some(64)), "a quarter of 256 MiB each");

    let site = fixture_site().await;
    // 300 MiB would take the worker past its 256 MiB: in a tmpfs of the server's 384 MiB its
    // tab is killed at the limit (TabCrashed, "it reached its memory limit"), tried.
    fills_to_quota(&small, &id, &site, 300, 64).await;
    ok(&act(&small, &id, action("navigate", "", format!("{site}/second"))).await);
    assert_eq!(ok(&act(&small, &id, action("title", "", "")).await), "Second");
    // An upload shares the smaller room.
    let refused = small.put_file(&id, "upload.bin", &vec![1u8; 80 << 20]).await.unwrap_err();
    let browserpool_client::Error::Status(status) = refused else { panic!("a status: {refused:?}") };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");

    // The server's default limit: the server's size, as a spare has it.
    let other = admin.acquire(30_000).await.unwrap();
    let (other_profile, other_files) = dirs(other.worker_id.clone()).await;
    assert_eq!((tmpfs_mib(&other_profile), tmpfs_mib(&other_files)), (Some(384), Some(384)));
    admin.release(&other.session_id).await.unwrap();
    assert!(small.release(&id).await.unwrap().released);

    // In context isolation the tenant's shared browser takes its limit, and its profile and
    // each context's files directory a quarter of it.
    let tenant = pb::Tenant {
        id: "dense".into(),
        max_slots: 1,
        // The sessions above may still hold the pool's two slots while they end.
        max_queue: 1,
        isolation: pb::Isolation::Context as i32,
        max_memory_mb: 512,
        ..Default::default()
    };
    admin.admin().put_tenant(pb::PutTenantRequest { tenant: Some(tenant) }).await.unwrap();
    let dense = server.client(&server.token("dense", "ci", &["sessions:read", "sessions:write"]).await).await;
    let session = dense.acquire(30_000).await.unwrap();
    let (profile, _) = dirs(session.worker_id.clone()).await;
    let contexts: Vec<PathBuf> = std::fs::read_dir(profiles.join("files"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{}-", session.worker_id)))
        .collect();
    assert_eq!(contexts.len(), 1, "{contexts:?}");
    assert_eq!((tmpfs_mib(&profile), tmpfs_mib(&contexts[0])), (Some(128), Some(128)), "a quarter of 512 MiB each");
    dense.release(&session.session_id).await.unwrap();
    server.stop().await;
    assert_eq!(mounts_under(&profiles), Vec::<PathBuf>::new());
}

/// A root server without `CAP_SYS_ADMIN` (a container run as root with the default
/// capabilities) cannot put its workers, as uids of their own, in network namespaces: it
/// stops at start saying what to give it, where it used to fail every boot without end.
#[test]
fn a_root_server_without_cap_sys_admin_stops_at_start_saying_what_it_needs() {
    let test = "a_root_server_without_cap_sys_admin_stops_at_start_saying_what_it_needs";
    if !is_root() {
        return skip(test, "it drops a capability a root server has");
    }
    let data = tempfile::tempdir().unwrap();
    let mut server = std::process::Command::new("setpriv")
        .args(["--bounding-set", "-sys_admin", env!("CARGO_BIN_EXE_browserpool"), "serve", "--data-dir"])
        .arg(data.path())
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux) runs the server");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = server.kill();
            panic!("the server did not stop within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(&mut server.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(said.contains("may not create network namespaces") && said.contains("--cap-add SYS_ADMIN"), "{said}");
    assert!(!said.contains("worker failed to boot"), "{said}");
}
