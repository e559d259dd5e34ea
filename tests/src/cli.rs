//! Real client programs (the coding-agent CLIs pinned in
//! `tests/agents/package.json`) run against a data plane: [`run`] starts
//! one with a fresh HOME, only the environment given, its own process
//! group and a deadline after which the group is killed; a [`Tap`] between
//! the program and the data plane records every exchange, so a failing
//! test shows what the program sent and what the gateway answered.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::task::JoinHandle;

/// Where `npm ci --prefix tests/agents` puts the CLIs.
pub const AGENTS_BIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/agents/node_modules/.bin");
/// How long one run may take before its processes are killed.
pub const RUN_DEADLINE: Duration = Duration::from_secs(180);

/// One request a program made, and what the gateway answered.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    /// Path and query string as sent.
    pub target: String,
    /// Headers worth reading in a report, credentials masked.
    pub headers: Vec<(String, String)>,
    /// The body's outline (top-level fields, model, message shapes, first
    /// bytes).
    pub body: String,
    /// The `role` of each entry of the body's `messages`.
    pub roles: Vec<String>,
    pub status: u16,
    /// The answer's content type, and its body when it is not a success.
    pub answer: String,
}

/// A recording reverse proxy in front of one data plane. Dropping it stops
/// the proxy.
pub struct Tap {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<Exchange>>>,
    server: JoinHandle<()>,
}

/// What one run printed and how it ended (`status` is `None` when killed).
pub struct Run {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

struct TapState {
    target: String,
    client: reqwest::Client,
    log: Arc<Mutex<Vec<Exchange>>>,
}

// === impl Tap ===

impl Tap {
    /// Listens on 127.0.0.1:0 and forwards everything to `http://{upstream}`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Tap> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(TapState {
            target: format!("http://{upstream}"),
            client: reqwest::Client::builder().no_proxy().build()?,
            log: log.clone(),
        });
        let app = Router::new().fallback(forward).with_state(state);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Tap { addr, log, server })
    }

    /// The address programs are pointed at.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every exchange so far, in arrival order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every exchange, one paragraph each, for assertion messages.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for e in self.exchanges() {
            out.push_str(&format!("\n--> {} {}\n", e.method, e.target));
            for (name, value) in &e.headers {
                out.push_str(&format!("    {name}: {value}\n"));
            }
            out.push_str(&format!("    body: {}\n<-- {} {}\n", e.body, e.status, e.answer));
        }
        if out.is_empty() { "\n(the program sent nothing to the gateway)".into() } else { out }
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
        body: outline(&body),
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

/// The headers a report needs, credentials masked to their length.
fn interesting(headers: &HeaderMap) -> Vec<(String, String)> {
    const CREDENTIALS: [&str; 3] = ["authorization", "x-api-key", "x-goog-api-key"];
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            ["user-agent", "content-type", "accept"].contains(&name)
                || CREDENTIALS.contains(&name)
                || name.starts_with("anthropic-")
                || name.starts_with("x-goog-")
        })
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            let value = if CREDENTIALS.contains(&name.as_str()) { format!("({} bytes)", value.len()) } else { value };
            (name.as_str().to_owned(), value)
        })
        .collect()
}

/// A JSON body's outline (fields, roles and block types of each message,
/// tools offered) and its first 300 characters.
fn outline(body: &Bytes) -> String {
    let text = String::from_utf8_lossy(body);
    let head: String = text.chars().take(300).collect();
    let Ok(Value::Object(json)) = serde_json::from_slice::<Value>(body) else {
        return format!("{} bytes: {head}", body.len());
    };
    let fields: Vec<&str> = json.keys().map(String::as_str).collect();
    let mut outline = format!("{} bytes, fields {fields:?}", body.len());
    for key in ["model", "stream", "max_tokens", "max_output_tokens", "generationConfig"] {
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

/// The `role` of each entry of a JSON body's `messages`.
fn roles(body: &Bytes) -> Vec<String> {
    let json: Value = serde_json::from_slice(body).unwrap_or_default();
    let messages = json["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().map(|m| m["role"].as_str().unwrap_or_default().to_owned()).collect()
}

/// A fresh directory to be a run's HOME, with `work/` inside it as the
/// working directory. Removed when dropped.
pub fn home() -> (tempfile::TempDir, PathBuf) {
    let home = tempfile::tempdir().expect("temp HOME");
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    (home, work)
}

/// Runs `program args` in `dir` with only `env` (plus PATH and a plain
/// terminal) set, in its own process group; kills the group if it has not
/// finished within [`RUN_DEADLINE`]. Panics when `program` is not installed.
pub async fn run(program: &Path, args: &[&str], dir: &Path, env: &[(&str, String)]) -> Run {
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
            let output = output.expect("waiting for the program");
            Run {
                status: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            }
        }
        Err(_) => {
            // The program and whatever it spawned share its process group.
            if let Some(pid) = pid {
                let _ = std::process::Command::new("kill").arg("-KILL").arg(format!("-{pid}")).status();
            }
            Run { status: None, stdout: String::new(), stderr: format!("killed after {RUN_DEADLINE:?}") }
        }
    }
}

/// Panics unless `run` ended well and printed `reply`, showing its output
/// and everything `tap` saw; prints the exchanges when it passed (shown
/// with --nocapture).
pub fn assert_answered(run: &Run, reply: &str, tap: &Tap) {
    let answered = run.status == Some(0) && run.stdout.contains(reply);
    if answered {
        println!("--- what the program sent and what the gateway answered{}", tap.report());
    }
    assert!(
        answered,
        "the program did not print {reply:?} (exit {:?})\n--- stdout\n{}\n--- stderr\n{}\n--- what it sent and what \
         the gateway answered{}",
        run.status,
        run.stdout,
        run.stderr,
        tap.report()
    );
}
