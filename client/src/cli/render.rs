//! What the command line prints: aligned tables for people, and the stable JSON of each wire
//! message for scripts (field names as in the .proto, enums by their full proto names,
//! timestamps RFC 3339, `null` for an unset message).

use serde_json::{json, Value};

use crate::{pb, to_json};

/// A table with a header row; columns padded to their widest cell, the last one not padded.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<const N: usize>(header: [&str; N]) -> Table {
        Table { rows: vec![header.iter().map(|h| h.to_string()).collect()] }
    }

    pub fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.rows.push(cells.into());
    }

    /// The table as text, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|cell| cell.chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `name  value` lines for one record, names aligned; empty values left out.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k:<width$}  {v}\n")).collect()
}

/// An enum value by its proto name, or its number when this build does not know it.
fn enum_name(value: i32, name: Option<&'static str>) -> String {
    name.map(str::to_string).unwrap_or_else(|| value.to_string())
}

/// `SESSION_STATE_READY`.
pub fn session_state(state: i32) -> String {
    enum_name(state, pb::SessionState::try_from(state).ok().map(|s| s.as_str_name()))
}

/// `READY`: what tables show.
pub fn short(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix).unwrap_or(full).to_string()
}

pub fn error_code(code: i32) -> String {
    enum_name(code, pb::ErrorCode::try_from(code).ok().map(|c| c.as_str_name()))
}

fn worker_state(state: i32) -> String {
    enum_name(state, pb::WorkerState::try_from(state).ok().map(|s| s.as_str_name()))
}

pub fn dialog_kind(kind: i32) -> String {
    enum_name(kind, pb::DialogKind::try_from(kind).ok().map(|k| k.as_str_name()))
}

/// RFC 3339, or `null` when unset.
pub fn time_json(t: &Option<prost_types::Timestamp>) -> Value {
    t.as_ref().map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// RFC 3339 to the second for tables; empty when unset.
pub fn time_text(t: &Option<prost_types::Timestamp>) -> String {
    t.map(|t| prost_types::Timestamp { seconds: t.seconds, nanos: 0 }.to_string()).unwrap_or_default()
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `k=v,k2=v2`, sorted by key.
pub fn labels_text(labels: &std::collections::HashMap<String, String>) -> String {
    let mut pairs: Vec<_> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(",")
}

pub fn session_json(s: &pb::Session) -> Value {
    json!({
        "session_id": s.session_id,
        "tenant": s.tenant,
        "subject": s.subject,
        "state": session_state(s.state),
        "created_at": time_json(&s.created_at),
        "expires_at": time_json(&s.expires_at),
        "idle_deadline": time_json(&s.idle_deadline),
        "worker_id": s.worker_id,
        "queue_wait_ms": s.queue_wait_ms,
        "cdp_url": s.cdp_url,
        "labels": s.labels.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "replica": s.replica,
        "locale": s.locale,
        "timezone": s.timezone,
        "user_agent": s.user_agent,
        "geolocation": s.geolocation.map(|g| json!({"latitude": g.latitude, "longitude": g.longitude, "accuracy": g.accuracy})),
        "color_scheme": color_scheme_name(s.color_scheme),
        "extra_headers": s.extra_headers.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "offline": s.offline,
        "network": s.network.map(|n| json!({
            "latency_ms": n.latency_ms,
            "download_bytes_per_s": n.download_bytes_per_s,
            "upload_bytes_per_s": n.upload_bytes_per_s,
        })),
        "proxy_id": s.proxy_id,
        "bytes_sent": s.bytes_sent,
        "bytes_received": s.bytes_received,
    })
}

/// One session as `name  value` lines.
pub fn session_fields(s: &pb::Session) -> String {
    fields(&[
        ("session", s.session_id.clone()),
        ("state", short(&session_state(s.state), "SESSION_STATE_")),
        ("tenant", s.tenant.clone()),
        ("subject", s.subject.clone()),
        ("created", time_text(&s.created_at)),
        ("expires", time_text(&s.expires_at)),
        ("idle deadline", time_text(&s.idle_deadline)),
        ("worker", s.worker_id.clone()),
        ("replica", s.replica.clone()),
        ("queue wait", format!("{} ms", s.queue_wait_ms)),
        ("labels", labels_text(&s.labels)),
        ("locale", s.locale.clone()),
        ("timezone", s.timezone.clone()),
        ("user agent", s.user_agent.clone()),
        (
            "geolocation",
            s.geolocation.map(|g| format!("{},{} ±{} m", g.latitude, g.longitude, g.accuracy)).unwrap_or_default(),
        ),
        (
            "color scheme",
            if s.color_scheme == 0 {
                String::new()
            } else {
                short(&color_scheme_name(s.color_scheme), "COLOR_SCHEME_")
            },
        ),
        ("headers", labels_text(&s.extra_headers)),
        ("offline", if s.offline { "yes".into() } else { String::new() }),
        (
            "network",
            s.network
                .map(|n| {
                    format!(
                        "+{} ms, down {} B/s, up {} B/s",
                        n.latency_ms, n.download_bytes_per_s, n.upload_bytes_per_s
                    )
                })
                .unwrap_or_default(),
        ),
        ("proxy", s.proxy_id.clone()),
        ("network bytes", format!("{} sent, {} received", s.bytes_sent, s.bytes_received)),
        ("cdp_url", s.cdp_url.clone()),
    ])
}

/// `COLOR_SCHEME_DARK`.
fn color_scheme_name(scheme: i32) -> String {
    enum_name(scheme, pb::ColorScheme::try_from(scheme).ok().map(|c| c.as_str_name()))
}

/// Sessions as a table.
pub fn sessions_table(sessions: &[pb::Session]) -> String {
    let mut table = Table::new(["SESSION", "STATE", "TENANT", "SUBJECT", "CREATED", "EXPIRES", "REPLICA", "LABELS"]);
    for s in sessions {
        table.row([
            s.session_id.clone(),
            short(&session_state(s.state), "SESSION_STATE_"),
            s.tenant.clone(),
            s.subject.clone(),
            time_text(&s.created_at),
            time_text(&s.expires_at),
            s.replica.clone(),
            labels_text(&s.labels),
        ]);
    }
    table.render()
}

fn dialog_json(d: &pb::Dialog) -> Value {
    json!({
        "kind": dialog_kind(d.kind),
        "message": d.message,
        "url": d.url,
        "default_prompt": d.default_prompt,
        "grammar": d.grammar,
    })
}

/// An action's result; `data` is never inlined: `data_bytes` says how much there was and
/// `out` where it was written (`null` when nowhere).
pub fn result_json(r: &pb::ActionResult, out: Option<&str>) -> Value {
    json!({
        "id": r.id,
        "action": r.action,
        "alias_of": r.alias_of,
        "ok": r.ok,
        "value": r.value.as_ref().map_or(Value::Null, to_json),
        "mime_type": r.mime_type,
        "data_bytes": r.data.len(),
        "out": out,
        "error": r.error.as_ref().map_or(Value::Null, |e| json!({
            "code": error_code(e.code),
            "message": e.message,
            "did_you_mean": e.did_you_mean,
            "dialog": e.dialog.as_ref().map_or(Value::Null, dialog_json),
        })),
        "duration_ms": r.duration_ms,
        "tab_index": r.tab_index,
    })
}

/// One line for a result: `ok  navigate  {"url":...}` or `ERR click  ELEMENT_NOT_FOUND: ...`,
/// with `step` after the mark when given; then, indented, what helps to go on (the names it
/// meant, the dialog in the way).
pub fn result_line(r: &pb::ActionResult, step: Option<usize>, out: Option<&str>) -> String {
    let step = step.map(|n| format!("{n} ")).unwrap_or_default();
    if r.ok {
        let detail = if !r.data.is_empty() {
            let mime = if r.mime_type.is_empty() { "data" } else { &r.mime_type };
            match out {
                Some(path) => format!("{mime}, {} bytes -> {path}", r.data.len()),
                None => format!("{mime}, {} bytes (not written: give --out)", r.data.len()),
            }
        } else {
            r.value.as_ref().map(|v| to_json(v).to_string()).unwrap_or_else(|| "null".into())
        };
        return format!("ok  {step}{}  {detail}", r.action);
    }
    let (code, message) = r
        .error
        .as_ref()
        .map(|e| (short(&error_code(e.code), "ERROR_CODE_"), e.message.clone()))
        .unwrap_or_else(|| ("UNSPECIFIED".into(), String::new()));
    let mut line = format!("ERR {step}{}  {code}: {message}", r.action);
    if let Some(e) = &r.error {
        // The message may name them already (an unknown option's does).
        if !e.did_you_mean.is_empty() && !e.did_you_mean.iter().all(|name| message.contains(&format!("`{name}`"))) {
            line.push_str(&format!("\n    did you mean: {}", e.did_you_mean.join(", ")));
        }
        if let Some(d) = &e.dialog {
            line.push_str(&format!(
                "\n    dialog: {} {:?} (answer with: {})",
                short(&dialog_kind(d.kind), "DIALOG_KIND_"),
                d.message,
                d.grammar.join(", ")
            ));
        }
    }
    line
}

fn replica_json(r: &pb::ReplicaStatus) -> Value {
    json!({
        "replica": r.replica,
        "grpc_addr": r.grpc_addr,
        "draining": r.draining,
        "warm": r.warm,
        "leased": r.leased,
        "capacity": r.capacity,
        "error": r.error,
        "sandbox": r.sandbox,
        "unsandboxed": r.unsandboxed,
        "resource_fence": r.resource_fence,
    })
}

pub fn replicas_table(replicas: &[pb::ReplicaStatus]) -> String {
    let mut table = Table::new(["REPLICA", "GRPC", "DRAINING", "WARM", "LEASED", "CAPACITY", "ERROR"]);
    for r in replicas {
        table.row([
            r.replica.clone(),
            r.grpc_addr.clone(),
            yes_no(r.draining),
            r.warm.to_string(),
            r.leased.to_string(),
            r.capacity.to_string(),
            r.error.clone(),
        ]);
    }
    table.render()
}

pub fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

pub fn status_json(s: &pb::PoolStatusResponse) -> Value {
    json!({
        "warm": s.warm,
        "leased": s.leased,
        "capacity": s.capacity,
        "draining": s.draining,
        "workers": s.workers.iter().map(|w| json!({
            "worker_id": w.worker_id,
            "state": worker_state(w.state),
            "pid": w.pid,
            "cdp_port": w.cdp_port,
            "tenant": w.tenant,
            "session_id": w.session_id,
            "started_at": time_json(&w.started_at),
            "rss_bytes": w.rss_bytes,
            "pss_bytes": w.pss_bytes,
            "replica": w.replica,
        })).collect::<Vec<_>>(),
        "tenants": s.tenants.iter().map(|t| json!({
            "tenant": t.tenant,
            "active": t.active,
            "queued": t.queued,
            "max_slots": t.max_slots,
        })).collect::<Vec<_>>(),
        "replicas": s.replicas.iter().map(replica_json).collect::<Vec<_>>(),
    })
}

/// The pool: totals, then replicas, workers and tenants, each a table.
pub fn status_text(s: &pb::PoolStatusResponse) -> String {
    let mut out =
        format!("warm {}  leased {}  capacity {}  draining {}\n\n", s.warm, s.leased, s.capacity, yes_no(s.draining));
    out.push_str(&replicas_table(&s.replicas));
    let mut workers = Table::new(["WORKER", "STATE", "PID", "TENANT", "SESSION", "PSS", "RSS", "STARTED", "REPLICA"]);
    for w in &s.workers {
        workers.row([
            w.worker_id.clone(),
            short(&worker_state(w.state), "WORKER_STATE_"),
            w.pid.to_string(),
            w.tenant.clone(),
            w.session_id.clone(),
            mib(w.pss_bytes),
            mib(w.rss_bytes),
            time_text(&w.started_at),
            w.replica.clone(),
        ]);
    }
    out.push('\n');
    out.push_str(&workers.render());
    let mut tenants = Table::new(["TENANT", "ACTIVE", "QUEUED", "MAX_SLOTS"]);
    for t in &s.tenants {
        tenants.row([t.tenant.clone(), t.active.to_string(), t.queued.to_string(), t.max_slots.to_string()]);
    }
    out.push('\n');
    out.push_str(&tenants.render());
    out
}

pub fn drain_json(d: &pb::DrainResponse) -> Value {
    json!({
        "draining": d.draining,
        "leased": d.leased,
        "replicas": d.replicas.iter().map(replica_json).collect::<Vec<_>>(),
    })
}

pub fn tenant_json(t: &pb::Tenant) -> Value {
    json!({
        "id": t.id,
        "max_slots": t.max_slots,
        "max_queue": t.max_queue,
        "max_session_ttl_ms": t.max_session_ttl_ms,
        "idle_timeout_ms": t.idle_timeout_ms,
        "allow_hosts": t.allow_hosts,
        "allow_private_networks": t.allow_private_networks,
        "isolation": isolation_text(t.isolation),
        "max_memory_mb": t.max_memory_mb,
        "default_record": record_text(t.default_record),
        "max_file_mb": t.max_file_mb,
        "max_artifact_mb": t.max_artifact_mb,
        "artifact_ttl_s": t.artifact_ttl_s,
        "default_proxy": t.default_proxy,
        "max_session_bytes": t.max_session_bytes,
    })
}

/// A tenant's limit in milliseconds as people read it (`1h`, `5m`); 0 means the server's.
pub fn limit_text(ms: u32) -> String {
    match ms {
        0 => "server's".into(),
        ms => humantime::format_duration(std::time::Duration::from_millis(ms as u64)).to_string(),
    }
}

/// A record mode as `--record` spells it.
pub fn record_text(record: i32) -> &'static str {
    match pb::Record::try_from(record) {
        Ok(pb::Record::On) => "on",
        Ok(pb::Record::RetainOnFailure) => "on-failure",
        _ => "off",
    }
}

/// A tenant's isolation as `admin tenants put --isolation` spells it.
pub fn isolation_text(isolation: i32) -> String {
    match pb::Isolation::try_from(isolation) {
        Ok(pb::Isolation::Unspecified | pb::Isolation::Process) => "process".into(),
        Ok(pb::Isolation::Context) => "context".into(),
        Err(_) => format!("unknown ({isolation})"),
    }
}

pub fn tenants_table(tenants: &[pb::Tenant]) -> String {
    let mut table = Table::new([
        "TENANT",
        "ISOLATION",
        "MAX_SLOTS",
        "MAX_QUEUE",
        "MAX_TTL",
        "IDLE_TIMEOUT",
        "PRIVATE_NETWORKS",
        "MEMORY",
        "ALLOW_HOSTS",
    ]);
    for t in tenants {
        table.row([
            t.id.clone(),
            isolation_text(t.isolation),
            t.max_slots.to_string(),
            t.max_queue.to_string(),
            limit_text(t.max_session_ttl_ms),
            limit_text(t.idle_timeout_ms),
            yes_no(t.allow_private_networks),
            match t.max_memory_mb {
                0 => "server's".into(),
                mb => format!("{mb} MiB"),
            },
            if t.allow_hosts.is_empty() { "(any public host)".into() } else { t.allow_hosts.join(",") },
        ]);
    }
    table.render()
}

pub fn audit_json(r: &pb::AuditRecord) -> Value {
    json!({
        "seq": r.seq,
        "at": time_json(&r.at),
        "tenant": r.tenant,
        "subject": r.subject,
        "jti_hash": r.jti_hash,
        "session_id": r.session_id,
        "rpc": r.rpc,
        "action": r.action,
        "alias_of": r.alias_of,
        "target": r.target,
        "outcome": r.outcome,
        "code": r.code,
        "duration_ms": r.duration_ms,
        "prev_hash": r.prev_hash,
        "hash": r.hash,
    })
}

/// The audit table's columns (hashes left to `--json`).
pub fn audit_table() -> Table {
    Table::new(["SEQ", "AT", "TENANT", "SUBJECT", "RPC", "ACTION", "OUTCOME", "CODE", "MS", "SESSION", "TARGET"])
}

pub fn audit_row(table: &mut Table, r: &pb::AuditRecord) {
    let rpc = r.rpc.rsplit_once('.').map_or(r.rpc.as_str(), |(_, m)| m).to_string();
    table.row([
        r.seq.to_string(),
        time_text(&r.at),
        r.tenant.clone(),
        r.subject.clone(),
        rpc,
        r.action.clone(),
        r.outcome.clone(),
        r.code.clone(),
        r.duration_ms.to_string(),
        r.session_id.clone(),
        r.target.clone(),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_every_column_but_the_last() {
        let mut t = Table::new(["SESSION", "STATE", "LABELS"]);
        t.row(["s-1".into(), "READY".into(), "job=7".into()]);
        t.row(["s-22222222".into(), "".into(), "".into()]);
        assert_eq!(t.render(), "SESSION     STATE  LABELS\ns-1         READY  job=7\ns-22222222\n");
    }

    #[test]
    fn tables_count_characters_not_bytes() {
        let mut t = Table::new(["A", "B"]);
        t.row(["é".into(), "x".into()]);
        assert_eq!(t.render(), "A  B\né  x\n");
    }

    #[test]
    fn fields_align_names_and_skip_empty_values() {
        let text = fields(&[("session", "s-1".into()), ("worker", String::new()), ("idle deadline", "t".into())]);
        assert_eq!(text, "session        s-1\nidle deadline  t\n");
    }

    #[test]
    fn result_lines_say_ok_or_err_with_the_short_code() {
        let ok = pb::ActionResult {
            action: "navigate".into(),
            ok: true,
            value: Some(crate::from_json(&json!({"url": "http://x/", "status": 200}))),
            ..Default::default()
        };
        assert_eq!(result_line(&ok, Some(1), None), r#"ok  1 navigate  {"status":200,"url":"http://x/"}"#);
        let failed = pb::ActionResult {
            action: "click".into(),
            error: Some(pb::ActionError {
                code: pb::ErrorCode::ElementNotFound as i32,
                message: "no element matches #nope".into(),
                did_you_mean: vec!["clock".into()],
                dialog: None,
            }),
            ..Default::default()
        };
        assert_eq!(
            result_line(&failed, Some(2), None),
            "ERR 2 click  ELEMENT_NOT_FOUND: no element matches #nope\n    did you mean: clock"
        );
        let shot = pb::ActionResult {
            action: "screenshot".into(),
            ok: true,
            data: vec![0; 10],
            mime_type: "image/png".into(),
            ..Default::default()
        };
        assert_eq!(result_line(&shot, None, Some("a.png")), "ok  screenshot  image/png, 10 bytes -> a.png");
        assert!(result_line(&shot, None, None).contains("not written"));
        let option = pb::ActionResult {
            action: "screenshot".into(),
            error: Some(pb::ActionError {
                code: pb::ErrorCode::InvalidArgument as i32,
                message: "payload.fullPage: screenshot has no option `fullPage`; did you mean `full_page`?".into(),
                did_you_mean: vec!["full_page".into()],
                dialog: None,
            }),
            ..Default::default()
        };
        assert!(!result_line(&option, None, None).contains('\n'), "the message names it already");
    }

    #[test]
    fn tenant_limits_of_zero_are_the_server_s() {
        assert_eq!(limit_text(0), "server's");
        assert_eq!(limit_text(300_000), "5m");
    }

    #[test]
    fn results_as_json_never_inline_data() {
        let shot = pb::ActionResult {
            action: "screenshot".into(),
            ok: true,
            data: vec![1, 2, 3],
            mime_type: "image/png".into(),
            ..Default::default()
        };
        let v = result_json(&shot, Some("a.png"));
        assert_eq!(v["data_bytes"], 3);
        assert_eq!(v["out"], "a.png");
        assert_eq!(v["error"], Value::Null);
        assert!(v.get("data").is_none());
    }

    #[test]
    fn sessions_as_json_name_enums_and_times_the_proto_way() {
        let s = pb::Session {
            session_id: "s-1".into(),
            state: pb::SessionState::Ready as i32,
            created_at: Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 0 }),
            labels: [("job".to_string(), "7".to_string())].into(),
            ..Default::default()
        };
        let v = session_json(&s);
        assert_eq!(v["state"], "SESSION_STATE_READY");
        assert_eq!(v["created_at"], "2023-11-14T22:13:20Z");
        assert_eq!(v["expires_at"], Value::Null);
        assert_eq!(v["labels"], json!({"job": "7"}));
        assert_eq!(session_state(99), "99");
    }
}
