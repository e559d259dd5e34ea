//! What an AWS Bedrock (`bedrock`) channel expects. The base URL is the
//! runtime endpoint (`https://bedrock-runtime.<region>.amazonaws.com`).
//! Anthropic models (`anthropic.…`, with or without an inference-profile
//! prefix such as `us.`) are called through `invoke` with messages bodies
//! (no `model`, no `stream`, `anthropic_version` = [`ANTHROPIC_VERSION`],
//! `anthropic-beta` headers as `anthropic_beta`), every other model through
//! `converse`. The model id is one percent-encoded path segment, so ARNs
//! (`:` and `/`) stay in it.
//!
//! Requests are signed with SigV4 for service `bedrock` in the channel's
//! `region` setting, the key being `ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]`;
//! with `auth` = `api-key` the key is a Bedrock API key sent as a bearer
//! token. Streams come in AWS's binary event-stream framing (`frames`).

mod frames;
mod sign;

pub use self::frames::Frames;

use axum::http::{HeaderName, header};

use super::{ChatCall, Framing, Outgoing};
use crate::translate::Dialect;
use crate::{error::ProxyError, policy::domain::Channel};

/// `anthropic_version` of messages bodies sent to `invoke`.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The SigV4 service name of the Bedrock runtime.
pub const SERVICE: &str = "bedrock";

/// Puts `channel`'s credential on `request`: a SigV4 signature over its
/// method, URI, headers and body (`authorization`, `x-amz-date` and, for
/// temporary credentials, `x-amz-security-token`), or with `auth` =
/// `api-key` the key as a bearer token. Returns `authorization`. Fails
/// (logged, the key never named) when the key is not of the form the
/// `auth` setting wants or the channel has no `region`.
pub fn authorize(channel: &Channel, request: Outgoing<'_>) -> Result<HeaderName, ProxyError> {
    match channel.settings.get("auth").map(String::as_str) {
        Some("api-key") => {
            let value = super::secret(channel, &format!("Bearer {}", channel.api_key))?;
            request.headers.insert(header::AUTHORIZATION, value);
        }
        _ => sign::sign(channel, request, std::time::SystemTime::now())?,
    }
    Ok(header::AUTHORIZATION)
}

/// The call for `upstream_model`: Anthropic models (`anthropic.…`, with or
/// without a region prefix) through `invoke` in the messages dialect, the
/// rest through `converse`; all streams in the event-stream framing.
pub fn chat_call(channel: &Channel, upstream_model: &str, stream: bool) -> ChatCall {
    let _ = channel;
    let (dialect, method) = match (is_anthropic(upstream_model), stream) {
        (true, false) => (Dialect::Messages, "invoke"),
        (true, true) => (Dialect::Messages, "invoke-with-response-stream"),
        (false, false) => (Dialect::Converse, "converse"),
        (false, true) => (Dialect::Converse, "converse-stream"),
    };
    ChatCall {
        dialect,
        path: format!("/model/{}/{method}", encode_segment(upstream_model)),
        framing: Framing::EventStream,
    }
}

/// Where `CountTokens` goes for `upstream_model`:
/// `/model/<foundation model>/count-tokens`. CountTokens takes foundation
/// model ids only, so an inference profile's geographic prefix (`us.`,
/// `eu.`, `apac.`, `global.`, …) is removed; `None` for an ARN, which names
/// no foundation model (count locally then). Bedrock also refuses models
/// whose tokens it cannot count (a 400 `ValidationException`): callers fall
/// back to counting locally on any failure.
pub fn count_tokens_path(upstream_model: &str) -> Option<String> {
    if upstream_model.starts_with("arn:") {
        return None;
    }
    let model = match upstream_model.split_once('.') {
        Some((prefix, rest)) if rest.contains('.') && PROFILE_PREFIXES.contains(&prefix) => rest,
        _ => upstream_model,
    };
    Some(format!("/model/{}/count-tokens", encode_segment(model)))
}

/// Inference-profile prefixes that put a foundation model in a geography.
const PROFILE_PREFIXES: &[&str] = &["us", "us-gov", "eu", "apac", "jp", "au", "ca", "global"];

/// The `CountTokens` body for an `invoke` body (a messages body as
/// `body_edit` leaves it: no `model`, `anthropic_version` set):
/// `{"input":{"invokeModel":{"body":"<base64 of the body>"}}}`.
pub fn count_tokens_body(invoke_body: &[u8]) -> serde_json::Value {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(invoke_body);
    serde_json::json!({ "input": { "invokeModel": { "body": body } } })
}

/// The count in a `CountTokens` answer (`{"inputTokens": n}`).
pub fn count_tokens_answer(answer: &serde_json::Value) -> Option<i64> {
    answer.get("inputTokens").and_then(serde_json::Value::as_i64)
}

/// Whether `model` (an id, an inference profile or an ARN of either) names
/// an Anthropic model, which `invoke` takes in the messages dialect.
pub fn is_anthropic(model: &str) -> bool {
    model.contains("anthropic.")
}

/// `segment` percent-encoded as one URI path segment: every byte but the
/// unreserved characters (`A-Z a-z 0-9 - . _ ~`), as AWS encodes labels.
pub fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

#[cfg(test)]
mod tests {
    use super::*;

    fn channel() -> Channel {
        let mut channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        channel.kind = crate::policy::domain::ChannelKind::Bedrock;
        channel
    }

    #[test]
    fn anthropic_models_go_to_invoke_and_others_to_converse() {
        let channel = channel();
        for model in ["anthropic.claude-3-5-haiku-20241022-v1:0", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"] {
            let call = chat_call(&channel, model, false);
            assert_eq!(call.dialect, Dialect::Messages);
            assert!(call.path.ends_with("/invoke"), "{}", call.path);
            assert!(chat_call(&channel, model, true).path.ends_with("/invoke-with-response-stream"));
        }
        let call = chat_call(&channel, "amazon.nova-pro-v1:0", true);
        assert_eq!(call.dialect, Dialect::Converse);
        assert_eq!(call.path, "/model/amazon.nova-pro-v1%3A0/converse-stream");
        assert_eq!(call.framing, Framing::EventStream);
    }

    #[test]
    fn a_model_arn_is_one_encoded_path_segment() {
        let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-haiku-20240307-v1:0";
        let call = chat_call(&channel(), arn, false);
        assert_eq!(
            call.path,
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-haiku-20240307-v1%3A0/invoke"
        );
        assert_eq!(call.dialect, Dialect::Messages);
    }

    #[test]
    fn token_counts_go_to_the_foundation_model() {
        let path = count_tokens_path("us.anthropic.claude-sonnet-4-5-20250929-v1:0");
        assert_eq!(path.as_deref(), Some("/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/count-tokens"));
        let path = count_tokens_path("anthropic.claude-3-haiku-20240307-v1:0");
        assert_eq!(path.as_deref(), Some("/model/anthropic.claude-3-haiku-20240307-v1%3A0/count-tokens"));
        assert_eq!(count_tokens_path("arn:aws:bedrock:us-east-1:1:application-inference-profile/x"), None);
        let body = count_tokens_body(br#"{"anthropic_version":"bedrock-2023-05-31"}"#);
        assert_eq!(body["input"]["invokeModel"]["body"], "eyJhbnRocm9waWNfdmVyc2lvbiI6ImJlZHJvY2stMjAyMy0wNS0zMSJ9");
        assert_eq!(count_tokens_answer(&serde_json::json!({"inputTokens": 12})), Some(12));
    }
}
