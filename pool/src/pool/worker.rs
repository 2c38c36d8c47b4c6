//! A worker: one Chromium and its driver, its death watch (connection closed, process exited,
//! a probe unanswered), and its boot (network, egress proxy, launch, the sandbox check, attach).

use super::*;

/// A booted Chromium with its CDP connection and the page sessions drive.
pub(super) struct Worker {
    pub(super) id: WorkerId,
    pub(super) process: Process,
    /// Dropped (ending every connection it carries) with the worker.
    pub(super) _proxy: Proxy,
    pub(super) handler_task: OwnedTask,
    /// Turns `Some(why)` when the browser dies (see [`watch_death`]).
    pub(super) died: watch::Receiver<Option<String>>,
    pub(super) death_watch: OwnedTask,
    /// The browser's DevTools websocket (through its gate when it has a network namespace).
    pub(super) devtools_url: String,
    pub(super) driver: Driver,
    pub(super) started_at: SystemTime,
    /// Its files directory, made while it booted (see `files::prepare`), until a lease takes
    /// it; removed with the worker otherwise.
    pub(super) files: Option<super::files::Prepared>,
}

impl Worker {
    pub(super) fn status(&self, state: WorkerState) -> WorkerStatus {
        WorkerStatus {
            id: self.id.clone(),
            state,
            pid: self.process.pid(),
            cdp_port: self.process.port(),
            started_at: self.started_at,
        }
    }

    pub(super) async fn kill(self) {
        self.kill_after(std::future::ready(())).await
    }

    /// [`Worker::kill`], the dying's weight given once `answered` is ready (see
    /// [`crate::launcher::Process::kill_after`]).
    pub(super) async fn kill_after(self, answered: impl std::future::Future<Output = ()>) {
        // Killing it is no death to report.
        self.death_watch.abort();
        self.handler_task.abort();
        self.process.kill_after(answered).await;
        // Its files directory, if no lease took it, goes as `self.files` drops.
    }
}

/// Reports a worker's death as soon as its CDP connection closes, its main process exits, or
/// it leaves a DevTools probe unanswered for `unresponsive_after` (see [`unanswered`]).
pub(super) async fn watch_death(
    exit: Arc<crate::procfs::ExitWatch>,
    cgroup: Option<Arc<WorkerCgroup>>,
    mut connection: watch::Receiver<Option<String>>,
    tx: watch::Sender<Option<String>>,
    browser: Arc<chromiumoxide::Browser>,
    unresponsive_after: Duration,
) {
    let why = tokio::select! {
        closed = connection.wait_for(Option::is_some) => {
            closed.ok().and_then(|why| why.clone()).unwrap_or_else(|| "its DevTools connection closed".into())
        }
        _ = exit.wait() => "its browser process exited".into(),
        why = unanswered(&browser, unresponsive_after) => why,
    };
    // Killed by the kernel at its memory limit: the reason names it.
    let why = match cgroup.and_then(|c| c.limit_reached()) {
        Some(limit) => format!("{why}: {}", crate::cgroup::limit_words(limit)),
        None => why,
    };
    tracing::warn!(pid = exit.pid(), reason = %why, "worker died");
    tx.send_replace(Some(why));
}

/// How often a browser is asked for its version (see [`unanswered`]).
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(2);

/// Returns once the browser has answered no probe for `after`: a browser that is stopped
/// (SIGSTOP), deadlocked or starved keeps its process and its connection, and would otherwise
/// hold its session and slot until the TTL. `Browser.getVersion` is answered by the browser
/// process itself, so a page spinning in its renderer does not delay it.
pub(super) async fn unanswered(browser: &chromiumoxide::Browser, after: Duration) -> String {
    use chromiumoxide::cdp::browser_protocol::browser::GetVersionParams;
    let silent = silence(after, || async { browser.execute(GetVersionParams::default()).await.is_ok() }).await;
    format!("browser stopped answering: no reply to a DevTools probe for {} s", silent.as_secs())
}

/// How often the death watch looks at its own clock while a probe is out (see [`silence`]).
const TICK: Duration = Duration::from_millis(500);

/// Asks `probe` every [`PROBE_EVERY`] (one at a time) and returns the silence, once no answer
/// came for `after`. Time this process itself stood still is not the browser's silence: when
/// the server (or the host under it) stalls, every browser's probe goes unanswered at once,
/// and on waking each would look frozen. So the watch wakes every [`TICK`] and counts what its
/// own timers were late by as time nobody could answer; a stall of the server is forgiven to
/// within one tick, while a browser that is frozen and a server that runs are counted in full.
async fn silence<F, Fut>(after: Duration, mut probe: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    use tokio::time::Instant;
    let mut answered = Instant::now();
    // Since the last answer, how long this process's own timers were late by.
    let mut stood_still = Duration::ZERO;
    let mut asked = Box::pin(None);
    let mut next_probe = answered + PROBE_EVERY;
    loop {
        let tick = Instant::now();
        let answer = {
            let out = async {
                match asked.as_mut().as_pin_mut() {
                    Some(probe) => probe.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ok = out => Some(ok),
                _ = tokio::time::sleep(TICK) => None,
            }
        };
        match answer {
            Some(ok) => {
                asked.set(None);
                if ok {
                    (answered, stood_still) = (Instant::now(), Duration::ZERO);
                }
            }
            None => {
                let late = tick.elapsed().saturating_sub(TICK);
                if late >= Duration::from_secs(1) {
                    tracing::warn!(
                        late_ms = late.as_millis() as u64,
                        "the server stood still (its timers ran late): not counted as the browser's silence"
                    );
                }
                stood_still += late;
            }
        }
        let silent = answered.elapsed().saturating_sub(stood_still);
        if silent >= after {
            return silent;
        }
        if asked.is_none() && Instant::now() >= next_probe {
            asked.set(Some(probe()));
            next_probe = Instant::now() + PROBE_EVERY;
        }
    }
}

/// How often, at most, a shared browser's memory is read against its ceiling.
pub(super) const MEMORY_READ_EVERY: Duration = Duration::from_secs(1);

pub(super) async fn boot_worker(
    cfg: &PoolConfig,
    egress: &Arc<Egress>,
    sandbox: &watch::Sender<Option<SandboxReport>>,
    id: WorkerId,
    spawned: &(dyn Fn(Spawned) + Send + Sync),
    cleanups: &TaskTracker,
) -> Result<Worker, PoolError> {
    let checked = sandbox.borrow().clone();
    if let Some(report) = checked.as_ref().filter(|r| !r.sandboxed && !cfg.launch.allow_unsandboxed) {
        return Err(PoolError::Unsandboxed(report.detail.clone()));
    }
    // The proxy reads the policy per connection, so `Driver::set_policy` at lease time holds
    // for every connection opened after it; until then, nothing private.
    let net = WorkerNet::new(egress.clone());
    // Namespaces are made on threads of their own; keep that off the runtime's workers.
    let (netns, listener) = tokio::task::spawn_blocking(|| {
        let netns = worker_netns();
        let listener = match &netns {
            Some(ns) => ns.bind_loopback(),
            None => std::net::TcpListener::bind(("127.0.0.1", 0)),
        };
        listener.map(|l| (netns, l))
    })
    .await
    .map_err(|e| PoolError::Launch(format!("network namespace task: {e}")))??;
    let proxy = Proxy::start(net.clone(), listener, netns.is_none(), &id.0)?;
    let launched = launch(&cfg.launch, &id.0, &proxy.url(), netns, egress, spawned, cleanups).await?;
    // The first worker is looked at in /proc (its uid, a renderer's seccomp filter and user
    // namespace): the flags say the sandbox is on, this sees whether it is.
    if checked.is_none() {
        let (pgid, uid) = (launched.process.pid(), launched.process.uid);
        let report = tokio::task::spawn_blocking(move || crate::sandbox::inspect(pgid, uid))
            .await
            .map_err(|e| PoolError::Launch(format!("sandbox check task: {e}")))?;
        if report.sandboxed {
            tracing::info!(detail = %report.detail, "chromium's sandbox is on");
        } else if cfg.launch.allow_unsandboxed {
            tracing::error!(detail = %report.detail, "WORKERS RUN WITHOUT CHROMIUM'S SANDBOX (--allow-unsandboxed): a renderer exploit runs with the worker's rights");
        }
        sandbox.send_replace(Some(report.clone()));
        if !report.sandboxed && !cfg.launch.allow_unsandboxed {
            launched.handler_task.abort();
            launched.process.kill().await;
            return Err(PoolError::Unsandboxed(report.detail));
        }
    }
    let driver_cfg = driver_config(cfg, launched.process.cgroup.clone());
    let devtools_url = launched.ws_url.clone();
    let driver = match Driver::attach(launched.browser, &launched.ws_url, driver_cfg, net).await {
        Ok(driver) => driver,
        Err(e) => {
            launched.handler_task.abort();
            launched.process.kill().await;
            return Err(e);
        }
    };
    let files = super::files::prepare(&cfg.launch, &id.0, &launched.process.profile, &driver).await;
    let (died_tx, died) = watch::channel(None);
    let death_watch = OwnedTask::spawn(
        watch_death(
            launched.process.exit_watch(),
            launched.process.cgroup.clone(),
            launched.died,
            died_tx,
            driver.browser.clone(),
            cfg.unresponsive_after,
        )
        .instrument(tracing::debug_span!("death_watch", worker = %id)),
    );
    Ok(Worker {
        id,
        process: launched.process,
        _proxy: proxy,
        handler_task: launched.handler_task,
        died,
        death_watch,
        devtools_url,
        driver,
        started_at: SystemTime::now(),
        files,
    })
}

/// A new network namespace for a worker: the server's own where it may create one (root or
/// `CAP_SYS_ADMIN`), else one inside an unprivileged user namespace. `None` where neither is
/// possible: said once, at warn, since it leaves the DevTools ports reachable by every local
/// process. Which kind is said once too.
pub(super) fn worker_netns() -> Option<NetNs> {
    static SAID: std::sync::Once = std::sync::Once::new();
    let privileged = NetNs::create();
    let made = privileged.as_ref().err().map(|_| NetNs::create_unprivileged());
    match (privileged, made) {
        (Ok(ns), _) => Some(ns),
        (Err(_), Some(Ok(ns))) => {
            SAID.call_once(|| {
                tracing::info!("each worker runs in a network namespace of its own, inside an unprivileged user namespace (the server is not root)")
            });
            Some(ns)
        }
        (Err(e), unprivileged) => {
            let why = unprivileged.and_then(Result::err).map(|u| u.to_string()).unwrap_or_default();
            SAID.call_once(|| {
                tracing::warn!(error = %e, unprivileged = %why, "workers share the host's network namespace (creating one needs root, CAP_SYS_ADMIN or unprivileged user namespaces): their devtools ports are reachable by local processes")
            });
            None
        }
    }
}

pub(super) fn driver_config(cfg: &PoolConfig, cgroup: Option<Arc<WorkerCgroup>>) -> DriverConfig {
    DriverConfig {
        cdp_timeout: cfg.launch.cdp_timeout,
        max_html_bytes: cfg.max_html_bytes,
        max_tabs: cfg.max_tabs,
        cgroup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    const AFTER: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_browser_that_never_answers_is_silent_after_the_bound() {
        let started = Instant::now();
        let silent = silence(AFTER, std::future::pending::<bool>).await;
        assert!(silent >= AFTER, "{silent:?}");
        assert!(started.elapsed() < AFTER + TICK * 2, "declared {:?} after the start", started.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_browser_that_answers_is_never_silent() {
        let watch = silence(AFTER, || async { true });
        assert!(tokio::time::timeout(AFTER * 10, watch).await.is_err(), "declared while it answered");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_of_this_process_is_not_the_browser_s_silence() {
        let started = Instant::now();
        let watch = tokio::spawn(silence(AFTER, std::future::pending::<bool>));
        tokio::time::sleep(Duration::from_secs(3)).await;
        // The whole process stands still for 30 s (every timer fires late, at once).
        tokio::time::advance(Duration::from_secs(30)).await;
        let silent = watch.await.unwrap();
        let took = started.elapsed();
        // 3 s before the stall and the rest of the 10 s after it (one tick of the stall may
        // count): never declared on waking.
        assert!(
            took >= Duration::from_secs(33) + AFTER - Duration::from_secs(3) - TICK,
            "declared {took:?} after the start"
        );
        assert!(took <= Duration::from_secs(33) + AFTER, "{took:?}");
        assert!(silent >= AFTER, "{silent:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_counts_from_the_last_answer() {
        let started = Instant::now();
        // Answers until 7 s in, then never again.
        let silent = silence(AFTER, || {
            let answers = started.elapsed() < Duration::from_secs(7);
            async move {
                if !answers {
                    std::future::pending::<()>().await;
                }
                answers
            }
        })
        .await;
        let took = started.elapsed();
        assert!(silent >= AFTER);
        // Last answered at 6 s (probes every 2 s): declared 10 s after, within a tick.
        assert!(took >= Duration::from_secs(16) && took < Duration::from_secs(16) + TICK * 2, "{took:?}");
    }
}
