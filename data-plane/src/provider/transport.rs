//! Calls to upstream providers: one pooled HTTP client per connect timeout
//! (see `client`; channels rarely differ), upstream URIs built once per
//! channel base URL and path, the request a channel type expects, the timeouts that bound it (the channel's own, else
//! this data plane's defaults), and the mapping of transport failures to
//! `ProxyError`s that never carry a key or an address. `Upstreams` also holds
//! what failover needs across requests: the retry budget and channel health.

use std::{
    collections::HashMap,
    sync::{PoisonError, RwLock},
    time::Duration,
};

use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt as _, future::BoxFuture};

use super::{
    Health,
    client::{Client, ClientError, Payload, Response, Target},
};
use crate::{affinity::Affinity, error::ProxyError, policy::domain::Channel};

/// Defaults for channels that set no timeout of their own.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_TOTAL_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a streamed request still waiting for its first token sends
/// the client a keepalive.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
/// Largest non-streamed upstream answer read (images in base64 are the
/// big ones); a larger one fails the attempt with 502.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// How this data plane talks to upstreams; a channel's own timeouts win over
/// these defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Establishing the TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// From sending the request to the response headers, for streamed
    /// requests. A plain request's headers come only once the whole answer
    /// is generated, so it waits up to `total_timeout` unless its channel
    /// sets a first-byte timeout of its own. A channel's own first-byte
    /// timeout also bounds a stream's wait for its first token (see
    /// `Upstreams::first_token_deadline`).
    pub first_byte_timeout: Duration,
    /// Longest silence between two chunks of a response body.
    pub idle_timeout: Duration,
    /// The whole exchange, body included.
    pub total_timeout: Duration,
    /// Upstream attempts per request, across channels (at least 1).
    pub max_attempts: u32,
    /// First backoff before retrying a channel already tried; doubles per
    /// round up to `backoff_cap`, jittered.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// Most conversations whose channel and key are remembered (0: none).
    pub affinity_capacity: usize,
    /// How long an idle conversation stays remembered.
    pub affinity_idle: Duration,
    /// How often a streamed request waiting for its first token sends the
    /// client a keepalive once it waited that long (`pipeline::keepalive`);
    /// zero sends none.
    pub keepalive_interval: Duration,
}

/// Upstream URIs kept (channels × paths; query strings make more).
const MAX_CACHED_URIS: usize = 4_096;

/// Shared upstream HTTP clients (connection pools), the timeout and retry
/// settings, and channel health.
pub struct Upstreams {
    /// Per worker (`None`: off the workers) and connect timeout, so a
    /// worker's requests use connections its own runtime drives.
    clients: RwLock<HashMap<(Option<usize>, Duration), Client, foldhash::fast::RandomState>>,
    /// Upstream URIs and their `Host` headers built once (base URL → path →
    /// target), looked up without building a string: parsing one per
    /// request costs more than the lookup.
    targets: RwLock<HashMap<String, HashMap<String, Target, foldhash::fast::RandomState>, foldhash::fast::RandomState>>,
    config: Config,
    /// Consecutive failures per channel; reports the ones that keep failing.
    pub health: Health,
    /// The channel and key each conversation was last served by.
    pub affinity: Affinity,
    /// Vertex channels' OAuth2 access tokens, per channel and key.
    pub vertex_tokens: super::vertex::AccessTokens,
}

// === impl Config ===

impl Default for Config {
    fn default() -> Config {
        Config {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            total_timeout: DEFAULT_TOTAL_TIMEOUT,
            max_attempts: 3,
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(2),
            affinity_capacity: crate::affinity::DEFAULT_CAPACITY,
            affinity_idle: crate::affinity::DEFAULT_IDLE,
            keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
        }
    }
}

impl Config {
    /// Checks that every timeout is positive and at least one attempt is made.
    pub fn validate(&self) -> anyhow::Result<()> {
        let timeouts = [
            ("connect", self.connect_timeout),
            ("first byte", self.first_byte_timeout),
            ("idle", self.idle_timeout),
            ("total", self.total_timeout),
        ];
        if let Some((name, _)) = timeouts.iter().find(|(_, d)| d.is_zero()) {
            anyhow::bail!("the upstream {name} timeout must be positive");
        }
        if self.max_attempts == 0 {
            anyhow::bail!("max attempts must be at least 1");
        }
        if self.affinity_idle.is_zero() && self.affinity_capacity > 0 {
            anyhow::bail!("the affinity idle time must be positive");
        }
        Ok(())
    }

    /// The live upstream side, recording channel health in `health`.
    pub fn build(self, health: Health) -> Upstreams {
        let affinity = Affinity::new(self.affinity_capacity, self.affinity_idle);
        Upstreams {
            clients: RwLock::default(),
            targets: RwLock::default(),
            config: self,
            health,
            affinity,
            vertex_tokens: super::vertex::AccessTokens::default(),
        }
    }
}

// === impl Upstreams ===

impl Default for Upstreams {
    /// Default settings; channel health is tracked but never reported.
    fn default() -> Upstreams {
        Config::default().build(Health::unreported())
    }
}

impl Upstreams {
    /// The settings in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The idle timeout for `channel`'s response bodies.
    pub fn idle_timeout(&self, channel: &Channel) -> Duration {
        channel.timeouts.idle.unwrap_or(self.config.idle_timeout)
    }

    /// When a stream sent to `channel` at `sent` must have brought its
    /// first token (`meter::pump::primed`): the channel's own first-byte
    /// timeout after sending, within its total timeout. `None` when the
    /// channel sets none: reasoning models may think for minutes, so only
    /// the idle timeout bounds that silence then.
    pub fn first_token_deadline(&self, channel: &Channel, sent: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let total = channel.timeouts.total.unwrap_or(self.config.total_timeout);
        channel.timeouts.first_byte.map(|first| sent + first.min(total))
    }

    /// This worker's pooled client whose connect timeout is `connect`.
    pub(super) fn client(&self, connect: Duration) -> Result<Client, ProxyError> {
        let key = (crate::workers::current(), connect);
        if let Some(client) = self.clients.read().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Ok(client.clone());
        }
        let client = Client::new(connect).map_err(|error| {
            tracing::error!(%error, "cannot build the upstream HTTP client");
            ProxyError::Internal
        })?;
        let mut clients = self.clients.write().unwrap_or_else(PoisonError::into_inner);
        Ok(clients.entry(key).or_insert(client).clone())
    }

    /// `channel`'s base URL + `path` as a target; each is built once (at
    /// most `MAX_CACHED_URIS` are kept, then building starts over).
    fn target(&self, channel: &Channel, path: &str) -> Result<Target, ProxyError> {
        let cached = self.targets.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(target) = cached.get(&channel.base_url).and_then(|paths| paths.get(path)) {
            return Ok(target.clone());
        }
        drop(cached);
        let uri: Uri = format!("{}{path}", channel.base_url)
            .parse()
            .ok()
            .filter(|uri: &Uri| matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some())
            .ok_or_else(|| {
                tracing::warn!(channel = %channel.id, "the channel's base URL does not parse");
                ProxyError::UpstreamConnect
            })?;
        let mut targets = self.targets.write().unwrap_or_else(PoisonError::into_inner);
        if targets.values().map(HashMap::len).sum::<usize>() >= MAX_CACHED_URIS {
            targets.clear();
        }
        let target = Target::new(uri);
        targets.entry(channel.base_url.clone()).or_default().insert(path.to_owned(), target.clone());
        Ok(target)
    }

    /// Sends a chat completion `body` to `channel` and returns once the
    /// response headers arrived, within the first-byte timeout (see
    /// `Config::first_byte_timeout`; `stream` says whether the client asked
    /// for a streamed answer). The total timeout also bounds reading the
    /// body. Dropping the response (or its body stream) closes the upstream
    /// connection, cancelling the request.
    pub async fn chat(
        &self,
        channel: &Channel,
        upstream_model: &str,
        body: Bytes,
        stream: bool,
    ) -> Result<Response, ProxyError> {
        let path = super::chat_path(channel, upstream_model);
        self.post(channel, &path, HeaderValue::from_static("application/json"), body, stream).await
    }

    /// Sends `body` (of `content_type`) to `channel`'s base URL + `path`
    /// (e.g. `/embeddings`), with the timeouts of `chat`.
    pub async fn post(
        &self,
        channel: &Channel,
        path: &str,
        content_type: HeaderValue,
        body: Bytes,
        stream: bool,
    ) -> Result<Response, ProxyError> {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, content_type);
        self.send(channel, path, headers, body, stream).await
    }

    /// Sends `body` to `channel`'s base URL + `path` (which may carry a query
    /// string) with `headers` and the channel's key as its kind's adapter
    /// sends it (`provider::credential`; the key wins over any header of that
    /// name in `headers`). Timeouts as for `chat`.
    pub async fn send(
        &self,
        channel: &Channel,
        path: &str,
        headers: HeaderMap,
        body: Bytes,
        stream: bool,
    ) -> Result<Response, ProxyError> {
        self.request(channel, Method::POST, path, headers, Payload::from(body), stream).await
    }

    /// The one way to an upstream: `method` on `channel`'s base URL + `path`
    /// with `headers`, `body` and the channel's key (see `send`); redirects
    /// are followed (the key is dropped when one leaves the channel's host).
    /// Timeouts as for `chat`; `stream` says whether the answer streams.
    ///
    /// Boxed: the future holds the upstream call's whole state (a few
    /// kilobytes), which every caller's future would otherwise hold and
    /// copy again at each step up.
    pub fn request<'a>(
        &'a self,
        channel: &'a Channel,
        method: Method,
        path: &'a str,
        headers: HeaderMap,
        body: Payload,
        stream: bool,
    ) -> BoxFuture<'a, Result<Response, ProxyError>> {
        Box::pin(self.call(channel, method, path, headers, body, stream))
    }

    /// The call `request` boxes.
    async fn call(
        &self,
        channel: &Channel,
        method: Method,
        path: &str,
        mut headers: HeaderMap,
        body: Payload,
        stream: bool,
    ) -> Result<Response, ProxyError> {
        let timeouts = channel.timeouts;
        let client = self.client(timeouts.connect.unwrap_or(self.config.connect_timeout))?;
        let total = timeouts.total.unwrap_or(self.config.total_timeout);
        let target = self.target(channel, path)?;
        headers.remove(header::AUTHORIZATION);
        headers.remove("x-api-key");
        let outgoing = super::Outgoing { method: &method, uri: &target.uri, headers: &mut headers, body: body.whole() };
        let name = super::authorize(self, channel, outgoing).await?;
        crate::telemetry::inject(&mut headers);
        let deadline = tokio::time::Instant::now() + total;
        let send = client.send(method, target, headers, body, &name, deadline);
        let default_first_byte = if stream { self.config.first_byte_timeout } else { total };
        let first_byte = timeouts.first_byte.unwrap_or(default_first_byte).min(total);
        match tokio::time::timeout(first_byte, send).await {
            Ok(result) => result.map_err(|error| transport_error(channel, &error)),
            Err(_) => {
                tracing::warn!(
                    channel = %channel.id,
                    timeout_ms = u64::try_from(first_byte.as_millis()).unwrap_or(u64::MAX),
                    "upstream sent no response headers in time"
                );
                Err(ProxyError::UpstreamTimeout)
            }
        }
    }

    /// Reads all of `response`'s body, failing if it stalls for longer than
    /// `channel`'s idle timeout (the total timeout bounds it as a whole) or
    /// grows past `MAX_ANSWER_BYTES`.
    pub async fn read_body(&self, channel: &Channel, response: Response) -> Result<Bytes, ProxyError> {
        let idle = self.idle_timeout(channel);
        let capacity = response.content_length().map_or(0, |n| usize::try_from(n).unwrap_or(0).min(1 << 20));
        let mut buf = BytesMut::with_capacity(capacity);
        let mut body = response.bytes_stream();
        loop {
            match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(chunk))) if buf.len() + chunk.len() > MAX_ANSWER_BYTES => {
                    tracing::warn!(channel = %channel.id, limit = MAX_ANSWER_BYTES, "upstream answer too large");
                    let message = format!("upstream answer is larger than {MAX_ANSWER_BYTES} bytes");
                    return Err(ProxyError::UpstreamStatus { status: axum::http::StatusCode::BAD_GATEWAY, message });
                }
                Ok(Some(Ok(chunk))) => buf.extend_from_slice(&chunk),
                Ok(Some(Err(error))) => return Err(transport_error(channel, &error)),
                Ok(None) => return Ok(buf.freeze()),
                Err(_) => {
                    tracing::warn!(channel = %channel.id, "upstream body stalled past the idle timeout");
                    return Err(ProxyError::UpstreamTimeout);
                }
            }
        }
    }
}

/// Maps a transport failure to the client-facing error; the log line leaves
/// the URL out, since base URLs may carry credentials.
pub fn transport_error(channel: &Channel, error: &ClientError) -> ProxyError {
    let timeout = error.is_timeout();
    let connect = error.is_connect();
    tracing::warn!(channel = %channel.id, timeout, connect, error = %mask_channel(&crate::error::error_chain(error), channel), "upstream request failed");
    if timeout { ProxyError::UpstreamTimeout } else { ProxyError::UpstreamConnect }
}

/// `text` with every occurrence of `secret` replaced by `***`.
pub fn mask(text: &str, secret: &str) -> String {
    if secret.is_empty() { text.to_owned() } else { text.replace(secret, "***") }
}

/// `text` (an upstream's own words) with `channel`'s key and address masked:
/// safe to log and to pass to the client.
pub fn mask_channel(text: &str, channel: &Channel) -> String {
    let mut text = mask(text, &channel.api_key);
    for key in channel.keys.iter() {
        text = mask(&text, &key.key);
    }
    let host = channel.base_url.split("://").nth(1).and_then(|rest| rest.split(['/', '?']).next()).unwrap_or("");
    mask(&mask(&text, &channel.base_url), host)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        assert_eq!(mask("bad key sk-up-123 given (sk-up-123)", "sk-up-123"), "bad key *** given (***)");
        assert_eq!(mask("nothing", ""), "nothing");
        let mut channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        channel.base_url = "https://user:pw@llm.internal:8443/v1".into();
        channel.api_key = "sk-up-123".into();
        let text = "key sk-up-123 refused by https://user:pw@llm.internal:8443/v1/chat (user:pw@llm.internal:8443)";
        assert_eq!(mask_channel(text, &channel), "key *** refused by ***/chat (***)");
    }

    #[test]
    fn default_settings_are_valid_and_zero_is_refused() {
        assert!(Config::default().validate().is_ok());
        assert!(Config { max_attempts: 0, ..Config::default() }.validate().is_err());
        assert!(Config { first_byte_timeout: Duration::ZERO, ..Config::default() }.validate().is_err());
    }
}
