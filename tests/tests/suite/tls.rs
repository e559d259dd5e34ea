//! TLS wherever the gateway crosses a network, with certificates made at
//! test time: Redis over TLS (`rediss://`, the test CA), the control plane's
//! gRPC listener with mutual TLS for data planes (a data plane proves itself
//! with a client certificate only, and every node id it sends must be the
//! certificate's common name), and the data
//! plane's `/v1` listener, whose certificate is replaced on disk while it
//! runs. Every listener refuses plaintext clients.

use std::{path::Path, sync::Arc, time::Duration};

use gw_proto::pb;
use gw_tests::{
    certs::{Issued, TestCa},
    harness::{Cluster, Mode, eventually},
    mock::upstream::MockUpstream,
    redis::{RedisServer, TlsFiles},
    seed::{self, UPSTREAM_KEY},
};
use serde_json::{Value, json};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// The node name in the data plane's client certificate.
const NODE: &str = "dp-cert-0";

struct Fixture {
    cluster: Cluster,
    ca: TestCa,
    listener: Issued,
    key: String,
    redis: RedisServer,
    upstream: MockUpstream,
    _certs: tempfile::TempDir,
}

/// Redis, the control plane and one data plane, all on TLS; the data plane
/// reaches the control plane with a client certificate and no node key.
async fn setup() -> Fixture {
    setup_reloading(None).await
}

/// `setup`, the data plane checking its certificate files every
/// `reload_interval` (default 2 s).
async fn setup_reloading(reload_interval: Option<Duration>) -> Fixture {
    let certs = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new(certs.path()).expect("CA");
    let redis_cert = ca.server("redis", "redis").expect("redis certificate");
    let control = ca.server("control-plane", "control-plane").expect("control-plane certificate");
    let listener = ca.server("data-plane", "data-plane-first").expect("data-plane certificate");
    let client = ca.client("data-plane-client", NODE).expect("client certificate");
    let redis = RedisServer::start_tls(TlsFiles {
        cert_file: redis_cert.cert_file.clone(),
        key_file: redis_cert.key_file.clone(),
        ca_file: ca.cert_file.clone(),
    })
    .await
    .expect("redis-server with TLS");
    assert!(redis.url().starts_with("rediss://"), "{}", redis.url());
    let ca_file = ca.cert_file.clone();
    let (dp_listener, dp_client) = (listener.clone(), client.clone());
    let cluster = Cluster::start_configured(
        Mode::InProcess,
        &redis.url(),
        1,
        |cluster| {
            cluster.ca_file = Some(ca_file.clone());
            cluster.control_plane.store_ca_file = Some(ca_file.clone());
            cluster.control_plane.tls = Some(gw_control_plane::ServerTls {
                cert_file: control.cert_file.clone(),
                key_file: control.key_file.clone(),
                client_ca_file: Some(ca_file.clone()),
                require_client_cert: true,
            });
        },
        |_, dp| {
            // The certificate's name: a data plane naming another is refused.
            dp.node_id = NODE.into();
            dp.node_key = Some(String::new());
            let mut tls = gw_data_plane::ListenerTls::new(&dp_listener.cert_file, &dp_listener.key_file);
            if let Some(interval) = reload_interval {
                tls.reload_interval = interval;
            }
            dp.tls = Some(tls);
            dp.control_plane_tls = gw_data_plane::ClientTls {
                ca_file: Some(ca.cert_file.clone()),
                cert_file: Some(dp_client.cert_file.clone()),
                key_file: Some(dp_client.key_file.clone()),
            };
        },
    )
    .await
    .expect("cluster on TLS");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let mut admin = cluster.admin();
    seed::chat_model(&mut admin, &upstream.base_url(), &["default"]).await.expect("model and channel");
    let account = pb::CreateAccountRequest {
        name: "acme".into(),
        unlimited: true,
        groups: vec!["default".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account create").into_inner().id;
    let token = pb::CreateTokenRequest { account_id: account, unlimited: true, ..Default::default() };
    let key = admin.create_token(token).await.expect("token create").into_inner().key;
    Fixture { cluster, ca, listener, key, redis, upstream, _certs: certs }
}

/// Sends one chat request to the data plane; its status and body.
async fn chat(f: &Fixture) -> (u16, Value) {
    let response = f
        .cluster
        .http()
        .post(format!("{}/chat/completions", f.cluster.base_url(0)))
        .bearer_auth(&f.key)
        .json(&json!({ "model": "gpt-4o", "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .await
        .expect("an HTTPS answer");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The common name of the certificate the `/v1` listener presents to a new
/// connection.
async fn presented_name(f: &Fixture) -> Option<String> {
    let roots = gw_tls::load_roots(&f.ca.cert_file).expect("CA");
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(f.cluster.data_planes[0].addr).await.ok()?;
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    let tls = connector.connect(name, tcp).await.ok()?;
    let certs = tls.get_ref().1.peer_certificates()?;
    gw_tls::peer_name(certs.first()?)
}

/// A policy-service client over TLS trusting the test CA, with no client
/// certificate.
fn policy_client(f: &Fixture) -> pb::policy_service_client::PolicyServiceClient<tonic::transport::Channel> {
    let pem = std::fs::read(&f.ca.cert_file).expect("CA");
    let endpoint = Endpoint::from_shared(f.cluster.control_plane_url())
        .expect("url")
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
        .expect("TLS");
    pb::policy_service_client::PolicyServiceClient::new(endpoint.connect_lazy())
}

fn replace_pair(target: &Issued, with: &Issued) {
    let copy = |from: &Path, to: &Path| std::fs::copy(from, to).expect("copy");
    copy(&with.key_file, &target.key_file);
    copy(&with.cert_file, &target.cert_file);
}

#[tokio::test]
async fn a_chat_request_and_gwctl_cross_tls_and_the_node_is_known_by_its_certificate() {
    gw_tls::install_provider();
    let f = setup().await;
    let ready = eventually("the data plane to route gpt-4o", Duration::from_secs(10), || async {
        let (status, body) = chat(&f).await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(ready["object"], "chat.completion", "{ready}");
    let upstream = f.upstream.last_request().expect("the upstream was called");
    assert_eq!(upstream.header("authorization"), Some(format!("Bearer {UPSTREAM_KEY}").as_str()));

    // The control plane names the data plane as its certificate does and
    // books its usage under that name.
    let planes = f.cluster.admin().list_data_planes(pb::ListRequest::default()).await.expect("list").into_inner();
    let names: Vec<&str> = planes.items.iter().map(|p| p.node_id.as_str()).collect();
    assert_eq!(names, [NODE]);
    let admin = f.cluster.admin();
    let records = eventually("the usage record", Duration::from_secs(10), || {
        let mut admin = admin.clone();
        async move {
            let request = pb::ListUsageRequest { limit: 10, ..Default::default() };
            let items = admin.list_usage(request).await.ok()?.into_inner().items;
            (!items.is_empty()).then_some(items)
        }
    })
    .await;
    assert!(records.iter().all(|r| r.node_id == NODE), "{records:?}");

    // gwctl over https://, trusting the CA file.
    let channels = f.cluster.gwctl(&["channel", "list"]).await.expect("gwctl over https");
    assert_eq!(channels["items"][0]["name"], "main", "{channels}");
}

#[tokio::test]
async fn plaintext_clients_are_refused_on_every_listener() {
    gw_tls::install_provider();
    let f = setup().await;

    // Plain HTTP to the HTTPS /v1 listener.
    let plain = reqwest::Client::new().get(format!("http://{}/v1/models", f.cluster.data_planes[0].addr)).send().await;
    assert!(plain.as_ref().map_or(true, |r| !r.status().is_success()), "plain HTTP was served: {plain:?}");

    // Plaintext gRPC to the TLS control plane.
    let channel =
        Endpoint::from_shared(format!("http://{}", f.cluster.control_plane.addr)).expect("url").connect_lazy();
    let mut admin = pb::admin_service_client::AdminServiceClient::new(channel);
    let mut request = tonic::Request::new(pb::ListRequest::default());
    request.metadata_mut().insert("authorization", format!("Bearer {}", f.cluster.admin_key).parse().expect("key"));
    assert!(admin.list_channels(request).await.is_err(), "plaintext gRPC was served");

    // A data plane with neither a client certificate nor (as mTLS is
    // required) with only the node key.
    let mut policy = policy_client(&f);
    let ask = pb::AcquirePermitsRequest { node_id: "intruder".into(), ..Default::default() };
    let refused = policy.acquire_permits(ask.clone()).await.expect_err("admitted without a certificate");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let mut with_key = tonic::Request::new(ask);
    with_key.metadata_mut().insert("authorization", format!("Bearer {}", f.cluster.node_key).parse().expect("key"));
    let refused = policy.acquire_permits(with_key).await.expect_err("admitted with the node key alone");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

    // Plaintext Redis to the TLS-only server.
    let plain = format!("redis://127.0.0.1:{}/", f.redis.port());
    let pong = async {
        let client = redis::Client::open(plain)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    let pong = tokio::time::timeout(Duration::from_secs(10), pong).await;
    assert!(!matches!(pong, Ok(Ok(_))), "plaintext Redis answered: {pong:?}");
}

#[tokio::test]
async fn a_replaced_certificate_is_presented_to_new_connections_without_a_restart() {
    gw_tls::install_provider();
    let f = setup().await;
    assert_eq!(presented_name(&f).await.as_deref(), Some("data-plane-first"));

    let second = f.ca.server("data-plane-second", "data-plane-second").expect("second certificate");
    replace_pair(&f.listener, &second);
    eventually("the listener to present the new certificate", Duration::from_secs(15), || async {
        (presented_name(&f).await.as_deref() == Some("data-plane-second")).then_some(())
    })
    .await;

    // Served over the new certificate, without a restart.
    let (status, body) = chat(&f).await;
    assert_eq!(status, 200, "{body}");
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_the_certificate_at_once() {
    gw_tls::install_provider();
    // Polling alone would take an hour: only the signal can reload it.
    let f = setup_reloading(Some(Duration::from_secs(3600))).await;
    assert_eq!(presented_name(&f).await.as_deref(), Some("data-plane-first"));
    let second = f.ca.server("data-plane-hup", "data-plane-hup").expect("new certificate");
    replace_pair(&f.listener, &second);
    let hup = tokio::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .await
        .expect("kill -HUP");
    assert!(hup.success());
    eventually("the listener to present the certificate after SIGHUP", Duration::from_secs(10), || async {
        (presented_name(&f).await.as_deref() == Some("data-plane-hup")).then_some(())
    })
    .await;
}

/// A policy client over mutual TLS with the data plane's client
/// certificate (and, unused under mutual TLS, the node key).
fn certified_client(f: &Fixture, client: &Issued) -> gw_tests::node::Policy {
    let read = |path: &Path| std::fs::read(path).expect("PEM file");
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(&f.ca.cert_file)))
        .identity(tonic::transport::Identity::from_pem(read(&client.cert_file), read(&client.key_file)));
    let endpoint = Endpoint::from_shared(f.cluster.control_plane_url()).expect("url").tls_config(tls).expect("TLS");
    let key = gw_tests::harness::AdminKey::new(&f.cluster.node_key).expect("key");
    pb::policy_service_client::PolicyServiceClient::with_interceptor(endpoint.connect_lazy(), key)
}

#[tokio::test]
async fn a_data_plane_is_refused_whatever_it_names_but_its_certificates_node() {
    gw_tls::install_provider();
    let f = setup().await;
    let client = f.ca.client("impostor-client", NODE).expect("client certificate");

    let mut posing = certified_client(&f, &client);
    let refused = gw_tests::node::open(&mut posing, "dp-someone-else", 0).await.err().expect("a hello as another node");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");

    let mut policy = certified_client(&f, &client);
    let _session = gw_tests::node::open(&mut policy, NODE, 0).await.expect("a hello as the certificate's node");
    let record = |node: &str| pb::UsageRecord {
        request_id: format!("from-{node}"),
        token_id: "tok_nobody".into(),
        account_id: "acc_nobody".into(),
        node_id: node.into(),
        ..Default::default()
    };
    let as_other = pb::ReportUsageRequest { node_id: "dp-someone-else".into(), records: vec![record(NODE)] };
    let refused = policy.report_usage(as_other).await.expect_err("a report as another node");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let naming_other = pb::ReportUsageRequest { node_id: NODE.into(), records: vec![record("dp-someone-else")] };
    let refused = policy.report_usage(naming_other).await.expect_err("a record of another node");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let health = pb::ChannelHealthRequest { node_id: "dp-someone-else".into(), failures: Vec::new() };
    let refused = policy.report_channel_health(health).await.expect_err("a health report as another node");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");

    // Its own node's records reach the ledger (which refuses these: they
    // name no real token).
    let own = pb::ReportUsageRequest { node_id: NODE.into(), records: vec![record(NODE)] };
    assert_eq!(policy.report_usage(own).await.expect("a report as itself").into_inner().refused, 1);
}
