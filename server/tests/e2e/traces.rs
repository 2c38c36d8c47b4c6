//! Traces: the real binary with `--otlp-endpoint` pointing at an OTLP/gRPC receiver run by the
//! test, calls that carry a W3C `traceparent`, and the spans that reach the receiver.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use browserpool_client::{action, pb, Client};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
use tokio_stream::wrappers::TcpListenerStream;

use crate::helpers::{fixture_site, ok, BinaryServer};

/// The caller's trace and span, as its `traceparent` names them.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/gRPC trace receiver on 127.0.0.1:0 keeping every export; stops when dropped.
struct Collector {
    endpoint: String,
    exports: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

#[derive(Clone)]
struct Receiver(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let exports = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = TraceServiceServer::new(Receiver(exports.clone()));
        tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming_shutdown(
            TcpListenerStream::new(listener),
            async move {
                let _ = stopped.await;
            },
        ));
        Collector { endpoint, exports, _stop: stop }
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Span> {
        let exports = self.exports.lock().unwrap();
        exports
            .iter()
            .flat_map(|e| &e.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }

    /// Every attribute of every resource received so far.
    fn resource_attributes(&self) -> Vec<KeyValue> {
        let exports = self.exports.lock().unwrap();
        exports
            .iter()
            .flat_map(|e| &e.resource_spans)
            .filter_map(|r| r.resource.as_ref())
            .flat_map(|r| r.attributes.clone())
            .collect()
    }

    /// Waits (at most 30 s: the exporter sends a batch every 5 s) until a span named `name`
    /// has arrived, and returns every span by then.
    async fn wait_for(&self, name: &str) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if spans.iter().any(|s| s.name == name) {
                return spans;
            }
            assert!(Instant::now() < deadline, "no span {name} within 30 s; got {:?}", names(&spans));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}

/// An attribute's value as text (strings as they are, integers in decimal).
fn value(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key == key).map(value)
}

/// The one span named `name`.
fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one span {name}; got {:?}", names(spans));
    found[0]
}

/// `message` with the caller's `traceparent` (sampled).
fn traced<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01").parse().unwrap());
    request
}

fn act_request(session_id: &str, a: pb::Action) -> tonic::Request<pb::ActRequest> {
    traced(pb::ActRequest { session_id: session_id.into(), action: Some(a) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_continue_the_callers_trace_and_never_carry_payloads_or_tokens() {
    let collector = Collector::start().await;
    let site = fixture_site().await;
    let mut server = BinaryServer::spawn_with(&["--otlp-endpoint", &collector.endpoint]).await;
    let client = server.client().await;
    let token = server.token.clone();
    let mut sessions = client.sessions();

    let session = sessions.acquire(traced(pb::AcquireRequest { wait_ms: 30_000, ..Default::default() })).await;
    let id = session.unwrap().into_inner().session_id;
    // What must never reach a span: a URL's query, a script, a client's own action name.
    let url = format!("{site}/?q=secret-query");
    let navigated = sessions.act(act_request(&id, action("navigate", "", url))).await.unwrap().into_inner();
    ok(&navigated);
    let evaluated = action("evaluate", "", "'secret-script-' + document.title");
    let evaluated = sessions.act(act_request(&id, evaluated)).await.unwrap().into_inner();
    assert_eq!(ok(&evaluated), serde_json::json!("secret-script-Greeter"));
    let unknown = sessions.act(act_request(&id, action("frobnicate-secret", "", serde_json::Value::Null))).await;
    assert!(!unknown.unwrap().into_inner().ok);
    // A call the auth layer refuses is traced too.
    let stranger = Client::connect(format!("http://{}", server.grpc), "not-a-token").await.unwrap();
    let refused = stranger.sessions().get(traced(pb::GetSessionRequest { session_id: id.clone() })).await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::Unauthenticated);

    // Exported while the server runs (a batch every 5 s).
    let spans = collector.wait_for("browserpool.v1.Sessions/Get").await;
    let act_rpcs: Vec<_> = spans.iter().filter(|s| s.name == "browserpool.v1.Sessions/Act").collect();
    assert_eq!(act_rpcs.len(), 3, "{:?}", names(&spans));
    for rpc in spans.iter().filter(|s| s.name.starts_with("browserpool.v1.")) {
        // The caller's trace goes on: its span is the parent of every RPC span.
        assert_eq!(hex(&rpc.trace_id), TRACE_ID, "{}", rpc.name);
        assert_eq!(hex(&rpc.parent_span_id), CALLER_SPAN, "{}", rpc.name);
        assert_eq!(rpc.kind, SpanKind::Server as i32, "{}", rpc.name);
        assert_eq!(attr(rpc, "rpc.system").as_deref(), Some("grpc"));
        assert_eq!(attr(rpc, "rpc.service").as_deref(), Some("browserpool.v1.Sessions"));
        assert!(attr(rpc, "browserpool.replica").is_some_and(|r| !r.is_empty()), "{}", rpc.name);
    }
    let acquire = one(&spans, "browserpool.v1.Sessions/Acquire");
    assert_eq!(attr(acquire, "rpc.method").as_deref(), Some("Acquire"));
    assert_eq!(attr(acquire, "rpc.grpc.status_code").as_deref(), Some("0"));
    assert_eq!(attr(acquire, "browserpool.tenant").as_deref(), Some("default"));
    assert_eq!(attr(acquire, "browserpool.session").as_deref(), Some(id.as_str()));
    let refused = one(&spans, "browserpool.v1.Sessions/Get");
    assert_eq!(attr(refused, "rpc.grpc.status_code"), Some((tonic::Code::Unauthenticated as i32).to_string()));
    assert_eq!(attr(refused, "browserpool.tenant"), None, "a refused token names no tenant");

    // One action span under each Act span, named by its canonical action.
    let children = |rpc: &Span| -> Vec<Span> {
        spans.iter().filter(|s| s.parent_span_id == rpc.span_id).cloned().collect::<Vec<_>>()
    };
    let mut actions = Vec::new();
    for rpc in &act_rpcs {
        assert_eq!(attr(rpc, "rpc.method").as_deref(), Some("Act"));
        assert_eq!(attr(rpc, "rpc.grpc.status_code").as_deref(), Some("0"));
        assert_eq!(attr(rpc, "browserpool.tenant").as_deref(), Some("default"));
        assert_eq!(attr(rpc, "browserpool.session").as_deref(), Some(id.as_str()));
        let under = children(rpc);
        assert_eq!(under.len(), 1, "one action span under {}: {:?}", hex(&rpc.span_id), names(&under));
        assert_eq!(under[0].trace_id, rpc.trace_id);
        actions.push(under[0].clone());
    }
    let by_action = |name: &str| actions.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("action {name}"));
    for (name, outcome, code) in
        [("navigate", "ok", None), ("evaluate", "ok", None), ("unknown", "error", Some("UnknownAction"))]
    {
        let span = by_action(name);
        assert_eq!(attr(span, "browserpool.action").as_deref(), Some(name));
        assert_eq!(attr(span, "browserpool.outcome").as_deref(), Some(outcome), "{name}");
        assert_eq!(attr(span, "browserpool.code").as_deref(), code, "{name}");
        assert_eq!(attr(span, "browserpool.tenant").as_deref(), Some("default"));
        assert_eq!(attr(span, "browserpool.session").as_deref(), Some(id.as_str()));
    }

    // Released just before SIGTERM: its span is flushed at shutdown, not lost.
    sessions.release(traced(pb::ReleaseRequest { session_id: id.clone(), failed: false })).await.unwrap();
    let status = tokio::task::spawn_blocking(move || server.terminate().0).await.unwrap();
    assert!(status.success(), "server exit: {status}");
    let spans = collector.wait_for("browserpool.v1.Sessions/Release").await;
    let release = one(&spans, "browserpool.v1.Sessions/Release");
    assert_eq!(hex(&release.parent_span_id), CALLER_SPAN);
    assert_eq!(attr(release, "browserpool.session").as_deref(), Some(id.as_str()));

    let resource = collector.resource_attributes();
    let resource_attr = |key: &str| resource.iter().find(|kv| kv.key == key).map(value);
    assert_eq!(resource_attr("service.name").as_deref(), Some("browserpool"));
    assert_eq!(resource_attr("service.version").as_deref(), Some(browserpool_server::VERSION));
    assert_eq!(resource_attr("vcs.ref.head.revision").as_deref(), Some(browserpool_server::REVISION));

    // Names, ids and codes only: no token, URL query, script or client-chosen name anywhere.
    let everything: Vec<String> = spans
        .iter()
        .flat_map(|s| s.attributes.iter().map(value).chain([s.name.clone()]))
        .chain(resource.iter().map(value))
        .collect();
    for text in &everything {
        for secret in ["secret-query", "secret-script", "frobnicate", "not-a-token", "eyJ", token.as_str()] {
            assert!(!text.contains(secret), "{secret:?} in an exported span: {text:?}");
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
