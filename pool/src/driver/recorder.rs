//! Recording a session: the screencast frames of its tabs (Chromium sends frames only for the
//! tab in front, and only when its picture changes, so the recording follows `switch_tab` and
//! a CDP client's `Page.bringToFront` alike, and an idle page costs nothing), at most
//! [`MAX_FPS`] a second (the acknowledgements paced, see `pacing.rs`), each with the time it
//! came, in a directory of the server's. The video is made from them once the session ends (see
//! [`crate::video`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::pacing::RECORD_FPS as MAX_FPS;
use super::Driver;
use crate::outcome::Viewport;
use crate::sync::lock;
use crate::video::Frames;

/// Frames waiting for the writer; past it a frame is dropped (the disk is slower than the
/// page), never the session slowed.
const QUEUE: usize = 16;

/// A recording under way, in the driver's shared state while the session is recorded.
pub(crate) struct Recording {
    started: Instant,
    viewport: Viewport,
    state: Mutex<Capture>,
    frames: mpsc::Sender<(Arc<Vec<u8>>, Duration)>,
    written: Mutex<Option<oneshot::Receiver<Frames>>>,
}

#[derive(Default)]
struct Capture {
    /// When the last frame sent to the writer came.
    last: Option<Duration>,
    /// A frame that came too soon after `last`: sent when a frame comes later, or at the end,
    /// unless a newer one replaces it first.
    held: Option<(Arc<Vec<u8>>, Duration)>,
}

impl Recording {
    /// The size frames are asked at.
    pub(crate) fn viewport(&self) -> &Viewport {
        &self.viewport
    }

    /// A frame of the screencast (see [`frame`]): kept, or held when it comes sooner than
    /// [`MAX_FPS`] allows after the last one kept.
    pub(crate) fn on_frame(&self, jpeg: Arc<Vec<u8>>) {
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

/// Writes the frames it is sent into `dir`, in order, until the sender is gone or a write
/// fails (a full disk stops the recording, never the session); answers what it wrote.
async fn write_frames(
    dir: PathBuf,
    viewport: Viewport,
    mut rx: mpsc::Receiver<(Arc<Vec<u8>>, Duration)>,
    done: oneshot::Sender<Frames>,
) {
    let mut frames = Frames { dir, times: Vec::new(), stopped: None, end: Duration::ZERO, viewport };
    while let Some((jpeg, at)) = rx.recv().await {
        if frames.stopped.is_some() {
            continue;
        }
        let path = frames.path(frames.times.len());
        match tokio::task::spawn_blocking(move || std::fs::write(path, &*jpeg)).await {
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
            let max = (recording.viewport.width, recording.viewport.height);
            super::pacing::screencast(&self.raw, &session, Some(max)).await;
        }
    }

    /// Ends the recording, if there is one: no frame is taken after this; the frames written,
    /// their times and the recording's length.
    pub(crate) async fn stop_recording(&self) -> Option<Frames> {
        let recording = lock(&self.shared.recording).clone()?;
        // The page as it is now when no frame came yet (in a session of a few hundred
        // milliseconds on a busy host, the first may still be on its way).
        let framed = lock(&recording.state).last.is_some();
        let last = if framed { None } else { super::pacing::picture(&self.shared, &self.raw).await };
        lock(&self.shared.recording).take();
        let end = recording.started.elapsed();
        let held = lock(&recording.state).held.take();
        if let Some(held) = held {
            let _ = recording.frames.send(held).await;
        }
        if let Some(frame) = last {
            let _ = recording.frames.send((frame.jpeg, end)).await;
        }
        let done = lock(&recording.written).take()?;
        drop(recording);
        let mut frames = tokio::time::timeout(Duration::from_secs(30), done).await.ok()?.ok()?;
        frames.end = end;
        Some(frames)
    }
}
