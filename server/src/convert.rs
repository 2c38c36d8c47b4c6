//! Wire <-> domain conversions: protobuf `Value` and JSON, timestamps, sessions, results.

use std::collections::BTreeMap;

use browserpool_pool::{
    ColorScheme, DialogInfo, DialogKind, Emulation, Event, EventKind, FailureCode, Geolocation, Throttle, Viewport,
};
pub use browserpool_proto::json::{from_json, to_json};
use browserpool_proto::prost_types::Timestamp;
use browserpool_proto::v1 as pb;

use crate::error::ServiceError;
use crate::model::{Isolation, RecordMode, SessionRecord, TenantRecord};
use crate::sessions::{ActionReport, FileKind, SessionFile, SessionState};

/// Milliseconds since the epoch to a protobuf timestamp.
pub fn timestamp(ms: i64) -> Timestamp {
    Timestamp { seconds: ms.div_euclid(1000), nanos: (ms.rem_euclid(1000) * 1_000_000) as i32 }
}

/// Milliseconds since the epoch of a wire timestamp.
pub fn millis(t: &Timestamp) -> i64 {
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// A session's file; `expires_at` once its session has ended and it is kept.
pub fn artifact_to_pb(f: &SessionFile) -> pb::Artifact {
    let kind = match f.kind {
        FileKind::Download => pb::ArtifactKind::Download,
        FileKind::Upload => pb::ArtifactKind::Upload,
        FileKind::Recording => pb::ArtifactKind::Recording,
    };
    pb::Artifact {
        name: f.info.name.clone(),
        kind: kind as i32,
        size: f.info.size,
        mime_type: f.info.mime_type.to_string(),
        sha256: f.info.sha256.clone(),
        created_at: Some(timestamp(f.info.modified_ms)),
        expires_at: f.expires_ms.map(timestamp),
    }
}

pub fn state_to_pb(s: SessionState) -> pb::SessionState {
    match s {
        SessionState::Queued => pb::SessionState::Queued,
        SessionState::Ready => pb::SessionState::Ready,
        SessionState::Closed => pb::SessionState::Closed,
        SessionState::Crashed => pb::SessionState::Crashed,
        SessionState::Expired => pb::SessionState::Expired,
        SessionState::Killed => pb::SessionState::Killed,
    }
}

pub fn state_from_pb(s: pb::SessionState) -> Option<SessionState> {
    Some(match s {
        pb::SessionState::Unspecified => return None,
        pb::SessionState::Queued => SessionState::Queued,
        pb::SessionState::Ready => SessionState::Ready,
        pb::SessionState::Closed => SessionState::Closed,
        pb::SessionState::Crashed => SessionState::Crashed,
        pb::SessionState::Expired => SessionState::Expired,
        pb::SessionState::Killed => SessionState::Killed,
    })
}

pub fn session_to_pb(r: &SessionRecord) -> pb::Session {
    pb::Session {
        session_id: r.id.clone(),
        tenant: r.tenant.clone(),
        subject: r.subject.clone(),
        state: state_to_pb(r.state) as i32,
        created_at: Some(timestamp(r.created_at_ms)),
        expires_at: Some(timestamp(r.expires_at_ms)),
        idle_deadline: Some(timestamp(r.idle_deadline_ms)),
        worker_id: r.worker_id.clone(),
        queue_wait_ms: r.queue_wait_ms,
        // Filled in by the Sessions adapter for the session's owners (it carries a ticket).
        cdp_url: String::new(),
        labels: r.labels.clone().into_iter().collect(),
        replica: r.replica.clone(),
        // Filled in by the Sessions adapter where asked (Get).
        artifacts: Vec::new(),
        artifacts_refused: String::new(),
        proxy_id: r.proxy_id.clone(),
        bytes_sent: r.bytes.0,
        bytes_received: r.bytes.1,
        ..emulation_to_pb(&r.emulation)
    }
}

/// The emulation fields of a `Session`.
fn emulation_to_pb(e: &Emulation) -> pb::Session {
    pb::Session {
        locale: e.locale.clone().unwrap_or_default(),
        timezone: e.timezone.clone().unwrap_or_default(),
        user_agent: e.user_agent.clone().unwrap_or_default(),
        geolocation: e.geolocation.map(|g| pb::Geolocation {
            latitude: g.latitude,
            longitude: g.longitude,
            accuracy: g.accuracy,
        }),
        color_scheme: match e.color_scheme {
            None => pb::ColorScheme::Unspecified,
            Some(ColorScheme::Light) => pb::ColorScheme::Light,
            Some(ColorScheme::Dark) => pb::ColorScheme::Dark,
        } as i32,
        extra_headers: e.extra_headers.iter().cloned().collect(),
        offline: e.offline,
        network: e.network.map(|t| pb::NetworkConditions {
            latency_ms: t.latency_ms,
            download_bytes_per_s: t.download_bytes_per_s,
            upload_bytes_per_s: t.upload_bytes_per_s,
        }),
        ..Default::default()
    }
}

/// An `AcquireRequest`'s emulation, unchecked (see `Emulation::check`); an unknown colour
/// scheme number is refused.
pub fn emulation_from_pb(r: &pb::AcquireRequest) -> Result<Emulation, String> {
    let given = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let color_scheme = match pb::ColorScheme::try_from(r.color_scheme) {
        Ok(pb::ColorScheme::Unspecified) => None,
        Ok(pb::ColorScheme::Light) => Some(ColorScheme::Light),
        Ok(pb::ColorScheme::Dark) => Some(ColorScheme::Dark),
        Err(_) => return Err(format!("color_scheme: {} is not a ColorScheme; give LIGHT or DARK", r.color_scheme)),
    };
    let mut extra_headers: Vec<(String, String)> = r.extra_headers.clone().into_iter().collect();
    extra_headers.sort();
    Ok(Emulation {
        locale: given(&r.locale),
        timezone: given(&r.timezone),
        user_agent: given(&r.user_agent),
        geolocation: r.geolocation.map(|g| Geolocation {
            latitude: g.latitude,
            longitude: g.longitude,
            accuracy: g.accuracy,
        }),
        color_scheme,
        extra_headers,
        offline: r.offline,
        network: r.network.map(|n| Throttle {
            latency_ms: n.latency_ms,
            download_bytes_per_s: n.download_bytes_per_s,
            upload_bytes_per_s: n.upload_bytes_per_s,
        }),
    })
}

/// `None` when unset (a session then takes its tenant's default); an unknown number is off.
pub fn record_from_pb(record: i32) -> Option<RecordMode> {
    match pb::Record::try_from(record) {
        Ok(pb::Record::Unspecified) => None,
        Ok(pb::Record::On) => Some(RecordMode::On),
        Ok(pb::Record::RetainOnFailure) => Some(RecordMode::OnFailure),
        _ => Some(RecordMode::Off),
    }
}

pub fn viewport_from_pb(v: Option<pb::Viewport>) -> Option<Viewport> {
    v.map(|v| Viewport { width: v.width, height: v.height, scale: v.scale, mobile: v.mobile })
}

pub fn labels_from_pb(labels: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    labels.into_iter().collect()
}

fn code_to_pb(c: FailureCode) -> pb::ErrorCode {
    match c {
        FailureCode::InvalidArgument => pb::ErrorCode::InvalidArgument,
        FailureCode::UnknownAction => pb::ErrorCode::UnknownAction,
        FailureCode::ElementNotFound => pb::ErrorCode::ElementNotFound,
        FailureCode::Timeout => pb::ErrorCode::Timeout,
        FailureCode::DialogOpen => pb::ErrorCode::DialogOpen,
        FailureCode::PayloadTooLarge => pb::ErrorCode::PayloadTooLarge,
        FailureCode::NavigationFailed => pb::ErrorCode::NavigationFailed,
        FailureCode::BlockedByPolicy => pb::ErrorCode::BlockedByPolicy,
        FailureCode::PermissionDenied => pb::ErrorCode::PermissionDenied,
        FailureCode::JsException => pb::ErrorCode::JsException,
        FailureCode::SessionClosed => pb::ErrorCode::SessionClosed,
        FailureCode::SessionCrashed => pb::ErrorCode::SessionCrashed,
        FailureCode::TabCrashed => pb::ErrorCode::TabCrashed,
        FailureCode::Internal => pb::ErrorCode::Internal,
    }
}

pub fn report_to_pb(r: ActionReport) -> pb::ActionResult {
    let mut out = pb::ActionResult {
        id: r.id,
        action: r.action,
        alias_of: r.alias_of,
        duration_ms: r.duration_ms,
        ..Default::default()
    };
    match r.outcome {
        Ok(o) => {
            out.ok = true;
            out.tab_index = o.tab_index;
            out.value = Some(from_json(&o.value));
            out.data = o.data;
            out.mime_type = o.mime_type;
        }
        Err(f) => {
            out.error = Some(pb::ActionError {
                code: code_to_pb(f.code) as i32,
                message: f.message_with_next_step(&out.action),
                did_you_mean: f.did_you_mean,
                dialog: f.dialog.map(|d| dialog_to_pb(*d)),
            });
        }
    }
    out
}

fn dialog_kind_to_pb(k: DialogKind) -> pb::DialogKind {
    match k {
        DialogKind::Alert => pb::DialogKind::Alert,
        DialogKind::Confirm => pb::DialogKind::Confirm,
        DialogKind::Prompt => pb::DialogKind::Prompt,
        DialogKind::BeforeUnload => pb::DialogKind::Beforeunload,
        DialogKind::BasicAuth => pb::DialogKind::BasicAuth,
        DialogKind::Permission => pb::DialogKind::Permission,
    }
}

pub fn dialog_to_pb(d: DialogInfo) -> pb::Dialog {
    pb::Dialog {
        kind: dialog_kind_to_pb(d.kind) as i32,
        message: d.message,
        url: d.url,
        default_prompt: d.default_prompt,
        grammar: d.grammar,
    }
}

/// A worker event on the wire.
pub fn event_to_pb(session_id: &str, e: Event, dropped: u64) -> pb::Event {
    use pb::event::Kind;
    let kind = match e.kind {
        EventKind::DialogOpened(d) => {
            let tab_index = d.tab_index;
            Kind::DialogOpened(pb::DialogOpened { dialog: Some(dialog_to_pb(d)), tab_index })
        }
        EventKind::DialogClosed { kind, accepted, tab_index } => {
            Kind::DialogClosed(pb::DialogClosed { kind: dialog_kind_to_pb(kind) as i32, accepted, tab_index })
        }
        EventKind::Console { level, text, tab_index } => Kind::Console(pb::ConsoleMessage { level, text, tab_index }),
        EventKind::Navigated { url, tab_index } => Kind::Navigated(pb::PageNavigated { url, tab_index }),
        EventKind::TabOpened { tab_index, url } => Kind::TabOpened(pb::TabOpened { tab_index, url }),
        EventKind::TabClosed { tab_index } => Kind::TabClosed(pb::TabClosed { tab_index }),
        EventKind::ArtifactsRefused { reason } => Kind::ArtifactsRefused(pb::ArtifactsRefused { reason }),
        EventKind::SessionEnded { state, reason } => Kind::SessionEnded(pb::SessionEnded {
            state: SessionState::parse(&state).map(state_to_pb).unwrap_or(pb::SessionState::Unspecified) as i32,
            reason,
        }),
    };
    let ms = e.at.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    pb::Event { at: Some(timestamp(ms)), session_id: session_id.to_string(), kind: Some(kind), dropped }
}

/// A tenant on the wire.
pub fn tenant_to_pb(t: TenantRecord) -> pb::Tenant {
    pb::Tenant {
        id: t.id,
        max_slots: t.max_slots,
        max_queue: t.max_queue,
        max_session_ttl_ms: t.max_session_ttl_ms,
        idle_timeout_ms: t.idle_timeout_ms,
        allow_hosts: t.allow_hosts,
        allow_private_networks: t.allow_private_networks,
        isolation: match t.isolation {
            Isolation::Process => pb::Isolation::Process,
            Isolation::Context => pb::Isolation::Context,
        } as i32,
        max_memory_mb: t.max_memory_mb,
        default_record: record_to_pb(t.default_record) as i32,
        max_file_mb: t.max_file_mb,
        max_artifact_mb: t.max_artifact_mb,
        artifact_ttl_s: t.artifact_ttl_s,
        default_proxy: t.default_proxy,
        max_session_bytes: t.max_session_bytes,
    }
}

pub fn record_to_pb(record: RecordMode) -> pb::Record {
    match record {
        RecordMode::Off => pb::Record::Off,
        RecordMode::On => pb::Record::On,
        RecordMode::OnFailure => pb::Record::RetainOnFailure,
    }
}

/// A tenant from the wire; `tenants::validate` checks it when it is saved. An isolation the
/// proto does not define is refused.
pub fn tenant_from_pb(t: pb::Tenant) -> Result<TenantRecord, ServiceError> {
    let isolation = match pb::Isolation::try_from(t.isolation) {
        Ok(pb::Isolation::Unspecified | pb::Isolation::Process) => Isolation::Process,
        Ok(pb::Isolation::Context) => Isolation::Context,
        Err(_) => {
            return Err(ServiceError::InvalidArgument(format!(
                "tenant.isolation: {} is not an Isolation (ISOLATION_PROCESS = 1, ISOLATION_CONTEXT = 2)",
                t.isolation
            )))
        }
    };
    Ok(TenantRecord {
        id: t.id,
        max_slots: t.max_slots,
        max_queue: t.max_queue,
        max_session_ttl_ms: t.max_session_ttl_ms,
        idle_timeout_ms: t.idle_timeout_ms,
        allow_hosts: t.allow_hosts,
        allow_private_networks: t.allow_private_networks,
        isolation,
        max_memory_mb: t.max_memory_mb,
        default_record: record_from_pb(t.default_record).unwrap_or_default(),
        max_file_mb: t.max_file_mb,
        max_artifact_mb: t.max_artifact_mb,
        artifact_ttl_s: t.artifact_ttl_s,
        default_proxy: t.default_proxy,
        max_session_bytes: t.max_session_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn timestamps_split_millis() {
        let t = timestamp(1_795_000_000_123);
        assert_eq!((t.seconds, t.nanos), (1_795_000_000, 123_000_000));
        assert_eq!(millis(&t), 1_795_000_000_123);
    }
}
