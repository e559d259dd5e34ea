//! `gwctl doctor`: the minimal diagnosis of docs/errors.md for one key against a
//! data plane. It lists the key's models (`GET /v1/models`), sends a minimal
//! chat (`model` and `messages` only), reads the status and message of what
//! failed, tells configuration (4xx) from link (5xx), narrows the failure to
//! the key, its account or group, one model, or the address (trying a second
//! model when that can tell), and ends with the remedy of the error
//! catalogue (docs/errors.md).
//! The key is read from a file, standard input or `GW_API_KEY`, never from
//! a flag, and never printed.

use std::io::Read as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::output::{self, Output};
use crate::schema::{Diagnosis, Doctor, DoctorCheck};

/// How long one request of the diagnosis may take.
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The gateway's client address, as an SDK's base URL (with or without /v1).
    #[arg(long, env = "GW_BASE_URL", default_value = "http://127.0.0.1:8080")]
    base_url: String,
    /// File holding the key to check (`-` reads standard input)
    /// [default: the GW_API_KEY variable].
    #[arg(long, value_name = "PATH")]
    key_file: Option<PathBuf>,
    /// The model to send the chat to [default: the first the key lists].
    #[arg(long)]
    model: Option<String>,
}

/// What one HTTP call answered.
struct Answer {
    status: u16,
    message: String,
    code: String,
    body: Value,
    request_id: String,
    millis: u64,
}

/// Where a failure lies, for the diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Nothing,
    Key,
    Account,
    Group,
    Model,
    Address,
    Gateway,
}

/// A cause and its remedy, from the error catalogue (docs/errors.md).
struct Remedy {
    cause: &'static str,
    remedy: String,
    retry: bool,
    scope: Scope,
}

/// Runs the diagnosis; returns the report, or prints it and fails (exit 1)
/// when it found a problem.
pub async fn run(args: Args, out: Output) -> Result<String> {
    let key = read_key(args.key_file.as_deref())?;
    let base = base_address(&args.base_url);
    let client = reqwest::Client::builder().timeout(TIMEOUT).build().context("building the HTTP client")?;
    let report = diagnose(&client, &base, &key, args.model.as_deref()).await;
    let text = render(out, &report)?;
    if report.ok {
        return Ok(text);
    }
    output::emit(&text)?;
    Err(anyhow!("the diagnosis found a problem: {}", report.diagnosis.cause))
}

/// The key from `path` (`-`: standard input), else from `GW_API_KEY`.
fn read_key(path: Option<&std::path::Path>) -> Result<String> {
    let key = match path {
        Some(path) if path.as_os_str() == "-" => {
            let mut key = String::new();
            std::io::stdin().read_to_string(&mut key).context("reading the key from standard input")?;
            key
        }
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        None => std::env::var("GW_API_KEY").unwrap_or_default(),
    };
    let key = key.trim().to_owned();
    if key.is_empty() {
        bail!(crate::confirm::UsageError("no key to check: give --key-file PATH, --key-file - or GW_API_KEY".into()));
    }
    Ok(key)
}

/// `http://host:port`, whatever the user wrote after it (`/`, `/v1`).
fn base_address(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    url.strip_suffix("/v1").unwrap_or(url).to_owned()
}

/// Runs the steps of the diagnosis (docs/errors.md) and concludes.
async fn diagnose(client: &reqwest::Client, base: &str, key: &str, model: Option<&str>) -> Doctor {
    let mut checks = Vec::new();
    let listed = call(client, key, reqwest::Method::GET, &format!("{base}/v1/models"), None).await;
    let listed = match listed {
        Ok(answer) => answer,
        Err(error) => {
            checks.push(failed_check("GET /v1/models", "", 0, &error));
            let remedy = Remedy {
                cause: "the gateway cannot be reached at this address",
                remedy: format!(
                    "check the address and the network: SDKs take {base}/v1, clients that add /v1 themselves {base}"
                ),
                retry: true,
                scope: Scope::Address,
            };
            return conclude(base, checks, "link", remedy, None);
        }
    };
    let models: Vec<String> = listed.body["data"]
        .as_array()
        .map(|data| data.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let detail =
        if listed.status == 200 { format!("{} models: {}", models.len(), models.join(", ")) } else { String::new() };
    checks.push(check("GET /v1/models", "", &listed, detail));
    if listed.status != 200 {
        return conclude_failure(base, checks, &listed, None);
    }
    let Some(model) = model.map(str::to_owned).or_else(|| models.first().cloned()) else {
        let remedy = Remedy {
            cause: "the key can use no model: its group exposes none or its model restriction allows none",
            remedy: "Check that the token's group exposes models; remove the token's model restriction if set".into(),
            retry: false,
            scope: Scope::Group,
        };
        return conclude(base, checks, "configuration", remedy, None);
    };

    let first = minimal_chat(client, base, key, &model).await;
    let chat = match first {
        Ok(answer) => answer,
        Err(error) => {
            checks.push(failed_check("POST /v1/chat/completions", &model, 0, &error));
            let remedy = Remedy {
                cause: "the connection failed during the chat",
                remedy: "Back off and retry, or switch model or group".into(),
                retry: true,
                scope: Scope::Gateway,
            };
            return conclude(base, checks, "link", remedy, Some(&model));
        }
    };
    let ok = chat.status == 200;
    checks.push(check("POST /v1/chat/completions", &model, &chat, if ok { "answered".into() } else { String::new() }));
    if ok {
        let remedy = Remedy {
            cause: "the key, the address and the model all work",
            remedy: "nothing to do; add optional fields one at a time".into(),
            retry: false,
            scope: Scope::Nothing,
        };
        return conclude(base, checks, "ok", remedy, Some(&model));
    }
    // Does another model work? Only worth asking when the cause may be the
    // model's (its permission, its channels, the upstream behind them).
    let mut remedy = remedy_for(&chat);
    if matches!(remedy.scope, Scope::Model | Scope::Gateway) {
        match models.iter().find(|m| **m != model) {
            Some(other) => match minimal_chat(client, base, key, other).await {
                Ok(second) => {
                    let works = second.status == 200;
                    let note = if works { "answered".into() } else { String::new() };
                    checks.push(check("POST /v1/chat/completions", other, &second, note));
                    remedy.scope = if works { Scope::Model } else { Scope::Group };
                }
                Err(error) => checks.push(failed_check("POST /v1/chat/completions", other, 0, &error)),
            },
            None => remedy.scope = Scope::Model,
        }
    }
    conclude_failure_with(base, checks, &chat, remedy, Some(&model))
}

async fn minimal_chat(client: &reqwest::Client, base: &str, key: &str, model: &str) -> Result<Answer> {
    // The minimal chat request: `model` and `messages`, nothing else.
    let body = json!({"model": model, "messages": [{"role": "user", "content": "ping"}]});
    call(client, key, reqwest::Method::POST, &format!("{base}/v1/chat/completions"), Some(body)).await
}

/// One call with the key as a bearer token; the error's message and code
/// read from either error shape.
async fn call(
    client: &reqwest::Client,
    key: &str,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Result<Answer> {
    let started = Instant::now();
    let mut request = client.request(method, url).bearer_auth(key);
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body.to_string());
    }
    let response = request.send().await.map_err(|e| anyhow!("{}", error_text(&e)))?;
    let status = response.status().as_u16();
    let request_id = response.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let text = response.text().await.map_err(|e| anyhow!("{}", error_text(&e)))?;
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let error = &body["error"];
    let message = error["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| if status == 200 { String::new() } else { text.chars().take(300).collect() });
    let code = error["code"].as_str().unwrap_or("").to_owned();
    let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(Answer { status, message, code, body, request_id, millis })
}

/// An HTTP client error and its causes, one line.
fn error_text(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn check(request: &str, model: &str, answer: &Answer, detail: String) -> DoctorCheck {
    DoctorCheck {
        request: request.to_owned(),
        model: model.to_owned(),
        ok: answer.status == 200,
        status: answer.status,
        message: if answer.status == 200 { detail } else { answer.message.clone() },
        request_id: answer.request_id.clone(),
        latency_ms: answer.millis,
    }
}

fn failed_check(request: &str, model: &str, status: u16, error: &anyhow::Error) -> DoctorCheck {
    DoctorCheck {
        request: request.to_owned(),
        model: model.to_owned(),
        ok: false,
        status,
        message: format!("{error:#}"),
        request_id: String::new(),
        latency_ms: 0,
    }
}

/// The cause, remedy and scope the error catalogue (docs/errors.md) gives a
/// failed answer; a 403 is read by its message (quota first, then group,
/// model and address).
fn remedy_for(answer: &Answer) -> Remedy {
    let m = answer.message.as_str();
    let row = |cause, remedy: &str, retry, scope| Remedy { cause, remedy: remedy.to_owned(), retry, scope };
    match answer.status {
        401 => row(
            "the key is refused: missing, truncated, unknown, disabled or expired",
            "Send `Authorization: Bearer <API_KEY>` with the complete token; create a new token if it was disabled or expired",
            false,
            Scope::Key,
        ),
        403 if m.contains("该令牌额度已用尽") => row(
            "the token's own quota is used up; topping up the account does not lift it",
            "Raise the amount or set unlimited on the token (needs advanced mode), or create and use a sufficiently funded token",
            false,
            Scope::Key,
        ),
        403 if m.contains("用户额度不足") => {
            row("the account's balance is too low", "Top up the account", false, Scope::Account)
        }
        403 if m.contains("分组") => row(
            "the token's group is unusable (not allowed for the account, or deprecated)",
            "Create a token in a usable group",
            false,
            Scope::Group,
        ),
        403 if m.contains("IP") => row(
            "the source address is not in the token's allowed list",
            "Edit the token's IP restriction or use an allowed network",
            false,
            Scope::Key,
        ),
        403 | 404 if m.contains("无权访问模型") || m.contains("模型不存在") || answer.code == "model_not_found" => {
            row(
                "the model name is wrong, or the token or its group cannot see the model",
                "Check the model identifier; remove the token's model restriction if set",
                false,
                Scope::Model,
            )
        }
        404 if m.contains("Invalid URL") => row(
            "wrong base address",
            "Use the right base address: SDKs take <base>/v1, clients that add /v1 themselves <base>",
            false,
            Scope::Address,
        ),
        429 => row(
            "the request-rate limit is reached",
            "Wait a few seconds, then double the wait on each further failure",
            true,
            Scope::Key,
        ),
        503 if answer.code == "model_not_found" => row(
            "the model currently has no available channel",
            "Check the model name and that the token and group expose it",
            false,
            Scope::Model,
        ),
        500 | 502 | 503 | 504 => row(
            "gateway or upstream failure, or a timeout",
            "Back off and retry, or switch model or group",
            true,
            Scope::Gateway,
        ),
        400 => row("bad parameters", "Fix the request", false, Scope::Model),
        _ => row("an answer the table does not list", "Read the status and message above", false, Scope::Gateway),
    }
}

fn conclude_failure(base: &str, checks: Vec<DoctorCheck>, answer: &Answer, model: Option<&str>) -> Doctor {
    let remedy = remedy_for(answer);
    conclude_failure_with(base, checks, answer, remedy, model)
}

fn conclude_failure_with(
    base: &str,
    checks: Vec<DoctorCheck>,
    answer: &Answer,
    remedy: Remedy,
    model: Option<&str>,
) -> Doctor {
    let kind = if answer.status >= 500 { "link" } else { "configuration" };
    conclude(base, checks, kind, remedy, model)
}

fn conclude(base: &str, checks: Vec<DoctorCheck>, kind: &str, remedy: Remedy, model: Option<&str>) -> Doctor {
    let model = model.unwrap_or("");
    let (scope, limited) = match remedy.scope {
        Scope::Nothing => ("none", String::new()),
        Scope::Key => ("key", "the key itself".to_owned()),
        Scope::Account => ("account", "the key's account".to_owned()),
        Scope::Group => ("group", "the key's group (every model tried fails)".to_owned()),
        Scope::Model => ("model", format!("model {model} (its permission or its channels); other models may work")),
        Scope::Address => ("address", "the address".to_owned()),
        Scope::Gateway => ("gateway", "the gateway or the upstream".to_owned()),
    };
    Doctor {
        base_url: format!("{base}/v1"),
        ok: kind == "ok",
        checks,
        diagnosis: Diagnosis {
            kind: kind.to_owned(),
            scope: scope.to_owned(),
            limited_to: limited,
            cause: remedy.cause.to_owned(),
            remedy: remedy.remedy,
            retry: remedy.retry,
        },
    }
}

/// The report as JSON, YAML, or lines for people.
fn render(out: Output, report: &Doctor) -> Result<String> {
    match out {
        Output::Json => output::json_text(report),
        Output::Yaml => output::yaml_text(report),
        _ => {
            let mut text = format!("gateway    {}\n", report.base_url);
            let rows: Vec<Vec<String>> = report
                .checks
                .iter()
                .map(|c| {
                    let request =
                        if c.model.is_empty() { c.request.clone() } else { format!("{} ({})", c.request, c.model) };
                    let status = if c.status == 0 { "-".to_owned() } else { c.status.to_string() };
                    vec![if c.ok { "ok" } else { "FAIL" }.to_owned(), request, status, c.message.clone()]
                })
                .collect();
            text.push_str(&output::table_text(&["", "REQUEST", "STATUS", "ANSWER"], &rows));
            let d = &report.diagnosis;
            let kind = match d.kind.as_str() {
                "configuration" => "configuration (4xx)",
                "link" => "link (5xx or unreachable)",
                other => other,
            };
            text.push_str(&format!("diagnosis: {kind}: {}\n", d.cause));
            if !d.limited_to.is_empty() {
                text.push_str(&format!("limited to: {}\n", d.limited_to));
            }
            text.push_str(&format!("remedy:    {}\n", d.remedy));
            text.push_str(&format!(
                "retry:     {}\n",
                if d.retry { "yes, with backoff and a bounded count" } else { "no" }
            ));
            Ok(text)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn answer(status: u16, message: &str, code: &str) -> Answer {
        Answer {
            status,
            message: message.into(),
            code: code.into(),
            body: Value::Null,
            request_id: String::new(),
            millis: 0,
        }
    }

    #[test]
    fn a_403_is_read_by_its_message_and_statuses_by_the_table() {
        let cases = [
            (answer(401, "无效的令牌", ""), Scope::Key, false),
            (answer(403, "该令牌额度已用尽 (request id: x)", ""), Scope::Key, false),
            (answer(403, "用户额度不足, 剩余额度: ＄0.000000", "insufficient_user_quota"), Scope::Account, false),
            (answer(403, "分组 vip 已被弃用", ""), Scope::Group, false),
            (answer(403, "您的 IP 不在令牌允许访问的列表中", "access_denied"), Scope::Key, false),
            (answer(403, "该令牌无权访问模型 gpt-4o", ""), Scope::Model, false),
            (answer(404, "Invalid URL (GET /v1/v1/models)", ""), Scope::Address, false),
            (answer(429, "您已达到请求数限制:1分钟内最多请求5次", "rate_limit_exceeded"), Scope::Key, true),
            (answer(503, "分组 default 下模型 x 无可用渠道", "model_not_found"), Scope::Model, false),
            (answer(502, "upstream failed", ""), Scope::Gateway, true),
        ];
        for (answer, scope, retry) in cases {
            let remedy = remedy_for(&answer);
            assert_eq!((remedy.scope, remedy.retry), (scope, retry), "{} {}", answer.status, answer.message);
        }
    }

    #[test]
    fn the_base_address_drops_a_trailing_v1() {
        assert_eq!(base_address("http://gw:8080/v1/"), "http://gw:8080");
        assert_eq!(base_address("http://gw:8080"), "http://gw:8080");
    }
}
