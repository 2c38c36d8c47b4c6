//! Tasks a value owns: a worker's CDP handler, its stderr drain, its proxies' accept loops.
//! Each ends when its owner is dropped, so nothing a worker started outlives the worker.
//!
//! Outside tests, this is the only place in the pool or server crates that calls
//! `tokio::spawn`; the server's own tasks live on `TaskTracker`s. A test below checks both.

use std::future::Future;

use tokio::task::JoinHandle;

/// A spawned task that is aborted when this handle is dropped.
#[derive(Debug)]
pub(crate) struct OwnedTask(JoinHandle<()>);

impl OwnedTask {
    /// Spawns `fut` on the current runtime, owned by the returned handle.
    pub(crate) fn spawn<F>(fut: F) -> OwnedTask
    where
        F: Future<Output = ()> + Send + 'static,
    {
        OwnedTask(tokio::spawn(fut))
    }

    /// Stops the task now, before its owner is dropped (e.g. a death watch before a kill).
    pub(crate) fn abort(&self) {
        self.0.abort();
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn dropping_the_handle_ends_the_task() {
        let marker = Arc::new(());
        let held = marker.clone();
        let task = OwnedTask::spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&marker), 2, "the task holds its clone while it runs");
        drop(task);
        for _ in 0..100 {
            if Arc::strong_count(&marker) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the task outlived its handle");
    }

    /// The code of `file` before its `#[cfg(test)] mod tests`, which may spawn freely.
    fn non_test_code(text: &str) -> &str {
        text.find("\n#[cfg(test)]\nmod tests").map_or(text, |end| &text[..end])
    }

    fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn no_task_is_spawned_without_an_owner() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut files = Vec::new();
        rust_files(&root.join("pool/src"), &mut files);
        rust_files(&root.join("server/src"), &mut files);
        assert!(files.len() > 20, "found only {} source files under {}", files.len(), root.display());
        let mut bare = Vec::new();
        for file in &files {
            // This file, and the test modules of their own (`tests.rs`), which may spawn freely.
            if file.ends_with("pool/src/task.rs") || file.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in non_test_code(&text).lines().enumerate() {
                if ["tokio::spawn(", "task::spawn(", "tokio::task::spawn_local("].iter().any(|s| line.contains(s)) {
                    bare.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            bare.is_empty(),
            "spawn through OwnedTask (pool) or a TaskTracker (server) so shutdown ends it:\n{}",
            bare.join("\n")
        );
    }
}
