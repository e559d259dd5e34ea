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

use crate::support;

use std::{path::PathBuf, time::Duration};

use gw_tests::{
    cli::{AGENTS_BIN, Exchange, Run, Tap, assert_answered, run},
    harness::eventually,
    mock::{
        self,
        upstream::{MockUpstream, Script},
    },
};
use support::{Gateway, MODEL, UPSTREAM_KEY};

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
/// Requests the gateway meters (count_tokens is not among them).
const BILLED_PATHS: [&str; 3] = ["/v1/messages", "/v1/chat/completions", "/v1/responses"];

/// Whether some request had a `role: "system"` entry in its `messages`.
fn sent_system_turns(tap: &Tap) -> bool {
    tap.exchanges().iter().any(|e| e.roles.iter().any(|r| r == "system"))
}

/// Successful requests to the metered paths.
fn billable(tap: &Tap) -> usize {
    let path = |e: &Exchange| e.target.split('?').next().unwrap_or_default().to_owned();
    tap.exchanges().iter().filter(|e| e.status == 200 && BILLED_PATHS.contains(&path(e).as_str())).count()
}

// === the runs ===

/// `claude -p <prompt> --model <CLAUDE_MODEL>` against the tap, with a
/// fresh HOME and everything but the model requests turned off.
async fn claude(tap: &Tap, key: &str, prompt: &str) -> Run {
    let home = tempfile::tempdir().expect("temp HOME");
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let env = [
        ("HOME", home.path().display().to_string()),
        ("CLAUDE_CONFIG_DIR", home.path().join(".claude").display().to_string()),
        ("ANTHROPIC_BASE_URL", format!("http://{}", tap.addr())),
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
        tap.addr()
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
    let n = billable(tap);
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

#[tokio::test]
async fn claude_code_answers_through_an_anthropic_channel_and_is_billed() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await.expect("the tap");

    let run = claude(&tap, &gw.key, "Count the pebbles.").await;
    assert_answered(&run, REPLY, &tap);
    assert!(sent_system_turns(&tap), "the case this covers: system turns inside messages{}", tap.report());
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
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await.expect("the tap");

    let run = claude(&tap, &gw.key, "Count the pebbles.").await;
    assert_answered(&run, REPLY, &tap);
    assert!(sent_system_turns(&tap), "the case this covers: system turns inside messages{}", tap.report());
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
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await.expect("the tap");

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
    let tap = Tap::start(gw.cluster.data_planes[0].addr).await.expect("the tap");

    let run = codex(&tap, &gw.key, "chat", "Count the pebbles.").await;
    assert_answered(&run, REPLY, &tap);
    let sent: Vec<_> = upstream.requests().into_iter().filter(|r| r.path == "/v1/messages").collect();
    assert!(!sent.is_empty(), "chat completions are translated to messages: {:?}", upstream.requests());
    assert_eq!(sent[0].header("x-api-key"), Some(UPSTREAM_KEY));
    assert_billed(&gw, &tap, MODEL, "/v1/chat/completions", (11, 7)).await;
}
