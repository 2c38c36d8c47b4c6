//! The pool against a real Chromium: boot, lease, act, release, nothing left behind.

use std::sync::Arc;
use std::time::Duration;

use browserpool_pool::sandbox::DEFAULT_WORKER_UIDS;
use browserpool_pool::{canonicalize, find_chrome, ActionCall, LaunchConfig, LeaseSpec, Pool, PoolConfig, PortRange};
use serde_json::json;

/// A lease that waits up to `wait`, with the default viewport and memory limit.
fn spec(wait: Duration) -> LeaseSpec {
    LeaseSpec { wait, ..Default::default() }
}

fn config(dir: &std::path::Path, warm: usize, max: usize) -> PoolConfig {
    // As root, workers run as uids of their own, which must pass through `dir` to their profiles.
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    PoolConfig {
        launch: LaunchConfig {
            chrome: find_chrome(None).expect("chromium must be installed for these tests"),
            profiles_dir: dir.join("profiles"),
            disk_dir: dir.join("profiles"),
            // Host-wide, as in production: the tests run at once, and each port's temp dir
            // (`/tmp/browserpool-w<port>`) must be one test's only.
            lock_dir: std::env::temp_dir().join("browserpool-pool-test-locks"),
            ports: PortRange { start: 19350, end: 19399 },
            launch_timeout: Duration::from_secs(30),
            cdp_timeout: Duration::from_secs(10),
            worker_uids: root.then(|| DEFAULT_WORKER_UIDS.parse().unwrap()),
            allow_unsandboxed: false,
            cgroups: root.then(|| browserpool_pool::Cgroups::detect(1536 << 20, 4096).ok()).flatten().map(Arc::new),
            profile_mb: 64,
        },
        warm,
        max_workers: max,
        max_html_bytes: 10 << 20,
        egress: Default::default(),
        max_tabs: 20,
        unresponsive_after: Duration::from_secs(10),
        shared: Default::default(),
    }
}

/// Every profile is deleted, and their dir with the last one.
fn assert_profiles_gone(dir: &std::path::Path) {
    let profiles = dir.join("profiles");
    let left: Vec<_> =
        std::fs::read_dir(&profiles).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "profiles left: {left:?}");
    assert!(!profiles.exists(), "the profiles dir is left");
}

fn call(action: &str, selector: &str, payload: serde_json::Value) -> ActionCall {
    ActionCall {
        action: canonicalize(action).unwrap(),
        selector: selector.into(),
        payload,
        timeout: Duration::from_secs(5),
        default_timeout: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_act_release_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    // Its own lock dir, to see every lock go, and so ports no other test uses (see
    // `a_shutdown_during_a_boot_leaves_no_lock`).
    let mut cfg = config(dir.path(), 1, 2);
    cfg.launch.lock_dir = dir.path().join("locks");
    cfg.launch.ports = PortRange { start: 19300, end: 19349 };
    let pool = Pool::start(cfg, stop.clone());
    assert!(pool.wait_warm(1, Duration::from_secs(30)).await, "a worker must turn warm");

    let lease = pool.lease(spec(Duration::from_secs(30))).await.unwrap();
    let worker = pool.status().workers.into_iter().find(|w| &w.id == lease.worker_id()).unwrap();
    let pid = worker.pid;
    // A tenant's profile and Chromium's temp dir are its owner's only, whatever the umask.
    let profile = dir.path().join("profiles").join(format!("port-{}", worker.cdp_port));
    let tmp = std::path::PathBuf::from(format!("/tmp/browserpool-w{}", worker.cdp_port));
    for d in [profile.join("home"), profile.join("chrome"), profile.join("chrome/Default"), tmp] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", d.display());
    }
    let out = lease.driver().run(&call("evaluate", "", json!("1 + 2"))).await.unwrap();
    assert_eq!(out.value, json!(3));
    let out = lease.driver().run(&call("evaluate", "", json!("window.innerWidth"))).await.unwrap();
    assert_eq!(out.value, json!(1280));
    let err = lease.driver().run(&call("evaluate", "", json!("throw new Error('boom')"))).await.unwrap_err();
    assert!(err.message.contains("boom"), "{err:?}");
    lease.release().await;
    assert!(!browserpool_pool::lock::pid_alive(pid), "released worker's process must be gone");

    pool.shutdown().await;
    stop.cancel();
    assert_profiles_gone(dir.path());
    assert_locks_gone(&dir.path().join("locks"));
}

/// No port lock is left in `locks` (the pool's shutdown waits for the last to go).
fn assert_locks_gone(locks: &std::path::Path) {
    let left: Vec<_> = std::fs::read_dir(locks)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "locks left: {left:?}");
}

/// A shutdown while a spare boots ends that boot where it stands: its Chromium is killed
/// and, once its cgroup is gone, its port is free, before `shutdown` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_boot_leaves_no_lock() {
    // At a few points of the boot: before Chromium runs, while it starts, as it turns warm.
    for delay_ms in [0, 100, 300] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(dir.path(), 1, 2);
        // Its own lock dir, so a port range no other test uses: the temp dir of a port
        // (`/tmp/browserpool-w<port>`) is made afresh by whoever locks that port.
        cfg.launch.lock_dir = dir.path().join("locks");
        cfg.launch.ports = PortRange { start: 19250, end: 19299 };
        let pool = Pool::start(cfg, tokio_util::sync::CancellationToken::new());
        assert!(pool.wait_warm(1, Duration::from_secs(30)).await, "a worker must turn warm");
        // Taking the spare starts the next one's boot.
        pool.lease(spec(Duration::from_secs(30))).await.unwrap().release().await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        pool.shutdown().await;
        assert_locks_gone(&dir.path().join("locks"));
    }
}

/// A pool of at most `max` workers in `dir`, one kept warm, and a lease of it with its
/// browser's pid.
async fn leased(dir: &std::path::Path, max: usize) -> (Pool, browserpool_pool::Lease, u32) {
    let pool = Pool::start(config(dir, 1, max), tokio_util::sync::CancellationToken::new());
    let lease =
        pool.lease(spec(Duration::from_secs(30))).await.unwrap_or_else(|e| panic!("{e}: {:?}", pool.last_boot_error()));
    let pid = pool.status().workers.into_iter().find(|w| &w.id == lease.worker_id()).unwrap().pid;
    (pool, lease, pid)
}

/// Whether process `pid` has exited (gone, or a zombie nobody has reaped yet).
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// A release for a caller that has yet to answer stops the browser at once (a tenant's page
/// runs no further while the answer is written), and ends, the worker's exit given the weight
/// of the dying, only once that answer is out; nothing is left after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_stops_its_browser_at_once_and_ends_once_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, lease, pid) = leased(dir.path(), 2).await;
    assert!(!exited(pid), "the leased browser runs");
    let (answer, answered) = tokio::sync::oneshot::channel::<()>();
    let release = tokio::spawn(lease.release_after(async move {
        let _ = answered.await;
    }));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !exited(pid) {
        assert!(std::time::Instant::now() < deadline, "the browser still runs while its release waits");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Ended now, it did not wait (or the browser was stopped only once its wait ran out).
    assert!(!release.is_finished(), "the release ended before its caller's answer");
    answer.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), release).await.expect("the release ends once answered").unwrap();
    assert!(!browserpool_pool::lock::pid_alive(pid), "released worker's process must be gone");
    pool.shutdown().await;
    assert_profiles_gone(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lease_kills_its_worker() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, lease, pid) = leased(dir.path(), 1).await;
    // Pool of one: a second lease must wait and time out.
    let err = pool.lease(spec(Duration::from_millis(200))).await.err().unwrap();
    assert!(matches!(err, browserpool_pool::PoolError::Exhausted(_)), "{err}");
    drop(lease);
    for _ in 0..100 {
        if !browserpool_pool::lock::pid_alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!browserpool_pool::lock::pid_alive(pid));
    pool.shutdown().await;
}

/// The processes of process group `pgid`.
fn group_pids(pgid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let group = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(2)?.parse::<u32>().ok());
        if group == Some(pgid) {
            found.push(pid);
        }
    }
    found
}

/// The scheduling policy of every thread of process group `pgid`, by thread id.
fn policies(pgid: u32) -> Vec<(i32, i32)> {
    let mut found = Vec::new();
    for pid in group_pids(pgid) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for task in tasks.flatten() {
            let tid: i32 = task.file_name().to_str().unwrap().parse().unwrap();
            // SAFETY: no memory preconditions; a thread gone meanwhile answers -1.
            let policy = unsafe { libc::sched_getscheduler(tid) };
            if policy >= 0 {
                found.push((tid, policy));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spares_boot_at_idle_priority_and_leases_run_at_normal() {
    let dir = tempfile::tempdir().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let pool = Pool::start(config(dir.path(), 2, 3), stop.clone());
    assert!(pool.wait_warm(2, Duration::from_secs(30)).await, "two workers must turn warm");
    // Nobody waited for either boot: both ran, and stay, at idle priority; where this process
    // could not raise them again (not root, no CAP_SYS_NICE), at normal priority.
    let spare_policy = if browserpool_pool::launcher::idle_boots() { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
    let all = |pid: u32, policy: i32| {
        let threads = policies(pid);
        assert!(threads.len() > 5, "a booted Chromium has threads: {threads:?}");
        threads.iter().all(|(_, p)| *p == policy)
    };
    let spares: Vec<u32> = pool.status().workers.iter().map(|w| w.pid).collect();
    for pid in &spares {
        assert!(all(*pid, spare_policy), "a spare not at policy {spare_policy}: {:?}", policies(*pid));
    }

    let first = pool.lease(spec(Duration::from_secs(30))).await.unwrap();
    let second = pool.lease(spec(Duration::from_secs(30))).await.unwrap();
    let pid_of = |lease: &browserpool_pool::Lease| {
        pool.status().workers.into_iter().find(|w| &w.id == lease.worker_id()).unwrap().pid
    };
    let leased = [pid_of(&first), pid_of(&second)];
    // Raised aside, right after the lease: wait for it (no sleep decides the outcome).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !leased.iter().all(|pid| all(*pid, libc::SCHED_OTHER)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still idle-priority after the lease: {:?}",
            leased.map(policies)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A page the session opens now runs at normal priority too.
    second.driver().run(&call("new_tab", "", json!(null))).await.unwrap();
    assert!(all(leased[1], libc::SCHED_OTHER), "{:?}", policies(leased[1]));
    first.release().await;
    second.release().await;
    pool.shutdown().await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_leases_of_one_tenant_share_one_browser_and_count_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let pool = Pool::start(config(dir.path(), 2, 4), stop.clone());
    assert!(pool.wait_warm(2, Duration::from_secs(30)).await, "two workers must turn warm");
    // At once, so both may find no shared browser yet and take a warm worker each.
    let wait = Duration::from_secs(30);
    let (a, b) = tokio::join!(pool.lease_context("t", spec(wait)), pool.lease_context("t", spec(wait)));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.context().is_some() && b.context().is_some() && a.context() != b.context());
    let browsers: std::collections::HashSet<_> = [a.worker_id().clone(), b.worker_id().clone()].into();
    let status = pool.status();
    // Whatever the race did, each browser is counted once, and a worker given back is warm.
    assert_eq!(status.leased, browsers.len(), "{status:?}");
    assert!(status.leased + status.warm + status.booting <= status.capacity, "{status:?}");
    let out = a.driver().run(&call("evaluate", "", json!("1 + 2"))).await.unwrap();
    assert_eq!(out.value, json!(3));
    a.release().await;
    b.release().await;
    pool.shutdown().await;
    stop.cancel();
    assert_profiles_gone(dir.path());
}

/// The renderers of process group `pgid`.
fn renderers(pgid: u32) -> Vec<u32> {
    let mut found: Vec<u32> = group_pids(pgid)
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("--type=renderer")
        })
        .collect();
    found.sort();
    found
}

/// The renderers of process group `pgid` once their set has stayed the same for a second.
async fn settled_renderers(pgid: u32) -> Vec<u32> {
    let renderers = || renderers(pgid);
    let (mut last, mut since) = (renderers(), tokio::time::Instant::now());
    let deadline = since + Duration::from_secs(20);
    while since.elapsed() < Duration::from_secs(1) {
        assert!(tokio::time::Instant::now() < deadline, "the renderers of {pgid} never settled: {last:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = renderers();
        if now != last {
            (last, since) = (now, tokio::time::Instant::now());
        }
    }
    last
}

/// Making a context starts a renderer (its blank tab's) on the browser's one UI thread: a lease
/// that found the spare context made has the next one made once its first action ended (or
/// 300 ms after it, for a session that runs none, driven over the CDP proxy), never beside
/// that action; a lease that had to wait for its context has the next one made at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_context_is_made_after_the_first_action_of_a_lease_that_found_its_spare() {
    let dir = tempfile::tempdir().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    // Three sessions: each lease holds one of the pool's places.
    let pool = Pool::start(config(dir.path(), 1, 3), stop.clone());
    assert!(pool.wait_warm(1, Duration::from_secs(30)).await, "a worker must turn warm");
    let wait = Duration::from_secs(30);
    // The tenant's first lease makes its context itself, so the next one is made at once.
    let first = pool.lease_context("t", spec(wait)).await.unwrap();
    let pgid = pool.status().workers.into_iter().find(|w| &w.id == first.worker_id()).unwrap().pid;
    // The browser's own blank tab, the first lease's and the spare's.
    let with_spare = settled_renderers(pgid).await;
    let second = pool.lease_context("t", spec(wait)).await.unwrap();
    assert_eq!(second.worker_id(), first.worker_id(), "one shared browser");
    // Its first action, 150 ms long: nothing is made beside it (a context made from the lease
    // on would have started its tab's renderer within tens of ms).
    let out = second.run(&call("evaluate", "", json!("new Promise(r => setTimeout(() => r(3), 150))"))).await.unwrap();
    assert_eq!(out.value, json!(3));
    assert_eq!(renderers(pgid), with_spare, "a context was made beside the lease's first action");
    let after = settled_renderers(pgid).await;
    assert_eq!(after.len(), with_spare.len() + 1, "the next spare's tab, made once the action ended: {after:?}");
    // A session that runs no action here still has the next one made.
    let third = pool.lease_context("t", spec(wait)).await.unwrap();
    let later = settled_renderers(pgid).await;
    assert_eq!(later.len(), after.len() + 1, "the next spare's tab, made without an action: {later:?}");
    for lease in [first, second, third] {
        lease.release().await;
    }
    pool.shutdown().await;
    stop.cancel();
    assert_profiles_gone(dir.path());
}
