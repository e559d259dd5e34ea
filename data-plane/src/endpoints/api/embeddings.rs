//! `/v1/embeddings` on a `gemini` channel: each input is embedded with the
//! Gemini API's `embedContent` and the answer is written in OpenAI's list
//! shape (`encoding_format` `float` or `base64`, as the OpenAI SDKs ask).
//! Gemini reports no token counts for embeddings, so the input is counted
//! here with the model family's tokenizer and the record says it is an
//! estimate.

use std::sync::Arc;

use axum::{body::Body, http::StatusCode, response::Response};
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::{
    error::ProxyError,
    json_body::JsonBody,
    meter::Charge,
    pipeline::App,
    policy::domain::Channel,
    pricing::{Units, Usage},
    provider, tokens,
};

/// Embeds every input of the embeddings request `body` on the gemini
/// `channel`; one record for the request, written before the answer goes.
pub async fn on_gemini(
    app: &App,
    channel: Arc<Channel>,
    body: &JsonBody,
    model: &str,
    charge: Charge,
) -> Result<Response, ProxyError> {
    let inputs = inputs(body)?;
    let dimensions = body.value::<i64>("dimensions").filter(|d| *d > 0);
    let base64 = body.value::<String>("encoding_format").is_some_and(|f| f == "base64");
    let upstream_model = channel.upstream_model(model);
    let path = provider::gemini::embed_path(upstream_model);
    let mut data = Vec::with_capacity(inputs.len());
    for (index, text) in inputs.iter().enumerate() {
        let mut request = json!({ "content": { "parts": [{ "text": text }] } });
        if let Some(dimensions) = dimensions {
            request["outputDimensionality"] = json!(dimensions);
        }
        let content_type = axum::http::HeaderValue::from_static("application/json");
        let body = Bytes::from(request.to_string());
        let response = app.upstreams.post(&channel, &path, content_type, body, false).await?;
        let response = provider::accept(&app.upstreams, &channel, response).await?;
        let bytes = app.upstreams.read_body(&channel, response).await?;
        let values = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|answer| answer["embedding"]["values"].as_array().cloned())
            .ok_or_else(|| {
                tracing::warn!(channel = %channel.id, "embedContent answered without embedding values");
                let message = "upstream answer has no embedding".to_owned();
                ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message }
            })?;
        let embedding = if base64 { json!(packed(&values)) } else { Value::Array(values) };
        data.push(json!({ "object": "embedding", "index": index, "embedding": embedding }));
    }
    let prompt_tokens = inputs.iter().map(|text| tokens::count(model, text)).sum::<i64>();
    let usage = Usage { prompt_tokens, ..Usage::default() };
    app.usage.record_with(&charge, usage, Units::default(), 200, true).wait().await;
    let answer = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": { "prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens },
    });
    Ok(provider::reply(StatusCode::OK, None, Body::from(answer.to_string()), false))
}

/// The texts to embed: `input` as a string or an array of strings (token
/// arrays have no meaning to another provider's tokenizer: refused).
fn inputs(body: &JsonBody) -> Result<Vec<String>, ProxyError> {
    let refused = || {
        let reason = "must be a string or an array of strings for this model's channel".to_owned();
        ProxyError::InvalidField { field: "input", reason }
    };
    match body.value::<Value>("input") {
        Some(Value::String(text)) => Ok(vec![text]),
        Some(Value::Array(items)) if !items.is_empty() => {
            items.into_iter().map(|item| item.as_str().map(str::to_owned).ok_or_else(refused)).collect()
        }
        None => Err(ProxyError::MissingField("input")),
        Some(_) => Err(refused()),
    }
}

/// Values as OpenAI's `base64` encoding: little-endian `f32`s, base64.
fn packed(values: &[Value]) -> String {
    let mut bytes = Vec::with_capacity(values.len() * 4);
    for value in values {
        #[allow(clippy::cast_possible_truncation)] // f32 is the encoding's precision
        let single = value.as_f64().unwrap_or(0.0) as f32;
        bytes.extend_from_slice(&single.to_le_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn inputs_are_a_string_or_strings_and_base64_is_little_endian_f32() {
        let body = |text: &str| JsonBody::parse(Bytes::from(text.to_owned())).unwrap();
        assert_eq!(inputs(&body(r#"{"input":"a"}"#)).unwrap(), ["a"]);
        assert_eq!(inputs(&body(r#"{"input":["a","b"]}"#)).unwrap(), ["a", "b"]);
        assert!(inputs(&body(r#"{"input":[[1,2]]}"#)).is_err(), "token arrays are refused");
        assert!(inputs(&body(r#"{"input":[]}"#)).is_err());
        let decoded = base64::engine::general_purpose::STANDARD.decode(packed(&[json!(1.0), json!(-0.5)])).unwrap();
        assert_eq!(decoded, [1.0f32.to_le_bytes(), (-0.5f32).to_le_bytes()].concat());
    }
}
