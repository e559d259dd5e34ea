//! What the control plane tells OpenTelemetry: a server span per gRPC call
//! (continuing the caller's `traceparent`, so a data plane's request and
//! the control-plane work it caused are one trace), and the metrics of
//! watch streams, fleet revisions, the usage ledger and video tasks. Labels stay
//! low-cardinality: no node ids, tokens or request ids.

use std::sync::LazyLock;

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Histogram},
};

use crate::{
    domain::{UsageOutcome, VideoStatus},
    services::fleet::Fleet,
};

struct Instruments {
    ledger_records: Counter<u64>,
    ledger_lag: Histogram<f64>,
    video_tasks: Counter<u64>,
    node_refused: Counter<u64>,
}

static INSTRUMENTS: LazyLock<Instruments> = LazyLock::new(|| {
    let meter = gw_telemetry::meter("gw-control-plane");
    Instruments {
        ledger_records: meter
            .u64_counter("gw.ledger.records")
            .with_description("Usage records the ledger handled, by outcome (applied, duplicate, refused)")
            .build(),
        ledger_lag: meter
            .f64_histogram("gw.ledger.lag")
            .with_unit("s")
            .with_description("Time from a request's end on a data plane to its usage being applied")
            .with_boundaries(vec![0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0])
            .build(),
        video_tasks: meter
            .u64_counter("gw.video.tasks")
            .with_description("Video tasks entering each status (queued, in_progress, completed, failed)")
            .build(),
        node_refused: meter
            .u64_counter("gw.node.refused")
            .with_description("Data-plane calls refused, by call and reason (impostor, no_watch)")
            .build(),
    }
});

/// The span of one gRPC call (`request`'s path names the method).
pub fn rpc_span(request: &http::Request<()>) -> tracing::Span {
    let path = request.uri().path();
    if !gw_telemetry::tracing_enabled() {
        return tracing::info_span!("rpc", path);
    }
    let (service, method) = path.trim_start_matches('/').split_once('/').unwrap_or((path, ""));
    let span = tracing::info_span!(
        "rpc",
        otel.name = path.trim_start_matches('/'),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
    );
    gw_telemetry::continue_from(&span, request.headers());
    span
}

/// A batch of usage reports was applied: `outcome`, and how old each
/// record was (`created_at`, Unix seconds) at `now`.
pub fn ledger_applied(outcome: &UsageOutcome, created_at: impl Iterator<Item = i64>, now: i64) {
    let instruments = &*INSTRUMENTS;
    for (name, n) in [("applied", outcome.applied), ("duplicate", outcome.duplicates), ("refused", outcome.refused)] {
        if n > 0 {
            instruments.ledger_records.add(u64::from(n), &[KeyValue::new("gw.outcome", name)]);
        }
    }
    for created in created_at {
        #[allow(clippy::cast_precision_loss)] // seconds of lag fit an f64 exactly
        instruments.ledger_lag.record(now.saturating_sub(created).max(0) as f64, &[]);
    }
}

/// A data plane's `call` (watch, usage, health) was refused for `reason`:
/// `impostor` (it named another node than it is) or `no_watch` (it came
/// over a connection with no watch stream).
pub fn node_refused(call: &str, reason: &'static str) {
    let labels = [KeyValue::new("gw.call", call.to_owned()), KeyValue::new("gw.reason", reason)];
    INSTRUMENTS.node_refused.add(1, &labels);
}

/// A video task entered `status` (created queued, or changed by this replica).
pub fn video_status(status: VideoStatus) {
    INSTRUMENTS.video_tasks.add(1, &[KeyValue::new("gw.status", status.as_str())]);
}

/// Registers the gauges read from `fleet` at collection time (open watch
/// streams, and how far the furthest-behind connected data plane is from
/// the newest revision this replica sent) and exports the data-plane
/// refusal counts at zero.
pub fn observe(fleet: &Fleet) {
    // Every refusal series from the start, at zero, so that an alert on it
    // has a series to read before the first refusal.
    for call in ["watch", "usage", "health"] {
        for reason in ["impostor", "no_watch"] {
            let labels = [KeyValue::new("gw.call", call), KeyValue::new("gw.reason", reason)];
            INSTRUMENTS.node_refused.add(0, &labels);
        }
    }
    let meter = gw_telemetry::meter("gw-control-plane");
    let streams = fleet.clone();
    let _streams = meter
        .u64_observable_gauge("gw.watch.streams")
        .with_description("Policy watch streams open on this replica")
        .with_callback(move |observer| observer.observe(u64::try_from(streams.connected_count()).unwrap_or(0), &[]))
        .build();
    let lagging = fleet.clone();
    let _lag = meter
        .u64_observable_gauge("gw.fleet.revision_lag")
        .with_description("Revisions between the newest sent and the oldest acknowledged by a connected data plane")
        .with_callback(move |observer| {
            let nodes = lagging.list();
            let connected = nodes.iter().filter(|n| n.connected);
            let newest = connected.clone().map(|n| n.sent_revision).max().unwrap_or(0);
            let oldest = connected.map(|n| n.acked_revision).min().unwrap_or(newest);
            observer.observe(newest.saturating_sub(oldest), &[]);
        })
        .build();
}
