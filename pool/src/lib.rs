//! Chromium workers and what runs inside them.
//!
//! Nothing here knows about gRPC or SQL: the server crate adapts these types to the wire and
//! the store. chromiumoxide stays behind this crate's own types ([`Driver`], [`Lease`]).

pub mod actions;
pub mod cgroup;
pub mod context;
pub mod driver;
pub mod egress;
pub mod error;
pub mod events;
mod keys;
pub mod launcher;
pub mod lock;
mod netns;
mod ops;
pub mod policy;
pub mod pool;
pub mod rawcdp;
pub mod sandbox;
mod task;
mod watchers;

pub use actions::{canonicalize, parse_viewport, Access, Action, ActionKind, Canonical, Target, UnknownAction};
pub use cgroup::Cgroups;
pub use context::{CaptureOptions, ContextState, CookieRecord, MAX_COOKIES};
pub use driver::{ActionCall, ActionFailure, ActionOutput, Driver, DriverConfig, FailureCode, Viewport};
pub use egress::{Egress, EgressConfig};
pub use error::PoolError;
pub use events::{DialogInfo, DialogKind, Event, EventKind, EventReader};
pub use launcher::{find_chrome, reap_orphans, LaunchConfig, PortRange};
pub use lock::DirLock;
pub use policy::NavPolicy;
pub use pool::{Lease, LeaseSpec, Pool, PoolConfig, PoolStatus, SharedConfig, WorkerId, WorkerState, WorkerStatus};
