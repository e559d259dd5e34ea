//! Who is calling and whether they may: the key, the token's state, quota and
//! source address, the account and the group, checked against one snapshot
//! in one fixed order so each refusal has exactly one message.

use std::{net::IpAddr, sync::Arc};

use axum::http::HeaderMap;
use sha2::{Digest as _, Sha256};

use crate::{
    error::ProxyError,
    policy::budget::Budgets,
    policy::client_ip,
    policy::domain::{Account, Group, KeyHash, Token},
    policy::snapshot::Snapshot,
};

/// An authenticated, authorized caller: the request extension later steps
/// read instead of looking anything up again.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token: Arc<Token>,
    pub account: Arc<Account>,
    pub group: Arc<Group>,
}

/// Whether the request spends money (quota and balance are checked) or only
/// reads (listing models).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Spend,
    Read,
}

/// The client key from `Authorization: Bearer <key>`, `x-api-key: <key>`
/// or (as Gemini clients send it) `x-goog-api-key: <key>`, in that order.
/// Anything else (no header, another scheme, extra spaces) is `MissingToken`.
pub fn client_key(headers: &HeaderMap) -> Result<&str, ProxyError> {
    if let Some(key) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|k| valid_key(k))
    {
        return Ok(key);
    }
    ["x-api-key", "x-goog-api-key"]
        .iter()
        .find_map(|name| headers.get(*name).and_then(|v| v.to_str().ok()).filter(|k| valid_key(k)))
        .ok_or(ProxyError::MissingToken)
}

/// The client key from the headers (`client_key`), else from the `key=`
/// parameter of `query` (Gemini's API-key parameter), taken as it is
/// written: gateway keys need no percent-encoding.
pub fn request_key<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Result<&'a str, ProxyError> {
    client_key(headers).or_else(|missing| {
        query
            .into_iter()
            .flat_map(|query| query.split('&'))
            .find_map(|pair| pair.strip_prefix("key="))
            .filter(|k| valid_key(k))
            .ok_or(missing)
    })
}

fn valid_key(key: &str) -> bool {
    // Header values are ASCII: a byte test then, the same as `char`'s.
    let spaced = if key.is_ascii() {
        key.bytes().any(|b| b.is_ascii_whitespace() || b == 0x0b)
    } else {
        key.contains(char::is_whitespace)
    };
    !key.is_empty() && !spaced
}

/// What the snapshot indexes tokens by: SHA-256 of the whole key string.
pub fn hash_key(key: &str) -> KeyHash {
    Sha256::digest(key.as_bytes()).into()
}

/// Runs checks 1–6 of the error catalogue for the request's `headers` and
/// `query` (the key's places, see `request_key`) coming from `ip`, at Unix time `now`. Spend seen locally but not yet in
/// the snapshot's quota and balance, or a recent refusal of the budget step
/// (`budgets`, none in tests), refuse spending requests in the catalogue's order.
pub fn authorize(
    snapshot: &Snapshot,
    budgets: Option<&Budgets>,
    headers: &HeaderMap,
    query: Option<&str>,
    ip: Option<IpAddr>,
    now: i64,
    access: Access,
) -> Result<Caller, ProxyError> {
    let key = request_key(headers, query)?;
    let token = snapshot.token(&hash_key(key)).ok_or(ProxyError::InvalidToken)?;
    let expires_at = token.restrictions().expires_at;
    if !token.enabled || (expires_at != 0 && expires_at <= now) {
        return Err(ProxyError::InvalidToken);
    }
    let short = |kind: &str, id: &str| budgets.and_then(|b| b.known_short_of(kind, id, snapshot.revision));
    if access == Access::Spend
        && !token.unlimited
        && (token.used_micros >= token.quota_micros || short("token:", &token.id).is_some())
    {
        return Err(ProxyError::TokenQuotaExhausted);
    }
    if !client_ip::allowed(ip, &token.restrictions().allow_ips) {
        return Err(ProxyError::IpNotAllowed);
    }
    let account = snapshot.account(&token.account_id).filter(|a| a.enabled).ok_or(ProxyError::InvalidToken)?;
    let group_name: &str = &token.group;
    if !account.groups.is_empty() && !account.groups.iter().any(|g| g == group_name) {
        return Err(ProxyError::GroupForbidden { group: group_name.to_owned() });
    }
    let group =
        snapshot.group(group_name).ok_or_else(|| ProxyError::GroupForbidden { group: group_name.to_owned() })?;
    if group.deprecated {
        return Err(ProxyError::GroupDeprecated { group: group_name.to_owned() });
    }
    if access == Access::Spend && !account.unlimited {
        if account.balance_micros <= 0 {
            return Err(ProxyError::InsufficientUserQuota { balance_micros: account.balance_micros });
        }
        if let Some(balance_micros) = short("account:", &account.id) {
            return Err(ProxyError::InsufficientUserQuota { balance_micros });
        }
    }
    Ok(Caller { token: token.clone(), account: account.clone(), group: group.clone() })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use crate::{
        policy::client_ip::parse_allow_ip,
        policy::domain::{RateLimit, Resource, Restrictions},
        policy::snapshot::tests as fx,
    };

    const KEY: &str = "sk-test-key";

    proptest::proptest! {
        #[test]
        fn a_key_is_valid_when_it_is_not_empty_and_holds_no_whitespace(key in "[ -~\t\n\x0b\x0c\r\u{85}\u{a0}\u{2028}é]{0,12}") {
            let general = !key.is_empty() && !key.chars().any(char::is_whitespace);
            proptest::prop_assert_eq!(valid_key(&key), general);
        }
    }

    fn account(balance: i64) -> Account {
        Account {
            id: "a1".into(),
            name: "a".into(),
            balance_micros: balance,
            unlimited: false,
            groups: vec![],
            enabled: true,
            used_micros: 0,
            created_at: 0,
        }
    }

    fn group(name: &str, deprecated: bool) -> Group {
        Group {
            name: name.into(),
            ratio_ppm: 1_000_000,
            ratio: 1.0,
            deprecated,
            description: String::new(),
            rate_limit: RateLimit::default(),
            tokens_per_minute: 0,
            max_in_flight: 0,
        }
    }

    fn snapshot(token: Token, account: Account) -> Snapshot {
        Snapshot::build(
            1,
            [
                Resource::Token(token),
                Resource::Account(account),
                Resource::Group(group("default", false)),
                Resource::Group(group("old", true)),
            ],
        )
    }

    fn bearer(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_str(value).unwrap());
        h
    }

    fn check(token: Token, account: Account, headers: &HeaderMap, ip: &str) -> Result<Caller, ProxyError> {
        let snap = snapshot(token, account);
        authorize(&snap, None, headers, None, Some(ip.parse().unwrap()), 1000, Access::Spend)
    }

    #[test]
    fn key_must_be_exactly_bearer_or_x_api_key() {
        assert_eq!(client_key(&bearer("Bearer sk-1")), Ok("sk-1"));
        for bad in ["sk-1", "bearer sk-1", "Bearer  sk-1", "Bearer sk-1 ", "Bearer ", "Basic sk-1"] {
            assert_eq!(client_key(&bearer(bad)), Err(ProxyError::MissingToken), "{bad:?}");
        }
        let mut h = HeaderMap::new();
        assert_eq!(client_key(&h), Err(ProxyError::MissingToken));
        h.insert("x-api-key", HeaderValue::from_static("sk-2"));
        assert_eq!(client_key(&h), Ok("sk-2"));
    }

    #[test]
    fn gemini_clients_may_send_the_key_as_x_goog_api_key_or_key_in_the_query() {
        let mut h = HeaderMap::new();
        h.insert("x-goog-api-key", HeaderValue::from_static("sk-3"));
        assert_eq!(client_key(&h), Ok("sk-3"));
        assert_eq!(request_key(&h, Some("key=sk-4")), Ok("sk-3"), "a header wins over the query");
        let none = HeaderMap::new();
        assert_eq!(request_key(&none, Some("alt=sse&key=sk-4")), Ok("sk-4"));
        assert_eq!(request_key(&none, Some("alt=sse&apikey=sk-4")), Err(ProxyError::MissingToken));
        assert_eq!(request_key(&none, Some("key=")), Err(ProxyError::MissingToken));
        assert_eq!(request_key(&none, None), Err(ProxyError::MissingToken));
    }

    #[test]
    fn checks_run_in_catalogue_order() {
        let ok = bearer(&format!("Bearer {KEY}"));
        let base = fx::token("t1", KEY);
        assert!(check(base.clone(), account(1), &ok, "1.2.3.4").is_ok());
        assert_eq!(
            check(base.clone(), account(1), &bearer("Bearer sk-other"), "1.2.3.4").unwrap_err(),
            ProxyError::InvalidToken
        );
        // Truncated key: a different hash.
        assert_eq!(
            check(base.clone(), account(1), &bearer("Bearer sk-test-ke"), "1.2.3.4").unwrap_err(),
            ProxyError::InvalidToken
        );

        let disabled = Token { enabled: false, ..base.clone() };
        assert_eq!(check(disabled, account(1), &ok, "1.2.3.4").unwrap_err(), ProxyError::InvalidToken);
        let expired = base.clone().restricted(Restrictions { expires_at: 1000, ..Restrictions::default() });
        assert_eq!(check(expired, account(1), &ok, "1.2.3.4").unwrap_err(), ProxyError::InvalidToken);
        let later = base.clone().restricted(Restrictions { expires_at: 1001, ..Restrictions::default() });
        assert!(check(later, account(1), &ok, "1.2.3.4").is_ok());

        // Quota comes before the IP check and the account's balance.
        let spent = Token { unlimited: false, quota_micros: 10, used_micros: 10, ..base.clone() };
        let fence = Restrictions { allow_ips: vec![parse_allow_ip("10.0.0.0/8").unwrap()], ..Restrictions::default() };
        let spent_and_fenced = spent.restricted(fence.clone());
        assert_eq!(check(spent_and_fenced, account(0), &ok, "1.2.3.4").unwrap_err(), ProxyError::TokenQuotaExhausted);

        let fenced = base.clone().restricted(fence);
        assert_eq!(check(fenced.clone(), account(0), &ok, "1.2.3.4").unwrap_err(), ProxyError::IpNotAllowed);
        assert!(check(fenced, account(1), &ok, "10.2.3.4").is_ok());

        let closed = Account { enabled: false, ..account(1) };
        assert_eq!(check(base.clone(), closed, &ok, "1.2.3.4").unwrap_err(), ProxyError::InvalidToken);
        let vip_only = Account { groups: vec!["vip".into()], ..account(1) };
        assert_eq!(
            check(base.clone(), vip_only, &ok, "1.2.3.4").unwrap_err(),
            ProxyError::GroupForbidden { group: "default".into() }
        );
        let in_old = Token { group: "old".into(), ..base.clone() };
        assert_eq!(
            check(in_old, account(1), &ok, "1.2.3.4").unwrap_err(),
            ProxyError::GroupDeprecated { group: "old".into() }
        );
        let in_missing = Token { group: "ghost".into(), ..base.clone() };
        assert_eq!(
            check(in_missing, account(1), &ok, "1.2.3.4").unwrap_err(),
            ProxyError::GroupForbidden { group: "ghost".into() }
        );
        assert_eq!(
            check(base.clone(), account(0), &ok, "1.2.3.4").unwrap_err(),
            ProxyError::InsufficientUserQuota { balance_micros: 0 }
        );
        let rich_enough = Account { unlimited: true, ..account(-5) };
        assert!(check(base, rich_enough, &ok, "1.2.3.4").is_ok());
    }
}
