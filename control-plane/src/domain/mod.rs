//! The control plane's resources, as the store keeps them.
//!
//! Money is integer micro-USD; token prices are micro-USD per 1M tokens.
//! Counters (an account's balance and spend, a token's spend) change only
//! through the store's balance and usage operations, never through `modify`,
//! so an admin edit can never undo a concurrent charge.

pub mod access;
pub mod batch;
pub mod calendar;
pub mod channel_kind;
pub mod clock;
pub mod console;
pub mod keys;
pub mod secrets;
pub mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::domain::batch::{Batch, BatchFile, BatchKind};
pub use crate::domain::calendar::{WindowBudget, WindowPeriod};

/// Status of accounts, tokens and channels.
pub const ENABLED: &str = "enabled";
pub const DISABLED: &str = "disabled";
/// A channel the data planes took out of rotation after repeated failures.
pub const AUTO_DISABLED: &str = "auto_disabled";

/// Requests allowed per window of minutes; a zero window means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    pub window_minutes: u32,
    pub max_requests: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Account {
    pub id: String,
    pub name: String,
    pub balance_micros: i64,
    pub unlimited: bool,
    pub groups: Vec<String>,
    pub status: String,
    pub used_micros: i64,
    pub created_at: i64,
    /// A cap per day, week, month or rolling hours besides the balance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowBudget>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    /// The price ratio as gateway.v1 carries it; prices use [`Group::ratio_ppm`].
    pub ratio: f64,
    pub deprecated: bool,
    pub description: String,
    pub rate_limit: RateLimit,
    /// Tokens (input + output) per minute per account using the group; 0: none.
    #[serde(default)]
    pub tokens_per_minute: u32,
    /// Requests in flight at once per account using the group; 0: none.
    #[serde(default)]
    pub max_in_flight: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Token {
    pub id: String,
    pub account_id: String,
    pub group: String,
    pub name: String,
    /// Lowercase hex SHA-256 of the key; the key itself is never stored.
    pub key_hash: String,
    pub key_prefix: String,
    pub status: String,
    /// Unix seconds; 0 never expires.
    pub expires_at: i64,
    pub unlimited: bool,
    pub quota_micros: i64,
    pub used_micros: i64,
    pub models: Vec<String>,
    pub allow_ips: Vec<String>,
    pub rate_limit: RateLimit,
    pub created_at: i64,
    /// Tokens (input + output) per minute; 0: no limit.
    #[serde(default)]
    pub tokens_per_minute: u32,
    /// Requests in flight at once; 0: no limit.
    #[serde(default)]
    pub max_in_flight: u32,
    /// A cap per day, week, month or rolling hours besides the quota; it
    /// applies to an unlimited token too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowBudget>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Channel {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub base_url: String,
    /// Upstream secret: goes to data planes, never to admin answers or logs.
    pub api_key: String,
    pub models: Vec<String>,
    pub model_map: BTreeMap<String, String>,
    pub groups: Vec<String>,
    pub priority: i32,
    pub weight: u32,
    pub status: String,
    pub connect_timeout_ms: u32,
    pub first_byte_timeout_ms: u32,
    pub idle_timeout_ms: u32,
    pub total_timeout_ms: u32,
    /// The key pool. A channel stored before pools existed has only
    /// `api_key`; `Channel::fold_legacy_key` moves it in as `LEGACY_KEY_ID`.
    #[serde(default)]
    pub keys: Vec<ChannelKey>,
    /// The kind's non-secret settings (`api_version`, `region`, `project`…).
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
}

/// One upstream key of a channel's pool.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelKey {
    /// Short, stable within its channel.
    pub id: String,
    /// Upstream secret: sealed at rest like `Channel::api_key`.
    pub key: String,
    /// `ENABLED`, `DISABLED` (operator) or `AUTO_DISABLED` (upstream refused it).
    pub status: String,
    #[serde(default)]
    pub disabled_reason: String,
    #[serde(default)]
    pub disabled_at: i64,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub id: String,
    pub category: String,
    pub input_price_micros: i64,
    pub output_price_micros: i64,
    pub cached_price_micros: i64,
    pub request_price_micros: i64,
    pub second_price_micros: i64,
    pub image_price_micros: i64,
    pub owned_by: String,
    /// Prompt tokens above which the whole request bills at the tier
    /// prices; 0 for no tier (see `gw_pricing::Prices`).
    #[serde(default)]
    pub tier_threshold_tokens: i64,
    #[serde(default)]
    pub tier_input_price_micros: i64,
    #[serde(default)]
    pub tier_output_price_micros: i64,
    #[serde(default)]
    pub tier_cached_price_micros: i64,
    /// 0 bills cache writes at the input price.
    #[serde(default)]
    pub cache_write_5m_price_micros: i64,
    #[serde(default)]
    pub cache_write_1h_price_micros: i64,
    /// 0 bills reasoning tokens at the output price.
    #[serde(default)]
    pub reasoning_price_micros: i64,
    /// Realtime audio tokens in, out and read from the cache; 0 bills them
    /// at the text price of the same kind.
    #[serde(default)]
    pub audio_input_price_micros: i64,
    #[serde(default)]
    pub audio_output_price_micros: i64,
    #[serde(default)]
    pub audio_cached_price_micros: i64,
    /// One rerank search unit (one query over up to 100 documents).
    #[serde(default)]
    pub search_unit_price_micros: i64,
    /// Share of the regular prices batch lines pay, in millionths; 0 is
    /// half (`gw_pricing::DEFAULT_BATCH_PRICE_PPM`).
    #[serde(default)]
    pub batch_price_ppm: i64,
}

/// One metered request, applied to the ledger once per `request_id`.
///
/// Stored as JSON. The fields added after the first release are left out
/// when zero, as they mostly are (a quarter of a record's bytes, kept per
/// request in the usage list); every field a release before them requires
/// is always written, so an older control plane still reads the records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub request_id: String,
    pub token_id: String,
    pub account_id: String,
    pub group: String,
    pub model: String,
    pub channel_id: String,
    pub endpoint: String,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub cost_micros: i64,
    pub latency_ms: u32,
    pub status: u32,
    pub created_at: i64,
    pub node_id: String,
    pub estimated: bool,
    /// Images made (priced per image).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub images: i64,
    /// Audio length in milliseconds (priced per second).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audio_millis: i64,
    /// Part of `prompt_tokens` written to the cache for five minutes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_5m_tokens: i64,
    /// Part of `prompt_tokens` written to the cache for one hour.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_1h_tokens: i64,
    /// Part of `completion_tokens` spent reasoning.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: i64,
    /// Audio parts of `prompt_tokens`, `completion_tokens` and
    /// `cached_tokens` (realtime sessions).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audio_prompt_tokens: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audio_completion_tokens: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audio_cached_tokens: i64,
    /// The price tier the record was billed at (0 base, 1 long context).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tier: u32,
    /// Rerank search units (priced per search unit).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub search_units: i64,
}

/// Whether a stored number is zero, to leave it out (see `UsageRecord`).
fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// Which kind of resource a change or a lookup is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Account,
    Group,
    Token,
    Channel,
    Model,
}

/// Any resource, for the store's generic operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "resource", rename_all = "lowercase")]
pub enum Resource {
    Account(Account),
    Group(Group),
    Token(Token),
    Channel(Channel),
    Model(Model),
}

/// One entry of the change feed: resource `kind/id` changed at `revision`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub revision: u64,
    pub kind: Kind,
    pub id: String,
}

/// Every resource at one revision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub revision: u64,
    pub resources: Vec<Resource>,
}

/// What a batch of usage records did to the ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageOutcome {
    pub applied: u32,
    pub duplicates: u32,
    /// Refused by the ledger's checks (never reach the store).
    pub refused: u32,
}

/// Filter of `Store::list_usage`; empty fields (and zero times) match
/// everything.
#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    pub token_id: String,
    pub account_id: String,
    pub model: String,
    pub group: String,
    pub channel_id: String,
    /// Records made at or after this Unix second.
    pub from: i64,
    /// Records made before this Unix second.
    pub to: i64,
    pub limit: usize,
    /// Where the previous page ended (`UsagePage::next`); empty for the first.
    pub cursor: String,
}

/// One page of usage records, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsagePage {
    pub items: Vec<UsageRecord>,
    /// Where the next page starts; empty when no older record is left.
    pub next: String,
}

// === impl Channel ===

/// The id the single `api_key` of a channel gets in its pool.
pub const LEGACY_KEY_ID: &str = "k_0";
/// Characters of a key shown to operators.
const KEY_PREFIX_CHARS: usize = 6;

impl Channel {
    /// Moves `api_key`, if set, into the pool as its first key
    /// (`LEGACY_KEY_ID`, enabled, created `now`), leaving `api_key` empty.
    pub fn fold_legacy_key(&mut self, now: i64) {
        if self.api_key.is_empty() {
            return;
        }
        let key = std::mem::take(&mut self.api_key);
        self.keys.retain(|k| k.id != LEGACY_KEY_ID);
        self.keys.insert(0, ChannelKey::new(LEGACY_KEY_ID.to_owned(), key, now));
    }

    /// The pool as data planes see it: `keys`, with a not yet folded
    /// `api_key` first.
    pub fn pool(&self) -> Vec<ChannelKey> {
        let mut channel = self.clone();
        channel.fold_legacy_key(0);
        channel.keys
    }

    /// Whether the channel has any key.
    pub fn has_key(&self) -> bool {
        !self.api_key.is_empty() || !self.keys.is_empty()
    }

    /// The key a single upstream call (probe, video) uses: the first
    /// enabled one, else empty.
    pub fn first_key(&self) -> &str {
        if !self.api_key.is_empty() {
            return &self.api_key;
        }
        self.keys.iter().find(|k| k.status == ENABLED).map_or("", |k| k.key.as_str())
    }
}

// === impl ChannelKey ===

impl ChannelKey {
    /// An enabled key `id` holding `key`.
    pub fn new(id: String, key: String, now: i64) -> ChannelKey {
        ChannelKey {
            id,
            key,
            status: ENABLED.to_owned(),
            disabled_reason: String::new(),
            disabled_at: 0,
            created_at: now,
        }
    }

    /// What operators see of the key: its first few characters (at most
    /// half of it).
    pub fn prefix(&self) -> String {
        // A short key shows half of itself at most.
        let shown = KEY_PREFIX_CHARS.min(self.key.chars().count() / 2);
        self.key.chars().take(shown).collect()
    }
}

// Hand-written so a pool key never reaches a log line through `{:?}`.
impl std::fmt::Debug for ChannelKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelKey")
            .field("id", &self.id)
            .field("key", &"***")
            .field("status", &self.status)
            .field("disabled_reason", &self.disabled_reason)
            .field("disabled_at", &self.disabled_at)
            .field("created_at", &self.created_at)
            .finish()
    }
}

// === impl Group ===

impl Group {
    /// The price ratio in parts per million, rounded as the data planes round
    /// it. A ratio the admin API refuses (NaN, infinite, negative) is 0.
    pub fn ratio_ppm(&self) -> i64 {
        gw_pricing::wire::ratio_ppm(self.ratio).unwrap_or(0)
    }
}

// === impl Kind ===

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Account, Kind::Group, Kind::Token, Kind::Channel, Kind::Model];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Account => "account",
            Kind::Group => "group",
            Kind::Token => "token",
            Kind::Channel => "channel",
            Kind::Model => "model",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Resource ===

impl Resource {
    pub fn kind(&self) -> Kind {
        match self {
            Resource::Account(_) => Kind::Account,
            Resource::Group(_) => Kind::Group,
            Resource::Token(_) => Kind::Token,
            Resource::Channel(_) => Kind::Channel,
            Resource::Model(_) => Kind::Model,
        }
    }

    /// The resource's key within its kind (a group's and a model's is the name).
    pub fn id(&self) -> &str {
        match self {
            Resource::Account(a) => &a.id,
            Resource::Group(g) => &g.name,
            Resource::Token(t) => &t.id,
            Resource::Channel(c) => &c.id,
            Resource::Model(m) => &m.id,
        }
    }
}

/// Current Unix time in seconds.
/// One data plane as the fleet registry keeps it (in the store, so every
/// replica sees every data plane).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DataPlane {
    pub node_id: String,
    pub address: String,
    pub version: String,
    /// The replica holding its watch stream (that replica's listen address).
    pub replica: String,
    pub acked_revision: u64,
    pub sent_revision: u64,
    pub connected_at: i64,
    /// Its last heartbeat, ACK or call, in Unix seconds.
    pub last_seen: i64,
    /// Its watch stream was open when last written; see `fleet::live`.
    pub connected: bool,
    pub last_error: String,
    pub spool_backlog: u64,
    pub requests_per_second: f64,
}

pub fn now_unix() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Where a video task stands. `Completed` and `Failed` are terminal: once a
/// task is in one of them its status never changes again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VideoStatus {
    #[default]
    Queued,
    InProgress,
    Completed,
    Failed,
}

/// An asynchronous video generation task. The control plane owns it: data
/// planes create it, record what the upstream said at submission and read
/// it back; status queries and the background poller refresh it from the
/// upstream. Every write is a compare-and-set on `version`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VideoTask {
    /// Public id (`video_…`), time ordered.
    pub id: String,
    pub account_id: String,
    pub token_id: String,
    pub group: String,
    /// The model name the client asked for (what is billed).
    pub model: String,
    pub channel_id: String,
    /// The upstream's task id; empty until the submission was accepted.
    pub upstream_id: String,
    pub status: VideoStatus,
    /// 0–100.
    pub progress: u32,
    /// Requested duration, what the price is multiplied by.
    pub seconds: u32,
    /// Requested resolution (`1280x720`), empty when left to the upstream.
    pub size: String,
    /// What the submission charged.
    pub cost_micros: i64,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds of the last change of status or progress.
    pub updated_at: i64,
    /// Unix seconds; 0 until completed.
    pub completed_at: i64,
    /// Unix milliseconds of the last look at the upstream.
    pub checked_at_ms: i64,
    /// Why the task failed (empty otherwise).
    pub error_code: String,
    pub error_message: String,
    /// The charge went into the usage ledger.
    pub charged: bool,
    /// A failed task's charge was given back.
    pub refunded: bool,
    /// JSON object of the upstream's other fields, passed through to clients.
    pub extra: String,
    /// The data plane that took the submission, and its request id.
    pub node_id: String,
    pub request_id: String,
    /// Bumped by every write; a write names the version it read.
    pub version: u64,
}

// === impl VideoStatus ===

impl VideoStatus {
    pub const ALL: [VideoStatus; 4] =
        [VideoStatus::Queued, VideoStatus::InProgress, VideoStatus::Completed, VideoStatus::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            VideoStatus::Queued => "queued",
            VideoStatus::InProgress => "in_progress",
            VideoStatus::Completed => "completed",
            VideoStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<VideoStatus> {
        VideoStatus::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Whether the status can never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, VideoStatus::Completed | VideoStatus::Failed)
    }
}

impl std::fmt::Display for VideoStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl VideoTask ===

impl VideoTask {
    /// Whether the task still needs the control plane: not terminal yet, or
    /// terminal with its billing not settled (uncharged, or failed and not
    /// refunded). The poller visits exactly these.
    pub fn is_open(&self) -> bool {
        !self.status.is_terminal() || !self.charged || (self.status == VideoStatus::Failed && !self.refunded)
    }
}

/// A page cursor that no listing gave out, or one that has expired.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cursor {cursor:?} is invalid or expired; list again from the start")]
pub struct BadCursor {
    pub cursor: String,
}

/// An error followed by its sources, for logs.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn models_and_records_stored_before_the_billing_fields_still_load() {
        let model: Model = serde_json::from_str(
            r#"{"id":"m","category":"chat","input_price_micros":1,"output_price_micros":2,
                "cached_price_micros":0,"request_price_micros":0,"second_price_micros":0,
                "image_price_micros":0,"owned_by":""}"#,
        )
        .unwrap();
        assert_eq!((model.output_price_micros, model.tier_threshold_tokens, model.reasoning_price_micros), (2, 0, 0));
        let record: UsageRecord = serde_json::from_str(
            r#"{"request_id":"r","token_id":"t","account_id":"a","group":"g","model":"m","channel_id":"c",
                "endpoint":"/v1/chat/completions","prompt_tokens":5,"completion_tokens":6,"cached_tokens":0,
                "cost_micros":7,"latency_ms":1,"status":200,"created_at":1,"node_id":"n","estimated":false}"#,
        )
        .unwrap();
        assert_eq!((record.completion_tokens, record.reasoning_tokens, record.cache_write_1h_tokens), (6, 0, 0));
        assert_eq!(record.tier, 0);
    }

    #[test]
    fn records_are_stored_without_zero_billing_fields_and_read_back_whole() {
        let mut record: UsageRecord = serde_json::from_str(
            r#"{"request_id":"r","token_id":"t","account_id":"a","group":"g","model":"m","channel_id":"c",
                "endpoint":"/v1/chat/completions","prompt_tokens":5,"completion_tokens":6,"cached_tokens":0,
                "cost_micros":7,"latency_ms":1,"status":200,"created_at":1,"node_id":"n","estimated":false}"#,
        )
        .unwrap();
        let json = serde_json::to_string(&record).unwrap();
        // What a release before the billing fields requires is all there.
        for field in ["\"cached_tokens\":0", "\"estimated\":false", "\"node_id\":\"n\""] {
            assert!(json.contains(field), "{json}");
        }
        for field in [
            "images",
            "audio_millis",
            "cache_write_5m_tokens",
            "cache_write_1h_tokens",
            "reasoning_tokens",
            "tier",
            "search_units",
        ] {
            assert!(!json.contains(field), "{json}");
        }
        assert_eq!(serde_json::from_str::<UsageRecord>(&json).unwrap(), record);
        (record.images, record.audio_millis, record.reasoning_tokens, record.tier) = (2, 3000, 4, 1);
        (record.cache_write_5m_tokens, record.cache_write_1h_tokens, record.search_units) = (1, 2, 3);
        let json = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<UsageRecord>(&json).unwrap(), record);
    }

    fn channel(api_key: &str) -> Channel {
        Channel {
            id: "ch_1".into(),
            name: "main".into(),
            kind: "openai".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: api_key.into(),
            models: vec!["m".into()],
            model_map: BTreeMap::new(),
            groups: vec!["default".into()],
            priority: 0,
            weight: 1,
            status: ENABLED.into(),
            connect_timeout_ms: 0,
            first_byte_timeout_ms: 0,
            idle_timeout_ms: 0,
            total_timeout_ms: 0,
            keys: Vec::new(),
            settings: BTreeMap::new(),
        }
    }

    #[test]
    fn a_single_key_folds_into_the_pool_as_its_first_key() {
        let mut c = channel("sk-single-key");
        assert_eq!(c.pool().len(), 1, "the pool view includes a key not yet folded");
        assert_eq!(c.first_key(), "sk-single-key");
        c.keys.push(ChannelKey::new("k_x".into(), "sk-other".into(), 1));
        c.fold_legacy_key(5);
        assert!(c.api_key.is_empty());
        let ids: Vec<&str> = c.keys.iter().map(|k| k.id.as_str()).collect();
        assert_eq!(ids, [LEGACY_KEY_ID, "k_x"]);
        assert_eq!((c.keys[0].key.as_str(), c.keys[0].created_at), ("sk-single-key", 5));
        c.keys[0].status = DISABLED.into();
        assert_eq!(c.first_key(), "sk-other", "the first enabled key");
        assert!(c.has_key() && !channel("").has_key());
    }

    #[test]
    fn a_key_shows_a_short_prefix_and_debug_hides_it() {
        let key = ChannelKey::new("k_1".into(), "sk-proj-abcdefghijkl".into(), 0);
        assert_eq!(key.prefix(), "sk-pro");
        assert_eq!(ChannelKey::new("k_2".into(), "abcd".into(), 0).prefix(), "ab", "half of a short key");
        assert!(!format!("{key:?}").contains("abcdef"));
    }
}
