//! MCP sessions kept in this replica's memory (the SDK's local manager), under ids that start
//! with this replica's id: `<replica>.<uuid>`, so any replica can tell where one lives
//! (`forward::mcp_replica`). Each remembers who opened it (tenant and subject), whom alone
//! it answers (`http::mcp_auth`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::server_side_http::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::local::{
    create_local_session, LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::{SessionId, SessionManager};
use rmcp::transport::WorkerTransport;

#[cfg(test)]
use crate::forward::mcp_replica as replica_of;

/// The SDK's local session manager with ids naming this replica.
#[derive(Debug)]
pub struct ReplicaSessions {
    local: LocalSessionManager,
    replica: String,
    /// Who opened each session: its id is all a client sends, so another tenant holding it
    /// could otherwise end the session (and release its browser) with a DELETE.
    openers: Mutex<HashMap<SessionId, Opener>>,
}

/// The tenant and subject of the token that opened an MCP session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opener {
    pub tenant: String,
    pub subject: String,
}

/// Whether a caller may use an MCP session this replica is asked about.
#[derive(Debug, PartialEq, Eq)]
pub enum Access {
    /// Its opener, or a session this replica does not know (another's, or none: its own
    /// layers answer that).
    Allowed,
    /// Someone else's.
    Foreign,
}

impl ReplicaSessions {
    /// Sessions of `replica` that end after `idle` without a message.
    pub fn new(replica: &str, idle: Duration) -> ReplicaSessions {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(idle);
        ReplicaSessions { local, replica: replica.to_string(), openers: Mutex::default() }
    }

    fn openers(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Opener>> {
        self.openers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records who opened session `id` (its initialize answer named it).
    pub fn opened(&self, id: &str, opener: Opener) {
        self.openers().insert(id.into(), opener);
    }

    /// Whether `caller` may use session `id`.
    pub fn access(&self, id: &str, caller: &Opener) -> Access {
        match self.openers().get(id) {
            Some(opener) if opener != caller => Access::Foreign,
            _ => Access::Allowed,
        }
    }
}

impl SessionManager for ReplicaSessions {
    type Error = LocalSessionManagerError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let id: SessionId = format!("{}.{}", self.replica, uuid::Uuid::new_v4().simple()).into();
        let (handle, worker) = create_local_session(id.clone(), self.local.session_config.clone());
        let mut sessions = self.local.sessions.write().await;
        sessions.insert(id.clone(), handle);
        // Sessions that idled out leave the SDK's table without telling: their openers go here.
        self.openers().retain(|id, _| sessions.contains_key(id));
        Ok((id, WorkerTransport::spawn(worker)))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.openers().remove(id);
        self.local.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_stream(id, message).await
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.resume(id, last_event_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ids_name_the_replica_and_are_told_apart_from_others() {
        let sessions = ReplicaSessions::new("r-0123abcd", Duration::from_secs(5));
        let (id, _transport) = sessions.create_session().await.unwrap();
        assert_eq!(replica_of(&id), Some("r-0123abcd"), "{id}");
        assert!(sessions.has_session(&id).await.unwrap());
        let (other, _t) = sessions.create_session().await.unwrap();
        assert_ne!(id, other);
        for foreign in ["", "abc", "r-1", ".x", "r-1.", "s-1.x", "9f2c6f0e-6d1a-4a57-8c8e-1f0f9c3a2b1d"] {
            assert_eq!(replica_of(foreign), None, "{foreign}");
        }
        sessions.close_session(&id).await.unwrap();
        assert!(!sessions.has_session(&id).await.unwrap());
    }

    #[tokio::test]
    async fn a_session_answers_its_opener_alone_and_forgets_it_when_closed() {
        let sessions = ReplicaSessions::new("r-0123abcd", Duration::from_secs(5));
        let who = |tenant: &str, subject: &str| Opener { tenant: tenant.into(), subject: subject.into() };
        let (id, _transport) = sessions.create_session().await.unwrap();
        sessions.opened(&id, who("a", "agent"));
        assert_eq!(sessions.access(&id, &who("a", "agent")), Access::Allowed);
        assert_eq!(sessions.access(&id, &who("b", "agent")), Access::Foreign);
        assert_eq!(sessions.access(&id, &who("a", "other")), Access::Foreign);
        // Unknown here: another replica's, or none (the SDK answers 404).
        assert_eq!(sessions.access("r-0123abcd.nope", &who("b", "agent")), Access::Allowed);
        sessions.close_session(&id).await.unwrap();
        assert!(sessions.openers().is_empty());
        // One that left the SDK's table unclosed (idled out) is forgotten at the next creation.
        let (gone, _t) = sessions.create_session().await.unwrap();
        sessions.opened(&gone, who("a", "agent"));
        sessions.local.sessions.write().await.remove(&gone);
        let (_next, _t) = sessions.create_session().await.unwrap();
        assert!(sessions.openers().is_empty());
    }
}
