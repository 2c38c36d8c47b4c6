//! A worker's directories: its profile (with the preferences every worker gets), its home and
//! its temp dir, made fresh for each launch, owner only, and owned by the worker's uid.

use std::path::{Path, PathBuf};

/// Written into every profile before launch: no preconnect or DNS prefetch (a page must not
/// open connections it did not ask for), and WebRTC only through the proxy, never over
/// non-proxied UDP, so ICE cannot reach an address the egress proxy would refuse.
const PREFERENCES: &str = r#"{"net":{"network_prediction_options":2},"webrtc":{"ip_handling_policy":"disable_non_proxied_udp","multiple_routes_enabled":false,"nonproxied_udp_enabled":false}}"#;

/// The directories of the worker on one port.
pub(super) struct Dirs {
    /// `<profiles_dir>/port-<N>`, Chromium's user-data-dir (`chrome`) and its home inside.
    pub(super) profile: PathBuf,
    pub(super) home: PathBuf,
    default_profile: PathBuf,
    pub(super) tmp: PathBuf,
}

impl Dirs {
    /// Makes the directories of the worker on `port` under `profiles_dir`, in place of any a
    /// crashed server left.
    pub(super) async fn create(profiles_dir: &Path, port: u16) -> std::io::Result<Dirs> {
        let profile = profiles_dir.join(format!("port-{port}"));
        // A profile left by a crashed server that held this port is stale: start clean.
        if profile.exists() {
            tokio::fs::remove_dir_all(&profile).await?;
        }
        // Owner only: profiles hold a tenant's cookies and storage, the temp dir Chromium's sockets.
        let private = || {
            let mut b = tokio::fs::DirBuilder::new();
            b.recursive(true).mode(0o700);
            b
        };
        let home = profile.join("home");
        private().create(&home).await?;
        let default_profile = profile.join("chrome").join("Default");
        private().create(&default_profile).await?;
        tokio::fs::write(default_profile.join("Preferences"), PREFERENCES).await?;
        // Chromium puts unix sockets in TMPDIR, and a socket path must fit in 108 bytes, so the
        // worker's own temp dir is short and fixed per port (the port lock makes it ours).
        let tmp = worker_tmp(port);
        if tmp.exists() {
            tokio::fs::remove_dir_all(&tmp).await?;
        }
        private().create(&tmp).await?;
        Ok(Dirs { profile, home, default_profile, tmp })
    }

    /// Everything the worker writes is its own uid's, and nobody else's (owner only, see
    /// [`Dirs::create`]).
    pub(super) fn chown(&self, uid: u32) -> std::io::Result<()> {
        let chrome = self.profile.join("chrome");
        let preferences = self.default_profile.join("Preferences");
        for path in [&self.profile, &self.home, &chrome, &self.default_profile, &preferences, &self.tmp] {
            std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
        }
        Ok(())
    }
}

/// The worker temp dir of a port: `/tmp/browserpool-w<port>`.
pub(super) fn worker_tmp(port: u16) -> PathBuf {
    PathBuf::from(format!("/tmp/browserpool-w{port}"))
}
