//! Logging to stderr: a `RUST_LOG`-style filter from `BROWSERPOOL_LOG` (default
//! [`DEFAULT_LOG`]), in the format `BROWSERPOOL_LOG_FORMAT` names: `text` (default) or `json`
//! (one object a line, for cluster log pipelines).
//!
//! Traces, when an OTLP endpoint is configured (`--otlp-endpoint`, else the standard
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`): a span per RPC
//! ([`TraceLayer`]) and one per action ([`action_span`]), exported over OTLP/gRPC in batches.
//! Only the spans of target [`SPAN_TARGET`] are exported, never log events (whose text could
//! name a URL), and those spans never reach the log: they carry names, ids and codes only,
//! never payloads, URLs or tokens.

use std::task::{Context, Poll};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The target of the spans that are exported (and only of those).
pub const SPAN_TARGET: &str = "browserpool::trace";

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// The format `BROWSERPOOL_LOG_FORMAT` names, or why it names none.
    pub fn from_env() -> Result<LogFormat, String> {
        match std::env::var("BROWSERPOOL_LOG_FORMAT").as_deref() {
            Err(_) | Ok("") | Ok("text") => Ok(LogFormat::Text),
            Ok("json") => Ok(LogFormat::Json),
            Ok(other) => Err(format!("BROWSERPOOL_LOG_FORMAT: `{other}` is not text or json")),
        }
    }
}

/// What [`init`] started; [`Telemetry::shutdown`] it when the server has stopped, so the
/// spans still queued are exported before the process exits.
#[must_use = "shut it down when the server stops, or queued spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is queued (waiting at most 5 s for the collector) and stops the exporter's
    /// thread. Does nothing when traces are off.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else { return };
        // A blocking call that waits for the exporter, whose gRPC channel runs on this
        // runtime: off the runtime's threads, so it cannot starve it.
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "traces: spans may be lost at shutdown"),
            Err(e) => tracing::warn!(error = %e, "traces: the exporter's shutdown panicked"),
        }
    }
}

/// Installs the global subscriber; safe to call more than once (later calls are no-ops).
/// With `otlp_endpoint`, also the OpenTelemetry layer exporting to it; this needs a tokio
/// runtime (the exporter's gRPC channel is spawned on it).
pub fn init(format: LogFormat, otlp_endpoint: Option<&str>) -> anyhow::Result<Telemetry> {
    let log = log_layer(format)?;
    let provider = otlp_endpoint.map(tracer_provider).transpose()?;
    let otel = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider;
        otel_layer(provider.tracer("browserpool"))
    });
    let installed = tracing_subscriber::registry().with(log).with(otel).try_init().is_ok();
    if let (true, Some(endpoint)) = (installed, otlp_endpoint) {
        tracing::info!(endpoint = %crate::redact::url_target(endpoint), "traces: exporting spans over OTLP/gRPC");
    }
    Ok(Telemetry { provider: provider.filter(|_| installed) })
}

/// The filter when `BROWSERPOOL_LOG` is unset. chromiumoxide warns of every CDP message it
/// cannot parse, and it cannot parse one Chromium sends for nearly every request
/// (`Network.requestWillBeSentExtraInfo`, whose fields newer Chromiums renamed; the pool does
/// not use it): at `info`, an operator's log would be mostly that line.
const DEFAULT_LOG: &str = "info,chromiumoxide::handler=error";

/// chromiumoxide logs every raw CDP message at trace, and each it cannot parse at debug: cookie
/// values, `Set-Cookie` and `Authorization` headers and URLs with their queries included.
/// Capped at info whatever level `BROWSERPOOL_LOG` asks, unless it names the target itself.
const RAW_CDP_TARGET: &str = "chromiumoxide::conn";

/// The log filter for `BROWSERPOOL_LOG` (`asked`; [`DEFAULT_LOG`] when unset or unparsable).
fn log_filter(asked: Option<&str>) -> anyhow::Result<tracing_subscriber::EnvFilter> {
    let mut filter = asked
        .and_then(|a| tracing_subscriber::EnvFilter::try_new(a).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(DEFAULT_LOG))
        // The exported spans stay out of log lines (they would prefix every line of an RPC).
        .add_directive(format!("{SPAN_TARGET}=off").parse()?);
    if !asked.is_some_and(|a| a.contains(RAW_CDP_TARGET)) {
        filter = filter.add_directive(format!("{RAW_CDP_TARGET}=info").parse()?);
    }
    Ok(filter)
}

/// Log lines to stderr, filtered by `BROWSERPOOL_LOG`.
fn log_layer<S>(format: LogFormat) -> anyhow::Result<Box<dyn Layer<S> + Send + Sync>>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let filter = log_filter(std::env::var("BROWSERPOOL_LOG").ok().as_deref())?;
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    Ok(match format {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().with_current_span(false).with_filter(filter).boxed(),
    })
}

/// The layer that turns [`SPAN_TARGET`] spans into OpenTelemetry spans, and nothing else.
fn otel_layer<S>(tracer: opentelemetry_sdk::trace::SdkTracer) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Source locations, threads, targets and busy/idle times are noise in a trace.
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(tracing_subscriber::filter::Targets::new().with_target(SPAN_TARGET, tracing::Level::INFO))
}

/// A batch exporter to the OTLP/gRPC endpoint, with this build as the resource.
fn tracer_provider(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    use opentelemetry_otlp::WithExportConfig;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| anyhow::anyhow!("traces: OTLP exporter for {endpoint}: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("browserpool")
        .with_attributes([
            opentelemetry::KeyValue::new("service.version", crate::VERSION),
            opentelemetry::KeyValue::new("vcs.ref.head.revision", crate::REVISION),
        ])
        .build();
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
}

/// The RPC span's fields filled in after it starts.
const TENANT: &str = "browserpool.tenant";
const SESSION: &str = "browserpool.session";

/// Names the caller's tenant on the current RPC span (the auth layer, once the token checks
/// out). A no-op when traces are off or no RPC span is current.
pub fn record_tenant(tenant: &str) {
    tracing::Span::current().record(TENANT, tenant);
}

/// Names the session the current RPC is about on its span (where the handler names it for
/// the audit record).
pub fn record_session(session: &str) {
    tracing::Span::current().record(SESSION, session);
}

/// The span of one action, a child of the current (RPC) span; `action` is the canonical name
/// or `unknown`, never the client's string. Finish it with [`record_outcome`].
pub fn action_span(tenant: &str, session: &str, action: &'static str) -> tracing::Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "action",
        otel.name = action,
        browserpool.action = action,
        browserpool.tenant = tenant,
        browserpool.session = session,
        browserpool.outcome = tracing::field::Empty,
        browserpool.code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Records how an action ended: `code` is its failure code, `None` when it succeeded.
pub fn record_outcome(span: &tracing::Span, code: Option<&str>) {
    match code {
        None => {
            span.record("browserpool.outcome", "ok");
        }
        Some(code) => {
            span.record("browserpool.outcome", "error");
            span.record("browserpool.code", code);
            span.record("otel.status_code", "error");
        }
    }
}

/// Sets `traceparent` (and `tracestate`) in `headers` to the current span's context, so a call
/// made on behalf of this one (a forward to another replica) continues its trace with this
/// replica's span as the parent. Leaves `headers` alone when traces are off or no span is
/// current (a forwarded request then keeps the caller's own `traceparent`).
pub fn inject_traceparent(headers: &mut http::HeaderMap) {
    // The innermost exported span entered on this thread (the RPC span in a handler), even
    // under spans that are only logged: entering an exported span makes its context current.
    let cx = opentelemetry::Context::current();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
}

/// The W3C trace context of `headers`: the caller's span, as a remote parent.
fn extract_context(headers: &http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract_with_context(&opentelemetry::Context::new(), &HeaderExtractor(headers))
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        let Ok(name) = http::HeaderName::from_bytes(key.as_bytes()) else { return };
        // An empty tracestate is no tracestate; one the caller sent must not outlive it.
        match http::HeaderValue::from_str(&value) {
            Ok(value) if !value.is_empty() => {
                self.0.insert(name, value);
            }
            _ => {
                self.0.remove(name);
            }
        }
    }
}

/// gRPC status codes that are the server's fault: the RPC span's status is an error (OTel's
/// rpc conventions for servers); the others are the caller's business and leave it unset.
fn server_fault(code: i32) -> bool {
    use tonic::Code;
    [Code::Unknown, Code::DeadlineExceeded, Code::Unimplemented, Code::Internal, Code::Unavailable, Code::DataLoss]
        .iter()
        .any(|c| *c as i32 == code)
}

/// `package.Service` and `Method` of a gRPC path, when it is one (`/package.Service/Method`).
/// The path is the client's: anything else is not used as a name.
fn rpc_parts(path: &str) -> Option<(&str, &str)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let word = |s: &str| {
        !s.is_empty() && s.len() <= 100 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    };
    (word(service) && word(method)).then_some((service, method))
}

/// Tower layer: a server span per gRPC call, named `package.Service/Method` with OTel's rpc
/// attributes, continuing the caller's trace when the request carries a W3C `traceparent`.
/// Outermost, so calls the auth layer refuses are traced too. The span is current while the
/// inner services run (the auth layer and handlers name tenant and session on it) and lasts
/// until the response body ends, so a stream's span covers the whole stream.
///
/// `rpc.grpc.status_code` comes from the response headers (trailers-only: errors of unary
/// calls) or the trailers; a body dropped before either (the client went away) records
/// CANCELLED.
#[derive(Clone)]
pub struct TraceLayer {
    replica: std::sync::Arc<str>,
}

impl TraceLayer {
    /// `replica` names this replica on every span.
    pub fn new(replica: &str) -> TraceLayer {
        TraceLayer { replica: replica.into() }
    }
}

impl<S> tower::Layer<S> for TraceLayer {
    type Service = TraceService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        TraceService { inner, replica: self.replica.clone() }
    }
}

/// The service [`TraceLayer`] wraps around the gRPC routes.
#[derive(Clone)]
pub struct TraceService<S> {
    inner: S,
    replica: std::sync::Arc<str>,
}

impl<S> TraceService<S> {
    fn span(&self, path: &str) -> tracing::Span {
        let (name, service, method) = match rpc_parts(path) {
            Some((service, method)) => (&path[1..], service, method),
            None => ("unknown", "unknown", "unknown"),
        };
        tracing::info_span!(
            target: SPAN_TARGET,
            "rpc",
            otel.name = name,
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            rpc.system = "grpc",
            rpc.service = service,
            rpc.method = method,
            rpc.grpc.status_code = tracing::field::Empty,
            browserpool.replica = &*self.replica,
            browserpool.tenant = tracing::field::Empty,
            browserpool.session = tracing::field::Empty,
        )
    }
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for TraceService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<TracedBody<ResBody>>;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let span = self.span(req.uri().path());
        if span.is_disabled() {
            // Traces are off: nothing to record.
            let fut = self.inner.call(req);
            return Box::pin(async move {
                Ok(fut.await?.map(|body| TracedBody::new(body, TraceEnd { span: None, status_known: true })))
            });
        }
        // Before the span is first entered, which starts it.
        let _ = span.set_parent(extract_context(req.headers()));
        let fut = span.in_scope(|| self.inner.call(req));
        let body_span = span.clone();
        Box::pin(tracing::Instrument::instrument(
            async move {
                let response = fut.await?;
                // A trailers-only response (how errors of unary calls end) has its status here.
                let header_status = crate::grpc_status::of(response.headers());
                if let Some(code) = header_status {
                    record_status(&body_span, code);
                }
                Ok(response.map(|body| {
                    TracedBody::new(body, TraceEnd { span: Some(body_span), status_known: header_status.is_some() })
                }))
            },
            span,
        ))
    }
}

fn record_status(span: &tracing::Span, code: i32) {
    span.record("rpc.grpc.status_code", code as i64);
    if server_fault(code) {
        span.record("otel.status_code", "error");
    }
}

/// A response body holding its call's span until it ends; records the status its trailers
/// carry.
pub type TracedBody<B> = crate::grpc_status::WatchedBody<B, TraceEnd>;

/// The span a [`TracedBody`] holds until its call ends.
pub struct TraceEnd {
    /// `None` when traces are off.
    span: Option<tracing::Span>,
    /// Whether the status is recorded (from the headers, or the trailers).
    status_known: bool,
}

impl crate::grpc_status::CallEnd for TraceEnd {
    /// Ends the span (dropping the body's hold on it), recording `code` unless a status is
    /// already recorded.
    fn ended(&mut self, code: Option<i32>) {
        let Some(span) = self.span.take() else { return };
        if let (false, Some(code)) = (self.status_known, code) {
            record_status(&span, code);
        }
        self.status_known = true;
    }

    /// Dropped before its trailers, with no status in its headers: the client went away.
    fn dropped(&mut self) {
        self.ended(Some(tonic::Code::Cancelled as i32));
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
    use opentelemetry::Value;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SpanData, SpanExporter};
    use tower::{Layer as _, ServiceExt};

    use super::*;

    /// Keeps what it is given.
    #[derive(Debug, Clone, Default)]
    struct Collect(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Collect {
        fn export(&self, batch: Vec<SpanData>) -> impl std::future::Future<Output = OTelSdkResult> + Send {
            self.0.lock().unwrap().extend(batch);
            std::future::ready(Ok(()))
        }
    }

    /// A subscriber exporting [`SPAN_TARGET`] spans to a [`Collect`] as each one ends, set as
    /// this thread's default while the guard lives.
    fn traced() -> (Collect, tracing::subscriber::DefaultGuard) {
        use opentelemetry::trace::TracerProvider;
        let collect = Collect::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(collect.clone()).build();
        // A layer that sees every span (as the log does), and writes nothing.
        let all = tracing_subscriber::fmt::layer().with_writer(std::io::sink);
        let subscriber = tracing_subscriber::registry().with(all).with(otel_layer(provider.tracer("test")));
        (collect, tracing::subscriber::set_default(subscriber))
    }

    /// A body of no data that ends with `trailers`.
    struct Trailers(Option<http::HeaderMap>);

    impl http_body::Body for Trailers {
        type Data = &'static [u8];
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<&'static [u8]>, Self::Error>>> {
            Poll::Ready(self.0.take().map(|t| Ok(http_body::Frame::trailers(t))))
        }
    }

    async fn drain<B: http_body::Body + Unpin>(mut body: B) {
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            assert!(frame.is_ok());
        }
    }

    fn status_headers(code: i32) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-status", code.into());
        headers
    }

    fn request(path: &str, traceparent: Option<&str>) -> http::Request<()> {
        let mut req = http::Request::builder().uri(format!("http://localhost{path}"));
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp).header("tracestate", "vendor=abc");
        }
        req.body(()).unwrap()
    }

    fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
        span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
    }

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const CALLER: &str = "00f067aa0ba902b7";

    /// What `BROWSERPOOL_LOG=asked` lets through of a raw CDP message chromiumoxide logs and
    /// of one of our own debug lines.
    fn logged(asked: &str) -> String {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(log_filter(Some(asked)).unwrap())
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "chromiumoxide::conn::raw_ws::parse_errors", "raw {{\"cookie\":\"session=SECRET\"}}");
            tracing::trace!(target: "chromiumoxide::conn", "Received SECRET");
            tracing::debug!(target: "browserpool_server::sessions", "our own line");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        out
    }

    #[test]
    fn debug_logs_never_carry_raw_cdp_messages_unless_asked_by_name() {
        for asked in ["debug", "trace", "info,browserpool_server=trace", "chromiumoxide=trace"] {
            let out = logged(asked);
            assert!(!out.contains("SECRET"), "{asked}: {out}");
        }
        assert!(logged("debug").contains("our own line"));
        assert!(logged("debug,chromiumoxide::conn=trace").contains("SECRET"), "named, it is shown");
    }

    #[tokio::test]
    async fn an_rpc_span_continues_the_callers_trace_and_parents_its_actions() {
        let (collect, _guard) = traced();
        let injected = Arc::new(Mutex::new(http::HeaderMap::new()));
        let seen = injected.clone();
        let handler = tower::service_fn(move |_req: http::Request<()>| {
            // The auth layer names the tenant in its (synchronous) call.
            record_tenant("acme");
            let seen = seen.clone();
            async move {
                record_session("s-1");
                let action = action_span("acme", "s-1", "navigate");
                tracing::Instrument::instrument(async {}, action.clone()).await;
                record_outcome(&action, None);
                drop(action);
                let failed = action_span("acme", "s-1", "unknown");
                record_outcome(&failed, Some("UnknownAction"));
                drop(failed);
                // A forward made on behalf of this call, under a span that is logged but not
                // exported: it names the RPC span as the parent.
                let mut headers = http::HeaderMap::new();
                headers.insert("traceparent", format!("00-{TRACE}-{CALLER}-01").parse().unwrap());
                tracing::info_span!("drive").in_scope(|| inject_traceparent(&mut headers));
                *seen.lock().unwrap() = headers;
                Ok::<_, std::convert::Infallible>(http::Response::new(Trailers(Some(status_headers(0)))))
            }
        });
        let service = TraceLayer::new("replica-1").layer(handler);
        let response =
            service.oneshot(request("/browserpool.v1.Sessions/Act", Some(&format!("00-{TRACE}-{CALLER}-01")))).await;
        drain(response.unwrap().into_body()).await;

        let spans = collect.0.lock().unwrap().clone();
        let rpc = spans.iter().find(|s| s.name == "browserpool.v1.Sessions/Act").expect("rpc span");
        assert_eq!(rpc.span_context.trace_id(), TraceId::from_hex(TRACE).unwrap());
        assert_eq!(rpc.parent_span_id, SpanId::from_hex(CALLER).unwrap());
        assert!(rpc.parent_span_is_remote);
        assert_eq!(rpc.span_kind, SpanKind::Server);
        assert_eq!(rpc.span_context.trace_state().header(), "vendor=abc");
        for (key, value) in [
            ("rpc.system", Value::from("grpc")),
            ("rpc.service", Value::from("browserpool.v1.Sessions")),
            ("rpc.method", Value::from("Act")),
            ("rpc.grpc.status_code", Value::I64(0)),
            ("browserpool.replica", Value::from("replica-1")),
            ("browserpool.tenant", Value::from("acme")),
            ("browserpool.session", Value::from("s-1")),
        ] {
            assert_eq!(attr(rpc, key), Some(&value), "{key}");
        }
        assert_eq!(rpc.status, Status::Unset);

        let navigate = spans.iter().find(|s| s.name == "navigate").expect("action span");
        assert_eq!(navigate.parent_span_id, rpc.span_context.span_id());
        assert_eq!(navigate.span_context.trace_id(), rpc.span_context.trace_id());
        assert_eq!(attr(navigate, "browserpool.action"), Some(&Value::from("navigate")));
        assert_eq!(attr(navigate, "browserpool.outcome"), Some(&Value::from("ok")));
        assert_eq!(attr(navigate, "browserpool.code"), None);
        let failed = spans.iter().find(|s| s.name == "unknown").expect("failed action span");
        assert_eq!(failed.parent_span_id, rpc.span_context.span_id());
        assert_eq!(attr(failed, "browserpool.outcome"), Some(&Value::from("error")));
        assert_eq!(attr(failed, "browserpool.code"), Some(&Value::from("UnknownAction")));
        assert!(matches!(failed.status, Status::Error { .. }));

        let headers = injected.lock().unwrap();
        let expected = format!("00-{TRACE}-{}-01", rpc.span_context.span_id());
        assert_eq!(headers.get("traceparent").unwrap(), expected.as_str());
        assert_eq!(headers.get("tracestate").unwrap(), "vendor=abc");
    }

    #[tokio::test]
    async fn status_comes_from_headers_or_trailers_and_a_dropped_body_is_cancelled() {
        let (collect, _guard) = traced();
        let respond = |headers: http::HeaderMap, trailers: Option<http::HeaderMap>| {
            tower::service_fn(move |_req: http::Request<()>| {
                let mut response = http::Response::new(Trailers(trailers.clone()));
                *response.headers_mut() = headers.clone();
                std::future::ready(Ok::<_, std::convert::Infallible>(response))
            })
        };
        // Trailers-only: an error of a unary call (the server's fault: the span is an error).
        let only = TraceLayer::new("r").layer(respond(status_headers(14), None));
        drain(only.oneshot(request("/browserpool.v1.Admin/Drain", None)).await.unwrap().into_body()).await;
        // The status in the trailers, a client's fault: the span's status stays unset.
        let trailers = TraceLayer::new("r").layer(respond(http::HeaderMap::new(), Some(status_headers(5))));
        drain(trailers.oneshot(request("/browserpool.v1.Sessions/Get", None)).await.unwrap().into_body()).await;
        // The client went away before the end; a path that is no gRPC method names nothing.
        let dropped = TraceLayer::new("r").layer(respond(http::HeaderMap::new(), Some(status_headers(0))));
        drop(dropped.oneshot(request("/not-a-method", None)).await.unwrap());

        let spans = collect.0.lock().unwrap().clone();
        let by_name = |name: &str| spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name}: {spans:?}"));
        let drain = by_name("browserpool.v1.Admin/Drain");
        assert_eq!(attr(drain, "rpc.grpc.status_code"), Some(&Value::I64(14)));
        assert!(matches!(drain.status, Status::Error { .. }));
        // No traceparent: a trace of its own.
        assert_eq!(drain.parent_span_id, SpanId::INVALID);
        let get = by_name("browserpool.v1.Sessions/Get");
        assert_eq!(attr(get, "rpc.grpc.status_code"), Some(&Value::I64(5)));
        assert_eq!(get.status, Status::Unset);
        let unknown = by_name("unknown");
        assert_eq!(attr(unknown, "rpc.method"), Some(&Value::from("unknown")));
        assert_eq!(attr(unknown, "rpc.grpc.status_code"), Some(&Value::I64(1)));
    }

    #[tokio::test]
    async fn with_traces_off_a_forward_keeps_the_callers_traceparent() {
        // The log layer as `init` installs it, and no OpenTelemetry layer.
        let subscriber = tracing_subscriber::registry().with(log_layer(LogFormat::Text).unwrap());
        let _guard = tracing::subscriber::set_default(subscriber);
        let handler = tower::service_fn(|_req: http::Request<()>| async {
            let mut headers = http::HeaderMap::new();
            headers.insert("traceparent", format!("00-{TRACE}-{CALLER}-01").parse().unwrap());
            inject_traceparent(&mut headers);
            assert_eq!(headers.get("traceparent").unwrap(), format!("00-{TRACE}-{CALLER}-01").as_str());
            Ok::<_, std::convert::Infallible>(http::Response::new(Trailers(None)))
        });
        let response = TraceLayer::new("r").layer(handler).oneshot(request("/browserpool.v1.Sessions/Act", None)).await;
        // (Whether the span is disabled is not asserted: callsite interest is process-wide, and
        // the other tests' subscribers, on threads of their own, enable it meanwhile.)
        drain(response.unwrap().into_body()).await;
    }
}
