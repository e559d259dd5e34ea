//! `/v1/files`: an upload (`purpose=batch`, JSONL, up to the body limit)
//! is read whole so that every line is checked and the model routed before
//! anything goes upstream; it is then uploaded to the routed channel and
//! recorded with the control plane as a file of the caller's account.
//! Listing, retrieval, download and deletion resolve through the control
//! plane, then the channel that holds the file. Other purposes are refused:
//! files exist here only as batch input and output.

use std::sync::Arc;

use axum::{
    extract::{Path, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::Response,
};
use bytes::Bytes;
use serde_json::{Value, json};

use super::{holder, json_response, lines, page_query, reader, route, stream_through};
use crate::{
    batches::{File, NewFile},
    error::ProxyError,
    pipeline::{self, App},
    policy::{auth::Access, domain::ChannelKind},
    provider,
};

/// Largest answer to an upload read.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A received upload.
struct Upload {
    purpose: String,
    filename: String,
    content: Bytes,
}

/// `POST /v1/files`.
pub async fn upload(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Spend).await?;
    let raw = pipeline::read_body(body, &admitted.parts.headers).await?;
    let upload = read_form(raw, &admitted.parts.headers).await?;
    if upload.purpose != "batch" {
        let reason = "only \"batch\" files are accepted here".to_owned();
        return Err(ProxyError::InvalidField { field: "purpose", reason });
    }
    let lines = lines::read_file(&upload.content)?;
    let (model, channel) = route(&admitted, &lines.model, lines.endpoint, ChannelKind::OpenAi)?;
    let upstream_model = channel.upstream_model(&model.id);
    let content = if upstream_model == model.id {
        upload.content.clone()
    } else {
        lines::rename_file_model(&upload.content, upstream_model)
    };
    let boundary = format!("gw-{:032x}", rand::random::<u128>());
    let mut headers = HeaderMap::new();
    let content_type = HeaderValue::from_str(&format!("multipart/form-data; boundary={boundary}"))
        .map_err(|_| ProxyError::Internal)?;
    headers.insert(header::CONTENT_TYPE, content_type);
    let form = multipart(&boundary, &upload.filename, &content);
    let response = app.upstreams.request(&channel, Method::POST, "/files", headers, form.into(), false).await?;
    let response = provider::accept(&app.upstreams, &channel, response).await?;
    let answer = provider::read_capped(response, MAX_ANSWER_BYTES).await;
    let upstream_id = serde_json::from_slice::<Value>(&answer)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned))
        .ok_or_else(|| {
            tracing::warn!(channel = %channel.id, "upstream answered a file upload without an id");
            let message = "the upstream's answer is not a file".to_owned();
            ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message }
        })?;
    let new = NewFile {
        channel_id: &channel.id,
        upstream_id: &upstream_id,
        filename: &upload.filename,
        bytes: i64::try_from(content.len()).unwrap_or(i64::MAX),
        model: &model.id,
        endpoint: lines.endpoint,
        bound: lines.bound,
    };
    let file = app.batches.record_file(&admitted.caller, new).await?;
    tracing::info!(request_id = %admitted.id.0, file = %file.id, channel = %channel.id, lines = lines.bound.lines, "batch file uploaded");
    Ok(json_response(StatusCode::OK, &object(&file)))
}

/// `GET /v1/files`: the caller's files, newest first; `purpose=` keeps
/// those of one purpose (`batch` uploads, `batch_output` results).
pub async fn list(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (limit, after) = page_query(request.uri().query())?;
    let purpose = purpose_query(request.uri().query())?;
    let admitted = reader(&app, request).await?;
    let page = app.batches.files(&admitted.caller, limit, &after, &purpose).await?;
    let data: Vec<Value> = page.items.iter().map(object).collect();
    let body = json!({
        "object": "list",
        "first_id": page.items.first().map(|f| f.id.clone()),
        "last_id": page.items.last().map(|f| f.id.clone()),
        "has_more": page.has_more,
        "data": data,
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// The `purpose` of a listing's query; empty when it names none.
fn purpose_query(query: Option<&str>) -> Result<String, ProxyError> {
    let value = query.into_iter().flat_map(|q| q.split('&')).find_map(|pair| pair.strip_prefix("purpose="));
    match value {
        Some(value) if value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') => Ok(value.into()),
        Some(_) => Err(ProxyError::InvalidField { field: "purpose", reason: "is not a file purpose".into() }),
        None => Ok(String::new()),
    }
}

/// `GET /v1/files/{id}`.
pub async fn retrieve(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let file = app.batches.file(&admitted.caller, &id).await?;
    Ok(json_response(StatusCode::OK, &object(&file)))
}

/// `GET /v1/files/{id}/content`: streamed from the channel that holds it.
pub async fn content(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let file = app.batches.file(&admitted.caller, &id).await?;
    let channel = holder(&admitted, &file.channel_id)?;
    let path = format!("/files/{}/content", provider::video::path_segment(&file.upstream_id));
    let upstream =
        app.upstreams.request(&channel, Method::GET, &path, HeaderMap::new(), Bytes::new().into(), true).await?;
    let upstream = provider::accept(&app.upstreams, &channel, upstream).await?;
    Ok(stream_through(&app, &channel, upstream))
}

/// `DELETE /v1/files/{id}`: deleted upstream, then forgotten.
pub async fn delete(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let file = app.batches.delete_file(&admitted.caller, &id).await?;
    Ok(json_response(StatusCode::OK, &json!({"id": file.id, "object": "file", "deleted": true})))
}

/// The OpenAI file object of `file`.
fn object(file: &File) -> Value {
    json!({
        "id": file.id,
        "object": "file",
        "bytes": file.bytes,
        "created_at": file.created_at,
        "filename": file.filename,
        "purpose": file.purpose,
        "status": "processed",
        "expires_at": null,
        "status_details": null,
    })
}

/// The `purpose` and `file` fields of a multipart upload.
async fn read_form(raw: Bytes, headers: &HeaderMap) -> Result<Upload, ProxyError> {
    let invalid = |reason: String| ProxyError::InvalidField { field: "body", reason };
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let boundary = multer::parse_boundary(content_type).map_err(|_| invalid("must be a multipart form".into()))?;
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(raw) });
    let mut form = multer::Multipart::new(stream, boundary);
    let (mut purpose, mut file) = (None, None);
    while let Some(field) = form.next_field().await.map_err(|e| invalid(format!("bad multipart form: {e}")))? {
        let name = field.name().unwrap_or_default().to_owned();
        let filename = field.file_name().map(str::to_owned);
        let bytes = field.bytes().await.map_err(|e| invalid(format!("bad multipart form: {e}")))?;
        match name.as_str() {
            "purpose" => purpose = Some(String::from_utf8_lossy(&bytes).trim().to_owned()),
            "file" => file = Some((filename.unwrap_or_else(|| "batch.jsonl".into()), bytes)),
            _ => {}
        }
    }
    let purpose = purpose.ok_or(ProxyError::MissingField("purpose"))?;
    let (filename, content) = file.ok_or(ProxyError::MissingField("file"))?;
    Ok(Upload { purpose, filename: safe_filename(&filename), content })
}

/// A file name fit for a form header: no quotes, controls or path.
fn safe_filename(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let cleaned: String = base.chars().filter(|c| !c.is_control() && *c != '"').take(255).collect();
    if cleaned.is_empty() { "batch.jsonl".to_owned() } else { cleaned }
}

/// The upstream upload: `purpose=batch` and the file.
fn multipart(boundary: &str, filename: &str, content: &Bytes) -> Bytes {
    let mut body = Vec::with_capacity(content.len() + 512);
    body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n").bytes());
    body.extend(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: application/jsonl\r\n\r\n"
        )
        .bytes(),
    );
    body.extend_from_slice(content);
    body.extend(format!("\r\n--{boundary}--\r\n").bytes());
    Bytes::from(body)
}
