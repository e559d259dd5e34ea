//! What a batch of usage records adds up to, in the form the ledger's Lua
//! scripts take (`apply_batch` in `ledger`): per record only its
//! idempotency marker (a field of its hour's marker hash; the key earlier
//! versions wrote is only read) and its JSON; every counter, lease take, window
//! bucket and rollup field summed here, once for the whole batch. A batch
//! is mostly one token's and one account's records, so Redis writes a few
//! fields for it instead of a dozen per record, and the sums cost Rust
//! arithmetic rather than Lua's.
//!
//! The sums are those record-by-record writes would leave: costs are never
//! negative in a batch that takes from a lease (a take stops at zero
//! either way), and counters only add.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::layout::{APPLIED_BUCKET_SECS, applied_bucket_key, applied_key, hold_key};
use super::rollup::bucket_key;
use crate::domain::UsageRecord;
use crate::store::budget::Budget;
use crate::store::rollup::{Counts, Dims, Period, Retention};
use crate::store::{Result, StoreError};

/// A record's window buckets: the token's and the account's key and
/// expiry, when they have a window budget.
pub(super) type RecordWindows = [Option<(String, i64)>; 2];

/// A budget's share of a batch: what it adds to the budget's counters and,
/// when it has one, to a window bucket expiring at `window_expires`.
#[derive(Default)]
struct Spend {
    cost: i64,
    window_expires: i64,
}

/// Extra keys the sums write, each once, numbered as the script sees them.
/// The lease hashes and rollup buckets of a batch are few and repeat on
/// nearly every record, so each is named (formatted) once, on first sight
/// of its budget or bucket start.
struct Keys<'a> {
    first: usize,
    names: Vec<String>,
    index: HashMap<String, usize>,
    /// (is the token's, budget id) → its lease hash's index.
    holds: HashMap<(bool, &'a str), usize>,
    /// (period, bucket start) → the rollup bucket's index.
    buckets: HashMap<(u8, i64), usize>,
    /// Marker hash start → its index.
    markers: HashMap<i64, usize>,
}

/// The rollup dimensions of a record, borrowed: account, token, model,
/// channel, group.
type DimsRef<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);

// === impl Keys ===

impl<'a> Keys<'a> {
    /// The index in `KEYS` of `name`, adding it when new.
    fn of(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.first + self.names.len();
        self.index.insert(name.to_owned(), i);
        self.names.push(name.to_owned());
        i
    }

    /// The index of the lease hash of the token (`token`) or account `id`.
    fn hold(&mut self, token: bool, id: &'a str) -> usize {
        if let Some(&i) = self.holds.get(&(token, id)) {
            return i;
        }
        let budget = if token { Budget::Token(id.to_owned()) } else { Budget::Account(id.to_owned()) };
        let i = self.of(&hold_key(&budget));
        self.holds.insert((token, id), i);
        i
    }

    /// The index of the marker hash starting at `start`.
    fn marker(&mut self, start: i64) -> usize {
        if let Some(&i) = self.markers.get(&start) {
            return i;
        }
        let i = self.of(&applied_bucket_key(start));
        self.markers.insert(start, i);
        i
    }

    /// The index of `period`'s rollup bucket starting at `start`.
    fn bucket(&mut self, period: Period, start: i64) -> usize {
        if let Some(&i) = self.buckets.get(&(period.code(), start)) {
            return i;
        }
        let i = self.of(&bucket_key(period, start));
        self.buckets.insert((period.code(), start), i);
        i
    }
}

/// Adds to `call` the legacy markers of `records` as keys from index
/// `first_key` on, then the keys their markers and sums write; and as
/// arguments the batch: its size, each record's JSON, each record's marker
/// (hash index, request id), then the sums in the sections `apply_batch`
/// reads.
pub(super) fn add(
    call: &mut redis::ScriptInvocation<'_>,
    first_key: usize,
    records: &[(&UsageRecord, &RecordWindows)],
    retention: &Retention,
) -> Result<()> {
    call.arg(records.len());
    for (record, _) in records {
        call.key(applied_key(&record.request_id));
        // Room for a whole record up front (they run to about 350 bytes).
        let mut json = Vec::with_capacity(512);
        serde_json::to_writer(&mut json, record).map_err(StoreError::Corrupt)?;
        call.arg(json);
    }

    let mut keys = Keys {
        first: first_key + records.len(),
        names: Vec::new(),
        index: HashMap::new(),
        holds: HashMap::new(),
        buckets: HashMap::new(),
        markers: HashMap::new(),
    };
    let mut markers = BTreeSet::new();
    for (record, _) in records {
        let start = applied_bucket(record.created_at);
        call.arg(keys.marker(start)).arg(record.request_id.as_str());
        markers.insert(start);
    }
    // (id, window key index or 0) → spend, for accounts and for tokens.
    let mut accounts: BTreeMap<(&str, usize), Spend> = BTreeMap::new();
    let mut tokens: BTreeMap<(&str, usize), Spend> = BTreeMap::new();
    // (hold key index, holder) → cost.
    let mut takes: BTreeMap<(usize, &str), i64> = BTreeMap::new();
    // (bucket key index, dimensions) → counters; bucket key index → expiry.
    let mut rollups: BTreeMap<(usize, DimsRef<'_>), ([i64; 7], &UsageRecord)> = BTreeMap::new();
    let mut expiries: BTreeMap<usize, i64> = BTreeMap::new();
    for &(record, windows) in records {
        let cost = record.cost_micros;
        let budgets = [
            (&mut tokens, &windows[0], true, record.token_id.as_str()),
            (&mut accounts, &windows[1], false, record.account_id.as_str()),
        ];
        for (spends, window, token, id) in budgets {
            let window = window.as_ref().map(|(key, expires)| (keys.of(key), *expires));
            let spend = spends.entry((id, window.map_or(0, |(i, _)| i))).or_default();
            spend.cost = spend.cost.saturating_add(cost);
            spend.window_expires = window.map_or(0, |(_, expires)| expires);
            let take = takes.entry((keys.hold(token, id), record.node_id.as_str())).or_default();
            *take = take.saturating_add(cost);
        }
        let dims = (
            record.account_id.as_str(),
            record.token_id.as_str(),
            record.model.as_str(),
            record.channel_id.as_str(),
            record.group.as_str(),
        );
        let counts = Counts::of(record).to_array();
        for period in Period::ALL {
            let start = period.bucket(record.created_at);
            let key = keys.bucket(period, start);
            expiries.insert(key, retention.rollup_expires_at(period, start));
            let (sums, _) = rollups.entry((key, dims)).or_insert(([0; 7], record));
            for (sum, n) in sums.iter_mut().zip(counts) {
                *sum = sum.saturating_add(n);
            }
        }
    }

    for spends in [&accounts, &tokens] {
        call.arg(spends.len());
        for ((id, window), spend) in spends {
            call.arg(*id).arg(spend.cost).arg(spend.cost.saturating_neg()).arg(*window).arg(spend.window_expires);
        }
    }
    call.arg(takes.len());
    for ((key, holder), cost) in &takes {
        call.arg(*key).arg(*holder).arg(*cost);
    }
    call.arg(markers.len());
    for start in markers {
        call.arg(start);
    }
    // Each bucket hash: its key, expiry, then its fields and what they add.
    let mut fields: BTreeMap<usize, Vec<(String, i64)>> = BTreeMap::new();
    for ((key, _), (sums, first)) in &rollups {
        let prefix = Dims::of(first).encode();
        let bucket = fields.entry(*key).or_default();
        for (name, n) in Counts::NAMES.iter().zip(sums) {
            if *n != 0 {
                bucket.push((format!("{prefix}#{name}"), *n));
            }
        }
    }
    call.arg(expiries.len());
    for (key, expires) in &expiries {
        let bucket = fields.remove(key).unwrap_or_default();
        call.arg(*key).arg(*expires).arg(bucket.len());
        for (field, n) in bucket {
            call.arg(field).arg(n);
        }
    }
    for name in keys.names {
        call.key(name);
    }
    Ok(())
}

/// The start of the marker hash of a record made at `created_at`.
pub(super) fn applied_bucket(created_at: i64) -> i64 {
    created_at.div_euclid(APPLIED_BUCKET_SECS) * APPLIED_BUCKET_SECS
}
