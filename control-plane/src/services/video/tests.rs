//! The video service on the embedded store: pricing, refusals, exactly-once
//! charge and refund, deadlines. (The upstream is exercised end to end in
//! the `tests` crate.)

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::{sync::Arc, time::Duration};

use serde_json::json;

use super::*;
use crate::{
    domain::{Account, Channel, ENABLED, Group, Model, RateLimit, Token},
    store::{EmbeddedStore, conformance},
};

/// $0.10 per second at ratio 1.5: 4 s cost 600_000 µ$.
const COST: i64 = 600_000;

async fn service(config: Config) -> (Videos, Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("store.redb")).unwrap());
    store
        .create(Resource::Group(Group {
            name: "vip".into(),
            ratio: 1.5,
            deprecated: false,
            description: String::new(),
            rate_limit: RateLimit::default(),
            tokens_per_minute: 0,
            max_in_flight: 0,
        }))
        .await
        .unwrap();
    store.create(conformance::account("acct", 1_000_000)).await.unwrap();
    let Resource::Token(mut token) = conformance::token("tok", "acct") else { unreachable!() };
    token.group = "vip".into();
    token.quota_micros = 2_000_000;
    store.create(Resource::Token(token)).await.unwrap();
    store
        .create(Resource::Model(Model {
            id: "sora-2".into(),
            category: "video".into(),
            input_price_micros: 0,
            output_price_micros: 0,
            cached_price_micros: 0,
            request_price_micros: 0,
            second_price_micros: 100_000,
            image_price_micros: 0,
            owned_by: "openai".into(),
            tier_threshold_tokens: 0,
            tier_input_price_micros: 0,
            tier_output_price_micros: 0,
            tier_cached_price_micros: 0,
            cache_write_5m_price_micros: 0,
            cache_write_1h_price_micros: 0,
            reasoning_price_micros: 0,
            search_unit_price_micros: 0,
            audio_input_price_micros: 0,
            audio_output_price_micros: 0,
            audio_cached_price_micros: 0,
            batch_price_ppm: 0,
        }))
        .await
        .unwrap();
    let Resource::Channel(channel) = conformance::sample(Kind::Channel, "ch") else { unreachable!() };
    store.create(Resource::Channel(Channel { status: ENABLED.into(), ..channel })).await.unwrap();
    (
        Videos::new(store.clone(), Arc::new(crate::services::ledger::Ledger::new(store.clone())), config).unwrap(),
        store,
        dir,
    )
}

fn new_task(seconds: u32) -> NewTask {
    NewTask {
        node_id: "dp-1".into(),
        request_id: "req-1".into(),
        token_id: "tok".into(),
        model: "sora-2".into(),
        channel_id: "ch".into(),
        seconds,
        size: "1280x720".into(),
    }
}

async fn balance(store: &dyn Store) -> (i64, i64) {
    let Some(Resource::Account(Account { balance_micros, .. })) = store.get(Kind::Account, "acct").await.unwrap()
    else {
        panic!("account missing")
    };
    let Some(Resource::Token(Token { used_micros, .. })) = store.get(Kind::Token, "tok").await.unwrap() else {
        panic!("token missing")
    };
    (balance_micros, used_micros)
}

#[test]
fn the_price_takes_the_group_ratio_in_parts_per_million() {
    let group = |ratio| Group {
        name: "g".into(),
        ratio,
        deprecated: false,
        description: String::new(),
        rate_limit: RateLimit::default(),
        tokens_per_minute: 0,
        max_in_flight: 0,
    };
    assert_eq!(group(1.5).ratio_ppm(), 1_500_000);
    assert_eq!(group(0.1).ratio_ppm(), 100_000);
    assert_eq!(group(0.0).ratio_ppm(), 0);
    assert_eq!(group(f64::NAN).ratio_ppm(), 0, "a ratio the admin API refuses is 0");
    assert_eq!(group(-1.0).ratio_ppm(), 0);
    assert_eq!(gw_pricing::video_cost_micros(100_000, 4, group(1.5).ratio_ppm()), COST);
}

#[tokio::test]
async fn a_task_is_charged_once_at_creation() {
    let (videos, store, _dir) = service(Config::default()).await;
    let task = videos.create(new_task(4)).await.unwrap();
    assert!(task.id.starts_with("video_") && task.id.len() == 6 + 32, "{}", task.id);
    assert_eq!((task.status, task.progress, task.cost_micros), (VideoStatus::Queued, 0, COST));
    assert_eq!((task.account_id.as_str(), task.group.as_str()), ("acct", "vip"));
    assert!(task.charged && !task.refunded);
    assert_eq!(balance(&*store).await, (1_000_000 - COST, COST));

    // Settling again (a replayed step) charges nothing more.
    let again = videos.settle(task.clone()).await.unwrap();
    assert_eq!(again, task);
    let records = store.list_usage(&crate::domain::UsageFilter::default()).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].request_id, format!("video:{}", task.id));
    assert_eq!(records[0].endpoint, crate::services::ledger::VIDEO_ENDPOINT);
}

#[tokio::test]
async fn a_token_or_account_that_cannot_pay_is_refused_before_anything_is_stored() {
    let (videos, store, _dir) = service(Config::default()).await;
    // 1_000_000 µ$ balance: 6 s (900_000) fits, 8 s (1_200_000) does not.
    assert!(matches!(videos.create(new_task(8)).await, Err(VideoError::UserQuota { balance_micros: 1_000_000 })));
    store.adjust_balance("acct", 10_000_000).await.unwrap();
    // The token's 2_000_000 quota: 14 s (2_100_000) does not fit.
    assert!(matches!(videos.create(new_task(14)).await, Err(VideoError::TokenQuota)));
    assert!(matches!(videos.create(new_task(0)).await, Err(VideoError::Invalid(_))));
    assert!(matches!(videos.create(new_task(MAX_SECONDS + 1)).await, Err(VideoError::Invalid(_))));
    assert!(store.list_videos(&VideoFilter::default()).await.unwrap().is_empty());
    assert_eq!(balance(&*store).await, (11_000_000, 0));
}

#[tokio::test]
async fn a_rejected_submission_fails_and_is_refunded_exactly_once() {
    let (videos, store, _dir) = service(Config::default()).await;
    let task = videos.create(new_task(4)).await.unwrap();
    let rejected = Submission::Rejected { code: "upstream_502".into(), message: "bad gateway".into() };
    let failed = videos.record_submission(&task.id, rejected.clone()).await.unwrap();
    assert_eq!(failed.status, VideoStatus::Failed);
    assert_eq!((failed.error_code.as_str(), failed.error_message.as_str()), ("upstream_502", "bad gateway"));
    assert!(failed.refunded && !failed.is_open());
    assert_eq!(balance(&*store).await, (1_000_000, 0), "the charge was given back");

    // Replays change nothing: not the status, not the balance.
    let accepted = Submission::Accepted(json!({"id": "up-1", "status": "completed"}));
    assert_eq!(videos.record_submission(&task.id, accepted).await.unwrap().status, VideoStatus::Failed);
    videos.record_submission(&task.id, rejected).await.unwrap();
    videos.settle(failed.clone()).await.unwrap();
    assert_eq!(balance(&*store).await, (1_000_000, 0));
    let records = store.list_usage(&crate::domain::UsageFilter::default()).await.unwrap();
    let ids: Vec<&str> = records.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, [format!("video-refund:{}", task.id), format!("video:{}", task.id)]);
}

#[tokio::test]
async fn an_accepted_submission_records_the_upstream_id_and_state() {
    let (videos, _store, _dir) = service(Config::default()).await;
    let task = videos.create(new_task(4)).await.unwrap();
    let answer = json!({"id": "up-9", "status": "in_progress", "progress": 5, "size": "720x1280"});
    let recorded = videos.record_submission(&task.id, Submission::Accepted(answer)).await.unwrap();
    assert_eq!(
        (recorded.upstream_id.as_str(), recorded.status, recorded.progress),
        ("up-9", VideoStatus::InProgress, 5)
    );
    assert_eq!(recorded.extra, r#"{"size":"720x1280"}"#);
    let second = Submission::Accepted(json!({"id": "up-other"}));
    assert_eq!(videos.record_submission(&task.id, second).await.unwrap().upstream_id, "up-9", "recorded once");
    let missing = videos.record_submission(&task.id, Submission::Accepted(json!({"status": "queued"})));
    assert!(matches!(missing.await, Err(VideoError::Invalid(_))));
}

#[tokio::test]
async fn only_the_owning_account_finds_a_task() {
    let (videos, _store, _dir) = service(Config::default()).await;
    let task = videos.create(new_task(4)).await.unwrap();
    assert_eq!(videos.get(&task.id, "acct").await.unwrap().id, task.id);
    assert!(matches!(videos.get(&task.id, "someone-else").await, Err(VideoError::NotFound(_))));
    assert!(matches!(videos.get("video_missing", "acct").await, Err(VideoError::NotFound(_))));
    assert_eq!(videos.peek(&task.id).await.unwrap().id, task.id, "operators see every task");
}

#[tokio::test]
async fn a_task_past_the_deadline_fails_and_is_refunded() {
    let config = Config { timeout: Duration::ZERO, ..Config::default() };
    let (videos, store, _dir) = service(config).await;
    let task = videos.create(new_task(4)).await.unwrap();
    let tended = videos.tend(task).await.unwrap();
    assert_eq!((tended.status, tended.error_code.as_str()), (VideoStatus::Failed, "timeout"));
    assert!(tended.refunded);
    assert_eq!(balance(&*store).await, (1_000_000, 0));
    assert!(store.open_videos(10).await.unwrap().is_empty(), "nothing left for the poller");
}

#[tokio::test]
async fn the_poller_tends_open_tasks_and_releases_its_lock() {
    let config = Config { timeout: Duration::ZERO, poll_interval: Duration::from_millis(50), ..Config::default() };
    let (videos, store, _dir) = service(config).await;
    let task = videos.create(new_task(4)).await.unwrap();
    let videos = Arc::new(videos);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let poller = poller::spawn(videos.clone(), stopped);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store.get_video(&task.id).await.unwrap().unwrap().is_open() {
        assert!(tokio::time::Instant::now() < deadline, "the poller never failed the expired task");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    poller.await.unwrap();
    assert!(store.try_lock(poller::LOCK, "next", Duration::from_secs(1)).await.unwrap(), "lock released");
    assert_eq!(balance(&*store).await, (1_000_000, 0));
}
