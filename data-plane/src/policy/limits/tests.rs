use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::{body::Body, http::StatusCode};
use tower::ServiceExt as _;

use super::*;
use crate::{
    http,
    pipeline::App,
    policy::domain::{Group, Restrictions, Token},
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
                Err(SourceError::Call(tonic::Status::unavailable("control plane down").into()))
            });
        }
        let now = (self.clock)();
        let mut counts = self.counts.lock().unwrap();
        let grants = asks
            .into_iter()
            .map(|ask| {
                let (window_start, window_end) = window(now, ask.limit.window_minutes);
                let count = counts.entry((ask.key, window_start)).or_default();
                let granted = ask.want.min(ask.limit.max_requests.saturating_sub(*count));
                *count += granted + ask.charge;
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

/// A caller of token t1 in account a1 under a tokens-per-minute limit.
fn tpm_caller(tokens_per_minute: u32) -> Caller {
    let token = fx::token("t1", "sk-x").restricted(Restrictions { tokens_per_minute, ..Restrictions::default() });
    Caller { token: Arc::new(token), account: Arc::new(fx::account("a1")), group: Arc::new(fx::group("g")) }
}

/// A caller of token `token` in account `account`, group `g`.
fn caller(token: &str, account: &str, token_limit: RateLimit, group_limit: RateLimit) -> Caller {
    let token = Token { account_id: account.into(), ..fx::token(token, "sk-x") }
        .restricted(Restrictions { rate_limit: token_limit, ..Restrictions::default() });
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
    let sizes: Vec<u32> = [1, 9, 10, 11, 25, 1_000, 5_000].into_iter().map(|max| lease_size(max, 0)).collect();
    assert_eq!(sizes, [1, 1, 1, 2, 3, 100, 100]);
}

#[test]
fn a_busy_data_plane_leases_what_it_admitted_lately_up_to_a_tenth_of_the_limit() {
    assert_eq!(lease_size(1_000_000, 2_500), 2_500);
    assert_eq!(lease_size(1_000_000, 50), 100);
    assert_eq!(lease_size(5_000, 2_500), 500);
    assert_eq!(lease_size(10, 2_500), 1);
}

#[tokio::test(start_paused = true)]
async fn a_busy_data_plane_asks_for_bigger_leases_and_its_requests_do_not_wait_on_each() {
    // 5,000 requests a second for a second against a million a minute, with
    // a control plane that takes 20 ms to answer. Leases of 100 would last
    // 20 ms: requests would wait on every other round trip.
    let authority = Authority::new(clock(0), Duration::from_millis(20));
    let limiter = limiter(&authority, clock(0));
    let caller = caller("t1", "a1", limit(1_000_000, 1), limit(0, 0));
    let mut waited_once_warm = 0;
    for i in 0..5_000 {
        let started = Instant::now();
        limiter.check(&caller).await.unwrap();
        // The first 200 ms are how long it takes to learn the demand.
        waited_once_warm += usize::from(i >= 1_000 && started.elapsed() > Duration::ZERO);
        if i % 5 == 4 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    assert_eq!(waited_once_warm, 0, "requests waited for a lease once the demand was known");
    assert!(authority.calls() <= 40, "{} lease requests", authority.calls());
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
    let token = fx::token("t1", http::tests::KEY)
        .restricted(Restrictions { rate_limit: limit(2, 1), ..Restrictions::default() });
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
            assert_eq!(json["error"]["message"], format!("您已达到请求数限制:1分钟内最多请求2次 (request id: {id})"));
            assert_eq!(json["error"]["code"], "rate_limit_exceeded");
            assert_eq!(json["error"]["type"], "rate_limit_error");
        }
    }
    assert_eq!(statuses, [StatusCode::NOT_FOUND, StatusCode::NOT_FOUND, StatusCode::TOO_MANY_REQUESTS]);
}

#[tokio::test(start_paused = true)]
async fn token_reservations_on_two_data_planes_never_pass_the_limit_in_a_window() {
    let authority = Authority::new(clock(15_000), Duration::from_millis(3));
    let limiters = [limiter(&authority, clock(15_000)), limiter(&authority, clock(15_000))];
    let caller = tpm_caller(10_000);
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (limiter, caller) = (limiters[i % 2].clone(), caller.clone());
            tokio::spawn(async move { limiter.reserve_tokens(&caller, 700).await })
        })
        .collect();
    let (mut held, mut refusals) = (Vec::new(), Vec::new());
    for task in tasks {
        match task.await.unwrap() {
            Ok(reservation) => held.push(reservation),
            Err(error) => refusals.push(error),
        }
    }
    // Never over (14 × 700 ≤ 10,000); under by what a data plane strands.
    assert!((12..=14).contains(&held.len()), "{} bounds of 700 held under 10,000 a minute", held.len());
    for error in &refusals {
        assert_eq!(*error, ProxyError::TokensLimited { tokens_per_minute: 10_000, retry_after_secs: 45 });
    }
    let spent: u32 = limiters.iter().map(|l| l.spent("tpm:token:t1")).sum();
    assert_eq!(spent as usize, held.len() * 700);
    let granted: u32 = authority.counts.lock().unwrap().values().sum();
    assert!(granted <= 10_000, "the control plane granted {granted}");
}

#[tokio::test(start_paused = true)]
async fn settling_gives_back_the_unused_part_and_an_overrun_is_charged_to_the_window() {
    let authority = Authority::new(clock(0), Duration::from_millis(3));
    let (a, b) = (limiter(&authority, clock(0)), limiter(&authority, clock(0)));
    let caller = tpm_caller(1_000);
    let big = a.reserve_tokens(&caller, 900).await.unwrap();
    assert!(a.reserve_tokens(&caller, 200).await.is_err(), "900 of 1,000 are reserved");
    big.settle(100);
    assert_eq!(a.spent("tpm:token:t1"), 100, "the unused 800 went back to the pool");
    let again = a.reserve_tokens(&caller, 800).await.unwrap();
    drop(again);
    assert_eq!(a.spent("tpm:token:t1"), 100, "an unsettled reservation gives everything back");

    // An overrun beyond the pool is charged to the control plane's window:
    // the other data plane is granted that much less.
    let small = a.reserve_tokens(&caller, 50).await.unwrap();
    small.settle(850);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (admitted, _) = {
        let mut admitted = 0;
        while b.reserve_tokens(&caller, 10).await.map(std::mem::forget).is_ok() {
            admitted += 1;
        }
        (admitted, ())
    };
    let granted_to_a = authority.counts.lock().unwrap().values().sum::<u32>();
    assert!(granted_to_a >= 1_000, "the window's count includes the overrun: {granted_to_a}");
    assert!(admitted * 10 <= 1_000 - 900, "b reserved {} tokens after a used 900", admitted * 10);
}

#[tokio::test(start_paused = true)]
async fn a_bound_larger_than_the_limit_is_refused_and_no_limit_reserves_nothing() {
    let authority = Authority::new(clock(0), Duration::from_millis(3));
    let limiter = limiter(&authority, clock(0));
    let refused = limiter.reserve_tokens(&tpm_caller(1_000), 1_001).await.unwrap_err();
    assert!(matches!(refused, ProxyError::TokensLimited { tokens_per_minute: 1_000, .. }), "{refused:?}");
    let free = limiter.reserve_tokens(&tpm_caller(0), 1_000_000).await.unwrap();
    free.settle(2_000_000);
    assert_eq!(authority.calls(), 0, "callers without a limit never ask");
}

#[tokio::test(start_paused = true)]
async fn without_the_control_plane_each_data_plane_reserves_up_to_the_full_token_limit() {
    let authority = Authority::new(clock(0), Duration::from_millis(3));
    authority.set_down(true);
    let (a, b) = (limiter(&authority, clock(0)), limiter(&authority, clock(0)));
    let caller = tpm_caller(1_000);
    let mut held = Vec::new();
    for limiter in [&a, &b] {
        while let Ok(reservation) = limiter.reserve_tokens(&caller, 300).await {
            held.push(reservation);
        }
    }
    assert_eq!(held.len(), 6, "3 bounds of 300 per data plane, each counting 1,000 locally");
    held.pop().unwrap().settle(100);
    assert!(b.reserve_tokens(&caller, 200).await.is_ok(), "settling gives back locally too");
}
