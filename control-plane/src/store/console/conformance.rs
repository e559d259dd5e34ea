//! The console behaviour every backend must show (users, sessions, tickets,
//! top-up codes); part of the store conformance suite. Ids, names and
//! accounts are the checks' own, so they can share a store with the others.

use std::sync::Arc;
use std::time::Duration;

use crate::domain::access::Role;
use crate::domain::console::{CodeStatus, Redemption, Session, Ticket, TicketPurpose, TopupCode, User};
use crate::domain::{Change, Kind, now_unix};
use crate::store::conformance::{account, account_counters};
use crate::store::{Store, StoreError};

/// Concurrent redemptions of one code.
const RACERS: usize = 16;
/// How long Redis or a read may take to forget what expired.
const FORGOTTEN_WITHIN: Duration = Duration::from_secs(10);

/// Runs every single-store check against `store`.
pub async fn run(store: Arc<dyn Store>) {
    users_round_trip_and_ids_and_names_are_unique(&*store).await;
    put_user_keeps_the_last_sign_in_and_moves_the_name(&*store).await;
    sessions_change_in_place_and_are_forgotten(&*store).await;
    tickets_are_taken_once(&*store).await;
    sessions_and_tickets_are_forgotten_at_their_expiry(&*store).await;
    codes_are_created_all_or_none_and_listed(&*store).await;
    revoking_a_code_is_final_and_redeemed_codes_stay(&*store).await;
    redeeming_a_code_credits_the_account_once(&*store).await;
    redemptions_say_why_they_credited_nothing(&*store).await;
    concurrent_redemptions_credit_once(store.clone(), store, "conf-race").await;
}

/// Runs the checks that need two stores on one backend: redemptions of one
/// code through both credit once between them, and what one stores the
/// other reads.
pub async fn run_shared(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    concurrent_redemptions_credit_once(a.clone(), b.clone(), "conf-shared-race").await;
    let user = user("usr_conf_shared", "conf-shared", Role::Admin);
    a.create_user(&user).await.expect("create user through one store");
    assert_eq!(b.user_by_name("conf-shared").await.expect("by name"), Some(user), "the other store reads it");
    let session = session("conf-shared-session", now_unix() + 3_600);
    b.put_session(&session).await.expect("put session through the other store");
    a.touch_session(&session.id_hash, session.last_seen_at + 60).await.expect("touch");
    let touched = b.get_session(&session.id_hash).await.expect("get").expect("the session is stored");
    assert_eq!(touched.last_seen_at, session.last_seen_at + 60, "a touch through one store, read through the other");
}

/// A user `id` named `name` with `role`.
pub fn user(id: &str, name: &str, role: Role) -> User {
    User {
        id: id.into(),
        name: name.into(),
        role,
        account_id: if role == Role::Account { "acc-conf".into() } else { String::new() },
        password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        status: "enabled".into(),
        created_at: 1_700_000_000,
        epoch: 1,
        last_login_at: 0,
    }
}

/// A session `id_hash` of user `usr_conf_a` until `expires_at`.
pub fn session(id_hash: &str, expires_at: i64) -> Session {
    Session {
        id_hash: id_hash.into(),
        user_id: "usr_conf_a".into(),
        epoch: 1,
        csrf: "csrf-conf".into(),
        created_at: expires_at - 7_200,
        last_seen_at: expires_at - 7_200,
        expires_at,
        playground_key: String::new(),
    }
}

/// An invite ticket `hash` until `expires_at`.
pub fn ticket(hash: &str, expires_at: i64) -> Ticket {
    Ticket { hash: hash.into(), purpose: TicketPurpose::Invite, user_id: "usr_conf_a".into(), expires_at }
}

/// An active code `id` whose hash is `hash`, worth `amount_micros`, until
/// `expires_at` (0: never expires).
pub fn code(id: &str, hash: &str, amount_micros: i64, expires_at: i64) -> TopupCode {
    TopupCode {
        id: id.into(),
        code_hash: hash.into(),
        prefix: "GW-ABCD…".into(),
        amount_micros,
        created_at: 1_700_000_000,
        expires_at,
        created_by: "cred-conf-admin".into(),
        status: CodeStatus::Active,
        redeemed_by: String::new(),
        redeemed_at: 0,
        revoked_at: 0,
    }
}

async fn users_round_trip_and_ids_and_names_are_unique(store: &dyn Store) {
    let a = user("usr_conf_a", "conf-alice", Role::Admin);
    let b = user("usr_conf_b", "conf-bob", Role::Account);
    store.create_user(&b).await.expect("create b");
    store.create_user(&a).await.expect("create a");
    assert_eq!(store.get_user(&a.id).await.expect("get"), Some(a.clone()), "get after create");
    assert_eq!(store.user_by_name("conf-bob").await.expect("by name"), Some(b.clone()), "by name");
    assert_eq!(store.get_user("usr_conf_none").await.expect("get"), None, "unknown id");
    assert_eq!(store.user_by_name("conf-nobody").await.expect("by name"), None, "unknown name");
    let listed: Vec<User> =
        store.list_users().await.expect("list").into_iter().filter(|u| u.id.starts_with("usr_conf_")).collect();
    assert_eq!(listed, vec![a.clone(), b.clone()], "list holds both, ordered by id");

    let error = store.create_user(&user("usr_conf_a", "conf-other", Role::Admin)).await.expect_err("taken id");
    assert!(matches!(&error, StoreError::UserExists { id } if id == "usr_conf_a"), "{error:?}");
    assert_eq!(store.user_by_name("conf-other").await.expect("by name"), None, "a refused create writes no name");
    let error = store.create_user(&user("usr_conf_c", "conf-alice", Role::Admin)).await.expect_err("taken name");
    assert!(matches!(&error, StoreError::UserNameTaken { name } if name == "conf-alice"), "{error:?}");
    assert_eq!(store.get_user("usr_conf_c").await.expect("get"), None, "a refused create writes no user");
    assert_eq!(store.user_by_name("conf-alice").await.expect("by name"), Some(a), "the name keeps its owner");

    store.touch_user(&b.id, 1_700_000_100).await.expect("touch");
    store.touch_user(&b.id, 1_700_000_050).await.expect("touch older");
    let touched = store.get_user(&b.id).await.expect("get").expect("exists");
    assert_eq!(touched, User { last_login_at: 1_700_000_100, ..b.clone() }, "touch sets the last sign-in only");
    let listed = store.list_users().await.expect("list");
    let listed = listed.iter().find(|u| u.id == b.id).expect("b listed");
    assert_eq!(listed.last_login_at, 1_700_000_100, "list carries the last sign-in");
    store.touch_user("usr_conf_missing", 1).await.expect("touching a missing user is no error");
    assert_eq!(store.get_user("usr_conf_missing").await.expect("get"), None, "touch creates nothing");
}

async fn put_user_keeps_the_last_sign_in_and_moves_the_name(store: &dyn Store) {
    let stored = user("usr_conf_put", "conf-put", Role::Account);
    store.create_user(&stored).await.expect("create");
    store.touch_user(&stored.id, 1_700_000_300).await.expect("touch");
    // What a writer read before the sign-in: its last_login_at is stale.
    let edited = User { epoch: 2, status: "disabled".into(), password_hash: String::new(), ..stored.clone() };
    store.put_user(&edited).await.expect("put");
    let got = store.get_user(&stored.id).await.expect("get").expect("exists");
    assert_eq!(got, User { last_login_at: 1_700_000_300, ..edited.clone() }, "put replaces all but the last sign-in");
    assert_eq!(store.user_by_name("conf-put").await.expect("by name"), Some(got.clone()), "the name index agrees");

    let error = store.put_user(&user("usr_conf_nobody", "conf-nobody", Role::Admin)).await.expect_err("missing");
    assert!(matches!(&error, StoreError::NoUser { id } if id == "usr_conf_nobody"), "{error:?}");
    assert_eq!(store.get_user("usr_conf_nobody").await.expect("get"), None, "put creates nothing");
    assert_eq!(store.user_by_name("conf-nobody").await.expect("by name"), None, "put indexes nothing");

    let taken = User { name: "conf-alice".into(), ..edited.clone() };
    let error = store.put_user(&taken).await.expect_err("renamed onto a taken name");
    assert!(matches!(&error, StoreError::UserNameTaken { name } if name == "conf-alice"), "{error:?}");
    assert_eq!(store.get_user(&stored.id).await.expect("get"), Some(got), "a refused put changes nothing");
    let renamed = User { name: "conf-put-renamed".into(), ..edited };
    store.put_user(&renamed).await.expect("rename");
    assert_eq!(store.user_by_name("conf-put").await.expect("by name"), None, "the old name is free");
    let by_new = store.user_by_name("conf-put-renamed").await.expect("by name").expect("the new name finds it");
    assert_eq!(by_new.id, stored.id);
    store.create_user(&user("usr_conf_put2", "conf-put", Role::Admin)).await.expect("the old name can be taken");
}

async fn sessions_change_in_place_and_are_forgotten(store: &dyn Store) {
    let live = session("conf-session-live", now_unix() + 3_600);
    store.put_session(&live).await.expect("put");
    assert_eq!(store.get_session(&live.id_hash).await.expect("get"), Some(live.clone()), "get after put");
    store.touch_session(&live.id_hash, live.last_seen_at + 60).await.expect("touch");
    store.set_playground_key(&live.id_hash, "tok-conf-playground").await.expect("playground");
    let changed =
        Session { last_seen_at: live.last_seen_at + 60, playground_key: "tok-conf-playground".into(), ..live };
    assert_eq!(store.get_session(&changed.id_hash).await.expect("get"), Some(changed.clone()), "touch and key");
    let replaced = Session { csrf: "csrf-conf-2".into(), ..session(&changed.id_hash, changed.expires_at + 60) };
    store.put_session(&replaced).await.expect("put again");
    assert_eq!(store.get_session(&replaced.id_hash).await.expect("get"), Some(replaced.clone()), "put replaces");

    store.delete_session(&replaced.id_hash).await.expect("delete");
    assert_eq!(store.get_session(&replaced.id_hash).await.expect("get"), None, "deleted");
    store.delete_session(&replaced.id_hash).await.expect("deleting twice is no error");
    store.touch_session(&replaced.id_hash, 1).await.expect("touching a missing session is no error");
    store.set_playground_key(&replaced.id_hash, "k").await.expect("a key for a missing session is no error");
    assert_eq!(store.get_session(&replaced.id_hash).await.expect("get"), None, "touch and key create nothing");
    assert_eq!(store.get_session("conf-session-unknown").await.expect("get"), None, "unknown");

    let past = session("conf-session-past", now_unix() - 1);
    store.put_session(&past).await.expect("put a past session");
    assert_eq!(store.get_session(&past.id_hash).await.expect("get"), None, "a session past its expiry is gone");
    store.touch_session(&past.id_hash, now_unix()).await.expect("touch");
    assert_eq!(store.get_session(&past.id_hash).await.expect("get"), None, "a touch does not revive it");
    // Stored live, then again with a past expiry: the older value goes.
    store.put_session(&session("conf-session-ended", now_unix() + 3_600)).await.expect("put");
    store.put_session(&session("conf-session-ended", now_unix() - 1)).await.expect("put ended");
    assert_eq!(store.get_session("conf-session-ended").await.expect("get"), None, "an ended session is gone");
}

async fn tickets_are_taken_once(store: &dyn Store) {
    let live = ticket("conf-ticket-live", now_unix() + 3_600);
    store.put_ticket(&live).await.expect("put");
    assert_eq!(store.peek_ticket(&live.hash).await.expect("peek"), Some(live.clone()), "peek");
    assert_eq!(store.peek_ticket(&live.hash).await.expect("peek"), Some(live.clone()), "peek leaves it in place");
    assert_eq!(store.take_ticket(&live.hash).await.expect("take"), Some(live.clone()), "take");
    assert_eq!(store.take_ticket(&live.hash).await.expect("take"), None, "a ticket is taken once");
    assert_eq!(store.peek_ticket(&live.hash).await.expect("peek"), None, "a taken ticket is gone");
    assert_eq!(store.take_ticket("conf-ticket-unknown").await.expect("take"), None, "unknown");

    let past = ticket("conf-ticket-past", now_unix() - 1);
    store.put_ticket(&past).await.expect("put a past ticket");
    assert_eq!(store.peek_ticket(&past.hash).await.expect("peek"), None, "a ticket past its expiry is gone");
    assert_eq!(store.take_ticket(&past.hash).await.expect("take"), None, "and cannot be taken");

    let racers: Vec<_> = (0..4).map(|_| store.take_ticket("conf-ticket-race")).collect();
    store.put_ticket(&ticket("conf-ticket-race", now_unix() + 3_600)).await.expect("put");
    let taken = futures_util::future::join_all(racers).await;
    let taken = taken.into_iter().map(|t| t.expect("take")).filter(Option::is_some).count();
    assert_eq!(taken, 1, "of concurrent takes of one ticket, one gets it");
}

async fn sessions_and_tickets_are_forgotten_at_their_expiry(store: &dyn Store) {
    let expires_at = now_unix() + 2;
    let (session, ticket) = (session("conf-session-short", expires_at), ticket("conf-ticket-short", expires_at));
    store.put_session(&session).await.expect("put");
    store.put_ticket(&ticket).await.expect("put");
    assert!(store.get_session(&session.id_hash).await.expect("get").is_some(), "stored until its expiry");
    assert!(store.peek_ticket(&ticket.hash).await.expect("peek").is_some(), "stored until its expiry");
    let deadline = tokio::time::Instant::now() + FORGOTTEN_WITHIN;
    loop {
        let held = store.get_session(&session.id_hash).await.expect("get").is_some()
            || store.peek_ticket(&ticket.hash).await.expect("peek").is_some();
        if !held {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still held {FORGOTTEN_WITHIN:?} after their expiry");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(now_unix() >= expires_at, "forgotten before their expiry");
    assert_eq!(store.take_ticket(&ticket.hash).await.expect("take"), None, "an expired ticket cannot be taken");
}

async fn codes_are_created_all_or_none_and_listed(store: &dyn Store) {
    let a = code("tpc_conf_a", "hash-conf-code-a", 100, 0);
    let b = code("tpc_conf_b", "hash-conf-code-b", 200, 1_800_000_000);
    store.create_topup_codes(&[b.clone(), a.clone()]).await.expect("create");
    store.create_topup_codes(&[]).await.expect("creating no codes is no error");
    let mine = || async {
        let codes = store.list_topup_codes().await.expect("list");
        codes.into_iter().filter(|c| c.id.starts_with("tpc_conf_")).collect::<Vec<_>>()
    };
    assert_eq!(mine().await, vec![a.clone(), b.clone()], "list holds both, ordered by id");

    let fresh = code("tpc_conf_c", "hash-conf-code-c", 300, 0);
    let refused = [
        ("a taken hash", code("tpc_conf_d", "hash-conf-code-a", 1, 0), "tpc_conf_d"),
        ("a taken id", code("tpc_conf_a", "hash-conf-code-d", 1, 0), "tpc_conf_a"),
        ("a hash earlier in the batch", code("tpc_conf_d", "hash-conf-code-c", 1, 0), "tpc_conf_d"),
        ("an id earlier in the batch", code("tpc_conf_c", "hash-conf-code-d", 1, 0), "tpc_conf_c"),
    ];
    for (what, clash, refused_id) in refused {
        let error = store.create_topup_codes(&[fresh.clone(), clash]).await.expect_err(what);
        assert!(matches!(&error, StoreError::CodeExists { id } if id == refused_id), "{what}: {error:?}");
        assert_eq!(mine().await, vec![a.clone(), b.clone()], "{what}: a refused batch writes none of its codes");
    }
    store.create_topup_codes(std::slice::from_ref(&fresh)).await.expect("the fresh code alone");
    assert_eq!(mine().await, vec![a, b, fresh], "list after a second batch");
}

async fn revoking_a_code_is_final_and_redeemed_codes_stay(store: &dyn Store) {
    let active = code("tpc_conf_revoke", "hash-conf-revoke", 100, 0);
    store.create_topup_codes(std::slice::from_ref(&active)).await.expect("create");
    let revoked = store.revoke_topup_code(&active.id, 1_700_000_500).await.expect("revoke");
    let want = TopupCode { status: CodeStatus::Revoked, revoked_at: 1_700_000_500, ..active.clone() };
    assert_eq!(revoked, want, "revoke returns the revoked code");
    let again = store.revoke_topup_code(&active.id, 1_700_000_900).await.expect("revoking twice is no error");
    assert_eq!(again, want, "a second revoke changes nothing");
    let listed = store.list_topup_codes().await.expect("list");
    assert_eq!(listed.iter().find(|c| c.id == active.id), Some(&want), "list shows it revoked");
    let error = store.revoke_topup_code("tpc_conf_nothing", 1).await.expect_err("missing");
    assert!(matches!(&error, StoreError::NoCode { id } if id == "tpc_conf_nothing"), "{error:?}");

    store.create(account("conf-revoke-acct", 0)).await.expect("create account");
    let used = code("tpc_conf_revoke_used", "hash-conf-revoke-used", 100, 0);
    store.create_topup_codes(std::slice::from_ref(&used)).await.expect("create");
    let redeemed = store.redeem_topup_code(&used.code_hash, "conf-revoke-acct", 1_700_000_600).await.expect("redeem");
    assert!(matches!(redeemed, Redemption::Credited { .. }), "{redeemed:?}");
    let error = store.revoke_topup_code(&used.id, 1_700_000_700).await.expect_err("revoking a redeemed code");
    assert!(matches!(error, StoreError::Rejected { .. }), "{error:?}");
    let listed = store.list_topup_codes().await.expect("list");
    let stored = listed.iter().find(|c| c.id == used.id).expect("listed");
    assert_eq!((stored.status, stored.revoked_at), (CodeStatus::Redeemed, 0), "a refused revoke changes nothing");
}

async fn redeeming_a_code_credits_the_account_once(store: &dyn Store) {
    store.create(account("conf-redeem-acct", 1_000)).await.expect("create account");
    let active = code("tpc_conf_redeem", "hash-conf-redeem", 500, 1_800_000_000);
    store.create_topup_codes(std::slice::from_ref(&active)).await.expect("create");
    let before = store.revision().await.expect("revision");

    let at = 1_700_000_800;
    let redemption = store.redeem_topup_code(&active.code_hash, "conf-redeem-acct", at).await.expect("redeem");
    let redeemed =
        TopupCode { status: CodeStatus::Redeemed, redeemed_by: "conf-redeem-acct".into(), redeemed_at: at, ..active };
    assert_eq!(redemption, Redemption::Credited { code: redeemed.clone(), balance_micros: 1_500 }, "credited");
    assert_eq!(account_counters(store, "conf-redeem-acct").await.0, 1_500, "the balance rose by the amount");
    let listed = store.list_topup_codes().await.expect("list");
    assert_eq!(listed.iter().find(|c| c.id == redeemed.id), Some(&redeemed), "list shows it redeemed");

    let after = store.revision().await.expect("revision");
    assert_eq!(after, before + 1, "a redemption is one write");
    let changes = store.changes_since(before).await.expect("changes").expect("the feed reaches back");
    let credited = Change { revision: after, kind: Kind::Account, id: "conf-redeem-acct".into() };
    assert_eq!(changes, vec![credited], "the balance change is in the feed");

    let again = store.redeem_topup_code(&redeemed.code_hash, "conf-redeem-acct", at + 1).await.expect("redeem");
    assert_eq!(again, Redemption::Used, "a second redemption");
    store.create(account("conf-redeem-other", 0)).await.expect("create account");
    let other = store.redeem_topup_code(&redeemed.code_hash, "conf-redeem-other", at + 1).await.expect("redeem");
    assert_eq!(other, Redemption::Used, "another account's redemption");
    assert_eq!(account_counters(store, "conf-redeem-acct").await.0, 1_500, "the balance rose once");
    assert_eq!(account_counters(store, "conf-redeem-other").await.0, 0, "the other account got nothing");
}

async fn redemptions_say_why_they_credited_nothing(store: &dyn Store) {
    store.create(account("conf-refuse-acct", 1_000)).await.expect("create account");
    let at = 1_700_001_000;
    let revoked = code("tpc_conf_refuse_revoked", "hash-conf-refuse-revoked", 100, 0);
    let expired = code("tpc_conf_refuse_expired", "hash-conf-refuse-expired", 100, at - 1);
    let ends_now = code("tpc_conf_refuse_ends", "hash-conf-refuse-ends", 100, at);
    let orphan = code("tpc_conf_refuse_orphan", "hash-conf-refuse-orphan", 100, 0);
    let codes = [revoked.clone(), expired.clone(), ends_now.clone(), orphan.clone()];
    store.create_topup_codes(&codes).await.expect("create");
    store.revoke_topup_code(&revoked.id, at - 10).await.expect("revoke");
    let before = store.revision().await.expect("revision");

    let redeem = |hash: String, account: &'static str| async move {
        store.redeem_topup_code(&hash, account, at).await.expect("redeem")
    };
    assert_eq!(redeem(revoked.code_hash, "conf-refuse-acct").await, Redemption::Revoked);
    assert_eq!(redeem(expired.code_hash, "conf-refuse-acct").await, Redemption::Expired);
    assert_eq!(redeem(ends_now.code_hash, "conf-refuse-acct").await, Redemption::Expired, "expiry is exclusive");
    assert_eq!(redeem("hash-conf-refuse-unknown".into(), "conf-refuse-acct").await, Redemption::Unknown);
    assert_eq!(redeem(orphan.code_hash.clone(), "conf-refuse-nobody").await, Redemption::NoAccount);
    assert_eq!(account_counters(store, "conf-refuse-acct").await.0, 1_000, "nothing was credited");
    assert_eq!(store.revision().await.expect("revision"), before, "a refused redemption writes nothing");
    let listed = store.list_topup_codes().await.expect("list");
    let stored = listed.iter().find(|c| c.id == orphan.id).expect("listed");
    assert_eq!(stored, &orphan, "a redemption for a missing account leaves the code active");
    let credited = redeem(orphan.code_hash, "conf-refuse-acct").await;
    assert!(matches!(credited, Redemption::Credited { balance_micros: 1_100, .. }), "{credited:?}");
}

/// `RACERS` tasks redeem one code at once, alternating between `a` and `b`
/// (the same store, or two on one backend): one is credited.
async fn concurrent_redemptions_credit_once(a: Arc<dyn Store>, b: Arc<dyn Store>, prefix: &str) {
    let account_id = format!("{prefix}-acct");
    a.create(account(&account_id, 1_000)).await.expect("create account");
    let hash = format!("hash-{prefix}");
    a.create_topup_codes(&[code(&format!("tpc_{prefix}"), &hash, 250, 0)]).await.expect("create");
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (hash, account_id) = (hash.clone(), account_id.clone());
            tokio::spawn(async move { store.redeem_topup_code(&hash, &account_id, 1_700_002_000).await })
        })
        .collect();
    let (mut credited, mut used) = (0, 0);
    for task in tasks {
        match task.await.expect("task").expect("redeem") {
            Redemption::Credited { balance_micros, .. } => {
                credited += 1;
                assert_eq!(balance_micros, 1_250, "the credited balance");
            }
            Redemption::Used => used += 1,
            other => panic!("a racing redemption gave {other:?}"),
        }
    }
    assert_eq!((credited, used), (1, RACERS - 1), "exactly one of the racing redemptions is credited");
    assert_eq!(account_counters(&*b, &account_id).await.0, 1_250, "the balance rose once");
}
