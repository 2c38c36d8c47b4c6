//! [`Bound::serve`]: the application's state and its background tasks, both listeners, and
//! the stop (in [`Stages`]) once the shutdown future resolves.

use std::future::Future;
use std::time::Duration;

use anyhow::Context;
use browserpool_proto::v1::{admin_server::AdminServer, sessions_server::SessionsServer};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::{Bound, Settings};
use crate::app::App;
use crate::auth::{AuthLayer, Epochs, Revocations, TokenCheck};
use crate::forward::{ForwardLayer, Peers};
use crate::grpc::{admin_api::AdminApi, sessions_api::SessionsApi};
use crate::shutdown::{Running, Stages};
use crate::tls::{Tls, TlsListener};

/// How often the deny-list and the tenant epochs are read again.
const AUTH_REFRESH: Duration = Duration::from_millis(500);
/// How often the signing keys are read again: keys rotated beside the running server
/// (`browserpool key rotate`) are signed with within a second, no restart.
const KEYS_REFRESH: Duration = Duration::from_secs(1);

impl Bound {
    /// Serves gRPC and HTTP until `shutdown` resolves, then closes every session, kills every
    /// worker and waits for every background task (the order is [`Stages`]'s).
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let tls_mode = self.tls_mode();
        let (grpc_addr, http_addr) = (self.grpc_addr, self.http_addr);
        tracing::info!(%grpc_addr, %http_addr, tls = ?tls_mode, version = crate::VERSION, revision = crate::REVISION, "serving");
        // The data dir's lock is held until this returns.
        let Bound {
            audit,
            audit_writer,
            grpc,
            http,
            keys,
            sealer,
            store,
            sessions,
            metrics,
            pool,
            stages,
            settings,
            tls,
            _dir_lock,
            ..
        } = self;
        // The deny-list and the tenant epochs are loaded before serving, then refreshed.
        let revoked = Revocations::default();
        revoked.replace(store.revoked().await?);
        let epochs = Epochs::default();
        epochs.replace(store.tenant_epochs().await?);
        let tokens = TokenCheck::new(keys.clone(), revoked.clone(), epochs.clone());
        let throttle = Default::default();
        let app = App {
            sessions,
            pool,
            store,
            audit,
            metrics,
            keys,
            sealer,
            revoked,
            epochs,
            tokens,
            throttle,
            tls: tls_mode,
        };

        // Every background task is tracked, and all are joined before this returns.
        let tasks = TaskTracker::new();
        // The audit writer stops after the sessions are closed (their records go in first).
        let audit_writer =
            tasks.spawn(audit_writer.run(stages.writers.clone()).instrument(tracing::info_span!("audit_writer")));
        spawn_refreshes(&tasks, &app, &stages.serving);
        let reaper = tasks.spawn(
            app.sessions.clone().reap_loop(stages.serving.clone()).instrument(tracing::info_span!("session_reaper")),
        );
        tasks.spawn(
            app.sessions
                .clone()
                .sweep_kept_files(stages.serving.clone())
                .instrument(tracing::info_span!("kept_files_sweep")),
        );
        // Stopped only once every session has ended, so other replicas do not take this one
        // for gone while it closes them.
        let heartbeat = tasks.spawn(
            app.sessions
                .clone()
                .heartbeat_loop(stages.beating.clone())
                .instrument(tracing::info_span!("replica_heartbeat")),
        );
        let peers = Peers::new(
            &app,
            tls.as_ref(),
            settings.forward_connect_timeout,
            settings.forward_timeout,
            stages.serving.clone(),
        );
        let http = tasks.spawn(
            http_listener(http, &app, peers.clone(), &settings, tls.as_ref(), stages.writers.clone())
                .instrument(tracing::info_span!("http_listener")),
        );
        // On the signal: drain, then the grace period (see [`Stages::stop_sessions`]).
        let stopper = tasks.spawn(stages.stop_sessions(
            shutdown,
            app.sessions.clone(),
            settings.drain_timeout,
            settings.shutdown_grace,
        ));
        let served = serve_grpc(grpc, &app, peers, &settings, tls.as_ref(), &stages).await;
        let running = Running { tasks, stopper, reaper, heartbeat, audit_writer, http };
        stages.finish(served.is_ok(), running, &app, settings.shutdown_grace).await;
        served
    }
}

/// The deny-list, the tenant epochs and the signing keys, read again until `serving` ends.
fn spawn_refreshes(tasks: &TaskTracker, app: &App, serving: &CancellationToken) {
    tasks.spawn(
        app.revoked
            .clone()
            .refresh_loop(app.store.clone(), AUTH_REFRESH, serving.clone())
            .instrument(tracing::info_span!("revocations")),
    );
    tasks.spawn(
        app.epochs
            .clone()
            .refresh_loop(app.store.clone(), AUTH_REFRESH, serving.clone())
            .instrument(tracing::info_span!("tenant_epochs")),
    );
    tasks.spawn(
        app.keys.clone().refresh_loop(KEYS_REFRESH, serving.clone()).instrument(tracing::info_span!("signing_keys")),
    );
}

/// The HTTP side listener until `stop`: it stays until the very end, so `/readyz` answers 503
/// (draining) from the signal to the exit, whatever the drain timeout; CDP relays end with
/// their sessions, and a session that has ended takes no new one.
fn http_listener(
    listener: TcpListener,
    app: &App,
    peers: Peers,
    settings: &Settings,
    tls: Option<&Tls>,
    stop: CancellationToken,
) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
    let state = crate::http::HttpState {
        app: app.clone(),
        peers,
        cdp_limits: settings.cdp_limits.clone(),
        live_max_viewers: settings.live_max_viewers,
        cdp_stats: Default::default(),
        // An MCP message carries what a gRPC one does, as JSON: a `load_html` document's
        // quotes and newlines escaped may take twice its bytes.
        mcp_max_body: 2 * (settings.max_html_bytes + (1 << 20)),
        stop: stop.clone(),
    };
    crate::tls::serve_http(listener, crate::http::router(state), tls.map(Tls::http_acceptor), async move {
        stop.cancelled().await
    })
}

/// The gRPC listener, with its layers (traces, forwarding, auth) and services (health,
/// reflection, Sessions, Admin), until [`Stages::serving`] is cancelled.
async fn serve_grpc(
    listener: TcpListener,
    app: &App,
    peers: Peers,
    settings: &Settings,
    tls: Option<&Tls>,
    stages: &Stages,
) -> anyhow::Result<()> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<SessionsServer<SessionsApi>>().await;
    health_reporter.set_serving::<AdminServer<AdminApi>>().await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(browserpool_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let sessions_api = SessionsApi::new(app, stages.serving.clone());
    // Room for a maximal load_html document plus the rest of the message.
    let max_message = settings.max_html_bytes + (1 << 20);
    let admin_api = AdminApi::new(app, settings.max_token_ttl, peers.clone());
    let auth = AuthLayer::new(app.keys.clone(), app.revoked.clone(), app.epochs.clone(), app.audit.clone())
        .with_throttle(app.throttle.clone());
    // The trace layer outermost, so calls the auth layer refuses are traced too.
    let router = tonic::transport::Server::builder()
        .layer(crate::telemetry::TraceLayer::new(app.sessions.replica_id()))
        // Then forwarding: a call for a session another replica holds is checked and audited
        // there, not here.
        .layer(ForwardLayer::new(peers))
        .layer(auth)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            SessionsServer::new(sessions_api)
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(64 << 20),
        )
        .add_service(AdminServer::new(admin_api));
    let serving = stages.serving.clone();
    let stopping = async move { serving.cancelled().await };
    let served = match tls {
        None => {
            // Without TCP_NODELAY a response's frames (headers, data, trailers) wait on the
            // client's delayed ACK: about 40 ms added to a call that took 2.
            let incoming = tokio_stream::StreamExt::map(TcpListenerStream::new(listener), |accepted| {
                accepted.inspect(|tcp| {
                    let _ = tcp.set_nodelay(true);
                })
            });
            router.serve_with_incoming_shutdown(incoming, stopping).await
        }
        Some(tls) => {
            let incoming = crate::tls::incoming(TlsListener::new(listener, tls.grpc_acceptor()));
            router.serve_with_incoming_shutdown(incoming, stopping).await
        }
    };
    served.context("grpc server")
}
