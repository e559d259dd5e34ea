//! Metrics: one process-wide meter provider whose instruments are read two
//! ways, as Prometheus text (`prometheus_text`, served on the admin
//! listener) and, when a collector is configured, pushed over OTLP every
//! `metric_interval`. Whichever of `install` and `meter` runs first sets
//! the provider up; later calls reuse it.

use std::sync::OnceLock;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use prometheus::{Encoder as _, TextEncoder};

use crate::{
    InitError,
    config::{OtelConfig, Protocol},
};

struct Metrics {
    provider: SdkMeterProvider,
    registry: prometheus::Registry,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Sets up the meter provider: Prometheus always, OTLP when `config` has
/// an endpoint. Returns the provider (for `shutdown`), or `None` when one
/// was already set up (it stays as it was).
pub(crate) fn install(config: &OtelConfig, service: &str) -> Result<Option<SdkMeterProvider>, InitError> {
    if METRICS.get().is_some() {
        return Ok(None);
    }
    let metrics = build(config, service)?;
    let provider = metrics.provider.clone();
    Ok(METRICS.set(metrics).is_ok().then_some(provider))
}

fn build(config: &OtelConfig, service: &str) -> Result<Metrics, InitError> {
    let registry = prometheus::Registry::new();
    let prometheus = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .scope_info_enabled(false)
        .build()
        .map_err(|e| InitError::Exporter(e.to_string()))?;
    let mut builder =
        SdkMeterProvider::builder().with_resource(crate::trace::resource(config, service)).with_reader(prometheus);
    if let Some(endpoint) = config.endpoint.as_deref() {
        use opentelemetry_otlp::{MetricExporter, WithExportConfig as _};
        let exporter = match config.protocol {
            Protocol::Grpc => {
                MetricExporter::builder().with_tonic().with_endpoint(endpoint).with_timeout(config.timeout).build()
            }
            Protocol::HttpProtobuf => MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(format!("{endpoint}/v1/metrics"))
                .with_timeout(config.timeout)
                .build(),
        }
        .map_err(|e| InitError::Exporter(e.to_string()))?;
        builder = builder.with_reader(PeriodicReader::builder(exporter).with_interval(config.metric_interval).build());
    }
    Ok(Metrics { provider: builder.build(), registry })
}

fn metrics() -> &'static Metrics {
    METRICS.get_or_init(|| {
        build(&OtelConfig::default(), "gateway").unwrap_or_else(|error| {
            // The Prometheus reader alone cannot fail to build; should it,
            // instruments still work, unread.
            tracing::warn!(%error, "metrics unavailable");
            Metrics { provider: SdkMeterProvider::builder().build(), registry: prometheus::Registry::new() }
        })
    })
}

/// The meter of instrumentation scope `scope`, from the process's provider
/// (set up with Prometheus only, if nothing set it up before).
pub fn meter(scope: &'static str) -> Meter {
    metrics().provider.meter(scope)
}

/// Every metric of the process in the Prometheus text format.
pub fn prometheus_text() -> String {
    let families = metrics().registry.gather();
    let mut out = Vec::new();
    if let Err(error) = TextEncoder::new().encode(&families, &mut out) {
        tracing::warn!(%error, "encoding metrics failed");
    }
    String::from_utf8_lossy(&out).into_owned()
}
