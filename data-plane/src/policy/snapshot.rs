//! The immutable policy snapshot every request reads, and its indexes.
//!
//! A snapshot is built once per control-plane update and then only read. The
//! big maps (tokens, accounts) are split into shards behind `Arc`s, so a delta
//! copies only the shards it touches: a one-token change to a million-token
//! snapshot clones a few thousand pointers, not a million tokens. Each token
//! is one `Arc` indexed twice (by key hash and by id) without a second copy
//! of either key, and tokens share their account and group names.

use std::{
    borrow::Borrow,
    collections::{HashMap, HashSet},
    hash::{BuildHasher, Hash, Hasher},
    sync::Arc,
};

use foldhash::fast::RandomState;

use rand::RngExt as _;

use crate::policy::domain::{Account, Channel, Group, KeyHash, Kind, Model, Resource, Token};

const SHARDS: usize = 256;

/// A hash map split into `Arc`-shared shards; cloning it is cheap and writing
/// copies only the touched shard.
#[derive(Clone)]
pub struct ShardedMap<K, V> {
    hasher: RandomState,
    shards: Vec<Arc<HashMap<K, V, RandomState>>>,
    len: usize,
}

/// A hash set split into `Arc`-shared shards, like `ShardedMap`.
#[derive(Clone)]
pub struct ShardedSet<T> {
    hasher: RandomState,
    shards: Vec<Arc<HashSet<T, RandomState>>>,
    len: usize,
}

/// Every token, each one `Arc` found by its key hash (requests) and by its
/// id (deletes, which name ids).
#[derive(Clone, Default)]
struct Tokens {
    by_key: ShardedSet<ByKey>,
    by_id: ShardedSet<ById>,
}

/// A token as an entry of the key-hash index: equal and hashed by key hash.
#[derive(Clone)]
struct ByKey(Arc<Token>);

/// A token as an entry of the id index: equal and hashed by id.
#[derive(Clone)]
struct ById(Arc<Token>);

/// Every policy resource at one revision, indexed for the request path.
#[derive(Clone, Default)]
pub struct Snapshot {
    /// Control-plane revision this snapshot reflects; 0 when none is held.
    pub revision: u64,
    /// False only for the placeholder used before any snapshot arrived.
    pub held: bool,
    /// Lineage of the control-plane store it came from; empty when unknown.
    pub store_id: String,
    tokens: Tokens,
    accounts: ShardedMap<String, Arc<Account>>,
    groups: HashMap<String, Arc<Group>, RandomState>,
    channels: HashMap<String, Arc<Channel>, RandomState>,
    models: HashMap<String, Arc<Model>, RandomState>,
    routes: Arc<Routes>,
    /// Account and group names the tokens share, while `start`ed and not
    /// yet `finish`ed; empty otherwise.
    interned: HashSet<Arc<str>, RandomState>,
    building: bool,
}

/// Enabled channels per (group, model), highest priority first.
#[derive(Default)]
struct Routes {
    by_group: HashMap<String, HashMap<String, Vec<Arc<Channel>>, RandomState>, RandomState>,
}

/// The shard of a key hashing to `hash`: bits that a shard's own table
/// (which hashes with its own seed anyway) uses neither for the bucket (low
/// bits) nor for the tag (top seven).
fn shard_of(hash: u64) -> usize {
    // The modulo keeps the index in range whatever the pointer width.
    #[allow(clippy::cast_possible_truncation)]
    let index = ((hash >> 32) % SHARDS as u64) as usize;
    index
}

// === impl ShardedMap ===

impl<K: Hash + Eq + Clone, V: Clone> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap {
            hasher: RandomState::default(),
            shards: (0..SHARDS).map(|_| Arc::new(HashMap::default())).collect(),
            len: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> ShardedMap<K, V> {
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        shard_of(self.hasher.hash_one(key))
    }

    /// The value stored under `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[self.shard(key)].get(key)
    }

    /// Stores `value`, copying the shard if another snapshot shares it.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let i = self.shard(&key);
        let old = Arc::make_mut(&mut self.shards[i]).insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes `key`, copying the shard if another snapshot shares it.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.shard(key);
        if !self.shards[i].contains_key(key) {
            return None;
        }
        let old = Arc::make_mut(&mut self.shards[i]).remove(key);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// All values, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.shards.iter().flat_map(|s| s.values())
    }
}

// === impl ShardedSet ===

impl<T: Hash + Eq + Clone> Default for ShardedSet<T> {
    fn default() -> Self {
        ShardedSet {
            hasher: RandomState::default(),
            shards: (0..SHARDS).map(|_| Arc::new(HashSet::default())).collect(),
            len: 0,
        }
    }
}

impl<T: Hash + Eq + Clone> ShardedSet<T> {
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        shard_of(self.hasher.hash_one(key))
    }

    /// The entry equal to `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&T>
    where
        T: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[self.shard(key)].get(key)
    }

    /// Stores `value` in place of an equal entry, which it returns; copies
    /// the shard if another snapshot shares it.
    pub fn replace(&mut self, value: T) -> Option<T> {
        let i = self.shard(&value);
        let old = Arc::make_mut(&mut self.shards[i]).replace(value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes the entry equal to `key`, copying the shard if another
    /// snapshot shares it.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<T>
    where
        T: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.shard(key);
        if !self.shards[i].contains(key) {
            return None;
        }
        let old = Arc::make_mut(&mut self.shards[i]).take(key);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// Makes room for `more` entries spread over the shards.
    pub fn reserve(&mut self, more: usize) {
        let per_shard = more.div_ceil(SHARDS);
        for shard in &mut self.shards {
            let shard = Arc::make_mut(shard);
            shard.reserve(per_shard.saturating_sub(shard.capacity() - shard.len()));
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// All entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().flat_map(|s| s.iter())
    }
}

// === impl Tokens ===

impl Tokens {
    fn get(&self, hash: &KeyHash) -> Option<&Arc<Token>> {
        self.by_key.get(hash).map(|entry| &entry.0)
    }

    fn reserve(&mut self, more: usize) {
        self.by_key.reserve(more);
        self.by_id.reserve(more);
    }

    fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Stores `token` in place of the one with its id.
    fn upsert(&mut self, token: Token) {
        let token = Arc::new(token);
        if let Some(ById(old)) = self.by_id.replace(ById(token.clone())) {
            self.unlink_key(&old);
        }
        self.by_key.replace(ByKey(token));
    }

    fn delete(&mut self, id: &str) {
        if let Some(ById(old)) = self.by_id.remove(id) {
            self.unlink_key(&old);
        }
    }

    /// Drops `old`'s key-hash entry unless another token holds it now.
    fn unlink_key(&mut self, old: &Token) {
        if self.by_key.get(&old.key_hash).is_some_and(|entry| entry.0.id == old.id) {
            self.by_key.remove(&old.key_hash);
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<Token>> {
        self.by_id.iter().map(|entry| &entry.0)
    }
}

// === impl ByKey ===

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key_hash == other.0.key_hash
    }
}

impl Eq for ByKey {}

impl Hash for ByKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key_hash.hash(state);
    }
}

impl Borrow<KeyHash> for ByKey {
    fn borrow(&self) -> &KeyHash {
        &self.0.key_hash
    }
}

// === impl ById ===

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ById {}

impl Hash for ById {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (*self.0.id).hash(state);
    }
}

impl Borrow<str> for ById {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

// === impl Snapshot ===

impl Snapshot {
    /// A held snapshot at `revision` made of `resources`.
    #[cfg(test)]
    pub fn build(revision: u64, resources: impl IntoIterator<Item = Resource>) -> Snapshot {
        let mut snapshot = Snapshot::start(revision);
        snapshot.add(resources);
        snapshot.finish()
    }

    /// An empty held snapshot at `revision` to `add` resources to, and to
    /// `finish` before anyone reads it.
    pub fn start(revision: u64) -> Snapshot {
        Snapshot { revision, held: true, building: true, ..Snapshot::default() }
    }

    /// Makes room for `more` tokens, so that building a snapshot of a
    /// known size never grows (and rehashes) its indexes.
    pub fn reserve(&mut self, more: usize) {
        self.tokens.reserve(more);
    }

    /// Stores `resources` (a part of a snapshot being built by `start`),
    /// growing the token maps once for as many as the iterator says.
    pub fn add(&mut self, resources: impl IntoIterator<Item = Resource>) {
        let resources = resources.into_iter();
        let (lower, upper) = resources.size_hint();
        let expected = upper.unwrap_or(lower);
        self.tokens.reserve(expected);
        for resource in resources {
            self.upsert(resource);
        }
    }

    /// The snapshot `start` and `add` built, with its routes.
    pub fn finish(mut self) -> Snapshot {
        self.rebuild_routes();
        self.interned = HashSet::default();
        self.building = false;
        self
    }

    /// A copy at `revision` with `upserts` stored and `deletes` removed.
    pub fn apply(
        &self,
        revision: u64,
        upserts: impl IntoIterator<Item = Resource>,
        deletes: impl IntoIterator<Item = (Kind, String)>,
    ) -> Snapshot {
        let mut next = self.clone();
        next.update(revision, upserts, deletes);
        next
    }

    /// Moves this snapshot to `revision` with `upserts` stored and `deletes`
    /// removed; shards no other snapshot shares are changed in place.
    pub fn update(
        &mut self,
        revision: u64,
        upserts: impl IntoIterator<Item = Resource>,
        deletes: impl IntoIterator<Item = (Kind, String)>,
    ) {
        self.revision = revision;
        self.held = true;
        let mut channels_changed = false;
        for (kind, id) in deletes {
            channels_changed |= kind == Kind::Channel;
            self.delete(kind, &id);
        }
        for resource in upserts {
            channels_changed |= matches!(resource, Resource::Channel(_));
            self.upsert(resource);
        }
        if channels_changed {
            self.rebuild_routes();
        }
    }

    fn upsert(&mut self, resource: Resource) {
        match resource {
            Resource::Account(a) => {
                self.accounts.insert(a.id.clone(), Arc::new(a));
            }
            Resource::Group(g) => {
                self.groups.insert(g.name.clone(), Arc::new(g));
            }
            Resource::Token(mut t) => {
                // While building, names are shared through `interned`.
                let old = match self.building {
                    true => None,
                    false => self.tokens.by_id.get(&*t.id).map(|entry| entry.0.clone()),
                };
                self.share(&mut t.account_id, old.as_ref().map(|o| &o.account_id));
                self.share(&mut t.group, old.as_ref().map(|o| &o.group));
                self.tokens.upsert(t);
            }
            Resource::Channel(c) => {
                self.channels.insert(c.id.clone(), Arc::new(c));
            }
            Resource::Model(m) => {
                self.models.insert(m.id.clone(), Arc::new(m));
            }
        }
    }

    fn delete(&mut self, kind: Kind, id: &str) {
        match kind {
            Kind::Account => {
                self.accounts.remove(id);
            }
            Kind::Group => {
                self.groups.remove(id);
            }
            Kind::Token => self.tokens.delete(id),
            Kind::Channel => {
                self.channels.remove(id);
            }
            Kind::Model => {
                self.models.remove(id);
            }
        }
    }

    /// Points `name` at an equal name already held (`old`, the one the
    /// replaced token had, or one interned while building) so tokens share it.
    fn share(&mut self, name: &mut Arc<str>, old: Option<&Arc<str>>) {
        if let Some(old) = old.filter(|old| ***old == **name) {
            *name = old.clone();
        } else if self.building {
            match self.interned.get(&**name) {
                Some(held) => *name = held.clone(),
                None => {
                    self.interned.insert(name.clone());
                }
            }
        }
    }

    fn rebuild_routes(&mut self) {
        let mut routes = Routes::default();
        for channel in self.channels.values().filter(|c| c.is_enabled()) {
            for group in channel.groups.iter() {
                let models = routes.by_group.entry(group.clone()).or_default();
                let mut seen = HashSet::new();
                for model in channel.models.iter().filter(|m| seen.insert(m.as_str())) {
                    models.entry(model.clone()).or_default().push(channel.clone());
                }
            }
        }
        for models in routes.by_group.values_mut() {
            for channels in models.values_mut() {
                // Ties broken by id so the order does not depend on hashing.
                channels.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.id.cmp(&b.id)));
            }
        }
        self.routes = Arc::new(routes);
    }

    /// The token whose key hashes to `hash`.
    pub fn token(&self, hash: &KeyHash) -> Option<&Arc<Token>> {
        self.tokens.get(hash)
    }

    /// The account with `id`.
    pub fn account(&self, id: &str) -> Option<&Arc<Account>> {
        self.accounts.get(id)
    }

    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&Arc<Group>> {
        self.groups.get(name)
    }

    /// The catalogue entry of `id`.
    pub fn model(&self, id: &str) -> Option<&Arc<Model>> {
        self.models.get(id)
    }

    /// Every channel of the snapshot, whatever its status, in no order.
    pub fn all_channels(&self) -> impl Iterator<Item = &Arc<Channel>> {
        self.channels.values()
    }

    /// The channel with `id`, whatever its status (a video task made on a
    /// since disabled channel is still downloaded from it).
    pub fn channel_by_id(&self, id: &str) -> Option<&Arc<Channel>> {
        self.channels.get(id)
    }

    /// Enabled channels serving `model` to `group`, highest priority first.
    pub fn channels(&self, group: &str, model: &str) -> &[Arc<Channel>] {
        self.routes.by_group.get(group).and_then(|m| m.get(model)).map_or(&[], Vec::as_slice)
    }

    /// Catalogue models that at least one enabled channel serves to `group`,
    /// sorted by id.
    pub fn group_models(&self, group: &str) -> Vec<&Arc<Model>> {
        let Some(models) = self.routes.by_group.get(group) else {
            return Vec::new();
        };
        let mut list: Vec<_> = models.keys().filter_map(|id| self.models.get(id)).collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        list
    }

    /// Counts of each kind, for logs.
    pub fn counts(&self) -> [(Kind, usize); 5] {
        [
            (Kind::Account, self.accounts.len()),
            (Kind::Group, self.groups.len()),
            (Kind::Token, self.tokens.len()),
            (Kind::Channel, self.channels.len()),
            (Kind::Model, self.models.len()),
        ]
    }

    /// Every resource, for writing the snapshot file.
    pub fn resources(&self) -> impl Iterator<Item = Resource> + '_ {
        let accounts = self.accounts.values().map(|a| Resource::Account((**a).clone()));
        let groups = self.groups.values().map(|g| Resource::Group((**g).clone()));
        let tokens = self.tokens.iter().map(|t| Resource::Token((**t).clone()));
        let channels = self.channels.values().map(|c| Resource::Channel((**c).clone()));
        let models = self.models.values().map(|m| Resource::Model((**m).clone()));
        accounts.chain(groups).chain(tokens).chain(channels).chain(models)
    }
}

/// Picks the next channel to try among `candidates` (highest priority first,
/// as `Snapshot::channels` returns them), skipping the ids in `tried`: the
/// highest remaining priority level, then weighted random by `weight` (0
/// counts as 1). `None` when every candidate was tried.
pub fn pick_channel<'a>(candidates: &'a [Arc<Channel>], tried: &[&str]) -> Option<&'a Arc<Channel>> {
    let mut left = candidates.iter().filter(|c| !tried.contains(&c.id.as_str()));
    let first = left.next()?;
    let level: Vec<&Arc<Channel>> =
        std::iter::once(first).chain(left.take_while(|c| c.priority == first.priority)).collect();
    if level.len() == 1 {
        return Some(first);
    }
    let weight = |c: &Arc<Channel>| u64::from(c.weight.max(1));
    let total: u64 = level.iter().map(|c| weight(c)).sum();
    let mut roll = rand::rng().random_range(0..total);
    for channel in &level {
        let w = weight(channel);
        if roll < w {
            return Some(channel);
        }
        roll -= w;
    }
    Some(first)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::policy::domain::{ChannelKind, ChannelStatus, RateLimit, Timeouts};

    pub fn channel(id: &str, priority: i32, weight: u32, groups: &[&str], models: &[&str]) -> Channel {
        Channel {
            id: id.into(),
            name: id.into(),
            kind: ChannelKind::OpenAi,
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key: format!("key-{id}"),
            key_id: "k_0".into(),
            keys: [crate::policy::domain::UpstreamKey { id: "k_0".into(), key: format!("key-{id}"), enabled: true }]
                .into(),
            models: models.iter().map(|s| s.to_string()).collect(),
            model_map: Arc::new(BTreeMap::new()),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            priority,
            weight,
            status: ChannelStatus::Enabled,
            timeouts: Timeouts::default(),
            settings: Arc::default(),
        }
    }

    pub fn model(id: &str) -> Model {
        Model {
            id: id.into(),
            category: "chat".into(),
            input_price_micros: 1_000_000,
            output_price_micros: 2_000_000,
            cached_price_micros: 0,
            request_price_micros: 0,
            second_price_micros: 0,
            image_price_micros: 0,
            owned_by: "acme".into(),
            tier_threshold_tokens: 0,
            tier_input_price_micros: 0,
            tier_output_price_micros: 0,
            tier_cached_price_micros: 0,
            cache_write_5m_price_micros: 0,
            cache_write_1h_price_micros: 0,
            reasoning_price_micros: 0,
            search_unit_price_micros: 0,
            audio_input_price_micros: 0,
            audio_output_price_micros: 0,
            audio_cached_price_micros: 0,
        }
    }

    /// An enabled, unlimited account `id` with a balance of 1 µ$.
    pub fn account(id: &str) -> Account {
        Account {
            id: id.into(),
            name: id.into(),
            balance_micros: 1,
            unlimited: true,
            groups: vec![],
            enabled: true,
            used_micros: 0,
            created_at: 0,
        }
    }

    /// Group `name` at list prices, without a rate limit.
    pub fn group(name: &str) -> Group {
        Group {
            name: name.into(),
            ratio_ppm: 1_000_000,
            ratio: 1.0,
            deprecated: false,
            description: String::new(),
            rate_limit: RateLimit::default(),
            tokens_per_minute: 0,
            max_in_flight: 0,
        }
    }

    pub fn token(id: &str, key: &str) -> Token {
        use sha2::Digest as _;
        Token {
            id: id.into(),
            account_id: "a1".into(),
            group: "default".into(),
            key_hash: sha2::Sha256::digest(key.as_bytes()).into(),
            enabled: true,
            unlimited: true,
            quota_micros: 0,
            used_micros: 0,
            restrictions: None,
        }
    }

    #[test]
    fn channels_are_ordered_by_priority_and_filtered_by_group_model_and_status() {
        let mut off = channel("off", 99, 1, &["g"], &["m"]);
        off.status = ChannelStatus::AutoDisabled;
        let snap = Snapshot::build(
            1,
            [
                Resource::Channel(channel("low", 1, 1, &["g"], &["m"])),
                Resource::Channel(channel("high", 10, 1, &["g"], &["m", "m"])),
                Resource::Channel(channel("other-group", 50, 1, &["h"], &["m"])),
                Resource::Channel(channel("other-model", 50, 1, &["g"], &["n"])),
                Resource::Channel(off),
            ],
        );
        let ids: Vec<_> = snap.channels("g", "m").iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["high", "low"]);
        assert!(snap.channels("g", "zzz").is_empty());
    }

    #[test]
    fn pick_takes_highest_level_then_falls_back_when_tried() {
        let list: Vec<_> = [channel("a", 5, 1, &[], &[]), channel("b", 5, 3, &[], &[]), channel("c", 1, 1, &[], &[])]
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut counts = HashMap::new();
        for _ in 0..4000 {
            *counts.entry(pick_channel(&list, &[]).unwrap().id.clone()).or_insert(0) += 1;
        }
        assert!(!counts.contains_key("c"), "lower priority picked: {counts:?}");
        let (a, b) = (counts["a"], counts["b"]);
        assert!(b > 2 * a && b < 4 * a, "weights not honoured: a={a} b={b}");
        assert_eq!(pick_channel(&list, &["a", "b"]).unwrap().id, "c");
        assert!(pick_channel(&list, &["a", "b", "c"]).is_none());
    }

    #[test]
    fn zero_weight_counts_as_one() {
        let list: Vec<_> =
            [channel("a", 0, 0, &[], &[]), channel("b", 0, 0, &[], &[])].into_iter().map(Arc::new).collect();
        let picked: HashSet<_> = (0..200).map(|_| pick_channel(&list, &[]).unwrap().id.clone()).collect();
        assert_eq!(picked.len(), 2);
    }

    #[test]
    fn delta_replaces_token_key_and_deletes_by_id() {
        let base = Snapshot::build(1, [Resource::Token(token("t1", "sk-old"))]);
        let old_hash = token("t1", "sk-old").key_hash;
        let new = token("t1", "sk-new");
        let new_hash = new.key_hash;
        let next = base.apply(2, [Resource::Token(new)], []);
        assert!(next.token(&old_hash).is_none());
        assert!(next.token(&new_hash).is_some());
        assert!(base.token(&old_hash).is_some(), "the old snapshot must not change");
        let gone = next.apply(3, [], [(Kind::Token, "t1".to_string())]);
        assert!(gone.token(&new_hash).is_none());
        assert_eq!(gone.revision, 3);
    }

    #[test]
    fn tokens_share_their_account_and_group_names_and_a_delta_keeps_sharing() {
        let snap = Snapshot::build(1, (0..3).map(|i| Resource::Token(token(&format!("t{i}"), &format!("sk-{i}")))));
        let [a, b] = [hash("sk-0"), hash("sk-1")].map(|h| snap.token(&h).unwrap().clone());
        assert!(Arc::ptr_eq(&a.group, &b.group) && Arc::ptr_eq(&a.account_id, &b.account_id));
        let next = snap.apply(2, [Resource::Token(Token { enabled: false, ..token("t0", "sk-0") })], []);
        let changed = next.token(&hash("sk-0")).unwrap();
        assert!(!changed.enabled);
        assert!(Arc::ptr_eq(&changed.group, &b.group), "the changed token has a name of its own");
        assert_eq!(next.counts()[2], (Kind::Token, 3));
    }

    #[test]
    fn a_key_taken_over_by_another_token_stays_when_the_first_is_deleted() {
        let snap = Snapshot::build(1, [Resource::Token(token("t1", "sk-a"))]);
        let next = snap.apply(2, [Resource::Token(token("t2", "sk-a"))], []);
        assert_eq!(&*next.token(&hash("sk-a")).unwrap().id, "t2");
        let after = next.apply(3, [], [(Kind::Token, "t1".to_string())]);
        assert_eq!(&*after.token(&hash("sk-a")).unwrap().id, "t2");
    }

    fn hash(key: &str) -> KeyHash {
        token("x", key).key_hash
    }

    #[test]
    fn group_models_needs_a_channel_and_a_catalogue_entry() {
        let snap = Snapshot::build(
            1,
            [
                Resource::Channel(channel("c", 0, 1, &["g"], &["m1", "ghost"])),
                Resource::Model(model("m1")),
                Resource::Model(model("m2")),
            ],
        );
        let ids: Vec<_> = snap.group_models("g").iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["m1"]);
    }
}
