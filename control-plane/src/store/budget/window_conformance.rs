//! Conformance cases of window budgets (see `calendar`): counting in the
//! ledger and capping leases and charges, on every backend.

use std::sync::Arc;

use jiff::Timestamp;

use super::{Budget, Charged, LeaseAsk};
use crate::domain::calendar::{WindowBudget, WindowPeriod, zone};
use crate::domain::{Resource, now_unix};
use crate::store::Store;
use crate::store::conformance::{account, token, usage};

const HOUR: i64 = 3_600;

pub async fn run(store: Arc<dyn Store>) {
    a_window_caps_leases_below_the_lifetime_cap(&*store).await;
    resent_records_count_once_in_their_window(store.clone()).await;
    records_count_in_the_window_holding_their_creation(&*store).await;
    rolling_windows_sum_the_last_hours(&*store).await;
    concurrent_leases_never_exceed_the_window(store.clone()).await;
    charges_are_capped_by_the_window(&*store).await;
}

fn window(period: WindowPeriod, quota_micros: i64, time_zone: &str) -> WindowBudget {
    let rolling_hours = if period == WindowPeriod::Rolling { 2 } else { 0 };
    WindowBudget { period, rolling_hours, quota_micros, time_zone: time_zone.into() }
}

/// An account with `balance` (unlimited when `None`) and a token of it
/// (quota 5,000,000), with window budgets.
async fn seed(
    store: &dyn Store,
    id: &str,
    balance: Option<i64>,
    acct: Option<WindowBudget>,
    tok: Option<WindowBudget>,
) {
    let mut a = account(id, balance.unwrap_or(0));
    if let Resource::Account(a) = &mut a {
        a.unlimited = balance.is_none();
        a.window = acct;
    }
    store.create(a).await.expect("create account");
    let mut t = token(&format!("{id}-tok"), id);
    if let Resource::Token(t) = &mut t {
        t.window = tok;
    }
    store.create(t).await.expect("create token");
}

fn ask(budget: &Budget, holder: &str, need: i64, now: i64) -> LeaseAsk {
    LeaseAsk { budget: budget.clone(), holder: holder.into(), need, want: need, now, ttl_secs: 60 }
}

async fn apply(store: &dyn Store, request_id: &str, id: &str, cost: i64, created_at: i64) {
    let mut record = usage(request_id, &format!("{id}-tok"), id, "m", cost);
    record.created_at = created_at;
    store.apply_usage(&[record]).await.expect("apply usage");
}

async fn spent(store: &dyn Store, budget: &Budget, w: &WindowBudget, at: i64) -> i64 {
    let current = w.window_at(at).expect("window");
    store.window_spent(budget, &current.buckets).await.expect("window spent")
}

/// A token's daily budget of 700 in Berlin and its account's of 1,000 in
/// UTC cap what is leased while lifetime caps have plenty; the next day
/// has the whole budget again.
pub async fn a_window_caps_leases_below_the_lifetime_cap(store: &dyn Store) {
    let (acct_w, tok_w) = (window(WindowPeriod::Day, 1_000, "UTC"), window(WindowPeriod::Day, 700, "Europe/Berlin"));
    seed(store, "win-cap", Some(10_000_000), Some(acct_w.clone()), Some(tok_w.clone())).await;
    let now = now_unix();
    apply(store, "win-cap-1", "win-cap", 300, now).await;
    let tok = Budget::Token("win-cap-tok".into());
    let acct = Budget::Account("win-cap".into());
    assert_eq!(spent(store, &tok, &tok_w, now).await, 300);
    let lease = store.lease(&ask(&tok, "dp-1", 500, now)).await.expect("lease");
    assert_eq!((lease.granted, lease.remaining, lease.unlimited), (0, 400, false), "400 left of today's 700");
    let lease = store.lease(&ask(&tok, "dp-1", 400, now)).await.expect("lease");
    assert_eq!((lease.granted, lease.available), (400, 0));
    assert_eq!(store.lease(&ask(&acct, "dp-1", 0, now)).await.expect("lease").remaining, 700);
    let tomorrow = tok_w.window_at(now).expect("window").end;
    let lease = store.lease(&ask(&tok, "dp-2", 600, tomorrow)).await.expect("lease");
    assert_eq!(lease.remaining, 700, "a new day: the budget is available again");
    assert_eq!(spent(store, &tok, &tok_w, tomorrow).await, 0);
}

/// The same record sent 8 times at once counts once in its windows.
pub async fn resent_records_count_once_in_their_window(store: Arc<dyn Store>) {
    let w = window(WindowPeriod::Week, 10_000, "America/New_York");
    seed(&*store, "win-resend", Some(10_000_000), Some(w.clone()), Some(w.clone())).await;
    let now = now_unix();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { apply(&*store, "win-resend-1", "win-resend", 250, now).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(spent(&*store, &Budget::Token("win-resend-tok".into()), &w, now).await, 250);
    assert_eq!(spent(&*store, &Budget::Account("win-resend".into()), &w, now).await, 250);
}

/// Around the next clock change of Berlin: a record counts in the day that
/// holds it, from the day's first second to its last, and that day is 23
/// or 25 hours long.
pub async fn records_count_in_the_window_holding_their_creation(store: &dyn Store) {
    let w = window(WindowPeriod::Day, 1_000_000, "Europe/Berlin");
    seed(store, "win-dst", Some(10_000_000), None, Some(w.clone())).await;
    let berlin = zone("Europe/Berlin").expect("zone");
    let after = Timestamp::from_second(now_unix()).expect("now");
    let change = berlin.following(after).next().expect("Berlin changes its clocks").timestamp().as_second();
    let day = w.window_at(change).expect("window");
    assert!([23 * HOUR, 25 * HOUR].contains(&(day.end - day.start)), "{day:?}");
    let records = [(day.start, 1), (day.end - 1, 10), (day.start - 1, 100), (day.end, 1_000)];
    for (i, (at, cost)) in records.into_iter().enumerate() {
        apply(store, &format!("win-dst-{i}"), "win-dst", cost, at).await;
    }
    let tok = Budget::Token("win-dst-tok".into());
    assert_eq!(spent(store, &tok, &w, change).await, 11);
    assert_eq!(spent(store, &tok, &w, day.start - 1).await, 100);
    assert_eq!(spent(store, &tok, &w, day.end).await, 1_000);
    let lease = store.lease(&ask(&tok, "dp-1", 0, day.end - 1)).await.expect("lease");
    assert_eq!(lease.remaining, 1_000_000 - 11);
}

/// A rolling window of 2 hours sums the hour of now and the one before.
pub async fn rolling_windows_sum_the_last_hours(store: &dyn Store) {
    let w = window(WindowPeriod::Rolling, 1_000, "UTC");
    seed(store, "win-roll", None, Some(w.clone()), None).await;
    let now = now_unix();
    for (i, (at, cost)) in [(now - 2 * HOUR, 1), (now - HOUR, 10), (now, 100)].into_iter().enumerate() {
        apply(store, &format!("win-roll-{i}"), "win-roll", cost, at).await;
    }
    let acct = Budget::Account("win-roll".into());
    assert_eq!(spent(store, &acct, &w, now).await, 110);
    let lease = store.lease(&ask(&acct, "dp-1", 0, now)).await.expect("lease");
    assert_eq!((lease.remaining, lease.unlimited), (890, false), "an unlimited account is still capped by its window");
    let lease = store.lease(&ask(&acct, "dp-1", 0, now + HOUR)).await.expect("lease");
    assert_eq!(lease.remaining, 900, "an hour on, the oldest counted hour has left the window");
}

/// 4 data planes × 20 asks of 30 against a window of 1,000 of an
/// unlimited account: exactly 33 are granted, whatever the interleaving.
pub async fn concurrent_leases_never_exceed_the_window(store: Arc<dyn Store>) {
    seed(&*store, "win-race", None, Some(window(WindowPeriod::Month, 1_000, "Asia/Kolkata")), None).await;
    let budget = Budget::Account("win-race".into());
    let now = now_unix();
    let tasks: Vec<_> = (0..80)
        .map(|i| {
            let (store, ask) = (store.clone(), ask(&budget, &format!("dp-{}", i % 4), 30, now));
            tokio::spawn(async move { store.lease(&ask).await.expect("lease") })
        })
        .collect();
    let mut granted = Vec::new();
    for task in tasks {
        granted.push(task.await.expect("task").granted);
    }
    assert!(granted.iter().all(|g| *g == 0 || *g == 30), "grants are all or nothing: {granted:?}");
    assert_eq!(granted.iter().sum::<i64>(), 990, "leased of a window of 1,000");
}

/// A charge past what is left of the account's window is refused.
pub async fn charges_are_capped_by_the_window(store: &dyn Store) {
    seed(store, "win-charge", Some(10_000_000), Some(window(WindowPeriod::Day, 500, "UTC")), None).await;
    let now = now_unix();
    let charge = |id: &str, cost| {
        let mut record = usage(id, "win-charge-tok", "win-charge", "m", cost);
        record.created_at = now;
        record
    };
    assert_eq!(store.charge(&charge("win-charge-1", 400), now).await.expect("charge"), Charged::Applied);
    assert_eq!(
        store.charge(&charge("win-charge-2", 200), now).await.expect("charge"),
        Charged::Balance { balance_micros: 100 },
        "100 left of the day's 500"
    );
    assert_eq!(store.charge(&charge("win-charge-3", 100), now).await.expect("charge"), Charged::Applied);
}
