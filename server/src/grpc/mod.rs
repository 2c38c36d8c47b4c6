//! Thin gRPC adapters: unwrap the request, call the domain, convert the answer. Claims come
//! from the request extensions, put there by [`crate::auth::AuthLayer`].

mod acquire;
pub mod admin_api;
pub mod fanout;
pub mod sessions_api;

use tonic::{Request, Status};

use crate::audit::RpcTarget;
use crate::auth::Claims;

/// The caller's validated claims. Missing claims mean the auth layer was bypassed: refuse.
pub(crate) fn claims<T>(req: &Request<T>) -> Result<Claims, Status> {
    req.extensions()
        .get::<Claims>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("missing authorization metadata: send `authorization: Bearer <jwt>`"))
}

/// A server stream's body.
pub(crate) type BoxStream<T> = std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Where the handler names the session its RPC is about, for the RPC-level audit record.
pub(crate) fn rpc_target<T>(req: &Request<T>) -> RpcTarget {
    req.extensions().get::<RpcTarget>().cloned().unwrap_or_default()
}

/// Requests that name one session.
pub(crate) trait AboutSession {
    fn session_id(&self) -> &str;
}

macro_rules! about_session {
    ($($path:literal => $message:ident),* $(,)?) => {
        $(impl AboutSession for browserpool_proto::v1::$message {
            fn session_id(&self) -> &str {
                &self.session_id
            }
        })*
    };
}

// The requests of the rpcs forwarding routes by session: one list for both.
crate::forward::session_rpcs!(about_session);

/// [`claims`] for a request about one session, which the RPC's audit record then names.
pub(crate) fn claims_about<T: AboutSession>(req: &Request<T>) -> Result<Claims, Status> {
    let claims = claims(req)?;
    rpc_target(req).set(req.get_ref().session_id());
    Ok(claims)
}
