//! Answering the open dialog: the `dialog::` grammar, and the answer each kind takes (a
//! JavaScript dialog, a permission request, a held basic-auth challenge).

use std::sync::atomic::Ordering;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::page::HandleJavaScriptDialogParams;
use serde_json::json;
use tokio::sync::{broadcast, watch};

use super::state::{settle_permission, Answer, OpenDialog};
use super::{ActionCall, Driver};
use crate::actions::ActionKind;
use crate::events::{DialogInfo, DialogKind, EventKind};
use crate::outcome::{kind_name, ActResult, ActionFailure, ActionOutput, FailureCode};
use crate::sync::lock;

impl Driver {
    /// `type dialog::username|password|prompt` and `click dialog::accept|dismiss`.
    pub(super) async fn answer_dialog(&self, call: &ActionCall) -> ActResult<ActionOutput> {
        let field = call.selector.trim_start_matches("dialog::");
        let Some(open) = self.open_dialog() else {
            return Err(ActionFailure::invalid(format!(
                "selector: {} answers a dialog, and none is open",
                call.selector
            )));
        };
        let tab_index = open.info.tab_index;
        match (call.action.kind, field) {
            (ActionKind::Type, "username" | "password" | "prompt") => {
                let text =
                    call.payload.as_str().ok_or_else(|| ActionFailure::invalid("payload: a string is required"))?;
                let fits = match field {
                    "prompt" => open.info.kind == DialogKind::Prompt,
                    _ => open.info.kind == DialogKind::BasicAuth,
                };
                if !fits {
                    return Err(ActionFailure::invalid(format!(
                        "selector: {} does not apply to a {} dialog; it takes: {}",
                        call.selector,
                        kind_name(open.info.kind),
                        open.info.grammar.join(", ")
                    )));
                }
                self.shared.dialog.send_if_modified(|d| match d {
                    Some(d) if d.seq == open.seq => {
                        match field {
                            "username" => d.username = Some(text.to_string()),
                            "password" => d.password = Some(text.to_string()),
                            _ => d.prompt = Some(text.to_string()),
                        }
                        false
                    }
                    _ => false,
                });
                Ok(ActionOutput { tab_index, ..ActionOutput::default() })
            }
            (ActionKind::Click, "accept" | "dismiss") => {
                let accept = field == "accept";
                // Re-read: typed fields live in the watched value.
                let open = self.open_dialog().filter(|d| d.seq == open.seq).unwrap_or(open);
                self.answer(open, accept, call.timeout).await.map(|mut o| {
                    o.tab_index = tab_index;
                    o
                })
            }
            _ => Err(ActionFailure::invalid(format!(
                "selector: `{} {}` is not dialog grammar; this dialog takes: {}",
                call.action.name,
                call.selector,
                open.info.grammar.join(", ")
            ))),
        }
    }

    /// Accepts or dismisses `open`; a basic-auth answer then waits up to `budget` for the
    /// navigation it held.
    async fn answer(&self, open: OpenDialog, accept: bool, budget: Duration) -> ActResult<ActionOutput> {
        match &open.answer {
            Answer::Js => self.answer_js(&open, accept).await,
            Answer::Permission { session, context, id, permission, origin } => {
                if accept {
                    self.grant(permission, origin).await;
                }
                let settle = settle_permission(*id, *context, accept);
                self.raw.call(session, "Runtime.evaluate", settle).await.map_err(ActionFailure::raw)?;
                self.shared.close_dialog(open.seq);
                self.shared.events.emit(EventKind::DialogClosed {
                    kind: DialogKind::Permission,
                    accepted: accept,
                    tab_index: open.info.tab_index,
                });
                Ok(ActionOutput::default())
            }
            Answer::Auth { session, request_id, origin } => {
                self.answer_auth(&open, accept, session, request_id, origin, budget).await
            }
        }
    }

    /// `Page.handleJavaScriptDialog` on the dialog's tab.
    async fn answer_js(&self, open: &OpenDialog, accept: bool) -> ActResult<ActionOutput> {
        let tab = lock(&self.shared.tabs).list.iter().find(|tab| tab.target == open.target).cloned();
        let Some(tab) = tab else {
            self.shared.close_dialog(open.seq);
            return Err(ActionFailure::new(
                FailureCode::SessionClosed,
                "the dialog's tab is gone; go on in another tab (switch_tab)",
            ));
        };
        let mut params = HandleJavaScriptDialogParams::new(accept);
        if accept && open.info.kind == DialogKind::Prompt {
            params.prompt_text = Some(open.prompt.clone().unwrap_or_else(|| open.info.default_prompt.clone()));
        }
        // Bounded by the action's own deadline (see `run`).
        tab.page.execute(params).await.map_err(ActionFailure::cdp)?;
        // The closed event clears it too; clearing here lets the next action run at once.
        if self.shared.close_dialog(open.seq).is_some() {
            self.shared.events.emit(EventKind::DialogClosed {
                kind: open.info.kind,
                accepted: accept,
                tab_index: open.info.tab_index,
            });
        }
        Ok(ActionOutput::default())
    }

    /// Grants an accepted permission for real, so the API the page calls next sees it granted.
    async fn grant(&self, permission: &str, origin: &str) {
        let name = match permission {
            "camera" => "videoCapture",
            "microphone" => "audioCapture",
            other => other,
        };
        if let Err(e) = self
            .raw
            .call(
                "",
                "Browser.grantPermissions",
                self.shared.scoped(json!({ "origin": origin, "permissions": [name] })),
            )
            .await
        {
            tracing::debug!(error = %e, permission = %name, "grant failed; the page's own answer still says granted");
        }
    }

    /// `Fetch.continueWithAuth` with the typed credentials (remembered for the origin) or a
    /// cancel, on the raw `session` holding the challenge of `request_id` from `origin`; then
    /// waits up to `budget` for the page to load.
    async fn answer_auth(
        &self,
        open: &OpenDialog,
        accept: bool,
        session: &str,
        request_id: &str,
        origin: &str,
        budget: Duration,
    ) -> ActResult<ActionOutput> {
        let baseline = self.shared.dialog_seq.load(Ordering::SeqCst);
        let mut dialogs = self.shared.dialog.subscribe();
        let mut lifecycle = self.shared.lifecycle.subscribe();
        let response = if accept {
            let username = open.username.clone().unwrap_or_default();
            let password = open.password.clone().unwrap_or_default();
            if username.is_empty() {
                return Err(ActionFailure::invalid("type dialog::username first: no username was given"));
            }
            lock(&self.shared.credentials).insert(origin.to_string(), (username.clone(), password.clone()));
            json!({ "response": "ProvideCredentials", "username": username, "password": password })
        } else {
            json!({ "response": "CancelAuth" })
        };
        self.raw
            .call(
                session,
                "Fetch.continueWithAuth",
                json!({ "requestId": request_id, "authChallengeResponse": response }),
            )
            .await
            .map_err(ActionFailure::raw)?;
        self.shared.close_dialog(open.seq);
        self.shared.events.emit(EventKind::DialogClosed {
            kind: DialogKind::BasicAuth,
            accepted: accept,
            tab_index: open.info.tab_index,
        });
        // The held navigation now completes (or is challenged again, or shows 401).
        let loaded = async {
            loop {
                match lifecycle.recv().await {
                    Ok((s, _, name)) if s == session && name == "load" => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        tokio::select! {
            opened = wait_dialog_after(&mut dialogs, baseline) => Err(ActionFailure::dialog_open(opened)),
            r = tokio::time::timeout(budget, loaded) => match r {
                Ok(()) => Ok(ActionOutput::default()),
                Err(_) => Err(ActionFailure::new(FailureCode::Timeout, "the page did not finish loading after the answer")),
            },
        }
    }
}

/// Resolves with the first dialog opened after `baseline`.
pub(super) async fn wait_dialog_after(rx: &mut watch::Receiver<Option<OpenDialog>>, baseline: u64) -> DialogInfo {
    loop {
        if let Some(d) = rx.borrow_and_update().as_ref() {
            if d.seq > baseline {
                return d.info.clone();
            }
        }
        if rx.changed().await.is_err() {
            // The driver is gone; never resolve, the action's own result wins.
            std::future::pending::<()>().await;
        }
    }
}
