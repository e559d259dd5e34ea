//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: the messages
//! dialect of chat. The pipeline's steps, plus what the messages API
//! requires: the version header (`compat-version` or `anthropic-version`), a
//! `model`, an integer `max_tokens` (not for counting) and a well-formed
//! `messages` array whose entries are `user`, `assistant`, or — as coding
//! agents send them — `system` and `developer`. Each attempt speaks its
//! channel's dialect (see `upstream`); errors are in the messages shape.

use std::{borrow::Cow, fmt, sync::Arc};

use axum::{
    extract::{Request, State},
    http::{HeaderMap, StatusCode},
    response::Response,
};
use bytes::Bytes;
use serde::{
    Deserialize, Deserializer,
    de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor},
};
use serde_json::{Value, json};

use crate::json_body::{JsonBody, Kind, skip_kinds};
use crate::{
    error::ProxyError,
    pipeline::{self, Admitted, App},
    policy::auth::Access,
    policy::domain::{Channel, ChannelKind},
    provider, tokens,
};

use crate::provider::dialect::{self, MessagesCall};

/// The endpoint usage records name.
const ENDPOINT: &str = "/v1/messages";
const COUNT_ENDPOINT: &str = "/v1/messages/count_tokens";

/// Handles `POST /v1/messages`.
pub async fn handle(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, call) = admit(&app, request, Access::Spend, true).await?;
    let (model, candidates) = pipeline::route(&admitted, &call.model, ENDPOINT)?;
    let bound = pipeline::Bound::tokens(call.body.len(), call.max_tokens);
    let charge = pipeline::reserve(&app, &admitted, model.clone(), ENDPOINT, bound).await?;
    let (app, call, charge) = (&*app, &call, &charge);
    let scope = admitted.scope_in_conversation(app, Some(&call.body), &call.model);
    if call.stream {
        pipeline::keepalive::arm(&admitted);
    }
    pipeline::attempts(&app.upstreams, scope, candidates, |channel| {
        let charge = charge.on_channel(&channel);
        let bytes = call.body.raw().len();
        app.usage.in_flight(charge, bytes, |charge| dialect::messages(app.attempt(), channel, call, charge))
    })
    .await
}

/// Handles `POST /v1/messages/count_tokens`: passed through to
/// messages-native channels, counted here with the model family's tokenizer
/// (system prompt, messages and tools) for the others. Free: it records no
/// usage and takes no rate-limit permit.
pub async fn count_tokens(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, call) = admit(&app, request, Access::Read, false).await?;
    let (_, candidates) = pipeline::route(&admitted, &call.model, COUNT_ENDPOINT)?;
    let (app, call) = (&*app, &call);
    pipeline::attempts(&app.upstreams, admitted.scope(), candidates, |channel| async move {
        if channel.kind != ChannelKind::Anthropic {
            let input_tokens = match provider_count(app, &channel, &call.model, &call.body, &call.headers).await {
                Some(counted) => counted,
                None => tokens::count_messages_input(&call.model, &call.json()?),
            };
            return Ok(provider::reply(
                StatusCode::OK,
                None,
                json!({ "input_tokens": input_tokens }).to_string().into(),
                false,
            ));
        }
        let body = dialect::body_for(call, &channel)?;
        let path = provider::anthropic::path_with_query(provider::anthropic::COUNT_TOKENS_PATH, call.query.as_deref());
        let headers = provider::anthropic::headers(&call.headers);
        let response = app.upstreams.send(&channel, &path, headers, body, false).await?;
        let response = provider::accept(&app.upstreams, &channel, response).await?;
        let status = response.status();
        let bytes = app.upstreams.read_body(&channel, response).await?;
        Ok(provider::reply(status, None, bytes.into(), false))
    })
    .await
}

/// Reads the count out of a provider's token-count answer.
type CountReader = fn(&Value) -> Option<i64>;

/// The count `channel`'s provider gives for the messages body `body` (of a
/// request for `model`, with the client's `headers`), where it has an
/// endpoint for Claude models: the messages API's `count_tokens`,
/// Bedrock's `CountTokens` and Vertex's `count-tokens:rawPredict`. `None`
/// (count locally) for other kinds and models, and when the provider
/// refuses or fails (Bedrock cannot count every model), logged.
pub async fn provider_count(
    app: &App,
    channel: &Channel,
    model: &str,
    body: &JsonBody,
    client: &HeaderMap,
) -> Option<i64> {
    let upstream_model = channel.upstream_model(model);
    let messages_count = |answer: &Value| answer.get("input_tokens").and_then(Value::as_i64);
    let headers = match channel.kind {
        ChannelKind::Anthropic => provider::anthropic::headers(client),
        _ => provider::json_headers(),
    };
    let (path, body, read): (String, Bytes, CountReader) = match channel.kind {
        ChannelKind::Anthropic => {
            let mut edit = crate::json_body::BodyEdit::default();
            edit.set_str("model", upstream_model);
            (provider::anthropic::COUNT_TOKENS_PATH.to_owned(), body.edit(&edit), messages_count)
        }
        ChannelKind::Bedrock => {
            let path = provider::bedrock::count_tokens_path(upstream_model)?;
            let target = provider::chat_call(channel, upstream_model, false);
            if target.dialect != crate::translate::Dialect::Messages {
                return None;
            }
            let edit = provider::body_edit(channel, &target, upstream_model, client);
            let body = provider::bedrock::count_tokens_body(&body.edit(&edit));
            (path, Bytes::from(body.to_string()), provider::bedrock::count_tokens_answer)
        }
        ChannelKind::Vertex if upstream_model.starts_with("claude") => {
            let path = provider::vertex::count_tokens_path(channel, upstream_model);
            let body = body.edit(&provider::vertex::count_tokens_edit(upstream_model));
            (path, body, messages_count)
        }
        _ => return None,
    };
    let counted = async {
        let response = app.upstreams.send(channel, &path, headers, body, false).await?;
        let response = provider::accept(&app.upstreams, channel, response).await?;
        let bytes = app.upstreams.read_body(channel, response).await?;
        Ok::<_, ProxyError>(serde_json::from_slice::<Value>(&bytes).ok().as_ref().and_then(read))
    };
    match counted.await {
        Ok(Some(count)) => Some(count),
        Ok(None) | Err(_) => {
            tracing::info!(channel = %channel.id, "the provider did not count the tokens; counted here");
            None
        }
    }
}

/// Admits a messages request and validates its headers and body.
async fn admit(
    app: &App,
    request: Request,
    access: Access,
    needs_max_tokens: bool,
) -> Result<(Admitted, MessagesCall), ProxyError> {
    let (admitted, body) = pipeline::admit(app, request, access).await?;
    let headers = &admitted.parts.headers;
    if !headers.contains_key("anthropic-version") && !headers.contains_key("compat-version") {
        return Err(ProxyError::MissingVersionHeader);
    }
    let raw = admitted.read_body(body).await?;
    let query = admitted.parts.uri.query().map(str::to_owned);
    let call = parse(raw, admitted.parts.headers.clone(), query, needs_max_tokens)?;
    Ok((admitted, call))
}

/// Validates a messages body: a JSON object with a non-empty string
/// `model`, a non-negative integer `max_tokens` (when `needs_max_tokens`),
/// and a `messages` array of objects each with a `role` of `user`,
/// `assistant`, `system` or `developer` and a string or array `content`.
/// Reads the body's fields in place: only `model`, `max_tokens` and each
/// message's `role` are parsed into values; contents are checked for their
/// kind and skipped (a prompt is most of a body).
fn parse(
    raw: Bytes,
    headers: HeaderMap,
    query: Option<String>,
    needs_max_tokens: bool,
) -> Result<MessagesCall, ProxyError> {
    // `messages` (most of a body) is read for its shape as the body is
    // split into fields, in one pass.
    let read = JsonBody::parse_reading::<Messages>(raw.clone(), "messages");
    let (body, messages) = read.map_err(|error| object_required(&raw, error))?;
    let model = body.value::<String>("model").filter(|m| !m.is_empty()).ok_or(ProxyError::MissingField("model"))?;
    let max_tokens = body.field_bytes("max_tokens").map(serde_json::from_slice::<Value>).transpose();
    let max_tokens = match max_tokens.map_err(|e| ProxyError::InvalidJson(e.to_string()))? {
        None | Some(Value::Null) if needs_max_tokens => return Err(ProxyError::MissingField("max_tokens")),
        None | Some(Value::Null) => None,
        Some(v) if !v.is_u64() => {
            let reason = "must be a non-negative integer".to_owned();
            return Err(ProxyError::InvalidField { field: "max_tokens", reason });
        }
        Some(v) => v.as_i64(),
    };
    let messages = match messages {
        None | Some(Messages::Null) => return Err(ProxyError::MissingField("messages")),
        Some(Messages::Entries(messages)) => messages,
        Some(Messages::Other) => {
            let reason = "must be an array of messages".to_owned();
            return Err(ProxyError::InvalidField { field: "messages", reason });
        }
    };
    for (i, message) in messages.iter().enumerate() {
        if !matches!(message.role.as_deref(), Some("user" | "assistant" | "system" | "developer")) {
            let reason = format!("messages[{i}].role must be \"user\", \"assistant\", \"system\" or \"developer\"");
            return Err(ProxyError::InvalidField { field: "messages", reason });
        }
        if !matches!(message.content, Some(Kind::String | Kind::Array(_))) {
            let reason = format!("messages[{i}].content must be a string or an array of content blocks");
            return Err(ProxyError::InvalidField { field: "messages", reason });
        }
    }
    let stream = body.is_true("stream");
    Ok(MessagesCall { body, max_tokens, model, stream, headers, query })
}

/// Why a body could not be read: `error`, unless the body is well-formed
/// JSON but not an object.
fn object_required(raw: &[u8], error: ProxyError) -> ProxyError {
    match serde_json::from_slice::<IgnoredAny>(raw) {
        Ok(_) if !raw.trim_ascii_start().starts_with(b"{") => {
            ProxyError::InvalidJson("the body must be a JSON object".into())
        }
        _ => error,
    }
}

/// What validation reads of `messages`: `null`, an array of entries, or
/// another kind of value.
enum Messages {
    Null,
    Entries(Vec<MessageShape>),
    Other,
}

/// What validation reads of one entry of `messages`: its `role` when that
/// is a string, and the kind of its `content`; both `None` when the entry
/// is not an object.
#[derive(Default)]
struct MessageShape {
    role: Option<String>,
    content: Option<Kind>,
}

// === impl Messages ===

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MessagesVisitor;
        impl<'de> Visitor<'de> for MessagesVisitor {
            type Value = Messages;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("messages")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
                let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(16));
                while let Some(entry) = seq.next_element::<MessageShape>()? {
                    entries.push(entry);
                }
                Ok(Messages::Entries(entries))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Messages, E> {
                Ok(Messages::Null)
            }
            skip_kinds!('de, Messages::Other; map, str, bool, numbers);
        }
        deserializer.deserialize_any(MessagesVisitor)
    }
}

// === impl MessageShape ===

impl<'de> Deserialize<'de> for MessageShape {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ShapeVisitor;
        impl<'de> Visitor<'de> for ShapeVisitor {
            type Value = MessageShape;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageShape, A::Error> {
                // A repeated name counts as its last, as in a parsed value.
                let mut shape = MessageShape::default();
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    match name.as_ref() {
                        "role" => shape.role = map.next_value::<Value>()?.as_str().map(str::to_owned),
                        "content" => shape.content = Some(map.next_value::<Kind>()?),
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(shape)
            }
            skip_kinds!('de, MessageShape::default(); seq, str, bool, numbers, unit);
        }
        deserializer.deserialize_any(ShapeVisitor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use axum::{body::Body, http::StatusCode};
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        http::{
            router,
            tests::{KEY, app, json_body, policy},
        },
        policy::snapshot::tests as fx,
    };

    type Headers<'a> = &'a [(&'a str, &'a str)];

    async fn post(headers: Headers<'_>, body: &str) -> (StatusCode, Value) {
        let app = app(policy(fx::token("t1", KEY), 1_000_000));
        let mut request = axum::http::Request::post("/v1/messages").header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = router(app).oneshot(request.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        let status = response.status();
        (status, json_body(response).await)
    }

    #[tokio::test]
    async fn requests_missing_what_the_messages_api_requires_are_400_in_its_shape() {
        let ok = r#"{"model":"gpt-a","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let cases: [(Headers<'_>, &str, &str); 7] = [
            (&[("x-api-key", KEY)], ok, "header \"anthropic-version\" (or \"compat-version\") is required"),
            (&[("x-api-key", KEY), ("anthropic-version", "2023-06-01")], "{", "invalid JSON body"),
            (
                &[("authorization", "Bearer sk-models-test"), ("compat-version", "2023-06-01")],
                r#"{"model":"gpt-a","messages":[]}"#,
                "field \"max_tokens\" is required",
            ),
            (
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                r#"{"model":"gpt-a","max_tokens":"5","messages":[]}"#,
                "field \"max_tokens\" is invalid: must be a non-negative integer",
            ),
            (
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                r#"{"model":"gpt-a","max_tokens":5}"#,
                "field \"messages\" is required",
            ),
            (
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                r#"{"model":"gpt-a","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}"#,
                "messages[0].role must be",
            ),
            (
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                r#"{"model":"gpt-a","max_tokens":5,"messages":[{"role":"user"}]}"#,
                "messages[0].content must be",
            ),
        ];
        for (headers, body, message) in cases {
            let (status, json) = post(headers, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {json}");
            assert_eq!(json["type"], "error");
            assert_eq!(json["error"]["type"], "invalid_request_error");
            let text = json["error"]["message"].as_str().unwrap();
            assert!(text.contains(message), "{text:?} lacks {message:?}");
            assert!(text.contains("(request id: "), "{text}");
        }
    }

    #[tokio::test]
    async fn auth_comes_first_and_is_in_the_messages_shape() {
        let (status, json) = post(&[], "{}").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(json["error"]["type"], "authentication_error");
    }

    #[test]
    fn client_headers_reach_a_messages_channel_without_the_client_key() {
        let mut client = axum::http::HeaderMap::new();
        client.insert("x-api-key", "sk-client".parse().unwrap());
        client.insert("authorization", "Bearer sk-client".parse().unwrap());
        client.insert("anthropic-beta", "tools-2024".parse().unwrap());
        client.insert("x-vendor-trace", "abc".parse().unwrap());
        client.insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
        client.insert("compat-version", "2024-01-01".parse().unwrap());
        let headers = provider::anthropic::headers(&client);
        assert_eq!(headers["anthropic-version"], "2024-01-01");
        assert_eq!(headers["anthropic-beta"], "tools-2024");
        assert_eq!(headers["x-vendor-trace"], "abc");
        assert!(!headers.contains_key("x-api-key") && !headers.contains_key("authorization"));
        assert!(!headers.contains_key("x-forwarded-for"));
        let headers = provider::anthropic::headers(&axum::http::HeaderMap::new());
        assert_eq!(headers["anthropic-version"], provider::anthropic::DEFAULT_VERSION);
    }

    #[tokio::test]
    async fn system_and_developer_entries_inside_messages_are_accepted() {
        let body = r#"{"model":"gpt-a","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"system","content":"be brief"},{"role":"developer","content":[{"type":"text","text":"x"}]}]}"#;
        let (status, json) = post(&[("x-api-key", KEY), ("anthropic-version", "2023-06-01")], body).await;
        // Validation passed: the request went on to the fixture's channel,
        // where nothing listens.
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{json}");
    }

    /// The validation as it reads over the body parsed whole: what reading
    /// the fields in place must agree with.
    fn reference(raw: &[u8], needs_max_tokens: bool) -> Result<(String, Option<i64>, bool), ProxyError> {
        let json = serde_json::from_slice::<Value>(raw).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
        if !json.is_object() {
            return Err(ProxyError::InvalidJson("the body must be a JSON object".into()));
        }
        let model = json.get("model").and_then(Value::as_str).filter(|m| !m.is_empty());
        let model = model.ok_or(ProxyError::MissingField("model"))?.to_owned();
        let max_tokens = match json.get("max_tokens") {
            None | Some(Value::Null) if needs_max_tokens => return Err(ProxyError::MissingField("max_tokens")),
            None | Some(Value::Null) => None,
            Some(v) if !v.is_u64() => {
                let reason = "must be a non-negative integer".to_owned();
                return Err(ProxyError::InvalidField { field: "max_tokens", reason });
            }
            Some(v) => v.as_i64(),
        };
        let messages = match json.get("messages") {
            None | Some(Value::Null) => return Err(ProxyError::MissingField("messages")),
            Some(Value::Array(messages)) => messages,
            Some(_) => {
                let reason = "must be an array of messages".to_owned();
                return Err(ProxyError::InvalidField { field: "messages", reason });
            }
        };
        for (i, message) in messages.iter().enumerate() {
            let role = message.get("role").and_then(Value::as_str);
            if !matches!(role, Some("user" | "assistant" | "system" | "developer")) {
                let reason = format!("messages[{i}].role must be \"user\", \"assistant\", \"system\" or \"developer\"");
                return Err(ProxyError::InvalidField { field: "messages", reason });
            }
            if !matches!(message.get("content"), Some(Value::String(_) | Value::Array(_))) {
                let reason = format!("messages[{i}].content must be a string or an array of content blocks");
                return Err(ProxyError::InvalidField { field: "messages", reason });
            }
        }
        Ok((model, max_tokens, json.get("stream").and_then(Value::as_bool).unwrap_or(false)))
    }

    #[test]
    fn entries_of_every_shape_validate_as_a_parsed_body_does() {
        let bodies = [
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"content":[1,{"a":[]}],"role":"system"}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":{"text":"x"}}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","role":"tool","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"tool","content":"x","role":"user"}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[[1],"x",2,null,true]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":{"a":1},"content":"x"}]}"#,
            r#"{"model":"m","max_tokens":-1,"messages":[]}"#,
            r#"{"model":"m","max_tokens":null,"messages":[],"stream":true}"#,
            r#"{"model":"m","max_tokens":18446744073709551615,"messages":{}}"#,
            r#"[{"model":"m"}]"#,
        ];
        for body in bodies {
            for needs in [true, false] {
                let ours = parse(Bytes::from_static(body.as_bytes()), HeaderMap::new(), None, needs)
                    .map(|call| (call.model, call.max_tokens, call.stream));
                assert_eq!(ours, reference(body.as_bytes(), needs), "{body}");
            }
        }
    }

    #[test]
    fn an_object_whose_messages_cannot_be_read_is_refused_with_why() {
        // Well-formed JSON that no parsed value takes: a lone surrogate.
        let body = r#"{"model":"m","max_tokens":1,"messages":[{"role":"\ud800","content":"x"}]}"#;
        match parse(Bytes::from_static(body.as_bytes()), HeaderMap::new(), None, true) {
            Err(ProxyError::InvalidJson(why)) => assert!(why.contains("escape"), "{why}"),
            other => panic!("{:?}", other.map(|call| call.model)),
        }
        match parse(Bytes::from_static(b" [1]"), HeaderMap::new(), None, true) {
            Err(ProxyError::InvalidJson(why)) => assert_eq!(why, "the body must be a JSON object"),
            other => panic!("{:?}", other.map(|call| call.model)),
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn fields_read_in_place_validate_as_a_parsed_body_does(body in crate::fuzz::body(), needs in proptest::bool::ANY) {
            // Only bodies a parsed value takes: the rest it refused outright.
            if serde_json::from_slice::<Value>(&body).is_ok() {
                let ours = parse(Bytes::from(body.clone()), HeaderMap::new(), None, needs)
                    .map(|call| (call.model, call.max_tokens, call.stream));
                proptest::prop_assert_eq!(ours, reference(&body, needs));
            }
        }

        #[test]
        fn any_body_is_parsed_or_refused_with_a_4xx(body in crate::fuzz::body(), needs_max_tokens in proptest::bool::ANY) {
            if let Err(error) = parse(Bytes::from(body), HeaderMap::new(), None, needs_max_tokens) {
                crate::fuzz::assert_client_error(&error)?;
            }
        }
    }
}
