//! Counter sums the data plane keeps itself and hands to OpenTelemetry only
//! when metrics are collected (as observable counters). Adding to a sum
//! locks one of a few shards, picked by the calling thread, and finds its
//! attribute set by a fast hash of a few bytes; the SDK's own counters hash
//! and compare every attribute of every measurement instead. A sum only
//! grows, so what is observed is the cumulative total a counter reports.

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use opentelemetry::{KeyValue, metrics::AsyncInstrument};

/// Shards per sum: enough that the runtime's worker threads rarely meet.
const SHARDS: usize = 8;

/// One attribute value of a measurement.
#[derive(Debug, Clone, Copy)]
pub enum Attr<'a> {
    Str(&'a str),
    Int(i64),
}

/// The running totals of one counter, by attribute set. `names` are the
/// attribute keys, in the order every `add` gives their values.
pub struct Sums {
    names: &'static [&'static str],
    shards: [Mutex<Totals>; SHARDS],
}

/// Sums by encoded attribute set (see `encode`).
type Totals = HashMap<Box<[u8]>, u64, foldhash::fast::RandomState>;

thread_local! {
    /// The shard this thread adds to.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
    /// Where a measurement's attributes are encoded to be looked up.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

// === impl Sums ===

impl Sums {
    /// Empty sums of a counter whose attributes are called `names`.
    pub fn new(names: &'static [&'static str]) -> Sums {
        Sums { names, shards: std::array::from_fn(|_| Mutex::default()) }
    }

    /// Adds `n` to the sum of the attribute set `values` (one per name).
    pub fn add(&self, values: &[Attr<'_>], n: u64) {
        debug_assert_eq!(values.len(), self.names.len(), "one value per attribute name");
        SCRATCH.with_borrow_mut(|key| {
            key.clear();
            encode(values, key);
            let mut shard = lock(&self.shards[shard()]);
            match shard.get_mut(key.as_slice()) {
                Some(sum) => *sum = sum.saturating_add(n),
                None => {
                    shard.insert(key.as_slice().into(), n);
                }
            }
        });
    }

    /// Reports every attribute set's total to `observer`.
    pub fn observe(&self, observer: &dyn AsyncInstrument<u64>) {
        for (attrs, total) in self.totals() {
            observer.observe(total, &attrs);
        }
    }

    /// Every attribute set's total, over all shards.
    fn totals(&self) -> Vec<(Vec<KeyValue>, u64)> {
        let mut totals = Totals::default();
        for shard in &self.shards {
            for (key, sum) in lock(shard).iter() {
                let total = totals.entry(key.clone()).or_default();
                *total = total.saturating_add(*sum);
            }
        }
        totals.into_iter().map(|(key, total)| (decode(self.names, &key), total)).collect()
    }
}

/// A poisoned shard still holds good sums: a panic cannot leave one half-added.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The calling thread's shard, handed out round-robin on first use.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|shard| {
        shard.get().unwrap_or_else(|| {
            let picked = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            shard.set(Some(picked));
            picked
        })
    })
}

/// Each value as a tag byte, then a string's length and bytes or an
/// integer's eight bytes: unambiguous whatever the strings hold.
pub(super) fn encode(values: &[Attr<'_>], out: &mut Vec<u8>) {
    for value in values {
        match value {
            Attr::Str(s) => {
                out.push(0);
                // Attribute values are names from the catalogue, far below 4 GiB.
                out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Attr::Int(i) => {
                out.push(1);
                out.extend_from_slice(&i.to_le_bytes());
            }
        }
    }
}

/// The attributes `encode` wrote into `key`, named by `names`.
fn decode(names: &'static [&'static str], mut key: &[u8]) -> Vec<KeyValue> {
    let mut attrs = Vec::with_capacity(names.len());
    for name in names {
        let Some((&tag, rest)) = key.split_first() else { break };
        match tag {
            0 => {
                let Some((len, rest)) = rest.split_first_chunk::<4>() else { break };
                let len = u32::from_le_bytes(*len) as usize;
                let (text, rest) = rest.split_at(len.min(rest.len()));
                attrs.push(KeyValue::new(*name, String::from_utf8_lossy(text).into_owned()));
                key = rest;
            }
            _ => {
                let Some((int, rest)) = rest.split_first_chunk::<8>() else { break };
                attrs.push(KeyValue::new(*name, i64::from_le_bytes(*int)));
                key = rest;
            }
        }
    }
    attrs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_sets_round_trip_and_never_run_together() {
        let values = [Attr::Str("a\0b"), Attr::Int(-429), Attr::Str("")];
        let mut key = Vec::new();
        encode(&values, &mut key);
        let attrs = decode(&["x", "y", "z"], &key);
        assert_eq!(
            attrs,
            vec![
                KeyValue::new("x", "a\0b".to_owned()),
                KeyValue::new("y", -429_i64),
                KeyValue::new("z", String::new())
            ]
        );

        // ("ab", "c") and ("a", "bc") are different sets.
        let (mut one, mut two) = (Vec::new(), Vec::new());
        encode(&[Attr::Str("ab"), Attr::Str("c")], &mut one);
        encode(&[Attr::Str("a"), Attr::Str("bc")], &mut two);
        assert_ne!(one, two);
    }

    #[test]
    fn sums_add_up_across_threads_per_attribute_set() {
        let sums = std::sync::Arc::new(Sums::new(&["route", "status"]));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let sums = sums.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        sums.add(&[Attr::Str("/v1/chat"), Attr::Int(200)], 1);
                        sums.add(&[Attr::Str("/v1/chat"), Attr::Int(429)], 2);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("adding thread");
        }
        let mut seen = sums.totals();
        seen.sort_by_key(|(_, total)| *total);
        assert_eq!(
            seen,
            vec![
                (vec![KeyValue::new("route", "/v1/chat".to_owned()), KeyValue::new("status", 200_i64)], 4000),
                (vec![KeyValue::new("route", "/v1/chat".to_owned()), KeyValue::new("status", 429_i64)], 8000),
            ]
        );
    }
}
