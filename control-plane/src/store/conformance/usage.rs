//! The usage ledger's part of the conformance suite: each record applied
//! once per request id, whatever the batching or concurrency, with the counts
//! it was billed on, and listed newest first page by page.

use super::*;

/// A batch applied twice charges once; ids repeated inside a batch count as
/// duplicates; records of missing accounts or tokens are logged and charge
/// whichever side exists; unlimited accounts are charged too.
pub async fn usage_is_applied_once_per_request_id(store: &dyn Store) {
    let mut acct = account("once-acct", 10_000);
    if let Resource::Account(a) = &mut acct {
        a.unlimited = true;
    }
    store.create(acct).await.expect("create account");
    store.create(token("once-tok", "once-acct")).await.expect("create token");
    let batch = vec![
        usage("once-1", "once-tok", "once-acct", "m", 100),
        usage("once-2", "once-tok", "once-acct", "m", 200),
        usage("once-1", "once-tok", "once-acct", "m", 100),
        usage("once-no-token", "once-tok-missing", "once-acct", "m", 30),
        usage("once-no-account", "once-tok", "once-acct-missing", "m", 4),
    ];
    let before = store.revision().await.expect("revision");
    let first = store.apply_usage(&batch).await.expect("apply");
    assert_eq!((first.applied, first.duplicates), (4, 1), "first application of the batch");
    assert_eq!(store.revision().await.expect("revision"), before, "applying usage leaves the revision alone");
    assert_eq!(account_counters(store, "once-acct").await, (10_000 - 330, 330), "account charged once per id");
    assert_eq!(token_used(store, "once-tok").await, 304, "token charged once per id");

    let second = store.apply_usage(&batch).await.expect("apply again");
    assert_eq!((second.applied, second.duplicates), (0, 5), "second application of the batch");
    assert_eq!(account_counters(store, "once-acct").await, (10_000 - 330, 330), "duplicates charged nothing");
    assert_eq!(token_used(store, "once-tok").await, 304, "duplicates charged nothing");
    assert_eq!(store.get(Kind::Token, "once-tok-missing").await.expect("get"), None, "usage created a token");
    assert_eq!(store.get(Kind::Account, "once-acct-missing").await.expect("get"), None, "usage created an account");

    let logged = store
        .list_usage(&UsageFilter { account_id: "once-acct".into(), ..Default::default() })
        .await
        .expect("list usage");
    let ids: Vec<&str> = logged.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, ["once-no-token", "once-2", "once-1"], "each applied record logged once, newest first");
    let logged = store
        .list_usage(&UsageFilter { account_id: "once-acct-missing".into(), ..Default::default() })
        .await
        .expect("list usage");
    assert_eq!(logged.len(), 1, "a record of a missing account is still logged");

    let empty = store.apply_usage(&[]).await.expect("apply nothing");
    assert_eq!((empty.applied, empty.duplicates), (0, 0), "an empty batch");
}

/// A batch longer than a store applies in one step (Redis splits it into
/// short script calls) still charges each request id once, also when an id
/// comes back many records later and when part of the batch was applied
/// before.
pub async fn a_long_batch_is_applied_once_per_request_id(store: &dyn Store) {
    store.create(account("long-acct", 1_000_000)).await.expect("create account");
    store.create(token("long-tok", "long-acct")).await.expect("create token");
    let record = |i: usize| usage(&format!("long-{i}"), "long-tok", "long-acct", "m", i as i64 + 1);
    let mut batch: Vec<UsageRecord> = (0..240).map(record).collect();
    // Ids seen far earlier in the same batch, and twice in a row.
    for i in [3, 7, 99, 200, 200] {
        batch.insert(230, record(i));
    }
    let first = store.apply_usage(&batch).await.expect("apply");
    assert_eq!((first.applied, first.duplicates), (240, 5), "each id once, the repeats as duplicates");
    let spent: i64 = (0..240).map(|i| i as i64 + 1).sum();
    assert_eq!(account_counters(store, "long-acct").await, (1_000_000 - spent, spent), "account charged once per id");

    // Half of this batch was applied above: only the new half charges.
    let next: Vec<UsageRecord> = (120..360).map(record).collect();
    let second = store.apply_usage(&next).await.expect("apply again");
    assert_eq!((second.applied, second.duplicates), (120, 120), "the new half applied, the old half refused");
    let spent: i64 = (0..360).map(|i| i as i64 + 1).sum();
    assert_eq!(token_used(store, "long-tok").await, spent, "token charged once per id");
    let logged = store
        .list_usage(&UsageFilter { token_id: "long-tok".into(), limit: 1_000, ..Default::default() })
        .await
        .expect("list usage");
    assert_eq!(logged.len(), 360, "each request id logged once");
}

/// A logged record keeps its cache-write and reasoning counts and the
/// price tier it was billed at.
pub async fn usage_records_keep_the_counts_they_were_billed_on(store: &dyn Store) {
    store.create(account("billed-acct", 10_000)).await.expect("create account");
    store.create(token("billed-tok", "billed-acct")).await.expect("create token");
    let record = UsageRecord {
        prompt_tokens: 300_000,
        cached_tokens: 1_000,
        cache_write_5m_tokens: 2_000,
        cache_write_1h_tokens: 3_000,
        completion_tokens: 500,
        reasoning_tokens: 400,
        tier: 1,
        ..usage("billed-1", "billed-tok", "billed-acct", "m", 77)
    };
    store.apply_usage(std::slice::from_ref(&record)).await.expect("apply");
    let logged = store
        .list_usage(&UsageFilter { account_id: "billed-acct".into(), ..Default::default() })
        .await
        .expect("list usage");
    assert_eq!(logged, [record], "the logged record is the applied one, counts and tier included");
}

/// 8 tasks applying overlapping request ids at once: each id is applied
/// exactly once and the balances are exact.
pub async fn concurrent_usage_is_applied_once_per_request_id(store: Arc<dyn Store>) {
    const TASKS: usize = 8;
    const IDS: usize = 40;
    store.create(account("race-acct", 1_000_000)).await.expect("create account");
    store.create(token("race-tok", "race-acct")).await.expect("create token");
    let cost = |i: usize| i as i64 + 1;

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (mut applied, mut duplicates) = (0, 0);
            // Task t covers ids t*4 .. t*4+12, so neighbours overlap; in
            // batches of 3 so that batches interleave.
            let ids: Vec<usize> = (t * 4..t * 4 + 12).map(|i| i % IDS).collect();
            for chunk in ids.chunks(3) {
                let batch: Vec<UsageRecord> =
                    chunk.iter().map(|&i| usage(&format!("race-{i}"), "race-tok", "race-acct", "m", cost(i))).collect();
                let outcome = store.apply_usage(&batch).await.expect("apply usage");
                applied += outcome.applied;
                duplicates += outcome.duplicates;
            }
            (applied, duplicates)
        }));
    }
    let (mut applied, mut duplicates) = (0, 0);
    for task in tasks {
        let (a, d) = task.await.expect("usage task panicked");
        applied += a;
        duplicates += d;
    }
    let distinct: BTreeSet<usize> = (0..TASKS).flat_map(|t| (t * 4..t * 4 + 12).map(|i| i % IDS)).collect();
    let total: usize = TASKS * 12;
    assert_eq!(applied as usize, distinct.len(), "each request id applied exactly once");
    assert_eq!(duplicates as usize, total - distinct.len(), "every other report counted as a duplicate");
    let spent: i64 = distinct.iter().map(|&i| cost(i)).sum();
    assert_eq!(
        account_counters(store.as_ref(), "race-acct").await,
        (1_000_000 - spent, spent),
        "account balance exact"
    );
    assert_eq!(token_used(store.as_ref(), "race-tok").await, spent, "token used exact");
    let logged = store
        .list_usage(&UsageFilter { token_id: "race-tok".into(), limit: 1_000, ..Default::default() })
        .await
        .expect("list usage");
    assert_eq!(logged.len(), distinct.len(), "each request id logged exactly once");
}

/// `list_usage` filters by token, account and model (empty = any), returns
/// the newest first, honours `limit` and reads a zero limit as 100.
pub async fn usage_listing_filters_and_is_newest_first(store: &dyn Store) {
    store.create(account("list-acct-a", 1_000_000)).await.expect("create account");
    store.create(account("list-acct-b", 1_000_000)).await.expect("create account");
    store.create(token("list-tok-a", "list-acct-a")).await.expect("create token");
    store.create(token("list-tok-b", "list-acct-b")).await.expect("create token");
    for i in 0..6 {
        let (tok, acct) = if i % 2 == 0 { ("list-tok-a", "list-acct-a") } else { ("list-tok-b", "list-acct-b") };
        let model = if i < 3 { "list-model-x" } else { "list-model-y" };
        let outcome = store.apply_usage(&[usage(&format!("list-{i}"), tok, acct, model, 1)]).await.expect("usage");
        assert_eq!(outcome.applied, 1);
    }
    let ids = |records: Vec<UsageRecord>| records.into_iter().map(|r| r.request_id).collect::<Vec<_>>();
    let list = |filter: UsageFilter| async move { ids(store.list_usage(&filter).await.expect("list usage")) };

    let by_token = list(UsageFilter { token_id: "list-tok-a".into(), ..Default::default() }).await;
    assert_eq!(by_token, ["list-4", "list-2", "list-0"], "filter by token, newest first");
    let by_account = list(UsageFilter { account_id: "list-acct-b".into(), ..Default::default() }).await;
    assert_eq!(by_account, ["list-5", "list-3", "list-1"], "filter by account, newest first");
    let by_model = list(UsageFilter { model: "list-model-y".into(), ..Default::default() }).await;
    assert_eq!(by_model, ["list-5", "list-4", "list-3"], "filter by model, newest first");
    let both =
        list(UsageFilter { token_id: "list-tok-a".into(), model: "list-model-x".into(), ..Default::default() }).await;
    assert_eq!(both, ["list-2", "list-0"], "filters combine");
    let limited = list(UsageFilter { model: "list-model-x".into(), limit: 2, ..Default::default() }).await;
    assert_eq!(limited, ["list-2", "list-1"], "limit keeps the newest");
    let none = list(UsageFilter { token_id: "list-tok-none".into(), ..Default::default() }).await;
    assert!(none.is_empty(), "no record matches an unknown token");
    let newest = list(UsageFilter { limit: 1, ..Default::default() }).await;
    assert_eq!(newest, ["list-5"], "no filter: the newest record of all");

    let batch: Vec<UsageRecord> =
        (0..105).map(|i| usage(&format!("list-many-{i}"), "list-tok-many", "list-acct-a", "m", 1)).collect();
    store.apply_usage(&batch).await.expect("usage");
    let many = list(UsageFilter { token_id: "list-tok-many".into(), ..Default::default() }).await;
    assert_eq!(many.len(), 100, "a zero limit means 100");
    assert_eq!(many.first().map(String::as_str), Some("list-many-104"), "the last of a batch is the newest");
}

/// Pages of `list_usage_page` join up to the whole filtered log, newest
/// first, with records applied between two pages neither repeated nor
/// returned in a later page; time bounds filter by `created_at`.
pub async fn usage_pages_follow_their_cursor_past_new_records(store: &dyn Store) {
    let batch: Vec<UsageRecord> =
        (0..7).map(|i| usage(&format!("page-{i}"), "page-tok", "page-acct", "page-model", 1)).collect();
    store.apply_usage(&batch).await.expect("usage");
    let filter = UsageFilter { token_id: "page-tok".into(), limit: 3, ..Default::default() };
    let first = store.list_usage_page(&filter).await.expect("first page");
    let ids = |records: &[UsageRecord]| records.iter().map(|r| r.request_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&first.items), ["page-6", "page-5", "page-4"], "first page, newest first");
    assert!(!first.next.is_empty(), "more records match: a next page");

    // Newer records, of this token and of another, arrive between pages.
    let newer = [
        usage("page-new-0", "page-tok", "page-acct", "page-model", 1),
        usage("page-new-1", "page-other-tok", "page-acct", "page-model", 1),
    ];
    store.apply_usage(&newer).await.expect("usage");
    let second = store.list_usage_page(&UsageFilter { cursor: first.next, ..filter.clone() }).await.expect("page 2");
    assert_eq!(ids(&second.items), ["page-3", "page-2", "page-1"], "second page continues where the first ended");
    let third = store.list_usage_page(&UsageFilter { cursor: second.next, ..filter.clone() }).await.expect("page 3");
    assert_eq!(ids(&third.items), ["page-0"], "last page");
    assert!(third.next.is_empty(), "no page after the last: {third:?}");

    let bad = store.list_usage_page(&UsageFilter { cursor: "nonsense".into(), ..filter.clone() }).await;
    assert!(matches!(bad, Err(StoreError::BadCursor { .. })), "a cursor the store never gave: {bad:?}");

    let mut old = usage("page-old", "page-time-tok", "page-acct", "page-model", 1);
    old.created_at -= 3_600;
    let recent = usage("page-recent", "page-time-tok", "page-acct", "page-model", 1);
    store.apply_usage(&[old.clone(), recent.clone()]).await.expect("usage");
    let timed = |from, to| UsageFilter { token_id: "page-time-tok".into(), from, to, ..Default::default() };
    let since = store.list_usage(&timed(old.created_at + 1, 0)).await.expect("list");
    assert_eq!(ids(&since), ["page-recent"], "from is inclusive of later records only");
    let until = store.list_usage(&timed(0, old.created_at + 1)).await.expect("list");
    assert_eq!(ids(&until), ["page-old"], "to excludes later records");
}
