//! The service's error enum and the one place it becomes a gRPC status.
//!
//! Causes are logged here, server-side; clients get a clean message and the right code.

use browserpool_pool::PoolError;
use tonic::{Code, Status};

use crate::audit::AuditError;
use crate::files::FileError;
use crate::store::StoreError;

/// Everything an RPC can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    PermissionDenied(String),
    /// Unknown or foreign session: the same answer, so ids do not leak.
    #[error("session {0} not found: no session this token may use has that id; check the id (`browserpool session list` shows the ones it may)")]
    SessionNotFound(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    InvalidArgument(String),
    /// The session exists but is not READY; `detail` says why and when it ended, and what to
    /// do (see `SessionRecord::ended`), when known.
    #[error("session {id} is {state}{detail}")]
    NotReady { id: String, state: &'static str, detail: String },
    /// The session is live on another replica sharing the database, and the call reached
    /// this one without being forwarded there (it was itself forwarded, or that replica
    /// advertises no address).
    #[error("session {0} is held by another replica sharing this database, which this call could not be forwarded to; retry, or call that replica (its --advertise address) directly")]
    OnAnotherReplica(String),
    /// Another replica the call needs did not answer (the message names it and why).
    #[error("{0}")]
    Unreachable(String),
    /// `wait_ms` ran out; `cause` says what was full (the tenant's quota, the server's
    /// workers) or what the wait was for.
    #[error("no browser became free within {waited_ms} ms: {cause}; retry, or wait longer (a larger wait_ms)")]
    WaitElapsed { waited_ms: u64, cause: String },
    /// The tenant's queue is full; the message says how long it is.
    #[error("{0}")]
    QueueFull(String),
    /// Too many calls without a valid token from one address; the message says when to retry.
    #[error("{0}")]
    Throttled(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("server is shutting down; retry on another replica, or once it is back")]
    ShuttingDown,
    #[error(
        "server is draining: it takes no new sessions, live ones go on; retry on another replica, or once it resumes"
    )]
    Draining,
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The audit trail cannot take the call's records: it is refused rather than run
    /// unrecorded.
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error("{0}")]
    Internal(String),
    /// A session's file refused (its name, its size, what it is) or not found.
    #[error(transparent)]
    Files(#[from] FileError),
    /// A browser-side failure of a whole RPC (context import/export).
    #[error("{}", .0.message)]
    Action(browserpool_pool::ActionFailure),
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        let (code, message) = match &e {
            ServiceError::Unauthenticated(_) => (Code::Unauthenticated, e.to_string()),
            ServiceError::PermissionDenied(_) => (Code::PermissionDenied, e.to_string()),
            ServiceError::SessionNotFound(_) | ServiceError::NotFound(_) => (Code::NotFound, e.to_string()),
            ServiceError::InvalidArgument(_) => (Code::InvalidArgument, e.to_string()),
            ServiceError::NotReady { .. } | ServiceError::OnAnotherReplica(_) => {
                (Code::FailedPrecondition, e.to_string())
            }
            ServiceError::WaitElapsed { .. } => (Code::DeadlineExceeded, e.to_string()),
            ServiceError::QueueFull(_) | ServiceError::Throttled(_) => (Code::ResourceExhausted, e.to_string()),
            ServiceError::FailedPrecondition(_) => (Code::FailedPrecondition, e.to_string()),
            ServiceError::ShuttingDown
            | ServiceError::Draining
            | ServiceError::Audit(_)
            | ServiceError::Unreachable(_) => (Code::Unavailable, e.to_string()),
            ServiceError::Pool(PoolError::Exhausted(wait)) => {
                let waited = wait.as_millis();
                (Code::DeadlineExceeded, format!("no browser became free within {waited} ms; retry, or wait longer"))
            }
            ServiceError::Pool(PoolError::NotBooted(_)) => (Code::DeadlineExceeded, e.to_string()),
            ServiceError::Pool(PoolError::ShuttingDown) => (Code::Unavailable, ServiceError::ShuttingDown.to_string()),
            ServiceError::Pool(PoolError::MemoryLimit(_)) => (Code::FailedPrecondition, e.to_string()),
            ServiceError::Pool(PoolError::Emulation(_)) => (Code::InvalidArgument, e.to_string()),
            ServiceError::Pool(
                PoolError::Launch(_)
                | PoolError::BootFailing(_)
                | PoolError::NoChromium { .. }
                | PoolError::BadChromium(_)
                | PoolError::NoFreePort(_),
            ) => {
                tracing::error!(error = %e, "cannot provide a browser");
                (Code::Unavailable, format!("cannot start a browser: {e}"))
            }
            ServiceError::Pool(_) | ServiceError::Internal(_) => {
                tracing::error!(error = %e, "internal error");
                (Code::Internal, "internal error; see server log".into())
            }
            ServiceError::Action(f) => {
                use browserpool_pool::FailureCode as F;
                let code = match f.code {
                    // The active tab is on another origin: the caller must navigate first.
                    F::InvalidArgument if f.message.starts_with("strict_origin:") => Code::FailedPrecondition,
                    F::InvalidArgument | F::PayloadTooLarge | F::BlockedByPolicy => Code::InvalidArgument,
                    F::Timeout => Code::DeadlineExceeded,
                    F::DialogOpen | F::SessionClosed | F::SessionCrashed | F::TabCrashed | F::NavigationFailed => {
                        Code::FailedPrecondition
                    }
                    F::PermissionDenied => Code::PermissionDenied,
                    _ => {
                        tracing::error!(error = %f.message, "browser failure");
                        return Status::new(Code::Internal, "internal error; see server log");
                    }
                };
                (code, f.message.clone())
            }
            ServiceError::Files(f) => match f {
                FileError::BadName { .. } => (Code::InvalidArgument, e.to_string()),
                FileError::NotFound(_) => (Code::NotFound, e.to_string()),
                FileError::NotAFile(_) => (Code::FailedPrecondition, e.to_string()),
                FileError::TooLarge { .. } | FileError::Full { .. } => (Code::ResourceExhausted, e.to_string()),
                FileError::Io(_) => {
                    tracing::error!(error = %e, "session files");
                    (Code::Internal, "internal error; see server log".into())
                }
            },
            ServiceError::Store(_) => {
                tracing::error!(error = %e, "store error");
                // Retryable: what a cut write left (a session row nobody holds) the server ends
                // itself once the database answers again (docs/faults.md).
                (
                    Code::Unavailable,
                    "the session store (database) failed this call; retry in a few seconds, or see the server log"
                        .into(),
                )
            }
        };
        Status::new(code, message)
    }
}

/// Shorthand for handler results.
pub type Result<T, E = ServiceError> = std::result::Result<T, E>;
