//! The mock upstream's `POST /v1/rerank`, in the two shapes gateways meet:
//! Cohere's v1 (models named `rerank-…`: `meta.billed_units.search_units`,
//! one per 100 documents, and no token counts) and Jina's (any other model:
//! `usage.total_tokens`, here one per word of the query and documents).
//! Results are ordered by a deterministic score (the share of the query's
//! words a document contains), cut to `top_n`, and carry the document when
//! `return_documents` asks. Served by [`crate::mock::upstream`]'s handler,
//! so scripted failures, keys and recording apply to it too.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Documents one Cohere search unit covers.
pub const DOCUMENTS_PER_SEARCH_UNIT: usize = 100;

/// The answer to rerank request `body`; 400 in OpenAI's error shape when it
/// lacks a query or documents.
pub fn rerank(body: &[u8], id: u64) -> Response {
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let (Some(model), Some(query), Some(documents)) = (
        request["model"].as_str(),
        request["query"].as_str(),
        request["documents"].as_array().filter(|d| !d.is_empty()),
    ) else {
        let body = json!({"error": {"message": "model, query and documents are required", "type": "invalid_request_error", "param": null, "code": null}});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    };
    let texts: Vec<&str> = documents.iter().map(text).collect();
    let mut ranked: Vec<(usize, f64)> = texts.iter().map(|t| score(query, t)).enumerate().collect();
    // Highest score first; ties keep the documents' order.
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let top_n = request["top_n"].as_u64().map_or(ranked.len(), |n| usize::try_from(n).unwrap_or(usize::MAX));
    ranked.truncate(top_n);
    let with_documents = request["return_documents"].as_bool().unwrap_or(false);
    let results: Vec<Value> = ranked
        .iter()
        .map(|(index, score)| {
            let mut result = json!({ "index": index, "relevance_score": score });
            if with_documents {
                result["document"] = json!({ "text": texts[*index] });
            }
            result
        })
        .collect();
    let answer = if model.starts_with("rerank-") {
        let units = documents.len().div_ceil(DOCUMENTS_PER_SEARCH_UNIT);
        json!({
            "id": format!("rerank-mock{id}"),
            "results": results,
            "meta": { "api_version": { "version": "1" }, "billed_units": { "search_units": units } },
        })
    } else {
        let tokens = words(query) + texts.iter().map(|t| words(t)).sum::<usize>();
        json!({ "model": model, "usage": { "total_tokens": tokens }, "results": results })
    };
    (StatusCode::OK, axum::Json(answer)).into_response()
}

/// The tokens the Jina shape reports for `query` over `documents`.
pub fn jina_tokens(query: &str, documents: &[&str]) -> usize {
    words(query) + documents.iter().map(|d| words(d)).sum::<usize>()
}

/// A document's text: the string, or an object's `text`.
fn text(document: &Value) -> &str {
    document.as_str().or_else(|| document["text"].as_str()).unwrap_or_default()
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// The share of `query`'s words that `document` contains, case-blind.
fn score(query: &str, document: &str) -> f64 {
    let document: Vec<String> = document.split_whitespace().map(str::to_lowercase).collect();
    let query: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let hits = query.iter().filter(|w| document.contains(w)).count();
    if query.is_empty() { 0.0 } else { hits as f64 / query.len() as f64 }
}
