//! The boundary between generated protobuf types and the domain. Nothing
//! outside this module (and the service shims that call it) names `pb::`.

use gw_proto::pb;

use crate::domain::access::{AuditEntry, Credential};
use crate::domain::calendar::CalendarError;
use crate::domain::{
    Account, Channel, ChannelKey, Group, Model, RateLimit, Resource, Token, UsageRecord, WindowBudget, WindowPeriod,
};
use crate::services::budget::{PermitAsk, PermitGrant, SlotsAsk};
use crate::services::usage_summary;

mod console;

pub use self::console::topup_code;

impl From<pb::RateLimit> for RateLimit {
    fn from(r: pb::RateLimit) -> RateLimit {
        RateLimit { window_minutes: r.window_minutes, max_requests: r.max_requests }
    }
}

impl From<RateLimit> for pb::RateLimit {
    fn from(r: RateLimit) -> pb::RateLimit {
        pb::RateLimit { window_minutes: r.window_minutes, max_requests: r.max_requests }
    }
}

impl From<Account> for pb::Account {
    fn from(a: Account) -> pb::Account {
        pb::Account {
            id: a.id,
            name: a.name,
            balance_micros: a.balance_micros,
            unlimited: a.unlimited,
            groups: a.groups,
            status: a.status,
            used_micros: a.used_micros,
            created_at: a.created_at,
            window: a.window.map(Into::into),
        }
    }
}

impl From<Group> for pb::Group {
    fn from(g: Group) -> pb::Group {
        pb::Group {
            name: g.name,
            ratio: g.ratio,
            deprecated: g.deprecated,
            description: g.description,
            rate_limit: Some(g.rate_limit.into()),
            tokens_per_minute: g.tokens_per_minute,
            max_in_flight: g.max_in_flight,
        }
    }
}

impl From<pb::Group> for Group {
    fn from(g: pb::Group) -> Group {
        Group {
            name: g.name,
            ratio: g.ratio,
            deprecated: g.deprecated,
            description: g.description,
            rate_limit: g.rate_limit.map(Into::into).unwrap_or_default(),
            tokens_per_minute: g.tokens_per_minute,
            max_in_flight: g.max_in_flight,
        }
    }
}

impl From<Token> for pb::Token {
    fn from(t: Token) -> pb::Token {
        pb::Token {
            id: t.id,
            account_id: t.account_id,
            group: t.group,
            name: t.name,
            key_hash: t.key_hash,
            key_prefix: t.key_prefix,
            status: t.status,
            expires_at: t.expires_at,
            unlimited: t.unlimited,
            quota_micros: t.quota_micros,
            used_micros: t.used_micros,
            models: t.models,
            allow_ips: t.allow_ips,
            rate_limit: Some(t.rate_limit.into()),
            created_at: t.created_at,
            tokens_per_minute: t.tokens_per_minute,
            max_in_flight: t.max_in_flight,
            window: t.window.map(Into::into),
        }
    }
}

/// The budget's settings; what was spent in the window is filled in by
/// the admin service.
impl From<WindowBudget> for pb::WindowBudget {
    fn from(w: WindowBudget) -> pb::WindowBudget {
        pb::WindowBudget {
            period: w.period.as_str().to_owned(),
            rolling_hours: w.rolling_hours,
            quota_micros: w.quota_micros,
            time_zone: w.time_zone,
            ..pb::WindowBudget::default()
        }
    }
}

/// A window budget of a write, checked, in `default_zone` when it names
/// none; `None` for a period of none. Answers-only fields are ignored.
pub fn window_budget(w: pb::WindowBudget, default_zone: &str) -> Result<Option<WindowBudget>, CalendarError> {
    let zone = w.time_zone.trim();
    WindowBudget {
        period: WindowPeriod::parse(w.period.trim())?,
        rolling_hours: w.rolling_hours,
        quota_micros: w.quota_micros,
        time_zone: if zone.is_empty() { default_zone } else { zone }.to_owned(),
    }
    .normalized()
}

/// Full channel, secret included: only for the policy stream to data planes.
pub fn channel_with_secret(c: Channel) -> pb::Channel {
    let keys: Vec<pb::ChannelKey> = c.pool().into_iter().map(key_with_secret).collect();
    // Data planes that predate pools read `api_key`: the first enabled key.
    let api_key = keys.iter().find(|k| k.status == crate::domain::ENABLED).map(|k| k.key.clone()).unwrap_or_default();
    pb::Channel {
        has_key: c.has_key(),
        keys,
        id: c.id,
        name: c.name,
        r#type: c.kind,
        base_url: c.base_url,
        api_key,
        models: c.models,
        model_map: c.model_map.into_iter().collect(),
        groups: c.groups,
        priority: c.priority,
        weight: c.weight,
        status: c.status,
        connect_timeout_ms: c.connect_timeout_ms,
        first_byte_timeout_ms: c.first_byte_timeout_ms,
        idle_timeout_ms: c.idle_timeout_ms,
        total_timeout_ms: c.total_timeout_ms,
        settings: c.settings.into_iter().collect(),
    }
}

/// Channel as operators see it: no upstream key, only the pool's prefixes.
pub fn channel_redacted(c: Channel) -> pb::Channel {
    let channel = channel_with_secret(c);
    let keys = channel.keys.into_iter().map(|k| pb::ChannelKey { key: String::new(), ..k }).collect();
    pb::Channel { api_key: String::new(), keys, ..channel }
}

/// A pool key with its secret: only for the policy stream to data planes.
pub fn key_with_secret(k: ChannelKey) -> pb::ChannelKey {
    pb::ChannelKey {
        // A service account's email or an AWS access key id where the key
        // has one (neither is secret), else the first few characters.
        prefix: crate::domain::channel_kind::shown_key(&k.key).unwrap_or_else(|| k.prefix()),
        fingerprint: key_fingerprint(&k.key),
        id: k.id,
        key: k.key,
        status: k.status,
        disabled_reason: k.disabled_reason,
        disabled_at: k.disabled_at,
        created_at: k.created_at,
    }
}

/// The first 16 hex digits of the SHA-256 of `key`: enough to tell whether
/// a key an operator holds is this one, too little to recover it.
pub fn key_fingerprint(key: &str) -> String {
    use sha2::Digest as _;
    let mut digest = hex::encode(sha2::Sha256::digest(key.as_bytes()));
    digest.truncate(16);
    digest
}

/// A pool key as operators see it: its prefix, never the key.
pub fn key_redacted(k: ChannelKey) -> pb::ChannelKey {
    pb::ChannelKey { key: String::new(), ..key_with_secret(k) }
}

impl From<pb::Channel> for Channel {
    fn from(c: pb::Channel) -> Channel {
        Channel {
            id: c.id,
            name: c.name,
            kind: c.r#type,
            base_url: c.base_url,
            api_key: c.api_key,
            models: c.models,
            model_map: c.model_map.into_iter().collect(),
            groups: c.groups,
            priority: c.priority,
            weight: c.weight,
            status: c.status,
            connect_timeout_ms: c.connect_timeout_ms,
            first_byte_timeout_ms: c.first_byte_timeout_ms,
            idle_timeout_ms: c.idle_timeout_ms,
            total_timeout_ms: c.total_timeout_ms,
            // Keys are added through the pool RPCs (or `api_key`), never
            // from a whole channel message.
            keys: Vec::new(),
            settings: c.settings.into_iter().collect(),
        }
    }
}

impl From<Model> for pb::Model {
    fn from(m: Model) -> pb::Model {
        pb::Model {
            id: m.id,
            category: m.category,
            input_price_micros: m.input_price_micros,
            output_price_micros: m.output_price_micros,
            cached_price_micros: m.cached_price_micros,
            request_price_micros: m.request_price_micros,
            second_price_micros: m.second_price_micros,
            image_price_micros: m.image_price_micros,
            owned_by: m.owned_by,
            tier_threshold_tokens: m.tier_threshold_tokens,
            tier_input_price_micros: m.tier_input_price_micros,
            tier_output_price_micros: m.tier_output_price_micros,
            tier_cached_price_micros: m.tier_cached_price_micros,
            cache_write_5m_price_micros: m.cache_write_5m_price_micros,
            cache_write_1h_price_micros: m.cache_write_1h_price_micros,
            reasoning_price_micros: m.reasoning_price_micros,
            audio_input_price_micros: m.audio_input_price_micros,
            audio_output_price_micros: m.audio_output_price_micros,
            audio_cached_price_micros: m.audio_cached_price_micros,
            search_unit_price_micros: m.search_unit_price_micros,
            batch_price_ppm: m.batch_price_ppm,
        }
    }
}

impl From<pb::Model> for Model {
    fn from(m: pb::Model) -> Model {
        Model {
            id: m.id,
            category: m.category,
            input_price_micros: m.input_price_micros,
            output_price_micros: m.output_price_micros,
            cached_price_micros: m.cached_price_micros,
            request_price_micros: m.request_price_micros,
            second_price_micros: m.second_price_micros,
            image_price_micros: m.image_price_micros,
            owned_by: m.owned_by,
            tier_threshold_tokens: m.tier_threshold_tokens,
            tier_input_price_micros: m.tier_input_price_micros,
            tier_output_price_micros: m.tier_output_price_micros,
            tier_cached_price_micros: m.tier_cached_price_micros,
            cache_write_5m_price_micros: m.cache_write_5m_price_micros,
            cache_write_1h_price_micros: m.cache_write_1h_price_micros,
            reasoning_price_micros: m.reasoning_price_micros,
            audio_input_price_micros: m.audio_input_price_micros,
            audio_output_price_micros: m.audio_output_price_micros,
            audio_cached_price_micros: m.audio_cached_price_micros,
            search_unit_price_micros: m.search_unit_price_micros,
            batch_price_ppm: m.batch_price_ppm,
        }
    }
}

impl From<UsageRecord> for pb::UsageRecord {
    fn from(u: UsageRecord) -> pb::UsageRecord {
        pb::UsageRecord {
            request_id: u.request_id,
            token_id: u.token_id,
            account_id: u.account_id,
            group: u.group,
            model: u.model,
            channel_id: u.channel_id,
            endpoint: u.endpoint,
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            cost_micros: u.cost_micros,
            latency_ms: u.latency_ms,
            status: u.status,
            created_at: u.created_at,
            node_id: u.node_id,
            estimated: u.estimated,
            images: u.images,
            audio_millis: u.audio_millis,
            cache_write_5m_tokens: u.cache_write_5m_tokens,
            cache_write_1h_tokens: u.cache_write_1h_tokens,
            reasoning_tokens: u.reasoning_tokens,
            audio_prompt_tokens: u.audio_prompt_tokens,
            audio_completion_tokens: u.audio_completion_tokens,
            audio_cached_tokens: u.audio_cached_tokens,
            tier: u.tier,
            search_units: u.search_units,
        }
    }
}

impl From<pb::UsageRecord> for UsageRecord {
    fn from(u: pb::UsageRecord) -> UsageRecord {
        UsageRecord {
            request_id: u.request_id,
            token_id: u.token_id,
            account_id: u.account_id,
            group: u.group,
            model: u.model,
            channel_id: u.channel_id,
            endpoint: u.endpoint,
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            cost_micros: u.cost_micros,
            latency_ms: u.latency_ms,
            status: u.status,
            created_at: u.created_at,
            node_id: u.node_id,
            estimated: u.estimated,
            images: u.images,
            audio_millis: u.audio_millis,
            cache_write_5m_tokens: u.cache_write_5m_tokens,
            cache_write_1h_tokens: u.cache_write_1h_tokens,
            reasoning_tokens: u.reasoning_tokens,
            audio_prompt_tokens: u.audio_prompt_tokens,
            audio_completion_tokens: u.audio_completion_tokens,
            audio_cached_tokens: u.audio_cached_tokens,
            tier: u.tier,
            search_units: u.search_units,
        }
    }
}

impl TryFrom<pb::SummarizeUsageRequest> for usage_summary::Query {
    type Error = String;

    /// Fails on a dimension this control plane does not know.
    fn try_from(r: pb::SummarizeUsageRequest) -> Result<Self, String> {
        use usage_summary::Dimension as D;
        let group_by = r
            .group_by
            .iter()
            .map(|code| match pb::UsageDimension::try_from(*code) {
                Ok(pb::UsageDimension::Hour) => Ok(D::Hour),
                Ok(pb::UsageDimension::Day) => Ok(D::Day),
                Ok(pb::UsageDimension::Account) => Ok(D::Account),
                Ok(pb::UsageDimension::Token) => Ok(D::Token),
                Ok(pb::UsageDimension::Model) => Ok(D::Model),
                Ok(pb::UsageDimension::Channel) => Ok(D::Channel),
                _ => Err(format!("unknown usage dimension {code}")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(usage_summary::Query {
            group_by,
            from: r.from,
            to: r.to,
            account_id: r.account_id,
            token_id: r.token_id,
            model: r.model,
            channel_id: r.channel_id,
            group: r.group,
        })
    }
}

impl From<usage_summary::Summary> for pb::SummarizeUsageResponse {
    fn from(summary: usage_summary::Summary) -> pb::SummarizeUsageResponse {
        let rows = summary
            .rows
            .into_iter()
            .map(|row| pb::UsageSummaryRow {
                bucket_start: row.bucket_start,
                account_id: row.account_id,
                token_id: row.token_id,
                model: row.model,
                channel_id: row.channel_id,
                requests: row.counts.requests,
                prompt_tokens: row.counts.prompt_tokens,
                completion_tokens: row.counts.completion_tokens,
                cached_tokens: row.counts.cached_tokens,
                images: row.counts.images,
                audio_millis: row.counts.audio_millis,
                cost_micros: row.counts.cost_micros,
            })
            .collect();
        pb::SummarizeUsageResponse { rows, from: summary.from, to: summary.to }
    }
}

/// A resource as the policy stream carries it (channel secrets included;
/// a token without the name, key prefix and creation time that data planes
/// never read: a tenth of a million-token snapshot).
pub fn resource_for_data_plane(resource: Resource) -> pb::Resource {
    use pb::resource::Kind as K;
    let kind = match resource {
        Resource::Account(a) => K::Account(a.into()),
        Resource::Group(g) => K::Group(g.into()),
        Resource::Token(t) => {
            K::Token(pb::Token { name: String::new(), key_prefix: String::new(), created_at: 0, ..t.into() })
        }
        Resource::Channel(c) => K::Channel(channel_with_secret(c)),
        Resource::Model(m) => K::Model(m.into()),
    };
    pb::Resource { kind: Some(kind) }
}

/// A budget named `token:<id>` or `account:<id>`.
/// What a data plane reports of a submission to the upstream: its failure,
/// or the upstream's answer, which must be JSON.
pub fn submission(
    failed: bool,
    upstream_json: &str,
    code: String,
    message: String,
) -> Result<crate::services::outbound::Submission, tonic::Status> {
    use crate::services::outbound::Submission;
    if failed {
        return Ok(Submission::Rejected { code, message });
    }
    let answer = serde_json::from_str(upstream_json)
        .map_err(|_| tonic::Status::invalid_argument("upstream_json is not JSON"))?;
    Ok(Submission::Accepted(answer))
}

pub fn budget(text: &str) -> Result<crate::store::Budget, tonic::Status> {
    crate::store::Budget::parse(text)
        .ok_or_else(|| tonic::Status::invalid_argument(format!("budget {text:?} is not token:<id> or account:<id>")))
}

/// A data plane's ask for spending budget.
pub fn spend_ask(ask: pb::SpendAsk) -> Result<crate::services::budget::SpendAsk, tonic::Status> {
    Ok(crate::services::budget::SpendAsk { budget: budget(&ask.budget)?, need: ask.need_micros, want: ask.want_micros })
}

/// The answer to one spend ask for `budget`.
pub fn spend_grant(budget: String, lease: crate::store::Lease) -> pb::SpendGrant {
    pb::SpendGrant {
        budget,
        granted_micros: lease.granted,
        held_micros: lease.held,
        remaining_micros: lease.remaining,
        available_micros: lease.available,
        unlimited: lease.unlimited,
        missing: lease.missing,
    }
}

/// What `gwctl store status` shows.
pub fn store_status(status: crate::services::continuity::StoreStatus) -> pb::StoreStatus {
    pb::StoreStatus {
        store_id: status.lineage.id,
        confirmed: status.lineage.confirmed,
        revision: status.revision,
        persistence: status.persistence.as_str().to_owned(),
        suspect: status.suspect.unwrap_or_default(),
    }
}

/// A fleet record as `ListDataPlanes` answers it; `connected` only while
/// it is live.
pub fn data_plane(n: crate::domain::DataPlane, liveness: crate::services::fleet::Liveness) -> pb::DataPlane {
    pb::DataPlane {
        node_id: n.node_id,
        address: n.address,
        version: n.version,
        acked_revision: n.acked_revision,
        sent_revision: n.sent_revision,
        connected_at: n.connected_at,
        last_seen: n.last_seen,
        connected: liveness == crate::services::fleet::Liveness::Connected,
        last_error: n.last_error,
        replica: n.replica,
        spool_backlog: n.spool_backlog,
        requests_per_second: n.requests_per_second,
        liveness: liveness.as_str().to_owned(),
    }
}

impl From<Credential> for pb::Credential {
    fn from(c: Credential) -> pb::Credential {
        // The key hash stays in the store.
        pb::Credential {
            id: c.id,
            name: c.name,
            role: c.role.as_str().to_owned(),
            account_id: c.account_id,
            key_prefix: c.key_prefix,
            created_at: c.created_at,
            last_used_at: c.last_used_at,
            rotated_at: c.rotated_at,
        }
    }
}

impl From<AuditEntry> for pb::AuditEntry {
    fn from(e: AuditEntry) -> pb::AuditEntry {
        pb::AuditEntry {
            seq: e.seq,
            at: e.at,
            actor_id: e.actor_id,
            actor_role: e.actor_role.as_str().to_owned(),
            method: e.method,
            kind: e.kind,
            target: e.target,
            outcome: e.outcome,
        }
    }
}

/// A data plane's permit ask.
pub fn permit_ask(ask: pb::PermitAsk) -> PermitAsk {
    PermitAsk {
        key: ask.key,
        window_minutes: ask.window_minutes,
        max_requests: ask.max_requests,
        want: ask.want,
        charge: ask.charge,
    }
}

impl From<PermitGrant> for pb::PermitGrant {
    fn from(g: PermitGrant) -> pb::PermitGrant {
        pb::PermitGrant { key: g.key, granted: g.granted, window_start: g.window_start, window_end: g.window_end }
    }
}

/// A data plane's ask for in-flight slots.
pub fn slots_ask(ask: pb::SlotAsk) -> SlotsAsk {
    SlotsAsk { key: ask.key, max_in_flight: ask.max_in_flight, give_back: ask.give_back, want: ask.want }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_window_budget_without_a_zone_takes_the_default_and_none_removes_it() {
        let w = |period: &str, zone: &str| pb::WindowBudget {
            period: period.into(),
            quota_micros: 5,
            time_zone: zone.into(),
            ..pb::WindowBudget::default()
        };
        let budget = window_budget(w(" week ", ""), "Asia/Tokyo").unwrap().unwrap();
        assert_eq!((budget.period, budget.time_zone.as_str()), (WindowPeriod::Week, "Asia/Tokyo"));
        assert_eq!(window_budget(w("day", "Europe/Berlin"), "Asia/Tokyo").unwrap().unwrap().time_zone, "Europe/Berlin");
        assert_eq!(window_budget(w("none", "Mars/Olympus"), "UTC"), Ok(None));
        assert_eq!(window_budget(w("", ""), "UTC"), Ok(None));
        assert_eq!(
            window_budget(w("day", "Mars/Olympus"), "UTC").unwrap_err().to_string(),
            "unknown time zone \"Mars/Olympus\""
        );
        let back: pb::WindowBudget = budget.into();
        assert_eq!((back.period.as_str(), back.quota_micros, back.remaining_micros), ("week", 5, 0));
    }
}
