//! Conformance checks of `Store::modify`: a patch changes only what it
//! changes, concurrent patches of one resource all survive, and counters
//! moved by usage while a patch runs are never written back stale.

use std::sync::Arc;

use super::{account, replace, sample, token, token_used, usage};
use crate::domain::{DISABLED, Kind, Resource, Token};
use crate::store::{Patch, Store, StoreError};

/// Runs every check of `modify` against `store`.
pub async fn run(store: Arc<dyn Store>) {
    a_patch_that_changes_nothing_writes_nothing(&*store).await;
    a_refused_patch_writes_nothing(&*store).await;
    a_patch_may_not_change_the_id(&*store).await;
    concurrent_patches_of_one_resource_all_survive(store.clone()).await;
    counters_moved_while_patches_run_survive(store).await;
}

/// An identity patch returns the stored resource, no revision, and leaves
/// the revision and the change feed alone.
pub async fn a_patch_that_changes_nothing_writes_nothing(store: &dyn Store) {
    let created = sample(Kind::Channel, "modify-noop");
    store.create(created.clone()).await.expect("create");
    let before = store.revision().await.expect("revision");
    let modified = store.modify(Kind::Channel, "modify-noop", Box::new(|_| Ok(()))).await.expect("modify");
    assert_eq!(modified.revision, None, "an unchanged resource is not written");
    assert_eq!(modified.resource, created, "modify returns the resource as found");
    assert_eq!(store.revision().await.expect("revision"), before, "an unchanged resource bumped the revision");
    assert_eq!(store.changes_since(before).await.expect("changes"), Some(vec![]), "an unchanged resource is a change");
}

/// A patch's error comes back as it was, and nothing is written.
pub async fn a_refused_patch_writes_nothing(store: &dyn Store) {
    let created = sample(Kind::Group, "modify-refused");
    store.create(created.clone()).await.expect("create");
    let before = store.revision().await.expect("revision");
    let patch: Patch = Box::new(|resource| {
        if let Resource::Group(group) = resource {
            group.description = "half-done".into();
        }
        Err(StoreError::Rejected { reason: "no thanks".into() })
    });
    let err = store.modify(Kind::Group, "modify-refused", patch).await.expect_err("a refused patch must fail");
    assert!(matches!(&err, StoreError::Rejected { reason } if reason == "no thanks"), "refused patch gave {err:?}");
    assert_eq!(store.get(Kind::Group, "modify-refused").await.expect("get"), Some(created), "refused patch written");
    assert_eq!(store.revision().await.expect("revision"), before, "a refused patch bumped the revision");
}

/// A patch that renames the resource is refused; both ids stay as they were.
pub async fn a_patch_may_not_change_the_id(store: &dyn Store) {
    let created = sample(Kind::Model, "modify-id");
    store.create(created.clone()).await.expect("create");
    let patch: Patch = Box::new(|resource| {
        if let Resource::Model(model) = resource {
            model.id = "modify-id-other".into();
        }
        Ok(())
    });
    let err = store.modify(Kind::Model, "modify-id", patch).await.expect_err("changing the id must fail");
    assert!(matches!(err, StoreError::Rejected { .. }), "changing the id gave {err:?}");
    assert_eq!(store.get(Kind::Model, "modify-id").await.expect("get"), Some(created), "the resource changed");
    assert_eq!(store.get(Kind::Model, "modify-id-other").await.expect("get"), None, "a renamed copy was written");
}

/// 16 tasks each patch one token 4 times at once, each patch adding its own
/// entry to the token's model list; one more task disables it. Every entry
/// and the status survive: no patch ran on a value another one replaced.
pub async fn concurrent_patches_of_one_resource_all_survive(store: Arc<dyn Store>) {
    const TASKS: usize = 16;
    const PATCHES: usize = 4;
    store.create(account("modify-race-acct", 0)).await.expect("create account");
    store.create(token("modify-race-tok", "modify-race-acct")).await.expect("create token");

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for p in 0..PATCHES {
                let entry = format!("model-{t}-{p}");
                let patch: Patch = Box::new(move |resource| {
                    if let Resource::Token(token) = resource {
                        token.models.push(entry.clone());
                    }
                    Ok(())
                });
                store.modify(Kind::Token, "modify-race-tok", patch).await.expect("modify");
            }
        }));
    }
    let disable = {
        let store = store.clone();
        tokio::spawn(async move {
            let patch: Patch = Box::new(|resource| {
                if let Resource::Token(token) = resource {
                    token.status = DISABLED.into();
                }
                Ok(())
            });
            store.modify(Kind::Token, "modify-race-tok", patch).await.expect("disable")
        })
    };
    for task in tasks {
        task.await.expect("patch task panicked");
    }
    let disabled = disable.await.expect("disable task panicked");
    assert!(disabled.revision.is_some(), "disabling an enabled token is a change");

    let token = stored_token(&*store, "modify-race-tok").await;
    let mut models = token.models.clone();
    models.sort();
    let mut expected: Vec<String> =
        (0..TASKS).flat_map(|t| (0..PATCHES).map(move |p| format!("model-{t}-{p}"))).collect();
    expected.sort();
    assert_eq!(models, expected, "every concurrent patch survives, once");
    assert_eq!(token.status, DISABLED, "a concurrent patch undid the disable");
}

/// Usage and top-ups move an account's and a token's counters while other
/// tasks patch their names and try to reset the counters: the counters end
/// exactly where the usage and top-ups put them.
pub async fn counters_moved_while_patches_run_survive(store: Arc<dyn Store>) {
    const RECORDS: usize = 60;
    const PATCHES: usize = 30;
    store.create(account("modify-count-acct", 1_000_000)).await.expect("create account");
    store.create(token("modify-count-tok", "modify-count-acct")).await.expect("create token");

    let charging = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..RECORDS {
                let record = usage(&format!("modify-count-{i}"), "modify-count-tok", "modify-count-acct", "m", 10);
                store.apply_usage(&[record]).await.expect("apply usage");
                store.adjust_balance("modify-count-acct", 3).await.expect("top up");
            }
        })
    };
    let patching = [Kind::Account, Kind::Token].map(|kind| {
        let store = store.clone();
        tokio::spawn(async move {
            let id = if kind == Kind::Account { "modify-count-acct" } else { "modify-count-tok" };
            for i in 0..PATCHES {
                let patch: Patch = Box::new(move |resource| {
                    match resource {
                        Resource::Account(a) => {
                            a.name = format!("account {i}");
                            (a.balance_micros, a.used_micros) = (0, 0);
                        }
                        Resource::Token(t) => {
                            t.name = format!("token {i}");
                            t.used_micros = 0;
                        }
                        _ => {}
                    }
                    Ok(())
                });
                store.modify(kind, id, patch).await.expect("modify");
            }
        })
    });
    charging.await.expect("charging task panicked");
    for task in patching {
        task.await.expect("patch task panicked");
    }

    let spent = 10 * RECORDS as i64;
    let Some(Resource::Account(a)) = store.get(Kind::Account, "modify-count-acct").await.expect("get") else {
        panic!("account missing");
    };
    assert_eq!(
        (a.balance_micros, a.used_micros),
        (1_000_000 - spent + 3 * RECORDS as i64, spent),
        "a patch wrote back the account's counters"
    );
    assert_eq!(a.name, format!("account {}", PATCHES - 1), "the last patch's name stands");
    assert_eq!(token_used(&*store, "modify-count-tok").await, spent, "a patch wrote back the token's counter");
    // A whole-resource replacement keeps the counters too.
    let tok = stored_token(&*store, "modify-count-tok").await;
    replace(&*store, Resource::Token(Token { used_micros: -1, ..tok })).await.expect("replace");
    assert_eq!(token_used(&*store, "modify-count-tok").await, spent, "a replacement wrote the token's counter");
}

async fn stored_token(store: &dyn Store, id: &str) -> Token {
    match store.get(Kind::Token, id).await.expect("get token") {
        Some(Resource::Token(t)) => t,
        other => panic!("token {id:?} is {other:?}"),
    }
}
