//! How the gateway's binaries log, trace and count, written once for all of
//! them. Logs: one line per event on standard error, either plain text
//! (colour only when stderr is a terminal, so files and journald get no
//! escape codes) or one JSON object per line with the span fields (the
//! request id on every line of a request); the level comes from `RUST_LOG`,
//! `info` by default. Traces and metrics: OpenTelemetry, configured by the
//! standard `OTEL_*` variables (`config`), exported over OTLP (`trace`,
//! `metrics`) and, for metrics, also as Prometheus text on an admin
//! listener (`admin`).

use std::{io::IsTerminal as _, str::FromStr, time::Duration};

use opentelemetry_sdk::{metrics::SdkMeterProvider, trace::SdkTracerProvider};
use tracing_subscriber::{
    EnvFilter, Layer as _, filter::Targets, layer::SubscriberExt as _, util::SubscriberInitExt as _,
};

pub mod access;
pub mod admin;
mod clock;
mod config;
mod lines;
mod metrics;
mod text;
mod trace;

pub use config::{ConfigError, OtelConfig, ParentRoot, Protocol, Sampler};
pub use metrics::{meter, prometheus_text};
pub use trace::{context_headers, continue_from, enabled as tracing_enabled, extract, inject};

/// The shape of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

// === impl LogFormat ===

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" | "" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("log format must be text or json, not {other:?}")),
        }
    }
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("building the OTLP exporter: {0}")]
    Exporter(String),
    #[error("starting the log writer thread")]
    LogWriter(#[source] std::io::Error),
}

/// What `init` set up; `shutdown` flushes what is still queued.
#[must_use = "dropping it skips the final flush of spans and metrics"]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
    /// Writes the queued log lines when dropped.
    logs: Option<lines::Flusher<std::io::Stderr>>,
}

/// Installs the global subscriber: log lines in `format`, plus, when
/// `otel` has an endpoint, spans exported over OTLP as `service` (unless
/// `OTEL_SERVICE_NAME` names it otherwise); and sets up the metrics (see
/// `metrics`). Needs a Tokio runtime when exporting over gRPC. Fails only
/// if an exporter or the log writer's thread cannot be built. A subscriber
/// set already (a test, or an embedding process) is kept.
pub fn init(format: LogFormat, otel: &OtelConfig, service: &'static str) -> Result<Telemetry, InitError> {
    let meters = metrics::install(otel, service)?;
    let tracer = match otel.endpoint {
        Some(_) => Some(trace::provider(otel, trace::resource(otel, service))?),
        None => None,
    };
    // Lines go to stderr from a thread of their own, in batches (`lines`),
    // so a request never waits on the terminal or the journal.
    let (writer, flusher) = lines::spawn(std::io::stderr()).map_err(InitError::LogWriter)?;
    let plain = format == LogFormat::Text && !std::io::stderr().is_terminal();
    let direct = writer.clone();
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer).with_timer(clock::CachedTime);
    let fmt = match format {
        LogFormat::Text if !plain => fmt.boxed(),
        LogFormat::Text => fmt.with_ansi(false).fmt_fields(text::PlainFields).event_format(text::PlainText).boxed(),
        LogFormat::Json => fmt.json().with_current_span(true).with_span_list(false).boxed(),
    };
    let registry = tracing_subscriber::registry();
    let installed = match (&tracer, log_filter(&std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or_default())) {
        // Log lines alone: their filter is the whole subscriber's, so what
        // it turns away is never built and entering a span costs no
        // per-layer bookkeeping. Plain lines so filtered are all an
        // access line becomes: written directly (`access`).
        (None, LogFilter::Targets(filter)) => {
            let installed = registry.with(fmt).with(filter).try_init();
            if installed.is_ok() && plain {
                access::install(direct);
            }
            installed
        }
        (None, LogFilter::Env(filter)) => registry.with(fmt).with(filter).try_init(),
        // Spans reach OpenTelemetry whatever the log level.
        (Some(provider), LogFilter::Targets(filter)) => {
            registry.with(fmt.with_filter(filter)).with(trace::layer(provider, service)).try_init()
        }
        (Some(provider), LogFilter::Env(filter)) => {
            registry.with(fmt.with_filter(filter)).with(trace::layer(provider, service)).try_init()
        }
    }
    .is_ok();
    Ok(Telemetry { tracer, meters, logs: installed.then_some(flusher) })
}

/// Which log lines are written, as `RUST_LOG` says (`info` when it is
/// unset, empty or invalid).
#[allow(clippy::large_enum_variant)] // one, made once
enum LogFilter {
    /// Levels by target, the usual directives: nothing to do when a span
    /// is entered or left.
    Targets(Targets),
    /// Directives that name spans or fields, which only `EnvFilter` reads:
    /// it looks each span up as it is entered and left.
    Env(EnvFilter),
}

/// The filter `directives` (`RUST_LOG`'s value) describe.
fn log_filter(directives: &str) -> LogFilter {
    let directives = if directives.trim().is_empty() { "info" } else { directives };
    match directives.parse::<Targets>() {
        Ok(targets) => LogFilter::Targets(targets),
        Err(_) => LogFilter::Env(EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("info"))),
    }
}

// === impl Telemetry ===

impl Telemetry {
    /// Exports what is still queued (within a few seconds) and stops the
    /// exporters. Blocks: call it off the async runtime's threads.
    pub fn shutdown(self) {
        if let Some(tracer) = self.tracer {
            let _ = tracer.force_flush();
            let _ = tracer.shutdown_with_timeout(Duration::from_secs(5));
        }
        if let Some(meters) = self.meters {
            let _ = meters.shutdown_with_timeout(Duration::from_secs(5));
        }
        // Last: what the flushes above logged is written too.
        drop(self.logs);
    }
}

/// Installs the global subscriber for `format`. Does nothing if one is set
/// already (a test, or an embedding process), which is then kept.
pub fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn log_directives_by_target_need_no_span_lookups_and_others_still_work() {
        use tracing::Level;
        let targets = |directives: &str| match log_filter(directives) {
            LogFilter::Targets(targets) => targets,
            LogFilter::Env(_) => panic!("{directives:?} read as EnvFilter"),
        };
        for unset in ["", "  "] {
            assert!(targets(unset).would_enable("gw_data_plane::access", &Level::INFO));
            assert!(!targets(unset).would_enable("gw_data_plane::access", &Level::DEBUG));
        }
        let mixed = targets("warn,gw_data_plane=debug");
        assert!(mixed.would_enable("gw_data_plane::pipeline", &Level::DEBUG));
        assert!(!mixed.would_enable("hyper", &Level::INFO));
        assert!(mixed.would_enable("hyper", &Level::WARN));
        // A directive on a span's fields is EnvFilter's alone.
        assert!(matches!(log_filter("gw_data_plane[request{request_id=\"x\"}]=debug"), LogFilter::Env(_)));
    }

    #[test]
    fn formats_parse_by_name() {
        assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
        assert_eq!("TEXT".parse::<LogFormat>().unwrap(), LogFormat::Text);
        assert!("xml".parse::<LogFormat>().is_err());
    }
}
