//! The credential and audit behaviour every backend must show; part of the
//! store conformance suite. Ids and actors are the checks' own, so they can
//! share a store with the other checks.

use std::sync::Arc;

use crate::domain::access::{AuditEntry, AuditFilter, Credential, Role};
use crate::store::{Store, StoreError};

/// Runs every check against `store`.
pub async fn run(store: Arc<dyn Store>) {
    credentials_round_trip_and_keys_are_unique(&*store).await;
    rekey_moves_the_key_and_delete_forgets_it(&*store).await;
    concurrent_imports_of_one_key_admit_one(store.clone()).await;
    audit_lists_newest_first_filtered_and_paged(&*store).await;
}

/// A credential `id` of `role` whose key hash is `hash`.
pub fn credential(id: &str, role: Role, hash: &str) -> Credential {
    Credential {
        id: id.into(),
        name: format!("{id} name"),
        role,
        account_id: if role == Role::Account { "acc-conf".into() } else { String::new() },
        key_hash: hash.into(),
        key_prefix: "gwcred-…abcd".into(),
        created_at: 1_700_000_000,
        last_used_at: 0,
        rotated_at: 0,
    }
}

async fn credentials_round_trip_and_keys_are_unique(store: &dyn Store) {
    let a = credential("cred-conf-a", Role::Account, "hash-conf-a");
    let b = credential("cred-conf-b", Role::OperatorReadonly, "hash-conf-b");
    store.create_credential(&b).await.expect("create b");
    store.create_credential(&a).await.expect("create a");
    assert_eq!(store.get_credential(&a.id).await.expect("get"), Some(a.clone()), "get after create");
    assert_eq!(store.credential_by_key("hash-conf-b").await.expect("by key"), Some(b.clone()), "by key");
    assert_eq!(store.credential_by_key("hash-conf-none").await.expect("by key"), None, "unknown key");
    let listed: Vec<Credential> =
        store.list_credentials().await.expect("list").into_iter().filter(|c| c.id.starts_with("cred-conf-")).collect();
    assert_eq!(listed, vec![a.clone(), b.clone()], "list holds both, ordered by id");

    let same_id = credential("cred-conf-a", Role::Admin, "hash-conf-other");
    let error = store.create_credential(&same_id).await.expect_err("taken id");
    assert!(matches!(&error, StoreError::CredentialExists { id } if id == "cred-conf-a"), "{error:?}");
    let same_key = credential("cred-conf-c", Role::Admin, "hash-conf-a");
    let error = store.create_credential(&same_key).await.expect_err("taken key");
    assert!(matches!(error, StoreError::KeyTaken), "{error:?}");
    assert_eq!(store.get_credential("cred-conf-c").await.expect("get"), None, "a refused create writes nothing");

    store.touch_credential(&a.id, 1_700_000_100).await.expect("touch");
    store.touch_credential(&a.id, 1_700_000_050).await.expect("touch older");
    let touched = store.get_credential(&a.id).await.expect("get").expect("exists");
    assert_eq!(touched.last_used_at, 1_700_000_100, "last use only moves forward");
    store.touch_credential("cred-conf-missing", 1).await.expect("touching a missing credential is no error");
    assert_eq!(store.get_credential("cred-conf-missing").await.expect("get"), None, "touch creates nothing");
}

async fn rekey_moves_the_key_and_delete_forgets_it(store: &dyn Store) {
    let c = credential("cred-conf-rekey", Role::Admin, "hash-conf-rekey-1");
    store.create_credential(&c).await.expect("create");
    store.create_credential(&credential("cred-conf-rekey-x", Role::Admin, "hash-conf-rekey-x")).await.expect("x");
    let rekeyed = store.rekey_credential(&c.id, "hash-conf-rekey-2", "gwcred-…new0", 1_700_000_200).await;
    let rekeyed = rekeyed.expect("rekey");
    assert_eq!((rekeyed.key_hash.as_str(), rekeyed.rotated_at), ("hash-conf-rekey-2", 1_700_000_200));
    assert_eq!(rekeyed.key_prefix, "gwcred-…new0");
    assert_eq!(store.credential_by_key("hash-conf-rekey-1").await.expect("old"), None, "the old key is gone");
    assert_eq!(store.credential_by_key("hash-conf-rekey-2").await.expect("new"), Some(rekeyed.clone()));
    let error = store.rekey_credential(&c.id, "hash-conf-rekey-x", "p", 1).await.expect_err("taken key");
    assert!(matches!(error, StoreError::KeyTaken), "{error:?}");
    let error = store.rekey_credential("cred-conf-nobody", "hash-conf-n", "p", 1).await.expect_err("missing");
    assert!(matches!(error, StoreError::NoCredential { .. }), "{error:?}");

    store.delete_credential(&c.id).await.expect("delete");
    assert_eq!(store.get_credential(&c.id).await.expect("get"), None, "deleted");
    assert_eq!(store.credential_by_key("hash-conf-rekey-2").await.expect("by key"), None, "its key is forgotten");
    let error = store.delete_credential(&c.id).await.expect_err("deleted twice");
    assert!(matches!(error, StoreError::NoCredential { .. }), "{error:?}");
    // The key is free again once its credential is gone.
    store.create_credential(&credential("cred-conf-reuse", Role::Admin, "hash-conf-rekey-2")).await.expect("reuse");
}

async fn concurrent_imports_of_one_key_admit_one(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .create_credential(&credential(&format!("cred-conf-race-{i}"), Role::Admin, "hash-conf-race"))
                    .await
            })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(()) => created += 1,
            Err(StoreError::KeyTaken) => {}
            Err(error) => panic!("concurrent import failed: {error:?}"),
        }
    }
    assert_eq!(created, 1, "exactly one of the concurrent imports of one key is stored");
}

fn entry(actor: &str, kind: &str, at: i64, target: &str) -> AuditEntry {
    AuditEntry {
        seq: 999,
        at,
        actor_id: actor.into(),
        actor_role: Role::Admin,
        method: "UpdateToken".into(),
        kind: kind.into(),
        target: target.into(),
        outcome: "ok".into(),
    }
}

async fn audit_lists_newest_first_filtered_and_paged(store: &dyn Store) {
    let actor = "cred-conf-auditor";
    let mut seqs = Vec::new();
    for i in 0..7 {
        let kind = if i % 2 == 0 { "token" } else { "account" };
        seqs.push(store.append_audit(&entry(actor, kind, 1_700_000_000 + i, &format!("t{i}"))).await.expect("append"));
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "sequence numbers increase: {seqs:?}");

    let mine = AuditFilter { actor_id: actor.into(), ..Default::default() };
    let all = store.list_audit(&mine).await.expect("list");
    let targets: Vec<&str> = all.items.iter().map(|e| e.target.as_str()).collect();
    assert_eq!(targets, ["t6", "t5", "t4", "t3", "t2", "t1", "t0"], "newest first");
    assert_eq!(all.items[0].seq, seqs[6], "entries carry the number the append gave");
    assert_eq!(all.items[0], AuditEntry { seq: seqs[6], ..entry(actor, "token", 1_700_000_006, "t6") });

    let tokens = store.list_audit(&AuditFilter { kind: "token".into(), ..mine.clone() }).await.expect("list");
    assert_eq!(tokens.items.len(), 4, "kind filter");
    let window = AuditFilter { from: 1_700_000_002, to: 1_700_000_004, ..mine.clone() };
    let window = store.list_audit(&window).await.expect("list");
    let targets: Vec<&str> = window.items.iter().map(|e| e.target.as_str()).collect();
    assert_eq!(targets, ["t3", "t2"], "from is inclusive, to exclusive");

    // Pages of 3 cover every entry once, in order.
    let mut paged = Vec::new();
    let mut filter = AuditFilter { limit: 3, ..mine.clone() };
    for _ in 0..10 {
        let page = store.list_audit(&filter).await.expect("page");
        assert!(page.items.len() <= 3, "a page holds at most its limit");
        paged.extend(page.items.into_iter().map(|e| e.target));
        if page.next.is_empty() {
            break;
        }
        filter.cursor = page.next;
    }
    assert_eq!(paged, ["t6", "t5", "t4", "t3", "t2", "t1", "t0"], "paging neither repeats nor skips");

    // A cursor past the newest entry starts at the newest.
    let ahead = AuditFilter { cursor: (seqs[6] + 1_000).to_string(), ..mine.clone() };
    assert_eq!(store.list_audit(&ahead).await.expect("list").items.len(), 7, "a cursor ahead of the log");
    let error = store.list_audit(&AuditFilter { cursor: "nonsense".into(), ..mine }).await.expect_err("bad cursor");
    assert!(matches!(error, StoreError::BadCursor { .. }), "{error:?}");
}
