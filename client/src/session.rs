//! A leased browser: [`Session`], released when dropped, and [`AcquireBuilder`], which gets one.

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use browserpool_proto::tonic::Streaming;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::{pb, Client, Error, Retry};

/// A browser leased from the pool. Its actions are methods ([`Session::navigate`],
/// [`Session::click`], ... see [`crate::Step`]).
///
/// Dropping a `Session` releases it in the background (a failure is logged with `tracing`), so
/// an early `?` never leaves the browser to its idle timeout. Call [`Session::release`] to wait
/// for the answer, and always before the tokio runtime itself stops (at the end of `main`),
/// since a background release needs a running runtime.
///
/// ```no_run
/// # async fn demo() -> Result<(), browserpool_client::Error> {
/// use std::time::Duration;
/// use browserpool_client::{Client, WaitUntil};
///
/// let client = Client::connect("http://127.0.0.1:50051", "<jwt>").await?;
/// let session = client.session().wait(Duration::from_secs(10)).label("job", "ci-42").await?;
/// let page = session.navigate("http://127.0.0.1:8000/").wait_until(WaitUntil::Load).await?;
/// assert_eq!(page.status, Some(200));
/// let heading = session.extract("h1").await?;
/// let png: Vec<u8> = session.screenshot().full_page().await?;
/// println!("{heading:?}, {} bytes of PNG", png.len());
/// session.release().await?;
/// # Ok(()) }
/// ```
pub struct Session {
    client: Client,
    info: pb::Session,
    released: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.info.session_id).field("released", &self.released).finish()
    }
}

impl Session {
    /// Wraps a session acquired some other way (e.g. with the raw stub), so it is released on
    /// drop like one from [`Client::session`].
    pub fn adopt(client: Client, info: pb::Session) -> Session {
        Session { client, info, released: false }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.info.session_id
    }

    /// The session as `Acquire` (or the last `renew`) answered it.
    pub fn info(&self) -> &pb::Session {
        &self.info
    }

    /// The client this session was acquired with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The session's CDP websocket, for Playwright's `connectOverCDP` or Puppeteer's
    /// `connect({browserWSEndpoint})`; it carries a ticket bound to this session.
    pub fn cdp_url(&self) -> &str {
        &self.info.cdp_url
    }

    /// Ends the session now and returns the server's answer (idempotent). The browser is
    /// killed and its profile deleted; nothing carries over to another lease.
    pub async fn release(mut self) -> Result<pb::ReleaseResponse, Error> {
        self.released = true;
        self.client.release(&self.info.session_id).await
    }

    /// Pushes the idle deadline `idle_timeout` from now (capped at the lease's hard end).
    pub async fn renew(&mut self, idle_timeout: Duration) -> Result<&pb::Session, Error> {
        let req = pb::RenewRequest { session_id: self.id().to_string(), idle_timeout_ms: millis(idle_timeout) };
        self.info = self.client.sessions().renew(req).await?.into_inner();
        Ok(&self.info)
    }

    /// Reads the session from the server again (state, deadlines).
    pub async fn refresh(&mut self) -> Result<&pb::Session, Error> {
        self.info = self.client.get(self.id()).await?;
        Ok(&self.info)
    }

    /// Exports one origin's cookies and storage (the active tab's origin when `origin` is
    /// empty) as a sealed envelope that [`Session::import_context`] or
    /// [`AcquireBuilder::context`] accept. Needs scope `context:export`.
    pub async fn export_context(&self, origin: &str) -> Result<pb::ContextEnvelope, Error> {
        let req =
            pb::ExportContextRequest { session_id: self.id().to_string(), origin: origin.into(), ..Default::default() };
        Ok(self.client.sessions().export_context(req).await?.into_inner())
    }

    /// Imports an envelope (a strict replace of its origin's cookies and storage), navigating
    /// to its origin first. An envelope whose integrity does not verify is an `Err` with
    /// `INVALID_ARGUMENT` and nothing applied. Needs scope `context:import`.
    pub async fn import_context(&self, envelope: pb::ContextEnvelope) -> Result<pb::ImportContextResponse, Error> {
        let req = pb::ImportContextRequest {
            session_id: self.id().to_string(),
            envelope: Some(envelope),
            strict_origin: false,
        };
        let answer = self.client.sessions().import_context(req).await?.into_inner();
        if !answer.ok {
            let why = format!("context envelope refused: {}", answer.integrity_error);
            return Err(Error::Status(browserpool_proto::tonic::Status::invalid_argument(why)));
        }
        Ok(answer)
    }

    /// Runs any action, e.g. one built with [`crate::action`]; a failed action is
    /// [`Error::Action`]. The typed methods ([`Session::navigate`]...) are usually nicer.
    pub async fn act(&self, action: pb::Action) -> Result<pb::ActionResult, Error> {
        crate::steps::checked(self.client.act(self.id(), action).await?)
    }

    /// Opens a `Drive` stream on this session: send actions with [`DriveSender::send`] and read
    /// their results, in order, interleaved with the session's events. The first event is
    /// `attached`. Dropping the sender ends the stream once the last result is in.
    ///
    /// ```no_run
    /// # async fn demo(session: browserpool_client::Session) -> Result<(), browserpool_client::Error> {
    /// use browserpool_client::{action, pb};
    /// let (tx, mut events) = session.drive().await?;
    /// tx.send(action("navigate", "", "http://127.0.0.1:8000/")).await?;
    /// tx.send(session.title().into_action()).await?;
    /// drop(tx);
    /// while let Some(event) = events.message().await? {
    ///     if let Some(pb::drive_event::Kind::Result(r)) = event.kind {
    ///         println!("{} ok={}", r.action, r.ok);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn drive(&self) -> Result<(DriveSender, Streaming<pb::DriveEvent>), Error> {
        let (tx, rx) = mpsc::channel::<pb::DriveRequest>(16);
        // The first message names the session. It is queued before the call, so the stream
        // starts even on a server that waits for it before answering.
        let attach = pb::DriveRequest { session_id: self.id().to_string(), action: None };
        tx.send(attach).await.map_err(|_| Error::StreamClosed)?;
        let events = self.client.sessions().drive(ReceiverStream::new(rx)).await?.into_inner();
        Ok((DriveSender { tx }, events))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (client, id) = (self.client.clone(), self.info.session_id.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    match client.release(&id).await {
                        Ok(_) => tracing::debug!(session = %id, "released on drop"),
                        Err(e) => tracing::warn!(session = %id, error = %e, "could not release a dropped session; it ends at its idle timeout"),
                    }
                });
            }
            Err(_) => {
                tracing::warn!(session = %id, "session dropped outside a tokio runtime; it ends at its idle timeout")
            }
        }
    }
}

/// The sending half of [`Session::drive`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct DriveSender {
    tx: mpsc::Sender<pb::DriveRequest>,
}

impl DriveSender {
    /// Queues an action; its result comes on the stream, in order.
    pub async fn send(&self, action: pb::Action) -> Result<(), Error> {
        let req = pb::DriveRequest { session_id: String::new(), action: Some(action) };
        self.tx.send(req).await.map_err(|_| Error::StreamClosed)
    }
}

/// What to ask of `Acquire`; `.await` it for a [`Session`]. From [`Client::session`].
#[must_use = "an AcquireBuilder does nothing until awaited"]
pub struct AcquireBuilder<'c> {
    client: &'c Client,
    req: pb::AcquireRequest,
    retry: Retry,
}

impl<'c> AcquireBuilder<'c> {
    pub(crate) fn new(client: &'c Client) -> AcquireBuilder<'c> {
        AcquireBuilder {
            client,
            req: pb::AcquireRequest { wait_ms: 30_000, ..Default::default() },
            retry: Retry::default(),
        }
    }

    /// Longest wait in the tenant's queue for each attempt (default 30 s; zero: fail at once
    /// when no slot is free).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.req.wait_ms = millis(wait);
        self
    }

    /// Lease lifetime (capped by the tenant's maximum).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.req.ttl_ms = millis(ttl);
        self
    }

    /// Ends the session after this long without a call.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.req.idle_timeout_ms = millis(idle);
        self
    }

    /// A label stored on the session (a CI job id, say), shown by `List`.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.req.labels.insert(key.into(), value.into());
        self
    }

    /// Every label at once.
    pub fn labels(mut self, labels: HashMap<String, String>) -> Self {
        self.req.labels = labels;
        self
    }

    /// The initial viewport, in CSS pixels.
    pub fn viewport(mut self, width: u32, height: u32) -> Self {
        self.req.viewport = Some(pb::Viewport { width, height, ..Default::default() });
        self
    }

    /// A context envelope to import before the session is handed over (needs `context:import`).
    pub fn context(mut self, envelope: pb::ContextEnvelope) -> Self {
        self.req.context = Some(envelope);
        self
    }

    /// How the browser presents itself: `locale`, `timezone`, `user_agent`, `geolocation`,
    /// `color_scheme` and `extra_headers` of the request (unset fields are left as they are).
    pub fn emulate(mut self, e: pb::AcquireRequest) -> Self {
        let r = &mut self.req;
        let keep = |given: String, old: &mut String| {
            if !given.is_empty() {
                *old = given;
            }
        };
        keep(e.locale, &mut r.locale);
        keep(e.timezone, &mut r.timezone);
        keep(e.user_agent, &mut r.user_agent);
        r.geolocation = e.geolocation.or(r.geolocation);
        r.color_scheme = if e.color_scheme != 0 { e.color_scheme } else { r.color_scheme };
        r.extra_headers.extend(e.extra_headers);
        r.offline |= e.offline;
        r.network = e.network.or(r.network);
        self
    }

    /// The upstream proxy (an id from `ListProxies`) the session's pages leave through;
    /// unset: the tenant's default_proxy, if any.
    pub fn proxy(mut self, id: impl Into<String>) -> Self {
        self.req.proxy_id = id.into();
        self
    }

    /// How a full or unreachable service is retried ([`Retry::default`] unless set).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }
}

impl<'c> IntoFuture for AcquireBuilder<'c> {
    type Output = Result<Session, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'c>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let AcquireBuilder { client, req, retry } = self;
            let info = retry.run(|| client.acquire_with(req.clone())).await?;
            Ok(Session::adopt(client.clone(), info))
        })
    }
}

/// Milliseconds for a `uint32` field, saturating.
pub(crate) fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}
