//! The real coding-agent CLIs through the gateway: Claude Code and Codex,
//! pinned in `tests/agents/package.json` and installed by `tests/run`
//! (`npm ci --prefix tests/agents`), each answer one prompt through a data
//! plane to the mock upstream, on an `anthropic` and on an `openai` channel,
//! and what they spent is billed.
//!
//! A CLI reaches the data plane through a [`Tap`], a recording pass-through,
//! so a failure names what the CLI sent and what the gateway answered. Every
//! run gets a fresh HOME, loopback addresses only, and a deadline after which
//! its process group is killed.

mod support;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use gw_tests::{
    harness::eventually,
    mock::{
        self,
        upstream::{MockUpstream, Script},
    },
};
use serde_json::Value;
use support::{Gateway, MODEL, UPSTREAM_KEY};
use tokio::task::JoinHandle;

/// Where `npm ci --prefix tests/agents` puts the CLIs.
const AGENTS_BIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/agents/node_modules/.bin");
/// The model Claude Code is told to use (`--model`, and for its small
/// tasks): its default in the pinned version, one for which it sends
/// `role: "system"` turns inside `messages` (its environment block, right
/// after the first user turn), which the gateway must take.
const CLAUDE_MODEL: &str = "claude-opus-5-5";
/// What the mock answers on messages and chat completions.
const REPLY: &str = "The heron counted 42 pebbles through the gateway";
const START_BALANCE: i64 = 100_000_000;
/// How Claude Code's environment block (its mid-conversation system turn)
/// begins.
const ENVIRONMENT: &str = "# Environment";
/// How long one CLI run may take before its processes are killed.
const RUN_DEADLINE: Duration = Duration::from_secs(180);
/// Requests the gateway meters (count_tokens is not among them).
const BILLED_PATHS: [&str; 3] = ["/v1/messages", "/v1/chat/completions", "/v1/responses"];

/// One request a CLI made, and what the gateway answered.
#[derive(Debug, Clone)]
struct Exchange {
    method: String,
    /// Path and query string as sent.
    target: String,
    /// Headers worth reading in a report; key values masked.
    headers: Vec<(String, String)>,
    /// The request body: its shape and its first bytes.
    body: String,
    /// The `role` of each entry of the body's `messages`.
    roles: Vec<String>,
    status: u16,
    /// The answer's content type, and its body when it is not a success.
    answer: String,
}

/// A recording reverse proxy in front of one data plane.
struct Tap {
    addr: std::net::SocketAddr,
    log: Arc<Mutex<Vec<Exchange>>>,
    server: JoinHandle<()>,
}

struct TapState {
    target: String,
    client: reqwest::Client,
    log: Arc<Mutex<Vec<Exchange>>>,
}

/// What one CLI run printed and how it ended.
struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

// === impl Tap ===

impl Tap {
    /// Listens on 127.0.0.1:0 and forwards everything to `http://{upstream}`.
    async fn start(upstream: std::net::SocketAddr) -> Tap {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding the tap");
        let addr = listener.local_addr().expect("tap address");
        let log = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(TapState {
            target: format!("http://{upstream}"),
            client: reqwest::Client::builder().no_proxy().build().expect("tap client"),
            log: log.clone(),
        });
        let app = Router::new().fallback(forward).with_state(state);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Tap { addr, log, server }
    }

    fn exchanges(&self) -> Vec<Exchange> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every exchange, one paragraph each, for assertion messages.
    fn report(&self) -> String {
        let mut out = String::new();
        for e in self.exchanges() {
            out.push_str(&format!("\n--> {} {}\n", e.method, e.target));
            for (name, value) in &e.headers {
                out.push_str(&format!("    {name}: {value}\n"));
            }
            out.push_str(&format!("    body: {}\n<-- {} {}\n", e.body, e.status, e.answer));
        }
        if out.is_empty() { "\n(the CLI sent nothing to the gateway)".into() } else { out }
    }

    /// Whether some request had a `role: "system"` entry in its `messages`.
    fn sent_system_turns(&self) -> bool {
        self.exchanges().iter().any(|e| e.roles.iter().any(|r| r == "system"))
    }

    /// Successful requests to the metered paths.
    fn billable(&self) -> usize {
        let path = |e: &Exchange| e.target.split('?').next().unwrap_or_default().to_owned();
        self.exchanges().iter().filter(|e| e.status == 200 && BILLED_PATHS.contains(&path(e).as_str())).count()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(State(tap): State<Arc<TapState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 64 << 20).await.unwrap_or_default();
    let target = parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |p| p.to_string());
    let mut exchange = Exchange {
        method: parts.method.to_string(),
        target: target.clone(),
        headers: interesting(&parts.headers),
        body: describe(&body),
        roles: roles(&body),
        status: 0,
        answer: String::new(),
    };
    let mut headers = parts.headers.clone();
    for hop in ["host", "content-length", "connection", "transfer-encoding"] {
        headers.remove(hop);
    }
    let sent = tap
        .client
        .request(parts.method.clone(), format!("{}{target}", tap.target))
        .headers(headers)
        .body(body)
        .send()
        .await;
    let upstream = match sent {
        Ok(upstream) => upstream,
        Err(error) => {
            exchange.status = 502;
            exchange.answer = format!("(the tap could not reach the data plane: {error})");
            tap.log.lock().unwrap_or_else(|p| p.into_inner()).push(exchange);
            return StatusCode::BAD_GATEWAY.into_response();
        }
    };
    let status = upstream.status();
    let mut answer_headers = upstream.headers().clone();
    answer_headers.remove("content-length");
    answer_headers.remove("transfer-encoding");
    exchange.status = status.as_u16();
    let content_type = answer_headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let body = if status.is_success() {
        exchange.answer = content_type;
        Body::from_stream(upstream.bytes_stream())
    } else {
        let text = upstream.bytes().await.unwrap_or_default();
        exchange.answer = format!("{content_type} {}", String::from_utf8_lossy(&text));
        Body::from(text)
    };
    tap.log.lock().unwrap_or_else(|p| p.into_inner()).push(exchange);
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = answer_headers;
    response
}

/// The headers a report needs, key values masked.
fn interesting(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            ["user-agent", "content-type", "accept", "authorization", "x-api-key"].contains(&name)
                || name.starts_with("anthropic-")
                || name.starts_with("x-stainless-")
                || name.starts_with("openai-")
        })
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            let value = match name.as_str() {
                "authorization" | "x-api-key" => format!("({} bytes)", value.len()),
                _ => value,
            };
            (name.as_str().to_owned(), value)
        })
        .collect()
}

fn roles(body: &Bytes) -> Vec<String> {
    let json: Value = serde_json::from_slice(body).unwrap_or_default();
    let messages = json["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().map(|m| m["role"].as_str().unwrap_or_default().to_owned()).collect()
}

/// A JSON body's outline (fields, roles and block types of each message,
/// tools offered) and its first 300 characters.
fn describe(body: &Bytes) -> String {
    let text = String::from_utf8_lossy(body);
    let head: String = text.chars().take(300).collect();
    let Ok(Value::Object(json)) = serde_json::from_slice::<Value>(body) else {
        return format!("{} bytes: {head}", body.len());
    };
    let fields: Vec<&str> = json.keys().map(String::as_str).collect();
    let mut outline = format!("{} bytes, fields {fields:?}", body.len());
    for key in ["model", "stream", "max_tokens", "max_output_tokens"] {
        if let Some(value) = json.get(key) {
            outline.push_str(&format!(", {key}={value}"));
        }
    }
    for key in ["messages", "input"] {
        if let Some(Value::Array(items)) = json.get(key) {
            let shapes: Vec<String> = items
                .iter()
                .map(|m| {
                    let role = m.get("role").or_else(|| m.get("type")).and_then(Value::as_str).unwrap_or("?");
                    let blocks: Vec<&str> = match m.get("content") {
                        Some(Value::Array(blocks)) => {
                            blocks.iter().map(|b| b["type"].as_str().unwrap_or("?")).collect()
                        }
                        Some(Value::String(_)) => vec!["string"],
                        _ => vec![],
                    };
                    format!("{role}[{}]", blocks.join(","))
                })
                .collect();
            outline.push_str(&format!(", {key}=[{}]", shapes.join(" ")));
        }
    }
    if let Some(Value::Array(tools)) = json.get("tools") {
        outline.push_str(&format!(", {} tools", tools.len()));
    }
    let messages = json.get("messages").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    if let Some(turn) = messages.iter().find(|m| m["role"] == "system") {
        let turn: String = turn.to_string().chars().take(200).collect();
        outline.push_str(&format!(", first system turn {turn}"));
    }
    format!("{outline}; starts {head:?}")
}

// === the runs ===

/// Runs `program args` in `dir` with only `env` (plus PATH) set, in its own
/// process group; kills the group if it has not finished by [`RUN_DEADLINE`].
async fn run(program: &Path, args: &[&str], dir: &Path, env: &[(&str, String)]) -> Run {
    assert!(
        program.exists(),
        "{} is missing: run tests/run, or `npm ci --prefix tests/agents`, to install the pinned CLIs",
        program.display()
    );
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("TERM", "dumb")
        .env("NO_COLOR", "1")
        .env("NO_PROXY", "*")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = command.spawn().unwrap_or_else(|error| panic!("starting {}: {error}", program.display()));
    let pid = child.id();
    match tokio::time::timeout(RUN_DEADLINE, child.wait_with_output()).await {
        Ok(output) => {
            let output = output.expect("waiting for the CLI");
            Run {
                status: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            }
        }
        Err(_) => {
            // The CLI and whatever it spawned share its process group.
            if let Some(pid) = pid {
                let _ = std::process::Command::new("kill").arg("-KILL").arg(format!("-{pid}")).status();
            }
            Run { status: None, stdout: String::new(), stderr: format!("killed after {RUN_DEADLINE:?}") }
        }
    }
}

/// `claude -p <prompt> --model <CLAUDE_MODEL>` against the tap, with a
/// fresh HOME and everything but the model requests turned off.
async fn claude(tap: &Tap, key: &str, prompt: &str) -> Run {
    let home = tempfile::tempdir().expect("temp HOME");
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let env = [
        ("HOME", home.path().display().to_string()),
        ("CLAUDE_CONFIG_DIR", home.path().join(".claude").display().to_string()),
        ("ANTHROPIC_BASE_URL", format!("http://{}", tap.addr)),
        ("ANTHROPIC_API_KEY", key.to_owned()),
        // Its background tasks use the small model: the same one here.
        ("ANTHROPIC_SMALL_FAST_MODEL", CLAUDE_MODEL.to_owned()),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", CLAUDE_MODEL.to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("DISABLE_BUG_COMMAND", "1".to_owned()),
        ("CLAUDE_CODE_DISABLE_TERMINAL_TITLE", "1".to_owned()),
        ("IS_SANDBOX", "1".to_owned()),
    ];
    let program = PathBuf::from(AGENTS_BIN).join("claude");
    run(&program, &["-p", prompt, "--model", CLAUDE_MODEL], &work, &env).await
}

/// `codex exec <prompt>` with a model provider `gw` at the tap's `/v1`
/// speaking `wire_api`, its key from `GW_API_KEY`.
async fn codex(tap: &Tap, key: &str, wire_api: &str, prompt: &str) -> Run {
    let home = tempfile::tempdir().expect("temp HOME");
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let env = [
        ("HOME", home.path().display().to_string()),
        ("CODEX_HOME", home.path().display().to_string()),
        ("GW_API_KEY", key.to_owned()),
        ("RUST_LOG", "warn".to_owned()),
    ];
    let provider = format!(
        r#"model_providers.gw={{name="gateway",base_url="http://{}/v1",env_key="GW_API_KEY",wire_api="{wire_api}",request_max_retries=0,stream_max_retries=0}}"#,
        tap.addr
    );
    let args = [
        "exec",
        "--skip-git-repo-check",
        "--color",
        "never",
        "-m",
        MODEL,
        "-c",
        "model_provider=gw",
        "-c",
        &provider,
        prompt,
    ];
    let program = PathBuf::from(AGENTS_BIN).join("codex");
    run(&program, &args, &work, &env).await
}

// === the gateway ===

/// A gateway with one channel of `kind` on `upstream` serving both models,
/// and the mock scripted to answer [`REPLY`].
async fn gateway(upstream: &MockUpstream, kind: &str) -> Gateway {
    let gw = Gateway::start(1).await;
    gw.cluster
        .gwctl(&["model", "create", "--id", CLAUDE_MODEL, "--input-price", "3", "--output-price", "15"])
        .await
        .expect("model create");
    let models = format!("{MODEL},{CLAUDE_MODEL}");
    let base_url = upstream.base_url();
    gw.cluster
        .gwctl(&[
            "channel",
            "create",
            "--name",
            "mock",
            "--type",
            kind,
            "--base-url",
            &base_url,
            "--key",
            UPSTREAM_KEY,
            "--models",
            &models,
            "--groups",
            "default,vip",
        ])
        .await
        .expect("channel create");
    upstream.set_script(Script { reply: REPLY.into(), ..Script::default() });
    gw.synced().await;
    gw
}

async fn balance(gw: &Gateway) -> i64 {
    let account = gw.cluster.gwctl(&["account", "get", &gw.account]).await.expect("account get");
    account["balance_micros"].as_i64().unwrap_or_else(|| panic!("no balance in {account}"))
}

/// Waits until every successful metered request the CLI made is a usage
/// record of `model` on `endpoint` with the mock's token counts, and the
/// balance dropped by exactly their cost.
async fn assert_billed(gw: &Gateway, tap: &Tap, model: &str, endpoint: &str, tokens: (i64, i64)) {
    let n = tap.billable();
    assert!(n > 0, "no successful model request reached the gateway:{}", tap.report());
    let records = gw.wait_for_usage(n).await;
    let mut cost = 0;
    for record in &records {
        assert_eq!(record["model"], model, "{record}");
        assert_eq!(record["endpoint"], endpoint, "{record}");
        assert!(!record["estimated"].as_bool().unwrap_or(false), "{record}");
        assert_eq!(
            (record["prompt_tokens"].as_i64(), record["completion_tokens"].as_i64()),
            (Some(tokens.0), Some(tokens.1)),
            "{record}"
        );
        let micros = record["cost_micros"].as_i64().unwrap_or_default();
        assert!(micros > 0, "{record}");
        cost += micros;
    }
    eventually("the balance to drop by the usage billed", Duration::from_secs(15), || async {
        (balance(gw).await == START_BALANCE - cost).then_some(())
    })
    .await;
}

fn assert_answered(run: &Run, reply: &str, tap: &Tap) {
    let answered = run.status == Some(0) && run.stdout.contains(reply);
    if answered {
        // Shown with --nocapture.
        println!("--- what the CLI sent and what the gateway answered{}", tap.report());
    }
    assert!(
        answered,
        "the CLI did not print {reply:?} (exit {:?})\n--- stdout\n{}\n--- stderr\n{}\n--- what it sent and what the gateway answered{}",
        run.status,
        run.stdout,
        run.stderr,
        tap.report()
    );
}

#[tokio::test]
async fn claude_code_answers_through_an_anthropic_channel_and_is_billed() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await;

    let run = claude(&tap, &gw.key, "Count the pebbles.").await;
    assert_answered(&run, REPLY, &tap);
    assert!(tap.sent_system_turns(), "the case this covers: system turns inside messages{}", tap.report());
    let sent: Vec<_> = upstream.requests().into_iter().filter(|r| r.path == "/v1/messages").collect();
    assert!(!sent.is_empty(), "{:?}", upstream.requests());
    for request in &sent {
        assert_eq!(request.header("x-api-key"), Some(UPSTREAM_KEY), "the channel's key, not the client's");
        assert_eq!(request.body["model"], CLAUDE_MODEL);
        assert!(request.body.to_string().contains(ENVIRONMENT), "the system turn reached the upstream");
    }
    assert_billed(&gw, &tap, CLAUDE_MODEL, "/v1/messages", (11, 7)).await;
}

#[tokio::test]
async fn claude_code_answers_through_an_openai_channel_and_is_billed() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await;

    let run = claude(&tap, &gw.key, "Count the pebbles.").await;
    assert_answered(&run, REPLY, &tap);
    assert!(tap.sent_system_turns(), "the case this covers: system turns inside messages{}", tap.report());
    let sent: Vec<_> = upstream.requests().into_iter().filter(|r| r.path == "/v1/chat/completions").collect();
    assert!(!sent.is_empty(), "messages are translated to chat completions: {:?}", upstream.requests());
    for request in &sent {
        assert_eq!(request.body["model"], CLAUDE_MODEL);
        let text = request.body["messages"].to_string();
        assert!(text.contains(ENVIRONMENT), "the system turn's text reached the upstream: {}", request.body);
    }
    assert!(upstream.requests().iter().all(|r| r.path != "/v1/messages"), "{:?}", upstream.requests());
    assert_billed(&gw, &tap, CLAUDE_MODEL, "/v1/messages", (11, 7)).await;
}

#[tokio::test]
async fn codex_answers_over_the_responses_api_through_an_openai_channel_and_is_billed() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await;

    let run = codex(&tap, &gw.key, "responses", "Count the pebbles.").await;
    assert_answered(&run, mock::endpoints::REPLY, &tap);
    let seen = mock::endpoints::MockEndpoints::of(&upstream).received();
    assert!(seen.iter().any(|r| r.path == "/v1/responses" && r.json["stream"] == true), "{seen:?}");
    let tokens = (mock::endpoints::RESPONSE_INPUT_TOKENS, mock::endpoints::RESPONSE_OUTPUT_TOKENS);
    assert_billed(&gw, &tap, MODEL, "/v1/responses", tokens).await;
}

#[tokio::test]
async fn codex_answers_over_chat_completions_through_an_anthropic_channel_and_is_billed() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await;

    let run = codex(&tap, &gw.key, "chat", "Count the pebbles.").await;
    assert_answered(&run, REPLY, &tap);
    let sent: Vec<_> = upstream.requests().into_iter().filter(|r| r.path == "/v1/messages").collect();
    assert!(!sent.is_empty(), "chat completions are translated to messages: {:?}", upstream.requests());
    assert_eq!(sent[0].header("x-api-key"), Some(UPSTREAM_KEY));
    assert_billed(&gw, &tap, MODEL, "/v1/chat/completions", (11, 7)).await;
}
