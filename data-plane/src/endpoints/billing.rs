//! The balance endpoints chat front-ends (NextChat, LobeChat and the like)
//! call to show what a key has left, in the shape of OpenAI's old billing
//! API: `/dashboard/billing/subscription` (the limit) and
//! `/dashboard/billing/usage` (what was spent, in cents), with and without
//! the `/v1` prefix, for the calling token: its quota as the limit and
//! what it used, or for an unlimited token its account's balance and
//! spending. What is left is asked of the control plane (leasing nothing),
//! since spending is not in the snapshot's deltas; without an answer the
//! snapshot's figures stand. Spending is to date, whatever range the caller
//! names: no history by day is kept at hand.

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::{Request, State},
    response::{IntoResponse as _, Response},
    routing::get,
};
use serde_json::json;

use crate::{
    error::ProxyError,
    pipeline::{self, App},
    policy::auth::{Access, Caller},
};

/// The limit shown for a token and account that both have none, in USD
/// (the figure front-ends are used to seeing for "no limit").
const NO_LIMIT_USD: f64 = 100_000_000.0;

/// The routes, both with and without `/v1`.
pub fn routes() -> Router<Arc<App>> {
    ["/v1", ""].into_iter().fold(Router::new(), |router, prefix| {
        router
            .route(&format!("{prefix}/dashboard/billing/subscription"), get(subscription))
            .route(&format!("{prefix}/dashboard/billing/usage"), get(usage))
    })
}

/// What the caller may spend in all and has spent, in micro-USD; `None`
/// for the limit when there is none. An account's limit is what it had
/// spent and had left at the snapshot; its spending, that less what is left
/// now.
async fn standing(app: &App, caller: &Caller) -> (Option<i64>, i64) {
    let (token, account) = (&caller.token, &caller.account);
    let left_now = |budget: String, known: i64| async move {
        app.budgets.remaining(&[budget]).await.and_then(|left| left.first().copied()).unwrap_or(known)
    };
    if !token.unlimited {
        let left = left_now(["token:", &token.id].concat(), token.quota_micros - token.used_micros).await;
        (Some(token.quota_micros), token.quota_micros.saturating_sub(left))
    } else if !account.unlimited {
        let limit = account.used_micros.saturating_add(account.balance_micros.max(0));
        let left = left_now(["account:", &account.id].concat(), account.balance_micros).await;
        (Some(limit), limit.saturating_sub(left.max(0)))
    } else {
        (None, account.used_micros)
    }
}

fn usd(micros: i64) -> f64 {
    micros as f64 / 1e6
}

/// `GET /dashboard/billing/subscription`: the limit as soft, hard and
/// system limit, and when the token expires (0: never).
async fn subscription(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, _) = pipeline::admit(&app, request, Access::Read).await?;
    let caller = &admitted.caller;
    let limit = standing(&app, caller).await.0.map_or(NO_LIMIT_USD, usd);
    Ok(Json(json!({
        "object": "billing_subscription",
        "has_payment_method": true,
        "soft_limit_usd": limit,
        "hard_limit_usd": limit,
        "system_hard_limit_usd": limit,
        "access_until": caller.token.restrictions().expires_at,
    }))
    .into_response())
}

/// `GET /dashboard/billing/usage`: what was spent, in US cents.
async fn usage(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, _) = pipeline::admit(&app, request, Access::Read).await?;
    let cents = usd(standing(&app, &admitted.caller).await.1) * 100.0;
    Ok(Json(json!({ "object": "list", "total_usage": cents })).into_response())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::{collections::HashMap, time::Duration};

    use axum::{body::Body, http::StatusCode};
    use tower::ServiceExt as _;

    use super::*;
    use crate::http::{
        router,
        tests::{KEY, app, json_body, policy},
    };
    use crate::policy::budget::{Ask, Budgets, Config, Grant, Grants, SourceError, SpendSource};
    use crate::policy::domain::{Account, Resource, Token};
    use crate::policy::snapshot::{Snapshot, tests as fx};

    /// A control plane that says what is left of each budget it knows, and
    /// cannot be reached when it knows none.
    struct Left(HashMap<String, i64>);

    impl SpendSource for Left {
        fn acquire(&self, asks: Vec<Ask>, ttl: Duration) -> Grants {
            let grants: Option<Vec<Grant>> = asks
                .iter()
                .map(|ask| {
                    self.0.get(&ask.budget).map(|left| Grant { remaining: *left, available: *left, ..Grant::default() })
                })
                .collect();
            Box::pin(async move {
                let down = || SourceError::Call("no control plane".into());
                grants.map(|grants| (grants, ttl, 1)).ok_or_else(down)
            })
        }

        fn give_back(&self, _: Vec<(String, i64)>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
            Box::pin(async {})
        }
    }

    async fn get(snapshot: Snapshot, left: &[(&str, i64)], path: &str, key: &str) -> (StatusCode, serde_json::Value) {
        let mut app = Arc::into_inner(app(snapshot)).unwrap();
        let left = Left(left.iter().map(|(budget, micros)| ((*budget).to_owned(), *micros)).collect());
        app.budgets = Budgets::new(Arc::new(left), Config::default(), None);
        let request = axum::http::Request::builder().uri(path).header("authorization", format!("Bearer {key}"));
        let response = router(Arc::new(app)).oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
        (response.status(), json_body(response).await)
    }

    fn limited(quota_micros: i64, used_micros: i64) -> Token {
        Token { unlimited: false, quota_micros, used_micros, ..fx::token("t1", KEY) }
    }

    #[tokio::test]
    async fn a_limited_token_shows_its_quota_and_what_the_control_plane_says_it_used_on_both_paths() {
        for prefix in ["/v1", ""] {
            // The snapshot says 0.25 USD used; the control plane, 3.75 left.
            let snapshot = policy(limited(5_000_000, 250_000), 0);
            let left = [("token:t1", 3_750_000)];
            let path = format!("{prefix}/dashboard/billing/subscription");
            let (status, sub) = get(snapshot.clone(), &left, &path, KEY).await;
            assert_eq!(status, StatusCode::OK, "{prefix}");
            assert_eq!(sub["object"], "billing_subscription");
            assert_eq!(sub["hard_limit_usd"], 5.0);
            assert_eq!(sub["soft_limit_usd"], 5.0);
            assert_eq!(sub["access_until"], 0);
            let path = format!("{prefix}/dashboard/billing/usage?start_date=2026-11-01&end_date=2026-11-28");
            let (status, usage) = get(snapshot, &left, &path, KEY).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(usage["object"], "list");
            assert_eq!(usage["total_usage"], 125.0, "1.25 USD in cents");
        }
    }

    #[tokio::test]
    async fn without_the_control_plane_the_snapshots_figures_stand() {
        let snapshot = policy(limited(5_000_000, 250_000), 0);
        let (status, usage) = get(snapshot, &[], "/v1/dashboard/billing/usage", KEY).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(usage["total_usage"], 25.0);
    }

    #[tokio::test]
    async fn an_unlimited_token_shows_its_accounts_balance_and_spending() {
        let token = Token { unlimited: true, ..fx::token("t1", KEY) };
        let snapshot = policy(token, 3_000_000);
        let account = Account { used_micros: 500_000, ..(**snapshot.account("a1").unwrap()).clone() };
        let snapshot = snapshot.apply(4, [Resource::Account(account)], []);
        let left = [("account:a1", 2_000_000)];
        let (_, sub) = get(snapshot.clone(), &left, "/v1/dashboard/billing/subscription", KEY).await;
        assert_eq!(sub["hard_limit_usd"], 3.5, "spent and left at the snapshot");
        let (_, usage) = get(snapshot, &left, "/v1/dashboard/billing/usage", KEY).await;
        assert_eq!(usage["total_usage"], 150.0, "3.5 USD less the 2 USD left");
    }

    #[tokio::test]
    async fn the_balance_needs_a_valid_key() {
        let (status, body) = get(policy(limited(1, 0), 0), &[], "/v1/dashboard/billing/subscription", "sk-wrong").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"]["type"], "authentication_error");
    }
}
