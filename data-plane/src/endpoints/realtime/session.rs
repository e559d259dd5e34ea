//! One relayed realtime session. Text and binary frames pass both ways
//! unchanged (pings are answered by each side's own socket); of the
//! server's events only `response.done` is read, and each becomes one usage
//! record at once (request id `<session id>-<n>`, so a resend is applied
//! once), settling the reservation it was admitted with. The next
//! response's bound is reserved right after; when the budgets cannot cover
//! it the client gets an `error` event and the session is closed. The
//! session holds one in-flight slot (its `Admitted`) until it ends; a
//! session cut mid-way has billed every response that finished.

use std::sync::Arc;

use axum::extract::ws::{self, Message, WebSocket};
use bytes::Bytes;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::json;
use tokio_tungstenite::tungstenite::{self, protocol::frame::coding::CloseCode};

use crate::{
    error::ProxyError,
    meter::{Charge, realtime::done_usage},
    pipeline::{self, Admitted, App, Bound},
    pricing::{Units, Usage},
    provider::realtime,
};

/// A session between the upgrade and its end.
pub struct Session {
    app: Arc<App>,
    /// The upgrade's admission: its caller, snapshot and in-flight slot.
    admitted: Admitted,
    /// What the next response is billed as, holding its reservation.
    charge: Charge,
    /// Responses billed so far.
    responses: u64,
}

/// Why a relay stopped.
enum End {
    /// Either side closed or went away.
    Closed,
    /// The next response could not be reserved.
    Refused(ProxyError),
}

// === impl Session ===

impl Session {
    /// The session `admitted` opened, its first response reserved in `charge`.
    pub fn new(app: Arc<App>, admitted: Admitted, charge: Charge) -> Session {
        Session { app, admitted, charge, responses: 0 }
    }

    /// Relays between `client` and `upstream` until either closes, or a
    /// response's successor cannot be reserved (an `error` event, then a
    /// close). Gives the in-flight slot and what is left reserved back.
    pub async fn run(mut self, client: WebSocket, upstream: realtime::Session) {
        let (mut client_tx, mut client_rx) = client.split();
        let (mut upstream_tx, mut upstream_rx) = upstream.split();
        let end = loop {
            tokio::select! {
                message = client_rx.next() => {
                    let Some(Ok(message)) = message else { break End::Closed };
                    let closing = matches!(message, Message::Close(_));
                    if let Some(message) = to_upstream(message)
                        && upstream_tx.send(message).await.is_err()
                    {
                        break End::Closed;
                    }
                    if closing {
                        break End::Closed;
                    }
                }
                message = upstream_rx.next() => {
                    let Some(Ok(message)) = message else {
                        let lost = ws::CloseFrame { code: ws::close_code::ERROR, reason: "upstream session lost".into() };
                        let _ = client_tx.send(Message::Close(Some(lost))).await;
                        break End::Closed;
                    };
                    let refused = match &message {
                        tungstenite::Message::Text(text) => match done_usage(text.as_str()) {
                            Some(usage) => self.bill(usage).await.err(),
                            None => None,
                        },
                        _ => None,
                    };
                    let closing = matches!(message, tungstenite::Message::Close(_));
                    if let Some(message) = to_client(message)
                        && client_tx.send(message).await.is_err()
                    {
                        break End::Closed;
                    }
                    if let Some(error) = refused {
                        break End::Refused(error);
                    }
                    if closing {
                        break End::Closed;
                    }
                }
            }
        };
        if let End::Refused(error) = end {
            tracing::info!(session = %self.admitted.id.0, reason = error.reason(), "realtime session closed: budget");
            let _ = client_tx
                .send(Message::Text(error_event(&error, &format!("event_gw_{}", self.admitted.id.0)).into()))
                .await;
            let close = ws::CloseFrame { code: ws::close_code::POLICY, reason: "budget exhausted".into() };
            let _ = client_tx.send(Message::Close(Some(close))).await;
        }
        let _ = upstream_tx.close().await;
    }

    /// Records response `usage` (its cost settles the reservation it was
    /// admitted with) and reserves the next response's bound.
    async fn bill(&mut self, usage: Usage) -> Result<(), ProxyError> {
        self.responses += 1;
        let request_id: Arc<str> = format!("{}-{}", self.admitted.id.0, self.responses).into();
        // The slot belongs to the session, not to this response.
        let charge = Charge { request_id, in_flight: Arc::default(), ..self.charge.clone() };
        drop(self.app.usage.record_with(&charge, usage, Units::default(), 200, false));
        self.charge = pipeline::reserve_again(&self.app, &self.admitted, &self.charge, Bound::tokens(0, None)).await?;
        Ok(())
    }
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
    fn a_refusal_is_an_error_event() {
        let event: serde_json::Value =
            serde_json::from_str(&error_event(&ProxyError::InsufficientUserQuota { balance_micros: 0 }, "e1")).unwrap();
        assert_eq!(event["type"], "error");
        assert!(event["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{event}");
        assert!(event["error"]["type"].is_string(), "{event}");
    }
}
