//! The data plane's metrics, recorded once where the pipeline learns each
//! fact and read as Prometheus text on the admin listener or pushed over
//! OTLP (see `gw_telemetry`). Labels are low-cardinality only: routes,
//! statuses, reasons, models and channels from the catalogue, never request
//! ids, tokens or keys. Counters are summed by the data plane itself
//! (`Sums`) and read at collection time; histograms go to the SDK as
//! they are measured, through handles bound to their label set once per
//! thread (`Bound`), so a request's measurements hash no attributes.

use std::{
    cell::{OnceCell, RefCell},
    collections::HashMap,
    sync::{
        Arc, LazyLock, OnceLock, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use opentelemetry::{
    KeyValue,
    metrics::{BoundHistogram, Gauge, Histogram},
};

use super::{
    Seen, labels,
    sums::{self, Attr, Sums},
};

/// Seconds: from a millisecond to ten minutes, for durations of calls that
/// may be long generations.
const SECONDS: &[f64] =
    &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];
/// Seconds, finer: the gateway's own share of a request.
const OVERHEAD: &[f64] = &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];
/// Tokens per request, as the GenAI conventions suggest (powers of 4).
const TOKENS: &[f64] =
    &[1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262_144.0, 1_048_576.0, 4_194_304.0];

struct Instruments {
    duration: Histogram<f64>,
    ttft: Histogram<f64>,
    tokens: Histogram<u64>,
    overhead: Histogram<f64>,
    spool_records: Gauge<u64>,
    spool_segments: Gauge<u64>,
    spool_writable: Gauge<u64>,
}

/// The counters' sums, read by the observable counters `INSTRUMENTS`
/// registers. Apart from it, so that a collection running a callback while
/// `INSTRUMENTS` is still being built never waits on it.
struct Counters {
    requests: Sums,
    cost: Sums,
    attempts: Sums,
    failovers: Sums,
    unbilled: Sums,
}

/// What the gauges `observe` registers read at collection time; the
/// pipeline's shared state gives it, so metrics never reach into it.
pub trait Observed: Send + Sync + 'static {
    /// Revision of the policy snapshot in use (0: none yet).
    fn revision(&self) -> u64;
    /// Calls `each` with every channel's id and its upstream failures in a row.
    fn channel_failures(&self, each: &mut dyn FnMut(&str, u32));
    /// Calls `each` with every channel's id and whether it is cooling down.
    fn channel_cooling(&self, each: &mut dyn FnMut(&str, bool));
}

static COUNTERS: LazyLock<Counters> = LazyLock::new(|| Counters {
    requests: Sums::new(&["http.route", "http.response.status_code", "gw.reason"]),
    cost: Sums::new(&["gen_ai.operation.name", "gen_ai.request.model", "gw.channel"]),
    attempts: Sums::new(&["gw.channel", "gw.outcome"]),
    failovers: Sums::new(&["gw.channel"]),
    unbilled: Sums::new(&["gw.channel"]),
});

static INSTRUMENTS: LazyLock<Instruments> = LazyLock::new(|| {
    let meter = gw_telemetry::meter("gw-data-plane");
    let counter = |name: &'static str, description: &'static str, sums: fn(&Counters) -> &Sums| {
        // The handle may go: the callback stays registered with the meter.
        let _counter = meter
            .u64_observable_counter(name)
            .with_description(description)
            .with_callback(move |observer| sums(&COUNTERS).observe(observer))
            .build();
    };
    counter("gw.requests", "Requests answered, by route, status and refusal reason", |i| &i.requests);
    counter("gw.cost.micro_usd", "What requests cost, in micro-USD", |i| &i.cost);
    counter("gw.upstream.attempts", "Upstream attempts, by channel and outcome", |i| &i.attempts);
    counter(
        "gw.upstream.failovers",
        "Attempts that failed and were followed by another, by the channel that failed",
        |i| &i.failovers,
    );
    counter(
        "gw.realtime.unbilled_responses",
        "Realtime responses whose usage never came (the upstream went away, or a cancel was not answered in time)",
        |i| &i.unbilled,
    );
    Instruments {
        duration: meter
            .f64_histogram("gen_ai.server.request.duration")
            .with_unit("s")
            .with_description("Time from a request's arrival to the end of its answer")
            .with_boundaries(SECONDS.to_vec())
            .build(),
        ttft: meter
            .f64_histogram("gen_ai.server.time_to_first_token")
            .with_unit("s")
            .with_description("Time from a streamed request's arrival to its first answer chunk")
            .with_boundaries(SECONDS.to_vec())
            .build(),
        tokens: meter
            .u64_histogram("gen_ai.client.token.usage")
            .with_unit("{token}")
            .with_description("Tokens per request, by token type (input or output)")
            .with_boundaries(TOKENS.to_vec())
            .build(),
        overhead: meter
            .f64_histogram("gw.overhead")
            .with_unit("s")
            .with_description("The gateway's own time from a request's arrival to its first upstream attempt")
            .with_boundaries(OVERHEAD.to_vec())
            .build(),
        spool_records: meter
            .u64_gauge("gw.spool.backlog.records")
            .with_description("Usage records spooled and not yet acknowledged by the control plane")
            .build(),
        spool_segments: meter
            .u64_gauge("gw.spool.backlog.segments")
            .with_description("Spool segments kept until the control plane acknowledges them")
            .build(),
        spool_writable: meter
            .u64_gauge("gw.spool.writable")
            .with_description("1 while usage records can be written to the spool; 0 refuses spending requests")
            .build(),
    }
});

/// The counters' sums, once their observable counters are registered.
fn counters() -> &'static Counters {
    LazyLock::force(&INSTRUMENTS);
    &COUNTERS
}

/// One answered request (`reason`: the refusal's, empty when none).
pub fn request(route: &str, status: u16, reason: &'static str) {
    let reason = if reason.is_empty() { "none" } else { reason };
    counters().requests.add(&[Attr::Str(route), Attr::Int(i64::from(status)), Attr::Str(reason)], 1);
}

/// A metered request's tokens, cost, duration and time to first token.
pub(super) fn usage(seen: &Seen<'_>) {
    let instruments = &*INSTRUMENTS;
    let operation = super::operation_of(seen);
    let cost = u64::try_from(seen.cost_micros).unwrap_or(0);
    counters().cost.add(&[Attr::Str(operation), Attr::Str(seen.model), Attr::Str(seen.channel)], cost);
    with_bound(operation, seen, |bound| {
        if let Some(first) = seen.answer.first_output {
            let ttft = first.saturating_duration_since(seen.started).as_secs_f64();
            bound.histogram(&bound.ttft, &instruments.ttft, None).record(ttft);
        }
        let class = status_class(seen.status);
        let duration = &bound.duration[class];
        let attr = KeyValue::new("gw.status_class", STATUS_CLASSES[class]);
        bound.histogram(duration, &instruments.duration, Some(attr)).record(seen.started.elapsed().as_secs_f64());
        let input = KeyValue::new("gen_ai.token.type", "input");
        let prompt = u64::try_from(seen.usage.prompt_tokens).unwrap_or(0);
        bound.histogram(&bound.input, &instruments.tokens, Some(input)).record(prompt);
        let output = KeyValue::new("gen_ai.token.type", "output");
        let completion = u64::try_from(seen.usage.completion_tokens).unwrap_or(0);
        bound.histogram(&bound.output, &instruments.tokens, Some(output)).record(completion);
    });
}

/// Label sets a thread keeps bound; past them, a new set is bound for one
/// request and let go. Far above the catalogue's models times channels.
const MAX_BOUND: usize = 4096;

/// The histograms of one label set (operation, model, channel), each bound
/// on its first measurement: a bound series is exported from then on, so
/// one bound early would show as an empty series.
struct Bound {
    labels: Vec<KeyValue>,
    ttft: OnceCell<BoundHistogram<f64>>,
    input: OnceCell<BoundHistogram<u64>>,
    output: OnceCell<BoundHistogram<u64>>,
    /// By status class (`STATUS_CLASSES`).
    duration: [OnceCell<BoundHistogram<f64>>; STATUS_CLASSES.len()],
}

thread_local! {
    /// This thread's bound label sets, by `sums::encode`d key.
    static BOUND: RefCell<HashMap<Box<[u8]>, Bound, foldhash::fast::RandomState>> = RefCell::default();
    static KEY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the bound histograms of `seen`'s label set (`operation` is
/// `seen`'s).
fn with_bound(operation: &'static str, seen: &Seen<'_>, f: impl FnOnce(&Bound)) {
    let values = [Attr::Str(operation), Attr::Str(seen.model), Attr::Str(seen.channel)];
    KEY.with_borrow_mut(|key| {
        key.clear();
        sums::encode(&values, key);
        BOUND.with_borrow_mut(|bound| {
            if let Some(found) = bound.get(key.as_slice()) {
                return f(found);
            }
            let fresh = Bound::new(labels(seen));
            if bound.len() >= MAX_BOUND {
                return f(&fresh);
            }
            f(bound.entry(key.as_slice().into()).or_insert(fresh));
        });
    });
}

// === impl Bound ===

impl Bound {
    fn new(labels: Vec<KeyValue>) -> Bound {
        Bound {
            labels,
            ttft: OnceCell::new(),
            input: OnceCell::new(),
            output: OnceCell::new(),
            duration: Default::default(),
        }
    }

    /// `histogram` bound in `cell` to the label set plus `extra`.
    fn histogram<'a, T>(
        &self,
        cell: &'a OnceCell<BoundHistogram<T>>,
        histogram: &Histogram<T>,
        extra: Option<KeyValue>,
    ) -> &'a BoundHistogram<T> {
        cell.get_or_init(|| {
            let mut attrs = self.labels.clone();
            attrs.extend(extra);
            histogram.bind(&attrs)
        })
    }
}

/// An upstream attempt on `channel` ended with `outcome` (`ok` or the
/// error's reason); `failover` when another attempt follows.
pub fn attempt(channel: &str, outcome: &'static str, failover: bool) {
    counters().attempts.add(&[Attr::Str(channel), Attr::Str(outcome)], 1);
    if failover {
        counters().failovers.add(&[Attr::Str(channel)], 1);
    }
}

/// A realtime response on `channel` that ended without its usage, so
/// nothing was billed for it.
pub fn realtime_unbilled(channel: &str) {
    counters().unbilled.add(&[Attr::Str(channel)], 1);
}

/// The gateway's own time from a request's arrival to its first upstream attempt.
pub fn overhead(elapsed: Duration, endpoint: &str) {
    /// By operation (`OPERATIONS`), each bound on its first measurement.
    static BOUND: [OnceLock<BoundHistogram<f64>>; OPERATIONS.len()] = [const { OnceLock::new() }; OPERATIONS.len()];
    let operation = super::operation(endpoint).unwrap_or("other");
    let index = OPERATIONS.iter().position(|o| *o == operation).unwrap_or(OPERATIONS.len() - 1);
    let bound = BOUND[index]
        .get_or_init(|| INSTRUMENTS.overhead.bind(&[KeyValue::new("gen_ai.operation.name", OPERATIONS[index])]));
    bound.record(elapsed.as_secs_f64());
}

/// Every `gen_ai.operation.name` `operation` gives, `other` last.
const OPERATIONS: [&str; 5] = ["chat", "text_completion", "embeddings", "generate_content", "other"];

/// Whether the spool can be written (set when that changes).
pub fn spool_writable(writable: bool) {
    INSTRUMENTS.spool_writable.record(u64::from(writable), &[]);
}

/// The reporter's backlog: records not yet acknowledged, segments kept.
pub fn spool_backlog(records: usize, segments: usize) {
    INSTRUMENTS.spool_records.record(u64::try_from(records).unwrap_or(u64::MAX), &[]);
    INSTRUMENTS.spool_segments.record(u64::try_from(segments).unwrap_or(u64::MAX), &[]);
}

/// Registers the gauges read from `observed` at collection time: the
/// snapshot's revision and each channel's health. They stop reporting once
/// the data plane is gone.
pub fn observe<O: Observed>(observed: &Arc<O>) {
    let meter = gw_telemetry::meter("gw-data-plane");
    let weak: Weak<O> = Arc::downgrade(observed);
    let _revision = meter
        .u64_observable_gauge("gw.snapshot.revision")
        .with_description("Revision of the policy snapshot in use (0: none yet)")
        .with_callback({
            let weak = weak.clone();
            move |observer| {
                if let Some(observed) = weak.upgrade() {
                    observer.observe(observed.revision(), &[]);
                }
            }
        })
        .build();
    let _channels = meter
        .u64_observable_gauge("gw.channel.consecutive_failures")
        .with_description("Upstream failures in a row per channel (0: healthy)")
        .with_callback({
            let weak = weak.clone();
            move |observer| {
                if let Some(observed) = weak.upgrade() {
                    observed.channel_failures(&mut |channel, failures| {
                        observer.observe(u64::from(failures), &[KeyValue::new("gw.channel", channel.to_owned())]);
                    });
                }
            }
        })
        .build();
    let _cooling = meter
        .u64_observable_gauge("gw.channel.cooling")
        .with_description("1 while a channel cools down after an upstream 429 or repeated failures")
        .with_callback(move |observer| {
            if let Some(observed) = weak.upgrade() {
                observed.channel_cooling(&mut |channel, cooling| {
                    observer.observe(u64::from(cooling), &[KeyValue::new("gw.channel", channel.to_owned())]);
                });
            }
        })
        .build();
}

/// Registers the gauge of client connections open on each worker, read
/// from `open` (by worker index) at collection time while the data plane
/// that counts them lives.
pub fn connections(open: &Arc<[AtomicUsize]>) {
    let weak = Arc::downgrade(open);
    let _connections = gw_telemetry::meter("gw-data-plane")
        .u64_observable_gauge("gw.connections.open")
        .with_description("Client connections open, by the worker serving them")
        .with_callback(move |observer| {
            if let Some(open) = weak.upgrade() {
                for (worker, count) in open.iter().enumerate() {
                    let count = u64::try_from(count.load(Ordering::Relaxed)).unwrap_or(u64::MAX);
                    observer.observe(count, &[KeyValue::new("gw.worker", i64::try_from(worker).unwrap_or(i64::MAX))]);
                }
            }
        })
        .build();
}

/// `gw.status_class` values, as `status_class` indexes them.
const STATUS_CLASSES: [&str; 5] = ["2xx", "4xx", "client_closed", "5xx", "other"];

/// The index in `STATUS_CLASSES` of `status`'s class.
fn status_class(status: u16) -> usize {
    match status {
        200..=299 => 0,
        400..=498 => 1,
        499 => 2,
        500..=599 => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::{pricing::Usage, telemetry::Answer};

    fn seen<'a>(model: &'a str, status: u16, answer: &'a Answer) -> Seen<'a> {
        Seen {
            endpoint: "/v1/chat/completions",
            model,
            channel: "bound-channel",
            usage: Usage { prompt_tokens: 12, completion_tokens: 3, ..Usage::default() },
            cost_micros: 5,
            estimated: false,
            status,
            started: Instant::now(),
            answer,
        }
    }

    /// The Prometheus samples of `family` whose labels include `labels`.
    fn samples(text: &str, family: &str, labels: &[&str]) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")) && labels.iter().all(|label| l.contains(label)))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn bound_histograms_count_each_label_set_apart_and_show_no_empty_series() {
        let plain = Answer::default();
        let streamed = Answer { first_output: Some(Instant::now()), ..Answer::default() };
        for _ in 0..3 {
            usage(&seen("bound-a", 200, &plain));
        }
        usage(&seen("bound-a", 502, &plain));
        usage(&seen("bound-b", 200, &streamed));
        // Another thread binds its own handles to the same series.
        std::thread::spawn(|| usage(&seen("bound-a", 200, &Answer::default()))).join().expect("thread");

        let text = gw_telemetry::prometheus_text();
        let a = r#"gen_ai_request_model="bound-a""#;
        let b = r#"gen_ai_request_model="bound-b""#;
        let count = "gen_ai_server_request_duration_seconds_count";
        assert_eq!(samples(&text, count, &[a, r#"gw_status_class="2xx""#]).len(), 1, "{text}");
        assert!(samples(&text, count, &[a, r#"gw_status_class="2xx""#])[0].ends_with(" 4"), "{text}");
        assert!(samples(&text, count, &[a, r#"gw_status_class="5xx""#])[0].ends_with(" 1"), "{text}");
        assert!(samples(&text, count, &[a, r#"gw_status_class="4xx""#]).is_empty(), "{text}");
        let tokens = "gen_ai_client_token_usage_sum";
        assert!(samples(&text, tokens, &[a, r#"gen_ai_token_type="input""#])[0].ends_with(" 60"), "{text}");
        assert!(samples(&text, tokens, &[a, r#"gen_ai_token_type="output""#])[0].ends_with(" 15"), "{text}");
        let ttft = "gen_ai_server_time_to_first_token_seconds_count";
        assert!(samples(&text, ttft, &[a]).is_empty(), "a series bound before its first measurement:\n{text}");
        assert!(samples(&text, ttft, &[b, r#"gen_ai_operation_name="chat""#])[0].ends_with(" 1"), "{text}");
    }
}
