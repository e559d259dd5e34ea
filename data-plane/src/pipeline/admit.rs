//! The first step of every `/v1` request: one snapshot load, the client's
//! address, authentication and the access checks of the error catalogue in
//! its order, then (for requests that spend) the rate limit. The result is
//! one value the later steps read instead of looking anything up again.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Instant,
};

use axum::{
    body::Body,
    extract::{ConnectInfo, Request},
    http::request::Parts,
};

use super::{App, RequestId};
use crate::{
    error::{ProxyError, Shape},
    meter::Charge,
    now_unix,
    policy::auth::{self, Access, Caller},
    policy::client_ip::client_ip,
    policy::domain::Model,
    policy::inflight::SlotGuard,
    policy::snapshot::Snapshot,
    trail::Trail,
};

/// A request that passed admission.
pub struct Admitted {
    pub id: RequestId,
    /// When the gateway received the request.
    pub started: Instant,
    /// The one snapshot this request sees, whatever updates arrive meanwhile.
    pub snapshot: Arc<Snapshot>,
    pub caller: Caller,
    pub parts: Parts,
    /// Where the later steps note what they learn, for the access log.
    pub trail: Arc<Trail>,
    /// The request's in-flight slots: given back when the last of this and
    /// its charges' copies lets go, or when its usage is recorded.
    pub in_flight: Arc<Mutex<Option<SlotGuard>>>,
}

/// Admits `request`: loads the snapshot once, authenticates and authorizes
/// the caller for `access`, and takes a rate-limit permit when the request
/// spends. Returns the request's state and its unread body (kept apart: a
/// body is not `Sync`, the state is shared by reference across awaits).
/// Fails with the first refusal of the error catalogue.
pub async fn admit(app: &App, request: Request, access: Access) -> Result<(Admitted, Body), ProxyError> {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let id = parts.extensions.get::<RequestId>().cloned().unwrap_or_default();
    let trail = parts.extensions.get::<Arc<Trail>>().cloned().unwrap_or_default();
    let snapshot = app.snapshot.load_full();
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let ip = client_ip(peer, &parts.headers, &app.trusted_proxies);
    // Only Gemini's API takes the key in the query: elsewhere a query may
    // be passed on upstream, and the key with it.
    let query = parts.uri.query().filter(|_| Shape::for_path(parts.uri.path()) == Shape::Gemini);
    let caller = auth::authorize(&snapshot, Some(&app.budgets), &parts.headers, query, ip, now_unix(), access)?;
    trail.update(|t| {
        t.token = Some(caller.token.id.to_string());
        t.account = Some(caller.token.account_id.clone());
        t.group = Some(caller.token.group.clone());
    });
    let mut in_flight = None;
    if access == Access::Spend {
        app.limits.check(&caller).await?;
        in_flight = Some(app.in_flight.acquire(&caller).await?);
    }
    let in_flight = Arc::new(Mutex::new(in_flight));
    Ok((Admitted { id, started, snapshot, caller, parts, trail, in_flight }, body))
}

// === impl Admitted ===

impl Admitted {
    /// The scope of this request's upstream attempts.
    pub fn scope(&self) -> super::Scope<'_> {
        super::Scope {
            request_id: &self.id.0,
            client: &self.caller.token.id,
            trail: &self.trail,
            started: self.started,
            endpoint: self.parts.uri.path(),
            session: None,
        }
    }

    /// The scope of this request's upstream attempts, bound to the
    /// conversation its headers or `body` name (see `affinity`) for `model`.
    pub fn scope_in_conversation(
        &self,
        app: &super::App,
        body: Option<&crate::json_body::JsonBody>,
        model: &str,
    ) -> super::Scope<'_> {
        let session = app.upstreams.affinity.session(&self.parts.headers, body, model, &self.caller.group.name);
        super::Scope { session, ..self.scope() }
    }

    /// What this request to `endpoint` for `model` is billed as, before a
    /// channel is chosen.
    pub fn charge(&self, model: Arc<Model>, endpoint: &'static str) -> Charge {
        let caller = &self.caller;
        Charge {
            request_id: self.id.0.clone(),
            token_id: caller.token.id.as_ref().into(),
            // The token's own copies (the account and group it names).
            account_id: caller.token.account_id.clone(),
            group: caller.token.group.clone(),
            model,
            channel_id: Arc::default(),
            endpoint,
            ratio_ppm: caller.group.ratio_ppm,
            started: self.started,
            reservation: Arc::default(),
            tokens: Arc::default(),
            in_flight: self.in_flight.clone(),
            traced: crate::telemetry::Traced::current(self.trail.clone()),
        }
    }

    /// Reads the whole `body` of this request (see `read_body`).
    pub async fn read_body(&self, body: Body) -> Result<bytes::Bytes, ProxyError> {
        let bytes = super::read_body(body, &self.parts.headers).await?;
        crate::telemetry::request_body(&bytes);
        Ok(bytes)
    }
}
