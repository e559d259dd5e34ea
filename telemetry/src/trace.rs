//! Traces: the tracer provider that batches spans to an OTLP collector on
//! its own thread (a slow or absent collector fills a bounded queue whose
//! overflow is dropped; requests never wait for it), the `tracing` layer
//! that turns the gateway's designed spans into OpenTelemetry spans, and
//! W3C trace-context propagation in and out of HTTP and gRPC headers.
//!
//! Only spans that declare an `otel.kind` field are exported (the planes
//! mark the spans they mean to be traces); events at WARN and above become
//! span events.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::{
    Context, KeyValue,
    propagation::{Extractor, Injector, TextMapPropagator as _},
    trace::TracerProvider as _,
};
use opentelemetry_sdk::{
    Resource,
    propagation::TraceContextPropagator,
    trace::{BatchConfigBuilder, BatchSpanProcessor, Sampler as SdkSampler, SdkTracerProvider},
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::{Layer, filter::filter_fn, registry::LookupSpan};

use crate::{
    InitError,
    config::{OtelConfig, ParentRoot, Protocol, Sampler},
};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: when not, instrumentation skips all work
/// beyond the plain `tracing` span.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The tracer provider for `config` (whose endpoint must be set).
pub(crate) fn provider(config: &OtelConfig, resource: Resource) -> Result<SdkTracerProvider, InitError> {
    let endpoint = config.endpoint.as_deref().unwrap_or_default();
    use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
    let exporter = match config.protocol {
        Protocol::Grpc => {
            SpanExporter::builder().with_tonic().with_endpoint(endpoint).with_timeout(config.timeout).build()
        }
        Protocol::HttpProtobuf => SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .with_timeout(config.timeout)
            .build(),
    }
    .map_err(|e| InitError::Exporter(e.to_string()))?;
    // The default queue (2048 spans) drops what a stalled collector cannot take.
    let batch = BatchConfigBuilder::default().with_scheduled_delay(config.batch_delay).build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).with_batch_config(batch).build())
        .with_sampler(sampler(config.sampler))
        .with_resource(resource)
        .build())
}

fn sampler(sampler: Sampler) -> SdkSampler {
    match sampler {
        Sampler::AlwaysOn => SdkSampler::AlwaysOn,
        Sampler::AlwaysOff => SdkSampler::AlwaysOff,
        Sampler::Ratio(r) => SdkSampler::TraceIdRatioBased(r),
        Sampler::ParentBased(root) => SdkSampler::ParentBased(Box::new(match root {
            ParentRoot::AlwaysOn => SdkSampler::AlwaysOn,
            ParentRoot::AlwaysOff => SdkSampler::AlwaysOff,
            ParentRoot::Ratio(r) => SdkSampler::TraceIdRatioBased(r),
        })),
    }
}

/// The `tracing` layer exporting through `provider`'s tracer named `scope`;
/// marks tracing as enabled.
pub(crate) fn layer<S>(provider: &SdkTracerProvider, scope: &'static str) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    ENABLED.store(true, Ordering::Relaxed);
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(scope))
        .with_location(false)
        .with_target(false)
        .with_level(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(filter_fn(|meta| {
            if meta.is_span() {
                meta.fields().field("otel.kind").is_some()
            } else {
                *meta.level() <= tracing::Level::WARN
            }
        }))
}

/// `resource` attributes: `service.name` and the configured extras.
pub(crate) fn resource(config: &OtelConfig, service: &str) -> Resource {
    let name = config.service_name.clone().unwrap_or_else(|| service.to_owned());
    Resource::builder_empty()
        .with_service_name(name)
        .with_attributes(config.resource.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())))
        .build()
}

/// The trace context a caller sent in `headers` (`traceparent`,
/// `tracestate`); empty when there is none or tracing is off.
pub fn extract(headers: &http::HeaderMap) -> Context {
    if !enabled() || !headers.contains_key("traceparent") {
        return Context::new();
    }
    TraceContextPropagator::new().extract(&HeaderCarrier(headers))
}

/// Makes `span` a child of the caller's trace in `headers`, if one came.
pub fn continue_from(span: &tracing::Span, headers: &http::HeaderMap) {
    if enabled() && headers.contains_key("traceparent") {
        let _ = span.set_parent(extract(headers));
    }
}

/// Writes `span`'s trace context into `headers` so the next hop continues
/// the trace; does nothing when tracing is off.
pub fn inject(span: &tracing::Span, headers: &mut http::HeaderMap) {
    if enabled() {
        TraceContextPropagator::new().inject_context(&span.context(), &mut HeaderCarrierMut(headers));
    }
}

/// `span`'s trace context as header name and value pairs (for gRPC
/// metadata); empty when tracing is off.
pub fn context_headers(span: &tracing::Span) -> Vec<(&'static str, String)> {
    let mut headers = http::HeaderMap::new();
    inject(span, &mut headers);
    ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|name| Some((name, headers.get(name)?.to_str().ok()?.to_owned())))
        .collect()
}

struct HeaderCarrier<'a>(&'a http::HeaderMap);

struct HeaderCarrierMut<'a>(&'a mut http::HeaderMap);

// === impl HeaderCarrier ===

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

// === impl HeaderCarrierMut ===

impl Injector for HeaderCarrierMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (http::HeaderName::try_from(key), http::HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}
