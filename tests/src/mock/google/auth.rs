//! Google's side of authentication on the mock upstream: Gemini API keys
//! and a service-account token endpoint (`POST /token`, the JWT-bearer
//! grant) whose access tokens the Vertex routes require.
//!
//! Service accounts are made per test ([`MockGoogle::service_account`]): a
//! fresh RSA key whose public half the endpoint keeps. An exchange is
//! granted only for an assertion signed RS256 by a known account's key
//! (checked with aws-lc-rs, independently of the data plane's JWT crate)
//! whose `iss` is that account, `aud` this endpoint's URL, `scope` includes
//! cloud-platform and `iat`/`exp` make a token of at most an hour that is
//! valid now; refusals use the OAuth error shape Google's endpoint answers.
//! Tokens expire after [`MockGoogle::set_token_lifetime`] (an hour unless
//! set), and every exchange is counted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Form, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

/// The Gemini API key a mock accepts unless told otherwise.
pub const GEMINI_KEY: &str = "AIzaSy-mock-gemini-key-0123456789abcdef";
/// The scope Vertex AI calls need.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The grant type of the service-account exchange.
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The Google side of one mock upstream (see [`crate::mock::upstream::MockUpstream::google`]).
#[derive(Clone)]
pub struct MockGoogle {
    pub(crate) state: Arc<Mutex<Auth>>,
}

/// One token exchange as the endpoint saw it.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The assertion's claims (`iss`, `aud`, `scope`, `iat`, `exp`).
    pub claims: Value,
    /// The assertion's header (`alg`, `kid`, `typ`).
    pub header: Value,
    /// Whether a token was granted.
    pub granted: bool,
    /// The refusal's `error_description` when not granted.
    pub refusal: Option<String>,
}

/// What the mock's Google side holds.
pub(crate) struct Auth {
    addr: SocketAddr,
    api_key: String,
    /// `client_email` → the account's public key (DER).
    accounts: HashMap<String, Vec<u8>>,
    token_lifetime: Duration,
    token_delay: Duration,
    /// Token → when it expires.
    tokens: HashMap<String, Instant>,
    exchanges: Vec<Exchange>,
    next: u64,
}

/// A compact JWS taken apart.
struct Jws {
    header: Value,
    claims: Value,
    /// `header.claims` as sent, what the signature covers.
    signing_input: Vec<u8>,
    signature: Vec<u8>,
}

/// Why an access token was refused.
pub(crate) enum Refused {
    Missing,
    Invalid,
    Expired,
}

// === impl MockGoogle ===

impl MockGoogle {
    /// A Google side for the mock at `addr`, accepting [`GEMINI_KEY`].
    pub(crate) fn new(addr: SocketAddr) -> MockGoogle {
        let auth = Auth {
            addr,
            api_key: GEMINI_KEY.to_owned(),
            accounts: HashMap::new(),
            token_lifetime: Duration::from_secs(3600),
            token_delay: Duration::ZERO,
            tokens: HashMap::new(),
            exchanges: Vec::new(),
            next: 0,
        };
        MockGoogle { state: Arc::new(Mutex::new(auth)) }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Auth> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The token endpoint's URL, `http://127.0.0.1:PORT/token`.
    pub fn token_url(&self) -> String {
        format!("http://{}/token", self.lock().addr)
    }

    /// The Gemini API base URL, `http://127.0.0.1:PORT/v1beta`.
    pub fn gemini_base_url(&self) -> String {
        format!("http://{}/v1beta", self.lock().addr)
    }

    /// A Vertex AI base URL for `project` in `location`, as the control
    /// plane makes it (`…/v1/projects/{project}/locations/{location}`).
    pub fn vertex_base_url(&self, project: &str, location: &str) -> String {
        format!("http://{}/v1/projects/{project}/locations/{location}", self.lock().addr)
    }

    /// Accepts `key` as the Gemini API key from now on (instead of [`GEMINI_KEY`]).
    pub fn set_api_key(&self, key: &str) {
        self.lock().api_key = key.to_owned();
    }

    /// Tokens granted from now on expire after `lifetime` (`expires_in`).
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        self.lock().token_lifetime = lifetime;
    }

    /// The token endpoint waits `delay` before answering.
    pub fn set_token_delay(&self, delay: Duration) {
        self.lock().token_delay = delay;
    }

    /// A new service account the endpoint knows: its key JSON as the
    /// Google Cloud console downloads it, `token_uri` pointing at this
    /// mock's endpoint.
    pub fn service_account(&self, name: &str) -> String {
        let (json, email, public) = new_account(name, &self.token_url());
        self.lock().accounts.insert(email, public);
        json
    }

    /// A service account whose key the endpoint does not know (a deleted
    /// or rotated key): its exchanges are refused.
    pub fn unknown_service_account(&self, name: &str) -> String {
        new_account(name, &self.token_url()).0
    }

    /// Every exchange so far, in arrival order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.lock().exchanges.clone()
    }

    /// Revokes every access token granted so far (Vertex then answers
    /// 401 to them).
    pub fn revoke_tokens(&self) {
        self.lock().tokens.clear();
    }

    /// How many exchanges were granted.
    pub fn tokens_granted(&self) -> usize {
        self.lock().exchanges.iter().filter(|e| e.granted).count()
    }
}

// === impl Auth ===

impl Auth {
    /// Whether `headers` carry the Gemini API key (`x-goog-api-key`, or
    /// `key=` in `query`): `None` when they do, else the refusal to send.
    pub(crate) fn check_api_key(&self, headers: &HeaderMap, query: Option<&str>) -> Option<Response> {
        let from_query = query.and_then(|q| q.split('&').find_map(|p| p.strip_prefix("key=")));
        let given = headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()).or(from_query);
        match given {
            Some(key) if key == self.api_key => None,
            Some(_) => Some(super::error_with_reason(
                StatusCode::BAD_REQUEST,
                "API key not valid. Please pass a valid API key.",
                "API_KEY_INVALID",
            )),
            None => Some(super::error(
                StatusCode::FORBIDDEN,
                "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
            )),
        }
    }

    /// Makes `token` valid for an hour, as if granted (for tests of the
    /// routes behind it).
    #[cfg(test)]
    pub(crate) fn grant_for_test(&mut self, token: &str) {
        self.tokens.insert(token.to_owned(), Instant::now() + Duration::from_secs(3600));
    }

    /// Whether `headers` carry a token this endpoint granted that has not
    /// expired.
    pub(crate) fn check_bearer(&self, headers: &HeaderMap) -> Result<(), Refused> {
        let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let token = given.and_then(|v| v.strip_prefix("Bearer ")).ok_or(Refused::Missing)?;
        match self.tokens.get(token) {
            Some(expires) if *expires > Instant::now() => Ok(()),
            Some(_) => Err(Refused::Expired),
            None => Err(Refused::Invalid),
        }
    }
}

/// The routes of the Google side (merged into the mock's router): the
/// token endpoint.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(google: MockGoogle) -> Router<S> {
    Router::new().route("/token", post(token)).with_state(google)
}

/// `POST /token`: the JWT-bearer grant.
async fn token(State(google): State<MockGoogle>, Form(form): Form<HashMap<String, String>>) -> Response {
    let delay = google.lock().token_delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if form.get("grant_type").map(String::as_str) != Some(GRANT_TYPE) {
        let given = form.get("grant_type").cloned().unwrap_or_default();
        return oauth_error("unsupported_grant_type", &format!("Invalid grant_type: {given}"));
    }
    let Some(assertion) = form.get("assertion") else {
        return oauth_error("invalid_request", "Missing required parameter: assertion");
    };
    let mut auth = google.lock();
    let (header, claims, outcome) = match decode(assertion) {
        Ok(jws) => {
            let outcome = auth.judge(&jws);
            (jws.header, jws.claims, outcome)
        }
        Err(reason) => (Value::Null, Value::Null, Err(("invalid_grant", reason.to_owned()))),
    };
    let refusal = outcome.as_ref().err().map(|(_, d)| d.clone());
    auth.exchanges.push(Exchange { claims, header, granted: outcome.is_ok(), refusal });
    match outcome {
        Ok(()) => {
            auth.next += 1;
            let token = format!("ya29.mock-access-token-{}-{}", auth.next, auth.addr.port());
            let lifetime = auth.token_lifetime;
            auth.tokens.insert(token.clone(), Instant::now() + lifetime);
            let body = json!({ "access_token": token, "expires_in": lifetime.as_secs(), "token_type": "Bearer" });
            (StatusCode::OK, axum::Json(body)).into_response()
        }
        Err((error, description)) => oauth_error(error, &description),
    }
}

impl Auth {
    /// Whether an assertion is to be granted: `Err((error, description))` as
    /// Google's endpoint refuses.
    fn judge(&self, jws: &Jws) -> Result<(), (&'static str, String)> {
        let (header, claims) = (&jws.header, &jws.claims);
        let invalid = |d: &str| Err(("invalid_grant", d.to_owned()));
        if header["alg"] != "RS256" {
            return invalid("Invalid JWT: the algorithm must be RS256.");
        }
        let Some(key) = claims["iss"].as_str().and_then(|iss| self.accounts.get(iss)) else {
            return invalid("Invalid grant: account not found");
        };
        let verifier = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key);
        if verifier.verify(&jws.signing_input, &jws.signature).is_err() {
            return invalid("Invalid JWT Signature.");
        }
        if claims["aud"].as_str() != Some(format!("http://{}/token", self.addr).as_str()) {
            return invalid("Invalid JWT: Failed audience check.");
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let (iat, exp) = (claims["iat"].as_i64().unwrap_or(0), claims["exp"].as_i64().unwrap_or(0));
        if iat > now + 60 || exp <= now || exp - iat > 3600 {
            return invalid(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.",
            );
        }
        let scopes = claims["scope"].as_str().unwrap_or_default();
        if !scopes.split(' ').any(|s| s == SCOPE) {
            return Err(("invalid_scope", "Invalid OAuth scope or ID token audience provided.".to_owned()));
        }
        Ok(())
    }
}

/// The header, claims, signed part and signature of a compact JWS.
fn decode(assertion: &str) -> Result<Jws, &'static str> {
    let parts: Vec<&str> = assertion.split('.').collect();
    let [header, claims, signature] = parts.as_slice() else {
        return Err("Invalid JWT: the assertion is not a signed JWT.");
    };
    let json =
        |part: &str| URL_SAFE_NO_PAD.decode(part).ok().and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    let (Some(header_json), Some(claims_json)) = (json(header), json(claims)) else {
        return Err("Invalid JWT: the header or claims are not base64url JSON.");
    };
    let signature = URL_SAFE_NO_PAD.decode(signature).map_err(|_| "Invalid JWT Signature.")?;
    Ok(Jws {
        header: header_json,
        claims: claims_json,
        signing_input: format!("{header}.{claims}").into_bytes(),
        signature,
    })
}

/// An OAuth error answer: `{"error", "error_description"}`, 400.
fn oauth_error(error: &str, description: &str) -> Response {
    let body = json!({ "error": error, "error_description": description });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// A service-account key JSON named after `name`, with a new RSA key and
/// `token_uri`; its `client_email` and public key (DER).
fn new_account(name: &str, token_uri: &str) -> (String, String, Vec<u8>) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).expect("an RSA key for the test service account");
    let email = format!("{name}@mock-project.iam.gserviceaccount.com");
    let key_id = format!("{:040x}", rand_id());
    let json = json!({
        "type": "service_account",
        "project_id": "mock-project",
        "private_key_id": key_id,
        "private_key": key.serialize_pem(),
        "client_email": email,
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": format!("https://www.googleapis.com/robot/v1/metadata/x509/{name}"),
        "universe_domain": "googleapis.com"
    });
    (json.to_string(), email, key.public_key_raw().to_vec())
}

/// A number that differs between calls, for key ids.
fn rand_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 32 | u64::from(nanos)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::mock::upstream::MockUpstream;

    fn now() -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
    }

    /// An assertion for `account` (a key JSON) with `claims` over the usual ones.
    fn assertion(account: &str, claims: Value) -> String {
        let _ = jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER.install_default();
        let account: Value = serde_json::from_str(account).unwrap();
        let mut all = json!({
            "iss": account["client_email"],
            "scope": SCOPE,
            "aud": account["token_uri"],
            "iat": now(),
            "exp": now() + 3600,
        });
        all.as_object_mut().unwrap().extend(claims.as_object().unwrap().clone());
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(account["private_key"].as_str().unwrap().as_bytes()).unwrap();
        jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256), &all, &key).unwrap()
    }

    async fn exchange(google: &MockGoogle, assertion: &str) -> (u16, Value) {
        let response = reqwest::Client::new()
            .post(google.token_url())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("grant_type={}&assertion={assertion}", GRANT_TYPE.replace(':', "%3A")))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    async fn vertex(google: &MockGoogle, token: Option<&str>) -> u16 {
        let url =
            format!("{}/publishers/google/models/gemini-2.5-pro:generateContent", google.vertex_base_url("p", "l"));
        let mut request = reqwest::Client::new()
            .post(url)
            .json(&json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] }));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.unwrap().status().as_u16()
    }

    #[tokio::test]
    async fn a_signed_assertion_gets_a_token_that_opens_vertex_until_it_expires() {
        let mock = MockUpstream::start().await.unwrap();
        let google = mock.google();
        let account = google.service_account("gw");
        let (status, granted) = exchange(&google, &assertion(&account, json!({}))).await;
        assert_eq!(status, 200, "{granted}");
        assert_eq!(granted["token_type"], "Bearer");
        assert_eq!(granted["expires_in"], 3600);
        let token = granted["access_token"].as_str().unwrap();
        assert_eq!(vertex(&google, Some(token)).await, 200);
        assert_eq!(vertex(&google, None).await, 401);
        assert_eq!(vertex(&google, Some("ya29.made-up")).await, 401);
        assert_eq!(google.tokens_granted(), 1);
        assert_eq!(google.exchanges()[0].claims["iss"], "gw@mock-project.iam.gserviceaccount.com");

        google.set_token_lifetime(Duration::ZERO);
        let (_, granted) = exchange(&google, &assertion(&account, json!({}))).await;
        assert_eq!(granted["expires_in"], 0);
        assert_eq!(vertex(&google, granted["access_token"].as_str()).await, 401, "an expired token is refused");
    }

    #[tokio::test]
    async fn assertions_are_refused_as_google_refuses_them() {
        let mock = MockUpstream::start().await.unwrap();
        let google = mock.google();
        let account = google.service_account("gw");
        let unknown = google.unknown_service_account("gone");
        let mut forged: Value = serde_json::from_str(&google.unknown_service_account("gw")).unwrap();
        forged["client_email"] = serde_json::from_str::<Value>(&account).unwrap()["client_email"].clone();
        let cases = [
            (assertion(&unknown, json!({})), "invalid_grant", "Invalid grant: account not found"),
            (assertion(&forged.to_string(), json!({})), "invalid_grant", "Invalid JWT Signature."),
            (
                assertion(&account, json!({ "aud": "https://oauth2.googleapis.com/token" })),
                "invalid_grant",
                "Invalid JWT: Failed audience check.",
            ),
            (
                assertion(&account, json!({ "exp": now() - 10, "iat": now() - 100 })),
                "invalid_grant",
                "Invalid JWT: Token must be",
            ),
            (assertion(&account, json!({ "exp": now() + 7200 })), "invalid_grant", "Invalid JWT: Token must be"),
            (
                assertion(&account, json!({ "scope": "https://www.googleapis.com/auth/devstorage.read_only" })),
                "invalid_scope",
                "Invalid OAuth scope",
            ),
            ("not.a-jwt".to_owned(), "invalid_grant", "Invalid JWT"),
        ];
        for (assertion, error, description) in cases {
            let (status, body) = exchange(&google, &assertion).await;
            assert_eq!((status, body["error"].as_str()), (400, Some(error)), "{body}");
            assert!(body["error_description"].as_str().unwrap().starts_with(description), "{body}");
        }
        assert_eq!(google.tokens_granted(), 0);
        assert_eq!(google.exchanges().len(), 7);

        let response = reqwest::Client::new()
            .post(google.token_url())
            .header("content-type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials&assertion=x")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
        assert_eq!(response.json::<Value>().await.unwrap()["error"], "unsupported_grant_type");
    }
}
