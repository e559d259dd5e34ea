//! The same store conformance suite passes on Redis and on the embedded
//! store, two Redis-backed replicas see each other's writes, and a
//! `modify` on one replica survives a write by another in the middle of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gw_control_plane::domain::secrets::{Keyring, MasterKey};
use gw_control_plane::domain::{DISABLED, Kind, Resource};
use gw_control_plane::store::{
    EmbeddedStore, LineageStore as _, Patch, RedisStore, Sealing, Store, conformance, rollup,
};
use gw_tests::{harness::try_eventually, redis::RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_passes_the_conformance_suite() {
    let server = RedisServer::start().await.expect("start redis-server");
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    // The version the control plane checks at start is read from the server.
    let version = store.server_version().await.expect("version");
    assert!(version.is_some_and(|v| v >= (6, 2)), "{version:?}");
    conformance::run(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("store.redb")).expect("open");
    conformance::run(Arc::new(store)).await;
}

/// Both backends sealing with a master key: upstream keys
/// are sealed on the way in and opened on the way out, and nothing else
/// changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_stores_pass_the_conformance_suite() {
    let keys = || {
        let key = MasterKey::parse(&"ab".repeat(32)).expect("master key");
        Keyring::new(Some(key), vec![])
    };
    let server = RedisServer::start().await.expect("start redis-server");
    let redis = RedisStore::connect(&server.url()).await.expect("connect");
    conformance::run(Arc::new(redis.with_sealing(Sealing::new(keys())))).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let embedded = EmbeddedStore::open(&dir.path().join("store.redb")).expect("open");
    conformance::run(Arc::new(embedded.with_sealing(Sealing::new(keys())))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_keeps_usage_as_long_as_its_retention_says() {
    let server = RedisServer::start().await.expect("start redis-server");
    let store =
        RedisStore::connect(&server.url()).await.expect("connect").with_retention(rollup::conformance::RETENTION);
    rollup::conformance::run_retention(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_keeps_usage_as_long_as_its_retention_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("store.redb"))
        .expect("open")
        .with_retention(rollup::conformance::RETENTION);
    rollup::conformance::run_retention(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_redis_replicas_see_each_others_writes() {
    let server = RedisServer::start().await.expect("start redis-server");
    let a = RedisStore::connect(&server.url()).await.expect("connect a");
    let b = RedisStore::connect(&server.url()).await.expect("connect b");
    conformance::run_shared(Arc::new(a), Arc::new(b)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_recovers_after_the_server_restarts() {
    let mut server = RedisServer::start().await.expect("start redis-server");
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    let mut rx = store.subscribe();
    for i in 0..3 {
        store.create(conformance::sample(Kind::Model, &format!("before-{i}"))).await.expect("create");
    }
    assert_eq!(*rx.borrow_and_update(), 3);

    server.restart().await.expect("restart redis-server");
    // The server lost its data: the follower reports the lower revision.
    let waited =
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|r| *r == 0)).await.is_ok_and(|seen| seen.is_ok());
    assert!(waited, "subscribe still at {} after the restart", *rx.borrow());

    // The connection manager reconnects; a call may fail while it does.
    let last_error = std::cell::RefCell::new(String::new());
    let revision = try_eventually(Duration::from_secs(10), || async {
        match store.create(conformance::sample(Kind::Model, "after")).await {
            Ok(revision) => Some(revision),
            Err(error) => {
                eprintln!("write after restart failed, retrying: {error:#}");
                *last_error.borrow_mut() = format!("{error:?}");
                None
            }
        }
    })
    .await
    .unwrap_or_else(|| panic!("store never recovered after the restart: {}", last_error.borrow()));
    assert_eq!(revision, 1, "the restarted server starts from an empty store");
    let waited =
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|r| *r == 1)).await.is_ok_and(|seen| seen.is_ok());
    assert!(waited, "subscribe still at {} after a write on the restarted server", *rx.borrow());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_changes_since_is_none_once_the_feed_no_longer_reaches_back() {
    let server = RedisServer::start().await.expect("start redis-server");
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    for i in 0..6 {
        store.create(conformance::sample(Kind::Model, &format!("trim-{i}"))).await.expect("create");
    }
    store.create(conformance::account("trim-acct", 100)).await.expect("create"); // 7
    store.create(conformance::token("trim-tok", "trim-acct")).await.expect("create"); // 8
    // Usage is not policy: no revision, no change entry.
    let record = conformance::usage("trim-req", "trim-tok", "trim-acct", "m", 1);
    store.apply_usage(&[record]).await.expect("usage");
    assert_eq!(store.revision().await.expect("revision"), 8);

    // Trim exactly as MAXLEN would.
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let removed: u64 =
        redis::cmd("XTRIM").arg("{gw}:changes").arg("MINID").arg("4-0").query_async(&mut conn).await.expect("xtrim");
    assert_eq!(removed, 3);
    assert_eq!(store.changes_since(2).await.expect("changes"), None, "revision 3 was trimmed");
    let since3 = store.changes_since(3).await.expect("changes").expect("revisions 4.. are all there");
    assert_eq!(since3.first().map(|c| c.revision), Some(4));
    assert_eq!(since3.len(), 5, "4, 5, 6, 7 and 8: {since3:?}");

    let _: u64 =
        redis::cmd("XTRIM").arg("{gw}:changes").arg("MINID").arg("8-0").query_async(&mut conn).await.expect("xtrim");
    assert_eq!(store.changes_since(6).await.expect("changes"), None, "revision 7 was trimmed");
    assert_eq!(store.changes_since(8).await.expect("changes"), Some(vec![]), "nothing after the current revision");
    assert_eq!(store.changes_since(9).await.expect("changes"), None, "a future revision");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_patch_is_applied_again_when_another_replica_wrote_the_resource_meanwhile() {
    let server = RedisServer::start().await.expect("start redis-server");
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    store.create(conformance::token("cas-tok", "cas-acct")).await.expect("create token");
    let runs = Arc::new(AtomicUsize::new(0));
    let (url, counted) = (server.url(), runs.clone());
    let patch: Patch = Box::new(move |resource| {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            from_another_replica(&url, |other| async move {
                let disable: Patch = Box::new(|resource| {
                    if let Resource::Token(token) = resource {
                        token.status = DISABLED.into();
                    }
                    Ok(())
                });
                other.modify(Kind::Token, "cas-tok", disable).await.expect("disable through the other replica");
            });
        }
        if let Resource::Token(token) = resource {
            token.name = "renamed".into();
        }
        Ok(())
    });
    let modified = store.modify(Kind::Token, "cas-tok", patch).await.expect("modify");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the patch ran once more, on the disabled token");
    let Some(Resource::Token(token)) = store.get(Kind::Token, "cas-tok").await.expect("get") else {
        panic!("token missing");
    };
    assert_eq!((token.status.as_str(), token.name.as_str()), (DISABLED, "renamed"), "both writes survive");
    assert_eq!(modified.resource, Resource::Token(token), "modify returns what it wrote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_patch_never_writes_back_counters_charged_while_it_ran() {
    let server = RedisServer::start().await.expect("start redis-server");
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    store.create(conformance::account("stale-acct", 1_000)).await.expect("create account");
    store.create(conformance::token("stale-tok", "stale-acct")).await.expect("create token");
    let runs = Arc::new(AtomicUsize::new(0));
    let (url, counted) = (server.url(), runs.clone());
    let patch: Patch = Box::new(move |resource| {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            from_another_replica(&url, |other| async move {
                let record = conformance::usage("stale-req", "stale-tok", "stale-acct", "m", 250);
                other.apply_usage(&[record]).await.expect("usage through the other replica");
            });
        }
        // What a patch saw is stale by now; what it sets is ignored anyway.
        if let Resource::Token(token) = resource {
            assert_eq!(token.used_micros, 0, "the patch read the token before the charge");
            token.name = "renamed".into();
            token.used_micros = 0;
        }
        Ok(())
    });
    store.modify(Kind::Token, "stale-tok", patch).await.expect("modify");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "a charge is not a conflicting write");
    let Some(Resource::Token(token)) = store.get(Kind::Token, "stale-tok").await.expect("get") else {
        panic!("token missing");
    };
    assert_eq!((token.name.as_str(), token.used_micros), ("renamed", 250), "the charge survives the patch");
}

/// Runs `write` against a second `RedisStore` on `url`, to completion, on a
/// thread and runtime of its own: for use inside a patch, which is
/// synchronous, to put another replica's write between its read and write.
fn from_another_replica<F, Fut>(url: &str, write: F)
where
    F: FnOnce(RedisStore) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let url = url.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let other = RedisStore::connect(&url).await.expect("connect the other replica");
            write(other).await;
        });
    })
    .join()
    .expect("the other replica's write panicked");
}

/// A store written before keys carried hash tags (`gw:<rest>`) is renamed
/// once when a replica connects, and nothing it held is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_store_written_before_hash_tags_is_renamed_when_a_replica_connects() {
    let server = RedisServer::start().await.expect("start redis-server");
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    store.create(conformance::account("old-acct", 1_000)).await.expect("create account");
    store.create(conformance::token("old-tok", "old-acct")).await.expect("create token");
    store.create(conformance::sample(Kind::Model, "old-model")).await.expect("create model");
    let record = conformance::usage("old-req", "old-tok", "old-acct", "m", 300);
    store.apply_usage(std::slice::from_ref(&record)).await.expect("usage");
    let before = store.snapshot().await.expect("snapshot");
    drop(store);

    // Give every key the name the old layout used, and forget the migration.
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let _: () = redis::cmd("DEL").arg("{gw}:layout").query_async(&mut conn).await.expect("del");
    let tagged: Vec<String> = redis::cmd("KEYS").arg("{gw*").query_async(&mut conn).await.expect("keys");
    assert!(!tagged.is_empty(), "the store wrote no tagged keys");
    for key in &tagged {
        let (_, rest) = key.split_once("}:").expect("a tagged key");
        let _: () =
            redis::cmd("RENAME").arg(key).arg(format!("gw:{rest}")).query_async(&mut conn).await.expect("rename");
    }

    let store = RedisStore::connect(&server.url()).await.expect("connect after the upgrade");
    let after = store.snapshot().await.expect("snapshot");
    assert_eq!(after, before, "the renamed store holds what the old one did");
    let used = store.list_usage(&Default::default()).await.expect("usage");
    assert_eq!(used, vec![record.clone()], "the usage record survived");
    let again = store.apply_usage(&[record]).await.expect("usage again");
    assert_eq!(again.duplicates, 1, "its idempotency marker survived too");
    let old: Vec<String> = redis::cmd("KEYS").arg("gw:*").query_async(&mut conn).await.expect("keys");
    assert!(old.is_empty(), "old keys left behind: {old:?}");

    // Once renamed, never again: an old key written now is left alone.
    let _: () = redis::cmd("SET").arg("gw:rev").arg("1").query_async(&mut conn).await.expect("set");
    let third = RedisStore::connect(&server.url()).await.expect("connect a third time");
    assert_eq!(third.revision().await.expect("revision"), before.revision);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_record_markers_of_earlier_versions_guard_only_the_records_made_before_the_upgrade() {
    let day = 24 * 60 * 60;
    let server = RedisServer::start().await.expect("start redis-server");
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    // What an earlier version left: a record's marker as a key of its own.
    let legacy = async |conn: &mut redis::aio::MultiplexedConnection, id: &str| {
        let key = format!("{{gw}}:applied:{id}");
        let () = redis::cmd("SET").arg(key).arg(1).arg("EX").arg(day).query_async(conn).await.expect("set");
    };
    legacy(&mut conn, "old-req").await;
    legacy(&mut conn, "late-req").await;
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    store.create(conformance::account("acct", 1_000)).await.expect("create account");
    store.create(conformance::token("tok", "acct")).await.expect("create token");
    let now = i64::try_from(std::time::UNIX_EPOCH.elapsed().expect("clock").as_secs()).expect("now");
    let mut old = conformance::usage("old-req", "tok", "acct", "m", 300);
    old.created_at = now;
    let outcome = store.apply_usage(&[old]).await.expect("usage");
    assert_eq!(
        (outcome.applied, outcome.duplicates),
        (0, 1),
        "a record marked by an earlier version was applied again"
    );
    // Dated past the upgrade (and its margin), a record was never marked
    // by an earlier version: a key of its name is not its marker.
    let mut late = conformance::usage("late-req", "tok", "acct", "m", 300);
    late.created_at = now + 2 * day;
    assert_eq!(store.apply_usage(&[late]).await.expect("usage").applied, 1);
    drop(store);

    // A store that never held such a key reads none, whenever made.
    let fresh = RedisServer::start().await.expect("start redis-server");
    let store = RedisStore::connect(&fresh.url()).await.expect("connect");
    store.create(conformance::account("acct", 1_000)).await.expect("create account");
    store.create(conformance::token("tok", "acct")).await.expect("create token");
    let client = redis::Client::open(fresh.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    legacy(&mut conn, "new-req").await;
    let outcome = store.apply_usage(&[conformance::usage("new-req", "tok", "acct", "m", 300)]).await.expect("usage");
    assert_eq!(outcome.applied, 1);
    let again = store.apply_usage(&[conformance::usage("new-req", "tok", "acct", "m", 300)]).await.expect("usage");
    assert_eq!((again.applied, again.duplicates), (0, 1), "its own marker still guards it");
}
