//! `/v1/responses` over a WebSocket (OpenAI's WebSocket mode, Codex's
//! `responses_websockets`): `GET /v1/responses` upgrades once the caller is
//! authenticated (a refusal before the upgrade is an HTTP answer), then each
//! `response.create` (or `response.append`) the client sends is run as one
//! `POST /v1/responses` with `stream: true` through the same handler
//! (`super::handle`: admit, route, reserve, attempts, meter), and each of
//! its SSE events goes back as one text message. Responses on a socket run
//! one at a time, in the order they were sent; a refusal or failure is an
//! `error` event and the socket stays open, except for a refused token.
//! A client that goes away mid-response is billed what it received, as one
//! that drops an HTTP stream. Channels get ordinary HTTP requests, so every
//! kind serves a socket; `chain` keeps what a continuation needs. A socket
//! idle between responses for the idle timeout is closed; one reaching its
//! lifetime gets a `websocket_connection_limit_reached` error event and a
//! close, a response it was running ending as if its client had left
//! (`pipeline::sockets`). When the data plane stops, a socket lets its
//! running response finish within the grace period (past it the response
//! ends as if its client had left), starts no other, and closes with 1001.

use std::{collections::VecDeque, net::SocketAddr, sync::Arc, time::Instant};

use axum::{
    body::Body,
    extract::{
        ConnectInfo, Request, State,
        ws::{
            CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code,
            rejection::WebSocketUpgradeRejection,
        },
    },
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::Response,
};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use serde_json::{Map, Value, json};
use tracing::Instrument as _;

mod chain;

use self::chain::Chain;
use super::{Api, handle};
use crate::{
    error::{self, ProxyError, Shape},
    meter::sse::{event_data, find_event_end},
    pipeline::{
        self, App, RequestId,
        body::MAX_BODY_BYTES,
        sockets::{Clock, Expiry, Hold, Surface},
    },
    policy::auth::Access,
    provider, telemetry,
    trail::Trail,
};

/// The path of both transports.
pub const PATH: &str = "/v1/responses";
/// Request headers that belong to the upgrade, not to each response.
const UPGRADE_HEADERS: [&str; 8] = [
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "content-length",
    "transfer-encoding",
];
/// The status a response the client left ends with, as in usage records.
const CLIENT_CLOSED: StatusCode = match StatusCode::from_u16(499) {
    Ok(status) => status,
    Err(_) => StatusCode::BAD_REQUEST,
};
/// Headers of a refusal a client may act on, carried in its error event.
const ERROR_HEADERS: [&str; 3] = ["retry-after", "x-should-retry", "x-request-id"];

/// What each response on a socket is sent as: the upgrade request's
/// headers and client address, under a request id of its own.
#[derive(Clone)]
struct Origin {
    headers: HeaderMap,
    peer: Option<ConnectInfo<SocketAddr>>,
    /// The upgrade's request id; response `n` is `<id>-<n>`.
    id: Arc<str>,
}

/// One open socket: its responses so far and what arrived meanwhile.
struct Socket {
    app: Arc<App>,
    origin: Origin,
    chain: Chain,
    /// Client messages that arrived while a response was running.
    queued: VecDeque<Utf8Bytes>,
    served: u64,
    /// Its idle and lifetime deadlines.
    clock: Clock,
    /// Its place among the sockets a stopping data plane waits for.
    hold: Hold,
}

/// How one response on the socket ended.
enum Outcome {
    /// Its events were all sent (`status` as the HTTP twin's).
    Answered { status: StatusCode },
    /// Refused or failed before any event: sent as an `error` event.
    Refused(ProxyError),
    /// The client closed the socket, or it broke (logged as 499).
    Gone,
    /// The socket reached its lifetime mid-response: the response ends as
    /// if its client had left (logged 499, as its usage record says).
    Expired,
    /// The data plane stopped and its grace period ended mid-response: the
    /// response ends as if its client had left (logged 499).
    Stopped,
}

/// Handles `GET /v1/responses`: upgrades a WebSocket handshake of a caller
/// the gateway admits, whose token, address, account and group pass
/// (refusals are HTTP answers). Without a handshake it is the unknown URL
/// it always was; with the mode turned off (`responses_websocket`), 426.
pub async fn upgrade(
    State(app): State<Arc<App>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    request: Request,
) -> Result<Response, ProxyError> {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(_) if !request.headers().contains_key(header::UPGRADE) => {
            return Err(ProxyError::InvalidUrl { method: Method::GET.to_string(), path: PATH.to_owned() });
        }
        Err(rejection) => {
            return Err(ProxyError::InvalidField { field: "websocket handshake", reason: rejection.body_text() });
        }
    };
    if !app.responses_websocket {
        return Err(ProxyError::WebSocketOff);
    }
    // Quota, balance and the rate and in-flight limits apply to each
    // response, which spends; the upgrade only has to name a caller.
    let (admitted, _) = pipeline::admit(&app, request, Access::Read).await?;
    let mut headers = admitted.parts.headers.clone();
    for name in UPGRADE_HEADERS {
        headers.remove(name);
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let peer = admitted.parts.extensions.get::<ConnectInfo<SocketAddr>>().cloned();
    let origin = Origin { headers, peer, id: admitted.id.0.clone() };
    let clock = app.sockets.clock(Surface::Responses);
    let hold = app.sockets.hold();
    let socket = Socket { app, origin, chain: Chain::default(), queued: VecDeque::new(), served: 0, clock, hold };
    Ok(upgrade.max_message_size(MAX_BODY_BYTES).on_upgrade(move |ws| socket.serve(ws)))
}

// === impl Origin ===

impl Origin {
    /// Response `id`'s HTTP twin: `POST /v1/responses` with `body`.
    fn request(&self, id: &RequestId, trail: Arc<Trail>, body: Bytes) -> Request {
        let mut request = Request::new(Body::from(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = axum::http::Uri::from_static(PATH);
        *request.headers_mut() = self.headers.clone();
        let extensions = request.extensions_mut();
        extensions.insert(id.clone());
        extensions.insert(trail);
        if let Some(peer) = self.peer {
            extensions.insert(peer);
        }
        request
    }
}

// === impl Socket ===

impl Socket {
    /// Serves `ws` until the client closes it, a response's token is
    /// refused (then it is closed with 1008), its time runs out, or the
    /// data plane stops (closed with 1001 once no response runs).
    async fn serve(mut self, mut ws: WebSocket) {
        loop {
            if self.hold.is_closing() {
                return self.leave(&mut ws).await;
            }
            let next = match self.queued.pop_front() {
                Some(text) => Some(Ok(Message::Text(text))),
                None => tokio::select! {
                    next = ws.recv() => next,
                    expiry = self.clock.expired() => return self.expire(&mut ws, expiry).await,
                    () = self.hold.closing() => return self.leave(&mut ws).await,
                },
            };
            let text = match next {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Binary(_))) => {
                    self.clock.touch();
                    let refused = ProxyError::InvalidJson("events are JSON text messages, not binary ones".into());
                    let id = self.next_id();
                    if !self.send_error(&mut ws, &refused, &id, None).await {
                        return;
                    }
                    continue;
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
            };
            let outcome = self.respond(&mut ws, &text).await;
            // The response's last event just went out: a new quiet spell.
            self.clock.touch();
            match outcome {
                Outcome::Gone => return,
                Outcome::Expired => return self.expire(&mut ws, Expiry::Lifetime).await,
                Outcome::Stopped => return self.leave(&mut ws).await,
                Outcome::Refused(ProxyError::MissingToken | ProxyError::InvalidToken) => {
                    let reason = Utf8Bytes::from_static("the token was refused");
                    let _ = ws.send(Message::Close(Some(CloseFrame { code: close_code::POLICY, reason }))).await;
                    return;
                }
                Outcome::Answered { .. } | Outcome::Refused(_) => {}
            }
        }
    }

    /// Resolves once a response has sent nothing for the keepalive
    /// interval (`--stream-keepalive-ms`), when the socket gets a ping so
    /// proxies and load balancers keep it while a model thinks; never when
    /// keepalives are off.
    async fn quiet(&self) {
        match self.app.upstreams.config().keepalive_interval {
            every if every.is_zero() => std::future::pending().await,
            every => tokio::time::sleep(every).await,
        }
    }

    /// Ends the socket whose time ran out for `why`: one past its lifetime
    /// gets the `error` event OpenAI sends then, and either gets a close
    /// frame naming the limit.
    async fn expire(&self, ws: &mut WebSocket, why: Expiry) {
        tracing::info!(socket = %self.origin.id, ?why, responses = self.served, "responses websocket expired");
        if why == Expiry::Lifetime {
            let event = json!({ "type": "error", "status": 400, "error": self.clock.expired_error() });
            let _ = ws.send(Message::Text(event.to_string().into())).await;
        }
        let _ = ws.send(Message::Close(Some(self.clock.close_frame(why)))).await;
    }

    /// Ends the socket of a data plane that stops: a close going away.
    async fn leave(&self, ws: &mut WebSocket) {
        tracing::info!(socket = %self.origin.id, responses = self.served, "responses websocket closed: shutting down");
        let _ = ws.send(Message::Close(Some(self.hold.close_frame()))).await;
    }

    /// The request id of the socket's next response.
    fn next_id(&mut self) -> RequestId {
        self.served += 1;
        RequestId(format!("{}-{}", self.origin.id, self.served).into())
    }

    /// Runs the response client event `text` asks for, as its HTTP twin
    /// would, and relays its events; writes its access log line.
    async fn respond(&mut self, ws: &mut WebSocket, text: &str) -> Outcome {
        let started = Instant::now();
        let id = self.next_id();
        let trail = Arc::new(Trail::default());
        let span = telemetry::request_span(&id.0, &Method::POST, Some(PATH), &self.origin.headers);
        let outcome = async {
            let next = match event_object(text).and_then(|event| self.chain.next(event)) {
                Ok(next) => next,
                Err(refused) => return self.refuse(ws, refused, &id, None).await,
            };
            let body = Value::Object(next.request.clone()).to_string();
            let request = self.origin.request(&id, trail.clone(), Bytes::from(body));
            let answered = handle(self.app.clone(), Api::Responses, request);
            tokio::pin!(answered);
            let answered = loop {
                tokio::select! {
                    answered = &mut answered => break answered,
                    _ = self.clock.lifetime_over() => return Outcome::Expired,
                    () = self.hold.cut() => return Outcome::Stopped,
                    () = self.quiet() => {
                        if ws.send(Message::Ping(Bytes::new())).await.is_err() {
                            return Outcome::Gone;
                        }
                    }
                }
            };
            match answered {
                Ok(response) => self.relay(ws, response, next.request, next.stream_id.as_ref(), &id).await,
                Err(refused) => self.refuse(ws, refused, &id, next.stream_id.as_ref()).await,
            }
        }
        .instrument(span.clone())
        .await;
        let (status, refusal) = match &outcome {
            Outcome::Answered { status } => (*status, None),
            Outcome::Gone | Outcome::Expired | Outcome::Stopped => (CLIENT_CLOSED, None),
            Outcome::Refused(error) => (error.status(), Some(error)),
        };
        let reason = refusal.map_or("", ProxyError::reason);
        telemetry::metrics::request(PATH, status.as_u16(), reason);
        trail.read(|fields| {
            telemetry::responded(&span, Some(PATH), fields, status, refusal);
            span.in_scope(|| {
                tracing::info!(
                    target: "gw_data_plane::access",
                    method = "POST",
                    path = PATH,
                    transport = "websocket",
                    status = status.as_u16(),
                    duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    model = fields.model.as_deref().unwrap_or(""),
                    token = fields.token.as_deref().unwrap_or(""),
                    account = fields.account.as_deref().unwrap_or(""),
                    channel = fields.channel.as_deref().unwrap_or(""),
                    attempts = fields.attempts,
                    refusal = reason,
                    client_closed = matches!(outcome, Outcome::Gone),
                    expired = matches!(outcome, Outcome::Expired),
                    stopped = matches!(outcome, Outcome::Stopped),
                    "request"
                );
            });
        });
        outcome
    }

    /// Sends `refused` as an `error` event; the chain has nothing to
    /// continue afterwards.
    async fn refuse(
        &mut self,
        ws: &mut WebSocket,
        refused: ProxyError,
        id: &RequestId,
        stream_id: Option<&Value>,
    ) -> Outcome {
        self.chain.broken();
        if self.send_error(ws, &refused, id, stream_id).await { Outcome::Refused(refused) } else { Outcome::Gone }
    }

    /// Relays `response`'s events to the client, one text message each
    /// (an SSE keepalive becomes a ping), while queueing what the client
    /// sends meanwhile. Notes a completed response in the chain.
    async fn relay(
        &mut self,
        ws: &mut WebSocket,
        response: Response,
        request: Map<String, Value>,
        stream_id: Option<&Value>,
        id: &RequestId,
    ) -> Outcome {
        let status = response.status();
        self.chain.broken();
        if !provider::is_sse(response.headers()) {
            return self.relay_whole(ws, response, request, stream_id, id).await;
        }
        let mut body = response.into_body().into_data_stream();
        let mut buf = BytesMut::new();
        loop {
            let chunk = tokio::select! {
                chunk = body.next() => chunk,
                message = ws.recv() => match message {
                    Some(Ok(Message::Text(text))) => {
                        self.queued.push_back(text);
                        continue;
                    }
                    Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => continue,
                    // Dropping the body ends the stream as a dropped HTTP
                    // stream ends: metered for what went by.
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return Outcome::Gone,
                },
                // Dropping the body, as when the client leaves.
                _ = self.clock.lifetime_over() => return Outcome::Expired,
                () = self.hold.cut() => return Outcome::Stopped,
                () = self.quiet() => {
                    if ws.send(Message::Ping(Bytes::new())).await.is_err() {
                        return Outcome::Gone;
                    }
                    continue;
                }
            };
            let chunk = match chunk {
                Some(Ok(chunk)) => chunk,
                Some(Err(error)) => {
                    tracing::warn!(%error, "response stream broke on a websocket");
                    let broke = ProxyError::UpstreamStatus {
                        status: StatusCode::BAD_GATEWAY,
                        message: "the response stream broke off".into(),
                    };
                    return match self.send_error(ws, &broke, id, stream_id).await {
                        true => Outcome::Answered { status },
                        false => Outcome::Gone,
                    };
                }
                None => return Outcome::Answered { status },
            };
            // An event boundary may straddle the chunks.
            let from = buf.len().saturating_sub(3);
            buf.extend_from_slice(&chunk);
            let mut from = from;
            while let Some(end) = find_event_end(&buf, from) {
                let event = buf.split_to(end);
                from = 0;
                let data = event_data(&event);
                let message = match relayed(&data, stream_id) {
                    Relayed::Keepalive => Message::Ping(Bytes::new()),
                    Relayed::Skip => continue,
                    Relayed::Event { text, completed } => {
                        if let Some(response) = completed {
                            self.chain.completed(request.clone(), &response);
                        }
                        Message::Text(text)
                    }
                };
                if ws.send(message).await.is_err() {
                    return Outcome::Gone;
                }
            }
        }
    }

    /// A whole (not streamed) answer, sent as the `response.completed`
    /// event of the response it holds.
    async fn relay_whole(
        &mut self,
        ws: &mut WebSocket,
        response: Response,
        request: Map<String, Value>,
        stream_id: Option<&Value>,
        id: &RequestId,
    ) -> Outcome {
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), MAX_BODY_BYTES).await.unwrap_or_default();
        let answer = serde_json::from_slice::<Value>(&bytes).ok().filter(|a| a["object"] == "response");
        let Some(answer) = answer else {
            let message = "the channel answered neither an event stream nor a response".to_owned();
            let failed = ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message };
            return self.refuse(ws, failed, id, stream_id).await;
        };
        let mut event = json!({ "type": "response.completed", "response": answer });
        if let Some(stream_id) = stream_id {
            event["stream_id"] = stream_id.clone();
        }
        if ws.send(Message::Text(event.to_string().into())).await.is_err() {
            return Outcome::Gone;
        }
        self.chain.completed(request, &event["response"]);
        Outcome::Answered { status }
    }

    /// Sends `error` as an `error` event: the body its HTTP twin would get
    /// (`error::render_as`), its status, and the headers a client may act
    /// on. Returns whether the client could be written to.
    async fn send_error(
        &self,
        ws: &mut WebSocket,
        error: &ProxyError,
        id: &RequestId,
        stream_id: Option<&Value>,
    ) -> bool {
        let rendered = error::render_as(error, &id.0, Shape::OpenAi, self.app.console.as_ref());
        let status = rendered.status().as_u16();
        let mut headers = Map::new();
        for name in ERROR_HEADERS {
            if let Some(value) = rendered.headers().get(name).and_then(|v| v.to_str().ok()) {
                headers.insert(name.to_owned(), Value::from(value));
            }
        }
        headers.insert("x-request-id".into(), Value::from(&*id.0));
        let bytes = axum::body::to_bytes(rendered.into_body(), MAX_BODY_BYTES).await.unwrap_or_default();
        let mut body = serde_json::from_slice::<Value>(&bytes).unwrap_or_default();
        let mut inner = body["error"].take();
        inner["headers"] = Value::Object(headers);
        let mut event = json!({ "type": "error", "status": status, "error": inner });
        if let Some(stream_id) = stream_id {
            event["stream_id"] = stream_id.clone();
        }
        ws.send(Message::Text(event.to_string().into())).await.is_ok()
    }
}

/// What one SSE event becomes on the socket.
enum Relayed {
    /// A comment or ping kept the stream alive: a WebSocket ping does.
    Keepalive,
    /// Nothing a client reads (`[DONE]`, data that is not an event).
    Skip,
    /// The event's JSON as one text message, with the `response` object
    /// of a `response.completed`.
    Event { text: Utf8Bytes, completed: Option<Value> },
}

/// `data` of one SSE event as the socket relays it, with `stream_id` added
/// when the client gave one. Events pass as sent, unless they carry a lane.
fn relayed(data: &[u8], stream_id: Option<&Value>) -> Relayed {
    if data.is_empty() {
        return Relayed::Keepalive;
    }
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let kind = match serde_json::from_slice::<Typed<'_>>(data) {
        Ok(typed) => typed.kind.unwrap_or_default(),
        Err(_) => return Relayed::Skip,
    };
    if kind == "ping" || kind == "keepalive" {
        return Relayed::Keepalive;
    }
    let completed = kind == "response.completed";
    if !completed && stream_id.is_none() {
        return match Utf8Bytes::try_from(Bytes::copy_from_slice(data)) {
            Ok(text) => Relayed::Event { text, completed: None },
            Err(_) => Relayed::Skip,
        };
    }
    let Ok(mut event) = serde_json::from_slice::<Value>(data) else {
        return Relayed::Skip;
    };
    if let (Some(stream_id), Some(fields)) = (stream_id, event.as_object_mut()) {
        fields.insert("stream_id".into(), stream_id.clone());
    }
    let response = completed.then(|| event["response"].clone());
    Relayed::Event { text: event.to_string().into(), completed: response }
}

/// A client event's JSON object.
fn event_object(text: &str) -> Result<Map<String, Value>, ProxyError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(event)) => Ok(event),
        Ok(_) => Err(ProxyError::InvalidJson("an event must be a JSON object".into())),
        Err(error) => Err(ProxyError::InvalidJson(error.to_string())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn text(relayed: Relayed) -> (String, Option<Value>) {
        match relayed {
            Relayed::Event { text, completed } => (text.to_string(), completed),
            Relayed::Keepalive => ("(keepalive)".into(), None),
            Relayed::Skip => ("(skip)".into(), None),
        }
    }

    #[test]
    fn events_pass_as_sent_and_a_lane_is_echoed_on_each() {
        let delta = br#"{"type":"response.output_text.delta","delta":"hi","sequence_number":3}"#;
        assert_eq!(text(relayed(delta, None)).0, std::str::from_utf8(delta).unwrap());
        let laned: Value = serde_json::from_str(&text(relayed(delta, Some(&json!("lane-2")))).0).unwrap();
        assert_eq!(laned["stream_id"], "lane-2");
        assert_eq!(laned["delta"], "hi");
        let done = br#"{"type":"response.completed","response":{"id":"resp_1","output":[]}}"#;
        assert_eq!(text(relayed(done, None)).1.unwrap()["id"], "resp_1");
    }

    #[test]
    fn keepalives_become_pings_and_the_rest_is_skipped() {
        assert_eq!(text(relayed(b"", None)).0, "(keepalive)");
        assert_eq!(text(relayed(br#"{"type":"ping"}"#, None)).0, "(keepalive)");
        assert_eq!(text(relayed(b"[DONE]", None)).0, "(skip)");
        assert_eq!(text(relayed(b"not json", None)).0, "(skip)");
    }

    #[test]
    fn events_must_be_json_objects() {
        assert!(event_object(r#"{"type":"response.create"}"#).is_ok());
        for bad in ["[1]", "{", "\"response.create\""] {
            assert_eq!(event_object(bad).unwrap_err().status(), StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
