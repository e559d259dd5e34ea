//! The mock upstream's video API (OpenAI-compatible), served on the same
//! address as [`crate::mock::upstream::MockUpstream`]:
//!
//! - `POST /v1/videos`, multipart: records the submission (fields, key, the
//!   reference file byte for byte) and answers a queued task object;
//! - `GET /v1/videos/{id}`: `queued` for [`VideoScript::queued_for`], then
//!   `in_progress` with rising progress for [`VideoScript::running_for`],
//!   then `completed`, or `failed` when the prompt contains
//!   [`VideoScript::fail_marker`];
//! - `GET /v1/videos/{id}/content[?variant=thumbnail]`: a small MP4
//!   ([`mp4_bytes`]) once completed, directly or through a 302 to
//!   `/v1/files/mock-video/{id}` ([`VideoScript::redirect`]); 404 before.
//!
//! Find a mock's video side with [`MockVideo::of`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::mock::upstream::MockUpstream;

/// How the mock's video tasks behave from now on.
#[derive(Debug, Clone)]
pub struct VideoScript {
    /// Time a new task stays `queued`.
    pub queued_for: Duration,
    /// Time it then stays `in_progress`.
    pub running_for: Duration,
    /// A prompt containing this ends `failed` instead of `completed`.
    pub fail_marker: String,
    /// Serve content through a 302 to another path.
    pub redirect: bool,
    /// Refuse submissions with this status.
    pub reject_submissions: Option<u16>,
}

/// One submission as the mock received it.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The id the mock gave the task.
    pub id: String,
    pub authorization: Option<String>,
    /// Text fields in arrival order.
    pub fields: Vec<(String, String)>,
    pub reference: Option<Reference>,
}

/// The reference file of a submission.
#[derive(Debug, Clone)]
pub struct Reference {
    pub filename: String,
    pub content_type: String,
    pub bytes: Bytes,
}

/// The video side of one mock upstream.
#[derive(Clone)]
pub struct MockVideo {
    state: Arc<VideoState>,
}

struct VideoState {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    script: VideoScript,
    tasks: HashMap<String, Task>,
    submissions: Vec<Submission>,
    status_polls: HashMap<String, usize>,
    downloads: usize,
    next: u64,
}

struct Task {
    started: Instant,
    created_at: u64,
    model: String,
    seconds: String,
    size: String,
    prompt: String,
    fails: bool,
    script: VideoScript,
}

/// Video sides by mock address; a new mock on a reused port starts fresh.
static REGISTRY: LazyLock<Mutex<HashMap<SocketAddr, Arc<VideoState>>>> = LazyLock::new(Mutex::default);

/// The video routes of the mock at `addr` (merged into its router).
pub fn routes<S: Clone + Send + Sync + 'static>(addr: SocketAddr) -> Router<S> {
    let state = Arc::new(VideoState { inner: Mutex::new(Inner::default()) });
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).insert(addr, state.clone());
    Router::new()
        .route("/v1/videos", post(create))
        .route("/v1/videos/{id}", get(retrieve))
        .route("/v1/videos/{id}/content", get(content))
        .route("/v1/files/mock-video/{id}", get(file))
        .with_state(state)
}

/// The bytes every completed task serves: a tiny MP4 (`ftyp` and an `mdat`
/// of 96 KiB of deterministic noise, so it spans many chunks and is not
/// text).
pub fn mp4_bytes() -> Bytes {
    static MP4: LazyLock<Bytes> = LazyLock::new(|| {
        let mut out = Vec::new();
        out.extend_from_slice(&24u32.to_be_bytes());
        out.extend_from_slice(b"ftypisom\0\0\x02\0isommp41");
        let payload = 96 * 1024;
        out.extend_from_slice(&(u32::try_from(payload + 8).unwrap_or(u32::MAX)).to_be_bytes());
        out.extend_from_slice(b"mdat");
        let mut x: u32 = 0x1234_5678;
        for _ in 0..payload {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            out.push((x >> 24) as u8);
        }
        Bytes::from(out)
    });
    MP4.clone()
}

/// The `thumbnail` variant's bytes.
pub fn thumbnail_bytes() -> Bytes {
    Bytes::from_static(b"RIFF\x10\0\0\0WEBPVP8 mock-thumbnail")
}

// === impl MockVideo ===

impl MockVideo {
    /// The video side of `upstream`.
    pub fn of(upstream: &MockUpstream) -> MockVideo {
        let registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        let state = registry.get(&upstream.addr()).cloned().expect("the mock upstream serves no video routes");
        MockVideo { state }
    }

    /// Replaces the script for tasks submitted from now on.
    pub fn set_script(&self, script: VideoScript) {
        self.state.lock().script = script;
    }

    /// Every submission so far.
    pub fn submissions(&self) -> Vec<Submission> {
        self.state.lock().submissions.clone()
    }

    /// Status queries received for upstream task `id`.
    pub fn status_polls(&self, id: &str) -> usize {
        self.state.lock().status_polls.get(id).copied().unwrap_or(0)
    }

    /// Content downloads served (the redirect's target counted, not the hop).
    pub fn downloads(&self) -> usize {
        self.state.lock().downloads
    }
}

// === impl VideoScript ===

impl Default for VideoScript {
    fn default() -> VideoScript {
        VideoScript {
            queued_for: Duration::from_millis(300),
            running_for: Duration::from_millis(900),
            fail_marker: "fail".into(),
            redirect: false,
            reject_submissions: None,
        }
    }
}

// === impl VideoState ===

impl VideoState {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

// === impl Task ===

impl Task {
    /// Status and progress now.
    fn state(&self) -> (&'static str, u64) {
        let elapsed = self.started.elapsed();
        let script = &self.script;
        if elapsed < script.queued_for {
            return ("queued", 0);
        }
        let running = elapsed - script.queued_for;
        if running < script.running_for {
            let share = running.as_millis() * 100 / script.running_for.as_millis().max(1);
            return ("in_progress", u64::try_from(share).unwrap_or(99).clamp(1, 99));
        }
        if self.fails { ("failed", 100) } else { ("completed", 100) }
    }

    fn object(&self, id: &str) -> Value {
        let (status, progress) = self.state();
        let done = self.created_at + (self.script.queued_for + self.script.running_for).as_secs();
        let error = (status == "failed").then(|| {
            json!({ "code": "video_generation_failed", "message": "the mock upstream failed this video as its prompt asked" })
        });
        json!({
            "id": id,
            "object": "video",
            "model": self.model,
            "status": status,
            "progress": progress,
            "seconds": self.seconds,
            "size": self.size,
            "prompt": self.prompt,
            "created_at": self.created_at,
            "completed_at": (status == "completed").then_some(done),
            "expires_at": (status == "completed").then_some(done + 3600),
            "remixed_from_video_id": null,
            "error": error,
        })
    }
}

async fn create(State(state): State<Arc<VideoState>>, headers: HeaderMap, request: Request) -> Response {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let Ok(boundary) = multer::parse_boundary(content_type) else {
        return error(StatusCode::BAD_REQUEST, "expected a multipart/form-data body");
    };
    let mut multipart = multer::Multipart::new(request.into_body().into_data_stream(), boundary);
    let mut fields = Vec::new();
    let mut reference = None;
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return error(StatusCode::BAD_REQUEST, &format!("bad multipart body: {e}")),
        };
        let name = field.name().unwrap_or_default().to_owned();
        match field.file_name().map(str::to_owned) {
            Some(filename) => {
                let content_type = field.content_type().map(ToString::to_string).unwrap_or_default();
                match field.bytes().await {
                    Ok(bytes) => reference = Some(Reference { filename, content_type, bytes }),
                    Err(e) => return error(StatusCode::BAD_REQUEST, &format!("bad file part: {e}")),
                }
            }
            None => match field.text().await {
                Ok(value) => fields.push((name, value)),
                Err(e) => return error(StatusCode::BAD_REQUEST, &format!("bad field: {e}")),
            },
        }
    }
    let value = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let mut inner = state.lock();
    inner.next += 1;
    let id = format!("vid_mock_{:04}", inner.next);
    inner.submissions.push(Submission { id: id.clone(), authorization, fields: fields.clone(), reference });
    let script = inner.script.clone();
    if let Some(status) = script.reject_submissions {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error(status, "the mock upstream refuses video submissions");
    }
    let Some(prompt) = value("prompt") else {
        return error(StatusCode::BAD_REQUEST, "prompt is required");
    };
    let task = Task {
        started: Instant::now(),
        created_at: now(),
        model: value("model").unwrap_or_else(|| "sora-2".into()),
        seconds: value("seconds").unwrap_or_else(|| "4".into()),
        size: value("size").unwrap_or_else(|| "720x1280".into()),
        fails: !script.fail_marker.is_empty() && prompt.contains(&script.fail_marker),
        prompt,
        script,
    };
    let object = task.object(&id);
    inner.tasks.insert(id, task);
    (StatusCode::OK, Json(object)).into_response()
}

async fn retrieve(State(state): State<Arc<VideoState>>, Path(id): Path<String>) -> Response {
    let mut inner = state.lock();
    *inner.status_polls.entry(id.clone()).or_default() += 1;
    match inner.tasks.get(&id) {
        Some(task) => (StatusCode::OK, Json(task.object(&id))).into_response(),
        None => error(StatusCode::NOT_FOUND, &format!("Video with id '{id}' not found.")),
    }
}

async fn content(State(state): State<Arc<VideoState>>, Path(id): Path<String>, RawQuery(query): RawQuery) -> Response {
    let inner = state.lock();
    let Some(task) = inner.tasks.get(&id) else {
        return error(StatusCode::NOT_FOUND, &format!("Video with id '{id}' not found."));
    };
    if task.state().0 != "completed" {
        return error(StatusCode::NOT_FOUND, "Video is not ready yet, the file does not exist.");
    }
    if task.script.redirect {
        let query = query.map(|q| format!("?{q}")).unwrap_or_default();
        return Response::builder()
            .status(StatusCode::FOUND)
            .header(header::LOCATION, format!("/v1/files/mock-video/{id}{query}"))
            .body(Body::empty())
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    drop(inner);
    serve(&state, query.as_deref())
}

/// The redirect's target: like a signed storage URL, it needs no key.
async fn file(State(state): State<Arc<VideoState>>, Path(id): Path<String>, RawQuery(query): RawQuery) -> Response {
    if !state.lock().tasks.contains_key(&id) {
        return error(StatusCode::NOT_FOUND, "no such file");
    }
    serve(&state, query.as_deref())
}

fn serve(state: &VideoState, query: Option<&str>) -> Response {
    state.lock().downloads += 1;
    let thumbnail = query.is_some_and(|q| q.split('&').any(|p| p == "variant=thumbnail"));
    let (bytes, content_type) = if thumbnail { (thumbnail_bytes(), "image/webp") } else { (mp4_bytes(), "video/mp4") };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, bytes.len())
        .body(Body::from(bytes))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn error(status: StatusCode, message: &str) -> Response {
    let kind = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
    (status, Json(json!({ "error": { "message": message, "type": kind, "param": null, "code": null } })))
        .into_response()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    async fn submit(mock: &MockUpstream, prompt: &str, image: &[u8]) -> Value {
        let form = reqwest::multipart::Form::new()
            .text("model", "sora-2")
            .text("prompt", prompt.to_owned())
            .text("seconds", "4")
            .part("input_reference", reqwest::multipart::Part::bytes(image.to_vec()).file_name("ref.png"));
        let response = reqwest::Client::new()
            .post(format!("{}/videos", mock.base_url()))
            .bearer_auth("sk-up")
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    async fn status(mock: &MockUpstream, id: &str) -> Value {
        reqwest::get(format!("{}/videos/{id}", mock.base_url())).await.unwrap().json().await.unwrap()
    }

    #[tokio::test]
    async fn tasks_run_to_completion_and_serve_the_mp4_directly_or_by_redirect() {
        let mock = MockUpstream::start().await.unwrap();
        let video = MockVideo::of(&mock);
        video.set_script(VideoScript {
            queued_for: Duration::from_millis(100),
            running_for: Duration::from_millis(200),
            redirect: true,
            ..VideoScript::default()
        });
        let image = b"\x89PNG fake image".to_vec();
        let created = submit(&mock, "a cat", &image).await;
        assert_eq!((created["status"].as_str(), created["progress"].as_u64()), (Some("queued"), Some(0)));
        let id = created["id"].as_str().unwrap().to_owned();
        let early = reqwest::get(format!("{}/videos/{id}/content", mock.base_url())).await.unwrap();
        assert_eq!(early.status(), 404);

        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(status(&mock, &id).await["status"], "completed");
        let submission = &video.submissions()[0];
        assert_eq!(submission.authorization.as_deref(), Some("Bearer sk-up"));
        assert_eq!(submission.reference.as_ref().unwrap().bytes.as_ref(), image.as_slice());
        let response = reqwest::get(format!("{}/videos/{id}/content", mock.base_url())).await.unwrap();
        assert_eq!(response.headers()["content-type"], "video/mp4");
        assert_eq!(response.bytes().await.unwrap(), mp4_bytes());
        assert_eq!(video.downloads(), 1);
        assert_eq!(video.status_polls(&id), 1);
    }

    #[tokio::test]
    async fn a_prompt_with_the_marker_fails() {
        let mock = MockUpstream::start().await.unwrap();
        let video = MockVideo::of(&mock);
        video.set_script(VideoScript {
            queued_for: Duration::ZERO,
            running_for: Duration::ZERO,
            ..VideoScript::default()
        });
        let id = submit(&mock, "please fail", b"x").await["id"].as_str().unwrap().to_owned();
        let failed = status(&mock, &id).await;
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["error"]["code"], "video_generation_failed");
    }
}
