//! Rate limits (429), the step between authorization and body parsing.
//!
//! The control plane is the single authority: it counts the permits of each
//! key (`token:<id>`, `group:<group>:<account id>`) per fixed window and never
//! grants more than the limit (`AcquirePermits`). This module keeps a pool of
//! leased permits per key, admits from it, waits for a new lease (at most
//! `ACQUIRE_TIMEOUT`) when it is empty and refills it in the background when
//! it runs low, so the fleet together never admits more than the limit in a
//! window. While the control plane cannot be reached, every key is counted
//! locally against its full limit: each data plane may then admit up to the
//! limit per window, N data planes up to N times it.
//!
//! Tokens-per-minute limits run on the same pools (keys `tpm:token:<id>`,
//! `tpm:group:<group>:<account>`, one-minute windows, one permit per token):
//! a request takes its bound at once (`reserve_tokens`), and its
//! `TokenReservation` settles it with the tokens really used. See `tpm` for
//! what that adds to the bound.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::{sync::watch, time::Instant};

use crate::{
    backoff::Backoff,
    error::{ProxyError, error_chain},
    policy::auth::Caller,
    policy::domain::RateLimit,
};

/// How long a request waits for a lease before its key is counted locally.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);
/// Leases one request waits through before it gives up (each was taken by
/// requests that came later): only under extreme contention on one key.
const MAX_ROUNDS: u32 = 8;
/// How often pools of ended windows are dropped.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// Delays between probes of an unreachable control plane.
const PROBE_MIN: Duration = Duration::from_millis(500);
const PROBE_MAX: Duration = Duration::from_secs(10);

/// Permits asked per lease for a limit of `max_requests` by a data plane
/// that admitted `recent` of them in the last `DEMAND_PERIOD`: a tenth of
/// the limit, at least 1 and at most 100, or `recent` when more, never past
/// a tenth of the limit. Smaller leases strand fewer permits on idle data
/// planes (a pool never holds more than one lease); larger ones cost fewer
/// round trips. Sized by demand, a busy data plane asks for the next lease
/// half a period before it runs out, so its requests do not wait for a
/// control plane that is slow for a moment (applying a usage batch, say).
pub fn lease_size(max_requests: u32, recent: u32) -> u32 {
    let tenth = max_requests.div_ceil(10).max(1);
    tenth.clamp(1, 100).max(recent.min(tenth))
}

/// Permits admitted over which a busy pool's lease is sized.
const DEMAND_PERIOD: Duration = Duration::from_millis(100);

/// Units asked per lease of a pool: `lease_size` for request permits, a
/// tenth of the limit for tokens (a single request takes thousands).
fn pool_lease_size(limit: RateLimit, tokens: bool, recent: u32) -> u32 {
    if tokens { limit.max_requests.div_ceil(10).max(1) } else { lease_size(limit.max_requests, recent) }
}

/// What a pool counts, which decides the refusal it gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    Requests,
    Tokens,
}

/// One ask for permits of `key`, the protocol's `PermitAsk` in domain terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub key: String,
    pub limit: RateLimit,
    pub want: u32,
    /// Units used beyond what was granted, charged to the current window.
    pub charge: u32,
}

/// The answer to an `Ask`: permits of the window `[window_start, window_end)`
/// (Unix seconds, the control plane's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub granted: u32,
    pub window_start: i64,
    pub window_end: i64,
}

/// Why permits could not be asked for.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The call failed (its cause: the transport's or the control plane's).
    #[error("permit request failed")]
    Call(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{got} grants answered {asked} asks")]
    Malformed { asked: usize, got: usize },
}

/// What `PermitSource::acquire` returns.
pub type Grants = Pin<Box<dyn Future<Output = Result<Vec<Grant>, SourceError>> + Send>>;

/// Where leases come from: the control plane (or a stand-in in tests).
pub trait PermitSource: Send + Sync + 'static {
    /// Asks for permits: one grant per ask, in the same order.
    fn acquire(&self, asks: Vec<Ask>) -> Grants;
}

/// A source that is never reachable, so every key is counted locally: for
/// handler tests that run without a control plane.
#[cfg(test)]
pub struct LocalOnly;

/// Unix time in milliseconds. A function so that tests can run the limiter
/// on tokio's paused clock.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The rate limiter of one data plane; cheap to clone.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    source: Arc<dyn PermitSource>,
    clock: Clock,
    state: Mutex<State>,
}

struct State {
    pools: HashMap<String, Pool, foldhash::fast::RandomState>,
    /// Added to the local clock to get the control plane's, learned from
    /// the windows of its grants (zero with synchronized clocks).
    skew_ms: i64,
    /// Set while the control plane cannot be reached.
    down: Option<Down>,
    swept_at: Instant,
}

/// The control plane is unreachable; keys are counted locally.
struct Down {
    probe_at: Instant,
    backoff: Backoff,
    probing: bool,
}

/// The permits of one key in its current window.
struct Pool {
    limit: RateLimit,
    /// Counts tokens (else requests).
    tokens: bool,
    /// Unix seconds, end exclusive.
    window_start: i64,
    window_end: i64,
    /// Whether the window comes from a grant (else from the local clock).
    granted_window: bool,
    /// Leased and not yet spent.
    remaining: u32,
    /// Admitted in this window by this data plane; never more than the
    /// limit when admitted (a token overrun may add to it later).
    spent: u32,
    /// The control plane granted less than asked: the window is used up once
    /// `remaining` is.
    exhausted: bool,
    /// The lease request in flight for this key; its sender is dropped once
    /// the answer is in the pool.
    fetching: Option<watch::Receiver<()>>,
    /// Units requests wait for; the next lease request asks for at least
    /// this many permits, so a burst is served in one round trip.
    waiting: u32,
    /// Units admitted in the current and the previous `DEMAND_PERIOD`.
    demand: Demand,
}

/// Units admitted per `DEMAND_PERIOD`, the current period and the last.
#[derive(Debug, Clone, Copy)]
struct Demand {
    start: Instant,
    now: u32,
    before: u32,
}

/// Counts a request among the `waiting` of its pools until dropped (also
/// when the request is abandoned mid-wait).
struct Waiting {
    inner: Arc<Inner>,
    keys: Vec<String>,
    cost: u32,
}

enum Verdict {
    Ready,
    Refused,
    Fetch,
}

enum Step {
    /// Admitted; the windows (start) each key's units were taken from.
    Admitted(Vec<i64>),
    Refused(ProxyError),
    Wait(Vec<watch::Receiver<()>>, Waiting),
}

// === impl Limiter ===

impl Limiter {
    /// A limiter leasing from `source`, on the system clock.
    pub fn new(source: Arc<dyn PermitSource>) -> Limiter {
        Limiter::with_clock(source, Arc::new(system_clock_ms))
    }

    /// A limiter leasing from `source`, reading the time from `clock`.
    pub fn with_clock(source: Arc<dyn PermitSource>, clock: Clock) -> Limiter {
        let state = State { pools: HashMap::default(), skew_ms: 0, down: None, swept_at: Instant::now() };
        Limiter { inner: Arc::new(Inner { source, clock, state: Mutex::new(state) }) }
    }

    /// Admits or refuses `caller`'s request under its token's limit and its
    /// group's limit (counted per account); a request refused by one spends
    /// no permit of the other. May wait up to `ACQUIRE_TIMEOUT` for a lease;
    /// spawns the lease requests (they finish even if this future is dropped).
    pub async fn check(&self, caller: &Caller) -> Result<(), ProxyError> {
        let limits = applicable(caller);
        if limits.is_empty() {
            return Ok(());
        }
        self.admit(&limits, 1, Counted::Requests).await.map(drop)
    }

    /// Takes `cost` units of each of `limits` (all or none), waiting for
    /// leases as `check` does; the windows they were taken from.
    pub(crate) async fn admit(
        &self,
        limits: &[(String, RateLimit)],
        cost: u32,
        counted: Counted,
    ) -> Result<Vec<i64>, ProxyError> {
        for round in 0..=MAX_ROUNDS {
            match self.try_admit(limits, cost, counted) {
                Step::Admitted(windows) => return Ok(windows),
                Step::Refused(error) => return Err(error),
                Step::Wait(..) if round == MAX_ROUNDS => break,
                Step::Wait(leases, waiting) => {
                    for mut lease in leases {
                        // Errs once the sender is dropped: the answer has landed.
                        let _ = lease.changed().await;
                    }
                    drop(waiting);
                }
            }
        }
        let (key, limit) = limits.first().map_or(("", RateLimit::default()), |(k, l)| (k.as_str(), *l));
        tracing::warn!(key, "rate limit permits kept going to other requests; refusing one");
        Err(refusal(counted, limit, 1_000))
    }

    /// One look at the pools: admits (spending a permit of each limit),
    /// refuses, or names the lease requests to wait for.
    fn try_admit(&self, limits: &[(String, RateLimit)], cost: u32, counted: Counted) -> Step {
        let mut state = self.inner.lock();
        let now_ms = (self.inner.clock)() + state.skew_ms;
        let now = Instant::now();
        state.sweep(now, now_ms);
        let down = state.down.is_some();
        let mut refused: Option<(RateLimit, i64)> = None;
        let mut short = Vec::new();
        for (key, limit) in limits {
            let tokens = counted == Counted::Tokens;
            // The key is copied only for a new pool, not on every request.
            if !state.pools.contains_key(key) {
                state.pools.insert(key.clone(), Pool::new(*limit, tokens, now_ms));
            }
            let Some(pool) = state.pools.get_mut(key) else { continue };
            pool.refresh(*limit, now_ms);
            match pool.verdict(down, cost) {
                Verdict::Ready => {}
                // The limit whose window ends last says when to come back.
                Verdict::Refused => {
                    if refused.is_none_or(|(_, end)| pool.window_end > end) {
                        refused = Some((*limit, pool.window_end));
                    }
                }
                Verdict::Fetch => short.push(key.clone()),
            }
        }
        if let Some((limit, end)) = refused {
            return Step::Refused(refusal(counted, limit, end * 1000 - now_ms));
        }
        if !short.is_empty() {
            let (mut asks, mut waits) = (Vec::new(), Vec::new());
            for key in &short {
                let Some(pool) = state.pools.get_mut(key) else { continue };
                pool.waiting = pool.waiting.saturating_add(cost);
                match &pool.fetching {
                    Some(lease) => waits.push(lease.clone()),
                    None => asks.extend(pool.ask(key)),
                }
            }
            if !asks.is_empty() {
                waits.push(self.fetch(&mut state, asks, false));
            }
            return Step::Wait(waits, Waiting { inner: self.inner.clone(), keys: short, cost });
        }
        let probe = state.down.as_ref().is_some_and(|d| !d.probing && d.probe_at <= now);
        let (mut refills, mut windows) = (Vec::new(), Vec::with_capacity(limits.len()));
        for (key, _) in limits {
            if let Some(pool) = state.pools.get_mut(key) {
                pool.spend(cost, now);
                windows.push(pool.window_start);
                if (probe || (!down && pool.runs_low()))
                    && let Some(ask) = pool.ask(key)
                {
                    refills.push(ask);
                }
            }
        }
        if !refills.is_empty() {
            let _ = self.fetch(&mut state, refills, probe);
        }
        Step::Admitted(windows)
    }

    /// Settles `units` taken from the windows `windows` of `limits` by a
    /// request that used `used`: what it did not use goes back to the pool
    /// while its window lasts; an overrun is taken from the pool and what
    /// the pool lacks is charged to the control plane's current window.
    pub(crate) fn settle(&self, limits: &[(String, RateLimit)], windows: &[i64], units: u32, used: u32) {
        let mut state = self.inner.lock();
        let down = state.down.is_some();
        let mut charges = Vec::new();
        for ((key, limit), window_start) in limits.iter().zip(windows) {
            let pool = state.pools.get_mut(key).filter(|p| p.window_start == *window_start);
            let over = used.saturating_sub(units);
            let Some(pool) = pool else {
                // The window ended: its unused units went with it.
                if over > 0 && !down {
                    charges.push(Ask { key: key.clone(), limit: *limit, want: 0, charge: over });
                }
                continue;
            };
            if used <= units {
                let back = units - used;
                pool.remaining = pool.remaining.saturating_add(back);
                pool.spent = pool.spent.saturating_sub(back);
                continue;
            }
            let taken = over.min(pool.remaining);
            pool.remaining -= taken;
            pool.spent = pool.spent.saturating_add(over);
            if over > taken && !down {
                charges.push(Ask { key: key.clone(), limit: *limit, want: 0, charge: over - taken });
            }
        }
        drop(state);
        if !charges.is_empty() {
            let source = self.inner.source.clone();
            tokio::spawn(async move {
                let charged = tokio::time::timeout(ACQUIRE_TIMEOUT, source.acquire(charges)).await;
                if !matches!(charged, Ok(Ok(_))) {
                    tracing::debug!("a tokens-per-minute overrun could not be charged to the control plane");
                }
            });
        }
    }

    /// Spawns one lease request for `asks`; returns what to wait on for its
    /// answer to land in the pools.
    fn fetch(&self, state: &mut State, asks: Vec<Ask>, probe: bool) -> watch::Receiver<()> {
        let (landed, lease) = watch::channel(());
        for ask in &asks {
            if let Some(pool) = state.pools.get_mut(&ask.key) {
                pool.fetching = Some(lease.clone());
            }
        }
        if probe && let Some(down) = state.down.as_mut() {
            down.probing = true;
        }
        let inner = self.inner.clone();
        // In the span of the request that asked: its trace shows the call.
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let answer = match tokio::time::timeout(ACQUIRE_TIMEOUT, inner.source.acquire(asks.clone())).await {
                Ok(answer) => answer,
                Err(_) => Err(SourceError::Timeout(ACQUIRE_TIMEOUT)),
            };
            inner.land(&asks, answer);
            drop(landed);
        }));
        lease
    }

    /// Permits admitted for `key` in its current window (tests).
    #[cfg(test)]
    fn spent(&self, key: &str) -> u32 {
        self.inner.lock().pools.get(key).map_or(0, |p| p.spent)
    }

    /// Whether keys are being counted locally (tests).
    #[cfg(test)]
    fn is_local(&self) -> bool {
        self.inner.lock().down.is_some()
    }
}

// === impl Waiting ===

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        for key in &self.keys {
            if let Some(pool) = state.pools.get_mut(key) {
                pool.waiting = pool.waiting.saturating_sub(self.cost);
            }
        }
    }
}

// === impl Inner ===

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock; a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts the answer to `asks` into the pools, and notes whether the
    /// control plane is reachable.
    fn land(&self, asks: &[Ask], answer: Result<Vec<Grant>, SourceError>) {
        let mut state = self.lock();
        let received_ms = (self.clock)();
        for ask in asks {
            if let Some(pool) = state.pools.get_mut(&ask.key) {
                pool.fetching = None;
            }
        }
        match answer {
            Ok(grants) => {
                if state.down.take().is_some() {
                    tracing::info!("control plane grants permits again; rate limits are shared across data planes");
                }
                for (ask, grant) in asks.iter().zip(grants) {
                    state.learn_skew(grant, received_ms);
                    if let Some(pool) = state.pools.get_mut(&ask.key) {
                        pool.apply(ask, grant);
                    }
                }
            }
            Err(error) => {
                let now = Instant::now();
                match state.down.as_mut() {
                    Some(down) => {
                        down.probing = false;
                        down.probe_at = now + down.backoff.next_delay();
                        tracing::debug!(error = %error_chain(&error), "control plane still unreachable for permits");
                    }
                    None => {
                        tracing::warn!(
                            error = %error_chain(&error),
                            "control plane unreachable for rate-limit permits; counting every limit locally \
                             (each data plane may admit up to the full limit) until it answers"
                        );
                        let mut backoff = Backoff::new(PROBE_MIN, PROBE_MAX);
                        state.down = Some(Down { probe_at: now + backoff.next_delay(), backoff, probing: false });
                    }
                }
            }
        }
    }
}

// === impl State ===

impl State {
    /// Adjusts the skew so that the control plane's clock, as estimated,
    /// lies in the window of a grant received at local time `received_ms`.
    fn learn_skew(&mut self, grant: Grant, received_ms: i64) {
        let estimate = received_ms + self.skew_ms;
        let (start, end) = (grant.window_start * 1000, grant.window_end * 1000);
        if estimate < start {
            self.skew_ms += start - estimate;
        } else if estimate >= end {
            self.skew_ms -= estimate - end + 1;
        }
    }

    /// Drops the pools of ended windows, at most once per `SWEEP_EVERY`.
    fn sweep(&mut self, now: Instant, now_ms: i64) {
        if now.duration_since(self.swept_at) < SWEEP_EVERY {
            return;
        }
        self.swept_at = now;
        self.pools.retain(|_, pool| pool.fetching.is_some() || pool.window_end * 1000 > now_ms);
    }
}

// === impl Pool ===

impl Pool {
    fn new(limit: RateLimit, tokens: bool, now_ms: i64) -> Pool {
        let (window_start, window_end) = window(now_ms, limit.window_minutes);
        Pool {
            limit,
            tokens,
            window_start,
            window_end,
            granted_window: false,
            remaining: 0,
            spent: 0,
            exhausted: false,
            fetching: None,
            waiting: 0,
            demand: Demand { start: Instant::now(), now: 0, before: 0 },
        }
    }

    /// Follows a changed limit and moves to the window holding `now_ms` once
    /// the current one has ended; leftover permits of an ended window are
    /// dropped (the control plane counted them against that window).
    fn refresh(&mut self, limit: RateLimit, now_ms: i64) {
        if limit.window_minutes != self.limit.window_minutes {
            *self = Pool {
                fetching: self.fetching.take(),
                waiting: self.waiting,
                demand: self.demand,
                ..Pool::new(limit, self.tokens, now_ms)
            };
            return;
        }
        if limit.max_requests != self.limit.max_requests {
            self.limit = limit;
            self.exhausted = false;
        }
        if now_ms >= self.window_end * 1000 {
            *self = Pool {
                fetching: self.fetching.take(),
                waiting: self.waiting,
                demand: self.demand,
                ..Pool::new(limit, self.tokens, now_ms)
            };
        }
    }

    fn verdict(&self, control_plane_down: bool, cost: u32) -> Verdict {
        if u64::from(self.spent) + u64::from(cost) > u64::from(self.limit.max_requests) {
            Verdict::Refused
        } else if self.remaining >= cost {
            Verdict::Ready
        } else if self.exhausted {
            Verdict::Refused
        } else if control_plane_down {
            Verdict::Ready
        } else {
            Verdict::Fetch
        }
    }

    fn spend(&mut self, cost: u32, now: Instant) {
        self.remaining = self.remaining.saturating_sub(cost);
        self.spent = self.spent.saturating_add(cost);
        let elapsed = now.saturating_duration_since(self.demand.start);
        if elapsed >= DEMAND_PERIOD {
            // A period without admissions in between leaves nothing before.
            let before = if elapsed < DEMAND_PERIOD * 2 { self.demand.now } else { 0 };
            self.demand = Demand { start: now, now: 0, before };
        }
        self.demand.now = self.demand.now.saturating_add(cost);
    }

    /// Units per lease: `pool_lease_size` at this pool's recent demand.
    fn lease_units(&self) -> u32 {
        pool_lease_size(self.limit, self.tokens, self.demand.now.max(self.demand.before))
    }

    /// Whether to ask for the next lease before this one runs out.
    fn runs_low(&self) -> bool {
        self.remaining <= self.lease_units() / 2
    }

    /// The ask that tops the pool up to one lease (or to as many permits as
    /// requests wait for, if more), never past the limit; `None` when one is
    /// in flight or nothing is left to ask for.
    fn ask(&self, key: &str) -> Option<Ask> {
        if self.fetching.is_some() || self.exhausted {
            return None;
        }
        let lease = self.lease_units().max(self.waiting).saturating_sub(self.remaining);
        let room = self.limit.max_requests.saturating_sub(self.spent).saturating_sub(self.remaining);
        let want = lease.min(room);
        (want > 0).then(|| Ask { key: key.to_owned(), limit: self.limit, want, charge: 0 })
    }

    /// Adds a grant: to this window's permits, or as the start of the
    /// control plane's newer window. An answer for an older window than one
    /// already granted is stale and dropped.
    fn apply(&mut self, ask: &Ask, grant: Grant) {
        if grant.window_start == self.window_start {
            self.remaining += grant.granted;
        } else if grant.window_start > self.window_start || !self.granted_window {
            self.window_start = grant.window_start;
            self.window_end = grant.window_end;
            self.remaining = grant.granted;
            self.spent = 0;
            self.exhausted = false;
        } else {
            return;
        }
        self.granted_window = true;
        if grant.granted < ask.want {
            self.exhausted = true;
        }
    }
}

// === impl LocalOnly ===

#[cfg(test)]
impl PermitSource for LocalOnly {
    fn acquire(&self, _asks: Vec<Ask>) -> Grants {
        Box::pin(async { Err(SourceError::Call(tonic::Status::unavailable("no control plane in this test").into())) })
    }
}

#[cfg(test)]
impl crate::policy::inflight::SlotSource for LocalOnly {
    fn lease(&self, _asks: Vec<crate::policy::inflight::SlotAsk>) -> crate::policy::inflight::SlotGrants {
        Box::pin(async { Err(SourceError::Call(tonic::Status::unavailable("no control plane in this test").into())) })
    }
}

/// The limits that apply to `caller`, with their permit keys: the token's,
/// then the group's (counted per account). Zero limits are no limits.
fn applicable(caller: &Caller) -> Vec<(String, RateLimit)> {
    let active = |l: &RateLimit| l.window_minutes > 0 && l.max_requests > 0;
    let mut limits = Vec::with_capacity(2);
    let rate_limit = caller.token.restrictions().rate_limit;
    if active(&rate_limit) {
        limits.push((["token:", &caller.token.id].concat(), rate_limit));
    }
    if active(&caller.group.rate_limit) {
        limits.push((["group:", &caller.group.name, ":", &caller.account.id].concat(), caller.group.rate_limit));
    }
    limits
}

/// The fixed window of `window_minutes` holding Unix millisecond `now_ms`,
/// in Unix seconds: aligned to multiples of its length since the epoch, as
/// the control plane computes it.
fn window(now_ms: i64, window_minutes: u32) -> (i64, i64) {
    let length = i64::from(window_minutes.max(1)) * 60;
    let now = now_ms.div_euclid(1000);
    let start = now - now.rem_euclid(length);
    (start, start + length)
}

/// The 429 for `limit`, to retry once `ms_left` have passed (whole seconds,
/// rounded up, at least 1 and at most the window).
fn refusal(counted: Counted, limit: RateLimit, ms_left: i64) -> ProxyError {
    let window_secs = u64::from(limit.window_minutes.max(1)) * 60;
    let retry_after_secs = u64::try_from(ms_left.max(0)).unwrap_or(0).div_ceil(1000).clamp(1, window_secs);
    match counted {
        Counted::Requests => ProxyError::RateLimited {
            window_minutes: limit.window_minutes,
            max_requests: limit.max_requests,
            retry_after_secs,
        },
        Counted::Tokens => ProxyError::TokensLimited { tokens_per_minute: limit.max_requests, retry_after_secs },
    }
}

fn system_clock_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests;
