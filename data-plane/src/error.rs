//! Every way a request can be refused or fail, and the one function that
//! turns it into a client response. Status codes, messages (the exact texts
//! of DESIGN §6), error types, codes and `x-should-retry` are chosen here and
//! nowhere else; internal causes never reach the body.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse as _, Response},
};
use serde_json::json;

/// Header telling SDKs not to retry.
pub const SHOULD_RETRY: &str = "x-should-retry";

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
}

// === impl ProxyError ===

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
            InvalidJson(_) | BodyRead | MissingField(_) => StatusCode::BAD_REQUEST,
            BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ModelNotFound { .. } | InvalidUrl { .. } => StatusCode::NOT_FOUND,
            NoChannel { .. } => StatusCode::SERVICE_UNAVAILABLE,
            UpstreamConnect => StatusCode::BAD_GATEWAY,
            UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            UpstreamStatus { status, .. } => *status,
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
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
            NoChannel { group, model } => format!("分组 {group} 下模型 {model} 无可用渠道"),
            InvalidUrl { method, path } => format!("Invalid URL ({method} {path})"),
            UpstreamConnect => "upstream connection failed".into(),
            UpstreamTimeout => "upstream timed out".into(),
            UpstreamStatus { message, .. } => format!("upstream error: {message}"),
            Internal => "internal error".into(),
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
            | InvalidUrl { .. } => "invalid_request_error",
            NoChannel { .. } | Internal => "api_error",
            UpstreamStatus { status, .. } if *status == StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            UpstreamConnect | UpstreamTimeout | UpstreamStatus { .. } => "upstream_error",
        }
    }

    /// The OpenAI `error.code`, when there is one.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ProxyError::IpNotAllowed => Some("access_denied"),
            ProxyError::InsufficientUserQuota { .. } => Some("insufficient_user_quota"),
            ProxyError::ModelNotFound { .. } | ProxyError::NoChannel { .. } => Some("model_not_found"),
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
            NoChannel { .. } => "no_channel",
            InvalidUrl { .. } => "invalid_url",
            UpstreamConnect => "upstream_connect",
            UpstreamTimeout => "upstream_timeout",
            UpstreamStatus { .. } => "upstream_status",
            Internal => "internal",
        }
    }

    /// Whether SDKs must be told not to retry (`x-should-retry: false`).
    fn never_retry(&self) -> bool {
        matches!(self, ProxyError::NoChannel { .. }) || matches!(self.status().as_u16(), 400 | 401 | 403 | 404 | 413)
    }
}

/// Formats micro-USD as dollars with 6 decimals (`-0.000123`, `12.500000`).
pub fn format_usd(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    format!("{sign}{}.{:06}", abs / 1_000_000, abs % 1_000_000)
}

/// The response for `error` on request `request_id`: OpenAI error shape,
/// message suffixed with ` (request id: …)` except for `Invalid URL`.
pub fn render(error: &ProxyError, request_id: &str) -> Response {
    let message = match error {
        ProxyError::InvalidUrl { .. } => error.message(),
        _ => format!("{} (request id: {request_id})", error.message()),
    };
    let body = json!({
        "error": {
            "message": message,
            "type": error.kind(),
            "param": "",
            "code": error.code(),
        }
    });
    let mut response = (error.status(), axum::Json(body)).into_response();
    let headers = response.headers_mut();
    if error.never_retry() {
        headers.insert(SHOULD_RETRY, HeaderValue::from_static("false"));
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
            let response = render(&error, "rid1");
            assert_eq!(response.status().as_u16(), status, "{error:?}");
            assert_eq!(response.headers()[SHOULD_RETRY], "false", "{error:?}");
            let json = body(response).await;
            assert_eq!(json["error"]["message"], format!("{message} (request id: rid1)"));
            assert_eq!(json["error"]["param"], "");
            assert_eq!(json["error"]["code"].as_str(), code);
        }
    }

    #[tokio::test]
    async fn invalid_url_has_no_request_id_suffix() {
        let error = ProxyError::InvalidUrl { method: "POST".into(), path: "/v1/v1/chat/completions".into() };
        let response = render(&error, "rid1");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let json = body(response).await;
        assert_eq!(json["error"]["message"], "Invalid URL (POST /v1/v1/chat/completions)");
        assert_eq!(json["error"]["type"], "invalid_request_error");
    }

    #[tokio::test]
    async fn upstream_failures_may_be_retried() {
        let error = ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message: "boom".into() };
        let response = render(&error, "r");
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert!(response.headers().get(SHOULD_RETRY).is_none());
        assert_eq!(body(response).await["error"]["message"], "upstream error: boom (request id: r)");
        assert_eq!(render(&ProxyError::UpstreamTimeout, "r").status(), StatusCode::GATEWAY_TIMEOUT);
    }

    #[test]
    fn dollars_print_with_six_decimals() {
        assert_eq!(format_usd(0), "0.000000");
        assert_eq!(format_usd(-123), "-0.000123");
        assert_eq!(format_usd(12_500_000), "12.500000");
        assert_eq!(format_usd(i64::MIN), "-9223372036854.775808");
    }
}
