//! `POST /v1/rerank`, in the shape Jina, Cohere's v1 API, vLLM and
//! Xinference serve: a `query` and its `documents` (strings or objects with
//! a `text`) for a `rerank` model. It runs the one pipeline (admit, body
//! limit, route with the `rerank` category, reserve, attempts) and passes
//! the body through to `{base}/rerank` on `openai` channels, the model
//! mapped; channels of other kinds have no rerank API and are left out of
//! the attempts (none left: a 400 naming the kind).
//!
//! Pricing: the answer's tokens (Jina's and vLLM's `usage.prompt_tokens` or
//! `usage.total_tokens`) at the model's input price, plus its search units
//! (Cohere's `meta.billed_units.search_units`; else one per 100 documents)
//! at its search-unit price. Tokens no answer reports are counted here and
//! the record says they are an estimate.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, header},
    response::Response,
};
use bytes::Bytes;
use serde_json::Value;

use crate::{
    error::ProxyError,
    json_body::JsonBody,
    meter::Charge,
    pipeline::{self, App},
    policy::auth::Access,
    policy::domain::{Channel, ChannelKind},
    pricing::{Units, Usage, search_units},
    provider, tokens,
};

/// The client-facing path.
pub const PATH: &str = "/v1/rerank";
/// The path under an OpenAI-compatible channel's base URL (ends in `/v1`).
const UPSTREAM_PATH: &str = "/rerank";

/// A validated rerank request.
struct Call {
    model: String,
    body: JsonBody,
    /// The query and every document's text, for counting tokens when the
    /// upstream reports none.
    texts: Vec<String>,
    documents: usize,
}

/// Handles `POST /v1/rerank`.
pub async fn handle(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Spend).await?;
    let body = admitted.read_body(body).await?;
    let call = Call::parse(body)?;
    let (model, candidates) = pipeline::route(&admitted, &call.model, PATH)?;
    let candidates = reranking(candidates)?;
    let charge = pipeline::reserve(&app, &admitted, model.clone(), PATH, call.bound()).await?;
    let (app, call, charge) = (&*app, &call, &charge);
    pipeline::attempts(&app.upstreams, admitted.scope(), &candidates, |channel| {
        let charge = charge.on_channel(&channel);
        app.usage.in_flight(charge, call.body.len(), |charge| forward(app, channel, call, charge))
    })
    .await
}

/// The channels of `candidates` that serve rerank (`openai` ones), in
/// their order; a 400 naming the kind when there is none.
fn reranking(candidates: &[Arc<Channel>]) -> Result<Vec<Arc<Channel>>, ProxyError> {
    let serving: Vec<_> = candidates.iter().filter(|c| c.kind == ChannelKind::OpenAi).cloned().collect();
    match candidates.first() {
        Some(first) if serving.is_empty() => Err(ProxyError::Untranslatable(format!(
            "{PATH} is served by openai channels, and this model's channel is {}",
            first.kind.name()
        ))),
        _ => Ok(serving),
    }
}

/// One attempt on `channel`: the body passed through, the answer passed
/// back once its record is on the spool. Fails, without having sent the
/// client anything, on an upstream error status or a transport failure.
async fn forward(app: &App, channel: Arc<Channel>, call: &Call, charge: Charge) -> Result<Response, ProxyError> {
    let upstream_model = channel.upstream_model(&call.model);
    let rename = (upstream_model != call.model).then_some(upstream_model);
    let body = call.body.rewrite(rename, false);
    let json = HeaderValue::from_static("application/json");
    let response = app.upstreams.post(&channel, UPSTREAM_PATH, json, body, false).await?;
    let response = provider::accept(&app.upstreams, &channel, response).await?;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let bytes = app.upstreams.read_body(&channel, response).await?;
    let (usage, units, estimated) = call.bill(&bytes);
    app.usage.record_with(&charge, usage, units, status.as_u16(), estimated).wait().await;
    Ok(provider::reply(status, content_type, Body::from(bytes), false))
}

// === impl Call ===

impl Call {
    /// Validates `body`: a `model`, a non-empty `query`, a non-empty list of
    /// `documents` (strings or objects), and `top_n` and
    /// `max_chunks_per_doc` positive and `return_documents` a boolean when
    /// given. Anything else passes through unread.
    fn parse(body: Bytes) -> Result<Call, ProxyError> {
        let body = JsonBody::parse(body)?;
        let invalid = |field: &'static str, reason: &str| ProxyError::InvalidField { field, reason: reason.to_owned() };
        let model = match body.value::<Value>("model") {
            None => return Err(ProxyError::MissingField("model")),
            Some(Value::String(model)) if !model.is_empty() => model,
            Some(_) => return Err(invalid("model", "must be a non-empty string")),
        };
        let query = match body.value::<Value>("query") {
            None => return Err(ProxyError::MissingField("query")),
            Some(Value::String(query)) if !query.is_empty() => query,
            Some(_) => return Err(invalid("query", "must be a non-empty string")),
        };
        let documents = match body.value::<Value>("documents") {
            None => return Err(ProxyError::MissingField("documents")),
            Some(Value::Array(documents)) if !documents.is_empty() => documents,
            Some(_) => return Err(invalid("documents", "must be a non-empty array of strings or objects")),
        };
        let mut texts = Vec::with_capacity(documents.len() + 1);
        texts.push(query);
        for (index, document) in documents.iter().enumerate() {
            match document {
                Value::String(text) => texts.push(text.clone()),
                // Cohere's `rank_fields` rank other fields of an object: all
                // of its strings count.
                Value::Object(fields) if !fields.is_empty() => {
                    texts.extend(fields.values().filter_map(Value::as_str).map(str::to_owned));
                }
                _ => {
                    let reason = format!("item {index} must be a string or an object with a \"text\"");
                    return Err(ProxyError::InvalidField { field: "documents", reason });
                }
            }
        }
        for field in ["top_n", "max_chunks_per_doc"] {
            match body.value::<Value>(field) {
                None | Some(Value::Null) => {}
                Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => {}
                Some(_) => return Err(invalid(field, "must be a positive integer")),
            }
        }
        if !matches!(body.value::<Value>("return_documents"), None | Some(Value::Null | Value::Bool(_))) {
            return Err(invalid("return_documents", "must be true or false"));
        }
        Ok(Call { model, body, texts, documents: documents.len() })
    }

    /// The most this call may cost: its body as prompt tokens, no output,
    /// and the search units its documents make.
    fn bound(&self) -> pipeline::Bound {
        let units = Units { search_units: search_units(self.documents), ..Units::default() };
        pipeline::Bound { body_bytes: self.body.len(), max_output_tokens: Some(0), units }
    }

    /// What the answer `body` costs: its tokens as prompt tokens, its search
    /// units, and whether the tokens were counted here.
    fn bill(&self, body: &Bytes) -> (Usage, Units, bool) {
        let answer = JsonBody::parse(body.clone()).ok();
        let usage = answer.as_ref().and_then(|a| a.value::<Value>("usage"));
        let count = |value: Option<&Value>| value.and_then(Value::as_i64).filter(|n| *n >= 0);
        let reported =
            usage.as_ref().and_then(|u| count(u.get("prompt_tokens")).or_else(|| count(u.get("total_tokens"))));
        let billed =
            answer.as_ref().and_then(|a| a.value::<Value>("meta")).and_then(|meta| meta.get("billed_units").cloned());
        let billed_tokens = billed.as_ref().and_then(|b| count(b.get("input_tokens")));
        let billed_units = billed.as_ref().and_then(|b| count(b.get("search_units")));
        let units =
            Units { search_units: billed_units.unwrap_or_else(|| search_units(self.documents)), ..Units::default() };
        let (prompt_tokens, estimated) = match reported.or(billed_tokens) {
            Some(tokens) => (tokens, false),
            None => (self.texts.iter().map(|text| tokens::count(&self.model, text)).sum(), true),
        };
        (Usage { prompt_tokens, ..Usage::default() }, units, estimated)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Call, ProxyError> {
        Call::parse(Bytes::from(body.to_owned()))
    }

    fn field_of(error: ProxyError) -> &'static str {
        match error {
            ProxyError::MissingField(field) | ProxyError::InvalidField { field, .. } => field,
            other => panic!("not a field error: {other:?}"),
        }
    }

    #[test]
    fn requests_need_a_model_a_query_and_documents() {
        let call = parse(r#"{"model":"r","query":"q","documents":["a",{"text":"b"}],"top_n":1}"#).unwrap();
        assert_eq!((call.model.as_str(), call.documents, call.texts.len()), ("r", 2, 3));
        for (body, field) in [
            (r#"{"query":"q","documents":["a"]}"#, "model"),
            (r#"{"model":"","query":"q","documents":["a"]}"#, "model"),
            (r#"{"model":"r","documents":["a"]}"#, "query"),
            (r#"{"model":"r","query":["q"],"documents":["a"]}"#, "query"),
            (r#"{"model":"r","query":"q"}"#, "documents"),
            (r#"{"model":"r","query":"q","documents":[]}"#, "documents"),
            (r#"{"model":"r","query":"q","documents":"a"}"#, "documents"),
            (r#"{"model":"r","query":"q","documents":["a",7]}"#, "documents"),
            (r#"{"model":"r","query":"q","documents":["a"],"top_n":0}"#, "top_n"),
            (r#"{"model":"r","query":"q","documents":["a"],"top_n":"3"}"#, "top_n"),
            (r#"{"model":"r","query":"q","documents":["a"],"max_chunks_per_doc":-1}"#, "max_chunks_per_doc"),
            (r#"{"model":"r","query":"q","documents":["a"],"return_documents":"yes"}"#, "return_documents"),
        ] {
            assert_eq!(field_of(parse(body).err().unwrap()), field, "{body}");
        }
        assert!(matches!(parse("[1]"), Err(ProxyError::InvalidJson(_))));
    }

    #[test]
    fn answers_are_billed_by_their_tokens_and_search_units() {
        let documents = (0..150).map(|i| format!("\"d{i}\"")).collect::<Vec<_>>().join(",");
        let call = parse(&format!(r#"{{"model":"r","query":"q","documents":[{documents}]}}"#)).unwrap();
        assert_eq!(call.bound().units.search_units, 2, "150 documents are two units");
        let bill = |answer: &'static str| call.bill(&Bytes::from_static(answer.as_bytes()));
        let jina = bill(r#"{"results":[],"usage":{"total_tokens":42}}"#);
        assert_eq!((jina.0.prompt_tokens, jina.1.search_units, jina.2), (42, 2, false));
        let vllm = bill(r#"{"results":[],"usage":{"prompt_tokens":40,"total_tokens":42}}"#);
        assert_eq!(vllm.0.prompt_tokens, 40, "prompt tokens before the total");
        let cohere = bill(r#"{"results":[],"meta":{"billed_units":{"search_units":1}}}"#);
        assert_eq!((cohere.1.search_units, cohere.2), (1, true), "the upstream's units; tokens counted here");
        assert!(cohere.0.prompt_tokens > 0);
        let both = bill(r#"{"meta":{"billed_units":{"search_units":3,"input_tokens":9}}}"#);
        assert_eq!((both.0.prompt_tokens, both.1.search_units, both.2), (9, 3, false));
        let garbage = bill("not json");
        assert_eq!((garbage.1.search_units, garbage.2), (2, true));
    }

    #[test]
    fn only_openai_channels_rerank() {
        let mut other = crate::policy::snapshot::tests::channel("a", 1, 1, &["g"], &["m"]);
        other.kind = ChannelKind::Anthropic;
        let openai = crate::policy::snapshot::tests::channel("b", 0, 1, &["g"], &["m"]);
        let both = [Arc::new(other.clone()), Arc::new(openai)];
        assert_eq!(reranking(&both).unwrap().iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["b"]);
        assert!(matches!(reranking(&[Arc::new(other)]), Err(ProxyError::Untranslatable(_))));
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_body_is_parsed_or_refused_with_a_4xx_and_any_answer_billed(
            body in crate::fuzz::body(),
            answer in crate::fuzz::body(),
        ) {
            match Call::parse(Bytes::from(body)) {
                Ok(call) => {
                    let (usage, units, _) = call.bill(&Bytes::from(answer));
                    proptest::prop_assert!(usage.prompt_tokens >= 0 && units.search_units >= 0);
                    let _ = call.bound();
                }
                Err(error) => crate::fuzz::assert_client_error(&error)?,
            }
        }
    }
}
