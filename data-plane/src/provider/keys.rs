//! Key health as this data plane sees it, for channels with a pool of
//! upstream keys. Attempts spread over a channel's enabled keys round-robin.
//! A key the upstream refuses (401, 403) is held out here at once for
//! `REFUSAL_HOLD` while the control plane, told by `Health::key_refused`,
//! takes it out of every data plane's snapshot; a key that gets a 429 cools
//! down alone for the upstream's `Retry-After` (else a backoff doubling from
//! 1 s to 60 s), and is used again only when no other key is left. A
//! channel is out of keys only when none is usable.

use std::{
    collections::HashMap,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::policy::domain::{Channel, UpstreamKey};

/// How long a refused key stays out of rotation on this data plane without
/// word from the control plane (a lost report is made again after it).
const REFUSAL_HOLD: Duration = Duration::from_secs(60);
/// First cool-down after a 429 without `Retry-After`; doubles per 429 in a row.
const COOL_DOWN_BASE: Duration = Duration::from_secs(1);
/// Longest cool-down, `Retry-After` included.
const COOL_DOWN_CAP: Duration = Duration::from_secs(60);
/// Entries past which expired ones are swept on the next write.
const SWEEP_ABOVE: usize = 4096;

/// Refusals and cool-downs per (channel id, key id).
#[derive(Default)]
pub struct KeyHealth {
    keys: Mutex<HashMap<(String, String), KeyState>>,
    /// Round-robin position, shared by all channels.
    next: AtomicUsize,
}

#[derive(Default)]
struct KeyState {
    refused_until: Option<Instant>,
    /// 429s in a row.
    throttled: u32,
    cool_until: Option<Instant>,
}

// === impl KeyState ===

impl KeyState {
    /// Whether the key is refused or cooling down at `now`.
    fn blocked(&self, now: Instant) -> bool {
        self.refused_until.is_some_and(|t| t > now) || self.cool_until.is_some_and(|t| t > now)
    }
}

// === impl KeyHealth ===

impl KeyHealth {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), KeyState>> {
        // Every update is a few field writes: a panic cannot leave one half done.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key of `channel` for the next attempt: `prefer` when it is
    /// usable and not cooling down, else the next usable key round-robin
    /// that is not in `skip`, not cooling ones first. `None` when no key
    /// is usable (or the channel has no pool).
    pub fn pick<'c>(&self, channel: &'c Channel, skip: &[String], prefer: Option<&str>) -> Option<&'c UpstreamKey> {
        let (from, preferred) = self.choices(channel, skip, prefer);
        if preferred.is_some() {
            return preferred;
        }
        if from.is_empty() {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        Some(from[turn % from.len()])
    }

    /// The keys `pick` chooses among, and `prefer` when it wins outright.
    fn choices<'c>(
        &self,
        channel: &'c Channel,
        skip: &[String],
        prefer: Option<&str>,
    ) -> (Vec<&'c UpstreamKey>, Option<&'c UpstreamKey>) {
        let now = Instant::now();
        let keys = self.lock();
        let state = |k: &UpstreamKey| state_of(&keys, &channel.id, &k.id);
        let refused = |k: &UpstreamKey| state(k).and_then(|s| s.refused_until).is_some_and(|t| t > now);
        let cooling = |k: &UpstreamKey| state(k).and_then(|s| s.cool_until).is_some_and(|t| t > now);
        let usable: Vec<&UpstreamKey> = channel.keys.iter().filter(|k| k.enabled && !refused(k)).collect();
        if let Some(key) = prefer.and_then(|id| usable.iter().find(|k| k.id == id)).filter(|k| !cooling(k)) {
            return (Vec::new(), Some(*key));
        }
        let untried: Vec<&UpstreamKey> = usable.into_iter().filter(|k| !skip.contains(&k.id)).collect();
        let fresh: Vec<&UpstreamKey> = untried.iter().copied().filter(|k| !cooling(k)).collect();
        (if fresh.is_empty() { untried } else { fresh }, None)
    }

    /// Whether `channel` can be tried at all: it has no pool, or a key that
    /// is enabled and not refused here.
    pub fn usable(&self, channel: &Channel) -> bool {
        channel.keys.is_empty() || !self.choices(channel, &[], None).0.is_empty()
    }

    /// Whether key `key_id` of `channel` is enabled, not refused and not
    /// cooling down.
    pub fn healthy(&self, channel: &Channel, key_id: &str) -> bool {
        let now = Instant::now();
        let enabled = channel.keys.iter().any(|k| k.id == key_id && k.enabled);
        let keys = self.lock();
        enabled && !state_of(&keys, &channel.id, key_id).is_some_and(|s| s.blocked(now))
    }

    /// Whether every usable key of a pooled `channel` is cooling down.
    pub fn all_cooling(&self, channel: &Channel) -> bool {
        if !channel.is_pooled() {
            return false;
        }
        let now = Instant::now();
        let keys = self.lock();
        channel
            .keys
            .iter()
            .filter(|k| k.enabled)
            .all(|k| state_of(&keys, &channel.id, &k.id).is_some_and(|s| s.blocked(now)))
    }

    /// The upstream refused key `key_id` of `channel`: it is held out.
    pub fn refused(&self, channel: &str, key_id: &str) {
        let mut keys = self.lock();
        sweep(&mut keys);
        keys.entry((channel.to_owned(), key_id.to_owned())).or_default().refused_until =
            Some(Instant::now() + REFUSAL_HOLD);
    }

    /// The upstream answered 429 for key `key_id` of `channel`: it cools
    /// down for `retry_after` (capped), else a backoff doubling per 429 in
    /// a row.
    pub fn throttled(&self, channel: &str, key_id: &str, retry_after: Option<Duration>) {
        let mut keys = self.lock();
        sweep(&mut keys);
        let state = keys.entry((channel.to_owned(), key_id.to_owned())).or_default();
        state.throttled = state.throttled.saturating_add(1);
        let backoff = COOL_DOWN_BASE.saturating_mul(1 << state.throttled.min(7).saturating_sub(1));
        let wait = retry_after.unwrap_or(backoff).min(COOL_DOWN_CAP);
        state.cool_until = Some(Instant::now() + wait);
        tracing::info!(
            channel,
            key = key_id,
            cool_down_ms = wait.as_millis() as u64,
            "upstream throttled a channel key"
        );
    }

    /// An attempt with key `key_id` of `channel` succeeded: its cool-down
    /// and refusal end.
    pub fn succeeded(&self, channel: &str, key_id: &str) {
        let mut keys = self.lock();
        if !keys.is_empty() {
            keys.remove(&(channel.to_owned(), key_id.to_owned()));
        }
    }
}

/// Drops entries whose refusal and cool-down have both passed, once the map
/// is large: it stays bounded by the keys in trouble.
/// The state kept for `channel`'s key `key_id`, if any. Mostly no key is
/// held out: then nothing is looked up (a lookup builds its two strings).
fn state_of<'m>(keys: &'m HashMap<(String, String), KeyState>, channel: &str, key_id: &str) -> Option<&'m KeyState> {
    if keys.is_empty() {
        return None;
    }
    keys.get(&(channel.to_owned(), key_id.to_owned()))
}

fn sweep(keys: &mut HashMap<(String, String), KeyState>) {
    if keys.len() > SWEEP_ABOVE {
        let now = Instant::now();
        keys.retain(|_, s| s.refused_until.is_some_and(|t| t > now) || s.cool_until.is_some_and(|t| t > now));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::policy::snapshot::tests::channel;

    fn pooled(ids: &[&str]) -> Channel {
        let mut channel = channel("c", 0, 1, &["g"], &["m"]);
        channel.keys =
            ids.iter().map(|id| UpstreamKey { id: (*id).to_owned(), key: format!("sk-{id}"), enabled: true }).collect();
        channel
    }

    fn picks(health: &KeyHealth, channel: &Channel, n: usize) -> Vec<String> {
        (0..n).map(|_| health.pick(channel, &[], None).unwrap().id.clone()).collect()
    }

    #[test]
    fn picks_spread_round_robin_over_enabled_keys() {
        let health = KeyHealth::default();
        let mut channel = pooled(&["a", "b", "c"]);
        let mut seen = picks(&health, &channel, 6);
        seen.sort();
        assert_eq!(seen, ["a", "a", "b", "b", "c", "c"]);
        let mut keys = channel.keys.to_vec();
        keys[1].enabled = false;
        channel.keys = keys.into();
        assert!(!picks(&health, &channel, 6).contains(&"b".to_owned()), "a disabled key is never picked");
    }

    #[test]
    fn a_refused_key_is_held_out_and_the_channel_lasts_while_any_key_works() {
        let health = KeyHealth::default();
        let channel = pooled(&["a", "b"]);
        health.refused("c", "a");
        assert_eq!(picks(&health, &channel, 4), ["b", "b", "b", "b"]);
        assert!(health.usable(&channel) && !health.healthy(&channel, "a"));
        health.refused("c", "b");
        assert!(!health.usable(&channel), "no key left");
        assert!(health.pick(&channel, &[], None).is_none());
    }

    #[test]
    fn a_throttled_key_is_used_only_when_no_other_is_left() {
        let health = KeyHealth::default();
        let channel = pooled(&["a", "b"]);
        health.throttled("c", "a", Some(Duration::from_secs(30)));
        assert_eq!(picks(&health, &channel, 3), ["b", "b", "b"]);
        assert!(!health.all_cooling(&channel));
        assert_eq!(health.pick(&channel, &["b".to_owned()], None).unwrap().id, "a", "a cooling key beats none");
        health.throttled("c", "b", None);
        assert!(health.all_cooling(&channel));
        health.succeeded("c", "a");
        assert!(health.healthy(&channel, "a") && !health.all_cooling(&channel));
    }

    #[test]
    fn a_preferred_key_wins_while_it_is_healthy() {
        let health = KeyHealth::default();
        let channel = pooled(&["a", "b", "c"]);
        assert_eq!(picks(&health, &channel, 1).len(), 1);
        for _ in 0..5 {
            assert_eq!(health.pick(&channel, &[], Some("b")).unwrap().id, "b");
        }
        health.throttled("c", "b", None);
        assert_ne!(health.pick(&channel, &[], Some("b")).unwrap().id, "b");
    }
}
