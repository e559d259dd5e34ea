//! The store's part of spending budgets: leases of a token's quota or an
//! account's balance held by data planes, and charges that must be covered.
//!
//! What is available of a budget is what is left (quota minus used, or the
//! balance) minus every live lease; a lease is granted only from that, so
//! the leases of all data planes together never exceed what is left. A
//! lease lapses `ttl` seconds after its last grant; applying a usage record
//! takes its cost out of the reporting data plane's lease. A window budget
//! (see `calendar`) lowers what is left to what is left of the current
//! window; leases are per budget, not per window, so those held when a
//! window ends are counted against the next one.

use std::fmt;

use async_trait::async_trait;

use super::Result;
use crate::domain::UsageRecord;

#[cfg(any(test, feature = "conformance"))]
pub mod window_conformance;

/// A budget the control plane leases out.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Budget {
    /// A token's quota (`quota - used`).
    Token(String),
    /// An account's balance.
    Account(String),
}

/// One data plane's ask for budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseAsk {
    pub budget: Budget,
    /// The data plane's node id.
    pub holder: String,
    /// Granted only when at least this much is available; 0 renews.
    pub need: i64,
    /// What the data plane would like to hold more of.
    pub want: i64,
    /// Unix seconds now, and how long the lease lives from now.
    pub now: i64,
    pub ttl_secs: i64,
}

/// What `BudgetStore::lease` granted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lease {
    pub granted: i64,
    /// What the holder holds now, grant included.
    pub held: i64,
    /// Quota left or the balance, before any lease; lowered to what is
    /// left of the current window when the budget has a window budget.
    pub remaining: i64,
    /// What is left after every lease, this grant included.
    pub available: i64,
    /// The token or account is unlimited and has no window budget:
    /// nothing is leased.
    pub unlimited: bool,
    /// No such token or account.
    pub missing: bool,
}

/// What `BudgetStore::charge` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charged {
    Applied,
    /// A record with this request id was applied before.
    Duplicate,
    /// The token's quota left, net of leases, does not cover the cost.
    TokenQuota,
    /// The account's balance, net of leases, does not cover the cost.
    Balance {
        balance_micros: i64,
    },
}

/// Spending budgets, on top of the usage ledger of `Store`.
#[async_trait]
pub trait BudgetStore {
    /// Grants `holder` part of what is available of the budget (see
    /// [`grant`]) and extends its lease to `now + ttl_secs`, atomically with
    /// every other lease and charge of that budget. Lapsed leases are
    /// dropped first.
    async fn lease(&self, ask: &LeaseAsk) -> Result<Lease>;

    /// Takes up to `amount` off `holder`'s lease (never below zero).
    async fn release(&self, budget: &Budget, holder: &str, amount: i64) -> Result<()>;

    /// Applies `record` (once per request id, like `apply_usage`) only when
    /// its cost is covered by what is available of its token's quota and its
    /// account's balance; otherwise changes nothing and says which fell short.
    async fn charge(&self, record: &UsageRecord, now: i64) -> Result<Charged>;

    /// What the usage ledger counted for `budget` in `buckets` (see
    /// `calendar`): the spend of one window.
    async fn window_spent(&self, budget: &Budget, buckets: &[String]) -> Result<i64>;
}

/// What is left of a budget once its window budget (if any) is counted:
/// `remaining` is the lifetime cap's (ignored when `unlimited`), the
/// answer is `(unlimited, remaining)` with the window's limit applied.
pub fn with_window(unlimited: bool, remaining: i64, window: Option<(i64, i64)>) -> (bool, i64) {
    match window {
        Some((quota, spent)) => {
            let left = quota.saturating_sub(spent);
            (false, if unlimited { left } else { remaining.min(left) })
        }
        None => (unlimited, remaining),
    }
}

/// How much of `available` to grant an ask of `need` and `want`: nothing
/// when `need` is not covered, else `want` but never more than a quarter of
/// what is available beyond `need`, so that as a budget runs low its leases
/// shrink to single requests and no data plane sits on what another needs.
/// The Redis scripts apply the same rule.
pub fn grant(available: i64, need: i64, want: i64) -> i64 {
    if need < 0 || available < need || available <= 0 {
        return 0;
    }
    want.max(need).min(need.max(available / 4)).min(available)
}

// === impl Budget ===

impl Budget {
    /// Parses `token:<id>` or `account:<id>`.
    pub fn parse(text: &str) -> Option<Budget> {
        let (kind, id) = text.split_once(':')?;
        if id.is_empty() {
            return None;
        }
        match kind {
            "token" => Some(Budget::Token(id.to_owned())),
            "account" => Some(Budget::Account(id.to_owned())),
            _ => None,
        }
    }

    pub fn id(&self) -> &str {
        match self {
            Budget::Token(id) | Budget::Account(id) => id,
        }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budget::Token(id) => write!(f, "token:{id}"),
            Budget::Account(id) => write!(f, "account:{id}"),
        }
    }
}

/// Checks every backend passes (run from `store::conformance::run`).
#[cfg(any(test, feature = "conformance"))]
pub mod conformance {
    use std::sync::Arc;

    use super::*;
    use crate::domain::Resource;
    use crate::store::Store;
    use crate::store::conformance::{account, account_counters, token, usage};

    const NOW: i64 = 1_800_000_000;

    pub async fn run(store: Arc<dyn Store>) {
        concurrent_leases_never_exceed_what_is_left(store.clone()).await;
        usage_takes_its_cost_out_of_its_data_planes_lease(&*store).await;
        a_batch_with_a_resent_record_takes_each_new_cost_once(&*store).await;
        released_and_lapsed_leases_are_available_again(&*store).await;
        charges_apply_only_when_covered_net_of_leases(&*store).await;
        concurrent_charges_never_overdraw(store.clone()).await;
        unlimited_and_missing_budgets_lease_nothing(&*store).await;
        super::window_conformance::run(store).await;
    }

    fn ask(budget: &Budget, holder: &str, need: i64, want: i64, now: i64) -> LeaseAsk {
        LeaseAsk { budget: budget.clone(), holder: holder.into(), need, want, now, ttl_secs: 60 }
    }

    async fn with_balance(store: &dyn Store, id: &str, balance: i64) -> Budget {
        store.create(account(id, balance)).await.expect("create account");
        Budget::Account(id.into())
    }

    /// 4 data planes × 20 asks of 30 against a balance of 1,000: exactly 33
    /// are granted, whatever the interleaving.
    pub async fn concurrent_leases_never_exceed_what_is_left(store: Arc<dyn Store>) {
        let budget = with_balance(&*store, "lease-race", 1_000).await;
        let tasks: Vec<_> = (0..80)
            .map(|i| {
                let (store, ask) = (store.clone(), ask(&budget, &format!("dp-{}", i % 4), 30, 30, NOW));
                tokio::spawn(async move { store.lease(&ask).await.expect("lease") })
            })
            .collect();
        let mut granted = Vec::new();
        for task in tasks {
            granted.push(task.await.expect("task").granted);
        }
        assert!(granted.iter().all(|g| *g == 0 || *g == 30), "grants are all or nothing: {granted:?}");
        assert_eq!(granted.iter().sum::<i64>(), 990, "leased of a balance of 1,000");
    }

    pub async fn usage_takes_its_cost_out_of_its_data_planes_lease(store: &dyn Store) {
        let budget = with_balance(store, "lease-use", 1_000).await;
        store.create(token("lease-use-tok", "lease-use")).await.expect("create token");
        let now = crate::domain::now_unix();
        let lease = store.lease(&ask(&budget, "dp-1", 500, 500, now)).await.expect("lease");
        assert_eq!((lease.granted, lease.held, lease.remaining, lease.available), (500, 500, 1_000, 500));
        store.apply_usage(&[usage("lease-use-1", "lease-use-tok", "lease-use", "m", 200)]).await.expect("usage");
        let lease = store.lease(&ask(&budget, "dp-1", 0, 0, now)).await.expect("renew");
        assert_eq!((lease.granted, lease.held, lease.remaining), (0, 300, 800), "the cost came out of dp-1's lease");
        let other = store.lease(&ask(&budget, "dp-2", 600, 600, now)).await.expect("lease");
        assert_eq!(other.granted, 0, "dp-1 still holds 300 of the 800 left");
        let other = store.lease(&ask(&budget, "dp-2", 500, 500, now)).await.expect("lease");
        assert_eq!(other.granted, 500);
        assert_eq!(account_counters(store, "lease-use").await, (800, 200));
    }

    /// A batch mixing a record applied before with new ones: only the new
    /// ones reach the counters, the lease, the rollups and the record list,
    /// each once.
    pub async fn a_batch_with_a_resent_record_takes_each_new_cost_once(store: &dyn Store) {
        let budget = with_balance(store, "lease-resend", 1_000).await;
        store.create(token("lease-resend-tok", "lease-resend")).await.expect("create token");
        let now = crate::domain::now_unix();
        store.lease(&ask(&budget, "dp-1", 500, 500, now)).await.expect("lease");
        let record = |id: &str, cost| crate::domain::UsageRecord {
            created_at: now,
            ..usage(id, "lease-resend-tok", "lease-resend", "m", cost)
        };
        let first = store.apply_usage(&[record("resend-1", 100), record("resend-2", 50)]).await.expect("usage");
        assert_eq!((first.applied, first.duplicates), (2, 0));
        let batch = [record("resend-3", 70), record("resend-1", 100), record("resend-4", 30), record("resend-3", 70)];
        let second = store.apply_usage(&batch).await.expect("usage");
        assert_eq!((second.applied, second.duplicates), (2, 2), "resend-1 and the second resend-3 were seen");
        let lease = store.lease(&ask(&budget, "dp-1", 0, 0, now)).await.expect("renew");
        assert_eq!((lease.held, lease.remaining), (500 - 250, 750), "each new cost came out of the lease once");
        assert_eq!(account_counters(store, "lease-resend").await, (750, 250));
        let filter = crate::domain::UsageFilter { token_id: "lease-resend-tok".into(), ..Default::default() };
        let logged = store.list_usage(&filter).await.expect("list usage");
        let ids: Vec<&str> = logged.iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(ids, ["resend-4", "resend-3", "resend-2", "resend-1"], "each record listed once, newest first");
        let hour = crate::store::rollup::Period::Hour;
        let start = hour.bucket(now);
        let rows = store.rollups(hour, start, start + hour.secs()).await.expect("rollups");
        let mine: Vec<_> = rows.iter().filter(|r| r.dims.token_id == "lease-resend-tok").collect();
        assert_eq!(mine.len(), 1, "one rollup row: {mine:?}");
        assert_eq!((mine[0].counts.requests, mine[0].counts.cost_micros), (4, 250), "rollups count each record once");
    }

    pub async fn released_and_lapsed_leases_are_available_again(store: &dyn Store) {
        let budget = with_balance(store, "lease-back", 100).await;
        assert_eq!(store.lease(&ask(&budget, "dp-1", 100, 100, NOW)).await.expect("lease").granted, 100);
        assert_eq!(store.lease(&ask(&budget, "dp-2", 10, 10, NOW)).await.expect("lease").granted, 0);
        store.release(&budget, "dp-1", 40).await.expect("release");
        assert_eq!(store.lease(&ask(&budget, "dp-2", 40, 40, NOW)).await.expect("lease").granted, 40);
        // dp-1's lease (60 left) lapses 60 s after its grant; dp-2's was renewed later.
        let later = store.lease(&ask(&budget, "dp-3", 60, 60, NOW + 61)).await.expect("lease");
        assert_eq!(later.granted, 60, "lapsed leases are dropped");
    }

    pub async fn charges_apply_only_when_covered_net_of_leases(store: &dyn Store) {
        let budget = with_balance(store, "charge-acct", 1_000).await;
        store.create(token("charge-tok", "charge-acct")).await.expect("create token");
        let now = crate::domain::now_unix();
        store.lease(&ask(&budget, "dp-1", 600, 600, now)).await.expect("lease");
        let charge = |id: &str, cost| usage(id, "charge-tok", "charge-acct", "m", cost);
        assert_eq!(
            store.charge(&charge("charge-1", 500), now).await.expect("charge"),
            Charged::Balance { balance_micros: 1_000 },
            "600 of 1,000 are leased"
        );
        assert_eq!(store.charge(&charge("charge-2", 400), now).await.expect("charge"), Charged::Applied);
        assert_eq!(store.charge(&charge("charge-2", 400), now).await.expect("charge"), Charged::Duplicate);
        assert_eq!(account_counters(store, "charge-acct").await, (600, 400));
        // The token's quota is 5,000,000: a charge past it is refused.
        store.release(&budget, "dp-1", 600).await.expect("release");
        store.adjust_balance("charge-acct", 10_000_000).await.expect("top up");
        assert_eq!(store.charge(&charge("charge-3", 5_000_000), now).await.expect("charge"), Charged::TokenQuota);
    }

    /// 8 charges of 400 at once against a balance of 1,000: exactly 2 land.
    pub async fn concurrent_charges_never_overdraw(store: Arc<dyn Store>) {
        with_balance(&*store, "charge-race", 1_000).await;
        store.create(token("charge-race-tok", "charge-race")).await.expect("create token");
        let now = crate::domain::now_unix();
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                let record = usage(&format!("charge-race-{i}"), "charge-race-tok", "charge-race", "m", 400);
                tokio::spawn(async move { store.charge(&record, now).await.expect("charge") })
            })
            .collect();
        let mut applied = 0;
        for task in tasks {
            if task.await.expect("task") == Charged::Applied {
                applied += 1;
            }
        }
        assert_eq!(applied, 2);
        assert_eq!(account_counters(&*store, "charge-race").await, (200, 800));
    }

    pub async fn unlimited_and_missing_budgets_lease_nothing(store: &dyn Store) {
        let mut free = account("lease-free", 0);
        if let Resource::Account(a) = &mut free {
            a.unlimited = true;
        }
        store.create(free).await.expect("create account");
        let lease = store.lease(&ask(&Budget::Account("lease-free".into()), "dp-1", 10, 10, NOW)).await.expect("lease");
        assert!(lease.unlimited && !lease.missing && lease.granted == 0, "{lease:?}");
        let lease = store.lease(&ask(&Budget::Token("lease-ghost".into()), "dp-1", 10, 10, NOW)).await.expect("lease");
        assert!(lease.missing && lease.granted == 0, "{lease:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_cover_the_need_and_shrink_as_the_budget_runs_low() {
        assert_eq!(grant(1_000, 10, 100), 100, "plenty left: what was wanted");
        assert_eq!(grant(200, 10, 100), 50, "a quarter of what is left");
        assert_eq!(grant(20, 10, 100), 10, "near the end: just the need");
        assert_eq!(grant(9, 10, 100), 0, "the need is not covered");
        assert_eq!(grant(0, 0, 100), 0, "nothing left");
        assert_eq!(grant(100, 0, 0), 0, "a renewal grants nothing");
        assert_eq!(grant(100, 30, 10), 30, "never less than the need");
    }

    #[test]
    fn budgets_print_and_parse_as_kind_and_id() {
        for budget in [Budget::Token("t1".into()), Budget::Account("a:b".into())] {
            assert_eq!(Budget::parse(&budget.to_string()), Some(budget));
        }
        assert_eq!(Budget::parse("group:x"), None);
        assert_eq!(Budget::parse("token:"), None);
    }
}
