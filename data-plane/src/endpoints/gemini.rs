//! Gemini's API for Gemini clients (Gemini CLI, google-genai):
//! `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`
//! (SSE with `alt=sse`, else one JSON array), `:countTokens`, and
//! `GET /v1beta/models` (+ `/{model}`); the same methods under
//! `/v1/models/{model}:…`. The key comes as `x-goog-api-key`, `key=` or a
//! bearer token (`policy::auth`); errors are in Google's shape (`error`).
//! Each generate request runs the one pipeline and goes to its channel
//! through `provider::dialect::forward`, passed through to Gemini-speaking
//! channels and translated for the others. Counting is free: no
//! reservation, no usage, no rate-limit permit.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, Request, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse as _, Response},
};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::{
    error::ProxyError,
    json_body::{BodyEdit, JsonBody, Kind},
    now_unix,
    pipeline::{self, Admitted, App},
    policy::{auth::Access, domain::ChannelKind, domain::Model},
    provider::{self, dialect},
    tokens,
    translate::{Answering, Dialect, codec},
};

/// The endpoints usage records and routing name.
const GENERATE: &str = "/v1beta/models:generateContent";
const STREAM: &str = "/v1beta/models:streamGenerateContent";
const COUNT: &str = "/v1beta/models:countTokens";

/// One of Gemini's model methods served here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Generate,
    Stream,
    CountTokens,
}

/// A validated generate request.
struct Call {
    model: String,
    body: JsonBody,
    /// `generationConfig.maxOutputTokens`, the answer's bound.
    max_tokens: Option<i64>,
}

/// Handles `POST …/models/{model}:{method}`: `rest` is `{model}:{method}`.
/// An unknown method is the catalogue's `Invalid URL` 404.
pub async fn call(
    State(app): State<Arc<App>>,
    Path(rest): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let invalid = || ProxyError::InvalidUrl { method: "POST".into(), path: request.uri().path().to_owned() };
    let (model, method) = rest.rsplit_once(':').ok_or_else(invalid)?;
    let model = model.strip_prefix("models/").unwrap_or(model).to_owned();
    let method = match method {
        "generateContent" => Method::Generate,
        "streamGenerateContent" => Method::Stream,
        "countTokens" => Method::CountTokens,
        _ => return Err(invalid()),
    };
    if model.is_empty() {
        return Err(ProxyError::MissingField("model"));
    }
    match method {
        Method::CountTokens => count_tokens(&app, model, request).await,
        _ => generate(&app, model, method == Method::Stream, request).await,
    }
}

/// `generateContent` and `streamGenerateContent` on `model`.
async fn generate(app: &App, model: String, stream: bool, request: Request) -> Result<Response, ProxyError> {
    let endpoint = if stream { STREAM } else { GENERATE };
    let (admitted, body) = pipeline::admit(app, request, Access::Spend).await?;
    let raw = admitted.read_body(body).await?;
    let call = parse(model, raw)?;
    let json_array = stream && !query_has(&admitted, "alt", "sse");
    let (entry, candidates) = pipeline::route(&admitted, &call.model, endpoint)?;
    let bound = pipeline::Bound::tokens(call.body.len(), call.max_tokens);
    let charge = pipeline::reserve(app, &admitted, entry.clone(), endpoint, bound).await?;
    let headers = HeaderMap::new();
    let client = dialect::ClientCall {
        dialect: Dialect::Gemini,
        body: &call.body,
        model: &call.model,
        stream,
        headers: &headers,
        query: None,
        answering: Answering { model: call.model.clone(), created: now_unix(), include_usage: true, json_array },
    };
    let (client, charge) = (&client, &charge);
    let scope = admitted.scope_in_conversation(app, Some(&call.body), &call.model);
    if stream && !json_array {
        // A JSON-array stream has no comment to keep it alive with.
        pipeline::keepalive::arm(&admitted);
    }
    pipeline::attempts(&app.upstreams, scope, candidates, |channel| {
        let charge = charge.on_channel(&channel);
        let bytes = call.body.raw().len();
        app.usage.in_flight(charge, bytes, |charge| dialect::forward(app.attempt(), channel, client, charge))
    })
    .await
}

/// `countTokens` on `model`: asked of channels that speak Gemini for the
/// model (the Gemini API, Vertex's Gemini models), counted here with the
/// model family's tokenizer for the others. Free, like
/// `/v1/messages/count_tokens`: read access, no reservation, no usage.
async fn count_tokens(app: &App, model: String, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(app, request, Access::Read).await?;
    let raw = admitted.read_body(body).await?;
    let json: Value = serde_json::from_slice(&raw).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
    if !json.is_object() {
        return Err(ProxyError::InvalidJson("the body must be a JSON object".into()));
    }
    let (_, candidates) = pipeline::route(&admitted, &model, COUNT)?;
    let (model, json, headers) = (&model, &json, &admitted.parts.headers);
    pipeline::attempts(&app.upstreams, admitted.scope(), candidates, |channel| async move {
        let upstream_model = channel.upstream_model(model).to_owned();
        let speaks_gemini = provider::chat_call(&channel, &upstream_model, false).dialect == Dialect::Gemini;
        let path = match channel.kind {
            ChannelKind::Gemini if speaks_gemini => provider::gemini::count_tokens_path(&upstream_model),
            ChannelKind::Vertex if speaks_gemini => provider::vertex::count_tokens_path(&channel, &upstream_model),
            _ => {
                let counted = match as_messages_count(json) {
                    Some(body) => super::messages::provider_count(app, &channel, model, &body, headers).await,
                    None => None,
                };
                let total = counted.unwrap_or_else(|| tokens::count_request(model, json.to_string().as_bytes()));
                return Ok(Json(json!({ "totalTokens": total })).into_response());
            }
        };
        let body = count_body(json, &upstream_model, channel.kind);
        let response = app.upstreams.send(&channel, &path, provider::json_headers(), body, false).await?;
        let response = provider::accept(&app.upstreams, &channel, response).await?;
        let status = response.status();
        let bytes = app.upstreams.read_body(&channel, response).await?;
        Ok(provider::reply(status, None, bytes.into(), false))
    })
    .await
}

/// A `countTokens` body as a messages `count_tokens` body (what a
/// messages-native provider counts), when it translates.
fn as_messages_count(json: &Value) -> Option<JsonBody> {
    let request = json.get("generateContentRequest").filter(|inner| inner.is_object()).unwrap_or(json);
    let (request, mut dropped) = codec::decode_request(Dialect::Gemini, request).ok()?;
    let mut body = codec::encode_request(Dialect::Messages, &request, &mut dropped).ok()?;
    // Fields of a generate request that a count refuses.
    let edit = BodyEdit {
        drop: vec!["max_tokens", "stream", "temperature", "top_p", "top_k", "stop_sequences", "metadata"],
        set: Vec::new(),
    };
    edit.apply(&mut body);
    JsonBody::parse(Bytes::from(body.to_string())).ok()
}

/// A `countTokens` body for a channel: a `generateContentRequest` names
/// the upstream's model (the Gemini API) or is unwrapped (Vertex, which
/// takes the contents directly).
fn count_body(json: &Value, upstream_model: &str, kind: ChannelKind) -> Bytes {
    let Some(inner) = json.get("generateContentRequest").filter(|inner| inner.is_object()) else {
        return Bytes::from(json.to_string());
    };
    let mut inner = inner.clone();
    let body = if kind == ChannelKind::Vertex {
        if let Some(fields) = inner.as_object_mut() {
            fields.remove("model");
        }
        inner
    } else {
        inner["model"] = json!(format!("models/{upstream_model}"));
        json!({ "generateContentRequest": inner })
    };
    Bytes::from(body.to_string())
}

/// Validates a generate body: a JSON object whose `contents` is a
/// non-empty array; reads `generationConfig.maxOutputTokens`.
fn parse(model: String, raw: Bytes) -> Result<Call, ProxyError> {
    let (body, contents) = JsonBody::parse_reading::<Kind>(raw, "contents")?;
    match contents {
        None => return Err(ProxyError::MissingField("contents")),
        Some(Kind::Array(n)) if n > 0 => {}
        Some(_) => {
            let reason = "must be a non-empty array of contents".to_owned();
            return Err(ProxyError::InvalidField { field: "contents", reason });
        }
    }
    let max_tokens = body
        .value::<Value>("generationConfig")
        .and_then(|config| config.get("maxOutputTokens").and_then(Value::as_i64))
        .filter(|max| *max >= 0);
    Ok(Call { model, body, max_tokens })
}

/// Whether `request` carries its key as Gemini clients do (`x-goog-api-key`
/// or `key=`), so that a path both APIs share answers in Gemini's shape.
pub fn keyed(request: &Request) -> bool {
    request.headers().contains_key("x-goog-api-key")
        || request.uri().query().unwrap_or_default().split('&').any(|pair| pair.starts_with("key="))
}

/// Whether the query has `name=value`.
fn query_has(admitted: &Admitted, name: &str, value: &str) -> bool {
    let query = admitted.parts.uri.query().unwrap_or_default();
    query.split('&').any(|pair| pair.split_once('=') == Some((name, value)))
}

/// `GET /v1beta/models`: the catalogue models the caller's token may use,
/// in Gemini's model-list shape (all in one page).
pub async fn list_models(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, _) = pipeline::admit(&app, request, Access::Read).await?;
    let models: Vec<Value> = pipeline::models(&admitted).into_iter().map(|m| model_object(m)).collect();
    Ok(Json(json!({ "models": models })).into_response())
}

/// `GET /v1beta/models/{model}`: one model as `list_models` shows it; the
/// catalogue's refusals (403 outside the token's allowlist, 404 for a
/// model its group is not served) otherwise.
pub async fn get_model(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let id = id.strip_prefix("models/").unwrap_or(&id).to_owned();
    let (admitted, _) = pipeline::admit(&app, request, Access::Read).await?;
    Ok((StatusCode::OK, Json(model_object(pipeline::model(&admitted, &id)?))).into_response())
}

/// One model as Gemini's models API shows it; the methods are those its
/// catalogue category serves here.
fn model_object(model: &Model) -> Value {
    let methods: &[&str] = match model.category.as_str() {
        "" | "chat" | "responses" => &["generateContent", "streamGenerateContent", "countTokens"],
        _ => &[],
    };
    json!({
        "name": format!("models/{}", model.id),
        "baseModelId": model.id,
        "version": "001",
        "displayName": model.id,
        "description": "",
        "supportedGenerationMethods": methods,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn generate_bodies_need_contents_and_give_their_output_bound() {
        let parse = |body: &'static str| parse("m".into(), Bytes::from_static(body.as_bytes()));
        let call = parse(r#"{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":64}}"#);
        assert_eq!(call.unwrap().max_tokens, Some(64));
        assert!(matches!(parse(r#"{"generationConfig":{}}"#), Err(ProxyError::MissingField("contents"))));
        assert!(matches!(parse(r#"{"contents":[]}"#), Err(ProxyError::InvalidField { field: "contents", .. })));
        assert!(matches!(parse(r#"{"contents":"hi"}"#), Err(ProxyError::InvalidField { .. })));
        assert!(matches!(parse("[1]"), Err(ProxyError::InvalidJson(_))));
    }

    #[test]
    fn count_bodies_name_the_upstream_model_or_are_unwrapped_for_vertex() {
        let wrapped = json!({"generateContentRequest": {"model": "models/alias", "contents": []}});
        let gemini: Value =
            serde_json::from_slice(&count_body(&wrapped, "gemini-2.5-pro", ChannelKind::Gemini)).unwrap();
        assert_eq!(gemini["generateContentRequest"]["model"], "models/gemini-2.5-pro");
        let vertex: Value =
            serde_json::from_slice(&count_body(&wrapped, "gemini-2.5-pro", ChannelKind::Vertex)).unwrap();
        assert_eq!(vertex, json!({"contents": []}));
        let plain = json!({"contents": [{"parts": [{"text": "x"}]}]});
        assert_eq!(count_body(&plain, "m", ChannelKind::Gemini), Bytes::from(plain.to_string()));
    }
}
