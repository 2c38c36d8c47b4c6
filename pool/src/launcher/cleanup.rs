//! What workers leave behind: processes found by the directory their command line names
//! (crashpad strays, the orphans of a killed server), and worker directories removed with
//! retries.

use std::path::Path;
use std::time::Duration;

use super::profile::worker_tmp;
use crate::procfs::pid_exited;

/// Kills every Chromium a previous server left under `profiles_dir` (a server killed without
/// cleaning up: SIGKILL, OOM, power loss) and deletes their profiles and temp dirs. Call only
/// while holding the data dir's [`crate::lock::DirLock`], before any worker starts. Returns
/// how many processes it killed.
pub fn reap_orphans(profiles_dir: &Path) -> usize {
    let mut needle = profiles_dir.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    let killed = kill_naming(&needle);
    if killed > 0 {
        // SIGKILL is delivered at once, but a process exits when the kernel gets to it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while count_naming(&needle) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for entry in std::fs::read_dir(profiles_dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if let Some(port) = name.to_str().and_then(|n| n.strip_prefix("port-")).and_then(|p| p.parse::<u16>().ok()) {
            let _ = std::fs::remove_dir_all(worker_tmp(port));
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
    killed
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
