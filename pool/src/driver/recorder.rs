//! Recording a session: the screencast frames of its tabs (Chromium sends frames only for the
//! tab in front, and only when its picture changes, so the recording follows `switch_tab` and
//! a CDP client's `Page.bringToFront` alike, and an idle page costs nothing), at most
//! [`MAX_FPS`] a second (acknowledgements paced), each kept with the time it came, in a
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

/// Most frames a second: Chromium's next frame is asked for (acknowledged) no sooner.
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
    /// Whether a frame has been kept yet.
    framed: std::sync::atomic::AtomicBool,
    frames: mpsc::Sender<(Vec<u8>, Duration)>,
    /// Frames to acknowledge, paced (see [`ack_frames`]).
    acks: mpsc::UnboundedSender<(String, i64)>,
    written: Mutex<Option<oneshot::Receiver<Frames>>>,
}

impl Recording {
    /// The size frames are asked at.
    pub(crate) fn viewport(&self) -> &Viewport {
        &self.viewport
    }

    /// A frame of the screencast: kept (dropped when the writer is behind), and acknowledged
    /// when [`MAX_FPS`] allows, as Chromium sends a tab's next frame only then.
    pub(crate) fn on_frame(&self, ev: &RawEvent) {
        if let Some(id) = ev.params.get("sessionId").and_then(|s| s.as_i64()) {
            let _ = self.acks.send((ev.session_id.clone(), id));
        }
        let Some(data) = ev.params["data"].as_str().filter(|d| d.len() <= MAX_FRAME_BYTES * 4 / 3 + 4) else {
            return;
        };
        let Ok(jpeg) = base64::engine::general_purpose::STANDARD.decode(data) else { return };
        // A JPEG's start-of-image marker: anything else is not a frame of Chromium's.
        if jpeg.starts_with(&[0xFF, 0xD8]) && self.frames.try_send((jpeg, self.started.elapsed())).is_ok() {
            self.framed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Acknowledges frames no sooner than one [`MAX_FPS`] gap after the last acknowledgement: the
/// frame Chromium sends next is the page as it is then, so a page that animates is captured
/// (and JPEG-encoded by Chromium) ten times a second, not sixty.
async fn ack_frames(raw: RawCdp, mut acks: mpsc::UnboundedReceiver<(String, i64)>) {
    let gap = Duration::from_secs(1) / MAX_FPS;
    let mut last = tokio::time::Instant::now() - gap;
    while let Some((session, id)) = acks.recv().await {
        tokio::time::sleep_until(last + gap).await;
        raw.send(&session, "Page.screencastFrameAck", json!({ "sessionId": id }));
        last = tokio::time::Instant::now();
    }
}

/// Writes the frames it is sent into `dir`, in order, until the sender is gone or a write
/// fails (a full disk stops the recording, never the session); answers what it wrote.
async fn write_frames(dir: PathBuf, mut rx: mpsc::Receiver<(Vec<u8>, Duration)>, done: oneshot::Sender<Frames>) {
    let mut frames =
        Frames { dir, times: Vec::new(), stopped: None, end: Duration::ZERO, viewport: Viewport::default() };
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
        self.shared.spawn(write_frames(dir, rx, done_tx));
        let (acks, to_ack) = mpsc::unbounded_channel();
        self.shared.spawn(ack_frames(self.raw.clone(), to_ack));
        let recording = Arc::new(Recording {
            started: Instant::now(),
            viewport,
            framed: std::sync::atomic::AtomicBool::new(false),
            frames: tx,
            acks,
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
        let last = match recording.framed.load(std::sync::atomic::Ordering::Relaxed) {
            true => None,
            false => self.last_frame().await,
        };
        lock(&self.shared.recording).take();
        let end = recording.started.elapsed();
        if let Some(jpeg) = last {
            let _ = recording.frames.send((jpeg, end)).await;
        }
        let done = lock(&recording.written).take()?;
        let viewport = recording.viewport;
        drop(recording);
        let mut frames = tokio::time::timeout(Duration::from_secs(30), done).await.ok()?.ok()?;
        frames.end = end;
        frames.viewport = viewport;
        Some(frames)
    }
}

impl Driver {
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
