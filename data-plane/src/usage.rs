//! One request's usage record: what it used and cost, the currency of the
//! meter, the spool and the reporter, below all three. Its protocol form
//! (`pb::UsageRecord`) is also the spool's on-disk form, so the conversion
//! lives here too.

use std::sync::Arc;

use gw_proto::pb;
use prost::Message as _;

use crate::pricing::Units;

/// What one request used and cost, as the meter records it, the spool
/// keeps it and the reporter sends it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageRecord {
    /// The idempotency key: the control plane applies a record once per id.
    pub request_id: Arc<str>,
    pub token_id: Arc<str>,
    pub account_id: Arc<str>,
    pub group: Arc<str>,
    pub model: Arc<str>,
    pub channel_id: Arc<str>,
    pub endpoint: Arc<str>,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    /// Part of `prompt_tokens` written to the cache for five minutes.
    pub cache_write_5m_tokens: i64,
    /// Part of `prompt_tokens` written to the cache for one hour.
    pub cache_write_1h_tokens: i64,
    /// Part of `completion_tokens` spent reasoning.
    pub reasoning_tokens: i64,
    /// Audio parts of `prompt_tokens`, `completion_tokens` and `cached_tokens`.
    pub audio_prompt_tokens: i64,
    pub audio_completion_tokens: i64,
    pub audio_cached_tokens: i64,
    /// The price tier the record was billed at (0 base, 1 long context).
    pub tier: u32,
    pub cost_micros: i64,
    pub latency_ms: u32,
    /// The HTTP status the request ended with (499: the client went away).
    pub status: u16,
    /// Unix seconds.
    pub created_at: i64,
    pub node_id: Arc<str>,
    /// Whether the gateway counted the tokens itself.
    pub estimated: bool,
    /// Units priced besides tokens.
    pub units: Units,
}

// === impl UsageRecord ===

impl UsageRecord {
    /// A record from its protocol encoding (as the spool wrote it); `None`
    /// when the bytes do not decode.
    pub fn decode(bytes: &[u8]) -> Option<UsageRecord> {
        pb::UsageRecord::decode(bytes).ok().map(UsageRecord::from)
    }
}

impl From<pb::UsageRecord> for UsageRecord {
    fn from(r: pb::UsageRecord) -> UsageRecord {
        UsageRecord {
            request_id: r.request_id.into(),
            token_id: r.token_id.into(),
            account_id: r.account_id.into(),
            group: r.group.into(),
            model: r.model.into(),
            channel_id: r.channel_id.into(),
            endpoint: r.endpoint.into(),
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_tokens: r.cached_tokens,
            cache_write_5m_tokens: r.cache_write_5m_tokens,
            cache_write_1h_tokens: r.cache_write_1h_tokens,
            reasoning_tokens: r.reasoning_tokens,
            audio_prompt_tokens: r.audio_prompt_tokens,
            audio_completion_tokens: r.audio_completion_tokens,
            audio_cached_tokens: r.audio_cached_tokens,
            tier: r.tier,
            cost_micros: r.cost_micros,
            latency_ms: r.latency_ms,
            status: u16::try_from(r.status).unwrap_or(u16::MAX),
            created_at: r.created_at,
            node_id: r.node_id.into(),
            estimated: r.estimated,
            units: Units { images: r.images, audio_millis: r.audio_millis, search_units: r.search_units },
        }
    }
}

/// Sets `message` to `record`, reusing the strings `message` holds.
pub fn fill(message: &mut pb::UsageRecord, record: &UsageRecord) {
    let UsageRecord {
        request_id,
        token_id,
        account_id,
        group,
        model,
        channel_id,
        endpoint,
        prompt_tokens,
        completion_tokens,
        cached_tokens,
        cache_write_5m_tokens,
        cache_write_1h_tokens,
        reasoning_tokens,
        audio_prompt_tokens,
        audio_completion_tokens,
        audio_cached_tokens,
        tier,
        cost_micros,
        latency_ms,
        status,
        created_at,
        node_id,
        estimated,
        units,
    } = record;
    for (to, from) in [
        (&mut message.request_id, request_id),
        (&mut message.token_id, token_id),
        (&mut message.account_id, account_id),
        (&mut message.group, group),
        (&mut message.model, model),
        (&mut message.channel_id, channel_id),
        (&mut message.endpoint, endpoint),
        (&mut message.node_id, node_id),
    ] {
        to.clear();
        to.push_str(from);
    }
    message.prompt_tokens = *prompt_tokens;
    message.completion_tokens = *completion_tokens;
    message.cached_tokens = *cached_tokens;
    message.cache_write_5m_tokens = *cache_write_5m_tokens;
    message.cache_write_1h_tokens = *cache_write_1h_tokens;
    message.reasoning_tokens = *reasoning_tokens;
    message.audio_prompt_tokens = *audio_prompt_tokens;
    message.audio_completion_tokens = *audio_completion_tokens;
    message.audio_cached_tokens = *audio_cached_tokens;
    message.tier = *tier;
    message.cost_micros = *cost_micros;
    message.latency_ms = *latency_ms;
    message.status = u32::from(*status);
    message.created_at = *created_at;
    message.estimated = *estimated;
    message.images = units.images;
    message.audio_millis = units.audio_millis;
    message.search_units = units.search_units;
}

impl From<&UsageRecord> for pb::UsageRecord {
    fn from(record: &UsageRecord) -> pb::UsageRecord {
        let mut message = pb::UsageRecord::default();
        fill(&mut message, record);
        message
    }
}
