//! Calls to upstream providers: one pooled HTTP client per connect timeout
//! (reqwest sets that per client; channels rarely differ), the request a
//! channel type expects, and the mapping of transport failures to
//! `ProxyError`s that never carry a key or an address.

use std::{
    collections::HashMap,
    sync::{PoisonError, RwLock},
    time::Duration,
};

use axum::http::{HeaderValue, header};
use bytes::Bytes;

use crate::{
    domain::{Channel, ChannelKind},
    error::ProxyError,
};

/// Defaults for channels that set no timeout of their own.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_TOTAL_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Shared upstream HTTP clients (connection pools).
#[derive(Default)]
pub struct Upstreams {
    clients: RwLock<HashMap<Duration, reqwest::Client>>,
}

// === impl Upstreams ===

impl Upstreams {
    /// The pooled client whose connect timeout is `connect`.
    fn client(&self, connect: Duration) -> Result<reqwest::Client, ProxyError> {
        if let Some(client) = self.clients.read().unwrap_or_else(PoisonError::into_inner).get(&connect) {
            return Ok(client.clone());
        }
        let client = reqwest::Client::builder()
            .connect_timeout(connect)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .build()
            .map_err(|error| {
                tracing::error!(%error, "cannot build the upstream HTTP client");
                ProxyError::Internal
            })?;
        let mut clients = self.clients.write().unwrap_or_else(PoisonError::into_inner);
        Ok(clients.entry(connect).or_insert(client).clone())
    }

    /// Sends a chat completion `body` to `channel` and returns once the
    /// response headers arrived (within the channel's first-byte timeout).
    /// The total timeout also bounds reading the body.
    pub async fn chat(&self, channel: &Channel, body: Bytes) -> Result<reqwest::Response, ProxyError> {
        let timeouts = channel.timeouts;
        let client = self.client(timeouts.connect.unwrap_or(DEFAULT_CONNECT_TIMEOUT))?;
        let total = timeouts.total.unwrap_or(DEFAULT_TOTAL_TIMEOUT);
        let url = match channel.kind {
            ChannelKind::OpenAi => format!("{}/chat/completions", channel.base_url),
        };
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", channel.api_key)).map_err(|_| {
            tracing::error!(channel = %channel.id, "channel api key is not a valid header value");
            ProxyError::UpstreamConnect
        })?;
        authorization.set_sensitive(true);
        let send = client
            .post(url)
            .header(header::AUTHORIZATION, authorization)
            .header(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .timeout(total)
            .body(body)
            .send();
        let first_byte = timeouts.first_byte.unwrap_or(total).min(total);
        match tokio::time::timeout(first_byte, send).await {
            Ok(result) => result.map_err(|error| transport_error(channel, &error)),
            Err(_) => {
                tracing::warn!(channel = %channel.id, "upstream sent no response headers in time");
                Err(ProxyError::UpstreamTimeout)
            }
        }
    }
}

/// Maps a reqwest failure to the client-facing error; the log line leaves
/// the URL out, since base URLs may carry credentials.
pub fn transport_error(channel: &Channel, error: &reqwest::Error) -> ProxyError {
    let timeout = error.is_timeout();
    let connect = error.is_connect();
    tracing::warn!(channel = %channel.id, timeout, connect, error = %mask(&cause_chain(error), &channel.api_key), "upstream request failed");
    if timeout { ProxyError::UpstreamTimeout } else { ProxyError::UpstreamConnect }
}

/// The error and its sources, without the URL reqwest would print.
fn cause_chain(error: &reqwest::Error) -> String {
    let mut text = String::from(if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connect error"
    } else if error.is_body() || error.is_decode() {
        "body error"
    } else {
        "request error"
    });
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `text` with every occurrence of `secret` replaced by `***`.
pub fn mask(text: &str, secret: &str) -> String {
    if secret.is_empty() { text.to_owned() } else { text.replace(secret, "***") }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        assert_eq!(mask("bad key sk-up-123 given (sk-up-123)", "sk-up-123"), "bad key *** given (***)");
        assert_eq!(mask("nothing", ""), "nothing");
    }
}
