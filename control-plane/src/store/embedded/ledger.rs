//! Usage records and spending leases in the embedded store. `holds` maps
//! `(budget, holder)` to `(amount, expires_at)`; every lease, release,
//! charge and usage batch is one redb write transaction, so checking what is
//! available and taking it are one step, and a record's rollups (see
//! `rollup`) are bumped in the transaction that applies it. None of them
//! bumps the revision.

use async_trait::async_trait;
use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::rollup::ROLLUPS;
use super::{APPLIED, APPLIED_EXPIRY, EmbeddedStore, META, USAGE, USAGE_SEQ};
use super::{charge, db_err, encode, meta_get, parse_resource, prune_applied, resources};
use crate::domain::{Kind, Resource, UsageRecord};
use crate::store::budget::{self, Budget, BudgetStore, Charged, Lease, LeaseAsk};
use crate::store::rollup::{Counts, Dims, Period, Retention};
use crate::store::{APPLIED_TTL_SECS, Result};

/// `(budget, holder)` → `(amount, expires_at)`.
const HOLDS: TableDefinition<(&str, &str), (i64, i64)> = TableDefinition::new("holds");

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
        Ok(Ledger {
            seen: txn.open_table(APPLIED).map_err(db_err)?,
            expiry: txn.open_table(APPLIED_EXPIRY).map_err(db_err)?,
            accounts: txn.open_table(resources(Kind::Account)).map_err(db_err)?,
            tokens: txn.open_table(resources(Kind::Token)).map_err(db_err)?,
            log: txn.open_table(USAGE).map_err(db_err)?,
            meta,
            holds: txn.open_table(HOLDS).map_err(db_err)?,
            rollups: txn.open_table(ROLLUPS).map_err(db_err)?,
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
        charge(&mut self.accounts, Kind::Account, &record.account_id, |r| {
            if let Resource::Account(a) = r {
                a.balance_micros = a.balance_micros.saturating_sub(cost);
                a.used_micros = a.used_micros.saturating_add(cost);
            }
        })?;
        charge(&mut self.tokens, Kind::Token, &record.token_id, |r| {
            if let Resource::Token(t) = r {
                t.used_micros = t.used_micros.saturating_add(cost);
            }
        })?;
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

    /// Where `budget` stands for `holder` at Unix second `now`; drops
    /// lapsed leases on the way.
    fn standing(&mut self, budget: &Budget, holder: &str, now: i64) -> Result<Standing> {
        let (table, kind) = match budget {
            Budget::Token(_) => (&self.tokens, Kind::Token),
            Budget::Account(_) => (&self.accounts, Kind::Account),
        };
        let resource = table.get(budget.id()).map_err(db_err)?.map(|j| parse_resource(kind, j.value())).transpose()?;
        let (remaining, unlimited, missing) = match resource {
            Some(Resource::Token(t)) => (t.quota_micros.saturating_sub(t.used_micros), t.unlimited, false),
            Some(Resource::Account(a)) => (a.balance_micros, a.unlimited, false),
            _ => (0, false, true),
        };
        let key = budget.to_string();
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
}
