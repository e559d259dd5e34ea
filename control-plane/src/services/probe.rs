//! Probes auto-disabled channels back into rotation. One task, every
//! `interval`, asks each channel whose status is `auto_disabled` for its
//! model list (`GET <base_url>/models`, Azure's under `/openai`) with its
//! own key and re-enables those that answer 2xx; the change reaches every
//! data plane through the snapshot. Bedrock and Vertex channels, whose
//! requests only the data plane signs, cannot be probed from here: they are
//! put back on trial instead, after four intervals auto-disabled (doubling
//! each time the data planes take one out again, up to an hour), and the
//! data planes' failure reports disable them again if they still fail. A
//! channel an operator disabled is never touched, and neither URLs nor keys
//! are logged. Several replicas may probe at once: re-enabling is
//! idempotent.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures_util::future::join_all;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    domain::error_chain,
    domain::{AUTO_DISABLED, Channel, ENABLED, Kind, Resource},
    store::{self, Store},
};

/// When and how patiently auto-disabled channels are probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Time between two rounds; the first round runs one interval after start.
    pub interval: Duration,
    /// Longest one probe may take, connection included.
    pub timeout: Duration,
}

// === impl Config ===

impl Default for Config {
    /// A round every 30 s, 10 s per probe.
    fn default() -> Config {
        Config { interval: Duration::from_secs(30), timeout: Duration::from_secs(10) }
    }
}

/// The longest a channel that cannot be probed waits for its trial.
const MAX_TRIAL_WAIT: Duration = Duration::from_secs(3_600);

/// Channels of kinds the probe cannot test, and when each goes on trial.
#[derive(Debug)]
pub struct Trials {
    /// The first wait; it doubles each time a channel is tried again.
    first: Duration,
    channels: HashMap<String, Trial>,
}

#[derive(Debug)]
struct Trial {
    /// When the probe first saw the channel auto-disabled this time;
    /// `None` while it is in rotation.
    since: Option<tokio::time::Instant>,
    wait: Duration,
}

// === impl Trials ===

impl Trials {
    /// Trials after `first` (four probe intervals in the task).
    pub fn new(first: Duration) -> Trials {
        Trials { first, channels: HashMap::new() }
    }

    /// Whether auto-disabled `id` has waited long enough to be tried again;
    /// if so its next wait doubles.
    fn due(&mut self, id: &str, now: tokio::time::Instant) -> bool {
        let first = self.first;
        let trial = self.channels.entry(id.to_owned()).or_insert(Trial { since: None, wait: first });
        let since = *trial.since.get_or_insert(now);
        if now.duration_since(since) < trial.wait {
            return false;
        }
        trial.since = None;
        trial.wait = (trial.wait * 2).min(MAX_TRIAL_WAIT);
        true
    }
}

/// Spawns the probe task; it ends when `shutdown` turns true (or its sender
/// is dropped). Fails only if the HTTP client cannot be built.
pub fn spawn(
    store: Arc<dyn Store>,
    config: Config,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let client = reqwest::Client::builder()
        .connect_timeout(config.timeout)
        .timeout(config.timeout)
        .build()
        .map_err(|error| anyhow::anyhow!("building the channel probe's HTTP client: {error}"))?;
    Ok(tokio::spawn(async move {
        // A zero period would make the timer panic.
        let every = config.interval.max(Duration::from_millis(10));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut trials = Trials::new(every * 4);
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    if let Err(error) = round(store.as_ref(), &client, &mut trials).await {
                        tracing::warn!(error = %error_chain(&error), "channel probe round failed");
                    }
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        return;
                    }
                }
            }
        }
    }))
}

/// Probes every auto-disabled channel once, concurrently, and puts those
/// that cannot be probed on trial when `trials` says they are due; returns
/// the ids of the channels it re-enabled.
pub async fn round(
    store: &dyn Store,
    client: &reqwest::Client,
    trials: &mut Trials,
) -> Result<Vec<String>, crate::store::StoreError> {
    let channels: Vec<Channel> = store
        .list(Kind::Channel)
        .await?
        .into_iter()
        .filter_map(|resource| match resource {
            Resource::Channel(channel) if channel.status == AUTO_DISABLED => Some(channel),
            _ => None,
        })
        .collect();
    let answered = join_all(channels.iter().map(|channel| answers(client, channel))).await;
    let now = tokio::time::Instant::now();
    let mut enabled = Vec::new();
    for (channel, answered) in channels.into_iter().zip(answered) {
        let back = match answered {
            Answer::Healthy => true,
            Answer::Failing => false,
            Answer::Untestable => trials.due(&channel.id, now),
        };
        if !back {
            continue;
        }
        // Only if still auto-disabled: an operator may have changed it while
        // the probe ran.
        if !store::switch_channel_status(store, &channel.id, AUTO_DISABLED, ENABLED).await? {
            continue;
        }
        if answered == Answer::Untestable {
            tracing::info!(channel = %channel.id, kind = %channel.kind, "auto-disabled channel back in rotation on trial");
        } else {
            tracing::info!(channel = %channel.id, "auto-disabled channel answers again; back in rotation");
        }
        enabled.push(channel.id);
    }
    Ok(enabled)
}

/// What a probe learned of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Healthy,
    Failing,
    /// A kind the probe cannot reach (see `Trials`).
    Untestable,
}

/// Whether `channel`'s upstream answers its model list with 2xx.
async fn answers(client: &reqwest::Client, channel: &Channel) -> Answer {
    let request = match probe_request(client, channel) {
        Probe::Send(request) => *request,
        Probe::Unusable => return Answer::Failing,
        Probe::Unsupported => return Answer::Untestable,
    };
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            tracing::debug!(channel = %channel.id, status = status.as_u16(), "probed auto-disabled channel");
            if status.is_success() { Answer::Healthy } else { Answer::Failing }
        }
        Err(error) => {
            tracing::debug!(channel = %channel.id, timeout = error.is_timeout(), "probe of auto-disabled channel failed");
            Answer::Failing
        }
    }
}

/// What a probe of one channel sends.
enum Probe {
    Send(Box<reqwest::RequestBuilder>),
    /// The key cannot be a header value.
    Unusable,
    /// Bedrock (SigV4) and Vertex (service-account tokens): the signing
    /// lives in the data plane, so these are put on trial instead.
    Unsupported,
}

/// The model-list request for `channel`'s kind, with its key where that
/// kind sends it: `GET <base>/models` (Bearer, `x-api-key` for
/// Anthropic, `x-goog-api-key` for Gemini) or Azure's model list (`api-key`
/// or an Entra bearer token).
fn probe_request(client: &reqwest::Client, channel: &Channel) -> Probe {
    let base = channel.base_url.trim_end_matches('/');
    let setting = |name: &str| channel.settings.get(name).map_or("", String::as_str);
    let key = channel.first_key();
    let (url, header, value) = match channel.kind.as_str() {
        "bedrock" | "vertex" => return Probe::Unsupported,
        "anthropic" => (format!("{base}/models"), "x-api-key", key.to_owned()),
        "gemini" => (format!("{base}/models"), "x-goog-api-key", key.to_owned()),
        "azure" => {
            let url = match setting("api_version") {
                "" | "v1" => format!("{base}/openai/v1/models"),
                version => format!("{base}/openai/models?api-version={version}"),
            };
            match setting("auth") {
                "entra" => (url, AUTHORIZATION.as_str(), format!("Bearer {key}")),
                _ => (url, "api-key", key.to_owned()),
            }
        }
        _ => (format!("{base}/models"), AUTHORIZATION.as_str(), format!("Bearer {key}")),
    };
    let mut request = client.get(url);
    if !key.is_empty() {
        let Ok(mut value) = HeaderValue::from_str(&value) else {
            return Probe::Unusable;
        };
        value.set_sensitive(true);
        request = request.header(header, value);
    }
    if channel.kind == "anthropic" {
        request = request.header("anthropic-version", "2023-06-01");
    }
    Probe::Send(Box::new(request))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn channel(kind: &str, base_url: &str, settings: &[(&str, &str)]) -> Channel {
        Channel {
            id: "ch_1".into(),
            name: "main".into(),
            kind: kind.into(),
            base_url: base_url.into(),
            api_key: "secret-key".into(),
            models: vec!["m".into()],
            model_map: BTreeMap::new(),
            groups: vec!["default".into()],
            priority: 0,
            weight: 1,
            status: AUTO_DISABLED.into(),
            connect_timeout_ms: 0,
            first_byte_timeout_ms: 0,
            idle_timeout_ms: 0,
            total_timeout_ms: 0,
            keys: Vec::new(),
            settings: settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    /// The URL and the one credential header of the probe of `channel`.
    fn sent(channel: &Channel) -> Option<(String, String, String)> {
        let Probe::Send(request) = probe_request(&reqwest::Client::new(), channel) else { return None };
        let request = request.build().unwrap();
        let (name, value) = request
            .headers()
            .iter()
            .find(|(name, _)| name.as_str() != "anthropic-version")
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .unwrap();
        Some((request.url().to_string(), name, value))
    }

    #[test]
    fn each_kind_is_probed_at_its_model_list_with_its_own_header() {
        let at = |url: &str, header: &str, value: &str| Some((url.to_owned(), header.to_owned(), value.to_owned()));
        assert_eq!(
            sent(&channel("openai", "http://u/v1/", &[])),
            at("http://u/v1/models", "authorization", "Bearer secret-key")
        );
        assert_eq!(
            sent(&channel("anthropic", "http://u/v1", &[])),
            at("http://u/v1/models", "x-api-key", "secret-key")
        );
        assert_eq!(
            sent(&channel("gemini", "http://u/v1beta", &[])),
            at("http://u/v1beta/models", "x-goog-api-key", "secret-key")
        );
        let v1 = channel("azure", "http://az", &[("api_version", "v1"), ("auth", "api-key")]);
        assert_eq!(sent(&v1), at("http://az/openai/v1/models", "api-key", "secret-key"));
        let dated = channel("azure", "http://az", &[("api_version", "2024-10-21"), ("auth", "entra")]);
        assert_eq!(
            sent(&dated),
            at("http://az/openai/models?api-version=2024-10-21", "authorization", "Bearer secret-key")
        );
    }

    #[test]
    fn bedrock_and_vertex_channels_cannot_be_probed_from_here() {
        for kind in ["bedrock", "vertex"] {
            let probe = probe_request(&reqwest::Client::new(), &channel(kind, "http://u", &[]));
            assert!(matches!(probe, Probe::Unsupported), "{kind}");
        }
    }

    #[test]
    fn an_untestable_channel_is_due_after_a_wait_that_doubles_each_trial() {
        let mut trials = Trials::new(Duration::from_secs(60));
        let start = tokio::time::Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        assert!(!trials.due("c", at(0)), "first seen");
        assert!(!trials.due("c", at(59)));
        assert!(trials.due("c", at(60)), "tried after 60 s");
        assert!(!trials.due("c", at(100)), "taken out again: seen anew");
        assert!(!trials.due("c", at(219)));
        assert!(trials.due("c", at(220)), "then after 120 s");
        for _ in 0..20 {
            let wait = trials.channels["c"].wait;
            assert!(wait <= MAX_TRIAL_WAIT);
            let _ = trials.due("c", at(0));
        }
    }

    #[tokio::test]
    async fn a_due_bedrock_channel_is_put_back_in_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::embedded::EmbeddedStore::open(&dir.path().join("s.redb")).unwrap();
        let mut bedrock = channel("bedrock", "http://127.0.0.1:9", &[("region", "us-east-1")]);
        bedrock.status = AUTO_DISABLED.into();
        store.create(Resource::Channel(bedrock.clone())).await.unwrap();
        let mut trials = Trials::new(Duration::ZERO);
        let enabled = round(&store, &reqwest::Client::new(), &mut trials).await.unwrap();
        assert_eq!(enabled, [bedrock.id.clone()]);
        let stored = store.get(Kind::Channel, &bedrock.id).await.unwrap();
        assert!(matches!(stored, Some(Resource::Channel(c)) if c.status == ENABLED));
    }
}
