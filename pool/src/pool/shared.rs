//! Context isolation: a tenant's shared Chromium (a warm worker whose own driver is stopped),
//! its leases as browser contexts, a spare context made ahead, disposal at release,
//! replacement after N sessions or past a memory ceiling, retirement when idle or needed.

use super::worker::{driver_config, MEMORY_READ_EVERY};
use super::*;
use crate::sync::lock;

/// The latest a lease that found its context made has the next one made, when no action of
/// its session ended first (a session driven over the CDP proxy alone): a first navigation
/// usually ends well within it.
const SPARE_AFTER: Duration = Duration::from_millis(300);

/// Removes from the map a shared browser no session uses, if there is one.
pub(super) fn take_idle_shared(state: &mut State) -> Option<Arc<SharedBrowser>> {
    let tenant = state.shared.iter().find(|(_, b)| b.usage().contexts == 0).map(|(t, _)| t.clone())?;
    state.shared.remove(&tenant)
}

/// A Chromium that one tenant's context sessions share (context isolation). It came from the
/// warm pool, so it was booted like any worker; its own driver is stopped, and each session
/// has a driver of its own, scoped to its browser context.
pub(super) struct SharedBrowser {
    pub(super) tenant: String,
    pub(super) id: WorkerId,
    pub(super) browser: Arc<chromiumoxide::Browser>,
    pub(super) devtools_url: String,
    /// The worker's raw CDP connection: each context's driver uses it, scoped to its context.
    pub(super) raw: crate::rawcdp::RawCdp,
    pub(super) profile: std::path::PathBuf,
    /// Its main process's exit (and pid).
    pub(super) exit: Arc<crate::procfs::ExitWatch>,
    /// Its network namespace, when it has one: each context's egress listener is made there.
    pub(super) netns: Option<Arc<NetNs>>,
    pub(super) cgroup: Option<Arc<WorkerCgroup>>,
    pub(super) died: watch::Receiver<Option<String>>,
    /// Taken when it is killed.
    pub(super) worker: Mutex<Option<Worker>>,
    pub(super) usage: Mutex<Usage>,
    /// A context made ahead, blank, with its driver attached: the next session takes it, so
    /// creating one is off the caller's path.
    pub(super) spare: Mutex<Option<(String, Driver)>>,
    /// Told when the spare being made is there (or could not be made).
    pub(super) spare_made: tokio::sync::Notify,
}

#[derive(Default)]
pub(super) struct Usage {
    /// Sessions in it now.
    pub(super) contexts: usize,
    /// Sessions it was handed, ever.
    pub(super) served: u64,
    /// No longer the tenant's current browser: killed once `contexts` is 0.
    pub(super) retiring: bool,
    /// Bumped whenever a session starts, so an idle timer started before knows it is stale.
    pub(super) generation: u64,
    /// A spare context is being made.
    pub(super) preparing: bool,
    /// A caller waits for the spare being made (see [`SharedBrowser::spare_or_wait`]).
    pub(super) awaited: bool,
    /// When its PSS was last read against the ceiling (without cgroups only).
    pub(super) memory_read: Option<Instant>,
}

impl SharedBrowser {
    pub(super) fn usage(&self) -> MutexGuard<'_, Usage> {
        lock(&self.usage)
    }

    /// Dead, or its raw connection (which all its sessions use) broken: either way, no
    /// further session is started in it.
    pub(super) fn dead(&self) -> bool {
        self.died.borrow().is_some() || self.raw.is_closed() || self.exit.exited()
    }

    pub(super) fn take_spare(&self) -> Option<(String, Driver)> {
        lock(&self.spare).take()
    }

    /// The spare context, waiting up to `bound` for the one being made: a second context made
    /// beside it would share the browser's one UI thread with it, and both come later. One
    /// caller waits for it; any other (sessions starting at once) makes its own at once, as
    /// the one being made can serve only one of them.
    pub(super) async fn spare_or_wait(&self, bound: std::time::Duration) -> Option<(String, Driver)> {
        {
            let mut usage = self.usage();
            if usage.awaited {
                return self.take_spare();
            }
            usage.awaited = true;
        }
        // Cleared however this ends (the lease may be dropped at shutdown).
        struct Awaited<'a>(&'a SharedBrowser);
        impl Drop for Awaited<'_> {
            fn drop(&mut self) {
                self.0.usage().awaited = false;
            }
        }
        let _awaited = Awaited(self);
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let made = self.spare_made.notified();
            tokio::pin!(made);
            made.as_mut().enable();
            if let Some(spare) = self.take_spare() {
                return Some(spare);
            }
            if !self.usage().preparing || tokio::time::timeout_at(deadline, made).await.is_err() {
                return None;
            }
        }
    }

    pub(super) async fn kill(&self) {
        drop(self.take_spare());
        let worker = lock(&self.worker).take();
        if let Some(worker) = worker {
            tracing::info!(worker = %self.id, tenant = %self.tenant, "shared browser killed");
            worker.kill().await;
        }
    }
}

impl Pool {
    /// Leases a fresh browser context in `tenant`'s shared Chromium (context isolation),
    /// taking a warm worker as that Chromium when the tenant has none (or has one being
    /// replaced), waiting as [`Pool::lease`] does. `spec.memory` limits a Chromium that
    /// becomes the tenant's shared browser here, as a whole.
    pub async fn lease_context(&self, tenant: &str, spec: LeaseSpec) -> Result<Lease, PoolError> {
        tokio::select! {
            result = self.lease_context_inner(tenant, spec) => result,
            _ = self.inner.shutdown.cancelled() => Err(PoolError::ShuttingDown),
        }
    }

    pub(super) async fn lease_context_inner(
        &self,
        tenant: &str,
        LeaseSpec { wait, viewport, memory, record, emulation }: LeaseSpec,
    ) -> Result<Lease, PoolError> {
        let deadline = tokio::time::Instant::now() + wait;
        let permit = match tokio::time::timeout_at(deadline, self.inner.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(PoolError::ShuttingDown),
            Err(_) => return Err(PoolError::Exhausted(wait)),
        };
        let browser = match self.current_shared(tenant) {
            Some(browser) => browser,
            None => {
                // A warm worker becomes the tenant's browser; leasing it waits like any lease.
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let mut worker = self.take_warm(left).await?;
                // Another session of the tenant may have made one meanwhile: use it, and give
                // the worker back, no longer counted as leased.
                if let Some(browser) = self.current_shared(tenant) {
                    let mut state = self.inner.state();
                    state.leased.remove(&worker.id);
                    state.warm.push_front(worker);
                    drop(state);
                    self.inner.warm_ready.notify_waiters();
                    browser
                } else {
                    // Each context gets a files directory of its own; the worker's goes.
                    drop(worker.files.take());
                    // The limit holds for the shared browser as a whole: its sessions share
                    // its processes.
                    if let Err(e) = self.fence_memory(&worker, memory) {
                        let id = worker.id.clone();
                        worker.kill().await;
                        self.finish_lease(&id);
                        return Err(e);
                    }
                    worker.driver.stop();
                    let browser = Arc::new(SharedBrowser {
                        tenant: tenant.to_string(),
                        id: worker.id.clone(),
                        browser: worker.driver.browser.clone(),
                        devtools_url: worker.devtools_url.clone(),
                        raw: worker.driver.raw.clone(),
                        profile: worker.process.profile.clone(),
                        exit: worker.process.exit_watch(),
                        netns: worker.process.netns(),
                        cgroup: worker.process.cgroup.clone(),
                        died: worker.died.clone(),
                        worker: Mutex::new(Some(worker)),
                        usage: Mutex::new(Usage { contexts: 1, served: 1, generation: 1, ..Usage::default() }),
                        spare: Mutex::new(None),
                        spare_made: tokio::sync::Notify::new(),
                    });
                    self.inner.state().shared.insert(tenant.to_string(), browser.clone());
                    tracing::info!(tenant, worker = %browser.id, "a warm worker became the tenant's shared browser");
                    browser
                }
            }
        };
        let opened = self.take_context(&browser).await;
        match opened {
            Ok((context, driver)) => {
                let lease = Lease {
                    pool: self.clone(),
                    held: Some(Held::Context(ContextLease { browser, context, driver })),
                    files: Default::default(),
                    recording: None,
                    _permit: permit,
                };
                let lease = lease.with_files().await?.with_viewport(viewport).await?.with_emulation(emulation).await?;
                lease.with_recording(record, viewport).await
            }
            Err(e) => {
                self.context_gone(&browser);
                Err(e)
            }
        }
    }

    /// The session's context: the spare, else the one being made, else one made now.
    ///
    /// Making a context takes the browser's UI thread and a renderer's start, about 100 ms
    /// here, which the session's first action (its first navigation) would share. When the
    /// spare was there at once (sessions come slower than contexts are made), the next one is
    /// made once this session's first action ended (`Lease::run`), or after `SPARE_AFTER` for
    /// a session driven over the CDP proxy alone; when this caller waited for it (sessions
    /// back to back), at once, or the next caller waits longer.
    async fn take_context(&self, browser: &Arc<SharedBrowser>) -> Result<(String, Driver), PoolError> {
        if let Some(spare) = browser.take_spare() {
            let (pool, browser, closing) = (self.clone(), browser.clone(), self.inner.closing.clone());
            self.inner.tasks.spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep(SPARE_AFTER) => pool.prepare_spare(&browser),
                    _ = closing.cancelled() => {}
                }
            });
            return Ok(spare);
        }
        let opened = match browser.spare_or_wait(self.inner.cfg.launch.cdp_timeout).await {
            Some(spare) => Ok(spare),
            None => self.open_context(browser).await,
        };
        self.prepare_spare(browser);
        opened
    }

    /// The tenant's current shared browser with one more session counted in it, if it has
    /// one still usable. The session that reaches `recycle_after` is its last.
    pub(super) fn current_shared(&self, tenant: &str) -> Option<Arc<SharedBrowser>> {
        let mut state = self.inner.state();
        let browser = state.shared.get(tenant)?.clone();
        if browser.dead() {
            state.shared.remove(tenant);
            drop(state);
            self.retire(&browser, "it died");
            return None;
        }
        let mut usage = browser.usage();
        usage.contexts += 1;
        usage.served += 1;
        usage.generation += 1;
        if usage.served >= self.inner.cfg.shared.recycle_after {
            usage.retiring = true;
            state.shared.remove(tenant);
            tracing::info!(tenant, worker = %browser.id, served = usage.served, "shared browser replaced after its last session");
        }
        drop(usage);
        Some(browser)
    }

    /// Makes the next session's context ahead, aside, unless one is there or being made, or
    /// the browser is being replaced (or the pool stops). Called by a lease that waited for
    /// its context, when a session's action ends, `SPARE_AFTER` after a lease that found its
    /// context made, and when a session ends.
    pub(super) fn prepare_spare(&self, browser: &Arc<SharedBrowser>) {
        {
            let mut usage = browser.usage();
            // Cheapest first: this runs after every action of a context session.
            if usage.preparing || usage.retiring || lock(&browser.spare).is_some() {
                return;
            }
            if self.inner.closing.is_cancelled() || browser.dead() {
                return;
            }
            usage.preparing = true;
        }
        let (pool, browser) = (self.clone(), browser.clone());
        self.inner.tasks.spawn(async move {
            let made = pool.open_context(&browser).await;
            let keep = !browser.usage().retiring && !browser.dead();
            // The spare is in place before `preparing` clears, so a caller never sees neither.
            let unused = match made {
                Ok(spare) if keep => {
                    *lock(&browser.spare) = Some(spare);
                    None
                }
                Ok(unused) => Some(unused),
                Err(e) => {
                    tracing::warn!(worker = %browser.id, error = %e, "a spare browser context could not be made");
                    None
                }
            };
            browser.usage().preparing = false;
            browser.spare_made.notify_waiters();
            if let Some((context, driver)) = unused {
                drop(driver);
                let _ = pool.dispose(&browser, &context).await;
            }
        });
    }

    /// Disposes `context` in `browser` (nothing to do in a dead one); why not, if it could not.
    pub(super) async fn dispose(&self, browser: &SharedBrowser, context: &str) -> Result<(), String> {
        use chromiumoxide::cdp::browser_protocol::target::DisposeBrowserContextParams;
        if browser.dead() {
            return Ok(());
        }
        let t = self.inner.cfg.launch.cdp_timeout;
        match tokio::time::timeout(t, browser.browser.execute(DisposeBrowserContextParams::new(context.to_string())))
            .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("could not be disposed: {e}")),
            Err(_) => Err(format!("was not disposed within {t:?}")),
        }
    }

    /// A context's own egress: its policy, upstream and meter, and a listener where the
    /// browser's other listeners are (inside its network namespace, if it has one).
    async fn context_egress(&self, browser: &SharedBrowser) -> Result<(Arc<WorkerNet>, Proxy), PoolError> {
        let ns = browser.netns.clone();
        let on_host = ns.is_none();
        let listener = tokio::task::spawn_blocking(move || match ns {
            Some(ns) => ns.bind_loopback(),
            None => std::net::TcpListener::bind(("127.0.0.1", 0)),
        })
        .await
        .map_err(|e| PoolError::Launch(format!("context egress task: {e}")))??;
        let net = WorkerNet::new(self.inner.egress.clone());
        let proxy = Proxy::start(net.clone(), listener, on_host, &browser.id.0)?;
        Ok((net, proxy))
    }

    /// A fresh browser context in `browser`, its connections through an egress listener of
    /// its own (so its policy, upstream proxy and byte count are its session's alone), and a
    /// driver scoped to it.
    pub(super) async fn open_context(&self, browser: &SharedBrowser) -> Result<(String, Driver), PoolError> {
        use chromiumoxide::cdp::browser_protocol::target::CreateBrowserContextParams;
        let t = self.inner.cfg.launch.cdp_timeout;
        let (net, egress) = self.context_egress(browser).await?;
        // Nothing bypassed, as for the browser's own `--proxy-server`.
        let params =
            CreateBrowserContextParams::builder().proxy_server(egress.url()).proxy_bypass_list("<-loopback>").build();
        let created = tokio::time::timeout(t, browser.browser.execute(params))
            .await
            .map_err(|_| PoolError::CdpTimeout { what: "create browser context", after: t })?
            .map_err(|e| PoolError::Cdp(format!("create browser context: {e}")))?;
        let context: String = created.result.browser_context_id.into();
        match Driver::attach_context(
            browser.browser.clone(),
            &browser.raw,
            context.clone(),
            driver_config(&self.inner.cfg, browser.cgroup.clone()),
            (net, egress),
        )
        .await
        {
            Ok(driver) => Ok((context, driver)),
            Err(e) => {
                let _ = self.dispose(browser, &context).await;
                Err(e)
            }
        }
    }

    /// Disposes a session's browser context (its pages, cookies, storage, cache, service
    /// workers and permissions go with it); the shared browser is replaced once past its memory
    /// ceiling.
    pub(super) async fn end_context(self, c: ContextLease) {
        let ContextLease { browser, context, driver } = c;
        drop(driver);
        if let Err(why) = self.dispose(&browser, &context).await {
            tracing::warn!(worker = %browser.id, "a browser context {why}; replacing its browser");
            browser.usage().retiring = true;
        }
        let limit = browser.cgroup.as_ref().map(|c| c.memory_limit());
        let ceiling = replace_past(self.inner.cfg.shared.memory_ceiling, limit);
        let used = match browser.cgroup.as_ref().and_then(|c| c.memory_used()) {
            Some(used) => used,
            None => self.pss_at_most_every_second(&browser).await,
        };
        if used > ceiling {
            tracing::info!(worker = %browser.id, used_mib = used >> 20, ceiling_mib = ceiling >> 20, "shared browser past its memory ceiling; replacing it");
            browser.usage().retiring = true;
        }
        // A session that ended without an action still leaves the next one its context.
        self.prepare_spare(&browser);
        self.context_gone(&browser);
    }

    /// Without cgroups, the browser's memory is the PSS of its processes; reading it walks every
    /// page table of every one (tens of milliseconds of CPU for a busy browser), so it is read
    /// at most once a second, not at every session's end (0 when not due).
    async fn pss_at_most_every_second(&self, browser: &SharedBrowser) -> u64 {
        let due = {
            let mut usage = browser.usage();
            let due = usage.memory_read.is_none_or(|at| at.elapsed() >= MEMORY_READ_EVERY);
            if due {
                usage.memory_read = Some(Instant::now());
            }
            due
        };
        let pid = browser.exit.pid();
        match due {
            true => {
                tokio::task::spawn_blocking(move || crate::launcher::group_memory(pid).pss_bytes).await.unwrap_or(0)
            }
            false => 0,
        }
    }

    /// One session fewer in `browser`: a browser being replaced (or dead) goes with its last
    /// session; the tenant's current one is kept, and killed after `idle` without a session.
    pub(super) fn context_gone(&self, browser: &Arc<SharedBrowser>) {
        let (last, retiring, generation) = {
            let mut usage = browser.usage();
            usage.contexts = usage.contexts.saturating_sub(1);
            if browser.dead() {
                usage.retiring = true;
            }
            (usage.contexts == 0, usage.retiring, usage.generation)
        };
        if retiring {
            let mut state = self.inner.state();
            if state.shared.get(&browser.tenant).is_some_and(|b| Arc::ptr_eq(b, browser)) {
                state.shared.remove(&browser.tenant);
            }
        }
        if !last {
            return;
        }
        if retiring {
            self.retire(browser, "replaced");
            return;
        }
        let (pool, browser, idle) = (self.clone(), browser.clone(), self.inner.cfg.shared.idle);
        let closing = self.inner.closing.clone();
        self.inner.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(idle) => {}
                _ = closing.cancelled() => {}
            }
            let idle = {
                let mut state = pool.inner.state();
                let usage = browser.usage();
                let current = state.shared.get(&browser.tenant).is_some_and(|b| Arc::ptr_eq(b, &browser));
                let idle = usage.contexts == 0 && usage.generation == generation;
                if idle && current {
                    state.shared.remove(&browser.tenant);
                }
                idle
            };
            if idle {
                pool.retire(&browser, "idle");
            }
        });
    }

    /// Kills a shared browser that no session uses any more (aside, on the pool's tracker) and
    /// frees its place among the workers; one still in use is marked to go with its last
    /// session.
    pub(super) fn retire(&self, browser: &Arc<SharedBrowser>, why: &'static str) {
        {
            let mut usage = browser.usage();
            usage.retiring = true;
            if usage.contexts > 0 {
                return;
            }
        }
        tracing::debug!(worker = %browser.id, tenant = %browser.tenant, why, "retiring a shared browser");
        let (pool, browser) = (self.clone(), browser.clone());
        self.inner.tasks.spawn(async move {
            browser.kill().await;
            pool.finish_lease(&browser.id);
        });
    }
}

/// The memory past which a shared browser is replaced: the configured `ceiling`, or three
/// quarters of its cgroup's `limit` when that is lower, so that a browser holding several
/// sessions is replaced at a session's end before the kernel's OOM killer ends them all.
fn replace_past(ceiling: u64, limit: Option<u64>) -> u64 {
    limit.map_or(ceiling, |limit| ceiling.min(limit / 4 * 3))
}

#[cfg(test)]
mod tests {
    use super::replace_past;

    #[test]
    fn a_shared_browser_is_replaced_below_its_memory_limit() {
        const MIB: u64 = 1 << 20;
        // The defaults: 1536 MiB per worker, a 2 GiB ceiling.
        assert_eq!(replace_past(2048 * MIB, Some(1536 * MIB)), 1152 * MIB);
        assert_eq!(replace_past(2048 * MIB, Some(4096 * MIB)), 2048 * MIB);
        assert_eq!(replace_past(2048 * MIB, None), 2048 * MIB);
    }
}
