//! The policy resources as the data plane uses them: validated, parsed once
//! at conversion (key hashes as bytes, CIDRs as `IpNet`, ratios as ppm), so
//! the request path never parses or re-checks them.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use ipnet::IpNet;

/// SHA-256 of a full client key (`sk-…`).
pub type KeyHash = [u8; 32];

/// Requests allowed per window of minutes; a zero window means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimit {
    pub window_minutes: u32,
    pub max_requests: u32,
}

/// A billing account; tokens spend from its balance.
#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    pub id: String,
    pub name: String,
    pub balance_micros: i64,
    /// Never refused for its balance.
    pub unlimited: bool,
    /// Groups its tokens may use; empty allows every group.
    pub groups: Vec<String>,
    pub enabled: bool,
    pub used_micros: i64,
    pub created_at: i64,
}

/// A price tier that tokens belong to.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub name: String,
    /// The group's price ratio in parts per million (1.0 = 1_000_000).
    pub ratio_ppm: i64,
    /// The ratio as the control plane sent it, kept for persistence.
    pub ratio: f64,
    pub deprecated: bool,
    pub description: String,
    pub rate_limit: RateLimit,
    /// Tokens (input + output) per minute per account; 0: no limit.
    pub tokens_per_minute: u32,
    /// Requests in flight at once per account; 0: no limit.
    pub max_in_flight: u32,
}

/// A client credential, found by the SHA-256 of its key.
///
/// Only what the request path reads is kept (no display name, key prefix or
/// creation time), the strings tokens share (account, group) are shared
/// `Arc<str>`s, and what most tokens leave unset is boxed apart: a million
/// of these is most of a data plane's memory, and this way each (with its
/// `Arc`) fits a 128-byte allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub id: Box<str>,
    pub account_id: Arc<str>,
    pub group: Arc<str>,
    pub key_hash: KeyHash,
    pub enabled: bool,
    pub unlimited: bool,
    pub quota_micros: i64,
    pub used_micros: i64,
    /// `None` when the token has none of them.
    pub restrictions: Option<Box<Restrictions>>,
}

/// What a token may be limited to beyond its quota; the default is no
/// limit at all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Restrictions {
    /// Unix seconds; 0 never expires.
    pub expires_at: i64,
    /// Model allowlist; empty allows every model of the group.
    pub models: Vec<String>,
    /// Source-address allowlist; empty allows every address.
    pub allow_ips: Vec<IpNet>,
    pub rate_limit: RateLimit,
    /// Tokens (input + output) per minute; 0: no limit.
    pub tokens_per_minute: u32,
    /// Requests in flight at once; 0: no limit.
    pub max_in_flight: u32,
}

/// The restrictions of a token that has none.
static UNRESTRICTED: Restrictions = Restrictions {
    expires_at: 0,
    models: Vec::new(),
    allow_ips: Vec::new(),
    rate_limit: RateLimit { window_minutes: 0, max_requests: 0 },
    tokens_per_minute: 0,
    max_in_flight: 0,
};

/// How a channel's upstream is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// OpenAI-compatible HTTP API.
    OpenAi,
    /// Messages-native HTTP API (`POST /messages`, `x-api-key`).
    Anthropic,
    /// Azure OpenAI: deployment URLs with `api-version`, or the v1 API.
    Azure,
    /// AWS Bedrock: `invoke` (messages bodies) and `converse`, SigV4-signed.
    Bedrock,
    /// Google Vertex AI: Anthropic (`rawPredict`) and Gemini models.
    Vertex,
    /// The Gemini API (`generateContent`, `x-goog-api-key`).
    Gemini,
}

// === impl ChannelKind ===

impl ChannelKind {
    /// Every kind, in the order operators see them.
    pub const ALL: [ChannelKind; 6] = [
        ChannelKind::OpenAi,
        ChannelKind::Anthropic,
        ChannelKind::Azure,
        ChannelKind::Bedrock,
        ChannelKind::Vertex,
        ChannelKind::Gemini,
    ];

    /// The kind's name on the wire and in gwctl.
    pub fn name(self) -> &'static str {
        match self {
            ChannelKind::OpenAi => "openai",
            ChannelKind::Anthropic => "anthropic",
            ChannelKind::Azure => "azure",
            ChannelKind::Bedrock => "bedrock",
            ChannelKind::Vertex => "vertex",
            ChannelKind::Gemini => "gemini",
        }
    }

    /// The kind named `name` (`""` is `openai`, as before kinds existed).
    pub fn parse(name: &str) -> Option<ChannelKind> {
        if name.is_empty() {
            return Some(ChannelKind::OpenAi);
        }
        ChannelKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// Status of a channel as the control plane names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelStatus {
    Enabled,
    Disabled,
    AutoDisabled,
}

/// An upstream provider account that serves some models to some groups.
/// Its lists are shared, not copied, by the view each attempt takes of it
/// (`with_key`): a pooled channel is cloned on every request.
#[derive(Clone, PartialEq)]
pub struct Channel {
    pub id: String,
    pub name: String,
    pub kind: ChannelKind,
    /// Base address including `/v1`, without a trailing `/`.
    pub base_url: String,
    /// Upstream secret: never logged, never sent to clients. The key an
    /// attempt uses (`Channel::with_key`); as loaded, the pool's first
    /// enabled key.
    pub api_key: String,
    /// The pool key `api_key` is (empty for a channel without a pool).
    pub key_id: String,
    /// The key pool, disabled keys included.
    pub keys: Arc<[UpstreamKey]>,
    pub models: Arc<[String]>,
    /// Requested model → upstream model name.
    pub model_map: Arc<BTreeMap<String, String>>,
    pub groups: Arc<[String]>,
    /// Higher is tried first.
    pub priority: i32,
    /// Relative share within a priority level; 0 counts as 1.
    pub weight: u32,
    pub status: ChannelStatus,
    pub timeouts: Timeouts,
    /// The kind's non-secret settings (`api_version`, `region`, `project`…;
    /// see the proto's `Channel.settings`).
    pub settings: Arc<BTreeMap<String, String>>,
}

/// One key of a channel's pool.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamKey {
    pub id: String,
    /// Upstream secret: never logged, never sent to clients.
    pub key: String,
    /// Whether the control plane has it in rotation.
    pub enabled: bool,
}

/// A channel's upstream timeouts; `None` takes the data plane's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Option<Duration>,
    pub first_byte: Option<Duration>,
    pub idle: Option<Duration>,
    pub total: Option<Duration>,
}

/// A catalogue entry with its prices (micro-USD per 1M tokens, per request…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    pub id: String,
    pub category: String,
    pub input_price_micros: i64,
    pub output_price_micros: i64,
    /// 0 bills cached prompt tokens at the input price.
    pub cached_price_micros: i64,
    pub request_price_micros: i64,
    pub second_price_micros: i64,
    pub image_price_micros: i64,
    pub owned_by: String,
    /// Prompt tokens above which the whole request bills at the tier
    /// prices; 0 for no tier (see `gw_pricing::Prices`).
    pub tier_threshold_tokens: i64,
    pub tier_input_price_micros: i64,
    pub tier_output_price_micros: i64,
    pub tier_cached_price_micros: i64,
    /// 0 bills cache writes at the input price.
    pub cache_write_5m_price_micros: i64,
    pub cache_write_1h_price_micros: i64,
    /// 0 bills reasoning tokens at the output price.
    pub reasoning_price_micros: i64,
    /// Realtime audio tokens in, out and read from the cache; 0 bills them
    /// at the text price of the same kind (see `gw_pricing::Prices`).
    pub audio_input_price_micros: i64,
    pub audio_output_price_micros: i64,
    pub audio_cached_price_micros: i64,
    /// Per rerank search unit (one query over up to 100 documents).
    pub search_unit_price_micros: i64,
}

/// Which kind of resource a delete or a rejection names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Account,
    Group,
    Token,
    Channel,
    Model,
}

/// Any resource, as a delta upserts it.
#[derive(Debug, Clone, PartialEq)]
pub enum Resource {
    Account(Account),
    Group(Group),
    Token(Token),
    Channel(Channel),
    Model(Model),
}

// === impl Channel ===

impl Channel {
    /// Whether requests may be routed to it: enabled, and keyless or with
    /// an enabled key.
    pub fn is_enabled(&self) -> bool {
        self.status == ChannelStatus::Enabled && (self.keys.is_empty() || self.keys.iter().any(|k| k.enabled))
    }

    /// Whether the channel spreads over several keys: a refusal or 429 then
    /// is one key's, not the channel's.
    pub fn is_pooled(&self) -> bool {
        self.keys.len() > 1
    }

    /// This channel as an attempt with `key` sees it.
    pub fn with_key(&self, key: &UpstreamKey) -> Channel {
        Channel { api_key: key.key.clone(), key_id: key.id.clone(), ..self.clone() }
    }

    /// The upstream name of `model` on this channel.
    pub fn upstream_model<'a>(&'a self, model: &'a str) -> &'a str {
        match self.model_map.get(model) {
            Some(mapped) if !mapped.is_empty() => mapped,
            _ => model,
        }
    }
}

// Hand-written so the api key can never reach a log line through `{:?}`.
impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &"***")
            .field("key_id", &self.key_id)
            .field("keys", &self.keys.len())
            .field("models", &self.models)
            .field("groups", &self.groups)
            .field("priority", &self.priority)
            .field("weight", &self.weight)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

// Hand-written so the key can never reach a log line through `{:?}`.
impl std::fmt::Debug for UpstreamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamKey").field("id", &self.id).field("enabled", &self.enabled).finish_non_exhaustive()
    }
}

// === impl Kind ===

impl Kind {
    /// The name the control plane uses in `ResourceRef.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Account => "account",
            Kind::Group => "group",
            Kind::Token => "token",
            Kind::Channel => "channel",
            Kind::Model => "model",
        }
    }

    /// Parses a `ResourceRef.kind`.
    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Account, Kind::Group, Kind::Token, Kind::Channel, Kind::Model].into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Token ===

impl Token {
    /// What the token is limited to (nothing, when it has no restrictions).
    pub fn restrictions(&self) -> &Restrictions {
        self.restrictions.as_deref().unwrap_or(&UNRESTRICTED)
    }

    /// The token with `restrictions` (none kept when they limit nothing).
    #[cfg(test)]
    pub fn restricted(self, restrictions: Restrictions) -> Token {
        Token { restrictions: restrictions.boxed(), ..self }
    }
}

// === impl Restrictions ===

impl Restrictions {
    /// Boxed, or `None` when they limit nothing.
    pub fn boxed(self) -> Option<Box<Restrictions>> {
        (self != UNRESTRICTED).then(|| Box::new(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_in_its_arc_fits_a_128_byte_allocation() {
        // Two reference counts beside it; a million tokens save 64 MB over
        // the next size up (192 bytes).
        assert!(std::mem::size_of::<Token>() + 16 <= 128, "Token is {} bytes", std::mem::size_of::<Token>());
    }
}
