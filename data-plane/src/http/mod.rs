//! The client-facing HTTP surface: the accept loop that deals connections
//! to the workers (`accept`), each worker's connections and their limits
//! (`serve`), the route table, the layer every
//! response passes through (request id, a tracing span carrying it, the
//! rendering of refusals, the access log line), the health endpoints and
//! `GET /v1/models`. Unknown paths (and wrong methods) get the catalogue's
//! `Invalid URL (METHOD /path)` 404.

use std::{
    sync::{Arc, LazyLock},
    time::Instant,
};

use axum::{
    Json, Router,
    extract::{MatchedPath, Path, Request, State},
    http::{HeaderValue, Method, StatusCode, Uri, header},
    middleware::{self, Next},
    response::{IntoResponse as _, Response},
    routing::{get, post},
};
use serde_json::json;
use tracing::Instrument as _;

mod accept;
mod serve;
mod watchdog;

pub use accept::{Dealer, accept};
pub use serve::{Limits, serve, slots};

use crate::{
    endpoints,
    error::{self, ProxyError, Refused, Shape},
    pipeline::{self, App, RequestId},
    policy::auth::Access,
    policy::domain::Model,
    telemetry,
    trail::Trail,
};

/// `created` of every model in `/v1/models`; the catalogue has no dates.
const MODEL_CREATED: i64 = 1_700_000_000;

/// The data plane's router with all its layers.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/healthz", get(healthz))
        .route("/ready", get(ready))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{*id}", get(get_model).post(endpoints::gemini::call))
        .route("/v1beta/models", get(endpoints::gemini::list_models))
        .route("/v1beta/models/{*rest}", get(endpoints::gemini::get_model).post(endpoints::gemini::call))
        .route("/v1/chat/completions", post(endpoints::chat::handle))
        .route("/v1/messages", post(endpoints::messages::handle))
        .route("/v1/messages/count_tokens", post(endpoints::messages::count_tokens))
        .route(endpoints::rerank::PATH, post(endpoints::rerank::handle))
        .merge(endpoints::video::routes())
        .merge(endpoints::batch::routes())
        .merge(endpoints::billing::routes())
        .merge(endpoints::routes())
        .merge(endpoints::realtime::routes())
        .fallback(invalid_url)
        .method_not_allowed_fallback(invalid_url)
        .layer(middleware::from_fn_with_state(app.clone(), request_layer))
        .with_state(app)
}

/// A new time-ordered request id: 12 hex digits of Unix milliseconds, then
/// 20 random ones.
pub fn new_request_id() -> Arc<str> {
    let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let random: u128 = rand::random::<u128>() & ((1u128 << 80) - 1);
    // 48 bits of time over 80 random ones: 32 hex digits, written by table
    // into one buffer and shared as it is (one allocation per request).
    let mut digits = [0u8; 32];
    let bits = ((millis & 0xffff_ffff_ffff) << 80) | random;
    for (i, digit) in digits.iter_mut().enumerate() {
        *digit = HEX[((bits >> (124 - 4 * i)) & 0xf) as usize];
    }
    std::str::from_utf8(&digits).map_or_else(|_| Arc::from(""), Arc::from)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

static REQUEST_ID_HEADER: LazyLock<header::HeaderName> =
    LazyLock::new(|| header::HeaderName::from_static("x-request-id"));

/// What a whole answer cost, in USD with six decimals; a stream's cost is
/// known only once it ended (see its usage record).
static COST_HEADER: LazyLock<header::HeaderName> =
    LazyLock::new(|| header::HeaderName::from_static("x-gateway-cost-usd"));

/// Gives each request an id (extension + `x-request-id` response header)
/// and a span carrying it, runs it through the keepalive layer
/// (`pipeline::keepalive`), renders a refusal in the shape of the path's API
/// (the one place that does), names a whole answer's cost
/// (`x-gateway-cost-usd`), and writes the access log line with what the
/// pipeline noted in the request's `Trail`.
async fn request_layer(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = RequestId(new_request_id());
    let method = request.method().clone();
    // Clones of what the request holds (a shared buffer, an `Arc`), not copies.
    let uri = request.uri().clone();
    let path = uri.path();
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map(MatchedPath::as_str);
    let trail = Arc::new(Trail::default());
    request.extensions_mut().insert(id.clone());
    request.extensions_mut().insert(trail.clone());
    let span = telemetry::request_span(&id.0, &method, route, request.headers());
    // The keepalive layer runs inside this one, called rather than layered:
    // one middleware step less on every request.
    let answered = pipeline::keepalive::layer(State(app.clone()), request, next);
    let mut response = answered.instrument(span.clone()).await;
    let refusal = response.extensions_mut().remove::<Refused>().map(|Refused(error)| error);
    if let Some(error) = &refusal {
        response = error::render_as(error, &id.0, Shape::for_path(path), app.console.as_ref());
    }
    if let Ok(value) = HeaderValue::from_str(&id.0) {
        response.headers_mut().insert(REQUEST_ID_HEADER.clone(), value);
    }
    let reason = refusal.as_ref().map_or("", ProxyError::reason);
    app.vitals.answered();
    telemetry::metrics::request(route.unwrap_or("unmatched"), response.status().as_u16(), reason);
    trail.read(|fields| {
        if let Some(cost) = fields.cost_micros.and_then(|c| HeaderValue::from_str(&gw_pricing::format_usd(c)).ok()) {
            response.headers_mut().insert(COST_HEADER.clone(), cost);
        }
        telemetry::responded(&span, route, fields, response.status(), refusal.as_ref());
        if !tracing::enabled!(target: "gw_data_plane::access", tracing::Level::INFO) {
            return;
        }
        let (status, duration_ms) = (response.status().as_u16(), u64::try_from(started.elapsed().as_millis()));
        let duration_ms = duration_ms.unwrap_or(u64::MAX);
        let (model, token) = (fields.model.as_deref().unwrap_or(""), fields.token.as_deref().unwrap_or(""));
        let (account, channel) = (fields.account.as_deref().unwrap_or(""), fields.channel.as_deref().unwrap_or(""));
        // The same line either way: written directly where that is all
        // the event would become (plain text lines, in the request's span
        // when the filter keeps it), else as the event.
        use gw_telemetry::access::Value::{Bare, Str, U64};
        let line = [
            ("method", Bare(method.as_str())),
            ("path", Str(path)),
            ("status", U64(status.into())),
            ("duration_ms", U64(duration_ms)),
            ("model", Str(model)),
            ("token", Str(token)),
            ("account", Str(account)),
            ("channel", Str(channel)),
            ("attempts", U64(fields.attempts.into())),
            ("refusal", Str(reason)),
        ];
        if !span.is_disabled() && gw_telemetry::access::write(&id.0, "gw_data_plane::access", "request", &line) {
            return;
        }
        // In the request's span as its parent, without entering it again.
        tracing::info!(
            target: "gw_data_plane::access",
            parent: &span,
            %method,
            path,
            status,
            duration_ms,
            model,
            token,
            account,
            channel,
            attempts = fields.attempts,
            refusal = reason,
            "request"
        );
    });
    response
}

async fn root() -> &'static str {
    "gw-data-plane: OpenAI-compatible gateway; see /v1/models\n"
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn ready(State(app): State<Arc<App>>) -> Response {
    if !app.snapshot.load().held {
        (StatusCode::SERVICE_UNAVAILABLE, "no policy snapshot yet\n").into_response()
    } else if !app.usage.writable() {
        (StatusCode::SERVICE_UNAVAILABLE, "usage spool cannot be written\n").into_response()
    } else {
        (StatusCode::OK, "ready\n").into_response()
    }
}

async fn invalid_url(method: Method, uri: Uri) -> ProxyError {
    ProxyError::InvalidUrl { method: method.to_string(), path: uri.path().to_owned() }
}

/// `GET /v1/models`: the catalogue models the caller's token may use, in
/// Gemini's shape for a Gemini client (its key in `x-goog-api-key` or
/// `key=`: google-genai lists models at `/v1` by default).
async fn list_models(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    if endpoints::gemini::keyed(&request) {
        return endpoints::gemini::list_models(State(app), request).await;
    }
    let (admitted, _) = pipeline::admit(&app, request, Access::Read).await?;
    let data: Vec<_> = pipeline::models(&admitted).into_iter().map(|m| model_object(m)).collect();
    Ok(Json(json!({ "object": "list", "data": data })).into_response())
}

/// `GET /v1/models/{id}`: the model as `list_models` shows it, when the
/// token may use it; the catalogue's refusals otherwise (403 outside the
/// token's allowlist, 404 for a model its group is not served).
async fn get_model(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ProxyError> {
    if endpoints::gemini::keyed(&request) {
        return endpoints::gemini::get_model(State(app), Path(id), request).await;
    }
    let (admitted, _) = pipeline::admit(&app, request, Access::Read).await?;
    Ok(Json(model_object(pipeline::model(&admitted, &id)?)).into_response())
}

/// One model as the OpenAI models API shows it.
fn model_object(model: &Model) -> serde_json::Value {
    let owned_by = if model.owned_by.is_empty() { "system" } else { model.owned_by.as_str() };
    json!({ "id": model.id, "object": "model", "created": MODEL_CREATED, "owned_by": owned_by })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
pub(crate) mod tests {
    use arc_swap::ArcSwap;
    use axum::body::Body;
    use tokio::sync::mpsc;
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        policy::domain::{Account, Group, RateLimit, Resource, Restrictions, Token},
        policy::snapshot::{Snapshot, tests as fx},
    };

    pub const KEY: &str = "sk-models-test";

    pub fn app(snapshot: Snapshot) -> Arc<App> {
        let (tx, _rx) = mpsc::unbounded_channel();
        Arc::new(App {
            snapshot: Arc::new(ArcSwap::from_pointee(snapshot)),
            usage: crate::meter::UsageSink::new(tx, "test-node"),
            upstreams: crate::provider::Upstreams::default(),
            trusted_proxies: vec![],
            limits: crate::policy::limits::Limiter::new(Arc::new(crate::policy::limits::LocalOnly)),
            in_flight: crate::policy::inflight::InFlight::new(Arc::new(crate::policy::limits::LocalOnly)),
            budgets: crate::policy::budget::Budgets::new(
                Arc::new(crate::policy::budget::tests::Authority::new(i64::MAX / 4)),
                crate::policy::budget::Config::default(),
                None,
            ),
            videos: crate::control::Videos::new(
                crate::control::ControlPlane::new("http://127.0.0.1:1", "test-node-key", &Default::default()).unwrap(),
                "test-node",
            ),
            batches: crate::control::Batches::new(
                crate::control::ControlPlane::new("http://127.0.0.1:1", "test-node-key", &Default::default()).unwrap(),
                "test-node",
            ),
            vitals: Arc::default(),
            console: None,
            responses_websocket: true,
            sockets: Default::default(),
        })
    }

    pub fn policy(token: Token, balance_micros: i64) -> Snapshot {
        let account = Account {
            id: "a1".into(),
            name: "a".into(),
            balance_micros,
            unlimited: false,
            groups: vec![],
            enabled: true,
            used_micros: 0,
            created_at: 0,
        };
        let group = |name: &str| Group {
            name: name.into(),
            ratio_ppm: 1_000_000,
            ratio: 1.0,
            deprecated: false,
            description: String::new(),
            rate_limit: RateLimit::default(),
            tokens_per_minute: 0,
            max_in_flight: 0,
        };
        let mut disabled = fx::channel("off", 0, 1, &["default"], &["gpt-off"]);
        disabled.status = crate::policy::domain::ChannelStatus::Disabled;
        Snapshot::build(
            3,
            [
                Resource::Token(token),
                Resource::Account(account),
                Resource::Group(group("default")),
                Resource::Group(group("vip")),
                Resource::Channel(fx::channel("c1", 0, 1, &["default"], &["gpt-a", "gpt-b", "uncatalogued"])),
                Resource::Channel(fx::channel("c2", 0, 1, &["vip"], &["gpt-vip"])),
                Resource::Channel(disabled),
                Resource::Model(fx::model("gpt-a")),
                Resource::Model(fx::model("gpt-b")),
                Resource::Model(fx::model("gpt-vip")),
                Resource::Model(fx::model("gpt-off")),
            ],
        )
    }

    async fn call(app: Arc<App>, method: &str, path: &str, key: Option<&str>) -> (StatusCode, Response) {
        let mut builder = Request::builder().method(method).uri(path);
        if let Some(key) = key {
            builder = builder.header("authorization", format!("Bearer {key}"));
        }
        let response = router(app).oneshot(builder.body(Body::empty()).unwrap()).await.unwrap();
        (response.status(), response)
    }

    pub async fn json_body(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn model_ids(json: &serde_json::Value) -> Vec<String> {
        json["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_owned()).collect()
    }

    #[tokio::test]
    async fn models_lists_what_the_group_serves_and_the_catalogue_knows() {
        let (status, response) = call(app(policy(fx::token("t1", KEY), 0)), "GET", "/v1/models", Some(KEY)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(response.headers().contains_key("x-request-id"));
        let json = json_body(response).await;
        assert_eq!(json["object"], "list");
        assert_eq!(model_ids(&json), ["gpt-a", "gpt-b"]);
        assert_eq!(json["data"][0]["object"], "model");
        assert_eq!(json["data"][0]["owned_by"], "acme");
        assert!(json["data"][0]["created"].is_i64());
    }

    #[tokio::test]
    async fn models_honours_the_token_allowlist() {
        let models = vec!["gpt-b".into(), "gpt-vip".into()];
        let token = fx::token("t1", KEY).restricted(Restrictions { models, ..Restrictions::default() });
        let (_, response) = call(app(policy(token, 0)), "GET", "/v1/models", Some(KEY)).await;
        assert_eq!(model_ids(&json_body(response).await), ["gpt-b"]);
    }

    #[tokio::test]
    async fn a_model_the_token_may_use_is_answered_as_the_list_shows_it() {
        let app = app(policy(fx::token("t1", KEY), 0));
        let (_, listed) = call(app.clone(), "GET", "/v1/models", Some(KEY)).await;
        let listed = json_body(listed).await;
        let (status, response) = call(app, "GET", "/v1/models/gpt-b", Some(KEY)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json_body(response).await, listed["data"][1]);
    }

    #[tokio::test]
    async fn a_model_outside_the_allowlist_is_forbidden_and_one_not_served_is_not_found() {
        let models = vec!["gpt-b".into(), "gpt-vip".into()];
        let token = fx::token("t1", KEY).restricted(Restrictions { models, ..Restrictions::default() });
        let app = app(policy(token, 0));
        let (status, response) = call(app.clone(), "GET", "/v1/models/gpt-a", Some(KEY)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let forbidden = ProxyError::ModelForbidden { model: "gpt-a".into() };
        let message = json_body(response).await["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.starts_with(&forbidden.message()), "{message}");
        // In the allowlist, but the group is not served it (another group's model).
        let (status, response) = call(app.clone(), "GET", "/v1/models/gpt-vip", Some(KEY)).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(json_body(response).await["error"]["code"], "model_not_found");
        let (status, _) = call(app, "GET", "/v1/models/gpt-b", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn a_model_id_may_hold_slashes() {
        let served = [
            Resource::Channel(fx::channel("c3", 0, 1, &["default"], &["org/model-1"])),
            Resource::Model(fx::model("org/model-1")),
        ];
        let snapshot = policy(fx::token("t1", KEY), 0).apply(4, served, []);
        let (status, response) = call(app(snapshot), "GET", "/v1/models/org/model-1", Some(KEY)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json_body(response).await["id"], "org/model-1");
    }

    #[tokio::test]
    async fn models_needs_a_valid_token() {
        let (status, response) = call(app(policy(fx::token("t1", KEY), 0)), "GET", "/v1/models", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let rid = response.headers()["x-request-id"].to_str().unwrap().to_owned();
        let json = json_body(response).await;
        assert_eq!(json["error"]["message"], format!("未提供令牌 (request id: {rid})"));
    }

    #[tokio::test]
    async fn a_quota_refusal_links_to_the_configured_console_before_the_request_id() {
        let mut app = app(policy(fx::token("t1", KEY), 0));
        Arc::get_mut(&mut app).unwrap().console = crate::error::ConsoleLinks::new("https://example.com/console/");
        let (status, response) = call(app, "POST", "/v1/chat/completions", Some(KEY)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let rid = response.headers()["x-request-id"].to_str().unwrap().to_owned();
        let json = json_body(response).await;
        assert_eq!(
            json["error"]["message"],
            format!(
                "用户额度不足, 剩余额度: ＄0.000000 (tokens: https://example.com/console/tokens, \
                 top up: https://example.com/console/topup) (request id: {rid})"
            )
        );
    }

    #[tokio::test]
    async fn unknown_paths_are_invalid_urls() {
        for (method, path) in
            [("POST", "/v1/v1/chat/completions"), ("POST", "/chat/completions"), ("GET", "/v1/chat/completions")]
        {
            let (status, response) = call(app(Snapshot::default()), method, path, Some(KEY)).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
            assert_eq!(response.headers()["x-should-retry"], "false");
            assert!(response.headers().contains_key("x-request-id"));
            let json = json_body(response).await;
            assert_eq!(json["error"]["message"], format!("Invalid URL ({method} {path})"));
            assert_eq!(json["error"]["type"], "invalid_request_error");
        }
    }

    #[tokio::test]
    async fn ready_waits_for_a_snapshot_but_health_does_not() {
        let empty = app(Snapshot::default());
        assert_eq!(call(empty.clone(), "GET", "/ready", None).await.0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(call(empty.clone(), "GET", "/healthz", None).await.0, StatusCode::OK);
        assert_eq!(call(empty.clone(), "HEAD", "/", None).await.0, StatusCode::OK);
        assert_eq!(call(empty, "GET", "/", None).await.0, StatusCode::OK);
        let held = app(policy(fx::token("t1", KEY), 0));
        assert_eq!(call(held, "GET", "/ready", None).await.0, StatusCode::OK);
    }

    #[test]
    fn request_ids_are_32_hex_and_time_ordered() {
        let a = new_request_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_request_id();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(a < b);
    }
}
