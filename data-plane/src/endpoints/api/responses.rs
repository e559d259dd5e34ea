//! What `/v1/responses` needs beyond the OpenAI passthrough: an attempt on
//! a channel that does not speak OpenAI's API goes through the internal
//! form (`provider::dialect::forward`), and `POST
//! /v1/responses/input_tokens` counts a request's input. Counting is free:
//! it records no usage and takes no rate-limit permit, like
//! `/v1/messages/count_tokens`; OpenAI channels count it themselves, the
//! others have it counted here as their messages translation would be.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode},
    response::Response,
};
use serde_json::{Value, json};

use crate::{
    error::ProxyError,
    json_body::JsonBody,
    meter::Charge,
    now_unix,
    pipeline::{self, App},
    policy::{
        auth::Access,
        domain::{Channel, ChannelKind},
    },
    provider::{
        self,
        dialect::{self, ClientCall},
    },
    tokens,
    translate::{
        TranslateError,
        codec::{self, Answering, Dialect},
    },
};

/// The client-facing path of input-token counting.
pub const INPUT_TOKENS_PATH: &str = "/v1/responses/input_tokens";
/// Where an OpenAI channel counts input tokens, under its base URL.
const UPSTREAM_INPUT_TOKENS_PATH: &str = "/responses/input_tokens";
/// The endpoint counting is routed as: a model that serves responses may
/// be counted.
const ROUTED_AS: &str = "/v1/responses";

/// Whether `channel` takes OpenAI's own endpoints (`openai`, `azure`), so
/// a responses request passes through to it.
pub fn speaks_openai(channel: &Channel) -> bool {
    matches!(channel.kind, ChannelKind::OpenAi | ChannelKind::Azure)
}

/// One `/v1/responses` attempt on a channel of another dialect: `body`
/// translated through the internal form and the answer translated back,
/// metered like chat. A request naming state kept by OpenAI
/// (`previous_response_id`) is refused with a 400.
pub async fn translated(
    app: &App,
    channel: Arc<Channel>,
    body: &JsonBody,
    model: &str,
    stream: bool,
    charge: Charge,
) -> Result<Response, ProxyError> {
    let headers = HeaderMap::new();
    let call = ClientCall {
        dialect: Dialect::Responses,
        body,
        model,
        stream,
        headers: &headers,
        query: None,
        answering: Answering { model: model.to_owned(), created: now_unix(), ..Answering::default() },
    };
    dialect::forward(app.attempt(), channel, &call, charge).await
}

/// Handles `POST /v1/responses/input_tokens`: answers
/// `{"object":"response.input_tokens","input_tokens":N}`, from an OpenAI
/// channel's own count or counted here.
pub async fn input_tokens(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Read).await?;
    let body = JsonBody::parse(admitted.read_body(body).await?)?;
    let model = body.value::<String>("model").filter(|m| !m.is_empty()).ok_or(ProxyError::MissingField("model"))?;
    let (_, candidates) = pipeline::route(&admitted, &model, ROUTED_AS)?;
    let (app, body, model) = (&*app, &body, model.as_str());
    pipeline::attempts(&app.upstreams, admitted.scope(), candidates, |channel| async move {
        if channel.kind != ChannelKind::OpenAi {
            let json =
                serde_json::from_slice::<Value>(body.raw()).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
            let input_tokens = count(model, &json).map_err(|e| ProxyError::Untranslatable(e.to_string()))?;
            let answer = json!({ "object": "response.input_tokens", "input_tokens": input_tokens });
            return Ok(provider::reply(StatusCode::OK, None, answer.to_string().into(), false));
        }
        let upstream_model = channel.upstream_model(model);
        let rename = (upstream_model != model).then_some(upstream_model);
        let upstream = body.rewrite(rename, false);
        let content_type = HeaderValue::from_static("application/json");
        let response = app.upstreams.post(&channel, UPSTREAM_INPUT_TOKENS_PATH, content_type, upstream, false).await?;
        let response = provider::accept(&app.upstreams, &channel, response).await?;
        let status = response.status();
        let bytes = app.upstreams.read_body(&channel, response).await?;
        Ok(provider::reply(status, None, bytes.into(), false))
    })
    .await
}

/// The input tokens of responses request `body` for `model`: decoded into
/// the internal form, written as a messages request and counted as
/// `/v1/messages/count_tokens` counts for channels that cannot count.
/// Fails on a request the responses decoder refuses.
pub fn count(model: &str, body: &Value) -> Result<i64, TranslateError> {
    let (request, mut dropped) = codec::decode_request(Dialect::Responses, body)?;
    let messages = codec::encode_request(Dialect::Messages, &request, &mut dropped)?;
    Ok(tokens::count_messages_input(model, &messages))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_responses_request_counts_as_the_same_messages_request() {
        let tool = json!({"type": "function", "name": "weather", "description": "d", "parameters": {"type": "object"}});
        let responses = json!({
            "model": "gpt-4o",
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]}],
            "tools": [tool],
        });
        let messages = json!({
            "model": "gpt-4o",
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
        });
        let counted = count("gpt-4o", &responses).unwrap();
        assert!(counted > 10, "{counted}");
        assert_eq!(counted, tokens::count_messages_input("gpt-4o", &messages));
        assert!(count("gpt-4o", &json!({"model": "gpt-4o", "previous_response_id": "resp_1"})).is_err());
    }
}
