//! The fences around a worker's Chromium that hold whatever a CDP method list forgot: a uid of
//! its own (when the server is root), Chromium's own sandbox, and the check that both are on.
//!
//! A root server runs each worker as an unprivileged uid and gid of its own with no
//! supplementary groups: the first uid of `--worker-uids` plus the worker's CDP port. The port
//! lock is host-wide, so two servers on one host (whatever their port ranges) never hand out
//! the same uid, and a uid is used again
//! only after every process left running as it was killed ([`kill_uid`]). Such a uid can read
//! nothing of the server (its data dir is the server's, mode 0700) and nothing of another
//! worker (each profile belongs to its own worker's uid, mode 0700). As any uid but root,
//! Chromium keeps its sandbox (renderers under a seccomp filter, in user namespaces of their
//! own), so a renderer exploit cannot even reach what the worker's uid could.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use crate::lock::PortRange;
use crate::procfs::{group_pids, pid_exited};

/// The default `--worker-uids`: high enough to miss the ranges `useradd` hands out as
/// subordinate ids; the server checks it names no user, group or subordinate range.
pub const DEFAULT_WORKER_UIDS: &str = "1800000000-1800065535";

/// An inclusive range of uids (each also used as the gid), written `START-END`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    /// First uid.
    pub start: u32,
    /// Last uid, inclusive.
    pub end: u32,
}

impl FromStr for UidRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, b) = s.split_once('-').ok_or_else(|| format!("uid range {s:?} is not START-END"))?;
        let start: u32 = a.trim().parse().map_err(|_| format!("bad first uid {a:?}"))?;
        let end: u32 = b.trim().parse().map_err(|_| format!("bad last uid {b:?}"))?;
        if start == 0 || end < start || end == u32::MAX {
            return Err(format!("uid range {s:?} is empty, starts at 0 (root) or ends at {}", u32::MAX));
        }
        Ok(UidRange { start, end })
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

impl UidRange {
    fn contains(&self, uid: u32) -> bool {
        (self.start..=self.end).contains(&uid)
    }

    /// The uid of the worker on CDP port `port`: the first uid plus the port.
    pub(crate) fn uid_for_port(&self, port: u16) -> u32 {
        self.start + u32::from(port)
    }

    /// Checks the range holds a uid for every port of `ports`, leaves out `server_uid`, and names no
    /// user or group of this host, nor anyone's subordinate ids: a worker must share its uid
    /// with nothing. `etc` is `/etc` (a parameter for tests).
    pub fn check(&self, ports: PortRange, server_uid: u32, etc: &Path) -> Result<(), String> {
        if u64::from(self.start) + u64::from(ports.end) > u64::from(self.end) {
            return Err(format!(
                "--worker-uids {self} ends before {}: a worker runs as the first uid plus its CDP port, and --port-range {ports} goes to {}",
                u64::from(self.start) + u64::from(ports.end),
                ports.end
            ));
        }
        if self.contains(server_uid) {
            return Err(format!("--worker-uids {self} contains the server's own uid {server_uid}"));
        }
        for (file, id_field) in [("passwd", 2), ("group", 2)] {
            for line in read_lines(&etc.join(file)) {
                let fields: Vec<&str> = line.split(':').collect();
                if let Some(id) = fields.get(id_field).and_then(|f| f.parse::<u32>().ok()) {
                    if self.contains(id) {
                        return Err(format!(
                            "--worker-uids {self} contains id {id} of {:?} in {}: choose a range no user or group has",
                            fields[0],
                            etc.join(file).display()
                        ));
                    }
                }
            }
        }
        for file in ["subuid", "subgid"] {
            for line in read_lines(&etc.join(file)) {
                let fields: Vec<&str> = line.split(':').collect();
                let (Some(first), Some(count)) = (
                    fields.get(1).and_then(|f| f.parse::<u64>().ok()),
                    fields.get(2).and_then(|f| f.parse::<u64>().ok()),
                ) else {
                    continue;
                };
                let last = first + count.max(1) - 1;
                if first <= u64::from(self.end) && u64::from(self.start) <= last {
                    return Err(format!(
                        "--worker-uids {self} overlaps {:?}'s subordinate ids {first}-{last} in {}",
                        fields[0],
                        etc.join(file).display()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Makes `dir`, the directory every worker's profile lives in, if missing, mode 0711: workers
/// pass through it to their own profile (each 0700, their uid's) but cannot list it. With
/// worker uids, also checks that every directory above it lets other uids pass, saying which
/// one does not (a profile under `/root`, mode 0700, is out of a worker uid's reach).
pub fn prepare_profiles_dir(dir: &Path, worker_uids: bool) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let io = |what: &str, e: std::io::Error| format!("{what} {}: {}", dir.display(), crate::lock::explain_io(&e, dir));
    std::fs::DirBuilder::new().recursive(true).mode(0o711).create(dir).map_err(|e| io("create", e))?;
    // Made before this server by someone else (a predictable name in a shared temp dir), or a
    // link: they could swap a worker's directory in it for a link, and the server would make,
    // mount or chown what that names.
    let meta = std::fs::symlink_metadata(dir).map_err(|e| io("stat", e))?;
    if !own_dir(&meta) {
        return Err(format!(
            "{} is not a directory of this server's uid {} (a link, or made by uid {}): remove it, or choose another with --profiles-in",
            dir.display(),
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() },
            std::os::unix::fs::MetadataExt::uid(&meta)
        ));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).map_err(|e| io("chmod", e))?;
    if !worker_uids {
        return Ok(());
    }
    let real = dir.canonicalize().map_err(|e| io("resolve", e))?;
    for above in real.ancestors().skip(1) {
        let mode = std::fs::metadata(above).map_err(|e| io("stat", e))?.permissions().mode();
        if mode & 0o001 == 0 {
            return Err(format!(
                "workers run as uids of their own and cannot reach their profiles in {}: {} is mode {:o}; \
                 let others pass (chmod o+x {}) or set TMPDIR to a directory they can pass",
                dir.display(),
                above.display(),
                mode & 0o7777,
                above.display()
            ));
        }
    }
    Ok(())
}

/// Whether `meta` (of `symlink_metadata`: a link is not followed) is a directory of this
/// process's uid: one the server made, which nobody else can swap for a link to elsewhere.
pub(crate) fn own_dir(meta: &std::fs::Metadata) -> bool {
    // SAFETY: geteuid has no preconditions.
    meta.is_dir() && std::os::unix::fs::MetadataExt::uid(meta) == unsafe { libc::geteuid() }
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().filter(|l| !l.trim_start().starts_with('#')).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The real uid of process `pid`, from `/proc`.
pub fn process_uid(pid: u32) -> Option<u32> {
    status_field(pid, "Uid:")?.split_whitespace().next()?.parse().ok()
}

/// A line of `/proc/<pid>/status`, after its name.
fn status_field(pid: u32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string())
}

/// The pids of every live process whose real uid is `uid`.
fn pids_of_uid(uid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| process_uid(*pid) == Some(uid) && !pid_exited(*pid))
        .collect()
}

/// SIGKILLs every process running as `uid` and, with `wait`, waits (up to 5 s) for them to be
/// gone; true when none is left. Only for a worker uid, which nothing but that worker ever runs
/// as. Blocking: it reads `/proc`.
pub(crate) fn kill_uid(uid: u32, wait: bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let pids = pids_of_uid(uid);
        if pids.is_empty() {
            return true;
        }
        for pid in &pids {
            // SAFETY: kill on a pid we just read; the uid is a worker's, so a reused pid
            // running as it is still that worker's.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
        if !wait {
            return false;
        }
        if std::time::Instant::now() >= deadline {
            tracing::warn!(uid, left = pids.len(), "processes of a worker uid survive sigkill");
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the check of a booted worker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxReport {
    /// Chromium's sandbox is on (and, for a root server, the worker runs as its own uid).
    pub sandboxed: bool,
    /// What was seen, in words, for the log, `/readyz` and `PoolStatus`.
    pub detail: String,
}

/// How long [`inspect`] waits for a renderer to look at (the first page's comes up within a
/// second of DevTools on an idle host; a boot at idle priority on a busy one takes longer).
const RENDERER_WAIT: Duration = Duration::from_secs(20);

/// Looks at a booted worker's processes (group `pgid`) in `/proc`: that the browser runs as
/// `uid` when one is expected, that no process has `--no-sandbox`, and that a renderer is under
/// a seccomp filter (`Seccomp: 2`) in a user namespace other than the server's (or, when no
/// renderer came up within [`RENDERER_WAIT`], that its zygote is). Blocking.
pub fn inspect(pgid: u32, uid: Option<u32>) -> SandboxReport {
    let unsandboxed = |detail: String| SandboxReport { sandboxed: false, detail };
    if let Some(want) = uid {
        match process_uid(pgid) {
            Some(got) if got == want => {}
            Some(got) => return unsandboxed(format!("the browser runs as uid {got}, not its worker uid {want}")),
            None => return unsandboxed("the browser exited before it could be inspected".into()),
        }
    }
    let own_ns = std::fs::read_link("/proc/self/ns/user").ok();
    let deadline = std::time::Instant::now() + RENDERER_WAIT;
    loop {
        let procs: Vec<(u32, String)> = group_pids(pgid)
            .into_iter()
            .filter_map(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                Some((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")))
            })
            .collect();
        if procs.iter().any(|(_, c)| c.contains(" --no-sandbox")) {
            return unsandboxed("chromium runs with --no-sandbox".into());
        }
        // A renderer forked a moment ago may not have its seccomp filter yet: it sets it up
        // itself once started, so a renderer without one is looked at again until the deadline.
        let renderers = procs.iter().filter(|(_, c)| c.contains("--type=renderer")).map(|(pid, _)| *pid);
        let mut seen = None;
        for pid in renderers {
            let seccomp = status_field(pid, "Seccomp:");
            let ns = std::fs::read_link(format!("/proc/{pid}/ns/user")).ok();
            if ns.is_none() || ns == own_ns {
                seen = Some("a renderer shares the server's user namespace".to_string());
            } else if seccomp.as_deref() != Some("2") {
                seen = Some(format!(
                    "a renderer runs without a seccomp filter (Seccomp: {})",
                    seccomp.unwrap_or_default()
                ));
            } else {
                let who = uid.map_or_else(|| "the server's uid".to_string(), |u| format!("uid {u}"));
                return SandboxReport {
                    sandboxed: true,
                    detail: format!(
                        "sandboxed: workers run as {who}; renderers under seccomp, in user namespaces of their own"
                    ),
                };
            }
        }
        if std::time::Instant::now() >= deadline {
            if let Some(why) = seen {
                return unsandboxed(why);
            }
            // No renderer yet (a boot at idle priority on a busy host): the zygote that will
            // fork them shows the namespace sandbox; seccomp comes with the renderer itself.
            let zygote = procs
                .iter()
                .filter(|(_, c)| c.contains("--type=zygote") && !c.contains("--no-zygote-sandbox"))
                .any(|(pid, _)| {
                    std::fs::read_link(format!("/proc/{pid}/ns/user")).ok().is_some_and(|ns| Some(ns) != own_ns)
                });
            return if zygote {
                let who = uid.map_or_else(|| "the server's uid".to_string(), |u| format!("uid {u}"));
                SandboxReport {
                    sandboxed: true,
                    detail: format!("sandboxed: workers run as {who}; the zygote in a user namespace of its own (no renderer within {RENDERER_WAIT:?} to look at)"),
                }
            } else {
                unsandboxed(format!(
                    "no renderer within {RENDERER_WAIT:?}, and no zygote in a user namespace of its own"
                ))
            };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profiles dir somebody made first (another uid's, or a link to one) is refused: they
    /// could swap a worker's directory in it for a link to anything.
    #[test]
    fn a_profiles_dir_made_by_someone_else_or_a_link_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let real = top.path().join("real");
        prepare_profiles_dir(&real, false).unwrap();
        let link = top.path().join("browserpool-profiles-x");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let refused = prepare_profiles_dir(&link, false).unwrap_err();
        assert!(refused.contains("not a directory of this server's uid"), "{refused}");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = top.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
            let refused = prepare_profiles_dir(&theirs, false).unwrap_err();
            assert!(refused.contains("made by uid 4242"), "{refused}");
        }
    }

    fn ports() -> PortRange {
        PortRange { start: 9300, end: 9399 }
    }

    #[test]
    fn ranges_parse_and_reject() {
        assert_eq!("1000-1099".parse::<UidRange>().unwrap(), UidRange { start: 1000, end: 1099 });
        for bad in ["0-10", "10-5", "x-y", "100", "5-4294967295"] {
            assert!(bad.parse::<UidRange>().is_err(), "{bad}");
        }
        DEFAULT_WORKER_UIDS.parse::<UidRange>().unwrap();
    }

    #[test]
    fn a_worker_uid_follows_its_port() {
        let uids: UidRange = "50000-59999".parse().unwrap();
        assert_eq!(uids.uid_for_port(9300), 59300);
        assert_eq!(uids.uid_for_port(9399), 59399);
    }

    #[test]
    fn check_refuses_small_ranges_the_server_and_known_ids() {
        let etc = tempfile::tempdir().unwrap();
        std::fs::write(etc.path().join("passwd"), "root:x:0:0::/root:/bin/sh\nci:x:5050:5050::/home/ci:/bin/sh\n")
            .unwrap();
        std::fs::write(etc.path().join("group"), "root:x:0:\nweb:x:6010:\n").unwrap();
        std::fs::write(etc.path().join("subuid"), "ci:100000:65536\n").unwrap();
        let check = |r: &str| r.parse::<UidRange>().unwrap().check(ports(), 0, etc.path());
        assert!(check("7000-16398").unwrap_err().contains("ends before 16399"), "too small for the ports");
        assert!(check("1000-20000").unwrap_err().contains("\"ci\""), "a user's uid");
        assert!(check("6000-16000").unwrap_err().contains("\"web\""), "a group's gid");
        assert!(check("160000-170000").unwrap_err().contains("subordinate"), "a subuid range");
        assert!("7000-17000"
            .parse::<UidRange>()
            .unwrap()
            .check(ports(), 7042, etc.path())
            .unwrap_err()
            .contains("own uid"));
        check("7000-16399").unwrap();
        check(DEFAULT_WORKER_UIDS).unwrap();
    }
}
