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

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};
use tokio::{sync::watch, time::Instant};

use crate::{
    backoff::Backoff,
    error::{ProxyError, error_chain},
    grpc::ControlPlane,
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

/// Permits asked per lease for a limit of `max_requests`: a tenth of the
/// limit, at least 1 and at most 100. Smaller leases strand fewer permits on
/// idle data planes (a pool never holds more than one lease); larger ones
/// cost fewer round trips to the control plane.
pub fn lease_size(max_requests: u32) -> u32 {
    max_requests.div_ceil(10).clamp(1, 100)
}

/// One ask for permits of `key`, a `pb::PermitAsk` in domain terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub key: String,
    pub limit: RateLimit,
    pub want: u32,
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
    #[error("permit request failed")]
    Call(#[source] tonic::Status),
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

/// Leases from the control plane's `AcquirePermits`.
pub struct ControlPlanePermits {
    pub control: ControlPlane,
    pub node_id: String,
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
    pools: HashMap<String, Pool>,
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
    /// Unix seconds, end exclusive.
    window_start: i64,
    window_end: i64,
    /// Whether the window comes from a grant (else from the local clock).
    granted_window: bool,
    /// Leased and not yet spent.
    remaining: u32,
    /// Admitted in this window by this data plane; never more than the limit.
    spent: u32,
    /// The control plane granted less than asked: the window is used up once
    /// `remaining` is.
    exhausted: bool,
    /// The lease request in flight for this key; its sender is dropped once
    /// the answer is in the pool.
    fetching: Option<watch::Receiver<()>>,
    /// Requests waiting for a lease; the next lease request asks for at
    /// least this many permits, so a burst is served in one round trip.
    waiting: u32,
}

/// Counts a request among the `waiting` of its pools until dropped (also
/// when the request is abandoned mid-wait).
struct Waiting {
    inner: Arc<Inner>,
    keys: Vec<String>,
}

enum Verdict {
    Ready,
    Refused,
    Fetch,
}

enum Step {
    Admitted,
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
        let state = State { pools: HashMap::new(), skew_ms: 0, down: None, swept_at: Instant::now() };
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
        for round in 0..=MAX_ROUNDS {
            match self.try_admit(&limits) {
                Step::Admitted => return Ok(()),
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
        let (key, limit) = &limits[0];
        tracing::warn!(key, "rate limit permits kept going to other requests; refusing one");
        Err(rate_limited(*limit, 1_000))
    }

    /// One look at the pools: admits (spending a permit of each limit),
    /// refuses, or names the lease requests to wait for.
    fn try_admit(&self, limits: &[(String, RateLimit)]) -> Step {
        let mut state = self.inner.lock();
        let now_ms = (self.inner.clock)() + state.skew_ms;
        let now = Instant::now();
        state.sweep(now, now_ms);
        let down = state.down.is_some();
        let mut refused: Option<(RateLimit, i64)> = None;
        let mut short = Vec::new();
        for (key, limit) in limits {
            let pool = state.pools.entry(key.clone()).or_insert_with(|| Pool::new(*limit, now_ms));
            pool.refresh(*limit, now_ms);
            match pool.verdict(down) {
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
            return Step::Refused(rate_limited(limit, end * 1000 - now_ms));
        }
        if !short.is_empty() {
            let (mut asks, mut waits) = (Vec::new(), Vec::new());
            for key in &short {
                let Some(pool) = state.pools.get_mut(key) else { continue };
                pool.waiting += 1;
                match &pool.fetching {
                    Some(lease) => waits.push(lease.clone()),
                    None => asks.extend(pool.ask(key)),
                }
            }
            if !asks.is_empty() {
                waits.push(self.fetch(&mut state, asks, false));
            }
            return Step::Wait(waits, Waiting { inner: self.inner.clone(), keys: short });
        }
        let probe = state.down.as_ref().is_some_and(|d| !d.probing && d.probe_at <= now);
        let mut refills = Vec::new();
        for (key, _) in limits {
            if let Some(pool) = state.pools.get_mut(key) {
                pool.spend();
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
        Step::Admitted
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
                pool.waiting = pool.waiting.saturating_sub(1);
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
    fn new(limit: RateLimit, now_ms: i64) -> Pool {
        let (window_start, window_end) = window(now_ms, limit.window_minutes);
        Pool {
            limit,
            window_start,
            window_end,
            granted_window: false,
            remaining: 0,
            spent: 0,
            exhausted: false,
            fetching: None,
            waiting: 0,
        }
    }

    /// Follows a changed limit and moves to the window holding `now_ms` once
    /// the current one has ended; leftover permits of an ended window are
    /// dropped (the control plane counted them against that window).
    fn refresh(&mut self, limit: RateLimit, now_ms: i64) {
        if limit.window_minutes != self.limit.window_minutes {
            *self = Pool { fetching: self.fetching.take(), waiting: self.waiting, ..Pool::new(limit, now_ms) };
            return;
        }
        if limit.max_requests != self.limit.max_requests {
            self.limit = limit;
            self.exhausted = false;
        }
        if now_ms >= self.window_end * 1000 {
            *self = Pool { fetching: self.fetching.take(), waiting: self.waiting, ..Pool::new(limit, now_ms) };
        }
    }

    fn verdict(&self, control_plane_down: bool) -> Verdict {
        if self.spent >= self.limit.max_requests {
            Verdict::Refused
        } else if self.remaining > 0 {
            Verdict::Ready
        } else if self.exhausted {
            Verdict::Refused
        } else if control_plane_down {
            Verdict::Ready
        } else {
            Verdict::Fetch
        }
    }

    fn spend(&mut self) {
        self.remaining = self.remaining.saturating_sub(1);
        self.spent += 1;
    }

    /// Whether to ask for the next lease before this one runs out.
    fn runs_low(&self) -> bool {
        self.remaining <= lease_size(self.limit.max_requests) / 2
    }

    /// The ask that tops the pool up to one lease (or to as many permits as
    /// requests wait for, if more), never past the limit; `None` when one is
    /// in flight or nothing is left to ask for.
    fn ask(&self, key: &str) -> Option<Ask> {
        if self.fetching.is_some() || self.exhausted {
            return None;
        }
        let lease = lease_size(self.limit.max_requests).max(self.waiting).saturating_sub(self.remaining);
        let room = self.limit.max_requests.saturating_sub(self.spent).saturating_sub(self.remaining);
        let want = lease.min(room);
        (want > 0).then(|| Ask { key: key.to_owned(), limit: self.limit, want })
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

// === impl ControlPlanePermits ===

impl PermitSource for ControlPlanePermits {
    fn acquire(&self, asks: Vec<Ask>) -> Grants {
        let asked = asks.len();
        let asks = asks
            .into_iter()
            .map(|ask| pb::PermitAsk {
                key: ask.key,
                window_minutes: ask.limit.window_minutes,
                max_requests: ask.limit.max_requests,
                want: ask.want,
            })
            .collect();
        let mut request = self.control.request(pb::AcquirePermitsRequest { node_id: self.node_id.clone(), asks });
        request.set_timeout(ACQUIRE_TIMEOUT);
        let mut client = PolicyServiceClient::new(self.control.channel());
        Box::pin(async move {
            let grants = client.acquire_permits(request).await.map_err(SourceError::Call)?.into_inner().grants;
            if grants.len() != asked {
                return Err(SourceError::Malformed { asked, got: grants.len() });
            }
            let grants = grants
                .into_iter()
                .map(|g| Grant { granted: g.granted, window_start: g.window_start, window_end: g.window_end })
                .collect();
            Ok(grants)
        })
    }
}

// === impl LocalOnly ===

#[cfg(test)]
impl PermitSource for LocalOnly {
    fn acquire(&self, _asks: Vec<Ask>) -> Grants {
        Box::pin(async { Err(SourceError::Call(tonic::Status::unavailable("no control plane in this test"))) })
    }
}

/// The limits that apply to `caller`, with their permit keys: the token's,
/// then the group's (counted per account). Zero limits are no limits.
fn applicable(caller: &Caller) -> Vec<(String, RateLimit)> {
    let active = |l: &RateLimit| l.window_minutes > 0 && l.max_requests > 0;
    let mut limits = Vec::with_capacity(2);
    if active(&caller.token.rate_limit) {
        limits.push((format!("token:{}", caller.token.id), caller.token.rate_limit));
    }
    if active(&caller.group.rate_limit) {
        limits.push((format!("group:{}:{}", caller.group.name, caller.account.id), caller.group.rate_limit));
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
fn rate_limited(limit: RateLimit, ms_left: i64) -> ProxyError {
    let window_secs = u64::from(limit.window_minutes.max(1)) * 60;
    let secs = u64::try_from(ms_left.max(0)).unwrap_or(0).div_ceil(1000);
    ProxyError::RateLimited {
        window_minutes: limit.window_minutes,
        max_requests: limit.max_requests,
        retry_after_secs: secs.clamp(1, window_secs),
    }
}

fn system_clock_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use axum::{body::Body, http::StatusCode};
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        http,
        pipeline::App,
        policy::domain::{Group, Token},
        policy::snapshot::tests as fx,
    };

    /// Unix ms at the start of a minute (1_699_999_980 = 28_333_333 × 60).
    const MINUTE_START_MS: i64 = 1_699_999_980_000;

    /// A clock on tokio's (paused) time, starting `offset_ms` into a minute.
    fn clock(offset_ms: i64) -> Clock {
        let started = Instant::now();
        Arc::new(move || MINUTE_START_MS + offset_ms + i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX))
    }

    /// The control plane's permit counting, in memory, on its own clock.
    struct Authority {
        clock: Clock,
        latency: Duration,
        counts: Mutex<HashMap<(String, i64), u32>>,
        down: AtomicBool,
        calls: AtomicUsize,
    }

    impl Authority {
        fn new(clock: Clock, latency: Duration) -> Arc<Authority> {
            Arc::new(Authority {
                clock,
                latency,
                counts: Mutex::default(),
                down: AtomicBool::new(false),
                calls: AtomicUsize::new(0),
            })
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }

        fn set_down(&self, down: bool) {
            self.down.store(down, Ordering::SeqCst);
        }
    }

    impl PermitSource for Authority {
        fn acquire(&self, asks: Vec<Ask>) -> Grants {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let latency = self.latency;
            if self.down.load(Ordering::SeqCst) {
                return Box::pin(async move {
                    tokio::time::sleep(latency).await;
                    Err(SourceError::Call(tonic::Status::unavailable("control plane down")))
                });
            }
            let now = (self.clock)();
            let mut counts = self.counts.lock().unwrap();
            let grants = asks
                .into_iter()
                .map(|ask| {
                    let (window_start, window_end) = window(now, ask.limit.window_minutes);
                    let count = counts.entry((ask.key, window_start)).or_default();
                    let granted = ask.want.min(ask.limit.max_requests - *count);
                    *count += granted;
                    Grant { granted, window_start, window_end }
                })
                .collect();
            Box::pin(async move {
                tokio::time::sleep(latency).await;
                Ok(grants)
            })
        }
    }

    fn limit(max_requests: u32, window_minutes: u32) -> RateLimit {
        RateLimit { window_minutes, max_requests }
    }

    /// A caller of token `token` in account `account`, group `g`.
    fn caller(token: &str, account: &str, token_limit: RateLimit, group_limit: RateLimit) -> Caller {
        let token = Token { account_id: account.into(), rate_limit: token_limit, ..fx::token(token, "sk-x") };
        let account = fx::account(account);
        let group = Group { rate_limit: group_limit, ..fx::group("g") };
        Caller { token: Arc::new(token), account: Arc::new(account), group: Arc::new(group) }
    }

    fn limiter(authority: &Arc<Authority>, clock: Clock) -> Limiter {
        Limiter::with_clock(authority.clone(), clock)
    }

    /// Sends `n` requests alternating over `limiters`; the admitted count and
    /// the refusals.
    async fn alternate(limiters: &[&Limiter], caller: &Caller, n: usize) -> (usize, Vec<ProxyError>) {
        let (mut admitted, mut refusals) = (0, Vec::new());
        for i in 0..n {
            match limiters[i % limiters.len()].check(caller).await {
                Ok(()) => admitted += 1,
                Err(error) => refusals.push(error),
            }
        }
        (admitted, refusals)
    }

    #[test]
    fn a_lease_is_a_tenth_of_the_limit_clamped_to_1_and_100() {
        let sizes: Vec<u32> = [1, 9, 10, 11, 25, 1_000, 5_000].into_iter().map(lease_size).collect();
        assert_eq!(sizes, [1, 1, 1, 2, 3, 100, 100]);
    }

    #[tokio::test(start_paused = true)]
    async fn callers_without_limits_never_ask_the_control_plane() {
        let authority = Authority::new(clock(0), Duration::from_millis(5));
        let limiter = limiter(&authority, clock(0));
        let (admitted, _) = alternate(&[&limiter], &caller("t1", "a1", limit(0, 0), limit(5, 0)), 50).await;
        assert_eq!(admitted, 50);
        assert_eq!(authority.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn two_data_planes_sharing_one_authority_admit_exactly_the_limit() {
        // 20 s into the minute, so the window ends in 40 s.
        let authority = Authority::new(clock(20_000), Duration::from_millis(3));
        let (a, b) = (limiter(&authority, clock(20_000)), limiter(&authority, clock(20_000)));
        let caller = caller("t1", "a1", limit(25, 1), RateLimit::default());
        let (admitted, refusals) = alternate(&[&a, &b], &caller, 75).await;
        assert_eq!(admitted, 25, "admitted over two data planes");
        assert_eq!(refusals.len(), 50);
        for error in refusals {
            assert_eq!(
                error,
                ProxyError::RateLimited { window_minutes: 1, max_requests: 25, retry_after_secs: 40 },
                "refusal names the limit and the end of the window"
            );
        }
        assert_eq!(a.spent("token:t1") + b.spent("token:t1"), 25);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_on_two_data_planes_never_pass_the_limit() {
        let authority = Authority::new(clock(0), Duration::from_millis(3));
        let limiters = [limiter(&authority, clock(0)), limiter(&authority, clock(0))];
        let caller = caller("t1", "a1", limit(50, 1), RateLimit::default());
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let (limiter, caller) = (limiters[i % 2].clone(), caller.clone());
                tokio::spawn(async move { limiter.check(&caller).await })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(()) => admitted += 1,
                Err(error) => assert_eq!(
                    error,
                    ProxyError::RateLimited { window_minutes: 1, max_requests: 50, retry_after_secs: 60 },
                    "a refusal other than the used-up window"
                ),
            }
        }
        assert_eq!(admitted, 50);
    }

    #[tokio::test(start_paused = true)]
    async fn a_used_up_window_is_refused_without_asking_until_it_ends() {
        let authority = Authority::new(clock(0), Duration::from_millis(3));
        let limiter = limiter(&authority, clock(0));
        let caller = caller("t1", "a1", limit(3, 1), RateLimit::default());
        assert_eq!(alternate(&[&limiter], &caller, 3).await.0, 3);
        let asked = authority.calls();
        let (admitted, refusals) = alternate(&[&limiter], &caller, 10).await;
        assert_eq!((admitted, refusals.len()), (0, 10));
        assert!(authority.calls() <= asked + 1, "refusals kept asking: {} calls", authority.calls());

        tokio::time::sleep(Duration::from_secs(30)).await;
        let Err(ProxyError::RateLimited { retry_after_secs, .. }) = limiter.check(&caller).await else {
            panic!("admitted mid-window");
        };
        assert_eq!(retry_after_secs, 30, "Retry-After counts down to the window's end");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(alternate(&[&limiter], &caller, 5).await.0, 3, "the next window admits the limit again");
    }

    #[tokio::test(start_paused = true)]
    async fn group_limits_count_per_account_and_a_refusal_spends_neither_limit() {
        let authority = Authority::new(clock(0), Duration::from_millis(3));
        let limiter = limiter(&authority, clock(0));
        let first = caller("t1", "a1", limit(10, 1), limit(3, 5));
        let (admitted, refusals) = alternate(&[&limiter], &first, 6).await;
        assert_eq!(admitted, 3);
        assert!(
            refusals.iter().all(|e| matches!(e, ProxyError::RateLimited { window_minutes: 5, max_requests: 3, .. })),
            "the group's limit refused: {refusals:?}"
        );
        assert_eq!(limiter.spent("token:t1"), 3, "refused requests spent token permits");
        let same_account = caller("t1b", "a1", RateLimit::default(), limit(3, 5));
        assert_eq!(alternate(&[&limiter], &same_account, 2).await.0, 0, "another token of the same account");
        let other_account = caller("t2", "a2", RateLimit::default(), limit(3, 5));
        assert_eq!(alternate(&[&limiter], &other_account, 6).await.0, 3, "another account has its own count");

        // A token limit refusing first leaves the group's permits alone.
        let tight = caller("t3", "a3", limit(1, 1), limit(3, 5));
        assert_eq!(alternate(&[&limiter], &tight, 4).await.0, 1);
        assert_eq!(limiter.spent("group:g:a3"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn pools_are_refilled_in_the_background_before_they_run_dry() {
        let latency = Duration::from_millis(50);
        let authority = Authority::new(clock(0), latency);
        let limiter = limiter(&authority, clock(0));
        let caller = caller("t1", "a1", limit(100, 1), RateLimit::default());
        let started = Instant::now();
        limiter.check(&caller).await.unwrap();
        assert_eq!(started.elapsed(), latency, "the first request waits for a lease");
        for i in 1..60 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let started = Instant::now();
            limiter.check(&caller).await.unwrap();
            assert_eq!(started.elapsed(), Duration::ZERO, "request {i} waited for a lease");
        }
        // Leases of 10, topped up when half is left: one call per 5 permits.
        assert_eq!(authority.calls(), 12, "lease requests for 60 permits");
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_control_plane_each_data_plane_counts_the_full_limit_locally() {
        let authority = Authority::new(clock(0), Duration::from_millis(3));
        authority.set_down(true);
        let (a, b) = (limiter(&authority, clock(0)), limiter(&authority, clock(0)));
        let caller = caller("t1", "a1", limit(5, 1), RateLimit::default());
        let (admitted, refusals) = alternate(&[&a, &b], &caller, 30).await;
        assert_eq!(admitted, 10, "each data plane admits the full limit");
        assert!(refusals.iter().all(|e| matches!(e, ProxyError::RateLimited { max_requests: 5, .. })));
        assert!(a.is_local() && b.is_local());
        assert!(authority.calls() <= 4, "requests kept waiting on the control plane: {} calls", authority.calls());

        // Back up: a probe finds it, and the next window is shared again.
        authority.set_down(false);
        tokio::time::sleep(Duration::from_secs(60)).await;
        alternate(&[&a, &b], &caller, 2).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!a.is_local() && !b.is_local(), "the limiters did not notice the control plane is back");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(alternate(&[&a, &b], &caller, 30).await.0, 5, "shared again");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_lease_request_is_given_up_after_the_timeout() {
        let authority = Authority::new(clock(0), Duration::from_secs(3_600));
        let limiter = limiter(&authority, clock(0));
        let caller = caller("t1", "a1", limit(5, 1), RateLimit::default());
        let started = Instant::now();
        limiter.check(&caller).await.unwrap();
        assert_eq!(started.elapsed(), ACQUIRE_TIMEOUT);
        assert!(limiter.is_local());
        let started = Instant::now();
        limiter.check(&caller).await.unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO, "later requests do not wait for the control plane");
    }

    #[tokio::test(start_paused = true)]
    async fn a_control_plane_clock_behind_ours_is_learned_from_its_windows() {
        // Our clock is 2 s into the next minute; the control plane's is 1 s
        // before its end, so its window is the older one.
        let authority = Authority::new(clock(59_000), Duration::from_millis(3));
        let limiter = limiter(&authority, clock(62_000));
        let caller = caller("t1", "a1", limit(3, 1), RateLimit::default());
        assert_eq!(alternate(&[&limiter], &caller, 5).await.0, 3, "the control plane's window is used");
        assert!(authority.calls() <= 4, "{} calls: the pool kept rolling over", authority.calls());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(alternate(&[&limiter], &caller, 5).await.0, 3, "the next window of the control plane");
    }

    #[tokio::test]
    async fn the_proxy_answers_429_with_the_catalogue_message_and_retry_after() {
        let token = Token { rate_limit: limit(2, 1), ..fx::token("t1", http::tests::KEY) };
        let app: Arc<App> = http::tests::app(http::tests::policy(token, 1_000_000));
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let request = axum::http::Request::post("/v1/chat/completions")
                .header("authorization", format!("Bearer {}", http::tests::KEY))
                .header("content-type", "application/json")
                .body(Body::from(r#"{"model":"ghost","messages":[]}"#))
                .unwrap();
            let response = http::router(app.clone()).oneshot(request).await.unwrap();
            statuses.push(response.status());
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
                assert!((1..=60).contains(&retry_after), "{retry_after}");
                let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
                let json = http::tests::json_body(response).await;
                assert_eq!(
                    json["error"]["message"],
                    format!("您已达到请求数限制:1分钟内最多请求2次 (request id: {id})")
                );
                assert_eq!(json["error"]["code"], "rate_limit_exceeded");
                assert_eq!(json["error"]["type"], "rate_limit_error");
            }
        }
        assert_eq!(statuses, [StatusCode::NOT_FOUND, StatusCode::NOT_FOUND, StatusCode::TOO_MANY_REQUESTS]);
    }
}
