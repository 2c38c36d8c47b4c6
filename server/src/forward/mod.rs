//! Forwarding between replicas sharing one database. Behind a Kubernetes Service a client's
//! calls land on any replica, but only the replica that acquired a session holds its browser.
//! A call naming a session another live replica holds is sent there whole: headers
//! (credentials, deadline, `traceparent`) and body as they stream, the answer coming back
//! unchanged, so the caller cannot tell. The owner checks the credentials again and writes
//! the call's one audit record; this replica writes none for it.
//!
//! - gRPC: [`ForwardLayer`], outermost, reads the first request message of the rpcs in
//!   [`SESSION_RPCS`] (unary or streaming), takes the session id out of it and either lets
//!   the call through or relays it over HTTP/2 to the owner's gRPC listener.
//! - HTTP: [`session_forward`] relays a `/cdp/{session}` upgrade to the owner's HTTP listener
//!   and then splices the two upgraded connections, and a `/sessions/{session}/...` download
//!   with its answer as it streams.
//!
//! A forwarded call carries [`HOP_HEADER`], and a call that carries it is never forwarded
//! again (its receiver answers from what it holds). Between replicas TLS is on when the
//! listeners have it ([`crate::tls::Tls::peer_connector`]). An owner that cannot be reached
//! within the connect timeout gives UNAVAILABLE saying so; an owner whose heartbeat is stale
//! is swept at once, so the call gets the CRASHED answer.

use std::time::Duration;

mod layer;
mod peers;
mod relay;

pub use layer::{ForwardLayer, ForwardService};
pub use peers::Peers;
pub use relay::{mcp_forward, mcp_replica, session_forward, MCP_SESSION_HEADER};

/// Set on every forwarded request, to the forwarding replica's id: its receiver never
/// forwards it again.
pub const HOP_HEADER: &str = "x-browserpool-forwarded-by";

/// Most bytes of a first request message read to find its session id. Larger ones (an
/// envelope or a document near the message cap) are let through to this replica's handler.
const MAX_PEEK: usize = 8 << 20;

/// How often an idle connection to a peer is pinged, and how long the answer may take.
const PEER_KEEPALIVE: Duration = Duration::from_secs(5);

/// Cached session -> owner answers kept at most (a session never changes replica).
const OWNER_CACHE: usize = 16_384;

/// The one list of the rpcs about one session, with their request message, whose
/// `session_id` is field 1 (of the first message, for a stream). Forwarding reads the paths
/// ([`SESSION_RPCS`]); the gRPC adapters' `AboutSession`, which names the session in the
/// rpc's audit record, is implemented for each message from it (`session_rpcs!(then)` calls
/// `then!` with the list). A test checks it against the descriptor set: an rpc whose request
/// has a `session_id` is either here or in [`ANSWERED_HERE`], with the reason.
macro_rules! session_rpcs {
    ($then:ident) => {
        $then! {
            "/browserpool.v1.Sessions/Release" => ReleaseRequest,
            "/browserpool.v1.Sessions/Renew" => RenewRequest,
            "/browserpool.v1.Sessions/Get" => GetSessionRequest,
            "/browserpool.v1.Sessions/Drive" => DriveRequest,
            "/browserpool.v1.Sessions/Act" => ActRequest,
            "/browserpool.v1.Sessions/Batch" => BatchRequest,
            "/browserpool.v1.Sessions/Events" => EventsRequest,
            "/browserpool.v1.Sessions/ExportContext" => ExportContextRequest,
            "/browserpool.v1.Sessions/ImportContext" => ImportContextRequest,
            "/browserpool.v1.Sessions/PutFile" => PutFileRequest,
            "/browserpool.v1.Sessions/ListFiles" => ListFilesRequest,
            "/browserpool.v1.Sessions/GetFile" => GetFileRequest,
            "/browserpool.v1.Sessions/DeleteFile" => DeleteFileRequest,
            "/browserpool.v1.Sessions/DeleteArtifacts" => DeleteArtifactsRequest,
            "/browserpool.v1.Sessions/LiveView" => LiveViewRequest,
            "/browserpool.v1.Sessions/RevokeLiveView" => RevokeLiveViewRequest,
            "/browserpool.v1.Admin/KillSession" => KillSessionRequest,
        }
    };
}
pub(crate) use session_rpcs;

macro_rules! paths {
    ($($path:literal => $message:ident),* $(,)?) => {
        &[$($path),*]
    };
}

/// The paths of [`session_rpcs`]: the rpcs forwarded to the replica holding their session.
pub const SESSION_RPCS: &[&str] = session_rpcs!(paths);

/// Rpcs whose request has a `session_id` that are answered by the replica that receives
/// them, and why.
pub const ANSWERED_HERE: &[(&str, &str)] = &[(
    "/browserpool.v1.Admin/QueryAudit",
    "its session_id is a filter, and the audit trail is the shared database's: any replica answers for every session",
)];

/// The field number of `session_id` in the (first) request message of an rpc about one
/// session. `List`, `Acquire` and the other Admin rpcs are answered here, from the database
/// or by fanning out ([`Peers::each_other`]).
pub fn session_field(path: &str) -> Option<u32> {
    SESSION_RPCS.contains(&path).then_some(1)
}

/// The string in field `field` (wire type 2) of a protobuf message, when present and UTF-8;
/// the last occurrence wins, as protobuf decoding has it. `None` for a malformed message:
/// the handler then refuses it with the decoder's own error.
pub fn string_field(mut msg: &[u8], field: u32) -> Option<String> {
    fn varint(buf: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = buf.split_first()?;
            *buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut found = None;
    while !msg.is_empty() {
        let key = varint(&mut msg)?;
        let (number, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(&mut msg)?;
            }
            1 => msg = msg.get(8..)?,
            2 => {
                let len = usize::try_from(varint(&mut msg)?).ok()?;
                let value = msg.get(..len)?;
                if number == u64::from(field) {
                    found = Some(std::str::from_utf8(value).ok()?.to_string());
                }
                msg = &msg[len..];
            }
            5 => msg = msg.get(4..)?,
            _ => return None,
        }
    }
    found
}

/// A failure and its causes, on one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use prost::Message;

    #[test]
    fn the_session_id_is_read_from_each_rpc_that_names_one() {
        let act = browserpool_proto::v1::ActRequest {
            session_id: "s-1".into(),
            action: Some(browserpool_proto::v1::Action { action: "navigate".into(), ..Default::default() }),
        };
        assert_eq!(string_field(&act.encode_to_vec(), 1).as_deref(), Some("s-1"));
        let drive = browserpool_proto::v1::DriveRequest { session_id: "s-2".into(), action: None };
        assert_eq!(string_field(&drive.encode_to_vec(), 1).as_deref(), Some("s-2"));
        let kill = browserpool_proto::v1::KillSessionRequest { session_id: "s-3".into(), reason: "x".into() };
        assert_eq!(string_field(&kill.encode_to_vec(), 1).as_deref(), Some("s-3"));
        // Fields before and after it, of every wire type, are skipped.
        let renew = browserpool_proto::v1::RenewRequest { session_id: "s-4".into(), idle_timeout_ms: 300 };
        let mut bytes = renew.encode_to_vec();
        bytes.extend_from_slice(&[0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x25, 1, 2, 3, 4]);
        assert_eq!(string_field(&bytes, 1).as_deref(), Some("s-4"));
        // Unset: no id. Truncated or not UTF-8: no id (the handler's decoder refuses it).
        assert_eq!(string_field(&browserpool_proto::v1::ActRequest::default().encode_to_vec(), 1), None);
        let whole = act.encode_to_vec();
        assert_eq!(string_field(&whole[..3], 1), None);
        assert_eq!(string_field(&[0x0a, 2, 0xff, 0xfe], 1), None);
        assert_eq!(string_field(&[0x0f], 1), None, "wire type 7 does not exist");
    }

    #[test]
    fn only_rpcs_about_one_session_are_forwarded() {
        for path in [
            "/browserpool.v1.Sessions/Act",
            "/browserpool.v1.Sessions/Drive",
            "/browserpool.v1.Sessions/Events",
            "/browserpool.v1.Sessions/Get",
            "/browserpool.v1.Admin/KillSession",
        ] {
            assert_eq!(session_field(path), Some(1), "{path}");
        }
        for path in [
            "/browserpool.v1.Sessions/Acquire",
            "/browserpool.v1.Sessions/List",
            "/browserpool.v1.Admin/PoolStatus",
            "/browserpool.v1.Admin/QueryAudit",
            "/grpc.health.v1.Health/Check",
            "/browserpool.v1.Sessions/Act/extra",
        ] {
            assert_eq!(session_field(path), None, "{path}");
        }
    }

    /// The list is the descriptor set's: every rpc whose request has a `session_id` is
    /// forwarded or said to be answered here, and every listed one has it as field 1.
    #[test]
    fn the_session_rpcs_are_those_of_the_descriptor_set() {
        let set = prost_types::FileDescriptorSet::decode(browserpool_proto::FILE_DESCRIPTOR_SET).unwrap();
        let messages: HashMap<String, &prost_types::DescriptorProto> = set
            .file
            .iter()
            .flat_map(|f| f.message_type.iter().map(move |m| (format!(".{}.{}", f.package(), m.name()), m)))
            .collect();
        let mut naming = Vec::new();
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let input = messages[method.input_type()];
                    if let Some(field) = input.field.iter().find(|f| f.name() == "session_id") {
                        let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                        naming.push((path, field.number()));
                    }
                }
            }
        }
        for (path, number) in &naming {
            let here = ANSWERED_HERE.iter().any(|(p, _)| p == path);
            assert!(
                SESSION_RPCS.contains(&path.as_str()) || here,
                "{path} names a session: add it to session_rpcs! (forwarded) or ANSWERED_HERE (with why)"
            );
            if !here {
                assert_eq!(*number, 1, "{path}: session_id must be field 1 to be forwarded");
            }
        }
        for path in SESSION_RPCS.iter().chain(ANSWERED_HERE.iter().map(|(p, _)| p)) {
            assert!(naming.iter().any(|(p, _)| p == path), "{path} is listed but its request names no session");
        }
    }
}
