//! What workers leave behind: processes found by the directory their command line names
//! (crashpad strays, the orphans of a killed server), and worker directories removed with
//! retries.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::profile::{unmount_under, worker_tmp};
use crate::procfs::{pid_exited, start_ticks};

/// Kills every Chromium a previous server left under `profiles_dir` (a server killed without
/// cleaning up: SIGKILL, OOM, power loss) and deletes their profiles and temp dirs. Call only
/// while holding the data dir's [`crate::lock::DirLock`], before any worker starts. Returns
/// how many processes it killed.
pub fn reap_orphans(profiles_dir: &Path) -> usize {
    reap_dir(profiles_dir, true)
}

/// [`reap_orphans`]; with `worker_tmps`, each worker's temp dir too (named by its port only:
/// right for this server's own dirs, not for another's, whose ports a live server may hold).
fn reap_dir(profiles_dir: &Path, worker_tmps: bool) -> usize {
    let killed = kill_under(profiles_dir);
    remove_entries(profiles_dir, worker_tmps);
    killed
}

/// Kills every process whose command line names a path under `dir`, and waits (at most 5 s)
/// for them to be gone. Returns how many it killed.
fn kill_under(dir: &Path) -> usize {
    let mut needle = dir.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    let killed = kill_naming(&needle);
    if killed > 0 {
        // SIGKILL is delivered at once, but a process exits when the kernel gets to it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while count_naming(&needle) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    killed
}

/// Removes what `profiles_dir` holds (see [`reap_dir`] for `worker_tmps`).
fn remove_entries(profiles_dir: &Path, worker_tmps: bool) {
    // A killed server's profiles are still mounted: emptied, a mount point cannot be removed.
    unmount_under(profiles_dir);
    for entry in std::fs::read_dir(profiles_dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let port = name.to_str().and_then(|n| n.strip_prefix("port-")).and_then(|p| p.parse::<u16>().ok());
        if let Some(port) = port.filter(|_| worker_tmps) {
            let _ = std::fs::remove_dir_all(worker_tmp(port));
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

/// The pids whose command line contains `needle`.
fn pids_naming(needle: &[u8]) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id() as libc::pid_t;
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            (pid != me && cmdline.windows(needle.len()).any(|w| w == needle)).then_some(pid)
        })
        .collect()
}

fn count_naming(needle: &[u8]) -> usize {
    pids_naming(needle).into_iter().filter(|pid| !pid_exited(*pid as u32)).count()
}

/// SIGKILLs every process whose command line contains `needle`, and its process group (a
/// worker's renderers need not name its profile, but share its group); returns how many
/// processes named it.
fn kill_naming(needle: &[u8]) -> usize {
    let pids = pids_naming(needle);
    // SAFETY: getpgid/kill/killpg on pids we just read; a race with pid reuse would need the
    // new process to name the same browserpool directory. Our own group is never signalled.
    unsafe {
        let ours = libc::getpgid(0);
        for pid in &pids {
            let group = libc::getpgid(*pid);
            if group > 1 && group != ours {
                libc::killpg(group, libc::SIGKILL);
            }
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    pids.len()
}

/// Kills processes outside the group that still name this profile (Chromium's crashpad
/// handlers start their own sessions; `HOME` points into the profile so they name it).
pub(super) fn kill_strays(profile: &Path) {
    // With the trailing slash `.../port-930/` never matches `.../port-9300/`.
    let mut needle = profile.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    kill_naming(&needle);
}

/// What every server's profiles dir is named first (`browserpool-profiles-<hash of its data
/// dir>`): only such directories are ever reaped for another server.
pub const PROFILES_PREFIX: &str = "browserpool-profiles-";

/// A server's claim on its profiles dirs, in the lock dir, as `<profiles dir's name>.owner`:
/// the owner (its pid, when it started and its pid namespace) on the first line, each dir on
/// a line of its own. A server killed without cleaning up (SIGKILL, OOM) whose data dir is
/// gone leaves its profiles behind for good otherwise: a server on the same data dir reaps its
/// own at start, no other server knew whose they were.
fn claim_file(lock_dir: &Path, dirs: &[PathBuf]) -> Option<PathBuf> {
    let name = dirs.first()?.file_name()?.to_str()?;
    Some(lock_dir.join(format!("{name}.owner")))
}

/// This process as an owner: pid, start time (clock ticks after boot) and pid namespace.
fn this_owner() -> Option<String> {
    let pid = std::process::id();
    let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
    Some(format!("{pid} {} {}", start_ticks(pid)?, ns.display()))
}

/// Whether the owner a claim names may still run: the same pid with the same start time, or
/// one this process cannot judge (another pid namespace, a line it cannot read).
fn owner_may_run(owner: &str) -> bool {
    let mut parts = owner.split_whitespace();
    let (Some(pid), Some(start), Some(ns)) = (parts.next(), parts.next(), parts.next()) else { return true };
    let ours = std::fs::read_link("/proc/self/ns/pid").ok();
    if ours.as_deref() != Some(Path::new(ns)) {
        return true;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return true };
    start_ticks(pid) == Some(start)
}

/// Records in `lock_dir` that this process owns `dirs` (its profiles dir first).
pub fn claim_profiles(lock_dir: &Path, dirs: &[PathBuf]) -> std::io::Result<()> {
    let Some(file) = claim_file(lock_dir, dirs) else { return Ok(()) };
    let owner = this_owner().ok_or_else(|| std::io::Error::other("this process's /proc entry cannot be read"))?;
    let lines: Vec<String> = std::iter::once(owner).chain(dirs.iter().map(|d| d.display().to_string())).collect();
    std::fs::write(file, lines.join("\n") + "\n")
}

/// Withdraws the claim [`claim_profiles`] made, once the dirs are gone.
pub fn unclaim_profiles(lock_dir: &Path, dirs: &[PathBuf]) {
    if let Some(file) = claim_file(lock_dir, dirs) {
        let _ = std::fs::remove_file(file);
    }
}

/// Reaps the profiles dirs of the servers that claimed some in `lock_dir` and are gone
/// (their Chromiums killed, their dirs removed), and their claims; leaves `own` (this
/// server's claim) and every claim whose owner may run. A dir is only ever removed when it
/// is an absolute path named [`PROFILES_PREFIX`]`...`, a directory (not a link) owned by this
/// process's uid: a claim file cannot make it remove anything else. A claim stays while one of
/// its dirs could not be removed. Returns the dirs removed.
pub fn reap_abandoned(lock_dir: &Path, own: &[PathBuf]) -> usize {
    let own = claim_file(lock_dir, own);
    let mut removed = 0;
    for entry in std::fs::read_dir(lock_dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let is_claim =
            entry.file_name().to_str().is_some_and(|n| n.starts_with(PROFILES_PREFIX) && n.ends_with(".owner"));
        if !is_claim || Some(&path) == own.as_ref() {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let mut lines = text.lines();
        if owner_may_run(lines.next().unwrap_or_default()) {
            continue;
        }
        // Kept while a dir of it could not be removed, for the next server to try again.
        let mut all_gone = true;
        for dir in lines.map(Path::new).filter(|d| reapable(d)) {
            kill_under(dir);
            // Taken over while its processes were looked for (a server started on that data
            // dir claims it first thing): its dirs are that server's now.
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                all_gone = false;
                break;
            }
            remove_entries(dir, false);
            match std::fs::remove_dir(dir) {
                Ok(()) => removed += 1,
                Err(_) => all_gone = false,
            }
        }
        if all_gone {
            let _ = std::fs::remove_file(&path);
        }
    }
    removed
}

/// Whether `dir` looks like what a server made for its profiles (see [`reap_abandoned`]).
fn reapable(dir: &Path) -> bool {
    let named = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(PROFILES_PREFIX));
    dir.is_absolute() && named && std::fs::symlink_metadata(dir).is_ok_and(|m| crate::sandbox::own_dir(&m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim as a server gone for good would have left it: a pid that ran and ended.
    fn dead_owner() -> String {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
        format!("{pid} 12345 {}", ns.display())
    }

    fn claim(lock_dir: &Path, name: &str, owner: &str, dirs: &[&Path]) {
        let lines: Vec<String> =
            std::iter::once(owner.to_string()).chain(dirs.iter().map(|d| d.display().to_string())).collect();
        std::fs::write(lock_dir.join(format!("{name}.owner")), lines.join("\n")).unwrap();
    }

    #[test]
    fn a_gone_servers_profiles_are_reaped_and_a_live_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let (locks, parent) = (root.path().join("locks"), root.path().join("tmp"));
        std::fs::create_dir_all(&locks).unwrap();
        let dead = parent.join(format!("{PROFILES_PREFIX}dead"));
        std::fs::create_dir_all(dead.join("port-9300/chrome")).unwrap();
        std::fs::create_dir_all(dead.join("files/w-1")).unwrap();
        // A process of the gone server's, still running: its command line names the dir.
        std::fs::write(dead.join("port-9300/log"), "").unwrap();
        let mut stray = std::process::Command::new("tail").arg("-f").arg(dead.join("port-9300/log")).spawn().unwrap();
        claim(&locks, &format!("{PROFILES_PREFIX}dead"), &dead_owner(), &[&dead]);
        // This process's own claim (a live server's), and this server's own dirs.
        let live = parent.join(format!("{PROFILES_PREFIX}live"));
        std::fs::create_dir_all(live.join("port-9301")).unwrap();
        claim_profiles(&locks, std::slice::from_ref(&live)).unwrap();
        let own = parent.join(format!("{PROFILES_PREFIX}own"));

        assert_eq!(reap_abandoned(&locks, std::slice::from_ref(&own)), 1);
        assert!(!dead.exists(), "the gone server's profiles are removed");
        assert!(!locks.join(format!("{PROFILES_PREFIX}dead.owner")).exists(), "and its claim");
        let status = stray.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "its stray process was killed: {status:?}");
        assert!(live.join("port-9301").exists(), "a live server's profiles are kept");

        claim_profiles(&locks, std::slice::from_ref(&own)).unwrap();
        unclaim_profiles(&locks, std::slice::from_ref(&own));
        assert!(!locks.join(format!("{PROFILES_PREFIX}own.owner")).exists());
    }

    #[test]
    fn a_claim_never_removes_what_a_server_did_not_make() {
        let root = tempfile::tempdir().unwrap();
        let locks = root.path().join("locks");
        std::fs::create_dir_all(&locks).unwrap();
        let precious = root.path().join("precious");
        std::fs::create_dir_all(precious.join("inside")).unwrap();
        let link = root.path().join(format!("{PROFILES_PREFIX}link"));
        std::os::unix::fs::symlink(&precious, &link).unwrap();
        let relative = Path::new("browserpool-profiles-relative");
        claim(&locks, &format!("{PROFILES_PREFIX}a"), &dead_owner(), &[&precious, &link, relative]);
        // A server in another pid namespace may run: its claim is left as it is.
        let elsewhere = root.path().join(format!("{PROFILES_PREFIX}elsewhere"));
        std::fs::create_dir_all(&elsewhere).unwrap();
        claim(&locks, &format!("{PROFILES_PREFIX}b"), "1 1 pid:[1]", &[&elsewhere]);
        // Not a claim at all.
        claim(&locks, "other", &dead_owner(), &[&elsewhere]);

        assert_eq!(reap_abandoned(&locks, &[]), 0);
        assert!(precious.join("inside").exists() && link.exists(), "nothing but a server's own dirs");
        assert!(elsewhere.exists() && locks.join(format!("{PROFILES_PREFIX}b.owner")).exists());
        assert!(locks.join("other.owner").exists());
    }
}
