//! An in-memory [`Browsers`] for the lifecycle's unit tests and the fleet simulation
//! (`examples/fleet_sim.rs`): a lease is a place among `capacity` (waited for in arrival
//! order, as the pool's are), an action does what its payload says, and a browser dies when a
//! test says so.
//!
//! Payloads an action understands: `{"sleep_ms": N}` (answers after N ms with the payload and
//! `slept_us`, how long the sleep really took, or `TIMEOUT` at its deadline), `{"die": "why"}`
//! (the browser dies under the action, which fails as a driver's would); anything else answers
//! at once with the payload as its value.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use browserpool_pool::egress::WorkerNet;
use browserpool_pool::events::EventHub;
use browserpool_pool::{
    ActionCall, ActionFailure, ActionOutput, CaptureOptions, ContextState, Egress, EgressConfig, EventKind,
    EventReader, FailureCode, LeaseSpec, NavPolicy, PoolError,
};
use futures::future::BoxFuture;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::{Acted, Browsers, Leased};
use crate::model::Isolation;

/// The fake pool. Cheap to clone; clones share their browsers.
#[derive(Clone)]
pub struct FakeBrowsers {
    shared: Arc<Shared>,
}

struct Shared {
    capacity: usize,
    slots: Arc<Semaphore>,
    state: Mutex<FakeState>,
    net: Arc<WorkerNet>,
    name: String,
}

/// What the fake saw, for the tests to assert on.
#[derive(Default, Debug)]
pub struct FakeState {
    next: u64,
    /// Browsers leased now: worker id -> its death signal.
    pub leased: BTreeMap<String, watch::Sender<Option<String>>>,
    /// The most browsers leased at once.
    pub most_at_once: usize,
    /// Worker ids in the order they were leased, and released.
    pub lease_order: Vec<String>,
    pub released: Vec<String>,
    /// Policies set, by worker id.
    pub policies: BTreeMap<String, NavPolicy>,
}

impl FakeBrowsers {
    /// Fakes of at most `capacity` browsers at once, their worker ids `w-fake-<n>`.
    pub fn new(capacity: usize) -> FakeBrowsers {
        FakeBrowsers::named(capacity, "fake")
    }

    /// [`FakeBrowsers::new`] with worker ids `w-<name>-<n>` (one name per replica).
    pub fn named(capacity: usize, name: &str) -> FakeBrowsers {
        let net = WorkerNet::new(Arc::new(Egress::new(EgressConfig::default())));
        FakeBrowsers {
            shared: Arc::new(Shared {
                capacity,
                slots: Arc::new(Semaphore::new(capacity)),
                state: Mutex::new(FakeState::default()),
                net,
                name: name.to_string(),
            }),
        }
    }

    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The browser of worker `id` dies (a crash, an OOM kill) with nobody calling.
    pub fn kill(&self, id: &str, why: &str) {
        if let Some(died) = self.state().leased.get(id) {
            died.send_replace(Some(why.to_string()));
        }
    }
}

impl Browsers for FakeBrowsers {
    fn lease(
        &self,
        _tenant: &str,
        _isolation: Isolation,
        spec: LeaseSpec,
    ) -> BoxFuture<'_, Result<Box<dyn Leased>, PoolError>> {
        Box::pin(async move {
            let slots = self.shared.slots.clone();
            let permit = match tokio::time::timeout(spec.wait, slots.acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                Ok(Err(_)) => return Err(PoolError::ShuttingDown),
                Err(_) => return Err(PoolError::Exhausted(spec.wait)),
            };
            let (died_tx, died) = watch::channel(None);
            let id = {
                let mut state = self.state();
                state.next += 1;
                let id = format!("w-{}-{}", self.shared.name, state.next);
                state.leased.insert(id.clone(), died_tx);
                state.most_at_once = state.most_at_once.max(state.leased.len());
                state.lease_order.push(id.clone());
                id
            };
            let leased = FakeLeased { browsers: self.clone(), id, died, hub: EventHub::default(), _permit: permit };
            Ok(Box::new(leased) as Box<dyn Leased>)
        })
    }

    fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

struct FakeLeased {
    browsers: FakeBrowsers,
    id: String,
    died: watch::Receiver<Option<String>>,
    hub: EventHub,
    _permit: OwnedSemaphorePermit,
}

impl FakeLeased {
    async fn act(&self, call: &ActionCall) -> Acted<ActionOutput> {
        let mut value = call.payload.clone();
        if let Some(ms) = call.payload.get("sleep_ms").and_then(|v| v.as_u64()) {
            let wanted = Duration::from_millis(ms);
            if wanted > call.timeout {
                tokio::time::sleep(call.timeout).await;
                return Err(ActionFailure::new(FailureCode::Timeout, "the fake's sleep outlasted the deadline"));
            }
            let slept = std::time::Instant::now();
            tokio::time::sleep(wanted).await;
            // What the sleep really took (a timer fires up to a few ms late): the fleet
            // simulation subtracts it to show what the control plane alone added.
            value["slept_us"] = (slept.elapsed().as_micros() as u64).into();
        }
        if let Some(why) = call.payload.get("die").and_then(|v| v.as_str()) {
            self.browsers.kill(&self.id, why);
            return Err(ActionFailure::new(FailureCode::Internal, "the DevTools connection closed"));
        }
        Ok(ActionOutput { value, ..ActionOutput::default() })
    }
}

impl Leased for FakeLeased {
    fn worker_id(&self) -> String {
        self.id.clone()
    }

    fn devtools_url(&self) -> String {
        format!("ws://127.0.0.1:9/devtools/browser/{}", self.id)
    }

    fn files_dir(&self) -> PathBuf {
        std::env::temp_dir().join(&self.id).join("files")
    }

    fn net(&self) -> Arc<WorkerNet> {
        self.browsers.shared.net.clone()
    }

    fn context(&self) -> Option<String> {
        None
    }

    fn died(&self) -> watch::Receiver<Option<String>> {
        self.died.clone()
    }

    fn crashed(&mut self) -> bool {
        self.died.borrow().is_some()
    }

    fn set_policy(&self, policy: NavPolicy) {
        self.browsers.state().policies.insert(self.id.clone(), policy);
    }

    fn run<'a>(&'a self, call: &'a ActionCall) -> BoxFuture<'a, Acted<ActionOutput>> {
        Box::pin(self.act(call))
    }

    fn export_context<'a>(&'a self, _opts: &'a CaptureOptions) -> BoxFuture<'a, Acted<ContextState>> {
        Box::pin(async { Err(ActionFailure::new(FailureCode::Internal, "the fake has no context to export")) })
    }

    fn import_context<'a>(&'a self, _state: &'a ContextState, _strict: bool) -> BoxFuture<'a, Acted<(u32, u32)>> {
        Box::pin(async { Err(ActionFailure::new(FailureCode::Internal, "the fake has no context to import into")) })
    }

    fn events(&self) -> EventReader {
        self.hub.subscribe()
    }

    fn emit(&self, kind: EventKind) {
        self.hub.emit(kind)
    }

    fn take_files_dir(&mut self) -> PathBuf {
        self.files_dir()
    }

    fn release(self: Box<Self>, _answered: BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
        // A release takes a moment, as a kill does.
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(self);
        })
    }
}

impl Drop for FakeLeased {
    fn drop(&mut self) {
        let mut state = self.browsers.state();
        state.leased.remove(&self.id);
        state.released.push(self.id.clone());
    }
}
