//! Bulk token import end to end on Redis: `gwctl token import` (the binary)
//! through the real control plane, keys given and minted, bad rows reported
//! by line; the data plane then serves the imported keys, both from deltas
//! and from a full snapshot sent in many small chunks (from the control
//! plane's in-memory copy, and read from the store).

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, Mode, eventually},
    mock::upstream::MockUpstream,
    redis::RedisServer,
    seed,
};
use serde_json::{Value, json};

/// Resources per full-snapshot message: small, so a start takes dozens.
const CHUNK: usize = 7;
const GIVEN: usize = 100;
const MINTED: usize = 50;

fn given_key(n: usize) -> String {
    format!("sk-import-{n:020}")
}

/// POSTs a chat request to data plane 0 with `key`; returns the status.
async fn chat(cluster: &Cluster, key: &str) -> u16 {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/chat/completions", cluster.base_url(0));
    let response = cluster.http().post(url).bearer_auth(key).json(&body).send().await.expect("chat request");
    response.status().as_u16()
}

/// Waits until data plane 0 answers a chat with `key` with 200.
async fn served(cluster: &Cluster, key: &str) {
    eventually(&format!("the data plane to serve {key:.12}…"), Duration::from_secs(10), || async {
        (chat(cluster, key).await == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn imported_keys_given_and_minted_serve_chat_from_deltas_and_from_a_chunked_snapshot() {
    import_and_sync_again(true).await;
}

#[tokio::test]
async fn the_chunked_snapshot_read_from_the_store_serves_the_same_keys() {
    import_and_sync_again(false).await;
}

async fn import_and_sync_again(snapshot_in_memory: bool) {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let mut cluster = Cluster::start_with(Mode::InProcess, &redis.url(), 1, |cp| {
        cp.snapshot_chunk = Some(CHUNK);
        cp.snapshot_in_memory = snapshot_in_memory;
    })
    .await
    .expect("cluster");
    let mut admin = cluster.admin();
    seed::chat_model(&mut admin, &upstream.base_url(), &["default"]).await.expect("seed");
    let request = pb::CreateAccountRequest { name: "bulk".into(), balance_micros: 100_000_000, ..Default::default() };
    admin.create_account(request).await.expect("account create");

    // Rows: keys given, then keyless ones to mint, then a repeated key and
    // a row for an account that does not exist.
    let mut rows: Vec<String> = (0..GIVEN)
        .map(|n| {
            json!({"account": "bulk", "name": format!("given-{n}"), "key": given_key(n), "quota": "1"}).to_string()
        })
        .collect();
    rows.extend((0..MINTED).map(|n| json!({"account": "bulk", "name": format!("minted-{n}")}).to_string()));
    rows.push(json!({"account": "bulk", "name": "repeat", "key": given_key(3)}).to_string());
    rows.push(json!({"account": "nobody", "name": "orphan"}).to_string());
    let file = cluster.dir().join("tokens.jsonl");
    std::fs::write(&file, rows.join("\n")).expect("write rows");
    let keys_out = cluster.dir().join("keys.jsonl");
    let summary = cluster
        .gwctl(&[
            "token",
            "import",
            file.to_str().expect("path"),
            "--mint",
            "--keys-out",
            keys_out.to_str().expect("path"),
            "--batch-size",
            "40",
        ])
        .await
        .expect("gwctl token import");
    assert_eq!(summary["imported"], GIVEN + MINTED, "{summary}");
    let errors: Vec<(u64, &str)> = summary["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| (e["line"].as_u64().expect("line"), e["error"].as_str().expect("error")))
        .collect();
    assert_eq!(errors.len(), 2, "{summary}");
    assert_eq!(errors[0].0, (GIVEN + MINTED + 1) as u64);
    assert!(errors[0].1.contains("already in use by token"), "{summary}");
    assert_eq!(errors[1].0, (GIVEN + MINTED + 2) as u64);
    assert!(errors[1].1.contains("not found"), "{summary}");
    let minted: Vec<String> = std::fs::read_to_string(&keys_out)
        .expect("keys file")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("key line")["key"].as_str().expect("key").to_owned())
        .collect();
    assert_eq!(minted.len(), MINTED);

    // Served from the deltas of the import.
    served(&cluster, &given_key(0)).await;
    served(&cluster, &minted[MINTED - 1]).await;
    assert_eq!(chat(&cluster, "sk-import-never-given-000").await, 401);

    // A data plane starting from nothing gets everything as a chunked full
    // snapshot, applied whole.
    cluster.stop_data_plane(0).await;
    std::fs::remove_dir_all(&cluster.data_planes[0].data_dir).expect("forget the data plane's state");
    cluster.start_data_plane(0).await.expect("restart the data plane");
    served(&cluster, &minted[0]).await;
    for key in [given_key(GIVEN - 1), given_key(0), minted[MINTED / 2].clone()] {
        assert_eq!(chat(&cluster, &key).await, 200, "a key from one of the chunks");
    }
    let listed = admin.list_tokens(pb::ListRequest::default()).await.expect("list");
    assert_eq!(listed.into_inner().items.len(), GIVEN + MINTED);
}
