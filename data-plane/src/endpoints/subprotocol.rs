//! The key a browser's WebSocket sends: browsers cannot set headers on an
//! upgrade, so OpenAI's clients offer it as a subprotocol
//! (`Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.sk-…`). It
//! becomes the `Authorization` header admission reads, so authentication
//! stays in one place; the key is never echoed back, only the protocol.

use axum::http::{HeaderMap, HeaderValue, header};

/// The subprotocol prefix that carries the key.
const KEY_PREFIX: &str = "openai-insecure-api-key.";

/// Moves a key offered as a subprotocol into `Authorization: Bearer` when
/// `headers` carry no key of their own; a key in a header wins.
pub fn lift_key(headers: &mut HeaderMap) {
    if crate::policy::auth::client_key(headers).is_ok() {
        return;
    }
    let key = offered(headers).find_map(|p| p.strip_prefix(KEY_PREFIX).map(str::to_owned));
    if let Some(value) = key.and_then(|k| HeaderValue::from_str(&format!("Bearer {k}")).ok()) {
        headers.insert(header::AUTHORIZATION, value);
    }
}

/// Whether the client offered subprotocol `name` (answered with it alone).
pub fn offers(headers: &HeaderMap, name: &str) -> bool {
    offered(headers).any(|p| p == name)
}

/// Every subprotocol offered, in order.
fn offered(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        pairs.iter().map(|(n, v)| (n.clone(), HeaderValue::from_str(v).unwrap())).collect()
    }

    #[test]
    fn a_key_offered_as_a_subprotocol_becomes_the_bearer_key() {
        let mut h = headers(&[(
            header::SEC_WEBSOCKET_PROTOCOL,
            "realtime, openai-insecure-api-key.sk-abc, openai-beta.realtime-v1",
        )]);
        lift_key(&mut h);
        assert_eq!(h[header::AUTHORIZATION], "Bearer sk-abc");
        assert!(offers(&h, "realtime") && !offers(&h, "sk-abc"));
        let mut both = headers(&[
            (header::AUTHORIZATION, "Bearer sk-header"),
            (header::SEC_WEBSOCKET_PROTOCOL, "realtime, openai-insecure-api-key.sk-other"),
        ]);
        lift_key(&mut both);
        assert_eq!(both[header::AUTHORIZATION], "Bearer sk-header", "a header's key wins");
        let mut none = headers(&[(header::SEC_WEBSOCKET_PROTOCOL, "realtime")]);
        lift_key(&mut none);
        assert!(!none.contains_key(header::AUTHORIZATION));
    }
}
