//! The limits every client WebSocket lives under, on both surfaces
//! (`/v1/responses` and `/v1/realtime`): a socket is closed once no message
//! passed either way for its idle timeout, and at its maximum lifetime
//! counted from the upgrade (OpenAI closes its own sockets at 60 minutes).
//! Pings and pongs are not messages: a client that only pings is idle.
//! A socket's `Clock` keeps its two deadlines and says, in its surface's
//! words, why it ended. A stopping data plane tells every open socket to
//! end (`Sockets::close`, then `cut` once the grace period is over) and
//! waits until each has settled and dropped its `Hold`.

use std::{future::Future, sync::Arc, time::Duration};

use axum::extract::ws::{CloseFrame, close_code};
use serde_json::{Value, json};
use tokio::{sync::watch, time::Instant};

/// How long client WebSockets may idle and live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A responses socket with no response running and no message either
    /// way for this long is closed.
    pub idle_timeout: Duration,
    /// A realtime session with no event or audio either way for this long
    /// is closed; longer than a responses socket's, as its user may think
    /// in silence.
    pub realtime_idle_timeout: Duration,
    /// Every socket is closed this long after its upgrade.
    pub max_lifetime: Duration,
}

/// The client WebSockets of a data plane: their limits, and the word that
/// ends them when it stops. Clones share the word.
#[derive(Debug, Clone, Default)]
pub struct Sockets {
    limits: Limits,
    /// Where shutdown stands; each open socket holds a receiver (`Hold`).
    stage: Arc<watch::Sender<Stage>>,
}

/// How far a data plane's shutdown has gone, as its sockets see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    #[default]
    Serving,
    /// End at the next chance: a running response may finish.
    Closing,
    /// The grace period is over: end now.
    Cut,
}

/// One open socket's place among those a shutdown waits for; dropping it
/// says the socket has settled.
#[derive(Debug)]
pub struct Hold {
    stage: watch::Receiver<Stage>,
}

/// The surface a socket serves: its idle timeout and the words of its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Responses,
    Realtime,
}

/// Why a socket's time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No message passed for the idle timeout.
    Idle,
    /// The socket reached its maximum lifetime.
    Lifetime,
}

/// One socket's deadlines: the end of its life, and of its current quiet
/// spell (from the last `touch`).
#[derive(Debug, Clone)]
pub struct Clock {
    surface: Surface,
    idle: Duration,
    lifetime: Duration,
    last: Instant,
    ends_at: Instant,
}

// === impl Limits ===

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            idle_timeout: Duration::from_secs(10 * 60),
            realtime_idle_timeout: Duration::from_secs(30 * 60),
            max_lifetime: Duration::from_secs(60 * 60),
        }
    }
}

impl Limits {
    /// Checks that every limit lets a socket live a while.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.idle_timeout.is_zero(), "the WebSocket idle timeout must be positive");
        anyhow::ensure!(!self.realtime_idle_timeout.is_zero(), "the realtime idle timeout must be positive");
        anyhow::ensure!(!self.max_lifetime.is_zero(), "the WebSocket maximum lifetime must be positive");
        Ok(())
    }

    /// The clock of a socket of `surface` upgraded now.
    pub fn clock(&self, surface: Surface) -> Clock {
        let idle = match surface {
            Surface::Responses => self.idle_timeout,
            Surface::Realtime => self.realtime_idle_timeout,
        };
        let now = Instant::now();
        Clock { surface, idle, lifetime: self.max_lifetime, last: now, ends_at: now + self.max_lifetime }
    }
}

// === impl Sockets ===

impl Sockets {
    /// Sockets living under `limits`.
    pub fn new(limits: Limits) -> Sockets {
        Sockets { limits, stage: Arc::default() }
    }

    /// The clock of a socket of `surface` upgraded now.
    pub fn clock(&self, surface: Surface) -> Clock {
        self.limits.clock(surface)
    }

    /// A place for one socket about to open, taken before its upgrade is
    /// answered so a shutdown under way counts it.
    pub fn hold(&self) -> Hold {
        Hold { stage: self.stage.subscribe() }
    }

    /// Tells every open socket, and each one opened from now, to end once
    /// what it runs has finished.
    pub fn close(&self) {
        self.advance(Stage::Closing);
    }

    /// Tells every open socket to end now, what it runs cut short.
    pub fn cut(&self) {
        self.advance(Stage::Cut);
    }

    /// Resolves once no socket holds a place.
    pub async fn settled(&self) {
        self.stage.closed().await;
    }

    fn advance(&self, to: Stage) {
        self.stage.send_if_modified(|stage| {
            let later = to > *stage;
            if later {
                *stage = to;
            }
            later
        });
    }
}

// === impl Hold ===

impl Hold {
    /// Resolves once the data plane is stopping. Holds no borrow, so a
    /// `select!` may use the socket in another branch.
    pub fn closing(&self) -> impl Future<Output = ()> + Send + 'static {
        self.reached(Stage::Closing)
    }

    /// Resolves once the stopping data plane's grace period is over.
    pub fn cut(&self) -> impl Future<Output = ()> + Send + 'static {
        self.reached(Stage::Cut)
    }

    /// Whether the data plane is stopping.
    pub fn is_closing(&self) -> bool {
        *self.stage.borrow() >= Stage::Closing
    }

    fn reached(&self, stage: Stage) -> impl Future<Output = ()> + Send + 'static {
        let mut watch = self.stage.clone();
        async move {
            // A data plane gone altogether is as stopped as can be.
            let _ = watch.wait_for(|now| *now >= stage).await;
        }
    }

    /// The close frame of a socket ended by its data plane stopping.
    pub fn close_frame(&self) -> CloseFrame {
        CloseFrame { code: close_code::AWAY, reason: "the server is shutting down".into() }
    }
}

// === impl Clock ===

impl Clock {
    /// Notes a message passing: the quiet spell starts again.
    pub fn touch(&mut self) {
        self.last = Instant::now();
    }

    /// Resolves when the quiet spell reaches the idle timeout or the socket
    /// its lifetime, whichever comes first. Holds no borrow of the clock,
    /// so a `select!` may touch it in another branch.
    pub fn expired(&self) -> impl Future<Output = Expiry> + Send + 'static {
        let idle_at = self.last + self.idle;
        let (at, why) = if idle_at < self.ends_at { (idle_at, Expiry::Idle) } else { (self.ends_at, Expiry::Lifetime) };
        async move {
            tokio::time::sleep_until(at).await;
            why
        }
    }

    /// Resolves when the socket reaches its lifetime (what bounds a socket
    /// while a response runs, which is not idling).
    pub fn lifetime_over(&self) -> impl Future<Output = Expiry> + Send + 'static {
        let at = self.ends_at;
        async move {
            tokio::time::sleep_until(at).await;
            Expiry::Lifetime
        }
    }

    /// The close frame a socket ending for `why` gets: a normal close,
    /// with the limit it reached as the reason.
    pub fn close_frame(&self, why: Expiry) -> CloseFrame {
        let reason = match why {
            Expiry::Idle => format!("no message for {}; closed as idle", span(self.idle)),
            Expiry::Lifetime => format!("the connection reached its maximum lifetime of {}", span(self.lifetime)),
        };
        CloseFrame { code: close_code::NORMAL, reason: reason.into() }
    }

    /// The `error` object of the `error` event a socket reaching its
    /// lifetime gets first, as OpenAI's say it: `session_expired` on a
    /// realtime session, `websocket_connection_limit_reached` on a responses
    /// socket (on which Codex reconnects).
    pub fn expired_error(&self) -> Value {
        let lifetime = span(self.lifetime);
        let (code, message) = match self.surface {
            Surface::Realtime => ("session_expired", format!("Your session hit the maximum duration of {lifetime}.")),
            Surface::Responses => (
                "websocket_connection_limit_reached",
                format!(
                    "Responses websocket connection limit reached ({lifetime}). Create a new websocket connection to continue."
                ),
            ),
        };
        json!({ "type": "invalid_request_error", "code": code, "message": message, "param": null })
    }
}

/// `duration` in whole minutes when it is some, else in seconds.
fn span(duration: Duration) -> String {
    match duration.as_secs() {
        1 => "1 second".to_owned(),
        60 => "1 minute".to_owned(),
        secs if secs >= 60 && secs % 60 == 0 => format!("{} minutes", secs / 60),
        secs => format!("{secs} seconds"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_socket_expires_at_the_end_of_its_quiet_spell_or_of_its_life() {
        let limits = Limits {
            idle_timeout: Duration::from_secs(10),
            max_lifetime: Duration::from_secs(25),
            ..Limits::default()
        };
        let started = Instant::now();
        let mut clock = limits.clock(Surface::Responses);
        tokio::time::sleep(Duration::from_secs(8)).await;
        clock.touch();
        assert_eq!(clock.expired().await, Expiry::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(18));
        clock.touch();
        // The next quiet spell would end at 28 s, past the lifetime.
        assert_eq!(clock.expired().await, Expiry::Lifetime);
        assert_eq!(started.elapsed(), Duration::from_secs(25));
    }

    #[tokio::test(start_paused = true)]
    async fn a_realtime_session_idles_longer_and_ends_with_session_expired() {
        let clock = Limits::default().clock(Surface::Realtime);
        let started = Instant::now();
        assert_eq!(clock.expired().await, Expiry::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(30 * 60));
        assert_eq!(clock.expired_error()["code"], "session_expired");
        assert_eq!(clock.expired_error()["message"], "Your session hit the maximum duration of 60 minutes.");
        assert_eq!(clock.close_frame(Expiry::Idle).code, close_code::NORMAL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_closes_then_cuts_and_waits_for_every_held_socket() {
        let sockets = Sockets::new(Limits::default());
        sockets.settled().await;
        let hold = sockets.hold();
        let (closing, cut) = (tokio::spawn(hold.closing()), tokio::spawn(hold.cut()));
        assert!(!hold.is_closing());
        sockets.close();
        closing.await.unwrap();
        assert!(hold.is_closing());
        assert!(!cut.is_finished());
        sockets.cut();
        // A later close does not take the cut back.
        sockets.close();
        cut.await.unwrap();
        let settled = tokio::spawn({
            let sockets = sockets.clone();
            async move { sockets.settled().await }
        });
        tokio::task::yield_now().await;
        assert!(!settled.is_finished(), "a socket still holds its place");
        drop(hold);
        settled.await.unwrap();
        assert_eq!(sockets.hold().close_frame().code, close_code::AWAY);
    }

    #[test]
    fn a_responses_socket_ends_with_the_code_codex_reconnects_on() {
        let limits = Limits { max_lifetime: Duration::from_secs(2), ..Limits::default() };
        let clock = limits.clock(Surface::Responses);
        assert_eq!(clock.expired_error()["code"], "websocket_connection_limit_reached");
        assert!(clock.expired_error()["message"].as_str().is_some_and(|m| m.contains("(2 seconds)")));
        assert!(clock.close_frame(Expiry::Lifetime).reason.as_str().ends_with("lifetime of 2 seconds"));
        assert!(Limits { idle_timeout: Duration::ZERO, ..limits }.validate().is_err());
    }
}
