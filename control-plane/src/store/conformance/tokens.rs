//! Conformance checks of token key hashes: one key opens at most one token,
//! on create, on modify and through `import_tokens`, whose rows are refused
//! one by one, writing nothing of a refused row.

use std::sync::Arc;

use super::{key_hash_of, token};
use crate::domain::{Kind, Resource, Token};
use crate::store::{Store, StoreError};

/// Runs every key-hash check against `store`.
pub async fn run(store: Arc<dyn Store>) {
    a_key_hash_opens_one_token(&*store).await;
    a_deleted_token_frees_its_key(&*store).await;
    an_import_writes_its_good_rows_at_one_revision(&*store).await;
    concurrent_imports_of_one_key_admit_one(store).await;
}

fn token_with_key(id: &str, hash: &str) -> Token {
    let Resource::Token(mut token) = token(id, "keys-account") else { unreachable!("token() makes a token") };
    hash.clone_into(&mut token.key_hash);
    token
}

/// Create and modify refuse a key hash another token has, naming it.
pub async fn a_key_hash_opens_one_token(store: &dyn Store) {
    let hash = key_hash_of("keys-shared");
    store.create(Resource::Token(token_with_key("keys-a", &hash))).await.expect("create first");
    let before = store.revision().await.expect("revision");
    match store.create(Resource::Token(token_with_key("keys-b", &hash))).await {
        Err(StoreError::TokenKeyTaken { owner }) => assert_eq!(owner, "keys-a"),
        other => panic!("a second token with the same key hash: {other:?}"),
    }
    assert!(store.get(Kind::Token, "keys-b").await.expect("get").is_none(), "the refused token was written");
    assert_eq!(store.revision().await.expect("revision"), before, "a refused create bumped the revision");

    let other = key_hash_of("keys-c");
    store.create(Resource::Token(token_with_key("keys-c", &other))).await.expect("create other");
    let moved = hash.clone();
    let taken = store
        .modify(
            Kind::Token,
            "keys-c",
            Box::new(move |resource| {
                if let Resource::Token(token) = resource {
                    moved.clone_into(&mut token.key_hash);
                }
                Ok(())
            }),
        )
        .await;
    assert!(matches!(taken, Err(StoreError::TokenKeyTaken { .. })), "modify took a held key: {taken:?}");
    // Editing other fields of a token keeps its own key.
    let renamed = store
        .modify(
            Kind::Token,
            "keys-a",
            Box::new(|resource| {
                if let Resource::Token(token) = resource {
                    token.name = "renamed".into();
                }
                Ok(())
            }),
        )
        .await
        .expect("rename keeps the key");
    assert!(renamed.revision.is_some());
}

/// Once a token is deleted its key hash may be used again.
pub async fn a_deleted_token_frees_its_key(store: &dyn Store) {
    let hash = key_hash_of("keys-freed");
    store.create(Resource::Token(token_with_key("keys-freed-1", &hash))).await.expect("create");
    store.delete(Kind::Token, "keys-freed-1").await.expect("delete");
    store.create(Resource::Token(token_with_key("keys-freed-2", &hash))).await.expect("key of a deleted token reused");
    let imported = store.import_tokens(vec![token_with_key("keys-freed-3", &hash)]).await.expect("import");
    assert!(matches!(imported.rows[..], [Some(StoreError::TokenKeyTaken { .. })]), "{:?}", imported.rows);
}

/// An import writes the rows that pass, at one revision with a feed entry
/// each, and refuses a taken id, a key a stored token has and a key an
/// earlier row has, writing nothing of them.
pub async fn an_import_writes_its_good_rows_at_one_revision(store: &dyn Store) {
    let held = key_hash_of("import-held");
    store.create(Resource::Token(token_with_key("import-held", &held))).await.expect("create held");
    let before = store.revision().await.expect("revision");
    let rows = vec![
        token_with_key("import-1", &key_hash_of("import-1")),
        token_with_key("import-held", &key_hash_of("import-held-again")),
        token_with_key("import-2", &held),
        token_with_key("import-3", &key_hash_of("import-1")),
        token_with_key("import-4", &key_hash_of("import-4")),
    ];
    let imported = store.import_tokens(rows).await.expect("import");
    assert_eq!(imported.revision, Some(before + 1), "one revision for the whole batch");
    match &imported.rows[..] {
        [
            None,
            Some(StoreError::AlreadyExists { .. }),
            Some(StoreError::TokenKeyTaken { owner }),
            Some(StoreError::TokenKeyRepeated),
            None,
        ] => assert_eq!(owner, "import-held"),
        rows => panic!("unexpected row outcomes: {rows:?}"),
    }
    for (id, present) in [("import-1", true), ("import-2", false), ("import-3", false), ("import-4", true)] {
        assert_eq!(store.get(Kind::Token, id).await.expect("get").is_some(), present, "token {id}");
    }
    let Some(Resource::Token(kept)) = store.get(Kind::Token, "import-held").await.expect("get") else {
        panic!("held token gone");
    };
    assert_eq!(kept.key_hash, held, "a refused row changed the token whose id it had");
    let changes = store.changes_since(before).await.expect("changes").expect("feed reaches back");
    let ids: Vec<(u64, &str)> = changes.iter().map(|c| (c.revision, c.id.as_str())).collect();
    assert_eq!(ids, [(before + 1, "import-1"), (before + 1, "import-4")], "one feed entry per written token");
    let snapshot = store.snapshot().await.expect("snapshot");
    assert_eq!(snapshot.revision, before + 1);

    let nothing = store.import_tokens(vec![token_with_key("import-1", &key_hash_of("x"))]).await.expect("import");
    assert_eq!(nothing.revision, None, "a batch that writes nothing uses no revision");
    assert_eq!(store.revision().await.expect("revision"), before + 1);
}

/// Two imports racing with one key: exactly one token gets it.
pub async fn concurrent_imports_of_one_key_admit_one(store: Arc<dyn Store>) {
    let hash = key_hash_of("import-race");
    let runs = (0..8).map(|n| {
        let (store, hash) = (store.clone(), hash.clone());
        tokio::spawn(async move { store.import_tokens(vec![token_with_key(&format!("import-race-{n}"), &hash)]).await })
    });
    let mut written = 0;
    for run in runs {
        let imported = run.await.expect("join").expect("import");
        written += imported.rows.iter().filter(|row| row.is_none()).count();
    }
    assert_eq!(written, 1, "one key hash was given to {written} tokens");
}
