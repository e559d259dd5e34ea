//! gwctl's JSON (and YAML) contract: one struct per resource, written by
//! gwctl from the wire types, so a protobuf change never changes what
//! scripts parse. Money is integer micro-USD (`*_micros`) beside an exact
//! decimal string of US dollars with six decimals (`*_usd`); times are Unix
//! seconds, 0 for "not set"; no secret or key hash ever appears.
//! docs/gwctl.md lists these fields; `tests` pins each shape with a golden file.

use std::collections::BTreeMap;

use gw_pricing::wire;
use gw_proto::pb;
use serde::Serialize;

/// An account.
#[derive(Debug, Serialize)]
pub struct Account {
    pub id: String,
    pub name: String,
    pub status: String,
    pub balance_micros: i64,
    pub balance_usd: String,
    pub unlimited: bool,
    pub used_micros: i64,
    pub used_usd: String,
    pub groups: Vec<String>,
    pub created_at: i64,
    /// The cap per window beside the balance; null for none.
    pub window: Option<Window>,
}

/// A spending cap per window (a calendar day, week or month in a time
/// zone, or rolling hours) and where the current window stands.
#[derive(Debug, Serialize)]
pub struct Window {
    /// `day`, `week` (from Monday), `month` or `rolling`.
    pub period: String,
    /// Hours of a rolling window; 0 for the others.
    pub rolling_hours: u32,
    pub time_zone: String,
    pub quota_micros: i64,
    pub quota_usd: String,
    /// Spent in the current window.
    pub used_micros: i64,
    pub used_usd: String,
    /// What is left of the current window's quota.
    pub remaining_micros: i64,
    pub remaining_usd: String,
    /// RFC 3339 in the time zone: when the current window started and
    /// when it resets (rolling: when its oldest hour leaves it).
    pub window_start: String,
    pub resets_at: String,
}

/// A group, named by its name.
#[derive(Debug, Serialize)]
pub struct Group {
    pub name: String,
    /// The price multiplier as exact decimal text ("1.5").
    pub ratio: String,
    /// The same multiplier in parts per million.
    pub ratio_ppm: i64,
    pub deprecated: bool,
    pub description: String,
    pub rate_limit: Option<RateLimit>,
    /// Tokens per minute per account; 0: no limit.
    pub tokens_per_minute: u32,
    /// Requests in flight per account; 0: no limit.
    pub max_in_flight: u32,
}

/// Requests allowed per window; absent (null) when there is no limit.
#[derive(Debug, Serialize)]
pub struct RateLimit {
    pub max_requests: u32,
    pub window_minutes: u32,
}

/// A token; its key is shown once, as `key` of `token create`.
#[derive(Debug, Serialize)]
pub struct Token {
    pub id: String,
    pub name: String,
    pub account_id: String,
    pub group: String,
    pub key_prefix: String,
    pub status: String,
    pub unlimited: bool,
    pub quota_micros: i64,
    pub quota_usd: String,
    pub used_micros: i64,
    pub used_usd: String,
    /// Empty: every model of the group.
    pub models: Vec<String>,
    /// Empty: any source address.
    pub allow_ips: Vec<String>,
    pub rate_limit: Option<RateLimit>,
    /// Tokens per minute; 0: no limit.
    pub tokens_per_minute: u32,
    /// Requests in flight; 0: no limit.
    pub max_in_flight: u32,
    pub expires_at: i64,
    pub created_at: i64,
    /// The cap per window beside the quota; null for none.
    pub window: Option<Window>,
}

/// A token as created: the token and its key.
#[derive(Debug, Serialize)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub token: Token,
    pub key: String,
}

/// An upstream channel; its key is never shown, only whether it has one.
#[derive(Debug, Serialize)]
pub struct Channel {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub base_url: String,
    pub has_key: bool,
    pub models: Vec<String>,
    pub model_map: BTreeMap<String, String>,
    pub groups: Vec<String>,
    pub priority: i32,
    pub weight: u32,
    /// Timeouts in milliseconds; 0 takes the data plane's default.
    pub connect_timeout_ms: u32,
    pub first_byte_timeout_ms: u32,
    pub idle_timeout_ms: u32,
    pub total_timeout_ms: u32,
    /// The key pool, by prefix.
    pub keys: Vec<ChannelKey>,
}

/// One upstream key of a channel's pool: never the key, only its first
/// characters.
#[derive(Debug, Serialize)]
pub struct ChannelKey {
    pub id: String,
    pub prefix: String,
    /// `enabled`, `disabled` or `auto_disabled` (the upstream refused it).
    pub status: String,
    pub disabled_reason: String,
    /// Unix seconds; 0 when enabled.
    pub disabled_at: i64,
    pub created_at: i64,
}

/// A catalogue model; token prices are per 1M tokens.
#[derive(Debug, Serialize)]
pub struct Model {
    pub id: String,
    pub category: String,
    pub input_price_micros: i64,
    pub input_price_usd: String,
    pub output_price_micros: i64,
    pub output_price_usd: String,
    pub cached_price_micros: i64,
    pub cached_price_usd: String,
    pub request_price_micros: i64,
    pub request_price_usd: String,
    pub second_price_micros: i64,
    pub second_price_usd: String,
    pub image_price_micros: i64,
    pub image_price_usd: String,
    pub owned_by: String,
    /// Prompt tokens above which the whole request bills at the tier
    /// prices; 0: no tier. A tier price of 0 keeps the base price.
    pub tier_threshold_tokens: i64,
    pub tier_input_price_micros: i64,
    pub tier_input_price_usd: String,
    pub tier_output_price_micros: i64,
    pub tier_output_price_usd: String,
    pub tier_cached_price_micros: i64,
    pub tier_cached_price_usd: String,
    /// Cache writes kept 5 minutes / 1 hour; 0: the input price.
    pub cache_write_5m_price_micros: i64,
    pub cache_write_5m_price_usd: String,
    pub cache_write_1h_price_micros: i64,
    pub cache_write_1h_price_usd: String,
    /// 0: the output price.
    pub reasoning_price_micros: i64,
    pub reasoning_price_usd: String,
}

/// One usage record.
#[derive(Debug, Serialize)]
pub struct Usage {
    pub request_id: String,
    pub created_at: i64,
    pub token_id: String,
    pub account_id: String,
    pub group: String,
    pub model: String,
    pub channel_id: String,
    pub endpoint: String,
    /// The HTTP status of the answer.
    pub status: u32,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    /// Parts of `prompt_tokens` written to the cache for 5 minutes / 1 hour.
    pub cache_write_5m_tokens: i64,
    pub cache_write_1h_tokens: i64,
    /// Part of `completion_tokens` spent reasoning.
    pub reasoning_tokens: i64,
    /// The price tier billed: 0 base, 1 long context.
    pub tier: u32,
    pub images: i64,
    pub audio_millis: i64,
    /// Token counts were estimated, not reported by the upstream.
    pub estimated: bool,
    pub cost_micros: i64,
    pub cost_usd: String,
    pub latency_ms: u32,
    pub node_id: String,
}

/// `usage summary`: sums of usage over `[from, to)`, grouped by `group_by`.
#[derive(Debug, Serialize)]
pub struct UsageSummary {
    /// The range summed (whole hours, Unix seconds).
    pub from: i64,
    pub to: i64,
    /// `hour` or `day`, then any of `account`, `token`, `model`, `channel`.
    pub group_by: Vec<String>,
    pub rows: Vec<UsageSummaryRow>,
    /// The sums of every row.
    pub totals: UsageCounts,
}

/// One group of a usage summary: its bucket (0 unless grouped by time) and
/// dimensions (empty unless grouped by them).
#[derive(Debug, Serialize)]
pub struct UsageSummaryRow {
    pub bucket_start: i64,
    pub account_id: String,
    pub token_id: String,
    pub model: String,
    pub channel_id: String,
    #[serde(flatten)]
    pub counts: UsageCounts,
}

/// The sums of a usage summary row.
#[derive(Debug, Default, Serialize)]
pub struct UsageCounts {
    /// Requests; a refund counts none.
    pub requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub images: i64,
    pub audio_millis: i64,
    /// Net of refunds.
    pub cost_micros: i64,
    pub cost_usd: String,
}

/// `doctor`: the calls made for one key, in order, and the conclusion.
#[derive(Debug, Serialize)]
pub struct Doctor {
    /// The address checked, as an SDK's base URL.
    pub base_url: String,
    /// Every call answered as it should.
    pub ok: bool,
    pub checks: Vec<DoctorCheck>,
    pub diagnosis: Diagnosis,
}

/// One call of `doctor`.
#[derive(Debug, Serialize)]
pub struct DoctorCheck {
    /// `GET /v1/models` or `POST /v1/chat/completions`.
    pub request: String,
    /// The model a chat was sent to; empty for the list.
    pub model: String,
    pub ok: bool,
    /// The HTTP status; 0 when no answer came.
    pub status: u16,
    /// The error message of a failure (or the connection error); what an
    /// answer held otherwise.
    pub message: String,
    pub request_id: String,
    pub latency_ms: u64,
}

/// What `doctor` concluded, after the error catalogue of docs/errors.md.
#[derive(Debug, Serialize)]
pub struct Diagnosis {
    /// `ok`, `configuration` (a 4xx) or `link` (a 5xx, or no answer).
    pub kind: String,
    /// Where the failure lies: `none`, `key`, `account`, `group`, `model`,
    /// `address` or `gateway`.
    pub scope: String,
    /// `scope` in words; empty when all is well.
    pub limited_to: String,
    pub cause: String,
    pub remedy: String,
    /// Whether retrying (with backoff, a bounded number of times) may help.
    pub retry: bool,
}

/// A video generation task.
#[derive(Debug, Serialize)]
pub struct Video {
    pub id: String,
    pub status: String,
    pub progress: u32,
    pub account_id: String,
    pub token_id: String,
    pub group: String,
    pub model: String,
    pub channel_id: String,
    pub upstream_id: String,
    pub seconds: u32,
    pub size: String,
    pub cost_micros: i64,
    pub cost_usd: String,
    pub refunded: bool,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: i64,
    pub error_code: String,
    pub error_message: String,
    /// The upstream's other fields, as an object (null when none).
    pub extra: Option<serde_json::Value>,
}

/// A data plane as the control plane sees it.
#[derive(Debug, Serialize)]
pub struct DataPlane {
    pub node_id: String,
    pub address: String,
    pub version: String,
    /// `in sync`, `behind`, `disconnected` or `gone` (silent for 15 s).
    pub state: String,
    pub connected: bool,
    pub acked_revision: u64,
    pub sent_revision: u64,
    pub control_plane_revision: u64,
    pub behind: u64,
    pub connected_at: i64,
    pub last_seen: i64,
    pub last_error: String,
    /// The control-plane replica holding its watch stream.
    pub replica: String,
    /// Usage records waiting in its spool, as of its last heartbeat.
    pub spool_backlog: u64,
    pub requests_per_second: f64,
}

/// The control plane's store, as `gwctl store status` shows it.
#[derive(Debug, Serialize)]
pub struct StoreStatus {
    /// The store's lineage: changes when it is confirmed after losing data.
    pub store_id: String,
    pub confirmed: bool,
    pub revision: u64,
    /// `aof`, `rdb`, `aof+rdb`, `none`, `durable` (embedded) or `unknown`.
    pub persistence: String,
    /// Why the control plane refuses to serve the store; null when it does not.
    pub suspect: Option<String>,
}

impl From<&pb::StoreStatus> for StoreStatus {
    fn from(s: &pb::StoreStatus) -> StoreStatus {
        StoreStatus {
            store_id: s.store_id.clone(),
            confirmed: s.confirmed,
            revision: s.revision,
            persistence: s.persistence.clone(),
            suspect: (!s.suspect.is_empty()).then(|| s.suspect.clone()),
        }
    }
}

/// An admin credential; its secret is shown once, as `key` of
/// `credentials create` and `credentials rotate`, and its hash never.
#[derive(Debug, Serialize)]
pub struct Credential {
    pub id: String,
    pub name: String,
    /// `admin`, `operator-readonly` or `account`.
    pub role: String,
    /// The account of an `account` credential; empty for the other roles.
    pub account_id: String,
    pub key_prefix: String,
    pub created_at: i64,
    /// 0 for never; kept to the minute.
    pub last_used_at: i64,
    /// 0 for never.
    pub rotated_at: i64,
}

/// A credential as created or rotated: the credential and its secret, or,
/// when the secret went to a file, null and the file's path.
#[derive(Debug, Serialize)]
pub struct CreatedCredential {
    #[serde(flatten)]
    pub credential: Credential,
    pub key: Option<String>,
    pub key_file: Option<String>,
}

/// One entry of the audit log of admin writes.
#[derive(Debug, Serialize)]
pub struct AuditEntry {
    /// Position in the log; larger is newer.
    pub seq: u64,
    pub at: i64,
    pub actor_id: String,
    pub actor_role: String,
    pub method: String,
    pub kind: String,
    pub target: String,
    /// `ok`, or the gRPC code of the failure (`permission_denied`, …).
    pub outcome: String,
}

/// A page of a list: the items and the token of the next page (null on
/// the last), for `--continue`.
#[derive(Debug, Serialize)]
pub struct List<T> {
    pub items: Vec<T>,
    #[serde(rename = "continue")]
    pub next: Option<String>,
}

/// The outcome of a delete (`deleted` false with `dry_run`).
#[derive(Debug, Serialize)]
pub struct Deleted {
    pub kind: String,
    pub id: String,
    pub deleted: bool,
    pub dry_run: bool,
}

/// Exact US dollars with six decimals: `5_500_000` → `"5.500000"`.
pub fn usd(micros: i64) -> String {
    gw_pricing::format_usd(micros)
}

// === impl From<wire types> ===

impl From<&pb::Account> for Account {
    fn from(a: &pb::Account) -> Account {
        Account {
            id: a.id.clone(),
            name: a.name.clone(),
            status: a.status.clone(),
            balance_micros: a.balance_micros,
            balance_usd: usd(a.balance_micros),
            unlimited: a.unlimited,
            used_micros: a.used_micros,
            used_usd: usd(a.used_micros),
            groups: a.groups.clone(),
            created_at: a.created_at,
            window: a.window.as_ref().map(Window::from),
        }
    }
}

impl From<&pb::WindowBudget> for Window {
    fn from(w: &pb::WindowBudget) -> Window {
        Window {
            period: w.period.clone(),
            rolling_hours: w.rolling_hours,
            time_zone: w.time_zone.clone(),
            quota_micros: w.quota_micros,
            quota_usd: usd(w.quota_micros),
            used_micros: w.used_micros,
            used_usd: usd(w.used_micros),
            remaining_micros: w.remaining_micros,
            remaining_usd: usd(w.remaining_micros),
            window_start: w.window_start.clone(),
            resets_at: w.resets_at.clone(),
        }
    }
}

impl From<&pb::Group> for Group {
    fn from(g: &pb::Group) -> Group {
        let ppm = wire::ratio_ppm(g.ratio).unwrap_or(0);
        Group {
            name: g.name.clone(),
            ratio: gw_pricing::format_ratio(ppm),
            ratio_ppm: ppm,
            deprecated: g.deprecated,
            description: g.description.clone(),
            rate_limit: rate_limit(g.rate_limit.as_ref()),
            tokens_per_minute: g.tokens_per_minute,
            max_in_flight: g.max_in_flight,
        }
    }
}

impl From<&pb::Token> for Token {
    fn from(t: &pb::Token) -> Token {
        Token {
            id: t.id.clone(),
            name: t.name.clone(),
            account_id: t.account_id.clone(),
            group: t.group.clone(),
            key_prefix: t.key_prefix.clone(),
            status: t.status.clone(),
            unlimited: t.unlimited,
            quota_micros: t.quota_micros,
            quota_usd: usd(t.quota_micros),
            used_micros: t.used_micros,
            used_usd: usd(t.used_micros),
            models: t.models.clone(),
            allow_ips: t.allow_ips.clone(),
            rate_limit: rate_limit(t.rate_limit.as_ref()),
            tokens_per_minute: t.tokens_per_minute,
            max_in_flight: t.max_in_flight,
            expires_at: t.expires_at,
            created_at: t.created_at,
            window: t.window.as_ref().map(Window::from),
        }
    }
}

impl From<&pb::Channel> for Channel {
    fn from(c: &pb::Channel) -> Channel {
        Channel {
            id: c.id.clone(),
            name: c.name.clone(),
            kind: c.r#type.clone(),
            status: c.status.clone(),
            base_url: c.base_url.clone(),
            has_key: c.has_key,
            models: c.models.clone(),
            model_map: c.model_map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            groups: c.groups.clone(),
            priority: c.priority,
            weight: c.weight,
            connect_timeout_ms: c.connect_timeout_ms,
            first_byte_timeout_ms: c.first_byte_timeout_ms,
            idle_timeout_ms: c.idle_timeout_ms,
            total_timeout_ms: c.total_timeout_ms,
            keys: c.keys.iter().map(ChannelKey::from).collect(),
        }
    }
}

impl From<&pb::ChannelKey> for ChannelKey {
    fn from(k: &pb::ChannelKey) -> ChannelKey {
        ChannelKey {
            id: k.id.clone(),
            prefix: k.prefix.clone(),
            status: k.status.clone(),
            disabled_reason: k.disabled_reason.clone(),
            disabled_at: k.disabled_at,
            created_at: k.created_at,
        }
    }
}

impl From<&pb::Model> for Model {
    fn from(m: &pb::Model) -> Model {
        Model {
            id: m.id.clone(),
            category: m.category.clone(),
            input_price_micros: m.input_price_micros,
            input_price_usd: usd(m.input_price_micros),
            output_price_micros: m.output_price_micros,
            output_price_usd: usd(m.output_price_micros),
            cached_price_micros: m.cached_price_micros,
            cached_price_usd: usd(m.cached_price_micros),
            request_price_micros: m.request_price_micros,
            request_price_usd: usd(m.request_price_micros),
            second_price_micros: m.second_price_micros,
            second_price_usd: usd(m.second_price_micros),
            image_price_micros: m.image_price_micros,
            image_price_usd: usd(m.image_price_micros),
            owned_by: m.owned_by.clone(),
            tier_threshold_tokens: m.tier_threshold_tokens,
            tier_input_price_micros: m.tier_input_price_micros,
            tier_input_price_usd: usd(m.tier_input_price_micros),
            tier_output_price_micros: m.tier_output_price_micros,
            tier_output_price_usd: usd(m.tier_output_price_micros),
            tier_cached_price_micros: m.tier_cached_price_micros,
            tier_cached_price_usd: usd(m.tier_cached_price_micros),
            cache_write_5m_price_micros: m.cache_write_5m_price_micros,
            cache_write_5m_price_usd: usd(m.cache_write_5m_price_micros),
            cache_write_1h_price_micros: m.cache_write_1h_price_micros,
            cache_write_1h_price_usd: usd(m.cache_write_1h_price_micros),
            reasoning_price_micros: m.reasoning_price_micros,
            reasoning_price_usd: usd(m.reasoning_price_micros),
        }
    }
}

impl From<&pb::UsageRecord> for Usage {
    fn from(r: &pb::UsageRecord) -> Usage {
        Usage {
            request_id: r.request_id.clone(),
            created_at: r.created_at,
            token_id: r.token_id.clone(),
            account_id: r.account_id.clone(),
            group: r.group.clone(),
            model: r.model.clone(),
            channel_id: r.channel_id.clone(),
            endpoint: r.endpoint.clone(),
            status: r.status,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_tokens: r.cached_tokens,
            cache_write_5m_tokens: r.cache_write_5m_tokens,
            cache_write_1h_tokens: r.cache_write_1h_tokens,
            reasoning_tokens: r.reasoning_tokens,
            tier: r.tier,
            images: r.images,
            audio_millis: r.audio_millis,
            estimated: r.estimated,
            cost_micros: r.cost_micros,
            cost_usd: usd(r.cost_micros),
            latency_ms: r.latency_ms,
            node_id: r.node_id.clone(),
        }
    }
}

impl From<&pb::VideoTask> for Video {
    fn from(t: &pb::VideoTask) -> Video {
        let extra = serde_json::from_str::<serde_json::Value>(&t.extra_json).ok().filter(|v| v.is_object());
        Video {
            id: t.id.clone(),
            status: t.status.clone(),
            progress: t.progress,
            account_id: t.account_id.clone(),
            token_id: t.token_id.clone(),
            group: t.group.clone(),
            model: t.model.clone(),
            channel_id: t.channel_id.clone(),
            upstream_id: t.upstream_id.clone(),
            seconds: t.seconds,
            size: t.size.clone(),
            cost_micros: t.cost_micros,
            cost_usd: usd(t.cost_micros),
            refunded: t.refunded,
            created_at: t.created_at,
            updated_at: t.updated_at,
            completed_at: t.completed_at,
            error_code: t.error_code.clone(),
            error_message: t.error_message.clone(),
            extra,
        }
    }
}

impl From<&pb::UsageSummaryRow> for UsageSummaryRow {
    fn from(r: &pb::UsageSummaryRow) -> UsageSummaryRow {
        UsageSummaryRow {
            bucket_start: r.bucket_start,
            account_id: r.account_id.clone(),
            token_id: r.token_id.clone(),
            model: r.model.clone(),
            channel_id: r.channel_id.clone(),
            counts: UsageCounts::sum(std::iter::once(r)),
        }
    }
}

impl From<&pb::Credential> for Credential {
    fn from(c: &pb::Credential) -> Credential {
        Credential {
            id: c.id.clone(),
            name: c.name.clone(),
            role: c.role.clone(),
            account_id: c.account_id.clone(),
            key_prefix: c.key_prefix.clone(),
            created_at: c.created_at,
            last_used_at: c.last_used_at,
            rotated_at: c.rotated_at,
        }
    }
}

impl UsageCounts {
    /// The sums of `rows`.
    pub fn sum<'a>(rows: impl IntoIterator<Item = &'a pb::UsageSummaryRow>) -> UsageCounts {
        let mut sums = UsageCounts::default();
        for r in rows {
            sums.requests += r.requests;
            sums.prompt_tokens += r.prompt_tokens;
            sums.completion_tokens += r.completion_tokens;
            sums.cached_tokens += r.cached_tokens;
            sums.images += r.images;
            sums.audio_millis += r.audio_millis;
            sums.cost_micros += r.cost_micros;
        }
        sums.cost_usd = usd(sums.cost_micros);
        sums
    }
}

impl From<&pb::AuditEntry> for AuditEntry {
    fn from(e: &pb::AuditEntry) -> AuditEntry {
        AuditEntry {
            seq: e.seq,
            at: e.at,
            actor_id: e.actor_id.clone(),
            actor_role: e.actor_role.clone(),
            method: e.method.clone(),
            kind: e.kind.clone(),
            target: e.target.clone(),
            outcome: e.outcome.clone(),
        }
    }
}

fn rate_limit(limit: Option<&pb::RateLimit>) -> Option<RateLimit> {
    limit
        .filter(|l| l.window_minutes > 0)
        .map(|l| RateLimit { max_requests: l.max_requests, window_minutes: l.window_minutes })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    //! Golden files: the JSON of each resource as scripts see it. A change
    //! here is a change of gwctl's documented contract (docs/gwctl.md, "JSON
    //! output"); update both on purpose, never one by accident.

    use super::*;
    use crate::output::json_text;

    const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

    /// Compares `value`'s JSON with `golden/<name>.json`; with
    /// `GWCTL_BLESS=1` writes the file instead.
    fn golden(name: &str, value: &impl Serialize) {
        let text = json_text(value).unwrap();
        let path = std::path::Path::new(GOLDEN).join(format!("{name}.json"));
        if std::env::var_os("GWCTL_BLESS").is_some() {
            std::fs::create_dir_all(GOLDEN).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(text, expected, "{} differs (GWCTL_BLESS=1 rewrites it)", path.display());
    }

    fn limit() -> Option<pb::RateLimit> {
        Some(pb::RateLimit { window_minutes: 1, max_requests: 60 })
    }

    #[test]
    fn account_json_is_pinned() {
        let account = pb::Account {
            id: "acc_1".into(),
            name: "acme".into(),
            balance_micros: 100_100_000,
            unlimited: false,
            groups: vec!["default".into(), "vip".into()],
            status: "enabled".into(),
            used_micros: 1,
            created_at: 1_798_761_600,
            window: None,
        };
        golden("account", &Account::from(&account));
    }

    #[test]
    fn group_json_is_pinned() {
        let group = pb::Group {
            name: "vip".into(),
            ratio: 0.000001,
            deprecated: false,
            description: "paying customers".into(),
            rate_limit: limit(),
            tokens_per_minute: 90_000,
            max_in_flight: 4,
        };
        golden("group", &Group::from(&group));
        let plain = pb::Group { name: "default".into(), ratio: 1.5, ..Default::default() };
        golden("group-without-limit", &Group::from(&plain));
    }

    #[test]
    fn token_json_is_pinned_and_has_no_hash() {
        let token = pb::Token {
            id: "tok_1".into(),
            account_id: "acc_1".into(),
            group: "default".into(),
            name: "ci".into(),
            key_hash: "0123456789abcdef".into(),
            key_prefix: "sk-abcd…wxyz".into(),
            status: "enabled".into(),
            expires_at: 1_798_761_600,
            unlimited: false,
            quota_micros: 5_000_000,
            used_micros: 3,
            models: vec!["gpt-4o".into()],
            allow_ips: vec!["10.0.0.0/8".into()],
            rate_limit: limit(),
            created_at: 1_700_000_000,
            tokens_per_minute: 20_000,
            max_in_flight: 2,
            window: None,
        };
        let created = CreatedToken { token: Token::from(&token), key: "sk-the-key".into() };
        golden("token-created", &created);
        let text = json_text(&Token::from(&token)).unwrap();
        assert!(!text.contains("hash") && !text.contains("0123456789abcdef"), "{text}");
        golden("token", &Token::from(&token));
        let window = pb::WindowBudget {
            period: "day".into(),
            rolling_hours: 0,
            quota_micros: 10_000_000,
            time_zone: "Europe/Berlin".into(),
            used_micros: 6_000_000,
            remaining_micros: 4_000_000,
            window_start: "2026-11-23T00:00:00+01:00".into(),
            resets_at: "2026-11-24T00:00:00+01:00".into(),
        };
        golden("token-window", &Token::from(&pb::Token { window: Some(window), ..token }));
    }

    #[test]
    fn channel_json_is_pinned_and_has_no_key() {
        let channel = pb::Channel {
            id: "ch_1".into(),
            name: "main".into(),
            r#type: "openai".into(),
            base_url: "https://api.openai.com/v1".into(),
            api_key: "sk-upstream-secret".into(),
            models: vec!["gpt-4o".into(), "gpt-4o-mini".into()],
            model_map: [("gpt-4o".to_string(), "gpt-4o-2024-08-06".to_string())].into(),
            groups: vec!["default".into()],
            priority: -1,
            weight: 3,
            status: "enabled".into(),
            connect_timeout_ms: 0,
            first_byte_timeout_ms: 30_000,
            idle_timeout_ms: 0,
            total_timeout_ms: 0,
            has_key: true,
            keys: vec![pb::ChannelKey {
                id: "k_0".into(),
                key: "sk-upstream-secret".into(),
                prefix: "sk-ups".into(),
                status: "enabled".into(),
                created_at: 1_700_000_000,
                ..Default::default()
            }],
        };
        let text = json_text(&Channel::from(&channel)).unwrap();
        assert!(!text.contains("secret"), "{text}");
        golden("channel", &Channel::from(&channel));
    }

    #[test]
    fn model_json_is_pinned() {
        let model = pb::Model {
            id: "gpt-4o".into(),
            category: "chat".into(),
            input_price_micros: 2_500_000,
            output_price_micros: 10_000_000,
            cached_price_micros: 1_250_000,
            request_price_micros: 1,
            second_price_micros: 0,
            image_price_micros: 0,
            owned_by: "openai".into(),
            tier_threshold_tokens: 200_000,
            tier_input_price_micros: 5_000_000,
            tier_output_price_micros: 0,
            tier_cached_price_micros: 0,
            cache_write_5m_price_micros: 3_125_000,
            cache_write_1h_price_micros: 5_000_000,
            reasoning_price_micros: 0,
        };
        golden("model", &Model::from(&model));
    }

    #[test]
    fn usage_json_is_pinned_without_scientific_notation() {
        let record = pb::UsageRecord {
            request_id: "req_1".into(),
            token_id: "tok_1".into(),
            account_id: "acc_1".into(),
            group: "default".into(),
            model: "gpt-4o".into(),
            channel_id: "ch_1".into(),
            endpoint: "/v1/chat/completions".into(),
            prompt_tokens: 11,
            completion_tokens: 7,
            cached_tokens: 0,
            cost_micros: 3,
            latency_ms: 120,
            status: 200,
            created_at: 1_798_761_600,
            node_id: "dp-1".into(),
            estimated: false,
            images: 0,
            audio_millis: 0,
            cache_write_5m_tokens: 2,
            cache_write_1h_tokens: 1,
            reasoning_tokens: 5,
            tier: 0,
        };
        let list = List { items: vec![Usage::from(&record)], next: Some("12:req_1".into()) };
        let text = json_text(&list).unwrap();
        assert!(text.contains("\"cost_usd\": \"0.000003\"") && !text.contains("e-"), "{text}");
        golden("usage-list", &list);
    }

    #[test]
    fn usage_summary_json_is_pinned() {
        let rows = [
            pb::UsageSummaryRow {
                bucket_start: 1_798_761_600,
                model: "gpt-4o".into(),
                requests: 3,
                prompt_tokens: 30,
                completion_tokens: 12,
                cached_tokens: 10,
                cost_micros: 1_500,
                ..Default::default()
            },
            pb::UsageSummaryRow {
                bucket_start: 1_798_848_000,
                model: "sora-2".into(),
                requests: 1,
                audio_millis: 0,
                images: 2,
                cost_micros: -3,
                ..Default::default()
            },
        ];
        let summary = UsageSummary {
            from: 1_798_761_600,
            to: 1_798_934_400,
            group_by: vec!["day".into(), "model".into()],
            rows: rows.iter().map(Into::into).collect(),
            totals: UsageCounts::sum(&rows),
        };
        golden("usage-summary", &summary);
    }

    #[test]
    fn doctor_json_is_pinned() {
        let report = Doctor {
            base_url: "http://127.0.0.1:8080/v1".into(),
            ok: false,
            checks: vec![DoctorCheck {
                request: "GET /v1/models".into(),
                model: String::new(),
                ok: false,
                status: 401,
                message: "无效的令牌 (request id: req_1)".into(),
                request_id: "req_1".into(),
                latency_ms: 3,
            }],
            diagnosis: Diagnosis {
                kind: "configuration".into(),
                scope: "key".into(),
                limited_to: "the key itself".into(),
                cause: "the key is refused".into(),
                remedy: "Send `Authorization: Bearer <API_KEY>` with the complete token".into(),
                retry: false,
            },
        };
        golden("doctor", &report);
    }

    #[test]
    fn video_json_is_pinned() {
        let task = pb::VideoTask {
            id: "video_1".into(),
            account_id: "acc_1".into(),
            token_id: "tok_1".into(),
            group: "default".into(),
            model: "sora-2".into(),
            channel_id: "ch_1".into(),
            upstream_id: "up_1".into(),
            status: "failed".into(),
            progress: 100,
            seconds: 4,
            size: "1280x720".into(),
            cost_micros: 400_000,
            created_at: 1_798_761_600,
            updated_at: 1_798_761_660,
            completed_at: 1_798_761_660,
            error_code: "upstream_error".into(),
            error_message: "the upstream failed".into(),
            refunded: true,
            extra_json: r#"{"quality":"high"}"#.into(),
        };
        golden("video", &Video::from(&task));
    }

    #[test]
    fn credential_and_audit_json_are_pinned() {
        let credential = pb::Credential {
            id: "cred_1".into(),
            name: "acme console".into(),
            role: "account".into(),
            account_id: "acc_1".into(),
            key_prefix: "gwcred-…wxyz".into(),
            created_at: 1_798_761_600,
            last_used_at: 1_798_761_660,
            rotated_at: 0,
        };
        golden("credential", &Credential::from(&credential));
        let created = CreatedCredential {
            credential: Credential::from(&credential),
            key: Some("gwcred-secret".into()),
            key_file: None,
        };
        golden("credential-created", &created);
        let entry = pb::AuditEntry {
            seq: 42,
            at: 1_798_761_600,
            actor_id: "cred_1".into(),
            actor_role: "account".into(),
            method: "UpdateToken".into(),
            kind: "token".into(),
            target: "tok_1".into(),
            outcome: "ok".into(),
        };
        golden("audit-list", &List { items: vec![AuditEntry::from(&entry)], next: Some("42".into()) });
    }

    #[test]
    fn data_plane_and_delete_json_are_pinned() {
        let plane = DataPlane {
            node_id: "dp-1".into(),
            address: "10.0.0.5:8080".into(),
            version: "0.1.0".into(),
            state: "behind".into(),
            connected: true,
            acked_revision: 40,
            sent_revision: 42,
            control_plane_revision: 42,
            behind: 2,
            connected_at: 1_798_761_600,
            last_seen: 1_798_761_601,
            last_error: String::new(),
            replica: "cp-0:7070".into(),
            spool_backlog: 3,
            requests_per_second: 41.5,
        };
        golden("dataplane-list", &List { items: vec![plane], next: None });
        let deleted = Deleted { kind: "account".into(), id: "acc_1".into(), deleted: true, dry_run: false };
        golden("deleted", &deleted);
    }

    #[test]
    fn store_status_json_is_pinned() {
        let status = pb::StoreStatus {
            store_id: "6f1d2c".into(),
            confirmed: false,
            revision: 42,
            persistence: "aof".into(),
            suspect: "the store lost its data".into(),
        };
        golden("store-status", &StoreStatus::from(&status));
    }
}
