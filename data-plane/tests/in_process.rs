//! The real data plane in-process against a scripted control plane (a tonic
//! `PolicyService` this test drives) and a scripted upstream on loopback:
//! discovery, persistence, forwarding, SSE, metering, the spend overlay and
//! the usage spool, end to end.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::{
    net::SocketAddr,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Json, Router, body::Bytes, http::HeaderMap, routing::post};
use gw_proto::pb::{
    self,
    policy_service_server::{PolicyService, PolicyServiceServer},
};
use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::{StreamExt as _, wrappers::ReceiverStream};
use tonic::{Request, Response, Status, Streaming};

const NODE_KEY: &str = "node-secret";
const CLIENT_KEY: &str = "sk-client-key-1";
const UPSTREAM_KEY: &str = "sk-upstream-secret";

// ---------------------------------------------------------------- control plane

type WatchTx = mpsc::Sender<Result<pb::WatchResponse, Status>>;

/// A watch session the test drives: the Hello it opened with, where to send
/// responses, and the ACKs that came back.
struct Session {
    hello: pb::Hello,
    tx: WatchTx,
    acks: mpsc::UnboundedReceiver<pb::Ack>,
}

/// What the fake control plane leases in all, in micro-USD.
const LEASABLE: i64 = 60_000;

#[derive(Clone)]
struct FakePolicy {
    sessions: mpsc::UnboundedSender<Session>,
    reports: Arc<Mutex<Vec<pb::UsageRecord>>>,
    /// Budget left to lease (one pool for every budget).
    spend: Arc<Mutex<i64>>,
}

#[tonic::async_trait]
impl PolicyService for FakePolicy {
    type WatchStream = ReceiverStream<Result<pb::WatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        check_key(&request)?;
        let mut incoming = request.into_inner();
        let Some(Ok(pb::WatchRequest { kind: Some(pb::watch_request::Kind::Hello(hello)) })) = incoming.next().await
        else {
            return Err(Status::invalid_argument("hello first"));
        };
        let (tx, rx) = mpsc::channel(16);
        let (ack_tx, acks) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(message)) = incoming.next().await {
                if let Some(pb::watch_request::Kind::Ack(ack)) = message.kind {
                    let _ = ack_tx.send(ack);
                }
            }
        });
        let _ = self.sessions.send(Session { hello, tx, acks });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn report_usage(
        &self,
        request: Request<pb::ReportUsageRequest>,
    ) -> Result<Response<pb::ReportUsageResponse>, Status> {
        check_key(&request)?;
        let records = request.into_inner().records;
        let mut stored = self.reports.lock().unwrap();
        let mut applied = 0;
        for record in records {
            if !stored.iter().any(|r| r.request_id == record.request_id) {
                stored.push(record);
                applied += 1;
            }
        }
        Ok(Response::new(pb::ReportUsageResponse { applied, duplicates: 0, revision: 0, refused: 0 }))
    }

    async fn lease_slots(
        &self,
        request: Request<pb::LeaseSlotsRequest>,
    ) -> Result<Response<pb::LeaseSlotsResponse>, Status> {
        check_key(&request)?;
        let request = request.into_inner();
        let grants = request
            .asks
            .into_iter()
            .map(|ask| pb::SlotGrant { key: ask.key, granted: ask.want, held: ask.want })
            .collect();
        Ok(Response::new(pb::LeaseSlotsResponse { grants, ttl_secs: request.ttl_secs }))
    }

    async fn acquire_permits(
        &self,
        request: Request<pb::AcquirePermitsRequest>,
    ) -> Result<Response<pb::AcquirePermitsResponse>, Status> {
        check_key(&request)?;
        let grants = request
            .into_inner()
            .asks
            .into_iter()
            .map(|ask| pb::PermitGrant { key: ask.key, granted: ask.want, window_start: 0, window_end: i64::MAX })
            .collect();
        Ok(Response::new(pb::AcquirePermitsResponse { grants }))
    }

    async fn acquire_spend(
        &self,
        request: Request<pb::AcquireSpendRequest>,
    ) -> Result<Response<pb::AcquireSpendResponse>, Status> {
        check_key(&request)?;
        let request = request.into_inner();
        let mut left = self.spend.lock().unwrap();
        let mut grants = Vec::new();
        for ask in request.asks {
            let granted = if ask.need_micros <= *left { ask.want_micros.min(*left) } else { 0 };
            *left -= granted;
            grants.push(pb::SpendGrant {
                budget: ask.budget,
                granted_micros: granted,
                remaining_micros: *left,
                ..Default::default()
            });
        }
        Ok(Response::new(pb::AcquireSpendResponse { grants, ttl_secs: request.ttl_secs, data_planes: 1 }))
    }

    async fn return_spend(
        &self,
        request: Request<pb::ReturnSpendRequest>,
    ) -> Result<Response<pb::ReturnSpendResponse>, Status> {
        check_key(&request)?;
        *self.spend.lock().unwrap() += request.into_inner().returns.iter().map(|r| r.amount_micros).sum::<i64>();
        Ok(Response::new(pb::ReturnSpendResponse {}))
    }

    async fn create_video_task(
        &self,
        _: Request<pb::CreateVideoTaskRequest>,
    ) -> Result<Response<pb::CreateVideoTaskResponse>, Status> {
        Err(Status::unimplemented("video tasks are tested end to end"))
    }

    async fn record_video_upstream(
        &self,
        _: Request<pb::RecordVideoUpstreamRequest>,
    ) -> Result<Response<pb::VideoTask>, Status> {
        Err(Status::unimplemented("video tasks are tested end to end"))
    }

    async fn get_video_task(&self, _: Request<pb::GetVideoTaskRequest>) -> Result<Response<pb::VideoTask>, Status> {
        Err(Status::unimplemented("video tasks are tested end to end"))
    }

    async fn record_batch_file(
        &self,
        _: Request<pb::RecordBatchFileRequest>,
    ) -> Result<Response<pb::BatchFile>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn get_batch_file(&self, _: Request<pb::BatchRef>) -> Result<Response<pb::BatchFile>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn list_batch_files(
        &self,
        _: Request<pb::ListBatchItemsRequest>,
    ) -> Result<Response<pb::ListBatchFilesResponse>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn delete_batch_file(&self, _: Request<pb::BatchRef>) -> Result<Response<pb::BatchFile>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn create_batch(
        &self,
        _: Request<pb::CreateBatchRequest>,
    ) -> Result<Response<pb::CreateBatchResponse>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn record_batch_upstream(
        &self,
        _: Request<pb::RecordBatchUpstreamRequest>,
    ) -> Result<Response<pb::Batch>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn get_batch(&self, _: Request<pb::BatchRef>) -> Result<Response<pb::Batch>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn list_batches(
        &self,
        _: Request<pb::ListBatchItemsRequest>,
    ) -> Result<Response<pb::ListBatchesResponse>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn cancel_batch(&self, _: Request<pb::BatchRef>) -> Result<Response<pb::Batch>, Status> {
        Err(Status::unimplemented("files and batches are tested end to end"))
    }

    async fn report_channel_health(
        &self,
        request: Request<pb::ChannelHealthRequest>,
    ) -> Result<Response<pb::ChannelHealthResponse>, Status> {
        check_key(&request)?;
        Ok(Response::new(pb::ChannelHealthResponse::default()))
    }
}

fn check_key<T>(request: &Request<T>) -> Result<(), Status> {
    let ok =
        request.metadata().get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {NODE_KEY}"));
    if ok { Ok(()) } else { Err(Status::unauthenticated("bad node key")) }
}

struct ControlPlane {
    addr: SocketAddr,
    sessions: mpsc::UnboundedReceiver<Session>,
    reports: Arc<Mutex<Vec<pb::UsageRecord>>>,
    spend: Arc<Mutex<i64>>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
}

async fn control_plane(addr: Option<SocketAddr>) -> ControlPlane {
    let listener = tokio::net::TcpListener::bind(addr.unwrap_or_else(|| "127.0.0.1:0".parse().unwrap())).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (sessions_tx, sessions) = mpsc::unbounded_channel();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let spend = Arc::new(Mutex::new(LEASABLE));
    let policy = FakePolicy { sessions: sessions_tx, reports: reports.clone(), spend: spend.clone() };
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder().add_service(PolicyServiceServer::new(policy)).serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async {
                let _ = stopped.await;
            },
        ),
    );
    ControlPlane { addr, sessions, reports, spend, stop: Some(stop), server: Some(server) }
}

impl ControlPlane {
    async fn session(&mut self) -> Session {
        tokio::time::timeout(Duration::from_secs(10), self.sessions.recv()).await.expect("no watch session").unwrap()
    }

    fn reported(&self) -> Vec<pb::UsageRecord> {
        self.reports.lock().unwrap().clone()
    }

    /// Stops serving and waits until the port is free again.
    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
        }
    }
}

impl Session {
    async fn send(&mut self, response: pb::WatchResponse) -> pb::Ack {
        let revision = response.revision;
        self.tx.send(Ok(response)).await.unwrap();
        self.ack(revision).await
    }

    async fn ack(&mut self, revision: u64) -> pb::Ack {
        loop {
            let ack = tokio::time::timeout(Duration::from_secs(10), self.acks.recv()).await.expect("no ack").unwrap();
            if ack.revision == revision {
                return ack;
            }
        }
    }
}

// ---------------------------------------------------------------- policy

fn resource(kind: pb::resource::Kind) -> pb::Resource {
    pb::Resource { kind: Some(kind) }
}

fn policy(revision: u64, upstream: SocketAddr, balance_micros: i64) -> pb::WatchResponse {
    use pb::resource::Kind as K;
    let key_hash = hex::encode(sha2::Sha256::digest(CLIENT_KEY.as_bytes()));
    pb::WatchResponse {
        revision,
        full: true,
        base: 0,
        upserts: vec![
            resource(K::Account(pb::Account {
                id: "acct".into(),
                balance_micros,
                status: "enabled".into(),
                ..Default::default()
            })),
            resource(K::Group(pb::Group { name: "default".into(), ratio: 2.0, ..Default::default() })),
            resource(K::Token(pb::Token {
                id: "tok".into(),
                account_id: "acct".into(),
                group: "default".into(),
                key_hash,
                status: "enabled".into(),
                unlimited: true,
                ..Default::default()
            })),
            resource(K::Channel(pb::Channel {
                id: "chan".into(),
                r#type: "openai".into(),
                base_url: format!("http://{upstream}/v1/"),
                api_key: UPSTREAM_KEY.into(),
                models: vec!["gpt-test".into(), "broken".into()],
                model_map: [("gpt-test".to_string(), "gpt-upstream".to_string())].into(),
                groups: vec!["default".into()],
                status: "enabled".into(),
                ..Default::default()
            })),
            resource(K::Model(pb::Model {
                id: "gpt-test".into(),
                input_price_micros: 1_000_000,
                output_price_micros: 2_000_000,
                ..Default::default()
            })),
            resource(K::Model(pb::Model { id: "broken".into(), ..Default::default() })),
            // Streams one chunk, then stalls; its channel gives up after 300 ms.
            resource(K::Channel(pb::Channel {
                id: "slow-chan".into(),
                base_url: format!("http://{upstream}/v1"),
                api_key: UPSTREAM_KEY.into(),
                models: vec!["stall".into()],
                groups: vec!["default".into()],
                status: "enabled".into(),
                idle_timeout_ms: 300,
                ..Default::default()
            })),
            resource(K::Model(pb::Model { id: "stall".into(), input_price_micros: 1_000_000, ..Default::default() })),
            // Rejected: not a valid key hash. Everything else still applies.
            resource(K::Token(pb::Token { id: "bad".into(), key_hash: "xyz".into(), ..Default::default() })),
        ],
        deletes: vec![],
        ..Default::default()
    }
}

// ---------------------------------------------------------------- upstream

#[derive(Default)]
struct Seen {
    requests: Vec<(String, Value)>,
}

async fn upstream() -> (SocketAddr, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let state = seen.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |headers: HeaderMap, body: Bytes| {
            let state = state.clone();
            async move {
                let auth = headers.get("authorization").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
                let body: Value = serde_json::from_slice(&body).unwrap();
                state.lock().unwrap().requests.push((auth, body.clone()));
                upstream_answer(&body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

const SSE_CONTENT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n";
const SSE_USAGE: &str = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":50}}\n\n";
const SSE_DONE: &str = "data: [DONE]\n\n";

fn upstream_answer(body: &Value) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    if body["model"] == "broken" {
        let error = json!({"error": {"message": format!("Incorrect API key provided: {UPSTREAM_KEY}")}});
        return (axum::http::StatusCode::UNAUTHORIZED, Json(error)).into_response();
    }
    if body["model"] == "stall" {
        let stream =
            tokio_stream::iter([SSE_CONTENT]).map(|e| Ok::<_, std::io::Error>(Bytes::from_static(e.as_bytes())));
        let stalled = stream.chain(tokio_stream::pending());
        return ([("content-type", "text/event-stream")], axum::body::Body::from_stream(stalled)).into_response();
    }
    if body["stream"] == true {
        let events = [SSE_CONTENT, SSE_CONTENT, SSE_USAGE, SSE_DONE];
        let stream = tokio_stream::iter(events).then(|e| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<_, std::io::Error>(Bytes::from_static(e.as_bytes()))
        });
        return ([("content-type", "text/event-stream")], axum::body::Body::from_stream(stream)).into_response();
    }
    Json(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 500, "prompt_tokens_details": {"cached_tokens": 0}}
    }))
    .into_response()
}

// ---------------------------------------------------------------- helpers

async fn start(cp: SocketAddr, dir: &Path) -> gw_data_plane::Handle {
    let mut config = gw_data_plane::Config::new("127.0.0.1:0".parse().unwrap(), format!("http://{cp}"), dir, NODE_KEY);
    config.report_interval = Duration::from_millis(20);
    // Serves while the control plane is away (the restart test).
    config.budget.offline_allowance = Some(1_000_000);
    gw_data_plane::start(config).await.unwrap()
}

async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn chat(dp: SocketAddr, body: Value) -> (u16, HeaderMap, Bytes) {
    let response = reqwest::Client::new()
        .post(format!("http://{dp}/v1/chat/completions"))
        .bearer_auth(CLIENT_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.bytes().await.unwrap())
}

fn message(body: &Bytes) -> String {
    serde_json::from_slice::<Value>(body).unwrap()["error"]["message"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn proxies_meters_and_reports_with_a_live_control_plane() {
    let dir = tempfile::tempdir().unwrap();
    let (up, seen) = upstream().await;
    let mut cp = control_plane(None).await;
    let dp = start(cp.addr, dir.path()).await;
    let ready = format!("http://{}/ready", dp.addr);
    assert_eq!(reqwest::get(&ready).await.unwrap().status(), 503);

    let mut session = cp.session().await;
    assert_eq!(session.hello.revision, 0);
    assert_eq!(session.hello.address, dp.addr.to_string());
    let ack = session.send(policy(7, up, 10_000)).await;
    assert_eq!(ack.rejected, ["token/bad"]);
    assert_eq!(dp.revision(), 7);
    assert_eq!(reqwest::get(&ready).await.unwrap().status(), 200);
    eventually("snapshot file", || dir.path().join("snapshot.pb").exists().then_some(())).await;

    // Non-streamed: the model is mapped, the channel key sent, the body returned as is.
    let (status, headers, body) = chat(dp.addr, json!({"model": "gpt-test", "messages": []})).await;
    assert_eq!(status, 200, "{body:?}");
    let request_id = headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["choices"][0]["message"]["content"], "hello");
    {
        let seen = seen.lock().unwrap();
        let (auth, sent) = seen.requests.last().unwrap();
        assert_eq!(auth, &format!("Bearer {UPSTREAM_KEY}"));
        assert_eq!(sent["model"], "gpt-upstream");
    }
    // 1000 in × $1/M + 500 out × $2/M = 2000 µ$, group ratio 2 → 4000 µ$.
    let record = eventually("usage report", || cp.reported().into_iter().find(|r| r.request_id == request_id)).await;
    assert_eq!((record.prompt_tokens, record.completion_tokens, record.cost_micros), (1000, 500, 4000));
    assert_eq!(
        (record.token_id.as_str(), record.account_id.as_str(), record.channel_id.as_str()),
        ("tok", "acct", "chan")
    );
    assert_eq!(record.model, "gpt-test");
    assert_eq!(record.node_id, dp.node_id());

    // Streamed: events pass through, the usage chunk we asked for is withheld.
    let (status, headers, body) = chat(dp.addr, json!({"model": "gpt-test", "messages": [], "stream": true})).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    assert_eq!(String::from_utf8_lossy(&body), format!("{SSE_CONTENT}{SSE_CONTENT}{SSE_DONE}"));
    assert_eq!(seen.lock().unwrap().requests.last().unwrap().1["stream_options"]["include_usage"], true);
    let stream_id = headers["x-request-id"].to_str().unwrap().to_owned();
    let record = eventually("stream usage", || cp.reported().into_iter().find(|r| r.request_id == stream_id)).await;
    // (100 × 1 + 50 × 2) µ$ × 2 = 400 µ$.
    assert_eq!((record.prompt_tokens, record.completion_tokens, record.cost_micros), (100, 50, 400));

    // A client that asked for usage gets the usage chunk.
    let asked = json!({"model": "gpt-test", "messages": [], "stream": true, "stream_options": {"include_usage": true}});
    let (_, _, body) = chat(dp.addr, asked).await;
    assert_eq!(String::from_utf8_lossy(&body), format!("{SSE_CONTENT}{SSE_CONTENT}{SSE_USAGE}{SSE_DONE}"));

    // Upstream refusals keep their status; the channel key never leaks.
    let (status, _, body) = chat(dp.addr, json!({"model": "broken", "messages": []})).await;
    assert_eq!(status, 401);
    let text = message(&body);
    assert!(text.starts_with("upstream error: Incorrect API key provided: ***"), "{text}");
    assert!(!String::from_utf8_lossy(&body).contains(UPSTREAM_KEY));

    // Catalogue checks.
    let (status, _, body) = chat(dp.addr, json!({"model": "nope", "messages": []})).await;
    assert_eq!((status, message(&body).starts_with("模型不存在: nope (request id: ")), (404, true));

    // Spending stops where the control plane stops leasing: each call
    // reserves its bound (4096 output tokens by default: 16,404 µ$) and
    // costs 4000 µ$, so the lease of LEASABLE runs out within a dozen calls.
    let mut refused = None;
    for _ in 0..20 {
        let (status, headers, body) = chat(dp.addr, json!({"model": "gpt-test", "messages": []})).await;
        if status != 200 {
            refused = Some((status, headers, body));
            break;
        }
    }
    let (status, headers, body) = refused.expect("spending never stopped");
    assert_eq!(status, 403);
    assert_eq!(headers["x-should-retry"], "false");
    assert!(message(&body).starts_with("用户额度不足, 剩余额度: ＄"), "{}", message(&body));
    let admitted = cp.reported().len();
    let spent: i64 = cp.reported().iter().map(|r| r.cost_micros).sum();
    assert!(spent <= LEASABLE, "{admitted} calls spent {spent} µ$ of {LEASABLE} leasable");
    *cp.spend.lock().unwrap() += 1_000_000;

    // The control plane's delta (at the revision the reports returned)
    // replaces the local overlay.
    let topped = pb::WatchResponse {
        revision: 100,
        full: false,
        base: 7,
        upserts: vec![resource(pb::resource::Kind::Account(pb::Account {
            id: "acct".into(),
            balance_micros: 1_000_000,
            status: "enabled".into(),
            ..Default::default()
        }))],
        deletes: vec![],
        ..Default::default()
    };
    assert!(session.send(topped).await.rejected.is_empty());
    let (status, _, _) = chat(dp.addr, json!({"model": "gpt-test", "messages": []})).await;
    assert_eq!(status, 200);

    // A delta on the wrong base makes the data plane ask for a full snapshot.
    let stray = pb::WatchResponse { revision: 102, full: false, base: 101, ..Default::default() };
    session.tx.send(Ok(stray)).await.unwrap();
    let resync = cp.session().await;
    assert!(resync.hello.want_full, "the resync asks for a full snapshot");
    assert_eq!(resync.hello.revision, 100, "and says what it holds");
    assert_eq!(dp.revision(), 100);

    dp.shutdown().await;
    cp.stop().await;
}

#[tokio::test]
async fn restarts_serve_the_saved_snapshot_and_spool_usage_until_the_control_plane_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (up, _) = upstream().await;
    let mut cp = control_plane(None).await;
    let cp_addr = cp.addr;
    let dp = start(cp.addr, dir.path()).await;
    let mut session = cp.session().await;
    session.send(policy(9, up, 1_000_000)).await;
    eventually("snapshot file", || dir.path().join("snapshot.pb").exists().then_some(())).await;
    dp.shutdown().await;
    cp.stop().await;
    drop(session);

    // Control plane gone: the restarted data plane serves the saved policy
    // and keeps usage in its spool.
    let dp = start(cp_addr, dir.path()).await;
    assert_eq!(dp.revision(), 9);
    let (status, headers, _) = chat(dp.addr, json!({"model": "gpt-test", "messages": []})).await;
    assert_eq!(status, 200);
    let request_id = headers["x-request-id"].to_str().unwrap().to_owned();
    let spool = dir.path().join("spool");
    eventually("spooled segment", || {
        std::fs::read_dir(&spool)
            .unwrap()
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "log"))
            .then_some(())
    })
    .await;
    dp.shutdown().await;

    // Control plane back on the same address: the next start resends the
    // spool and says which revision it already has.
    let mut cp = control_plane(Some(cp_addr)).await;
    let dp = start(cp_addr, dir.path()).await;
    let session = cp.session().await;
    assert_eq!(session.hello.revision, 9);
    let record =
        eventually("spooled usage delivered", || cp.reported().into_iter().find(|r| r.request_id == request_id)).await;
    assert_eq!(record.cost_micros, 4000);
    eventually("spool emptied", || {
        (!std::fs::read_dir(&spool).unwrap().flatten().any(|e| e.path().is_file())).then_some(())
    })
    .await;
    assert_eq!(cp.reported().len(), 1, "each record is reported once");
    dp.shutdown().await;
    cp.stop().await;
}

#[tokio::test]
async fn cut_streams_are_metered_once_whether_the_client_or_the_upstream_stalls() {
    let dir = tempfile::tempdir().unwrap();
    let (up, _) = upstream().await;
    let mut cp = control_plane(None).await;
    let dp = start(cp.addr, dir.path()).await;
    let mut session = cp.session().await;
    session.send(policy(3, up, 1_000_000)).await;
    let stall = json!({"model": "stall", "messages": [{"role": "user", "content": "hello there"}], "stream": true});

    // The client reads the first event and hangs up.
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/chat/completions", dp.addr))
        .bearer_auth(CLIENT_KEY)
        .json(&stall)
        .send()
        .await
        .unwrap();
    let gone_id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let mut body = response.bytes_stream();
    assert_eq!(body.next().await.unwrap().unwrap(), SSE_CONTENT.as_bytes());
    drop(body);
    let record = eventually("disconnect metered", || cp.reported().into_iter().find(|r| r.request_id == gone_id)).await;
    assert_eq!(record.status, 499);
    assert!(record.estimated);
    assert_eq!(record.completion_tokens, 1, "one content event was delivered");
    assert!(record.prompt_tokens > 0 && record.cost_micros > 0);

    // The upstream stalls past the channel's idle timeout: the stream is cut.
    let started = Instant::now();
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/chat/completions", dp.addr))
        .bearer_auth(CLIENT_KEY)
        .json(&stall)
        .send()
        .await
        .unwrap();
    let idle_id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(response.bytes().await.is_err(), "a cut stream must not look complete");
    assert!(started.elapsed() < Duration::from_secs(5));
    let record = eventually("idle cut metered", || cp.reported().into_iter().find(|r| r.request_id == idle_id)).await;
    assert_eq!(record.status, 504);

    dp.shutdown().await;
    cp.stop().await;
}

/// `full` cut into chunks of `size` upserts, all at its revision, `more` on
/// every one but the last.
fn chunks(full: pb::WatchResponse, size: usize) -> Vec<pb::WatchResponse> {
    let parts: Vec<Vec<pb::Resource>> = full.upserts.chunks(size).map(<[_]>::to_vec).collect();
    let last = parts.len() - 1;
    parts
        .into_iter()
        .enumerate()
        .map(|(n, upserts)| pb::WatchResponse { upserts, more: n < last, ..full.clone() })
        .collect()
}

#[tokio::test]
async fn a_chunked_snapshot_applies_whole_on_its_last_chunk_and_a_cut_one_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let (up, _) = upstream().await;
    let mut cp = control_plane(None).await;
    let dp = start(cp.addr, dir.path()).await;
    let mut session = cp.session().await;

    // Revision 3 in chunks of two: nothing is acknowledged or served before
    // the last chunk, then all of it is.
    let mut parts = chunks(policy(3, up, 1_000_000), 2);
    assert!(parts.len() >= 4, "enough chunks to cut in the middle");
    let last = parts.pop().unwrap();
    for part in parts {
        session.tx.send(Ok(part)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(dp.revision(), 0, "a partial snapshot was applied");
    assert!(session.acks.try_recv().is_err(), "a partial snapshot was acknowledged");
    let ack = session.send(last).await;
    assert_eq!(ack.rejected, ["token/bad"], "resources of every chunk were converted");
    assert_eq!(dp.revision(), 3);
    let (status, _, _) = chat(dp.addr, json!({"model": "gpt-test", "messages": []})).await;
    assert_eq!(status, 200, "the token from one chunk and the channel from another both apply");

    // Revision 4 without the client's token, cut after its first chunks: the
    // data plane keeps revision 3 and still serves the token.
    let mut next = policy(4, up, 1_000_000);
    next.upserts.retain(|r| !matches!(&r.kind, Some(pb::resource::Kind::Token(t)) if t.id == "tok"));
    let parts = chunks(next.clone(), 2);
    for part in parts.into_iter().take(2) {
        session.tx.send(Ok(part)).await.unwrap();
    }
    session.tx.send(Err(Status::unavailable("cut"))).await.unwrap();
    drop(session);
    let mut session = cp.session().await;
    assert_eq!(session.hello.revision, 3, "the reconnect holds the last whole snapshot");
    assert_eq!(dp.revision(), 3);
    let (status, _, _) = chat(dp.addr, json!({"model": "gpt-test", "messages": []})).await;
    assert_eq!(status, 200, "the cut snapshot took effect");

    // Sent whole this time, revision 4 applies and the token is gone.
    for part in chunks(next, 3) {
        let more = part.more;
        session.tx.send(Ok(part)).await.unwrap();
        if !more {
            session.ack(4).await;
        }
    }
    assert_eq!(dp.revision(), 4);
    let (status, _, _) = chat(dp.addr, json!({"model": "gpt-test", "messages": []})).await;
    assert_eq!(status, 401);
    dp.shutdown().await;
    cp.stop().await;
}
