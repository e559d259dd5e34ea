//! The behaviour every `Store` backend must show; run by the tests of each.
//!
//! Each check panics with a message naming what broke. Checks use ids of
//! their own, so they can share one store and run in any order; they assume
//! no other writer is active while they compare revisions and changes.

mod keys;
mod modify;
mod tokens;
mod usage;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Modified, Patch, Store, StoreError};
use crate::domain::{
    Account, Change, Channel, ENABLED, Group, Kind, Model, RateLimit, Resource, Token, UsageFilter, UsageRecord,
};

/// How long a subscriber may take to see a revision written by another
/// replica; the contract is ~100 ms, this leaves room for a loaded CI box.
const SUBSCRIBE_WITHIN: Duration = Duration::from_secs(2);

/// Runs every single-store check against `store`.
pub async fn run(store: Arc<dyn Store>) {
    crud_round_trips_every_kind(&*store).await;
    counters_survive_modify(&*store).await;
    modify::run(store.clone()).await;
    keys::run(store.clone()).await;
    revisions_strictly_increase_per_write(&*store).await;
    changes_since_returns_the_writes_after_a_revision(&*store).await;
    snapshot_holds_everything_at_its_revision(&*store).await;
    snapshot_pages_hold_what_one_read_holds(&*store).await;
    usage::usage_is_applied_once_per_request_id(&*store).await;
    usage::usage_records_keep_the_counts_they_were_billed_on(&*store).await;
    usage::a_long_batch_is_applied_once_per_request_id(&*store).await;
    usage::concurrent_usage_is_applied_once_per_request_id(store.clone()).await;
    usage::usage_listing_filters_and_is_newest_first(&*store).await;
    usage::usage_pages_follow_their_cursor_past_new_records(&*store).await;
    names_are_unique_per_kind(&*store).await;
    tokens::run(store.clone()).await;
    concurrent_creates_of_one_name_admit_one(store.clone()).await;
    subscribe_observes_a_write(&*store).await;
    super::video::conformance::run(store.clone()).await;
    super::batch::conformance::run(store.clone()).await;
    permits_never_exceed_the_limit(store.clone()).await;
    super::budget::conformance::run(store.clone()).await;
    super::slots::conformance::run(store.clone()).await;
    super::lineage::conformance::run(store.clone()).await;
    super::fleet::conformance::run(store.clone()).await;
    super::rollup::conformance::run(store.clone()).await;
    super::access::conformance::run(store.clone()).await;
    super::console::conformance::run(store.clone()).await;
}

/// Runs the checks that need two store instances on one backend (two
/// control-plane replicas): what one writes, the other sees.
pub async fn run_shared(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    super::lineage::conformance::run_shared(a.clone(), b.clone()).await;
    super::console::conformance::run_shared(a.clone(), b.clone()).await;
    a_write_through_one_replica_reaches_the_other(&*a, &*b, "shared-ab").await;
    a_write_through_one_replica_reaches_the_other(&*b, &*a, "shared-ba").await;
}

/// Create, get, list, modify, delete each kind, and the errors of each.
pub async fn crud_round_trips_every_kind(store: &dyn Store) {
    for kind in Kind::ALL {
        let first = sample(kind, &format!("crud-{kind}-1"));
        let second = sample(kind, &format!("crud-{kind}-2"));
        // Created out of order, so that `list` has to sort.
        store.create(second.clone()).await.expect("create second");
        store.create(first.clone()).await.expect("create first");
        assert_eq!(store.get(kind, first.id()).await.expect("get"), Some(first.clone()), "{kind}: get after create");

        let listed: Vec<Resource> =
            store.list(kind).await.expect("list").into_iter().filter(|r| r.id().starts_with("crud-")).collect();
        assert_eq!(listed, vec![first.clone(), second.clone()], "{kind}: list holds both, ordered by id");
        assert!(store.list(kind).await.expect("list").iter().all(|r| r.kind() == kind), "{kind}: list mixes kinds");

        let err = store.create(first.clone()).await.expect_err("creating a taken id must fail");
        assert!(
            matches!(&err, StoreError::AlreadyExists { kind: k, id } if *k == kind && id == first.id()),
            "{kind}: create of a taken id gave {err:?}"
        );

        let edited = edited(&first);
        let modified = replace(store, edited.clone()).await.expect("modify");
        assert_eq!(modified.resource, edited, "{kind}: modify returns the written resource");
        assert_eq!(store.get(kind, first.id()).await.expect("get"), Some(edited), "{kind}: get after modify");

        let missing = sample(kind, &format!("crud-{kind}-missing"));
        let err = replace(store, missing.clone()).await.expect_err("modifying a missing id must fail");
        assert!(
            matches!(&err, StoreError::NotFound { kind: k, id } if *k == kind && id == missing.id()),
            "{kind}: modify of a missing id gave {err:?}"
        );
        assert_eq!(store.get(kind, missing.id()).await.expect("get"), None, "{kind}: failed modify created it");

        store.delete(kind, first.id()).await.expect("delete");
        store.delete(kind, second.id()).await.expect("delete");
        assert_eq!(store.get(kind, first.id()).await.expect("get"), None, "{kind}: get after delete");
        let err = store.delete(kind, first.id()).await.expect_err("deleting a missing id must fail");
        assert!(
            matches!(&err, StoreError::NotFound { kind: k, id } if *k == kind && id == first.id()),
            "{kind}: delete of a missing id gave {err:?}"
        );
        assert!(
            !store.list(kind).await.expect("list").iter().any(|r| r.id().starts_with("crud-")),
            "{kind}: deleted resources still listed"
        );
    }
}

/// Counters start at the created values, move only through balance and
/// usage operations, and keep their values across `modify`, whatever the
/// patch sets them to.
pub async fn counters_survive_modify(store: &dyn Store) {
    store.create(account("counters-acct", 1_000)).await.expect("create account");
    let mut start = token("counters-tok", "counters-acct");
    set_token_used(&mut start, 7);
    store.create(start).await.expect("create token");
    let (balance, used) = account_counters(store, "counters-acct").await;
    assert_eq!((balance, used), (1_000, 0), "account counters are the created values");
    assert_eq!(token_used(store, "counters-tok").await, 7, "token used is the created value");

    let adjusted = store.adjust_balance("counters-acct", 500).await.expect("adjust balance");
    let Resource::Account(adjusted) = adjusted else { panic!("adjust_balance returned {adjusted:?}") };
    assert_eq!(adjusted.balance_micros, 1_500, "adjust_balance returns the new balance");
    assert_eq!(adjusted.name, "account counters-acct", "adjust_balance returns the whole account");
    store.adjust_balance("counters-acct", -200).await.expect("deduct");

    let outcome =
        store.apply_usage(&[usage("counters-req", "counters-tok", "counters-acct", "m", 100)]).await.expect("usage");
    assert_eq!(outcome.applied, 1);

    let mut renamed = account("counters-acct", 0);
    if let Resource::Account(a) = &mut renamed {
        a.name = "renamed".into();
        a.used_micros = 0;
    }
    replace(store, renamed).await.expect("modify account");
    let mut renamed = token("counters-tok", "counters-acct");
    if let Resource::Token(t) = &mut renamed {
        t.name = "renamed".into();
    }
    replace(store, renamed).await.expect("modify token");

    let Some(Resource::Account(a)) = store.get(Kind::Account, "counters-acct").await.expect("get") else {
        panic!("account missing");
    };
    assert_eq!(a.name, "renamed", "modify changed the account's fields");
    assert_eq!((a.balance_micros, a.used_micros), (1_200, 100), "modify kept the account's counters");
    let Some(Resource::Token(t)) = store.get(Kind::Token, "counters-tok").await.expect("get") else {
        panic!("token missing");
    };
    assert_eq!(t.name, "renamed", "modify changed the token's fields");
    assert_eq!(t.used_micros, 107, "modify kept the token's used counter");

    let listed = store.list(Kind::Account).await.expect("list");
    let listed = listed.iter().find(|r| r.id() == "counters-acct").expect("account listed");
    assert!(
        matches!(listed, Resource::Account(a) if a.balance_micros == 1_200 && a.used_micros == 100),
        "list merges current counters: {listed:?}"
    );

    let err = store.adjust_balance("counters-missing", 5).await.expect_err("adjusting a missing account must fail");
    assert!(
        matches!(&err, StoreError::NotFound { kind: Kind::Account, id } if id == "counters-missing"),
        "adjust_balance of a missing account gave {err:?}"
    );
    assert_eq!(store.get(Kind::Account, "counters-missing").await.expect("get"), None);
}

/// Every write returns a revision above the previous one, and `revision`
/// reports the last.
pub async fn revisions_strictly_increase_per_write(store: &dyn Store) {
    let mut last = store.revision().await.expect("revision");
    let mut step = |rev: u64, what: &str| {
        assert!(rev > last, "{what} returned revision {rev}, not above {last}");
        last = rev;
    };
    step(store.create(account("rev-acct", 10)).await.expect("create"), "create");
    step(store.create(token("rev-tok", "rev-acct")).await.expect("create"), "create");
    let mut renamed = account("rev-acct", 0);
    if let Resource::Account(a) = &mut renamed {
        // Account names are unique: not the name `counters_survive_modify` gave.
        a.name = "renamed rev-acct".into();
    }
    step(replace(store, renamed).await.expect("modify").revision.expect("a change is written"), "modify");
    let Resource::Account(_) = store.adjust_balance("rev-acct", 1).await.expect("adjust") else {
        panic!("adjust_balance returned a non-account");
    };
    let after_adjust = store.revision().await.expect("revision");
    step(after_adjust, "adjust_balance");
    store.apply_usage(&[usage("rev-req", "rev-tok", "rev-acct", "m", 1)]).await.expect("usage");
    assert_eq!(
        store.revision().await.expect("revision"),
        after_adjust,
        "spending is not policy: apply_usage bumped the revision"
    );
    step(store.delete(Kind::Token, "rev-tok").await.expect("delete"), "delete");
    step(store.delete(Kind::Account, "rev-acct").await.expect("delete"), "delete");
    assert_eq!(store.revision().await.expect("revision"), last, "revision() is the last write's");

    let before = store.revision().await.expect("revision");
    let _ = store.create(account("counters-acct", 1)).await.expect_err("taken id");
    let _ = store.delete(Kind::Group, "rev-missing").await.expect_err("missing id");
    assert_eq!(store.revision().await.expect("revision"), before, "failed writes must not bump the revision");
}

/// `changes_since` gives one entry per revision and resource, oldest first;
/// an empty list at the current revision; `None` for a future one.
pub async fn changes_since_returns_the_writes_after_a_revision(store: &dyn Store) {
    let start = store.revision().await.expect("revision");
    assert_eq!(store.changes_since(start).await.expect("changes"), Some(vec![]), "nothing after the current revision");
    assert_eq!(store.changes_since(start + 1).await.expect("changes"), None, "a future revision is not served");
    assert_eq!(store.changes_since(start + 1_000_000).await.expect("changes"), None, "a future revision is not served");

    let r1 = store.create(sample(Kind::Group, "feed-group")).await.expect("create");
    let r2 = store.create(account("feed-acct", 100)).await.expect("create");
    let r3 = store.create(token("feed-tok", "feed-acct")).await.expect("create");
    let r4 = replace(store, edited(&sample(Kind::Group, "feed-group"))).await.expect("modify");
    let r4 = r4.revision.expect("a change is written");
    store.adjust_balance("feed-acct", 5).await.expect("adjust");
    let r5 = store.revision().await.expect("revision");
    store.apply_usage(&[usage("feed-req", "feed-tok", "feed-acct", "m", 3)]).await.expect("usage");
    let r7 = store.delete(Kind::Group, "feed-group").await.expect("delete");

    let change = |revision, kind, id: &str| Change { revision, kind, id: id.to_owned() };
    let expected = vec![
        change(r1, Kind::Group, "feed-group"),
        change(r2, Kind::Account, "feed-acct"),
        change(r3, Kind::Token, "feed-tok"),
        change(r4, Kind::Group, "feed-group"),
        change(r5, Kind::Account, "feed-acct"),
        change(r7, Kind::Group, "feed-group"),
    ];
    let got = store.changes_since(start).await.expect("changes").expect("the feed reaches back to the start");
    assert_eq!(got, expected, "changes since {start}");
    let got = store.changes_since(r3).await.expect("changes").expect("the feed reaches back to r3");
    assert_eq!(got, expected[3..].to_vec(), "changes since r3 ({r3})");
    assert_eq!(store.changes_since(r7).await.expect("changes"), Some(vec![]), "nothing after the current revision");
    assert_eq!(store.changes_since(r7 + 1).await.expect("changes"), None, "a future revision is not served");

    let all = store.changes_since(0).await.expect("changes");
    if let Some(all) = all {
        assert!(all.ends_with(&expected), "changes since 0 end with this check's writes");
        assert!(all.windows(2).all(|w| w[0].revision <= w[1].revision), "changes are oldest first");
    }
}

/// A snapshot holds every resource, with counters, at the revision it names.
pub async fn snapshot_holds_everything_at_its_revision(store: &dyn Store) {
    for kind in Kind::ALL {
        store.create(sample(kind, &format!("snap-{kind}"))).await.expect("create");
    }
    store.adjust_balance(&format!("snap-{}", Kind::Account), 42).await.expect("adjust");
    let snapshot = store.snapshot().await.expect("snapshot");
    assert_eq!(snapshot.revision, store.revision().await.expect("revision"), "snapshot names the current revision");

    let mut listed = Vec::new();
    for kind in Kind::ALL {
        listed.extend(store.list(kind).await.expect("list"));
    }
    let key = |r: &Resource| (r.kind(), r.id().to_owned());
    let in_snapshot: BTreeMap<_, _> = snapshot.resources.iter().map(|r| (key(r), r)).collect();
    assert_eq!(in_snapshot.len(), snapshot.resources.len(), "snapshot repeats a resource");
    let in_lists: BTreeMap<_, _> = listed.iter().map(|r| (key(r), r)).collect();
    assert_eq!(in_snapshot, in_lists, "snapshot and lists disagree");
    for kind in Kind::ALL {
        let id = format!("snap-{kind}");
        assert!(in_snapshot.contains_key(&(kind, id.clone())), "snapshot lacks {kind} {id}");
    }
    let account = in_snapshot.get(&(Kind::Account, format!("snap-{}", Kind::Account))).expect("account");
    assert!(
        matches!(account, Resource::Account(a) if a.balance_micros == 1_042),
        "snapshot merges counters: {account:?}"
    );
}

/// Read in pages of two, a snapshot holds what one read holds, counters
/// included; and `get_many` answers each reference in order.
pub async fn snapshot_pages_hold_what_one_read_holds(store: &dyn Store) {
    for n in 0..5 {
        store.create(token(&format!("page-tok-{n}"), "page-acct")).await.expect("create token");
    }
    store.create(account("page-acct", 7)).await.expect("create account");
    let snapshot = store.snapshot().await.expect("snapshot");
    let key = |r: &Resource| (r.kind(), r.id().to_owned());
    let mut paged = BTreeMap::new();
    let mut cursor = Some(super::PageCursor::default());
    let mut pages = 0;
    while let Some(at) = cursor.take() {
        let page = store.snapshot_page(&at, 2).await.expect("snapshot page");
        paged.extend(page.resources.into_iter().map(|r| (key(&r), r)));
        cursor = page.next;
        pages += 1;
        assert!(pages < 10_000, "pages do not end");
    }
    let whole: BTreeMap<_, _> = snapshot.resources.into_iter().map(|r| (key(&r), r)).collect();
    assert_eq!(paged, whole, "the pages and one read disagree");

    let refs = [
        (Kind::Token, "page-tok-3".to_owned()),
        (Kind::Token, "page-tok-missing".to_owned()),
        (Kind::Account, "page-acct".to_owned()),
    ];
    let found = store.get_many(&refs).await.expect("get many");
    assert_eq!(found.len(), 3);
    assert_eq!(found[0].as_ref().map(Resource::id), Some("page-tok-3"));
    assert!(found[1].is_none());
    assert_eq!(found[2], whole.get(&(Kind::Account, "page-acct".to_owned())).cloned());
}

/// Two accounts (or channels) never share a name: a create or a rename to
/// a taken name is refused naming the owner, a rename to its own name or a
/// free one works, and a delete frees the name. Tokens' names may repeat.
pub async fn names_are_unique_per_kind(store: &dyn Store) {
    for kind in [Kind::Account, Kind::Channel] {
        let name = format!("unique {kind}");
        let named = |id: &str| {
            let mut resource = sample(kind, id);
            rename(&mut resource, &name);
            resource
        };
        let first = named(&format!("names-{kind}-1"));
        store.create(first.clone()).await.expect("create the first of a name");
        let err = store.create(named(&format!("names-{kind}-2"))).await.expect_err("a second of one name");
        assert!(
            matches!(&err, StoreError::NameTaken { kind: k, name: n, owner: Some(o) } if *k == kind && *n == name && o == first.id()),
            "{kind}: duplicate name gave {err:?}"
        );
        assert_eq!(err.to_string(), format!("{kind} name {name:?} is taken by {}", first.id()));

        let other = sample(kind, &format!("names-{kind}-3"));
        store.create(other.clone()).await.expect("create another name");
        let taken = name.clone();
        let to_taken: Patch = Box::new(move |resource| {
            rename(resource, &taken);
            Ok(())
        });
        let err = store.modify(kind, other.id(), to_taken).await.expect_err("rename to a taken name");
        assert!(matches!(err, StoreError::NameTaken { .. }), "{kind}: rename to a taken name gave {err:?}");

        let freed = format!("{name} (renamed)");
        let free = freed.clone();
        let to_free: Patch = Box::new(move |resource| {
            rename(resource, &free);
            Ok(())
        });
        store.modify(kind, first.id(), to_free).await.expect("rename to a free name");
        store.create(named(&format!("names-{kind}-4"))).await.expect("the old name is free after a rename");
        let err = store.create(named(&format!("names-{kind}-5"))).await.expect_err("taken again");
        assert!(matches!(err, StoreError::NameTaken { .. }), "{kind}: {err:?}");
        store.delete(kind, &format!("names-{kind}-4")).await.expect("delete");
        store.create(named(&format!("names-{kind}-5"))).await.expect("a delete frees the name");
        let unchanged: Patch = Box::new(|resource| {
            if let Resource::Account(a) = resource {
                a.unlimited = !a.unlimited;
            }
            if let Resource::Channel(c) = resource {
                c.weight += 1;
            }
            Ok(())
        });
        store.modify(kind, &format!("names-{kind}-5"), unchanged).await.expect("an edit that keeps the name");
    }
    for id in ["names-token-1", "names-token-2"] {
        let mut twin = token(id, "names-acct");
        rename(&mut twin, "twin");
        store.create(twin).await.expect("tokens may share a name");
    }
}

/// Eight creates of one account name at once: exactly one is stored.
pub async fn concurrent_creates_of_one_name_admit_one(store: Arc<dyn Store>) {
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut resource = account(&format!("race-name-{i}"), 0);
            rename(&mut resource, "raced name");
            store.create(resource).await
        }));
    }
    let mut created = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(_) => created += 1,
            Err(StoreError::NameTaken { .. }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(created, 1, "one create of a name wins");
}

fn rename(resource: &mut Resource, name: &str) {
    match resource {
        Resource::Account(a) => a.name = name.to_owned(),
        Resource::Channel(c) => c.name = name.to_owned(),
        Resource::Token(t) => t.name = name.to_owned(),
        Resource::Group(_) | Resource::Model(_) => {}
    }
}

/// 8 tasks taking permits of one key and window at once get exactly the
/// limit between them; a grant is partial when little is left, windows and
/// keys count apart, and permits are no resource change.
pub async fn permits_never_exceed_the_limit(store: Arc<dyn Store>) {
    const TASKS: usize = 8;
    const LIMIT: u32 = 50;
    const WANT: u32 = 3;
    const WINDOW: i64 = 60;
    let now = crate::domain::now_unix();
    let start = now - now.rem_euclid(WINDOW);
    let before = store.revision().await.expect("revision");

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut grants = Vec::new();
            loop {
                let grant = store.take_permits("conf-permits", start, WINDOW, LIMIT, WANT).await.expect("take permits");
                if grant == 0 {
                    return grants;
                }
                grants.push(grant);
            }
        }));
    }
    let mut grants = Vec::new();
    for task in tasks {
        grants.extend(task.await.expect("permit task panicked"));
    }
    assert!(grants.iter().all(|&g| g <= WANT), "a grant exceeded what was asked: {grants:?}");
    assert_eq!(grants.iter().sum::<u32>(), LIMIT, "concurrent takers got exactly the limit: {grants:?}");
    let take = |key: &'static str, start: i64, limit: u32, want: u32| {
        let store = store.clone();
        async move { store.take_permits(key, start, WINDOW, limit, want).await.expect("take permits") }
    };
    assert_eq!(take("conf-permits", start, LIMIT, WANT).await, 0, "a used-up window grants nothing");
    assert_eq!(take("conf-permits", start + WINDOW, LIMIT, WANT).await, WANT, "the next window starts afresh");
    assert_eq!(take("conf-permits-other", start, LIMIT, WANT).await, WANT, "another key counts apart");
    assert_eq!(take("conf-partial", start, 5, 3).await, 3);
    assert_eq!(take("conf-partial", start, 5, 3).await, 2, "what is left of the limit, when less than asked");
    assert_eq!(take("conf-partial", start, 5, 3).await, 0);
    assert_eq!(take("conf-partial", start, 6, 3).await, 1, "a raised limit grants the difference");
    assert_eq!(take("conf-zero", start, 5, 0).await, 0, "wanting nothing grants nothing");
    // A token-per-minute overrun is counted with the largest limit: it
    // lands whatever is left, and the window grants nothing more after it.
    assert_eq!(take("conf-charge", start, 10, 8).await, 8);
    assert_eq!(take("conf-charge", start, u32::MAX, 5).await, 5, "a charge counts past the limit");
    assert_eq!(take("conf-charge", start, 10, 1).await, 0, "a window charged past its limit grants nothing");
    assert_eq!(take("conf-charge", start, 14, 1).await, 1, "the limit raised past the count grants again");
    assert_eq!(store.revision().await.expect("revision"), before, "permits bumped the revision");
}

/// A receiver from `subscribe` sees the revision of a later write.
pub async fn subscribe_observes_a_write(store: &dyn Store) {
    let mut rx = store.subscribe();
    let before = store.revision().await.expect("revision");
    let revision = store.create(sample(Kind::Model, "subscribe-model")).await.expect("create");
    assert!(revision > before);
    wait_for_revision(&mut rx, revision, "own write").await;
}

/// A write through `writer` reaches `reader`: its `subscribe`, `get` and
/// `changes_since`.
pub async fn a_write_through_one_replica_reaches_the_other(writer: &dyn Store, reader: &dyn Store, id: &str) {
    let mut rx = reader.subscribe();
    let start = reader.revision().await.expect("revision");
    let resource = sample(Kind::Channel, id);
    let revision = writer.create(resource.clone()).await.expect("create");
    let started = Instant::now();
    wait_for_revision(&mut rx, revision, "the other replica's write").await;
    let took = started.elapsed();
    assert_eq!(reader.revision().await.expect("revision"), revision);
    assert_eq!(reader.get(Kind::Channel, id).await.expect("get"), Some(resource), "the other replica reads it");
    let changes = reader.changes_since(start).await.expect("changes").expect("the feed reaches back");
    assert_eq!(changes, vec![Change { revision, kind: Kind::Channel, id: id.to_owned() }], "changes since {start}");
    eprintln!("subscribe saw the other replica's revision {revision} after {took:?}");

    // And the other way round, for counters.
    writer.create(account(&format!("{id}-acct"), 1)).await.expect("create");
    let mut rx = writer.subscribe();
    let adjusted = reader.adjust_balance(&format!("{id}-acct"), 9).await.expect("adjust");
    let Resource::Account(a) = adjusted else { panic!("adjust_balance returned {adjusted:?}") };
    assert_eq!(a.balance_micros, 10);
    let now = reader.revision().await.expect("revision");
    wait_for_revision(&mut rx, now, "the reverse direction").await;
    let (balance, _) = account_counters(writer, &format!("{id}-acct")).await;
    assert_eq!(balance, 10, "counter written by one replica read by the other");
}

/// A sample resource of `kind` named `id`, with every field set.
pub fn sample(kind: Kind, id: &str) -> Resource {
    match kind {
        Kind::Account => account(id, 1_000),
        Kind::Token => token(id, "sample-account"),
        Kind::Group => Resource::Group(Group {
            name: id.to_owned(),
            ratio: 1.5,
            deprecated: false,
            description: format!("group {id}"),
            rate_limit: RateLimit { window_minutes: 1, max_requests: 60 },
            tokens_per_minute: 90_000,
            max_in_flight: 4,
        }),
        Kind::Channel => Resource::Channel(Channel {
            id: id.to_owned(),
            name: format!("channel {id}"),
            kind: "openai".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: "sk-upstream".into(),
            models: vec!["gpt-4o".into()],
            model_map: BTreeMap::from([("gpt-4o".to_owned(), "gpt-4o-2024".to_owned())]),
            groups: vec!["default".into()],
            priority: 1,
            weight: 10,
            status: ENABLED.into(),
            connect_timeout_ms: 1_000,
            first_byte_timeout_ms: 2_000,
            idle_timeout_ms: 3_000,
            total_timeout_ms: 4_000,
            keys: Vec::new(),
            settings: BTreeMap::from([("api_version".to_owned(), "2024-10-21".to_owned())]),
        }),
        Kind::Model => Resource::Model(Model {
            id: id.to_owned(),
            category: "chat".into(),
            input_price_micros: 2_500_000,
            output_price_micros: 10_000_000,
            cached_price_micros: 1_250_000,
            request_price_micros: 0,
            second_price_micros: 0,
            image_price_micros: 0,
            owned_by: "openai".into(),
            tier_threshold_tokens: 200_000,
            tier_input_price_micros: 5_000_000,
            tier_output_price_micros: 15_000_000,
            tier_cached_price_micros: 2_500_000,
            cache_write_5m_price_micros: 3_125_000,
            cache_write_1h_price_micros: 5_000_000,
            reasoning_price_micros: 12_000_000,
            audio_input_price_micros: 32_000_000,
            audio_output_price_micros: 64_000_000,
            audio_cached_price_micros: 400_000,
            search_unit_price_micros: 2_000,
            batch_price_ppm: 400_000,
        }),
    }
}

/// An account `id` with `balance_micros` and nothing used.
pub fn account(id: &str, balance_micros: i64) -> Resource {
    Resource::Account(Account {
        id: id.to_owned(),
        name: format!("account {id}"),
        balance_micros,
        unlimited: false,
        groups: vec!["default".into()],
        status: ENABLED.into(),
        used_micros: 0,
        created_at: 1_700_000_000,
        window: None,
    })
}

/// A token `id` of `account_id` with nothing used.
pub fn token(id: &str, account_id: &str) -> Resource {
    Resource::Token(Token {
        id: id.to_owned(),
        account_id: account_id.to_owned(),
        group: "default".into(),
        name: format!("token {id}"),
        key_hash: key_hash_of(id),
        key_prefix: "sk-ab…yz".into(),
        status: ENABLED.into(),
        expires_at: 0,
        unlimited: false,
        quota_micros: 5_000_000,
        used_micros: 0,
        models: vec![],
        allow_ips: vec!["10.0.0.0/8".into()],
        rate_limit: RateLimit::default(),
        tokens_per_minute: 50_000,
        max_in_flight: 2,
        created_at: 1_700_000_000,
        window: None,
    })
}

/// A key hash of its own for token `id` (64 hex digits).
pub fn key_hash_of(id: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(format!("conformance-key-{id}").as_bytes()))
}

/// A usage record costing `cost_micros`.
pub fn usage(request_id: &str, token_id: &str, account_id: &str, model: &str, cost_micros: i64) -> UsageRecord {
    UsageRecord {
        request_id: request_id.to_owned(),
        token_id: token_id.to_owned(),
        account_id: account_id.to_owned(),
        group: "default".into(),
        model: model.to_owned(),
        channel_id: "ch-1".into(),
        endpoint: "/v1/chat/completions".into(),
        prompt_tokens: 10,
        completion_tokens: 20,
        cached_tokens: 0,
        cost_micros,
        latency_ms: 123,
        status: 200,
        created_at: 1_700_000_000,
        node_id: "dp-1".into(),
        estimated: false,
        images: 0,
        audio_millis: 0,
        cache_write_5m_tokens: 0,
        cache_write_1h_tokens: 0,
        reasoning_tokens: 0,
        audio_prompt_tokens: 0,
        audio_completion_tokens: 0,
        audio_cached_tokens: 0,
        search_units: 0,
        tier: 0,
    }
}

/// Replaces the stored resource with `resource` through `modify`.
pub async fn replace(store: &dyn Store, resource: Resource) -> Result<Modified, StoreError> {
    let (kind, id) = (resource.kind(), resource.id().to_owned());
    store
        .modify(
            kind,
            &id,
            Box::new(move |stored| {
                *stored = resource.clone();
                Ok(())
            }),
        )
        .await
}

/// `resource` with a non-counter field changed.
fn edited(resource: &Resource) -> Resource {
    let mut resource = resource.clone();
    match &mut resource {
        Resource::Account(a) => a.name.push_str(" (edited)"),
        Resource::Group(g) => g.description.push_str(" (edited)"),
        Resource::Token(t) => t.name.push_str(" (edited)"),
        Resource::Channel(c) => c.weight += 1,
        Resource::Model(m) => m.output_price_micros += 1,
    }
    resource
}

fn set_token_used(resource: &mut Resource, used: i64) {
    if let Resource::Token(t) = resource {
        t.used_micros = used;
    }
}

pub(crate) async fn account_counters(store: &dyn Store, id: &str) -> (i64, i64) {
    match store.get(Kind::Account, id).await.expect("get account") {
        Some(Resource::Account(a)) => (a.balance_micros, a.used_micros),
        other => panic!("account {id:?} is {other:?}"),
    }
}

pub(crate) async fn token_used(store: &dyn Store, id: &str) -> i64 {
    match store.get(Kind::Token, id).await.expect("get token") {
        Some(Resource::Token(t)) => t.used_micros,
        other => panic!("token {id:?} is {other:?}"),
    }
}

async fn wait_for_revision(rx: &mut watch::Receiver<u64>, revision: u64, what: &str) {
    let waited = tokio::time::timeout(SUBSCRIBE_WITHIN, rx.wait_for(|r| *r >= revision)).await.map(|seen| seen.is_ok());
    match waited {
        Ok(true) => {}
        Ok(false) => panic!("subscription closed before revision {revision} ({what})"),
        Err(_) => {
            panic!("subscription still at {} after {SUBSCRIBE_WITHIN:?}, wanted {revision} ({what})", *rx.borrow())
        }
    }
}
