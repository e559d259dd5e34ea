//! Files and batches end to end: real Redis, the real control plane and two
//! data planes in-process, the official OpenAI and Anthropic Python SDKs as
//! clients (`tests/sdk/openai_batches.py`, `tests/sdk/anthropic_batches.py`)
//! and the mock upstream's files, batches and message batches.

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::{self, Cluster, eventually},
    mock::batches::{LINE_COMPLETION_TOKENS, LINE_PROMPT_TOKENS, MockBatches},
    mock::upstream::MockUpstream,
    redis::RedisServer,
};
use serde_json::Value;

const OPENAI_MODEL: &str = "gpt-4o-mini";
const UPSTREAM_MODEL: &str = "gpt-4o-mini-2024-07-18";
const CLAUDE: &str = "claude-haiku-4-5";
/// $1 / $2 per 1M input / output tokens; a completed line (1000 in, 500
/// out) costs 2000 µ$ at the regular price, 1000 µ$ in a batch (half, the
/// default share).
const LINE_REGULAR_COST: i64 = LINE_PROMPT_TOKENS + 2 * LINE_COMPLETION_TOKENS;
const LINE_BATCH_COST: i64 = LINE_REGULAR_COST / 2;
/// The Claude model's batch share: a quarter.
const CLAUDE_BATCH_PPM: i64 = 250_000;
const START: i64 = 10_000_000;

struct Fixture {
    cluster: Cluster,
    batches: MockBatches,
    account: String,
    key: String,
    _upstream: MockUpstream,
    _redis: RedisServer,
}

/// A cluster on Redis whose batch poller runs every 200 ms; a chat model
/// at $1/$2 on an `openai` channel (which maps its name) and a Claude model
/// at the same prices (a quarter in batches) on an `anthropic` channel, both to the mock; an
/// account with $10 and a token.
async fn setup() -> Fixture {
    setup_in(harness::Mode::InProcess).await
}

/// `setup`, with the control plane and data planes run in `mode`.
async fn setup_in(mode: harness::Mode) -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let batches = MockBatches::of(&upstream);
    let cluster = Cluster::start_with(mode, &redis.url(), 2, |cp| {
        cp.batch.poll_interval = Duration::from_millis(200);
        cp.batch.refresh_after = Duration::from_millis(100);
    })
    .await
    .expect("cluster");
    let mut admin = cluster.admin();
    for (id, batch_price_ppm) in [(OPENAI_MODEL, 0), (CLAUDE, CLAUDE_BATCH_PPM)] {
        let model = pb::Model {
            id: id.into(),
            batch_price_ppm,
            category: "chat".into(),
            input_price_micros: 1_000_000,
            output_price_micros: 2_000_000,
            ..Default::default()
        };
        admin.create_model(model).await.expect("model");
    }
    let channel = |name: &str, kind: &str, model: &str| pb::Channel {
        name: name.into(),
        r#type: kind.into(),
        base_url: upstream.base_url(),
        api_key: format!("sk-upstream-{name}-0123456789"),
        has_key: true,
        models: vec![model.into()],
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    };
    let openai = pb::Channel {
        model_map: [(OPENAI_MODEL.to_owned(), UPSTREAM_MODEL.to_owned())].into(),
        ..channel("openai", "openai", OPENAI_MODEL)
    };
    admin.create_channel(openai).await.expect("openai channel");
    admin.create_channel(channel("anthropic", "anthropic", CLAUDE)).await.expect("anthropic channel");
    let (account, key) = customer(&cluster, "acme", START).await;
    for i in 0..2 {
        cluster.wait_until_served(i, &key).await;
    }
    Fixture { cluster, batches, account, key, _upstream: upstream, _redis: redis }
}

/// A new account with `balance` µ$ and an unlimited token: (account, key).
async fn customer(cluster: &Cluster, name: &str, balance: i64) -> (String, String) {
    let mut admin = cluster.admin();
    let account = pb::CreateAccountRequest {
        name: name.into(),
        balance_micros: balance,
        groups: vec!["default".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account create").into_inner().id;
    let token = pb::CreateTokenRequest {
        account_id: account.clone(),
        group: "default".into(),
        unlimited: true,
        ..Default::default()
    };
    let created = admin.create_token(token).await.expect("token create").into_inner();
    (account, created.key)
}

/// Runs `script action` against data plane `i` as `key`, with `env`.
async fn sdk(f: &Fixture, script: &str, action: &str, i: usize, key: &str, env: &[(&str, &str)]) -> Value {
    let base = if script.starts_with("anthropic") {
        f.cluster.base_url(i).trim_end_matches("/v1").to_owned()
    } else {
        f.cluster.base_url(i)
    };
    let mut all = vec![("GW_BASE_URL", base.as_str()), ("GW_API_KEY", key)];
    all.extend_from_slice(env);
    harness::sdk(script, &[action], &all).await
}

async fn balance(f: &Fixture, account: &str) -> i64 {
    let mut admin = f.cluster.admin();
    admin.get_account(pb::GetRequest { id: account.into() }).await.expect("account get").into_inner().balance_micros
}

/// Usage records of `account` whose request id starts with `prefix`.
async fn records(f: &Fixture, account: &str, prefix: &str) -> Vec<pb::UsageRecord> {
    let request = pb::ListUsageRequest { account_id: account.into(), limit: 100, ..Default::default() };
    let all = f.cluster.admin().list_usage(request).await.expect("usage list").into_inner().items;
    all.into_iter().filter(|r| r.request_id.starts_with(prefix)).collect()
}

/// Waits until the ledger shows `expected` for the test account, then lets
/// the poller sweep five more times (a sentinel batch of another account
/// that never ends shows its rounds) and checks that nothing moved.
async fn balance_settles_at(f: &Fixture, expected: i64) {
    eventually(&format!("the balance to be {expected}"), Duration::from_secs(20), || async {
        (balance(f, &f.account).await == expected).then_some(())
    })
    .await;
    let (_, key) = customer(&f.cluster, &format!("sentinel-{}", rand_suffix()), START).await;
    f.cluster.wait_until_served(0, &key).await;
    let created = sdk(f, "openai_batches.py", "create", 0, &key, &[("GW_MODEL", OPENAI_MODEL)]).await;
    assert!(created.get("batch").is_some(), "the sentinel batch: {created}");
    let before = f.batches.status_polls();
    eventually("five poller rounds", Duration::from_secs(20), || async {
        (f.batches.status_polls() >= before + 5).then_some(())
    })
    .await;
    assert_eq!(balance(f, &f.account).await, expected, "the ledger moved again");
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The upstream id of our batch `id` (what the admin API stores).
async fn upstream_id(f: &Fixture, id: &str, key: &str) -> String {
    let batch = sdk(f, "openai_batches.py", "retrieve", 1, key, &[("GW_BATCH", id)]).await;
    assert_eq!(batch["batch"]["id"], id, "our id, not the upstream's");
    let ids = f.batches.batch_ids();
    assert_eq!(ids.len(), 1, "one batch upstream: {ids:?}");
    ids[0].clone()
}

fn text(value: &Value, path: &[&str]) -> String {
    let found = path.iter().try_fold(value, |v, key| v.get(key));
    found.and_then(Value::as_str).unwrap_or_else(|| panic!("no string at {path:?} in {value}")).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_batch_is_billed_once_at_the_batch_price_when_it_completes() {
    let f = setup().await;
    let created = sdk(&f, "openai_batches.py", "create", 0, &f.key, &[("GW_MODEL", OPENAI_MODEL)]).await;
    let (file, batch) = (text(&created, &["file", "id"]), text(&created, &["batch", "id"]));
    assert!(file.starts_with("file-") && batch.starts_with("batch_"), "our ids: {created}");
    assert_eq!(created["file"]["purpose"], "batch");
    assert_eq!(created["batch"]["input_file_id"], file.as_str(), "the batch names our file");

    let uploads = f.batches.uploads();
    assert_eq!(uploads.len(), 1, "one upload reached the upstream");
    let sent = String::from_utf8_lossy(&uploads[0].2).into_owned();
    assert_eq!(sent.lines().count(), 3, "every line went up: {sent}");
    assert!(sent.lines().all(|l| l.contains(UPSTREAM_MODEL)), "the channel's model name went up: {sent}");
    let upstream = upstream_id(&f, &batch, &f.key).await;
    assert_eq!(f.batches.key_of(&upstream).as_deref(), Some("Bearer sk-upstream-openai-0123456789"));

    // The bound is held while the batch runs.
    let hold = records(&f, &f.account, "batch-hold:").await;
    assert_eq!(hold.len(), 1, "one hold");
    assert!(hold[0].cost_micros > 3 * LINE_BATCH_COST, "the hold covers the most the lines can cost: {hold:?}");
    assert_eq!(balance(&f, &f.account).await, START - hold[0].cost_micros);

    f.batches.finish(&upstream);
    balance_settles_at(&f, START - 3 * LINE_BATCH_COST).await;
    let billed = records(&f, &f.account, &format!("batch:{batch}")).await;
    assert_eq!(billed.len(), 1, "billed once: {billed:?}");
    assert_eq!(billed[0].cost_micros, 3 * LINE_BATCH_COST, "half the regular price of three lines");
    assert_eq!(
        (billed[0].prompt_tokens, billed[0].completion_tokens),
        (3 * LINE_PROMPT_TOKENS, 3 * LINE_COMPLETION_TOKENS)
    );
    assert_eq!(billed[0].endpoint, "/v1/batches");
    assert_eq!(records(&f, &f.account, "batch-release:").await.len(), 1, "the hold was released once");
    let listed = f.cluster.gwctl(&["batch", "list", "--account", &f.account]).await.expect("gwctl batch list");
    let listed = listed["items"].as_array().unwrap_or_else(|| panic!("a list: {listed}"));
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0]["id"].as_str(), listed[0]["settled"].as_bool()), (Some(batch.as_str()), Some(true)));
    assert_eq!(listed[0]["cost_micros"], 3 * LINE_BATCH_COST);
    assert_eq!(listed[0]["hold_micros"], hold[0].cost_micros);

    // The other data plane answers: completed, the output a file of ours.
    let done = sdk(&f, "openai_batches.py", "retrieve", 1, &f.key, &[("GW_BATCH", &batch)]).await;
    assert_eq!(done["batch"]["status"], "completed");
    let output = text(&done, &["batch", "output_file_id"]);
    assert!(output.starts_with("file-") && !output.contains("file-out"), "our id for the output: {output}");
    assert_eq!(done["output"].as_str().map(|o| o.lines().count()), Some(3), "the results download: {done}");
    assert_eq!(done["batches"], serde_json::json!([batch]));
    let files = done["files"].as_array().expect("files");
    assert!(files.contains(&Value::from(file.clone())) && files.contains(&Value::from(output.clone())), "{files:?}");
    // Listed by purpose: the upload, the results, and nothing of a purpose
    // no file has.
    let uploads = done["uploads"].as_array().expect("uploads");
    assert!(
        uploads.contains(&Value::from(file.clone())) && !uploads.contains(&Value::from(output.clone())),
        "{uploads:?}"
    );
    let outputs = done["outputs"].as_array().expect("outputs");
    assert!(
        outputs.contains(&Value::from(output.clone())) && !outputs.contains(&Value::from(file.clone())),
        "{outputs:?}"
    );
    assert_eq!(done["fine_tune"], serde_json::json!([]), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_batch_bills_only_its_completed_lines() {
    let f = setup().await;
    let env = [("GW_MODEL", OPENAI_MODEL), ("GW_LINES", "4")];
    let created = sdk(&f, "openai_batches.py", "create", 0, &f.key, &env).await;
    let batch = text(&created, &["batch", "id"]);
    let upstream = upstream_id(&f, &batch, &f.key).await;
    f.batches.set_done(&upstream, 1);
    let cancelled = sdk(&f, "openai_batches.py", "cancel", 1, &f.key, &[("GW_BATCH", &batch)]).await;
    assert!(["cancelling", "cancelled"].contains(&cancelled["batch"]["status"].as_str().unwrap_or("")), "{cancelled}");
    balance_settles_at(&f, START - LINE_BATCH_COST).await;
    let billed = records(&f, &f.account, &format!("batch:{batch}")).await;
    assert_eq!(billed.len(), 1);
    assert_eq!(
        (billed[0].cost_micros, billed[0].prompt_tokens),
        (LINE_BATCH_COST, LINE_PROMPT_TOKENS),
        "one line of four"
    );
    let done = sdk(&f, "openai_batches.py", "retrieve", 0, &f.key, &[("GW_BATCH", &batch)]).await;
    assert_eq!(done["batch"]["status"], "cancelled");
    assert_eq!(done["output"].as_str().map(|o| o.lines().count()), Some(1), "the completed line's answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_account_never_learns_a_file_or_batch_exists() {
    let f = setup().await;
    let created = sdk(&f, "openai_batches.py", "create", 0, &f.key, &[("GW_MODEL", OPENAI_MODEL)]).await;
    let (file, batch) = (text(&created, &["file", "id"]), text(&created, &["batch", "id"]));
    let (_, other) = customer(&f.cluster, "globex", START).await;
    f.cluster.wait_until_served(1, &other).await;
    let seen = sdk(&f, "openai_batches.py", "foreign", 1, &other, &[("GW_BATCH", &batch), ("GW_FILE", &file)]).await;
    for call in ["batch", "cancel", "file", "content", "delete"] {
        assert_eq!(seen[call], 404, "{call} of another account's: {seen}");
    }
    assert_eq!(seen["listed"], serde_json::json!([]), "nothing of another account is listed");
    assert!(f.batches.deleted().is_empty(), "nothing was deleted upstream");
    // The owner still has both, and deletes the file.
    let own = sdk(&f, "openai_batches.py", "foreign", 0, &f.key, &[("GW_BATCH", &batch), ("GW_FILE", &file)]).await;
    assert_eq!(
        (own["batch"].as_u64(), own["file"].as_u64(), own["delete"].as_u64()),
        (Some(200), Some(200), Some(200)),
        "{own}"
    );
    assert_eq!(f.batches.deleted().len(), 1, "the owner's delete reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_larger_than_the_balance_is_refused_at_creation() {
    let f = setup().await;
    // $0.05: 3 lines of up to 10,000 output tokens at $2/M, halved, is $0.03
    // plus prompts; 20,000 tokens each is more than the balance.
    let (account, key) = customer(&f.cluster, "thrifty", 50_000).await;
    f.cluster.wait_until_served(0, &key).await;
    let env = [("GW_MODEL", OPENAI_MODEL), ("GW_MAX_TOKENS", "20000")];
    let refused = sdk(&f, "openai_batches.py", "create", 0, &key, &env).await;
    assert_eq!(refused["error"]["status"], 403, "{refused}");
    assert_eq!(refused["error"]["body"]["code"], "insufficient_user_quota", "{refused}");
    assert!(f.batches.batch_ids().is_empty(), "nothing reached the upstream's batches");
    assert_eq!(balance(&f, &account).await, 50_000, "nothing was held");
    let env = [("GW_MODEL", OPENAI_MODEL), ("GW_MAX_TOKENS", "1000")];
    let fits = sdk(&f, "openai_batches.py", "create", 0, &key, &env).await;
    assert!(fits.get("batch").is_some(), "a bound within the balance is taken: {fits}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_restarted_mid_batch_still_bills_once() {
    let mut f = setup_in(harness::Mode::Processes).await;
    let created = sdk(&f, "openai_batches.py", "create", 0, &f.key, &[("GW_MODEL", OPENAI_MODEL)]).await;
    let batch = text(&created, &["batch", "id"]);
    let upstream = upstream_id(&f, &batch, &f.key).await;
    f.cluster.stop_control_plane().await;
    f.batches.finish(&upstream);
    f.cluster.start_control_plane().await.expect("restart the control plane");
    // Nobody asks about the batch: the restarted poller settles it.
    balance_settles_at(&f, START - 3 * LINE_BATCH_COST).await;
    assert_eq!(records(&f, &f.account, &format!("batch:{batch}")).await.len(), 1, "billed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_message_batch_is_billed_from_its_results() {
    let f = setup().await;
    let created = sdk(&f, "anthropic_batches.py", "create", 0, &f.key, &[("GW_MODEL", CLAUDE)]).await;
    let batch = text(&created, &["batch", "id"]);
    assert!(batch.starts_with("msgbatch_"), "our id: {created}");
    assert_eq!(created["batch"]["processing_status"], "in_progress");
    let upstream = f.batches.batch_ids().pop().expect("the upstream's batch");
    // An OpenAI batch of the same account is listed with its own family only.
    let openai = sdk(&f, "openai_batches.py", "create", 0, &f.key, &[("GW_MODEL", OPENAI_MODEL)]).await;
    let openai = text(&openai, &["batch", "id"]);
    let openai_hold = records(&f, &f.account, &format!("batch-hold:{openai}")).await[0].cost_micros;
    assert_eq!(f.batches.key_of(&upstream).as_deref(), Some("sk-upstream-anthropic-0123456789"), "x-api-key");
    assert_eq!(f.batches.models_of(&upstream), [CLAUDE; 3]);
    f.batches.set_done(&upstream, 2);
    let cancelled = sdk(&f, "anthropic_batches.py", "cancel", 1, &f.key, &[("GW_BATCH", &batch)]).await;
    assert_eq!(cancelled["batch"]["id"], batch.as_str());
    let cost = 2 * LINE_REGULAR_COST * CLAUDE_BATCH_PPM / 1_000_000;
    balance_settles_at(&f, START - cost - openai_hold).await;
    let done = sdk(&f, "anthropic_batches.py", "retrieve", 1, &f.key, &[("GW_BATCH", &batch)]).await;
    assert_eq!(done["batch"]["processing_status"], "ended");
    let results = done["results"].as_array().expect("results through results_url");
    let kinds: Vec<&str> = results.iter().map(|r| r["result"]["type"].as_str().unwrap_or("")).collect();
    assert_eq!(kinds, ["succeeded", "succeeded", "canceled"]);
    assert_eq!(done["batches"], serde_json::json!([batch]), "message batches list, without the OpenAI batch");
    let listed = sdk(&f, "openai_batches.py", "retrieve", 0, &f.key, &[("GW_BATCH", &openai)]).await;
    assert_eq!(listed["batches"], serde_json::json!([openai]), "batches list, without the message batch");
    let billed = records(&f, &f.account, &format!("batch:{batch}")).await;
    assert_eq!((billed.len(), billed[0].endpoint.as_str()), (1, "/v1/messages/batches"));
    assert_eq!(billed[0].cost_micros, cost, "two lines at the model's batch share");
}

/// Uploads `content` with `purpose` to data plane 0 as `key` over plain
/// HTTP: (status, body).
async fn upload(f: &Fixture, key: &str, purpose: &str, content: &str) -> (u16, Value) {
    let form = reqwest::multipart::Form::new()
        .text("purpose", purpose.to_owned())
        .part("file", reqwest::multipart::Part::bytes(content.as_bytes().to_vec()).file_name("in.jsonl"));
    let url = format!("{}/files", f.cluster.base_url(0));
    let response = f.cluster.http().post(url).bearer_auth(key).multipart(form).send().await.expect("upload");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn line(id: &str, model: &str) -> String {
    format!(
        r#"{{"custom_id":"{id}","method":"POST","url":"/v1/chat/completions","body":{{"model":"{model}","messages":[]}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_files_and_batches_are_refused_in_each_clients_shape_before_the_upstream() {
    let f = setup().await;
    let two_models = format!("{}\n{}\n", line("a", OPENAI_MODEL), line("b", CLAUDE));
    let duplicate = format!("{}\n{}\n", line("a", OPENAI_MODEL), line("a", OPENAI_MODEL));
    let cases = [
        ("fine-tune", line("a", OPENAI_MODEL), "purpose"),
        ("batch", two_models, "same model"),
        ("batch", duplicate, "used twice"),
        ("batch", "{not json".to_owned(), "line 1"),
        ("batch", line("a", "no-such-model"), "no-such-model"),
    ];
    for (purpose, content, expected) in cases {
        let (status, body) = upload(&f, &f.key, purpose, &content).await;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(matches!(status, 400 | 404), "{purpose} {content:?}: {status} {body}");
        assert!(message.contains(expected), "{message:?} should say {expected:?}");
    }
    // A message batch naming two models: 400 in Anthropic's shape.
    let requests = serde_json::json!({"requests": [
        {"custom_id": "a", "params": {"model": CLAUDE, "max_tokens": 10, "messages": []}},
        {"custom_id": "b", "params": {"model": OPENAI_MODEL, "max_tokens": 10, "messages": []}},
    ]});
    let url = format!("{}/messages/batches", f.cluster.base_url(0));
    let response = f.cluster.http().post(url).header("x-api-key", &f.key).json(&requests).send().await.expect("post");
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        (body["type"].as_str(), body["error"]["type"].as_str()),
        (Some("error"), Some("invalid_request_error")),
        "{body}"
    );
    // A batch over an unknown file is the OpenAI 404.
    let url = format!("{}/batches", f.cluster.base_url(0));
    let batch = serde_json::json!({"input_file_id": "file-nope", "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let response = f.cluster.http().post(url).bearer_auth(&f.key).json(&batch).send().await.expect("post");
    assert_eq!(response.status().as_u16(), 404);
    assert!(f.batches.uploads().is_empty() && f.batches.batch_ids().is_empty(), "nothing reached the upstream");
    assert_eq!(balance(&f, &f.account).await, START, "nothing was held");
}
