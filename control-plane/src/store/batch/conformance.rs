//! What every backend must do with files and batches; run from the store
//! conformance suite. Checks use ids and accounts of their own.

use std::sync::Arc;

use super::{BatchFilter, BatchWrite};
use crate::domain::{Batch, BatchFile};
use crate::store::Store;

/// Runs every file and batch check against `store`.
pub async fn run(store: Arc<dyn Store>) {
    files_round_trip_list_per_account_and_delete(&*store).await;
    batch_updates_are_compare_and_set(&*store).await;
    an_ended_batch_never_reopens(&*store).await;
    concurrent_batch_updates_lose_nothing(store.clone()).await;
    batch_listing_pages_newest_first_and_open_ones_are_indexed(&*store).await;
    batch_writes_leave_the_revision_alone(&*store).await;
}

fn file(id: &str, account: &str) -> BatchFile {
    BatchFile {
        id: id.to_owned(),
        account_id: account.to_owned(),
        channel_id: "ch-batch".into(),
        upstream_id: format!("up-{id}"),
        purpose: "batch".into(),
        filename: "in.jsonl".into(),
        bytes: 120,
        created_at: 1_700_000_000,
        model: "gpt-4o".into(),
        lines: 2,
        ..BatchFile::default()
    }
}

fn batch(id: &str, account: &str) -> Batch {
    Batch {
        id: id.to_owned(),
        account_id: account.to_owned(),
        model: "gpt-4o".into(),
        status: "validating".into(),
        hold_micros: 5_000,
        created_at: 1_700_000_000,
        ..Batch::default()
    }
}

async fn written(store: &dyn Store, batch: &Batch) -> Batch {
    match store.update_batch(batch).await.expect("update batch") {
        BatchWrite::Written(batch) => batch,
        BatchWrite::Conflict(stored) => panic!("update of {} refused; stored {stored:?}", batch.id),
    }
}

fn ids<T>(items: Vec<T>, id: impl Fn(&T) -> &str) -> Vec<String> {
    items.iter().map(|item| id(item).to_owned()).collect()
}

/// Create, get, a taken id, listing by account newest first with pages,
/// and deletion.
pub async fn files_round_trip_list_per_account_and_delete(store: &dyn Store) {
    let first = file("file-conf-1", "bfile-a");
    assert!(store.create_batch_file(&first).await.expect("create"), "a new id is created");
    assert!(!store.create_batch_file(&first).await.expect("create again"), "a taken id is refused");
    assert_eq!(store.get_batch_file("file-conf-1").await.expect("get"), Some(first));
    for (id, account) in [("file-conf-2", "bfile-b"), ("file-conf-3", "bfile-a")] {
        store.create_batch_file(&file(id, account)).await.expect("create");
    }
    let of_a = BatchFilter { account_id: "bfile-a".into(), ..BatchFilter::default() };
    let listed = store.list_batch_files(&of_a).await.expect("list");
    assert_eq!(ids(listed, |f| &f.id), ["file-conf-3", "file-conf-1"], "one account's, newest first");
    let page = BatchFilter { limit: 1, ..of_a.clone() };
    assert_eq!(ids(store.list_batch_files(&page).await.expect("list"), |f| &f.id), ["file-conf-3"]);
    let next = BatchFilter { after: "file-conf-3".into(), ..of_a.clone() };
    assert_eq!(ids(store.list_batch_files(&next).await.expect("list"), |f| &f.id), ["file-conf-1"]);
    assert!(store.delete_batch_file("file-conf-1").await.expect("delete"));
    assert!(!store.delete_batch_file("file-conf-1").await.expect("delete again"), "a deleted file is gone");
    assert_eq!(store.get_batch_file("file-conf-1").await.expect("get"), None);
    assert_eq!(ids(store.list_batch_files(&of_a).await.expect("list"), |f| &f.id), ["file-conf-3"]);
}

/// A write names the version it read; a stale or unknown one is refused.
pub async fn batch_updates_are_compare_and_set(store: &dyn Store) {
    let created = batch("batch_conf_cas", "bcas-a");
    assert!(store.create_batch(&created).await.expect("create"));
    assert!(!store.create_batch(&created).await.expect("create again"), "a taken id is refused");
    let mut next = created.clone();
    next.status = "in_progress".into();
    let stored = written(store, &next).await;
    assert_eq!(stored.version, created.version + 1, "a write bumps the version");
    let mut stale = created.clone();
    stale.status = "finalizing".into();
    assert_eq!(
        store.update_batch(&stale).await.expect("stale update"),
        BatchWrite::Conflict(Some(stored.clone())),
        "a stale version is refused with the stored batch"
    );
    assert_eq!(
        store.update_batch(&batch("batch_conf_none", "bcas-a")).await.expect("update"),
        BatchWrite::Conflict(None)
    );
    assert_eq!(store.get_batch("batch_conf_none").await.expect("get"), None, "an update created a batch");
}

/// An ended batch may be settled but never reopened.
pub async fn an_ended_batch_never_reopens(store: &dyn Store) {
    let created = batch("batch_conf_end", "bend-a");
    store.create_batch(&created).await.expect("create");
    let mut ended = created;
    (ended.ended, ended.status) = (true, "completed".into());
    let ended = written(store, &ended).await;
    let mut reopened = ended.clone();
    (reopened.ended, reopened.status) = (false, "in_progress".into());
    assert_eq!(store.update_batch(&reopened).await.expect("update"), BatchWrite::Conflict(Some(ended.clone())));
    let mut settled = ended;
    (settled.settled, settled.cost_micros) = (true, 1_234);
    let settled = written(store, &settled).await;
    assert_eq!(store.get_batch("batch_conf_end").await.expect("get"), Some(settled));
}

/// 8 writers each add 5 to `billed_lines` by read-modify-write with
/// retries: every increment lands.
pub async fn concurrent_batch_updates_lose_nothing(store: Arc<dyn Store>) {
    store.create_batch(&batch("batch_conf_race", "brace-a")).await.expect("create");
    let mut writers = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            for _ in 0..5 {
                let mut current = store.get_batch("batch_conf_race").await.expect("get").expect("batch");
                loop {
                    current.billed_lines += 1;
                    match store.update_batch(&current).await.expect("update") {
                        BatchWrite::Written(_) => break,
                        BatchWrite::Conflict(Some(stored)) => current = stored,
                        BatchWrite::Conflict(None) => panic!("batch vanished"),
                    }
                }
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer panicked");
    }
    let last = store.get_batch("batch_conf_race").await.expect("get").expect("batch");
    assert_eq!((last.billed_lines, last.version), (40, 40), "every increment landed exactly once");
}

/// Listing is per account, newest first, in pages; the open index holds
/// the running and the unsettled, oldest first.
pub async fn batch_listing_pages_newest_first_and_open_ones_are_indexed(store: &dyn Store) {
    // Ids sorting before every other check's, so they lead the open index.
    let cases = [("batch_0open_1", false, false), ("batch_0open_2", true, true), ("batch_0open_3", true, false)];
    for (id, ended, settled) in cases {
        let created = batch(id, "bopen-a");
        store.create_batch(&created).await.expect("create");
        let mut next = created;
        (next.ended, next.settled) = (ended, settled);
        written(store, &next).await;
    }
    let of_a = BatchFilter { account_id: "bopen-a".into(), ..BatchFilter::default() };
    let listed = ids(store.list_batches(&of_a).await.expect("list"), |b| &b.id);
    assert_eq!(listed, ["batch_0open_3", "batch_0open_2", "batch_0open_1"], "newest first");
    let next = BatchFilter { after: "batch_0open_3".into(), limit: 1, ..of_a };
    assert_eq!(ids(store.list_batches(&next).await.expect("list"), |b| &b.id), ["batch_0open_2"]);
    let open: Vec<String> = ids(store.open_batches(10_000).await.expect("open"), |b| &b.id)
        .into_iter()
        .filter(|id| id.starts_with("batch_0open_"))
        .collect();
    assert_eq!(open, ["batch_0open_1", "batch_0open_3"], "running and unsettled, oldest first");
    assert_eq!(store.open_batches(1).await.expect("open").len(), 1, "the limit holds");
    let all = store.list_batches(&BatchFilter { limit: 1_000, ..BatchFilter::default() }).await.expect("list");
    assert!(all.iter().any(|b| b.id == "batch_0open_2"), "no account lists every account's");
}

/// Files and batches are not policy: writing them wakes no data plane.
pub async fn batch_writes_leave_the_revision_alone(store: &dyn Store) {
    let before = store.revision().await.expect("revision");
    store.create_batch_file(&file("file-conf-rev", "brev-a")).await.expect("create");
    store.delete_batch_file("file-conf-rev").await.expect("delete");
    let created = batch("batch_conf_rev", "brev-a");
    store.create_batch(&created).await.expect("create");
    written(store, &created).await;
    assert_eq!(store.revision().await.expect("revision"), before, "file and batch writes bumped the revision");
}
