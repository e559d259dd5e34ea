//! A real OTLP receiver for the telemetry suite: a tonic server speaking
//! the collector's trace and metrics services (the `opentelemetry-proto`
//! messages), or the same messages as HTTP/protobuf (`POST /v1/traces`,
//! `/v1/metrics`), keeping every span and metric name it was sent so tests
//! can assert the span trees the gateway exports.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use anyhow::Context as _;
use opentelemetry_proto::tonic::{
    collector::{
        metrics::v1::{
            ExportMetricsServiceRequest, ExportMetricsServiceResponse,
            metrics_service_server::{MetricsService, MetricsServiceServer},
        },
        trace::v1::{
            ExportTraceServiceRequest, ExportTraceServiceResponse,
            trace_service_server::{TraceService, TraceServiceServer},
        },
    },
    common::v1::{AnyValue, KeyValue, any_value},
    trace::v1::{span::SpanKind, status::StatusCode},
};
use serde_json::{Map, Value};
use tokio::net::TcpListener;

/// One span as received, ids in lower-case hex.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the resource that sent it.
    pub service: String,
    /// All attributes of that resource.
    pub resource: Map<String, Value>,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// `server`, `client`, `internal`, …
    pub kind: &'static str,
    pub attributes: Map<String, Value>,
    /// Whether the span's status is an error.
    pub error: bool,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

/// A running receiver; stops with the runtime that started it.
#[derive(Clone)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    store: Arc<Received>,
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<ReceivedSpan>>,
    metrics: Mutex<BTreeSet<String>>,
}

struct Traces(Arc<Received>);

struct Metrics(Arc<Received>);

// === impl OtlpReceiver ===

impl OtlpReceiver {
    /// Listens on a free loopback port.
    pub async fn start() -> anyhow::Result<OtlpReceiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the OTLP receiver")?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Received::default());
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Traces(store.clone())))
            .add_service(MetricsServiceServer::new(Metrics(store.clone())))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        tokio::spawn(server);
        Ok(OtlpReceiver { addr, store })
    }

    /// Listens for OTLP over HTTP/protobuf on a free loopback port.
    pub async fn start_http() -> anyhow::Result<OtlpReceiver> {
        use axum::{body::Bytes, extract::State, http::StatusCode, routing::post};
        use prost::Message as _;
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the OTLP receiver")?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Received::default());
        let traces = |State(store): State<Arc<Received>>, body: Bytes| async move {
            let Ok(request) = ExportTraceServiceRequest::decode(body) else { return StatusCode::BAD_REQUEST };
            store.traces(request);
            StatusCode::OK
        };
        let metrics = |State(store): State<Arc<Received>>, body: Bytes| async move {
            let Ok(request) = ExportMetricsServiceRequest::decode(body) else { return StatusCode::BAD_REQUEST };
            store.metrics(request);
            StatusCode::OK
        };
        let router = axum::Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(store.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(OtlpReceiver { addr, store })
    }

    /// `http://127.0.0.1:port`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received of trace `trace_id` (hex), in arrival order.
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        let spans = self.store.spans.lock().unwrap_or_else(PoisonError::into_inner);
        spans.iter().filter(|s| s.trace_id == trace_id).cloned().collect()
    }

    /// Names of every metric received so far.
    pub fn metric_names(&self) -> BTreeSet<String> {
        self.store.metrics.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

// === impl Received ===

impl Received {
    fn traces(&self, request: ExportTraceServiceRequest) {
        let mut received = Vec::new();
        for resource in request.resource_spans {
            let resource_attributes = resource.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
            let service =
                resource_attributes.get("service.name").and_then(Value::as_str).unwrap_or_default().to_owned();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                received.push(ReceivedSpan {
                    service: service.clone(),
                    resource: resource_attributes.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    kind: match SpanKind::try_from(span.kind) {
                        Ok(SpanKind::Server) => "server",
                        Ok(SpanKind::Client) => "client",
                        Ok(SpanKind::Internal) => "internal",
                        Ok(SpanKind::Producer) => "producer",
                        Ok(SpanKind::Consumer) => "consumer",
                        _ => "unspecified",
                    },
                    attributes: attributes(&span.attributes),
                    error: span.status.is_some_and(|s| s.code == StatusCode::Error as i32),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                });
            }
        }
        self.spans.lock().unwrap_or_else(PoisonError::into_inner).extend(received);
    }

    fn metrics(&self, request: ExportMetricsServiceRequest) {
        let metrics = request.resource_metrics.into_iter().flat_map(|r| r.scope_metrics).flat_map(|s| s.metrics);
        self.metrics.lock().unwrap_or_else(PoisonError::into_inner).extend(metrics.map(|m| m.name));
    }
}

// === impl Traces ===

#[tonic::async_trait]
impl TraceService for Traces {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.traces(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

// === impl Metrics ===

#[tonic::async_trait]
impl MetricsService for Metrics {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.metrics(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse { partial_success: None }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(list: &[KeyValue]) -> Map<String, Value> {
    list.iter().map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Value::Null, value))).collect()
}

fn value(any: &AnyValue) -> Value {
    match &any.value {
        Some(any_value::Value::StringValue(s)) => Value::from(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::from(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => Value::from(*d),
        Some(any_value::Value::ArrayValue(array)) => Value::Array(array.values.iter().map(value).collect()),
        Some(other) => Value::from(format!("{other:?}")),
        None => Value::Null,
    }
}
