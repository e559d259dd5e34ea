//! Documents to and from the AdminService's messages: what the control
//! plane holds as a document (for comparing and for export), and the one
//! Create or Update request that makes an object what its document says,
//! every field of the document in it.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};
use gw_proto::pb;

use super::document::{Account, Channel, Group, Model, Period, Token, Window};
use super::values::{Expires, RateLimit, Ratio, Status, Usd};

/// Every setting any channel type has: an update names each that its
/// document leaves out with an empty value, which removes it, so the
/// channel ends with exactly the document's settings.
const SETTINGS: [&str; 8] =
    ["resource", "deployment", "api_version", "auth", "region", "project", "location", "token_url"];

// === groups ===

pub fn group_doc(g: &pb::Group) -> Group {
    Group {
        tag: String::new(),
        name: g.name.clone(),
        ratio: Ratio(gw_pricing::wire::ratio_ppm(g.ratio).unwrap_or(0)),
        deprecated: g.deprecated,
        description: g.description.clone(),
        rate_limit: RateLimit::from_wire(g.rate_limit.as_ref()),
        tokens_per_minute: g.tokens_per_minute,
        max_in_flight: g.max_in_flight,
    }
}

pub fn create_group(g: &Group) -> pb::Group {
    pb::Group {
        name: g.name.clone(),
        ratio: gw_pricing::wire::ratio(g.ratio.0),
        deprecated: g.deprecated,
        description: g.description.clone(),
        rate_limit: Some(RateLimit::to_wire(g.rate_limit)),
        tokens_per_minute: g.tokens_per_minute,
        max_in_flight: g.max_in_flight,
    }
}

pub fn update_group(g: &Group) -> pb::UpdateGroupRequest {
    pb::UpdateGroupRequest {
        name: g.name.clone(),
        ratio: Some(gw_pricing::wire::ratio(g.ratio.0)),
        deprecated: Some(g.deprecated),
        description: Some(g.description.clone()),
        rate_limit: Some(RateLimit::to_wire(g.rate_limit)),
        tokens_per_minute: Some(g.tokens_per_minute),
        max_in_flight: Some(g.max_in_flight),
    }
}

// === models ===

pub fn model_doc(m: &pb::Model) -> Model {
    let mut model = Model {
        tag: String::new(),
        name: m.id.clone(),
        category: m.category.clone(),
        owned_by: m.owned_by.clone(),
        free: false,
        input_price: Usd(m.input_price_micros),
        output_price: Usd(m.output_price_micros),
        cached_price: Usd(m.cached_price_micros),
        request_price: Usd(m.request_price_micros),
        second_price: Usd(m.second_price_micros),
        image_price: Usd(m.image_price_micros),
        tier_threshold: m.tier_threshold_tokens,
        tier_input_price: Usd(m.tier_input_price_micros),
        tier_output_price: Usd(m.tier_output_price_micros),
        tier_cached_price: Usd(m.tier_cached_price_micros),
        cache_write_5m_price: Usd(m.cache_write_5m_price_micros),
        cache_write_1h_price: Usd(m.cache_write_1h_price_micros),
        reasoning_price: Usd(m.reasoning_price_micros),
        search_unit_price: Usd(m.search_unit_price_micros),
        audio_input_price: Usd(m.audio_input_price_micros),
        audio_output_price: Usd(m.audio_output_price_micros),
        audio_cached_price: Usd(m.audio_cached_price_micros),
        batch_price_ratio: Ratio(m.batch_price_ppm),
    };
    model.free = !priced(&model);
    model
}

/// Whether a model has a price a request pays: a token, request, second,
/// image or search unit price.
pub fn priced(m: &Model) -> bool {
    [m.input_price, m.output_price, m.request_price, m.second_price, m.image_price, m.search_unit_price]
        .iter()
        .any(|price| price.0 > 0)
}

pub fn create_model(m: &Model) -> pb::Model {
    pb::Model {
        id: m.name.clone(),
        category: m.category.clone(),
        owned_by: m.owned_by.clone(),
        input_price_micros: m.input_price.0,
        output_price_micros: m.output_price.0,
        cached_price_micros: m.cached_price.0,
        request_price_micros: m.request_price.0,
        second_price_micros: m.second_price.0,
        image_price_micros: m.image_price.0,
        tier_threshold_tokens: m.tier_threshold,
        tier_input_price_micros: m.tier_input_price.0,
        tier_output_price_micros: m.tier_output_price.0,
        tier_cached_price_micros: m.tier_cached_price.0,
        cache_write_5m_price_micros: m.cache_write_5m_price.0,
        cache_write_1h_price_micros: m.cache_write_1h_price.0,
        reasoning_price_micros: m.reasoning_price.0,
        search_unit_price_micros: m.search_unit_price.0,
        audio_input_price_micros: m.audio_input_price.0,
        audio_output_price_micros: m.audio_output_price.0,
        audio_cached_price_micros: m.audio_cached_price.0,
        batch_price_ppm: m.batch_price_ratio.0,
    }
}

pub fn update_model(m: &Model) -> pb::UpdateModelRequest {
    let all = create_model(m);
    pb::UpdateModelRequest {
        id: all.id,
        category: Some(all.category),
        owned_by: Some(all.owned_by),
        input_price_micros: Some(all.input_price_micros),
        output_price_micros: Some(all.output_price_micros),
        cached_price_micros: Some(all.cached_price_micros),
        request_price_micros: Some(all.request_price_micros),
        second_price_micros: Some(all.second_price_micros),
        image_price_micros: Some(all.image_price_micros),
        tier_threshold_tokens: Some(all.tier_threshold_tokens),
        tier_input_price_micros: Some(all.tier_input_price_micros),
        tier_output_price_micros: Some(all.tier_output_price_micros),
        tier_cached_price_micros: Some(all.tier_cached_price_micros),
        cache_write_5m_price_micros: Some(all.cache_write_5m_price_micros),
        cache_write_1h_price_micros: Some(all.cache_write_1h_price_micros),
        reasoning_price_micros: Some(all.reasoning_price_micros),
        search_unit_price_micros: Some(all.search_unit_price_micros),
        audio_input_price_micros: Some(all.audio_input_price_micros),
        audio_output_price_micros: Some(all.audio_output_price_micros),
        audio_cached_price_micros: Some(all.audio_cached_price_micros),
        batch_price_ppm: Some(all.batch_price_ppm),
    }
}

// === channels ===

/// The channel as a document, its base URL always written out.
pub fn channel_doc(c: &pb::Channel) -> Channel {
    Channel {
        tag: String::new(),
        name: c.name.clone(),
        kind: c.r#type.clone(),
        base_url: Some(c.base_url.clone()),
        settings: c.settings.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        models: sorted(&c.models),
        model_map: c.model_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        groups: sorted(&c.groups),
        priority: c.priority,
        weight: c.weight,
        status: Status::from_wire(&c.status),
        connect_timeout_ms: c.connect_timeout_ms,
        first_byte_timeout_ms: c.first_byte_timeout_ms,
        idle_timeout_ms: c.idle_timeout_ms,
        total_timeout_ms: c.total_timeout_ms,
        key_from: None,
        api_key: None,
    }
}

/// The document as the control plane will hold it: lists sorted, the
/// weight at least 1, and the type's settings and base URL completed by
/// the control plane's own rules. Fails as the control plane would.
pub fn normalize_channel(c: &mut Channel) -> Result<()> {
    c.models = sorted(&c.models);
    c.groups = if c.groups.is_empty() { vec!["default".into()] } else { sorted(&c.groups) };
    c.weight = c.weight.max(1);
    let mut domain: gw_control_plane::domain::Channel = pb::Channel {
        r#type: c.kind.clone(),
        base_url: c.base_url.clone().unwrap_or_default(),
        settings: c.settings.clone().into_iter().collect(),
        ..Default::default()
    }
    .into();
    gw_control_plane::domain::channel_kind::prepare(&mut domain).map_err(|invalid| anyhow!("{}", invalid.0))?;
    c.settings = domain.settings;
    c.base_url = Some(domain.base_url);
    Ok(())
}

/// Whether the base URL is the one the type gets by default (export leaves
/// it out).
pub fn is_default_base_url(c: &Channel) -> bool {
    let default = gw_control_plane::domain::channel_kind::default_base_url(&c.kind, &c.settings);
    default.ok().as_deref() == c.base_url.as_deref()
}

pub fn create_channel(c: &Channel, key: Option<&str>) -> pb::Channel {
    pb::Channel {
        name: c.name.clone(),
        r#type: c.kind.clone(),
        base_url: c.base_url.clone().unwrap_or_default(),
        has_key: key.is_some(),
        api_key: key.unwrap_or_default().to_owned(),
        models: c.models.clone(),
        model_map: c.model_map.clone().into_iter().collect(),
        groups: c.groups.clone(),
        priority: c.priority,
        weight: c.weight,
        status: c.status.as_str().to_owned(),
        connect_timeout_ms: c.connect_timeout_ms,
        first_byte_timeout_ms: c.first_byte_timeout_ms,
        idle_timeout_ms: c.idle_timeout_ms,
        total_timeout_ms: c.total_timeout_ms,
        settings: c.settings.clone().into_iter().collect(),
        ..Default::default()
    }
}

/// The update to `c` of the channel `id`; `key` replaces its key pool when
/// given; `current_status` keeps a channel the control plane took out of
/// rotation out when the document says enabled.
pub fn update_channel(id: &str, c: &Channel, key: Option<&str>, current_status: &str) -> pb::UpdateChannelRequest {
    let mut settings: BTreeMap<String, String> =
        SETTINGS.iter().map(|name| (name.to_string(), String::new())).collect();
    settings.extend(c.settings.clone());
    let status = match (c.status, current_status) {
        (Status::Enabled, "auto_disabled") => None,
        (status, _) => Some(status.as_str().to_owned()),
    };
    pb::UpdateChannelRequest {
        id: id.to_owned(),
        name: Some(c.name.clone()),
        base_url: Some(c.base_url.clone().unwrap_or_default()),
        api_key: key.map(str::to_owned),
        set_models: true,
        models: c.models.clone(),
        set_groups: true,
        groups: c.groups.clone(),
        set_model_map: true,
        model_map: c.model_map.clone().into_iter().collect(),
        priority: Some(c.priority),
        weight: Some(c.weight),
        status,
        r#type: Some(c.kind.clone()),
        settings: settings.into_iter().collect(),
        connect_timeout_ms: Some(c.connect_timeout_ms),
        first_byte_timeout_ms: Some(c.first_byte_timeout_ms),
        idle_timeout_ms: Some(c.idle_timeout_ms),
        total_timeout_ms: Some(c.total_timeout_ms),
    }
}

/// Whether the channel's key is `fingerprint` alone.
pub fn has_only_key(c: &pb::Channel, fingerprint: &str) -> bool {
    matches!(c.keys.as_slice(), [only] if only.fingerprint == fingerprint)
}

/// A key as the control plane stores it (a JSON key on one line), and its
/// fingerprint as AdminService answers show it.
pub fn stored_key(key: &str) -> (String, String) {
    let key = gw_control_plane::domain::channel_kind::compact_json(key.trim());
    let fingerprint = gw_control_plane::api::convert::key_fingerprint(&key);
    (key, fingerprint)
}

// === accounts ===

pub fn account_doc(a: &pb::Account) -> Account {
    Account {
        tag: String::new(),
        name: a.name.clone(),
        groups: sorted(&a.groups),
        unlimited: a.unlimited,
        status: Status::from_wire(&a.status),
        window: window_doc(a.window.as_ref()),
    }
}

pub fn create_account(a: &Account) -> pb::CreateAccountRequest {
    pb::CreateAccountRequest {
        name: a.name.clone(),
        balance_micros: 0,
        unlimited: a.unlimited,
        groups: a.groups.clone(),
        window: Some(window_wire(a.window.as_ref())),
    }
}

pub fn update_account(id: &str, a: &Account) -> pb::UpdateAccountRequest {
    pb::UpdateAccountRequest {
        id: id.to_owned(),
        name: Some(a.name.clone()),
        unlimited: Some(a.unlimited),
        set_groups: true,
        groups: a.groups.clone(),
        status: Some(a.status.as_str().to_owned()),
        window: Some(window_wire(a.window.as_ref())),
    }
}

// === tokens ===

/// The token as a document, within the account named `account`.
pub fn token_doc(t: &pb::Token, account: &str) -> Token {
    Token {
        tag: String::new(),
        account: account.to_owned(),
        name: t.name.clone(),
        group: t.group.clone(),
        models: sorted(&t.models),
        allow_ips: sorted(&t.allow_ips),
        rate_limit: RateLimit::from_wire(t.rate_limit.as_ref()),
        quota: (!t.unlimited).then_some(Usd(t.quota_micros)),
        expires: (t.expires_at > 0).then_some(Expires(t.expires_at)),
        tokens_per_minute: t.tokens_per_minute,
        max_in_flight: t.max_in_flight,
        window: window_doc(t.window.as_ref()),
        status: Status::from_wire(&t.status),
        key_file: None,
    }
}

/// A new token as one import row, so that it is written whole, its status
/// included, in one step; the control plane mints the key.
pub fn import_token(account_id: &str, t: &Token) -> pb::ImportToken {
    pb::ImportToken {
        account_id: account_id.to_owned(),
        group: t.group.clone(),
        name: t.name.clone(),
        key: String::new(),
        unlimited: t.quota.is_none(),
        quota_micros: t.quota.map_or(0, |q| q.0),
        models: t.models.clone(),
        allow_ips: t.allow_ips.clone(),
        expires_at: t.expires.map_or(0, |e| e.0),
        rate_limit: Some(RateLimit::to_wire(t.rate_limit)),
        status: t.status.as_str().to_owned(),
        tokens_per_minute: t.tokens_per_minute,
        max_in_flight: t.max_in_flight,
        window: Some(window_wire(t.window.as_ref())),
    }
}

pub fn update_token(id: &str, t: &Token) -> pb::UpdateTokenRequest {
    pb::UpdateTokenRequest {
        id: id.to_owned(),
        name: Some(t.name.clone()),
        group: Some(t.group.clone()),
        status: Some(t.status.as_str().to_owned()),
        unlimited: Some(t.quota.is_none()),
        quota_micros: Some(t.quota.map_or(0, |q| q.0)),
        set_models: true,
        models: t.models.clone(),
        set_allow_ips: true,
        allow_ips: t.allow_ips.clone(),
        expires_at: Some(t.expires.map_or(0, |e| e.0)),
        rate_limit: Some(RateLimit::to_wire(t.rate_limit)),
        tokens_per_minute: Some(t.tokens_per_minute),
        max_in_flight: Some(t.max_in_flight),
        window: Some(window_wire(t.window.as_ref())),
    }
}

// === windows ===

fn window_doc(w: Option<&pb::WindowBudget>) -> Option<Window> {
    let w = w?;
    let period = match w.period.as_str() {
        "day" => Period::Day,
        "week" => Period::Week,
        "month" => Period::Month,
        "rolling" => Period::Rolling,
        _ => return None,
    };
    let rolling = period == Period::Rolling;
    Some(Window {
        period,
        quota: Usd(w.quota_micros),
        rolling_hours: if rolling { w.rolling_hours } else { 0 },
        // A rolling window counts UTC hours: its zone means nothing.
        time_zone: (!rolling && !w.time_zone.is_empty()).then(|| w.time_zone.clone()),
    })
}

/// The budget to send: period `none` removes one.
fn window_wire(w: Option<&Window>) -> pb::WindowBudget {
    let Some(w) = w else { return pb::WindowBudget { period: "none".into(), ..Default::default() } };
    let period = match w.period {
        Period::Day => "day",
        Period::Week => "week",
        Period::Month => "month",
        Period::Rolling => "rolling",
    };
    pb::WindowBudget {
        period: period.into(),
        rolling_hours: w.rolling_hours,
        quota_micros: w.quota.0,
        time_zone: w.time_zone.clone().unwrap_or_default(),
        ..Default::default()
    }
}

fn sorted(items: &[String]) -> Vec<String> {
    let mut items: Vec<String> = items.iter().map(|item| item.trim().to_owned()).filter(|i| !i.is_empty()).collect();
    items.sort();
    items.dedup();
    items
}

/// Lists sorted and repeats dropped, as `sorted` does for what the control
/// plane holds.
pub fn normalize_lists(items: &mut Vec<String>) {
    *items = sorted(items);
}
