//! Probes auto-disabled channels back into rotation. One task, every
//! `interval`, asks each channel whose status is `auto_disabled` for
//! `GET <base_url>/models` with its own key and re-enables those that answer
//! 2xx; the change reaches every data plane through the snapshot. A channel
//! an operator disabled is never touched, and neither URLs nor keys are
//! logged. Several replicas may probe at once: re-enabling is idempotent.

use std::{sync::Arc, time::Duration};

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
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    if let Err(error) = round(store.as_ref(), &client).await {
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

/// Probes every auto-disabled channel once, concurrently; returns the ids of
/// the channels it re-enabled.
pub async fn round(store: &dyn Store, client: &reqwest::Client) -> Result<Vec<String>, crate::store::StoreError> {
    let channels: Vec<Channel> = store
        .list(Kind::Channel)
        .await?
        .into_iter()
        .filter_map(|resource| match resource {
            Resource::Channel(channel) if channel.status == AUTO_DISABLED => Some(channel),
            _ => None,
        })
        .collect();
    let healthy = join_all(channels.iter().map(|channel| answers(client, channel))).await;
    let mut enabled = Vec::new();
    for (channel, healthy) in channels.into_iter().zip(healthy) {
        if !healthy {
            continue;
        }
        // Only if still auto-disabled: an operator may have changed it while
        // the probe ran.
        if !store::switch_channel_status(store, &channel.id, AUTO_DISABLED, ENABLED).await? {
            continue;
        }
        tracing::info!(channel = %channel.id, "auto-disabled channel answers again; back in rotation");
        enabled.push(channel.id);
    }
    Ok(enabled)
}

/// Whether `channel`'s upstream answers `GET /models` with 2xx.
async fn answers(client: &reqwest::Client, channel: &Channel) -> bool {
    let url = format!("{}/models", channel.base_url.trim_end_matches('/'));
    let mut request = client.get(url);
    if channel.kind == "anthropic" {
        let Ok(mut key) = HeaderValue::from_str(channel.first_key()) else {
            return false;
        };
        key.set_sensitive(true);
        request = request.header("x-api-key", key).header("anthropic-version", "2023-06-01");
    } else if !channel.first_key().is_empty() {
        let Ok(mut bearer) = HeaderValue::from_str(&format!("Bearer {}", channel.first_key())) else {
            return false;
        };
        bearer.set_sensitive(true);
        request = request.header(AUTHORIZATION, bearer);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            tracing::debug!(channel = %channel.id, status = status.as_u16(), "probed auto-disabled channel");
            status.is_success()
        }
        Err(error) => {
            tracing::debug!(channel = %channel.id, timeout = error.is_timeout(), "probe of auto-disabled channel failed");
            false
        }
    }
}
