//! Admin updates never undo one another. Each trial sends one update that
//! disables (or deprecates) a resource at the same moment as several
//! updates of its other fields, spread over two control-plane replicas on
//! one Redis (or one replica on the embedded store); afterwards the
//! resource is disabled and every other field holds that trial's value.

use std::future::Future;
use std::time::Instant;

use futures_util::future::join_all;
use gw_proto::pb;
use gw_tests::{
    harness::{Admin, Cluster, Replica},
    redis::RedisServer,
};
use tonic::Status;

/// Trials per resource kind on Redis (two replicas).
const REDIS_TRIALS: usize = 100;
/// Trials per resource kind on the embedded store, where each write fsyncs.
const EMBEDDED_TRIALS: usize = 40;

/// The admin clients the updates of a trial are spread over: two replicas,
/// or the same one twice.
type Admins = [Admin; 2];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_disabled_during_concurrent_updates_through_two_replicas_stays_disabled() {
    let f = TwoReplicas::start().await;
    tokens_stay_disabled(&f.admins, REDIS_TRIALS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_disabled_during_concurrent_updates_through_two_replicas_stays_disabled() {
    let f = TwoReplicas::start().await;
    accounts_stay_disabled(&f.admins, REDIS_TRIALS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_deprecated_during_concurrent_updates_through_two_replicas_stays_deprecated() {
    let f = TwoReplicas::start().await;
    groups_stay_deprecated(&f.admins, REDIS_TRIALS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_disabled_during_concurrent_updates_through_two_replicas_stays_disabled() {
    let f = TwoReplicas::start().await;
    channels_stay_disabled(&f.admins, REDIS_TRIALS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_price_updates_through_two_replicas_all_survive() {
    let f = TwoReplicas::start().await;
    model_prices_all_survive(&f.admins, REDIS_TRIALS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_embedded_store_concurrent_updates_never_undo_a_disable() {
    let cluster = Cluster::start("", 0).await.expect("cluster");
    let admins = [cluster.admin(), cluster.admin()];
    tokens_stay_disabled(&admins, EMBEDDED_TRIALS).await;
    accounts_stay_disabled(&admins, EMBEDDED_TRIALS).await;
    groups_stay_deprecated(&admins, EMBEDDED_TRIALS).await;
    channels_stay_disabled(&admins, EMBEDDED_TRIALS).await;
    model_prices_all_survive(&admins, EMBEDDED_TRIALS).await;
}

/// Redis, the cluster's control plane and a second replica on it (no data
/// planes), and an admin client of each. Dropped replica first.
struct TwoReplicas {
    admins: Admins,
    _replica: Replica,
    _cluster: Cluster,
    _redis: RedisServer,
}

// === impl TwoReplicas ===

impl TwoReplicas {
    async fn start() -> TwoReplicas {
        let redis = RedisServer::start().await.expect("redis-server");
        let cluster = Cluster::start(&redis.url(), 0).await.expect("cluster");
        let replica = cluster.start_replica(1).await.expect("second replica");
        let admins = [cluster.admin(), replica.admin()];
        TwoReplicas { admins, _replica: replica, _cluster: cluster, _redis: redis }
    }
}

/// Sends `requests` at once, request `i` through replica `(i + trial) % 2`,
/// each as its own task, and fails the test if any is refused.
async fn race<R, T, F, Fut>(admins: &Admins, trial: usize, requests: Vec<R>, send: F)
where
    R: Send + 'static,
    T: Send + 'static,
    F: Fn(Admin, R) -> Fut,
    Fut: Future<Output = Result<T, Status>> + Send + 'static,
{
    let tasks = requests.into_iter().enumerate().map(|(i, request)| {
        let admin = admins[(i + trial) % 2].clone();
        tokio::spawn(send(admin, request))
    });
    for (i, answer) in join_all(tasks).await.into_iter().enumerate() {
        let answer = answer.unwrap_or_else(|error| panic!("trial {trial}: update task {i} panicked: {error}"));
        if let Err(status) = answer {
            panic!("trial {trial}: update {i} was refused: {status}");
        }
    }
}

/// Prints how long `trials` trials of `what` took, for the test's output.
fn report(what: &str, trials: usize, started: Instant) {
    eprintln!("{what}: {trials} trials, every one held, in {:?}", started.elapsed());
}

async fn tokens_stay_disabled(admins: &Admins, trials: usize) {
    let mut admin = admins[0].clone();
    let account = pb::CreateAccountRequest { name: "racer".into(), balance_micros: 1_000, ..Default::default() };
    let account = admin.create_account(account).await.expect("account create").into_inner().id;
    let token = pb::CreateTokenRequest { account_id: account, quota_micros: 1, ..Default::default() };
    let created = admin.create_token(token).await.expect("token create").into_inner();
    let id = created.token.unwrap_or_default().id;
    let update = |request: pb::UpdateTokenRequest| pb::UpdateTokenRequest { id: id.clone(), ..request };
    let started = Instant::now();
    for t in 0..trials {
        admin
            .update_token(update(pb::UpdateTokenRequest { status: Some("enabled".into()), ..Default::default() }))
            .await
            .expect("token enable");
        let t64 = t as i64;
        let limit = pb::RateLimit { window_minutes: 60, max_requests: t as u32 + 1 };
        let requests = vec![
            update(pb::UpdateTokenRequest { status: Some("disabled".into()), ..Default::default() }),
            update(pb::UpdateTokenRequest { name: Some(format!("name-{t}")), ..Default::default() }),
            update(pb::UpdateTokenRequest { quota_micros: Some(1_000 + t64), ..Default::default() }),
            update(pb::UpdateTokenRequest { set_models: true, models: vec![format!("m-{t}")], ..Default::default() }),
            update(pb::UpdateTokenRequest { expires_at: Some(2_000_000_000 + t64), ..Default::default() }),
            update(pb::UpdateTokenRequest { rate_limit: Some(limit), ..Default::default() }),
        ];
        race(admins, t, requests, |mut admin, request| async move { admin.update_token(request).await }).await;

        let got = admins[(t + 1) % 2].clone().get_token(pb::GetRequest { id: id.clone() }).await;
        let got = got.expect("token get").into_inner();
        assert_eq!(got.status, "disabled", "trial {t}: a concurrent update re-enabled the token");
        assert_eq!(got.name, format!("name-{t}"), "trial {t}: the name update was lost");
        assert_eq!(got.quota_micros, 1_000 + t64, "trial {t}: the quota update was lost");
        assert_eq!(got.models, [format!("m-{t}")], "trial {t}: the models update was lost");
        assert_eq!(got.expires_at, 2_000_000_000 + t64, "trial {t}: the expiry update was lost");
        assert_eq!(got.rate_limit, Some(limit), "trial {t}: the rate limit update was lost");
    }
    report("tokens", trials, started);
}

async fn accounts_stay_disabled(admins: &Admins, trials: usize) {
    let mut admin = admins[0].clone();
    let group = pb::Group { name: "racers".into(), ratio: 1.0, ..Default::default() };
    admin.create_group(group).await.expect("group create");
    // Account names are unique: not the name of the tokens' account.
    let account =
        pb::CreateAccountRequest { name: "disabled racer".into(), balance_micros: 1_000, ..Default::default() };
    let id = admin.create_account(account).await.expect("account create").into_inner().id;
    let update = |request: pb::UpdateAccountRequest| pb::UpdateAccountRequest { id: id.clone(), ..request };
    let started = Instant::now();
    for t in 0..trials {
        admin
            .update_account(update(pb::UpdateAccountRequest { status: Some("enabled".into()), ..Default::default() }))
            .await
            .expect("account enable");
        let groups: Vec<String> =
            if t % 2 == 0 { vec!["default".into()] } else { vec!["default".into(), "racers".into()] };
        let requests = vec![
            update(pb::UpdateAccountRequest { status: Some("disabled".into()), ..Default::default() }),
            update(pb::UpdateAccountRequest { name: Some(format!("name-{t}")), ..Default::default() }),
            update(pb::UpdateAccountRequest { set_groups: true, groups: groups.clone(), ..Default::default() }),
            update(pb::UpdateAccountRequest { unlimited: Some(t % 2 == 0), ..Default::default() }),
        ];
        race(admins, t, requests, |mut admin, request| async move { admin.update_account(request).await }).await;

        let got = admins[(t + 1) % 2].clone().get_account(pb::GetRequest { id: id.clone() }).await;
        let got = got.expect("account get").into_inner();
        assert_eq!(got.status, "disabled", "trial {t}: a concurrent update re-enabled the account");
        assert_eq!(got.name, format!("name-{t}"), "trial {t}: the name update was lost");
        assert_eq!(got.groups, groups, "trial {t}: the groups update was lost");
        assert_eq!(got.unlimited, t % 2 == 0, "trial {t}: the unlimited update was lost");
        assert_eq!(got.balance_micros, 1_000, "trial {t}: an update changed the balance");
    }
    report("accounts", trials, started);
}

async fn groups_stay_deprecated(admins: &Admins, trials: usize) {
    let mut admin = admins[0].clone();
    let name = "deprecating".to_owned();
    admin.create_group(pb::Group { name: name.clone(), ratio: 1.0, ..Default::default() }).await.expect("group create");
    let update = |request: pb::UpdateGroupRequest| pb::UpdateGroupRequest { name: name.clone(), ..request };
    let started = Instant::now();
    for t in 0..trials {
        admin
            .update_group(update(pb::UpdateGroupRequest { deprecated: Some(false), ..Default::default() }))
            .await
            .expect("group undeprecate");
        let ratio = 1.0 + t as f64 / 100.0;
        let limit = pb::RateLimit { window_minutes: 1, max_requests: t as u32 + 1 };
        let requests = vec![
            update(pb::UpdateGroupRequest { deprecated: Some(true), ..Default::default() }),
            update(pb::UpdateGroupRequest { description: Some(format!("description {t}")), ..Default::default() }),
            update(pb::UpdateGroupRequest { ratio: Some(ratio), ..Default::default() }),
            update(pb::UpdateGroupRequest { rate_limit: Some(limit), ..Default::default() }),
        ];
        race(admins, t, requests, |mut admin, request| async move { admin.update_group(request).await }).await;

        let got = admins[(t + 1) % 2].clone().get_group(pb::GetRequest { id: name.clone() }).await;
        let got = got.expect("group get").into_inner();
        assert!(got.deprecated, "trial {t}: a concurrent update undid the deprecation");
        assert_eq!(got.description, format!("description {t}"), "trial {t}: the description update was lost");
        assert_eq!(got.ratio, ratio, "trial {t}: the ratio update was lost");
        assert_eq!(got.rate_limit, Some(limit), "trial {t}: the rate limit update was lost");
    }
    report("groups", trials, started);
}

async fn channels_stay_disabled(admins: &Admins, trials: usize) {
    let mut admin = admins[0].clone();
    let channel = pb::Channel {
        name: "racer".into(),
        r#type: "openai".into(),
        base_url: "http://127.0.0.1:9/v1".into(),
        api_key: "sk-upstream-racer".into(),
        models: vec!["gpt-4o".into()],
        weight: 1,
        ..Default::default()
    };
    let id = admin.create_channel(channel).await.expect("channel create").into_inner().id;
    let update = |request: pb::UpdateChannelRequest| pb::UpdateChannelRequest { id: id.clone(), ..request };
    let started = Instant::now();
    for t in 0..trials {
        admin
            .update_channel(update(pb::UpdateChannelRequest { status: Some("enabled".into()), ..Default::default() }))
            .await
            .expect("channel enable");
        let requests = vec![
            update(pb::UpdateChannelRequest { status: Some("disabled".into()), ..Default::default() }),
            update(pb::UpdateChannelRequest { name: Some(format!("name-{t}")), ..Default::default() }),
            update(pb::UpdateChannelRequest { weight: Some(t as u32 + 1), ..Default::default() }),
            update(pb::UpdateChannelRequest { priority: Some(t as i32), ..Default::default() }),
            update(pb::UpdateChannelRequest {
                set_models: true,
                models: vec!["gpt-4o".into(), format!("m-{t}")],
                ..Default::default()
            }),
        ];
        race(admins, t, requests, |mut admin, request| async move { admin.update_channel(request).await }).await;

        let got = admins[(t + 1) % 2].clone().get_channel(pb::GetRequest { id: id.clone() }).await;
        let got = got.expect("channel get").into_inner();
        assert_eq!(got.status, "disabled", "trial {t}: a concurrent update re-enabled the channel");
        assert_eq!(got.name, format!("name-{t}"), "trial {t}: the name update was lost");
        assert_eq!(got.weight, t as u32 + 1, "trial {t}: the weight update was lost");
        assert_eq!(got.priority, t as i32, "trial {t}: the priority update was lost");
        assert_eq!(got.models, ["gpt-4o".to_owned(), format!("m-{t}")], "trial {t}: the models update was lost");
    }
    report("channels", trials, started);
}

async fn model_prices_all_survive(admins: &Admins, trials: usize) {
    let mut admin = admins[0].clone();
    let id = "racing-model".to_owned();
    let model = pb::Model { id: id.clone(), category: "chat".into(), ..Default::default() };
    admin.create_model(model).await.expect("model create");
    let update = |request: pb::UpdateModelRequest| pb::UpdateModelRequest { id: id.clone(), ..request };
    let started = Instant::now();
    for t in 0..trials {
        let price = |n: i64| Some(n * 1_000 + t as i64);
        let requests = vec![
            update(pb::UpdateModelRequest { input_price_micros: price(1), ..Default::default() }),
            update(pb::UpdateModelRequest { output_price_micros: price(2), ..Default::default() }),
            update(pb::UpdateModelRequest { cached_price_micros: price(3), ..Default::default() }),
            update(pb::UpdateModelRequest { owned_by: Some(format!("owner-{t}")), ..Default::default() }),
        ];
        race(admins, t, requests, |mut admin, request| async move { admin.update_model(request).await }).await;

        let got = admins[(t + 1) % 2].clone().get_model(pb::GetRequest { id: id.clone() }).await;
        let got = got.expect("model get").into_inner();
        let prices = (got.input_price_micros, got.output_price_micros, got.cached_price_micros);
        assert_eq!((Some(prices.0), Some(prices.1), Some(prices.2)), (price(1), price(2), price(3)), "trial {t}");
        assert_eq!(got.owned_by, format!("owner-{t}"), "trial {t}: the owner update was lost");
    }
    report("models", trials, started);
}
