//! The store on a real three-primary Redis Cluster: the whole conformance
//! suite passes on it, two replicas on it see each other's writes, its keys
//! spread over more than one node, it recovers when the nodes restart, it
//! reaches a TLS cluster through `rediss+cluster://` and the CA file, and a
//! gateway whose control plane keeps its store there bills a chat request
//! that the admin API then lists.

use std::sync::Arc;
use std::time::Duration;

use gw_control_plane::domain::Kind;
use gw_control_plane::store::{RedisStore, Store as _, conformance};
use gw_proto::pb;
use gw_tests::{
    certs::TestCa,
    harness::{Cluster, eventually, try_eventually},
    mock::upstream::MockUpstream,
    redis::{RedisCluster, TlsFiles},
    seed,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_store_passes_the_conformance_suite() {
    let redis = RedisCluster::start().await.expect("redis cluster");
    let store = RedisStore::connect(&redis.url()).await.expect("connect");
    conformance::run(Arc::new(store)).await;

    // Two replicas on the same cluster, after the suite: it leaves no
    // writer behind, and the shared checks use ids of their own.
    let a = RedisStore::connect(&redis.url()).await.expect("connect a");
    let b = RedisStore::connect(&redis.url()).await.expect("connect b");
    conformance::run_shared(Arc::new(a), Arc::new(b)).await;

    // Policy and ledger share one slot; credentials, audit, video, locks
    // and permits live elsewhere: more than one node holds keys.
    let mut holding = 0;
    for url in redis.node_urls() {
        let client = redis::Client::open(url).expect("client");
        let mut conn = client.get_multiplexed_async_connection().await.expect("connect to a node");
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.expect("dbsize");
        holding += usize::from(keys > 0);
    }
    assert!(holding > 1, "every key landed on one node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_url_naming_a_cluster_node_is_refused() {
    let redis = RedisCluster::start().await.expect("redis cluster");
    let Err(error) = RedisStore::connect(&redis.node_urls()[0]).await else { panic!("connected to a cluster node") };
    let error = anyhow::Error::new(error);
    assert!(format!("{error:#}").contains("redis+cluster://"), "{error:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_request_through_a_gateway_on_a_redis_cluster_is_billed_and_listed() {
    let redis = RedisCluster::start().await.expect("redis cluster");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), 1).await.expect("gateway on the redis cluster");
    let mut admin = cluster.admin();
    seed::chat_model(&mut admin, &upstream.base_url(), &["default"]).await.expect("model and channel");
    let account = pb::CreateAccountRequest {
        name: "acme".into(),
        balance_micros: 100_000_000,
        groups: vec!["default".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account create").into_inner().id;
    let token = pb::CreateTokenRequest {
        account_id: account.clone(),
        group: "default".into(),
        quota_micros: 5_000_000,
        ..Default::default()
    };
    let created = admin.create_token(token).await.expect("token create").into_inner();
    let token_id = created.token.unwrap_or_default().id;

    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/chat/completions", cluster.base_url(0));
    // The first answer waits for the data plane to learn the token.
    eventually("the data plane to answer a chat request", Duration::from_secs(10), || async {
        let response = cluster.http().post(&url).bearer_auth(&created.key).json(&body).send().await.ok()?;
        (response.status().as_u16() == 200).then_some(())
    })
    .await;

    // gpt-4o at $2.5 / $10 per 1M tokens and the mock's 11 prompt + 7
    // completion tokens: ceil(11 × 2.5 + 7 × 10) = 98 µ$.
    let records = eventually("the request to be billed", Duration::from_secs(20), || async {
        let request = pb::ListUsageRequest { token_id: token_id.clone(), limit: 10, ..Default::default() };
        let items = cluster.admin().list_usage(request).await.ok()?.into_inner().items;
        (!items.is_empty()).then_some(items)
    })
    .await;
    assert_eq!(records.len(), 1, "one request, one record: {records:?}");
    assert_eq!(records[0].cost_micros, 98, "{:?}", records[0]);
    assert_eq!(records[0].account_id, account);
    let accounts = cluster.admin().list_accounts(pb::ListRequest::default()).await.expect("accounts").into_inner();
    let acme = accounts.items.iter().find(|a| a.id == account).expect("the account is listed");
    assert_eq!(acme.balance_micros, 100_000_000 - 98, "the balance was charged: {acme:?}");

    // Every primary is asked how it persists: these keep nothing on disk.
    let status = cluster.gwctl(&["store", "status"]).await.expect("gwctl store status");
    assert_eq!(status["persistence"], "none", "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_a_redis_cluster_recovers_after_every_node_restarts() {
    let mut redis = RedisCluster::start().await.expect("redis cluster");
    let store = RedisStore::connect(&redis.url()).await.expect("connect");
    let mut rx = store.subscribe();
    for i in 0..3 {
        store.create(conformance::sample(Kind::Model, &format!("before-{i}"))).await.expect("create");
    }
    assert_eq!(*rx.borrow_and_update(), 3);

    redis.restart().await.expect("restart the cluster");
    // The cluster connection finds the nodes again; a call may fail while
    // it does.
    let last_error = std::cell::RefCell::new(String::new());
    let revision = try_eventually(Duration::from_secs(10), || async {
        match store.create(conformance::sample(Kind::Model, "after")).await {
            Ok(revision) => Some(revision),
            Err(error) => {
                *last_error.borrow_mut() = format!("{error:?}");
                None
            }
        }
    })
    .await
    .unwrap_or_else(|| panic!("store never recovered after the restart: {}", last_error.borrow()));
    assert_eq!(revision, 1, "the restarted cluster starts from an empty store");
    let waited =
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|r| *r == 1)).await.is_ok_and(|seen| seen.is_ok());
    assert!(waited, "subscribe still at {} after a write on the restarted cluster", *rx.borrow());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_a_tls_redis_cluster_checks_the_nodes_against_the_ca_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new(dir.path()).expect("test CA");
    // Cluster bus connections prove both ends: the nodes' certificate
    // serves as client and server.
    let cert = ca.peer("redis", "redis").expect("redis certificate");
    let tls = TlsFiles { cert_file: cert.cert_file, key_file: cert.key_file, ca_file: ca.cert_file.clone() };
    let redis = RedisCluster::start_tls(tls).await.expect("redis cluster with TLS");
    assert!(redis.url().starts_with("rediss+cluster://"), "{}", redis.url());

    let pem = std::fs::read(&ca.cert_file).expect("read the CA");
    let store = RedisStore::connect_with_ca(&redis.url(), Some(pem)).await.expect("connect over TLS");
    let revision = store.create(conformance::sample(Kind::Model, "over-tls")).await.expect("create");
    let got = store.get(Kind::Model, "over-tls").await.expect("get");
    assert_eq!(got, Some(conformance::sample(Kind::Model, "over-tls")));
    assert_eq!(*store.subscribe().borrow(), revision);

    // Without the CA, the nodes' certificates are not trusted.
    assert!(RedisStore::connect(&redis.url()).await.is_err(), "connected without trusting the test CA");
}
