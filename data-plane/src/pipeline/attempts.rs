//! Retry and failover across the channels that serve a request. Each attempt
//! goes to a channel not tried yet: the highest priority level left, weighted
//! within it; only when every candidate was tried does a new round start,
//! after a jittered exponential backoff. An attempt that fails with a
//! retryable error (`ProxyError::is_retryable`) leads to the next one, up to
//! the configured number; any other error, or a response, ends the request.
//! An attempt succeeds once its response may go to the client, so nothing is
//! ever retried after a byte has reached it. A new round never starts on
//! the channel that just failed while another exists, and channels cooling
//! down after an upstream 429 are tried only when no other is left.
//!
//! Channel health hears of each request at most once per channel, with the
//! client that made it, so one client's bad requests cannot take a shared
//! channel out of rotation (see `provider::health`).

use std::{future::Future, sync::Arc, time::Instant};

use tracing::Instrument as _;

use crate::{
    affinity::Session, backoff::Backoff, error::ProxyError, policy::domain::Channel, policy::snapshot::pick_channel,
    provider::Upstreams, telemetry, trail::Trail,
};

/// The request a run of attempts is for.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    pub request_id: &'a str,
    /// Who made the request (its token id): health counts failures per client.
    pub client: &'a str,
    pub trail: &'a Trail,
    /// When the gateway received the request.
    pub started: Instant,
    /// The client-facing path (for the overhead metric's operation).
    pub endpoint: &'a str,
    /// The conversation the request belongs to, if it names one.
    pub session: Option<Session>,
}

/// The channels to try for one request, in order, within a budget.
pub struct Attempts<'a> {
    candidates: &'a [Arc<Channel>],
    /// Channels tried in the current round.
    tried: Vec<&'a str>,
    /// The channel of the last attempt.
    last: Option<&'a str>,
    /// The channel the first attempt goes to (the conversation's).
    preferred: Option<&'a Arc<Channel>>,
    made: u32,
    max: u32,
    backoff: Backoff,
}

/// Runs `attempt` on channels from `candidates` (highest priority first, as
/// `Snapshot::channels` returns them) until one succeeds, one fails with an
/// error that is not retryable, or the attempts configured in `upstreams` are
/// used up; returns that success or the last error. Each channel's outcome
/// is recorded in its health once for the request, and the channel and the
/// number of attempts in the request's trail. `candidates` must not be empty.
///
/// Each attempt sees its channel with one key of the pool (`Channel::with_key`):
/// the conversation's key first, else the next one round-robin. A key the
/// upstream refuses (401, 403) or throttles (429) on a pooled channel is
/// that key's failure alone: the next attempt goes to another key of the
/// same channel, without a backoff, while one is left. Channels with no
/// usable key are left out; with none left the request has no channel.
pub async fn run<T, F, Fut>(
    upstreams: &Upstreams,
    scope: Scope<'_>,
    candidates: &[Arc<Channel>],
    mut attempt: F,
) -> Result<T, ProxyError>
where
    F: FnMut(Arc<Channel>) -> Fut,
    Fut: Future<Output = Result<T, ProxyError>>,
{
    let keys = &upstreams.health.keys;
    let usable: Vec<Arc<Channel>>;
    let candidates = if candidates.iter().all(|c| keys.usable(c)) {
        candidates
    } else {
        usable = candidates.iter().filter(|c| keys.usable(c)).cloned().collect();
        &usable
    };
    if candidates.is_empty() {
        let fields = scope.trail.fields();
        return Err(ProxyError::NoChannel {
            group: fields.group.as_deref().unwrap_or_default().to_owned(),
            model: fields.model.unwrap_or_default(),
        });
    }
    let bound = scope.session.and_then(|session| upstreams.affinity.get(session));
    let mut attempts = Attempts::new(candidates, upstreams);
    if let Some((channel, key)) = &bound {
        attempts.prefer(channel, |c| if c.keys.is_empty() { key.is_empty() } else { keys.healthy(c, key) });
    }
    let mut last_error = None;
    let mut counted: Vec<String> = Vec::new();
    // (channel id, key id) of the keys that failed as keys (refused, 429).
    let mut tried_keys: Vec<(String, String)> = Vec::new();
    let mut again: Option<Arc<Channel>> = None;
    loop {
        let next = match again.take() {
            Some(channel) => attempts.again(channel),
            None => attempts.next(&upstreams.health).await,
        };
        let Some(channel) = next else { break };
        let id = channel.id.clone();
        let skip: Vec<String> = tried_keys.iter().filter(|(c, _)| *c == id).map(|(_, k)| k.clone()).collect();
        let prefer = bound.as_ref().filter(|(c, _)| *c == id).map(|(_, k)| k.as_str());
        let channel = match keys.pick(&channel, &skip, prefer) {
            Some(key) => Arc::new(channel.with_key(key)),
            None if channel.keys.is_empty() => channel,
            // Its last key was refused while this request ran.
            None => continue,
        };
        scope.trail.update(|t| {
            t.channel = Some(id.clone());
            t.attempts = attempts.made;
            t.provider = Some(telemetry::provider_name(channel.kind));
        });
        if attempts.made == 1 {
            telemetry::metrics::overhead(scope.started.elapsed(), scope.endpoint);
        }
        let span = telemetry::attempt_span(&channel, scope.trail, attempts.made);
        // Boxed: an attempt's future is several kilobytes, and moving it
        // into this one's state (and this one into its callers') would
        // copy it at each step; the request's future stays small.
        let outcome = Box::pin(attempt(channel.clone())).instrument(span.clone()).await;
        telemetry::attempt_ended(&span, outcome.as_ref().err());
        let key_status = outcome.as_ref().err().and_then(|e| key_failure(&channel, e));
        let failover =
            outcome.as_ref().err().is_some_and(|e| e.is_retryable() || key_status.is_some()) && !attempts.spent();
        telemetry::metrics::attempt(&id, outcome.as_ref().err().map_or("ok", ProxyError::reason), failover);
        match outcome {
            Ok(done) => {
                upstreams.health.succeeded(&id);
                if channel.is_pooled() {
                    keys.succeeded(&id, &channel.key_id);
                }
                if let Some(session) = scope.session {
                    upstreams.affinity.bind(session, &id, &channel.key_id);
                }
                return Ok(done);
            }
            Err(error) => {
                match key_status {
                    Some(status) if status != 429 => upstreams.health.key_refused(&channel, status),
                    Some(_) => {}
                    None if !counted.contains(&id) => {
                        upstreams.health.failed(&id, &error, scope.request_id, scope.client);
                        counted.push(id.clone());
                    }
                    None => {}
                }
                if !error.is_retryable() && key_status.is_none() {
                    return Err(error);
                }
                if key_status.is_some() {
                    tried_keys.push((id.clone(), channel.key_id.clone()));
                    let skip: Vec<String> =
                        tried_keys.iter().filter(|(c, _)| *c == id).map(|(_, k)| k.clone()).collect();
                    if keys.pick(&channel, &skip, None).is_some() {
                        again = Some(channel.clone());
                    }
                }
                tracing::warn!(channel = %id, key = %channel.key_id, attempt = attempts.made, reason = error.reason(), "upstream attempt failed");
                last_error = Some(error);
            }
        }
    }
    // No attempt was made only when the last keys were refused meanwhile.
    Err(last_error.unwrap_or_else(|| {
        let fields = scope.trail.fields();
        let group = fields.group.as_deref().unwrap_or_default().to_owned();
        ProxyError::NoChannel { group, model: fields.model.unwrap_or_default() }
    }))
}

/// The upstream status when `error` is the failure of the key `channel`
/// was sent with, not of the channel: a refusal (401, 403) or a 429 on a
/// pooled channel.
fn key_failure(channel: &Channel, error: &ProxyError) -> Option<u16> {
    match error {
        ProxyError::UpstreamStatus { status, .. } if channel.is_pooled() => {
            Some(status.as_u16()).filter(|s| matches!(s, 401 | 403 | 429))
        }
        _ => None,
    }
}

// === impl Attempts ===

impl<'a> Attempts<'a> {
    /// At most `upstreams.config().max_attempts` attempts over `candidates`.
    pub fn new(candidates: &'a [Arc<Channel>], upstreams: &Upstreams) -> Attempts<'a> {
        let config = upstreams.config();
        Attempts {
            candidates,
            tried: Vec::new(),
            last: None,
            preferred: None,
            made: 0,
            max: config.max_attempts.max(1),
            backoff: Backoff::new(config.backoff_base, config.backoff_cap),
        }
    }

    /// Makes channel `id` the first attempt's when it is a candidate and
    /// `healthy` says so.
    pub fn prefer(&mut self, id: &str, healthy: impl Fn(&Channel) -> bool) {
        self.preferred = self.candidates.iter().find(|c| c.id == id && healthy(c));
    }

    /// The channel for the next attempt, `None` when the budget is spent (or
    /// there are no candidates). Waits the backoff first when every
    /// candidate was already tried in this round; the new round starts on
    /// another channel than the last one when there is another.
    pub async fn next(&mut self, health: &crate::provider::Health) -> Option<Arc<Channel>> {
        if self.made >= self.max || self.candidates.is_empty() {
            return None;
        }
        let preferred = self.preferred.take().filter(|c| !health.cooling(&c.id) && !health.keys.all_cooling(c));
        let channel = match preferred.or_else(|| self.pick(health)) {
            Some(channel) => channel,
            None => {
                tokio::time::sleep(self.backoff.next_delay()).await;
                self.tried.clear();
                if let Some(last) = self.last.filter(|_| self.candidates.len() > 1) {
                    self.tried.push(last);
                }
                self.pick(health)?
            }
        };
        self.tried.push(&channel.id);
        self.last = Some(&channel.id);
        self.made += 1;
        Some(channel.clone())
    }

    /// `channel` (the last one) once more, at once, if the budget allows:
    /// another of its keys is to be tried.
    pub fn again(&mut self, channel: Arc<Channel>) -> Option<Arc<Channel>> {
        if self.made >= self.max {
            return None;
        }
        self.made += 1;
        Some(channel)
    }

    /// Whether no attempt is left in the budget.
    pub fn spent(&self) -> bool {
        self.made >= self.max || self.candidates.is_empty()
    }

    /// The next untried channel, preferring those not cooling down.
    fn pick(&self, health: &crate::provider::Health) -> Option<&'a Arc<Channel>> {
        let mut skip = self.tried.clone();
        skip.extend(
            self.candidates
                .iter()
                .filter(|c| health.cooling(&c.id) || health.keys.all_cooling(c))
                .map(|c| c.id.as_str()),
        );
        pick_channel(self.candidates, &skip).or_else(|| pick_channel(self.candidates, &self.tried))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::{
        sync::Mutex,
        time::{Duration, Instant},
    };

    use axum::http::StatusCode;

    use super::*;
    use crate::{policy::snapshot::tests::channel, provider::Config, trail::Trail};

    fn upstreams(max_attempts: u32) -> Upstreams {
        Config { max_attempts, backoff_base: Duration::from_millis(40), ..Config::default() }
            .build(crate::provider::Health::unreported())
    }

    fn candidates(levels: &[(&str, i32)]) -> Vec<Arc<Channel>> {
        levels.iter().map(|(id, priority)| Arc::new(channel(id, *priority, 1, &["g"], &["m"]))).collect()
    }

    fn status(code: u16) -> ProxyError {
        ProxyError::UpstreamStatus { status: StatusCode::from_u16(code).unwrap(), message: String::new() }
    }

    /// Runs failover where channel ids in `failing` answer `error`; returns
    /// the outcome and the channels tried, in order.
    async fn drive(
        upstreams: &Upstreams,
        list: &[Arc<Channel>],
        failing: &[&str],
        error: ProxyError,
    ) -> (Result<String, ProxyError>, Vec<String>) {
        let tried = Mutex::new(Vec::new());
        let trail = Trail::default();
        let scope = Scope {
            request_id: "r1",
            client: "t1",
            trail: &trail,
            started: Instant::now(),
            endpoint: "/v1/chat/completions",
            session: None,
        };
        let result = run(upstreams, scope, list, |channel| {
            tried.lock().unwrap().push(channel.id.clone());
            let outcome =
                if failing.contains(&channel.id.as_str()) { Err(error.clone()) } else { Ok(channel.id.clone()) };
            async move { outcome }
        })
        .await;
        (result, tried.into_inner().unwrap())
    }

    #[tokio::test]
    async fn a_failing_level_falls_over_to_the_next_lower_one() {
        let list = candidates(&[("a1", 10), ("a2", 10), ("b", 0)]);
        let (result, tried) = drive(&upstreams(3), &list, &["a1", "a2"], status(502)).await;
        assert_eq!(result.unwrap(), "b");
        assert_eq!(tried.len(), 3);
        let mut first_level = tried[..2].to_vec();
        first_level.sort();
        assert_eq!(first_level, ["a1", "a2"], "both channels of the top level go first, each once");
    }

    #[tokio::test]
    async fn final_answers_are_not_retried() {
        let list = candidates(&[("a", 10), ("b", 0)]);
        for code in [400, 401, 403, 404] {
            let (result, tried) = drive(&upstreams(3), &list, &["a"], status(code)).await;
            assert_eq!(result.unwrap_err(), status(code));
            assert_eq!(tried, ["a"], "{code}");
        }
    }

    #[tokio::test]
    async fn a_lone_channel_is_retried_after_a_backoff_up_to_the_budget() {
        let list = candidates(&[("a", 0)]);
        let started = Instant::now();
        let (result, tried) = drive(&upstreams(3), &list, &["a"], status(503)).await;
        assert_eq!(result.unwrap_err(), status(503));
        assert_eq!(tried, ["a", "a", "a"]);
        // Two backoffs: at least 20 ms (half of 40) and 40 ms (half of 80).
        assert!(started.elapsed() >= Duration::from_millis(60), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn all_channels_down_ends_with_the_last_error_within_the_budget() {
        let list = candidates(&[("a", 1), ("b", 0)]);
        let (result, tried) = drive(&upstreams(5), &list, &["a", "b"], ProxyError::UpstreamConnect).await;
        assert_eq!(result.unwrap_err(), ProxyError::UpstreamConnect);
        assert_eq!(tried, ["a", "b", "a", "b", "a"]);
        let (_, tried) = drive(&upstreams(1), &list, &["a", "b"], ProxyError::UpstreamTimeout).await;
        assert_eq!(tried, ["a"]);
    }

    #[tokio::test]
    async fn failures_count_toward_health_and_success_clears_them() {
        let upstreams = upstreams(2);
        let list = candidates(&[("a", 1), ("b", 0)]);
        let (result, _) = drive(&upstreams, &list, &["a"], status(500)).await;
        assert_eq!(result.unwrap(), "b");
        assert_eq!((upstreams.health.failures("a"), upstreams.health.failures("b")), (1, 0));
        let (result, _) = drive(&upstreams, &list, &["a"], status(400)).await;
        assert_eq!(result.unwrap_err(), status(400));
        assert_eq!(upstreams.health.failures("a"), 1, "a client's mistake neither counts nor clears");
        let (result, tried) = drive(&upstreams, &list, &[], status(500)).await;
        assert_eq!((result.unwrap(), tried), ("a".to_owned(), vec!["a".to_owned()]));
        assert_eq!(upstreams.health.failures("a"), 0);
    }

    fn pooled(id: &str, keys: &[&str]) -> Arc<Channel> {
        let mut channel = channel(id, 0, 1, &["g"], &["m"]);
        channel.keys = keys
            .iter()
            .map(|k| crate::policy::domain::UpstreamKey { id: (*k).into(), key: format!("sk-{k}"), enabled: true })
            .collect();
        Arc::new(channel)
    }

    /// Runs attempts where keys in `failing` answer `code`; returns the
    /// outcome and the keys tried, in order.
    async fn drive_keys(
        upstreams: &Upstreams,
        list: &[Arc<Channel>],
        failing: &[&str],
        code: u16,
        session: Option<crate::affinity::Session>,
    ) -> (Result<String, ProxyError>, Vec<String>) {
        let tried = Mutex::new(Vec::new());
        let trail = Trail::default();
        trail.update(|t| (t.group, t.model) = (Some("g".into()), Some("m".into())));
        let scope = Scope {
            request_id: "r1",
            client: "t1",
            trail: &trail,
            started: Instant::now(),
            endpoint: "/v1/chat/completions",
            session,
        };
        let result = run(upstreams, scope, list, |channel| {
            tried.lock().unwrap().push(channel.key_id.clone());
            assert_eq!(channel.api_key, format!("sk-{}", channel.key_id), "the attempt is sent with its key");
            let fails = failing.contains(&channel.key_id.as_str());
            if fails && code == 429 {
                // What `provider::accept` does with an upstream 429.
                upstreams.health.keys.throttled(&channel.id, &channel.key_id, None);
            }
            let outcome = if fails { Err(status(code)) } else { Ok(channel.key_id.clone()) };
            async move { outcome }
        })
        .await;
        (result, tried.into_inner().unwrap())
    }

    #[tokio::test]
    async fn a_refused_or_throttled_key_falls_over_to_another_key_at_once() {
        for code in [401, 403, 429] {
            let upstreams = upstreams(3);
            let list = [pooled("a", &["k1", "k2", "k3"])];
            let (result, tried) = drive_keys(&upstreams, &list, &["k1", "k2"], code, None).await;
            assert_eq!(result.unwrap(), "k3", "{code}");
            let mut failed = tried[..tried.len() - 1].to_vec();
            failed.sort();
            assert!(failed.iter().all(|k| k == "k1" || k == "k2") && tried.len() <= 3, "{code}: {tried:?}");
            assert_eq!(upstreams.health.failures("a"), 0, "a key's failure is not the channel's");
            for _ in 0..4 {
                let (result, _) = drive_keys(&upstreams, &list, &[], code, None).await;
                assert_eq!(result.unwrap(), "k3", "{code}: failed keys are held out");
            }
        }
    }

    #[tokio::test]
    async fn a_channel_whose_keys_are_all_refused_is_no_channel() {
        let upstreams = upstreams(3);
        let list = [pooled("a", &["k1", "k2"])];
        let (result, tried) = drive_keys(&upstreams, &list, &["k1", "k2"], 401, None).await;
        assert_eq!(result.unwrap_err(), status(401));
        assert_eq!(tried.len(), 2);
        let (result, tried) = drive_keys(&upstreams, &list, &[], 401, None).await;
        assert_eq!(result.unwrap_err(), ProxyError::NoChannel { group: "g".into(), model: "m".into() });
        assert!(tried.is_empty());
    }

    #[tokio::test]
    async fn a_conversation_stays_on_its_key_and_moves_when_it_fails() {
        let upstreams = upstreams(3);
        let list = [pooled("a", &["k1", "k2", "k3"]), pooled("b", &["k4", "k5"])];
        let headers: axum::http::HeaderMap =
            [("session_id".parse().unwrap(), "s-1".parse().unwrap())].into_iter().collect();
        let session = upstreams.affinity.session(&headers, None, "m", "g");
        let (first, _) = drive_keys(&upstreams, &list, &[], 0, session).await;
        let first = first.unwrap();
        for _ in 0..10 {
            assert_eq!(drive_keys(&upstreams, &list, &[], 0, session).await.0.unwrap(), first);
        }
        let (moved, _) = drive_keys(&upstreams, &list, &[first.as_str()], 401, session).await;
        let moved = moved.unwrap();
        assert_ne!(moved, first);
        for _ in 0..10 {
            assert_eq!(drive_keys(&upstreams, &list, &[], 0, session).await.0.unwrap(), moved, "rebound");
        }
    }
}
