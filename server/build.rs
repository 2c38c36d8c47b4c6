//! Bakes the git revision into the binary (`--version`, `/metrics` `build_info`, the start-up
//! log): `BROWSERPOOL_GIT_REV` when set (a container build has no .git), else `git rev-parse`,
//! else "unknown". Also rebuilt when `migrations/` changes, which `sqlx::migrate!` embeds.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=BROWSERPOOL_GIT_REV");
    let rev = std::env::var("BROWSERPOOL_GIT_REV")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BROWSERPOOL_GIT_REV={rev}");
    // `sqlx::migrate!` embeds these: a new migration must rebuild the crate.
    println!("cargo:rerun-if-changed=migrations");
    // Built again when HEAD moves (a commit, a checkout).
    for path in [git(&["rev-parse", "--git-path", "HEAD"]), git(&["rev-parse", "--git-path", "packed-refs"])]
        .into_iter()
        .flatten()
        .chain(git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])))
    {
        println!("cargo:rerun-if-changed={path}");
    }
}
