//! Recording a session: the screencast frames of its tabs (Chromium sends frames only for the
//! tab in front, and only when its picture changes, so the recording follows `switch_tab` and
//! a CDP client's `Page.bringToFront` alike, and an idle page costs nothing), at most
//! [`MAX_FPS`] kept a second (the picture shown longest), each with the time it came, in a
//! directory of the server's. The video is made from them once the session ends (see
//! [`crate::video`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::Driver;
use crate::outcome::Viewport;
use crate::rawcdp::{RawCdp, RawEvent};
use crate::sync::lock;
use crate::video::Frames;

/// Most frames kept a second.
pub const MAX_FPS: u32 = 10;

/// Largest frame taken, in bytes (a JPEG of a 4K screen at the quality asked is far less).
const MAX_FRAME_BYTES: usize = 8 << 20;

/// JPEG quality asked of Chromium's screencast.
const QUALITY: u32 = 80;

/// Frames waiting for the writer; past it a frame is dropped (the disk is slower than the
/// page), never the session slowed.
const QUEUE: usize = 16;

/// A recording under way, in the driver's shared state while the session is recorded.
pub(crate) struct Recording {
    started: Instant,
    viewport: Viewport,
    state: Mutex<Capture>,
    frames: mpsc::Sender<(Vec<u8>, Duration)>,
    written: Mutex<Option<oneshot::Receiver<Frames>>>,
}

#[derive(Default)]
struct Capture {
    /// When the last frame sent to the writer came.
    last: Option<Duration>,
    /// A frame that came too soon after `last`: sent when a frame comes later, or at the end,
    /// unless a newer one replaces it first.
    held: Option<(Vec<u8>, Duration)>,
}

impl Recording {
    /// The size frames are asked at.
    pub(crate) fn viewport(&self) -> &Viewport {
        &self.viewport
    }

    /// A frame of the screencast (see [`frame`]): kept, or held when it comes sooner than
    /// [`MAX_FPS`] allows after the last one kept.
    pub(crate) fn on_frame(&self, jpeg: &[u8]) {
        let jpeg = jpeg.to_vec();
        let at = self.started.elapsed();
        let mut state = lock(&self.state);
        if state.last.is_some_and(|last| at < last + Duration::from_secs(1) / MAX_FPS) {
            state.held = Some((jpeg, at));
            return;
        }
        if let Some(held) = state.held.take() {
            let _ = self.frames.try_send(held);
        }
        if self.frames.try_send((jpeg, at)).is_ok() {
            state.last = Some(at);
        }
    }
}

/// A frame of the screencast, acknowledged at once (acknowledging later would make Chromium
/// skip the frames painted meanwhile, and a page that then stays still would never send its
/// last picture): its JPEG, if it is one.
pub(crate) fn frame(raw: &RawCdp, ev: &RawEvent) -> Option<Vec<u8>> {
    if let Some(id) = ev.params.get("sessionId").and_then(|s| s.as_i64()) {
        raw.send(&ev.session_id, "Page.screencastFrameAck", json!({ "sessionId": id }));
    }
    let data = ev.params["data"].as_str().filter(|d| d.len() <= MAX_FRAME_BYTES * 4 / 3 + 4)?;
    let jpeg = base64::engine::general_purpose::STANDARD.decode(data).ok()?;
    // A JPEG's start-of-image marker: anything else is not a frame of Chromium's.
    jpeg.starts_with(&[0xFF, 0xD8]).then_some(jpeg)
}

/// Writes the frames it is sent into `dir`, in order, until the sender is gone or a write
/// fails (a full disk stops the recording, never the session); answers what it wrote.
async fn write_frames(
    dir: PathBuf,
    viewport: Viewport,
    mut rx: mpsc::Receiver<(Vec<u8>, Duration)>,
    done: oneshot::Sender<Frames>,
) {
    let mut frames = Frames { dir, times: Vec::new(), stopped: None, end: Duration::ZERO, viewport };
    while let Some((jpeg, at)) = rx.recv().await {
        if frames.stopped.is_some() {
            continue;
        }
        let path = frames.path(frames.times.len());
        match tokio::task::spawn_blocking(move || std::fs::write(path, jpeg)).await {
            Ok(Ok(())) => frames.times.push(at),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "recording stopped: a frame could not be written");
                frames.stopped = Some(format!("a frame could not be written: {e}"));
            }
            Err(e) => frames.stopped = Some(format!("frame writer: {e}")),
        }
    }
    let _ = done.send(frames);
}

impl Driver {
    /// Starts recording the session's tabs into `dir` (made by the caller, the server's), at
    /// the session's viewport.
    pub(crate) async fn start_recording(&self, dir: PathBuf, viewport: Viewport) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (done_tx, done) = oneshot::channel();
        self.shared.spawn(write_frames(dir, viewport, rx, done_tx));
        let recording = Arc::new(Recording {
            started: Instant::now(),
            viewport,
            state: Mutex::default(),
            frames: tx,
            written: Mutex::new(Some(done)),
        });
        *lock(&self.shared.recording) = Some(recording.clone());
        let tabs: Vec<String> = lock(&self.shared.tabs).list.iter().map(|t| t.session.clone()).collect();
        for session in tabs {
            screencast(&self.raw, &session, &recording.viewport).await;
        }
    }

    /// Ends the recording, if there is one: no frame is taken after this; the frames written,
    /// their times and the recording's length.
    pub(crate) async fn stop_recording(&self) -> Option<Frames> {
        let recording = lock(&self.shared.recording).clone()?;
        // The page as it is now when no frame came yet (in a session of a few hundred
        // milliseconds on a busy host, the first may still be on its way).
        let framed = lock(&recording.state).last.is_some();
        let last = if framed { None } else { self.last_frame().await };
        lock(&self.shared.recording).take();
        let end = recording.started.elapsed();
        let held = lock(&recording.state).held.take();
        if let Some(held) = held {
            let _ = recording.frames.send(held).await;
        }
        if let Some(jpeg) = last {
            let _ = recording.frames.send((jpeg, end)).await;
        }
        let done = lock(&recording.written).take()?;
        drop(recording);
        let mut frames = tokio::time::timeout(Duration::from_secs(30), done).await.ok()?.ok()?;
        frames.end = end;
        Some(frames)
    }

    /// A JPEG of the active tab now, if it answers within [`LAST_FRAME_WAIT`] (a tab that is
    /// not in front, or a frozen browser, may not).
    async fn last_frame(&self) -> Option<Vec<u8>> {
        let (tab, _) = self.active().ok()?;
        let params = json!({ "format": "jpeg", "quality": QUALITY });
        let call = self.raw.call(&tab.session, "Page.captureScreenshot", params);
        let shot = tokio::time::timeout(LAST_FRAME_WAIT, call).await.ok()?.ok()?;
        let jpeg = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str()?).ok()?;
        jpeg.starts_with(&[0xFF, 0xD8]).then_some(jpeg)
    }
}

/// The longest the end of a recording waits for its last frame.
const LAST_FRAME_WAIT: Duration = Duration::from_secs(1);

/// Starts the screencast on one tab's raw session at the recording's size.
pub(crate) async fn screencast(raw: &RawCdp, session: &str, viewport: &Viewport) {
    let params = json!({
        "format": "jpeg",
        "quality": QUALITY,
        "maxWidth": viewport.width,
        "maxHeight": viewport.height,
    });
    if let Err(e) = raw.call(session, "Page.startScreencast", params).await {
        tracing::debug!(error = %e, "screencast not started on a tab");
    }
}
