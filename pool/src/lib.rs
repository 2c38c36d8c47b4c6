//! Chromium workers and what runs inside them.
//!
//! Nothing here knows about gRPC or SQL: the server crate adapts these types to the wire and
//! the store. chromiumoxide stays behind this crate's own types ([`Driver`], [`Lease`]).

pub mod actions;
pub mod cgroup;
pub mod context;
pub mod driver;
pub mod egress;
pub mod emulation;
pub mod error;
pub mod events;
pub mod filenames;
mod keys;
pub mod launcher;
pub mod lock;
mod netns;
pub mod outcome;
pub mod policy;
pub mod pool;
mod procfs;
pub mod rawcdp;
pub mod sandbox;
pub mod sync;
mod task;
pub mod video;

pub use actions::{canonicalize, parse_viewport, Access, Action, ActionKind, Canonical, Target, UnknownAction};
pub use cgroup::Cgroups;
pub use context::{CaptureOptions, ContextState, CookieRecord, MAX_COOKIES};
pub use driver::live::{dialog_kind, Dialogs, LiveFrame, LiveInput, Screen, TabInfo, Watching};
pub use driver::{ActionCall, Driver, DriverConfig};
pub use egress::{Credentials, Egress, EgressConfig, Upstream, UpstreamKind};
pub use emulation::{ColorScheme, Emulation, Geolocation, Throttle};
pub use error::PoolError;
pub use events::{DialogInfo, DialogKind, Event, EventKind, EventReader};
pub use launcher::{
    claim_profiles, find_chrome, profiles_capped, reap_abandoned, reap_orphans, unclaim_profiles, LaunchConfig,
};
pub use lock::DirLock;
pub use lock::PortRange;
pub use netns::may_create as may_create_netns;
pub use outcome::{ActionFailure, ActionOutput, FailureCode, Viewport};
pub use policy::NavPolicy;
pub use pool::{
    remove_files_dir, Lease, LeaseSpec, Pool, PoolConfig, PoolStatus, SharedConfig, WorkerId, WorkerState, WorkerStatus,
};
