//! The Chromium executable and its command line: where it is found, the flags and disabled
//! features every worker gets, and the arguments and environment of one worker's launch.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::profile::Dirs;
use super::LaunchConfig;
use crate::error::PoolError;

/// Executable names tried on PATH when `--chrome` is not given, in order. The headless shell
/// comes first: it is Chromium's engine and DevTools without the browser's windows, profile
/// services and UI, and boots in about a third of the CPU and takes 60% of the memory of
/// `chromium --headless` (which is the whole browser with its windows unseen). What it does
/// differently is in the README ("Which Chromium").
pub const CHROME_NAMES: &[&str] = &["chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"];

/// Debian's `chromium-headless-shell` on PATH is a script that runs this binary without
/// `exec`, so the process started would be a shell: the browser itself is started instead.
const DEBIAN_HEADLESS_SHELL: &str = "/usr/lib/chromium/chromium-headless-shell";

/// The literal of [`DISABLED_FEATURES`], for `concat!` in [`CHROME_FLAGS`].
macro_rules! disabled_features {
    () => {
        "WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup,SpareRendererForSitePerProcess"
    };
}

/// The Chromium features every worker runs without (its `--disable-features`). Headless
/// Chromium is the whole browser with its windows unseen: every window (each browser context
/// of a shared browser opens one, as does every worker at boot) preloads the omnibox's WebUI
/// popups in a renderer of their own, about 300 ms of CPU on a 2-core host, more than the
/// page itself; nobody can type into that omnibox. The spare renderer Chromium keeps ready
/// for the next navigation is thrown away whenever the next navigation is in another browser
/// context, as it is from one session to the next; a session's tab is opened ahead, so its
/// first navigation has a renderer already.
pub const DISABLED_FEATURES: &str = disabled_features!();

/// Flags every worker gets. The background-networking ones keep Chromium from calling out
/// (these machines have no network, and a pool must not phone home anyway).
pub const CHROME_FLAGS: &[&str] = &[
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    // The headless shell sends no `Accept-Language` without it; the full browser's own default.
    "--accept-lang=en-US,en",
    // Chromium keeps only the last `--disable-features`: this is the only one.
    concat!("--disable-features=", disabled_features!()),
];

/// Finds the Chromium executable: `explicit` if given, else the first of [`CHROME_NAMES`]
/// on PATH; Debian's script around the headless shell resolves to the binary it runs.
pub fn find_chrome(explicit: Option<&Path>) -> Result<PathBuf, PoolError> {
    let found = match explicit {
        Some(path) if is_executable(path) => path.to_path_buf(),
        Some(path) if path.components().count() == 1 => {
            search_path(&path.to_string_lossy()).ok_or_else(|| PoolError::BadChromium(path.display().to_string()))?
        }
        Some(path) => return Err(PoolError::BadChromium(path.display().to_string())),
        None => CHROME_NAMES
            .iter()
            .find_map(|name| search_path(name))
            .ok_or_else(|| PoolError::NoChromium { tried: CHROME_NAMES.join(", ") })?,
    };
    Ok(unwrap_debian_script(found, Path::new(DEBIAN_HEADLESS_SHELL)))
}

/// The first executable file `name` in a directory of PATH.
pub(crate) fn search_path(name: &str) -> Option<PathBuf> {
    search_dirs(name, &std::env::var_os("PATH")?)
}

/// The first executable file `name` in a directory of `path` (PATH's form).
fn search_dirs(name: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// `binary` in place of `found` when `found` is a script whose only command runs `binary`
/// with the script's own arguments (Debian's wrapper of the headless shell), else `found`. A
/// script that adds anything (a flag, an environment) is kept: what it adds is wanted.
fn unwrap_debian_script(found: PathBuf, binary: &Path) -> PathBuf {
    use std::io::Read;
    // The first 4 KiB: a script is short, and a browser binary is hundreds of megabytes.
    let mut head = Vec::new();
    let read = std::fs::File::open(&found).and_then(|f| f.take(4096).read_to_end(&mut head));
    let text = String::from_utf8_lossy(&head);
    let mut commands = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
    let only = (commands.next(), commands.next());
    let runs = format!("{} \"$@\"", binary.display());
    let just_runs_binary = read.is_ok()
        && text.starts_with("#!")
        && matches!(only, (Some(cmd), None) if cmd == runs || cmd.strip_prefix("exec ") == Some(&runs));
    if just_runs_binary && is_executable(binary) {
        binary.to_path_buf()
    } else {
        found
    }
}

/// The command that starts the worker on `port`: its profile, its CDP port on 127.0.0.1 and
/// every connection through `proxy`, the worker's egress proxy.
pub(super) fn command(cfg: &LaunchConfig, port: u16, proxy: &str, dirs: &Dirs) -> Command {
    let mut cmd = Command::new(&cfg.chrome);
    if cfg.allow_unsandboxed {
        cmd.arg("--no-sandbox");
    }
    cmd.args(CHROME_FLAGS)
        .arg(format!("--user-data-dir={}", dirs.profile.join("chrome").display()))
        .arg(format!("--remote-debugging-port={port}"))
        .arg("--remote-debugging-address=127.0.0.1")
        // Nothing bypasses the proxy, loopback included (Chromium bypasses it by default).
        .arg(format!("--proxy-server={proxy}"))
        .arg("--proxy-bypass-list=<-loopback>")
        .arg("--force-webrtc-ip-handling-policy=disable_non_proxied_udp")
        .args(dirs.cache.iter().map(|cache| format!("--disk-cache-dir={}", cache.display())))
        .arg("about:blank")
        // Keep everything Chromium writes outside its user-data-dir inside the profile too.
        .env("HOME", &dirs.home)
        .env("XDG_CONFIG_HOME", dirs.home.join(".config"))
        .env("XDG_CACHE_HOME", dirs.home.join(".cache"))
        .env("TMPDIR", &dirs.tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_missing_chrome_is_a_clear_error() {
        let err = find_chrome(Some(Path::new("/nonexistent/chrome"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/chrome"), "{err}");
    }

    #[test]
    fn only_an_executable_file_on_the_path_is_found() {
        use std::os::unix::fs::PermissionsExt;
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let path = std::env::join_paths([a.path(), b.path()]).unwrap();
        assert_eq!(search_dirs("tool", &path), None, "nothing there");
        std::fs::write(a.path().join("tool"), "#!/bin/sh\n").unwrap();
        std::fs::create_dir(b.path().join("dir")).unwrap();
        assert_eq!(search_dirs("tool", &path), None, "a file that is not executable");
        assert_eq!(search_dirs("dir", &path), None, "a directory");
        std::fs::write(b.path().join("tool"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(b.path().join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(search_dirs("tool", &path), Some(b.path().join("tool")), "the executable one, in the second dir");
    }

    #[test]
    fn a_script_naming_the_binary_is_replaced_by_the_binary() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("engine");
        std::fs::write(&binary, "\x7fELF").unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = dir.path().join("wrapper");
        std::fs::write(&script, format!("#!/bin/sh -e\n{} \"$@\"\n", binary.display())).unwrap();
        assert_eq!(unwrap_debian_script(script.clone(), &binary), binary);
        let exec = dir.path().join("exec");
        std::fs::write(&exec, format!("#!/bin/sh\n# runs it\nexec {} \"$@\"\n", binary.display())).unwrap();
        assert_eq!(unwrap_debian_script(exec.clone(), &binary), binary);
        let other = dir.path().join("other");
        std::fs::write(&other, "#!/bin/sh\nexec something-else \"$@\"\n").unwrap();
        assert_eq!(unwrap_debian_script(other.clone(), &binary), other, "a script naming something else");
        let flags = dir.path().join("flags");
        std::fs::write(&flags, format!("#!/bin/sh\nexec {} --no-sandbox \"$@\"\n", binary.display())).unwrap();
        assert_eq!(unwrap_debian_script(flags.clone(), &binary), flags, "a script adding a flag");
        let env = dir.path().join("env");
        std::fs::write(&env, format!("#!/bin/sh\nexport TZ=UTC\nexec {} \"$@\"\n", binary.display())).unwrap();
        assert_eq!(unwrap_debian_script(env.clone(), &binary), env, "a script setting the environment");
        assert_eq!(unwrap_debian_script(binary.clone(), &binary), binary, "the binary itself");
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(unwrap_debian_script(script.clone(), &binary), script, "a binary that cannot run");
    }
}
