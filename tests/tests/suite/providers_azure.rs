//! Azure OpenAI channels end to end: the official OpenAI Python SDK talks to
//! the gateway, the gateway to the mock Azure resource
//! ([`gw_tests::mock::azure`]) at a deployment's URL with `api-version` or
//! on the v1 API, with the `api-key` header or an Entra bearer token. Chat
//! plain and streamed, a function-calling round, Azure's refusals, and
//! usage (cached prompt tokens included) billed to the micro-USD.

use crate::support;

use std::collections::HashMap;

use gw_proto::pb;
use gw_tests::{
    harness,
    mock::{
        azure::{self, Auth, MockAzure, Setup},
        upstream::MockUpstream,
    },
};
use serde_json::{Value, json};
use support::Gateway;

/// The model clients ask for, priced so every part of the usage shows in
/// the cost: $2 per 1M prompt tokens, $0.50 per 1M cached, $8 per 1M
/// completion tokens.
const MODEL: &str = "gpt-4.1";
/// What the mock's chat usage costs at those prices: 976 fresh prompt
/// tokens at 2, 1024 cached at 0.5 and 300 completion tokens at 8.
const CHAT_COST_MICROS: i64 = 976 * 2 + 1024 / 2 + 300 * 8;
/// The version the mock runs behind every deployment.
const MODEL_VERSION: &str = "gpt-4.1-2025-04-14";
/// The resource's key (or Entra token); never reaches a client.
const AZURE_KEY: &str = "azure-key-0f1e2d3c4b5a69788796a5b4c3d2e1f0";
const API_VERSION: &str = "2024-10-21";
/// What the SDK script sends: plain, streamed, tool call plain and
/// streamed, tool result.
const SDK_CALLS: usize = 5;

/// Where an azure channel sends chat completions.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// `/openai/deployments/{deployment}/chat/completions?api-version=…`.
    Deployment,
    /// `/openai/v1/chat/completions`, the deployment as the body's model.
    V1,
}

/// One gateway with one azure channel on a mock resource.
struct Fixture {
    gw: Gateway,
    upstream: MockUpstream,
}

// === set-up ===

/// A gateway whose only `gpt-4.1` channel is an azure channel on a mock
/// resource set up for `auth`, reaching deployment `deployment` through
/// `settings` (plus `auth`) and an optional model map.
async fn fixture(auth: Auth, deployment: &str, settings: &[(&str, &str)], map: Option<&str>) -> Fixture {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    MockAzure::of(&upstream).set_up(Setup {
        key: AZURE_KEY.into(),
        auth,
        deployments: vec![(deployment.into(), MODEL_VERSION.into())],
    });
    let model = pb::Model {
        id: MODEL.into(),
        category: "chat".into(),
        input_price_micros: 2_000_000,
        cached_price_micros: 500_000,
        output_price_micros: 8_000_000,
        ..Default::default()
    };
    gw.admin().create_model(model).await.expect("model create");
    let auth = match auth {
        Auth::ApiKey => "api-key",
        Auth::Entra => "entra",
    };
    let mut settings: HashMap<String, String> =
        settings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    settings.insert("auth".into(), auth.into());
    let channel = pb::Channel {
        name: "azure-east".into(),
        r#type: "azure".into(),
        // The resource endpoint, as the Azure portal shows it.
        base_url: format!("http://{}", upstream.addr()),
        api_key: AZURE_KEY.into(),
        has_key: true,
        models: vec![MODEL.into()],
        model_map: map.map(|to| (MODEL.to_owned(), to.to_owned())).into_iter().collect(),
        groups: vec!["default".into(), "vip".into()],
        weight: 1,
        settings: settings.into_iter().collect(),
        ..Default::default()
    };
    gw.admin().create_channel(channel).await.expect("azure channel create");
    gw.synced().await;
    Fixture { gw, upstream }
}

/// Runs `tests/sdk/openai_azure.py` against the fixture's data plane.
async fn run_sdk(f: &Fixture) -> Value {
    let base_url = f.gw.cluster.base_url(0);
    let env = [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", f.gw.key.as_str()), ("GW_MODEL", MODEL)];
    harness::sdk("openai_azure.py", &[], &env).await
}

// === assertions ===

/// What the SDK saw: the mock's reply, usage and tool call, each intact.
fn assert_sdk_answers(result: &Value) {
    let usage = json!({
        "prompt_tokens": azure::PROMPT_TOKENS,
        "completion_tokens": azure::COMPLETION_TOKENS,
        "cached_tokens": azure::CACHED_TOKENS
    });
    assert_eq!(result["text"], azure::REPLY, "{result}");
    assert_eq!(result["usage"], usage, "{result}");
    assert_eq!(result["streamed"], azure::REPLY, "{result}");
    assert_eq!(result["streamed_usage"], usage, "{result}");
    let call = json!({ "finish_reason": "tool_calls", "name": "get_weather", "arguments": { "location": "Paris" } });
    assert_eq!(result["tool_call"], call, "{result}");
    assert_eq!(result["streamed_tool_call"], call, "{result}");
    assert_eq!(result["after_tool"], azure::REPLY, "{result}");
}

/// Every request reached the resource at `path` with `query`, carrying the
/// channel's credential the way `auth` wants and no other.
fn assert_sent(f: &Fixture, path: &str, query: Option<&str>, auth: Auth) -> Vec<azure::Received> {
    let seen = MockAzure::of(&f.upstream).received();
    assert_eq!(seen.len(), SDK_CALLS, "{seen:#?}");
    for r in &seen {
        assert_eq!((r.method.as_str(), r.path.as_str(), r.query.as_deref()), ("POST", path, query), "{r:#?}");
        match auth {
            Auth::ApiKey => {
                assert_eq!(r.api_key.as_deref(), Some(AZURE_KEY), "{r:#?}");
                assert_eq!(r.authorization, None, "the client's token stays with the gateway: {r:#?}");
            }
            Auth::Entra => {
                assert_eq!(r.authorization.as_deref(), Some(format!("Bearer {AZURE_KEY}").as_str()), "{r:#?}");
                assert_eq!(r.api_key, None, "{r:#?}");
            }
        }
    }
    let last = &seen[SDK_CALLS - 1].json;
    let roles: Vec<&str> =
        last["messages"].as_array().into_iter().flatten().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "the tool's result went back: {last}");
    assert_eq!(last["messages"][2]["content"], "Sunny, 21 degrees", "{last}");
    seen
}

/// Each SDK call is one usage record with the mock's counts, not estimated,
/// at exactly [`CHAT_COST_MICROS`]; the balance dropped by their sum.
async fn assert_billed_exactly(f: &Fixture, calls: usize) {
    let records = f.gw.wait_for_usage(calls).await;
    for record in &records {
        assert_eq!(record["model"], MODEL, "{record}");
        assert_eq!(record["endpoint"], "/v1/chat/completions", "{record}");
        assert!(!record["estimated"].as_bool().unwrap_or(false), "{record}");
        let counts =
            ["prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens"].map(|k| record[k].as_i64());
        let expected = [azure::PROMPT_TOKENS, azure::CACHED_TOKENS, azure::COMPLETION_TOKENS, azure::REASONING_TOKENS];
        assert_eq!(counts, expected.map(Some), "{record}");
        assert_eq!(record["cost_micros"].as_i64(), Some(CHAT_COST_MICROS), "{record}");
    }
    let spent = CHAT_COST_MICROS * calls as i64;
    harness::eventually("the balance to drop by the usage billed", std::time::Duration::from_secs(15), || async {
        (f.gw.balance().await == 100_000_000 - spent).then_some(())
    })
    .await;
}

async fn sdk_round(mode: Mode, auth: Auth) {
    let (deployment, settings, map): (&str, Vec<(&str, &str)>, Option<&str>) = match (mode, auth) {
        // The deployment named in the channel's settings.
        (Mode::Deployment, Auth::ApiKey) => {
            ("gpt41-prod", vec![("api_version", API_VERSION), ("deployment", "gpt41-prod")], None)
        }
        // No deployment setting: the mapped upstream model names it.
        (Mode::Deployment, Auth::Entra) => ("gpt41-east", vec![("api_version", API_VERSION)], Some("gpt41-east")),
        (Mode::V1, Auth::ApiKey) => ("prod-41", vec![("api_version", "v1")], Some("prod-41")),
        // No api_version at all is the v1 API too.
        (Mode::V1, Auth::Entra) => (MODEL, vec![], None),
    };
    let f = fixture(auth, deployment, &settings, map).await;
    let result = run_sdk(&f).await;
    assert_sdk_answers(&result);
    let seen = match mode {
        Mode::Deployment => {
            let path = format!("/openai/deployments/{deployment}/chat/completions");
            assert_sent(&f, &path, Some(&format!("api-version={API_VERSION}")), auth)
        }
        Mode::V1 => {
            let seen = assert_sent(&f, "/openai/v1/chat/completions", None, auth);
            for r in &seen {
                assert_eq!(r.json["model"], deployment, "the v1 API names the deployment in the body: {r:#?}");
            }
            seen
        }
    };
    assert!(seen.iter().filter(|r| r.json["stream"] == true).count() == 2, "{seen:#?}");
    assert_billed_exactly(&f, SDK_CALLS).await;
}

// === the SDK on each way of reaching a deployment ===

#[tokio::test]
async fn openai_sdk_through_an_azure_deployment_url_with_its_api_key_is_answered_and_billed_exactly() {
    sdk_round(Mode::Deployment, Auth::ApiKey).await;
}

#[tokio::test]
async fn openai_sdk_through_an_azure_deployment_url_with_an_entra_token_sends_it_as_bearer() {
    sdk_round(Mode::Deployment, Auth::Entra).await;
}

#[tokio::test]
async fn openai_sdk_through_the_azure_v1_api_names_the_mapped_deployment_in_the_body() {
    sdk_round(Mode::V1, Auth::ApiKey).await;
}

#[tokio::test]
async fn openai_sdk_through_the_azure_v1_api_with_an_entra_token_is_answered_and_billed_exactly() {
    sdk_round(Mode::V1, Auth::Entra).await;
}

// === Azure's refusals ===

/// `POST /v1/chat/completions` for [`MODEL`] with the test token.
async fn chat(f: &Fixture) -> support::Reply {
    let body = json!({ "model": MODEL, "messages": [{ "role": "user", "content": "hi" }] });
    f.gw.post(0, "/v1/chat/completions", Some(&f.gw.key), &body).await
}

/// The client's error message without its request-id suffix.
fn message(reply: &support::Reply) -> String {
    let message = reply.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    message.rsplit_once(" (request id: ").map_or(message.clone(), |(text, _)| text.to_owned())
}

#[tokio::test]
async fn an_unknown_deployment_is_a_final_404_carrying_azures_message() {
    let f =
        fixture(Auth::ApiKey, "gpt41-prod", &[("api_version", API_VERSION), ("deployment", "gpt41-west")], None).await;
    let reply = chat(&f).await;
    assert_eq!(reply.status, 404, "{}", reply.text);
    assert_eq!(reply.header("x-should-retry"), Some("false"));
    assert!(
        message(&reply).starts_with("upstream error: The API deployment for this resource does not exist"),
        "{}",
        reply.text
    );
    assert_eq!(MockAzure::of(&f.upstream).received().len(), 1, "a 404 is never retried");
    assert_eq!(f.gw.balance().await, 100_000_000, "nothing is billed");
}

#[tokio::test]
async fn an_api_version_azure_does_not_serve_is_a_final_400() {
    let f =
        fixture(Auth::ApiKey, "gpt41-prod", &[("api_version", "2019-01-01"), ("deployment", "gpt41-prod")], None).await;
    let reply = chat(&f).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(message(&reply), "upstream error: API version not supported");
    let seen = MockAzure::of(&f.upstream).received();
    assert_eq!(seen[0].query_param("api-version"), Some("2019-01-01"), "{seen:#?}");
}

#[tokio::test]
async fn an_entra_channel_never_sends_its_token_as_an_api_key() {
    // The resource takes keys; the channel is set up for Entra by mistake.
    let f =
        fixture(Auth::ApiKey, "gpt41-prod", &[("api_version", API_VERSION), ("deployment", "gpt41-prod")], None).await;
    let mut settings = HashMap::new();
    settings.insert("auth".to_owned(), "entra".to_owned());
    let channels = f.gw.admin().list_channels(pb::ListRequest::default()).await.expect("channel list").into_inner();
    let update = pb::UpdateChannelRequest {
        id: channels.items[0].id.clone(),
        settings: settings.into_iter().collect(),
        ..Default::default()
    };
    f.gw.admin().update_channel(update).await.expect("channel update");
    f.gw.synced().await;
    let reply = chat(&f).await;
    assert_eq!(reply.status, 401, "{}", reply.text);
    assert_eq!(reply.header("x-should-retry"), Some("false"));
    assert!(message(&reply).starts_with("upstream error: Access denied"), "{}", reply.text);
    assert!(!reply.text.contains(AZURE_KEY));
    let seen = MockAzure::of(&f.upstream).received();
    assert_eq!(seen[0].api_key, None, "{seen:#?}");
}

// === other dialects and endpoints on an azure channel ===

#[tokio::test]
async fn a_messages_client_on_an_azure_channel_is_translated_and_billed_with_its_cached_tokens() {
    let f =
        fixture(Auth::ApiKey, "gpt41-prod", &[("api_version", API_VERSION), ("deployment", "gpt41-prod")], None).await;
    let body = json!({ "model": MODEL, "max_tokens": 100, "messages": [{ "role": "user", "content": "hi" }] });
    let url = format!("http://{}/v1/messages", f.gw.cluster.data_planes[0].addr);
    let response =
        f.gw.cluster
            .http()
            .post(url)
            .header("x-api-key", &f.gw.key)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .expect("messages request");
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("messages JSON");
    assert_eq!(answer["type"], "message", "{answer}");
    assert_eq!(answer["content"][0]["text"], azure::REPLY, "{answer}");
    // The messages dialect counts cache reads apart from input_tokens.
    assert_eq!(answer["usage"]["input_tokens"], azure::PROMPT_TOKENS - azure::CACHED_TOKENS, "{answer}");
    assert_eq!(answer["usage"]["cache_read_input_tokens"], azure::CACHED_TOKENS, "{answer}");
    let seen = MockAzure::of(&f.upstream).received();
    assert_eq!(seen[0].path, "/openai/deployments/gpt41-prod/chat/completions", "{seen:#?}");
    let records = f.gw.wait_for_usage(1).await;
    assert_eq!(records[0]["endpoint"], "/v1/messages", "{}", records[0]);
    assert_eq!(records[0]["cached_tokens"], azure::CACHED_TOKENS, "{}", records[0]);
    assert_eq!(records[0]["cost_micros"].as_i64(), Some(CHAT_COST_MICROS), "{}", records[0]);
}

#[tokio::test]
async fn embeddings_on_an_azure_channel_go_to_the_deployments_embeddings_url() {
    let f =
        fixture(Auth::ApiKey, "embed-prod", &[("api_version", API_VERSION), ("deployment", "embed-prod")], None).await;
    let embedding = pb::Model {
        id: "text-embedding-3-small".into(),
        category: "embedding".into(),
        input_price_micros: 20_000,
        ..Default::default()
    };
    f.gw.admin().create_model(embedding).await.expect("model create");
    let channels = f.gw.admin().list_channels(pb::ListRequest::default()).await.expect("channel list").into_inner();
    let update = pb::UpdateChannelRequest {
        id: channels.items[0].id.clone(),
        models: vec![MODEL.into(), "text-embedding-3-small".into()],
        set_models: true,
        ..Default::default()
    };
    f.gw.admin().update_channel(update).await.expect("channel update");
    f.gw.synced().await;
    let body = json!({ "model": "text-embedding-3-small", "input": ["one", "two"] });
    let reply = f.gw.post(0, "/v1/embeddings", Some(&f.gw.key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["data"].as_array().map(Vec::len), Some(2), "{}", reply.text);
    let seen = MockAzure::of(&f.upstream).received();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(seen[0].path, "/openai/deployments/embed-prod/embeddings", "{seen:#?}");
    assert_eq!(seen[0].query_param("api-version"), Some(API_VERSION), "{seen:#?}");
    let records = f.gw.wait_for_usage(1).await;
    assert_eq!(records[0]["prompt_tokens"], 2 * azure::EMBEDDING_TOKENS_PER_INPUT, "{}", records[0]);
}
