//! `POST /v1/rerank` end to end: real Redis, the control plane and a data
//! plane in-process, mock upstreams speaking Jina's and Cohere's rerank
//! (`gw_tests::mock::rerank`), plain HTTP and the official OpenAI Python
//! SDK's request method as clients. Checks what came back and what reached
//! the upstream, what was billed (tokens at the input price, search units
//! at the search-unit price, in the usage record and the balance), the
//! catalogue's refusals, failover to a second channel on a 5xx, and the
//! search-unit price set and changed with gwctl.

use crate::support;

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::{self, eventually},
    mock::{rerank::jina_tokens, upstream::MockUpstream},
};
use serde_json::{Value, json};
use support::{Gateway, Reply, UPSTREAM_KEY};

/// Priced per token ($1 per 1M: a micro-dollar a token) and per search unit.
const JINA: &str = "jina-reranker-v2-base-multilingual";
/// What the channel calls `JINA`.
const JINA_UPSTREAM: &str = "jina-reranker-m0";
/// Priced per search unit only ($2 per 1000 searches).
const COHERE: &str = "rerank-english-v3.0";
const TOKEN_PRICE: i64 = 1_000_000;
const JINA_UNIT_PRICE: i64 = 1_000;
const COHERE_UNIT_PRICE: i64 = 2_000;
/// The account's starting balance (see `support`).
const START: i64 = 100_000_000;

const QUERY: &str = "rust gateway";
const DOCUMENTS: [&str; 3] = ["a rust gateway", "a python web app", "the gateway in rust is fast"];

fn rerank_model(id: &str, input: i64, search_unit: i64) -> pb::Model {
    pb::Model {
        id: id.into(),
        category: "rerank".into(),
        input_price_micros: input,
        search_unit_price_micros: search_unit,
        ..Default::default()
    }
}

/// An `openai` (or `kind`) channel to `base_url` serving `models` to
/// `default` with `priority`; returns its id.
async fn channel(gw: &Gateway, name: &str, kind: &str, base_url: &str, priority: i32, models: &[&str]) -> String {
    let channel = pb::Channel {
        name: name.into(),
        r#type: kind.into(),
        base_url: base_url.into(),
        api_key: UPSTREAM_KEY.into(),
        has_key: true,
        models: models.iter().map(|m| (*m).to_owned()).collect(),
        groups: vec!["default".into()],
        priority,
        weight: 1,
        model_map: [(JINA.to_owned(), JINA_UPSTREAM.to_owned())].into(),
        ..Default::default()
    };
    gw.admin().create_channel(channel).await.expect("channel create").into_inner().id
}

/// A gateway with the two rerank models served by one channel to `upstream`.
async fn gateway(upstream: &MockUpstream) -> Gateway {
    let gw = Gateway::start(1).await;
    let mut admin = gw.admin();
    admin.create_model(rerank_model(JINA, TOKEN_PRICE, JINA_UNIT_PRICE)).await.expect("model create");
    admin.create_model(rerank_model(COHERE, 0, COHERE_UNIT_PRICE)).await.expect("model create");
    channel(&gw, "rerank", "openai", &upstream.base_url(), 0, &[JINA, COHERE]).await;
    gw.synced().await;
    gw
}

fn jina_request() -> Value {
    json!({
        "model": JINA,
        "query": QUERY,
        "documents": [DOCUMENTS[0], { "text": DOCUMENTS[1] }, DOCUMENTS[2]],
        "top_n": 2,
        "return_documents": true,
    })
}

async fn rerank(gw: &Gateway, body: &Value) -> Reply {
    gw.post(0, "/v1/rerank", Some(&gw.key), body).await
}

/// The upstream's rerank requests.
fn reranks(upstream: &MockUpstream) -> Vec<gw_tests::mock::upstream::Recorded> {
    upstream.requests().into_iter().filter(|r| r.path == "/v1/rerank").collect()
}

fn record_of<'a>(records: &'a [Value], model: &str) -> &'a Value {
    records.iter().find(|r| r["model"] == model).unwrap_or_else(|| panic!("no record of {model}: {records:#?}"))
}

/// An error answer's status, message, type and code.
fn refusal(reply: &Reply) -> (u16, String, String, String) {
    let error = &reply.json()["error"];
    let text = |field: &str| error[field].as_str().unwrap_or_default().to_owned();
    (reply.status, text("message"), text("type"), text("code"))
}

#[tokio::test]
async fn answers_pass_through_and_bill_tokens_and_search_units_at_the_models_prices() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream).await;

    let jina = rerank(&gw, &jina_request()).await;
    assert_eq!(jina.status, 200, "{}", jina.text);
    let answer = jina.json();
    let ranked: Vec<_> = answer["results"].as_array().expect("results").iter().map(|r| r["index"].clone()).collect();
    assert_eq!(ranked, [json!(0), json!(2)], "ranked and cut to top_n: {answer}");
    assert_eq!(answer["results"][1]["document"]["text"], DOCUMENTS[2]);
    assert_eq!(answer["results"][0]["relevance_score"], 1.0);
    let tokens = i64::try_from(jina_tokens(QUERY, &DOCUMENTS)).expect("tokens");
    assert_eq!(answer["usage"]["total_tokens"], tokens, "the upstream's answer passes through");
    let sent = reranks(&upstream).pop().expect("the rerank reached the upstream");
    let mut expected = jina_request();
    expected["model"] = json!(JINA_UPSTREAM);
    assert_eq!(sent.body, expected, "the body passes through, the model mapped");
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {UPSTREAM_KEY}").as_str()));

    // 150 documents: two Cohere search units.
    let documents: Vec<String> = (0..150).map(|i| format!("document {i} about rust")).collect();
    let cohere = rerank(&gw, &json!({ "model": COHERE, "query": "rust", "documents": documents, "top_n": 3 })).await;
    assert_eq!(cohere.status, 200, "{}", cohere.text);
    assert_eq!(cohere.json()["meta"]["billed_units"]["search_units"], 2);
    assert_eq!(cohere.json()["results"].as_array().map(Vec::len), Some(3));

    let records = gw.wait_for_usage(2).await;
    let jina = record_of(&records, JINA);
    // 15 tokens at $1/M and one search unit at $0.001.
    let jina_cost = tokens + JINA_UNIT_PRICE;
    let fields =
        |r: &Value| (r["endpoint"].clone(), r["status"].clone(), r["prompt_tokens"].clone(), r["search_units"].clone());
    assert_eq!(fields(jina), (json!("/v1/rerank"), json!(200), json!(tokens), json!(1)), "{jina}");
    assert_eq!((jina["cost_micros"].as_i64(), jina["estimated"].as_bool()), (Some(jina_cost), Some(false)));
    let cohere = record_of(&records, COHERE);
    assert_eq!(cohere["search_units"], 2, "{cohere}");
    assert_eq!(cohere["cost_micros"], 2 * COHERE_UNIT_PRICE, "units only: the model has no token price");
    assert_eq!(cohere["estimated"], true, "Cohere reports no tokens: counted here");
    assert!(cohere["prompt_tokens"].as_i64() > Some(0), "{cohere}");
    let spent = jina_cost + 2 * COHERE_UNIT_PRICE;
    eventually("the balance to reflect both reranks", Duration::from_secs(15), || async {
        (gw.balance().await == START - spent).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_openai_sdk_request_method_reranks_and_raises_the_400() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream).await;
    let base_url = gw.cluster.base_url(0);
    let env = [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", gw.key.as_str()), ("GW_MODEL", JINA)];
    let out = harness::sdk("openai_rerank.py", &[], &env).await;
    let indices: Vec<_> =
        out["answer"]["results"].as_array().expect("results").iter().map(|r| r["index"].clone()).collect();
    assert_eq!(indices, [json!(0), json!(2)], "{out}");
    assert_eq!(out["refused"]["status"], 400, "{out}");
    // The SDK's error body is the answer's `error` object.
    let message = out["refused"]["body"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("field \"query\" is required"), "{out}");
    assert_eq!(out["refused"]["body"]["type"], "invalid_request_error", "{out}");
    assert_eq!(reranks(&upstream).len(), 1, "the refused call never reached the upstream");
    let records = gw.wait_for_usage(1).await;
    assert_eq!(records[0]["search_units"], 1);
}

#[tokio::test]
async fn bad_requests_get_the_catalogues_errors_and_reach_no_upstream() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream).await;
    let mut admin = gw.admin();
    // Served only by a messages-native channel, and served by none.
    admin.create_model(rerank_model("rerank-on-anthropic", TOKEN_PRICE, 0)).await.expect("model create");
    admin.create_model(rerank_model("rerank-unserved", TOKEN_PRICE, 0)).await.expect("model create");
    channel(&gw, "messages", "anthropic", &upstream.base_url(), 0, &["rerank-on-anthropic"]).await;
    let limited = pb::CreateTokenRequest { models: vec![COHERE.into()], ..support::token(&gw.account) };
    let limited = admin.create_token(limited).await.expect("token create").into_inner().key;
    gw.synced().await;

    let body = |change: &dyn Fn(&mut Value)| {
        let mut body = jina_request();
        change(&mut body);
        body
    };
    let no_key = gw.post(0, "/v1/rerank", None, &jina_request()).await;
    let (status, message, _, _) = refusal(&no_key);
    assert!(status == 401 && message.starts_with("未提供令牌 (request id: "), "{}", no_key.text);
    let malformed = reqwest::Client::new()
        .post(format!("{}/rerank", gw.cluster.base_url(0)))
        .bearer_auth(&gw.key)
        .header("content-type", "application/json")
        .body("{\"model\":")
        .send()
        .await
        .expect("send");
    assert_eq!(malformed.status(), 400);

    let cases: [(Value, u16, &str, &str); 9] = [
        (body(&|b| drop(b.as_object_mut().map(|o| o.remove("query")))), 400, "field \"query\" is required", ""),
        (body(&|b| b["documents"] = json!([])), 400, "field \"documents\" is invalid", ""),
        (body(&|b| b["documents"] = json!(["a", 7])), 400, "field \"documents\" is invalid: item 1", ""),
        (body(&|b| b["top_n"] = json!(0)), 400, "field \"top_n\" is invalid", ""),
        (body(&|b| b["model"] = json!("nope")), 404, "模型不存在: nope", "model_not_found"),
        (body(&|b| b["model"] = json!(support::MODEL)), 400, "gpt-4o is not a rerank model", "model_not_supported"),
        (body(&|b| b["model"] = json!("rerank-on-anthropic")), 400, "request cannot be translated: /v1/rerank", ""),
        (body(&|b| b["model"] = json!("rerank-unserved")), 503, "分组 default 下模型 rerank-unserved 无可用渠道", ""),
        (body(&|b| drop(b.as_object_mut().map(|o| o.remove("model")))), 400, "field \"model\" is required", ""),
    ];
    for (request, status, message, code) in cases {
        let reply = rerank(&gw, &request).await;
        let (got_status, got_message, kind, got_code) = refusal(&reply);
        assert_eq!(got_status, status, "{request}: {}", reply.text);
        assert!(got_message.starts_with(message), "{request}: {got_message}");
        assert!(got_message.contains("(request id: "), "{got_message}");
        assert!(code.is_empty() || got_code == code, "{request}: code {got_code}");
        if status == 400 {
            assert_eq!(kind, "invalid_request_error", "{}", reply.text);
            assert_eq!(reply.header("x-should-retry"), Some("false"));
        }
    }
    let outside = gw.post(0, "/v1/rerank", Some(&limited), &jina_request()).await;
    let (status, message, _, _) = refusal(&outside);
    assert_eq!(status, 403, "a token limited to other models: {}", outside.text);
    assert!(message.starts_with(&format!("该令牌无权访问模型 {JINA}")), "{message}");

    // A rerank model is not a chat model.
    let chat = json!({ "model": JINA, "messages": [{ "role": "user", "content": "hi" }] });
    let chat = gw.post(0, "/v1/chat/completions", Some(&gw.key), &chat).await;
    let (status, message, _, code) = refusal(&chat);
    assert_eq!((status, code.as_str()), (400, "model_not_supported"), "{}", chat.text);
    assert!(message.contains("its category is rerank"), "{message}");

    assert!(reranks(&upstream).is_empty(), "no refused request reached the upstream");
    assert!(upstream.requests().iter().all(|r| r.path != "/v1/messages" && r.path != "/v1/chat/completions"));
    assert!(gw.usage().await.is_empty(), "refusals are not billed");
}

#[tokio::test]
async fn a_5xx_fails_over_to_the_next_channel_and_bills_once() {
    let (a, b) = (MockUpstream::start().await.expect("mock a"), MockUpstream::start().await.expect("mock b"));
    let gw = Gateway::start(1).await;
    gw.admin().create_model(rerank_model(COHERE, 0, COHERE_UNIT_PRICE)).await.expect("model create");
    channel(&gw, "a", "openai", &a.base_url(), 10, &[COHERE]).await;
    let b_id = channel(&gw, "b", "openai", &b.base_url(), 0, &[COHERE]).await;
    gw.synced().await;

    a.fail_next(503, 1);
    let reply = rerank(&gw, &json!({ "model": COHERE, "query": QUERY, "documents": DOCUMENTS })).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["results"].as_array().map(Vec::len), Some(3));
    assert_eq!((reranks(&a).len(), reranks(&b).len()), (1, 1), "a first, then b");
    let records = gw.wait_for_usage(1).await;
    assert_eq!(records[0]["channel_id"], b_id.as_str(), "billed to the channel that answered");
    assert_eq!((records[0]["search_units"].as_i64(), records[0]["cost_micros"].as_i64()), (Some(1), Some(2_000)));
    eventually("the balance to reflect the one rerank", Duration::from_secs(15), || async {
        (gw.balance().await == START - COHERE_UNIT_PRICE).then_some(())
    })
    .await;
}

#[tokio::test]
async fn gwctl_sets_and_changes_the_search_unit_price_and_the_next_rerank_bills_it() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = Gateway::start(1).await;
    let args = ["model", "create", "--id", COHERE, "--category", "rerank", "--search-unit-price", "0.002"];
    let created = gw.cluster.gwctl(&args).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        (created["category"].as_str(), created["search_unit_price_micros"].as_i64()),
        (Some("rerank"), Some(2_000))
    );
    assert_eq!(created["search_unit_price_usd"], "0.002000");
    channel(&gw, "rerank", "openai", &upstream.base_url(), 0, &[COHERE]).await;
    gw.synced().await;
    let body = json!({ "model": COHERE, "query": QUERY, "documents": DOCUMENTS });
    assert_eq!(rerank(&gw, &body).await.status, 200);
    // The ledger prices a record when it applies it: the first is in
    // before the price changes.
    assert_eq!(gw.wait_for_usage(1).await[0]["cost_micros"], 2_000);

    let updated = gw.cluster.gwctl(&["model", "update", COHERE, "--search-unit-price", "0.005"]).await;
    assert_eq!(updated.unwrap_or_else(|e| panic!("{e:#}"))["search_unit_price_micros"], 5_000);
    let negative = gw.cluster.gwctl(&["model", "update", COHERE, "--search-unit-price", "-1"]).await;
    assert!(negative.is_err_and(|e| e.to_string().contains("must not be negative")));
    gw.synced().await;
    assert_eq!(rerank(&gw, &body).await.status, 200);

    let records = gw.wait_for_usage(2).await;
    let mut costs: Vec<_> = records.iter().map(|r| r["cost_micros"].as_i64().unwrap_or(-1)).collect();
    costs.sort_unstable();
    assert_eq!(costs, [2_000, 5_000], "each rerank at the price of its time: {records:#?}");
    eventually("the balance to reflect both prices", Duration::from_secs(15), || async {
        (gw.balance().await == START - 7_000).then_some(())
    })
    .await;
}
