//! The request pipeline every `/v1` handler runs, each step written once:
//! `admit` (request id, one snapshot, client address, authentication and
//! access checks, rate limit) → the handler's own parse → `route` (model
//! allowlist, catalogue, endpoint category, channels) → `reserve` (the
//! request's bounded cost from the spending budgets) → `attempts` over the
//! channels with a provider adapter → metering (`meter`, which settles the
//! reservation). Handlers return
//! `Result<Response, ProxyError>`; the HTTP layer renders refusals.

mod admit;
mod attempts;
pub(crate) mod body;
mod reserve;
mod route;

pub use self::{
    admit::{Admitted, admit},
    attempts::{Scope, run as attempts},
    body::read_body,
    reserve::{Bound, reserve},
    route::route,
};

use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use ipnet::IpNet;

use crate::{
    meter::UsageSink, policy::budget::Budgets, policy::limits::Limiter, policy::snapshot::Snapshot, provider::Upstreams,
};

/// Everything a request needs, shared by all requests.
pub struct App {
    /// The policy in use; a request loads it once.
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub usage: UsageSink,
    pub upstreams: Upstreams,
    /// Peers whose `X-Forwarded-For` / `X-Real-IP` are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Request-rate and tokens-per-minute limits, shared with the other data planes.
    pub limits: Limiter,
    /// Requests-in-flight limits, shared with the other data planes.
    pub in_flight: crate::policy::inflight::InFlight,
    /// Spending budgets leased from the control plane.
    pub budgets: Budgets,
    /// Video tasks: the control plane's answers and the upstreams' files.
    pub videos: crate::videos::Videos,
    /// Counters the heartbeats report.
    pub vitals: Arc<crate::vitals::Vitals>,
}

/// The id of one request, as sent in `x-request-id` and error messages.
#[derive(Debug, Clone, Default)]
pub struct RequestId(pub Arc<str>);

/// What the pipeline learned about one request, for its access log line:
/// filled in by the steps as they run, read once the response is ready.
#[derive(Debug, Default)]
pub struct Trail {
    inner: Mutex<TrailFields>,
}

/// The fields of a `Trail`.
#[derive(Debug, Default, Clone)]
pub struct TrailFields {
    pub token: Option<String>,
    /// Shared with the caller's token (the same values as its account's
    /// id and group's name): noting them copies nothing.
    pub account: Option<Arc<str>>,
    pub group: Option<Arc<str>>,
    pub model: Option<String>,
    pub channel: Option<String>,
    /// The channel's provider (`gen_ai.provider.name`).
    pub provider: Option<&'static str>,
    /// The model name the channel was asked for, after its mapping.
    pub upstream_model: Option<String>,
    pub attempts: u32,
    /// What the request cost, once its usage was recorded (before the
    /// response for whole answers, at the end for streams).
    pub cost_micros: Option<i64>,
}

// === impl App ===

impl App {
    /// What an upstream attempt needs from the shared state.
    pub fn attempt(&self) -> crate::provider::Attempt<'_> {
        crate::provider::Attempt { upstreams: &self.upstreams, usage: &self.usage }
    }
}

// === impl Trail ===

impl Trail {
    /// Changes the fields with `f`.
    pub fn update(&self, f: impl FnOnce(&mut TrailFields)) {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// What `f` makes of the fields, read in place.
    pub fn read<R>(&self, f: impl FnOnce(&TrailFields) -> R) -> R {
        f(&self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A copy of the fields.
    pub fn fields(&self) -> TrailFields {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}
