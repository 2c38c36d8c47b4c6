//! `session batch --on-failure screenshot DIR`: when a step failed, the page as the batch
//! left it (a PNG of the active tab and its URL) is saved for the job's log.

use std::path::{Path, PathBuf};

use super::{CliError, Ctx};

/// What `--on-failure` saves; `screenshot` is the one kind so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnFailure {
    /// A PNG screenshot of the active tab, and its URL.
    Screenshot,
}

/// `--on-failure KIND DIR` as clap gives it (two values).
pub(super) fn parse(values: &[String]) -> Result<Option<(OnFailure, PathBuf)>, CliError> {
    match values {
        [] => Ok(None),
        [kind, dir] => {
            use clap::ValueEnum;
            let kind = OnFailure::from_str(kind, true)
                .map_err(|_| CliError::usage(format!("--on-failure {kind:?}: give `--on-failure screenshot DIR`")))?;
            Ok(Some((kind, PathBuf::from(dir))))
        }
        _ => Err(CliError::usage("--on-failure takes two values: `--on-failure screenshot DIR`")),
    }
}

/// Saves the page of `session` into `dir` (`failure.png`, `failure-url.txt`) and says on
/// stderr what it saved, or why a part could not be had; the batch's own outcome stands.
pub(super) async fn save(ctx: &Ctx, session: &str, dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::usage(format!("--on-failure {}: {e}", dir.display())))?;
    let evidence = ctx.client.evidence(session).await.map_err(|e| CliError::failed(e.to_string()))?;
    let (png, url) = (dir.join("failure.png"), dir.join("failure-url.txt"));
    let write = |path: &Path, bytes: &[u8]| {
        std::fs::write(path, bytes).map_err(|e| CliError::usage(format!("write {}: {e}", path.display())))
    };
    match &evidence.png {
        Ok(bytes) => write(&png, bytes)?,
        Err(why) => eprintln!("no screenshot of the failed page: {why}"),
    }
    match &evidence.url {
        Ok(u) => write(&url, format!("{u}\n").as_bytes())?,
        Err(why) => eprintln!("no URL of the failed page: {why}"),
    }
    if let (Ok(_), Ok(u)) = (&evidence.png, &evidence.url) {
        eprintln!("a step failed: the page ({u}) is in {}", png.display());
    }
    Ok(())
}
