//! Asynchronous video generation end to end: real Redis, the real control
//! plane and two data planes (in-process; as processes for the restart
//! scenario), the official OpenAI Python SDK and plain HTTP as clients, the
//! mock upstream's video API.

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::{self, Cluster, Mode, eventually},
    mock::upstream::MockUpstream,
    mock::video::{MockVideo, VideoScript, mp4_bytes, thumbnail_bytes},
    redis::RedisServer,
};
use serde_json::{Value, json};

const UPSTREAM_KEY: &str = "sk-upstream-video-0123456789";
const MODEL: &str = "sora-2";
const UPSTREAM_MODEL: &str = "sora-2-2025-10-06";
/// $0.10 per second in group `vip` at ratio 1.5: 4 s cost $0.60.
const COST_4S: i64 = 600_000;
/// The account's starting balance, $10.
const START: i64 = 10_000_000;

struct Fixture {
    cluster: Cluster,
    upstream: MockUpstream,
    video: MockVideo,
    account: String,
    token: String,
    key: String,
    _redis: RedisServer,
}

/// A cluster on Redis whose control plane polls every 300 ms; the video
/// model, a channel to the mock (mapping the model's name), an account with
/// $10 and a $5 token in group `vip` (ratio 1.5). In-process.
async fn setup() -> Fixture {
    setup_in(Mode::InProcess).await
}

/// `setup`, with the control plane and data planes run in `mode`.
async fn setup_in(mode: Mode) -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let video = MockVideo::of(&upstream);
    video.set_script(VideoScript { redirect: true, ..VideoScript::default() });
    let cluster = Cluster::start_with(mode, &redis.url(), 2, |cp| {
        cp.video.poll_interval = Duration::from_millis(300);
        cp.video.refresh_after = Duration::from_millis(200);
    })
    .await
    .expect("cluster");
    let mut admin = cluster.admin();
    let model = |id: &str, category: &str| pb::Model { id: id.into(), category: category.into(), ..Default::default() };
    admin.create_model(pb::Model { second_price_micros: 100_000, ..model(MODEL, "video") }).await.expect("model");
    admin.create_model(model("gpt-4o", "chat")).await.expect("chat model");
    admin.create_group(pb::Group { name: "vip".into(), ratio: 1.5, ..Default::default() }).await.expect("group");
    let channel = pb::Channel {
        name: "video".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: UPSTREAM_KEY.into(),
        has_key: true,
        models: vec![MODEL.into(), "gpt-4o".into()],
        model_map: [(MODEL.to_owned(), UPSTREAM_MODEL.to_owned())].into(),
        groups: vec!["default".into(), "vip".into()],
        weight: 1,
        ..Default::default()
    };
    admin.create_channel(channel).await.expect("channel");
    let (account, token, key) = customer(&cluster, "acme", 10_000_000, Some(5_000_000)).await;
    let fixture = Fixture { cluster, upstream, video, account, token, key, _redis: redis };
    for i in 0..2 {
        fixture.cluster.wait_until_served(i, &fixture.key).await;
    }
    fixture
}

/// A new account with `balance` µ$ and a token in `vip` with `quota` µ$
/// (bounded only by the account when `None`): (account, token, key).
async fn customer(cluster: &Cluster, name: &str, balance: i64, quota: Option<i64>) -> (String, String, String) {
    let mut admin = cluster.admin();
    let account = pb::CreateAccountRequest {
        name: name.into(),
        balance_micros: balance,
        groups: vec!["default".into(), "vip".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account create").into_inner().id;
    let token = pb::CreateTokenRequest {
        account_id: account.clone(),
        group: "vip".into(),
        unlimited: quota.is_none(),
        quota_micros: quota.unwrap_or(0),
        ..Default::default()
    };
    let created = admin.create_token(token).await.expect("token create").into_inner();
    (account, created.token.unwrap_or_default().id, created.key)
}

/// The stored task `id`, as `gwctl video get` reads it.
async fn stored(f: &Fixture, id: &str) -> pb::VideoTask {
    f.cluster.admin().get_video_task(pb::GetRequest { id: id.into() }).await.expect("video get").into_inner()
}

/// Stored tasks, as `gwctl video list [--account …] [--status …]` reads them.
async fn tasks(f: &Fixture, account: &str, status: &str) -> Vec<pb::VideoTask> {
    let request = pb::ListVideoTasksRequest {
        account_id: account.into(),
        status: status.into(),
        limit: 100,
        ..Default::default()
    };
    f.cluster.admin().list_video_tasks(request).await.expect("video list").into_inner().items
}

/// Usage records of `account`, newest first.
async fn usage(f: &Fixture, account: &str) -> Vec<pb::UsageRecord> {
    let request = pb::ListUsageRequest { account_id: account.into(), limit: 100, ..Default::default() };
    f.cluster.admin().list_usage(request).await.expect("usage list").into_inner().items
}

fn str_field(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap_or_else(|| panic!("no string {field:?} in {value}")).to_owned()
}

/// A reference image: a PNG signature and bytes that are not text.
fn image() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend((0..4096u32).map(|i| (i * 7 % 256) as u8));
    bytes
}

/// (account balance, token used) from the ledger.
async fn money(f: &Fixture, account: &str, token: &str) -> (i64, i64) {
    let mut admin = f.cluster.admin();
    let account = admin.get_account(pb::GetRequest { id: account.into() }).await.expect("account get").into_inner();
    let token = admin.get_token(pb::GetRequest { id: token.into() }).await.expect("token get").into_inner();
    (account.balance_micros, token.used_micros)
}

/// Waits for the ledger to show `expected`.
async fn money_reaches(f: &Fixture, expected: (i64, i64)) {
    eventually(&format!("balance and used to be {expected:?}"), Duration::from_secs(15), || async {
        (money(f, &f.account, &f.token).await == expected).then_some(())
    })
    .await;
}

/// Waits for the ledger to show `expected` on a finished task, then checks
/// that it stays there across five more poller rounds (nothing is charged or
/// refunded twice).
async fn money_settles_at(f: &Fixture, expected: (i64, i64)) {
    money_reaches(f, expected).await;
    poller_rounds(f, 5).await;
    assert_eq!(money(f, &f.account, &f.token).await, expected, "the ledger moved again");
}

/// Waits until the control plane's poller has swept `rounds` more times.
/// A sweep shows as a status query to the upstream about a sentinel task
/// that nobody polls and that stays queued: another account's, so the test
/// account's ledger is untouched. Call it only once the test's own
/// submissions are done (it changes the mock's script).
async fn poller_rounds(f: &Fixture, rounds: usize) {
    let (_, _, key) = customer(&f.cluster, "sentinel", 10_000_000, None).await;
    f.cluster.wait_until_served(0, &key).await;
    f.video.set_script(VideoScript { queued_for: Duration::from_secs(3_600), ..VideoScript::default() });
    let (status, body) = submit(f, 0, &key, "a sentinel that never finishes").await;
    assert_eq!(status, 200, "{body}");
    let sentinel = f.video.submissions().last().expect("the sentinel submission").id.clone();
    let before = f.video.status_polls(&sentinel);
    eventually(&format!("{rounds} poller rounds"), Duration::from_secs(15), || async {
        (f.video.status_polls(&sentinel) >= before + rounds).then_some(())
    })
    .await;
}

/// POSTs a multipart submission to data plane `i`: (status, body).
async fn submit(f: &Fixture, i: usize, key: &str, prompt: &str) -> (u16, Value) {
    let form = reqwest::multipart::Form::new()
        .text("model", MODEL)
        .text("prompt", prompt.to_owned())
        .text("seconds", "4")
        .part(
            "input_reference",
            reqwest::multipart::Part::bytes(image()).file_name("ref.png").mime_str("image/png").expect("mime"),
        );
    let response = f
        .cluster
        .http()
        .post(format!("{}/videos", f.cluster.base_url(i)))
        .bearer_auth(key)
        .multipart(form)
        .send()
        .await
        .expect("submit");
    let status = response.status().as_u16();
    (status, response.json().await.expect("submit answer is JSON"))
}

/// GETs `path` on data plane `i`: (status, body as text).
async fn get(f: &Fixture, i: usize, key: &str, path: &str) -> (u16, String) {
    let url = format!("http://{}{path}", f.cluster.data_planes[i].addr);
    let response = f.cluster.http().get(url).bearer_auth(key).send().await.expect("get");
    (response.status().as_u16(), response.text().await.expect("body"))
}

/// Polls `GET /v1/videos/{id}` on data plane `i` until the task is done.
async fn poll_until_done(f: &Fixture, i: usize, id: &str) -> Value {
    eventually(&format!("video {id} to finish"), Duration::from_secs(30), || async {
        let (status, body) = get(f, i, &f.key, &format!("/v1/videos/{id}")).await;
        assert_eq!(status, 200, "{body}");
        let task: Value = serde_json::from_str(&body).expect("JSON");
        matches!(task["status"].as_str(), Some("completed" | "failed")).then_some(task)
    })
    .await
}

fn error_message(body: &str) -> String {
    let body: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("error body is not JSON: {body}"));
    body["error"]["message"].as_str().unwrap_or_else(|| panic!("no error message in {body}")).to_owned()
}

#[tokio::test]
async fn the_openai_sdk_submits_on_one_data_plane_and_downloads_from_the_other() {
    let f = setup().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let image_path = dir.path().join("reference.png");
    std::fs::write(&image_path, image()).expect("write image");
    let out = dir.path().join("video.mp4");
    let (base_1, base_2) = (f.cluster.base_url(0), f.cluster.base_url(1));
    let (image_file, out_file) = (image_path.to_string_lossy(), out.to_string_lossy());
    let env = [
        ("GW_BASE_URL_1", base_1.as_str()),
        ("GW_BASE_URL_2", base_2.as_str()),
        ("GW_API_KEY", f.key.as_str()),
        ("GW_MODEL", MODEL),
        ("GW_IMAGE", &image_file),
        ("GW_OUT", &out_file),
    ];
    let result = harness::sdk("openai_video.py", &[], &env).await;
    let created = &result["created"];
    let id = str_field(created, "id");
    assert!(id.starts_with("video_"), "{created}");
    assert_eq!(created["task_id"], id.as_str(), "the id is also carried as task_id");
    assert_eq!(created["object"], "video");
    assert_eq!(created["model"], MODEL, "the model the client asked for, not the upstream's name");
    assert_eq!((created["status"].as_str(), created["progress"].as_i64()), (Some("queued"), Some(0)));
    assert_eq!(created["seconds"], "4", "seconds is a string");
    assert_eq!(created["size"], "1280x720");
    assert!(created["created_at"].as_i64().is_some_and(|t| t > 1_700_000_000), "{created}");
    assert_eq!(created["prompt"], "a paper boat on a calm lake at dawn", "the upstream's other fields pass through");

    let last = &result["final"];
    assert_eq!((last["status"].as_str(), last["progress"].as_i64()), (Some("completed"), Some(100)), "{last}");
    assert!(last["completed_at"].as_i64().is_some() && last["expires_at"].as_i64().is_some(), "{last}");
    assert_eq!(last["error"], Value::Null);
    assert!(result["statuses"].as_array().is_some_and(|s| s.last() == Some(&json!("completed"))), "{result}");
    let poll_after: u64 = result["poll_after_ms"].as_str().and_then(|s| s.parse().ok()).expect("openai-poll-after-ms");
    assert!((5_000..=10_000).contains(&poll_after), "poll after {poll_after} ms");

    assert_eq!(std::fs::read(&out).expect("downloaded video"), mp4_bytes().to_vec(), "the upstream's exact bytes");
    let thumbnail = std::fs::read(format!("{}.thumbnail", out.display())).expect("thumbnail");
    assert_eq!(thumbnail, thumbnail_bytes().to_vec(), "the variant is passed on");

    let submissions = f.video.submissions();
    assert_eq!(submissions.len(), 1);
    let submission = &submissions[0];
    assert_eq!(submission.authorization.as_deref(), Some(format!("Bearer {UPSTREAM_KEY}").as_str()));
    let field = |name: &str| submission.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    assert_eq!(field("model"), Some(UPSTREAM_MODEL), "the channel's model map applies");
    assert_eq!((field("seconds"), field("size")), (Some("4"), Some("1280x720")));
    let reference = submission.reference.as_ref().expect("input_reference reached the upstream");
    assert_eq!(reference.bytes.to_vec(), image(), "the reference arrived intact");
    assert_eq!((reference.filename.as_str(), reference.content_type.as_str()), ("reference.png", "image/png"));

    money_settles_at(&f, (START - COST_4S, COST_4S)).await;
    let usage = usage(&f, &f.account).await;
    assert_eq!(usage.len(), 1, "one charge: {usage:?}");
    assert_eq!(usage[0].request_id, format!("video:{id}"));
    assert_eq!(usage[0].cost_micros, COST_4S);

    let task = stored(&f, &id).await;
    assert_eq!((task.status.as_str(), task.refunded), ("completed", false));
    assert_eq!(task.cost_micros, COST_4S);
    assert_eq!(task.upstream_id, submission.id);
    let listed = tasks(&f, &f.account, "").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let failed = tasks(&f, "", "failed").await;
    assert!(failed.is_empty(), "{failed:?}");
}

#[tokio::test]
async fn a_failed_video_is_refunded_once_and_has_no_content() {
    let f = setup().await;
    let (status, created) = submit(&f, 0, &f.key, "this one should fail").await;
    assert_eq!(status, 200, "{created}");
    let id = str_field(&created, "id");
    money_reaches(&f, (START - COST_4S, COST_4S)).await;

    let (status, body) = get(&f, 1, &f.key, &format!("/v1/videos/{id}/content")).await;
    assert_eq!(status, 404, "{body}");
    assert!(error_message(&body).contains("does not exist yet"), "{body}");

    let task = poll_until_done(&f, 1, &id).await;
    assert_eq!(task["status"], "failed", "{task}");
    assert_eq!(task["error"]["code"], "video_generation_failed", "{task}");
    assert!(task["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{task}");

    let (status, body) = get(&f, 0, &f.key, &format!("/v1/videos/{id}/content")).await;
    assert_eq!(status, 404, "{body}");
    assert!(error_message(&body).starts_with(&format!("file does not exist: video {id} failed")), "{body}");

    // Refunded exactly once: back to the start, and it stays there while
    // clients and the poller keep looking.
    for i in 0..2 {
        let (status, _) = get(&f, i, &f.key, &format!("/v1/videos/{id}")).await;
        assert_eq!(status, 200);
    }
    money_settles_at(&f, (START, 0)).await;
    let usage = usage(&f, &f.account).await;
    let ids: Vec<&str> = usage.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, [format!("video-refund:{id}"), format!("video:{id}")], "one charge, one refund");
    let task = stored(&f, &id).await;
    assert_eq!((task.status.as_str(), task.refunded), ("failed", true));
    let failed = tasks(&f, "", "failed").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    // Counted as it happened (the planes run in this process).
    let metrics = gw_telemetry::prometheus_text();
    for status in ["queued", "failed"] {
        assert!(metrics.contains(&format!(r#"gw_video_tasks_total{{gw_status="{status}"}}"#)), "{metrics}");
    }
}

#[tokio::test]
async fn a_restarted_control_plane_resumes_polling_on_its_own() {
    let mut f = setup_in(Mode::Processes).await;
    f.video.set_script(VideoScript {
        queued_for: Duration::from_millis(200),
        running_for: Duration::from_millis(1_500),
        ..VideoScript::default()
    });
    let (status, created) = submit(&f, 0, &f.key, "a slow sunrise").await;
    assert_eq!(status, 200, "{created}");
    let id = str_field(&created, "id");
    f.cluster.stop_control_plane().await;

    // Without its authority a data plane answers 503, and submits nothing.
    let (status, body) = get(&f, 1, &f.key, &format!("/v1/videos/{id}")).await;
    assert_eq!(status, 503, "{body}");
    assert!(error_message(&body).contains("control plane"), "{body}");
    let (status, body) = submit(&f, 1, &f.key, "while the control plane is away").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(f.video.submissions().len(), 1, "nothing was submitted upstream");

    // The upstream finishes the task while the control plane is away.
    let upstream_id = f.video.submissions()[0].id.clone();
    let upstream_url = format!("{}/videos/{upstream_id}", f.upstream.base_url());
    eventually("the upstream to finish the task", Duration::from_secs(10), || async {
        let task: Value = f.cluster.http().get(&upstream_url).send().await.ok()?.json().await.ok()?;
        (task["status"] == "completed").then_some(())
    })
    .await;
    let polls_before = f.video.status_polls(&upstream_id);
    f.cluster.start_control_plane().await.expect("restart the control plane");
    // Nobody asks about the task: the restarted poller finishes it.
    let task = eventually("the poller to complete the task", Duration::from_secs(20), || async {
        let task = f.cluster.admin().get_video_task(pb::GetRequest { id: id.clone() }).await.ok()?.into_inner();
        (task.status == "completed").then_some(task)
    })
    .await;
    assert_eq!(task.progress, 100);
    assert!(f.video.status_polls(&upstream_id) > polls_before, "the restarted control plane asked the upstream");

    let (status, body) = get(&f, 1, &f.key, &format!("/v1/videos/{id}")).await;
    assert_eq!(status, 200, "{body}");
    let url = format!("http://{}/v1/videos/{id}/content", f.cluster.data_planes[0].addr);
    let response = f.cluster.http().get(url).bearer_auth(&f.key).send().await.expect("download");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "video/mp4");
    assert_eq!(response.headers()["content-length"], mp4_bytes().len().to_string().as_str());
    assert_eq!(response.bytes().await.expect("bytes"), mp4_bytes());
    money_settles_at(&f, (START - COST_4S, COST_4S)).await;
}

#[tokio::test]
async fn another_account_never_learns_a_task_exists() {
    let f = setup().await;
    let (status, created) = submit(&f, 0, &f.key, "a private video").await;
    assert_eq!(status, 200, "{created}");
    let id = str_field(&created, "id");
    poll_until_done(&f, 0, &id).await;
    let (_, _, other_key) = customer(&f.cluster, "other", 10_000_000, None).await;
    f.cluster.wait_until_served(1, &other_key).await;

    for path in [format!("/v1/videos/{id}"), format!("/v1/videos/{id}/content"), format!("/v1/video/generations/{id}")]
    {
        let (status, body) = get(&f, 1, &other_key, &path).await;
        assert_eq!(status, 404, "{path}: {body}");
        let (missing_status, missing_body) = get(&f, 1, &other_key, &path.replace(&id, "video_doesnotexist")).await;
        assert_eq!(missing_status, 404);
        let message = error_message(&body);
        let missing = error_message(&missing_body).replace("video_doesnotexist", &id);
        let strip = |m: &str| m.split(" (request id:").next().unwrap_or_default().to_owned();
        assert_eq!(strip(&message), strip(&missing), "another's task reads exactly like a missing one");
        let (status, _) = get(&f, 1, &f.key, &path).await;
        assert_eq!(status, 200, "the owner still sees {path}");
    }
}

#[tokio::test]
async fn the_native_family_works_end_to_end_over_plain_http() {
    let f = setup().await;
    f.video.set_script(VideoScript {
        queued_for: Duration::from_millis(800),
        running_for: Duration::from_millis(800),
        ..VideoScript::default()
    });
    use base64::Engine as _;
    let image_url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(image()));
    let body =
        json!({"model": MODEL, "prompt": "a fox in the snow", "duration": 4, "size": "1280x720", "image": image_url});
    let url = format!("{}/video/generations", f.cluster.base_url(0));
    let response = f.cluster.http().post(url).bearer_auth(&f.key).json(&body).send().await.expect("submit");
    assert_eq!(response.status(), 200);
    let created: Value = response.json().await.expect("JSON");
    let id = str_field(&created, "task_id");
    assert_eq!((created["status"].as_str(), created["duration"].as_i64()), (Some("queued"), Some(4)), "{created}");

    let (status, body) = get(&f, 1, &f.key, &format!("/v1/videos/{id}/content")).await;
    assert_eq!(status, 404, "no content while queued: {body}");

    let done = eventually("the native task to succeed", Duration::from_secs(30), || async {
        let (status, body) = get(&f, 1, &f.key, &format!("/v1/video/generations/{id}")).await;
        assert_eq!(status, 200, "{body}");
        let task: Value = serde_json::from_str(&body).expect("JSON");
        assert_ne!(task["status"], "failed", "{task}");
        (task["status"] == "succeeded").then_some(task)
    })
    .await;
    let content_url = format!("http://{}/v1/videos/{id}/content", f.cluster.data_planes[1].addr);
    assert_eq!(done["url"], content_url.as_str(), "{done}");
    assert_eq!((done["progress"].as_i64(), done["format"].as_str()), (Some(100), Some("mp4")));
    assert_eq!(done["metadata"], json!({"duration": 4, "width": 1280, "height": 720}));
    assert_eq!(done["error"], Value::Null);

    let response = f.cluster.http().get(&content_url).bearer_auth(&f.key).send().await.expect("download");
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.expect("bytes"), mp4_bytes(), "the result URL serves the video");

    // Both families see the same task.
    let (status, body) = get(&f, 0, &f.key, &format!("/v1/videos/{id}")).await;
    assert_eq!(status, 200);
    let compatible: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!((compatible["status"].as_str(), compatible["seconds"].as_str()), (Some("completed"), Some("4")));

    let submission = &f.video.submissions()[0];
    let reference = submission.reference.as_ref().expect("the image reached the upstream as a file");
    assert_eq!((reference.bytes.to_vec(), reference.content_type.as_str()), (image(), "image/png"));
    let seconds = submission.fields.iter().find(|(n, _)| n == "seconds").map(|(_, v)| v.as_str());
    assert_eq!(seconds, Some("4"), "duration is sent as seconds");
    money_settles_at(&f, (START - COST_4S, COST_4S)).await;
}

#[tokio::test]
async fn submissions_that_cannot_be_paid_or_are_malformed_never_reach_the_upstream() {
    let f = setup().await;
    // A $0.50 token cannot pay for $0.60 of video.
    let (_, _, small_token) = customer(&f.cluster, "small-token", 10_000_000, Some(500_000)).await;
    // A $0.30 account cannot either.
    let (_, _, poor) = customer(&f.cluster, "poor", 300_000, None).await;
    for key in [&small_token, &poor] {
        f.cluster.wait_until_served(0, key).await;
    }
    let (status, body) = submit(&f, 0, &small_token, "too dear").await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.starts_with("该令牌额度已用尽")), "{body}");
    let (status, body) = submit(&f, 0, &poor, "too dear").await;
    assert_eq!(status, 403, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("用户额度不足, 剩余额度: ＄0.300000"), "{body}");
    assert_eq!(body["error"]["code"], "insufficient_user_quota");

    let post = |body: reqwest::multipart::Form| {
        f.cluster.http().post(format!("{}/videos", f.cluster.base_url(0))).bearer_auth(&f.key).multipart(body).send()
    };
    let cases = [
        (reqwest::multipart::Form::new().text("prompt", "p"), 400, "field \"model\" is required"),
        (
            reqwest::multipart::Form::new().text("model", MODEL).text("prompt", "p").text("seconds", "4s"),
            400,
            "seconds",
        ),
        (reqwest::multipart::Form::new().text("model", "gpt-4o").text("prompt", "p"), 400, "not a video model"),
        (reqwest::multipart::Form::new().text("model", "ghost").text("prompt", "p"), 404, "模型不存在: ghost"),
    ];
    for (form, want, text) in cases {
        let response = post(form).await.expect("post");
        let status = response.status().as_u16();
        let body = response.text().await.expect("body");
        assert_eq!(status, want, "{body}");
        assert!(error_message(&body).contains(text), "{body}");
    }
    let response = f
        .cluster
        .http()
        .post(format!("{}/videos", f.cluster.base_url(0)))
        .bearer_auth(&f.key)
        .json(&json!({"model": MODEL, "prompt": "p"}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 400, "a JSON body on the multipart path");

    assert!(f.video.submissions().is_empty(), "nothing reached the upstream");
    let tasks = tasks(&f, "", "").await;
    assert!(tasks.is_empty(), "no task was created: {tasks:?}");
    assert_eq!(money(&f, &f.account, &f.token).await, (START, 0));
}
