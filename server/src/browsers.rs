//! The browsers sessions run on, as the session lifecycle sees them: the seam between
//! `sessions` and the Chromium pool. [`Browsers`] holds exactly what the lifecycle asks of
//! the pool (a lease, its capacity), [`Leased`] what it asks of one session's browser (run an
//! action, watch for its death, release it). The Chromium pool implements both; the
//! in-memory [`fake`] does too, so the lifecycle's races are unit-tested in milliseconds with
//! no Chromium on the machine, and the fleet simulation runs thousands of sessions.

use std::path::PathBuf;
use std::sync::Arc;

use browserpool_pool::egress::WorkerNet;
use browserpool_pool::{
    ActionCall, ActionFailure, ActionOutput, CaptureOptions, ContextState, EventKind, EventReader, Lease, LeaseSpec,
    NavPolicy, Pool, PoolError,
};
use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::model::Isolation;

pub mod fake;

/// What an action on a session's browser answers.
pub type Acted<T> = Result<T, ActionFailure>;

/// What the session lifecycle needs of the browsers.
pub trait Browsers: Send + Sync + 'static {
    /// A browser for one session of `tenant`: one of its own (process isolation) or a
    /// context of the tenant's shared browser, within `spec.wait`.
    fn lease(
        &self,
        tenant: &str,
        isolation: Isolation,
        spec: LeaseSpec,
    ) -> BoxFuture<'_, Result<Box<dyn Leased>, PoolError>>;

    /// The most browsers this server runs at once (`--max-workers`).
    fn capacity(&self) -> usize;
}

/// One session's browser. Dropped without [`Leased::release`], it is released all the same.
pub trait Leased: Send + Sync {
    /// Its worker's id (for a context session, its shared browser's).
    fn worker_id(&self) -> String;

    /// The browser's own DevTools websocket, for the CDP proxy alone.
    fn devtools_url(&self) -> String;

    /// The session's files directory (its downloads, and what clients upload), made with the
    /// lease and owned by the browser's uid: open what is in it with [`crate::files`] only.
    fn files_dir(&self) -> PathBuf;

    /// The worker's egress: the policy the CDP proxy judges by.
    fn net(&self) -> Arc<WorkerNet>;

    /// The session's browser context when it shares its tenant's browser.
    fn context(&self) -> Option<String>;

    /// Turns `Some(why)` when the browser dies; a release is not a death.
    fn died(&self) -> watch::Receiver<Option<String>>;

    /// Whether the browser has died under this lease.
    fn crashed(&mut self) -> bool;

    /// The tenant's navigation policy, for every request the session's pages make.
    fn set_policy(&self, policy: NavPolicy);

    /// Runs one action within its own deadline.
    fn run<'a>(&'a self, call: &'a ActionCall) -> BoxFuture<'a, Acted<ActionOutput>>;

    /// Captures one origin's state.
    fn export_context<'a>(&'a self, opts: &'a CaptureOptions) -> BoxFuture<'a, Acted<ContextState>>;

    /// Applies a verified state (strict replace for its origin).
    fn import_context<'a>(&'a self, state: &'a ContextState, strict_origin: bool) -> BoxFuture<'a, Acted<(u32, u32)>>;

    /// A reader of the session's events from now on.
    fn events(&self) -> EventReader;

    /// Publishes an event to the session's readers.
    fn emit(&self, kind: EventKind);

    /// Takes the files directory out of the lease: the release leaves it, for the caller to
    /// keep what it wants of and remove.
    fn take_files_dir(&mut self) -> PathBuf;

    /// Ends the session's recording, if it is recorded: its frames, the caller's from then
    /// on (to encode, then remove). Called before the release, while the browser is there.
    fn take_recording(&mut self) -> BoxFuture<'_, Option<browserpool_pool::video::Frames>> {
        Box::pin(async { None })
    }

    /// The session's screen, for live view; `None` where there is none to show.
    fn screen(&self) -> Option<browserpool_pool::Screen> {
        None
    }

    /// Kills the browser (or disposes of the context) and frees its place. A browser of its
    /// own is stopped at once, its exit given the weight of the dying once `answered` is
    /// ready (see [`Lease::release_after`]).
    fn release(self: Box<Self>, answered: BoxFuture<'static, ()>) -> BoxFuture<'static, ()>;
}

impl Browsers for Pool {
    fn lease(
        &self,
        tenant: &str,
        isolation: Isolation,
        spec: LeaseSpec,
    ) -> BoxFuture<'_, Result<Box<dyn Leased>, PoolError>> {
        let tenant = tenant.to_string();
        Box::pin(async move {
            let lease = match isolation {
                Isolation::Process => Pool::lease(self, spec).await,
                Isolation::Context => self.lease_context(&tenant, spec).await,
            };
            lease.map(|lease| Box::new(lease) as Box<dyn Leased>)
        })
    }

    fn capacity(&self) -> usize {
        self.status().capacity
    }
}

impl Leased for Lease {
    fn worker_id(&self) -> String {
        Lease::worker_id(self).to_string()
    }

    fn devtools_url(&self) -> String {
        Lease::devtools_url(self).to_string()
    }

    fn files_dir(&self) -> PathBuf {
        Lease::files_dir(self).to_path_buf()
    }

    fn net(&self) -> Arc<WorkerNet> {
        self.driver().net()
    }

    fn context(&self) -> Option<String> {
        Lease::context(self).map(str::to_string)
    }

    fn screen(&self) -> Option<browserpool_pool::Screen> {
        Some(self.driver().screen())
    }

    fn died(&self) -> watch::Receiver<Option<String>> {
        Lease::died(self)
    }

    fn crashed(&mut self) -> bool {
        Lease::crashed(self)
    }

    fn set_policy(&self, policy: NavPolicy) {
        self.driver().set_policy(policy)
    }

    fn run<'a>(&'a self, call: &'a ActionCall) -> BoxFuture<'a, Acted<ActionOutput>> {
        Box::pin(Lease::run(self, call))
    }

    fn export_context<'a>(&'a self, opts: &'a CaptureOptions) -> BoxFuture<'a, Acted<ContextState>> {
        Box::pin(self.driver().export_context(opts))
    }

    fn import_context<'a>(&'a self, state: &'a ContextState, strict_origin: bool) -> BoxFuture<'a, Acted<(u32, u32)>> {
        Box::pin(self.driver().import_context(state, strict_origin))
    }

    fn events(&self) -> EventReader {
        self.driver().events()
    }

    fn emit(&self, kind: EventKind) {
        self.driver().emit(kind)
    }

    fn take_files_dir(&mut self) -> PathBuf {
        Lease::take_files_dir(self)
    }

    fn take_recording(&mut self) -> BoxFuture<'_, Option<browserpool_pool::video::Frames>> {
        Box::pin(Lease::take_recording(self))
    }

    fn release(self: Box<Self>, answered: BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
        Box::pin(Lease::release_after(*self, answered))
    }
}
