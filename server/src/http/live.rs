//! `/live/{session}/{secret}`: the live view page (embedded in the binary), and
//! `/live/{session}/{secret}/ws`, its websocket: the active tab's picture as binary JPEG
//! messages (the latest one: a viewer that reads slowly skips frames), status as JSON text,
//! and, through a CONTROL link, the person's mouse and keyboard as JSON text (see
//! [`browserpool_pool::LiveInput`]). Closed at the session's end, at the link's expiry or
//! revocation. Opened and closed are one audit record, with the count of inputs (never what
//! was typed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use axum::extract::{Path, State, WebSocketUpgrade};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde_json::json;

use super::{refuse, HttpState, Refusal};
use crate::sessions::{LiveAccess, LiveError};

/// The page, HTML with its script and style inline: no CDN, nothing to build.
const PAGE: &str = include_str!("live.html");
/// The `rpc` of a live view's audit record.
pub const LIVE_RPC: &str = "LIVE /live/{session}";
/// Largest message a viewer may send (a pasted text of 64 KiB, as JSON).
const MAX_INPUT_MESSAGE: usize = 160 << 10;
/// A frame a viewer does not take within this is the end of that viewer.
const SEND_WAIT: Duration = Duration::from_secs(10);

/// The page, for a link that works (404 otherwise, the same for every reason).
pub async fn page(State(state): State<HttpState>, Path((session, secret)): Path<(String, String)>) -> Response {
    match state.app.sessions.live_link(&session, &secret) {
        Ok(_) => (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
                (header::REFERRER_POLICY, "no-referrer"),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src blob:; connect-src 'self'; base-uri 'none'; form-action 'none'",
                ),
            ],
            PAGE,
        )
            .into_response(),
        Err(e) => (StatusCode::NOT_FOUND, format!("{e}\n")).into_response(),
    }
}

/// The websocket of the page.
pub async fn socket(
    State(state): State<HttpState>,
    Path((session, secret)): Path<(String, String)>,
    peer: Option<axum::Extension<crate::tls::PeerAddr>>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let source = super::source(peer);
    let Ok(upgrade) = upgrade else {
        return (StatusCode::BAD_REQUEST, "a live view's socket is a websocket\n").into_response();
    };
    let place = match state.app.audit.reserve_call() {
        Ok(place) => place,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    };
    let access = match state.app.sessions.live_open(&session, &secret, state.live_max_viewers) {
        Ok(access) => access,
        Err(e) => {
            let (status, unproven) = match e {
                LiveError::NotFound => (StatusCode::NOT_FOUND, true),
                LiveError::Full { .. } => (StatusCode::TOO_MANY_REQUESTS, false),
            };
            let refusal = Refusal { source: &source, claims: None, session: &session, rpc: LIVE_RPC, unproven };
            return refuse(&state, refusal, status, e.to_string());
        }
    };
    let metrics = state.app.metrics.clone();
    upgrade.max_message_size(MAX_INPUT_MESSAGE).on_upgrade(move |ws| async move {
        let access = Arc::new(access);
        let started = Instant::now();
        let record = access.record().clone();
        tracing::info!(session = %record.id, link = %access.link_id(), mode = access.mode().as_str(), "live viewer attached");
        metrics.live_viewers(1);
        let summary = serve(ws, &access, &metrics).await;
        metrics.live_viewers(-1);
        tracing::info!(session = %record.id, link = %access.link_id(), close = %summary.close, frames = summary.frames, inputs = summary.inputs, "live viewer detached");
        place.record(crate::audit::Entry {
            tenant: record.tenant.clone(),
            subject: format!("{} (live view link {})", record.subject, access.link_id()),
            session_id: record.id.clone(),
            rpc: LIVE_RPC.into(),
            target: format!(
                "mode {}; frames {}; frames dropped {}; inputs {}; refused inputs {}",
                access.mode().as_str(),
                summary.frames,
                summary.dropped,
                summary.inputs,
                summary.refused
            ),
            outcome: "ok".into(),
            code: summary.close,
            duration_ms: started.elapsed().as_millis().min(u32::MAX as u128) as u32,
            ..Default::default()
        });
    })
}

/// What one viewer did.
#[derive(Default)]
struct Summary {
    frames: u64,
    /// Frames skipped because a newer one came before this viewer took the last.
    dropped: u64,
    /// The number of the last frame sent.
    last: Option<u64>,
    inputs: u64,
    refused: u64,
    close: String,
}

impl Summary {
    /// Frame `seq` was sent: those between it and the last one sent were skipped.
    fn skipped(&mut self, seq: u64, metrics: &crate::metrics::Metrics) {
        self.skip(seq.saturating_sub(1), metrics);
        self.last = Some(seq);
    }

    /// Frames after the last one sent, up to and with `upto`, were never sent.
    fn skip(&mut self, upto: u64, metrics: &crate::metrics::Metrics) {
        let skipped = self.last.map_or(0, |last| upto.saturating_sub(last));
        self.dropped += skipped;
        metrics.live_frames_dropped(skipped);
    }
}

/// Sends the picture, the tabs and the open dialog, and takes input, until the viewer leaves,
/// the session ends, or the link stops working.
async fn serve(ws: WebSocket, access: &Arc<LiveAccess>, metrics: &crate::metrics::Metrics) -> Summary {
    let (mut tx, mut rx) = ws.split();
    let mut summary = Summary::default();
    let hello = json!({
        "type": "hello",
        "session": access.record().id,
        "mode": access.mode().as_str(),
        "expires_in_ms": access.time_left().as_millis() as u64,
    });
    if tx.send(Message::Text(hello.to_string().into())).await.is_err() {
        summary.close = "viewer gone".into();
        return summary;
    }
    let (stop, mut revoked, mut dialogs) = (access.stop(), access.revocations(), access.dialogs());
    let Some(watching) = start_watching(access, &stop).await else {
        return closed(&mut tx, summary, (1000, "the session ended")).await;
    };
    let mut frames = watching.frames.clone();
    frames.mark_changed();
    let expiry = tokio::time::sleep(access.time_left());
    tokio::pin!(expiry);
    let mut tabs_every = tokio::time::interval(TABS_EVERY);
    let mut tabs_sent = serde_json::Value::Null;
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<Result<(), String>>(8);
    let mut status = Some(dialog_status(&mut dialogs));
    let close = loop {
        if let Some(message) = status.take() {
            if tx.send(Message::Text(message.to_string().into())).await.is_err() {
                break (1001, "viewer gone");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => break (1000, "the session ended"),
            _ = &mut expiry => break (4001, "the link expired"),
            changed = revoked.changed() => {
                if changed.is_err() || !access.works() {
                    break (4003, "the link was revoked");
                }
            }
            _ = dialogs.changed() => status = Some(dialog_status(&mut dialogs)),
            _ = tabs_every.tick() => {
                let (tabs, active) = access.tabs().await;
                let now = json!({ "type": "tabs", "active": active, "tabs": tabs });
                if now != tabs_sent {
                    tabs_sent = now.clone();
                    status = Some(now);
                }
            }
            Some(result) = done_rx.recv() => {
                status = Some(match result {
                    Ok(()) => json!({ "type": "done" }),
                    Err(why) => json!({ "type": "error", "message": why }),
                });
            }
            changed = frames.changed() => {
                if changed.is_err() {
                    break (1011, "the picture stopped");
                }
                let frame = frames.borrow_and_update().clone();
                let Some(frame) = frame else { continue };
                let sent = tokio::time::timeout(SEND_WAIT, tx.send(Message::Binary(frame.jpeg.to_vec().into()))).await;
                match sent {
                    Ok(Ok(())) => {
                        summary.frames += 1;
                        metrics.live_frame_sent();
                        summary.skipped(frame.seq, metrics);
                    }
                    Ok(Err(_)) => break (1001, "viewer gone"),
                    Err(_) => break (1008, "the viewer took no frame for 10 s"),
                }
            }
            message = rx.next() => match message {
                Some(Ok(Message::Text(text))) => match take(access, &text, &done_tx) {
                    Ok(()) => summary.inputs += 1,
                    Err(why) => {
                        summary.refused += 1;
                        status = Some(json!({ "type": "error", "message": why }));
                    }
                },
                Some(Ok(Message::Binary(_))) => {
                    summary.refused += 1;
                    status = Some(json!({ "type": "error", "message": "send input as JSON text" }));
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break (1000, "viewer left"),
            },
        }
    };
    // Frames shown since the last one sent were skipped too (a viewer let go for not reading).
    let latest = frames.borrow().as_ref().map(|f| f.seq);
    if let Some(latest) = latest {
        summary.skip(latest, metrics);
    }
    drop(watching);
    closed(&mut tx, summary, close).await
}

/// Starts watching, unless the session ends first: starting asks the browser for a picture (up
/// to a second) and for the screencast, and a session that ends meanwhile, its tab detached,
/// may answer neither.
async fn start_watching(
    access: &LiveAccess,
    stop: &tokio_util::sync::CancellationToken,
) -> Option<browserpool_pool::Watching> {
    tokio::select! {
        watching = access.watch() => Some(watching),
        _ = stop.cancelled() => None,
    }
}

/// Says why the socket closes (at most a second for a viewer that reads nothing), in the
/// summary too.
async fn closed(
    tx: &mut futures::stream::SplitSink<WebSocket, Message>,
    mut summary: Summary,
    (code, reason): (u16, &str),
) -> Summary {
    let frame = CloseFrame { code, reason: reason.to_string().into() };
    let _ = tokio::time::timeout(Duration::from_secs(1), tx.send(Message::Close(Some(frame)))).await;
    summary.close = reason.into();
    summary
}

/// How often the page's list of tabs is brought up to date.
const TABS_EVERY: Duration = Duration::from_secs(1);

/// The open dialog as the page shows it.
fn dialog_status(dialogs: &mut browserpool_pool::Dialogs) -> serde_json::Value {
    match dialogs.current() {
        Some(d) => json!({
            "type": "dialog",
            "open": true,
            "kind": browserpool_pool::dialog_kind(d.kind),
            "message": d.message,
            "default_prompt": d.default_prompt,
            "tab": d.tab_index,
        }),
        None => json!({ "type": "dialog", "open": false }),
    }
}

/// One message of the viewer's: a tab switch or a dialog's answer (run in turn with the
/// session's actions, on a task that reports to `done`), or a mouse, key or text input.
fn take(
    access: &Arc<LiveAccess>,
    text: &str,
    done: &tokio::sync::mpsc::Sender<Result<(), String>>,
) -> Result<(), String> {
    let msg: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let steps: Vec<(&'static str, &'static str, serde_json::Value)> = match msg["type"].as_str() {
        Some("tab") => {
            let index = msg["index"].as_u64().ok_or("a tab switch needs its index")?;
            vec![("switch_tab", "", json!(index))]
        }
        Some("dialog") => {
            let mut steps = Vec::new();
            for (field, selector) in
                [("text", "dialog::prompt"), ("username", "dialog::username"), ("password", "dialog::password")]
            {
                if let Some(value) = msg[field].as_str() {
                    steps.push(("type", selector, json!(value)));
                }
            }
            let answer = if msg["accept"].as_bool().unwrap_or(false) { "dialog::accept" } else { "dialog::dismiss" };
            steps.push(("click", answer, serde_json::Value::Null));
            steps
        }
        _ => {
            let input =
                serde_json::from_value::<browserpool_pool::LiveInput>(msg).map_err(|e| format!("not an input: {e}"))?;
            return access.input(&input);
        }
    };
    access.act_in_turn(steps, done.clone())
}
