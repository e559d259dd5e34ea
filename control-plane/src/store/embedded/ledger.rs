//! Usage records and spending leases in the embedded store. `holds` maps
//! `(budget, holder)` to `(amount, expires_at)`; every lease, release,
//! charge and usage batch is one redb write transaction, so checking what is
//! available and taking it are one step, and a record's rollups (see
//! `rollup`) are bumped in the transaction that applies it, and so are the
//! window budget counters of its token and account (`windows`, see
//! `calendar`). None of them bumps the revision.

use async_trait::async_trait;
use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::rollup::ROLLUPS;
use super::{APPLIED, APPLIED_EXPIRY, EmbeddedStore, META, USAGE, USAGE_SEQ};
use super::{charge, db_err, encode, meta_get, parse_resource, prune_applied, resources};
use crate::domain::{Account, Kind, Resource, Token, UsageRecord, WindowBudget};
use crate::store::budget::{self, Budget, BudgetStore, Charged, Lease, LeaseAsk};
use crate::store::rollup::{Counts, Dims, Period, Retention};
use crate::store::{APPLIED_TTL_SECS, Result};

/// `(budget, holder)` → `(amount, expires_at)`.
const HOLDS: TableDefinition<(&str, &str), (i64, i64)> = TableDefinition::new("holds");
/// `(budget, bucket)` → `(spent, forget_at)`: window budget counters.
pub(super) const WINDOWS: TableDefinition<(&str, &str), (i64, i64)> = TableDefinition::new("windows");
/// `(forget_at, budget, bucket)` of every window counter, oldest first.
pub(super) const WINDOWS_EXPIRY: TableDefinition<(i64, &str, &str), ()> = TableDefinition::new("windows_expiry");
/// Window counters forgotten per transaction at most.
const WINDOWS_PRUNE_BATCH: usize = 100;

type Table<'t, K, V> = redb::Table<'t, K, V>;

/// The tables a usage record changes, open in one write transaction.
pub(super) struct Ledger<'t> {
    seen: Table<'t, &'static str, u64>,
    expiry: Table<'t, (u64, &'static str), ()>,
    accounts: Table<'t, &'static str, &'static [u8]>,
    tokens: Table<'t, &'static str, &'static [u8]>,
    log: Table<'t, u64, &'static [u8]>,
    meta: Table<'t, &'static str, u64>,
    holds: Table<'t, (&'static str, &'static str), (i64, i64)>,
    rollups: Table<'t, (u8, i64, &'static str), [i64; 7]>,
    windows: Table<'t, (&'static str, &'static str), (i64, i64)>,
    windows_expiry: Table<'t, (i64, &'static str, &'static str), ()>,
    seq: u64,
    now: u64,
    /// Records the log keeps at most; 0 for no cap.
    cap: u64,
}

/// What is left of a budget and what its leases hold.
struct Standing {
    remaining: i64,
    unlimited: bool,
    missing: bool,
    /// Live leases of everyone but the asking holder.
    others: i64,
    own: i64,
}

// === impl Ledger ===

impl<'t> Ledger<'t> {
    /// Opens the ledger's tables in `txn` and forgets expired request ids.
    pub(super) fn open(txn: &'t WriteTransaction, now: u64, retention: &Retention) -> Result<Ledger<'t>> {
        prune_applied(txn, now)?;
        let meta = txn.open_table(META).map_err(db_err)?;
        let seq = meta_get(&meta, USAGE_SEQ)?;
        let mut windows = txn.open_table(WINDOWS).map_err(db_err)?;
        let mut windows_expiry = txn.open_table(WINDOWS_EXPIRY).map_err(db_err)?;
        prune_windows(&mut windows, &mut windows_expiry, i64::try_from(now).unwrap_or(i64::MAX))?;
        Ok(Ledger {
            seen: txn.open_table(APPLIED).map_err(db_err)?,
            expiry: txn.open_table(APPLIED_EXPIRY).map_err(db_err)?,
            accounts: txn.open_table(resources(Kind::Account)).map_err(db_err)?,
            tokens: txn.open_table(resources(Kind::Token)).map_err(db_err)?,
            log: txn.open_table(USAGE).map_err(db_err)?,
            meta,
            holds: txn.open_table(HOLDS).map_err(db_err)?,
            rollups: txn.open_table(ROLLUPS).map_err(db_err)?,
            windows,
            windows_expiry,
            seq,
            now,
            cap: retention.usage_max_records,
        })
    }

    /// Whether a record with this request id was applied and is remembered.
    fn seen(&self, request_id: &str) -> Result<bool> {
        let forget_at = self.seen.get(request_id).map_err(db_err)?.map(|v| v.value());
        Ok(forget_at.is_some_and(|at| at > self.now))
    }

    /// Applies `record` once: `false` for a duplicate.
    pub(super) fn apply(&mut self, record: &UsageRecord) -> Result<bool> {
        let rid = record.request_id.as_str();
        if self.seen(rid)? {
            return Ok(false);
        }
        let forget_at = self.now + APPLIED_TTL_SECS;
        self.seen.insert(rid, forget_at).map_err(db_err)?;
        self.expiry.insert((forget_at, rid), ()).map_err(db_err)?;
        let cost = record.cost_micros;
        let account = charge(&mut self.accounts, Kind::Account, &record.account_id, |r| {
            if let Resource::Account(a) = r {
                a.balance_micros = a.balance_micros.saturating_sub(cost);
                a.used_micros = a.used_micros.saturating_add(cost);
            }
        })?;
        let token = charge(&mut self.tokens, Kind::Token, &record.token_id, |r| {
            if let Resource::Token(t) = r {
                t.used_micros = t.used_micros.saturating_add(cost);
            }
        })?;
        if let Some(Resource::Account(Account { window: Some(window), .. })) = &account {
            self.count_in_window(&Budget::Account(record.account_id.clone()), window, record.created_at, cost)?;
        }
        if let Some(Resource::Token(Token { window: Some(window), .. })) = &token {
            self.count_in_window(&Budget::Token(record.token_id.clone()), window, record.created_at, cost)?;
        }
        for budget in [Budget::Token(record.token_id.clone()), Budget::Account(record.account_id.clone())] {
            self.take_from_hold(&budget, &record.node_id, cost)?;
        }
        self.seq += 1;
        self.log.insert(self.seq, encode(record)?.as_slice()).map_err(db_err)?;
        let (dims, counts) = (Dims::of(record).encode(), Counts::of(record));
        for period in Period::ALL {
            let key = (period.code(), period.bucket(record.created_at), dims.as_str());
            let mut sum =
                Counts::from_array(self.rollups.get(key).map_err(db_err)?.map(|v| v.value()).unwrap_or_default());
            sum.add(&counts);
            self.rollups.insert(key, sum.to_array()).map_err(db_err)?;
        }
        Ok(true)
    }

    /// Writes the sequence number and trims the log to the count cap.
    pub(super) fn close(mut self) -> Result<()> {
        self.meta.insert(USAGE_SEQ, self.seq).map_err(db_err)?;
        // Sequence numbers are dense, so the log holds first..=seq.
        loop {
            let first = self.log.first().map_err(db_err)?.map(|(k, _)| k.value());
            match first {
                Some(first) if self.cap > 0 && self.seq - first >= self.cap => {
                    self.log.remove(first).map_err(db_err)?;
                }
                _ => return Ok(()),
            }
        }
    }

    /// Takes `amount` off `holder`'s lease of `budget`, down to zero.
    fn take_from_hold(&mut self, budget: &Budget, holder: &str, amount: i64) -> Result<()> {
        let key = budget.to_string();
        let held = self.holds.get((key.as_str(), holder)).map_err(db_err)?.map(|v| v.value());
        if let Some((held, expires_at)) = held {
            let left = held.saturating_sub(amount.max(0)).max(0);
            self.holds.insert((key.as_str(), holder), (left, expires_at)).map_err(db_err)?;
        }
        Ok(())
    }

    /// Adds `cost` to the counter of the window of `budget` that holds
    /// `created_at`. A record whose instant has no window (out of range)
    /// is not counted.
    fn count_in_window(&mut self, budget: &Budget, window: &WindowBudget, created_at: i64, cost: i64) -> Result<()> {
        let Ok((bucket, forget_at)) = window.bucket_of(created_at) else {
            tracing::warn!(%budget, created_at, "usage record outside any budget window; not counted in one");
            return Ok(());
        };
        let key = budget.to_string();
        let old = self.windows.get((key.as_str(), bucket.as_str())).map_err(db_err)?.map(|v| v.value());
        let (spent, old_forget) = old.unwrap_or((0, forget_at));
        if old.is_some() && old_forget != forget_at {
            self.windows_expiry.remove((old_forget, key.as_str(), bucket.as_str())).map_err(db_err)?;
        }
        let forget_at = forget_at.max(old_forget);
        self.windows
            .insert((key.as_str(), bucket.as_str()), (spent.saturating_add(cost), forget_at))
            .map_err(db_err)?;
        self.windows_expiry.insert((forget_at, key.as_str(), bucket.as_str()), ()).map_err(db_err)?;
        Ok(())
    }

    /// Where `budget` stands for `holder` at Unix second `now`; drops
    /// lapsed leases on the way.
    fn standing(&mut self, budget: &Budget, holder: &str, now: i64) -> Result<Standing> {
        let (table, kind) = match budget {
            Budget::Token(_) => (&self.tokens, Kind::Token),
            Budget::Account(_) => (&self.accounts, Kind::Account),
        };
        let resource = table.get(budget.id()).map_err(db_err)?.map(|j| parse_resource(kind, j.value())).transpose()?;
        let (remaining, unlimited, missing, window) = match resource {
            Some(Resource::Token(t)) => (t.quota_micros.saturating_sub(t.used_micros), t.unlimited, false, t.window),
            Some(Resource::Account(a)) => (a.balance_micros, a.unlimited, false, a.window),
            _ => (0, false, true, None),
        };
        let key = budget.to_string();
        let window = match window.filter(WindowBudget::is_set).map(|w| (w.window_at(now), w.quota_micros)) {
            Some((Ok(current), quota)) => Some((quota, spent_in(&self.windows, &key, &current.buckets)?)),
            // No window holds `now`: nothing may be spent.
            Some((Err(_), _)) => Some((0, 0)),
            None => None,
        };
        let (unlimited, remaining) = budget::with_window(unlimited, remaining, window);
        let (mut others, mut own, mut lapsed) = (0i64, 0i64, Vec::new());
        for entry in self.holds.range((key.as_str(), "")..).map_err(db_err)? {
            let (k, v) = entry.map_err(db_err)?;
            let (b, h) = k.value();
            if b != key {
                break;
            }
            let (amount, expires_at) = v.value();
            if expires_at <= now {
                lapsed.push(h.to_owned());
            } else if h == holder {
                own = amount;
            } else {
                others = others.saturating_add(amount);
            }
        }
        for h in lapsed {
            self.holds.remove((key.as_str(), h.as_str())).map_err(db_err)?;
        }
        Ok(Standing { remaining, unlimited, missing, others, own })
    }
}

/// The sum of the counters of `buckets` of budget `key`.
fn spent_in(
    windows: &impl ReadableTable<(&'static str, &'static str), (i64, i64)>,
    key: &str,
    buckets: &[String],
) -> Result<i64> {
    let mut spent = 0i64;
    for bucket in buckets {
        if let Some(v) = windows.get((key, bucket.as_str())).map_err(db_err)? {
            spent = spent.saturating_add(v.value().0);
        }
    }
    Ok(spent)
}

/// Forgets up to `WINDOWS_PRUNE_BATCH` window counters past their keeping time.
fn prune_windows(
    windows: &mut Table<'_, (&'static str, &'static str), (i64, i64)>,
    expiry: &mut Table<'_, (i64, &'static str, &'static str), ()>,
    now: i64,
) -> Result<()> {
    for _ in 0..WINDOWS_PRUNE_BATCH {
        let Some((at, key, bucket)) = expiry.first().map_err(db_err)?.map(|(k, _)| {
            let (at, key, bucket) = k.value();
            (at, key.to_owned(), bucket.to_owned())
        }) else {
            break;
        };
        if at > now {
            break;
        }
        expiry.remove((at, key.as_str(), bucket.as_str())).map_err(db_err)?;
        windows.remove((key.as_str(), bucket.as_str())).map_err(db_err)?;
    }
    Ok(())
}

#[async_trait]
impl BudgetStore for EmbeddedStore {
    async fn lease(&self, ask: &LeaseAsk) -> Result<Lease> {
        let ask = ask.clone();
        let now = u64::try_from(ask.now).unwrap_or(0);
        let retention = self.retention;
        let (lease, _) = self
            .write(move |txn| {
                let mut ledger = Ledger::open(txn, now, &retention)?;
                let standing = ledger.standing(&ask.budget, &ask.holder, ask.now)?;
                let mut lease = Lease {
                    remaining: standing.remaining,
                    unlimited: standing.unlimited,
                    missing: standing.missing,
                    ..Lease::default()
                };
                if !standing.unlimited && !standing.missing {
                    let available = standing.remaining.saturating_sub(standing.others).saturating_sub(standing.own);
                    lease.granted = budget::grant(available, ask.need, ask.want);
                    lease.held = standing.own.saturating_add(lease.granted);
                    lease.available = available.saturating_sub(lease.granted);
                    let key = ask.budget.to_string();
                    let expires_at = ask.now.saturating_add(ask.ttl_secs);
                    ledger
                        .holds
                        .insert((key.as_str(), ask.holder.as_str()), (lease.held, expires_at))
                        .map_err(db_err)?;
                }
                ledger.close()?;
                Ok((lease, vec![]))
            })
            .await?;
        Ok(lease)
    }

    async fn release(&self, budget: &Budget, holder: &str, amount: i64) -> Result<()> {
        let (budget, holder) = (budget.clone(), holder.to_owned());
        self.write(move |txn| {
            let mut holds = txn.open_table(HOLDS).map_err(db_err)?;
            let key = budget.to_string();
            let held = holds.get((key.as_str(), holder.as_str())).map_err(db_err)?.map(|v| v.value());
            if let Some((held, expires_at)) = held {
                let left = held.saturating_sub(amount.max(0)).max(0);
                holds.insert((key.as_str(), holder.as_str()), (left, expires_at)).map_err(db_err)?;
            }
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn charge(&self, record: &UsageRecord, now: i64) -> Result<Charged> {
        let record = record.clone();
        let retention = self.retention;
        let (charged, _) = self
            .write(move |txn| {
                let mut ledger = Ledger::open(txn, u64::try_from(now).unwrap_or(0), &retention)?;
                if ledger.seen(&record.request_id)? {
                    return Ok((Charged::Duplicate, vec![]));
                }
                let cost = record.cost_micros;
                let token = ledger.standing(&Budget::Token(record.token_id.clone()), "", now)?;
                if !token.unlimited && token.remaining.saturating_sub(token.others) < cost {
                    return Ok((Charged::TokenQuota, vec![]));
                }
                let account = ledger.standing(&Budget::Account(record.account_id.clone()), "", now)?;
                if !account.unlimited && account.remaining.saturating_sub(account.others) < cost {
                    return Ok((Charged::Balance { balance_micros: account.remaining }, vec![]));
                }
                ledger.apply(&record)?;
                ledger.close()?;
                Ok((Charged::Applied, vec![]))
            })
            .await?;
        Ok(charged)
    }

    async fn window_spent(&self, budget: &Budget, buckets: &[String]) -> Result<i64> {
        let (key, buckets) = (budget.to_string(), buckets.to_vec());
        self.read(move |txn| {
            let windows = txn.open_table(WINDOWS).map_err(db_err)?;
            spent_in(&windows, &key, &buckets)
        })
        .await
    }
}
