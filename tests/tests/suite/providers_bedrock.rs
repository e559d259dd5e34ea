//! Bedrock channels against a Bedrock mock (`tests/mock/bedrock_mock.py`)
//! that checks every SigV4 signature with botocore's signer, an
//! implementation independent of the gateway's: chat and messages clients
//! (and responses and Gemini ones) reach a Claude model through `invoke` (messages bodies with Bedrock's
//! `anthropic_version`, passed through for messages clients) and another
//! model through `converse`, streamed (AWS event streams, re-framed as the
//! client's SSE) and not, with tools; SigV4 with and without a session
//! token, Bedrock API keys, a model ARN, exact billing of cache reads and
//! writes, and a wrong secret refused by the upstream.

use crate::support;

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{bedrock_mock::BedrockMock, harness::eventually};
use serde_json::{Value, json};
use support::{Gateway, Reply};

const REGION: &str = "us-east-1";
const AKID: &str = "AKIDBEDROCKTEST01";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const TEMP_AKID: &str = "ASIABEDROCKTEMP01";
const TEMP_SECRET: &str = "tEmPoRaRy/SeCrEt+KeY0123456789abcdefABCD";
const TOKEN: &str = "FwoGZXIvYXdzEBYaDEXAMPLESESSIONTOKEN/+=";
const API_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl";

const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const NOVA: &str = "amazon.nova-pro-v1:0";
const ARN: &str =
    "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/us.anthropic.claude-3-haiku-20240307-v1:0";
const REPLY: &str = "Hello from Bedrock";
/// Models whose streams the mock breaks with a `throttlingException` frame.
const FLAKY_CLAUDE: &str = "us.anthropic.claude-exception-v1:0";
const FLAKY_NOVA: &str = "amazon.nova-exception-v1:0";

/// The gateway's models and the Bedrock ids the channel maps them to.
const MODELS: [(&str, &str); 5] = [
    ("claude", CLAUDE),
    ("nova", NOVA),
    ("haiku-arn", ARN),
    ("flaky-claude", FLAKY_CLAUDE),
    ("flaky-nova", FLAKY_NOVA),
];

/// The mock bills every answer 11 uncached prompt tokens, 20 cache reads,
/// 30 cache writes (5 minutes) and 7 completion tokens. At $3 / $15 per 1M,
/// reads $0.30 and writes $3.75: 33 + 6 + 112.5 + 105 = 256.5, rounded up.
const COST: i64 = 257;

/// A gateway with the `claude`, `nova` and `haiku-arn` models and a
/// bedrock channel serving them from `mock` with `key` and `settings`.
async fn gateway(mock: &BedrockMock, key: &str, settings: &[(&str, &str)]) -> Gateway {
    let gw = Gateway::start(1).await;
    for (model, _) in MODELS {
        let model = pb::Model {
            id: model.into(),
            category: "chat".into(),
            input_price_micros: 3_000_000,
            output_price_micros: 15_000_000,
            cached_price_micros: 300_000,
            cache_write_5m_price_micros: 3_750_000,
            ..Default::default()
        };
        gw.admin().create_model(model).await.expect("model create");
    }
    channel(&gw, "bedrock", &mock.base_url(), &[key], settings).await;
    gw.synced().await;
    gw
}

/// Creates a bedrock channel `name` with the key pool `keys`.
async fn channel(gw: &Gateway, name: &str, base_url: &str, keys: &[&str], settings: &[(&str, &str)]) -> String {
    let mut settings: std::collections::HashMap<String, String> =
        settings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    settings.entry("region".into()).or_insert_with(|| REGION.into());
    let channel = pb::Channel {
        name: name.into(),
        r#type: "bedrock".into(),
        base_url: base_url.into(),
        api_key: keys[0].into(),
        has_key: true,
        models: MODELS.iter().map(|(model, _)| (*model).to_owned()).collect(),
        model_map: MODELS.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect(),
        groups: vec!["default".into()],
        weight: 1,
        settings,
        ..Default::default()
    };
    let id = gw.admin().create_channel(channel).await.expect("channel create").into_inner().id;
    for key in &keys[1..] {
        let request = pb::AddChannelKeyRequest { channel_id: id.clone(), key: (*key).into() };
        gw.admin().add_channel_key(request).await.expect("add key");
    }
    id
}

fn mock_config() -> Value {
    json!({
        "region": REGION,
        "credentials": {AKID: {"secret": SECRET, "token": null}, TEMP_AKID: {"secret": TEMP_SECRET, "token": TOKEN}},
        "api_keys": [API_KEY],
    })
}

/// POSTs `body` to `path` with the gateway token as a messages client
/// (`x-api-key`, `anthropic-version`, an `anthropic-beta`) or a chat
/// client (bearer).
async fn post(gw: &Gateway, path: &str, body: &Value) -> Reply {
    let url = format!("http://{}{path}", gw.cluster.data_planes[0].addr);
    let mut request = gw.cluster.http().post(url).json(body);
    if path.starts_with("/v1/messages") {
        request = request
            .header("x-api-key", &gw.key)
            .header("anthropic-version", "2023-06-01")
            .header("anthropic-beta", "token-efficient-tools-2025-02-19");
    } else {
        request = request.bearer_auth(&gw.key);
    }
    let response = request.send().await.expect("request to the data plane");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Reply { status, headers, text: response.text().await.unwrap_or_default() }
}

fn weather_tool_messages() -> Value {
    json!([{"name": "weather", "description": "forecast", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])
}

fn weather_tool_chat() -> Value {
    json!([{"type": "function", "function": {"name": "weather", "description": "forecast", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
}

fn messages_body(model: &str, stream: bool, tools: bool) -> Value {
    let mut body = json!({
        "model": model, "max_tokens": 100, "stream": stream,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    });
    if tools {
        body["tools"] = weather_tool_messages();
    }
    body
}

fn chat_body(model: &str, stream: bool, tools: bool) -> Value {
    let mut body = json!({
        "model": model, "stream": stream, "max_tokens": 100,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather in Paris?"}],
    });
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if tools {
        body["tools"] = weather_tool_chat();
    }
    body
}

/// Each SSE event's `data:` JSON.
fn sse(text: &str) -> Vec<Value> {
    text.lines().filter_map(|l| l.strip_prefix("data:")).filter_map(|d| serde_json::from_str(d.trim()).ok()).collect()
}

/// A streamed messages answer's text, tool inputs and final usage.
fn messages_stream(text: &str) -> (String, String, Value) {
    let (mut answer, mut input, mut usage) = (String::new(), String::new(), json!({}));
    for event in sse(text) {
        match event["type"].as_str() {
            Some("message_start") => usage = event["message"]["usage"].clone(),
            Some("content_block_delta") => {
                answer.push_str(event["delta"]["text"].as_str().unwrap_or_default());
                input.push_str(event["delta"]["partial_json"].as_str().unwrap_or_default());
            }
            Some("message_delta") => {
                if let Some(fields) = event["usage"].as_object() {
                    for (k, v) in fields {
                        usage[k] = v.clone();
                    }
                }
            }
            _ => {}
        }
    }
    (answer, input, usage)
}

/// A streamed chat answer's text, tool call (name and arguments) and usage.
fn chat_stream(text: &str) -> (String, String, String, Value) {
    let (mut answer, mut name, mut arguments, mut usage) = (String::new(), String::new(), String::new(), Value::Null);
    for chunk in sse(text) {
        let delta = &chunk["choices"][0]["delta"];
        answer.push_str(delta["content"].as_str().unwrap_or_default());
        if let Some(call) = delta["tool_calls"].get(0) {
            name.push_str(call["function"]["name"].as_str().unwrap_or_default());
            arguments.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
    }
    (answer, name, arguments, usage)
}

/// Waits for `n` usage records and checks each billed the mock's counts
/// exactly.
async fn billed_exactly(gw: &Gateway, n: usize) {
    let records = gw.wait_for_usage(n).await;
    for record in &records {
        assert!(!record["estimated"].as_bool().unwrap_or(false), "{record}");
        assert_eq!(record["prompt_tokens"].as_i64(), Some(61), "{record}");
        assert_eq!(record["completion_tokens"].as_i64(), Some(7), "{record}");
        assert_eq!(record["cached_tokens"].as_i64(), Some(20), "{record}");
        assert_eq!(record["cache_write_5m_tokens"].as_i64(), Some(30), "{record}");
        assert_eq!(record["cost_micros"].as_i64(), Some(COST), "{record}");
    }
    let want = 100_000_000 - COST * i64::try_from(n).unwrap_or(0);
    eventually("the balance to drop by the usage billed", Duration::from_secs(15), || async {
        (gw.balance().await == want).then_some(())
    })
    .await;
}

#[tokio::test]
async fn messages_and_chat_clients_reach_claude_through_signed_invoke_calls() {
    let mock = BedrockMock::start(&mock_config()).await.expect("bedrock mock");
    let gw = gateway(&mock, &format!("{AKID}:{SECRET}"), &[]).await;

    let reply = post(&gw, "/v1/messages", &messages_body("claude", false, true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let answer = reply.json();
    assert_eq!(answer["content"][0]["text"], REPLY, "{answer}");
    assert_eq!(answer["content"][1]["name"], "weather", "{answer}");
    assert_eq!(answer["stop_reason"], "tool_use");
    assert_eq!(answer["usage"]["cache_read_input_tokens"], 20, "passed through as Bedrock sent it");

    let reply = post(&gw, "/v1/messages", &messages_body("claude", true, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.header("content-type").unwrap_or_default().starts_with("text/event-stream"));
    let (text, _, usage) = messages_stream(&reply.text);
    assert_eq!(text, REPLY, "{}", reply.text);
    assert_eq!((usage["input_tokens"].as_i64(), usage["output_tokens"].as_i64()), (Some(11), Some(7)), "{usage}");

    let reply = post(&gw, "/v1/chat/completions", &chat_body("claude", false, true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let answer = reply.json();
    assert_eq!(answer["choices"][0]["message"]["content"], REPLY, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "weather", "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(answer["usage"]["prompt_tokens"], 61, "{answer}");

    let reply = post(&gw, "/v1/chat/completions", &chat_body("claude", true, true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (text, name, arguments, usage) = chat_stream(&reply.text);
    assert_eq!((text.as_str(), name.as_str()), (REPLY, "weather"), "{}", reply.text);
    assert_eq!(serde_json::from_str::<Value>(&arguments).ok(), Some(json!({"city": "Paris"})));
    assert_eq!(usage["prompt_tokens"], 61, "{}", reply.text);

    let requests = mock.requests().await;
    assert_eq!(requests.len(), 4, "{requests:?}");
    let path = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0";
    let operations = ["invoke", "invoke-with-response-stream", "invoke", "invoke-with-response-stream"];
    for (request, operation) in requests.iter().zip(operations) {
        assert_eq!(request["refused"], false, "botocore's signature matched: {request}");
        assert_eq!(request["path"], format!("{path}/{operation}"));
        assert_eq!(request["body"]["anthropic_version"], "bedrock-2023-05-31", "{request}");
        assert!(request["body"].get("model").is_none() && request["body"].get("stream").is_none(), "{request}");
        assert!(request["headers"].get("x-amz-security-token").is_none(), "{request}");
        assert!(request["headers"]["authorization"].as_str().unwrap_or_default().contains(&format!("{AKID}/")));
    }
    assert_eq!(requests[0]["body"]["anthropic_beta"], json!(["token-efficient-tools-2025-02-19"]));
    assert_eq!(requests[2]["body"]["system"], "Be brief.", "chat translated to messages: {}", requests[2]);

    billed_exactly(&gw, 4).await;
}

#[tokio::test]
async fn other_models_go_through_converse_with_temporary_credentials() {
    let mock = BedrockMock::start(&mock_config()).await.expect("bedrock mock");
    let gw = gateway(&mock, &format!("{TEMP_AKID}:{TEMP_SECRET}:{TOKEN}"), &[]).await;

    let reply = post(&gw, "/v1/chat/completions", &chat_body("nova", false, true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let answer = reply.json();
    assert_eq!(answer["choices"][0]["message"]["content"], REPLY, "{answer}");
    let call = &answer["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "weather", "{answer}");
    assert_eq!(
        serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap_or("")).ok(),
        Some(json!({"city": "Paris"}))
    );
    assert_eq!(answer["usage"]["prompt_tokens"], 61, "{answer}");
    assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 20, "{answer}");

    let reply = post(&gw, "/v1/chat/completions", &chat_body("nova", true, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (text, _, _, usage) = chat_stream(&reply.text);
    assert_eq!(text, REPLY, "{}", reply.text);
    assert_eq!(usage["completion_tokens"], 7, "{}", reply.text);
    assert!(reply.text.trim_end().ends_with("data: [DONE]"), "{}", reply.text);

    let reply = post(&gw, "/v1/messages", &messages_body("nova", false, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let answer = reply.json();
    assert_eq!(answer["content"][0]["text"], REPLY, "{answer}");
    assert_eq!(
        (answer["usage"]["input_tokens"].as_i64(), answer["usage"]["cache_read_input_tokens"].as_i64()),
        (Some(11), Some(20)),
        "{answer}"
    );

    let reply = post(&gw, "/v1/messages", &messages_body("nova", true, true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (text, input, _) = messages_stream(&reply.text);
    assert_eq!(text, REPLY, "{}", reply.text);
    assert_eq!(serde_json::from_str::<Value>(&input).ok(), Some(json!({"city": "Paris"})), "{}", reply.text);
    assert!(reply.text.contains("event: message_stop"), "{}", reply.text);

    let requests = mock.requests().await;
    assert_eq!(requests.len(), 4, "{requests:?}");
    let operations = ["converse", "converse-stream", "converse", "converse-stream"];
    for (request, operation) in requests.iter().zip(operations) {
        assert_eq!(request["refused"], false, "botocore's signature matched: {request}");
        assert_eq!(request["path"], format!("/model/amazon.nova-pro-v1%3A0/{operation}"));
        assert_eq!(request["headers"]["x-amz-security-token"], TOKEN, "{request}");
        assert!(request["body"].get("model").is_none(), "{request}");
    }
    let first = &requests[0]["body"];
    assert_eq!(first["system"], json!([{"text": "Be brief."}]), "{first}");
    assert_eq!(first["inferenceConfig"]["maxTokens"], 100, "{first}");
    assert_eq!(first["toolConfig"]["tools"][0]["toolSpec"]["name"], "weather", "{first}");
    assert_eq!(first["messages"][0]["content"][0]["text"], "What is the weather in Paris?", "{first}");

    billed_exactly(&gw, 4).await;
}

#[tokio::test]
async fn an_api_key_goes_as_a_bearer_token_and_an_arn_is_one_path_segment() {
    let mock = BedrockMock::start(&mock_config()).await.expect("bedrock mock");
    let gw = gateway(&mock, API_KEY, &[("auth", "api-key")]).await;

    let reply = post(&gw, "/v1/messages", &messages_body("haiku-arn", false, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["content"][0]["text"], REPLY);
    let reply = post(&gw, "/v1/messages", &messages_body("haiku-arn", true, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(messages_stream(&reply.text).0, REPLY, "{}", reply.text);

    let requests = mock.requests().await;
    assert_eq!(requests.len(), 2, "{requests:?}");
    for request in &requests {
        assert_eq!(request["refused"], false, "{request}");
        assert_eq!(request["model"], ARN, "the ARN arrived whole");
        assert!(
            request["path"].as_str().unwrap_or_default().starts_with(
                "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fus.anthropic."
            ),
            "{request}"
        );
        assert_eq!(request["headers"]["authorization"], format!("Bearer {API_KEY}"));
        assert!(request["headers"].get("x-amz-date").is_none(), "not signed: {request}");
    }
    billed_exactly(&gw, 2).await;
}

#[tokio::test]
async fn a_wrong_secret_is_the_upstreams_clear_403_and_a_pool_moves_on_to_its_next_key() {
    let mock = BedrockMock::start(&mock_config()).await.expect("bedrock mock");
    let wrong = format!("{AKID}:not-the-secret");
    let gw = gateway(&mock, &wrong, &[]).await;

    let reply = post(&gw, "/v1/chat/completions", &chat_body("nova", false, false)).await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    let message = reply.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.starts_with("upstream error: The request signature we calculated does not match"), "{message}");
    assert!(!message.contains("not-the-secret"), "{message}");
    let requests = mock.requests().await;
    assert_eq!((requests.len(), requests[0]["refused"].as_bool()), (1, Some(true)), "{requests:?}");

    // A pooled channel whose first key is wrong moves on to the next.
    let good = format!("{AKID}:{SECRET}");
    channel(&gw, "pool", &mock.base_url(), &[&wrong, &good], &[]).await;
    let admin_list = gw.admin().list_channels(pb::ListRequest::default()).await.expect("channels").into_inner();
    for old in admin_list.items.iter().filter(|c| c.name == "bedrock") {
        let request =
            pb::UpdateChannelRequest { id: old.id.clone(), status: Some("disabled".into()), ..Default::default() };
        gw.admin().update_channel(request).await.expect("disable");
    }
    gw.synced().await;
    for _ in 0..3 {
        let reply = post(&gw, "/v1/chat/completions", &chat_body("nova", false, false)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.json()["choices"][0]["message"]["content"], REPLY);
    }
    let requests = mock.requests().await;
    let signed_right = requests[1..].iter().filter(|r| r["refused"] == false).count();
    assert_eq!(signed_right, 3, "{requests:?}");
}

#[tokio::test]
async fn an_exception_mid_stream_reaches_the_client_as_an_error_in_its_dialect() {
    let mock = BedrockMock::start(&mock_config()).await.expect("bedrock mock");
    let gw = gateway(&mock, &format!("{AKID}:{SECRET}"), &[]).await;

    // invoke-with-response-stream to a messages client, passed through.
    let reply = post(&gw, "/v1/messages", &messages_body("flaky-claude", true, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let events = sse(&reply.text);
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(last["type"], "error", "{}", reply.text);
    assert_eq!(last["error"]["type"], "rate_limit_error", "{}", reply.text);
    assert!(last["error"]["message"].as_str().unwrap_or_default().contains("Too many requests"), "{last}");
    assert!(!reply.text.contains("message_stop"), "{}", reply.text);

    // converse-stream to a chat client, translated.
    let reply = post(&gw, "/v1/chat/completions", &chat_body("flaky-nova", true, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.text.contains("Too many requests"), "{}", reply.text);
    assert!(!reply.text.contains("[DONE]"), "a failed stream does not end cleanly: {}", reply.text);
    assert_eq!(mock.requests().await.len(), 2);
}

/// POSTs a Gemini `generateContent` (or, with `stream`, an SSE
/// `streamGenerateContent`) for `model` with the token as `x-goog-api-key`.
async fn gemini(gw: &Gateway, model: &str, stream: bool) -> Reply {
    let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
    let url = format!("http://{}/v1beta/models/{model}:{method}", gw.cluster.data_planes[0].addr);
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "What is the weather in Paris?"}]}]});
    let response =
        gw.cluster.http().post(url).header("x-goog-api-key", &gw.key).json(&body).send().await.expect("gemini call");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Reply { status, headers, text: response.text().await.unwrap_or_default() }
}

#[tokio::test]
async fn responses_and_gemini_clients_reach_both_bedrock_apis() {
    let mock = BedrockMock::start(&mock_config()).await.expect("bedrock mock");
    let gw = gateway(&mock, &format!("{AKID}:{SECRET}"), &[]).await;

    for model in ["claude", "nova"] {
        let body = json!({"model": model, "input": "What is the weather in Paris?", "max_output_tokens": 100});
        let reply = post(&gw, "/v1/responses", &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let answer = reply.json();
        let text = answer["output"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
            .filter_map(|part| part["text"].as_str().map(str::to_owned))
            .collect::<String>();
        assert_eq!(text, REPLY, "{answer}");
        assert_eq!(answer["usage"]["input_tokens"], 61, "{answer}");

        let reply = gemini(&gw, model, false).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let answer = reply.json();
        assert_eq!(answer["candidates"][0]["content"]["parts"][0]["text"], REPLY, "{answer}");
        assert_eq!(answer["usageMetadata"]["promptTokenCount"], 61, "{answer}");
        assert_eq!(answer["usageMetadata"]["cachedContentTokenCount"], 20, "{answer}");

        let reply = gemini(&gw, model, true).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let chunks = sse(&reply.text);
        let text: String = chunks
            .iter()
            .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(text, REPLY, "{}", reply.text);
    }
    let operations: Vec<String> =
        mock.requests().await.iter().map(|r| r["operation"].as_str().unwrap_or_default().to_owned()).collect();
    let want = ["invoke", "invoke", "invoke-with-response-stream", "converse", "converse", "converse-stream"];
    assert_eq!(operations, want);
    billed_exactly(&gw, 6).await;
}

#[tokio::test]
async fn a_channel_made_with_gwctls_aws_flags_signs_with_its_session_token() {
    let mock = BedrockMock::start(&mock_config()).await.expect("bedrock mock");
    let gw = Gateway::start(1).await;
    let model = pb::Model {
        id: "nova".into(),
        category: "chat".into(),
        input_price_micros: 3_000_000,
        output_price_micros: 15_000_000,
        cached_price_micros: 300_000,
        cache_write_5m_price_micros: 3_750_000,
        ..Default::default()
    };
    gw.admin().create_model(model).await.expect("model create");
    let secret_file = gw.cluster.dir().join("aws-secret");
    let token_file = gw.cluster.dir().join("aws-token");
    std::fs::write(&secret_file, format!("{TEMP_SECRET}\n")).expect("secret file");
    std::fs::write(&token_file, TOKEN).expect("token file");
    let (secret_path, token_path) = (secret_file.display().to_string(), token_file.display().to_string());
    let map = format!("nova={NOVA}");
    let base_url = mock.base_url();
    let args = [
        "channel",
        "create",
        "--name",
        "aws",
        "--type",
        "bedrock",
        "--base-url",
        &base_url,
        "--region",
        REGION,
        "--access-key-id",
        TEMP_AKID,
        "--secret-access-key-file",
        &secret_path,
        "--session-token-file",
        &token_path,
        "--models",
        "nova",
        "--map",
        &map,
        "-o",
        "json",
    ];
    let created = gw.cluster.gwctl(&args).await.expect("gwctl channel create");
    assert!(!created.to_string().contains(TEMP_SECRET) && !created.to_string().contains(TOKEN), "{created}");
    gw.synced().await;

    let reply = post(&gw, "/v1/chat/completions", &chat_body("nova", true, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(chat_stream(&reply.text).0, REPLY, "{}", reply.text);
    let requests = mock.requests().await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["refused"], false, "{}", requests[0]);
    assert_eq!(requests[0]["headers"]["x-amz-security-token"], TOKEN);
    billed_exactly(&gw, 1).await;
}

#[tokio::test]
async fn tokens_are_counted_by_bedrocks_count_tokens_where_it_counts_and_here_otherwise() {
    let mock = BedrockMock::start(&mock_config()).await.expect("bedrock mock");
    let gw = gateway(&mock, &format!("{AKID}:{SECRET}"), &[]).await;
    let body = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "count me please"}]});

    let reply = post(&gw, "/v1/messages/count_tokens", &body("claude")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    // The mock counts a token per four characters of the messages as
    // Python writes them.
    let counted = r#"[{"role": "user", "content": "count me please"}]"#.len() / 4;
    assert_eq!(reply.json()["input_tokens"], counted, "Bedrock's count, not ours");
    let requests = mock.requests().await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["operation"], "count-tokens");
    assert_eq!(requests[0]["refused"], false, "signed: {}", requests[0]);
    assert_eq!(requests[0]["model"], "anthropic.claude-sonnet-4-5-20250929-v1:0", "the foundation model, no profile");

    // An ARN names no foundation model: counted here, Bedrock not asked.
    let reply = post(&gw, "/v1/messages/count_tokens", &body("haiku-arn")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.json()["input_tokens"].as_i64().is_some_and(|n| n > 0), "{}", reply.text);
    assert_eq!(mock.requests().await.len(), 1, "no second call");
    let usage = pb::ListUsageRequest { limit: 10, ..Default::default() };
    let records = gw.admin().list_usage(usage).await.expect("usage").into_inner().items;
    assert!(records.is_empty(), "counting is free: {records:?}");
}
