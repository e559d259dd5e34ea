//! Asynchronous video generation, both path families:
//!
//! - compatible: `POST /v1/videos` (multipart), `GET /v1/videos/{id}`,
//!   `GET /v1/videos/{id}/content[?variant=…]`;
//! - native: `POST /v1/video/generations` (JSON), `GET
//!   /v1/video/generations/{id}` (see `native`).
//!
//! The control plane owns task state, so any data plane answers for any
//! task: a submission is priced, checked and charged there before it goes
//! upstream, and every status query or download asks it first (503 when it
//! cannot be reached; 404 for another account's task, which never learns the
//! task exists). The reference file and the video stream through, never held
//! whole.

mod form;
mod native;

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    extract::{Path, Request, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse as _, Response},
    routing::{get, post},
};
use serde_json::{Map, Value, json};

use self::form::{FileBody, FilePart, Outgoing};
use crate::{
    error::ProxyError,
    meter::pump::{Raw, pump},
    pipeline::{self, Admitted, App},
    policy::auth::{Access, Caller},
    policy::domain::{Channel, Model},
    policy::snapshot::pick_channel,
    pricing, provider,
    videos::{NewTask, Task},
};

/// What `openai-poll-after-ms` tells SDK pollers: pollers wait 5 to 10 s.
const POLL_AFTER_MS: &str = "5000";
/// Duration asked for when a submission names none (the OpenAI default).
const DEFAULT_SECONDS: u32 = 4;
/// Longest video a submission may ask for (the control plane agrees).
const MAX_SECONDS: u32 = 600;

/// A submission in either family, once parsed.
struct Submission {
    model: String,
    prompt: String,
    seconds: u32,
    size: String,
    /// Other text fields, passed to the upstream as they came.
    other: Vec<(String, String)>,
    file: Option<FilePart>,
    rest: Option<multer::Multipart<'static>>,
}

/// The video routes, to merge into the data plane's router.
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/videos", post(create))
        .route("/v1/videos/{id}", get(retrieve))
        .route("/v1/videos/{id}/content", get(content))
        .route("/v1/video/generations", post(native::create))
        .route("/v1/video/generations/{id}", get(native::retrieve))
}

/// `POST /v1/videos`: a multipart submission.
async fn create(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Spend).await?;
    let boundary = form::boundary(&admitted.parts.headers)?;
    let received = form::read(body, boundary).await?;
    let submission = match parse_fields(received.text) {
        Ok(fields) => Submission { file: received.file, rest: received.rest, ..fields },
        Err(error) => {
            form::drain(received.file, received.rest).await;
            return Err(error);
        }
    };
    let task = submit(&app, &admitted, submission).await?;
    Ok(json_response(StatusCode::OK, &compatible_object(&task)))
}

/// A compatible submission from its text fields: model, prompt, seconds (4
/// when absent), size, and the others to pass on; no file yet.
fn parse_fields(mut fields: Vec<(String, String)>) -> Result<Submission, ProxyError> {
    let model = take_field(&mut fields, "model").ok_or(ProxyError::MissingField("model"))?;
    let prompt = take_field(&mut fields, "prompt").ok_or(ProxyError::MissingField("prompt"))?;
    let seconds = match take_field(&mut fields, "seconds") {
        Some(text) => parse_seconds(&text)?,
        None => DEFAULT_SECONDS,
    };
    let size = take_field(&mut fields, "size").unwrap_or_default();
    check_size(&size)?;
    Ok(Submission { model, prompt, seconds, size, other: fields, file: None, rest: None })
}

/// Removes every `name` field, returning the first one's value.
fn take_field(fields: &mut Vec<(String, String)>, name: &str) -> Option<String> {
    let first = fields.iter().position(|(n, _)| n == name).map(|i| fields.remove(i).1);
    fields.retain(|(n, _)| n != name);
    first
}

/// Seconds as digits (a form field) from 1 to `MAX_SECONDS`.
fn parse_seconds(text: &str) -> Result<u32, ProxyError> {
    let text = text.trim();
    let invalid = || ProxyError::InvalidField {
        field: "seconds",
        reason: format!("must be a whole number of seconds from 1 to {MAX_SECONDS}"),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    text.parse::<u32>().ok().filter(|s| (1..=MAX_SECONDS).contains(s)).ok_or_else(invalid)
}

/// A size is empty (the upstream's default) or `WIDTHxHEIGHT`.
fn check_size(size: &str) -> Result<(), ProxyError> {
    let valid = size.is_empty()
        || size.split_once('x').is_some_and(|(w, h)| {
            [w, h].iter().all(|n| !n.is_empty() && n.len() <= 5 && n.bytes().all(|b| b.is_ascii_digit()))
        });
    if valid {
        Ok(())
    } else {
        Err(ProxyError::InvalidField { field: "size", reason: "must look like 1280x720".into() })
    }
}

/// The shared submission path: model and channel checks, price checks
/// against the local view, the task created (and charged) by the control
/// plane, the upload to the upstream, and its outcome recorded. A failed
/// upload fails the task, which refunds it.
async fn submit(app: &App, request: &Admitted, submission: Submission) -> Result<Task, ProxyError> {
    let (request_id, caller, started) = (&request.id, &request.caller, request.started);
    let admitted = async {
        let (model, channel) = route(request, &submission.model)?;
        let cost = pricing::video_cost_micros(model.second_price_micros, submission.seconds, caller.group.ratio_ppm);
        can_pay(caller, cost)?;
        let new = NewTask {
            request_id: &request_id.0,
            model: &model.id,
            channel_id: &channel.id,
            seconds: submission.seconds,
            size: &submission.size,
        };
        let task = app.videos.create(caller, new).await?;
        Ok::<_, ProxyError>((model, channel, task))
    };
    let (model, channel, task) = match admitted.await {
        Ok(admitted) => admitted,
        Err(error) => {
            form::drain(submission.file, submission.rest).await;
            return Err(error);
        }
    };

    let mut text = vec![
        ("model".to_owned(), channel.upstream_model(&model.id).to_owned()),
        ("prompt".to_owned(), submission.prompt),
        ("seconds".to_owned(), submission.seconds.to_string()),
    ];
    if !submission.size.is_empty() {
        text.push(("size".to_owned(), submission.size));
    }
    text.extend(submission.other);
    let boundary = form::new_boundary();
    let outgoing = Outgoing { text, file: submission.file, rest: submission.rest };
    let (body, client_fault) = outgoing.into_body(boundary.clone());
    let answer = provider::video::submit(&app.upstreams, &channel, &boundary, body).await;
    let answer = answer.map_err(|error| {
        // A broken upload is the client's doing, not the upstream's.
        client_fault.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take().unwrap_or(error)
    });
    match answer {
        Ok(answer) => {
            let answer = Value::Object(answer);
            let recorded = app.videos.accepted(&task.id, &answer).await;
            tracing::info!(
                request_id = %request_id.0,
                video = %task.id,
                channel = %channel.id,
                latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "video task submitted"
            );
            recorded
        }
        Err(error) => {
            if let Err(record_error) = app.videos.rejected(&task.id, &error).await {
                // The control plane's poller fails and refunds it later.
                tracing::warn!(video = %task.id, reason = record_error.reason(), "could not record a failed video submission");
            }
            Err(error)
        }
    }
}

/// The model's entry and one channel for it (pipeline routing, video
/// category), noted in the request's trail.
fn route(request: &Admitted, model: &str) -> Result<(Arc<Model>, Arc<Channel>), ProxyError> {
    let (entry, candidates) = pipeline::route(request, model, "/v1/videos")?;
    let no_channel = || ProxyError::NoChannel { group: request.caller.group.name.clone(), model: model.to_owned() };
    let channel = pick_channel(candidates, &[]).ok_or_else(no_channel)?;
    request.trail.update(|t| {
        t.channel = Some(channel.id.clone());
        t.attempts = 1;
    });
    Ok((entry.clone(), channel.clone()))
}

/// Refuses up front what the snapshot already shows the caller cannot pay;
/// the control plane charges in one step with the check against the
/// ledger's numbers and every data plane's leases.
fn can_pay(caller: &Caller, cost: i64) -> Result<(), ProxyError> {
    let token = &caller.token;
    if !token.unlimited && token.used_micros.saturating_add(cost) > token.quota_micros {
        return Err(ProxyError::TokenQuotaExhausted);
    }
    let balance = caller.account.balance_micros;
    if !caller.account.unlimited && balance < cost {
        return Err(ProxyError::InsufficientUserQuota { balance_micros: balance });
    }
    Ok(())
}

/// `GET /v1/videos/{id}`. Status and download are read-only (`reader`):
/// polling a task must work even after its charge used up the balance.
async fn retrieve(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let task = app.videos.get(&admitted.caller, &id).await?;
    let mut response = json_response(StatusCode::OK, &compatible_object(&task));
    response.headers_mut().insert("openai-poll-after-ms", HeaderValue::from_static(POLL_AFTER_MS));
    Ok(response)
}

/// Admits a read-only request (status, download).
async fn reader(app: &App, request: Request) -> Result<Admitted, ProxyError> {
    Ok(pipeline::admit(app, request, Access::Read).await?.0)
}

/// `GET /v1/videos/{id}/content[?variant=…]`: the upstream's file streamed
/// through, with its type and length; 404 until the task completed.
async fn content(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let variant = variant(request.uri().query())?;
    let admitted = reader(&app, request).await?;
    let task = app.videos.get(&admitted.caller, &id).await?;
    if task.status != "completed" {
        return Err(ProxyError::VideoNotReady { id: task.id, status: task.status });
    }
    let Some(channel) = admitted.snapshot.channel_by_id(&task.channel_id).cloned() else {
        let message = "the channel that made this video was removed".to_owned();
        return Err(ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message });
    };
    let upstream = provider::video::content(&app.upstreams, &channel, &task.upstream_id, variant.as_deref()).await?;
    let mut response = Response::new(Body::empty());
    let passed = [
        header::CONTENT_TYPE,
        header::CONTENT_LENGTH,
        header::CONTENT_ENCODING,
        header::CONTENT_DISPOSITION,
        header::ETAG,
    ];
    for name in passed {
        if let Some(value) =
            upstream.headers().get(name.as_str()).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
        {
            response.headers_mut().insert(name, value);
        }
    }
    response.headers_mut().entry(header::CONTENT_TYPE).or_insert(HeaderValue::from_static("application/octet-stream"));
    let idle = app.upstreams.idle_timeout(&channel);
    let (status, expected) = (upstream.status().as_u16(), upstream.content_length());
    *response.body_mut() =
        Body::from_stream(pump(Box::pin(upstream.bytes_stream()), Raw::new(expected), None, idle, status));
    Ok(response)
}

/// The `variant` query parameter, when given: a plain word.
fn variant(query: Option<&str>) -> Result<Option<String>, ProxyError> {
    let Some(value) = query.into_iter().flat_map(|q| q.split('&')).find_map(|pair| pair.strip_prefix("variant="))
    else {
        return Ok(None);
    };
    if value.is_empty() || value.len() > 32 || !value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(ProxyError::InvalidField { field: "variant", reason: "must be a word such as video".into() });
    }
    Ok(Some(value.to_owned()))
}

/// The OpenAI video object of `task`: the upstream's other fields, then the
/// gateway's own (id, task_id, object, model, status, progress, seconds,
/// size, created_at, completed_at, error).
fn compatible_object(task: &Task) -> Value {
    let mut object: Map<String, Value> = task.extra.clone();
    object.insert("id".into(), json!(task.id));
    object.insert("task_id".into(), json!(task.id));
    object.insert("object".into(), json!("video"));
    object.insert("model".into(), json!(task.model));
    object.insert("status".into(), json!(task.status));
    object.insert("progress".into(), json!(task.progress));
    object.insert("seconds".into(), json!(task.seconds.to_string()));
    if !task.size.is_empty() {
        object.insert("size".into(), json!(task.size));
    }
    object.insert("created_at".into(), json!(task.created_at));
    object.insert("completed_at".into(), if task.completed_at > 0 { json!(task.completed_at) } else { Value::Null });
    object.insert("error".into(), error_object(task));
    Value::Object(object)
}

/// `{"code","message"}` of a failed task, `null` otherwise.
fn error_object(task: &Task) -> Value {
    if task.status == "failed" {
        json!({ "code": task.error_code, "message": task.error_message })
    } else {
        Value::Null
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Turns a JSON submission's image into the file part (see `native`).
fn image_part(bytes: bytes::Bytes, content_type: &str) -> FilePart {
    let extension = content_type.rsplit('/').next().filter(|e| e.len() <= 5).unwrap_or("bin");
    FilePart {
        filename: format!("reference.{extension}"),
        content_type: content_type.to_owned(),
        body: FileBody::Memory(bytes),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        http::{
            router,
            tests::{KEY, app, json_body, policy},
        },
        policy::snapshot::tests as fx,
    };

    async fn call(method: &str, path: &str, key: Option<&str>, content_type: &str) -> (StatusCode, Value) {
        let mut request = axum::http::Request::builder().method(method).uri(path).header("content-type", content_type);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let app = app(policy(fx::token("t1", KEY), 1_000_000));
        let response = router(app).oneshot(request.body(Body::from("{}")).unwrap()).await.unwrap();
        (response.status(), json_body(response).await)
    }

    #[tokio::test]
    async fn without_the_control_plane_video_requests_are_503s() {
        // The test app's control plane address has nothing listening.
        for path in ["/v1/videos/video_1", "/v1/videos/video_1/content", "/v1/video/generations/video_1"] {
            let (status, body) = call("GET", path, Some(KEY), "application/json").await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
            assert_eq!(body["error"]["type"], "api_error");
        }
    }

    #[tokio::test]
    async fn video_requests_are_authorized_and_validated_first() {
        for (method, path) in [("POST", "/v1/videos"), ("GET", "/v1/videos/v"), ("POST", "/v1/video/generations")] {
            let (status, _) = call(method, path, None, "application/json").await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
        }
        let (status, body) = call("POST", "/v1/videos", Some(KEY), "application/json").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let (status, body) = call("POST", "/v1/video/generations", Some(KEY), "application/json").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "an empty native submission: {body}");
        let (status, body) = call("GET", "/v1/videos/v/content?variant=../x", Some(KEY), "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }

    #[test]
    fn seconds_are_digits_in_range() {
        assert_eq!(parse_seconds("4").unwrap(), 4);
        assert_eq!(parse_seconds(" 12 ").unwrap(), 12);
        for bad in ["", "0", "-4", "4.5", "four", "601", "99999999999"] {
            assert!(matches!(parse_seconds(bad), Err(ProxyError::InvalidField { field: "seconds", .. })), "{bad}");
        }
    }

    #[test]
    fn sizes_are_width_x_height() {
        assert!(check_size("").is_ok());
        assert!(check_size("1280x720").is_ok());
        for bad in ["1280", "x720", "1280x", "12a0x720", "1280*720"] {
            assert!(check_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn variants_are_plain_words() {
        assert_eq!(variant(None).unwrap(), None);
        assert_eq!(variant(Some("a=1&variant=thumbnail")).unwrap().as_deref(), Some("thumbnail"));
        assert!(variant(Some("variant=../x")).is_err());
        assert!(variant(Some("variant=")).is_err());
    }

    #[test]
    fn repeated_fields_keep_the_first_and_leave_none_behind() {
        let mut fields = vec![("model".into(), "a".into()), ("x".into(), "1".into()), ("model".into(), "b".into())];
        assert_eq!(take_field(&mut fields, "model").as_deref(), Some("a"));
        assert_eq!(fields, [("x".to_owned(), "1".to_owned())]);
        assert_eq!(take_field(&mut fields, "model"), None);
    }

    #[test]
    fn task_objects_carry_the_gateway_fields_over_the_upstreams() {
        let mut extra = Map::new();
        extra.insert("id".into(), json!("upstream-id"));
        extra.insert("expires_at".into(), json!(123));
        let task = Task {
            id: "video_1".into(),
            model: "sora-2".into(),
            status: "failed".into(),
            seconds: 8,
            created_at: 5,
            error_code: "moderation".into(),
            error_message: "blocked".into(),
            extra,
            ..Task::default()
        };
        let object = compatible_object(&task);
        assert_eq!(object["id"], "video_1");
        assert_eq!(object["task_id"], "video_1");
        assert_eq!(object["object"], "video");
        assert_eq!(object["seconds"], "8");
        assert_eq!(object["expires_at"], 123);
        assert_eq!(object["completed_at"], Value::Null);
        assert_eq!(object["error"], json!({"code": "moderation", "message": "blocked"}));
    }
}
