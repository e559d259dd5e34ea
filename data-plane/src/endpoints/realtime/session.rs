//! One relayed realtime session. Text and binary frames pass both ways
//! unchanged (pings are answered by each side's own socket); of the
//! server's events only `response.created` and `response.done` are read.
//! Each response the upstream opens (asked for by the client, or by its own
//! turn detection) holds a reservation of its own from its
//! `response.created`, and its `response.done` (matched by id) becomes one
//! usage record at once (request id `<session id>-<n>`, so a resend is
//! applied once), settling that reservation. A reservation is kept ready
//! for the next response: the upgrade's, then one taken as each response
//! ends. When the budgets cannot cover one, the client gets an `error`
//! event, the open responses are cancelled upstream and read to their
//! `response.done` (a cancelled response reports what it used), billed,
//! and the session is closed; a client that goes away mid-response is
//! drained the same way. The drain waits `DRAIN_WAIT` at most: a response
//! whose usage never comes is billed nothing and counted
//! (`gw.realtime.unbilled_responses`, and a warning). The session holds
//! one in-flight slot (its `Admitted`) until it ends. A session with no
//! text or audio either way for the realtime idle timeout is closed, and one
//! reaching its lifetime gets a `session_expired` error event first
//! (`pipeline::sockets`); either way its open responses are drained and
//! billed as when its client leaves. A data plane that stops ends its
//! sessions the same way: a `server_shutting_down` error event, the drain,
//! and a close going away (1001).

use std::{sync::Arc, time::Duration};

use axum::extract::ws::{self, Message, WebSocket};
use bytes::Bytes;
use futures_util::{
    SinkExt as _, StreamExt as _,
    stream::{SplitSink, SplitStream},
};
use serde_json::json;
use tokio_tungstenite::tungstenite::{self, protocol::frame::coding::CloseCode};

use crate::{
    error::ProxyError,
    meter::{
        Charge,
        realtime::{Lifecycle, lifecycle},
    },
    pipeline::{
        self, Admitted, App, Bound,
        sockets::{Clock, Expiry, Hold, Surface},
    },
    pricing::{Units, Usage},
    provider::realtime,
    telemetry::metrics,
};

/// How long a session that is ending waits for its cancelled responses'
/// `response.done` (the provider answers a cancel at once; this bounds a
/// stuck upstream).
pub const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// The status a response cut short by its client going away is recorded with.
const CLIENT_GONE: u16 = 499;

type ClientTx = SplitSink<WebSocket, Message>;
type ClientRx = SplitStream<WebSocket>;
type UpstreamTx = SplitSink<realtime::Session, tungstenite::Message>;
type UpstreamRx = SplitStream<realtime::Session>;

/// A session between the upgrade and its end.
pub struct Session {
    app: Arc<App>,
    /// The upgrade's admission: its caller, snapshot and in-flight slot.
    admitted: Admitted,
    /// The upgrade's charge, holding the session's in-flight slot: what
    /// each response's charge is made from.
    base: Charge,
    /// The reservation the next response to start takes (`None` once taken,
    /// until the next response ends).
    ready: Option<Charge>,
    /// Responses started and not yet ended, oldest first.
    open: Vec<Open>,
    /// Responses billed so far.
    billed: u64,
    /// Its idle and lifetime deadlines.
    clock: Clock,
    /// Its place among the sockets a stopping data plane waits for.
    hold: Hold,
}

/// A response the upstream started and has not ended.
struct Open {
    /// Its upstream id (`None` if its `response.created` named none).
    id: Option<String>,
    /// What it is billed as; holds its reservation, or none when it started
    /// after a refusal.
    charge: Charge,
}

/// Why a relay stopped.
enum End {
    /// The client closed or went away.
    ClientGone,
    /// The upstream closed or went away (the client was told).
    UpstreamGone,
    /// A response could not be reserved.
    Refused(ProxyError),
    /// The session was idle too long or reached its lifetime.
    Expired(Expiry),
    /// The data plane is stopping.
    Stopping,
}

// === impl Session ===

impl Session {
    /// The session `admitted` opened, its first response reserved in `charge`.
    pub fn new(app: Arc<App>, admitted: Admitted, charge: Charge) -> Session {
        // The slot belongs to the session, not to its first response.
        let ready = Charge { in_flight: Arc::default(), ..charge.clone() };
        let (clock, hold) = (app.sockets.clock(Surface::Realtime), app.sockets.hold());
        Session { app, admitted, base: charge, ready: Some(ready), open: Vec::new(), billed: 0, clock, hold }
    }

    /// Relays between `client` and `upstream` until either closes, a
    /// response cannot be reserved, the session's time runs out or the data
    /// plane stops (an `error` event, the open responses drained, then a
    /// close). Gives the
    /// in-flight slot and what is left reserved back.
    pub async fn run(mut self, client: WebSocket, upstream: realtime::Session) {
        let (mut client_tx, mut client_rx) = client.split();
        let (mut upstream_tx, mut upstream_rx) = upstream.split();
        let event_id = format!("event_gw_{}", self.admitted.id.0);
        match self.relay(&mut client_tx, &mut client_rx, &mut upstream_tx, &mut upstream_rx).await {
            End::Refused(error) => {
                tracing::info!(session = %self.admitted.id.0, reason = error.reason(), "realtime session closed: budget");
                let event = Some(error_event(&error, &event_id));
                let close = ws::CloseFrame { code: ws::close_code::POLICY, reason: "budget exhausted".into() };
                let status = error.status().as_u16();
                self.close(&mut client_tx, &mut upstream_tx, &mut upstream_rx, event, status, close).await;
            }
            End::Expired(why) => {
                tracing::info!(session = %self.admitted.id.0, ?why, "realtime session closed: expired");
                let event = (why == Expiry::Lifetime).then(|| expired_event(&self.clock, &event_id));
                let close = self.clock.close_frame(why);
                self.close(&mut client_tx, &mut upstream_tx, &mut upstream_rx, event, CLIENT_GONE, close).await;
            }
            End::Stopping => {
                tracing::info!(session = %self.admitted.id.0, open = self.open.len(), "realtime session closed: shutting down");
                let (event, close) = (Some(stopping_event(&event_id)), self.hold.close_frame());
                self.close(&mut client_tx, &mut upstream_tx, &mut upstream_rx, event, CLIENT_GONE, close).await;
            }
            End::ClientGone => self.drain(None, &mut upstream_tx, &mut upstream_rx, CLIENT_GONE).await,
            End::UpstreamGone => self.abandon("upstream session ended"),
        }
        let _ = upstream_tx.close().await;
    }

    /// Ends the session the gateway closes: sends the client `event` (when
    /// there is one), drains the open responses (billed with `status`, their
    /// events relayed while the client listens), then closes with `close`.
    async fn close(
        &mut self,
        client_tx: &mut ClientTx,
        upstream_tx: &mut UpstreamTx,
        upstream_rx: &mut UpstreamRx,
        event: Option<String>,
        status: u16,
        close: ws::CloseFrame,
    ) {
        let listens = match event {
            Some(event) => client_tx.send(Message::Text(event.into())).await.is_ok(),
            None => true,
        };
        self.drain(listens.then_some(&mut *client_tx), upstream_tx, upstream_rx, status).await;
        let _ = client_tx.send(Message::Close(Some(close))).await;
    }

    /// Passes frames both ways, billing each response as it ends, until a
    /// side goes, a response cannot be reserved, or the session's time runs
    /// out. Text and binary frames either way restart its quiet spell.
    async fn relay(
        &mut self,
        client_tx: &mut ClientTx,
        client_rx: &mut ClientRx,
        upstream_tx: &mut UpstreamTx,
        upstream_rx: &mut UpstreamRx,
    ) -> End {
        loop {
            tokio::select! {
                why = self.clock.expired() => return End::Expired(why),
                () = self.hold.closing() => return End::Stopping,
                message = client_rx.next() => {
                    let Some(Ok(message)) = message else { return End::ClientGone };
                    if matches!(message, Message::Text(_) | Message::Binary(_)) {
                        self.clock.touch();
                    }
                    if matches!(message, Message::Close(_)) {
                        // With responses open the upstream must hear their
                        // cancels first: it is closed after the drain.
                        if self.open.is_empty() && let Some(close) = to_upstream(message) {
                            let _ = upstream_tx.send(close).await;
                        }
                        return End::ClientGone;
                    }
                    if let Some(message) = to_upstream(message)
                        && upstream_tx.send(message).await.is_err()
                    {
                        self.tell_lost(client_tx).await;
                        return End::UpstreamGone;
                    }
                }
                message = upstream_rx.next() => {
                    let Some(Ok(message)) = message else {
                        self.tell_lost(client_tx).await;
                        return End::UpstreamGone;
                    };
                    if matches!(message, tungstenite::Message::Text(_) | tungstenite::Message::Binary(_)) {
                        self.clock.touch();
                    }
                    let refused = match &message {
                        tungstenite::Message::Text(text) => self.follow(text.as_str()).await.err(),
                        _ => None,
                    };
                    let closing = matches!(message, tungstenite::Message::Close(_));
                    if let Some(message) = to_client(message)
                        && client_tx.send(message).await.is_err()
                    {
                        return refused.map_or(End::ClientGone, End::Refused);
                    }
                    if let Some(error) = refused {
                        return End::Refused(error);
                    }
                    if closing {
                        return End::UpstreamGone;
                    }
                }
            }
        }
    }

    /// Follows server event `text`: a started response takes the ready
    /// reservation or a new one, an ended one is billed and the next
    /// response's reservation made ready. Fails when the budgets cannot
    /// cover a reservation (the started response is then open unreserved).
    async fn follow(&mut self, text: &str) -> Result<(), ProxyError> {
        match lifecycle(text) {
            Some(Lifecycle::Created { id }) => {
                let charge = match self.ready.take() {
                    Some(charge) => charge,
                    None => match self.reserve().await {
                        Ok(charge) => charge,
                        Err(error) => {
                            self.open.push(Open { id, charge: self.unreserved() });
                            return Err(error);
                        }
                    },
                };
                self.open.push(Open { id, charge });
            }
            Some(Lifecycle::Done { id, usage }) => {
                self.end(id.as_deref(), usage, 200);
                if self.ready.is_none() {
                    self.ready = Some(self.reserve().await?);
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Cancels every open response upstream, then reads (and relays to
    /// `client`, while it listens) the upstream until each has ended or
    /// `DRAIN_WAIT` passed, billing each as it ends with `status`.
    async fn drain(
        &mut self,
        mut client: Option<&mut ClientTx>,
        upstream_tx: &mut UpstreamTx,
        upstream_rx: &mut UpstreamRx,
        status: u16,
    ) {
        let ids: Vec<Option<String>> = self.open.iter().map(|open| open.id.clone()).collect();
        for id in &ids {
            if upstream_tx.send(cancel(id.as_deref())).await.is_err() {
                return self.abandon("upstream session lost while cancelling");
            }
        }
        let deadline = tokio::time::Instant::now() + DRAIN_WAIT;
        while !self.open.is_empty() {
            let Ok(Some(Ok(message))) = tokio::time::timeout_at(deadline, upstream_rx.next()).await else { break };
            if let tungstenite::Message::Text(text) = &message {
                match lifecycle(text.as_str()) {
                    // Started as the session ended (turn detection): cancelled too.
                    Some(Lifecycle::Created { id }) => {
                        let _ = upstream_tx.send(cancel(id.as_deref())).await;
                        self.open.push(Open { id, charge: self.unreserved() });
                    }
                    Some(Lifecycle::Done { id, usage }) => self.end(id.as_deref(), usage, status),
                    None => {}
                }
            }
            let closing = matches!(message, tungstenite::Message::Close(_));
            if let (Some(tx), Some(message)) = (client.as_deref_mut(), to_client(message))
                && tx.send(message).await.is_err()
            {
                client = None;
            }
            if closing {
                break;
            }
        }
        self.abandon("no response.done after its cancel");
    }

    /// Ends response `id` having used `usage` (when it says): billed with
    /// `status`, settling its reservation, or its reservation given back.
    fn end(&mut self, id: Option<&str>, usage: Option<Usage>, status: u16) {
        let charge = match self.open.iter().position(|open| open.id.as_deref() == id) {
            Some(at) => self.open.remove(at).charge,
            // Never seen to start: billed all the same.
            None => self.unreserved(),
        };
        let Some(usage) = usage else { return };
        self.billed += 1;
        let request_id: Arc<str> = format!("{}-{}", self.admitted.id.0, self.billed).into();
        let charge = Charge { request_id, in_flight: Arc::default(), ..charge };
        drop(self.app.usage.record_with(&charge, usage, Units::default(), status, false));
    }

    /// Counts the responses still open as unbilled: their usage will not come.
    fn abandon(&mut self, why: &'static str) {
        for open in self.open.drain(..) {
            tracing::warn!(
                session = %self.admitted.id.0, response = open.id.as_deref().unwrap_or(""), channel = %self.base.channel_id,
                why, "realtime response unbilled"
            );
            metrics::realtime_unbilled(&self.base.channel_id);
        }
    }

    /// Tells the client its upstream is gone.
    async fn tell_lost(&self, client_tx: &mut ClientTx) {
        let lost = ws::CloseFrame { code: ws::close_code::ERROR, reason: "upstream session lost".into() };
        let _ = client_tx.send(Message::Close(Some(lost))).await;
    }

    /// One response's bound, reserved from the budgets.
    async fn reserve(&self) -> Result<Charge, ProxyError> {
        let charge = pipeline::reserve_again(&self.app, &self.admitted, &self.base, Bound::tokens(0, None)).await?;
        Ok(Charge { in_flight: Arc::default(), ..charge })
    }

    /// A response's charge that holds no reservation.
    fn unreserved(&self) -> Charge {
        Charge { reservation: Arc::default(), tokens: Arc::default(), in_flight: Arc::default(), ..self.base.clone() }
    }
}

/// A `response.cancel` for response `id` (the one in progress when `None`).
fn cancel(id: Option<&str>) -> tungstenite::Message {
    let event = match id {
        Some(id) => json!({ "type": "response.cancel", "response_id": id }),
        None => json!({ "type": "response.cancel" }),
    };
    tungstenite::Message::Text(event.to_string().into())
}

/// The realtime `error` event of a session its data plane ends as it
/// stops, with event id `event_id`: a server error, as the client did
/// nothing wrong and may open a new session elsewhere at once.
fn stopping_event(event_id: &str) -> String {
    json!({
        "type": "error",
        "event_id": event_id,
        "error": {
            "type": "server_error",
            "code": "server_shutting_down",
            "message": "The server is shutting down. Open a new session to continue.",
            "param": null,
            "event_id": null,
        },
    })
    .to_string()
}

/// A realtime `error` event for `error`, in the shape the API sends, with
/// event id `event_id`.
fn error_event(error: &ProxyError, event_id: &str) -> String {
    json!({
        "type": "error",
        "event_id": event_id,
        "error": {
            "type": error.kind(),
            "code": error.code(),
            "message": error.message(),
            "param": null,
            "event_id": null,
        },
    })
    .to_string()
}

/// The realtime `error` event a session reaching its lifetime gets (as
/// OpenAI's: `session_expired`), with event id `event_id`.
fn expired_event(clock: &Clock, event_id: &str) -> String {
    let mut error = clock.expired_error();
    error["event_id"] = serde_json::Value::Null;
    json!({ "type": "error", "event_id": event_id, "error": error }).to_string()
}

/// A client frame as sent upstream; pings and pongs stay on their hop.
fn to_upstream(message: Message) -> Option<tungstenite::Message> {
    Some(match message {
        Message::Text(text) => tungstenite::Message::Text(tungstenite::Utf8Bytes::try_from(Bytes::from(text)).ok()?),
        Message::Binary(data) => tungstenite::Message::Binary(data),
        Message::Close(frame) => tungstenite::Message::Close(frame.map(|f| tungstenite::protocol::CloseFrame {
            code: CloseCode::from(f.code),
            reason: tungstenite::Utf8Bytes::try_from(Bytes::from(f.reason)).unwrap_or_default(),
        })),
        Message::Ping(_) | Message::Pong(_) => return None,
    })
}

/// An upstream frame as sent to the client; pings and pongs stay on their hop.
fn to_client(message: tungstenite::Message) -> Option<Message> {
    Some(match message {
        tungstenite::Message::Text(text) => Message::Text(ws::Utf8Bytes::try_from(Bytes::from(text)).ok()?),
        tungstenite::Message::Binary(data) => Message::Binary(data),
        tungstenite::Message::Close(frame) => Message::Close(frame.map(|f| ws::CloseFrame {
            code: u16::from(f.code),
            reason: ws::Utf8Bytes::try_from(Bytes::from(f.reason)).unwrap_or_default(),
        })),
        tungstenite::Message::Ping(_) | tungstenite::Message::Pong(_) | tungstenite::Message::Frame(_) => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn frames_cross_unchanged_and_pings_stay_on_their_hop() {
        let text = r#"{"type":"response.create"}"#;
        assert_eq!(to_upstream(Message::Text(text.into())), Some(tungstenite::Message::Text(text.into())));
        assert_eq!(to_client(tungstenite::Message::Text(text.into())), Some(Message::Text(text.into())));
        let audio = Bytes::from_static(b"\x00\x01");
        assert_eq!(to_client(tungstenite::Message::Binary(audio.clone())), Some(Message::Binary(audio)));
        assert_eq!(to_upstream(Message::Ping(Bytes::new())), None);
        let close = to_client(tungstenite::Message::Close(Some(tungstenite::protocol::CloseFrame {
            code: CloseCode::Normal,
            reason: "bye".into(),
        })));
        assert_eq!(close, Some(Message::Close(Some(ws::CloseFrame { code: 1000, reason: "bye".into() }))));
    }

    #[test]
    fn a_cancel_names_its_response() {
        let event = |message: tungstenite::Message| -> serde_json::Value {
            serde_json::from_str(message.to_text().unwrap()).unwrap()
        };
        assert_eq!(event(cancel(Some("resp_2"))), json!({ "type": "response.cancel", "response_id": "resp_2" }));
        assert_eq!(event(cancel(None)), json!({ "type": "response.cancel" }));
    }

    #[test]
    fn a_refusal_is_an_error_event() {
        let event: serde_json::Value =
            serde_json::from_str(&error_event(&ProxyError::InsufficientUserQuota { balance_micros: 0 }, "e1")).unwrap();
        assert_eq!(event["type"], "error");
        assert!(event["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{event}");
        assert!(event["error"]["type"].is_string(), "{event}");
    }
}
