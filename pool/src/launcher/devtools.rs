//! From a spawned Chromium to its CDP connection: the DevTools endpoint it prints on stderr
//! (reached through a gate when it runs in a network namespace of its own), its stderr drained
//! after, and the CDP handler, whose end is the browser's death.

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::Browser;
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr};
use tracing::Instrument;

use super::process::Process;
use crate::egress::Egress;
use crate::error::PoolError;
use crate::netns::{Gate, NetNs};
use crate::task::OwnedTask;

/// Chromium's stderr, line by line.
pub(super) type Lines = tokio::io::Lines<BufReader<ChildStderr>>;

/// Waits up to `timeout` for the DevTools endpoint `child` prints on `stderr`; returns it
/// and the lines after it.
pub(super) async fn endpoint(
    child: &mut Child,
    stderr: Option<ChildStderr>,
    timeout: Duration,
) -> Result<(String, Lines), PoolError> {
    let Some(stderr) = stderr else {
        return Err(PoolError::Launch("no stderr pipe".into()));
    };
    let mut lines = BufReader::new(stderr).lines();
    let mut seen: Vec<String> = Vec::new();
    let found = tokio::time::timeout(timeout, async {
        // The browser's exit ends the wait even while a helper it started (crashpad) keeps
        // stderr open; what it wrote before is still read, briefly, for the error.
        tokio::select! {
            found = devtools_line(&mut lines, &mut seen) => found,
            _ = child.wait() => {
                tokio::time::timeout(Duration::from_millis(200), devtools_line(&mut lines, &mut seen)).await.ok().flatten()
            }
        }
    })
    .await;
    match found {
        Ok(Some(url)) => Ok((url, lines)),
        Ok(None) => {
            let tail = seen.iter().rev().take(3).rev().cloned().collect::<Vec<_>>().join(" | ");
            Err(PoolError::Launch(format!("chromium exited before printing its devtools endpoint: {tail}")))
        }
        Err(_) => Err(PoolError::Launch(format!("no devtools endpoint within {timeout:?}"))),
    }
}

/// Reads Chromium's stderr up to its `DevTools listening on` line, and returns the endpoint;
/// the other lines (but dbus noise) go to `seen`, for the error when there is none.
async fn devtools_line(lines: &mut Lines, seen: &mut Vec<String>) -> Option<String> {
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(rest) = line.split("DevTools listening on ").nth(1) {
            return Some(rest.trim().to_string());
        }
        if !line.contains("dbus") {
            seen.push(line);
        }
    }
    None
}

/// The endpoint of `ws_url` as reached from the host: Chromium's port is inside `ns`, so CDP
/// goes through a gate, by the browser's own path, which only this process has seen. The
/// gate is `process`'s from then on.
pub(super) async fn through_gate(
    process: &mut Process,
    ns: NetNs,
    port: u16,
    ws_url: &str,
    egress: &Arc<Egress>,
    worker: &str,
) -> Result<String, PoolError> {
    let path = ws_url.find("/devtools/browser/").map(|i| ws_url[i..].to_string()).unwrap_or_default();
    match Gate::open(ns, port, path.clone(), egress.clone(), worker).await {
        Ok(gate) if !path.is_empty() => {
            let ws_url = format!("ws://127.0.0.1:{}{path}", gate.port());
            process.gate = Some(gate);
            Ok(ws_url)
        }
        Ok(_) => Err(PoolError::Launch(format!("unexpected devtools endpoint {ws_url:?}"))),
        Err(e) => Err(PoolError::Launch(format!("devtools gate: {e}"))),
    }
}

/// Keeps draining stderr so Chromium never blocks on a full pipe; ends when the process dies.
pub(super) fn drain_stderr(mut lines: Lines, worker: &str) -> OwnedTask {
    OwnedTask::spawn(
        async move {
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::trace!(%line, "chromium stderr");
            }
        }
        .instrument(tracing::debug_span!("chromium_stderr", worker = %worker)),
    )
}

/// Connects CDP at `ws_url` within `timeout`; returns the browser, the task of its handler,
/// and what turns `Some(why)` when the connection closes.
pub(super) async fn connect_cdp(
    ws_url: &str,
    timeout: Duration,
    worker: &str,
) -> Result<(Browser, OwnedTask, tokio::sync::watch::Receiver<Option<String>>), PoolError> {
    let handler_cfg = HandlerConfig {
        viewport: None,
        // Actions carry their own deadlines (up to 300 s, e.g. an awaited evaluate); the
        // handler's per-command timeout must not cut them short.
        request_timeout: Duration::from_secs(330),
        ..HandlerConfig::default()
    };
    let connected = tokio::time::timeout(timeout, Browser::connect_with_config(ws_url, handler_cfg)).await;
    let (browser, mut handler) = match connected {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(PoolError::Cdp(format!("connect: {e}"))),
        Err(_) => return Err(PoolError::CdpTimeout { what: "connect", after: timeout }),
    };
    // The handler drives the CDP connection; it ends when the websocket closes, which is
    // how a browser that died is noticed at once.
    let (died_tx, died) = tokio::sync::watch::channel(None);
    let handler_task = OwnedTask::spawn(
        async move {
            while let Some(event) = handler.next().await {
                if let Err(e) = event {
                    tracing::debug!(error = %e, "cdp handler");
                }
            }
            died_tx.send_replace(Some("its DevTools connection closed".to_string()));
        }
        .instrument(tracing::debug_span!("cdp_handler", worker = %worker)),
    );
    Ok((browser, handler_task, died))
}
