//! `session live S`: a live view link to a session, or `--revoke` of its links.

use std::time::Duration;

use super::{CliError, Ctx};
use crate::pb;

/// `session live S`: the link, on a line of its own (with --json, the whole answer).
pub(super) async fn link(ctx: &Ctx, session: String, control: bool, ttl: Option<Duration>) -> Result<(), CliError> {
    let mode = if control { pb::LiveViewMode::Control } else { pb::LiveViewMode::View };
    let ttl_ms = ttl.map_or(0, |t| t.as_millis().clamp(1, u32::MAX as u128) as u32);
    let req = pb::LiveViewRequest { session_id: session.clone(), mode: mode as i32, ttl_ms };
    let link = ctx.client.sessions().live_view(req).await.map_err(|s| ctx.status(s))?.into_inner();
    let expires = link.expires_at.map(|t| t.seconds * 1000 + t.nanos as i64 / 1_000_000).unwrap_or_default();
    match ctx.json {
        true => ctx.json_line(&serde_json::json!({
            "session_id": session,
            "url": link.url,
            "mode": if control { "control" } else { "view" },
            "expires_at_ms": expires,
            "link_id": link.link_id,
        })),
        false => ctx.line(&link.url),
    }
}

/// `session live S --revoke [--link L]`.
pub(super) async fn revoke(ctx: &Ctx, session: String, link_id: String) -> Result<(), CliError> {
    let req = pb::RevokeLiveViewRequest { session_id: session.clone(), link_id };
    let revoked = ctx.client.sessions().revoke_live_view(req).await.map_err(|s| ctx.status(s))?.into_inner().revoked;
    match ctx.json {
        true => ctx.json_line(&serde_json::json!({"session_id": session, "revoked": revoked})),
        false => ctx.line(&format!("revoked {revoked} live view links of {session}")),
    }
}
