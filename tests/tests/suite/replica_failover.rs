//! Failover between control-plane replicas: a data plane given several
//! addresses leaves a replica that froze (no byte moves, the connection stays
//! open, as under SIGSTOP) or died, within seconds, and a key revoked through
//! another replica meanwhile is refused.

use std::time::{Duration, Instant};

use gw_proto::pb;
use gw_tests::{
    forwarder::Forwarder,
    harness::{self, Cluster, eventually},
    mock::upstream::MockUpstream,
    redis::RedisServer,
    seed,
};

/// Status of `GET /v1/models` with `key` on data plane 0.
async fn models(cluster: &Cluster, key: &str) -> u16 {
    let url = format!("{}/models", cluster.base_url(0));
    match cluster.http().get(url).bearer_auth(key).send().await {
        Ok(response) => response.status().as_u16(),
        Err(_) => 0,
    }
}

async fn set_status(admin: &mut gw_tests::harness::Admin, token: &str, status: &str) {
    let request = pb::UpdateTokenRequest { id: token.into(), status: Some(status.into()), ..Default::default() };
    admin.update_token(request).await.unwrap_or_else(|e| panic!("token {status}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_plane_leaves_a_frozen_or_dead_replica_and_sees_revocations_through_another() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let mut cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let replica = cluster.start_replica(1).await.expect("second replica");
    let front = Forwarder::start(cluster.control_plane.addr).await.expect("forwarder");

    // The data plane dials the first replica (through the forwarder), then
    // the second.
    cluster.stop_data_plane(0).await;
    cluster.data_planes[0].control_plane = Some(format!("http://{},http://{}", front.addr(), replica.addr));
    cluster.start_data_plane(0).await.expect("restart the data plane with two addresses");

    let mut admin = cluster.admin();
    seed::chat_model(&mut admin, &upstream.base_url(), &["default"]).await.expect("model and channel");
    let account = pb::CreateAccountRequest { name: "acme".into(), unlimited: true, ..Default::default() };
    let account = admin.create_account(account).await.expect("account").into_inner().id;
    let token = pb::CreateTokenRequest { account_id: account, unlimited: true, ..Default::default() };
    let created = admin.create_token(token).await.expect("token").into_inner();
    let (token, key) = (created.token.unwrap_or_default().id, created.key);
    eventually("the data plane to serve the key", Duration::from_secs(10), || async {
        (models(&cluster, &key).await == 200).then_some(())
    })
    .await;

    // The first replica freezes; the key is revoked through the second.
    front.freeze();
    let frozen = Instant::now();
    set_status(&mut replica.admin(), &token, "disabled").await;
    eventually("the revocation to reach the data plane past the frozen replica", Duration::from_secs(20), || async {
        (models(&cluster, &key).await == 401).then_some(())
    })
    .await;
    eprintln!("revocation applied {:?} after the replica froze", frozen.elapsed());

    // The second replica dies; the first is back: the data plane returns to
    // it and sees the key enabled again through it.
    front.thaw();
    let dead = replica.addr;
    replica.shutdown().await;
    let died = Instant::now();
    set_status(&mut cluster.admin(), &token, "enabled").await;
    eventually("the data plane to move back to the live replica", Duration::from_secs(20), || async {
        (models(&cluster, &key).await == 200).then_some(())
    })
    .await;
    eprintln!("re-enabled key served {:?} after the replica died", died.elapsed());

    // gwctl, given both replicas, answers from the live one.
    let endpoints = format!("http://{dead},http://{}", cluster.control_plane.addr);
    let output = tokio::process::Command::new(harness::binary("gwctl"))
        .args(["--endpoint", &endpoints, "--admin-key", &cluster.admin_key, "-o", "json", "dataplanes", "list"])
        .output()
        .await
        .expect("gwctl");
    assert!(output.status.success(), "gwctl with a dead first endpoint: {}", String::from_utf8_lossy(&output.stderr));
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).expect("gwctl JSON");
    assert_eq!(list["items"][0]["node_id"], "dp-0", "{list}");
}
