//! What `/proc` says about processes: whether one has exited, and who is in a process group.
//! A leaf (reads files, imports nothing of this crate).

/// Whether process `pid` has exited, as `/proc` shows it (for watchers that do not own the
/// process): gone, or a zombie not yet reaped.
pub(crate) fn pid_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name, which may contain spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|c| matches!(c, 'Z' | 'X')),
        Err(_) => true,
    }
}

/// The processes of group `pgid`.
pub(crate) fn group_pids(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // Fields after the parenthesised command: state, ppid, pgrp, ...
            let rest = stat.rsplit_once(')').map(|(_, r)| r)?;
            (rest.split_whitespace().nth(2)?.parse::<u32>().ok()? == pgid).then_some(pid)
        })
        .collect()
}
