//! gwctl's JSON (and YAML) contract: one struct per resource, written by
//! gwctl from the wire types, so a protobuf change never changes what
//! scripts parse. Money is integer micro-USD (`*_micros`) beside an exact
//! decimal string of US dollars with six decimals (`*_usd`); times are Unix
//! seconds, 0 for "not set"; no secret or key hash ever appears.
//! docs/gwctl.md lists these fields; `tests` pins each shape with a golden file.

mod from_wire;

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
    /// The kind's settings (`api_version`, `region`, `project`…); none of
    /// them secret. Empty for `openai`, `anthropic` and `gemini`.
    pub settings: BTreeMap<String, String>,
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
/// characters (a Vertex service account's `client_email`, a Bedrock access
/// key id).
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
    /// Realtime audio tokens in, out and read from the cache; 0: the text
    /// price of the same kind (input, output, cached).
    pub audio_input_price_micros: i64,
    pub audio_input_price_usd: String,
    pub audio_output_price_micros: i64,
    pub audio_output_price_usd: String,
    pub audio_cached_price_micros: i64,
    pub audio_cached_price_usd: String,
    /// One rerank search unit (a query over up to 100 documents).
    pub search_unit_price_micros: i64,
    pub search_unit_price_usd: String,
    /// Share of the regular prices batch lines pay, in millionths; 0: half.
    pub batch_price_ppm: i64,
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
    /// Audio parts of `prompt_tokens`, `completion_tokens` and `cached_tokens`.
    pub audio_prompt_tokens: i64,
    pub audio_completion_tokens: i64,
    pub audio_cached_tokens: i64,
    /// The price tier billed: 0 base, 1 long context.
    pub tier: u32,
    pub images: i64,
    pub audio_millis: i64,
    /// Rerank search units (a query over up to 100 documents each).
    pub search_units: i64,
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

/// A batch (OpenAI or Anthropic) as the control plane keeps it.
#[derive(Debug, Serialize)]
pub struct Batch {
    pub id: String,
    /// `openai` or `anthropic`.
    pub kind: String,
    /// The upstream's status name; `ended` says it is final.
    pub status: String,
    pub ended: bool,
    /// Its cost was charged and its hold released.
    pub settled: bool,
    pub account_id: String,
    pub token_id: String,
    pub model: String,
    pub channel_id: String,
    pub upstream_id: String,
    /// Held at creation: the most its lines can cost at the batch price.
    pub hold_micros: i64,
    pub hold_usd: String,
    /// What its completed lines cost (once settled).
    pub cost_micros: i64,
    pub cost_usd: String,
    pub created_at: i64,
    pub error_code: String,
    pub error_message: String,
    /// The batch object its clients see.
    pub object: Option<serde_json::Value>,
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

/// `whoami`: the credential gwctl used, what it may do, and which control
/// plane answered (with both versions).
#[derive(Debug, Serialize)]
pub struct WhoAmI {
    /// `root` for the bootstrap admin key.
    pub credential_id: String,
    pub role: String,
    /// The account of an account credential; null for the other roles.
    pub account_id: Option<String>,
    pub endpoint: String,
    pub control_plane_version: String,
    pub gwctl_version: String,
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

/// A console user; its password is never shown, only whether it has one.
#[derive(Debug, Serialize)]
pub struct User {
    pub id: String,
    /// The sign-in name, lower case.
    pub name: String,
    /// `admin`, `operator-readonly` or `account`.
    pub role: String,
    /// The account of an `account` user; empty for the other roles.
    pub account_id: String,
    /// `enabled` or `disabled`.
    pub status: String,
    pub has_password: bool,
    pub created_at: i64,
    /// 0 for never.
    pub last_login_at: i64,
}

/// A user with the one-time link that sets its password (`user create`,
/// `user reset-password`).
#[derive(Debug, Serialize)]
pub struct UserLink {
    #[serde(flatten)]
    pub user: User,
    /// `<console URL>/welcome?ticket=…`, or only the path when the console
    /// is off.
    pub link: String,
    pub link_expires_at: i64,
}

/// A top-up code's record; the code itself is shown once, as `code` of
/// `topup-code create`, and its hash never.
#[derive(Debug, Serialize)]
pub struct TopupCode {
    pub id: String,
    /// Display form such as `gwtopup-AbCd…WxYz`.
    pub prefix: String,
    /// `active`, `redeemed`, `revoked` or `expired`.
    pub status: String,
    pub amount_micros: i64,
    pub amount_usd: String,
    pub created_at: i64,
    /// 0 for never.
    pub expires_at: i64,
    pub created_by: String,
    /// The account that redeemed it; empty before.
    pub redeemed_by: String,
    pub redeemed_at: i64,
    pub revoked_at: i64,
}

/// A minted code: its record and the code, null when it went to a file.
#[derive(Debug, Serialize)]
pub struct CreatedTopupCode {
    #[serde(flatten)]
    pub topup_code: TopupCode,
    pub code: Option<String>,
}

/// `topup-code create`: the codes minted, and the file they went to.
#[derive(Debug, Serialize)]
pub struct CreatedTopupCodes {
    pub items: Vec<CreatedTopupCode>,
    pub out: Option<String>,
}

/// `topup-code redeem`: the code and the account's balance after it.
#[derive(Debug, Serialize)]
pub struct RedeemedTopupCode {
    #[serde(flatten)]
    pub topup_code: TopupCode,
    pub balance_micros: i64,
    pub balance_usd: String,
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests;
