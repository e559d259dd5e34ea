//! Shared set-up of the error and failover suites: a cluster on a real Redis
//! with the `gpt-4o` model, one funded account and one token, plus helpers to
//! add channels, wait for the data planes to catch up, and send requests.

#![allow(dead_code)] // each suite uses its own subset

use std::time::Duration;

use gw_tests::{
    harness::{Cluster, eventually},
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
    _redis: RedisServer,
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
        cluster
            .gwctl(&["model", "create", "--id", MODEL, "--input-price", "2.5", "--output-price", "10"])
            .await
            .expect("model create");
        cluster.gwctl(&["group", "create", "--name", "vip"]).await.expect("group create");
        let account = cluster
            .gwctl(&["account", "create", "--name", "acme", "--balance", "100", "--groups", "default,vip"])
            .await
            .expect("account create");
        let account = str_field(&account, "id");
        let created = cluster.gwctl(&["token", "create", "--account", &account]).await.expect("token create");
        let key = str_field(&created, "key");
        let token = str_field(created.get("token").unwrap_or(&created), "id");
        Gateway { cluster, account, token, key, _redis: redis }
    }

    /// Creates a channel serving `gpt-4o` to `default` and `vip` at
    /// `base_url` with `priority`, plus `extra` flags; returns its id.
    pub async fn channel(&self, name: &str, base_url: &str, priority: i32, extra: &[&str]) -> String {
        let priority = priority.to_string();
        let mut args = vec![
            "channel",
            "create",
            "--name",
            name,
            "--base-url",
            base_url,
            "--key",
            UPSTREAM_KEY,
            "--models",
            MODEL,
            "--groups",
            "default,vip",
            "--priority",
            &priority,
        ];
        args.extend_from_slice(extra);
        let channel = self.cluster.gwctl(&args).await.expect("channel create");
        str_field(&channel, "id")
    }

    /// Waits until every data plane acknowledged the control plane's newest
    /// revision.
    pub async fn synced(&self) {
        let planes = self.cluster.data_planes.len();
        eventually("data planes to ACK the newest revision", Duration::from_secs(10), || async {
            let list = self.cluster.gwctl(&["dataplanes", "list"]).await.ok()?;
            let items = list.as_array()?;
            let current = |p: &Value| {
                p["acked_revision"].as_u64().is_some()
                    && p["acked_revision"].as_u64() >= p["control_plane_revision"].as_u64()
            };
            (items.len() == planes && items.iter().all(current)).then_some(())
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

    /// The test token's usage records, newest first as gwctl lists them.
    pub async fn usage(&self) -> Vec<Value> {
        let usage = self.cluster.gwctl(&["usage", "list", "--token", &self.token]).await.expect("usage list");
        usage.as_array().cloned().unwrap_or_default()
    }

    /// Waits until the test token has `n` usage records and returns them.
    pub async fn wait_for_usage(&self, n: usize) -> Vec<Value> {
        eventually(&format!("{n} usage records"), Duration::from_secs(15), || async {
            let records = self.usage().await;
            (records.len() == n).then_some(records)
        })
        .await
    }

    /// `status` of channel `id` as `gwctl channel get` shows it.
    pub async fn channel_status(&self, id: &str) -> String {
        str_field(&self.cluster.gwctl(&["channel", "get", id]).await.expect("channel get"), "status")
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
