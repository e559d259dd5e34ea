//! Spend this data plane recorded that the control plane's snapshot may not
//! reflect yet, per account and token, so a caller's next request sees its
//! own spend before the snapshot does. An entry is forgotten once a
//! snapshot at or past the revision that applied it is in use.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Mutex, PoisonError},
};

/// Spend recorded here but maybe not yet in the snapshot, per request id.
#[derive(Default)]
pub struct Overlay {
    inner: Mutex<OverlayInner>,
}

#[derive(Default)]
struct OverlayInner {
    entries: HashMap<String, Pending>,
    by_account: HashMap<String, i64>,
    by_token: HashMap<String, i64>,
    /// Revision that reflects a batch → the request ids in it.
    settled: BTreeMap<u64, Vec<String>>,
}

struct Pending {
    account: String,
    token: String,
    cost: i64,
}

// === impl Overlay ===

impl Overlay {
    fn lock(&self) -> std::sync::MutexGuard<'_, OverlayInner> {
        // The maps stay consistent at every await-free step, so a panic
        // elsewhere cannot leave them half-updated.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `cost` spent by `request_id` on `account` and `token`.
    pub fn add(&self, request_id: &str, account: &str, token: &str, cost: i64) {
        if cost == 0 {
            return;
        }
        let mut inner = self.lock();
        if inner.entries.contains_key(request_id) {
            return;
        }
        *inner.by_account.entry(account.to_owned()).or_default() += cost;
        *inner.by_token.entry(token.to_owned()).or_default() += cost;
        let pending = Pending { account: account.to_owned(), token: token.to_owned(), cost };
        inner.entries.insert(request_id.to_owned(), pending);
    }

    /// Spend not yet reflected in the snapshot: (account's, token's).
    pub fn pending(&self, account: &str, token: &str) -> (i64, i64) {
        let inner = self.lock();
        if inner.entries.is_empty() {
            return (0, 0);
        }
        (inner.by_account.get(account).copied().unwrap_or(0), inner.by_token.get(token).copied().unwrap_or(0))
    }

    /// The control plane applied `request_ids`; a snapshot at `revision` or
    /// later reflects them. `current` is the snapshot revision in use.
    pub fn settle<'a>(&self, request_ids: impl IntoIterator<Item = &'a str>, revision: u64, current: u64) {
        let ids: Vec<String> = request_ids.into_iter().map(str::to_owned).collect();
        let mut inner = self.lock();
        inner.settled.entry(revision).or_default().extend(ids);
        inner.prune(current);
    }

    /// Forgets settled spend that the snapshot at `current` already reflects.
    pub fn prune(&self, current: u64) {
        self.lock().prune(current);
    }

    /// Number of requests whose spend is still overlaid.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

impl OverlayInner {
    fn prune(&mut self, current: u64) {
        let later = self.settled.split_off(&current.saturating_add(1));
        let reflected = std::mem::replace(&mut self.settled, later);
        for id in reflected.into_values().flatten() {
            let Some(p) = self.entries.remove(&id) else {
                continue;
            };
            subtract(&mut self.by_account, &p.account, p.cost);
            subtract(&mut self.by_token, &p.token, p.cost);
        }
    }
}

fn subtract(sums: &mut HashMap<String, i64>, key: &str, cost: i64) {
    if let Some(sum) = sums.get_mut(key) {
        *sum -= cost;
        if *sum == 0 {
            sums.remove(key);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn overlay_keeps_spend_until_the_snapshot_reflects_it() {
        let overlay = Overlay::default();
        overlay.add("r1", "a", "t", 10);
        overlay.add("r2", "a", "t2", 5);
        overlay.add("r1", "a", "t", 10); // same request twice counts once
        assert_eq!(overlay.pending("a", "t"), (15, 10));
        overlay.settle(["r1"], 7, 6);
        assert_eq!(overlay.pending("a", "t"), (15, 10), "revision 6 does not reflect r1 yet");
        overlay.prune(7);
        assert_eq!(overlay.pending("a", "t"), (5, 0));
        overlay.settle(["r2"], 8, 9);
        assert_eq!(overlay.pending("a", "t2"), (0, 0));
        assert_eq!(overlay.len(), 0);
    }
}
