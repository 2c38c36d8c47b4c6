//! The records every layer shares, a leaf with no imports from the rest of the server: what
//! the store reads and writes, the sessions hold and the adapters put on the wire.

use std::collections::BTreeMap;

/// The tenant every fresh install has.
pub const DEFAULT_TENANT: &str = "default";

/// Where a session is in its life. Terminal states are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    Queued,
    Ready,
    Closed,
    Crashed,
    Expired,
    Killed,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Queued => "QUEUED",
            SessionState::Ready => "READY",
            SessionState::Closed => "CLOSED",
            SessionState::Crashed => "CRASHED",
            SessionState::Expired => "EXPIRED",
            SessionState::Killed => "KILLED",
        }
    }

    pub fn parse(s: &str) -> Option<SessionState> {
        [
            SessionState::Queued,
            SessionState::Ready,
            SessionState::Closed,
            SessionState::Crashed,
            SessionState::Expired,
            SessionState::Killed,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, SessionState::Queued | SessionState::Ready)
    }
}

/// Whether `s` is an id of a tenant or a proxy: 1-63 characters of a-z, 0-9, '-', '_', '.'.
pub fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
}

/// Whether `host` is a host (`example.com`) or a `*.suffix`, as `allow_hosts` and a proxy's
/// `direct_hosts` take them.
pub fn is_host_pattern(host: &str) -> bool {
    let bare = host.strip_prefix("*.").unwrap_or(host);
    !bare.is_empty() && !bare.contains(['/', ':', ' ', '*'])
}

/// A session row.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub id: String,
    pub tenant: String,
    pub subject: String,
    pub worker_id: String,
    pub state: SessionState,
    pub labels: BTreeMap<String, String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub idle_deadline_ms: i64,
    pub queue_wait_ms: u32,
    pub ended_at_ms: Option<i64>,
    pub end_reason: Option<String>,
    /// The replica that runs it (holds its browser).
    pub replica: String,
    /// What it left once ended, as JSON (see `sessions::stored::Manifest`); `None`: nothing.
    pub artifacts: Option<String>,
    /// How its browser presents itself, as acquired.
    pub emulation: browserpool_pool::Emulation,
    /// The upstream proxy its pages leave through; empty: straight out.
    pub proxy_id: String,
    /// Network bytes (sent, received): final once it has ended, 0 while live in the store
    /// (the holding replica reads its live count).
    pub bytes: (u64, u64),
}

impl SessionRecord {
    /// Why and when the session ended, and what to do, for an error about it: ` (idle
    /// timeout, at 2026-11-27T05:40:00Z): its browser is gone; acquire a new session`. Empty
    /// while it lives.
    pub fn ended(&self) -> String {
        if !self.state.is_terminal() {
            return String::new();
        }
        let reason = self.end_reason.as_deref().unwrap_or("no reason recorded");
        let reason = match self.state {
            SessionState::Killed => format!("killed by an operator: {reason}"),
            _ => reason.to_string(),
        };
        let at = self.ended_at_ms.map(|ms| {
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
            format!(", at {}", humantime::format_rfc3339_seconds(when))
        });
        let next = match self.state {
            SessionState::Expired => {
                "acquire a new session; to keep one longer, ask for a longer idle_timeout_ms or ttl_ms at acquire"
            }
            _ => "acquire a new session",
        };
        format!(" ({reason}{}): its browser is gone; {next}", at.unwrap_or_default())
    }
}

/// Where a replica's listeners are reached from the other replicas, as `host:port`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaAddrs {
    pub grpc: String,
    pub http: String,
}

/// Who may use a live session, and the replica holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOwner {
    pub replica: ReplicaRecord,
    pub tenant: String,
    pub subject: String,
}

/// A live replica as other replicas see it: where its gRPC and HTTP listeners are reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRecord {
    pub id: String,
    pub grpc_addr: String,
    pub http_addr: String,
    pub heartbeat_ms: i64,
}

/// One state change of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub state: SessionState,
    pub at_ms: i64,
    pub reason: String,
}

/// A tenant's quotas and policy.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantRecord {
    pub id: String,
    pub max_slots: u32,
    pub max_queue: u32,
    pub max_session_ttl_ms: u32,
    pub idle_timeout_ms: u32,
    pub allow_hosts: Vec<String>,
    pub allow_private_networks: bool,
    pub isolation: Isolation,
    /// Memory limit of each of its browsers, in MiB; 0: the server's `--worker-memory-mb`.
    pub max_memory_mb: u32,
    /// Whether its sessions are recorded when they do not say.
    pub default_record: RecordMode,
    /// Largest upload in MiB; 0: 100.
    pub max_file_mb: u32,
    /// Most artifact bytes kept at once on a replica, in MiB; 0: no cap.
    pub max_artifact_mb: u32,
    /// How long artifacts are kept, in seconds; 0: the server's `--artifact-ttl`.
    pub artifact_ttl_s: u32,
    /// The upstream proxy its sessions use when they name none; empty: none.
    pub default_proxy: String,
    /// Most network bytes (both ways) one session may carry; 0: no cap.
    pub max_session_bytes: u64,
}

/// Whether a session is recorded as a video, and when its video is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordMode {
    #[default]
    Off,
    /// Kept whatever the end.
    On,
    /// Kept only when the job failed (see [`RecordMode::keeps`]).
    OnFailure,
}

impl RecordMode {
    /// The stored number.
    pub fn as_i64(self) -> i64 {
        match self {
            RecordMode::Off => 0,
            RecordMode::On => 1,
            RecordMode::OnFailure => 2,
        }
    }

    pub fn from_i64(n: i64) -> Option<RecordMode> {
        Some(match n {
            0 => RecordMode::Off,
            1 => RecordMode::On,
            2 => RecordMode::OnFailure,
            _ => return None,
        })
    }

    /// Whether a recording of a session that ended as `state` is kept: always with `On`; with
    /// `OnFailure` when it crashed, expired or was killed, or `failed` (an action failed, or
    /// the client said so at release).
    pub fn keeps(self, state: SessionState, failed: bool) -> bool {
        match self {
            RecordMode::Off => false,
            RecordMode::On => true,
            RecordMode::OnFailure => {
                failed || matches!(state, SessionState::Crashed | SessionState::Expired | SessionState::Killed)
            }
        }
    }
}

/// How a tenant's sessions are kept apart from each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// A Chromium per session.
    #[default]
    Process,
    /// A browser context per session, in a Chromium the tenant's sessions share.
    Context,
}

impl Isolation {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Process => "process",
            Isolation::Context => "context",
        }
    }

    /// The stored spelling back; `None` for anything else.
    pub fn parse(s: &str) -> Option<Isolation> {
        match s {
            "process" => Some(Isolation::Process),
            "context" => Some(Isolation::Context),
            _ => None,
        }
    }
}
