use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;
use crate::policy::{
    domain::{Account, Token},
    snapshot::tests as fx,
};

/// A budget authority in memory: every budget starts with `remaining`
/// and leases follow the control plane's rule (a quarter of what is
/// available beyond the need, never more than available).
pub struct Authority {
    state: Mutex<HashMap<String, (i64, i64)>>,
    start: i64,
    down: AtomicBool,
    calls: AtomicUsize,
    /// How long each answer takes.
    latency: Duration,
}

impl Authority {
    pub fn new(remaining: i64) -> Authority {
        Authority {
            state: Mutex::default(),
            start: remaining,
            down: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
            latency: Duration::from_millis(2),
        }
    }

    /// An authority whose answers each take `latency` (a loaded control plane).
    pub fn slow(remaining: i64, latency: Duration) -> Authority {
        Authority { latency, ..Authority::new(remaining) }
    }

    /// (leased and not given back, settled) of `budget`.
    fn lent(&self, budget: &str) -> i64 {
        self.state.lock().unwrap().get(budget).map_or(0, |b| b.0)
    }
}

impl SpendSource for Authority {
    fn acquire(&self, asks: Vec<Ask>, ttl: Duration) -> Grants {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Box::pin(async { Err(SourceError::Call(tonic::Status::unavailable("down").into())) });
        }
        let mut state = self.state.lock().unwrap();
        let grants = asks
            .iter()
            .map(|ask| {
                let (lent, _) = state.entry(ask.budget.clone()).or_insert((0, 0));
                let available = self.start - *lent;
                let granted = if ask.need <= available && available > 0 {
                    ask.want.max(ask.need).min(ask.need.max(available / 4)).min(available)
                } else {
                    0
                };
                *lent += granted;
                Grant {
                    granted,
                    remaining: self.start,
                    available: self.start - *lent,
                    unlimited: false,
                    missing: false,
                }
            })
            .collect();
        let latency = self.latency;
        Box::pin(async move {
            tokio::time::sleep(latency).await;
            Ok((grants, ttl, 4))
        })
    }

    fn give_back(&self, returns: Vec<(String, i64)>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut state = self.state.lock().unwrap();
        for (budget, amount) in returns {
            if let Some((lent, _)) = state.get_mut(&budget) {
                *lent -= amount;
            }
        }
        Box::pin(async {})
    }
}

fn caller(token_unlimited: bool, account_unlimited: bool) -> Caller {
    let token = Token { unlimited: token_unlimited, quota_micros: 1_000, ..fx::token("t1", "sk-x") };
    let account = Account { balance_micros: 1_000, unlimited: account_unlimited, ..fx::account("a1") };
    Caller { token: Arc::new(token), account: Arc::new(account), group: Arc::new(fx::group("g")) }
}

fn budgets(authority: &Arc<Authority>) -> Budgets {
    let config = Config { offline_allowance: Some(0), ..Config::default() };
    Budgets::new(authority.clone(), config, None)
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_on_four_data_planes_reserve_exactly_the_budget() {
    let authority = Arc::new(Authority::new(1_000));
    let planes: Vec<Budgets> = (0..4).map(|_| budgets(&authority)).collect();
    let caller = caller(false, true);
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let (budgets, caller) = (planes[i % 4].clone(), caller.clone());
            tokio::spawn(async move {
                let reservation = budgets.reserve(&caller, 100, 0).await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                reservation.settle(100);
                Ok::<_, ProxyError>(())
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => admitted += 1,
            Err(error) => assert_eq!(error, ProxyError::TokenQuotaExhausted),
        }
    }
    assert!((7..=10).contains(&admitted), "at most 1,000 of budget at 100 a request: {admitted}");
    // Refused data planes gave their fragments back: after the refusal
    // memory, the rest of the budget is admitted, and not a request more.
    tokio::time::sleep(REFUSAL_MEMORY).await;
    for budgets in &planes {
        while let Ok(reservation) = budgets.reserve(&caller, 100, 0).await {
            reservation.settle(100);
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10, "1,000 of budget at 100 a request");
}

#[tokio::test(start_paused = true)]
async fn what_a_request_did_not_use_stays_held_for_the_next() {
    let authority = Arc::new(Authority::new(1_000_000));
    let budgets = budgets(&authority);
    let caller = caller(false, false);
    budgets.reserve(&caller, 100, 0).await.unwrap().settle(30);
    let held = budgets.held("token:t1");
    assert_eq!(held, authority.lent("token:t1") - 30, "the cost came out of the lease");
    let calls = authority.calls.load(Ordering::SeqCst);
    budgets.reserve(&caller, 100, 0).await.unwrap().settle(100);
    assert_eq!(authority.calls.load(Ordering::SeqCst), calls, "served from what was held");
    drop(budgets.reserve(&caller, 100, 0).await.unwrap());
    assert_eq!(budgets.held("token:t1"), held - 100, "a dropped reservation spends nothing");
}

#[tokio::test(start_paused = true)]
async fn a_refused_account_gets_the_balance_in_its_403_and_is_known_short() {
    let authority = Arc::new(Authority::new(50));
    let budgets = budgets(&authority);
    let refused = budgets.reserve(&caller(true, false), 100, 0).await.unwrap_err();
    assert_eq!(refused, ProxyError::InsufficientUserQuota { balance_micros: 50 });
    assert_eq!(budgets.known_short("account:a1", 0), Some(50));
    assert_eq!(budgets.known_short("account:a1", 1), None, "a new policy revision (a top-up) asks again");
    assert_eq!(budgets.known_short("token:t1", 0), None, "an unlimited token is never short");
    assert!(budgets.reserve(&caller(true, true), 100, 0).await.is_ok(), "unlimited callers reserve nothing");
}

#[tokio::test(start_paused = true)]
async fn without_the_control_plane_only_what_is_held_is_spent_then_503() {
    let authority = Arc::new(Authority::new(1_000_000));
    let budgets = budgets(&authority);
    let caller = caller(false, true);
    budgets.reserve(&caller, 100, 0).await.unwrap().settle(100);
    let held = budgets.held("token:t1");
    authority.down.store(true, Ordering::SeqCst);
    let mut admitted = 0;
    loop {
        match budgets.reserve(&caller, 100, 0).await {
            Ok(reservation) => {
                reservation.settle(100);
                admitted += 1;
            }
            Err(error) => {
                assert_eq!(error, ProxyError::BudgetUnavailable);
                break;
            }
        }
    }
    assert_eq!(admitted, held / 100, "spent what the lease held, no more");
}

#[tokio::test(start_paused = true)]
async fn the_offline_allowance_is_spent_beyond_the_leases() {
    let authority = Arc::new(Authority::new(1_000_000));
    authority.down.store(true, Ordering::SeqCst);
    let config = Config { offline_allowance: Some(250), ..Config::default() };
    let budgets = Budgets::new(authority.clone(), config, None);
    let caller = caller(false, true);
    let mut admitted = 0;
    while let Ok(reservation) = budgets.reserve(&caller, 100, 0).await {
        reservation.settle(100);
        admitted += 1;
    }
    assert_eq!(admitted, 2, "an allowance of 250 at 100 a request");
}

#[tokio::test(start_paused = true)]
async fn by_default_a_data_plane_spends_its_share_of_what_was_left_when_it_last_heard() {
    let authority = Arc::new(Authority::new(1_000_000));
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet");
    let budgets = Budgets::new(authority.clone(), Config::default(), Some(fleet.clone()));
    let caller = caller(false, true);
    budgets.reserve(&caller, 100, 0).await.unwrap().settle(100);
    assert_eq!(std::fs::read_to_string(&fleet).unwrap(), "4", "the fleet size is kept");
    let held = budgets.held("token:t1");
    authority.down.store(true, Ordering::SeqCst);
    let mut admitted = 0;
    while let Ok(reservation) = budgets.reserve(&caller, 100, 0).await {
        reservation.settle(100);
        admitted += 1;
    }
    // What it held, then a quarter (4 data planes) of what no lease held.
    let available = 1_000_000 - authority.lent("token:t1");
    assert_eq!(admitted, held / 100 + available / 4 / 100);

    // Restarted while the control plane is away: the kept fleet size and
    // the snapshot's figure (quota 1,000 left) give a share of 250.
    let budgets = Budgets::new(authority.clone(), Config::default(), Some(fleet));
    let mut admitted = 0;
    while let Ok(reservation) = budgets.reserve(&caller, 100, 0).await {
        reservation.settle(100);
        admitted += 1;
    }
    assert_eq!(admitted, 2, "a share of 250 at 100 a request");
}

#[tokio::test(start_paused = true)]
async fn leases_lapse_and_idle_budgets_are_given_back() {
    let authority = Arc::new(Authority::new(1_000_000));
    let budgets = budgets(&authority);
    let caller = caller(false, true);
    budgets.reserve(&caller, 100, 0).await.unwrap().settle(100);
    assert!(authority.lent("token:t1") > 100);
    tokio::time::sleep(IDLE + SWEEP_EVERY).await;
    // Any request sweeps; this one is for another token.
    let other = Caller { token: Arc::new(Token { id: "t2".into(), ..(*caller.token).clone() }), ..caller.clone() };
    budgets.reserve(&other, 100, 0).await.unwrap().settle(100);
    tokio::task::yield_now().await;
    assert_eq!(authority.lent("token:t1"), 100, "only what was spent stays lent");
}

#[tokio::test(start_paused = true)]
async fn an_idle_data_plane_gives_budgets_back_without_a_request() {
    let authority = Arc::new(Authority::new(1_000_000));
    let budgets = budgets(&authority);
    budgets.reserve(&caller(false, true), 100, 0).await.unwrap().settle(100);
    assert!(authority.lent("token:t1") > 100);
    let (stop, stopped) = watch::channel(false);
    let sweeper = tokio::spawn(budgets.clone().sweep_idle(stopped));
    tokio::time::sleep(IDLE + 2 * SWEEP_EVERY).await;
    tokio::task::yield_now().await;
    assert_eq!(authority.lent("token:t1"), 100, "the sweeper gave back what was not spent");
    stop.send_replace(true);
    sweeper.await.unwrap();
}

/// Opens `n` reservations of `amount` at once on `budgets`; how many were
/// admitted, and every refusal.
async fn burst(budgets: &Budgets, caller: &Caller, n: usize, amount: i64) -> (usize, Vec<ProxyError>) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (budgets, caller) = (budgets.clone(), caller.clone());
            tokio::spawn(async move { budgets.reserve(&caller, amount, 0).await.map(std::mem::forget) })
        })
        .collect();
    let (mut admitted, mut refused) = (0, Vec::new());
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => admitted += 1,
            Err(error) => refused.push(error),
        }
    }
    (admitted, refused)
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_two_thousand_on_a_covering_budget_is_admitted_whole() {
    let authority = Arc::new(Authority::new(100_000_000_000));
    let budgets = budgets(&authority);
    let caller = caller(true, false);
    let (admitted, refused) = burst(&budgets, &caller, 2_000, 60_000).await;
    assert_eq!((admitted, refused), (2_000, Vec::new()));
    assert!(authority.calls.load(Ordering::SeqCst) < 20, "asks follow demand, not one request at a time");
}

#[tokio::test(start_paused = true)]
async fn a_burst_past_the_budget_is_refused_with_403_never_503() {
    let authority = Arc::new(Authority::new(500 * 60_000));
    let planes: Vec<Budgets> = (0..2).map(|_| budgets(&authority)).collect();
    let caller = caller(true, false);
    let (a, b) = tokio::join!(burst(&planes[0], &caller, 1_000, 60_000), burst(&planes[1], &caller, 1_000, 60_000));
    let admitted = a.0 + b.0;
    assert!(admitted <= 500, "never past the balance: {admitted}");
    assert!(admitted >= 450, "the balance is spent, not stranded in leases: {admitted}");
    for error in a.1.iter().chain(&b.1) {
        assert!(matches!(error, ProxyError::InsufficientUserQuota { .. }), "{error:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_past_the_budget_is_answered_in_a_few_slow_round_trips_never_503() {
    // Each lease answer takes 300 ms: a quarter of what is left per round
    // trip would keep requests waiting past `MAX_WAIT`.
    let authority = Arc::new(Authority::slow(1_000 * 10_000, Duration::from_millis(300)));
    let planes: Vec<Budgets> = (0..2).map(|_| budgets(&authority)).collect();
    let caller = caller(true, false);
    let started = Instant::now();
    let (a, b) = tokio::join!(burst(&planes[0], &caller, 1_000, 10_000), burst(&planes[1], &caller, 1_000, 10_000));
    let admitted = a.0 + b.0;
    assert!(admitted <= 1_000, "never past the balance: {admitted}");
    assert!(admitted >= 900, "the balance is spent, not stranded in leases: {admitted}");
    for error in a.1.iter().chain(&b.1) {
        assert!(matches!(error, ProxyError::InsufficientUserQuota { .. }), "{error:?}");
    }
    assert!(started.elapsed() < MAX_WAIT / 2, "answered in {:?}", started.elapsed());
}
