//! A lease: a worker of its own, or a browser context in a shared one; released or dropped,
//! it kills the worker or disposes of the context.

use super::*;

/// A worker handed to one session. [`Lease::release`] kills it (or, for a session that is a
/// browser context of its tenant's shared browser, disposes the context) and frees the slot;
/// dropping a lease does the same, so no code path can leak a Chromium or a context.
pub struct Lease {
    pub(super) pool: Pool,
    pub(super) held: Option<Held>,
    /// The session's files directory (see `files.rs`); empty until made, and once removed.
    pub(super) files: std::path::PathBuf,
    /// The recording's frame directory, while the session is recorded (see `files.rs`).
    pub(super) recording: Option<std::path::PathBuf>,
    pub(super) _permit: OwnedSemaphorePermit,
}

pub(super) enum Held {
    /// A Chromium of the session's own (process isolation).
    Own(Box<Worker>),
    /// A browser context in the tenant's shared Chromium (context isolation).
    Context(ContextLease),
}

pub(super) struct ContextLease {
    pub(super) browser: Arc<SharedBrowser>,
    pub(super) context: String,
    pub(super) driver: Driver,
}

impl Lease {
    /// The lease with the session's viewport applied; a browser that cannot take it is not
    /// usable (and the lease, dropped, ends).
    pub(super) async fn with_viewport(self, viewport: Viewport) -> Result<Lease, PoolError> {
        let timeout = self.pool.inner.cfg.launch.cdp_timeout;
        self.driver()
            .set_viewport(viewport, timeout)
            .await
            .map_err(|e| PoolError::Cdp(format!("set viewport: {}", e.message)))?;
        Ok(self)
    }

    /// The lease with the session's emulation applied; Chromium refusing it (an unknown
    /// time zone, say) is the caller's error ([`PoolError::Emulation`]).
    pub(super) async fn with_emulation(self, emulation: crate::emulation::Emulation) -> Result<Lease, PoolError> {
        let timeout = self.pool.inner.cfg.launch.cdp_timeout;
        self.driver().set_emulation(emulation, timeout).await.map_err(|e| match e.code {
            crate::outcome::FailureCode::InvalidArgument => PoolError::Emulation(e.message),
            _ => PoolError::Cdp(format!("set emulation: {}", e.message)),
        })?;
        Ok(self)
    }

    /// Runs one action of the session (see [`Driver::run`]). Once it ended, in context
    /// isolation, the next session's context is made if it is not there yet or being made
    /// (see `Pool::prepare_spare`): after the first action, not beside it.
    pub async fn run(&self, call: &crate::ActionCall) -> crate::outcome::ActResult<crate::outcome::ActionOutput> {
        let acted = self.driver().run(call).await;
        if let Some(Held::Context(c)) = &self.held {
            self.pool.prepare_spare(&c.browser);
        }
        acted
    }

    pub(super) fn held(&self) -> &Held {
        self.held.as_ref().expect("lease holds its worker until release")
    }

    /// The worker's id (for a context session, its shared browser's).
    pub fn worker_id(&self) -> &WorkerId {
        match self.held() {
            Held::Own(w) => &w.id,
            Held::Context(c) => &c.browser.id,
        }
    }

    /// The driver for this session's pages.
    pub fn driver(&self) -> &Driver {
        match self.held() {
            Held::Own(w) => &w.driver,
            Held::Context(c) => &c.driver,
        }
    }

    /// The session's browser context when it shares its tenant's browser; `None` when the
    /// whole browser is the session's.
    pub fn context(&self) -> Option<&str> {
        match self.held() {
            Held::Own(_) => None,
            Held::Context(c) => Some(&c.context),
        }
    }

    /// Whether Chromium has exited under this lease.
    pub fn crashed(&mut self) -> bool {
        match self.held.as_mut() {
            Some(Held::Own(w)) => w.process.exited() || w.died.borrow().is_some(),
            Some(Held::Context(c)) => c.browser.dead(),
            None => true,
        }
    }

    /// The browser's own DevTools websocket, for the server's CDP proxy alone: never hand it
    /// out (it is reachable only from this host, and only through the worker's gate). A
    /// context session's proxy must keep its client to [`Lease::context`].
    pub fn devtools_url(&self) -> &str {
        match self.held() {
            Held::Own(w) => &w.devtools_url,
            Held::Context(c) => &c.browser.devtools_url,
        }
    }

    /// Turns `Some(why)` as soon as the worker's browser dies (its process exits or its
    /// DevTools connection closes); a release is not a death. A shared browser's death ends
    /// every session of its tenant in it, and no other.
    pub fn died(&self) -> watch::Receiver<Option<String>> {
        match self.held() {
            Held::Own(w) => w.died.clone(),
            Held::Context(c) => c.browser.died.clone(),
        }
    }

    /// Kills the worker's process group and deletes its profile (or disposes the session's
    /// browser context), deletes the session's files, and lets the pool refill.
    pub async fn release(self) {
        self.release_after(std::future::ready(())).await
    }

    /// [`Lease::release`] for a caller that still has to answer: a worker of its own is sent
    /// SIGKILL at once, but its exit takes the weight of the dying, which outweighs the
    /// server, only once `answered` is ready (at most a second later).
    pub async fn release_after(mut self, answered: impl std::future::Future<Output = ()>) {
        let files = self.remove_files();
        match self.held.take() {
            Some(Held::Own(worker)) => {
                let id = worker.id.clone();
                worker.kill_after(answered).await;
                self.pool.finish_lease(&id);
            }
            Some(Held::Context(c)) => self.pool.clone().end_context(c).await,
            None => {}
        }
        if let Some(remove) = files {
            let _ = tokio::task::spawn_blocking(remove).await;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(remove) = self.remove_files() {
            remove();
        }
        match self.held.take() {
            Some(Held::Own(worker)) => {
                let id = worker.id.clone();
                worker.death_watch.abort();
                worker.handler_task.abort();
                // Process's own Drop kills the group and removes the profile synchronously.
                drop(worker);
                self.pool.finish_lease(&id);
            }
            Some(Held::Context(c)) => {
                // Disposing takes a CDP call: done aside, on the pool's tracker.
                let pool = self.pool.clone();
                if tokio::runtime::Handle::try_current().is_ok() {
                    self.pool.inner.tasks.spawn(pool.end_context(c));
                } else {
                    // No runtime left: the server is gone, and the shared browser with it.
                    pool.context_gone(&c.browser);
                }
            }
            None => {}
        }
    }
}

/// Counts a caller holding a slot without a worker yet; the count drops with the guard, so a
/// cancelled `lease` future un-counts itself.
pub(super) struct Pending<'a>(&'a Inner);

impl<'a> Pending<'a> {
    pub(super) fn new(inner: &'a Inner) -> Self {
        inner.state().pending += 1;
        Pending(inner)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.state().pending -= 1;
    }
}
