//! Spending budgets (403), the step after routing: a request is forwarded
//! only once its bounded cost is reserved from budget this data plane holds.
//!
//! The control plane leases a token's quota and an account's balance
//! (`AcquireSpend`) and never leases more than is left, so reservations
//! across every data plane never pass a cap. A reservation is settled with
//! the real cost when the answer ends (what it did not use stays held for
//! the next request) or released if nothing was sent. Leases are sized by
//! demand, renewed while in use, given back after `IDLE`, and lapse on both
//! sides when a data plane is gone. While the control plane is unreachable a
//! data plane spends what it holds, plus an offline allowance per budget:
//! by default its share of what no lease held when it last heard (divided
//! by the data planes the control plane counted), so the fleet together
//! spends about what was left and no more; or a fixed amount the operator
//! sets.

use std::{
    collections::HashMap,
    future::Future,
    path::PathBuf,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{sync::watch, time::Instant};

use crate::{backoff::Backoff, error::ProxyError, policy::auth::Caller};

/// How long a request waits for a lease before it is refused with 503.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);
/// A budget nobody reserved from for this long is given back.
const IDLE: Duration = Duration::from_secs(10);
/// How often idle budgets are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(2);
/// A lease is treated as lapsed this long before the control plane drops it.
const EXPIRY_MARGIN: Duration = Duration::from_secs(2);
/// After a refusal, requests needing at least as much are refused without
/// asking again for this long.
const REFUSAL_MEMORY: Duration = Duration::from_secs(1);
/// How long one request waits, through as many lease answers as it takes,
/// before it gives up with 503. Asks are sized by the demand of every
/// request waiting, so a burst is served in a round or two.
const MAX_WAIT: Duration = Duration::from_secs(6);
/// The most one ask wants (the control plane's own bound on amounts).
const MAX_LEASE: i64 = 1_000_000_000_000_000;
const PROBE_MIN: Duration = Duration::from_millis(500);
const PROBE_MAX: Duration = Duration::from_secs(10);

/// Settings of the budget step.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// How long leases live after each grant (the control plane clamps it).
    pub lease_ttl: Duration,
    /// Micro-USD per budget this data plane may admit beyond its leases
    /// while the control plane is unreachable; `None`: its fair share.
    pub offline_allowance: Option<i64>,
    /// Output tokens reserved for a request that names no maximum.
    pub default_max_output_tokens: i64,
}

/// One ask for budget, the protocol's `SpendAsk` in domain terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// `token:<id>` or `account:<id>`.
    pub budget: String,
    pub need: i64,
    pub want: i64,
}

/// The answer to one `Ask`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grant {
    pub granted: i64,
    /// Quota left or the balance, before leases (for refusal messages).
    pub remaining: i64,
    /// Left after every data plane's leases.
    pub available: i64,
    pub unlimited: bool,
    pub missing: bool,
}

/// Why budget could not be asked for.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The call failed (its cause: the transport's or the control plane's).
    #[error("spend request failed")]
    Call(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{got} grants answered {asked} asks")]
    Malformed { asked: usize, got: usize },
}

/// The grants, the lease lifetime and the number of data planes.
type Answer = Result<(Vec<Grant>, Duration, u32), SourceError>;
/// What `SpendSource::acquire` returns.
pub type Grants = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// Where leases come from: the control plane (or a stand-in in tests).
pub trait SpendSource: Send + Sync + 'static {
    /// Asks for budget leased for `ttl`: one grant per ask, in order, the
    /// lifetime the control plane applied and how many data planes it serves.
    fn acquire(&self, asks: Vec<Ask>, ttl: Duration) -> Grants;
    /// Gives budget back; best effort.
    fn give_back(&self, returns: Vec<(String, i64)>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The budget step of one data plane; cheap to clone.
#[derive(Clone)]
pub struct Budgets {
    inner: Arc<Inner>,
}

/// Budget reserved for one request; settled with `settle`, released when
/// dropped unsettled. Empty for callers without capped budgets.
#[derive(Default)]
pub struct Reservation {
    inner: Option<Arc<Inner>>,
    budgets: Vec<String>,
    amount: i64,
}

struct Inner {
    source: Arc<dyn SpendSource>,
    config: Config,
    /// Where the fleet size is kept across restarts, if anywhere.
    fleet_file: Option<PathBuf>,
    state: Mutex<State>,
}

struct State {
    pools: HashMap<String, Pool, foldhash::fast::RandomState>,
    /// Data planes sharing the budgets, as last heard (1 until then).
    data_planes: u32,
    down: Option<Down>,
    swept_at: Instant,
}

struct Down {
    probe_at: Instant,
    backoff: Backoff,
}

/// What this data plane holds of one budget.
struct Pool {
    /// Leased and not yet spent (settled costs are taken off).
    held: i64,
    /// Reserved by requests in flight.
    reserved: i64,
    /// When the lease lapses here (before it does on the control plane).
    expires: Instant,
    /// Quota left or balance, and what no lease holds, as last heard;
    /// `heard` says whether anything was.
    remaining: i64,
    available: i64,
    heard: bool,
    /// The control plane said the budget is unlimited.
    unlimited: bool,
    /// Admitted beyond the lease while the control plane was unreachable.
    offline: i64,
    /// A need refused until an instant, under a policy revision: needs as
    /// large are refused without asking until then (a top-up, which
    /// changes the revision, ends it early).
    refused: Option<Refused>,
    fetching: Option<watch::Receiver<()>>,
    /// What requests waiting for a lease of this budget need together:
    /// the next ask covers all of them, not only the one that sends it.
    waiting: i64,
    /// The lease in flight asked firmly for what waiting requests need
    /// (as much as was available when last heard, not only the asking
    /// request's need, so that the control plane grants it whole rather
    /// than a quarter at a time); the asking request's own need.
    firm: Option<i64>,
    last_used: Instant,
    /// Settled in the current and previous `IDLE` period, to size leases.
    spent_now: i64,
    spent_before: i64,
    period_start: Instant,
}

#[derive(Clone, Copy)]
struct Refused {
    need: i64,
    until: Instant,
    revision: u64,
}

enum Step {
    Reserved(Reservation),
    Refused(ProxyError),
    /// Wait for these lease answers; the budgets the request now counts
    /// in the demand of (see `Waiting`).
    Wait(Vec<watch::Receiver<()>>, Vec<String>),
}

/// A request's amount counted in the `waiting` demand of the budgets it
/// waits for, until it is dropped (reserved, refused, or gone).
struct Waiting {
    inner: Arc<Inner>,
    budgets: Vec<String>,
    amount: i64,
}

// === impl Config ===

impl Default for Config {
    /// 60 s leases, the fair share offline, 4,096 output tokens by default.
    fn default() -> Config {
        Config { lease_ttl: Duration::from_secs(60), offline_allowance: None, default_max_output_tokens: 4_096 }
    }
}

impl Config {
    /// Leases of 10 s to an hour; a non-negative allowance and bound.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !(Duration::from_secs(10)..=Duration::from_secs(3_600)).contains(&self.lease_ttl) {
            anyhow::bail!("lease lifetime {:?} must be between 10 s and an hour", self.lease_ttl);
        }
        if self.offline_allowance.is_some_and(|a| a < 0) || self.default_max_output_tokens < 0 {
            anyhow::bail!("the offline allowance and the default output bound cannot be negative");
        }
        Ok(())
    }
}

// === impl Budgets ===

impl Budgets {
    /// The budget step leasing from `source`; the number of data planes
    /// last heard is kept in `fleet_file` (when given) for the next start.
    pub fn new(source: Arc<dyn SpendSource>, config: Config, fleet_file: Option<PathBuf>) -> Budgets {
        let data_planes = fleet_file
            .as_deref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| text.trim().parse::<u32>().ok())
            .unwrap_or(1)
            .max(1);
        let state = State { pools: HashMap::default(), data_planes, down: None, swept_at: Instant::now() };
        Budgets { inner: Arc::new(Inner { source, config, fleet_file, state: Mutex::new(state) }) }
    }

    /// The settings it runs with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// What is left of each of `budgets` (`token:<id>`: quota less used;
    /// `account:<id>`: the balance) as the control plane says now, leasing
    /// nothing; `None` when it cannot be asked within `ACQUIRE_TIMEOUT`, or
    /// says a budget is unlimited or gone (news the snapshot will bring).
    pub async fn remaining(&self, budgets: &[String]) -> Option<Vec<i64>> {
        let asks: Vec<Ask> = budgets.iter().map(|budget| Ask { budget: budget.clone(), need: 0, want: 0 }).collect();
        let acquire = self.inner.source.acquire(asks, self.inner.config.lease_ttl);
        match tokio::time::timeout(ACQUIRE_TIMEOUT, acquire).await {
            Ok(Ok((grants, _, _))) if grants.len() == budgets.len() => {
                grants.iter().map(|grant| (!grant.unlimited && !grant.missing).then_some(grant.remaining)).collect()
            }
            _ => None,
        }
    }

    /// Reserves `amount` micro-USD of `caller`'s token quota and account
    /// balance (those that are capped). Refuses with the catalogue's 403 when
    /// the control plane cannot lease that much, or with 503 when it cannot
    /// be reached and the leases held do not cover it. May wait up to
    /// `ACQUIRE_TIMEOUT` per lease request.
    pub async fn reserve(&self, caller: &Caller, amount: i64, revision: u64) -> Result<Reservation, ProxyError> {
        // Each budget with what the snapshot says is left of it.
        let mut budgets = Vec::with_capacity(2);
        if !caller.token.unlimited {
            let left = caller.token.quota_micros.saturating_sub(caller.token.used_micros);
            budgets.push((["token:", &caller.token.id].concat(), left));
        }
        if !caller.account.unlimited {
            budgets.push((["account:", &caller.account.id].concat(), caller.account.balance_micros));
        }
        let amount = amount.max(0);
        if budgets.is_empty() {
            return Ok(Reservation::default());
        }
        let deadline = Instant::now() + MAX_WAIT;
        let mut waiting: Option<Waiting> = None;
        loop {
            match self.try_reserve(&mut budgets, amount, revision, waiting.is_none()) {
                Step::Reserved(reservation) => return Ok(reservation),
                Step::Refused(error) => return Err(error),
                Step::Wait(leases, counted) => {
                    if !counted.is_empty() {
                        waiting = Some(Waiting { inner: self.inner.clone(), budgets: counted, amount });
                    }
                    let landed = async {
                        for mut lease in leases {
                            // Errs once the sender is dropped: the answer has landed.
                            let _ = lease.changed().await;
                        }
                    };
                    if tokio::time::timeout_at(deadline, landed).await.is_err() {
                        return Err(self.gave_up(&budgets, amount));
                    }
                }
            }
        }
    }

    /// Why a request that waited `MAX_WAIT` for `amount` of `budgets` is
    /// refused: 503 while the control plane is unreachable (or never
    /// answered), else the 403 of a budget still short: the control plane
    /// answered, and what it could lease went to other requests.
    fn gave_up(&self, budgets: &[(String, i64)], amount: i64) -> ProxyError {
        let state = self.inner.lock();
        if state.down.is_some() {
            return ProxyError::BudgetUnavailable;
        }
        let now = Instant::now();
        let short = budgets.iter().find_map(|(budget, _)| {
            let pool = state.pools.get(budget).filter(|p| p.heard && !p.unlimited && p.free(now) < amount)?;
            Some(refusal(budget, pool.remaining))
        });
        short.unwrap_or(ProxyError::BudgetUnavailable)
    }

    /// Whether `budget` (`token:<id>` or `account:<id>`) is known to be
    /// used up (refused moments ago and nothing held), for the access checks
    /// that run before routing; the quota or balance left when it is.
    pub fn known_short(&self, budget: &str, revision: u64) -> Option<i64> {
        let state = self.inner.lock();
        let now = Instant::now();
        let pool = state.pools.get(budget)?;
        let short = pool.refused.is_some_and(|r| r.holds(now, revision)) && pool.free(now) <= 0;
        short.then_some(pool.remaining)
    }

    /// `known_short` of the budget `kind` + `id` (`token:` and a token's
    /// id), its name put together in a buffer of the thread's rather than
    /// a new string per request.
    pub fn known_short_of(&self, kind: &str, id: &str, revision: u64) -> Option<i64> {
        thread_local! {
            static NAME: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        NAME.with_borrow_mut(|name| {
            name.clear();
            name.push_str(kind);
            name.push_str(id);
            self.known_short(name, revision)
        })
    }

    /// One try at reserving `amount` of each of `budgets` from what is
    /// held; asks for what is short (counting the request in the demand of
    /// those budgets when `count` is set, its first time waiting).
    fn try_reserve(&self, budgets: &mut Vec<(String, i64)>, amount: i64, revision: u64, count: bool) -> Step {
        let mut state = self.inner.lock();
        let now = Instant::now();
        self.sweep(&mut state, now);
        let down = state.down.as_ref().map(|d| d.probe_at > now);
        let data_planes = i64::from(state.data_planes.max(1));
        let mut short = Vec::new();
        for (budget, snapshot_left) in budgets.iter() {
            // The key is copied only for a new pool, not on every request.
            if !state.pools.contains_key(budget) {
                state.pools.insert(budget.clone(), Pool::new(now));
            }
            let Some(pool) = state.pools.get_mut(budget) else { continue };
            pool.last_used = now;
            if pool.unlimited || pool.free(now) >= amount {
                continue;
            }
            let need = amount - pool.free(now).max(0);
            if let Some(refused) = pool.refused
                && refused.holds(now, revision)
                && need >= refused.need
            {
                return Step::Refused(refusal(budget, pool.remaining));
            }
            let allowance = self.inner.config.offline_allowance.unwrap_or_else(|| {
                let left = if pool.heard { pool.available } else { *snapshot_left };
                left.max(0) / data_planes
            });
            match down {
                // Unreachable and not yet time to probe: the offline allowance.
                Some(true) if pool.offline + need <= allowance => {}
                Some(true) => return Step::Refused(ProxyError::BudgetUnavailable),
                _ => short.push((budget.clone(), need)),
            }
        }
        if short.is_empty() {
            let mut renew = Vec::new();
            for (budget, _) in budgets.iter() {
                let Some(pool) = state.pools.get_mut(budget) else { continue };
                if pool.unlimited {
                    continue;
                }
                let beyond = (amount - pool.free(now).max(0)).max(0);
                pool.offline += beyond;
                pool.held += beyond;
                pool.reserved += amount;
                if down.is_none() && pool.fetching.is_none() && pool.runs_low(now, self.inner.config.lease_ttl) {
                    renew.push(Ask { budget: budget.clone(), need: 0, want: pool.lease_size(amount) });
                }
            }
            if !renew.is_empty() {
                let _ = self.fetch(&mut state, renew, revision);
            }
            // Reserved is the last step: the keys move into the reservation.
            let budgets =
                budgets.drain(..).map(|(b, _)| b).filter(|b| state.pools.get(b).is_some_and(|p| !p.unlimited));
            return Step::Reserved(Reservation { inner: Some(self.inner.clone()), budgets: budgets.collect(), amount });
        }
        let mut waits = Vec::new();
        let mut asks = Vec::new();
        let mut counted = Vec::new();
        for (budget, need) in short {
            let Some(pool) = state.pools.get_mut(&budget) else { continue };
            if count {
                pool.waiting = pool.waiting.saturating_add(amount);
            }
            match &pool.fetching {
                Some(lease) => waits.push(lease.clone()),
                None => {
                    // Everything waiting, this request included, less what
                    // is free already.
                    let demand = need.max(pool.waiting.saturating_sub(pool.free(now).max(0)));
                    // A burst asks for its demand as a need, as far as the
                    // control plane said it has it: granted whole, not a
                    // quarter per round trip.
                    let firm = if pool.heard { demand.min(pool.available) } else { 0 };
                    pool.firm = (firm > need).then_some(need);
                    asks.push(Ask { budget: budget.clone(), need: need.max(firm), want: pool.lease_size(demand) });
                }
            }
            if count {
                counted.push(budget);
            }
        }
        if !asks.is_empty() {
            waits.push(self.fetch(&mut state, asks, revision));
        }
        Step::Wait(waits, counted)
    }

    /// Spawns one lease request; returns what to wait on for its answer.
    fn fetch(&self, state: &mut State, asks: Vec<Ask>, revision: u64) -> watch::Receiver<()> {
        let (landed, lease) = watch::channel(());
        for ask in &asks {
            if let Some(pool) = state.pools.get_mut(&ask.budget) {
                pool.fetching = Some(lease.clone());
            }
        }
        let inner = self.inner.clone();
        // In the span of the request that asked: its trace shows the call.
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let sent = Instant::now();
            let ttl = inner.config.lease_ttl;
            let answer = match tokio::time::timeout(ACQUIRE_TIMEOUT, inner.source.acquire(asks.clone(), ttl)).await {
                Ok(answer) => answer,
                Err(_) => Err(SourceError::Timeout(ACQUIRE_TIMEOUT)),
            };
            inner.land(&asks, answer, sent, revision);
            drop(landed);
        }));
        lease
    }

    /// Gives back, every `SWEEP_EVERY` until `shutdown`, what budgets idle
    /// for `IDLE` hold, also while no request comes to do it.
    pub async fn sweep_idle(self, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            let mut state = self.inner.lock();
            self.sweep(&mut state, Instant::now());
        }
    }

    /// Gives back what idle budgets hold, at most once per `SWEEP_EVERY`.
    fn sweep(&self, state: &mut State, now: Instant) {
        if now.duration_since(state.swept_at) < SWEEP_EVERY {
            return;
        }
        state.swept_at = now;
        let mut returns = Vec::new();
        state.pools.retain(|budget, pool| {
            let idle = pool.reserved == 0
                && pool.waiting == 0
                && pool.fetching.is_none()
                && now.duration_since(pool.last_used) >= IDLE;
            if idle && pool.held > 0 && pool.expires > now {
                returns.push((budget.clone(), pool.held));
            }
            !idle
        });
        if !returns.is_empty() {
            tokio::spawn(self.inner.source.give_back(returns));
        }
    }

    /// What this data plane holds of `budget` (tests).
    #[cfg(test)]
    fn held(&self, budget: &str) -> i64 {
        self.inner.lock().pools.get(budget).map_or(0, |p| p.held)
    }
}

// === impl Inner ===

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock; a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts the answer to `asks` (sent at `sent` under policy `revision`)
    /// into the pools. A budget that could not cover its need gives back
    /// what it holds free, so that the fragments data planes hold of a
    /// nearly spent budget come together again at the control plane.
    fn land(&self, asks: &[Ask], answer: Answer, sent: Instant, revision: u64) {
        let mut state = self.lock();
        let now = Instant::now();
        let mut firm = Vec::with_capacity(asks.len());
        for ask in asks {
            let pool = state.pools.get_mut(&ask.budget);
            firm.push(pool.and_then(|pool| {
                pool.fetching = None;
                pool.firm.take()
            }));
        }
        match answer {
            Ok((grants, ttl, data_planes)) => {
                let data_planes = data_planes.max(1);
                if state.data_planes != data_planes {
                    state.data_planes = data_planes;
                    if let Some(path) = &self.fleet_file {
                        let tmp = path.with_extension("tmp");
                        if let Err(error) =
                            crate::durable::write_durably(&tmp, path, data_planes.to_string().as_bytes())
                        {
                            tracing::warn!(error = %format!("{error:#}"), "cannot keep the fleet size");
                        }
                    }
                }
                if state.down.take().is_some() {
                    tracing::info!("control plane leases budgets again");
                }
                let expires = sent + ttl.saturating_sub(EXPIRY_MARGIN);
                let mut returns = Vec::new();
                for ((ask, grant), firm) in asks.iter().zip(grants).zip(firm) {
                    let Some(pool) = state.pools.get_mut(&ask.budget) else { continue };
                    pool.remaining = grant.remaining;
                    pool.available = grant.available;
                    pool.heard = true;
                    pool.unlimited = grant.unlimited;
                    if pool.expires <= now {
                        // The old lease lapsed on the control plane too.
                        pool.held = pool.reserved.min(pool.held);
                    }
                    pool.held += grant.granted;
                    pool.expires = expires;
                    pool.offline = 0;
                    // A firm ask the control plane could no longer cover (another
                    // data plane took some meanwhile) is asked again, as
                    // large as what it says is available now; only the
                    // asking request's own need going uncovered is a refusal.
                    let need = match firm {
                        Some(own) if grant.granted < ask.need && !grant.missing => own,
                        _ => ask.need,
                    };
                    let short = grant.missing || (need > 0 && grant.granted < need && grant.available < need);
                    pool.refused = short.then_some(Refused { need: ask.need, until: now + REFUSAL_MEMORY, revision });
                    let free = pool.free(now);
                    if short && free > 0 {
                        pool.held -= free;
                        returns.push((ask.budget.clone(), free));
                    }
                }
                if !returns.is_empty() {
                    tokio::spawn(self.source.give_back(returns));
                }
            }
            Err(error) => {
                let first = state.down.is_none();
                let down = state
                    .down
                    .get_or_insert_with(|| Down { probe_at: now, backoff: Backoff::new(PROBE_MIN, PROBE_MAX) });
                down.probe_at = now + down.backoff.next_delay();
                if first {
                    tracing::warn!(
                        error = %crate::error::error_chain(&error),
                        allowance = ?self.config.offline_allowance,
                        "control plane unreachable for spending budgets; admitting only what leases hold \
                         (plus the offline allowance) until it answers"
                    );
                }
            }
        }
    }
}

// === impl Refused ===

impl Refused {
    fn holds(&self, now: Instant, revision: u64) -> bool {
        self.until > now && self.revision == revision
    }
}

// === impl Pool ===

impl Pool {
    fn new(now: Instant) -> Pool {
        Pool {
            held: 0,
            reserved: 0,
            expires: now,
            remaining: 0,
            available: 0,
            heard: false,
            unlimited: false,
            offline: 0,
            refused: None,
            fetching: None,
            waiting: 0,
            firm: None,
            last_used: now,
            spent_now: 0,
            spent_before: 0,
            period_start: now,
        }
    }

    /// Held and not reserved, while the lease lives.
    fn free(&self, now: Instant) -> i64 {
        if self.expires > now { self.held - self.reserved } else { (self.held - self.reserved).min(0) }
    }

    /// What to ask for beyond a `need`: about one idle period of recent
    /// spending, at least four times the need.
    fn lease_size(&self, need: i64) -> i64 {
        need.saturating_mul(4).max(self.spent_now.max(self.spent_before)).min(MAX_LEASE)
    }

    /// Whether to renew: the lease lapses within a third of its lifetime, or
    /// less than a quarter of a lease is free.
    fn runs_low(&self, now: Instant, ttl: Duration) -> bool {
        self.expires.saturating_duration_since(now) < ttl / 3 || self.free(now) < self.lease_size(0) / 4
    }

    /// A request that reserved `reserved` ended costing `cost`.
    fn settle(&mut self, reserved: i64, cost: i64, now: Instant) {
        self.reserved -= reserved;
        self.held -= cost;
        if now.duration_since(self.period_start) >= IDLE {
            self.spent_before = self.spent_now;
            self.spent_now = 0;
            self.period_start = now;
        }
        self.spent_now = self.spent_now.saturating_add(cost);
    }
}

// === impl Reservation ===

impl Reservation {
    /// The request ended costing `cost`: its budgets keep what it did not use.
    pub fn settle(mut self, cost: i64) {
        self.finish(cost.max(0));
    }

    fn finish(&mut self, cost: i64) {
        let Some(inner) = self.inner.take() else { return };
        let mut state = inner.lock();
        let now = Instant::now();
        for budget in &self.budgets {
            if let Some(pool) = state.pools.get_mut(budget) {
                pool.settle(self.amount, cost, now);
            }
        }
    }
}

// === impl Waiting ===

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        for budget in &self.budgets {
            if let Some(pool) = state.pools.get_mut(budget) {
                pool.waiting = pool.waiting.saturating_sub(self.amount).max(0);
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // Unsettled: nothing was sent upstream, nothing spent.
        self.finish(0);
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation").field("budgets", &self.budgets).field("amount", &self.amount).finish()
    }
}

/// The 403 for a budget the control plane would not lease enough of.
fn refusal(budget: &str, remaining: i64) -> ProxyError {
    if budget.starts_with("token:") {
        ProxyError::TokenQuotaExhausted
    } else {
        ProxyError::InsufficientUserQuota { balance_micros: remaining }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
pub mod tests;
