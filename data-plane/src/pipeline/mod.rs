//! The request pipeline every `/v1` handler runs, each step written once:
//! `admit` (request id, one snapshot, client address, authentication and
//! access checks, rate limit) → the handler's own parse → `route` (model
//! allowlist, catalogue, endpoint category, channels) → `reserve` (the
//! request's bounded cost from the spending budgets) → `attempts` over the
//! channels with a provider adapter → metering (`meter`, which settles the
//! reservation). Handlers return
//! `Result<Response, ProxyError>`; the HTTP layer renders refusals. A
//! streamed answer still waiting for its first token is kept alive
//! (`keepalive`).

mod admit;
mod attempts;
pub(crate) mod body;
pub mod keepalive;
mod reserve;
mod route;
pub mod sockets;

pub use self::{
    admit::{Admitted, admit},
    attempts::{Scope, run as attempts},
    body::read_body,
    reserve::{Bound, reserve, reserve_again},
    route::{model, models, route},
};

use std::sync::Arc;

use arc_swap::ArcSwap;
use ipnet::IpNet;

use crate::{
    meter::UsageSink, policy::budget::Budgets, policy::limits::Limiter, policy::snapshot::Snapshot,
    provider::Upstreams, telemetry::metrics::Observed,
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
    pub videos: crate::control::Videos,
    /// Files and batches: the control plane keeps whose each is.
    pub batches: crate::control::Batches,
    /// Counters the heartbeats report.
    pub vitals: Arc<crate::vitals::Vitals>,
    /// The console pages quota refusals link to; `None` without a console.
    pub console: Option<crate::error::ConsoleLinks>,
    /// Whether `/v1/responses` takes WebSocket upgrades (else 426).
    pub responses_websocket: bool,
    /// The idle timeouts and lifetime of client WebSockets, and the word
    /// that ends them when the data plane stops.
    pub sockets: sockets::Sockets,
}

/// The id of one request, as sent in `x-request-id` and error messages.
#[derive(Debug, Clone, Default)]
pub struct RequestId(pub Arc<str>);

// === impl App ===

impl App {
    /// What an upstream attempt needs from the shared state.
    pub fn attempt(&self) -> crate::provider::Attempt<'_> {
        crate::provider::Attempt { upstreams: &self.upstreams, usage: &self.usage }
    }
}

impl Observed for App {
    fn revision(&self) -> u64 {
        let snapshot = self.snapshot.load();
        if snapshot.held { snapshot.revision } else { 0 }
    }

    fn channel_failures(&self, each: &mut dyn FnMut(&str, u32)) {
        for channel in self.snapshot.load().all_channels() {
            each(&channel.id, self.upstreams.health.failures(&channel.id));
        }
    }

    fn channel_cooling(&self, each: &mut dyn FnMut(&str, bool)) {
        for channel in self.snapshot.load().all_channels() {
            each(&channel.id, self.upstreams.health.cooling(&channel.id));
        }
    }
}
