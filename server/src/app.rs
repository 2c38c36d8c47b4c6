//! The application's state, explicit: what the adapters (gRPC, HTTP, forwarding) read, built
//! once when serving starts. Adapters take it from here instead of reaching through
//! [`Sessions`] for the store, the audit trail or the metrics.

use std::sync::Arc;

use browserpool_pool::Pool;

use crate::audit::AuditLog;
use crate::auth::{Epochs, Keys, Revocations, TokenCheck};
use crate::metrics::Metrics;
use crate::sessions::Sessions;
use crate::store::Store;
use crate::throttle::Throttle;
use crate::tls::TlsMode;

/// Everything a request may need, cheap to clone (each part is shared).
#[derive(Clone)]
pub struct App {
    /// The session lifecycle.
    pub sessions: Sessions,
    /// The Chromium pool: its status (`/readyz`, `/metrics`, `PoolStatus`).
    pub pool: Pool,
    pub store: Store,
    /// The audit trail: places for records, refusals, its health.
    pub audit: AuditLog,
    /// The service's counters and histograms (the sessions record into the same ones).
    pub metrics: Arc<Metrics>,
    pub keys: Arc<Keys>,
    /// Seals and opens secrets at rest (proxy passwords).
    pub sealer: Arc<crate::secrets::Sealer>,
    /// The token deny-list and the tenant epochs, refreshed in the background.
    pub revoked: Revocations,
    pub epochs: Epochs,
    /// Verifies tokens against the keys, the deny-list and the epochs.
    pub tokens: TokenCheck,
    /// The per-address budget of calls without a valid token, shared by both listeners.
    pub throttle: Throttle,
    /// TLS on the listeners: the scheme of URLs pointing at them, whether mTLS is on.
    pub tls: TlsMode,
}
