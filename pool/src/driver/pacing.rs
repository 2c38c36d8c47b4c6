//! Pacing the screencast. Chromium encodes a JPEG of every frame the page paints while the
//! last ones are acknowledged, 60 a second on an animating page, whatever the recording or
//! the viewers keep. So each frame's acknowledgement is held until its turn at the rate the
//! consumers need ([`RECORD_FPS`] for a recording,
//! [`LIVE_FPS`] while someone watches): Chromium skips the frames painted meanwhile and never
//! encodes them. A page that stops changing while a frame waits would then never send its
//! last picture, so when no frame follows a held acknowledgement within [`SETTLE`], the
//! active tab's picture is taken once and shown as the closing frame.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::json;
use tokio::time::Instant;

use super::Shared;
use crate::rawcdp::{RawCdp, RawEvent};
use crate::sync::lock;

/// One picture of the active tab.
#[derive(Clone, Debug)]
pub struct LiveFrame {
    pub jpeg: Arc<Vec<u8>>,
    /// The page's size in CSS pixels that the picture shows (input is mapped onto it).
    pub width: f64,
    pub height: f64,
    /// The frame's number in the session's screencast (1, 2, ...): a viewer that gets frame 7
    /// after frame 4 skipped two.
    pub seq: u64,
}

/// Most frames a second of a recording (the picture shown longest is kept, see `recorder.rs`).
pub const RECORD_FPS: u32 = 10;

/// Most frames a second while someone watches the live view.
pub const LIVE_FPS: u32 = 20;

/// How long after a held acknowledgement a still page's closing picture is taken.
const SETTLE: Duration = Duration::from_millis(250);

/// Largest frame taken, in bytes (a JPEG of a 4K screen at the quality asked is far less).
const MAX_FRAME_BYTES: usize = 8 << 20;

/// The longest the closing picture waits for the browser.
const PICTURE_WAIT: Duration = Duration::from_secs(1);

/// Pacing state of a session's screencast.
#[derive(Default)]
pub(crate) struct Pace {
    /// The earliest the next frame may be acknowledged.
    next: Option<Instant>,
    /// Frames seen so far: a held acknowledgement's closing picture is taken only when no
    /// frame came after it.
    seen: u64,
}

impl Pace {
    /// When a frame that came `now` is acknowledged: at once if the last one was at least
    /// `interval` ago, else `interval` after the last one's turn.
    fn turn(&mut self, now: Instant, interval: Duration) -> Instant {
        let turn = self.next.map_or(now, |next| next.max(now));
        self.next = Some(turn + interval);
        turn
    }
}

/// A `Page.screencastFrame`: shown to the recording and the viewers, acknowledged in its turn.
pub(crate) fn on_frame(shared: &Arc<Shared>, raw: &RawCdp, ev: &RawEvent) {
    let recording = lock(&shared.recording).clone();
    let live = lock(&shared.live).clone();
    if recording.is_none() && live.is_none() {
        // Nobody records or watches any more: the tab's screencast ends.
        raw.send(&ev.session_id, "Page.stopScreencast", json!({}));
        return;
    }
    let fps = if live.is_some() { LIVE_FPS } else { RECORD_FPS };
    if let Some(jpeg) = decode(ev.params["data"].as_str()) {
        let meta = &ev.params["metadata"];
        let size = (meta["deviceWidth"].as_f64().unwrap_or(0.0), meta["deviceHeight"].as_f64().unwrap_or(0.0));
        show(shared, LiveFrame { jpeg: Arc::new(jpeg), width: size.0, height: size.1, seq: 0 });
    }
    let Some(id) = ev.params.get("sessionId").and_then(|s| s.as_i64()) else { return };
    let interval = Duration::from_secs(1) / fps;
    let now = Instant::now();
    let (turn, seen) = {
        let mut pace = lock(&shared.pace);
        let turn = pace.turn(now, interval);
        pace.seen += 1;
        (turn, pace.seen)
    };
    let ack = json!({ "sessionId": id });
    if turn <= now {
        raw.send(&ev.session_id, "Page.screencastFrameAck", ack);
        return;
    }
    let (shared2, raw, tab) = (shared.clone(), raw.clone(), ev.session_id.clone());
    shared.spawn(async move {
        tokio::time::sleep_until(turn).await;
        raw.send(&tab, "Page.screencastFrameAck", ack);
        tokio::time::sleep(SETTLE).await;
        if lock(&shared2.pace).seen == seen {
            if let Some(frame) = picture(&shared2, &raw).await {
                show(&shared2, frame);
            }
        }
    });
}

/// A frame for the recording and the viewers, whoever of them there is now.
fn show(shared: &Shared, frame: LiveFrame) {
    if let Some(recording) = lock(&shared.recording).clone() {
        recording.on_frame(frame.jpeg.clone());
    }
    if let Some(live) = lock(&shared.live).clone() {
        live.show(frame);
    }
}

/// A frame's base64 JPEG, decoded, if it is one (and not past [`MAX_FRAME_BYTES`]).
pub(crate) fn decode(data: Option<&str>) -> Option<Vec<u8>> {
    let data = data.filter(|d| d.len() <= MAX_FRAME_BYTES * 4 / 3 + 4)?;
    let jpeg = base64::engine::general_purpose::STANDARD.decode(data).ok()?;
    // A JPEG's start-of-image marker: anything else is not a frame of Chromium's.
    jpeg.starts_with(&[0xFF, 0xD8]).then_some(jpeg)
}

/// The active tab's picture now, with the page's size in CSS pixels, if the browser answers
/// within [`PICTURE_WAIT`] (a tab not in front, or a frozen browser, may not).
pub(crate) async fn picture(shared: &Shared, raw: &RawCdp) -> Option<LiveFrame> {
    let session = {
        let tabs = lock(&shared.tabs);
        tabs.list.get(tabs.active)?.session.clone()
    };
    let shot = raw.call(&session, "Page.captureScreenshot", json!({ "format": "jpeg", "quality": QUALITY }));
    let shot = tokio::time::timeout(PICTURE_WAIT, shot).await.ok()?.ok()?;
    let jpeg = decode(shot["data"].as_str())?;
    let metrics = raw.call(&session, "Page.getLayoutMetrics", json!({}));
    let metrics = tokio::time::timeout(PICTURE_WAIT, metrics).await.ok()?.ok()?;
    let view = &metrics["cssVisualViewport"];
    let (width, height) = (view["clientWidth"].as_f64()?, view["clientHeight"].as_f64()?);
    Some(LiveFrame { jpeg: Arc::new(jpeg), width, height, seq: 0 })
}

/// JPEG quality asked of Chromium, for the screencast and pictures alike.
pub(crate) const QUALITY: u32 = 70;

/// Starts the screencast on one tab, at most `max` pixels wide and high when given (a
/// recording's viewport), else at the page's own size.
pub(crate) async fn screencast(raw: &RawCdp, session: &str, max: Option<(u32, u32)>) {
    let mut params = json!({ "format": "jpeg", "quality": QUALITY });
    if let Some((width, height)) = max {
        params["maxWidth"] = json!(width);
        params["maxHeight"] = json!(height);
    }
    if let Err(e) = raw.call(session, "Page.startScreencast", params).await {
        tracing::debug!(error = %e, "screencast not started on a tab");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_faster_than_the_rate_wait_their_turn_and_a_pause_resets_it() {
        let (mut pace, t0, step) = (Pace::default(), Instant::now(), Duration::from_millis(50));
        let ms = |n: u64| Duration::from_millis(n);
        assert_eq!(pace.turn(t0, step), t0, "the first frame is acknowledged at once");
        // Three frames 16 ms apart (an animating page): each 50 ms after the one before.
        assert_eq!(pace.turn(t0 + ms(16), step), t0 + ms(50));
        assert_eq!(pace.turn(t0 + ms(33), step), t0 + ms(100));
        assert_eq!(pace.turn(t0 + ms(50), step), t0 + ms(150));
        // After a still spell the next frame goes at once again.
        assert_eq!(pace.turn(t0 + ms(1000), step), t0 + ms(1000));
        assert_eq!(pace.turn(t0 + ms(1070), step), t0 + ms(1070), "70 ms later is past its turn");
    }
}
