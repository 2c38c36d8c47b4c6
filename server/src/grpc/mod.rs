//! Thin gRPC adapters: unwrap the request, call the domain, convert the answer. Claims come
//! from the request extensions, put there by [`crate::auth::AuthLayer`].

pub mod admin_api;
pub mod sessions_api;

use tonic::{Request, Status};

use crate::auth::Claims;

/// The caller's validated claims. Missing claims mean the auth layer was bypassed: refuse.
pub(crate) fn claims<T>(req: &Request<T>) -> Result<Claims, Status> {
    req.extensions()
        .get::<Claims>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("missing authorization metadata: send `authorization: Bearer <jwt>`"))
}
