//! `/v1/messages/batches`: the requests come inline, are checked (one
//! model) and routed to an `anthropic` channel; the control plane creates
//! the batch (its bound held) before it is submitted there. The results are
//! streamed from that channel; the batch object's `results_url` points at
//! this gateway, where the SDKs fetch them.

use std::sync::Arc;

use axum::{
    extract::{Path, Request, State},
    http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header},
    response::Response,
};
use serde_json::{Value, json};

use super::{holder, json_response, lines, page_query, reader, route, stream_through};
use crate::{
    batches::{Batch, NewBatch},
    error::ProxyError,
    pipeline::{self, Admitted, App},
    policy::{auth::Access, domain::ChannelKind},
    provider,
};

/// `anthropic-version` sent when the client named none.
const VERSION: &str = "2023-06-01";
/// Largest submission answer read.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// `POST /v1/messages/batches`.
pub async fn create(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Spend).await?;
    let raw = pipeline::read_body(body, &admitted.parts.headers).await?;
    let mut body: Value = serde_json::from_slice(&raw).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
    let lines = lines::read_requests(&body)?;
    let (model, channel) = route(&admitted, &lines.model, lines.endpoint, ChannelKind::Anthropic)?;
    let upstream_model = channel.upstream_model(&model.id).to_owned();
    if upstream_model != model.id {
        lines::rename_request_model(&mut body, &upstream_model);
    }
    let new = NewBatch {
        request_id: &admitted.id.0,
        kind: "anthropic",
        model: &model.id,
        channel_id: &channel.id,
        input_file_id: "",
        endpoint: lines.endpoint,
        completion_window: "24h",
        bound: lines.bound,
    };
    let batch = app.batches.create(&admitted.caller, new).await?;
    let submitted = async {
        let response = app
            .upstreams
            .request(
                &channel,
                Method::POST,
                "/messages/batches",
                headers(&admitted),
                bytes::Bytes::from(body.to_string()).into(),
                false,
            )
            .await?;
        let response = provider::accept(&app.upstreams, &channel, response).await?;
        let answer = provider::read_capped(response, MAX_ANSWER_BYTES).await;
        match serde_json::from_slice::<Value>(&answer) {
            Ok(answer) if answer.get("id").and_then(Value::as_str).is_some() => Ok(answer),
            _ => {
                let message = "the upstream's answer is not a message batch".to_owned();
                Err(ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message })
            }
        }
    };
    let batch = match submitted.await {
        Ok(answer) => app.batches.accepted(&batch.id, &answer).await?,
        Err(error) => {
            if let Err(record_error) = app.batches.rejected(&batch.id, &error).await {
                tracing::warn!(batch = %batch.id, reason = record_error.reason(), "could not record a failed batch submission");
            }
            return Err(error);
        }
    };
    tracing::info!(request_id = %admitted.id.0, batch = %batch.id, channel = %channel.id, "message batch submitted");
    Ok(json_response(StatusCode::OK, &object(&admitted, &batch)))
}

/// `GET /v1/messages/batches/{id}`.
pub async fn retrieve(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let batch = app.batches.get(&admitted.caller, &id).await?;
    Ok(json_response(StatusCode::OK, &object(&admitted, &batch)))
}

/// `GET /v1/messages/batches`: the caller's message batches, newest first.
pub async fn list(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (limit, after) = page_query(request.uri().query())?;
    let admitted = reader(&app, request).await?;
    let page = app.batches.list(&admitted.caller, "anthropic", limit, &after).await?;
    let items: Vec<&Batch> = page.items.iter().collect();
    let body = json!({
        "data": items.iter().map(|b| object(&admitted, b)).collect::<Vec<_>>(),
        "has_more": page.has_more,
        "first_id": items.first().map(|b| b.id.clone()),
        "last_id": items.last().map(|b| b.id.clone()),
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// `POST /v1/messages/batches/{id}/cancel`.
pub async fn cancel(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let batch = app.batches.cancel(&admitted.caller, &id).await?;
    Ok(json_response(StatusCode::OK, &object(&admitted, &batch)))
}

/// `GET /v1/messages/batches/{id}/results`: JSONL streamed from the
/// channel; 404 until the batch ended.
pub async fn results(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let batch = app.batches.get(&admitted.caller, &id).await?;
    if !batch.ended || batch.upstream_id.is_empty() {
        return Err(ProxyError::BatchObjectNotFound { what: "results of message batch", id });
    }
    let channel = holder(&admitted, &batch.channel_id)?;
    let path = format!("/messages/batches/{}/results", provider::video::path_segment(&batch.upstream_id));
    let upstream = app
        .upstreams
        .request(&channel, Method::GET, &path, headers(&admitted), bytes::Bytes::new().into(), true)
        .await?;
    let upstream = provider::accept(&app.upstreams, &channel, upstream).await?;
    Ok(stream_through(&app, &channel, upstream))
}

/// The upstream call's headers: JSON, and the client's `anthropic-version`
/// and `anthropic-beta` (a default version when it sent none).
fn headers(admitted: &Admitted) -> HeaderMap {
    let mut headers = provider::json_headers();
    let version = HeaderName::from_static("anthropic-version");
    let value = admitted.parts.headers.get(&version).cloned().unwrap_or(HeaderValue::from_static(VERSION));
    headers.insert(version, value);
    if let Some(beta) = admitted.parts.headers.get("anthropic-beta") {
        headers.insert(HeaderName::from_static("anthropic-beta"), beta.clone());
    }
    headers
}

/// The batch object with `results_url` on this gateway once it ended.
fn object(admitted: &Admitted, batch: &Batch) -> Value {
    let mut object = batch.object.clone();
    let results = if batch.ended && !batch.upstream_id.is_empty() {
        let headers = &admitted.parts.headers;
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
        let scheme = headers.get("x-forwarded-proto").and_then(|h| h.to_str().ok()).unwrap_or("http");
        json!(format!("{scheme}://{host}/v1/messages/batches/{}/results", batch.id))
    } else {
        Value::Null
    };
    object["results_url"] = results;
    object
}
