//! The native video family, the same tasks under other names:
//!
//! `POST /v1/video/generations`, a JSON body: `model`, `prompt`, `duration`
//! (seconds, number or digits; `seconds` is accepted too; default 4), `size`
//! (`1280x720`, or `width` and `height`), `image` (the reference: a data URL
//! or bare base64 — the gateway fetches no URLs). Answer: `task_id`, native
//! `status` (`queued`, `processing`, `succeeded`, `failed`), `progress`,
//! `model`, `duration`, `size`, `created_at`.
//!
//! `GET /v1/video/generations/{id}`: the same plus `url` (once succeeded:
//! the gateway's `/v1/videos/{id}/content`, fetched with the same key),
//! `format`, `metadata` (`duration`, `width`, `height`), `error`
//! (`{code, message}` or null) and `completed_at`.

use std::sync::Arc;

use axum::{
    extract::{Path, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
};
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{
    DEFAULT_SECONDS, POLL_AFTER_MS, Submission, check_size, image_part, json_response, parse_seconds, reader, submit,
};
use crate::{
    error::ProxyError,
    pipeline::{self, App},
    policy::auth::Access,
    videos::Task,
};

/// `POST /v1/video/generations`: the image travels inside the JSON body, as
/// base64, within the pipeline's body limit.
pub async fn create(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Spend).await?;
    let body = admitted.read_body(body).await?;
    let submission = parse(&body)?;
    let task = submit(&app, &admitted, submission).await?;
    Ok(json_response(StatusCode::OK, &native_object(&task, None)))
}

/// `GET /v1/video/generations/{id}`.
pub async fn retrieve(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    let admitted = reader(&app, request).await?;
    let task = app.videos.get(&admitted.caller, &id).await?;
    let base = public_base(&admitted.parts.headers, &admitted.parts.uri);
    let mut response = json_response(StatusCode::OK, &native_object(&task, Some(&base)));
    response.headers_mut().insert("openai-poll-after-ms", HeaderValue::from_static(POLL_AFTER_MS));
    Ok(response)
}

/// A native submission as the shared path takes it.
fn parse(body: &[u8]) -> Result<Submission, ProxyError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
    let Value::Object(object) = value else {
        return Err(ProxyError::InvalidJson("the body must be a JSON object".into()));
    };
    let text = |name: &'static str| -> Result<Option<String>, ProxyError> {
        match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ProxyError::InvalidField { field: name, reason: "must be a string".into() }),
        }
    };
    let model = text("model")?.filter(|m| !m.is_empty()).ok_or(ProxyError::MissingField("model"))?;
    let prompt = text("prompt")?.ok_or(ProxyError::MissingField("prompt"))?;
    let seconds = match object.get("duration").or_else(|| object.get("seconds")) {
        None | Some(Value::Null) => DEFAULT_SECONDS,
        Some(Value::Number(n)) => parse_seconds(&n.to_string()).map_err(|_| duration_error())?,
        Some(Value::String(s)) => parse_seconds(s).map_err(|_| duration_error())?,
        Some(_) => return Err(duration_error()),
    };
    let size = match (
        text("size")?,
        object.get("width").and_then(Value::as_u64),
        object.get("height").and_then(Value::as_u64),
    ) {
        (Some(size), _, _) => size,
        (None, Some(width), Some(height)) => format!("{width}x{height}"),
        _ => String::new(),
    };
    check_size(&size)?;
    let file = match text("image")?.filter(|i| !i.is_empty()) {
        Some(image) => {
            let (bytes, content_type) = decode_image(&image)?;
            Some(image_part(bytes, content_type))
        }
        None => None,
    };
    Ok(Submission { model, prompt, seconds, size, other: Vec::new(), file, rest: None })
}

fn duration_error() -> ProxyError {
    ProxyError::InvalidField {
        field: "duration",
        reason: format!("must be a whole number of seconds from 1 to {}", super::MAX_SECONDS),
    }
}

/// The bytes and type of an `image` given as a data URL or bare base64.
fn decode_image(image: &str) -> Result<(Bytes, &'static str), ProxyError> {
    let invalid = |reason: &str| ProxyError::InvalidField { field: "image", reason: reason.to_owned() };
    if image.starts_with("http://") || image.starts_with("https://") {
        return Err(invalid("must be a data URL or base64; the gateway does not fetch URLs"));
    }
    let (declared, data) = match image.strip_prefix("data:") {
        Some(rest) => {
            let (meta, data) = rest.split_once(',').ok_or_else(|| invalid("is not a valid data URL"))?;
            let mime = meta.strip_suffix(";base64").ok_or_else(|| invalid("data URLs must be base64"))?;
            (Some(mime.to_ascii_lowercase()), data)
        }
        None => (None, image),
    };
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&compact)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(&compact))
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(&compact))
        .map_err(|_| invalid("is not valid base64"))?;
    if bytes.is_empty() {
        return Err(invalid("is empty"));
    }
    let content_type = match declared.as_deref() {
        Some("image/png") => "image/png",
        Some("image/jpeg" | "image/jpg") => "image/jpeg",
        Some("image/webp") => "image/webp",
        Some("image/gif") => "image/gif",
        _ => sniff(&bytes),
    };
    Ok((Bytes::from(bytes), content_type))
}

/// An image type from its first bytes.
fn sniff(bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        "image/jpeg"
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        "image/webp"
    } else if bytes.starts_with(b"GIF8") {
        "image/gif"
    } else {
        "application/octet-stream"
    }
}

/// The native status name of a task status.
fn native_status(status: &str) -> &str {
    match status {
        "in_progress" => "processing",
        "completed" => "succeeded",
        other => other,
    }
}

/// The native task object; with `base` (the gateway's public root) it is the
/// status answer, with the result URL once succeeded.
fn native_object(task: &Task, base: Option<&str>) -> Value {
    let mut object = Map::new();
    object.insert("task_id".into(), json!(task.id));
    object.insert("status".into(), json!(native_status(&task.status)));
    object.insert("progress".into(), json!(task.progress));
    object.insert("model".into(), json!(task.model));
    object.insert("duration".into(), json!(task.seconds));
    let size =
        if task.size.is_empty() { task.extra.get("size").and_then(Value::as_str).unwrap_or("") } else { &task.size };
    object.insert("size".into(), json!(size));
    object.insert("created_at".into(), json!(task.created_at));
    if let Some(base) = base {
        let url = (task.status == "completed").then(|| format!("{base}/v1/videos/{}/content", task.id));
        object.insert("url".into(), json!(url));
        object.insert("format".into(), json!("mp4"));
        let (width, height) =
            size.split_once('x').map_or((None, None), |(w, h)| (w.parse::<u32>().ok(), h.parse::<u32>().ok()));
        object.insert("metadata".into(), json!({ "duration": task.seconds, "width": width, "height": height }));
        object.insert("error".into(), super::error_object(task));
        object
            .insert("completed_at".into(), if task.completed_at > 0 { json!(task.completed_at) } else { Value::Null });
    }
    Value::Object(object)
}

/// The gateway's root as the client reached it: `X-Forwarded-Proto` (http
/// or https) or http, and the `Host` (or the request's authority).
fn public_base(headers: &HeaderMap, uri: &axum::http::Uri) -> String {
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').next().unwrap_or("").trim().to_ascii_lowercase())
        .filter(|s| s == "http" || s == "https")
        .unwrap_or_else(|| "http".to_owned());
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.to_string()))
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{scheme}://{host}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn native_submissions_parse_with_their_own_names() {
        let png = b"\x89PNG\r\n\x1a\nrest";
        let image = base64::engine::general_purpose::STANDARD.encode(png);
        let body =
            json!({"model": "sora-2", "prompt": "a cat", "duration": 8, "width": 1280, "height": 720, "image": image});
        let parsed = parse(body.to_string().as_bytes()).unwrap();
        assert_eq!((parsed.model.as_str(), parsed.prompt.as_str(), parsed.seconds), ("sora-2", "a cat", 8));
        assert_eq!(parsed.size, "1280x720");
        let file = parsed.file.unwrap();
        assert_eq!((file.filename.as_str(), file.content_type.as_str()), ("reference.png", "image/png"));
        assert!(matches!(file.body, super::super::FileBody::Memory(ref b) if b.as_ref() == png));

        let body =
            json!({"model": "m", "prompt": "p", "seconds": "12", "image": format!("data:image/jpeg;base64,{image}")});
        let parsed = parse(body.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.seconds, 12);
        assert_eq!(parsed.file.unwrap().content_type, "image/jpeg", "the declared type wins");
        let parsed = parse(br#"{"model":"m","prompt":"p"}"#).unwrap();
        assert_eq!((parsed.seconds, parsed.size.as_str()), (DEFAULT_SECONDS, ""));
        assert!(parsed.file.is_none());
    }

    #[test]
    fn bad_native_submissions_are_400s() {
        let cases: [&[u8]; 7] = [
            br#"[1]"#,
            br#"{"prompt":"p"}"#,
            br#"{"model":"m"}"#,
            br#"{"model":"m","prompt":"p","duration":1.5}"#,
            br#"{"model":"m","prompt":"p","duration":0}"#,
            br#"{"model":"m","prompt":"p","image":"https://example.com/a.png"}"#,
            br#"{"model":"m","prompt":"p","image":"data:image/png;base64,@@@"}"#,
        ];
        for body in cases {
            let error = parse(body).err().unwrap_or_else(|| panic!("{} parsed", String::from_utf8_lossy(body)));
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{error:?}");
        }
    }

    #[test]
    fn status_answers_carry_native_names_and_the_gateways_url() {
        let task = Task {
            id: "video_9".into(),
            model: "sora-2".into(),
            status: "completed".into(),
            progress: 100,
            seconds: 4,
            size: "1280x720".into(),
            completed_at: 7,
            ..Task::default()
        };
        let object = native_object(&task, Some("https://gw.example"));
        assert_eq!(object["status"], "succeeded");
        assert_eq!(object["url"], "https://gw.example/v1/videos/video_9/content");
        assert_eq!(object["metadata"], json!({"duration": 4, "width": 1280, "height": 720}));
        assert_eq!(object["error"], Value::Null);
        let running = Task { status: "in_progress".into(), ..task };
        let object = native_object(&running, Some("http://x"));
        assert_eq!((object["status"].as_str(), object["url"].is_null()), (Some("processing"), true));
        assert!(native_object(&running, None).get("url").is_none(), "a submission answer has no url");
    }

    #[test]
    fn the_public_base_follows_forwarded_proto_and_host() {
        let mut headers = HeaderMap::new();
        headers.insert("host", "gw.example:8080".parse().unwrap());
        let uri: axum::http::Uri = "/v1/video/generations/x".parse().unwrap();
        assert_eq!(public_base(&headers, &uri), "http://gw.example:8080");
        headers.insert("x-forwarded-proto", "https, http".parse().unwrap());
        assert_eq!(public_base(&headers, &uri), "https://gw.example:8080");
        headers.insert("x-forwarded-proto", "gopher".parse().unwrap());
        assert_eq!(public_base(&headers, &uri), "http://gw.example:8080");
    }
}
