//! `session events S`: the session's events (console, dialogs, navigations, tabs, its end) as
//! they happen, one line each (with --json, one JSON object each), until the session ends.

use serde_json::{json, Value};

use super::render::{dialog_kind, session_state, short, time_json, time_text};
use super::{CliError, Ctx};
use crate::pb;
use crate::pb::event::Kind;

/// Streams the events of `session` until it ends (or the stream breaks: then an error).
pub(super) async fn run(ctx: &Ctx, session: String) -> Result<(), CliError> {
    let req = pb::EventsRequest { session_id: session };
    let mut stream = ctx.client.sessions().events(req).await.map_err(|s| ctx.status(s))?.into_inner();
    while let Some(event) = stream.message().await.map_err(|s| ctx.status(s))? {
        match ctx.json {
            true => ctx.json_line(&event_json(&event))?,
            false => ctx.line(&event_line(&event))?,
        }
    }
    Ok(())
}

/// What happened and its details, as (kind, fields).
fn parts(e: &pb::Event) -> (&'static str, Vec<(&'static str, Value)>) {
    match &e.kind {
        Some(Kind::DialogOpened(d)) => {
            let dialog = d.dialog.clone().unwrap_or_default();
            let kind = short(&dialog_kind(dialog.kind), "DIALOG_KIND_").to_lowercase();
            let fields = vec![
                ("tab", json!(d.tab_index)),
                ("dialog", json!(kind)),
                ("message", json!(dialog.message)),
                ("answer_with", json!(dialog.grammar)),
            ];
            ("dialog_opened", fields)
        }
        Some(Kind::DialogClosed(d)) => {
            let kind = short(&dialog_kind(d.kind), "DIALOG_KIND_").to_lowercase();
            (
                "dialog_closed",
                vec![("tab", json!(d.tab_index)), ("dialog", json!(kind)), ("accepted", json!(d.accepted))],
            )
        }
        Some(Kind::Console(c)) => {
            ("console", vec![("tab", json!(c.tab_index)), ("level", json!(c.level)), ("text", json!(c.text))])
        }
        Some(Kind::Navigated(n)) => ("navigated", vec![("tab", json!(n.tab_index)), ("url", json!(n.url))]),
        Some(Kind::TabOpened(t)) => ("tab_opened", vec![("tab", json!(t.tab_index)), ("url", json!(t.url))]),
        Some(Kind::TabClosed(t)) => ("tab_closed", vec![("tab", json!(t.tab_index))]),
        Some(Kind::ArtifactsRefused(a)) => ("artifacts_refused", vec![("reason", json!(a.reason))]),
        Some(Kind::SessionEnded(s)) => {
            let state = short(&session_state(s.state), "SESSION_STATE_");
            ("session_ended", vec![("state", json!(state)), ("reason", json!(s.reason))])
        }
        None => ("unknown", Vec::new()),
    }
}

/// `{"at": ..., "session_id": ..., "kind": ..., <fields>, "dropped": n}`.
fn event_json(e: &pb::Event) -> Value {
    let (kind, fields) = parts(e);
    let mut out = json!({ "at": time_json(&e.at), "session_id": e.session_id, "kind": kind });
    for (name, value) in fields {
        out[name] = value;
    }
    if e.dropped > 0 {
        out["dropped"] = json!(e.dropped);
    }
    out
}

/// `2026-11-27T05:20:01Z console tab=0 level=error text="boom"`: strings quoted (JSON), so a
/// line stays one line whatever the page logged.
fn event_line(e: &pb::Event) -> String {
    let (kind, fields) = parts(e);
    let mut line = format!("{} {kind}", time_text(&e.at));
    for (name, value) in fields {
        line.push_str(&format!(" {name}={value}"));
    }
    if e.dropped > 0 {
        line.push_str(&format!(" (dropped {} before this one: read too slowly)", e.dropped));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_console_message_with_a_newline_stays_on_one_line() {
        let e = pb::Event {
            session_id: "s-1".into(),
            kind: Some(Kind::Console(pb::ConsoleMessage { level: "error".into(), text: "a\nb".into(), tab_index: 0 })),
            ..Default::default()
        };
        assert_eq!(event_line(&e), r#" console tab=0 level="error" text="a\nb""#);
        assert_eq!(event_json(&e)["text"], "a\nb");
        let ended = pb::Event {
            kind: Some(Kind::SessionEnded(pb::SessionEnded { state: 3, reason: "released".into() })),
            dropped: 2,
            ..Default::default()
        };
        let line = event_line(&ended);
        assert!(line.contains(r#"session_ended state="CLOSED" reason="released" (dropped 2"#), "{line}");
        assert_eq!(event_json(&ended)["state"], "CLOSED");
    }
}
