//! What a batch of usage records adds up to, in the form the ledger's Lua
//! scripts take (`apply_batch` in `ledger`): per record only its JSON (as
//! an argument, or in a command of its own that pushes it beside the
//! script: bytes a script takes cost Redis about ten instructions each to
//! make into Lua strings) and its request id (a member of its hour's marker
//! set, looked up and added for a whole run of records with one SMISMEMBER
//! and one SADD; the hour's hash of earlier versions is read while it
//! exists, their keys of one record only for records made before they
//! stopped); every
//! counter, lease take, window bucket and rollup field summed here, once
//! for the whole batch. A batch is mostly one token's and one account's
//! records, so Redis writes a few fields for it instead of a dozen per
//! record, and the sums cost Rust arithmetic rather than Lua's.
//!
//! The sums are those record-by-record writes would leave: costs are never
//! negative in a batch that takes from a lease (a take stops at zero
//! either way), and counters only add.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::layout::{APPLIED_BUCKET_SECS, applied_bucket_key, applied_key, applied_set_key, hold_key};
use super::rollup::bucket_key;
use super::usage_json;
use crate::domain::UsageRecord;
use crate::store::budget::Budget;
use crate::store::rollup::{Counts, Dims, Period, Retention};

/// The keys and arguments of a script call, gathered in any order (a
/// batch names its keys as its arguments need them).
#[derive(Default)]
pub(super) struct ScriptArgs {
    pub(super) keys: Vec<Vec<u8>>,
    pub(super) args: Vec<Vec<u8>>,
}

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
    /// Marker hour start → the indexes of its set and of its hash.
    markers: HashMap<i64, (usize, usize)>,
}

/// The rollup dimensions of a record, borrowed: account, token, model,
/// channel, group.
type DimsRef<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);

// === impl ScriptArgs ===

impl ScriptArgs {
    pub(super) fn key(&mut self, key: impl redis::ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(super) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// The `EVALSHA` of `script` with these keys and arguments (the
    /// caller loads the script when Redis answers `NOSCRIPT`).
    pub(super) fn evalsha(&self, script: &redis::Script) -> redis::Cmd {
        // Sized at once: grown by doubling, a batch's command was copied
        // about as often as it was written.
        let bytes: usize = self.keys.iter().chain(&self.args).map(Vec::len).sum();
        let mut cmd = redis::Cmd::with_capacity(3 + self.keys.len() + self.args.len(), bytes + 64);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(self.keys.len()).arg(&self.keys[..]).arg(&self.args[..]);
        cmd
    }
}

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

    /// The indexes of the marker set and of the earlier versions' marker
    /// hash of the hour starting at `start`.
    fn marker(&mut self, start: i64) -> (usize, usize) {
        if let Some(&i) = self.markers.get(&start) {
            return i;
        }
        let i = (self.of(&applied_set_key(start)), self.of(&applied_bucket_key(start)));
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

/// Adds to `call` the legacy markers of those of `records` made before
/// `legacy_before` (see `layout::LEGACY_MARKERS_BEFORE`) as keys from index
/// `first_key` on, then the keys their markers and sums write; and as
/// arguments the batch: its size, how many rows follow and each record's
/// JSON (none here when `rows` is given: each goes there as an argument, in
/// the same order), the runs of records of one marker hour (its set's and
/// its hash's index, length, each record's request id), the positions of the records with a
/// legacy marker key, then the sums in the sections `apply_batch` reads.
pub(super) fn add(
    call: &mut ScriptArgs,
    first_key: usize,
    records: &[(&UsageRecord, &RecordWindows)],
    rows: Option<&mut redis::Cmd>,
    legacy_before: i64,
    retention: &Retention,
) {
    call.arg(records.len());
    let mut json = Vec::with_capacity(512);
    match rows {
        Some(rows) => {
            call.arg(0);
            for (record, _) in records {
                json.clear();
                usage_json::write(&mut json, record);
                rows.arg(&json[..]);
            }
        }
        None => {
            call.arg(records.len());
            for (record, _) in records {
                json.clear();
                usage_json::write(&mut json, record);
                call.arg(&json[..]);
            }
        }
    }
    let legacy: Vec<usize> = (1..=records.len()).filter(|&i| records[i - 1].0.created_at < legacy_before).collect();
    for &i in &legacy {
        call.key(applied_key(&records[i - 1].0.request_id));
    }

    let mut keys = Keys {
        first: first_key + legacy.len(),
        names: Vec::new(),
        index: HashMap::new(),
        holds: HashMap::new(),
        buckets: HashMap::new(),
        markers: HashMap::new(),
    };
    let runs: Vec<_> =
        records.chunk_by(|a, b| applied_bucket(a.0.created_at) == applied_bucket(b.0.created_at)).collect();
    call.arg(runs.len());
    let mut markers = BTreeSet::new();
    for run in runs {
        let start = applied_bucket(run[0].0.created_at);
        let (set, hash) = keys.marker(start);
        call.arg(set).arg(hash).arg(run.len());
        for (record, _) in run {
            call.arg(record.request_id.as_str());
        }
        markers.insert(start);
    }
    call.arg(legacy.len());
    for i in legacy {
        call.arg(i);
    }
    // (id, window key index or 0) → spend, for accounts and for tokens.
    let mut accounts: BTreeMap<(&str, usize), Spend> = BTreeMap::new();
    let mut tokens: BTreeMap<(&str, usize), Spend> = BTreeMap::new();
    // (hold key index, holder) → cost.
    let mut takes: BTreeMap<(usize, &str), i64> = BTreeMap::new();
    // (bucket key index, dimensions) → counters; bucket key index → expiry.
    let mut rollups: BTreeMap<(usize, DimsRef<'_>), ([i64; 7], &UsageRecord)> = BTreeMap::new();
    let mut expiries: BTreeMap<usize, i64> = BTreeMap::new();
    // Records next to each other mostly share every budget, holder and
    // rollup row: each such run is summed first and counted once.
    for run in records.chunk_by(same_rows) {
        let (record, windows) = run[0];
        let mut cost = 0i64;
        let mut counts = [0i64; 7];
        for (r, _) in run {
            cost = cost.saturating_add(r.cost_micros);
            for (sum, n) in counts.iter_mut().zip(Counts::of(r).to_array()) {
                *sum = sum.saturating_add(n);
            }
        }
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
}

/// Whether two records of a batch add to the same budgets, lease holder
/// and rollup rows (so they can be summed before they are counted).
fn same_rows(a: &(&UsageRecord, &RecordWindows), b: &(&UsageRecord, &RecordWindows)) -> bool {
    let ((a, a_windows), (b, b_windows)) = (a, b);
    a.token_id == b.token_id
        && a.account_id == b.account_id
        && a.node_id == b.node_id
        && a.model == b.model
        && a.channel_id == b.channel_id
        && a.group == b.group
        && a_windows == b_windows
        && Period::ALL.iter().all(|p| p.bucket(a.created_at) == p.bucket(b.created_at))
}

/// The start of the marker hash of a record made at `created_at`.
pub(super) fn applied_bucket(created_at: i64) -> i64 {
    created_at.div_euclid(APPLIED_BUCKET_SECS) * APPLIED_BUCKET_SECS
}
