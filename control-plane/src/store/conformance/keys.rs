//! Conformance checks of channel key pools: a pool round-trips whole,
//! concurrent additions all survive, and a refusal report disables only its
//! key, never one an operator already disabled.

use std::sync::Arc;

use super::sample;
use crate::domain::{AUTO_DISABLED, ChannelKey, DISABLED, ENABLED, Kind, LEGACY_KEY_ID, Resource};
use crate::store::{Patch, Store, switch_key_status};

/// Runs every key-pool check against `store`.
pub async fn run(store: Arc<dyn Store>) {
    a_pool_round_trips(&*store).await;
    concurrent_key_additions_all_survive(store.clone()).await;
    a_refusal_disables_only_its_key(&*store).await;
    a_refusal_of_a_single_key_folds_it_into_the_pool(&*store).await;
}

fn pooled(id: &str, keys: &[&str]) -> Resource {
    let Resource::Channel(mut channel) = sample(Kind::Channel, id) else { unreachable!("a channel sample") };
    channel.api_key.clear();
    channel.keys = keys.iter().map(|k| ChannelKey::new(format!("k_{k}"), format!("sk-{k}"), 7)).collect();
    Resource::Channel(channel)
}

async fn channel(store: &dyn Store, id: &str) -> crate::domain::Channel {
    match store.get(Kind::Channel, id).await.expect("get") {
        Some(Resource::Channel(channel)) => channel,
        other => panic!("channel {id} read back as {other:?}"),
    }
}

/// A channel with several keys reads back exactly as written.
pub async fn a_pool_round_trips(store: &dyn Store) {
    let created = pooled("keys-round-trip", &["a", "b", "c"]);
    store.create(created.clone()).await.expect("create");
    assert_eq!(store.get(Kind::Channel, "keys-round-trip").await.expect("get"), Some(created));
}

/// Keys added by concurrent patches of one channel are all kept.
pub async fn concurrent_key_additions_all_survive(store: Arc<dyn Store>) {
    store.create(pooled("keys-concurrent", &[])).await.expect("create");
    let adds = (0..8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let patch: Patch = Box::new(move |resource| {
                if let Resource::Channel(channel) = resource {
                    channel.keys.push(ChannelKey::new(format!("k_{i}"), format!("sk-{i}"), 1));
                }
                Ok(())
            });
            store.modify(Kind::Channel, "keys-concurrent", patch).await.expect("modify")
        })
    });
    for add in adds.collect::<Vec<_>>() {
        add.await.expect("join");
    }
    let mut ids: Vec<String> = channel(&*store, "keys-concurrent").await.keys.into_iter().map(|k| k.id).collect();
    ids.sort();
    assert_eq!(ids, (0..8).map(|i| format!("k_{i}")).collect::<Vec<_>>(), "a concurrent key addition was lost");
}

/// `switch_key_status` takes one enabled key out, leaves the others and an
/// operator's choice alone, and is false for a missing channel or key.
pub async fn a_refusal_disables_only_its_key(store: &dyn Store) {
    store.create(pooled("keys-refused", &["a", "b", "c"])).await.expect("create");
    let refuse = |key: &'static str| {
        switch_key_status(store, "keys-refused", key, (ENABLED, AUTO_DISABLED), "upstream answered 401".into(), 42)
    };
    assert!(refuse("k_b").await.expect("switch"), "an enabled key is disabled");
    assert!(!refuse("k_b").await.expect("switch"), "a disabled key is not written again");
    assert!(!refuse("k_zz").await.expect("switch"), "a missing key is no error");
    let missing = switch_key_status(store, "keys-nowhere", "k_a", (ENABLED, AUTO_DISABLED), String::new(), 1).await;
    assert!(!missing.expect("switch"), "a missing channel is no error");
    let keys = channel(store, "keys-refused").await.keys;
    let statuses: Vec<(&str, &str)> = keys.iter().map(|k| (k.id.as_str(), k.status.as_str())).collect();
    assert_eq!(statuses, [("k_a", ENABLED), ("k_b", AUTO_DISABLED), ("k_c", ENABLED)]);
    assert_eq!((keys[1].disabled_reason.as_str(), keys[1].disabled_at), ("upstream answered 401", 42));
    assert_eq!(keys[1].key, "sk-b", "disabling keeps the key");

    let patch: Patch = Box::new(|resource| {
        if let Resource::Channel(channel) = resource {
            channel.keys[0].status = DISABLED.into();
        }
        Ok(())
    });
    store.modify(Kind::Channel, "keys-refused", patch).await.expect("modify");
    assert!(!refuse("k_a").await.expect("switch"), "an operator's disable stands");
    assert_eq!(channel(store, "keys-refused").await.keys[0].status, DISABLED);
}

/// A channel stored with only `api_key` gets it into its pool as
/// `LEGACY_KEY_ID` when that key is refused.
pub async fn a_refusal_of_a_single_key_folds_it_into_the_pool(store: &dyn Store) {
    store.create(sample(Kind::Channel, "keys-legacy")).await.expect("create");
    let switched =
        switch_key_status(store, "keys-legacy", LEGACY_KEY_ID, (ENABLED, AUTO_DISABLED), "refused".into(), 9).await;
    assert!(switched.expect("switch"));
    let channel = channel(store, "keys-legacy").await;
    assert!(channel.api_key.is_empty(), "the single key moved into the pool");
    assert_eq!(channel.keys.len(), 1);
    assert_eq!((channel.keys[0].id.as_str(), channel.keys[0].key.as_str()), (LEGACY_KEY_ID, "sk-upstream"));
    assert_eq!(channel.keys[0].status, AUTO_DISABLED);
}
