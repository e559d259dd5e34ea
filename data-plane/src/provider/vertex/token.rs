//! OAuth2 access tokens for Vertex AI channels, from the channel's
//! service-account key (the whole service-account JSON is the channel's
//! secret): a JWT assertion signed RS256 with the account's private key is
//! exchanged at its token endpoint (RFC 7523, the JWT-bearer grant).
//!
//! Invariants: one token per (channel, key), reused until less than
//! `REFRESH_BEFORE` (or a quarter of its lifetime, when shorter) remains;
//! one request that finds it due exchanges while the others keep using it
//! as long as it is valid, or wait for that one exchange (single flight);
//! a failed exchange is remembered for `RETRY_AFTER_FAILURE`, so a broken
//! key does not cost every request a round trip, and a token still valid
//! is used meanwhile. Nothing logged here carries the key, the assertion or
//! a token.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{
    error::ProxyError,
    policy::domain::Channel,
    provider::{
        Upstreams,
        client::{Payload, Target},
        mask_channel,
    },
};

/// The OAuth2 scope Vertex AI calls need.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Google's token endpoint, when the key names none.
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The JWT-bearer grant type, form-encoded.
const GRANT_TYPE: &str = "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer";
/// Lifetime asked for in the assertion (Google's maximum).
const ASSERTION_LIFETIME_SECS: i64 = 3600;
/// A token is refreshed once less than this remains of it.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);
/// Life a token must have left to be sent while its refresh is pending.
const STILL_VALID: Duration = Duration::from_secs(10);
/// How long a failed exchange is remembered before the next is tried.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// A token the endpoint gives without `expires_in` is taken to last this long.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(600);
/// Longest a token exchange may take, connection included.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most of a token endpoint's answer read.
const MAX_ANSWER_BYTES: usize = 64 << 10;
/// Keys remembered per channel (a key pool rarely holds more).
const MAX_KEYS_PER_CHANNEL: usize = 64;
/// Channels remembered before the cache starts over.
const MAX_CHANNELS: usize = 4096;

/// Access tokens per channel and key (see the module docs). Lives in
/// `Upstreams`; one per data plane.
#[derive(Default)]
pub struct AccessTokens {
    /// Channel id → one slot per key the channel has used.
    slots: Mutex<HashMap<String, Vec<Arc<Slot>>>>,
}

/// Why no token could be had; logged, never shown to clients.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The secret is not a service-account JSON with `client_email` and
    /// `private_key` (serde's message is left out: it may quote the key).
    #[error("the channel key is not a service-account JSON with client_email and private_key")]
    NotServiceAccount,
    #[error("the service account's private_key is not an RSA key in PEM")]
    PrivateKey,
    #[error("the token endpoint {0:?} is not an http(s) URL")]
    TokenUrl(String),
    #[error("signing the token assertion failed")]
    Sign,
    #[error("no upstream HTTP client")]
    NoClient,
    #[error("the token endpoint could not be reached")]
    Transport(#[source] crate::provider::client::ClientError),
    #[error("the token endpoint did not answer within {EXCHANGE_TIMEOUT:?}")]
    Timeout,
    #[error("the token endpoint refused the assertion ({status}): {message}")]
    Refused { status: StatusCode, message: String },
    #[error("the token endpoint's answer has no access_token")]
    NoToken,
    /// A failed exchange is remembered for a few seconds.
    #[error("the last token exchange failed moments ago")]
    RecentlyFailed,
}

/// The parts of a service-account key the exchange uses.
#[derive(Deserialize)]
struct ServiceAccount {
    client_email: String,
    private_key: String,
    #[serde(default)]
    private_key_id: String,
    #[serde(default)]
    token_uri: String,
}

/// The assertion's claims.
#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: i64,
    exp: i64,
}

/// A token endpoint's answer.
#[derive(Deserialize)]
struct Granted {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// The token of one key of one channel.
struct Slot {
    /// The secret the token is for; a channel whose key changed gets a new slot.
    key: String,
    state: Mutex<State>,
    /// Held by the one request that exchanges; the others wait on it.
    refresh: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    token: Option<Token>,
    failed_at: Option<Instant>,
}

#[derive(Clone)]
struct Token {
    /// `Bearer …`, marked sensitive.
    value: HeaderValue,
    /// When it is due for a refresh.
    refresh_at: Instant,
    expires_at: Instant,
}

// === impl AccessTokens ===

impl AccessTokens {
    /// `Bearer <token>` for `channel`'s current key: the cached token while
    /// it is fresh, else one new exchange shared by every request that
    /// asks meanwhile. Fails as `UpstreamConnect` (the attempt moves on to
    /// another channel) when no token can be had and none is still valid.
    pub async fn bearer(&self, upstreams: &Upstreams, channel: &Channel) -> Result<HeaderValue, ProxyError> {
        let slot = self.slot(channel);
        if let Some(token) = slot.fresh(Instant::now()) {
            return Ok(token);
        }
        let _turn = match slot.refresh.try_lock() {
            Ok(turn) => turn,
            // Another request is refreshing: a token still valid serves
            // meanwhile, so no request waits for an exchange it need not.
            Err(_) => match slot.valid(Instant::now()) {
                Some(token) => return Ok(token),
                None => slot.refresh.lock().await,
            },
        };
        // Another request may have refreshed while this one waited.
        let now = Instant::now();
        if let Some(token) = slot.fresh(now) {
            return Ok(token);
        }
        let failed_at = slot.lock().failed_at;
        let outcome = match failed_at {
            Some(at) if now.saturating_duration_since(at) < RETRY_AFTER_FAILURE => Err(TokenError::RecentlyFailed),
            _ => exchange(upstreams, channel).await,
        };
        let mut state = slot.lock();
        match outcome {
            Ok(token) => {
                tracing::debug!(channel = %channel.id, key = %channel.key_id, "vertex access token obtained");
                state.failed_at = None;
                state.token = Some(token.clone());
                Ok(token.value)
            }
            Err(error) => {
                let recent = matches!(error, TokenError::RecentlyFailed);
                if !recent {
                    state.failed_at = Some(Instant::now());
                }
                let error = mask_channel(&crate::error::error_chain(&error), channel);
                let now = Instant::now();
                if let Some(token) = state.token.as_ref().filter(|t| t.usable(now)) {
                    tracing::warn!(channel = %channel.id, key = %channel.key_id, %error, "vertex token refresh failed; the current token is still valid");
                    return Ok(token.value.clone());
                }
                if recent {
                    tracing::debug!(channel = %channel.id, key = %channel.key_id, "vertex access token exchange failed moments ago");
                } else {
                    tracing::warn!(channel = %channel.id, key = %channel.key_id, %error, "vertex access token exchange failed");
                }
                Err(ProxyError::UpstreamConnect)
            }
        }
    }

    /// Drops the token of `channel`'s current key (Vertex refused it: it
    /// was revoked), so the next call exchanges a new one.
    pub fn forget(&self, channel: &Channel) {
        self.slot(channel).lock().token = None;
    }

    /// The slot of `channel`'s current key, made on first use.
    fn slot(&self, channel: &Channel) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(&channel.id).and_then(|s| s.iter().find(|s| s.key == channel.api_key)) {
            return slot.clone();
        }
        if slots.len() >= MAX_CHANNELS && !slots.contains_key(&channel.id) {
            slots.clear();
        }
        let keys = slots.entry(channel.id.clone()).or_default();
        if keys.len() >= MAX_KEYS_PER_CHANNEL {
            keys.remove(0);
        }
        let slot = Arc::new(Slot {
            key: channel.api_key.clone(),
            state: Mutex::default(),
            refresh: tokio::sync::Mutex::new(()),
        });
        keys.push(slot.clone());
        slot
    }
}

// === impl Slot ===

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is a field write: a panic cannot leave one half done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token, when it is not yet due for a refresh at `now`.
    fn fresh(&self, now: Instant) -> Option<HeaderValue> {
        self.lock().token.as_ref().filter(|t| t.refresh_at > now).map(|t| t.value.clone())
    }

    /// The token, when it is due for a refresh but still usable at `now`.
    fn valid(&self, now: Instant) -> Option<HeaderValue> {
        self.lock().token.as_ref().filter(|t| t.usable(now)).map(|t| t.value.clone())
    }
}

// === impl Token ===

impl Token {
    /// Whether a call sent at `now` still has `STILL_VALID` of the token's
    /// life ahead of it.
    fn usable(&self, now: Instant) -> bool {
        self.expires_at > now + STILL_VALID
    }
}

/// The endpoint `channel`'s assertions go to: its `token_url` setting, else
/// the key's `token_uri`, else Google's. It is also the assertion's `aud`.
fn token_url<'a>(channel: &'a Channel, account: &'a ServiceAccount) -> &'a str {
    let setting = channel.settings.get("token_url").map(String::as_str).filter(|u| !u.is_empty());
    setting.or((!account.token_uri.is_empty()).then_some(account.token_uri.as_str())).unwrap_or(DEFAULT_TOKEN_URI)
}

/// The signed assertion for `account` to present at `audience`, issued at
/// `now` (Unix seconds).
fn assertion(account: &ServiceAccount, audience: &str, now: i64) -> Result<String, TokenError> {
    // Selects the crypto provider rustls uses too; a second call is a no-op.
    let _ = jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER.install_default();
    let key =
        jsonwebtoken::EncodingKey::from_rsa_pem(account.private_key.as_bytes()).map_err(|_| TokenError::PrivateKey)?;
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = (!account.private_key_id.is_empty()).then(|| account.private_key_id.clone());
    let claims = Claims {
        iss: &account.client_email,
        scope: SCOPE,
        aud: audience,
        iat: now,
        exp: now + ASSERTION_LIFETIME_SECS,
    };
    jsonwebtoken::encode(&header, &claims, &key).map_err(|_| TokenError::Sign)
}

/// One exchange of an assertion for an access token, through this data
/// plane's own upstream client (same pools, TLS settings and roots).
async fn exchange(upstreams: &Upstreams, channel: &Channel) -> Result<Token, TokenError> {
    let account: ServiceAccount = serde_json::from_str(&channel.api_key).map_err(|_| TokenError::NotServiceAccount)?;
    if account.client_email.is_empty() || account.private_key.is_empty() {
        return Err(TokenError::NotServiceAccount);
    }
    let url = token_url(channel, &account);
    let uri = url
        .parse::<Uri>()
        .ok()
        .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some())
        .ok_or_else(|| TokenError::TokenUrl(url.to_owned()))?;
    let body = format!("grant_type={GRANT_TYPE}&assertion={}", assertion(&account, url, crate::now_unix())?);
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"));
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    let connect = channel.timeouts.connect.unwrap_or(upstreams.config().connect_timeout);
    let client = upstreams.client(connect).map_err(|_| TokenError::NoClient)?;
    let asked = Instant::now();
    let deadline = asked + EXCHANGE_TIMEOUT;
    let send = client.send(
        Method::POST,
        Target::new(uri),
        headers,
        Payload::from(Bytes::from(body)),
        &header::AUTHORIZATION,
        deadline,
    );
    let response = match tokio::time::timeout_at(deadline, send).await {
        Ok(response) => response.map_err(TokenError::Transport)?,
        Err(_) => return Err(TokenError::Timeout),
    };
    let status = response.status();
    let answer = crate::provider::read_capped(response, MAX_ANSWER_BYTES).await;
    if !status.is_success() {
        return Err(TokenError::Refused { status, message: refusal(&answer) });
    }
    let granted: Granted = serde_json::from_slice(&answer).map_err(|_| TokenError::NoToken)?;
    if granted.access_token.is_empty() {
        return Err(TokenError::NoToken);
    }
    let mut value =
        HeaderValue::try_from(format!("Bearer {}", granted.access_token)).map_err(|_| TokenError::NoToken)?;
    value.set_sensitive(true);
    let lifetime = granted.expires_in.map_or(DEFAULT_LIFETIME, Duration::from_secs);
    // Counted from when it was asked for: the endpoint's clock started no earlier.
    let expires_at = asked + lifetime;
    Ok(Token { value, refresh_at: expires_at - refresh_margin(lifetime), expires_at })
}

/// How long before its expiry a token of `lifetime` is refreshed: five
/// minutes, or a quarter of a shorter-lived token's life.
fn refresh_margin(lifetime: Duration) -> Duration {
    REFRESH_BEFORE.min(lifetime / 4)
}

/// The reason in a token endpoint's refusal (`error` and
/// `error_description`), else its first bytes.
fn refusal(answer: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Refusal {
        #[serde(default)]
        error: String,
        #[serde(default)]
        error_description: String,
    }
    match serde_json::from_slice::<Refusal>(answer) {
        Ok(r) if !r.error_description.is_empty() => format!("{}: {}", r.error, r.error_description),
        Ok(r) if !r.error.is_empty() => r.error,
        _ => String::from_utf8_lossy(&answer[..answer.len().min(200)]).into_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn account(pem: &str) -> ServiceAccount {
        ServiceAccount {
            client_email: "gw@proj.iam.gserviceaccount.com".into(),
            private_key: pem.into(),
            private_key_id: "kid-1".into(),
            token_uri: "https://oauth2.googleapis.com/token".into(),
        }
    }

    #[test]
    fn the_assertion_is_signed_rs256_with_the_claims_google_asks_for() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
        let account = account(&key.serialize_pem());
        let jwt = assertion(&account, "http://127.0.0.1:1/token", 1_700_000_000).unwrap();

        let decoding = jsonwebtoken::DecodingKey::from_rsa_pem(key.public_key_pem().as_bytes()).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        validation.validate_exp = false;
        validation.set_audience(&["http://127.0.0.1:1/token"]);
        validation.set_issuer(&["gw@proj.iam.gserviceaccount.com"]);
        let data = jsonwebtoken::decode::<serde_json::Value>(&jwt, &decoding, &validation).unwrap();
        assert_eq!(data.header.kid.as_deref(), Some("kid-1"));
        assert_eq!(data.claims["scope"], SCOPE);
        assert_eq!(data.claims["iat"], 1_700_000_000);
        assert_eq!(data.claims["exp"], 1_700_003_600);

        let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
        let wrong = jsonwebtoken::DecodingKey::from_rsa_pem(other.public_key_pem().as_bytes()).unwrap();
        assert!(jsonwebtoken::decode::<serde_json::Value>(&jwt, &wrong, &validation).is_err());
    }

    #[test]
    fn a_key_that_is_not_rsa_pem_is_refused_without_quoting_it() {
        let error = assertion(&account("-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n"), "x", 0)
            .unwrap_err();
        assert!(matches!(error, TokenError::PrivateKey));
        assert!(!error.to_string().contains("c2VjcmV0"));
    }

    #[test]
    fn the_token_url_setting_wins_over_the_keys_token_uri() {
        let mut channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        let mut sa = account("");
        assert_eq!(token_url(&channel, &sa), "https://oauth2.googleapis.com/token");
        sa.token_uri.clear();
        assert_eq!(token_url(&channel, &sa), DEFAULT_TOKEN_URI);
        channel.settings = Arc::new([("token_url".to_owned(), "http://127.0.0.1:9/token".to_owned())].into());
        assert_eq!(token_url(&channel, &sa), "http://127.0.0.1:9/token");
    }

    #[test]
    fn tokens_are_refreshed_five_minutes_early_or_at_three_quarters_of_a_short_life() {
        assert_eq!(refresh_margin(Duration::from_secs(3599)), REFRESH_BEFORE);
        assert_eq!(refresh_margin(Duration::from_secs(8)), Duration::from_secs(2));
    }

    #[test]
    fn refusals_are_read_from_the_oauth_error_shape() {
        let body = br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#;
        assert_eq!(refusal(body), "invalid_grant: Invalid JWT Signature.");
        assert_eq!(refusal(br#"{"error":"invalid_client"}"#), "invalid_client");
        assert_eq!(refusal(b"<html>nope"), "<html>nope");
    }

    #[tokio::test]
    async fn a_secret_that_is_not_a_service_account_fails_the_attempt_over_and_is_not_retried_at_once() {
        let upstreams = Upstreams::default();
        let mut channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        channel.api_key = "not-json-secret".into();
        let tokens = AccessTokens::default();
        let error = tokens.bearer(&upstreams, &channel).await.unwrap_err();
        assert!(matches!(error, ProxyError::UpstreamConnect));
        let slot = tokens.slot(&channel);
        assert!(slot.lock().failed_at.is_some(), "the failure is remembered");
        assert!(Arc::ptr_eq(&slot, &tokens.slot(&channel)), "one slot per key");
        channel.api_key = "another-secret".into();
        assert!(!Arc::ptr_eq(&slot, &tokens.slot(&channel)), "a changed key gets its own slot");
    }

    #[tokio::test]
    async fn a_token_due_for_refresh_serves_while_it_is_valid_and_a_failed_refresh_keeps_it() {
        let upstreams = Upstreams::default();
        let mut channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        channel.api_key = "not-a-service-account".into();
        let tokens = AccessTokens::default();
        let slot = tokens.slot(&channel);
        let now = Instant::now();
        let value = HeaderValue::from_static("Bearer old");
        slot.lock().token = Some(Token { value, refresh_at: now, expires_at: now + Duration::from_secs(60) });

        let refreshing = slot.refresh.lock().await;
        assert_eq!(tokens.bearer(&upstreams, &channel).await.unwrap(), "Bearer old", "no wait while another refreshes");
        drop(refreshing);
        assert_eq!(tokens.bearer(&upstreams, &channel).await.unwrap(), "Bearer old", "a failed refresh keeps it");
        assert!(slot.lock().failed_at.is_some());

        if let Some(token) = slot.lock().token.as_mut() {
            token.expires_at = Instant::now() + STILL_VALID / 2;
        }
        let error = tokens.bearer(&upstreams, &channel).await.unwrap_err();
        assert!(matches!(error, ProxyError::UpstreamConnect), "a token about to expire is not sent");
    }
}
