//! Every way a request can be refused or fail, and the one function that
//! turns it into a client response. Status codes, messages (the exact texts
//! of the error catalogue, `docs/errors.md`), error types, codes, the body
//! shape (OpenAI, messages or Gemini, by request path), `x-should-retry` and whether
//! the gateway itself may retry are chosen here and nowhere else; internal
//! causes never reach the body. With a console configured, the quota
//! refusals end with links to its token and top-up pages.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse as _, Response},
};
use serde_json::json;

/// A refusal on its way from a handler to the HTTP layer, which renders it
/// with the request's id in the shape of the path's API (`http`).
#[derive(Debug, Clone)]
pub struct Refused(pub ProxyError);

/// Header telling SDKs not to retry.
pub const SHOULD_RETRY: &str = "x-should-retry";

/// The error body a client gets, following the API its request path speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `{"error":{"message","type","param","code"}}`
    OpenAi,
    /// `{"type":"error","error":{"type","message"}}`, the Anthropic messages
    /// API's shape, with the type names its SDKs expect per status.
    Messages,
    /// `{"error":{"code","message","status"}}`, Google's shape for the
    /// Gemini API, with the canonical status name of the HTTP status.
    Gemini,
}

/// The console pages a quota refusal points at: `<base>/tokens` and
/// `<base>/topup` of the console's public base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleLinks {
    tokens: String,
    top_up: String,
}

/// A refused or failed proxy request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("no token in the request")]
    MissingToken,
    #[error("unknown, disabled or expired token")]
    InvalidToken,
    #[error("token quota used up")]
    TokenQuotaExhausted,
    #[error("source address not in the token's allowlist")]
    IpNotAllowed,
    #[error("account may not use group {group:?}")]
    GroupForbidden { group: String },
    #[error("group {group:?} is deprecated")]
    GroupDeprecated { group: String },
    #[error("account balance too low ({balance_micros})")]
    InsufficientUserQuota { balance_micros: i64 },
    #[error("invalid JSON body: {0}")]
    InvalidJson(String),
    #[error("request body could not be read")]
    BodyRead,
    #[error("field {0:?} is required")]
    MissingField(&'static str),
    #[error("request body over {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("token may not use model {model:?}")]
    ModelForbidden { model: String },
    #[error("model {model:?} not in the catalogue")]
    ModelNotFound { model: String },
    /// The model's catalogue category does not fit the endpoint.
    #[error("model {model:?} ({category}) does not serve {endpoint}")]
    WrongEndpoint { model: String, category: String, wanted: &'static str, endpoint: &'static str },
    #[error("no channel for model {model:?} in group {group:?}")]
    NoChannel { group: String, model: String },
    #[error("no route for {method} {path}")]
    InvalidUrl { method: String, path: String },
    #[error("upstream connection failed")]
    UpstreamConnect,
    #[error("upstream timed out")]
    UpstreamTimeout,
    /// `message` is already masked of the channel's key.
    #[error("upstream answered {status}")]
    UpstreamStatus { status: StatusCode, message: String },
    #[error("internal error")]
    Internal,
    /// Over a token's or group's request-rate limit; retry in `retry_after_secs`.
    #[error("over the rate limit of {max_requests} requests per {window_minutes} minutes")]
    RateLimited { window_minutes: u32, max_requests: u32, retry_after_secs: u64 },
    /// Over a token's or group's tokens-per-minute limit (or the request's
    /// own bound is larger than it); retry in `retry_after_secs`.
    #[error("over the limit of {tokens_per_minute} tokens per minute")]
    TokensLimited { tokens_per_minute: u32, retry_after_secs: u64 },
    /// A token or group × account already has `max_in_flight` requests in flight.
    #[error("over the limit of {max_in_flight} requests in flight")]
    InFlightLimited { max_in_flight: u32 },
    /// A request field that is present but unusable (video submissions).
    #[error("field {field:?} is invalid: {reason}")]
    InvalidField { field: &'static str, reason: String },
    /// No video task of the caller's account has this id.
    #[error("video task {id:?} not found")]
    VideoNotFound { id: String },
    /// The video's content was asked for before the task completed.
    #[error("video task {id:?} is {status}, its content does not exist yet")]
    VideoNotReady { id: String, status: String },
    /// No file or batch (`what`) of the caller's account has this id.
    #[error("{what} {id:?} not found")]
    BatchObjectNotFound { what: &'static str, id: String },
    /// The control plane, the authority on video tasks, did not answer.
    #[error("the control plane is unreachable")]
    ControlPlaneUnavailable,
    /// The budget step could not reserve: the control plane is unreachable
    /// and the leases held (and the offline allowance) do not cover it.
    #[error("spending budget cannot be leased")]
    BudgetUnavailable,
    /// Usage records cannot be written to the spool (a full or failing
    /// disk): spending requests wait until they can.
    #[error("usage spool cannot be written")]
    SpoolUnwritable,
    /// A `/v1/messages` request without `compat-version` or `anthropic-version`.
    #[error("version header missing")]
    MissingVersionHeader,
    /// A request the other chat dialect cannot express; the text says why.
    #[error("request cannot be translated: {0}")]
    Untranslatable(String),
    /// A WebSocket upgrade of `/v1/responses` where the operator turned
    /// the mode off: 426, so the client falls back to HTTP at once.
    #[error("responses over a WebSocket are turned off")]
    WebSocketOff,
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

// === impl ProxyError ===

impl axum::response::IntoResponse for ProxyError {
    /// A bare status carrying the error; the HTTP layer renders the body.
    fn into_response(self) -> Response {
        let mut response = self.status().into_response();
        response.extensions_mut().insert(Refused(self));
        response
    }
}

impl ProxyError {
    /// HTTP status the client gets.
    pub fn status(&self) -> StatusCode {
        use ProxyError::*;
        match self {
            MissingToken | InvalidToken => StatusCode::UNAUTHORIZED,
            TokenQuotaExhausted
            | IpNotAllowed
            | GroupForbidden { .. }
            | GroupDeprecated { .. }
            | InsufficientUserQuota { .. }
            | ModelForbidden { .. } => StatusCode::FORBIDDEN,
            InvalidJson(_)
            | BodyRead
            | MissingField(_)
            | MissingVersionHeader
            | Untranslatable(_)
            | WrongEndpoint { .. } => StatusCode::BAD_REQUEST,
            BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ModelNotFound { .. } | InvalidUrl { .. } => StatusCode::NOT_FOUND,
            NoChannel { .. } => StatusCode::SERVICE_UNAVAILABLE,
            UpstreamConnect => StatusCode::BAD_GATEWAY,
            UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            UpstreamStatus { status, .. } => *status,
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
            RateLimited { .. } | TokensLimited { .. } | InFlightLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            InvalidField { .. } => StatusCode::BAD_REQUEST,
            VideoNotFound { .. } | VideoNotReady { .. } | BatchObjectNotFound { .. } => StatusCode::NOT_FOUND,
            ControlPlaneUnavailable | BudgetUnavailable | SpoolUnwritable => StatusCode::SERVICE_UNAVAILABLE,
            WebSocketOff => StatusCode::UPGRADE_REQUIRED,
        }
    }

    /// The client-facing message, without the request-id suffix.
    pub fn message(&self) -> String {
        use ProxyError::*;
        match self {
            MissingToken => "未提供令牌".into(),
            InvalidToken => "无效的令牌".into(),
            TokenQuotaExhausted => "该令牌额度已用尽".into(),
            IpNotAllowed => "您的 IP 不在令牌允许访问的列表中".into(),
            GroupForbidden { group } => format!("无权访问 {group} 分组"),
            GroupDeprecated { group } => format!("分组 {group} 已被弃用"),
            InsufficientUserQuota { balance_micros } => {
                format!("用户额度不足, 剩余额度: ＄{}", format_usd(*balance_micros))
            }
            InvalidJson(reason) => format!("invalid JSON body: {reason}"),
            BodyRead => "request body could not be read".into(),
            MissingField(field) => format!("field \"{field}\" is required"),
            BodyTooLarge { limit } => format!("request body is larger than {limit} bytes"),
            ModelForbidden { model } => format!("该令牌无权访问模型 {model}"),
            ModelNotFound { model } => format!("模型不存在: {model}"),
            WrongEndpoint { model, category, wanted, endpoint } => {
                let article = if wanted.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
                format!(
                    "{model} is not {article} {wanted} model (its category is {category}), so {endpoint} cannot serve it"
                )
            }
            NoChannel { group, model } => format!("分组 {group} 下模型 {model} 无可用渠道"),
            InvalidUrl { method, path } => format!("Invalid URL ({method} {path})"),
            UpstreamConnect => "upstream connection failed".into(),
            UpstreamTimeout => "upstream timed out".into(),
            UpstreamStatus { message, .. } => format!("upstream error: {message}"),
            Internal => "internal error".into(),
            RateLimited { window_minutes, max_requests, .. } => {
                format!("您已达到请求数限制:{window_minutes}分钟内最多请求{max_requests}次")
            }
            TokensLimited { tokens_per_minute, .. } => {
                format!("您已达到Token数限制:1分钟内最多使用{tokens_per_minute}个Token")
            }
            InFlightLimited { max_in_flight } => format!("您已达到并发请求数限制:最多同时请求{max_in_flight}次"),
            InvalidField { field, reason } => format!("field \"{field}\" is invalid: {reason}"),
            VideoNotFound { id } => format!("video {id} not found"),
            BatchObjectNotFound { what, id } => format!("no such {what}: {id}"),
            VideoNotReady { id, status } if status == "failed" => {
                format!("file does not exist: video {id} failed and has no content")
            }
            VideoNotReady { id, status } => {
                format!("file does not exist yet: video {id} is {status}, its content is ready once completed")
            }
            ControlPlaneUnavailable => "the gateway cannot reach its control plane; retry shortly".into(),
            BudgetUnavailable => {
                "the gateway cannot check this key's spending limits right now (control plane unreachable); retry shortly"
                    .into()
            }
            SpoolUnwritable => {
                "the gateway cannot record usage right now (its usage spool cannot be written); retry shortly".into()
            }
            MissingVersionHeader => "header \"anthropic-version\" (or \"compat-version\") is required".into(),
            Untranslatable(reason) => format!("request cannot be translated: {reason}"),
            WebSocketOff => "responses over a WebSocket are turned off on this gateway; send POST /v1/responses".into(),
        }
    }

    /// The OpenAI `error.type`.
    pub fn kind(&self) -> &'static str {
        use ProxyError::*;
        match self {
            MissingToken | InvalidToken => "authentication_error",
            TokenQuotaExhausted | InsufficientUserQuota { .. } => "insufficient_quota",
            IpNotAllowed | GroupForbidden { .. } | GroupDeprecated { .. } | ModelForbidden { .. } => "permission_error",
            InvalidJson(_)
            | BodyRead
            | MissingField(_)
            | BodyTooLarge { .. }
            | ModelNotFound { .. }
            | WrongEndpoint { .. }
            | InvalidUrl { .. } => "invalid_request_error",
            NoChannel { .. } | Internal => "api_error",
            UpstreamStatus { status, .. } if *status == StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            RateLimited { .. } | TokensLimited { .. } | InFlightLimited { .. } => "rate_limit_error",
            InvalidField { .. } | VideoNotFound { .. } | VideoNotReady { .. } => "invalid_request_error",
            BatchObjectNotFound { .. } => "invalid_request_error",
            MissingVersionHeader | Untranslatable(_) | WebSocketOff => "invalid_request_error",
            ControlPlaneUnavailable | BudgetUnavailable | SpoolUnwritable => "api_error",
            UpstreamConnect | UpstreamTimeout | UpstreamStatus { .. } => "upstream_error",
        }
    }

    /// The OpenAI `error.code`, when there is one.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ProxyError::IpNotAllowed => Some("access_denied"),
            ProxyError::InsufficientUserQuota { .. } => Some("insufficient_user_quota"),
            ProxyError::ModelNotFound { .. } | ProxyError::NoChannel { .. } => Some("model_not_found"),
            ProxyError::WrongEndpoint { .. } => Some("model_not_supported"),
            ProxyError::RateLimited { .. } | ProxyError::TokensLimited { .. } | ProxyError::InFlightLimited { .. } => {
                Some("rate_limit_exceeded")
            }
            _ => None,
        }
    }

    /// A low-cardinality label for logs and metrics.
    pub fn reason(&self) -> &'static str {
        use ProxyError::*;
        match self {
            MissingToken => "missing_token",
            InvalidToken => "invalid_token",
            TokenQuotaExhausted => "token_quota",
            IpNotAllowed => "ip_not_allowed",
            GroupForbidden { .. } => "group_forbidden",
            GroupDeprecated { .. } => "group_deprecated",
            InsufficientUserQuota { .. } => "user_quota",
            InvalidJson(_) => "invalid_json",
            BodyRead => "body_read",
            MissingField(_) => "missing_field",
            BodyTooLarge { .. } => "body_too_large",
            ModelForbidden { .. } => "model_forbidden",
            ModelNotFound { .. } => "model_not_found",
            WrongEndpoint { .. } => "wrong_endpoint",
            NoChannel { .. } => "no_channel",
            InvalidUrl { .. } => "invalid_url",
            UpstreamConnect => "upstream_connect",
            UpstreamTimeout => "upstream_timeout",
            UpstreamStatus { .. } => "upstream_status",
            Internal => "internal",
            RateLimited { .. } => "rate_limited",
            TokensLimited { .. } => "tokens_limited",
            InFlightLimited { .. } => "in_flight_limited",
            InvalidField { .. } => "invalid_field",
            VideoNotFound { .. } => "video_not_found",
            VideoNotReady { .. } => "video_not_ready",
            BatchObjectNotFound { .. } => "batch_object_not_found",
            ControlPlaneUnavailable => "control_plane_unavailable",
            BudgetUnavailable => "budget_unavailable",
            SpoolUnwritable => "spool_unwritable",
            MissingVersionHeader => "missing_version_header",
            Untranslatable(_) => "untranslatable",
            WebSocketOff => "websocket_off",
        }
    }

    /// Whether SDKs must be told not to retry (`x-should-retry: false`).
    fn never_retry(&self) -> bool {
        matches!(self, ProxyError::NoChannel { .. })
            || matches!(self.status().as_u16(), 400 | 401 | 403 | 404 | 413 | 426)
    }

    /// Whether another upstream attempt (on another channel, or later on the
    /// same one) may succeed where this one failed: the upstream could not be
    /// reached, did not answer in time, or answered 429, 500, 502, 503, 504
    /// or 529 (Anthropic's "overloaded").
    /// Every other upstream answer (400, 401, 403, 404…) and every refusal of
    /// the gateway itself is final. Only meaningful while no byte of the
    /// response has reached the client.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProxyError::UpstreamConnect | ProxyError::UpstreamTimeout => true,
            ProxyError::UpstreamStatus { status, .. } => matches!(status.as_u16(), 429 | 500 | 502 | 503 | 504 | 529),
            _ => false,
        }
    }

    /// Whether the failure counts against the channel's health (toward its
    /// automatic disable): unreachable or silent upstreams, 5xx answers, and
    /// an upstream refusing the channel's own credentials (401, 403). A 400
    /// or 404 is the client's doing and says nothing about the channel.
    /// An upstream 429 is not: it slows the channel down instead (see
    /// `provider::health`).
    pub fn is_channel_fault(&self) -> bool {
        match self {
            ProxyError::UpstreamStatus { status, .. } => {
                matches!(status.as_u16(), 401 | 403) || (status.is_server_error() && self.is_retryable())
            }
            other => other.is_retryable(),
        }
    }
}

// === impl ConsoleLinks ===

impl ConsoleLinks {
    /// The links under `base_url` (`https://example.com/console` gives
    /// `https://example.com/console/tokens` and `…/console/topup`); trailing
    /// slashes are dropped rather than doubled. `None` for an empty (or
    /// all-slash) base: no console, no links. The URL is not checked here
    /// (`config::check_console_url` does).
    pub fn new(base_url: &str) -> Option<ConsoleLinks> {
        let base = base_url.trim().trim_end_matches('/');
        if base.is_empty() {
            return None;
        }
        Some(ConsoleLinks { tokens: format!("{base}/tokens"), top_up: format!("{base}/topup") })
    }
}

// === impl Shape ===

impl Shape {
    /// The shape for a request to `path`: messages on `/v1/messages` (and
    /// below it); Gemini under `/v1beta/` and for Gemini's methods on
    /// `/v1/models/{model}:…`; OpenAI everywhere else.
    pub fn for_path(path: &str) -> Shape {
        if path.starts_with("/v1beta/") || path == "/v1beta" {
            return Shape::Gemini;
        }
        if let Some(model) = path.strip_prefix("/v1/models/")
            && let Some((_, method)) = model.rsplit_once(':')
            && GEMINI_METHODS.contains(&method)
        {
            return Shape::Gemini;
        }
        match path.strip_prefix("/v1/messages") {
            Some("") => Shape::Messages,
            Some(rest) if rest.starts_with('/') => Shape::Messages,
            _ => Shape::OpenAi,
        }
    }
}

/// The methods of Gemini's API a `/v1/models/{model}:{method}` path may name.
pub const GEMINI_METHODS: &[&str] = &["generateContent", "streamGenerateContent", "countTokens"];

/// Google's canonical status name for an HTTP `status`, as Gemini's errors
/// carry it in `error.status`.
fn gemini_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 | 529 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        400..=499 => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    }
}

/// The messages API's `error.type` for `status`, as the Anthropic SDKs name
/// them (`anthropic.types.shared.ErrorType`, plus the API's 413 name).
fn messages_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// Formats micro-USD as dollars with 6 decimals (`-0.000123`, `12.500000`).
pub fn format_usd(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    format!("{sign}{}.{:06}", abs / 1_000_000, abs % 1_000_000)
}

/// The response for `error` on request `request_id` in `shape`. Carries
/// `x-should-retry: false` when retrying cannot help (400, 401, 403, 404,
/// 413, no channel); upstream 429 and 5xx leave the choice to the client.
/// With `console`, the quota refusals (`TokenQuotaExhausted`,
/// `InsufficientUserQuota`) add ` (tokens: <url>, top up: <url>)` between
/// their unchanged text and the request id; every other message, and these
/// without `console`, is `message()` and the request id alone.
pub fn render_as(error: &ProxyError, request_id: &str, shape: Shape, console: Option<&ConsoleLinks>) -> Response {
    let mut message = error.message();
    if let (Some(links), ProxyError::TokenQuotaExhausted | ProxyError::InsufficientUserQuota { .. }) = (console, error)
    {
        message.push_str(&format!(" (tokens: {}, top up: {})", links.tokens, links.top_up));
    }
    if !matches!(error, ProxyError::InvalidUrl { .. }) {
        message.push_str(&format!(" (request id: {request_id})"));
    }
    let body = match shape {
        Shape::OpenAi => json!({
            "error": {
                "message": message,
                "type": error.kind(),
                "param": "",
                "code": error.code(),
            }
        }),
        Shape::Messages => json!({
            "type": "error",
            "error": { "type": messages_type(error.status()), "message": message },
        }),
        Shape::Gemini => json!({
            "error": {
                "code": error.status().as_u16(),
                "message": message,
                "status": gemini_status(error.status()),
            }
        }),
    };
    let mut response = (error.status(), axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if error.never_retry() {
        headers.insert(SHOULD_RETRY, HeaderValue::from_static("false"));
    }
    if matches!(error, ProxyError::UpstreamStatus { status, .. } if *status == StatusCode::TOO_MANY_REQUESTS) {
        // The upstream's own Retry-After names its limits; a short fixed
        // wait keeps clients from hammering without leaking them.
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    match error {
        ProxyError::RateLimited { retry_after_secs, .. } | ProxyError::TokensLimited { retry_after_secs, .. } => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
        }
        // A slot frees when any request of the key ends: soon, as a rule.
        ProxyError::InFlightLimited { .. } => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        _ => {}
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    async fn body(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn refusals_render_exact_messages_with_request_id() {
        let cases = [
            (ProxyError::MissingToken, 401, "未提供令牌", None),
            (ProxyError::InvalidToken, 401, "无效的令牌", None),
            (ProxyError::TokenQuotaExhausted, 403, "该令牌额度已用尽", None),
            (ProxyError::IpNotAllowed, 403, "您的 IP 不在令牌允许访问的列表中", Some("access_denied")),
            (ProxyError::GroupForbidden { group: "vip".into() }, 403, "无权访问 vip 分组", None),
            (ProxyError::GroupDeprecated { group: "old".into() }, 403, "分组 old 已被弃用", None),
            (
                ProxyError::InsufficientUserQuota { balance_micros: -123 },
                403,
                "用户额度不足, 剩余额度: ＄-0.000123",
                Some("insufficient_user_quota"),
            ),
            (ProxyError::ModelForbidden { model: "gpt-x".into() }, 403, "该令牌无权访问模型 gpt-x", None),
            (ProxyError::ModelNotFound { model: "nope".into() }, 404, "模型不存在: nope", Some("model_not_found")),
            (
                ProxyError::NoChannel { group: "default".into(), model: "m".into() },
                503,
                "分组 default 下模型 m 无可用渠道",
                Some("model_not_found"),
            ),
            (ProxyError::MissingField("model"), 400, "field \"model\" is required", None),
        ];
        for (error, status, message, code) in cases {
            let response = render_as(&error, "rid1", Shape::OpenAi, None);
            assert_eq!(response.status().as_u16(), status, "{error:?}");
            assert_eq!(response.headers()[SHOULD_RETRY], "false", "{error:?}");
            let json = body(response).await;
            assert_eq!(json["error"]["message"], format!("{message} (request id: rid1)"));
            assert_eq!(json["error"]["param"], "");
            assert_eq!(json["error"]["code"].as_str(), code);
        }
    }

    #[tokio::test]
    async fn with_a_console_quota_refusals_keep_their_text_and_end_with_its_links() {
        let console = ConsoleLinks::new("https://example.com/console").unwrap();
        let links = " (tokens: https://example.com/console/tokens, top up: https://example.com/console/topup)";
        let cases = [
            (ProxyError::TokenQuotaExhausted, "该令牌额度已用尽"),
            (ProxyError::InsufficientUserQuota { balance_micros: 1_500 }, "用户额度不足, 剩余额度: ＄0.001500"),
        ];
        for (error, text) in cases {
            for shape in [Shape::OpenAi, Shape::Messages] {
                let response = render_as(&error, "rid3", shape, Some(&console));
                assert_eq!(response.status(), StatusCode::FORBIDDEN, "{error:?}");
                let json = body(response).await;
                let message = json["error"]["message"].as_str().unwrap();
                assert!(message.starts_with(text), "{message}");
                assert_eq!(message, format!("{text}{links} (request id: rid3)"));
                assert!(!message.contains('\n'), "{message}");
            }
            // Without a console: exactly the catalogue's text.
            let json = body(render_as(&error, "rid3", Shape::OpenAi, None)).await;
            assert_eq!(json["error"]["message"], format!("{text} (request id: rid3)"));
        }
        for other in [ProxyError::IpNotAllowed, ProxyError::ModelForbidden { model: "m".into() }, ProxyError::Internal]
        {
            let with = body(render_as(&other, "r", Shape::OpenAi, Some(&console))).await;
            let without = body(render_as(&other, "r", Shape::OpenAi, None)).await;
            assert_eq!(with, without, "{other:?} links to the console");
        }
    }

    #[test]
    fn console_links_join_without_doubling_slashes() {
        for base in ["https://example.com/console", "https://example.com/console/", "https://example.com/console//"] {
            let links = ConsoleLinks::new(base).unwrap();
            assert_eq!(links.tokens, "https://example.com/console/tokens", "{base}");
            assert_eq!(links.top_up, "https://example.com/console/topup", "{base}");
        }
        let root = ConsoleLinks::new("http://127.0.0.1:7070/").unwrap();
        assert_eq!(
            (root.tokens.as_str(), root.top_up.as_str()),
            ("http://127.0.0.1:7070/tokens", "http://127.0.0.1:7070/topup")
        );
        assert_eq!(ConsoleLinks::new(""), None);
        assert_eq!(ConsoleLinks::new(" / "), None);
    }

    #[tokio::test]
    async fn invalid_url_has_no_request_id_suffix() {
        let error = ProxyError::InvalidUrl { method: "POST".into(), path: "/v1/v1/chat/completions".into() };
        let response = render_as(&error, "rid1", Shape::OpenAi, None);
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let json = body(response).await;
        assert_eq!(json["error"]["message"], "Invalid URL (POST /v1/v1/chat/completions)");
        assert_eq!(json["error"]["type"], "invalid_request_error");
    }

    #[tokio::test]
    async fn upstream_failures_may_be_retried() {
        let error = ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message: "boom".into() };
        let response = render_as(&error, "r", Shape::OpenAi, None);
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert!(response.headers().get(SHOULD_RETRY).is_none());
        assert_eq!(body(response).await["error"]["message"], "upstream error: boom (request id: r)");
        assert_eq!(
            render_as(&ProxyError::UpstreamTimeout, "r", Shape::OpenAi, None).status(),
            StatusCode::GATEWAY_TIMEOUT
        );
    }

    #[tokio::test]
    async fn upstream_rate_limits_are_retryable_and_say_when() {
        let error = ProxyError::UpstreamStatus { status: StatusCode::TOO_MANY_REQUESTS, message: "slow down".into() };
        let response = render_as(&error, "r", Shape::OpenAi, None);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(response.headers().get(SHOULD_RETRY).is_none());
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(body(response).await["error"]["type"], "rate_limit_error");
    }

    #[test]
    fn only_transport_failures_and_429_5xx_answers_are_retried() {
        let upstream = |status: u16| ProxyError::UpstreamStatus {
            status: StatusCode::from_u16(status).unwrap(),
            message: String::new(),
        };
        for status in [429, 500, 502, 503, 504, 529] {
            assert!(upstream(status).is_retryable(), "{status}");
            assert_eq!(upstream(status).is_channel_fault(), status != 429, "{status}: a 429 slows a channel down only");
        }
        for status in [400, 401, 403, 404, 413, 422, 501] {
            assert!(!upstream(status).is_retryable(), "{status}");
        }
        assert!(upstream(401).is_channel_fault() && upstream(403).is_channel_fault());
        assert!(!upstream(400).is_channel_fault() && !upstream(404).is_channel_fault());
        assert!(ProxyError::UpstreamConnect.is_retryable() && ProxyError::UpstreamTimeout.is_retryable());
        let refusals = [
            ProxyError::InvalidToken,
            ProxyError::TokenQuotaExhausted,
            ProxyError::NoChannel { group: "g".into(), model: "m".into() },
            ProxyError::MissingField("model"),
            ProxyError::Internal,
        ];
        for error in refusals {
            assert!(!error.is_retryable() && !error.is_channel_fault(), "{error:?}");
        }
    }

    #[test]
    fn the_messages_shape_is_chosen_by_path() {
        assert_eq!(Shape::for_path("/v1/messages"), Shape::Messages);
        assert_eq!(Shape::for_path("/v1/messages/count_tokens"), Shape::Messages);
        assert_eq!(Shape::for_path("/v1/messagesx"), Shape::OpenAi);
        assert_eq!(Shape::for_path("/v1/chat/completions"), Shape::OpenAi);
        assert_eq!(Shape::for_path("/v1/v1/messages"), Shape::OpenAi);
    }

    #[tokio::test]
    async fn messages_errors_use_the_anthropic_shape_and_type_names() {
        let upstream = |status: u16| ProxyError::UpstreamStatus {
            status: StatusCode::from_u16(status).unwrap(),
            message: "m".into(),
        };
        let cases = [
            (ProxyError::MissingField("max_tokens"), 400, "invalid_request_error"),
            (ProxyError::InvalidToken, 401, "authentication_error"),
            (ProxyError::TokenQuotaExhausted, 403, "permission_error"),
            (ProxyError::ModelNotFound { model: "x".into() }, 404, "not_found_error"),
            (ProxyError::BodyTooLarge { limit: 1 }, 413, "request_too_large"),
            (upstream(429), 429, "rate_limit_error"),
            (ProxyError::Internal, 500, "api_error"),
            (ProxyError::UpstreamConnect, 502, "api_error"),
            (ProxyError::NoChannel { group: "g".into(), model: "m".into() }, 503, "overloaded_error"),
            (ProxyError::UpstreamTimeout, 504, "timeout_error"),
            (upstream(529), 529, "overloaded_error"),
        ];
        for (error, status, kind) in cases {
            let response = render_as(&error, "rid9", Shape::for_path("/v1/messages"), None);
            assert_eq!(response.status().as_u16(), status, "{error:?}");
            let json = body(response).await;
            assert_eq!(json["type"], "error", "{json}");
            assert_eq!(json["error"]["type"], kind, "{error:?}");
            assert_eq!(json["error"]["message"], format!("{} (request id: rid9)", error.message()));
            assert_eq!(json.as_object().unwrap().len(), 2, "{json}");
            assert_eq!(json["error"].as_object().unwrap().len(), 2, "{json}");
        }
        let openai =
            body(render_as(&ProxyError::InvalidToken, "r", Shape::for_path("/v1/chat/completions"), None)).await;
        assert_eq!(openai["error"]["type"], "authentication_error");
        assert!(openai.get("type").is_none());
    }

    #[tokio::test]
    async fn gemini_paths_get_googles_error_shape_with_the_same_status_and_text() {
        for path in [
            "/v1beta/models/gemini-2.5-pro:generateContent",
            "/v1beta/models",
            "/v1/models/gemini-2.5-pro:streamGenerateContent",
            "/v1/models/m:countTokens",
        ] {
            assert_eq!(Shape::for_path(path), Shape::Gemini, "{path}");
        }
        for path in ["/v1/models/ft:gpt-4o:org", "/v1/models", "/v1betax/models"] {
            assert_eq!(Shape::for_path(path), Shape::OpenAi, "{path}");
        }
        let cases = [
            (ProxyError::MissingField("contents"), 400, "INVALID_ARGUMENT"),
            (ProxyError::InvalidToken, 401, "UNAUTHENTICATED"),
            (ProxyError::ModelForbidden { model: "m".into() }, 403, "PERMISSION_DENIED"),
            (ProxyError::ModelNotFound { model: "x".into() }, 404, "NOT_FOUND"),
            (
                ProxyError::RateLimited { window_minutes: 1, max_requests: 1, retry_after_secs: 3 },
                429,
                "RESOURCE_EXHAUSTED",
            ),
            (ProxyError::Internal, 500, "INTERNAL"),
            (ProxyError::NoChannel { group: "g".into(), model: "m".into() }, 503, "UNAVAILABLE"),
            (ProxyError::UpstreamTimeout, 504, "DEADLINE_EXCEEDED"),
        ];
        for (error, status, name) in cases {
            let response = render_as(&error, "rid5", Shape::Gemini, None);
            assert_eq!(response.status().as_u16(), status, "{error:?}");
            let json = body(response).await;
            assert_eq!(json["error"]["code"], status, "{json}");
            assert_eq!(json["error"]["status"], name, "{json}");
            assert_eq!(json["error"]["message"], format!("{} (request id: rid5)", error.message()));
            assert_eq!(json.as_object().unwrap().len(), 1, "{json}");
        }
    }

    #[tokio::test]
    async fn rate_limit_refusals_name_the_limit_and_when_to_come_back() {
        let error = ProxyError::RateLimited { window_minutes: 3, max_requests: 20, retry_after_secs: 42 };
        let response = render_as(&error, "rid7", Shape::OpenAi, None);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "42");
        assert!(response.headers().get(SHOULD_RETRY).is_none(), "a rate limit may be retried");
        let json = body(response).await;
        assert_eq!(json["error"]["message"], "您已达到请求数限制:3分钟内最多请求20次 (request id: rid7)");
        assert_eq!(json["error"]["type"], "rate_limit_error");
        assert_eq!(json["error"]["code"], "rate_limit_exceeded");
    }

    #[tokio::test]
    async fn token_and_in_flight_refusals_are_rate_limit_errors_that_say_when_to_come_back() {
        let cases = [
            (
                ProxyError::TokensLimited { tokens_per_minute: 5_000, retry_after_secs: 17 },
                "17",
                "您已达到Token数限制:1分钟内最多使用5000个Token",
            ),
            (ProxyError::InFlightLimited { max_in_flight: 2 }, "1", "您已达到并发请求数限制:最多同时请求2次"),
        ];
        for (error, retry_after, message) in cases {
            let response = render_as(&error, "rid8", Shape::OpenAi, None);
            assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(response.headers()[header::RETRY_AFTER], retry_after);
            assert!(response.headers().get(SHOULD_RETRY).is_none(), "a limit may be retried");
            let json = body(response).await;
            assert_eq!(json["error"]["message"], format!("{message} (request id: rid8)"));
            assert_eq!(json["error"]["type"], "rate_limit_error");
            assert_eq!(json["error"]["code"], "rate_limit_exceeded");
        }
    }

    #[test]
    fn dollars_print_with_six_decimals() {
        assert_eq!(format_usd(0), "0.000000");
        assert_eq!(format_usd(-123), "-0.000123");
        assert_eq!(format_usd(12_500_000), "12.500000");
        assert_eq!(format_usd(i64::MIN), "-9223372036854.775808");
    }
}
