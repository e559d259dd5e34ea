//! The boundary between `gateway.v1` protobuf types and the data plane's
//! domain types. Everything the request path relies on is validated here; a
//! resource that does not convert is rejected by name (`kind/id`) and the rest
//! of its snapshot or delta still applies.

use std::{sync::Arc, time::Duration};

use gw_proto::pb;

use crate::policy::client_ip::{BadAllowIp, parse_allow_ip};
use crate::policy::domain::{
    Account, Channel, ChannelKind, ChannelStatus, Group, Kind, Model, RateLimit, Resource, Restrictions, Timeouts,
    Token, UpstreamKey,
};

const ENABLED: &str = "enabled";
const DISABLED: &str = "disabled";
const AUTO_DISABLED: &str = "auto_disabled";
/// The id a control plane gives a channel's single key in its pool.
const LEGACY_KEY_ID: &str = "k_0";

/// Why a resource could not be converted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConvertError {
    #[error("resource has no kind")]
    Empty,
    #[error("id is empty")]
    MissingId,
    #[error("key hash is not 64 hex characters")]
    BadKeyHash,
    #[error("allow_ips entry {0:?} is neither an IP address nor a CIDR")]
    BadAllowIp(String),
    #[error("unsupported channel type {0:?}")]
    UnknownChannelType(String),
    #[error("base_url {0:?} is not an http(s) address")]
    BadBaseUrl(String),
    #[error("group ratio {0} is not a finite non-negative number")]
    BadRatio(f64),
    #[error("price or tier threshold {0} is negative")]
    NegativePrice(i64),
}

/// A resource the data plane refused, named as the Ack wants it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{name}: {reason}")]
pub struct Rejected {
    /// `kind/id`, e.g. `token/t_123`.
    pub name: String,
    #[source]
    pub reason: ConvertError,
}

/// Converts one upserted resource, or names it in a `Rejected`.
pub fn resource(resource: pb::Resource) -> Result<Resource, Rejected> {
    use pb::resource::Kind as K;
    let Some(kind) = resource.kind else {
        return Err(Rejected { name: "unknown/".into(), reason: ConvertError::Empty });
    };
    let (name, result) = match kind {
        K::Account(a) => (format!("account/{}", a.id), account(a).map(Resource::Account)),
        K::Group(g) => (format!("group/{}", g.name), group(g).map(Resource::Group)),
        K::Token(t) => (format!("token/{}", t.id), token(t).map(Resource::Token)),
        K::Channel(c) => (format!("channel/{}", c.id), channel(c).map(Resource::Channel)),
        K::Model(m) => (format!("model/{}", m.id), model(m).map(Resource::Model)),
    };
    result.map_err(|reason| Rejected { name, reason })
}

/// Converts a delete reference; `None` for an unknown kind.
pub fn resource_ref(r: &pb::ResourceRef) -> Option<(Kind, &str)> {
    Kind::parse(&r.kind).map(|k| (k, r.id.as_str()))
}

fn non_empty(id: &str) -> Result<(), ConvertError> {
    if id.is_empty() { Err(ConvertError::MissingId) } else { Ok(()) }
}

fn rate_limit(r: Option<pb::RateLimit>) -> RateLimit {
    r.map(|r| RateLimit { window_minutes: r.window_minutes, max_requests: r.max_requests }).unwrap_or_default()
}

/// The quota of a window budget, when there is one. The control plane
/// leases what is left of it; an unlimited token or account that has one is
/// capped here by that quota, so that it asks for leases at all.
fn window_quota(window: Option<&pb::WindowBudget>) -> Option<i64> {
    window.filter(|w| !w.period.is_empty() && w.period != "none").map(|w| w.quota_micros)
}

fn account(a: pb::Account) -> Result<Account, ConvertError> {
    non_empty(&a.id)?;
    let windowed = a.unlimited.then(|| window_quota(a.window.as_ref())).flatten();
    Ok(Account {
        enabled: a.status == ENABLED,
        id: a.id,
        name: a.name,
        balance_micros: windowed.unwrap_or(a.balance_micros),
        unlimited: a.unlimited && windowed.is_none(),
        groups: a.groups,
        used_micros: a.used_micros,
        created_at: a.created_at,
    })
}

fn group(g: pb::Group) -> Result<Group, ConvertError> {
    non_empty(&g.name)?;
    if !g.ratio.is_finite() || g.ratio < 0.0 {
        return Err(ConvertError::BadRatio(g.ratio));
    }
    Ok(Group {
        ratio_ppm: ratio_ppm(g.ratio),
        ratio: g.ratio,
        name: g.name,
        deprecated: g.deprecated,
        description: g.description,
        rate_limit: rate_limit(g.rate_limit),
        tokens_per_minute: g.tokens_per_minute,
        max_in_flight: g.max_in_flight,
    })
}

/// `round(ratio * 1e6)`; callers have checked it is finite and non-negative.
#[allow(clippy::cast_possible_truncation)] // saturating float-to-int cast is the intent
fn ratio_ppm(ratio: f64) -> i64 {
    (ratio * 1e6).round() as i64
}

fn token(t: pb::Token) -> Result<Token, ConvertError> {
    non_empty(&t.id)?;
    let mut key_hash = [0u8; 32];
    hex::decode_to_slice(t.key_hash.trim(), &mut key_hash).map_err(|_| ConvertError::BadKeyHash)?;
    let allow_ips = t.allow_ips.iter().map(|e| parse_allow_ip(e).map_err(|BadAllowIp(e)| ConvertError::BadAllowIp(e)));
    let allow_ips = allow_ips.collect::<Result<Vec<_>, _>>()?;
    let windowed = t.unlimited.then(|| window_quota(t.window.as_ref())).flatten();
    let restrictions = Restrictions {
        expires_at: t.expires_at,
        models: t.models,
        allow_ips,
        rate_limit: rate_limit(t.rate_limit),
        tokens_per_minute: t.tokens_per_minute,
        max_in_flight: t.max_in_flight,
    };
    Ok(Token {
        enabled: t.status == ENABLED,
        id: t.id.into(),
        account_id: t.account_id.into(),
        group: t.group.into(),
        key_hash,
        unlimited: t.unlimited && windowed.is_none(),
        quota_micros: windowed.map_or(t.quota_micros, |quota| t.used_micros.saturating_add(quota)),
        used_micros: t.used_micros,
        restrictions: restrictions.boxed(),
    })
}

fn millis(ms: u32) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(u64::from(ms)))
}

fn channel(c: pb::Channel) -> Result<Channel, ConvertError> {
    non_empty(&c.id)?;
    let Some(kind) = ChannelKind::parse(&c.r#type) else {
        return Err(ConvertError::UnknownChannelType(c.r#type));
    };
    let base_url = c.base_url.trim().trim_end_matches('/').to_owned();
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(ConvertError::BadBaseUrl(c.base_url));
    }
    let status = match c.status.as_str() {
        ENABLED => ChannelStatus::Enabled,
        AUTO_DISABLED => ChannelStatus::AutoDisabled,
        // Anything unknown is taken out of rotation rather than trusted.
        _ => ChannelStatus::Disabled,
    };
    let mut keys: Vec<UpstreamKey> = c
        .keys
        .into_iter()
        .filter(|k| !k.key.is_empty())
        .map(|k| UpstreamKey { enabled: k.status == ENABLED, id: k.id, key: k.key })
        .collect();
    if keys.is_empty() && !c.api_key.is_empty() {
        // A control plane that predates key pools sends the one key alone.
        keys.push(UpstreamKey { id: LEGACY_KEY_ID.to_owned(), key: c.api_key, enabled: true });
    }
    let first = keys.iter().find(|k| k.enabled);
    let (api_key, key_id) = first.map(|k| (k.key.clone(), k.id.clone())).unwrap_or_default();
    Ok(Channel {
        id: c.id,
        name: c.name,
        kind,
        base_url,
        api_key,
        key_id,
        keys: keys.into(),
        models: c.models.into(),
        model_map: Arc::new(c.model_map.into_iter().collect()),
        groups: c.groups.into(),
        priority: c.priority,
        weight: c.weight,
        status,
        settings: Arc::new(c.settings.into_iter().collect()),
        timeouts: Timeouts {
            connect: millis(c.connect_timeout_ms),
            first_byte: millis(c.first_byte_timeout_ms),
            idle: millis(c.idle_timeout_ms),
            total: millis(c.total_timeout_ms),
        },
    })
}

fn model(m: pb::Model) -> Result<Model, ConvertError> {
    non_empty(&m.id)?;
    for price in [
        m.input_price_micros,
        m.output_price_micros,
        m.cached_price_micros,
        m.request_price_micros,
        m.second_price_micros,
        m.image_price_micros,
        m.tier_threshold_tokens,
        m.tier_input_price_micros,
        m.tier_output_price_micros,
        m.tier_cached_price_micros,
        m.cache_write_5m_price_micros,
        m.cache_write_1h_price_micros,
        m.reasoning_price_micros,
        m.audio_input_price_micros,
        m.audio_output_price_micros,
        m.audio_cached_price_micros,
        m.search_unit_price_micros,
    ] {
        if price < 0 {
            return Err(ConvertError::NegativePrice(price));
        }
    }
    Ok(Model {
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
        search_unit_price_micros: m.search_unit_price_micros,
        audio_input_price_micros: m.audio_input_price_micros,
        audio_output_price_micros: m.audio_output_price_micros,
        audio_cached_price_micros: m.audio_cached_price_micros,
    })
}

// ---- domain → pb, for the snapshot file ----

fn pb_rate_limit(r: RateLimit) -> Option<pb::RateLimit> {
    Some(pb::RateLimit { window_minutes: r.window_minutes, max_requests: r.max_requests })
}

fn ms(d: Option<Duration>) -> u32 {
    d.map_or(0, |d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX))
}

fn status(enabled: bool) -> String {
    if enabled { ENABLED } else { DISABLED }.to_owned()
}

/// The protobuf form of a resource, as written to the snapshot file.
pub fn to_pb(resource: &Resource) -> pb::Resource {
    use pb::resource::Kind as K;
    let kind = match resource {
        Resource::Account(a) => K::Account(pb::Account {
            id: a.id.clone(),
            name: a.name.clone(),
            balance_micros: a.balance_micros,
            unlimited: a.unlimited,
            groups: a.groups.clone(),
            status: status(a.enabled),
            used_micros: a.used_micros,
            created_at: a.created_at,
            // Folded into the balance and `unlimited` when read.
            window: None,
        }),
        Resource::Group(g) => K::Group(pb::Group {
            name: g.name.clone(),
            ratio: g.ratio,
            deprecated: g.deprecated,
            description: g.description.clone(),
            rate_limit: pb_rate_limit(g.rate_limit),
            tokens_per_minute: g.tokens_per_minute,
            max_in_flight: g.max_in_flight,
        }),
        Resource::Token(t) => {
            let limits = t.restrictions();
            K::Token(pb::Token {
                id: t.id.to_string(),
                account_id: t.account_id.to_string(),
                group: t.group.to_string(),
                // The data plane keeps no name, key prefix or creation time.
                name: String::new(),
                key_hash: hex::encode(t.key_hash),
                key_prefix: String::new(),
                status: status(t.enabled),
                expires_at: limits.expires_at,
                unlimited: t.unlimited,
                quota_micros: t.quota_micros,
                used_micros: t.used_micros,
                models: limits.models.clone(),
                allow_ips: limits.allow_ips.iter().map(ToString::to_string).collect(),
                rate_limit: pb_rate_limit(limits.rate_limit),
                created_at: 0,
                tokens_per_minute: limits.tokens_per_minute,
                max_in_flight: limits.max_in_flight,
                window: None,
            })
        }
        Resource::Channel(c) => K::Channel(pb::Channel {
            id: c.id.clone(),
            name: c.name.clone(),
            r#type: c.kind.name().into(),
            settings: c.settings.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            base_url: c.base_url.clone(),
            // Read only when the pool is empty (a channel built without one).
            api_key: c.api_key.clone(),
            keys: c
                .keys
                .iter()
                .map(|k| pb::ChannelKey {
                    id: k.id.clone(),
                    key: k.key.clone(),
                    status: if k.enabled { ENABLED } else { DISABLED }.into(),
                    ..pb::ChannelKey::default()
                })
                .collect(),
            models: c.models.to_vec(),
            model_map: c.model_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            groups: c.groups.to_vec(),
            priority: c.priority,
            weight: c.weight,
            status: match c.status {
                ChannelStatus::Enabled => ENABLED,
                ChannelStatus::Disabled => DISABLED,
                ChannelStatus::AutoDisabled => AUTO_DISABLED,
            }
            .into(),
            connect_timeout_ms: ms(c.timeouts.connect),
            first_byte_timeout_ms: ms(c.timeouts.first_byte),
            idle_timeout_ms: ms(c.timeouts.idle),
            total_timeout_ms: ms(c.timeouts.total),
            has_key: !c.keys.is_empty() || !c.api_key.is_empty(),
        }),
        Resource::Model(m) => K::Model(pb::Model {
            id: m.id.clone(),
            category: m.category.clone(),
            input_price_micros: m.input_price_micros,
            output_price_micros: m.output_price_micros,
            cached_price_micros: m.cached_price_micros,
            request_price_micros: m.request_price_micros,
            second_price_micros: m.second_price_micros,
            image_price_micros: m.image_price_micros,
            owned_by: m.owned_by.clone(),
            tier_threshold_tokens: m.tier_threshold_tokens,
            tier_input_price_micros: m.tier_input_price_micros,
            tier_output_price_micros: m.tier_output_price_micros,
            tier_cached_price_micros: m.tier_cached_price_micros,
            cache_write_5m_price_micros: m.cache_write_5m_price_micros,
            cache_write_1h_price_micros: m.cache_write_1h_price_micros,
            reasoning_price_micros: m.reasoning_price_micros,
            search_unit_price_micros: m.search_unit_price_micros,
            audio_input_price_micros: m.audio_input_price_micros,
            audio_output_price_micros: m.audio_output_price_micros,
            audio_cached_price_micros: m.audio_cached_price_micros,
            // Batches are priced by the control plane alone.
            batch_price_ppm: 0,
        }),
    };
    pb::Resource { kind: Some(kind) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn pb_token(allow_ips: &[&str], key_hash: &str) -> pb::Resource {
        pb::Resource {
            kind: Some(pb::resource::Kind::Token(pb::Token {
                id: "t1".into(),
                key_hash: key_hash.into(),
                status: "enabled".into(),
                allow_ips: allow_ips.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn token_with_bad_cidr_is_rejected_by_name() {
        let err = resource(pb_token(&["10.0.0.0/8", "nope"], &"ab".repeat(32))).unwrap_err();
        assert_eq!(err.name, "token/t1");
        assert_eq!(err.reason, ConvertError::BadAllowIp("nope".into()));
    }

    #[test]
    fn token_with_short_hash_is_rejected() {
        let err = resource(pb_token(&[], "abcd")).unwrap_err();
        assert_eq!(err.reason, ConvertError::BadKeyHash);
    }

    #[test]
    fn token_round_trips_through_pb() {
        let r = resource(pb_token(&["10.1.2.3", "2001:db8::/32"], &"0f".repeat(32))).unwrap();
        let back = resource(to_pb(&r)).unwrap();
        assert_eq!(r, back);
    }

    #[test]
    fn channel_base_url_loses_trailing_slash_and_unknown_type_is_rejected() {
        let mk = |ty: &str| pb::Resource {
            kind: Some(pb::resource::Kind::Channel(pb::Channel {
                id: "c1".into(),
                r#type: ty.into(),
                base_url: "http://up/v1/".into(),
                status: "enabled".into(),
                ..Default::default()
            })),
        };
        let Resource::Channel(c) = resource(mk("openai")).unwrap() else { panic!("not a channel") };
        assert_eq!(c.base_url, "http://up/v1");
        assert!(c.is_enabled());
        assert_eq!(resource(mk("fax")).unwrap_err().name, "channel/c1");
    }

    #[test]
    fn an_unlimited_token_or_account_with_a_window_budget_is_capped_by_it() {
        let window = Some(pb::WindowBudget { period: "day".into(), quota_micros: 500, ..Default::default() });
        let t = token(pb::Token {
            id: "t1".into(),
            key_hash: "0f".repeat(32),
            unlimited: true,
            used_micros: 7_000,
            window: window.clone(),
            ..Default::default()
        })
        .unwrap();
        assert!(!t.unlimited);
        assert_eq!(t.quota_micros - t.used_micros, 500, "the window's quota is what the snapshot says is left");
        let back = resource(to_pb(&Resource::Token(t.clone()))).unwrap();
        assert_eq!(back, Resource::Token(t), "the snapshot file keeps the cap");
        let a = account(pb::Account { id: "a1".into(), unlimited: true, window, ..Default::default() }).unwrap();
        assert!(!a.unlimited && a.balance_micros == 500, "{a:?}");
        let none = Some(pb::WindowBudget { period: "none".into(), quota_micros: 500, ..Default::default() });
        let free =
            account(pb::Account { id: "a2".into(), unlimited: true, window: none, ..Default::default() }).unwrap();
        assert!(free.unlimited);
        let capped = pb::Account {
            id: "a3".into(),
            balance_micros: 9,
            window: Some(pb::WindowBudget { period: "week".into(), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(
            account(capped).unwrap().balance_micros,
            9,
            "a capped account keeps its balance; leases apply the window"
        );
    }

    #[test]
    fn group_ratio_becomes_ppm() {
        let g = group(pb::Group { name: "g".into(), ratio: 1.5, ..Default::default() }).unwrap();
        assert_eq!(g.ratio_ppm, 1_500_000);
        assert!(group(pb::Group { name: "g".into(), ratio: f64::NAN, ..Default::default() }).is_err());
    }
}
