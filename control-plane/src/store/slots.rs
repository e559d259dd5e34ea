//! The store's part of concurrency limits: in-flight slots of one key
//! (`token:<id>`, `group:<group>:<account>`) leased to data planes.
//!
//! A holder's slots lapse `ttl` seconds after its last ask, so the slots of a
//! data plane that died come back on their own. An ask gives back first,
//! then grants from what no live holder holds, so all holders together never
//! hold more than the limit the ask names.

use async_trait::async_trait;

use super::Result;

/// One data plane's ask for slots of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotAsk {
    pub key: String,
    /// The data plane's node id.
    pub holder: String,
    /// Slots all holders may hold together.
    pub limit: u32,
    /// Slots the holder gives back before asking.
    pub give_back: u32,
    /// Slots wanted now; 0 only gives back and renews.
    pub want: u32,
    /// Unix seconds now, and how long the holder's lease lives from now.
    pub now: i64,
    pub ttl_secs: i64,
}

/// What `SlotStore::lease_slots` granted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotLease {
    pub granted: u32,
    /// What the holder holds now, grant included.
    pub held: u32,
}

#[async_trait]
pub trait SlotStore: Send + Sync {
    /// Atomically with every other ask for `ask.key` (any replica): drops
    /// lapsed leases, takes `give_back` off the holder's slots (never below
    /// zero), grants `min(want, limit - slots held by every live holder)`
    /// and extends the holder's lease to `now + ttl_secs`.
    async fn lease_slots(&self, ask: &SlotAsk) -> Result<SlotLease>;
}

/// How many slots to grant: what is wanted, at most what is free.
pub fn grant_slots(limit: u32, held_by_all: u64, want: u32) -> u32 {
    let free = u64::from(limit).saturating_sub(held_by_all);
    u32::try_from(free.min(u64::from(want))).unwrap_or(0)
}

/// Checks every backend passes (run from `store::conformance::run`).
#[cfg(any(test, feature = "conformance"))]
pub mod conformance {
    use std::sync::Arc;

    use super::*;
    use crate::store::Store;

    const NOW: i64 = 1_800_000_000;

    pub async fn run(store: Arc<dyn Store>) {
        concurrent_asks_never_hold_more_than_the_limit(store.clone()).await;
        given_back_and_lapsed_slots_are_free_again(&*store).await;
    }

    fn ask(key: &str, holder: &str, limit: u32, give_back: u32, want: u32, now: i64) -> SlotAsk {
        SlotAsk { key: key.into(), holder: holder.into(), limit, give_back, want, now, ttl_secs: 30 }
    }

    /// 3 data planes × 10 asks of one slot against a limit of 4: exactly 4.
    pub async fn concurrent_asks_never_hold_more_than_the_limit(store: Arc<dyn Store>) {
        let tasks: Vec<_> = (0..30)
            .map(|i| {
                let (store, ask) = (store.clone(), ask("token:slots-race", &format!("dp-{}", i % 3), 4, 0, 1, NOW));
                tokio::spawn(async move { store.lease_slots(&ask).await.expect("lease slots") })
            })
            .collect();
        let mut granted = 0;
        for task in tasks {
            granted += task.await.expect("task").granted;
        }
        assert_eq!(granted, 4, "slots granted under a limit of 4");
        let mut held = 0;
        for dp in ["dp-0", "dp-1", "dp-2"] {
            held += store.lease_slots(&ask("token:slots-race", dp, 4, 0, 0, NOW)).await.expect("renew").held;
        }
        assert_eq!(held, 4, "a renewal neither grants nor drops slots");
    }

    pub async fn given_back_and_lapsed_slots_are_free_again(store: &dyn Store) {
        let key = "group:g:slots-back";
        let first = store.lease_slots(&ask(key, "dp-1", 2, 0, 3, NOW)).await.expect("lease");
        assert_eq!(first, SlotLease { granted: 2, held: 2 }, "never more than the limit");
        let refused = store.lease_slots(&ask(key, "dp-2", 2, 0, 1, NOW)).await.expect("lease");
        assert_eq!(refused, SlotLease { granted: 0, held: 0 });
        let back = store.lease_slots(&ask(key, "dp-1", 2, 1, 0, NOW)).await.expect("give back");
        assert_eq!(back, SlotLease { granted: 0, held: 1 });
        let taken = store.lease_slots(&ask(key, "dp-2", 2, 5, 1, NOW)).await.expect("lease");
        assert_eq!(taken, SlotLease { granted: 1, held: 1 }, "giving back more than held stops at zero");
        // dp-1's lease (1 slot) lapses 30 s after its last ask; dp-2 renews.
        store.lease_slots(&ask(key, "dp-2", 2, 0, 0, NOW + 20)).await.expect("renew");
        let later = store.lease_slots(&ask(key, "dp-3", 2, 0, 2, NOW + 31)).await.expect("lease");
        assert_eq!(later, SlotLease { granted: 1, held: 1 }, "the lapsed slot is free, the renewed one is not");
        let lower = store.lease_slots(&ask(key, "dp-4", 1, 0, 1, NOW + 31)).await.expect("lease");
        assert_eq!(lower.granted, 0, "a lowered limit grants nothing while more are held");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_stop_at_what_is_free() {
        assert_eq!(grant_slots(4, 1, 2), 2);
        assert_eq!(grant_slots(4, 3, 2), 1);
        assert_eq!(grant_slots(4, 6, 2), 0, "held past a lowered limit");
        assert_eq!(grant_slots(4, 0, 0), 0);
    }
}
