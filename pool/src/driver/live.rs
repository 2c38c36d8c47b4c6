//! Live view: the active tab's picture for the people watching a session, and their mouse and
//! keyboard. One screencast serves every viewer of a session; each sees the latest frame (a
//! slow viewer skips frames, nothing queues). It starts with the first viewer and stops at
//! the first frame after the last one leaves (unless the session is recorded), so nobody
//! watching costs nothing.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;

use super::Shared;
use crate::events::{DialogInfo, DialogKind};
use crate::rawcdp::RawCdp;
use crate::sync::lock;

/// The longest one input or a tab's title waits for the browser.
const CALL_WAIT: Duration = Duration::from_secs(5);

pub use super::pacing::LiveFrame;

/// A session's screencast while someone watches.
pub(crate) struct LiveCast {
    frames: watch::Sender<Option<LiveFrame>>,
    viewers: AtomicUsize,
    shown: AtomicU64,
}

impl LiveCast {
    /// A frame of the screencast: the picture viewers see now.
    pub(crate) fn show(&self, mut frame: LiveFrame) {
        frame.seq = self.shown.fetch_add(1, Ordering::SeqCst) + 1;
        self.frames.send_replace(Some(frame));
    }
}

/// What a person does through the live view. Positions are fractions of the picture (0 to 1),
/// so they map onto the page at any window size.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum LiveInput {
    /// `action`: `move`, `down`, `up` or `wheel`.
    Mouse {
        action: String,
        x: f64,
        y: f64,
        #[serde(default)]
        button: String,
        #[serde(default)]
        clicks: u32,
        #[serde(default)]
        modifiers: u32,
        #[serde(default)]
        dx: f64,
        #[serde(default)]
        dy: f64,
    },
    /// `action`: `down` or `up`; `key` as a browser names it (`a`, `Enter`, `ArrowLeft`).
    Key {
        action: String,
        key: String,
        #[serde(default)]
        code: String,
        #[serde(default)]
        modifiers: u32,
    },
    /// Text typed or pasted at once.
    Text { text: String },
}

/// The CDP call one input makes on the active tab, given the page's size in CSS pixels.
fn input_call(input: &LiveInput, (width, height): (f64, f64)) -> Result<(&'static str, serde_json::Value), String> {
    let modifiers_ok = |m: u32| if m <= 15 { Ok(m) } else { Err(format!("modifiers {m} is not a mask of 1|2|4|8")) };
    match input {
        LiveInput::Mouse { action, x, y, button, clicks, modifiers, dx, dy } => {
            if !(x.is_finite() && y.is_finite() && dx.is_finite() && dy.is_finite()) {
                return Err("a mouse position is not a number".into());
            }
            let kind = match action.as_str() {
                "move" => "mouseMoved",
                "down" => "mousePressed",
                "up" => "mouseReleased",
                "wheel" => "mouseWheel",
                other => return Err(format!("unknown mouse action {other:?} (move, down, up, wheel)")),
            };
            let button = match button.as_str() {
                "" | "none" => "none",
                b @ ("left" | "middle" | "right") => b,
                other => return Err(format!("unknown mouse button {other:?} (left, middle, right)")),
            };
            let params = json!({
                "type": kind,
                "x": x.clamp(0.0, 1.0) * width,
                "y": y.clamp(0.0, 1.0) * height,
                "button": button,
                "clickCount": (*clicks).min(3),
                "modifiers": modifiers_ok(*modifiers)?,
                "deltaX": dx.clamp(-10_000.0, 10_000.0),
                "deltaY": dy.clamp(-10_000.0, 10_000.0),
            });
            Ok(("Input.dispatchMouseEvent", params))
        }
        LiveInput::Key { action, key, code, modifiers } => {
            let modifiers = modifiers_ok(*modifiers)?;
            let def = chromiumoxide::keys::get_key_definition(key.as_str());
            if def.is_none() && key.chars().count() != 1 {
                return Err(format!("unknown key {key:?}"));
            }
            let key_code = def.map_or(0, |d| d.key_code);
            // Text only without Control, Alt or Meta, as on a real keyboard.
            let text = (modifiers & !8 == 0)
                .then(|| {
                    def.and_then(|d| d.text)
                        .map(str::to_string)
                        .or_else(|| (key.chars().count() == 1).then(|| key.clone()))
                })
                .flatten();
            let kind = match (action.as_str(), &text) {
                ("down", Some(_)) => "keyDown",
                ("down", None) => "rawKeyDown",
                ("up", _) => "keyUp",
                (other, _) => return Err(format!("unknown key action {other:?} (down, up)")),
            };
            let code = if code.is_empty() { def.map_or("", |d| d.code).to_string() } else { code.clone() };
            let mut params = json!({
                "type": kind,
                "key": key,
                "code": code,
                "windowsVirtualKeyCode": key_code,
                "nativeVirtualKeyCode": key_code,
                "modifiers": modifiers,
            });
            if let (Some(text), "keyDown") = (text, kind) {
                params["text"] = json!(text);
                params["unmodifiedText"] = json!(text);
            }
            Ok(("Input.dispatchKeyEvent", params))
        }
        LiveInput::Text { text } if text.len() <= 64 << 10 => Ok(("Input.insertText", json!({ "text": text }))),
        LiveInput::Text { .. } => Err("text longer than 64 KiB".into()),
    }
}

/// A session's screen for live view: cheap to clone, usable while actions run.
#[derive(Clone)]
pub struct Screen {
    pub(crate) shared: Arc<Shared>,
    pub(crate) raw: RawCdp,
}

/// One person watching: the latest picture, until dropped.
pub struct Watching {
    cast: Arc<LiveCast>,
    shared: Arc<Shared>,
    /// The active tab's picture: the latest one, changed whenever the page shows another.
    pub frames: watch::Receiver<Option<LiveFrame>>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        if self.cast.viewers.fetch_sub(1, Ordering::SeqCst) == 1 {
            let mut live = lock(&self.shared.live);
            if live.as_ref().is_some_and(|c| Arc::ptr_eq(c, &self.cast) && c.viewers.load(Ordering::SeqCst) == 0) {
                // The screencast stops at its next frame (see `watchers`), unless recorded.
                live.take();
            }
        }
    }
}

impl Screen {
    /// Starts watching: the first viewer starts the screencast on every tab and gets the
    /// picture as it is now; a later one gets the latest frame at once.
    pub async fn watch(&self) -> Watching {
        let (cast, first) = {
            let mut live = lock(&self.shared.live);
            let cast = live.get_or_insert_with(|| {
                Arc::new(LiveCast {
                    frames: watch::channel(None).0,
                    viewers: AtomicUsize::new(0),
                    shown: AtomicU64::new(0),
                })
            });
            (cast.clone(), cast.viewers.fetch_add(1, Ordering::SeqCst) == 0)
        };
        let watching = Watching { frames: cast.frames.subscribe(), cast: cast.clone(), shared: self.shared.clone() };
        if first {
            let tabs: Vec<String> = lock(&self.shared.tabs).list.iter().map(|t| t.session.clone()).collect();
            for session in tabs {
                super::pacing::screencast(&self.raw, &session, None).await;
            }
            // A still page sends no frame until it changes: its picture now.
            if let Some(frame) = super::pacing::picture(&self.shared, &self.raw).await {
                if cast.frames.borrow().is_none() {
                    cast.show(frame);
                }
            }
        }
        watching
    }

    fn active_session(&self) -> Option<String> {
        let tabs = lock(&self.shared.tabs);
        tabs.list.get(tabs.active).map(|t| t.session.clone())
    }

    /// The session's tabs (URL and title of each) and the index of the one in front.
    pub async fn tabs(&self) -> (Vec<TabInfo>, usize) {
        let (targets, active) = {
            let tabs = lock(&self.shared.tabs);
            (tabs.list.iter().map(|t| t.target.as_ref().to_string()).collect::<Vec<_>>(), tabs.active)
        };
        let mut infos = Vec::with_capacity(targets.len());
        for target in targets {
            let info = self.raw.call("", "Target.getTargetInfo", json!({ "targetId": target }));
            let info = tokio::time::timeout(CALL_WAIT, info).await.ok().and_then(Result::ok).unwrap_or_default();
            let field = |name: &str| info["targetInfo"][name].as_str().unwrap_or_default().to_string();
            infos.push(TabInfo { url: field("url"), title: field("title") });
        }
        (infos, active)
    }

    /// The dialog open now, if any (a JavaScript dialog, a permission request or a basic-auth
    /// challenge), and a way to wait for the next change.
    pub fn dialogs(&self) -> Dialogs {
        Dialogs(self.shared.dialog.subscribe())
    }

    /// Sends one input of a person's to the active tab, mapped onto its page (the size of the
    /// latest picture), without waiting for the browser to take it (a click that opens a
    /// dialog is taken only once the dialog is answered). A malformed one is refused with the
    /// reason.
    pub fn input(&self, input: &LiveInput) -> Result<(), String> {
        let size = {
            let live = lock(&self.shared.live);
            let frame = live.as_ref().and_then(|c| c.frames.borrow().clone());
            frame.map(|f| (f.width, f.height)).filter(|(w, h)| *w > 0.0 && *h > 0.0)
        };
        let (method, params) = input_call(input, size.unwrap_or((0.0, 0.0)))?;
        if size.is_none() && method == "Input.dispatchMouseEvent" {
            return Err("no picture yet: the mouse has nowhere to go".into());
        }
        let session = self.active_session().ok_or("the session has no open tab")?;
        self.raw.send(&session, method, params);
        Ok(())
    }
}

/// One tab of a session, as a viewer sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TabInfo {
    pub url: String,
    pub title: String,
}

/// The session's open dialog, watched.
pub struct Dialogs(watch::Receiver<Option<super::OpenDialog>>);

impl Dialogs {
    /// The dialog open now.
    pub fn current(&mut self) -> Option<DialogInfo> {
        self.0.borrow_and_update().as_ref().map(|d| d.info.clone())
    }

    /// Resolves when a dialog opens or closes (never, once the session is gone).
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A dialog's kind as the live view page names it.
pub fn dialog_kind(kind: DialogKind) -> &'static str {
    crate::outcome::kind_name(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<LiveInput, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn a_click_lands_on_the_page_at_its_own_scale() {
        let down = parse(r#"{"type":"mouse","action":"down","x":0.5,"y":0.25,"button":"left","clicks":1}"#).unwrap();
        let (method, params) = input_call(&down, (1280.0, 720.0)).unwrap();
        assert_eq!(method, "Input.dispatchMouseEvent");
        assert_eq!(
            (params["type"].as_str(), params["x"].as_f64(), params["y"].as_f64()),
            (Some("mousePressed"), Some(640.0), Some(180.0))
        );
        // Off the picture: held to its edge.
        let off = parse(r#"{"type":"mouse","action":"move","x":7,"y":-1}"#).unwrap();
        let (_, params) = input_call(&off, (100.0, 50.0)).unwrap();
        assert_eq!((params["x"].as_f64(), params["y"].as_f64()), (Some(100.0), Some(0.0)));
    }

    #[test]
    fn keys_type_text_unless_a_modifier_says_otherwise() {
        let (_, a) = input_call(&parse(r#"{"type":"key","action":"down","key":"a"}"#).unwrap(), (1.0, 1.0)).unwrap();
        assert_eq!((a["type"].as_str(), a["text"].as_str()), (Some("keyDown"), Some("a")));
        let (_, enter) =
            input_call(&parse(r#"{"type":"key","action":"down","key":"Enter"}"#).unwrap(), (1.0, 1.0)).unwrap();
        assert_eq!((enter["windowsVirtualKeyCode"].as_i64(), enter["text"].as_str()), (Some(13), Some("\r")));
        let (_, ctrl_a) =
            input_call(&parse(r#"{"type":"key","action":"down","key":"a","modifiers":2}"#).unwrap(), (1.0, 1.0))
                .unwrap();
        assert_eq!((ctrl_a["type"].as_str(), ctrl_a.get("text")), (Some("rawKeyDown"), None));
    }

    #[test]
    fn malformed_input_is_refused_with_the_reason() {
        for (json, says) in [
            (r#"{"type":"mouse","action":"fly","x":0,"y":0}"#, "unknown mouse action"),
            (r#"{"type":"mouse","action":"down","x":0,"y":0,"button":"fourth"}"#, "unknown mouse button"),
            (r#"{"type":"key","action":"down","key":"NoSuchKey"}"#, "unknown key"),
            (r#"{"type":"key","action":"down","key":"a","modifiers":99}"#, "modifiers"),
        ] {
            let e = input_call(&parse(json).unwrap(), (1.0, 1.0)).unwrap_err();
            assert!(e.contains(says), "{json}: {e}");
        }
        assert!(parse(r#"{"type":"mouse","action":"down","x":"a","y":0}"#).is_err());
        assert!(parse(r#"{"type":"script","code":"alert(1)"}"#).is_err(), "only mouse, key and text");
        assert!(parse(r#"{"type":"text","text":"x","extra":1}"#).is_err(), "unknown fields refused");
        let long = LiveInput::Text { text: "x".repeat(65 << 10) };
        assert!(input_call(&long, (1.0, 1.0)).is_err());
    }
}
