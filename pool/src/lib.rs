//! Chromium workers and what runs inside them.
//!
//! Nothing here knows about gRPC or SQL: the server crate adapts these types to the wire and
//! the store. chromiumoxide stays behind this crate's own types ([`Driver`], [`Lease`]).

pub mod actions;
pub mod driver;
pub mod error;
pub mod launcher;
pub mod lock;
pub mod pool;

pub use actions::{canonicalize, Access, Canonical, UnknownAction};
pub use driver::{ActionCall, ActionFailure, ActionOutput, Driver, FailureCode, Viewport};
pub use error::PoolError;
pub use launcher::{find_chrome, LaunchConfig, PortRange};
pub use pool::{Lease, Pool, PoolConfig, PoolStatus, WorkerId, WorkerState, WorkerStatus};
