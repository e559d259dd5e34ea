//! Files and batches, both families:
//!
//! - OpenAI: `/v1/files` (upload, list, retrieve, content, delete) and
//!   `/v1/batches` (create, retrieve, list, cancel), on `openai` channels;
//! - Anthropic: `/v1/messages/batches` (create with the requests inline,
//!   retrieve, list, cancel, results), on `anthropic` channels.
//!
//! The control plane owns which account owns each file and batch, so any
//! data plane answers for any of them (404 for another account's, which
//! never learns it exists). A batch goes to the channel its model routes to
//! (an OpenAI batch to its input file's), after the control plane held the
//! most its lines can cost at the model's batch price; it is billed there,
//! once, from its results when it ends.

mod anthropic;
mod files;
mod lines;
mod openai;

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{HeaderValue, StatusCode, header},
    response::Response,
    routing::{get, post},
};
use serde_json::Value;

use crate::{
    error::ProxyError,
    meter::pump::{Raw, pump},
    pipeline::{self, Admitted, App},
    policy::{
        auth::Access,
        domain::{Channel, ChannelKind, Model},
        snapshot::pick_channel,
    },
};

/// The file and batch routes, to merge into the data plane's router.
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/files", post(files::upload).get(files::list))
        .route("/v1/files/{id}", get(files::retrieve).delete(files::delete))
        .route("/v1/files/{id}/content", get(files::content))
        .route("/v1/batches", post(openai::create).get(openai::list))
        .route("/v1/batches/{id}", get(openai::retrieve))
        .route("/v1/batches/{id}/cancel", post(openai::cancel))
        .route("/v1/messages/batches", post(anthropic::create).get(anthropic::list))
        .route("/v1/messages/batches/{id}", get(anthropic::retrieve))
        .route("/v1/messages/batches/{id}/cancel", post(anthropic::cancel))
        .route("/v1/messages/batches/{id}/results", get(anthropic::results))
}

/// The model's entry and one channel of `kind` for it (pipeline routing
/// for the lines' `endpoint`), noted in the request's trail.
fn route(
    request: &Admitted,
    model: &str,
    endpoint: &'static str,
    kind: ChannelKind,
) -> Result<(Arc<Model>, Arc<Channel>), ProxyError> {
    let (entry, candidates) = pipeline::route(request, model, endpoint)?;
    let fitting: Vec<Arc<Channel>> = candidates.iter().filter(|c| c.kind == kind).cloned().collect();
    let no_channel = || ProxyError::NoChannel { group: request.caller.group.name.clone(), model: model.to_owned() };
    let channel = pick_channel(&fitting, &[]).ok_or_else(no_channel)?.clone();
    request.trail.update(|t| {
        t.channel = Some(channel.id.clone());
        t.attempts = 1;
    });
    Ok((entry.clone(), channel))
}

/// The channel `id` that holds a file or batch, from the request's snapshot.
fn holder(request: &Admitted, id: &str) -> Result<Arc<Channel>, ProxyError> {
    request.snapshot.channel_by_id(id).cloned().ok_or_else(|| {
        let message = "the channel that holds this file or batch was removed".to_owned();
        ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message }
    })
}

/// Admits a read-only request (retrieve, list, content): reading what one
/// owns must work even after a batch's hold used up the balance.
async fn reader(app: &App, request: axum::extract::Request) -> Result<Admitted, ProxyError> {
    Ok(pipeline::admit(app, request, Access::Read).await?.0)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An upstream's download streamed to the client with its type and length.
fn stream_through(app: &App, channel: &Channel, upstream: crate::provider::client::Response) -> Response {
    let mut response = Response::new(Body::empty());
    for name in [header::CONTENT_TYPE, header::CONTENT_LENGTH, header::CONTENT_DISPOSITION] {
        if let Some(value) =
            upstream.headers().get(name.as_str()).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
        {
            response.headers_mut().insert(name, value);
        }
    }
    response.headers_mut().entry(header::CONTENT_TYPE).or_insert(HeaderValue::from_static("application/octet-stream"));
    let idle = app.upstreams.idle_timeout(channel);
    let (status, expected) = (upstream.status().as_u16(), upstream.content_length());
    *response.body_mut() =
        Body::from_stream(pump(Box::pin(upstream.bytes_stream()), Raw::new(expected), None, idle, status));
    response
}

/// `limit` and `after` (or Anthropic's `after_id`) of a listing's query.
fn page_query(query: Option<&str>) -> Result<(u32, String), ProxyError> {
    let mut limit = 20u32;
    let mut after = String::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "limit" => {
                limit = value.parse().ok().filter(|n| (1..=100).contains(n)).ok_or_else(|| {
                    ProxyError::InvalidField { field: "limit", reason: "must be a whole number from 1 to 100".into() }
                })?;
            }
            "after" | "after_id" => {
                if !value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                    return Err(ProxyError::InvalidField { field: "after", reason: "is not an id".into() });
                }
                value.clone_into(&mut after);
            }
            _ => {}
        }
    }
    Ok((limit, after))
}
