//! What `/proc` says about processes: whether one has exited, and who is in a process group;
//! a child's exit seen through a pidfd ([`ExitWatch`]); and what is mounted where. A leaf
//! (imports nothing of this crate).

/// Whether process `pid` has exited, as `/proc` shows it (for watchers that do not own the
/// process): gone, or a zombie not yet reaped.
pub(crate) fn pid_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            after_command(&stat).and_then(|mut f| f.next()?.chars().next()).is_none_or(|c| matches!(c, 'Z' | 'X'))
        }
        Err(_) => true,
    }
}

/// The fields of a `/proc/<pid>/stat` after the parenthesised command name (which may
/// contain spaces and parentheses): state, ppid, pgrp, ..., the start time 20th.
fn after_command(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace())
}

/// When process `pid` started, in clock ticks after boot; `None` when it is gone. With its
/// pid, it names one process: a pid is reused, not with the same start time.
pub(crate) fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    after_command(&stat)?.nth(19)?.parse().ok()
}

/// The mount points at or below `dir` in this process's mount namespace, deepest first (the
/// order they can be unmounted in).
pub(crate) fn mounts_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo").map(|text| mount_points_under(&text, dir)).unwrap_or_default()
}

/// [`mounts_under`] on the text of a `mountinfo`: each line's fifth field, its octal escapes
/// (`\040` for a space) undone.
fn mount_points_under(mountinfo: &str, dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let mut found: Vec<std::path::PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|escaped| {
            let (raw, mut out) = (escaped.as_bytes(), Vec::with_capacity(escaped.len()));
            let mut i = 0;
            while i < raw.len() {
                let octal =
                    raw.get(i + 1..i + 4).filter(|d| raw[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
                match octal {
                    Some(d) => {
                        out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                        i += 4;
                    }
                    None => {
                        out.push(raw[i]);
                        i += 1;
                    }
                }
            }
            std::path::PathBuf::from(std::ffi::OsString::from_vec(out))
        })
        .filter(|point| point.starts_with(dir))
        .collect();
    // Deepest first; mounts stacked on one point each appear, the top one last in the file.
    found.reverse();
    found.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    found
}

/// The processes of group `pgid`.
pub(crate) fn group_pids(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            (after_command(&stat)?.nth(2)?.parse::<u32>().ok()? == pgid).then_some(pid)
        })
        .collect()
}

/// A child's exit, seen through a pidfd (Linux 5.3 and later): it turns readable once the
/// process has exited, reaped or not, and it keeps naming that process even after its pid is
/// reused. Asking costs one `poll` and waiting costs nothing, where a read of
/// `/proc/<pid>/stat` opens, formats and closes a file each time. Where `pidfd_open` fails
/// (an older kernel, a seccomp filter) it falls back to [`pid_exited`], polled.
#[derive(Debug)]
pub(crate) struct ExitWatch {
    pid: u32,
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl ExitWatch {
    /// How often the fallback looks at `/proc` while waiting.
    const POLL: std::time::Duration = std::time::Duration::from_millis(200);

    /// Opens the watch on `pid`, which must be a child not yet waited for (so the pid still
    /// names it); needs a Tokio runtime.
    pub(crate) fn open(pid: u32) -> ExitWatch {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor (close-on-exec)
        // or -1; nothing else is read or written.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = (raw >= 0).then(|| {
            // SAFETY: `raw` is a descriptor just returned to us and owned by nothing else.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(raw as i32) }
        });
        let fd = fd.and_then(|fd| {
            // SAFETY: an `OwnedFd` is open, and names the same descriptor, until it is dropped
            // with the `AsyncFd`.
            unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
        });
        if fd.is_none() {
            tracing::debug!(pid, "no pidfd for the process: its exit is looked for in /proc");
        }
        ExitWatch { pid, fd }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process has exited.
    pub(crate) fn exited(&self) -> bool {
        match &self.fd {
            Some(fd) => readable_now(fd.get_ref()),
            None => pid_exited(self.pid),
        }
    }

    /// Returns once the process has exited.
    pub(crate) async fn wait(&self) {
        match &self.fd {
            Some(fd) => loop {
                match fd.readable().await {
                    Ok(_) if readable_now(fd.get_ref()) => return,
                    Ok(mut ready) => ready.clear_ready(),
                    // The reactor is gone: the runtime is ending, and this task with it.
                    Err(_) => std::future::pending().await,
                }
            },
            None => {
                while !pid_exited(self.pid) {
                    tokio::time::sleep(Self::POLL).await;
                }
            }
        }
    }
}

/// Whether `fd` polls readable at once (a pidfd: its process has exited).
fn readable_now(fd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, a zero timeout.
    let n = unsafe { libc::poll(&mut poll, 1, 0) };
    n > 0 && poll.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn mount_points_below_a_dir_are_found_deepest_first_and_unescaped() {
        let info = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:40 / /tmp/bp-x/port-9 rw,nosuid - tmpfs tmpfs rw,size=1024k
31 30 0:41 / /tmp/bp-x/port-9/inner rw - tmpfs tmpfs rw
32 22 0:42 / /tmp/bp-x\\040y/port-1 rw - tmpfs tmpfs rw
33 22 0:43 / /tmp/bp-xz rw - tmpfs tmpfs rw
34 30 0:44 / /tmp/bp-x/port-9 rw - tmpfs tmpfs rw
";
        let under = |dir: &str| super::mount_points_under(info, std::path::Path::new(dir));
        let p = std::path::PathBuf::from;
        // Two mounts stacked on port-9: both, to be unmounted one after the other.
        let port9 = p("/tmp/bp-x/port-9");
        assert_eq!(under("/tmp/bp-x"), vec![p("/tmp/bp-x/port-9/inner"), port9.clone(), port9]);
        assert_eq!(under("/tmp/bp-x/port-9/inner"), vec![p("/tmp/bp-x/port-9/inner")]);
        assert_eq!(under("/tmp/bp-x y"), vec![p("/tmp/bp-x y/port-1")], "\\040 is a space");
        assert!(under("/tmp/bp-none").is_empty());
    }

    use super::*;
    use std::time::Duration;

    /// A child that sleeps, and both ways of watching it: the pidfd and the `/proc` fallback.
    async fn watched() -> (tokio::process::Child, ExitWatch, ExitWatch) {
        let child = tokio::process::Command::new("sleep").arg("30").kill_on_drop(true).spawn().unwrap();
        let pid = child.id().unwrap();
        let fallback = ExitWatch { pid, fd: None };
        (child, ExitWatch::open(pid), fallback)
    }

    #[tokio::test]
    async fn an_exit_is_seen_at_once_reaped_or_not() {
        let (mut child, watch, fallback) = watched().await;
        assert!(watch.fd.is_some(), "pidfd_open failed on this kernel");
        assert!(!watch.exited() && !fallback.exited());
        // Not exited: the wait does not return.
        assert!(tokio::time::timeout(Duration::from_millis(300), watch.wait()).await.is_err());
        child.start_kill().unwrap();
        // Killed and not reaped (a zombie): seen by both.
        tokio::time::timeout(Duration::from_secs(5), watch.wait()).await.expect("pidfd wait");
        tokio::time::timeout(Duration::from_secs(5), fallback.wait()).await.expect("/proc wait");
        assert!(watch.exited() && fallback.exited());
        child.wait().await.unwrap();
        assert!(watch.exited(), "reaped, and still seen exited");
    }

    #[tokio::test]
    async fn a_wait_begun_before_the_exit_ends_with_it() {
        let (mut child, watch, _) = watched().await;
        let watch = std::sync::Arc::new(watch);
        let waiting = tokio::spawn({
            let watch = watch.clone();
            async move { watch.wait().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished());
        child.start_kill().unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("the wait ended").unwrap();
    }
}
