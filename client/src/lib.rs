//! A typed Rust SDK for browserpool: connect with a token, acquire, act, drive, release.
//!
//! ```no_run
//! # async fn demo() -> Result<(), browserpool_client::Error> {
//! use browserpool_client::{Client, action};
//! let client = Client::connect("http://127.0.0.1:50051", "<jwt>").await?;
//! let session = client.acquire(5_000).await?;
//! let result = client.act(&session.session_id, action("navigate", "", "http://127.0.0.1:8080/")).await?;
//! assert!(result.ok);
//! client.release(&session.session_id).await?;
//! # Ok(()) }
//! ```

pub use browserpool_proto::json::{from_json, to_json};
use browserpool_proto::tonic::metadata::{Ascii, MetadataValue};
use browserpool_proto::tonic::service::interceptor::InterceptedService;
use browserpool_proto::tonic::transport::{Channel, Endpoint};
use browserpool_proto::tonic::{self, Request, Status};
pub use browserpool_proto::v1 as pb;

/// Client errors: connecting, or a gRPC status from the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("token is not valid metadata")]
    BadToken,
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] Status),
}

/// Adds `authorization: Bearer <jwt>` to every call.
#[derive(Clone)]
pub struct Bearer(MetadataValue<Ascii>);

impl Bearer {
    /// A bearer interceptor for `token`.
    pub fn new(token: &str) -> Result<Bearer, Error> {
        format!("Bearer {}", token.trim()).parse().map(Bearer).map_err(|_| Error::BadToken)
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

/// Generated stubs with the bearer token attached.
pub type SessionsClient = pb::sessions_client::SessionsClient<InterceptedService<Channel, Bearer>>;
pub type AdminClient = pb::admin_client::AdminClient<InterceptedService<Channel, Bearer>>;

/// A connected client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    sessions: SessionsClient,
    admin: AdminClient,
}

impl Client {
    /// Connects to `endpoint` (e.g. `http://127.0.0.1:50051`) with a JWT.
    pub async fn connect(endpoint: impl Into<String>, token: &str) -> Result<Client, Error> {
        let channel = Endpoint::from_shared(endpoint.into())?.connect().await?;
        Client::with_channel(channel, token)
    }

    /// Uses an existing channel.
    pub fn with_channel(channel: Channel, token: &str) -> Result<Client, Error> {
        let bearer = Bearer::new(token)?;
        Ok(Client {
            sessions: pb::sessions_client::SessionsClient::with_interceptor(channel.clone(), bearer.clone()),
            admin: pb::admin_client::AdminClient::with_interceptor(channel, bearer),
        })
    }

    /// The raw `Sessions` stub.
    pub fn sessions(&self) -> SessionsClient {
        self.sessions.clone()
    }

    /// The raw `Admin` stub.
    pub fn admin(&self) -> AdminClient {
        self.admin.clone()
    }

    /// Acquires a browser with default settings, waiting up to `wait_ms`.
    pub async fn acquire(&self, wait_ms: u32) -> Result<pb::Session, Error> {
        self.acquire_with(pb::AcquireRequest { wait_ms, ..Default::default() }).await
    }

    /// Acquires with a full request.
    pub async fn acquire_with(&self, req: pb::AcquireRequest) -> Result<pb::Session, Error> {
        Ok(self.sessions().acquire(req).await?.into_inner())
    }

    /// Runs one action.
    pub async fn act(&self, session_id: &str, action: pb::Action) -> Result<pb::ActionResult, Error> {
        let req = pb::ActRequest { session_id: session_id.into(), action: Some(action) };
        Ok(self.sessions().act(req).await?.into_inner())
    }

    /// Releases a session (idempotent).
    pub async fn release(&self, session_id: &str) -> Result<pb::ReleaseResponse, Error> {
        Ok(self.sessions().release(pb::ReleaseRequest { session_id: session_id.into() }).await?.into_inner())
    }

    /// Reads a session.
    pub async fn get(&self, session_id: &str) -> Result<pb::Session, Error> {
        Ok(self.sessions().get(pb::GetSessionRequest { session_id: session_id.into() }).await?.into_inner())
    }
}

/// Builds an action: name, selector (may be empty) and a payload (anything JSON-like).
pub fn action(name: &str, selector: &str, payload: impl Into<serde_json::Value>) -> pb::Action {
    pb::Action {
        action: name.into(),
        selector: selector.into(),
        payload: Some(from_json(&payload.into())),
        ..Default::default()
    }
}
