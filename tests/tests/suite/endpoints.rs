//! The OpenAI endpoints besides chat, end to end: real Redis, the real
//! control plane and a data plane in-process, the official OpenAI Python
//! SDK as the client (`tests/sdk/openai_endpoints.py`), the mock upstream's
//! endpoints (`gw_tests::mock::endpoints`). Checks what came back (content,
//! schema), what reached the upstream (mapped models, usage options, files
//! byte for byte), and what was billed (usage records and the balance).

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::{self, Cluster, eventually},
    mock::endpoints::{self as mock, MockEndpoints, speech_bytes},
    mock::upstream::MockUpstream,
    redis::RedisServer,
    schema,
};
use serde_json::{Value, json};

const UPSTREAM_KEY: &str = "sk-upstream-endpoints-0123456789";
/// The account's starting balance, $10.
const START: i64 = 10_000_000;
const SPEECH_INPUT: &str = "Hello from the gateway test";

/// The catalogue: (model, category, prices in µ$ per 1M tokens, per
/// request, per second and per image).
fn models() -> [pb::Model; 9] {
    let model = |id: &str, category: &str| pb::Model { id: id.into(), category: category.into(), ..Default::default() };
    [
        pb::Model {
            input_price_micros: 1_500_000,
            output_price_micros: 2_000_000,
            ..model("gpt-3.5-turbo-instruct", "completion")
        },
        pb::Model {
            input_price_micros: 2_000_000,
            output_price_micros: 8_000_000,
            cached_price_micros: 500_000,
            ..model("gpt-4.1-mini", "chat")
        },
        pb::Model { input_price_micros: 20_000, ..model("text-embedding-3-small", "embedding") },
        pb::Model { request_price_micros: 100, ..model("omni-moderation-latest", "moderation") },
        pb::Model {
            image_price_micros: 40_000,
            input_price_micros: 5_000_000,
            output_price_micros: 40_000_000,
            ..model("gpt-image-1", "image")
        },
        pb::Model { second_price_micros: 100, ..model("whisper-1", "audio") },
        pb::Model {
            input_price_micros: 2_500_000,
            output_price_micros: 10_000_000,
            ..model("gpt-4o-transcribe", "audio")
        },
        pb::Model { input_price_micros: 15_000_000, ..model("tts-1", "speech") },
        pb::Model { input_price_micros: 2_500_000, output_price_micros: 10_000_000, ..model("gpt-4o", "chat") },
    ]
}

/// A channel named `name` to `base_url` serving `models` to `default`.
fn channel(name: &str, base_url: String, models: Vec<String>) -> pb::Channel {
    pb::Channel {
        name: name.into(),
        r#type: "openai".into(),
        base_url,
        api_key: UPSTREAM_KEY.into(),
        has_key: true,
        models,
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    }
}

/// An account with `START` in `default` and a token bounded only by it:
/// (token id, key).
async fn customer(cluster: &Cluster) -> (String, String) {
    let mut admin = cluster.admin();
    let account = pb::CreateAccountRequest {
        name: "acme".into(),
        balance_micros: START,
        groups: vec!["default".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account").into_inner().id;
    let token =
        pb::CreateTokenRequest { account_id: account, group: "default".into(), unlimited: true, ..Default::default() };
    let created = admin.create_token(token).await.expect("token create").into_inner();
    (created.token.unwrap_or_default().id, created.key)
}

/// (endpoint, model, cost in µ$, estimated) of every call the script makes.
fn expected_charges(audio_len: usize) -> Vec<(String, String, i64, bool)> {
    // 11 prompt at $1.5/M + 7 completion at $2/M = 30.5 µ$ → 31.
    let completion = 31;
    // (21 - 5) * 2 + 5 * 0.5 + 9 * 8 = 106.5 → 107.
    let response = 107;
    // 300 * 2 + 40 * 8.
    let compact = 920;
    // 2 inputs * 6 tokens * $0.02/M = 0.24 → 1.
    let embeddings = 1;
    // 2 images * $0.04 + 12 in * $5/M + 128 out * $40/M.
    let images = 80_000 + 60 + 5_120;
    let edit = 40_000 + 60 + 2_560;
    // 3.5 s at $0.0001/s.
    let whisper = 350;
    // 40 in * 2.5 + 10 out * 10.
    let transcribe_tokens = 200;
    // No duration reported: 40,000 bytes at 16 kB/s = 2.5 s at $0.0001/s.
    assert_eq!(audio_len, 40_000);
    let translation = 250;
    // 27 characters at $15 per 1M characters.
    let speech = SPEECH_INPUT.chars().count() as i64 * 15;
    let row = |endpoint: &str, model: &str, cost: i64, estimated: bool| {
        (endpoint.to_owned(), model.to_owned(), cost, estimated)
    };
    let mut rows = vec![
        row("/v1/completions", "gpt-3.5-turbo-instruct", completion, false),
        row("/v1/completions", "gpt-3.5-turbo-instruct", completion, false),
        row("/v1/responses", "gpt-4.1-mini", response, false),
        row("/v1/responses", "gpt-4.1-mini", response, false),
        row("/v1/responses/compact", "gpt-4.1-mini", compact, false),
        row("/v1/embeddings", "text-embedding-3-small", embeddings, false),
        row("/v1/moderations", "omni-moderation-latest", 100, false),
        row("/v1/images/generations", "gpt-image-1", images, false),
        row("/v1/images/edits", "gpt-image-1", edit, false),
        row("/v1/audio/transcriptions", "whisper-1", whisper, false),
        row("/v1/audio/transcriptions", "gpt-4o-transcribe", transcribe_tokens, false),
        row("/v1/audio/translations", "whisper-1", translation, true),
        row("/v1/audio/speech", "tts-1", speech, false),
    ];
    rows.sort();
    rows
}

/// A PNG signature and bytes that are not text.
fn image() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend((0..4096u32).map(|i| (i * 7 % 256) as u8));
    bytes
}

/// 40,000 bytes of "MP3": an ID3 header, then noise with CRLFs and dashes,
/// which a sloppy multipart parser would trip over.
fn audio() -> Vec<u8> {
    let mut bytes = b"ID3\x04\0\0\0\0\0\0".to_vec();
    let mut x: u32 = 7;
    while bytes.len() < 40_000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        if x.is_multiple_of(97) {
            bytes.extend_from_slice(b"\r\n--");
        } else {
            bytes.push((x >> 16) as u8);
        }
    }
    bytes.truncate(40_000);
    bytes
}

fn str_field(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap_or_else(|| panic!("no string {field:?} in {value}")).to_owned()
}

fn valid(schema_name: &str, value: &Value) {
    if let Err(error) = schema::validate(schema_name, value) {
        panic!("{schema_name} does not match: {error:#}\n{value:#}");
    }
}

#[tokio::test]
async fn the_openai_sdk_uses_every_endpoint_and_each_call_is_billed() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let endpoints = MockEndpoints::of(&upstream);
    let cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let mut admin = cluster.admin();
    for model in models() {
        admin.create_model(model).await.expect("model create");
    }
    let mut openai = channel("openai", upstream.base_url(), models().map(|m| m.id).to_vec());
    openai.model_map = [
        ("text-embedding-3-small".to_owned(), "text-embedding-3-small-v2".to_owned()),
        ("whisper-1".to_owned(), "whisper-large-v3".to_owned()),
    ]
    .into();
    admin.create_channel(openai).await.expect("channel create");
    let (token, key) = customer(&cluster).await;
    let account = admin.get_token(pb::GetRequest { id: token.clone() }).await.expect("token").into_inner().account_id;
    let models_url = format!("{}/models", cluster.base_url(0));
    eventually("the data plane to know the token", Duration::from_secs(10), || async {
        let response = cluster.http().get(&models_url).bearer_auth(&key).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let (image_path, audio_path, speech_path) =
        (dir.path().join("in.png"), dir.path().join("in.mp3"), dir.path().join("out.mp3"));
    std::fs::write(&image_path, image()).expect("write image");
    std::fs::write(&audio_path, audio()).expect("write audio");
    let base_url = cluster.base_url(0);
    let (image_file, audio_file, speech_file) =
        (image_path.to_string_lossy(), audio_path.to_string_lossy(), speech_path.to_string_lossy());
    let env = [
        ("GW_BASE_URL", base_url.as_str()),
        ("GW_API_KEY", key.as_str()),
        ("GW_IMAGE", &image_file),
        ("GW_AUDIO", &audio_file),
        ("GW_OUT", &speech_file),
        ("GW_SPEECH_INPUT", SPEECH_INPUT),
    ];
    let out = harness::sdk("openai_endpoints.py", &[], &env).await;

    // What came back, and its shape.
    assert_eq!(out["completion"]["text"], mock::REPLY);
    assert_eq!(out["completion"]["usage"]["prompt_tokens"], mock::COMPLETION_PROMPT_TOKENS);
    valid("CreateCompletionResponse", &out["completion"]["body"]);
    assert_eq!(out["completion_stream"]["text"], mock::REPLY);
    assert_eq!(out["completion_stream"]["usage_chunks"], 0, "the usage chunk the gateway asked for is withheld");
    assert_eq!(out["response"]["text"], mock::REPLY);
    assert_eq!(out["response"]["usage"]["input_tokens"], mock::RESPONSE_INPUT_TOKENS);
    valid("Response", &out["response"]["body"]);
    assert_eq!(out["response_stream"]["text"], mock::REPLY);
    assert_eq!(out["response_stream"]["final_text"], mock::REPLY);
    assert_eq!(out["response_stream"]["usage"]["output_tokens"], mock::RESPONSE_OUTPUT_TOKENS);
    assert_eq!(out["compact"]["object"], "response.compaction");
    valid("CompactResource", &out["compact"]["body"]);
    assert_eq!(out["embeddings"]["vectors"].as_array().map(Vec::len), Some(2));
    assert_eq!(out["embeddings"]["vectors"][1][0], json!(0.1));
    valid("CreateEmbeddingResponse", &out["embeddings"]["body"]);
    assert_eq!(out["moderation"]["flagged"], true);
    valid("CreateModerationResponse", &out["moderation"]["body"]);
    assert_eq!(out["images"]["b64"], json!([mock::IMAGE_B64, mock::IMAGE_B64]));
    valid("ImagesResponse", &out["images"]["body"]);
    assert_eq!(out["image_edit"]["b64"], json!([mock::IMAGE_B64]));
    valid("ImagesResponse", &out["image_edit"]["body"]);
    assert_eq!(out["transcription"]["text"], mock::TRANSCRIPT);
    valid("CreateTranscriptionResponseJson", &out["transcription"]["body"]);
    assert_eq!(out["transcription_tokens"]["body"]["usage"]["input_tokens"], mock::TRANSCRIBE_INPUT_TOKENS);
    valid("CreateTranscriptionResponseJson", &out["transcription_tokens"]["body"]);
    assert_eq!(out["translation"]["text"].as_str().map(str::trim), Some(mock::TRANSCRIPT));
    assert_eq!(out["speech"]["content_type"], "audio/mpeg");
    assert!(out["speech"]["chunks"].as_u64() > Some(1), "speech arrives in chunks: {}", out["speech"]);
    assert!(std::fs::read(&speech_path).expect("speech file") == speech_bytes(), "speech bytes differ");

    // What reached the upstream.
    let received = endpoints.received();
    assert!(received.iter().all(|r| r.authorization.as_deref() == Some(&format!("Bearer {UPSTREAM_KEY}")[..])));
    let streamed = received.iter().find(|r| r.path == "/v1/completions" && r.json["stream"] == true).expect("stream");
    assert_eq!(streamed.json["stream_options"]["include_usage"], true);
    let plain = endpoints.last("/v1/responses").expect("responses");
    assert!(plain.json.get("stream_options").is_none(), "responses bodies are not rewritten");
    assert_eq!(endpoints.last("/v1/embeddings").expect("embeddings").json["model"], "text-embedding-3-small-v2");
    let moderation = endpoints.last("/v1/moderations").expect("moderations");
    assert!(moderation.json.get("model").is_none(), "a defaulted moderation model is not added");
    let edit = endpoints.last("/v1/images/edits").expect("edit");
    assert_eq!((edit.field("model"), edit.field("prompt")), (Some("gpt-image-1"), Some("add a rainbow")));
    assert_eq!(edit.files.len(), 1);
    assert!(edit.files[0].bytes == image(), "the image arrived altered");
    let audio_calls: Vec<_> = received.iter().filter(|r| r.path.starts_with("/v1/audio/t")).collect();
    assert_eq!(audio_calls.len(), 3);
    for call in &audio_calls {
        assert!(call.files.len() == 1 && call.files[0].bytes == audio(), "the audio arrived altered ({})", call.path);
        assert_eq!(call.files[0].filename, "speech.mp3");
    }
    let models: Vec<_> = audio_calls.iter().map(|r| r.field("model").unwrap_or_default()).collect();
    assert_eq!(models, ["whisper-large-v3", "gpt-4o-transcribe", "whisper-large-v3"], "mapped in the form");
    assert_eq!(endpoints.last("/v1/audio/speech").expect("speech").json["input"], SPEECH_INPUT);

    // What was billed.
    let expected = expected_charges(audio().len());
    let records = eventually("13 usage records", Duration::from_secs(15), || async {
        let request = pb::ListUsageRequest { token_id: token.clone(), limit: 100, ..Default::default() };
        let records: Vec<Value> =
            admin.clone().list_usage(request).await.ok()?.into_inner().items.iter().map(harness::json).collect();
        (records.len() == expected.len()).then_some(records)
    })
    .await;
    let mut charged: Vec<_> = records
        .iter()
        .map(|r| {
            (
                str_field(r, "endpoint"),
                str_field(r, "model"),
                r["cost_micros"].as_i64().unwrap_or(-1),
                r["estimated"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    charged.sort();
    assert_eq!(charged, expected, "{records:#?}");
    let speech = records.iter().find(|r| r["endpoint"] == "/v1/audio/speech").expect("speech record");
    assert_eq!(speech["prompt_tokens"], SPEECH_INPUT.chars().count(), "characters are the speech's prompt units");
    let total: i64 = expected.iter().map(|(_, _, cost, _)| cost).sum();
    eventually("the balance to reflect every call", Duration::from_secs(15), || async {
        let account = admin.clone().get_account(pb::GetRequest { id: account.clone() }).await.ok()?.into_inner();
        (account.balance_micros == START - total).then_some(())
    })
    .await;
}

#[tokio::test]
async fn refusals_follow_the_chat_pipeline() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let mut admin = cluster.admin();
    let whisper =
        pb::Model { id: "whisper-1".into(), category: "chat".into(), second_price_micros: 100, ..Default::default() };
    admin.create_model(whisper).await.expect("model");
    admin.create_channel(channel("c", upstream.base_url(), vec!["whisper-1".into()])).await.expect("channel");
    let (_, key) = customer(&cluster).await;
    let base = cluster.base_url(0);
    let post = |path: &str, body: Value, key: Option<&str>| {
        let mut request = cluster.http().post(format!("{base}{path}")).json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    eventually("the data plane to know the token", Duration::from_secs(10), || async {
        let r = post("/embeddings", json!({"model": "nope", "input": "x"}), Some(&key)).await.ok()?;
        (r.status() == 404).then_some(())
    })
    .await;
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(post("/completions", json!({"model": "whisper-1"}), None).await.expect("send")), 401);
    assert_eq!(status(post("/embeddings", json!({"input": "x"}), Some(&key)).await.expect("send")), 400);
    let moderation = post("/moderations", json!({"input": "x"}), Some(&key)).await.expect("send");
    let message =
        moderation.json::<Value>().await.expect("json")["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.starts_with("模型不存在: omni-moderation-latest"), "{message}");
    let big = "x".repeat(33 << 20);
    let response = cluster
        .http()
        .post(format!("{base}/audio/transcriptions"))
        .bearer_auth(&key)
        .multipart(reqwest::multipart::Form::new().text("model", "whisper-1").text("pad", big))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 413);
}
