//! Keepalives for streamed answers still waiting for their first token, so
//! proxies and load balancers in front of the client keep the connection
//! while a reasoning model thinks. A handler arms its request (`arm`) right
//! before the attempts of a streamed answer; until one whole interval has
//! passed nothing changes: the answer, or a refusal with its own status,
//! goes out as it is. After that the layer commits to a `200` event stream
//! and sends a keepalive each interval (an SSE comment; a `ping` event on
//! `/v1/messages`, as Anthropic sends) while the attempts go on, failovers
//! included, then the answer's events, or, when every attempt failed, the
//! refusal as one error event in the client's dialect. An attempt returns
//! only once its first token came (`meter::pump::primed`), so nothing but
//! keepalives reaches the client before then.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::Poll,
    time::Duration,
};

use axum::{
    body::{Body, BodyDataStream},
    extract::{Request, State},
    http::{Method, StatusCode},
    middleware::Next,
    response::Response,
};
use bytes::Bytes;
use futures_util::{Stream, StreamExt as _, stream, task::AtomicWaker};
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::Instrument as _;

use super::{Admitted, App, RequestId};
use crate::{
    error::{self, ProxyError, Refused, Shape},
    provider,
};

/// Largest refusal body read to turn it into an error event; they are a
/// few hundred bytes.
const MAX_ERROR_BYTES: usize = 64 << 10;

/// Whether the request's answer streams and may be kept alive: a request
/// extension the layer adds and `arm` sets, waking the layer.
#[derive(Clone, Default)]
pub struct Armed(Arc<ArmedState>);

#[derive(Default)]
struct ArmedState {
    armed: AtomicBool,
    /// The layer, waiting for the request to be armed.
    waker: AtomicWaker,
}

/// A keepalive in the client's dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beat {
    /// `: keepalive`, which SSE readers skip.
    Comment,
    /// The messages API's own `ping` event.
    Ping,
}

/// The handler's answer, still being worked on.
type Answer = Pin<Box<dyn Future<Output = Response> + Send>>;

/// A committed stream waiting for the handler's answer.
struct Waiting {
    answer: Answer,
    ticks: Interval,
    beat: Beat,
    shape: Shape,
    /// Answers on `/v1/responses` (whose error event is typed).
    responses: bool,
    id: RequestId,
    app: Arc<App>,
}

/// Where a committed stream is.
enum Phase {
    Waiting(Box<Waiting>),
    Answer(BodyDataStream),
    Done,
}

/// Marks `admitted`'s answer as a stream that may be kept alive while it
/// waits for its first token; a handler calls it right before its attempts
/// when the client asked for a stream of server-sent events.
pub fn arm(admitted: &Admitted) {
    if let Some(armed) = admitted.parts.extensions.get::<Armed>() {
        armed.0.armed.store(true, Ordering::Release);
        armed.0.waker.wake();
    }
}

/// The layer: runs the handler, and once an armed request waited a whole
/// keepalive interval (`provider::Config::keepalive_interval`; zero: never)
/// answers `200` at once with a stream of keepalives, followed by the
/// handler's answer when it comes. Inside `http`'s request layer, which
/// gives the request its id.
pub async fn layer(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let interval = app.upstreams.config().keepalive_interval;
    if interval.is_zero() || request.method() != Method::POST {
        return next.run(request).await;
    }
    let armed = Armed::default();
    request.extensions_mut().insert(armed.clone());
    let path = request.uri().path();
    let shape = Shape::for_path(path);
    let responses = path == "/v1/responses";
    let beat = if shape == Shape::Messages { Beat::Ping } else { Beat::Comment };
    let id = request.extensions().get::<RequestId>().cloned().unwrap_or_default();
    let arrived = Instant::now();
    let mut answer: Answer = Box::pin(next.run(request));
    // No timer until the handler arms the request: most answers never are.
    tokio::select! {
        biased;
        response = &mut answer => return response,
        () = armed.wait() => {}
    }
    // Ticks on the interval's grid from the request's arrival: the first
    // whole interval after it was armed commits the stream.
    let mut ticks = tokio::time::interval_at(first_tick(arrived, interval, Instant::now()), interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tokio::select! {
        biased;
        response = &mut answer => return response,
        _ = ticks.tick() => {}
    }
    // The request's span (`http`'s), which the answer keeps once it runs
    // inside the committed body.
    let answer: Answer = Box::pin(answer.instrument(tracing::Span::current()));
    let waiting = Waiting { answer, ticks, beat, shape, responses, id, app };
    let body = stream::iter([Ok(beat.bytes())]).chain(Phase::Waiting(Box::new(waiting)).into_stream());
    provider::reply(StatusCode::OK, None, Body::from_stream(body), true)
}

/// The first tick at or after `now` of the grid of `interval`s from
/// `arrived` (never `arrived` itself).
fn first_tick(arrived: Instant, interval: Duration, now: Instant) -> Instant {
    let since = now.saturating_duration_since(arrived);
    let whole = since.as_nanos().div_ceil(interval.as_nanos()).max(1);
    let whole = u32::try_from(whole).unwrap_or(u32::MAX);
    arrived + interval.saturating_mul(whole)
}

// === impl Armed ===

impl Armed {
    /// Resolves once `arm` was called.
    fn wait(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.0.armed.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            self.0.waker.register(cx.waker());
            // Armed between the first look and the registration.
            if self.0.armed.load(Ordering::Acquire) { Poll::Ready(()) } else { Poll::Pending }
        })
    }
}

// === impl Beat ===

impl Beat {
    fn bytes(self) -> Bytes {
        match self {
            Beat::Comment => Bytes::from_static(b": keepalive\n\n"),
            Beat::Ping => Bytes::from_static(b"event: ping\ndata: {\"type\": \"ping\"}\n\n"),
        }
    }
}

// === impl Phase ===

impl Phase {
    /// The rest of the committed body: keepalives until the answer, then its
    /// bytes or its refusal as an error event.
    fn into_stream(self) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
        stream::unfold(self, |phase| async move {
            let mut phase = phase;
            loop {
                phase = match phase {
                    Phase::Done => return None,
                    Phase::Answer(mut body) => {
                        let item = body.next().await?;
                        return Some((item.map_err(io::Error::other), Phase::Answer(body)));
                    }
                    Phase::Waiting(mut waiting) => {
                        let mut response = tokio::select! {
                            biased;
                            response = &mut waiting.answer => response,
                            _ = waiting.ticks.tick() => return Some((Ok(waiting.beat.bytes()), Phase::Waiting(waiting))),
                        };
                        match response.extensions_mut().remove::<Refused>() {
                            Some(Refused(error)) => return Some((Ok(waiting.error_event(&error).await), Phase::Done)),
                            None => Phase::Answer(response.into_body().into_data_stream()),
                        }
                    }
                };
            }
        })
    }
}

// === impl Waiting ===

impl Waiting {
    /// `error` as the event that ends the stream in the client's dialect:
    /// the refusal's body as `error.rs` renders it for the path, as the data
    /// of an `error` event (messages, responses) or of a plain one (chat
    /// and Gemini streams, whose clients look for an `error` field).
    fn error_event(&self, error: &ProxyError) -> impl Future<Output = Bytes> + Send + 'static {
        tracing::warn!(
            reason = error.reason(),
            "every attempt failed after keepalives were sent; ending the stream with an error event"
        );
        let rendered = error::render_as(error, &self.id.0, self.shape, self.app.console.as_ref());
        let (responses, named) = (self.responses, self.shape == Shape::Messages || self.responses);
        async move {
            let body = axum::body::to_bytes(rendered.into_body(), MAX_ERROR_BYTES).await.unwrap_or_default();
            let mut data: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if responses {
                // The responses API's typed `error` event, its fields beside
                // the `error` object SDKs look for.
                let inner = data["error"].clone();
                data["type"] = "error".into();
                data["code"] = inner["code"].clone();
                data["message"] = inner["message"].clone();
                data["param"] = serde_json::Value::Null;
            }
            Bytes::from(format!("{}data: {data}\n\n", if named { "event: error\n" } else { "" }))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::time::Duration;

    use axum::{Router, middleware, routing::post};
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        http::tests::{KEY, app, policy},
        policy::{auth::Access, snapshot::tests as fx},
    };

    /// Sends a streamed request to `path` whose handler arms the layer and
    /// answers `outcome` after `after`; returns the status and the body.
    async fn call(path: &'static str, after: Duration, outcome: Result<&'static str, ProxyError>) -> (u16, String) {
        let app = app(policy(fx::token("t1", KEY), 1_000_000));
        let handler = move |State(app): State<Arc<App>>, request: Request| async move {
            let (admitted, _) = crate::pipeline::admit(&app, request, Access::Spend).await?;
            arm(&admitted);
            tokio::time::sleep(after).await;
            outcome.map(|body| provider::reply(StatusCode::OK, None, Body::from(body), true))
        };
        let router = Router::new()
            .route(path, post(handler))
            .layer(middleware::from_fn_with_state(app.clone(), layer))
            .with_state(app);
        let request = Request::post(path).header("authorization", format!("Bearer {KEY}")).body(Body::empty()).unwrap();
        let response = router.oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_waiting_past_the_interval_gets_keepalives_then_its_answer() {
        // 15 s intervals: one at 15 s commits the answer, one more at 30 s.
        let (status, body) = call("/v1/chat/completions", Duration::from_secs(40), Ok("data: {}\n\n")).await;
        assert_eq!((status, body.as_str()), (200, ": keepalive\n\n: keepalive\n\ndata: {}\n\n"));
        let (status, body) = call("/v1/messages", Duration::from_secs(20), Ok("event: message_start\n\n")).await;
        let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
        assert_eq!((status, body), (200, format!("{ping}event: message_start\n\n")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_after_keepalives_is_an_error_event_and_before_them_keeps_its_status() {
        let (status, body) = call("/v1/messages", Duration::from_secs(40), Err(ProxyError::UpstreamTimeout)).await;
        assert_eq!(status, 200);
        let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
        let event = body.strip_prefix(&format!("{ping}{ping}event: error\ndata: ")).unwrap_or_else(|| panic!("{body}"));
        let event: serde_json::Value = serde_json::from_str(event.trim_end()).unwrap();
        assert_eq!((event["type"].as_str(), event["error"]["type"].as_str()), (Some("error"), Some("timeout_error")));

        let (status, body) =
            call("/v1/chat/completions", Duration::from_secs(16), Err(ProxyError::UpstreamConnect)).await;
        let event = body.strip_prefix(": keepalive\n\ndata: ").unwrap_or_else(|| panic!("{body}"));
        let event: serde_json::Value = serde_json::from_str(event.trim_end()).unwrap();
        assert_eq!((status, event["error"]["type"].as_str()), (200, Some("upstream_error")));

        let (status, body) =
            call("/v1/chat/completions", Duration::from_secs(14), Err(ProxyError::UpstreamTimeout)).await;
        assert_eq!(
            (status, body.as_str()),
            (504, ""),
            "refused before the first interval: its own status, rendered outside"
        );
    }

    #[test]
    fn a_request_armed_late_commits_on_the_grid_of_intervals_from_its_arrival() {
        let (arrived, interval) = (Instant::now(), Duration::from_secs(15));
        let at = |secs: u64| arrived + Duration::from_secs(secs);
        assert_eq!(first_tick(arrived, interval, arrived), at(15));
        assert_eq!(first_tick(arrived, interval, at(1)), at(15));
        assert_eq!(first_tick(arrived, interval, at(15)), at(15));
        assert_eq!(first_tick(arrived, interval, at(16)), at(30));
    }

    #[test]
    fn keepalives_are_what_each_dialects_readers_skip() {
        assert_eq!(Beat::Comment.bytes(), ": keepalive\n\n");
        assert_eq!(Beat::Ping.bytes(), "event: ping\ndata: {\"type\": \"ping\"}\n\n");
    }
}
