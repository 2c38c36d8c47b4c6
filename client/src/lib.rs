//! A typed Rust SDK for browserpool: acquire a browser from the pool, drive it, release it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), browserpool_client::Error> {
//! use std::time::Duration;
//! use browserpool_client::{Client, WaitUntil};
//!
//! let client = Client::connect("http://127.0.0.1:50051", "<jwt>").await?;
//! // Waits up to 10 s in the queue; a full or unreachable service is retried (see `Retry`).
//! let session = client.session().wait(Duration::from_secs(10)).await?;
//! let page = session.navigate("http://127.0.0.1:8000/").wait_until(WaitUntil::Load).await?;
//! println!("{} answered {:?}", page.url, page.status);
//! session.type_text("#name", "Ada").await?;
//! session.click("#go").await?;
//! let greeting: Option<String> = session.extract("#greeting").await?;
//! let png: Vec<u8> = session.screenshot().full_page().await?;
//! println!("{greeting:?}, {} bytes of PNG", png.len());
//! session.release().await?; // also released, in the background, when dropped
//! # Ok(()) }
//! ```
//!
//! A failed action is [`Error::Action`], with its code, message, `did_you_mean` and the dialog
//! blocking the page, if any:
//!
//! ```no_run
//! # async fn demo(session: browserpool_client::Session) {
//! use browserpool_client::{pb, Error};
//! match session.click("#missing").timeout(std::time::Duration::from_millis(500)).await {
//!     Err(Error::Action(e)) if e.code == pb::ErrorCode::ElementNotFound => println!("{e}"),
//!     Err(Error::Action(e)) if e.code == pb::ErrorCode::DialogOpen => {
//!         println!("answer it with one of {:?}", e.dialog.map(|d| d.grammar));
//!     }
//!     other => println!("{other:?}"),
//! }
//! # }
//! ```
//!
//! Over TLS, with the CA that signed the server's certificate and, for a server with mutual
//! TLS, a client certificate:
//!
//! ```no_run
//! # async fn demo() -> Result<(), browserpool_client::Error> {
//! use browserpool_client::{Client, TlsOptions};
//! let tls = TlsOptions {
//!     ca_pem: std::fs::read("ca.pem")?,
//!     identity: Some((std::fs::read("client.pem")?, std::fs::read("client-key.pem")?)),
//!     ..Default::default()
//! };
//! let client = Client::connect_tls("https://browserpool.example:50051", "<jwt>", tls).await?;
//! # Ok(()) }
//! ```
//!
//! The generated stubs stay reachable ([`Client::sessions`], [`Client::admin`], [`pb`]) for
//! what the typed layer does not cover. Every action's payload and options:
//! `docs/actions.md` in the repository.

#![deny(missing_docs)]

mod retry;
mod session;
mod steps;

pub use retry::Retry;
pub use session::{AcquireBuilder, DriveSender, Session};
pub use steps::{kind, ActionError, Button, Navigated, Output, Step, StepKind, TabIndex, TabInfo, WaitUntil};

/// The `browserpool session|admin` command line, for the `browserpool` binary: not part of
/// the SDK (its argument structs are documented as `--help` text, not as Rust items).
#[cfg(feature = "cli")]
#[doc(hidden)]
#[allow(missing_docs)]
pub mod cli;

pub use browserpool_proto::json::{from_json, to_json};
use browserpool_proto::tonic::metadata::{Ascii, MetadataValue};
use browserpool_proto::tonic::service::interceptor::InterceptedService;
use browserpool_proto::tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use browserpool_proto::tonic::{self, Request, Status};
pub use browserpool_proto::v1 as pb;

/// Client errors: connecting, a gRPC status from the server, or a failed action.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The channel could not be made or connected.
    #[error("connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    /// The token cannot be sent as a header (a newline in it, say).
    #[error("token is not valid metadata")]
    BadToken,
    /// Reading a file: a CA, a client certificate, a token (the SDK reads none itself; this is
    /// for callers' `?`).
    #[error("read file: {0}")]
    TlsFile(#[from] std::io::Error),
    /// The server refused or failed the call (`UNAUTHENTICATED`, `NOT_FOUND`, ...).
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] Status),
    /// The action ran and failed (the typed methods of [`Session`] only). Boxed: it carries
    /// the dialog, and keeps `Result<_, Error>` small.
    #[error("{0}")]
    Action(Box<ActionError>),
    /// A `Drive` stream closed before this could be sent.
    #[error("the drive stream is closed")]
    StreamClosed,
    /// A result did not have the shape its action promises (a server of another version?).
    #[error("unexpected result: {0}")]
    Unexpected(String),
}

impl Error {
    /// The gRPC code of a refused call, or of the action's failure mapped to the nearest one.
    pub fn code(&self) -> tonic::Code {
        match self {
            Error::Status(s) => s.code(),
            Error::Connect(_) | Error::StreamClosed => tonic::Code::Unavailable,
            Error::BadToken => tonic::Code::Unauthenticated,
            Error::Action(_) | Error::TlsFile(_) | Error::Unexpected(_) => tonic::Code::Unknown,
        }
    }
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

/// The generated `Sessions` stub with the bearer token attached.
pub type SessionsClient = pb::sessions_client::SessionsClient<InterceptedService<Channel, Bearer>>;
/// The generated `Admin` stub with the bearer token attached.
pub type AdminClient = pb::admin_client::AdminClient<InterceptedService<Channel, Bearer>>;

/// Trust and identity for an `https://` endpoint.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// PEM CA certificate(s) the server's certificate must chain to.
    pub ca_pem: Vec<u8>,
    /// Client certificate chain and private key (both PEM), for a server with mutual TLS
    /// (`--tls-client-ca`).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Name the server's certificate must carry; default: the endpoint's host (a name or an
    /// IP address).
    pub domain: Option<String>,
}

/// A connected client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    sessions: SessionsClient,
    admin: AdminClient,
}

impl Client {
    /// Connects to a plaintext `endpoint` (e.g. `http://127.0.0.1:50051`) with a JWT; see
    /// [`Client::connect_tls`] for `https://`.
    pub async fn connect(endpoint: impl Into<String>, token: &str) -> Result<Client, Error> {
        let channel = Endpoint::from_shared(endpoint.into())?.connect().await?;
        Client::with_channel(channel, token)
    }

    /// Connects to an `https://` endpoint with a JWT, trusting `tls.ca_pem` and presenting
    /// `tls.identity` when given. The channel speaks HTTP/2 negotiated by ALPN.
    pub async fn connect_tls(endpoint: impl Into<String>, token: &str, tls: TlsOptions) -> Result<Client, Error> {
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(tls.ca_pem));
        if let Some((cert, key)) = tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(domain) = tls.domain {
            config = config.domain_name(domain);
        }
        let channel = Endpoint::from_shared(endpoint.into())?.tls_config(config)?.connect().await?;
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

    /// Starts an `Acquire`: set its options, then `.await` it for a [`Session`] that is
    /// released when dropped. A full queue or an unreachable server is retried with backoff
    /// ([`Retry::default`]: up to 30 s overall).
    pub fn session(&self) -> AcquireBuilder<'_> {
        AcquireBuilder::new(self)
    }

    /// Acquires a browser with default settings, waiting up to `wait_ms`; one attempt, and
    /// nothing releases it but [`Client::release`] (see [`Client::session`]).
    pub async fn acquire(&self, wait_ms: u32) -> Result<pb::Session, Error> {
        self.acquire_with(pb::AcquireRequest { wait_ms, ..Default::default() }).await
    }

    /// Acquires with a full request.
    pub async fn acquire_with(&self, req: pb::AcquireRequest) -> Result<pb::Session, Error> {
        Ok(self.sessions().acquire(req).await?.into_inner())
    }

    /// Runs one action; a failed action is `Ok` with `ok: false` here (see [`Session::act`]).
    pub async fn act(&self, session_id: &str, action: pb::Action) -> Result<pb::ActionResult, Error> {
        let req = pb::ActRequest { session_id: session_id.into(), action: Some(action) };
        Ok(self.sessions().act(req).await?.into_inner())
    }

    /// The page as it is now, for a failed job's log: a PNG screenshot of the active tab and its
    /// URL, each `None` with why when it could not be had (a dialog open, the browser gone).
    /// What `browserpool session batch --on-failure screenshot DIR` saves.
    pub async fn evidence(&self, session_id: &str) -> Result<Evidence, Error> {
        let shot = self.act(session_id, action("screenshot", "", serde_json::Value::Null)).await?;
        let url = self.act(session_id, action("url", "", serde_json::Value::Null)).await?;
        let why = |r: &pb::ActionResult| r.error.as_ref().map_or_else(String::new, |e| e.message.clone());
        let url_text = url.value.as_ref().map(to_json).and_then(|v| v.as_str().map(str::to_string));
        Ok(Evidence {
            png: (shot.ok && !shot.data.is_empty()).then_some(shot.data.clone()).ok_or_else(|| why(&shot)),
            url: url_text.filter(|_| url.ok).ok_or_else(|| why(&url)),
        })
    }

    /// Releases a session (idempotent).
    pub async fn release(&self, session_id: &str) -> Result<pb::ReleaseResponse, Error> {
        self.release_as(session_id, false).await
    }

    /// Releases a session, saying whether the job that used it failed (a
    /// `RECORD_RETAIN_ON_FAILURE` recording is then kept).
    pub async fn release_as(&self, session_id: &str, failed: bool) -> Result<pb::ReleaseResponse, Error> {
        let req = pb::ReleaseRequest { session_id: session_id.into(), failed };
        Ok(self.sessions().release(req).await?.into_inner())
    }

    /// Reads a session.
    pub async fn get(&self, session_id: &str) -> Result<pb::Session, Error> {
        Ok(self.sessions().get(pb::GetSessionRequest { session_id: session_id.into() }).await?.into_inner())
    }

    /// Uploads `content` as file `name` of the session (a file input can then take it),
    /// in chunks of 1 MiB.
    pub async fn put_file(&self, session_id: &str, name: &str, content: &[u8]) -> Result<pb::Artifact, Error> {
        let mut messages: Vec<pb::PutFileRequest> = content
            .chunks(FILE_CHUNK)
            .map(|c| pb::PutFileRequest { chunk: c.to_vec(), ..Default::default() })
            .collect();
        if messages.is_empty() {
            messages.push(pb::PutFileRequest::default());
        }
        messages[0].session_id = session_id.into();
        messages[0].name = name.into();
        Ok(self.sessions().put_file(tokio_stream::iter(messages)).await?.into_inner())
    }

    /// The session's files: its downloads and uploads.
    pub async fn list_files(&self, session_id: &str) -> Result<Vec<pb::Artifact>, Error> {
        let req = pb::ListFilesRequest { session_id: session_id.into() };
        Ok(self.sessions().list_files(req).await?.into_inner().artifacts)
    }

    /// One file of the session, whole, with what it is.
    pub async fn get_file(&self, session_id: &str, name: &str) -> Result<(pb::Artifact, Vec<u8>), Error> {
        self.download(pb::GetFileRequest { session_id: session_id.into(), name: name.into(), ..Default::default() })
            .await
    }

    /// The recording of an ended session (WebM), whole, with what it is.
    pub async fn get_recording(&self, session_id: &str) -> Result<(pb::Artifact, Vec<u8>), Error> {
        let kind = pb::ArtifactKind::Recording as i32;
        self.download(pb::GetFileRequest { session_id: session_id.into(), kind, ..Default::default() }).await
    }

    /// A link to watch the live session in a web browser (`control`: to drive it too), for
    /// `ttl` (`None`: 15 minutes; never past the session's end).
    pub async fn live_view(
        &self,
        session_id: &str,
        control: bool,
        ttl: Option<std::time::Duration>,
    ) -> Result<pb::LiveViewLink, Error> {
        let mode = if control { pb::LiveViewMode::Control } else { pb::LiveViewMode::View };
        let ttl_ms = ttl.map_or(0, |t| t.as_millis().clamp(1, u32::MAX as u128) as u32);
        let req = pb::LiveViewRequest { session_id: session_id.into(), mode: mode as i32, ttl_ms };
        Ok(self.sessions().live_view(req).await?.into_inner())
    }

    /// Revokes a live view link of the session (`None`: all of them); how many.
    pub async fn revoke_live_view(&self, session_id: &str, link_id: Option<&str>) -> Result<u32, Error> {
        let req =
            pb::RevokeLiveViewRequest { session_id: session_id.into(), link_id: link_id.unwrap_or_default().into() };
        Ok(self.sessions().revoke_live_view(req).await?.into_inner().revoked)
    }

    /// Deletes what was kept of an ended session (files and recording); how many.
    pub async fn delete_artifacts(&self, session_id: &str) -> Result<u32, Error> {
        let req = pb::DeleteArtifactsRequest { session_id: session_id.into() };
        Ok(self.sessions().delete_artifacts(req).await?.into_inner().deleted)
    }

    async fn download(&self, req: pb::GetFileRequest) -> Result<(pb::Artifact, Vec<u8>), Error> {
        let mut stream = self.sessions().get_file(req).await?.into_inner();
        let (mut artifact, mut content) = (None, Vec::new());
        while let Some(chunk) = stream.message().await? {
            artifact = artifact.or(chunk.artifact);
            content.extend_from_slice(&chunk.chunk);
        }
        let artifact = artifact.ok_or_else(|| Error::Unexpected("get_file: the stream carried no artifact".into()))?;
        Ok((artifact, content))
    }

    /// Deletes one file of the session.
    pub async fn delete_file(&self, session_id: &str, name: &str) -> Result<(), Error> {
        let req = pb::DeleteFileRequest { session_id: session_id.into(), name: name.into() };
        self.sessions().delete_file(req).await?;
        Ok(())
    }
}

/// The size of each message of a [`Client::put_file`] upload.
const FILE_CHUNK: usize = 1 << 20;

/// A page as [`Client::evidence`] found it: each part, or why it could not be had.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// A PNG screenshot of the active tab.
    pub png: Result<Vec<u8>, String>,
    /// The active tab's URL.
    pub url: Result<String, String>,
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
