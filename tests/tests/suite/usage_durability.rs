//! Chaos scenarios for usage durability: the data plane runs as a child
//! process, a burst of concurrent clients (streamed and not) hits it, and it
//! is killed with SIGKILL mid-burst, several times, then restarted. The
//! control plane's ledger must then hold exactly one record for every
//! request whose client received the whole answer, and a record for every
//! request that reached the upstream; no request id twice.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, Mode, eventually},
    mock::upstream::{MockUpstream, Script},
    redis::RedisServer,
};
use serde_json::{Value, json};

/// Concurrent clients in a burst.
const CLIENTS: usize = 24;
/// How long a burst runs before the data plane is killed.
const BURST_BEFORE_CRASH: Duration = Duration::from_millis(700);
/// Crash-and-restart rounds per test.
const ROUNDS: usize = 3;

struct Fixture {
    cluster: Cluster,
    upstream: MockUpstream,
    token: String,
    key: String,
    _redis: RedisServer,
}

/// What the clients of all rounds saw.
#[derive(Default)]
struct Seen {
    /// Request ids of answers received in full (a 200 with a whole body, or
    /// a stream that reached `[DONE]`).
    complete: HashSet<String>,
    /// Request ids of answers whose headers arrived but whose body the
    /// crash cut: they reached the upstream.
    cut: HashSet<String>,
    /// Requests sent, answered or not.
    sent: usize,
}

/// One client request's outcome.
enum Outcome {
    Complete(String),
    Cut(String),
    /// No answer at all (the data plane was gone before the headers).
    Unanswered,
}

/// A cluster of processes (one data plane) on Redis, with `gpt-4o` on a
/// slow mock upstream and one unlimited token in `vip`.
async fn setup() -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    // Answers take 20 ms to start and stream six chunks 25 ms apart, so a
    // crash always finds requests at every stage.
    upstream.set_script(Script {
        reply: "one two three four five six".into(),
        first_byte_delay: Duration::from_millis(20),
        chunk_delay: Duration::from_millis(25),
        ..Script::default()
    });
    let cluster = Cluster::start_with(Mode::Processes, &redis.url(), 1, |_| {}).await.expect("cluster");
    let mut admin = cluster.admin();
    let model = pb::Model {
        id: "gpt-4o".into(),
        category: "chat".into(),
        input_price_micros: 2_500_000,
        output_price_micros: 10_000_000,
        ..Default::default()
    };
    admin.create_model(model).await.expect("model create");
    admin.create_group(pb::Group { name: "vip".into(), ratio: 2.0, ..Default::default() }).await.expect("group create");
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: "sk-upstream-secret-0123456789".into(),
        has_key: true,
        models: vec!["gpt-4o".into()],
        groups: vec!["vip".into()],
        weight: 1,
        ..Default::default()
    };
    admin.create_channel(channel).await.expect("channel create");
    let account = pb::CreateAccountRequest {
        name: "acme".into(),
        balance_micros: 100_000_000,
        groups: vec!["vip".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account create").into_inner().id;
    let token =
        pb::CreateTokenRequest { account_id: account, group: "vip".into(), unlimited: true, ..Default::default() };
    let created = admin.create_token(token).await.expect("token create").into_inner();
    let fixture =
        Fixture { cluster, upstream, token: created.token.unwrap_or_default().id, key: created.key, _redis: redis };
    wait_until_served(&fixture).await;
    fixture
}

/// Waits until the data plane accepts the token.
async fn wait_until_served(f: &Fixture) {
    let url = format!("{}/models", f.cluster.base_url(0));
    eventually("the data plane to know the token", Duration::from_secs(10), || async {
        let response = f.cluster.http().get(&url).bearer_auth(&f.key).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;
}

/// One chat request marked `marker` (so the upstream's copy can be told
/// apart), streamed or not.
async fn request(http: reqwest::Client, url: String, key: String, marker: String, stream: bool) -> Outcome {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": marker}], "stream": stream});
    let Ok(response) = http.post(url).bearer_auth(key).json(&body).send().await else {
        return Outcome::Unanswered;
    };
    let status = response.status().as_u16();
    let id = response.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert_eq!(status, 200, "a request failed for another reason than the crash");
    let Ok(text) = response.text().await else {
        return Outcome::Cut(id);
    };
    let whole = if stream {
        text.lines().any(|line| line == "data: [DONE]")
    } else {
        serde_json::from_str::<Value>(&text).is_ok_and(|v| v["choices"][0]["message"]["content"].is_string())
    };
    if whole { Outcome::Complete(id) } else { Outcome::Cut(id) }
}

/// Runs `CLIENTS` clients sending requests back to back (every other one
/// streamed) until the data plane is killed `BURST_BEFORE_CRASH` in, then
/// restarts it; adds what the clients saw to `seen`.
async fn burst_and_crash(f: &mut Fixture, round: usize, seen: &mut Seen) {
    let url = format!("{}/chat/completions", f.cluster.base_url(0));
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (http, url, key, stop, next) =
            (f.cluster.http().clone(), url.clone(), f.key.clone(), stop.clone(), next.clone());
        clients.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let n = next.fetch_add(1, Ordering::SeqCst);
                let outcome = request(http.clone(), url.clone(), key.clone(), format!("r{round}-{n}"), n % 2 == 0);
                let outcome = outcome.await;
                let unanswered = matches!(outcome, Outcome::Unanswered);
                outcomes.push(outcome);
                if unanswered {
                    break;
                }
            }
            outcomes
        }));
    }
    tokio::time::sleep(BURST_BEFORE_CRASH).await;
    f.cluster.crash_data_plane(0).await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        for outcome in client.await.expect("client task") {
            seen.sent += 1;
            match outcome {
                Outcome::Complete(id) => assert!(seen.complete.insert(id), "a request id was handed out twice"),
                Outcome::Cut(id) => assert!(seen.cut.insert(id), "a request id was handed out twice"),
                Outcome::Unanswered => {}
            }
        }
    }
    f.cluster.start_data_plane(0).await.expect("data plane restarts after the crash");
    // Its saved snapshot may predate the token (the crash can beat the
    // snapshot writer); discovery catches up.
    wait_until_served(f).await;
}

/// Distinct requests (by marker) the upstream received.
fn reached_upstream(f: &Fixture) -> usize {
    let markers: HashSet<String> = f
        .upstream
        .requests()
        .iter()
        .filter_map(|r| r.body["messages"][0]["content"].as_str().map(str::to_owned))
        .filter(|marker| marker.starts_with('r'))
        .collect();
    markers.len()
}

/// Waits until the data plane holds no unacknowledged usage, then returns
/// the ledger's records of the token.
async fn settled_ledger(f: &Fixture) -> Vec<pb::UsageRecord> {
    eventually("the spool to be reported and emptied", Duration::from_secs(60), || async {
        (f.cluster.pending_usage_batches(0) == 0).then_some(())
    })
    .await;
    let request = pb::ListUsageRequest { token_id: f.token.clone(), limit: 10_000, ..Default::default() };
    f.cluster.admin().list_usage(request).await.expect("usage list").into_inner().items
}

/// The exact checks: every complete answer has exactly one record, with its
/// real usage; every cut answer has one; at least every request the
/// upstream saw is settled; none is settled twice.
fn assert_nothing_lost_nor_doubled(f: &Fixture, seen: &Seen, ledger: &[pb::UsageRecord]) {
    let mut by_id: HashMap<&str, Vec<&pb::UsageRecord>> = HashMap::new();
    for record in ledger {
        by_id.entry(record.request_id.as_str()).or_default().push(record);
    }
    let doubled: Vec<_> = by_id.iter().filter(|(_, records)| records.len() > 1).map(|(id, _)| *id).collect();
    let lost_complete: Vec<_> = seen.complete.iter().filter(|id| !by_id.contains_key(id.as_str())).collect();
    let lost_cut: Vec<_> = seen.cut.iter().filter(|id| !by_id.contains_key(id.as_str())).collect();
    let reached = reached_upstream(f);
    eprintln!(
        "sent {}, complete {}, cut {}, reached the upstream {}, ledger {}",
        seen.sent,
        seen.complete.len(),
        seen.cut.len(),
        reached,
        ledger.len()
    );
    assert!(!seen.complete.is_empty(), "no answer completed: the burst proves nothing");
    assert_eq!(lost_complete.len(), 0, "complete answers without a usage record: {lost_complete:?}");
    assert_eq!(lost_cut.len(), 0, "answers cut by the crash without a usage record: {lost_cut:?}");
    assert_eq!(doubled.len(), 0, "request ids recorded twice: {doubled:?}");
    for id in &seen.complete {
        let record = by_id[id.as_str()][0];
        assert_eq!(record.status, 200, "{record:?}");
        assert_eq!((record.prompt_tokens, record.completion_tokens), (11, 7), "{record:?}");
    }
    // Requests the upstream saw whose answer never reached its client have
    // no known id; each must still have left a record (its prompt part).
    assert!(ledger.len() >= reached, "{reached} requests reached the upstream, only {} settled", ledger.len());
    assert!(ledger.len() <= seen.sent, "more records ({}) than requests ({})", ledger.len(), seen.sent);
}

#[tokio::test]
async fn a_data_plane_killed_mid_burst_loses_no_usage_record_and_doubles_none() {
    let mut f = setup().await;
    let mut seen = Seen::default();
    for round in 0..ROUNDS {
        burst_and_crash(&mut f, round, &mut seen).await;
    }
    let ledger = settled_ledger(&f).await;
    assert_nothing_lost_nor_doubled(&f, &seen, &ledger);
}

#[tokio::test]
async fn usage_made_while_the_control_plane_is_down_survives_a_data_plane_crash() {
    let mut f = setup().await;
    let mut seen = Seen::default();
    burst_and_crash(&mut f, 0, &mut seen).await;
    f.cluster.stop_control_plane().await;
    for round in 1..ROUNDS {
        burst_and_crash(&mut f, round, &mut seen).await;
    }
    assert!(f.cluster.pending_usage_batches(0) > 0, "the control plane is down: usage must wait on the spool");
    f.cluster.start_control_plane().await.expect("control plane restarts");
    let ledger = settled_ledger(&f).await;
    assert_nothing_lost_nor_doubled(&f, &seen, &ledger);
}
