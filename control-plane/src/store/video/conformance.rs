//! What every backend must do with video tasks and locks; run from the
//! store conformance suite. Checks use ids and accounts of their own.

use std::sync::Arc;
use std::time::Duration;

use super::{VideoFilter, VideoWrite};
use crate::domain::{VideoStatus, VideoTask};
use crate::store::Store;

/// Runs every video and lock check against `store`.
pub async fn run(store: Arc<dyn Store>) {
    video_tasks_round_trip(&*store).await;
    updates_are_compare_and_set(&*store).await;
    a_terminal_status_never_changes(&*store).await;
    concurrent_updates_lose_nothing(store.clone()).await;
    video_listing_filters_and_is_newest_first(&*store).await;
    open_videos_are_the_unfinished_oldest_first(&*store).await;
    locks_have_one_holder_until_they_expire(&*store).await;
    video_writes_leave_the_revision_alone(&*store).await;
}

/// A queued task `id` of `account` created at `created_at`.
pub fn task(id: &str, account: &str, created_at: i64) -> VideoTask {
    VideoTask {
        id: id.to_owned(),
        account_id: account.to_owned(),
        token_id: format!("{account}-tok"),
        group: "default".into(),
        model: "sora-2".into(),
        channel_id: "ch-video".into(),
        seconds: 4,
        size: "1280x720".into(),
        cost_micros: 400_000,
        created_at,
        updated_at: created_at,
        extra: r#"{"size":"1280x720"}"#.into(),
        ..VideoTask::default()
    }
}

async fn written(store: &dyn Store, task: &VideoTask) -> VideoTask {
    match store.update_video(task).await.expect("update video") {
        VideoWrite::Written(task) => task,
        VideoWrite::Conflict(stored) => panic!("update of {} refused; stored {stored:?}", task.id),
    }
}

/// Create, get, and the answers for a taken or unknown id.
pub async fn video_tasks_round_trip(store: &dyn Store) {
    let original = task("video_rt_1", "vrt-acct", 1_700_000_000);
    assert!(store.create_video(&original).await.expect("create"), "a new id is created");
    assert_eq!(store.get_video("video_rt_1").await.expect("get"), Some(original.clone()), "get after create");
    let mut other = original.clone();
    other.model = "other".into();
    assert!(!store.create_video(&other).await.expect("create again"), "a taken id is refused");
    assert_eq!(store.get_video("video_rt_1").await.expect("get"), Some(original), "refused create changed nothing");
    assert_eq!(store.get_video("video_rt_missing").await.expect("get"), None);
}

/// A write names the version it read; a stale or unknown one is refused
/// with the stored task.
pub async fn updates_are_compare_and_set(store: &dyn Store) {
    let created = task("video_cas_1", "vcas-acct", 1_700_000_000);
    store.create_video(&created).await.expect("create");
    let mut next = created.clone();
    next.status = VideoStatus::InProgress;
    next.progress = 30;
    let stored = written(store, &next).await;
    assert_eq!(stored.version, created.version + 1, "a write bumps the version");
    assert_eq!(store.get_video("video_cas_1").await.expect("get"), Some(stored.clone()));

    let mut stale = created.clone();
    stale.progress = 99;
    match store.update_video(&stale).await.expect("stale update") {
        VideoWrite::Conflict(Some(current)) => assert_eq!(current, stored, "a conflict carries the stored task"),
        other => panic!("a stale version was not refused: {other:?}"),
    }
    assert_eq!(store.get_video("video_cas_1").await.expect("get"), Some(stored), "a refused write changed nothing");
    let missing = task("video_cas_missing", "vcas-acct", 1);
    assert_eq!(store.update_video(&missing).await.expect("update"), VideoWrite::Conflict(None));
    assert_eq!(store.get_video("video_cas_missing").await.expect("get"), None, "an update created a task");
}

/// Completed and failed are final: even a write with the right version may
/// not change them, while other fields (the refund flag) still may.
pub async fn a_terminal_status_never_changes(store: &dyn Store) {
    for (id, terminal) in [("video_term_c", VideoStatus::Completed), ("video_term_f", VideoStatus::Failed)] {
        let created = task(id, "vterm-acct", 1_700_000_000);
        store.create_video(&created).await.expect("create");
        let mut done = created.clone();
        done.status = terminal;
        done.progress = 100;
        let done = written(store, &done).await;
        for status in VideoStatus::ALL.into_iter().filter(|s| *s != terminal) {
            let mut changed = done.clone();
            changed.status = status;
            assert_eq!(
                store.update_video(&changed).await.expect("update"),
                VideoWrite::Conflict(Some(done.clone())),
                "{terminal} became {status}"
            );
        }
        let mut settled = done.clone();
        settled.charged = true;
        settled.refunded = terminal == VideoStatus::Failed;
        let settled = written(store, &settled).await;
        assert_eq!(settled.status, terminal);
        assert_eq!(store.get_video(id).await.expect("get"), Some(settled));
    }
}

/// 8 writers each add 5 to `progress` by read-modify-write with retries:
/// every increment lands, none is lost to a race.
pub async fn concurrent_updates_lose_nothing(store: Arc<dyn Store>) {
    const WRITERS: u32 = 8;
    const EACH: u32 = 5;
    store.create_video(&task("video_race_1", "vrace-acct", 1_700_000_000)).await.expect("create");
    let mut writers = Vec::new();
    for _ in 0..WRITERS {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            let mut conflicts = 0u32;
            for _ in 0..EACH {
                let mut current = store.get_video("video_race_1").await.expect("get").expect("task");
                loop {
                    current.progress += 1;
                    match store.update_video(&current).await.expect("update") {
                        VideoWrite::Written(_) => break,
                        VideoWrite::Conflict(Some(stored)) => {
                            conflicts += 1;
                            current = stored;
                        }
                        VideoWrite::Conflict(None) => panic!("task vanished"),
                    }
                }
            }
            conflicts
        }));
    }
    for writer in writers {
        writer.await.expect("writer panicked");
    }
    let last = store.get_video("video_race_1").await.expect("get").expect("task");
    assert_eq!(last.progress, WRITERS * EACH, "every increment landed exactly once");
    assert_eq!(last.version, u64::from(WRITERS * EACH), "one version per write");
}

/// Listing filters by account and status, newest first, honouring the limit.
pub async fn video_listing_filters_and_is_newest_first(store: &dyn Store) {
    for (i, account) in ["vlist-a", "vlist-b", "vlist-a", "vlist-a"].into_iter().enumerate() {
        let created = task(&format!("video_list_{i}"), account, 1_700_000_000 + i as i64);
        store.create_video(&created).await.expect("create");
        if i == 2 {
            let mut done = created;
            done.status = VideoStatus::Completed;
            written(store, &done).await;
        }
    }
    let ids = |tasks: Vec<VideoTask>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let of_a = VideoFilter { account_id: "vlist-a".into(), ..Default::default() };
    assert_eq!(
        ids(store.list_videos(&of_a).await.expect("list")),
        ["video_list_3", "video_list_2", "video_list_0"],
        "one account's tasks, newest first"
    );
    let queued_a = VideoFilter { status: Some(VideoStatus::Queued), ..of_a.clone() };
    assert_eq!(ids(store.list_videos(&queued_a).await.expect("list")), ["video_list_3", "video_list_0"]);
    let completed_a = VideoFilter { status: Some(VideoStatus::Completed), ..of_a.clone() };
    assert_eq!(ids(store.list_videos(&completed_a).await.expect("list")), ["video_list_2"]);
    let limited = VideoFilter { limit: 1, ..of_a };
    assert_eq!(ids(store.list_videos(&limited).await.expect("list")), ["video_list_3"]);
    let all = store.list_videos(&VideoFilter { limit: 1_000, ..Default::default() }).await.expect("list");
    assert!(all.iter().any(|t| t.id == "video_list_1"), "no filter lists every account");
    assert!(all.windows(2).all(|w| w[0].created_at >= w[1].created_at), "newest first");
}

/// Open tasks are the unfinished and the unsettled: queued or running, not
/// yet charged, or failed and not refunded.
pub async fn open_videos_are_the_unfinished_oldest_first(store: &dyn Store) {
    // Far in the past, so these come before every other check's tasks.
    let base = 1_000;
    let mut expected = Vec::new();
    let cases: [(&str, VideoStatus, bool, bool, bool); 5] = [
        ("video_open_queued", VideoStatus::Queued, true, false, true),
        ("video_open_done", VideoStatus::Completed, true, false, false),
        ("video_open_uncharged", VideoStatus::Completed, false, false, true),
        ("video_open_unrefunded", VideoStatus::Failed, true, false, true),
        ("video_open_refunded", VideoStatus::Failed, true, true, false),
    ];
    for (i, (id, status, charged, refunded, open)) in cases.into_iter().enumerate() {
        let created = task(id, "vopen-acct", base + i as i64);
        store.create_video(&created).await.expect("create");
        let mut next = created;
        (next.status, next.charged, next.refunded) = (status, charged, refunded);
        written(store, &next).await;
        if open {
            expected.push(id.to_owned());
        }
    }
    let open: Vec<String> = store
        .open_videos(10_000)
        .await
        .expect("open videos")
        .into_iter()
        .filter(|t| t.account_id == "vopen-acct")
        .map(|t| t.id)
        .collect();
    assert_eq!(open, expected, "open tasks, oldest first");
    let first = store.open_videos(1).await.expect("open videos");
    assert_eq!(first.len(), 1, "the limit holds");
    assert_eq!(first[0].id, "video_open_queued", "the oldest open task comes first");
}

/// One holder at a time; the holder renews; an expired lock goes to the next
/// asker; only the holder releases it.
pub async fn locks_have_one_holder_until_they_expire(store: &dyn Store) {
    let ttl = Duration::from_millis(400);
    assert!(store.try_lock("conf-lock", "a", ttl).await.expect("lock"), "a free lock is taken");
    assert!(!store.try_lock("conf-lock", "b", ttl).await.expect("lock"), "a held lock is refused");
    assert!(store.try_lock("conf-lock", "a", ttl).await.expect("lock"), "the holder renews");
    store.unlock("conf-lock", "b").await.expect("unlock");
    assert!(!store.try_lock("conf-lock", "b", ttl).await.expect("lock"), "only the holder releases");
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    assert!(store.try_lock("conf-lock", "b", ttl).await.expect("lock"), "an expired lock goes to the next asker");
    assert!(!store.try_lock("conf-lock", "a", ttl).await.expect("lock"), "the old holder lost it");
    store.unlock("conf-lock", "b").await.expect("unlock");
    assert!(store.try_lock("conf-lock", "a", ttl).await.expect("lock"), "a released lock is free");
    store.unlock("conf-lock", "a").await.expect("unlock");
    assert!(store.try_lock("other-lock", "b", ttl).await.expect("lock"), "locks are independent");
    store.unlock("other-lock", "b").await.expect("unlock");
}

/// Tasks are not policy: writing them wakes no data plane.
pub async fn video_writes_leave_the_revision_alone(store: &dyn Store) {
    let before = store.revision().await.expect("revision");
    let created = task("video_rev_1", "vrev-acct", 1_700_000_000);
    store.create_video(&created).await.expect("create");
    written(store, &created).await;
    store.try_lock("rev-lock", "x", Duration::from_secs(1)).await.expect("lock");
    store.unlock("rev-lock", "x").await.expect("unlock");
    assert_eq!(store.revision().await.expect("revision"), before, "video and lock writes bumped the revision");
}
