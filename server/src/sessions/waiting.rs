//! How a waiting `Acquire` stands, for `AcquireWatched`: the call notes each stage it reaches,
//! and whoever reports on it reads that with the queue's own count.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::Sessions;
use crate::admission::{Quota, Ticket};

/// Shared by one Acquire call and its reporter. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AcquireWatch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ticket: Ticket,
    stage: Mutex<Stage>,
    started: Instant,
}

/// Where the call is.
#[derive(Debug, Clone)]
pub(super) enum Stage {
    /// Checking the request and the tenant.
    Starting,
    /// In this replica's queue for a slot of the tenant and of the server.
    Queued { tenant: String, quota: Quota },
    /// Taking one of the tenant's slots in the database, counted across replicas.
    Claiming { tenant: String, max_slots: u32 },
    /// A slot is held; a browser is leased (booted, if none is warm).
    Leasing { tenant: String },
}

/// One report on a waiting call.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitStatus {
    pub tenant: String,
    /// From 1 while queued on this replica; 0 after.
    pub position: u32,
    pub queued: u32,
    pub waited_ms: u32,
    pub reason: String,
}

impl Default for AcquireWatch {
    fn default() -> Self {
        AcquireWatch {
            inner: Arc::new(Inner {
                ticket: Ticket::default(),
                stage: Mutex::new(Stage::Starting),
                started: Instant::now(),
            }),
        }
    }
}

impl AcquireWatch {
    pub(super) fn ticket(&self) -> &Ticket {
        &self.inner.ticket
    }

    pub(super) fn reached(&self, stage: Stage) {
        *self.inner.stage.lock().unwrap_or_else(|e| e.into_inner()) = stage;
    }

    fn stage(&self) -> Stage {
        self.inner.stage.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Why a call waits while every slot of `tenant` is taken on some replica.
pub(super) fn quota_across_replicas(tenant: &str, max_slots: u32) -> String {
    format!("tenant {tenant} is at its quota: its max_slots {max_slots} sessions are in use across the replicas sharing the database")
}

/// Notes `stage` on the call's watch, if it has one.
pub(super) fn note(watch: Option<&AcquireWatch>, stage: impl FnOnce() -> Stage) {
    if let Some(w) = watch {
        w.reached(stage());
    }
}

impl Sessions {
    /// How the call `watch` follows stands now; `None` before it knows its tenant.
    pub fn wait_status(&self, watch: &AcquireWatch) -> Option<WaitStatus> {
        let waited_ms = watch.inner.started.elapsed().as_millis().min(u32::MAX as u128) as u32;
        let admission = &self.inner.admission;
        let (tenant, position, queued, reason) = match watch.stage() {
            Stage::Starting => return None,
            Stage::Queued { tenant, quota } => {
                let (position, queued) = admission.position(&tenant, watch.ticket()).unwrap_or((0, 0));
                let reason = admission.why_waiting(&tenant, quota);
                (tenant, position, queued, reason)
            }
            Stage::Claiming { tenant, max_slots } => {
                let reason = quota_across_replicas(&tenant, max_slots);
                let queued = admission.usage(&tenant).1;
                (tenant, 0, queued, reason)
            }
            Stage::Leasing { tenant } => {
                let queued = admission.usage(&tenant).1;
                (tenant, 0, queued, "waiting for a browser to finish booting".to_string())
            }
        };
        Some(WaitStatus { tenant, position, queued, waited_ms, reason })
    }
}
