//! The Chromium executable and its command line: where it is found, the flags and disabled
//! features every worker gets, and the arguments and environment of one worker's launch.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::profile::Dirs;
use super::LaunchConfig;
use crate::error::PoolError;

/// Executable names tried on PATH when `--chrome` is not given, in order.
pub const CHROME_NAMES: &[&str] = &["chromium", "chromium-browser", "google-chrome"];

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
    // Chromium keeps only the last `--disable-features`: this is the only one.
    concat!("--disable-features=", disabled_features!()),
];

/// Finds the Chromium executable: `explicit` if given, else the first of [`CHROME_NAMES`]
/// on PATH.
pub fn find_chrome(explicit: Option<&Path>) -> Result<PathBuf, PoolError> {
    if let Some(path) = explicit {
        if is_executable(path) {
            return Ok(path.to_path_buf());
        }
        if path.components().count() == 1 {
            if let Some(found) = search_path(&path.to_string_lossy()) {
                return Ok(found);
            }
        }
        return Err(PoolError::BadChromium(path.display().to_string()));
    }
    CHROME_NAMES
        .iter()
        .find_map(|name| search_path(name))
        .ok_or_else(|| PoolError::NoChromium { tried: CHROME_NAMES.join(", ") })
}

fn search_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
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
}
