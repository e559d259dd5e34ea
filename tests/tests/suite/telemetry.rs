//! Telemetry end to end: the gateway exports its traces and metrics to a
//! real OTLP receiver (gRPC) and serves Prometheus text that `promtool`
//! accepts. Both planes run in this process, so one receiver gets the spans
//! of both. Each request carries its own W3C `traceparent`, so each test
//! finds its own trace among everything the shared receiver got.

use crate::support;

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher as _, Hasher as _},
    sync::OnceLock,
    time::Duration,
};

use gw_telemetry::{LogFormat, OtelConfig};
use gw_tests::{
    harness::{binary, eventually, free_port},
    mock::upstream::{MockUpstream, Script},
    otlp::{OtlpReceiver, ReceivedSpan},
};
use serde_json::{Value, json};
use support::{Gateway, MODEL, Reply};

/// Text of the prompt: it must never reach a span.
const PROMPT: &str = "the quiet prompt 7f3a9";

static OTLP: OnceLock<OtlpReceiver> = OnceLock::new();

/// The receiver, and this process's telemetry exporting to it, set up once
/// on a runtime of its own (each test has its own runtime; the exporters
/// must outlive them). Call before starting a cluster, whose log set-up
/// would otherwise take the global subscriber.
fn otlp() -> &'static OtlpReceiver {
    OTLP.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let receiver = OtlpReceiver::start().await.expect("OTLP receiver");
                let mut config = OtelConfig::grpc(receiver.endpoint());
                config.service_name = Some("gw-e2e".into());
                config.batch_delay = Duration::from_millis(50);
                config.metric_interval = Duration::from_millis(300);
                let telemetry = gw_telemetry::init(LogFormat::Text, &config, "gw-e2e").expect("telemetry");
                tx.send(receiver).expect("test thread waiting");
                std::future::pending::<()>().await;
                drop(telemetry);
            });
        });
        rx.recv().expect("OTLP receiver started")
    })
}

/// A fresh `traceparent` (sampled) and its trace id and parent span id.
fn traceparent() -> (String, String, String) {
    let random = || {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(0);
        hasher.finish()
    };
    let trace_id = format!("{:016x}{:016x}", random(), random());
    let parent = format!("{:016x}", random());
    (format!("00-{trace_id}-{parent}-01"), trace_id, parent)
}

/// POSTs `body` to `/v1/chat/completions` with `key` and `traceparent`.
async fn post(gw: &Gateway, key: &str, traceparent: &str, body: &Value) -> Reply {
    let url = format!("http://{}/v1/chat/completions", gw.cluster.data_planes[0].addr);
    let response = gw
        .cluster
        .http()
        .post(url)
        .bearer_auth(key)
        .header("traceparent", traceparent)
        .json(body)
        .send()
        .await
        .expect("request to the data plane");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Reply { status, headers, text: response.text().await.unwrap_or_default() }
}

fn chat(stream: bool) -> Value {
    json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": stream,
        "max_tokens": 64,
        "temperature": 0.25,
    })
}

/// The spans of `trace_id` once its `/v1` server span (and `also` spans
/// more besides it) arrived.
async fn trace(trace_id: &str, also: usize) -> (ReceivedSpan, Vec<ReceivedSpan>) {
    let receiver = otlp();
    eventually(&format!("trace {trace_id}"), Duration::from_secs(20), || async {
        let spans = receiver.trace(trace_id);
        let server = spans.iter().find(|s| s.kind == "server" && s.attributes.contains_key("http.route"))?.clone();
        let others: Vec<ReceivedSpan> = spans.iter().filter(|s| s.span_id != server.span_id).cloned().collect();
        (others.len() >= also).then_some((server, others))
    })
    .await
}

/// The upstream attempt spans among `spans`, children of `server`, in order.
fn attempts<'a>(server: &ReceivedSpan, spans: &'a [ReceivedSpan]) -> Vec<&'a ReceivedSpan> {
    let mut attempts: Vec<_> =
        spans.iter().filter(|s| s.kind == "client" && s.parent_span_id == server.span_id).collect();
    attempts.sort_by_key(|s| s.attributes["gw.attempt"].as_i64());
    attempts
}

fn assert_no_prompt(spans: &[&ReceivedSpan]) {
    for span in spans {
        let text = serde_json::to_string(&span.attributes).expect("json");
        assert!(!text.contains(PROMPT), "prompt text on span {}: {text}", span.name);
        assert!(!text.contains("reply from"), "completion text on span {}: {text}", span.name);
    }
}

/// Asserts the server span of a request of `gw` answered by `channel`, and
/// that no span of its trace carries prompt or answer text.
fn assert_answered(gw: &Gateway, server: &ReceivedSpan, spans: &[ReceivedSpan], channel: &str) {
    let a = &server.attributes;
    assert_eq!(server.name, format!("chat {MODEL}"));
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], MODEL);
    assert_eq!(a["gen_ai.response.model"], MODEL);
    assert_eq!(a["gen_ai.request.max_tokens"], 64);
    assert_eq!(a["gen_ai.request.temperature"], 0.25);
    assert_eq!(a["gen_ai.usage.input_tokens"], 12, "{a:?}");
    assert_eq!(a["gen_ai.usage.output_tokens"], 5, "{a:?}");
    assert_eq!(a["gw.usage.estimated"], false);
    assert!(a["gw.cost_micros"].as_i64().is_some_and(|c| c > 0), "{a:?}");
    assert_eq!(a["gw.token.id"], gw.token.as_str());
    assert_eq!(a["gw.account.id"], gw.account.as_str());
    assert_eq!(a["gw.group"], "default");
    assert_eq!(a["gw.channel.id"], channel);
    assert_eq!(a["http.response.status_code"], 200);
    assert_eq!(a["http.route"], "/v1/chat/completions");
    assert!(!server.error);
    let mut all: Vec<&ReceivedSpan> = spans.iter().collect();
    all.push(server);
    assert_no_prompt(&all);
}

async fn upstream(who: &str) -> MockUpstream {
    let mock = MockUpstream::start().await.expect("mock upstream");
    mock.set_script(Script {
        reply: format!("reply from {who} ok"),
        prompt_tokens: 12,
        completion_tokens: 5,
        ..Script::default()
    });
    mock
}

#[tokio::test]
async fn a_plain_chat_is_one_server_span_continuing_the_callers_trace_with_an_attempt_and_a_control_plane_child() {
    otlp();
    let gw = Gateway::start(1).await;
    let mock = upstream("a").await;
    let channel = gw.channel("a", &mock.base_url(), 0, &[]).await;
    gw.synced().await;

    let (header, trace_id, caller_span) = traceparent();
    let reply = post(&gw, &gw.key, &header, &chat(false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    // The attempt, and the control plane's answer to the spending lease
    // the token's first request asked for.
    let (server, spans) = trace(&trace_id, 2).await;
    assert_eq!(server.parent_span_id, caller_span, "the caller's span is the parent");
    let lease = spans.iter().find(|s| s.name == "gateway.v1.PolicyService/AcquireSpend").expect("control-plane span");
    assert_eq!((lease.kind, lease.parent_span_id.as_str()), ("server", server.span_id.as_str()));
    assert_eq!(lease.attributes["rpc.system"], "grpc");
    assert_eq!(server.attributes["gw.request_id"], reply.request_id());
    assert_eq!(server.attributes["gw.attempts"], 1);
    assert_answered(&gw, &server, &spans, &channel);
    assert_eq!(server.attributes["gen_ai.response.finish_reasons"], json!(["stop"]));
    let cost = server.attributes["gw.cost_micros"].as_i64().expect("cost");
    let header = reply.header("x-gateway-cost-usd").expect("the cost header of a whole answer");
    assert_eq!(header, format!("{}.{:06}", cost / 1_000_000, cost % 1_000_000));
    let attempts = attempts(&server, &spans);
    assert_eq!(attempts.len(), 1, "{spans:#?}");
    let attempt = attempts[0];
    assert_eq!(attempt.attributes["gw.channel.id"], channel.as_str());
    assert_eq!(attempt.attributes["gen_ai.provider.name"], "openai");
    assert!(attempt.start_unix_nano >= server.start_unix_nano && attempt.end_unix_nano <= server.end_unix_nano);

    // The upstream continues the trace from the attempt's span.
    let sent = mock.last_request().expect("upstream request");
    let upstream_parent = sent.header("traceparent").expect("traceparent to the upstream");
    assert_eq!(upstream_parent, format!("00-{trace_id}-{}-01", attempt.span_id));
}

#[tokio::test]
async fn a_streamed_chat_span_lasts_to_the_end_of_the_stream_and_carries_its_usage() {
    otlp();
    let gw = Gateway::start(1).await;
    let mock = upstream("a").await;
    mock.set_script(Script {
        reply: "one two three four five".into(),
        prompt_tokens: 12,
        completion_tokens: 5,
        chunk_delay: Duration::from_millis(30),
        ..Script::default()
    });
    let channel = gw.channel("a", &mock.base_url(), 0, &[]).await;
    gw.synced().await;

    let (header, trace_id, caller_span) = traceparent();
    let reply = post(&gw, &gw.key, &header, &chat(true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (server, spans) = trace(&trace_id, 1).await;
    assert_eq!(server.parent_span_id, caller_span);
    assert_answered(&gw, &server, &spans, &channel);
    assert_eq!(server.attributes["gw.stream"], true);
    assert_eq!(server.attributes["gen_ai.response.finish_reasons"], json!(["stop"]), "read from the stream");
    assert!(reply.header("x-gateway-cost-usd").is_none(), "a stream's cost is not known at its headers");
    let attempts = attempts(&server, &spans);
    assert_eq!(attempts.len(), 1, "{spans:#?}");
    // Four gaps of 30 ms between chunks: the server span covers the stream,
    // the attempt only the wait for the upstream's headers.
    assert!(server.end_unix_nano - server.start_unix_nano >= 100_000_000, "{server:?}");
    assert!(server.end_unix_nano > attempts[0].end_unix_nano);
    let ttft = server.attributes["gw.time_to_first_token_s"].as_f64().expect("time to first token");
    assert!(ttft > 0.0 && ttft < 1.0, "{ttft}");
}

#[tokio::test]
async fn a_failover_is_two_attempt_spans_under_one_server_span() {
    otlp();
    let gw = Gateway::start(1).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    gw.channel("a", &a.base_url(), 10, &[]).await;
    let b_id = gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;
    a.fail_next(502, 1);

    let (header, trace_id, _) = traceparent();
    let reply = post(&gw, &gw.key, &header, &chat(false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (server, spans) = trace(&trace_id, 2).await;
    assert_answered(&gw, &server, &spans, &b_id);
    assert_eq!(server.attributes["gw.attempts"], 2);
    let attempts = attempts(&server, &spans);
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    assert!(attempts[0].error, "the failed attempt is an error");
    assert_eq!(attempts[0].attributes["error.type"], "upstream_status");
    assert_eq!(attempts[0].attributes["http.response.status_code"], 502);
    assert_eq!(attempts[1].attributes["gw.channel.id"], b_id.as_str());
    assert!(!attempts[1].error);
}

#[tokio::test]
async fn a_refusal_is_a_server_span_with_its_reason_and_no_attempt() {
    otlp();
    let gw = Gateway::start(1).await;
    let mock = upstream("a").await;
    gw.channel("a", &mock.base_url(), 0, &[]).await;
    gw.synced().await;

    let (header, trace_id, _) = traceparent();
    let reply = post(&gw, "sk-not-a-key-of-this-gateway", &header, &chat(false)).await;
    assert_eq!(reply.status, 401, "{}", reply.text);
    let (server, spans) = trace(&trace_id, 0).await;
    assert_eq!(server.attributes["gw.refusal.reason"], "invalid_token");
    assert_eq!(server.attributes["http.response.status_code"], 401);
    assert_eq!(server.attributes["gen_ai.operation.name"], "chat");
    assert!(!server.error, "a client's mistake is no server error");
    assert!(attempts(&server, &spans).is_empty());
    assert!(reply.header("x-gateway-cost-usd").is_none());
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn metrics_reach_the_collector_and_the_admin_listener_passes_promtool() {
    otlp();
    let gw = Gateway::start(1).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    gw.channel("a", &a.base_url(), 10, &[]).await;
    gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;
    a.fail_next(502, 1);
    assert_eq!(gw.chat(0, false).await.status, 200);
    assert_eq!(gw.chat(0, true).await.status, 200);
    assert_eq!(gw.post(0, "/v1/chat/completions", Some("sk-wrong"), &chat(false)).await.status, 401);

    let admin = gw.cluster.data_planes[0].admin_addr.expect("admin listener");
    let url = format!("http://{admin}/metrics");
    // The ledger's metrics appear once the usage was reported.
    let text = eventually("usage and ledger metrics in /metrics", Duration::from_secs(10), || async {
        let text = gw.cluster.http().get(&url).send().await.ok()?.text().await.ok()?;
        (text.contains("gen_ai_client_token_usage") && text.contains("gw_ledger_records_total")).then_some(text)
    })
    .await;
    for name in [
        "gw_requests_total",
        "gen_ai_server_request_duration_seconds_bucket",
        "gen_ai_server_time_to_first_token_seconds_bucket",
        "gw_upstream_attempts_total",
        "gw_upstream_failovers_total",
        "gw_overhead_seconds_bucket",
        "gw_snapshot_revision",
        "gw_connections_open",
        "gw_cost_micro_usd_total",
        "gw_watch_streams",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    assert!(text.contains(r#"gw_reason="invalid_token""#), "{text}");
    for forbidden in [gw.key.as_str(), gw.token.as_str(), gw.account.as_str()] {
        assert!(!text.contains(forbidden), "an id or key in a label:\n{text}");
    }
    promtool(&["check", "metrics"], Some(&text));

    // What operators are given to watch names only metrics the gateway has.
    let families: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/observability");
    for file in ["grafana-dashboard.json", "alerts.yml"] {
        let source = std::fs::read_to_string(format!("{deploy}/{file}")).expect("deploy file");
        for name in metric_names(&source) {
            assert!(families.contains(&name.as_str()), "{file} uses {name}, which the gateway does not export");
        }
    }

    let receiver = otlp();
    eventually("metrics over OTLP", Duration::from_secs(10), || async {
        let names = receiver.metric_names();
        (names.contains("gen_ai.client.token.usage") && names.contains("gen_ai.server.request.duration")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_data_plane_binary_exports_over_otlp_http_as_its_otel_variables_say() {
    let receiver = OtlpReceiver::start_http().await.expect("OTLP/HTTP receiver");
    let dir = tempfile::tempdir().expect("temp dir");
    let addr = format!("127.0.0.1:{}", free_port());
    // No control plane: a refusal needs none.
    let _child = tokio::process::Command::new(binary("gw-data-plane"))
        .args(["--listen", &addr, "--control-plane", &format!("http://127.0.0.1:{}", free_port())])
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--node-key", "node-key-for-the-telemetry-test"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_SERVICE_NAME", "edge-7")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=e2e,team=gw")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("gw-data-plane starts");

    let (header, trace_id, caller_span) = traceparent();
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/chat/completions");
    eventually("the data plane to answer", Duration::from_secs(10), || async {
        let response = client.post(&url).header("traceparent", &header).json(&chat(false)).send().await.ok()?;
        (response.status() == 401).then_some(())
    })
    .await;
    let server = eventually("the span over OTLP/HTTP", Duration::from_secs(10), || async {
        receiver.trace(&trace_id).into_iter().find(|s| s.kind == "server")
    })
    .await;
    assert_eq!(server.service, "edge-7");
    assert_eq!(server.resource["deployment.environment"], "e2e");
    assert_eq!(server.resource["team"], "gw");
    assert_eq!(server.parent_span_id, caller_span);
    assert_eq!(server.attributes["gw.refusal.reason"], "missing_token");
}

/// `gwctl up` is the whole product on one node: its planes export spans as
/// the `OTEL_*` variables say and its admin listener serves /metrics.
#[tokio::test]
async fn gwctl_up_exports_over_otlp_and_serves_metrics() {
    let receiver = OtlpReceiver::start_http().await.expect("OTLP/HTTP receiver");
    let dir = tempfile::tempdir().expect("temp dir");
    let port = || format!("127.0.0.1:{}", free_port());
    let (api, metrics) = (port(), port());
    let _child = tokio::process::Command::new(binary("gwctl"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["up", "--listen", &api, "--control-plane-listen", &port(), "--admin-listen", &metrics])
        .args(["--console-listen", &port()])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_SERVICE_NAME", "single-node")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env_remove("GW_ENDPOINT")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("gwctl up starts");

    let (header, trace_id, _) = traceparent();
    let client = reqwest::Client::new();
    let url = format!("http://{api}/v1/chat/completions");
    eventually("gwctl up to answer", Duration::from_secs(20), || async {
        let response = client.post(&url).header("traceparent", &header).json(&chat(false)).send().await.ok()?;
        (response.status() == 401).then_some(())
    })
    .await;
    let server = eventually("the span over OTLP/HTTP", Duration::from_secs(10), || async {
        receiver.trace(&trace_id).into_iter().find(|s| s.kind == "server")
    })
    .await;
    assert_eq!(server.service, "single-node");
    let text =
        client.get(format!("http://{metrics}/metrics")).send().await.expect("metrics").text().await.expect("body");
    assert!(text.contains("# TYPE"), "{text}");
}

#[test]
fn the_alert_rules_and_the_prometheus_example_pass_promtool() {
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/observability");
    promtool(&["check", "rules", &format!("{deploy}/alerts.yml")], None);
    promtool(&["check", "config", &format!("{deploy}/prometheus.yml")], None);
}

#[test]
fn the_dashboard_is_grafana_json_whose_panels_all_query_prometheus() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/observability/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("JSON");
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = std::collections::BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().expect("panel title");
        assert!(ids.insert(panel["id"].as_u64().expect("panel id")), "duplicate id on {title}");
        assert_eq!(panel["datasource"]["type"], "prometheus", "{title}");
        for key in ["h", "w", "x", "y"] {
            assert!(panel["gridPos"][key].is_u64(), "{title}: gridPos.{key}");
        }
        let targets = panel["targets"].as_array().filter(|t| !t.is_empty()).expect("targets");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            assert_eq!(expr.matches('(').count(), expr.matches(')').count(), "{title}: {expr}");
            assert!(!metric_names(expr).is_empty(), "{title}: {expr} names no gateway metric");
        }
    }
    let wanted = ["Tokens", "Cost", "Time to first token", "Errors", "revision", "spool"];
    for word in wanted {
        assert!(panels.iter().any(|p| p["title"].as_str().is_some_and(|t| t.contains(word))), "no {word} panel");
    }
}

/// The gateway metric families `text` names (`gw_*`, `gen_ai_*`), with a
/// histogram's `_bucket`, `_sum` and `_count` series named by their family.
/// Label names are skipped: whatever is inside `{…}` (matchers, legend
/// templates) and the lists of `by (…)` and `without (…)`.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    let mut braces = 0usize;
    while let Some(c) = rest.chars().next() {
        let word_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if word_len == 0 {
            match c {
                '{' => braces += 1,
                '}' => braces = braces.saturating_sub(1),
                _ => {}
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let (word, after) = rest.split_at(word_len);
        rest = after;
        if braces > 0 {
            continue;
        }
        if matches!(word, "by" | "without") && rest.trim_start().starts_with('(') {
            rest = rest.split_once(')').map_or("", |(_, r)| r);
        } else if word.starts_with("gw_") || word.starts_with("gen_ai_") {
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| word.strip_suffix(s)).unwrap_or(word);
            names.insert(family.to_owned());
        }
    }
    names
}

/// Runs `promtool` with `args`, feeding it `input`; fails the test with
/// its output unless it succeeds.
fn promtool(args: &[&str], input: Option<&str>) {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; tests/run installs it)");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).expect("writing to promtool");
    }
    drop(stdin);
    let output = child.wait_with_output().expect("promtool");
    assert!(
        output.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
