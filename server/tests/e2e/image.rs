//! The container image run as the Helm chart runs it: its non-root user, a read-only root, no
//! capability but `SYS_CHROOT` in the bounding set, the chart's seccomp profile. Health, the
//! HEALTHCHECK, `build_info`, a session navigating a page this test serves on loopback,
//! Chromium's sandbox and network namespace, SIGTERM, nothing left behind; then the same image
//! under the kubelet RuntimeDefault's rule for namespaces, where workers must fail to boot,
//! saying so.
//!
//! Ignored in the suite's own runs: `scripts/check-image.sh` builds the image with podman (as
//! root) and runs this with `--ignored`, the image's name in `BROWSERPOOL_TEST_IMAGE`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use axum::response::Html;
use axum::routing::get;
use browserpool_client::{action, pb, Client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::ok;

/// The Dockerfile's USER, the chart's runAsUser.
const UID_IN_IMAGE: u32 = 10001;
/// Every capability but SYS_CHROOT: the chart's `drop: [ALL], add: [SYS_CHROOT]` for a non-root
/// container keeps it in the bounding set only (Chromium's namespace sandbox chroots inside
/// its new user namespace); `--cap-add` would also put it in the server's ambient set.
const ALL_BUT_CHROOT: &str = "AUDIT_CONTROL,AUDIT_READ,AUDIT_WRITE,BLOCK_SUSPEND,BPF,CHECKPOINT_RESTORE,CHOWN,\
DAC_OVERRIDE,DAC_READ_SEARCH,FOWNER,FSETID,IPC_LOCK,IPC_OWNER,KILL,LEASE,LINUX_IMMUTABLE,MAC_ADMIN,\
MAC_OVERRIDE,MKNOD,NET_ADMIN,NET_BIND_SERVICE,NET_BROADCAST,NET_RAW,PERFMON,SETFCAP,SETGID,SETPCAP,\
SETUID,SYS_ADMIN,SYS_BOOT,SYS_MODULE,SYS_NICE,SYS_PACCT,SYS_PTRACE,SYS_RAWIO,SYS_RESOURCE,SYS_TIME,\
SYS_TTY_CONFIG,SYSLOG,WAKE_ALARM";
const TITLE: &str = "browserpool image check";

/// podman as this host runs it (runc, cgroupfs).
const PODMAN: [&str; 5] = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"];

fn podman(args: &[&str]) -> Output {
    Command::new(PODMAN[0]).args(&PODMAN[1..]).args(args).output().expect("run podman")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)).trim().to_string()
}

/// A container, removed when dropped.
struct Container {
    name: String,
}

impl Container {
    /// The image as the chart runs it, under seccomp `profile`, on host networking with the
    /// given loopback ports; writable: only `state` (as the volume) and a tmpfs /tmp.
    fn run_as_chart(image: &str, name: &str, profile: &Path, state: &Path, ports: Ports) -> Container {
        let _ = podman(&["rm", "-f", "-t", "0", name]);
        let volume = format!("{}:/var/lib/browserpool", state.display());
        let seccomp = format!("seccomp={}", profile.display());
        let env = [
            format!("BROWSERPOOL_LISTEN=127.0.0.1:{}", ports.grpc),
            format!("BROWSERPOOL_HTTP_LISTEN=127.0.0.1:{}", ports.http),
            format!("BROWSERPOOL_PORT_RANGE={}-{}", ports.cdp_first, ports.cdp_first + 9),
            "BROWSERPOOL_WARM=1".into(),
            "BROWSERPOOL_MAX_WORKERS=2".into(),
        ];
        let mut args = vec!["run", "-d", "--name", name, "--network", "host"];
        args.extend(["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096", "--health-interval", "disable"]);
        args.extend(["--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,mode=1777", "--volume", &volume]);
        args.extend(["--cap-drop", ALL_BUT_CHROOT, "--security-opt", "no-new-privileges", "--security-opt", &seccomp]);
        for e in &env {
            args.extend(["-e", e]);
        }
        args.push(image);
        let out = podman(&args);
        assert!(out.status.success(), "podman run: {}", text(&out));
        Container { name: name.to_string() }
    }

    fn inspect(&self, format: &str) -> String {
        text(&podman(&["inspect", "--format", format, &self.name]))
    }

    fn running(&self) -> bool {
        self.inspect("{{.State.Running}}") == "true"
    }

    fn logs(&self) -> String {
        text(&podman(&["logs", &self.name]))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.name]);
    }
}

#[derive(Clone, Copy)]
struct Ports {
    grpc: u16,
    http: u16,
    /// The first of ten in a row for the workers' DevTools, away from the 9300-9399 the
    /// suite's servers use on this same network namespace.
    cdp_first: u16,
}

impl Ports {
    fn free() -> Ports {
        let any = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let cdp_first = (0..1000u32)
            .map(|i| 20000 + ((seed / 7 + i * 10) % 10000) as u16)
            .find(|&first| (first..first + 10).all(free))
            .expect("ten free loopback ports in a row between 20000 and 30000");
        Ports { grpc: any(), http: any(), cdp_first }
    }
}

/// `GET path` on loopback: the status line's code and the body, or `None` when nothing answers.
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).await.ok()?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_string(&mut out)).await.ok()?.ok()?;
    let code = out.split(' ').nth(1)?.parse().ok()?;
    Some((code, out.split_once("\r\n\r\n").map_or(String::new(), |(_, body)| body.to_string())))
}

/// One process as the host sees it.
struct Proc {
    pid: u32,
    /// Its start time (field 22 of `stat`), so a reused pid is not taken for it.
    start: String,
    userns: String,
    cmd: String,
}

/// Every descendant of `root` (Chromium's sandboxed processes live in PID namespaces of their
/// own, so the container's PID namespace does not find them), from the host's /proc.
fn descendants(root: u32) -> Vec<Proc> {
    let mut procs = HashMap::new();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Some(fields) = stat_fields(pid) else { continue };
        let (Some(ppid), Some(start)) = (fields.get(1).and_then(|p| p.parse().ok()), fields.get(19)) else { continue };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ").trim().to_string();
        let userns = std::fs::read_link(format!("/proc/{pid}/ns/user")).map(|l| l.display().to_string());
        children.entry(ppid).or_default().push(pid);
        procs.insert(pid, Proc { pid, start: start.to_string(), userns: userns.unwrap_or_default(), cmd });
    }
    let mut found = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        todo.extend(children.get(&pid).into_iter().flatten());
        found.extend(procs.remove(&pid));
    }
    found
}

/// The fields of `/proc/<pid>/stat` after the command name (the state first, the parent
/// second, the start time 20th).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_string).collect())
}

fn still_running(p: &Proc) -> bool {
    stat_fields(p.pid).and_then(|f| f.get(19).cloned()).is_some_and(|start| start == p.start)
}

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The chart's seccomp profile without what RuntimeDefault refuses a container lacking
/// CAP_SYS_ADMIN (as containerd's and CRI-O's defaults have it): no unshare or setns, clone
/// only without namespace flags (NEWNS, UTS, IPC, USER, PID, NET, CGROUP: 0x7e020000), and
/// clone3 answering ENOSYS so glibc falls back to clone.
fn without_namespaces(profile: &Path, to: &Path) {
    let mut p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(profile).unwrap()).unwrap();
    let names: Vec<serde_json::Value> = p["syscalls"][0]["names"]
        .as_array()
        .expect("the profile's first rule lists the allowed syscalls")
        .iter()
        .filter(|n| !matches!(n.as_str(), Some("unshare" | "setns" | "clone3" | "clone")))
        .cloned()
        .collect();
    p["syscalls"] = serde_json::json!([
        {"names": names, "action": "SCMP_ACT_ALLOW"},
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
         "args": [{"index": 0, "value": 0x7E02_0000u64, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
    ]);
    std::fs::write(to, p.to_string()).unwrap();
}

/// The state volume, owned by the image's user as an emptyDir with fsGroup would be.
fn state_volume(work: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let state = work.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&state, Some(UID_IN_IMAGE), Some(UID_IN_IMAGE)).unwrap();
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by scripts/check-image.sh against the image it builds (BROWSERPOOL_TEST_IMAGE)"]
async fn the_image_runs_as_the_chart_runs_it() {
    let image = std::env::var("BROWSERPOOL_TEST_IMAGE").expect("BROWSERPOOL_TEST_IMAGE names the image to test");
    let started = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let state = state_volume(work.path());
    let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/browserpool/files/seccomp.json");
    let ports = Ports::free();
    // The fixture page, on loopback (the default tenant allows private networks).
    let app = axum::Router::new().route("/", get(|| async { Html(format!("<!doctype html><title>{TITLE}</title>")) }));
    let site = format!("http://{}/", crate::helpers::serve_loopback(app).await);

    let name = format!("browserpool-check-{}", std::process::id());
    let ctr = Container::run_as_chart(&image, &name, &profile, &state, ports);
    let ctr_pid: u32 = ctr.inspect("{{.State.Pid}}").parse().expect("the container's pid");
    let caps = (status_field(ctr_pid, "CapEff:"), status_field(ctr_pid, "CapBnd:"));
    assert_eq!(caps, ("0000000000000000".into(), "0000000000040000".into()), "none effective, SYS_CHROOT bounding");
    eprintln!(
        "ok    started {name} as uid {}, read-only root, no capabilities, seccomp {}",
        ctr.inspect("{{.Config.User}}"),
        profile.display()
    );

    let healthy = Instant::now() + Duration::from_secs(30);
    while http_get(ports.http, "/healthz").await.map(|(code, _)| code) != Some(200) {
        assert!(ctr.running(), "the container exited before /healthz answered:\n{}", ctr.logs());
        assert!(Instant::now() < healthy, "/healthz did not answer 200 within 30 s:\n{}", ctr.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let check = podman(&["healthcheck", "run", &name]);
    assert!(check.status.success(), "the image's HEALTHCHECK failed: {}", text(&check));
    let (_, metrics) = http_get(ports.http, "/metrics").await.expect("/metrics answers");
    let build_info = metrics.lines().find(|l| l.starts_with("browserpool_build_info")).unwrap_or_default();
    let revision = format!("revision=\"{}\"", browserpool_server::REVISION);
    assert!(build_info.contains(&revision), "/metrics build_info is {build_info:?}, not {revision}");
    eprintln!("ok    /healthz 200, HEALTHCHECK healthy, {build_info}");

    let token = std::fs::read_to_string(state.join("data/admin.token")).expect("admin.token in the data dir");
    let client = Client::connect(format!("http://127.0.0.1:{}", ports.grpc), token.trim()).await.unwrap();
    let id = client.acquire(60_000).await.expect("Acquire").session_id;
    eprintln!("ok    Acquire: session {id}");
    let procs = sandboxed_workers(&client, &ctr, ctr_pid).await;

    ok(&client.act(&id, action("navigate", "", site.clone())).await.expect("Act navigate"));
    let title = ok(&client.act(&id, action("title", "", serde_json::Value::Null)).await.expect("Act title"));
    assert_eq!(title, serde_json::json!(TITLE));
    eprintln!("ok    Act navigate {site}, title {title}");
    client.release(&id).await.expect("Release");
    let got = client.get(&id).await.expect("Get");
    assert_eq!(got.state(), pb::SessionState::Closed, "{got:?}");

    let term = podman(&["kill", "--signal", "TERM", &name]);
    assert!(term.status.success(), "podman kill: {}", text(&term));
    let waited = Command::new("timeout").arg("60").args(PODMAN).args(["wait", &name]).output().unwrap();
    assert_eq!(text(&waited), "0", "the container's exit after SIGTERM (within 60 s):\n{}", ctr.logs());
    assert!(ctr.logs().contains("stopped"), "the server did not log its stop:\n{}", ctr.logs());
    let left: Vec<&Proc> = procs.iter().filter(|p| still_running(p)).collect();
    assert!(
        left.is_empty(),
        "processes of the container left on the host: {:?}",
        left.iter().map(|p| &p.cmd).collect::<Vec<_>>()
    );
    // Workers' profiles live in the container's /tmp (a tmpfs, gone with it), never in the
    // state volume, which holds only the server's own files.
    assert!(!state.join("data/profiles").exists(), "worker profiles in the state volume");
    eprintln!("ok    SIGTERM: exited 0, no Chromium process left, no profile in the state volume");
    drop(ctr);

    let strict = work.path().join("no-namespaces.json");
    without_namespaces(&profile, &strict);
    let ctr = Container::run_as_chart(&image, &format!("{name}-runtime-default"), &strict, &state, ports);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        let ready = http_get(ports.http, "/readyz").await;
        if let Some((503, body)) = &ready {
            if body.contains("fail to boot") {
                break body.clone();
            }
        }
        assert!(ctr.running(), "the container exited under RuntimeDefault's namespace rule:\n{}", ctr.logs());
        assert!(Instant::now() < deadline, "/readyz said {ready:?}, not that workers fail to boot:\n{}", ctr.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("ok    under RuntimeDefault's rule for namespaces, /readyz: {}", ready.trim());
    eprintln!("ok    the image as the chart runs it: checked in {} s", started.elapsed().as_secs());
}

/// Chromium's sandbox as the chart runs it: no `--no-sandbox` anywhere, the zygote in a user
/// namespace of its own, the browser as the image's uid in a network namespace of its own, and
/// the server's own check saying so. Returns the container's processes, to find them gone later.
async fn sandboxed_workers(client: &Client, ctr: &Container, ctr_pid: u32) -> Vec<Proc> {
    let procs = descendants(ctr_pid);
    let unsandboxed = procs.iter().find(|p| p.cmd.contains("--no-sandbox"));
    assert!(unsandboxed.is_none(), "a Chromium runs with --no-sandbox: {:?}", unsandboxed.map(|p| &p.cmd));
    let browser = procs.iter().find(|p| p.cmd.contains("--remote-debugging-port=") && !p.cmd.contains("--type="));
    let zygote = procs.iter().find(|p| p.cmd.contains("--type=zygote") && !p.cmd.contains("--no-zygote-sandbox"));
    let all: Vec<&str> = procs.iter().map(|p| p.cmd.as_str()).collect();
    let (Some(browser), Some(zygote)) = (browser, zygote) else {
        panic!("no browser and zygote process in the container: {all:#?}")
    };
    assert_ne!(zygote.userns, browser.userns, "Chromium's zygote shares the browser's user namespace: no sandbox");
    let uid = status_field(browser.pid, "Uid:");
    assert!(uid.starts_with(&format!("{UID_IN_IMAGE} ")), "the worker's browser runs as uid {uid}, not {UID_IN_IMAGE}");
    let status = client.admin().pool_status(pb::PoolStatusRequest {}).await.expect("PoolStatus").into_inner();
    let sandbox = &status.replicas[0].sandbox;
    assert!(sandbox.starts_with("sandboxed: workers run as the server's uid") && !status.unsandboxed, "{sandbox}");
    let net = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_ne!(net(browser.pid), net(ctr_pid), "the worker's browser shares the server's network namespace");
    assert!(
        ctr.logs().contains("inside an unprivileged user namespace"),
        "the server did not say its workers' namespaces are unprivileged ones"
    );
    eprintln!("ok    Chromium sandboxed ({} processes), workers as uid {UID_IN_IMAGE} in a network namespace of their own; PoolStatus: {sandbox}", all.len());
    procs
}
