//! Shared set-up of the suites that need one customer: an in-process cluster
//! on a real Redis with the `gpt-4o` model, one funded account and one token,
//! plus helpers to add channels, wait for the data planes to catch up, and
//! send requests. Admin calls go through the in-process admin client.

#![allow(dead_code)] // each suite uses its own subset

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::{Admin, Cluster, DataPlane, Mode, eventually, json},
    redis::RedisServer,
};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// The key every test channel holds; must never reach a client.
pub const UPSTREAM_KEY: &str = "sk-upstream-secret-failover-0123456789";
pub const MODEL: &str = "gpt-4o";

/// A running gateway with one account ($100, groups `default` and `vip`)
/// and one unlimited token in `default`.
pub struct Gateway {
    pub cluster: Cluster,
    pub account: String,
    pub token: String,
    pub key: String,
    _redis: Option<RedisServer>,
}

/// One answer of the data plane.
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

// === impl Gateway ===

impl Gateway {
    /// Starts Redis, the control plane and `data_planes` data planes, and
    /// creates the model, the `vip` group, the account and the token.
    pub async fn start(data_planes: usize) -> Gateway {
        let redis = RedisServer::start().await.expect("redis-server");
        let cluster = Cluster::start(&redis.url(), data_planes).await.expect("cluster");
        Gateway::customer(cluster, Some(redis)).await
    }

    /// `start`, with `configure` adjusting each data plane before it starts.
    pub async fn start_with(data_planes: usize, configure: impl Fn(usize, &mut DataPlane)) -> Gateway {
        let redis = RedisServer::start().await.expect("redis-server");
        let cluster = Cluster::start_configured(Mode::InProcess, &redis.url(), data_planes, |_| {}, configure)
            .await
            .expect("cluster");
        Gateway::customer(cluster, Some(redis)).await
    }

    /// `start`, with the control plane on its embedded store.
    pub async fn start_embedded(data_planes: usize) -> Gateway {
        let cluster = Cluster::start("", data_planes).await.expect("cluster");
        Gateway::customer(cluster, None).await
    }

    /// Creates the model, the `vip` group, the account and the token.
    async fn customer(cluster: Cluster, redis: Option<RedisServer>) -> Gateway {
        let mut admin = cluster.admin();
        let model = pb::Model {
            id: MODEL.into(),
            category: "chat".into(),
            input_price_micros: 2_500_000,
            output_price_micros: 10_000_000,
            ..Default::default()
        };
        admin.create_model(model).await.expect("model create");
        admin.create_group(group("vip")).await.expect("group create");
        let account = pb::CreateAccountRequest {
            name: "acme".into(),
            balance_micros: 100_000_000,
            groups: vec!["default".into(), "vip".into()],
            ..Default::default()
        };
        let account = admin.create_account(account).await.expect("account create").into_inner().id;
        let created = admin.create_token(token(&account)).await.expect("token create").into_inner();
        let token = created.token.unwrap_or_default().id;
        Gateway { cluster, account, token, key: created.key, _redis: redis }
    }

    /// The in-process admin client of the control plane.
    pub fn admin(&self) -> Admin {
        self.cluster.admin()
    }

    /// Creates a channel serving `gpt-4o` to `default` and `vip` at
    /// `base_url` with `priority`, plus `extra` gwctl-style flags (`--type`,
    /// `--map A=B,…`, `--weight`, `--*-timeout-ms`); returns its id.
    pub async fn channel(&self, name: &str, base_url: &str, priority: i32, extra: &[&str]) -> String {
        let mut channel = pb::Channel {
            name: name.into(),
            r#type: "openai".into(),
            base_url: base_url.into(),
            api_key: UPSTREAM_KEY.into(),
            has_key: true,
            models: vec![MODEL.into()],
            groups: vec!["default".into(), "vip".into()],
            priority,
            weight: 1,
            ..Default::default()
        };
        for pair in extra.chunks(2) {
            let [flag, value] = pair else { panic!("flag without a value in {extra:?}") };
            let number = || value.parse().unwrap_or_else(|_| panic!("{flag} {value:?} is not a number"));
            match *flag {
                "--type" => channel.r#type = (*value).into(),
                "--weight" => channel.weight = number(),
                "--connect-timeout-ms" => channel.connect_timeout_ms = number(),
                "--first-byte-timeout-ms" => channel.first_byte_timeout_ms = number(),
                "--idle-timeout-ms" => channel.idle_timeout_ms = number(),
                "--total-timeout-ms" => channel.total_timeout_ms = number(),
                "--map" => {
                    for rename in value.split(',') {
                        let (from, to) = rename.split_once('=').unwrap_or_else(|| panic!("bad --map {value:?}"));
                        channel.model_map.insert(from.into(), to.into());
                    }
                }
                other => panic!("channel flag {other} is not supported by the test helper"),
            }
        }
        self.admin().create_channel(channel).await.expect("channel create").into_inner().id
    }

    /// Waits until every data plane acknowledged the control plane's newest
    /// revision.
    pub async fn synced(&self) {
        let planes = self.cluster.data_planes.len();
        eventually("data planes to ACK the newest revision", Duration::from_secs(10), || async {
            let list = self.admin().list_data_planes(pb::ListRequest::default()).await.ok()?.into_inner();
            let current = |p: &pb::DataPlane| p.acked_revision >= list.revision;
            (list.items.len() == planes && list.items.iter().all(current)).then_some(())
        })
        .await;
    }

    /// POSTs `body` to `path` on data plane `i` with `key` (no header when
    /// `None`).
    pub async fn post(&self, i: usize, path: &str, key: Option<&str>, body: &Value) -> Reply {
        let url = format!("http://{}{path}", self.cluster.data_planes[i].addr);
        let mut request = self.cluster.http().post(url).json(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.expect("request to the data plane");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        Reply { status, headers, text: response.text().await.unwrap_or_default() }
    }

    /// A plain (or streamed) chat request for `gpt-4o` with the test token.
    pub async fn chat(&self, i: usize, stream: bool) -> Reply {
        self.post(i, "/v1/chat/completions", Some(&self.key), &chat_body(stream)).await
    }

    /// The test token's usage records, newest first, as JSON the way gwctl
    /// shows them.
    pub async fn usage(&self) -> Vec<Value> {
        let request = pb::ListUsageRequest { token_id: self.token.clone(), limit: 100, ..Default::default() };
        let usage = self.admin().list_usage(request).await.expect("usage list").into_inner();
        usage.items.iter().map(json).collect()
    }

    /// Waits until the test token has `n` usage records and returns them.
    pub async fn wait_for_usage(&self, n: usize) -> Vec<Value> {
        eventually(&format!("{n} usage records"), Duration::from_secs(15), || async {
            let records = self.usage().await;
            (records.len() == n).then_some(records)
        })
        .await
    }

    /// The test account's balance in micro-USD.
    pub async fn balance(&self) -> i64 {
        let request = pb::GetRequest { id: self.account.clone() };
        self.admin().get_account(request).await.expect("account get").into_inner().balance_micros
    }

    /// `status` of channel `id` as `gwctl channel get` shows it.
    pub async fn channel_status(&self, id: &str) -> String {
        let request = pb::GetRequest { id: id.into() };
        self.admin().get_channel(request).await.expect("channel get").into_inner().status
    }
}

/// A group named `name` as `gwctl group create --name <name>` makes it.
pub fn group(name: &str) -> pb::Group {
    pb::Group { name: name.into(), ratio: 1.0, ..Default::default() }
}

/// A token of `account` in `default` bounded only by its account, as
/// `gwctl token create --account <account>` makes it.
pub fn token(account: &str) -> pb::CreateTokenRequest {
    pb::CreateTokenRequest {
        account_id: account.into(),
        group: "default".into(),
        unlimited: true,
        ..Default::default()
    }
}

// === impl Reply ===

impl Reply {
    /// The JSON body; panics with the text when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| panic!("not JSON ({}): {}", self.status, self.text))
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `x-request-id` header; panics when missing.
    pub fn request_id(&self) -> &str {
        self.header("x-request-id").unwrap_or_else(|| panic!("no x-request-id on a {} answer", self.status))
    }
}

/// `{"model":"gpt-4o","messages":[…],"stream":…}`.
pub fn chat_body(stream: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream})
}

pub fn str_field(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap_or_else(|| panic!("no string {field:?} in {value}")).to_owned()
}

/// Text of every content delta of an SSE chat stream.
pub fn streamed_text(body: &str) -> String {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}
