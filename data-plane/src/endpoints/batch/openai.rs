//! `/v1/batches`: a batch over a file of the caller's is created (its bound
//! held) by the control plane, then submitted to the channel that holds the
//! file; retrieval, listing and cancellation go through the control plane,
//! which asks the upstream. A failed submission ends the batch and releases
//! its hold.

use std::sync::Arc;

use axum::{
    extract::{Path, Request, State},
    http::{Method, StatusCode},
    response::Response,
};
use serde_json::{Value, json};

use super::{holder, json_response, lines, page_query, reader};
use crate::{
    batches::{Batch, Bound, NewBatch},
    error::ProxyError,
    pipeline::{self, App},
    policy::auth::Access,
    provider,
};

/// The completion window upstreams offer.
const WINDOW: &str = "24h";
/// Largest submission answer read.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// `POST /v1/batches`.
pub async fn create(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Spend).await?;
    let raw = pipeline::read_body(body, &admitted.parts.headers).await?;
    let body: Value = serde_json::from_slice(&raw).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
    let text = |field: &'static str| body.get(field).and_then(Value::as_str).ok_or(ProxyError::MissingField(field));
    let (input_file_id, endpoint) = (text("input_file_id")?, text("endpoint")?);
    let window = body.get("completion_window").and_then(Value::as_str).unwrap_or(WINDOW);
    if window != WINDOW {
        return Err(ProxyError::InvalidField { field: "completion_window", reason: format!("must be {WINDOW:?}") });
    }
    let endpoint = lines::ENDPOINTS.into_iter().find(|e| *e == endpoint).ok_or_else(|| ProxyError::InvalidField {
        field: "endpoint",
        reason: format!("must be one of {}", lines::ENDPOINTS.join(", ")),
    })?;
    let file = app.batches.file(&admitted.caller, input_file_id).await?;
    if file.endpoint != endpoint || file.model.is_empty() {
        let reason = format!("file {} holds requests to {}, not {endpoint}", file.id, file.endpoint);
        return Err(ProxyError::InvalidField { field: "endpoint", reason });
    }
    // The token must still be allowed the model, in a group that routes it.
    pipeline::route(&admitted, &file.model, endpoint)?;
    let channel = holder(&admitted, &file.channel_id)?;
    admitted.trail.update(|t| {
        t.channel = Some(channel.id.clone());
        t.attempts = 1;
    });
    let new = NewBatch {
        request_id: &admitted.id.0,
        kind: "openai",
        model: &file.model,
        channel_id: &channel.id,
        input_file_id: &file.id,
        endpoint,
        completion_window: window,
        bound: Bound::default(),
    };
    let batch = app.batches.create(&admitted.caller, new).await?;
    let mut upstream_body =
        json!({"input_file_id": file.upstream_id, "endpoint": endpoint, "completion_window": window});
    if let Some(metadata) = body.get("metadata").filter(|m| m.is_object()) {
        upstream_body["metadata"] = metadata.clone();
    }
    let submitted = async {
        let body = bytes::Bytes::from(upstream_body.to_string());
        let response = app
            .upstreams
            .request(&channel, Method::POST, "/batches", provider::json_headers(), body.into(), false)
            .await?;
        let response = provider::accept(&app.upstreams, &channel, response).await?;
        let answer = provider::read_capped(response, MAX_ANSWER_BYTES).await;
        match serde_json::from_slice::<Value>(&answer) {
            Ok(answer) if answer.get("id").and_then(Value::as_str).is_some() => Ok(answer),
            _ => {
                let message = "the upstream's answer is not a batch".to_owned();
                Err(ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message })
            }
        }
    };
    let batch = match submitted.await {
        Ok(answer) => app.batches.accepted(&batch.id, &answer).await?,
        Err(error) => {
            if let Err(record_error) = app.batches.rejected(&batch.id, &error).await {
                // The control plane's poller ends it and releases its hold later.
                tracing::warn!(batch = %batch.id, reason = record_error.reason(), "could not record a failed batch submission");
            }
            return Err(error);
        }
    };
    tracing::info!(request_id = %admitted.id.0, batch = %batch.id, channel = %channel.id, "batch submitted");
    Ok(json_response(StatusCode::OK, &batch.object))
}

/// `GET /v1/batches/{id}`.
pub async fn retrieve(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let batch = app.batches.get(&admitted.caller, &id).await?;
    Ok(json_response(StatusCode::OK, &batch.object))
}

/// `GET /v1/batches`: the caller's batches, newest first.
pub async fn list(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (limit, after) = page_query(request.uri().query())?;
    let admitted = reader(&app, request).await?;
    let page = app.batches.list(&admitted.caller, "openai", limit, &after).await?;
    Ok(json_response(StatusCode::OK, &list_object(&page.items, page.has_more)))
}

/// `POST /v1/batches/{id}/cancel`.
pub async fn cancel(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let batch = app.batches.cancel(&admitted.caller, &id).await?;
    Ok(json_response(StatusCode::OK, &batch.object))
}

fn list_object(items: &[Batch], has_more: bool) -> Value {
    json!({
        "object": "list",
        "data": items.iter().map(|b| b.object.clone()).collect::<Vec<_>>(),
        "first_id": items.first().map(|b| b.id.clone()),
        "last_id": items.last().map(|b| b.id.clone()),
        "has_more": has_more,
    })
}
